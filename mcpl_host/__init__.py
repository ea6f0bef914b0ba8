"""mcpl-host: host MCPL (MCP Live) and plain MCP servers.

The public API, re-exported. See README.md for an embedding example.
"""

import importlib
from typing import TYPE_CHECKING, Any

from mcpl_host.client_features import (
    ClientFeatures,
    ElicitationHandler,
    ElicitationRequest,
    ElicitationResult,
    Root,
    Roots,
    RootsProvider,
    SamplingHandler,
    SamplingRequest,
    SamplingResult,
)
from mcpl_host.connection import DEFAULT, ClientInfo, Connection, InboundPort, ProgressCallback, Timeout
from mcpl_host.handlers import HostHandlers, InferenceStream, Notifier, RequestContext
from mcpl_host.handshake import SUPPORTED_PROTOCOL_VERSIONS, ServerInfo
from mcpl_host.hosted import HostedServer, ServerRuntime, TransportFactory, connect
from mcpl_host.jsonrpc.envelope import (
    Invalid,
    Notification,
    Request,
    Response,
    Unrelated,
    classify,
)
from mcpl_host.jsonrpc.errors import (
    ConnectionClosed,
    ConnectionLost,
    ErrorCode,
    HandlerError,
    InitializeError,
    LocalProtocolError,
    MCPLHostError,
    MessageTooLarge,
    MethodNotFound,
    ProtocolError,
    RemoteError,
    RemoteProtocolError,
    RequestEnded,
    RequestTimeout,
    UnreadableAnswer,
)
from mcpl_host.limits import LimitExceeded, Limits
from mcpl_host.logging import Redactor, log_value
from mcpl_host.mcp_methods import (
    CallToolResult,
    CompleteResult,
    GetPromptResult,
    InputRefused,
    MCPClient,
    OutputSchemaError,
    Prompt,
    PromptReference,
    ReadResourceResult,
    Resource,
    ResourceTemplate,
    ResourceTemplateReference,
    SubscriptionRefused,
    Tool,
)
from mcpl_host.mcpl.feature_sets import Derivation, DisabledReason, FeatureSetDeclarations, FeatureSetPolicy
from mcpl_host.mcpl.grants import Grant, GrantPolicy
from mcpl_host.mcpl.injections import BeforeInferenceResult, DroppedInjection, Injection, Position
from mcpl_host.mcpl.manifest_diff import ChangeReceipt, Impact
from mcpl_host.mcpl.policy import PolicyOutcome
from mcpl_host.mcpl.policy_state import MCPLState, PolicyState, RefusalAction
from mcpl_host.mcpl.state import FeatureSetStateStore, StateEntry, StateStore
from mcpl_host.observe import ConnectionObserver
from mcpl_host.server_connection import ServerConnection
from mcpl_host.services.channel_calls import ChannelOpenResult, NotGranted, PublishMode, PublishResult
from mcpl_host.services.negotiation import PolicyChange
from mcpl_host.services.state_calls import RollbackResult
from mcpl_host.stateless import (
    STATELESS_PROTOCOL_VERSIONS,
    Era,
    ProtocolChoice,
)

if TYPE_CHECKING:
    from mcpl_host.config import (
        ConfigError,
        HostConfig,
        ServerConfig,
        default_server_name,
        load_config,
        parse_config,
    )
    from mcpl_host.events import (
        EVENT_KINDS,
        LIFECYCLE_KINDS,
        ChannelsChanged,
        Connecting,
        Degraded,
        Disconnected,
        EventKind,
        GaveUp,
        HeldMessage,
        HostEvent,
        ManifestChange,
        PolicyReceipt,
        PushEvent,
        Ready,
        Reconnecting,
        Refusal,
        ServerNotification,
        ServerRequest,
        Stalled,
        Subscription,
        event_json,
    )
    from mcpl_host.host import (
        Host,
        PushDelivery,
        ServerHandle,
        ServerNotConnected,
        ServerRequestResponder,
        ServerSnapshot,
        UnknownServer,
    )
    from mcpl_host.services.turns import (
        FanoutResult,
        InferenceLifecycle,
        MCPLPeer,
        OutgoingStream,
        before_inference_fanout,
        inference_lifecycle,
    )
    from mcpl_host.signals import (
        SHUTDOWN_SIGNALS,
        StopRouter,
        close_on_signals,
    )
    from mcpl_host.supervisor import (
        EventSink,
        Supervisor,
        SupervisorState,
    )
    from mcpl_host.supervisor_policy import (
        RestartPolicy,
    )

# The host layer (Host, supervision, events, signals, turns across servers) and the config
# (ServerConfig, the config file) are imported on first use: importing the package loads
# neither, and an application that only connects to servers never loads the host layer.
# Everything else is imported with the package.
_LAZY: dict[str, str] = {
    "ConfigError": "mcpl_host.config",
    "HostConfig": "mcpl_host.config",
    "ServerConfig": "mcpl_host.config",
    "default_server_name": "mcpl_host.config",
    "load_config": "mcpl_host.config",
    "parse_config": "mcpl_host.config",
    "EVENT_KINDS": "mcpl_host.events",
    "LIFECYCLE_KINDS": "mcpl_host.events",
    "ChannelsChanged": "mcpl_host.events",
    "Connecting": "mcpl_host.events",
    "Degraded": "mcpl_host.events",
    "Disconnected": "mcpl_host.events",
    "EventKind": "mcpl_host.events",
    "GaveUp": "mcpl_host.events",
    "HeldMessage": "mcpl_host.events",
    "HostEvent": "mcpl_host.events",
    "ManifestChange": "mcpl_host.events",
    "PolicyReceipt": "mcpl_host.events",
    "PushEvent": "mcpl_host.events",
    "Ready": "mcpl_host.events",
    "Reconnecting": "mcpl_host.events",
    "Refusal": "mcpl_host.events",
    "ServerNotification": "mcpl_host.events",
    "ServerRequest": "mcpl_host.events",
    "Stalled": "mcpl_host.events",
    "event_json": "mcpl_host.events",
    "Subscription": "mcpl_host.events",
    "Host": "mcpl_host.host",
    "PushDelivery": "mcpl_host.host",
    "ServerHandle": "mcpl_host.host",
    "ServerNotConnected": "mcpl_host.host",
    "ServerRequestResponder": "mcpl_host.host",
    "ServerSnapshot": "mcpl_host.host",
    "UnknownServer": "mcpl_host.host",
    "FanoutResult": "mcpl_host.services.turns",
    "InferenceLifecycle": "mcpl_host.services.turns",
    "MCPLPeer": "mcpl_host.services.turns",
    "OutgoingStream": "mcpl_host.services.turns",
    "before_inference_fanout": "mcpl_host.services.turns",
    "inference_lifecycle": "mcpl_host.services.turns",
    "SHUTDOWN_SIGNALS": "mcpl_host.signals",
    "StopRouter": "mcpl_host.signals",
    "close_on_signals": "mcpl_host.signals",
    "EventSink": "mcpl_host.supervisor",
    "Supervisor": "mcpl_host.supervisor",
    "SupervisorState": "mcpl_host.supervisor",
    "RestartPolicy": "mcpl_host.supervisor_policy",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__version__ = "0.1.0"

__all__ = [
    "ChannelsChanged",
    "Connecting",
    "Degraded",
    "Disconnected",
    "GaveUp",
    "HeldMessage",
    "ManifestChange",
    "PolicyReceipt",
    "PushEvent",
    "Ready",
    "Reconnecting",
    "Refusal",
    "ServerNotification",
    "ServerRequest",
    "Stalled",
    "event_json",
    "DEFAULT",
    "EVENT_KINDS",
    "LIFECYCLE_KINDS",
    "SHUTDOWN_SIGNALS",
    "STATELESS_PROTOCOL_VERSIONS",
    "SUPPORTED_PROTOCOL_VERSIONS",
    "BeforeInferenceResult",
    "CallToolResult",
    "ChangeReceipt",
    "ChannelOpenResult",
    "ClientFeatures",
    "ClientInfo",
    "CompleteResult",
    "ConfigError",
    "Connection",
    "ConnectionClosed",
    "ConnectionLost",
    "ConnectionObserver",
    "Derivation",
    "DisabledReason",
    "DroppedInjection",
    "ElicitationHandler",
    "ElicitationRequest",
    "ElicitationResult",
    "Era",
    "ErrorCode",
    "EventKind",
    "EventSink",
    "FanoutResult",
    "FeatureSetDeclarations",
    "FeatureSetPolicy",
    "FeatureSetStateStore",
    "GetPromptResult",
    "Grant",
    "GrantPolicy",
    "HandlerError",
    "Host",
    "HostConfig",
    "HostEvent",
    "HostHandlers",
    "HostedServer",
    "Impact",
    "InboundPort",
    "InferenceLifecycle",
    "InferenceStream",
    "InitializeError",
    "Injection",
    "InputRefused",
    "Invalid",
    "LimitExceeded",
    "Limits",
    "LocalProtocolError",
    "MCPClient",
    "MCPLHostError",
    "MCPLPeer",
    "MCPLState",
    "MessageTooLarge",
    "MethodNotFound",
    "NotGranted",
    "Notification",
    "Notifier",
    "OutgoingStream",
    "OutputSchemaError",
    "PolicyChange",
    "PolicyOutcome",
    "PolicyState",
    "Position",
    "ProgressCallback",
    "Prompt",
    "PromptReference",
    "ProtocolChoice",
    "ProtocolError",
    "PublishMode",
    "PublishResult",
    "PushDelivery",
    "ReadResourceResult",
    "Redactor",
    "RefusalAction",
    "RemoteError",
    "RemoteProtocolError",
    "Request",
    "RequestContext",
    "RequestEnded",
    "RequestTimeout",
    "Resource",
    "ResourceTemplate",
    "ResourceTemplateReference",
    "SubscriptionRefused",
    "Response",
    "RestartPolicy",
    "RollbackResult",
    "Root",
    "Roots",
    "RootsProvider",
    "SamplingHandler",
    "SamplingRequest",
    "SamplingResult",
    "ServerConfig",
    "ServerRuntime",
    "ServerConnection",
    "ServerInfo",
    "ServerHandle",
    "ServerNotConnected",
    "ServerRequestResponder",
    "ServerSnapshot",
    "StateEntry",
    "StateStore",
    "StopRouter",
    "Subscription",
    "Supervisor",
    "SupervisorState",
    "Timeout",
    "Tool",
    "TransportFactory",
    "UnknownServer",
    "UnreadableAnswer",
    "Unrelated",
    "before_inference_fanout",
    "classify",
    "close_on_signals",
    "connect",
    "default_server_name",
    "inference_lifecycle",
    "load_config",
    "log_value",
    "parse_config",
]

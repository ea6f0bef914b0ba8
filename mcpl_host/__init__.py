"""mcpl-host: host MCPL (MCP Live) and plain MCP servers.

The public API: what an application needs to connect to servers, call them, serve what they
ask and host many of them (docs/library.md). Everything else is reachable in its
submodule: the typed events in ``mcpl_host.events``, the client features (roots, sampling,
elicitation) in ``mcpl_host.client_features``, the MCP records in ``mcpl_host.mcp_records``,
the MCPL rules in ``mcpl_host.mcpl``, every error in ``mcpl_host.jsonrpc.errors``
(docs/architecture.md, "Layers").
"""

import importlib
from typing import TYPE_CHECKING, Any

from mcpl_host.connection import ClientInfo
from mcpl_host.handlers import HostHandlers, RequestContext
from mcpl_host.hosted import HostedServer, connect
from mcpl_host.jsonrpc.errors import (
    ConnectionClosed,
    ConnectionLost,
    ErrorCode,
    HandlerError,
    InitializeError,
    MCPLHostError,
    MCPLRequired,
    RemoteError,
    RequestTimeout,
)
from mcpl_host.limits import LimitExceeded, Limits
from mcpl_host.mcp_methods import CallToolResult, GetPromptResult, Prompt, ReadResourceResult, Resource, Tool
from mcpl_host.mcpl.feature_sets import FeatureSetPolicy
from mcpl_host.mcpl.grants import Grant, GrantPolicy
from mcpl_host.mcpl.injections import BeforeInferenceResult, Injection
from mcpl_host.mcpl.policy_state import MCPLState
from mcpl_host.mcpl.wake import WakePolicy
from mcpl_host.recording import Recorder
from mcpl_host.server_connection import ServerConnection
from mcpl_host.services.coalescing import Conversation, EventInbox
from mcpl_host.services.negotiation import PolicyChange

if TYPE_CHECKING:
    from mcpl_host.config import ConfigError, HostConfig, ServerConfig, load_config, parse_config
    from mcpl_host.events import HostEvent, Subscription
    from mcpl_host.host import Host, ServerHandle, ServerNotConnected, UnknownServer
    from mcpl_host.signals import close_on_signals

# The host layer (Host, its config file, events, signals) is imported on first use: an
# application that only connects to servers does not load it.
_LAZY: dict[str, str] = {
    "ConfigError": "mcpl_host.config",
    "HostConfig": "mcpl_host.config",
    "ServerConfig": "mcpl_host.config",
    "load_config": "mcpl_host.config",
    "parse_config": "mcpl_host.config",
    "HostEvent": "mcpl_host.events",
    "Subscription": "mcpl_host.events",
    "Host": "mcpl_host.host",
    "ServerHandle": "mcpl_host.host",
    "ServerNotConnected": "mcpl_host.host",
    "UnknownServer": "mcpl_host.host",
    "close_on_signals": "mcpl_host.signals",
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
    "BeforeInferenceResult",
    "CallToolResult",
    "ClientInfo",
    "ConfigError",
    "ConnectionClosed",
    "ConnectionLost",
    "Conversation",
    "ErrorCode",
    "EventInbox",
    "FeatureSetPolicy",
    "GetPromptResult",
    "Grant",
    "GrantPolicy",
    "HandlerError",
    "Host",
    "HostConfig",
    "HostEvent",
    "HostHandlers",
    "HostedServer",
    "InitializeError",
    "Injection",
    "LimitExceeded",
    "Limits",
    "MCPLHostError",
    "MCPLRequired",
    "MCPLState",
    "PolicyChange",
    "Prompt",
    "ReadResourceResult",
    "Recorder",
    "RemoteError",
    "RequestContext",
    "RequestTimeout",
    "Resource",
    "ServerConfig",
    "ServerConnection",
    "ServerHandle",
    "ServerNotConnected",
    "Subscription",
    "Tool",
    "UnknownServer",
    "WakePolicy",
    "close_on_signals",
    "connect",
    "load_config",
    "parse_config",
]

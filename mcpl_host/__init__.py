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

if TYPE_CHECKING:
    from mcpl_host.config import ConfigError, ServerConfig
    from mcpl_host.config_file import HostConfig, load_config, parse_config
    from mcpl_host.connection import ClientInfo
    from mcpl_host.events import HostEvent, Subscription
    from mcpl_host.handlers import HostHandlers, RequestContext
    from mcpl_host.host import Host, ServerHandle, ServerNotConnected, UnknownServer
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
    from mcpl_host.mcp_methods import (
        CallToolResult,
        GetPromptResult,
        Prompt,
        ReadResourceResult,
        Resource,
        Tool,
    )
    from mcpl_host.mcpl.feature_sets import FeatureSetPolicy
    from mcpl_host.mcpl.grants import Grant, GrantPolicy
    from mcpl_host.mcpl.injections import BeforeInferenceResult, Injection
    from mcpl_host.mcpl.policy_state import MCPLState
    from mcpl_host.mcpl.wake import WakePolicy
    from mcpl_host.recording import Recorder
    from mcpl_host.server_connection import ServerConnection
    from mcpl_host.services.coalescing import Conversation, EventInbox
    from mcpl_host.services.negotiation import PolicyChange
    from mcpl_host.signals import close_on_signals

# Every public name is imported on first use (PEP 562): ``import mcpl_host`` loads nothing
# but this module, so a submodule (``mcpl_host.limits``, ``mcpl_host.cli``) costs only what
# it imports itself, and ``from mcpl_host import connect`` only the connection's layers,
# never the host layer (Host, its config file, events, signals) until that is used.
_LAZY: dict[str, str] = {
    "BeforeInferenceResult": "mcpl_host.mcpl.injections",
    "CallToolResult": "mcpl_host.mcp_methods",
    "ClientInfo": "mcpl_host.connection",
    "ConfigError": "mcpl_host.config",
    "ConnectionClosed": "mcpl_host.jsonrpc.errors",
    "ConnectionLost": "mcpl_host.jsonrpc.errors",
    "Conversation": "mcpl_host.services.coalescing",
    "ErrorCode": "mcpl_host.jsonrpc.errors",
    "EventInbox": "mcpl_host.services.coalescing",
    "FeatureSetPolicy": "mcpl_host.mcpl.feature_sets",
    "GetPromptResult": "mcpl_host.mcp_methods",
    "Grant": "mcpl_host.mcpl.grants",
    "GrantPolicy": "mcpl_host.mcpl.grants",
    "HandlerError": "mcpl_host.jsonrpc.errors",
    "Host": "mcpl_host.host",
    "HostConfig": "mcpl_host.config_file",
    "HostEvent": "mcpl_host.events",
    "HostHandlers": "mcpl_host.handlers",
    "HostedServer": "mcpl_host.hosted",
    "InitializeError": "mcpl_host.jsonrpc.errors",
    "Injection": "mcpl_host.mcpl.injections",
    "LimitExceeded": "mcpl_host.limits",
    "Limits": "mcpl_host.limits",
    "MCPLHostError": "mcpl_host.jsonrpc.errors",
    "MCPLRequired": "mcpl_host.jsonrpc.errors",
    "MCPLState": "mcpl_host.mcpl.policy_state",
    "PolicyChange": "mcpl_host.services.negotiation",
    "Prompt": "mcpl_host.mcp_methods",
    "ReadResourceResult": "mcpl_host.mcp_methods",
    "Recorder": "mcpl_host.recording",
    "RemoteError": "mcpl_host.jsonrpc.errors",
    "RequestContext": "mcpl_host.handlers",
    "RequestTimeout": "mcpl_host.jsonrpc.errors",
    "Resource": "mcpl_host.mcp_methods",
    "ServerConfig": "mcpl_host.config",
    "ServerConnection": "mcpl_host.server_connection",
    "ServerHandle": "mcpl_host.host",
    "ServerNotConnected": "mcpl_host.host",
    "Subscription": "mcpl_host.events",
    "Tool": "mcpl_host.mcp_methods",
    "UnknownServer": "mcpl_host.host",
    "WakePolicy": "mcpl_host.mcpl.wake",
    "close_on_signals": "mcpl_host.signals",
    "connect": "mcpl_host.hosted",
    "load_config": "mcpl_host.config_file",
    "parse_config": "mcpl_host.config_file",
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

"""mcpl-host: host MCPL (MCP Live) and plain MCP servers.

The public API, re-exported. See README.md for an embedding example.
"""

from mcpl_host.connect import connect_stdio, connect_websocket
from mcpl_host.connection import MCPLState, ServerConnection
from mcpl_host.handlers import HostHandlers, RequestContext
from mcpl_host.handshake import SUPPORTED_PROTOCOL_VERSIONS, ServerInfo
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
    MethodNotFound,
    ProtocolError,
    RemoteError,
    RemoteProtocolError,
    RequestTimeout,
)
from mcpl_host.limits import Limits
from mcpl_host.logging import Redactor, log_value
from mcpl_host.mcp_methods import (
    CallToolResult,
    GetPromptResult,
    Prompt,
    ReadResourceResult,
    Resource,
    ResourceTemplate,
    Tool,
)
from mcpl_host.mcpl.grants import Grant, GrantPolicy

__version__ = "0.1.0"

__all__ = [
    "SUPPORTED_PROTOCOL_VERSIONS",
    "CallToolResult",
    "ConnectionClosed",
    "ConnectionLost",
    "ErrorCode",
    "GetPromptResult",
    "Grant",
    "GrantPolicy",
    "HandlerError",
    "HostHandlers",
    "InitializeError",
    "Invalid",
    "Limits",
    "LocalProtocolError",
    "MCPLHostError",
    "MCPLState",
    "MethodNotFound",
    "Notification",
    "Prompt",
    "ProtocolError",
    "ReadResourceResult",
    "Redactor",
    "RemoteError",
    "RemoteProtocolError",
    "Request",
    "RequestContext",
    "RequestTimeout",
    "Resource",
    "ResourceTemplate",
    "Response",
    "ServerConnection",
    "ServerInfo",
    "Tool",
    "Unrelated",
    "classify",
    "connect_stdio",
    "connect_websocket",
    "log_value",
]

# Supervision and hosting many servers (supervisor.py, host.py).
from mcpl_host.config import ConfigError, HostConfig, ServerConfig, load_config  # noqa: E402
from mcpl_host.host import (  # noqa: E402
    Host,
    ServerNotConnected,
    ServerRequestResponder,
    UnknownServer,
    connect_from_config,
)
from mcpl_host.signals import SHUTDOWN_SIGNALS, StopRouter, close_on_signals  # noqa: E402
from mcpl_host.supervisor import EVENT_KINDS, HostEvent, Supervisor  # noqa: E402
from mcpl_host.supervisor_policy import RestartPolicy  # noqa: E402

__all__ += [
    "EVENT_KINDS",
    "SHUTDOWN_SIGNALS",
    "StopRouter",
    "close_on_signals",
    "ConfigError",
    "Host",
    "HostConfig",
    "HostEvent",
    "RestartPolicy",
    "ServerConfig",
    "ServerNotConnected",
    "ServerRequestResponder",
    "Supervisor",
    "UnknownServer",
    "connect_from_config",
    "load_config",
]

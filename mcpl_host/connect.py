"""Building servers: ``stdio_server()``, ``websocket_server()`` and ``http_server()`` give a
``HostedServer``; ``connect_stdio()``, ``connect_websocket()`` and ``connect_http()`` give one
``ServerConnection`` of a new one."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal, cast

from mcpl_host.connection import DEFAULT, ClientInfo, Timeout
from mcpl_host.handlers import HostHandlers
from mcpl_host.hosted import HostedServer
from mcpl_host.limits import Limits
from mcpl_host.logging import get_logger
from mcpl_host.mcpl.compat import CompatSetting
from mcpl_host.mcpl.feature_sets import FeatureSetPolicy
from mcpl_host.mcpl.grants import GrantPolicy
from mcpl_host.mcpl.policy_state import RefusalAction
from mcpl_host.mcpl.state import StateStore
from mcpl_host.observe import ConnectionObserver
from mcpl_host.secrets import Redactor, redact_command, server_secrets
from mcpl_host.server_connection import ServerConnection
from mcpl_host.stateless import ProtocolChoice
from mcpl_host.transports.http_params import HTTPParameters, HTTPTransportKind, shown_http_url
from mcpl_host.transports.stdio import StdioParameters, StdioTransport
from mcpl_host.transports.ws_params import (
    WebSocketParameters,
    shown_url,
)

if TYPE_CHECKING:
    import ssl

    from mcpl_host.transports.http import StreamableHTTPTransport
    from mcpl_host.transports.http_sse import AutoHTTPTransport, SSETransport
    from mcpl_host.transports.websocket import WebSocketTransport

# The WebSocket and HTTP transports (wsproto, h11, httpx) are imported by the first server
# that uses them, not with the package: a stdio-only application never loads them.

__all__ = [
    "connect_http",
    "connect_stdio",
    "connect_websocket",
    "default_server_name",
    "http_server",
    "stdio_server",
    "websocket_server",
]


#: Interpreters whose first argument that is not an option is the script that is the server.
_INTERPRETERS = ("python", "node", "nodejs", "deno", "bun", "ruby", "perl", "php", "tsx", "ts-node")
#: Subcommands an interpreter or runner takes before the script (``deno run main.ts``).
_SUBCOMMANDS = frozenset({"run", "exec", "x"})
#: Runners whose first argument that is not an option is a package.
_RUNNERS = frozenset({"npx", "uvx", "pipx", "bunx", "pnpx"})
#: Script names that say nothing about the server: its folder names it instead.
_GENERIC_SCRIPTS = frozenset({"index", "main", "server", "cli", "app", "run", "start", "__main__", "mod"})
#: Folders that say nothing about the server either (``dist/index.js``).
_GENERIC_FOLDERS = frozenset({"dist", "build", "lib", "src", "bin", "out", "build-output", "esm", "cjs", ""})


def _script_name(path: str) -> str:
    """``/x/server-everything/dist/index.js`` -> ``server-everything``; ``tools/weather.py`` ->
    ``weather``."""
    parts = path.replace("\\", "/").split("/")
    stem = os.path.splitext(parts[-1])[0]
    if stem not in _GENERIC_SCRIPTS:
        return stem
    for folder in reversed(parts[:-1]):
        if folder not in _GENERIC_FOLDERS and folder not in (".", ".."):
            return folder
    return stem


def default_server_name(command: str, args: Sequence[str] = ()) -> str:
    """A readable name for logs, by the script or package that is the server:
    ``python -m mcp_server_time`` → ``mcp_server_time``, ``python demo_server.py`` →
    ``demo_server``, ``node /x/server-everything/dist/index.js`` → ``server-everything``,
    ``npx -y pkg`` → ``pkg``, ``deno run -A main.ts`` → its folder; else the command.
    (After the handshake, reports name a server by its ``serverInfo.name``.)"""
    base = os.path.basename(command)
    rest = [arg for arg in args if not arg.startswith("-")]
    if base.startswith(_INTERPRETERS) and args:
        if base.startswith("python") and args[0] == "-m" and len(args) > 1:
            return args[1]
        if rest and rest[0] in _SUBCOMMANDS and base.startswith(("deno", "bun")):
            rest = rest[1:]
        if rest:
            return _script_name(rest[0])
    if base in _RUNNERS and rest:
        return rest[0]
    if base in ("uv", "poetry", "pipenv") and len(rest) > 1 and rest[0] == "run":
        return _script_name(rest[1])
    return base


def stdio_server(
    command: str,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    inherit_env: bool = False,
    name: str | None = None,
    handlers: HostHandlers | None = None,
    observer: ConnectionObserver | None = None,
    policy: GrantPolicy | None = None,
    feature_set_policy: FeatureSetPolicy | None = None,
    on_refusal: RefusalAction = "follow",
    compat: CompatSetting = "auto",
    limits: Limits | None = None,
    secrets: Iterable[str] = (),
    stderr_log_level: str = "debug",
    keep_tree: bool = True,
    client_info: ClientInfo | None = None,
    state_store: StateStore | None = None,
    protocol: ProtocolChoice = "auto",
) -> HostedServer:
    """A ``HostedServer`` whose every transport spawns ``command args`` and speaks MCP/MCPL
    over its stdio (MCP 2025-11-25 "Transports", stdio).

    Nothing starts until a connection is entered. ``env`` is added to a minimal environment
    (``inherit_env=True``: to the whole environment). Its secrets (the values of secret
    names, credentials in ``args``: ``mcpl_host.secrets.server_secrets``) and ``secrets`` are
    redacted from every log line and error about this server (docs/protocol.md L2).
    ``policy`` defaults to granting nothing (MCPL §5.4). ``keep_tree`` (Linux): on close,
    stop every descendant of the server, not only its process group
    (``transports.process_tree``). ``protocol``: the era to speak (``"auto"``: probe with
    ``server/discover``, fall back to ``initialize``; see ``HostedServer``). See
    ``HostedServer`` for the rest.
    """
    limits = limits or Limits()
    redactor = Redactor(server_secrets(env=env, args=[command, *args], explicit=secrets))
    parameters = StdioParameters(
        command=command,
        args=tuple(args),
        env=dict(env) if env else None,
        cwd=cwd,
        inherit_env=inherit_env,
        keep_tree=keep_tree,
    )
    server_name = name or redactor.redact(default_server_name(command, args))
    logger = get_logger("mcpl_host.stdio", server=server_name)

    def factory() -> StdioTransport:
        return StdioTransport(
            parameters, limits=limits, redactor=redactor, logger=logger, stderr_log_level=stderr_log_level
        )

    return HostedServer(
        server_name,
        factory,
        handlers=handlers,
        observer=observer,
        policy=policy,
        feature_set_policy=feature_set_policy,
        on_refusal=on_refusal,
        compat=compat,
        limits=limits,
        redactor=redactor,
        client_info=client_info,
        state_store=state_store,
        protocol=protocol,
        describe=" ".join(redact_command([command, *args], redactor)),
    )


def connect_stdio(
    command: str,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    inherit_env: bool = False,
    name: str | None = None,
    handlers: HostHandlers | None = None,
    observer: ConnectionObserver | None = None,
    policy: GrantPolicy | None = None,
    feature_set_policy: FeatureSetPolicy | None = None,
    on_refusal: RefusalAction = "follow",
    compat: CompatSetting = "auto",
    limits: Limits | None = None,
    secrets: Iterable[str] = (),
    stderr_log_level: str = "debug",
    keep_tree: bool = True,
    client_info: ClientInfo | None = None,
    state_store: StateStore | None = None,
    protocol: ProtocolChoice = "auto",
) -> ServerConnection:
    """One ``ServerConnection`` of a new ``stdio_server(...)`` (same arguments): entering it
    spawns the server and runs the handshake. See ``ServerConnection`` for errors."""
    return stdio_server(
        command,
        args,
        env=env,
        cwd=cwd,
        inherit_env=inherit_env,
        name=name,
        handlers=handlers,
        observer=observer,
        policy=policy,
        feature_set_policy=feature_set_policy,
        on_refusal=on_refusal,
        compat=compat,
        limits=limits,
        secrets=secrets,
        stderr_log_level=stderr_log_level,
        keep_tree=keep_tree,
        client_info=client_info,
        state_store=state_store,
        protocol=protocol,
    ).open_connection()


def websocket_server(
    url: str,
    *,
    token: str | None = None,
    token_in: Literal["query", "header"] = "header",
    headers: Mapping[str, str] | None = None,
    name: str | None = None,
    handlers: HostHandlers | None = None,
    observer: ConnectionObserver | None = None,
    policy: GrantPolicy | None = None,
    feature_set_policy: FeatureSetPolicy | None = None,
    on_refusal: RefusalAction = "follow",
    compat: CompatSetting = "auto",
    limits: Limits | None = None,
    secrets: Iterable[str] = (),
    open_timeout_seconds: float | None = None,
    keepalive_interval_seconds: Timeout = DEFAULT,
    keepalive_timeout_seconds: float | None = None,
    ssl_context: ssl.SSLContext | None = None,
    client_info: ClientInfo | None = None,
    state_store: StateStore | None = None,
    protocol: ProtocolChoice = "auto",
) -> HostedServer:
    """A ``HostedServer`` whose every transport dials ``url`` (``ws://`` or ``wss://``) and
    speaks MCP/MCPL over a WebSocket, one JSON-RPC message per text frame (RFC 6455;
    docs/protocol.md, "WebSocket").

    Nothing is dialled until a connection is entered. ``token`` is sent as the query
    parameter ``token`` (``token_in="query"``) or as ``Authorization: Bearer``
    (``token_in="header"``). The token, every ``headers`` value, any ``token`` in ``url`` and
    ``secrets`` are redacted from every log line and error about this server, and the URL
    shown never carries them. ``limits.max_line_bytes`` bounds one incoming message.
    ``open_timeout_seconds``, ``keepalive_interval_seconds`` (None: no pings) and
    ``keepalive_timeout_seconds`` default to ``limits.websocket_*``.
    ``ssl_context`` verifies a ``wss://`` server (default: the system's CAs). ``policy``
    defaults to granting nothing (MCPL §5.4). The transport's errors surface on entry as
    ``InitializeError``.

    Raises:
        ValueError: an unusable URL, token, header or timeout (no secret in the message).
    """
    limits = limits or Limits()
    interval = keepalive_interval_seconds
    parameters = WebSocketParameters(
        url=url,
        token=token,
        token_in=token_in,
        headers=dict(headers or {}),
        # The opening is a step of the handshake: under its deadline too (docs/protocol.md H7).
        open_timeout_seconds=(
            min(limits.websocket_open_timeout_seconds, limits.handshake_timeout_seconds)
            if open_timeout_seconds is None
            else open_timeout_seconds
        ),
        keepalive_interval_seconds=(
            limits.websocket_keepalive_interval_seconds
            if interval is DEFAULT
            else cast("float | None", interval)
        ),
        keepalive_timeout_seconds=(
            limits.websocket_keepalive_timeout_seconds
            if keepalive_timeout_seconds is None
            else keepalive_timeout_seconds
        ),
        ssl_context=ssl_context,
    )
    redactor = Redactor([*parameters.secrets(), *secrets])
    shown = shown_url(url, redactor)
    server_name = name or shown
    logger = get_logger("mcpl_host.websocket", server=server_name)

    from mcpl_host.transports.websocket import WebSocketTransport

    def factory() -> WebSocketTransport:
        return WebSocketTransport(parameters, limits=limits, redactor=redactor, logger=logger)

    return HostedServer(
        server_name,
        factory,
        handlers=handlers,
        observer=observer,
        policy=policy,
        feature_set_policy=feature_set_policy,
        on_refusal=on_refusal,
        compat=compat,
        limits=limits,
        redactor=redactor,
        client_info=client_info,
        state_store=state_store,
        protocol=protocol,
        describe=shown,
    )


def connect_websocket(
    url: str,
    *,
    token: str | None = None,
    token_in: Literal["query", "header"] = "header",
    headers: Mapping[str, str] | None = None,
    name: str | None = None,
    handlers: HostHandlers | None = None,
    observer: ConnectionObserver | None = None,
    policy: GrantPolicy | None = None,
    feature_set_policy: FeatureSetPolicy | None = None,
    on_refusal: RefusalAction = "follow",
    compat: CompatSetting = "auto",
    limits: Limits | None = None,
    secrets: Iterable[str] = (),
    open_timeout_seconds: float | None = None,
    keepalive_interval_seconds: Timeout = DEFAULT,
    keepalive_timeout_seconds: float | None = None,
    ssl_context: ssl.SSLContext | None = None,
    client_info: ClientInfo | None = None,
    state_store: StateStore | None = None,
    protocol: ProtocolChoice = "auto",
) -> ServerConnection:
    """One ``ServerConnection`` of a new ``websocket_server(...)`` (same arguments).

    Raises:
        ValueError: an unusable URL, token, header or timeout (no secret in the message).
    """
    return websocket_server(
        url,
        token=token,
        token_in=token_in,
        headers=headers,
        name=name,
        handlers=handlers,
        observer=observer,
        policy=policy,
        feature_set_policy=feature_set_policy,
        on_refusal=on_refusal,
        compat=compat,
        limits=limits,
        secrets=secrets,
        open_timeout_seconds=open_timeout_seconds,
        keepalive_interval_seconds=keepalive_interval_seconds,
        keepalive_timeout_seconds=keepalive_timeout_seconds,
        ssl_context=ssl_context,
        client_info=client_info,
        state_store=state_store,
        protocol=protocol,
    ).open_connection()


def http_server(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    token: str | None = None,
    transport: HTTPTransportKind = "auto",
    name: str | None = None,
    handlers: HostHandlers | None = None,
    observer: ConnectionObserver | None = None,
    policy: GrantPolicy | None = None,
    feature_set_policy: FeatureSetPolicy | None = None,
    on_refusal: RefusalAction = "follow",
    compat: CompatSetting = "auto",
    limits: Limits | None = None,
    secrets: Iterable[str] = (),
    ssl_context: ssl.SSLContext | None = None,
    client_info: ClientInfo | None = None,
    state_store: StateStore | None = None,
    protocol: ProtocolChoice = "auto",
) -> HostedServer:
    """A ``HostedServer`` for the MCP server at ``url`` (``http://`` or ``https://``).

    ``transport``: ``"streamable-http"`` (MCP 2025-11-25 "Transports", Streamable HTTP),
    ``"sse"`` (the HTTP+SSE transport of MCP 2024-11-05; ``url`` is its event stream, often
    ``.../sse``), or ``"auto"`` (default: Streamable HTTP, then HTTP+SSE at the same URL when
    the ``initialize`` POST is answered 400, 404 or 405). Nothing is sent until a connection
    is entered. ``token`` is sent as ``Authorization: Bearer`` and ``headers`` on every
    request; they, every credential in ``url`` and ``secrets`` are redacted from every log
    line and error about this server, and the URL shown never carries them. Redirects are
    not followed; OAuth is not implemented (a 401 with ``WWW-Authenticate`` says so). The
    bounds and timeouts are ``limits``' (``max_line_bytes`` per message,
    ``max_sse_event_bytes``, ``http_*``, ``sse_*``). ``policy`` defaults to granting nothing
    (MCPL §5.4). The transports' errors surface on entry as ``InitializeError``.

    Raises:
        ValueError: an unusable URL, token, header or transport (no secret in the message).
    """
    if transport not in ("streamable-http", "sse", "auto"):
        raise ValueError(f"transport must be 'streamable-http', 'sse' or 'auto', not {transport!r}")
    limits = limits or Limits()
    parameters = HTTPParameters(url=url, token=token, headers=dict(headers or {}), ssl_context=ssl_context)
    redactor = Redactor([*parameters.secrets(), *secrets])
    shown = shown_http_url(url, redactor)
    server_name = name or shown
    logger = get_logger("mcpl_host.http", server=server_name)

    from mcpl_host.transports.http import StreamableHTTPTransport
    from mcpl_host.transports.http_sse import AutoHTTPTransport, SSETransport

    def factory() -> StreamableHTTPTransport | SSETransport | AutoHTTPTransport:
        if transport == "streamable-http":
            return StreamableHTTPTransport(parameters, limits=limits, redactor=redactor, logger=logger)
        if transport == "sse":
            return SSETransport(parameters, limits=limits, redactor=redactor, logger=logger)
        return AutoHTTPTransport(parameters, limits=limits, redactor=redactor, logger=logger)

    return HostedServer(
        server_name,
        factory,
        handlers=handlers,
        observer=observer,
        policy=policy,
        feature_set_policy=feature_set_policy,
        on_refusal=on_refusal,
        compat=compat,
        limits=limits,
        redactor=redactor,
        client_info=client_info,
        state_store=state_store,
        protocol=protocol,
        describe=shown,
    )


def connect_http(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    token: str | None = None,
    transport: HTTPTransportKind = "auto",
    name: str | None = None,
    handlers: HostHandlers | None = None,
    observer: ConnectionObserver | None = None,
    policy: GrantPolicy | None = None,
    feature_set_policy: FeatureSetPolicy | None = None,
    on_refusal: RefusalAction = "follow",
    compat: CompatSetting = "auto",
    limits: Limits | None = None,
    secrets: Iterable[str] = (),
    ssl_context: ssl.SSLContext | None = None,
    client_info: ClientInfo | None = None,
    state_store: StateStore | None = None,
    protocol: ProtocolChoice = "auto",
) -> ServerConnection:
    """One ``ServerConnection`` of a new ``http_server(...)`` (same arguments).

    Raises:
        ValueError: an unusable URL, token, header or transport (no secret in the message).
    """
    return http_server(
        url,
        headers=headers,
        token=token,
        transport=transport,
        name=name,
        handlers=handlers,
        observer=observer,
        policy=policy,
        feature_set_policy=feature_set_policy,
        on_refusal=on_refusal,
        compat=compat,
        limits=limits,
        secrets=secrets,
        ssl_context=ssl_context,
        client_info=client_info,
        state_store=state_store,
        protocol=protocol,
    ).open_connection()

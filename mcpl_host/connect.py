"""``connect_stdio()``, ``connect_websocket()``, ``connect_http()``: a ``ServerConnection``
to a child process over stdio, or to a server over WebSocket or HTTP."""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from mcpl_host.connection import ServerConnection
from mcpl_host.handlers import HostHandlers
from mcpl_host.limits import Limits
from mcpl_host.logging import Redactor, get_logger
from mcpl_host.mcpl.feature_sets import FeatureSetPolicy
from mcpl_host.mcpl.grants import GrantPolicy
from mcpl_host.mcpl.negotiation import RefusalAction
from mcpl_host.transports.http import StreamableHTTPTransport
from mcpl_host.transports.http_params import HTTPParameters, HTTPTransportKind, shown_http_url
from mcpl_host.transports.http_sse import AutoHTTPTransport, SSETransport
from mcpl_host.transports.stdio import StdioParameters, StdioTransport
from mcpl_host.transports.websocket import (
    DEFAULT_KEEPALIVE_INTERVAL_SECONDS,
    DEFAULT_KEEPALIVE_TIMEOUT_SECONDS,
    DEFAULT_OPEN_TIMEOUT_SECONDS,
    WebSocketParameters,
    WebSocketTransport,
    shown_url,
)

__all__ = ["connect_http", "connect_stdio", "connect_websocket", "default_server_name"]


def default_server_name(command: str, args: Sequence[str] = ()) -> str:
    """A readable name for logs: ``python -m mcp_server_time`` → ``mcp_server_time``,
    ``python demo_server.py`` → ``demo_server``, ``npx -y pkg`` → ``pkg``, else the command."""
    base = os.path.basename(command)
    rest = list(args)
    if base.startswith("python") and rest:
        if rest[0] == "-m" and len(rest) > 1:
            return rest[1]
        if not rest[0].startswith("-"):
            return os.path.splitext(os.path.basename(rest[0]))[0]
    if base in ("npx", "uvx", "pipx", "bunx") and rest:
        packages = [arg for arg in rest if not arg.startswith("-")]
        if packages:
            return packages[0]
    return base


def connect_stdio(
    command: str,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    inherit_env: bool = False,
    name: str | None = None,
    handlers: HostHandlers | None = None,
    policy: GrantPolicy | None = None,
    feature_set_policy: FeatureSetPolicy | None = None,
    on_refusal: RefusalAction = "follow",
    limits: Limits | None = None,
    secrets: Iterable[str] = (),
    stderr_log_level: str = "debug",
) -> ServerConnection:
    """A connection that spawns ``command args`` and speaks MCP/MCPL over its stdio.

    Nothing starts until the connection is entered (``async with``). ``env`` is added to a
    minimal environment (``inherit_env=True``: to the whole environment); its values, and
    ``secrets``, are redacted from every log line and error about this server (ENVELOPE.md L2).
    ``policy`` defaults to granting nothing (MCPL §5.4). See ``ServerConnection`` for errors.
    """
    limits = limits or Limits()
    redactor = Redactor([*(env or {}).values(), *secrets])
    parameters = StdioParameters(
        command=command,
        args=tuple(args),
        env=dict(env) if env else None,
        cwd=cwd,
        inherit_env=inherit_env,
    )
    server_name = name or default_server_name(command, args)
    logger = get_logger("mcpl_host.stdio", server=server_name)

    def factory() -> StdioTransport:
        return StdioTransport(
            parameters, limits=limits, redactor=redactor, logger=logger, stderr_log_level=stderr_log_level
        )

    return ServerConnection(
        factory,
        name=server_name,
        handlers=handlers,
        policy=policy,
        feature_set_policy=feature_set_policy,
        on_refusal=on_refusal,
        limits=limits,
        redactor=redactor,
    )


def connect_websocket(
    url: str,
    *,
    token: str | None = None,
    token_in: Literal["query", "header"] = "header",
    headers: Mapping[str, str] | None = None,
    name: str | None = None,
    handlers: HostHandlers | None = None,
    policy: GrantPolicy | None = None,
    feature_set_policy: FeatureSetPolicy | None = None,
    on_refusal: RefusalAction = "follow",
    limits: Limits | None = None,
    secrets: Iterable[str] = (),
    open_timeout_seconds: float = DEFAULT_OPEN_TIMEOUT_SECONDS,
    keepalive_interval_seconds: float | None = DEFAULT_KEEPALIVE_INTERVAL_SECONDS,
    keepalive_timeout_seconds: float = DEFAULT_KEEPALIVE_TIMEOUT_SECONDS,
    ssl_context: ssl.SSLContext | None = None,
) -> ServerConnection:
    """A connection that dials ``url`` (``ws://`` or ``wss://``) and speaks MCP/MCPL over a
    WebSocket, one JSON-RPC message per text frame (PROTOCOL.md §1.2).

    Nothing is dialled until the connection is entered (``async with``). ``token`` is sent as
    the query parameter ``token`` (``token_in="query"``) or as ``Authorization: Bearer``
    (``token_in="header"``). The token, every ``headers`` value, any ``token`` in ``url`` and
    ``secrets`` are redacted from every log line and error about this server (ENVELOPE.md L2),
    and the URL shown never carries them. ``limits.max_line_bytes`` bounds one incoming
    message. ``ssl_context`` verifies a ``wss://`` server (default: the system's CAs).
    ``policy`` defaults to granting nothing (MCPL §5.4). See ``WebSocketTransport``
    for the transport's errors; on entry they surface as ``InitializeError``.

    Raises:
        ValueError: an unusable URL, token, header or timeout (no secret in the message).
    """
    limits = limits or Limits()
    parameters = WebSocketParameters(
        url=url,
        token=token,
        token_in=token_in,
        headers=dict(headers or {}),
        open_timeout_seconds=open_timeout_seconds,
        keepalive_interval_seconds=keepalive_interval_seconds,
        keepalive_timeout_seconds=keepalive_timeout_seconds,
        ssl_context=ssl_context,
    )
    redactor = Redactor([*parameters.secrets(), *secrets])
    server_name = name or shown_url(url, redactor)
    logger = get_logger("mcpl_host.websocket", server=server_name)

    def factory() -> WebSocketTransport:
        return WebSocketTransport(parameters, limits=limits, redactor=redactor, logger=logger)

    return ServerConnection(
        factory,
        name=server_name,
        handlers=handlers,
        policy=policy,
        feature_set_policy=feature_set_policy,
        on_refusal=on_refusal,
        limits=limits,
        redactor=redactor,
    )


def connect_http(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    token: str | None = None,
    transport: HTTPTransportKind = "auto",
    name: str | None = None,
    handlers: HostHandlers | None = None,
    policy: GrantPolicy | None = None,
    feature_set_policy: FeatureSetPolicy | None = None,
    on_refusal: RefusalAction = "follow",
    limits: Limits | None = None,
    secrets: Iterable[str] = (),
    ssl_context: ssl.SSLContext | None = None,
) -> ServerConnection:
    """A connection to the MCP server at ``url`` (``http://`` or ``https://``) over HTTP.

    ``transport``: ``"streamable-http"`` (MCP 2025-11-25 §Streamable HTTP), ``"sse"`` (the
    older HTTP+SSE transport of MCP 2024-11-05; ``url`` is its event stream, often
    ``.../sse``), or ``"auto"`` (default: Streamable HTTP, then HTTP+SSE at the same URL
    when the ``initialize`` POST is answered 400, 404 or 405). Nothing is sent until the
    connection is entered (``async with``). ``token`` is sent as ``Authorization: Bearer``
    and ``headers`` on every request; they, every query value of ``url`` and ``secrets``
    are redacted from every log line and error about this server, and the URL shown never
    carries them. Redirects are not followed; OAuth is not implemented (a 401 with
    ``WWW-Authenticate`` says so). The bounds and timeouts are ``limits``' (``max_line_bytes``
    per message, ``max_sse_event_bytes``, ``http_*``, ``sse_*``). ``policy`` defaults to
    granting nothing (MCPL §5.4). The transports' errors surface on entry as
    ``InitializeError`` (see ``transports.http`` and ``transports.http_sse``).

    Raises:
        ValueError: an unusable URL, token, header or transport (no secret in the message).
    """
    if transport not in ("streamable-http", "sse", "auto"):
        raise ValueError(f"transport must be 'streamable-http', 'sse' or 'auto', not {transport!r}")
    limits = limits or Limits()
    parameters = HTTPParameters(url=url, token=token, headers=dict(headers or {}), ssl_context=ssl_context)
    redactor = Redactor([*parameters.secrets(), *secrets])
    server_name = name or shown_http_url(url, redactor)
    logger = get_logger("mcpl_host.http", server=server_name)

    def factory() -> StreamableHTTPTransport | SSETransport | AutoHTTPTransport:
        if transport == "streamable-http":
            return StreamableHTTPTransport(parameters, limits=limits, redactor=redactor, logger=logger)
        if transport == "sse":
            return SSETransport(parameters, limits=limits, redactor=redactor, logger=logger)
        return AutoHTTPTransport(parameters, limits=limits, redactor=redactor, logger=logger)

    return ServerConnection(
        factory,
        name=server_name,
        handlers=handlers,
        policy=policy,
        feature_set_policy=feature_set_policy,
        on_refusal=on_refusal,
        limits=limits,
        redactor=redactor,
    )

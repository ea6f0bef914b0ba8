"""Opening a server's transports from a ``ServerConfig``: ``transport_factory()`` gives what
opens one transport of its kind (stdio, WebSocket or HTTP), the one thing
``HostedServer(config, ...)`` needs from here (``hosted.connect()`` gives one
``ServerConnection`` of a new ``HostedServer``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mcpl_host.logging import Redactor, get_logger
from mcpl_host.transports.base import TransportFactory
from mcpl_host.transports.stdio import StdioParameters, StdioTransport

if TYPE_CHECKING:
    from mcpl_host.config import ServerConfig
    from mcpl_host.transports.http import StreamableHTTPTransport
    from mcpl_host.transports.http_params import HTTPParameters
    from mcpl_host.transports.http_sse import AutoHTTPTransport, SSETransport
    from mcpl_host.transports.websocket import WebSocketTransport

# The WebSocket and HTTP transports (wsproto, h11, httpx) and their parameters are imported
# by the first server that uses them, not with the package: a stdio-only application never
# loads them.

__all__ = ["transport_factory"]


def transport_factory(config: ServerConfig, redactor: Redactor) -> TransportFactory:
    """What opens one transport of ``config`` (``ServerConfig.parameters()``), each call a
    new one, nothing opened until it is entered: a ``StdioTransport`` spawns ``command
    args`` (MCP 2025-11-25 "Transports", stdio), a ``WebSocketTransport`` dials ``url``
    (RFC 6455; docs/protocol.md, "WebSocket"), an HTTP transport sends to ``url``:
    ``"streamable-http"`` (MCP 2025-11-25 "Transports", Streamable HTTP), ``"sse"`` (the
    HTTP+SSE transport of MCP 2024-11-05) or ``"http"`` (Streamable HTTP, then HTTP+SSE at
    the same URL when the ``initialize`` POST is answered 400, 404 or 405). Redirects are not
    followed. An HTTP server without a token nor an ``Authorization`` header gets OAuth
    (``mcpl_host.auth.OAuth``, one per call of this function, so a grant outlives a
    reconnect) unless ``config.oauth.enabled`` is False. Every log
    line and error of the transport goes through ``redactor``; the transports' errors
    surface on entry as ``InitializeError``. Raises ``ValueError`` as
    ``ServerConfig.parameters()`` (never for a ``ServerConfig`` already built)."""
    parameters, limits = config.parameters(), config.limits
    if isinstance(parameters, StdioParameters):
        logger = get_logger("mcpl_host.stdio", server=config.name)
        level = config.stderr_log_level

        def stdio() -> StdioTransport:
            return StdioTransport(
                parameters, limits=limits, redactor=redactor, logger=logger, stderr_log_level=level
            )

        return stdio
    from mcpl_host.transports.ws_params import WebSocketParameters  # noqa: PLC0415 (loaded: made)

    if isinstance(parameters, WebSocketParameters):
        from mcpl_host.transports.websocket import WebSocketTransport

        logger = get_logger("mcpl_host.websocket", server=config.name)
        ws_parameters = parameters

        def websocket() -> WebSocketTransport:
            return WebSocketTransport(ws_parameters, limits=limits, redactor=redactor, logger=logger)

        return websocket
    from mcpl_host.transports.http import StreamableHTTPTransport
    from mcpl_host.transports.http_sse import AutoHTTPTransport, SSETransport

    http_parameters: HTTPParameters = parameters
    logger = get_logger("mcpl_host.http", server=config.name)
    if config.oauth.enabled and not parameters.has_credential_header:
        import dataclasses

        from mcpl_host.auth.provider import OAuth
        from mcpl_host.auth.store import TokenStore

        settings = config.oauth
        store = (settings.store or TokenStore()) if settings.keep_tokens else None
        oauth = OAuth(
            parameters.url,
            settings,
            limits=limits,
            redactor=redactor,
            logger=logger,
            store=store,
            browser=settings.browser,
            ssl_context=parameters.ssl_context,
        )
        http_parameters = dataclasses.replace(parameters, auth=oauth)
    kind = config.transport

    def http() -> StreamableHTTPTransport | SSETransport | AutoHTTPTransport:
        if kind == "streamable-http":
            return StreamableHTTPTransport(http_parameters, limits=limits, redactor=redactor, logger=logger)
        if kind == "sse":
            return SSETransport(http_parameters, limits=limits, redactor=redactor, logger=logger)
        return AutoHTTPTransport(http_parameters, limits=limits, redactor=redactor, logger=logger)

    return http

"""The loopback redirect listener of an interactive login (RFC 8252 §7.3, MCP 2025-11-25
Authorization: redirect URIs are ``localhost`` or ``https``).

``LoopbackListener`` listens on ``127.0.0.1`` on a port the system picks (or the one given);
``redirect_uri`` is ``http://127.0.0.1:<port>/callback``. ``wait()`` answers each
connection once and returns the query of the first ``GET /callback`` (other paths get 404).
A request head longer than ``max_bytes``, or not received within ``head_seconds``, is
refused. A port that cannot be listened on is
``AuthorizationFailed`` (``login``). Nothing here logs the query: it holds
the authorization code.
"""

from __future__ import annotations

import contextlib
from types import TracebackType
from typing import cast

import anyio
import anyio.abc

from mcpl_host.auth.discovery import AuthorizationFailed

__all__ = ["LoopbackListener"]

_DONE_PAGE = b"mcpl-host: the login is complete; this window may be closed.\n"


class LoopbackListener:
    """``async with LoopbackListener(max_bytes=..., head_seconds=...) as listener:``, then
    ``listener.redirect_uri`` and ``await listener.wait()`` (bounded by the caller)."""

    def __init__(self, *, max_bytes: int, head_seconds: float, port: int = 0) -> None:
        self._max_bytes = max_bytes
        self._head_seconds = head_seconds
        self._wanted_port = port
        self._listener: anyio.abc.SocketListener | None = None
        self.port = 0

    @property
    def redirect_uri(self) -> str:
        """``http://127.0.0.1:<port>/callback``."""
        return f"http://127.0.0.1:{self.port}/callback"

    async def __aenter__(self) -> LoopbackListener:
        try:
            listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=self._wanted_port)
        except OSError:
            raise AuthorizationFailed(
                "login",
                f"the loopback redirect could not listen on 127.0.0.1 port {self._wanted_port or 'any'}",
            ) from None
        (only,) = listener.listeners  # one address: 127.0.0.1
        self.port = int(only.extra(anyio.abc.SocketAttribute.local_port))
        self._listener = cast("anyio.abc.SocketListener", only)  # a TCP listener: it has accept()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._listener is not None:
            await self._listener.aclose()

    async def wait(self) -> str:
        """The query string of the first ``GET /callback`` that reaches the listener."""
        assert self._listener is not None
        while True:
            stream = await self._listener.accept()
            async with stream:
                query = await self._answer(stream)
            if query is not None:
                return query

    async def _answer(self, stream: anyio.abc.SocketStream) -> str | None:
        head = b""
        with anyio.move_on_after(self._head_seconds):
            while b"\r\n\r\n" not in head and len(head) <= self._max_bytes:
                try:
                    chunk = await stream.receive(4096)
                except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    break
                head += chunk
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        method, _, rest = line.partition(" ")
        target = rest.partition(" ")[0]
        path, _, query = target.partition("?")
        found = method == "GET" and path == "/callback" and len(head) <= self._max_bytes
        status = b"200 OK" if found else b"404 Not Found"
        body = _DONE_PAGE if found else b"not found\n"
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await stream.send(
                b"HTTP/1.1 " + status + b"\r\nContent-Type: text/plain; charset=utf-8\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body
            )
        return query if found else None

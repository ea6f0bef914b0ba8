"""The WebSocket transport: a server dialled at ``ws://`` or ``wss://`` (RFC 6455;
MCPL RFC-004 §1).

Rules of this module (docs/protocol.md, "WebSocket"):

- RFC 6455 framing is wsproto's, over an anyio TCP (and TLS) stream, so it runs on asyncio
  and trio. httpx-ws is not used: its ``max_message_size_bytes`` is only the read chunk
  size, and it joins a message's frames with no bound, so a server could make us buffer
  any amount and the bound below could not be kept.
- Out: each line given to ``send()`` is one text frame (no newline inside). The frames of
  one ``send()`` go out in one write.
- In: a text message is split on ``\\n``; each piece, with blanks (space, tab, CR) trimmed,
  is one line for the connection's framing and envelope classifier, in order; empty pieces
  are dropped. A binary message is dropped unread, with a log line (``LogBudget``).
- Bound: a text message over ``limits.max_line_bytes`` (the stdio line bound) is counted as
  it arrives and never buffered past the bound: the transport closes (code 1009) and
  ``receive()`` raises ``ConnectionLost`` at once, so pending requests fail at once.
- Credentials: the token (query ``token=`` or ``Authorization: Bearer``), every header
  value and any ``token=`` already in the URL are secrets. They are never in a log line, an
  error message, ``describe()`` or a repr: the URL shown drops them and passes the
  ``Redactor``. A credential sent over cleartext ``ws://`` to a host that is not loopback
  gets a warning, logged before dialling.
- Nothing but ``101 Switching Protocols`` opens the transport: a redirect is never followed
  (MCPL RFC-004 §7); one to another origin is refused naming both origins, since following
  it would need a new authorization decision (MCPL §18.6; ``redirect_origins``).
- Keepalive: a ping every ``keepalive_interval_seconds``; no pong within
  ``keepalive_timeout_seconds`` closes the transport (``ConnectionLost``). Pongs are read by
  ``receive()``, which the connection's reader task always runs.
- anyio, OS, TLS and wsproto errors become ``ConnectionLost`` (the server went away) or
  ``ConnectionClosed`` (we closed it), here and nowhere else (``_map_errors``).
"""

from __future__ import annotations

import contextlib
import os
import ssl
from collections import deque
from collections.abc import Generator
from types import TracebackType
from urllib.parse import quote, urlsplit

import anyio
import anyio.abc
from typing_extensions import Unpack
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    Pong,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.frame_protocol import CloseReason
from wsproto.utilities import LocalProtocolError as WsLocalError
from wsproto.utilities import RemoteProtocolError as WsRemoteError

from mcpl_host._tasks import Lifetime
from mcpl_host.jsonrpc.errors import ConnectionClosed, ConnectionLost, describe_seconds
from mcpl_host.jsonrpc.framing import ReadItem, gather, joined
from mcpl_host.logging import LogBudget, log_value
from mcpl_host.transports.base import TransportArgs, transport_options

__all__ = [
    "DEFAULT_KEEPALIVE_INTERVAL_SECONDS",
    "DEFAULT_KEEPALIVE_TIMEOUT_SECONDS",
    "DEFAULT_OPEN_TIMEOUT_SECONDS",
    "READ_CHUNK_BYTES",
    "WebSocketParameters",
    "WebSocketTransport",
    "is_loopback_host",
    "sends_cleartext_credential",
    "shown_url",
]

from mcpl_host.transports.ws_params import (  # noqa: F401  (re-exported)
    DEFAULT_KEEPALIVE_INTERVAL_SECONDS,
    DEFAULT_KEEPALIVE_TIMEOUT_SECONDS,
    DEFAULT_OPEN_TIMEOUT_SECONDS,
    READ_CHUNK_BYTES,
    TOKEN_QUERY_PARAMETER,
    WebSocketParameters,
    is_loopback_host,
    redirect_origins,
    sends_cleartext_credential,
    shown_url,
)

_BLANKS = b" \t\r"  # trimmed around each message piece
# What a broken, reset or ended stream raises (anyio wraps TLS failures as broken).
_NETWORK_ERRORS = (anyio.BrokenResourceError, anyio.EndOfStream, OSError)
# The dialler (a module attribute so a test can stand in for the network).
_connect_tcp = anyio.connect_tcp


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def _pieces(message: bytes) -> list[bytes]:
    """The lines of one text message: split on newline, blanks trimmed, empties dropped."""
    if b"\n" not in message:
        piece = message.strip(_BLANKS)
        return [piece] if piece else []
    return [piece for piece in (part.strip(_BLANKS) for part in message.split(b"\n")) if piece]


class WebSocketTransport:
    """A WebSocket to a server as a line transport (``Transport``).

    Use it as ``async with WebSocketTransport(params) as transport:``; entering dials,
    runs the upgrade handshake within ``params.open_timeout_seconds`` and starts the
    keepalive task in a task group the transport owns; leaving calls ``aclose()``. Enter and
    leave it in the same task. One task may ``receive()`` and one may ``send()`` at a time;
    ``aclose()`` may be called from any task.

    Args:
        params: where and how to connect.
        limits: ``max_line_bytes`` (the bound on one incoming message),
            ``dropped_lines_logged`` (binary messages logged), ``close_grace_seconds``
            (the wait to send our close frame).
        redactor: applied to everything shown; by default built from ``params.secrets()``.
        logger: a structlog logger; by default ``get_logger("mcpl_host.websocket")``.
    """

    def __init__(self, params: WebSocketParameters, **options: Unpack[TransportArgs]) -> None:
        self._params = params
        self._limits, self._redactor, self._logger = transport_options(params, options, "mcpl_host.websocket")
        self._shown = shown_url(params.url, self._redactor)
        self._ws = WSConnection(ConnectionType.CLIENT)
        self._stream: anyio.abc.ByteStream | None = None
        self._stream_closed = False
        self._write_lock = anyio.Lock()
        self._items: deque[bytes] = deque()
        self._parts: list[bytes | bytearray] = []  # the text message being received (``gather``)
        self._size = 0  # its bytes so far
        self._in_binary = False  # inside a binary message (dropped as it arrives)
        self._binary_budget = LogBudget(self._limits.dropped_lines_logged)
        self._control: list[bytes] = []  # pongs and close replies not yet written
        self._lost: str | None = None  # why the server went away, once it has
        #: The code and reason (redacted) of the first close frame read, None before one.
        self.close_code: int | None = None
        self.close_reason: str | None = None
        self._open = False
        self._life = Lifetime("a WebSocketTransport")
        self._keepalive_scope = anyio.CancelScope()
        self._keepalive_started = False
        self._keepalive_done = anyio.Event()
        self._ping_payload = b""
        self._pong = anyio.Event()

    @property
    def stderr_tail(self) -> list[str]:
        """Always empty: a WebSocket has no stderr channel."""
        return []

    def negotiated(self, protocol_version: str) -> None:
        """Nothing to do: this transport carries no protocol version."""

    def describe(self) -> str:
        """The URL without credentials (``shown_url``)."""
        return self._shown

    def __repr__(self) -> str:
        if self._life.closing:
            state = "closed" if self._life.closed.is_set() else "closing"
        else:
            state = "lost" if self._lost else "open" if self._open else "new"
        return f"<WebSocketTransport {self._shown} {state} buffered={len(self._items)}>"

    # --- opening and closing -------------------------------------------------------------

    async def __aenter__(self) -> WebSocketTransport:
        """Dial, run the upgrade handshake, start the keepalive task.

        Raises:
            ConnectionLost: no connection, TLS failure, refusal (any status but 101, a
                redirect included: it is not followed), a bad handshake answer, or no
                handshake within ``open_timeout_seconds``; the message names the URL
                without credentials.
            RuntimeError: the transport was already entered or closed.

        **Cancellation:** the socket is closed before the cancellation goes on.
        """
        self._life.enter()
        if sends_cleartext_credential(self._params):
            self._logger.warning(
                "credential sent over cleartext ws:// to a host that is not loopback", url=self._shown
            )
        await self._life.start(self._open_and_keep_alive, self.aclose)
        return self

    async def _open_and_keep_alive(self, task_group: anyio.abc.TaskGroup) -> None:
        await self._open_within_timeout()
        interval = self._params.keepalive_interval_seconds
        if interval is not None:
            await task_group.start(self._keepalive, interval, self._params.keepalive_timeout_seconds)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Close (``aclose()``) and leave the task group. The close is shielded: it
        completes, then the cancellation goes on."""
        await self._life.leave(self.aclose, exc_type, exc, tb)

    async def _open_within_timeout(self) -> None:
        seconds = self._params.open_timeout_seconds
        try:
            with anyio.fail_after(seconds):
                await self._dial()
                await self._handshake()
        except TimeoutError:
            raise ConnectionLost(
                f"could not open {self._shown}: no WebSocket handshake within {describe_seconds(seconds)}"
            ) from None
        self._open = True
        self._logger.debug("WebSocket open", url=self._shown)
        self._take_events()  # frames that came with the handshake answer

    async def _dial(self) -> None:
        parts = urlsplit(self._params.url)
        tls = parts.scheme.lower() == "wss"
        host = parts.hostname or ""
        port = parts.port or (443 if tls else 80)
        try:
            if tls:
                context = self._params.ssl_context or ssl.create_default_context()
                self._stream = await _connect_tcp(
                    host, port, ssl_context=context, tls_hostname=host, tls_standard_compatible=False
                )
            else:
                self._stream = await _connect_tcp(host, port)
        except (OSError, anyio.BrokenResourceError) as exc:
            # TimeoutError here is the OS's connect timeout, not our open timeout.
            cause = exc.__cause__ if isinstance(exc, anyio.BrokenResourceError) and exc.__cause__ else exc
            reason = self._redactor.redact(_reason(cause))
            raise ConnectionLost(f"could not connect to {self._shown} ({reason})") from None

    async def _handshake(self) -> None:
        stream = self._stream
        assert stream is not None
        params, parts = self._params, urlsplit(self._params.url)
        query = parts.query
        headers = [(name.encode(), value.encode()) for name, value in params.headers.items()]
        if params.token is not None and params.token_in == "query":
            token = f"{TOKEN_QUERY_PARAMETER}={quote(params.token, safe='')}"
            query = f"{query}&{token}" if query else token
        elif params.token is not None:
            headers.append((b"authorization", f"Bearer {params.token}".encode()))
        target = (parts.path or "/") + (f"?{query}" if query else "")
        try:
            data = self._ws.send(Request(host=parts.netloc, target=target, extra_headers=headers))
        except (WsLocalError, UnicodeError):  # h11's message could quote a header value
            raise ConnectionLost(f"could not build the WebSocket handshake for {self._shown}") from None
        with self._map_errors(
            f"the server at {self._shown} closed the connection during the WebSocket handshake"
        ):
            await stream.send(data)
        while True:
            with self._map_errors(
                f"the server at {self._shown} closed the connection during the WebSocket handshake"
            ):
                data = await stream.receive(self._limits.read_chunk_bytes)
            try:
                self._ws.receive_data(data)
                for event in self._ws.events():
                    if isinstance(event, AcceptConnection):
                        # Stop here: frames after the answer stay in wsproto for receive().
                        return
                    if isinstance(event, RejectConnection):
                        location = next(
                            (value for name, value in event.headers if name.lower() == b"location"), None
                        )
                        raise ConnectionLost(
                            self._refusal(
                                event.status_code,
                                location.decode("latin-1") if location is not None else None,
                            )
                        )
            except WsRemoteError as exc:
                reason = self._redactor.redact(str(exc))
                raise ConnectionLost(
                    f"the server at {self._shown} answered the WebSocket handshake wrongly ({reason})"
                ) from None

    def _refusal(self, status: int, location: str | None = None) -> str:
        origins = redirect_origins(self._params.url, location) if 300 <= status < 400 else None
        if origins is not None:
            here, there = self._redactor.redact(origins[0]), self._redactor.redact(origins[1])
            return (
                f"the server at {self._shown} answered HTTP {status}, a redirect from {here} to "
                f"another origin, {there}; it is not followed: a redirect that changes origin "
                f"needs a new authorization decision (MCPL §18.6)"
            )
        if 300 <= status < 400:
            return (
                f"the server at {self._shown} answered HTTP {status} (a redirect) instead of "
                f"a WebSocket upgrade; redirects are not followed"
            )
        return f"the server at {self._shown} refused the WebSocket upgrade with HTTP {status}"

    async def aclose(self) -> None:
        """Close the WebSocket and release the socket and the keepalive task.

        Sends a close frame (code 1000) if the WebSocket is open, waiting for it at most
        ``limits.close_grace_seconds`` (a writer stuck on a full socket cannot hold it up
        longer), then closes the socket. Idempotent; a second caller waits for the first.
        Never raises (beyond cancellation of a second caller while it waits).

        **Cancellation:** the whole close runs shielded; the caller's cancellation takes
        effect afterwards. Another task blocked in ``send()`` or ``receive()`` gets
        ``ConnectionClosed``.
        """
        if not await self._life.first_close():
            return
        with anyio.CancelScope(shield=True):
            try:
                self._keepalive_scope.cancel()
                if self._stream is not None and not self._stream_closed:
                    with anyio.move_on_after(self._limits.close_grace_seconds):
                        await self._send_close(CloseReason.NORMAL_CLOSURE)
                await self._close_stream()
                if self._keepalive_started:
                    await self._keepalive_done.wait()
            finally:
                self._life.closed.set()

    async def _send_close(self, code: int, reason: str | None = None) -> None:
        """Best effort: write a close frame if the WebSocket state allows one."""
        stream = self._stream
        async with self._write_lock:
            if stream is None or self._stream_closed:
                return
            if self._ws.state not in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
                return
            data = self._ws.send(CloseConnection(code=code, reason=reason))
            with contextlib.suppress(*_NETWORK_ERRORS, anyio.ClosedResourceError):
                await stream.send(data)

    async def _close_stream(self) -> None:
        if self._stream is not None and not self._stream_closed:
            self._stream_closed = True
            with anyio.CancelScope(shield=True):
                await anyio.aclose_forcefully(self._stream)

    async def _lose(self, message: str) -> None:
        """The server is gone or misbehaved: record why, stop pinging, close the socket
        (a ``receive()`` blocked on it then raises ``ConnectionLost`` with ``message``)."""
        if self._lost is None and not self._life.closing:
            self._lost = message
        self._keepalive_scope.cancel()
        await self._close_stream()

    # --- errors --------------------------------------------------------------------------

    def _failure(self, message: str) -> ConnectionClosed | ConnectionLost:
        """The exception for a failed operation: ours if we closed, else the first loss."""
        if self._life.closing:
            return ConnectionClosed("the WebSocket transport was closed")
        if self._lost is None:
            self._lost = message
        return ConnectionLost(self._lost)

    @contextlib.contextmanager
    def _map_errors(self, message: str) -> Generator[None]:
        """Translate what a socket operation raises into ``ConnectionLost`` (``message``, or
        the reason already recorded) or ``ConnectionClosed`` (we closed it)."""
        try:
            yield
        except anyio.ClosedResourceError:
            raise self._failure("the WebSocket was closed") from None
        except _NETWORK_ERRORS:
            raise self._failure(message) from None

    # --- receiving -----------------------------------------------------------------------

    async def receive(self) -> ReadItem:
        """Return the next line from the server (``bytes``: one piece of a text message,
        blanks trimmed, never empty).

        Lines already received are returned before any loss is reported.

        Raises:
            ConnectionLost: the server closed the WebSocket (the message gives the close
                code and reason, escaped and redacted), the connection dropped (code 1006),
                the server broke the WebSocket protocol, sent a message over
                ``limits.max_line_bytes``, or missed a keepalive pong.
            ConnectionClosed: ``aclose()`` was called (before or during this call).

        **Cancellation:** lines already received stay buffered for the next call. A pong or
        close reply being written may be cut short; close the transport then.
        """
        while True:
            if self._life.closing:
                raise ConnectionClosed("the WebSocket transport was closed")
            if self._items:
                return self._items.popleft()
            if self._lost is not None:
                raise ConnectionLost(self._lost)
            stream = self._stream
            if stream is None or not self._open:
                raise ConnectionClosed("the WebSocket transport is not open")
            dropped = f"the connection to {self._shown} dropped without a WebSocket close (code 1006)"
            with self._map_errors(dropped):
                data = await stream.receive(self._limits.read_chunk_bytes)
            self._ws.receive_data(data)
            self._take_events()
            if self._control:
                await self._flush_control()
            if self._lost is not None:
                await self._lose(self._lost)

    def _take_events(self) -> None:
        """Act on what wsproto decoded: no I/O here, so no event is lost to a cancellation."""
        for event in self._ws.events():
            if self._lost is None or isinstance(event, CloseConnection):
                self._on_event(event)

    def _on_event(self, event: Event) -> None:
        if isinstance(event, TextMessage):
            self._on_text(event)
        elif isinstance(event, BytesMessage):
            if not self._in_binary:
                self._log_binary(len(event.data))
            self._in_binary = not event.message_finished
        elif isinstance(event, Ping):
            with contextlib.suppress(WsLocalError):  # not while we are closing
                self._control.append(self._ws.send(event.response()))
        elif isinstance(event, Pong):
            if bytes(event.payload) == self._ping_payload:
                self._pong.set()
        elif isinstance(event, CloseConnection):
            self._on_close(event)

    def _on_text(self, event: TextMessage) -> None:
        chunk = event.data.encode("utf-8")  # wsproto has checked the UTF-8
        self._size += len(chunk)
        limit = self._limits.max_line_bytes
        if self._size > limit:
            self._parts.clear()
            self._lost = (
                f"the server sent a WebSocket message over {limit} bytes "
                f"(limits.max_line_bytes); the connection was closed"
            )
            with contextlib.suppress(WsLocalError):
                self._control.append(
                    self._ws.send(CloseConnection(code=CloseReason.MESSAGE_TOO_BIG, reason="message too big"))
                )
            return
        if not event.message_finished:
            gather(self._parts, chunk)
            return
        if self._parts:
            gather(self._parts, chunk)
            chunk = joined(self._parts)
            self._parts.clear()
        self._size = 0
        self._items.extend(_pieces(chunk))

    def _on_close(self, event: CloseConnection) -> None:
        code = int(event.code)
        if self.close_code is None:
            self.close_code, self.close_reason = code, self._redactor.redact(event.reason or "")
        reason = f", reason {log_value(event.reason, self._redactor)}" if event.reason else ""
        state = self._ws.state
        if state is ConnectionState.REMOTE_CLOSING:  # the server's close: answer it
            message = f"the server closed the WebSocket (code {code}{reason})"
            with contextlib.suppress(WsLocalError):
                self._control.append(self._ws.send(event.response()))
        elif state is ConnectionState.OPEN:  # wsproto found a framing error: close with its code
            message = f"the server broke the WebSocket protocol (code {code}{reason})"
            with contextlib.suppress(WsLocalError):
                self._control.append(self._ws.send(CloseConnection(code=code)))
        else:  # the answer to our own close
            message = f"the WebSocket was closed (code {code}{reason})"
        if self._lost is None:
            self._lost = message
        self._logger.debug("WebSocket closed", url=self._shown, reason=self._lost)

    def _log_binary(self, size: int) -> None:
        verdict = self._binary_budget.take()
        if verdict == "log":
            self._logger.warning(
                "binary WebSocket message dropped (only text frames carry JSON-RPC)",
                url=self._shown,
                first_frame_bytes=size,
            )
        elif verdict == "last":
            self._logger.warning(
                "binary WebSocket message dropped; further ones go unlogged", url=self._shown
            )

    async def _flush_control(self) -> None:
        stream = self._stream
        async with self._write_lock:
            data, self._control = b"".join(self._control), []
            if stream is None or self._stream_closed or not data:
                return
            with contextlib.suppress(*_NETWORK_ERRORS, anyio.ClosedResourceError):
                await stream.send(data)  # a failure shows on the next read

    # --- sending and keepalive -------------------------------------------------------------

    async def send(self, data: bytes) -> None:
        """Send each non-empty line of ``data`` (lines end in ``\\n``; UTF-8, as
        ``dumps_message`` writes them) as one text frame, all in one write.

        Raises:
            ConnectionLost: the server went away (the reason is the first one recorded).
            ConnectionClosed: ``aclose()`` was called (before or during this call).

        **Cancellation:** some frames may have been written; a frame cut short leaves the
        stream out of step, so the caller should close the transport.
        """
        if self._life.closing:
            raise ConnectionClosed("the WebSocket transport was closed")
        if self._lost is not None:
            raise ConnectionLost(self._lost)
        stream = self._stream
        if stream is None or not self._open:
            raise ConnectionClosed("the WebSocket transport is not open")
        lines = [line for line in data.split(b"\n") if line]
        if not lines:
            return
        async with self._write_lock:
            try:
                out = b"".join([self._ws.send(TextMessage(data=line.decode("utf-8"))) for line in lines])
            except WsLocalError:  # the server's close arrived: receive() reports it
                raise self._failure(f"the WebSocket to {self._shown} is closing") from None
            with self._map_errors(f"could not write to {self._shown} (the connection is broken)"):
                await stream.send(out)

    async def _keepalive(
        self,
        interval: float,
        timeout: float,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Ping every ``interval`` seconds; no pong within ``timeout`` loses the transport."""
        self._keepalive_started = True
        try:
            with self._keepalive_scope:
                task_status.started()
                stream = self._stream
                assert stream is not None
                while True:
                    await anyio.sleep(interval)
                    self._ping_payload, self._pong = os.urandom(8), anyio.Event()
                    try:
                        async with self._write_lock:
                            data = self._ws.send(Ping(payload=self._ping_payload))
                            with self._map_errors(f"could not ping {self._shown} (the connection is broken)"):
                                await stream.send(data)
                    except (WsLocalError, ConnectionLost, ConnectionClosed):
                        return  # closing or lost: receive() reports it
                    with anyio.move_on_after(timeout):
                        await self._pong.wait()
                    if not self._pong.is_set():
                        await self._lose(
                            f"the server at {self._shown} did not answer a keepalive ping "
                            f"within {describe_seconds(timeout)}"
                        )
                        return
        finally:
            self._keepalive_done.set()

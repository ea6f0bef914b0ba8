"""The replay as a server: the I/O shell that applies ``Matcher`` (docs/protocol.md RP1-RP7)
over stdio, WebSocket (RFC 6455, with wsproto) or Streamable HTTP (MCP 2025-11-25
"Transports" §Streamable HTTP, with h11), on anyio (asyncio and trio).

Rules of this module:

- Every transport the replay serves (the one stdio session; each WebSocket; each HTTP
  session, begun by a POST of ``initialize``) gets a ``Matcher`` of its own, starting the
  script from its beginning (RP1). Every line read is parsed once (``framing.loads_line``,
  within ``Limits.max_line_bytes``, ``max_json_depth``); a line that is not JSON or too long
  is logged (bounded) and answered nothing.
- The first ``Mismatch`` is answered with its JSON-RPC error, written to ``Outcome`` and
  ends the replay: every transport closes and ``mcpl-host replay`` exits 1 with its
  sentence on stderr. A transport that ends as the recording shows (RP7) ends alone.
- ``--keep-timing``: each write waits its ``Write.delay`` (already bounded by
  ``Limits.replay_max_gap_seconds``); this is the recorded pace, never synchronisation.
- HTTP: the endpoint is any path. A POST carries one message; ``initialize`` without
  ``Mcp-Session-Id`` starts a session (its id in the answer's header); any other POST
  carries that id (404 for one the replay does not know) or none: the POSTs without a
  session (the stateless revision's requests, the era probe) share one matcher. A POST of a request is
  answered with an event stream carrying what the matcher writes for it until its answer;
  a POST of a notification or a response is answered 202. Lines written after an answer,
  or for a notification, go to the session's GET stream (queued until one is open). A
  DELETE ends the session. A body over ``Limits.max_line_bytes`` is refused 413. At most
  ``Limits.replay_max_sessions`` sessions are kept: a new one past it ends the oldest.
- Lines written are the recorded ones (server values as recorded, ids remapped): the replay
  reproduces what a server sent, so it never escapes them; what it logs goes through
  ``log_value``.
"""

from __future__ import annotations

import os
import secrets as random_tokens
import stat
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import h11
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Message,
    Ping,
    RejectConnection,
    TextMessage,
)
from wsproto.events import (
    Request as WSRequest,
)

from mcpl_host.jsonrpc.envelope import Request, Response, classify
from mcpl_host.jsonrpc.framing import LineReader, LineTooLong, NotReadableJSON, dumps_message, loads_line
from mcpl_host.jsonrpc.values import is_object
from mcpl_host.limits import Limits
from mcpl_host.logging import LogBudget, get_logger, log_value
from mcpl_host.replay.matcher import Matcher, Mismatch, Reply, Write
from mcpl_host.replay.script import Script

__all__ = ["Outcome", "ReplayOptions", "serve_http", "serve_stdio", "serve_websocket"]

_log = get_logger("mcpl_host.replay")
#: Lines the replay could not use (not JSON, too long), logged before "more go unlogged".
_DROPPED_LOGGED = 10
Send = Callable[[bytes], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """``keep_timing``: wait the recorded gaps (bounded by ``limits.replay_max_gap_seconds``)."""

    keep_timing: bool = False
    limits: Limits = field(default_factory=Limits)

    def matcher(self, script: Script) -> Matcher:
        return Matcher(
            script, keep_timing=self.keep_timing, max_gap_seconds=self.limits.replay_max_gap_seconds
        )


@dataclass(slots=True)
class Outcome:
    """How the replay ended: ``mismatch`` (the first request that differed), ``done`` set
    once it must stop (by the transport, after it wrote the mismatch's answer)."""

    mismatch: Mismatch | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    budget: LogBudget = field(default_factory=lambda: LogBudget(_DROPPED_LOGGED))

    def differ(self, mismatch: Mismatch) -> None:
        if self.mismatch is None:
            self.mismatch = mismatch


def _line_of(write: Write) -> bytes:
    if write.text is not None:
        return write.text.encode("utf-8", "surrogatepass") + b"\n"
    return dumps_message(write.message)


async def _deliver(reply: Reply, send: Send, outcome: Outcome) -> None:
    for sentence in reply.skipped:
        if outcome.budget.take():
            _log.warning("a recorded line is not replayed", detail=sentence)
    for write in reply.writes:
        if write.delay > 0:
            await anyio.sleep(write.delay)
        await send(_line_of(write))


def _parse(item: bytes | LineTooLong, limits: Limits, outcome: Outcome) -> Any | None:
    """The parsed message of one line, or None (logged, bounded) when it has none."""
    if isinstance(item, LineTooLong):
        if outcome.budget.take():
            _log.warning("a line from the host is over the bound; ignored", bytes=item.size)
        return None
    if not item.strip():
        return None
    try:
        return loads_line(item, limits.max_json_depth, limits.max_deep_json_bytes)
    except (NotReadableJSON, ValueError) as exc:
        if outcome.budget.take():
            _log.warning("a line from the host is not JSON; ignored", reason=str(exc), line=log_value(item))
        return None


async def _take(matcher: Matcher, message: Any, send: Send, outcome: Outcome) -> bool:
    """Answer one message; False when the transport must end (a mismatch, RP7)."""
    result = matcher.receive(message)
    if isinstance(result, Mismatch):
        await send(dumps_message(result.answer))
        outcome.differ(result)
        return False
    await _deliver(result, send, outcome)
    return not result.end


# --- stdio ------------------------------------------------------------------------------------


async def serve_stdio(script: Script, options: ReplayOptions, outcome: Outcome) -> None:
    """Serve one session on this process's stdin and stdout until stdin ends, the recording
    ends the connection (RP7) or a request differs."""
    limits = options.limits
    matcher = options.matcher(script)
    out = sys.stdout.buffer

    async def send(data: bytes) -> None:
        out.write(data)
        out.flush()

    reader = LineReader(limits.max_line_bytes, limits.line_head_bytes)
    fd = sys.stdin.fileno()
    # Pipes, sockets and terminals are polled; a file or /dev/null (``replay FILE <
    # requests``) is always readable, and polling refuses it.
    mode = os.fstat(fd).st_mode
    regular = not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd))
    await _deliver(matcher.opening(), send, outcome)
    while True:
        if regular:
            await anyio.lowlevel.checkpoint()
        else:
            await anyio.wait_readable(fd)
        data = os.read(fd, limits.read_chunk_bytes)
        items = reader.feed(data) if data else reader.finish()
        for item in items:
            message = _parse(item, limits, outcome)
            if message is not None and not await _take(matcher, message, send, outcome):
                return
        if not data:
            return


# --- WebSocket --------------------------------------------------------------------------------


async def _listen(host: str, port: int) -> tuple[anyio.abc.Listener[anyio.abc.SocketStream], int]:
    listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
    bound = listener.extra(anyio.abc.SocketAttribute.local_port)
    return listener, bound


async def _serve(
    listener: anyio.abc.Listener[anyio.abc.SocketStream],
    handler: Callable[[anyio.abc.SocketStream], Awaitable[None]],
    outcome: Outcome,
) -> None:
    async with anyio.create_task_group() as tg:

        async def stop() -> None:
            await outcome.done.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(stop)
        async with listener:
            await listener.serve(handler)


async def serve_websocket(
    script: Script,
    options: ReplayOptions,
    outcome: Outcome,
    host: str,
    port: int,
    on_listening: Callable[[str], None],
) -> None:
    """Serve WebSocket connections on ``host:port`` (0: a free port), each a replay session,
    until a request differs; ``on_listening`` is told the ``ws://`` URL once listening."""
    listener, bound = await _listen(host, port)
    on_listening(f"ws://{host}:{bound}/")
    await _serve(listener, lambda stream: _websocket(stream, script, options, outcome), outcome)


async def _websocket(
    stream: anyio.abc.SocketStream, script: Script, options: ReplayOptions, outcome: Outcome
) -> None:
    limits = options.limits
    ws = WSConnection(ConnectionType.SERVER)
    matcher = options.matcher(script)
    parts: list[str] = []
    size = 0

    async def send(data: bytes) -> None:
        await stream.send(ws.send(Message(data=data.decode("utf-8", "surrogatepass").rstrip("\n"))))

    async with stream:
        while True:
            try:
                data = await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                return
            ws.receive_data(data)
            for event in ws.events():
                if isinstance(event, WSRequest):
                    # A client that offers the "mcp" subprotocol gets it; none is required.
                    chosen = "mcp" if "mcp" in event.subprotocols else None
                    await stream.send(ws.send(AcceptConnection(subprotocol=chosen)))
                    await _deliver(matcher.opening(), send, outcome)
                elif isinstance(event, TextMessage):
                    size += len(event.data)
                    if size <= limits.max_line_bytes:
                        parts.append(event.data)
                    if not event.message_finished:
                        continue
                    text, too_long, parts, size = "".join(parts), size > limits.max_line_bytes, [], 0
                    item: bytes | LineTooLong = (
                        LineTooLong(limits.max_line_bytes, len(text)) if too_long else text.encode()
                    )
                    message = _parse(item, limits, outcome)
                    if message is not None and not await _take(matcher, message, send, outcome):
                        await stream.send(ws.send(CloseConnection(code=1000, reason="replay ended")))
                        if outcome.mismatch is not None:
                            outcome.done.set()
                        return
                elif isinstance(event, Ping):
                    await stream.send(ws.send(event.response()))
                elif isinstance(event, CloseConnection):
                    await stream.send(ws.send(event.response()))
                    return
                elif isinstance(event, RejectConnection):
                    return


# --- Streamable HTTP --------------------------------------------------------------------------


def _id_key(value: object) -> tuple[str, object]:
    return (
        type(value).__name__,
        value if isinstance(value, (str, int, float, bool)) or value is None else repr(value),
    )


class _HttpSession:
    """One Streamable HTTP session: its matcher and where each line it writes goes."""

    def __init__(self, matcher: Matcher) -> None:
        self.matcher = matcher
        #: The event streams of the POSTs whose answer has not been written, by request id.
        self.posts: dict[tuple[str, object], MemoryObjectSendStream[bytes]] = {}
        self.get: MemoryObjectSendStream[bytes] | None = None
        self.queued: list[bytes] = []

    def route(self, line: bytes, post: tuple[str, object] | None) -> None:
        """Send ``line`` where it belongs: an answer to its request's stream (then closed);
        anything else to ``post``'s stream while open, else the GET stream (else queued)."""
        try:
            message = loads_line(line.rstrip(b"\n"))
        except ValueError:  # a recorded line that was not JSON
            message = None
        envelope = classify(message) if message is not None else None
        if isinstance(envelope, Response):
            target = self.posts.pop(_id_key(envelope.id), None)
            if target is not None:
                target.send_nowait(line)
                target.close()
            return
        if post is not None and post in self.posts:
            self.posts[post].send_nowait(line)
        elif self.get is not None:
            self.get.send_nowait(line)
        else:
            self.queued.append(line)

    def end(self) -> None:
        for target in self.posts.values():
            target.close()
        self.posts.clear()
        if self.get is not None:
            self.get.close()


async def serve_http(
    script: Script,
    options: ReplayOptions,
    outcome: Outcome,
    host: str,
    port: int,
    on_listening: Callable[[str], None],
) -> None:
    """Serve Streamable HTTP on ``host:port`` (0: a free port) until a request differs;
    ``on_listening`` is told the endpoint's URL (``http://host:port/mcp``) once listening."""
    listener, bound = await _listen(host, port)
    on_listening(f"http://{host}:{bound}/mcp")
    sessions: dict[str, _HttpSession] = {}
    await _serve(
        listener, lambda stream: _http_connection(stream, script, options, outcome, sessions), outcome
    )


async def _next_event(conn: h11.Connection, stream: anyio.abc.SocketStream) -> Any:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        try:
            data = await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            data = b""
        conn.receive_data(data)


async def _http_connection(
    stream: anyio.abc.SocketStream,
    script: Script,
    options: ReplayOptions,
    outcome: Outcome,
    sessions: dict[str, _HttpSession],
) -> None:
    conn = h11.Connection(h11.SERVER)
    limits = options.limits
    async with stream:
        try:
            while True:
                request = await _next_event(conn, stream)
                if not isinstance(request, h11.Request):
                    return
                body = b""
                too_big = False
                while True:
                    event = await _next_event(conn, stream)
                    if isinstance(event, h11.Data):
                        too_big = too_big or len(body) + len(event.data) > limits.max_line_bytes
                        body = body if too_big else body + bytes(event.data)
                    elif isinstance(event, h11.EndOfMessage):
                        break
                    else:
                        return
                await _http_request(conn, stream, request, body, too_big, script, options, outcome, sessions)
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (
            h11.RemoteProtocolError,
            h11.LocalProtocolError,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
        ):
            return


async def _respond(
    conn: h11.Connection,
    stream: anyio.abc.SocketStream,
    status: int,
    body: bytes = b"",
    headers: list[tuple[str, str]] | None = None,
) -> None:
    headers = [*(headers or []), ("content-length", str(len(body)))]
    if body:
        headers.append(("content-type", "text/plain; charset=utf-8"))
    await stream.send(conn.send(h11.Response(status_code=status, headers=headers)))
    if body:
        await stream.send(conn.send(h11.Data(data=body)))
    await stream.send(conn.send(h11.EndOfMessage()))


async def _event_stream(
    conn: h11.Connection,
    stream: anyio.abc.SocketStream,
    lines: MemoryObjectReceiveStream[bytes],
    headers: list[tuple[str, str]],
    outcome: Outcome,
) -> None:
    await stream.send(
        conn.send(h11.Response(status_code=200, headers=[("content-type", "text/event-stream"), *headers]))
    )
    with anyio.CancelScope() as scope:

        async def watch() -> None:
            await outcome.done.wait()
            scope.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            async with lines:
                async for line in lines:
                    await stream.send(
                        conn.send(h11.Data(data=b"event: message\ndata: " + line.rstrip(b"\n") + b"\n\n"))
                    )
            tg.cancel_scope.cancel()
    await stream.send(conn.send(h11.EndOfMessage()))


async def _http_request(
    conn: h11.Connection,
    stream: anyio.abc.SocketStream,
    request: h11.Request,
    body: bytes,
    too_big: bool,
    script: Script,
    options: ReplayOptions,
    outcome: Outcome,
    sessions: dict[str, _HttpSession],
) -> None:
    headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in request.headers}
    session_id = headers.get("mcp-session-id")
    method = request.method.decode("latin-1")
    if method == "DELETE":
        session = sessions.pop(session_id, None) if session_id else None
        if session is not None:
            session.end()
        return await _respond(conn, stream, 200 if session is not None else 404)
    if method == "GET":
        session = sessions.get(session_id) if session_id else None
        if session is None:
            return await _respond(conn, stream, 400 if not session_id else 404, b"no such session")
        if session.get is not None:
            return await _respond(conn, stream, 409, b"this session's GET stream is already open")
        get_send, get_receive = anyio.create_memory_object_stream[bytes](max_buffer_size=float("inf"))
        session.get = get_send
        for line in session.queued:
            get_send.send_nowait(line)
        session.queued.clear()
        return await _event_stream(conn, stream, get_receive, [], outcome)
    if method != "POST":
        return await _respond(conn, stream, 405, headers=[("allow", "GET, POST, DELETE")])
    if too_big:
        return await _respond(
            conn, stream, 413, b"the body is over the replay's bound (Limits.max_line_bytes)"
        )
    message = _parse(body, options.limits, outcome)
    if not is_object(message):
        return await _respond(conn, stream, 400, b"one JSON-RPC message per POST")
    envelope = classify(message)
    extra: list[tuple[str, str]] = []
    if isinstance(envelope, Request) and envelope.method == "initialize" and not session_id:
        session_id = random_tokens.token_hex(16)
        while len(sessions) >= options.limits.replay_max_sessions:
            sessions.pop(next(iter(sessions))).end()  # the oldest (dicts keep insertion order)
        sessions[session_id] = _HttpSession(options.matcher(script))
        extra.append(("mcp-session-id", session_id))
    if not session_id:
        # No session: the stateless revision's requests, or a host's era probe. They share
        # one matcher, as a server without sessions has one state.
        session_id = ""
        sessions.setdefault("", _HttpSession(options.matcher(script)))
    session = sessions.get(session_id)
    if session is None:
        return await _respond(conn, stream, 404, b"no such session")
    sid = session_id
    key = _id_key(envelope.id) if isinstance(envelope, Request) else None
    receive: MemoryObjectReceiveStream[bytes] | None = None
    if key is not None:
        send, receive = anyio.create_memory_object_stream[bytes](max_buffer_size=float("inf"))
        session.posts[key] = send

    async def route(line: bytes) -> None:
        session.route(line, key)

    async def answer() -> None:
        if not await _take(session.matcher, message, route, outcome):
            session.end()
            sessions.pop(sid, None)

    if receive is None:
        await answer()
        return await _respond(conn, stream, 202)
    async with anyio.create_task_group() as tg:
        tg.start_soon(answer)
        await _event_stream(conn, stream, receive, extra, outcome)
    if outcome.mismatch is not None:
        outcome.done.set()

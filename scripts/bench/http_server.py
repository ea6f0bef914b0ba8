"""http_server: the benchmark's loopback MCP server over Streamable HTTP and WebSocket.

Run by ``bench.http_ws`` in a process of its own (pinned with the benchmark, as the stdio
echo server is), and driven the same way by every client it measures:

    python scripts/bench/http_server.py        # prints the port, then serves 127.0.0.1

It stops when its stdin closes. It is lean so that what a measurement shows is the client's
cost: asyncio ``Protocol`` callbacks, HTTP/1.1 parsed by hand (keep-alive, ``Content-Length``
request bodies), WebSocket frames (RFC 6455) parsed and built by hand, orjson, no framework.
Its own CPU time is read from ``/proc/PID/schedstat`` by the benchmark and reported beside
the client's.

Endpoints (one MCP session per ``initialize``, named by ``Mcp-Session-Id``):

- ``POST /json``: Streamable HTTP answering each request with an ``application/json`` body;
  what the server sends unasked goes on the session's GET stream (``GET /json``,
  ``text/event-stream``, chunked, held open; queued until it is open).
- ``POST /sse``: the same, each request answered by a ``text/event-stream`` body (chunked):
  the notifications of a ``notify`` call, then the answer.
- ``GET /ws`` with ``Upgrade: websocket``: one JSON-RPC message per text frame.

Messages: ``initialize`` (plain MCP: the asked version echoed, ``tools`` capability, a new
session id), ``server/discover`` (``-32601``: a handshake-era server), ``ping`` (``{}``),
``tools/list`` (``big``, ``notify``), ``tools/call`` of ``big`` (``{"bytes": N}``: an
answer of exactly N bytes, one text block of ``x``) and ``notify`` (``{"count": N}``: N
``notifications/resources/updated`` first, then ``{"content": [...], "structuredContent":
{"sent": N}}``); any other request ``-32601``. Notifications and responses: ``202``.
``DELETE`` ends the session (its GET stream ends too).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import os
import socket
import sys
from typing import Any

import orjson

_WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_MAX_HEAD = 64 * 1024
_MAX_BODY = 64 * 1024 * 1024
_NOTIFY_BATCH = 128  # notifications per chunk written

_ACCEPTED = b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n"
_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
_BAD = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_OK_EMPTY = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
_SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n"
)
_TOOLS = {
    "tools": [
        {"name": "big", "inputSchema": {"type": "object", "properties": {"bytes": {"type": "integer"}}}},
        {"name": "notify", "inputSchema": {"type": "object", "properties": {"count": {"type": "integer"}}}},
    ]
}
_SESSION_IDS = itertools.count(1)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(message: bytes) -> bytes:
    return b"event: message\ndata: " + message + b"\n\n"


def _answer(request_id: Any, result: Any) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "result": result})


def _error(request_id: Any, code: int, message: str) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})


def _big(request_id: Any, size: int) -> bytes:
    """An answer of exactly ``size`` bytes (at least its envelope)."""
    head = (
        b'{"jsonrpc":"2.0","id":'
        + orjson.dumps(request_id)
        + b',"result":{"content":[{"type":"text","text":"'
    )
    tail = b'"}]}}'
    return head + b"x" * max(0, size - len(head) - len(tail)) + tail


def _notifications(count: int) -> list[bytes]:
    return [
        orjson.dumps(
            {
                "jsonrpc": "2.0",
                "method": "notifications/resources/updated",
                "params": {"uri": f"bench://n/{index}"},
            }
        )
        for index in range(count)
    ]


def _frame(payload: bytes, opcode: int = 1) -> bytes:
    """A server's (unmasked, final) WebSocket frame."""
    size = len(payload)
    if size < 126:
        return bytes((0x80 | opcode, size)) + payload
    if size < 65536:
        return bytes((0x80 | opcode, 126)) + size.to_bytes(2, "big") + payload
    return bytes((0x80 | opcode, 127)) + size.to_bytes(8, "big") + payload


def _unmask(payload: bytes, mask: bytes) -> bytes:
    size = len(payload)
    if not size:
        return b""
    key = (mask * (size // 4 + 1))[:size]
    return (int.from_bytes(payload, "little") ^ int.from_bytes(key, "little")).to_bytes(size, "little")


class Session:
    __slots__ = ("get_stream", "queued")

    def __init__(self) -> None:
        self.get_stream: Connection | None = None
        self.queued: list[bytes] = []  # events for the GET stream before it opens

    def send_unasked(self, messages: list[bytes]) -> None:
        for start in range(0, len(messages), _NOTIFY_BATCH):
            data = b"".join(_event(m) for m in messages[start : start + _NOTIFY_BATCH])
            if self.get_stream is not None and self.get_stream.transport is not None:
                self.get_stream.transport.write(_chunk(data))
            else:
                self.queued.append(data)


class Connection(asyncio.Protocol):
    """One TCP connection: HTTP/1.1 requests until it is upgraded to a WebSocket."""

    def __init__(self, sessions: dict[bytes, Session]) -> None:
        self.sessions = sessions
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.websocket = False
        self.fragments: list[bytes] = []
        self.streaming: Session | None = None  # the session whose GET stream this is

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.streaming is not None and self.streaming.get_stream is self:
            self.streaming.get_stream = None
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.websocket:
            self._frames()
        else:
            self._requests()

    # --- HTTP ---------------------------------------------------------------------------

    def _requests(self) -> None:
        buffer = self.buffer
        while self.transport is not None and not self.websocket:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > _MAX_HEAD:
                    self._fail()
                return
            lines = bytes(buffer[:end]).split(b"\r\n")
            try:
                method, target, _ = lines[0].split(b" ", 2)
            except ValueError:
                self._fail()
                return
            headers: dict[bytes, bytes] = {}
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                headers[name.strip().lower()] = value.strip()
            if b"transfer-encoding" in headers:
                self._fail()  # the clients measured send Content-Length
                return
            length = int(headers.get(b"content-length", b"0"))
            if length > _MAX_BODY:
                self._fail()
                return
            if len(buffer) < end + 4 + length:
                return
            body = bytes(buffer[end + 4 : end + 4 + length])
            del buffer[: end + 4 + length]
            self._request(method, target, headers, body)

    def _fail(self) -> None:
        if self.transport is not None:
            self.transport.write(_BAD)
            self.transport.close()

    def _request(self, method: bytes, target: bytes, headers: dict[bytes, bytes], body: bytes) -> None:
        transport = self.transport
        assert transport is not None
        path = target.split(b"?", 1)[0]
        if method == b"GET" and path == b"/ws" and headers.get(b"upgrade", b"").lower() == b"websocket":
            key = headers.get(b"sec-websocket-key", b"")
            accept = base64.b64encode(hashlib.sha1(key + _WS_GUID).digest())
            transport.write(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
            )
            self.websocket = True
            self._frames()
            return
        if path not in (b"/json", b"/sse"):
            transport.write(_NOT_FOUND)
            return
        session_id = headers.get(b"mcp-session-id")
        if method == b"DELETE":
            session = self.sessions.pop(session_id or b"", None)
            if session is not None and session.get_stream is not None:
                stream = session.get_stream.transport
                if stream is not None:
                    stream.write(b"0\r\n\r\n")
            transport.write(_OK_EMPTY if session is not None else _NOT_FOUND)
            return
        if method == b"GET":
            session = self.sessions.get(session_id or b"")
            if session is None:
                transport.write(_NOT_FOUND)
                return
            transport.write(_SSE_HEAD + b"\r\n")
            session.get_stream, self.streaming = self, session
            for data in session.queued:
                transport.write(_chunk(data))
            session.queued.clear()
            return
        if method != b"POST":
            transport.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            return
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError:
            transport.write(_BAD)
            return
        if not isinstance(message, dict) or "method" not in message or "id" not in message:
            transport.write(_ACCEPTED)  # a notification or a response
            return
        name = message["method"]
        sse = path == b"/sse"
        extra = b""
        session: Session | None
        if name == "initialize":
            new_id = b"s%d-%s" % (next(_SESSION_IDS), os.urandom(6).hex().encode())
            session = self.sessions[new_id] = Session()
            extra = b"Mcp-Session-Id: " + new_id + b"\r\n"
        else:
            session = self.sessions.get(session_id or b"")
            if session is None and name != "server/discover":
                transport.write(_NOT_FOUND)
                return
        before, answer = self._answer(message)
        if sse:
            events = [_event(m) for m in before]
            data = [_SSE_HEAD, extra, b"\r\n"]
            for start in range(0, len(events), _NOTIFY_BATCH):
                data.append(_chunk(b"".join(events[start : start + _NOTIFY_BATCH])))
            data += [_chunk(_event(answer)), b"0\r\n\r\n"]
            transport.write(b"".join(data))
            return
        if before and session is not None:
            session.send_unasked(before)
        transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n"
            % (len(answer), extra)
        )
        transport.write(answer)

    # --- answers ----------------------------------------------------------------------

    @staticmethod
    def _answer(message: dict[str, Any]) -> tuple[list[bytes], bytes]:
        """What a request makes: the messages sent before its answer, and the answer."""
        request_id, name = message["id"], message["method"]
        params = message.get("params") or {}
        if name == "ping":
            return [], _answer(request_id, {})
        if name == "initialize":
            asked = params.get("protocolVersion")
            result = {
                "protocolVersion": asked if isinstance(asked, str) else "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "bench-http", "version": "0"},
            }
            return [], _answer(request_id, result)
        if name == "tools/list":
            return [], _answer(request_id, _TOOLS)
        if name == "tools/call":
            arguments = params.get("arguments") or {}
            if params.get("name") == "big":
                return [], _big(request_id, int(arguments.get("bytes", 0)))
            if params.get("name") == "notify":
                count = int(arguments.get("count", 0))
                result = {"content": [{"type": "text", "text": "ok"}], "structuredContent": {"sent": count}}
                return _notifications(count), _answer(request_id, result)
        return [], _error(request_id, -32601, f"Method not found: {name}")

    # --- WebSocket --------------------------------------------------------------------

    def _frames(self) -> None:
        buffer, out = self.buffer, []
        while len(buffer) >= 2:
            first, second = buffer[0], buffer[1]
            size, offset = second & 0x7F, 2
            if size == 126:
                if len(buffer) < 4:
                    break
                size, offset = int.from_bytes(buffer[2:4], "big"), 4
            elif size == 127:
                if len(buffer) < 10:
                    break
                size, offset = int.from_bytes(buffer[2:10], "big"), 10
            masked = second & 0x80
            start = offset + (4 if masked else 0)
            if len(buffer) < start + size:
                break
            payload = bytes(buffer[start : start + size])
            if masked:
                payload = _unmask(payload, bytes(buffer[offset:start]))
            del buffer[: start + size]
            opcode = first & 0x0F
            if opcode in (0, 1):
                self.fragments.append(payload)
                if first & 0x80:
                    text, self.fragments = b"".join(self.fragments), []
                    out += self._ws_message(text)
            elif opcode == 9:
                out.append(_frame(payload, 10))
            elif opcode == 8:
                out.append(_frame(payload[:2], 8))
                assert self.transport is not None
                self.transport.write(b"".join(out))
                self.transport.close()
                return
        if out and self.transport is not None:
            self.transport.write(b"".join(out))

    def _ws_message(self, text: bytes) -> list[bytes]:
        try:
            message = orjson.loads(text)
        except orjson.JSONDecodeError:
            return []
        if not isinstance(message, dict) or "method" not in message or "id" not in message:
            return []
        before, answer = self._answer(message)
        return [_frame(m) for m in before] + [_frame(answer)]


async def serve() -> None:
    loop = asyncio.get_running_loop()
    sessions: dict[bytes, Session] = {}
    server = await loop.create_server(lambda: Connection(sessions), "127.0.0.1", 0, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    sys.stdout.write(f"{port}\n")
    sys.stdout.flush()
    stdin_closed = asyncio.Event()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def watch() -> None:
        await reader.read()  # EOF: the benchmark is done with this server
        stdin_closed.set()

    watcher = asyncio.ensure_future(watch())
    async with server:
        await stdin_closed.wait()
    watcher.cancel()


def main() -> None:
    asyncio.run(serve())


if __name__ == "__main__":
    main()

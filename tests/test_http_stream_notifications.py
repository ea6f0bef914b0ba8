"""Notifications a server sends on the event stream that answers a request (MCP 2025-11-25
"Transports", §Streamable HTTP: the server "MAY send JSON-RPC requests and notifications
before sending the JSON-RPC response"), read through the whole host: ``connect()``, the
Streamable HTTP transport, the event-stream splitter (``transports.event_stream``, whose
whole events of the common shapes are taken at once), the session and the application's
``on_notification``. The server is an ``httpx.MockTransport`` that answers the call with a
body cut into reads exactly as the test says. Every test runs on asyncio and trio.

Rules under test: every notification reaches the application once, in the order sent, and
before the call's answer returns; an event cut anywhere across reads reads as the whole
stream does; an event over ``Limits.max_sse_event_bytes`` loses the transport with one clear
sentence, after the events read before it; a notification that is not JSON is dropped with
a bounded warning and the stream goes on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import anyio
import httpx
import orjson
import pytest

from mcpl_host import ConnectionLost, HostHandlers, Limits, ServerConfig, connect
from mcpl_host.transports import http_common
from mcpl_host.transports.http import StreamableHTTPTransport, _Stream  # pyright: ignore[reportPrivateUsage]
from mcpl_host.transports.http_common import id_key
from mcpl_host.transports.http_params import HTTPParameters

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("logs")]

TIMEOUT = 20
URL = "http://127.0.0.1:9/mcp"
MCP_RESULT = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "s"}}
NOTIFICATION = "notifications/resources/updated"


def _note(index: int) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "method": NOTIFICATION, "params": {"uri": f"n://{index}"}})


def _event(message: bytes, shape: str) -> bytes:
    return (b"event: message\n" if shape == "named" else b"") + b"data: " + message + b"\n\n"


class _Chunks(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


class _Server:
    """Answers ``initialize`` with JSON, notifications with 202, the GET with 405, and
    ``tools/call`` with ``stream(request_id)``: the event stream's reads."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method != "POST":
            return httpx.Response(405 if request.method == "GET" else 200, stream=_Chunks([]))
        message = orjson.loads(await request.aread())
        if "id" not in message:
            return httpx.Response(202, stream=_Chunks([]))
        if message["method"] == "tools/call":
            headers = {"content-type": "text/event-stream"}
            return httpx.Response(200, headers=headers, stream=_Chunks(self.stream(message["id"])))
        result = MCP_RESULT if message["method"] == "initialize" else {}
        answer = orjson.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result})
        headers = {"content-type": "application/json", "mcp-session-id": "s1"}
        return httpx.Response(200, headers=headers, stream=_Chunks([answer]))


def _serve(monkeypatch: pytest.MonkeyPatch, served: Any) -> None:
    """Every HTTP client of the test talks to ``served`` (an ``httpx.MockTransport`` handler)."""
    built = http_common.build_client

    def build_client(params: Any, limits: Limits) -> httpx.AsyncClient:
        client = built(params, limits)
        client._transport = httpx.MockTransport(served)  # pyright: ignore[reportPrivateUsage]
        return client

    monkeypatch.setattr(http_common, "build_client", build_client)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Server]:
    """The server every HTTP client of the test talks to."""
    served = _Server(lambda _: [])
    _serve(monkeypatch, served)
    yield served


class _Seen(HostHandlers):
    def __init__(self) -> None:
        self.uris: list[str] = []

    def on_notification(self, server: str, method: str, params: Any) -> None:
        if method == NOTIFICATION:
            self.uris.append(params["uri"])


def _answer(request_id: object) -> bytes:
    result = {"content": [{"type": "text", "text": "ok"}], "structuredContent": {"sent": True}}
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "result": result})


def _cut(body: bytes, size: int) -> list[bytes]:
    return [body[i : i + size] for i in range(0, len(body), size)] if size else [body]


@pytest.mark.parametrize("shape", ["named", "bare"])
@pytest.mark.parametrize("read", [0, 1, 7, 50, 301])
async def test_notifications_before_the_answer_arrive_once_in_order_however_the_stream_is_cut(
    server: _Server, shape: str, read: int
) -> None:
    count = 40
    server.stream = lambda request_id: _cut(
        b"".join(_event(_note(i), shape) for i in range(count)) + _event(_answer(request_id), shape), read
    )
    seen = _Seen()
    with anyio.fail_after(TIMEOUT):
        async with connect(ServerConfig(url=URL), handlers=seen) as conn:
            result = await conn.mcp.call_tool("notify", {})
            # Every notification was handed over before the answer returned the call.
            assert seen.uris == [f"n://{i}" for i in range(count)]
    assert result.structured_content == {"sent": True}


async def test_an_event_over_its_bound_loses_the_transport_after_the_events_before_it(
    server: _Server,
) -> None:
    limits = Limits(max_sse_event_bytes=200, close_grace_seconds=1.0)
    big = orjson.dumps({"jsonrpc": "2.0", "method": NOTIFICATION, "params": {"uri": "x" * 300}})
    # One read: three whole notifications, one over the bound, the answer.
    server.stream = lambda request_id: [
        b"".join(_event(_note(i), "named") for i in range(3))
        + _event(big, "named")
        + _event(_answer(request_id), "named")
    ]
    seen = _Seen()
    with anyio.fail_after(TIMEOUT):
        async with connect(ServerConfig(url=URL, limits=limits), handlers=seen) as conn:
            with pytest.raises(ConnectionLost) as lost:
                await conn.mcp.call_tool("notify", {})
    assert "a Server-Sent Event over 200 bytes (limits.max_sse_event_bytes)" in str(lost.value)
    assert seen.uris == ["n://0", "n://1", "n://2"]


async def test_a_notification_that_is_not_json_is_dropped_with_a_bounded_warning_and_the_stream_goes_on(
    server: _Server, logs: list[dict[str, Any]]
) -> None:
    limits = Limits(dropped_lines_logged=2)
    bad = b'{"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": '
    server.stream = lambda request_id: [
        b"".join(_event(_note(i) if i % 2 else bad + b"%d" % i, "named") for i in range(10))
        + _event(_answer(request_id), "named")
    ]
    seen = _Seen()
    with anyio.fail_after(TIMEOUT):
        async with connect(ServerConfig(url=URL, limits=limits), handlers=seen) as conn:
            result = await conn.mcp.call_tool("notify", {})
    assert result.structured_content == {"sent": True}
    assert seen.uris == [f"n://{i}" for i in range(1, 10, 2)]
    dropped = [row for row in logs if row["event"].startswith("dropped a line from the server")]
    # Bounded (Limits.dropped_lines_logged): two said, then once that more go unlogged.
    assert [row.get("kind") for row in dropped] == ["not JSON", "not JSON", None]
    assert dropped[-1]["event"].endswith("more of these go unlogged on this connection")


async def test_an_event_begun_in_one_read_is_read_to_its_end_before_the_whole_events_after_it(
    server: _Server,
) -> None:
    # The first read begins an event of another type than "message"; the next ends it with
    # a data line (so it is no message: not handed over), then whole message events follow.
    server.stream = lambda request_id: [
        b"event: other\n",
        b"".join(_event(_note(i), "bare") for i in range(5)) + _event(_answer(request_id), "bare"),
    ]
    seen = _Seen()
    with anyio.fail_after(TIMEOUT):
        async with connect(ServerConfig(url=URL), handlers=seen) as conn:
            await conn.mcp.call_tool("notify", {})
            assert seen.uris == [f"n://{i}" for i in range(1, 5)]


@pytest.mark.parametrize("reads", [1, 2])
async def test_the_answer_is_found_among_the_notifications_of_its_read(reads: int) -> None:
    # Whether a request's stream brought its answer decides whether a stream that ends is
    # resumed; a read's lines are looked at for it only where the read may hold an answer.
    named_id = orjson.dumps({"jsonrpc": "2.0", "method": NOTIFICATION, "params": {"uri": "n://x", "id": 7}})
    other = orjson.dumps({"jsonrpc": "2.0", "id": 8, "result": {}})  # answers another request
    messages = [_note(0), named_id, other, _note(1), _answer(7), _note(2)]
    body = b"".join(_event(message, "named") for message in messages)
    cut = len(body) // 2 if reads == 2 else len(body)
    for key, answered in ((id_key(7), True), (id_key(9), False)):
        async with StreamableHTTPTransport(HTTPParameters(URL)) as transport:
            response = httpx.Response(
                200, headers={"content-type": "text/event-stream"}, stream=_Chunks([body[:cut], body[cut:]])
            )
            stream = _Stream(key=key)
            assert await transport._read_events(response, stream) == len(messages)  # pyright: ignore[reportPrivateUsage]
            assert stream.answered is answered
            assert [transport.receive_now() for _ in messages] == messages


BIG = 8 * 2**20  # bytes: the notification a test checks is not kept


def _in_reads(body: bytes) -> Iterator[bytes]:
    """``body`` in reads of 64 KiB, as from a socket."""
    for start in range(0, len(body), 2**16):
        yield body[start : start + 2**16]


def _big_note() -> bytes:
    """The event of a ``BIG`` notification (made anew: its caller keeps it or not)."""
    return _event(
        orjson.dumps({"jsonrpc": "2.0", "method": NOTIFICATION, "params": {"uri": "x" * BIG}}), "named"
    )


class _BigTaken(HostHandlers):
    """Sets ``taken`` when the ``BIG`` notification reaches the application, keeping nothing."""

    def __init__(self) -> None:
        self.taken = anyio.Event()

    def on_notification(self, server: str, method: str, params: Any) -> None:
        if method == NOTIFICATION and len(params["uri"]) == BIG:
            self.taken.set()


async def _kept_once_taken(handlers: _BigTaken, send: Callable[[], Awaitable[None]]) -> int:
    """Bytes (``tracemalloc``) still allocated once the notification ``send()`` starts is
    taken and every task waits again."""
    from .memory import kept_bytes

    with kept_bytes() as kept:
        await send()
        await handlers.taken.wait()
        await anyio.wait_all_tasks_blocked()  # every reader back at its wait
    return kept.bytes


async def test_the_listening_stream_keeps_nothing_of_its_last_read_while_it_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The reader of the server's event stream waits for the next read holding nothing of
    # the last one: an 8 MiB notification the application has taken is freed while the
    # stream stays open and silent, not kept until the server next writes on it.
    go, end = anyio.Event(), anyio.Event()

    class _Listening(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            await go.wait()
            for read in _in_reads(_big_note()):
                yield read
            await end.wait()

    async def served(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=_Listening())
        return await _Server(lambda _: [])(request)

    async def send() -> None:
        go.set()

    _serve(monkeypatch, served)
    handlers = _BigTaken()
    with anyio.fail_after(TIMEOUT):
        async with connect(ServerConfig(url=URL), handlers=handlers):
            try:
                kept = await _kept_once_taken(handlers, send)
            finally:
                end.set()
    assert kept < 2**20, f"{kept} bytes kept after the notification was taken"


async def test_the_http_sse_reader_keeps_nothing_of_its_last_read_while_it_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The same for the HTTP+SSE transport (MCP 2024-11-05): its one event stream's reader
    # holds nothing of an 8 MiB notification once the application has taken it.
    events, queued = anyio.create_memory_object_stream[bytes](16)

    class _Stream(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield b"event: endpoint\ndata: /messages\n\n"
            async for event in queued:
                for read in _in_reads(event):
                    yield read
                del event

    async def served(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=_Stream())
        message = orjson.loads(await request.aread())
        if "id" in message:
            if message["method"] == "initialize":
                answer: dict[str, Any] = {"result": MCP_RESULT}
            else:
                answer = {"error": {"code": -32601, "message": "no such method"}}
            await events.send(
                _event(orjson.dumps({"jsonrpc": "2.0", "id": message["id"], **answer}), "named")
            )
        return httpx.Response(202, stream=_Chunks([]))

    async def send() -> None:
        await events.send(_big_note())

    _serve(monkeypatch, served)
    handlers = _BigTaken()
    with anyio.fail_after(TIMEOUT):
        async with connect(ServerConfig(url="http://127.0.0.1:9/sse", transport="sse"), handlers=handlers):
            try:
                kept = await _kept_once_taken(handlers, send)
            finally:
                events.close()
    assert kept < 2**20, f"{kept} bytes kept after the notification was taken"

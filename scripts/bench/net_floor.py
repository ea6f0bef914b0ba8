"""The floor clients over the network: the least a Python MCP client can do on the libraries
mcpl-host itself uses.

- ``HTTPFloor``: httpx's ``AsyncClient`` (the pool sized as mcpl-host sizes its own:
  ``Limits.max_http_connections`` connections, 16 kept alive) posting each JSON-RPC body,
  ``orjson`` for the bodies, the session id and protocol version headers; a JSON answer is
  ``response.content`` parsed, an event-stream answer is read raw and split on blank lines
  (only ``data:`` lines kept). After the handshake a GET stream carries what the server
  sends unasked. No timeouts, no validation, no bounds, no resumption.
- ``WSFloor``: wsproto over an anyio TCP stream: one writer task joining every queued frame
  into one write (as the stdio floor does), one reader task; pings answered.

Both count the ``notifications/resources/updated`` they receive through ``on_notification``
(called with the method) and answer nothing the server asks (the server asks nothing).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.abc
import httpx
import orjson
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Ping, RejectConnection, Request, TextMessage

__all__ = ["HTTPFloor", "WSFloor", "open_http_floor", "open_ws_floor"]

_INITIALIZE = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "floor", "version": "0"},
}


class _Pending:
    """Request ids and their answers: ``slot()`` makes one, ``dispatch()`` fills it."""

    def __init__(self, on_notification: Callable[[str], None]) -> None:
        self.slots: dict[int, list[Any]] = {}  # id -> [Event, response]
        self.next_id = 0
        self.on_notification = on_notification

    def message(self, method: str, params: Any) -> tuple[int, list[Any], bytes]:
        self.next_id += 1
        slot: list[Any] = [anyio.Event(), None]
        self.slots[self.next_id] = slot
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        return self.next_id, slot, orjson.dumps(message)

    def dispatch(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if method is None:
            slot = self.slots.pop(message["id"])
            slot[1] = message
            slot[0].set()
        elif "id" not in message:
            self.on_notification(method)


def _result(response: dict[str, Any]) -> Any:
    if "error" in response:
        raise RuntimeError(response["error"])
    return response.get("result")


class HTTPFloor:
    """Streamable HTTP on httpx (module docstring). ``request()`` returns the ``result``
    object or raises ``RuntimeError`` with the ``error`` object."""

    def __init__(self, client: httpx.AsyncClient, url: str, on_notification: Callable[[str], None]) -> None:
        self._client = client
        self._url = url
        self._pending = _Pending(on_notification)
        self._headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}

    async def request(self, method: str, params: Any = None) -> Any:
        request_id, slot, body = self._pending.message(method, params)
        async with self._client.stream("POST", self._url, content=body, headers=self._headers) as response:
            if method == "initialize":
                self._headers["Mcp-Session-Id"] = response.headers["mcp-session-id"]
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                await self._read_events(response)
            else:
                self._pending.dispatch(orjson.loads(await response.aread()))
        if not slot[0].is_set():
            raise RuntimeError(f"no answer to request {request_id}")
        return _result(slot[1])

    async def notify(self, method: str) -> None:
        body = orjson.dumps({"jsonrpc": "2.0", "method": method})
        await self._client.post(self._url, content=body, headers=self._headers)

    async def _read_events(self, response: httpx.Response) -> None:
        buffer = bytearray()
        scan = 0
        async for chunk in response.aiter_raw():
            buffer += chunk
            while (end := buffer.find(b"\n\n", scan)) >= 0:
                event = bytes(buffer[:end])
                del buffer[: end + 2]
                scan = 0
                data = [
                    line[5:].removeprefix(b" ") for line in event.split(b"\n") if line.startswith(b"data:")
                ]
                if data:
                    self._pending.dispatch(orjson.loads(b"\n".join(data)))
            scan = max(0, len(buffer) - 1)

    async def get_stream(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        headers = {key: value for key, value in self._headers.items() if key != "Content-Type"}
        headers["Accept"] = "text/event-stream"
        async with self._client.stream("GET", self._url, headers=headers) as response:
            task_status.started()
            if response.status_code == 200:
                await self._read_events(response)


@asynccontextmanager
async def open_http_floor(
    url: str, on_notification: Callable[[str], None]
) -> AsyncGenerator[HTTPFloor, None]:
    """A handshaken ``HTTPFloor`` with its GET stream open; on exit DELETE the session."""
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=16)
    async with httpx.AsyncClient(limits=limits, timeout=None) as client, anyio.create_task_group() as tg:
        floor = HTTPFloor(client, url, on_notification)
        await floor.request("initialize", _INITIALIZE)
        await floor.notify("notifications/initialized")
        await tg.start(floor.get_stream)
        try:
            yield floor
        finally:
            tg.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                await client.delete(url, headers=floor._headers)


class WSFloor:
    """JSON-RPC over one WebSocket on wsproto (module docstring)."""

    def __init__(
        self, stream: anyio.abc.ByteStream, ws: WSConnection, on_notification: Callable[[str], None]
    ):
        self._stream = stream
        self._ws = ws
        self._pending = _Pending(on_notification)
        self._queue: list[bytes] = []
        self._wake = anyio.Event()

    async def request(self, method: str, params: Any = None) -> Any:
        _, slot, body = self._pending.message(method, params)
        self._send(body)
        await slot[0].wait()
        return _result(slot[1])

    def notify(self, method: str) -> None:
        self._send(orjson.dumps({"jsonrpc": "2.0", "method": method}))

    def _send(self, body: bytes) -> None:
        self._queue.append(self._ws.send(TextMessage(data=body.decode())))
        self._wake.set()

    async def write_loop(self) -> None:
        while True:
            if not self._queue:
                self._wake = anyio.Event()
                await self._wake.wait()
            batch, self._queue = self._queue, []
            await self._stream.send(b"".join(batch))

    async def read_loop(self) -> None:
        parts: list[str] = []
        while True:
            self._ws.receive_data(await self._stream.receive(65536))
            for event in self._ws.events():
                if isinstance(event, TextMessage):
                    parts.append(event.data)
                    if event.message_finished:
                        text = parts[0] if len(parts) == 1 else "".join(parts)
                        parts.clear()
                        self._pending.dispatch(orjson.loads(text))
                elif isinstance(event, Ping):
                    self._queue.append(self._ws.send(event.response()))
                    self._wake.set()


@asynccontextmanager
async def open_ws_floor(url: str, on_notification: Callable[[str], None]) -> AsyncGenerator[WSFloor, None]:
    """A handshaken ``WSFloor``; on exit the socket is closed."""
    parts = urlsplit(url)
    stream = await anyio.connect_tcp(parts.hostname or "127.0.0.1", parts.port or 80)
    async with stream, anyio.create_task_group() as tg:
        ws = WSConnection(ConnectionType.CLIENT)
        await stream.send(ws.send(Request(host=parts.netloc, target=parts.path or "/")))
        accepted = False
        while not accepted:
            ws.receive_data(await stream.receive(65536))
            for event in ws.events():
                if isinstance(event, RejectConnection):
                    raise RuntimeError(f"WebSocket upgrade refused: {event.status_code}")
                accepted = accepted or isinstance(event, AcceptConnection)
        floor = WSFloor(stream, ws, on_notification)
        tg.start_soon(floor.read_loop)
        tg.start_soon(floor.write_loop)
        await floor.request("initialize", _INITIALIZE)
        floor.notify("notifications/initialized")
        try:
            yield floor
        finally:
            tg.cancel_scope.cancel()

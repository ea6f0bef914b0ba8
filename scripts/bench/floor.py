"""The floor client: the least a Python JSON-RPC client over a pipe can do.

anyio, orjson, a dict of id -> slot, one writer task that joins every queued message into
one write; no timeouts, no validation, no logging. It answers the server's requests
minimally (``push/event``: ``{"accepted": true}``, anything else: ``{}``). What it costs is
the floor the other clients are measured against.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import orjson

__all__ = ["FloorClient", "open_floor"]

_ACCEPTED = {"accepted": True}
_EMPTY: dict[str, Any] = {}


class FloorClient:
    """Requests over ``process``'s stdin/stdout. ``request()`` returns the ``result``
    object, or raises ``RuntimeError`` carrying the ``error`` object."""

    def __init__(self, process: anyio.abc.Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self._stdin = process.stdin
        self._stdout = process.stdout
        self._pending: dict[int, list[Any]] = {}  # id -> [Event, response]
        self._next_id = 0
        self._queue: list[bytes] = []
        self._wake = anyio.Event()

    async def request(self, method: str, params: Any = None) -> Any:
        self._next_id += 1
        request_id = self._next_id
        slot: list[Any] = [anyio.Event(), None]
        self._pending[request_id] = slot
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self._send(orjson.dumps(message))
        await slot[0].wait()
        response = slot[1]
        if "error" in response:
            raise RuntimeError(response["error"])
        return response.get("result")

    def notify(self, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self._send(orjson.dumps(message))

    def _send(self, line: bytes) -> None:
        self._queue.append(line)
        self._wake.set()

    async def write_loop(self) -> None:
        while True:
            if not self._queue:
                self._wake = anyio.Event()
                await self._wake.wait()
            batch, self._queue = self._queue, []
            batch.append(b"")
            await self._stdin.send(b"\n".join(batch))

    async def read_loop(self) -> None:
        parts: list[bytes] = []
        async for chunk in self._stdout:
            start = 0
            while (newline := chunk.find(b"\n", start)) >= 0:
                if parts:
                    parts.append(chunk[start:newline])
                    line = b"".join(parts)
                    parts = []
                else:
                    line = chunk[start:newline]
                self._dispatch(orjson.loads(line))
                start = newline + 1
            if start < len(chunk):
                parts.append(chunk[start:])

    def _dispatch(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if method is None:
            slot = self._pending.pop(message["id"])
            slot[1] = message
            slot[0].set()
        elif "id" in message:
            result = _ACCEPTED if method == "push/event" else _EMPTY
            self._send(orjson.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}))


@asynccontextmanager
async def open_floor(
    command: str, args: list[str], *, mcpl: bool = True
) -> AsyncGenerator[FloorClient, None]:
    """Spawn ``command args``, run the MCP handshake (and with ``mcpl`` the MCPL policy
    exchange granting ``pushEvents``), yield the client; on exit close stdin and reap."""
    process = await anyio.open_process([command, *args], stderr=subprocess.DEVNULL)
    async with process, anyio.create_task_group() as tg:
        client = FloorClient(process)
        tg.start_soon(client.read_loop)
        tg.start_soon(client.write_loop)
        await client.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "floor", "version": "0"},
            },
        )
        client.notify("notifications/initialized")
        if mcpl:
            await client.request(
                "featureSets/update",
                {"effectiveCapabilities": ["pushEvents"], "enabled": ["bench.flood"], "disabled": []},
            )
        try:
            yield client
        finally:
            tg.cancel_scope.cancel()

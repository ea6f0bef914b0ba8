"""The three clients behind one small interface, so every measurement drives them alike.

A ``Driver`` is two awaitables: ``ping()`` and ``call_tool(name, arguments)``, which returns
a ``ToolOutcome`` (the length of the first text block, in characters, and the
``structuredContent`` object or None). ``open_client(kind, server)`` spawns ``server
--mcpl`` and yields a connected, handshaken driver; on exit the server is shut down.

mcpl-host is driven through its public API only (``connect``, ``ping``,
``call_tool``), all in ``open_mcpl_host``: the one function to adapt if that API changes.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from bench.floor import open_floor

__all__ = ["CLIENTS", "ClientKind", "Driver", "ToolOutcome", "open_client", "sdk_available"]

ClientKind = Literal["mcpl-host", "sdk", "floor"]
CLIENTS: tuple[ClientKind, ...] = ("mcpl-host", "sdk", "floor")


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """``text_length``: characters of the first text block (0 without one);
    ``structured``: the ``structuredContent`` value as received (None when absent)."""

    text_length: int
    structured: Any


@dataclass(frozen=True, slots=True)
class Driver:
    ping: Callable[[], Awaitable[object]]
    call_tool: Callable[[str, dict[str, Any]], Awaitable[ToolOutcome]]


def sdk_available() -> bool:
    """True when the official ``mcp`` SDK client can be imported (``pip install -e '.[bench]'``)."""
    try:
        importlib.import_module("mcp.client.stdio")
    except ImportError:
        return False
    return True


def _outcome(content: Any, structured: Any) -> ToolOutcome:
    try:
        text = content[0]["text"]
    except (IndexError, KeyError, TypeError):
        text = None
    return ToolOutcome(len(text) if isinstance(text, str) else 0, structured)


@asynccontextmanager
async def open_mcpl_host(server: Path) -> AsyncGenerator[Driver, None]:
    """mcpl-host with its defaults (limits, timeouts, logging), granting ``pushEvents``.

    Through the public API of the revision imported: ``connect(ServerConfig(...))`` and
    ``conn.mcp``, or, for a revision before them (``scripts/bench_compare.py`` against an
    older base), ``connect_stdio(...)`` and the calls on the connection."""
    import mcpl_host

    policy = mcpl_host.GrantPolicy(grant=("pushEvents",))
    if hasattr(mcpl_host, "connect_stdio"):
        before: Any = mcpl_host  # its names of then, unknown to this revision's types
        opened: Any = before.connect_stdio(str(server), ["--mcpl"], policy=policy)
    else:
        config = mcpl_host.ServerConfig(command=str(server), args=("--mcpl",), grant_policy=policy)
        opened = mcpl_host.connect(config)
    async with opened as conn:
        calls = getattr(conn, "mcp", conn)

        async def call_tool(name: str, arguments: dict[str, Any]) -> ToolOutcome:
            result = await calls.call_tool(name, arguments)
            return _outcome(result.content, result.structured_content)

        yield Driver(ping=calls.ping, call_tool=call_tool)


@asynccontextmanager
async def open_sdk(server: Path) -> AsyncGenerator[Driver, None]:
    """The official MCP Python SDK client (``mcp``), with its defaults."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=str(server), args=["--mcpl"])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()

        async def call_tool(name: str, arguments: dict[str, Any]) -> ToolOutcome:
            result = await session.call_tool(name, arguments)
            blocks = result.content
            text = getattr(blocks[0], "text", None) if blocks else None
            return ToolOutcome(len(text) if isinstance(text, str) else 0, result.structured_content)

        yield Driver(ping=session.send_ping, call_tool=call_tool)


@asynccontextmanager
async def open_floor_driver(server: Path) -> AsyncGenerator[Driver, None]:
    """The floor client (``bench.floor``)."""
    async with open_floor(str(server), ["--mcpl"]) as client:

        async def ping() -> object:
            return await client.request("ping")

        async def call_tool(name: str, arguments: dict[str, Any]) -> ToolOutcome:
            result = await client.request("tools/call", {"name": name, "arguments": arguments})
            return _outcome(result.get("content"), result.get("structuredContent"))

        yield Driver(ping=ping, call_tool=call_tool)


def open_client(kind: ClientKind, server: Path) -> AbstractAsyncContextManager[Driver]:
    """A connected driver of ``kind`` talking to ``server``."""
    if kind == "mcpl-host":
        return open_mcpl_host(server)
    if kind == "sdk":
        return open_sdk(server)
    return open_floor_driver(server)

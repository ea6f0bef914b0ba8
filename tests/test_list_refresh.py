"""``notifications/*/list_changed`` in bursts: refreshes are coalesced, one in flight and
one pending per list (``mcpl_host/coalesce.py``), in the library's list caches
(``MCPClient``) and in the shell's catalog; the list kept is the newest.

Over real pipes to ``fixtures/list_changed_server.py``, which records each list request it
gets and the version of the list it answered.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpl_host import ServerConfig, ServerConnection, connect
from mcpl_host.coalesce import Coalesce

from . import forkserver
from .conftest import FIXTURES
from .test_cli import CLI, TIMEOUT
from .test_http_transport import bridge as http_bridge
from .test_websocket import bridge as ws_bridge
from .wire import FAST

SERVER = str(FIXTURES / "list_changed_server.py")
#: Changes of each list in a burst. 2,000 prove the rule as 20,000 do at a tenth of the
#: time: a refresh per change (no coalescing) makes about 1,400 listings of each list here,
#: and a shell that lists on each change about 2,000.
BURST = 2_000
#: Over HTTP (the bridge sends each change as its own event on the GET stream) 20,000
#: changes take about 25 s to arrive (longer under load); a smaller burst keeps it short.
HTTP_BURST = 1_000


def recorded(path: Path) -> list[dict[str, Any]]:
    return [json.loads(row) for row in path.read_text().splitlines() if row] if path.exists() else []


def test_one_in_flight_one_pending() -> None:
    state = Coalesce()
    assert state.ask() is True  # idle: run now
    assert [state.ask() for _ in range(5)] == [False] * 5  # one pending, however many asked
    assert state.done() is True  # the pending one runs now
    assert state.done() is False  # nothing asked meanwhile: idle
    assert state.idle
    assert state.ask() is True


@asynccontextmanager
async def connected(transport: str, tmp_path: Path, record: Path) -> AsyncIterator[ServerConnection]:
    """The fixture over ``transport``: its own stdio, or bridged to WebSocket or HTTP."""
    command = [sys.executable, SERVER, str(record)]
    if transport == "stdio":
        async with connect(ServerConfig(command=command[0], args=tuple(command[1:]), limits=FAST)) as conn:
            yield conn
    elif transport == "websocket":
        async with (
            ws_bridge(command=command) as running,
            connect(ServerConfig(url=running.url(), limits=FAST)) as conn,
        ):
            yield conn
    else:
        async with (
            http_bridge(tmp_path, command=command) as server,
            connect(ServerConfig(url=server.url(), limits=FAST)) as conn,
        ):
            yield conn


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["stdio", "websocket", "http"])
async def test_a_burst_of_list_changed_costs_at_most_two_listings_and_keeps_the_newest(
    tmp_path: Path, transport: str
) -> None:
    record = tmp_path / "lists.jsonl"
    methods = ("tools/list", "resources/list", "prompts/list")
    burst = HTTP_BURST if transport == "http" else BURST
    with anyio.fail_after(TIMEOUT):
        async with connected(transport, tmp_path, record) as conn:
            assert [t.name for t in await conn.mcp.list_tools()] == ["v0", "burst"]
            await conn.mcp.list_resources()
            await conn.mcp.list_prompts()
            await conn.mcp.call_tool("burst", {"n": burst, "lists": ["tools", "resources", "prompts"]})
            await conn.mcp.lists_settled()
            assert conn.mcp.cached_tools is not None and conn.mcp.cached_tools[0].name == f"v{burst}"
            assert (
                conn.mcp.cached_resources is not None
                and conn.mcp.cached_resources[0].uri == f"test://v{burst}"
            )
            assert conn.mcp.cached_prompts is not None and conn.mcp.cached_prompts[0].name == f"v{burst}"
    rows = recorded(record)
    for method in methods:
        versions = [row["version"] for row in rows if row["method"] == method]
        assert versions[0] == 0 and versions[-1] == burst
        if transport != "http":
            # One stream carries the burst and the answers in order: no refresh ends before
            # the last change is read, so the first listing is followed by two at most.
            assert len(versions) <= 3, (method, len(versions))
        else:
            # The changes come on the GET stream, each answer on its own POST stream: a
            # refresh may end while changes still arrive, and the next starts after one more
            # change; never more than one listing per change, and the last is the newest.
            assert len(versions) <= 1 + burst, (method, len(versions))


def test_the_shell_refreshes_its_catalog_once_per_burst(tmp_path: Path) -> None:
    record = tmp_path / "lists.jsonl"
    done = forkserver.run(
        [*CLI, "shell", "--", sys.executable, SERVER, str(record)],
        input=f"call burst n={BURST}\ncall burst n=1\n",
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    listings = [row for row in recorded(record) if row["method"] == "tools/list"]
    # ready: 1; each call lists the tools first: 2; the library's refreshes after each burst:
    # at most 2 each; the shell's catalog reads the refreshed cache and lists nothing.
    assert len(listings) <= 1 + 2 + 2 * 2, len(listings)

"""The caching hints of list results (MCP 2026-07-28 "Caching": ``ttlMs``, ``cacheScope``;
docs/protocol.md S11): the pure rules, and the list caches of ``MCPClient`` deciding to
serve or to list again with a clock passed in (no sleeps), in both eras."""

from __future__ import annotations

from typing import Any

import pytest

from mcpl_host.caching import CacheHint, Freshness, cache_hint, is_fresh, list_freshness
from mcpl_host.limits import Limits
from mcpl_host.mcp_methods import MCPClient

pytestmark = pytest.mark.anyio

DAY = Limits().max_cache_ttl_seconds


def hint(result: Any) -> CacheHint:
    return cache_hint(result, max_ttl_seconds=DAY)


@pytest.mark.parametrize(
    ("ttl", "seconds"),
    [
        (1500, 1.5),
        (0, 0.0),
        (-5, 0.0),  # negative: treated as 0
        (None, 0.0),  # absent: immediately stale
        (2000.0, 2.0),  # a JSON number without a fraction is a whole number
        (1.5, 0.0),
        ("1000", 0.0),
        (True, 0.0),
        (float("inf"), 0.0),
        (10**400, DAY),  # cut to Limits.max_cache_ttl_seconds (no float overflow)
        (10**12, DAY),
    ],
)
def test_ttl_ms_is_read_as_the_revision_says(ttl: Any, seconds: float) -> None:
    result = {"tools": []} if ttl is None else {"tools": [], "ttlMs": ttl}
    assert hint(result).ttl_seconds == seconds


@pytest.mark.parametrize(
    ("scope", "read"),
    [("public", "public"), ("private", "private"), (None, "private"), ("PUBLIC", "private"), (1, "private")],
)
def test_cache_scope_is_public_only_when_said(scope: Any, read: str) -> None:
    result = {"ttlMs": 1} if scope is None else {"ttlMs": 1, "cacheScope": scope}
    assert hint(result).scope == read


def test_a_result_that_is_not_an_object_has_no_hint() -> None:
    assert hint([1, 2]) == CacheHint(0.0, "private")


def test_a_list_is_fresh_until_its_first_page_goes_stale_and_private_if_any_page_is() -> None:
    pages = [(100.0, CacheHint(60.0, "public")), (101.0, CacheHint(10.0, "private"))]
    assert list_freshness(pages) == Freshness(111.0, "private")
    assert list_freshness([(5.0, CacheHint(1.0, "public"))]) == Freshness(6.0, "public")
    assert list_freshness([]).scope == "private" and not is_fresh(list_freshness([]), 0.0)


def test_fresh_strictly_before_the_end() -> None:
    freshness = Freshness(10.0, "public")
    assert is_fresh(freshness, 9.999) and not is_fresh(freshness, 10.0) and not is_fresh(None, 0.0)


# -- MCPClient's list caches, with a clock passed in ------------------------------------------------


class Server:
    """Answers ``tools/list`` (two pages) and ``prompts/list`` with the hints given; counts
    requests."""

    def __init__(self, **hints: Any) -> None:
        self.hints = hints
        self.sent: list[str] = []
        self.version = 1

    async def request(self, method: str, params: Any = None, **_: Any) -> Any:
        self.sent.append(method)
        if method == "tools/list":
            if params is None:
                return {
                    "tools": [{"name": f"a{self.version}", "inputSchema": {}}],
                    "nextCursor": "2",
                    **self.hints,
                }
            return {"tools": [{"name": "b", "inputSchema": {}}], **self.hints}
        return {"prompts": [{"name": "p"}], **self.hints}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def client(server: Server, *, stateless: bool = True) -> tuple[MCPClient, Clock]:
    mcp = MCPClient(server, Limits(), stateless=lambda: stateless)
    clock = Clock()
    mcp.clock = clock
    return mcp, clock


async def test_a_fresh_list_is_served_without_a_request_and_listed_again_once_stale() -> None:
    server = Server(ttlMs=30_000, cacheScope="public")
    mcp, clock = client(server)
    first = await mcp.list_tools()
    assert [t.name for t in first] == ["a1", "b"] and server.sent == ["tools/list", "tools/list"]
    assert mcp.cache_freshness["tools"] == Freshness(1030.0, "public")
    server.version = 2
    clock.now = 1029.9
    assert [t.name for t in await mcp.list_tools()] == ["a1", "b"]
    assert len(server.sent) == 2  # served from the cache
    clock.now = 1030.0
    assert [t.name for t in await mcp.list_tools()] == ["a2", "b"]
    assert len(server.sent) == 4 and mcp.cache_freshness["tools"].until == 1060.0


async def test_refresh_lists_again_while_fresh() -> None:
    server = Server(ttlMs=30_000)
    mcp, _ = client(server)
    await mcp.list_prompts()
    await mcp.list_prompts()
    assert server.sent == ["prompts/list"]
    await mcp.list_prompts(refresh=True)
    assert server.sent == ["prompts/list", "prompts/list"]
    assert mcp.cache_freshness["prompts"].scope == "private"  # no cacheScope: private


@pytest.mark.parametrize("hints", [{}, {"ttlMs": 0, "cacheScope": "public"}, {"ttlMs": -1}])
async def test_a_list_without_a_positive_ttl_is_listed_each_time(hints: dict[str, Any]) -> None:
    server = Server(**hints)
    mcp, _ = client(server)
    await mcp.list_prompts()
    await mcp.list_prompts()
    assert server.sent == ["prompts/list", "prompts/list"]


async def test_a_handshake_era_server_is_listed_each_time_whatever_it_sends() -> None:
    server = Server(ttlMs=30_000, cacheScope="public")
    mcp, _ = client(server, stateless=False)
    await mcp.list_tools()
    await mcp.list_tools()
    assert server.sent == ["tools/list"] * 4 and mcp.cache_freshness == {}


async def test_a_list_said_changed_is_stale_at_once() -> None:
    server = Server(ttlMs=30_000)
    mcp, _ = client(server)
    await mcp.list_prompts()
    mcp.on_notification("notifications/prompts/list_changed", {})  # no spawn: no background refresh
    assert "prompts" not in mcp.cache_freshness
    await mcp.list_prompts()
    assert server.sent == ["prompts/list", "prompts/list"]


async def test_a_page_with_a_shorter_ttl_shortens_the_list() -> None:
    class Pages(Server):
        async def request(self, method: str, params: Any = None, **_: Any) -> Any:
            self.sent.append(method)
            if params is None:
                return {"tools": [], "nextCursor": "2", "ttlMs": 60_000, "cacheScope": "public"}
            return {"tools": [], "ttlMs": 5_000, "cacheScope": "private"}

    mcp, _ = client(Pages())
    await mcp.list_tools()
    assert mcp.cache_freshness["tools"] == Freshness(1005.0, "private")

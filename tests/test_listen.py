"""``subscriptions/listen`` on a stateless (MCP 2026-07-28) connection: list caches refreshed
in the background, resource updates to the application, the listen re-issued when its
filter changes, never timed out, ended cleanly with the connection.

Rules under test: MCP 2026-07-28 "Subscriptions" and "Cancellation"; ``mcpl_host.listen``
(docs/protocol.md S9). Pure rules by plain calls; the I/O against
``fixtures/sdk_features_server.py`` (the MCP Python SDK 2.x: its ``ListenHandler``) over
stdio and Streamable HTTP, and ``fixtures/scripted_server.py`` for the exact wire.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from subprocess import DEVNULL, PIPE
from typing import Any

import anyio
import anyio.abc
import pytest

from mcpl_host import HostHandlers, Limits, ServerConfig, ServerConnection, connect
from mcpl_host.listen import (
    SUBSCRIPTION_ID_KEY,
    acknowledged_filter,
    after_end,
    ending_of_error,
    honors_uri,
    may_subscribe,
    subscription_id,
    wanted_filter,
)
from mcpl_host.mcp_methods import SubscriptionRefused
from mcpl_host.stateless import stream_lost_answer

from .test_client_features_real import FAST, SDK_FEATURES, TIMEOUT, sdk_over_http
from .wire import Script, TestHandlers, mark, port_line

pytestmark = pytest.mark.anyio

NOTE = "fixture://note"
ALL_CHANGES = {
    "tools": {"listChanged": True},
    "resources": {"listChanged": True, "subscribe": True},
    "prompts": {"listChanged": True},
}


# -- pure rules ------------------------------------------------------------------------------


def test_the_filter_asks_for_each_listed_list_whose_capability_says_list_changed() -> None:
    assert wanted_filter(ALL_CHANGES, {"tools", "prompts"}, ()) == {
        "toolsListChanged": True,
        "promptsListChanged": True,
    }
    caps = {"tools": {}, "resources": {"listChanged": True}, "prompts": {"listChanged": "yes"}}
    assert wanted_filter(caps, {"tools", "resources", "prompts"}, ()) == {"resourcesListChanged": True}


def test_the_filter_carries_the_subscribed_uris_sorted() -> None:
    assert wanted_filter({}, (), {"b://2", "a://1"}) == {"resourceSubscriptions": ["a://1", "b://2"]}
    assert wanted_filter(ALL_CHANGES, {"tools"}, {"x://"}) == {
        "toolsListChanged": True,
        "resourceSubscriptions": ["x://"],
    }


def test_nothing_to_listen_for_is_no_filter() -> None:
    assert wanted_filter(ALL_CHANGES, (), ()) is None  # nothing listed, nothing subscribed
    assert wanted_filter({"tools": {}}, {"tools"}, ()) is None  # no listChanged
    assert wanted_filter({"tools": "bad"}, {"tools"}, ()) is None


def test_a_resource_subscription_needs_resources_subscribe() -> None:
    assert may_subscribe(ALL_CHANGES)
    assert not may_subscribe({"resources": {"listChanged": True}})
    assert not may_subscribe({"resources": {"subscribe": 1}})
    assert not may_subscribe({})


def test_frames_are_read_by_their_subscription_id_and_the_acknowledged_filter() -> None:
    params = {"_meta": {SUBSCRIPTION_ID_KEY: 7}, "notifications": {"toolsListChanged": True}}
    assert subscription_id(params) == 7
    assert subscription_id({"uri": "x"}) is None and subscription_id(None) is None
    assert acknowledged_filter(params) == {"toolsListChanged": True}
    assert acknowledged_filter({"notifications": []}) == {} and acknowledged_filter("x") == {}
    assert honors_uri({"resourceSubscriptions": ["a://"]}, "a://")
    assert not honors_uri({"resourceSubscriptions": ["a://"]}, "b://")
    assert not honors_uri({"resourceSubscriptions": "a://"}, "a://")


def test_a_host_made_error_is_a_lost_stream_any_other_a_refusal() -> None:
    lost = stream_lost_answer(4, "the POST of subscriptions/listen")
    assert lost["id"] == 4 and lost["error"]["code"] == -32603
    assert (
        lost["error"]["message"] == "the stream of the POST of subscriptions/listen ended before its answer"
    )
    assert ending_of_error(lost["error"]["data"]) == "lost"
    assert ending_of_error({"fromHost": "yes"}) == "refused"
    assert ending_of_error(None) == "refused"


def test_only_a_lost_stream_is_listened_to_again_within_the_bound() -> None:
    assert after_end("lost", restarts=0, max_restarts=5) == "listen"
    assert after_end("lost", restarts=4, max_restarts=5) == "listen"
    assert after_end("lost", restarts=5, max_restarts=5) == "stop"
    for ending in ("graceful", "cancelled", "refused"):
        assert after_end(ending, restarts=0, max_restarts=5) == "stop"


# -- against the MCP Python SDK 2.x -------------------------------------------------------------


class Recorder(HostHandlers):
    """Records every notification; ``until(predicate)`` waits for one that matches."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, Any]] = []
        self._arrived = anyio.Event()

    def on_notification(self, server: str, method: str, params: Any) -> None:
        self.seen.append((method, params))
        self._arrived.set()
        self._arrived = anyio.Event()

    async def until(self, predicate: Callable[[str, Any], bool]) -> tuple[str, Any]:
        while True:
            found = next(((m, p) for m, p in self.seen if predicate(m, p)), None)
            if found is not None:
                return found
            await self._arrived.wait()

    def updated(self) -> list[str]:
        return [p["uri"] for m, p in self.seen if m == "notifications/resources/updated"]


def _updated(uri: str) -> Callable[[str, Any], bool]:
    return lambda method, params: method == "notifications/resources/updated" and params.get("uri") == uri


@contextlib.asynccontextmanager
async def sdk_server(
    transport: str, handlers: HostHandlers, limits: Limits
) -> AsyncIterator[ServerConnection]:
    if transport == "stdio":
        async with connect(
            ServerConfig(command=sys.executable, args=(str(SDK_FEATURES), "stdio"), limits=limits),
            handlers=handlers,
        ) as conn:
            yield conn
        return
    options = {"http-stateless": ["--stateless"], "http-json": ["--stateless", "--json"], "http": []}
    async with sdk_over_http(*options[transport]) as port:
        async with connect(
            ServerConfig(url=f"http://127.0.0.1:{port}/mcp", limits=limits), handlers=handlers
        ) as conn:
            yield conn


async def _cache_refreshed(conn: ServerConnection, name: str) -> None:
    refreshed = anyio.Event()
    conn.mcp.on_list_refreshed = lambda listed: refreshed.set() if listed == "tools" else None
    while not any(tool.name == name for tool in conn.mcp.cached_tools or []):
        await refreshed.wait()
        refreshed = anyio.Event()


@pytest.mark.parametrize("transport", ["stdio", "http-stateless", "http", "http-json"])
async def test_a_stateless_connection_refreshes_its_tools_and_gets_the_updates_it_subscribed_to(
    transport: str,
) -> None:
    handlers = Recorder()
    with anyio.fail_after(TIMEOUT):
        async with sdk_server(transport, handlers, FAST) as conn:
            assert conn.era == "stateless"
            assert {tool.name for tool in await conn.mcp.list_tools()} == {
                "add",
                "ask_client",
                "grow",
                "touch",
            }
            # Listing the tools (tools.listChanged) is enough to listen.
            _, first = await handlers.until(lambda m, p: m == "notifications/subscriptions/acknowledged")
            assert first["notifications"] == {"toolsListChanged": True}
            assert (await conn.mcp.call_tool("grow", {"name": "extra"})).text == "added extra"
            await _cache_refreshed(conn, "extra")  # in the background, as on list_changed in 2025-11-25
            assert "extra" in {tool.name for tool in conn.mcp.cached_tools or []}
            await conn.mcp.subscribe_resource(NOTE)  # returns once the server acknowledged it
            assert conn.mcp.resource_subscriptions == {NOTE}
            await conn.mcp.call_tool("touch", {"uri": NOTE})
            _, params = await handlers.until(_updated(NOTE))
            ack = [p for m, p in handlers.seen if m == "notifications/subscriptions/acknowledged"]
            assert ack[-1]["notifications"] == {"toolsListChanged": True, "resourceSubscriptions": [NOTE]}
            assert subscription_id(params) == subscription_id(ack[-1])  # on the listen's stream
            # Unsubscribed: the listen is sent again without it (the old one cancelled).
            await conn.mcp.unsubscribe_resource(NOTE)
            await conn.mcp.subscribe_resource("fixture://other")
            await conn.mcp.call_tool("touch", {"uri": NOTE})
            await conn.mcp.call_tool("touch", {"uri": "fixture://other"})
            await handlers.until(_updated("fixture://other"))
            assert handlers.updated() == [NOTE, "fixture://other"]  # one stream, in order


async def test_the_listen_never_times_out_and_ends_cleanly_with_the_connection(
    logs: list[dict[str, Any]],
) -> None:
    handlers = Recorder()
    limits = Limits(close_grace_seconds=2.0, terminate_grace_seconds=1.0, request_timeout_seconds=0.2)
    with anyio.fail_after(TIMEOUT):
        async with sdk_server("stdio", handlers, limits) as conn:
            await conn.mcp.list_tools()
            await conn.mcp.subscribe_resource(NOTE)
            assert (
                conn.connection.pending_count == 1 and conn.connection.waiting() == []
            )  # the listen is not "waiting"
            # The behaviour under test is what does not happen while time passes: several
            # request timeouts go by, and the same listen still delivers.
            await anyio.sleep(1.0)
            await conn.mcp.call_tool("touch", {"uri": NOTE})
            _, params = await handlers.until(_updated(NOTE))
            ack = [p for m, p in handlers.seen if m == "notifications/subscriptions/acknowledged"]
            assert len(ack) == 1 and subscription_id(params) == subscription_id(ack[0])
            assert conn.connection.pending_count == 1
    assert conn.connection.pending_count == 0
    noisy = [entry for entry in logs if entry["log_level"] in ("warning", "error", "critical")]
    assert noisy == []
    assert not any("listen" in entry["event"] for entry in logs)


@contextlib.asynccontextmanager
async def killable_http_server(*options: str) -> AsyncIterator[tuple[anyio.abc.Process, int]]:
    """The SDK fixture over Streamable HTTP, stateless: its process (to SIGKILL) and port."""
    process = await anyio.open_process(
        [sys.executable, str(SDK_FEATURES), "streamable-http", "--stateless", *options],
        stdout=PIPE,
        stderr=DEVNULL,
        start_new_session=True,
    )
    try:
        yield process, await port_line(process, TIMEOUT)
    finally:
        with anyio.CancelScope(shield=True):
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            await process.aclose()


async def test_a_listen_stream_lost_over_http_is_listened_to_again() -> None:
    # A server killed with the listen open: its stream breaks without an answer, the
    # request fails at once (a host-made error) and, after
    # Limits.listen_restart_delay_seconds, the listen goes to the server now on the port;
    # once it is acknowledged, the tools are listed again.
    handlers = Recorder()
    limits = Limits(close_grace_seconds=2.0, terminate_grace_seconds=1.0, listen_restart_delay_seconds=0.5)
    with anyio.fail_after(TIMEOUT):
        async with killable_http_server() as (first, port):
            async with connect(
                ServerConfig(url=f"http://127.0.0.1:{port}/mcp", limits=limits), handlers=handlers
            ) as conn:
                await conn.mcp.list_tools()
                await conn.mcp.subscribe_resource(NOTE)
                _, ack = await handlers.until(lambda m, p: m == "notifications/subscriptions/acknowledged")
                relisted = anyio.Event()
                conn.mcp.on_list_refreshed = lambda name: relisted.set() if name == "tools" else None
                async with killable_http_server("--port", str(port)):
                    first.kill()
                    await first.wait()
                    await handlers.until(
                        lambda m, p: (
                            m == "notifications/subscriptions/acknowledged"
                            and subscription_id(p) != subscription_id(ack)
                        )
                    )
                    await relisted.wait()  # no replay: what changed meanwhile is listed again
                    await conn.mcp.call_tool("touch", {"uri": NOTE})
                    _, params = await handlers.until(_updated(NOTE))
                    assert subscription_id(params) != subscription_id(ack)


async def test_a_server_without_resources_subscribe_is_refused() -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(
            ServerConfig(command=sys.executable, args=("-m", "mcp_server_time"), limits=FAST)
        ) as conn:
            assert conn.era == "stateless"
            with pytest.raises(SubscriptionRefused, match="does not advertise resources.subscribe"):
                await conn.mcp.subscribe_resource("time://now")
            assert conn.connection.pending_count == 0


# -- the exact wire ---------------------------------------------------------------------------


def _discover(capabilities: dict[str, Any]) -> dict[str, Any]:
    return {
        "resultType": "complete",
        "supportedVersions": ["2026-07-28"],
        "capabilities": capabilities,
        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "listener", "version": "1"}},
    }


def _ack(listen_id: int, honored: dict[str, Any]) -> dict[str, Any]:
    params = {"_meta": {SUBSCRIPTION_ID_KEY: listen_id}, "notifications": honored}
    return {
        "send": {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": params}
    }


async def test_a_changed_filter_cancels_the_old_listen_and_a_server_may_end_one(tmp_path: Path) -> None:
    # Ids: 1 server/discover, 2 tools/list, 3 the first listen, 4 the second, 5 the third.
    script = Script(
        tmp_path,
        [
            {"options": {"discover": "steps"}},
            {"expect": {"method": "server/discover"}},
            {"reply": _discover(ALL_CHANGES)},
            {"expect": {"method": "tools/list"}},
            {"reply": {"resultType": "complete", "tools": []}},
            {"expect": {"method": "subscriptions/listen", "id": 3}},
            _ack(3, {"toolsListChanged": True}),
            mark("acked 3"),
            {
                "expect": {
                    "method": "notifications/cancelled",
                    "params": {"requestId": 3, "reason": "cancelled"},
                }
            },
            {"expect": {"method": "subscriptions/listen", "id": 4}},
            _ack(4, {"toolsListChanged": True}),  # leaves the URI out
            {
                "expect": {
                    "method": "notifications/cancelled",
                    "params": {"requestId": 4, "reason": "cancelled"},
                }
            },
            {"expect": {"method": "subscriptions/listen", "id": 5}},
            _ack(5, {"toolsListChanged": True}),
            mark("acked 5"),
            # The server ends the listen (stdio): nothing is sent back.
            {"send": {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}}},
            {"expect": {"method": "tools/call"}},
            {"reply": {"resultType": "complete", "content": []}},
        ],
    )
    handlers = TestHandlers()
    with anyio.fail_after(20):
        async with script.connect(handlers=handlers) as conn:
            await conn.mcp.list_tools()
            await handlers.mark("acked 3").wait()
            with pytest.raises(SubscriptionRefused, match="acknowledgment leaves it out"):
                await conn.mcp.subscribe_resource("a://1")
            assert conn.mcp.resource_subscriptions == frozenset()
            await handlers.mark("acked 5").wait()
            await conn.mcp.call_tool("t")  # its answer follows the server's end of listen 5
            assert conn.connection.pending_count == 0
            await script.finished(conn)
    sent = [m for m in script.messages(probe=True) if m.get("method") == "subscriptions/listen"]
    assert [m["params"]["notifications"] for m in sent] == [
        {"toolsListChanged": True},
        {"toolsListChanged": True, "resourceSubscriptions": ["a://1"]},
        {"toolsListChanged": True},
    ]
    assert all(m["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == "2026-07-28" for m in sent)
    cancels = [m for m in script.messages(probe=True) if m.get("method") == "notifications/cancelled"]
    assert [m["params"]["requestId"] for m in cancels] == [3, 4]

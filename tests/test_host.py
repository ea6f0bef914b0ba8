"""Host: many servers at once, one event stream, calls by name, bounded close.

Real fixture processes (``fixtures/scripted_server.py``, ``fixtures/demo_server.py``) on
asyncio and trio. Synchronisation is by the host's events and ``fail_after`` only. Rules
under test: ``host`` module docstring.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpl_host import GrantPolicy, HostEvent, HostHandlers, Limits, RequestContext
from mcpl_host.config import ServerConfig, load_config
from mcpl_host.events import (
    Connecting,
    Delivery,
    PolicyReceipt,
    PushEvent,
    Ready,
    Refusal,
    ServerNotification,
    ServerRequest,
)
from mcpl_host.host import Host, ServerNotConnected, ServerRequestResponder, UnknownServer
from mcpl_host.supervisor_policy import RestartPolicy

from .conftest import FIXTURES
from .test_supervisor import gone, processes_with
from .wire import DONE_METHOD, MCP_HANDSHAKE, MCPL_HANDSHAKE, SCRIPTED, Script, push_event

pytestmark = pytest.mark.anyio

TIMEOUT = 60
QUICK = Limits(close_grace_seconds=0.3, terminate_grace_seconds=1.0, handshake_timeout_seconds=10.0)
FAST_RESTART = RestartPolicy(base_delay_seconds=0.05, jitter=0.0)


def stdio_config(name: str, script: Script, *, limits: Limits = QUICK, **kwargs: Any) -> ServerConfig:
    kwargs.setdefault("restart_policy", FAST_RESTART)
    return ServerConfig(
        name=name,
        transport="stdio",
        command=sys.executable,
        args=(str(SCRIPTED), str(script.path), str(script.record_path)),
        limits=limits,
        **kwargs,
    )


async def collect(host: Host, until: Callable[[list[HostEvent]], bool]) -> list[HostEvent]:
    """Events from the host's stream until ``until(events so far)`` is true."""
    seen: list[HostEvent] = []
    async for event in host.events():
        seen.append(event)
        if until(seen):
            return seen
    raise AssertionError(f"the event stream ended first: {[(e.server, e.kind) for e in seen]}")


def count(kind: str, n: int) -> Callable[[list[HostEvent]], bool]:
    return lambda seen: sum(e.kind == kind for e in seen) >= n


def answers(script: Script) -> dict[Any, Any]:
    return {m["id"]: m for m in script.messages() if "method" not in m and "id" in m}


# -- 20 servers, one never answers initialize ----------------------------------------------------


async def test_twenty_servers_one_hangs_on_initialize_the_others_are_ready_and_close_leaves_nothing(
    tmp_path: Path,
) -> None:
    configs = {
        f"s{i:02}": stdio_config(f"s{i:02}", Script(tmp_path, MCP_HANDSHAKE, name=f"s{i:02}"))
        for i in range(19)
    }
    hung = Script(tmp_path, [{"expect": {"method": "initialize"}}, {"hang": True}], name="hung")
    # Its handshake would time out only after two minutes: nobody may wait for that.
    configs["hung"] = stdio_config(
        "hung",
        hung,
        limits=Limits(close_grace_seconds=0.3, terminate_grace_seconds=1.0, handshake_timeout_seconds=120),
    )
    host = Host(configs)
    with anyio.fail_after(TIMEOUT):
        async with host:
            seen = await collect(host, count("ready", 19))
            assert sorted(e.server for e in seen if e.kind == "ready") == sorted(
                f"s{i:02}" for i in range(19)
            )
            assert host.states()["hung"] == "connecting"
            with pytest.raises(
                ServerNotConnected, match="'hung' is not connected .*not ready within 0.2 seconds"
            ):
                await host.server("hung").connected(timeout=0.2)
            assert (await host.server("s07").connected(timeout=0)).is_open
            pids = processes_with(str(tmp_path))
            assert len(pids) >= 19
            started = anyio.current_time()
            await host.aclose()
            closing = anyio.current_time() - started
    assert gone(pids) and not processes_with(str(tmp_path))
    assert closing < 0.3 + 1.0 + 5  # the hung one's graces, once: closes run concurrently
    assert all(state == "closed" for state in host.states().values())


# -- a server that ignores SIGTERM ----------------------------------------------------------------


async def test_servers_ignoring_sigterm_are_killed_and_close_is_bounded_by_the_graces(tmp_path: Path) -> None:
    graces = Limits(close_grace_seconds=0.5, terminate_grace_seconds=0.5, handshake_timeout_seconds=10.0)
    steps = [*MCP_HANDSHAKE, {"ignore_sigterm": True}, {"hang": True}]
    configs = {
        f"stubborn{i}": stdio_config(
            f"stubborn{i}", Script(tmp_path, steps, name=f"stubborn{i}"), limits=graces
        )
        for i in range(4)
    }
    host = Host(configs)
    with anyio.fail_after(TIMEOUT):
        async with host:
            await collect(host, count("ready", 4))
            pids = processes_with(str(tmp_path))
            assert len(pids) == 4
            started = anyio.current_time()
    closing = anyio.current_time() - started
    assert gone(pids)
    # stdin closed, 0.5 s, SIGTERM (ignored), 0.5 s, SIGKILL: all four at once (one after
    # another would take 4 s).
    assert 0.9 <= closing < 3.0


async def test_cancelling_the_host_leaves_no_process(tmp_path: Path) -> None:
    configs = {
        "a": stdio_config("a", Script(tmp_path, MCP_HANDSHAKE, name="a")),
        "b": stdio_config(
            "b", Script(tmp_path, [{"expect": {"method": "initialize"}}, {"hang": True}], name="b")
        ),
    }
    with anyio.fail_after(TIMEOUT):
        with anyio.CancelScope() as scope:
            async with Host(configs) as host:
                await collect(host, count("ready", 1))
                pids = processes_with(str(tmp_path))
                scope.cancel()
                await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert gone(pids) and not processes_with(str(tmp_path))


# -- events of what servers send ------------------------------------------------------------------


async def test_push_events_refusals_receipts_and_notifications_are_reported(tmp_path: Path) -> None:
    steps = [*MCPL_HANDSHAKE, {"send": push_event(1)}, {"wait_response": 1}]
    granted = Script(tmp_path, steps, name="granted")
    configs = {
        "granted": stdio_config(
            "granted",
            granted,
            grant_policy=GrantPolicy(grant_all_advertised=True),
        ),
        "denied": stdio_config("denied", Script(tmp_path, steps, name="denied")),
    }
    host = Host(configs)
    with anyio.fail_after(TIMEOUT):
        async with host:

            def done(seen):
                return {
                    e.server
                    for e in seen
                    if isinstance(e, ServerNotification)  # noqa: E731
                    and e.method == DONE_METHOD
                } == {"granted", "denied"}

            seen = await collect(host, done)
    by = {(e.server, e.kind): e for e in seen}
    # A delivery: the event is taken first, then answered.
    pushed = by["granted", "push_event"]
    assert isinstance(pushed, PushEvent) and pushed.event_id == "e1" and pushed.answer is None
    assert "answer" not in pushed.to_json()
    assert answers(granted)[1]["result"] == {"accepted": True}
    refused = by["denied", "refused"]
    assert isinstance(refused, Refusal) and refused.method == "push/event"
    assert refused.error["code"] == -32002
    receipt = by["granted", "policy_receipt"]
    assert isinstance(receipt, PolicyReceipt) and receipt.accepted is True
    ready = by["granted", "ready"]
    assert isinstance(ready, Ready) and ready.effective_capabilities == ["pushEvents", "tools"]
    kinds = [e.kind for e in seen if e.server == "granted"]
    # What the server sent while connecting follows its ready event (events.ConnectingOrder).
    assert kinds == ["connecting", "ready", "policy_receipt", "push_event", "notification"]


class Declining(HostHandlers):
    async def push_event(self, context: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"accepted": False, "reason": "busy"}

    async def request(self, context: RequestContext, params: Any) -> Any:
        return {"roots": [{"uri": "file:///tmp", "name": context.server}]}


async def test_server_requests_are_answered_through_the_event_stream(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"send": {"jsonrpc": "2.0", "id": "r1", "method": "roots/list"}},
            {"wait_response": "r1", "expect_result": {"roots": []}},
            {"send": {"jsonrpc": "2.0", "id": "r2", "method": "sampling/createMessage", "params": {}}},
            {"wait_response": "r2", "expect_error_code": -32603},  # nobody answers it
        ],
    )
    limits = Limits(close_grace_seconds=0.3, terminate_grace_seconds=1.0, request_timeout_seconds=0.5)
    host = Host({"s": stdio_config("s", script, limits=limits)})
    responders: list[ServerRequestResponder] = []
    with anyio.fail_after(TIMEOUT):
        async with host:
            async for event in host.events():
                if isinstance(event, ServerRequest):
                    assert event.responder is not None and "answer" not in event.to_json()
                    responders.append(event.responder)
                    if event.method == "roots/list":
                        assert event.responder.respond({"roots": []}) is True
                        assert event.responder.respond({"roots": ["twice"]}) is False
                elif isinstance(event, ServerNotification) and event.method == DONE_METHOD:
                    break
    assert [r.method for r in responders] == ["roots/list", "sampling/createMessage"]
    assert responders[1].is_answered and responders[1].reject(-32000, "late") is False  # expired
    assert answers(script)["r2"]["error"]["message"] == "Internal error: not answered by the host application"


async def test_handlers_factory_answers_and_the_host_reports(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCPL_HANDSHAKE,
            {"send": push_event(1)},
            {"wait_response": 1, "expect_result": {"accepted": False, "reason": "busy"}},
            {"send": {"jsonrpc": "2.0", "id": 2, "method": "roots/list"}},
            {"wait_response": 2},
        ],
    )
    made: list[str] = []

    def factory(name: str) -> HostHandlers:
        made.append(name)
        return Declining()

    config = stdio_config("s", script, grant_policy=GrantPolicy(grant_all_advertised=True))
    host = Host({"s": config}, handlers_factory=factory)
    with anyio.fail_after(TIMEOUT):
        async with host:
            seen = await collect(host, lambda seen: any(e.kind == "notification" for e in seen))
    assert made == ["s"]
    by = {e.kind: e for e in seen}
    pushed, asked = by["push_event"], by["server_request"]
    assert isinstance(pushed, PushEvent) and pushed.answer == {"accepted": False, "reason": "busy"}
    assert isinstance(asked, ServerRequest) and asked.responder is None
    assert asked.answer == {"roots": [{"uri": "file:///tmp", "name": "s"}]}


# -- calls by server name -------------------------------------------------------------------------


async def test_calls_by_server_name_and_clear_errors(tmp_path: Path) -> None:
    config = load_config(FIXTURES / "configs" / "example.json")
    assert list(config.enabled_servers) == ["demo"]
    host = Host(config)
    assert host.servers == ["demo"]  # disabled servers are not hosted
    with anyio.fail_after(TIMEOUT):
        async with host:
            with pytest.raises(UnknownServer, match="no server named 'time'"):
                host.server("time")
            await collect(host, count("ready", 1))
            demo = await host.server("demo").connected()
            tools = await demo.mcp.list_tools()
            assert {tool.name for tool in tools} >= {"echo", "add"}
            assert (await demo.mcp.call_tool("add", {"a": 2, "b": 3})).text == "5"
            readme = await demo.mcp.read_resource("demo://readme")
            assert "mcpl-demo" in readme.contents[0].text
            assert await demo.mcp.request("ping") == {}
            assert host.server("demo").hosted.redactor.redact("x 0.5 y") == "x 0.5 y"
    with pytest.raises(ServerNotConnected, match="closed"):
        await host.server("demo").connected()


async def test_a_full_subscription_drops_the_oldest_observation_never_a_lifecycle_event() -> None:
    host = Host({}, max_queued_events=2, max_queued_lifecycle_events=2)
    async with host:
        for n in range(3):
            host._observe(ServerNotification(server="s", method="test/n", params={"n": n}))
        assert host.dropped_events == 1
        await host._emit_lifecycle(Connecting(server="s", attempt=1))
        await host._emit_lifecycle(
            Ready(
                server="s",
                attempt=1,
                server_name="",
                server_version="",
                protocol_version="",
                mcpl="none",
                effective_capabilities=[],
            )
        )
        for n in range(3, 6):  # observations go on dropping the oldest observation only
            host._observe(ServerNotification(server="s", method="test/n", params={"n": n}))
        await host.aclose()
        kinds = [
            (e.kind, e.params["n"] if isinstance(e, ServerNotification) else None)
            async for e in host.events()
        ]
    assert kinds == [("connecting", None), ("ready", None), ("notification", 4), ("notification", 5)]
    assert host.dropped_events == 4


def pushed(n: int) -> PushEvent:
    return PushEvent(server="s", id=n, feature_set="f", event_id=f"e{n}", params={}, delivery=Delivery())


async def test_a_delivery_cancelled_after_its_turn_hands_it_on_and_one_that_gave_up_is_skipped() -> None:
    # Each take gives one waiting delivery its turn (events module rules): a delivery that
    # leaves without using it must not leave the room unused while the next one waits.
    host = Host({}, max_queued_events=1, subscribe_all=False)
    sub = host.subscribe(kinds=["push_event"])
    assert sub.put_delivery(pushed(0))
    done: list[int] = []
    scopes: dict[int, anyio.CancelScope] = {}

    async def wait_room(n: int) -> None:
        with anyio.CancelScope() as scope:
            scopes[n] = scope
            if await host._room_for(pushed(n), refuse_when_full=False):
                done.append(n)

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            for n in (1, 2, 3):
                tg.start_soon(wait_room, n)
                await anyio.wait_all_tasks_blocked()  # queued in this order
            scopes[1].cancel()  # gave up before its turn: skipped when the turn comes
            await anyio.wait_all_tasks_blocked()
            scopes[2].cancel()  # cancelled, and before it runs ...
            sub.receive_nowait()  # ... given the turn: it hands it on to 3
            await anyio.wait_all_tasks_blocked()
            assert done == [3]


async def test_the_default_subscription_nobody_reads_holds_a_bounded_number_of_bytes(tmp_path: Path) -> None:
    """24 notifications of 1 MiB each while only a subscription to them is read: the
    default one, unread, kept them all (24 MiB traced, 1,024 of any size by default);
    it now keeps at most ``max_queued_event_bytes`` (4 MiB here), the oldest dropped."""
    import tracemalloc

    pad = "a" * (1024 * 1024)
    note = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": pad}}
    script = Script(tmp_path, [*MCP_HANDSHAKE, *([{"send": note}] * 24), {"hang": True}])
    host = Host({"s": stdio_config("s", script)}, max_queued_event_bytes=4 * 1024 * 1024)
    with anyio.fail_after(TIMEOUT):
        async with host:
            read = host.subscribe(kinds=["notification"])
            tracemalloc.start()
            try:
                for _ in range(24):
                    event = await read.receive()
                    assert isinstance(event, ServerNotification) and event.params["data"] == pad
                del event
                held, _ = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert held < 12 * 1024 * 1024, f"{held / 2**20:.1f} MiB held"
            assert host.dropped_events >= 20

"""Supervisor: restarts per the policy, crash loops, health pings, every transport a new connection.

Real fixture processes over real pipes (``fixtures/scripted_server.py``) and a loopback
WebSocket (``fixtures/ws_bridge.py``), on asyncio and trio. Synchronisation is by the
supervisor's events and ``fail_after`` only; the backoff is made fast by a small
``RestartPolicy`` (its delays are the only sleeps, and they are the policy's output).
Rules under test: ``supervisor`` module docstring; docs/protocol.md T1-T3.
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

from mcpl_host import (
    ConnectionLost,
    GrantPolicy,
    HostedServer,
    HostEvent,
    Limits,
    RequestContext,
    ServerConfig,
)
from mcpl_host.events import (
    EVENT_KINDS,
    Connecting,
    Degraded,
    Disconnected,
    GaveUp,
    Ready,
    Reconnecting,
    Subscription,
    event_json,
)
from mcpl_host.hosted import TransportFactory
from mcpl_host.supervisor import Supervisor
from mcpl_host.supervisor_policy import RestartPolicy

from .wire import MCP_HANDSHAKE, MCPL_HANDSHAKE, Script, TestHandlers, mark, push_event

pytestmark = pytest.mark.anyio

#: Seconds: a generous bound on anything that should happen soon.
TIMEOUT = 30
#: Short graces: a scripted server that hangs is stopped by SIGTERM after close_grace.
QUICK = Limits(close_grace_seconds=0.3, terminate_grace_seconds=1.0, handshake_timeout_seconds=10.0)
GRANT_ALL = GrantPolicy(grant_all_advertised=True)


E = TypeVar("E", bound=HostEvent)


class EventLog:
    """An ``emit`` callback that keeps every event; ``wait_for`` wakes on each new one."""

    def __init__(self) -> None:
        self.events: list[HostEvent] = []
        self._changed = anyio.Event()

    async def __call__(self, event: HostEvent) -> None:
        self.events.append(event)
        self._changed.set()
        self._changed = anyio.Event()

    def of(self, kind: type[E], server: str | None = None) -> list[E]:
        return [e for e in self.events if isinstance(e, kind) and (server is None or e.server == server)]

    def kinds(self, *only: str) -> list[str]:
        return [e.kind for e in self.events if not only or e.kind in only]

    async def wait_for(self, kind: type[E], count: int = 1, server: str | None = None) -> list[E]:
        while len(self.of(kind, server)) < count:
            await self._changed.wait()
        return self.of(kind, server)


def processes_with(marker: str) -> set[int]:
    """Pids of live processes whose command line contains ``marker`` (a test's tmp_path)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.add(int(entry))
            except OSError:
                continue
    return found


def gone(pids: set[int]) -> bool:
    """True if none of ``pids`` exists any more, not even as a zombie (all were reaped)."""
    return not any(os.path.exists(f"/proc/{pid}") for pid in pids)


def supervisor(hosted: HostedServer, policy: RestartPolicy, log: EventLog, **kwargs: Any) -> Supervisor:
    return Supervisor(hosted, policy, log, **kwargs)


def alternating(hosted: HostedServer, *factories: TransportFactory) -> HostedServer:
    """``hosted`` whose transports come from ``factories`` in turn (the last one repeats)."""
    queue = list(factories)

    def factory() -> Any:
        return (queue.pop(0) if len(queue) > 1 else queue[0])()

    hosted.set_transport_factory(factory)
    return hosted


# -- crash after N seconds ------------------------------------------------------------------


@pytest.mark.parametrize(("healthy_after", "expected_delays"), [(100.0, [0.05, 0.1]), (0.1, [0.05, 0.05])])
async def test_crash_after_n_seconds_restarts_with_backoff_then_stops(
    tmp_path: Path, healthy_after: float, expected_delays: list[float]
) -> None:
    script = Script(tmp_path, [*MCP_HANDSHAKE, {"sleep": 0.3}, {"stderr": "about to crash"}, {"exit": 1}])
    policy = RestartPolicy(
        base_delay_seconds=0.05,
        max_delay_seconds=1.0,
        jitter=0.0,
        healthy_after_seconds=healthy_after,
        max_failures=3,
        failure_window_seconds=60,
    )
    log = EventLog()
    with anyio.fail_after(TIMEOUT):
        async with supervisor(script.server(limits=QUICK, name="s"), policy, log) as sup:
            await log.wait_for(GaveUp)
            assert sup.state == "gave_up" and sup.current is None
    assert log.kinds() == ["connecting", "ready", "disconnected", "reconnecting"] * 2 + [
        "connecting",
        "ready",
        "disconnected",
        "gave_up",
    ]
    assert [e.attempt for e in log.of(Connecting)] == [1, 2, 3]
    # Above healthy_after, each crash restarts the backoff at attempt 1 (the window still counts).
    assert [e.delay_seconds for e in log.of(Reconnecting)] == pytest.approx(expected_delays)
    for event in log.of(Disconnected):
        assert event.phase == "running"
        assert event.exit_status == 1
        assert event.uptime_seconds >= 0.25
        assert "about to crash" in event.stderr_tail
    for event in log.of(Ready):
        assert event.mcpl == "none" and event.server_name == "scripted"
    assert (
        log.of(GaveUp)[0].reason == "crashed 3 times in 60 seconds; last: server process exited with status 1"
    )


# -- crash at once: a crash loop, not a busy loop ---------------------------------------------


async def test_crash_at_once_is_a_crash_loop_that_stops_with_the_policys_delays(tmp_path: Path) -> None:
    script = Script(tmp_path, [{"stderr": "fatal: no config"}, {"exit": 1}])
    policy = RestartPolicy(
        base_delay_seconds=0.1,
        max_delay_seconds=1.0,
        jitter=0.2,
        healthy_after_seconds=30,
        max_failures=5,
        failure_window_seconds=60,
    )
    log = EventLog()
    with anyio.fail_after(TIMEOUT):
        async with supervisor(
            script.server(limits=QUICK, name="s"), policy, log, rng=random.Random(4).random
        ):
            await log.wait_for(GaveUp)
    assert log.kinds() == ["connecting", "disconnected", "reconnecting"] * 4 + [
        "connecting",
        "disconnected",
        "gave_up",
    ]
    for event in log.of(Disconnected):
        assert event.phase == "start" and event.uptime_seconds is None
        # It exits before answering the era probe or initialize, as the race goes.
        assert re.search(r"went away before answering (server/discover|initialize)", event.reason)
    assert "fatal: no config" in log.of(Disconnected)[-1].stderr_tail
    reconnects = log.of(Reconnecting)
    assert [e.attempt for e in reconnects] == [1, 2, 3, 4]
    timeline = []
    for event, nominal in zip(reconnects, [0.1, 0.2, 0.4, 0.8]):
        delay = event.delay_seconds
        assert nominal * 0.8 <= delay <= nominal * 1.2  # jitter is ±20 % of the nominal delay
        following = next(e for e in log.events if e.kind == "connecting" and e.time >= event.time)
        waited = following.time - event.time
        assert waited >= delay - 0.01  # the supervisor slept the delay: no busy loop
        timeline.append((event.attempt, round(delay, 3), round(waited, 3)))
    gave_up = log.of(GaveUp)[0]
    assert gave_up.failures == 5 and gave_up.window_seconds == 60
    assert re.match(
        r"crashed 5 times in 60 seconds; last: the server went away before answering (server/discover|initialize)",
        gave_up.reason,
    )
    print("\ncrash-loop restart timeline (attempt, delay s, observed wait s):", timeline)


async def test_a_server_that_cannot_be_started_gives_up_with_the_reason(tmp_path: Path) -> None:
    missing = Script(tmp_path, []).server(limits=QUICK, cwd=str(tmp_path / "missing-dir"), name="s")

    log = EventLog()
    with anyio.fail_after(TIMEOUT):
        async with supervisor(missing, RestartPolicy(base_delay_seconds=0.01, max_failures=2), log):
            await log.wait_for(GaveUp)
    assert log.kinds() == [
        "connecting",
        "disconnected",
        "reconnecting",
        "connecting",
        "disconnected",
        "gave_up",
    ]
    assert "cannot use working directory" in log.of(GaveUp)[0].reason


async def test_restarts_disabled_gives_up_at_the_first_failure(tmp_path: Path) -> None:
    script = Script(tmp_path, [*MCP_HANDSHAKE, {"exit": 3}])
    log = EventLog()
    with anyio.fail_after(TIMEOUT):
        async with supervisor(script.server(limits=QUICK, name="s"), RestartPolicy(enabled=False), log):
            await log.wait_for(GaveUp)
    assert log.kinds() == ["connecting", "ready", "disconnected", "gave_up"]
    assert log.of(GaveUp)[0].reason == "restarts are disabled; last: server process exited with status 3"


# -- hang: a server that stops reading is restarted after a failed health ping ----------------


async def test_hung_server_is_restarted_after_its_health_ping_times_out(tmp_path: Path) -> None:
    script = Script(tmp_path, [*MCP_HANDSHAKE, {"stop_reading": True}, {"hang": True}])
    policy = RestartPolicy(base_delay_seconds=0.05, jitter=0.0)
    log = EventLog()
    with anyio.fail_after(TIMEOUT):
        async with supervisor(
            script.server(limits=QUICK, name="s"),
            policy,
            log,
            health_interval_seconds=0.1,
            health_timeout_seconds=0.3,
        ) as sup:
            await log.wait_for(Ready, 2)
            pids = processes_with(str(tmp_path))
            assert len(pids) == 1  # the first process is already gone: stopped and reaped
            assert sup.current is not None and sup.state == "ready"
    assert gone(pids) and not processes_with(str(tmp_path))
    assert log.kinds()[:5] == ["connecting", "ready", "disconnected", "reconnecting", "connecting"]
    lost = log.of(Disconnected)[0]
    assert lost.phase == "running" and lost.reason == "did not answer ping within 0.3 seconds"
    assert log.of(Reconnecting)[0].to_json() == {"attempt": 1, "delaySeconds": 0.05}
    assert sup.state == "closed"


# -- every transport a new connection (T1-T3) ------------------------------------------------------


class SlowPush(TestHandlers):
    """Handles the push event ``slow`` until cancelled; accepts others at once."""

    def __init__(self) -> None:
        super().__init__()
        self.slow_started = anyio.Event()
        self.slow_cancelled = anyio.Event()

    async def push_event(self, context: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        if params.get("eventId") == "slow":
            self.slow_started.set()
            try:
                await anyio.sleep_forever()
            finally:
                self.slow_cancelled.set()
        return {"accepted": True}


def answers_to(script: Script, request_id: Any) -> list[Any]:
    return [m for m in script.messages() if "method" not in m and m.get("id") == request_id]


async def test_a_request_read_before_a_restart_is_never_answered_on_the_new_transport(tmp_path: Path) -> None:
    first = Script(
        tmp_path,
        [
            *MCPL_HANDSHAKE,
            {"send": push_event(7, "slow")},  # read by the host; its handler is still running...
            {"wait_for": {"method": "test/never-answered"}},  # ...and a request of ours is pending...
            {"exit": 1},  # ...when the transport ends
        ],
        name="attempt1",
    )
    second = Script(
        tmp_path,
        [
            *MCPL_HANDSHAKE[:4],  # the handshake and the whole policy exchange run again...
            {"send": push_event(80, "early")},  # ...and the old grant is not in force before the receipt
            {"wait_response": 80, "expect_error_code": -32002},
            {"reply": {"accepted": True}},
            {"send": push_event(8, "fresh")},
            {"wait_response": 8, "expect_result": {"accepted": True}},  # admitted after the new receipt
            mark("accepted"),
        ],
        name="attempt2",
    )
    handlers = SlowPush()
    hosted = alternating(
        first.server(limits=QUICK, handlers=handlers, grant_policy=GRANT_ALL, name="s"),
        first.server(limits=QUICK).transport_factory,
        second.server(limits=QUICK).transport_factory,
    )
    log = EventLog()
    policy = RestartPolicy(base_delay_seconds=0.05, jitter=0.0)
    with anyio.fail_after(TIMEOUT):
        async with supervisor(hosted, policy, log) as sup:
            await log.wait_for(Ready)
            await handlers.slow_started.wait()
            old = sup.current
            assert old is not None
            with pytest.raises(ConnectionLost):  # T3: fails when the transport ends, not at a timeout
                await old.mcp.request("test/never-answered", {}, timeout=TIMEOUT)
            await handlers.slow_cancelled.wait()
            await handlers.mark("accepted").wait()
            assert sup.current is not None and sup.current is not old
            assert log.kinds("ready") == ["ready", "ready"]
    assert answers_to(first, 7) == [] and answers_to(second, 7) == []  # T1: never answered
    methods = [m.get("method") for m in second.messages()]
    assert methods[:3] == ["initialize", "notifications/initialized", "featureSets/update"]
    assert "test/never-answered" not in methods  # nothing is re-sent on the new transport
    assert answers_to(second, 8) == [{"jsonrpc": "2.0", "id": 8, "result": {"accepted": True}}]
    assert answers_to(second, 80)[0]["error"]["code"] == -32002
    assert log.of(Disconnected)[0].exit_status == 1
    assert log.of(Ready)[1].effective_capabilities == ["pushEvents", "tools"]


async def test_reconnect_over_websocket_reruns_the_policy_exchange(tmp_path: Path) -> None:
    from .test_websocket import bridge, scripted

    # Each WebSocket gets its own child running this script; its exit closes the socket (1000).
    script = Script(
        tmp_path,
        [
            *MCPL_HANDSHAKE,
            {"send": push_event(1)},
            {"wait_response": 1, "expect_result": {"accepted": True}},
            {"exit": 1},
        ],
    )
    handlers = TestHandlers()
    log = EventLog()
    policy = RestartPolicy(base_delay_seconds=0.05, jitter=0.0, max_failures=10)
    async with bridge(command=scripted(script)) as server:
        hosted = HostedServer(
            ServerConfig(url=server.url(), grant_policy=GRANT_ALL, limits=QUICK, name="s"), handlers=handlers
        )
        with anyio.fail_after(TIMEOUT):
            async with supervisor(hosted, policy, log):
                await log.wait_for(Reconnecting, 2)
    lost = log.of(Disconnected)[0]
    assert lost.close_code == 1000 and lost.phase == "running"
    # The record holds every child's lines, in order: split it at each initialize.
    runs: list[list[Any]] = []
    for message in script.messages():
        if message.get("method") == "initialize":
            runs.append([])
        runs[-1].append(message)
    assert len(runs) >= 2
    for run in runs[:2]:
        assert [m.get("method") for m in run[:3]] == [
            "initialize",
            "notifications/initialized",
            "featureSets/update",
        ]
        assert {"jsonrpc": "2.0", "id": 1, "result": {"accepted": True}} in run


# -- lifecycle ----------------------------------------------------------------------------


async def test_a_hung_handshake_times_out_and_aclose_leaves_no_process(tmp_path: Path) -> None:
    script = Script(tmp_path, [{"expect": {"method": "initialize"}}, {"hang": True}])
    limits = Limits(close_grace_seconds=0.2, terminate_grace_seconds=1.0, handshake_timeout_seconds=0.5)
    log = EventLog()
    # No era probe: its window is half of this short deadline (a slow start would add
    # "(nor server/discover before it)" to the reason).
    server = script.server(limits=limits, name="s", protocol="handshake")
    sup = supervisor(server, RestartPolicy(base_delay_seconds=0.05), log)
    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            await tg.start(sup.run)
            await log.wait_for(Connecting, 2)
            await sup.aclose()  # during the second handshake, wherever it is
    assert not processes_with(str(tmp_path))
    assert log.kinds() == [
        "connecting",
        "disconnected",
        "reconnecting",
        "connecting",
    ]  # closing emits nothing
    lost = log.of(Disconnected)[0]
    assert lost.phase == "start" and lost.reason == "the server did not answer initialize within 0.5 seconds"
    assert sup.state == "closed"
    with pytest.raises(Exception, match="only once"):
        await sup.run()


@pytest.mark.parametrize("health", [None, 60.0])
async def test_closing_a_ready_server_emits_nothing_and_leaves_no_process(
    tmp_path: Path, health: float | None
) -> None:
    # Without health checks aclose() closes the connection run() watches and run() returns
    # on its own (no scope cancelled); with them it cancels run(). Either way, nothing is
    # emitted for the close, no failure is recorded, and the process is reaped.
    script = Script(tmp_path, [*MCP_HANDSHAKE, {"hang": True}])
    log = EventLog()
    sup = supervisor(
        script.server(limits=QUICK, name="s"), RestartPolicy(), log, health_interval_seconds=health
    )
    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            await tg.start(sup.run)
            await log.wait_for(Ready)
            assert sup.current is not None and sup.current.connection.pid is not None
            await sup.aclose()
            assert sup.current is None
    assert not processes_with(str(tmp_path))
    assert log.kinds() == ["connecting", "ready"]  # closing emits nothing
    assert sup.state == "closed"
    assert sup.tracker.failures_in_window(anyio.current_time()) == 0  # (a close is no failure)


def test_event_kinds_and_json() -> None:
    assert EVENT_KINDS[:6] == ("connecting", "ready", "degraded", "disconnected", "reconnecting", "gave_up")
    event = Connecting(server="s", attempt=1, time=5.0)
    assert event_json(event) == {"server": "s", "kind": "connecting", "time": 5.0, "data": {"attempt": 1}}
    with pytest.raises(ValueError, match="unknown event kinds"):
        Subscription(kinds=["exploded"])


def test_health_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="health_interval_seconds"):
        Supervisor(
            HostedServer(ServerConfig(name="s", command="x")),
            RestartPolicy(),
            EventLog(),
            health_interval_seconds=0,
        )


async def test_a_refused_policy_is_degraded_and_a_refusal_asking_to_close_is_a_failure(
    tmp_path: Path,
) -> None:
    refusing = [
        *MCPL_HANDSHAKE[:4],
        {"reply": {"accepted": False, "fallback": "mcp-only", "reason": "too little"}},
    ]
    closing = [*MCPL_HANDSHAKE[:4], {"reply": {"accepted": False, "fallback": "close"}}]
    log = EventLog()
    scripts = [Script(tmp_path, refusing, name="refusing"), Script(tmp_path, closing, name="closing")]
    policy = RestartPolicy(base_delay_seconds=0.05, jitter=0.0, max_failures=2)
    with anyio.fail_after(TIMEOUT):
        async with supervisor(scripts[0].server(limits=QUICK, name="s"), policy, log) as sup:
            await log.wait_for(Degraded)
            assert sup.state == "degraded" and sup.current is not None
        async with Supervisor(scripts[1].server(limits=QUICK, name="c"), policy, log):
            await log.wait_for(GaveUp, server="c")
    degraded = log.of(Degraded)[0]
    assert degraded.mcpl == "mcp-only" and degraded.effective_capabilities == []
    assert degraded.reason == "the server refused the host's policy (fallback mcp-only): too little"
    assert [e.phase for e in log.of(Disconnected, "c")] == ["start", "start"]
    assert "asked to be closed" in log.of(GaveUp, "c")[0].reason

"""A restart asked for (``Host.restart`` / ``Supervisor.restart``): the current connection is
closed and a new one made at once, not counted as a failure, with the policy set last.

Real processes: the demo server and the scripted fixture server over real pipes, on asyncio
and trio. Synchronisation by the host's events and ``fail_after`` only.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

from mcpl_host import GrantPolicy, Host, HostEvent, HostHandlers, Limits, RequestContext, ServerNotConnected
from mcpl_host.config import ServerConfig
from mcpl_host.events import LIFECYCLE_KINDS, Connecting, Disconnected, GaveUp, Ready, Reconnecting
from mcpl_host.supervisor import RESTART_REASON, Supervisor
from mcpl_host.supervisor_policy import RestartPolicy

from .conftest import FIXTURES
from .test_supervisor import EventLog
from .wire import MCP_HANDSHAKE, Script

pytestmark = pytest.mark.anyio

TIMEOUT = 30
QUICK = Limits(close_grace_seconds=1.0, terminate_grace_seconds=1.0, handshake_timeout_seconds=10.0)


E = TypeVar("E", bound=HostEvent)


async def next_kind(events: list[HostEvent], subscription: object, kind: type[E]) -> E:
    async for event in subscription:  # type: ignore[attr-defined]
        events.append(event)
        if isinstance(event, kind):
            return event
    raise AssertionError(f"the host closed before a {kind.kind!r} event")


async def test_a_restart_reconnects_at_once_keeps_the_policy_and_is_no_failure() -> None:
    config = ServerConfig(
        name="demo",
        transport="stdio",
        command=sys.executable,
        args=(str(FIXTURES / "demo_server.py"),),
        env={"DEMO_PUSH_COUNT": "0"},
        grant_policy=GrantPolicy(grant_all_advertised=True),
        limits=QUICK,
        restart_policy=RestartPolicy(base_delay_seconds=30, max_failures=1),
    )
    events: list[HostEvent] = []
    with anyio.fail_after(TIMEOUT):
        async with Host({"demo": config}) as host:
            stream = host.events()
            first = await next_kind(events, stream, Ready)
            assert first.effective_capabilities == ["pushEvents", "tools"]
            await host.server("demo").hosted.update_policy(
                GrantPolicy(grant_all_advertised=True, deny=("pushEvents",))
            )
            host.server("demo").restart()
            second = await next_kind(events, stream, Ready)
            supervisor = host.server("demo").supervisor
            failures = supervisor.tracker.failures_in_window(anyio.current_time())
    kinds = [e.kind for e in events if e.kind in LIFECYCLE_KINDS]
    # max_failures=1 and a 30 s base delay: a restart counted as a failure would give up, and
    # one that waited for the backoff would not finish within TIMEOUT.
    assert kinds == ["connecting", "ready", "disconnected", "connecting", "ready"]
    disconnected = next(e for e in events if isinstance(e, Disconnected))
    assert disconnected.reason == RESTART_REASON and disconnected.phase == "running"
    assert second.attempt == 2
    assert second.effective_capabilities == ["tools"]  # the policy set last, on the new transport
    assert failures == 0


class TransportsSeen(HostHandlers):
    """Records the ``transport`` of each ``push/event``; ``seen(n)`` is set by the first push
    that came on transport ``n``."""

    def __init__(self) -> None:
        super().__init__()
        self.transports: list[int] = []
        self._seen: dict[int, anyio.Event] = {}

    def seen(self, transport: int) -> anyio.Event:
        return self._seen.setdefault(transport, anyio.Event())

    async def push_event(self, context: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        self.transports.append(context.transport)
        self.seen(context.transport).set()
        return {"accepted": True}


async def test_a_handler_tells_the_transport_a_request_came_on_and_a_restart_changes_it() -> None:
    config = ServerConfig(
        name="demo",
        transport="stdio",
        command=sys.executable,
        args=(str(FIXTURES / "demo_server.py"),),
        env={"DEMO_PUSH_INTERVAL": "0.05", "DEMO_PUSH_COUNT": "10000"},
        grant_policy=GrantPolicy(grant_all_advertised=True),
        limits=QUICK,
    )
    handlers = TransportsSeen()
    with anyio.fail_after(TIMEOUT):
        async with Host({"demo": config}, handlers_factory=lambda _: handlers) as host:
            server = host.server("demo")
            first = await server.connected()
            await handlers.seen(1).wait()
            server.restart()
            await handlers.seen(2).wait()
            second = await server.connected()
    assert (first.sequence, second.sequence) == (1, 2)
    assert handlers.transports[0] == 1 and set(handlers.transports) == {1, 2}


async def test_connected_right_after_restart_gives_the_new_connection_not_the_one_closing() -> None:
    config = ServerConfig(
        name="demo",
        command=sys.executable,
        args=(str(FIXTURES / "demo_server.py"),),
        env={"DEMO_PUSH_COUNT": "0"},
        grant_policy=GrantPolicy(grant=("tools",)),
        limits=QUICK,
    )
    with anyio.fail_after(TIMEOUT):
        async with Host({"demo": config}) as host:
            server = host.server("demo")
            first = await server.connected()
            server.restart()
            assert server.current is None  # the connection in place is being closed
            second = await server.connected()
            result = await second.mcp.call_tool("add", {"a": 2, "b": 3})
    assert (first.sequence, second.sequence) == (1, 2)
    assert result.text == "5"


async def test_a_restart_during_the_backoff_delay_ends_the_delay(tmp_path: Path) -> None:
    script = Script(tmp_path, [*MCP_HANDSHAKE, {"exit": 3}])
    log = EventLog()
    policy = RestartPolicy(base_delay_seconds=60, max_delay_seconds=60, jitter=0.0, max_failures=5)
    with anyio.fail_after(TIMEOUT):  # far below the 60 s delay
        async with Supervisor(script.server(limits=QUICK, name="s"), policy, log) as supervisor:
            await log.wait_for(Reconnecting)
            assert supervisor.restart() is True
            await log.wait_for(Connecting, 2)
            await supervisor.aclose()
            assert supervisor.restart() is False  # closed: nothing to restart
    assert log.kinds()[:5] == ["connecting", "ready", "disconnected", "reconnecting", "connecting"]


async def test_a_server_that_gave_up_cannot_be_restarted(tmp_path: Path) -> None:
    script = Script(tmp_path, [{"exit": 1}])
    config = ServerConfig(
        name="s",
        transport="stdio",
        command=sys.executable,
        args=(str(FIXTURES / "scripted_server.py"), str(script.path), str(script.record_path)),
        limits=QUICK,
        restart_policy=RestartPolicy(enabled=False),
    )
    events: list[HostEvent] = []
    with anyio.fail_after(TIMEOUT):
        async with Host({"s": config}) as host:
            await next_kind(events, host.events(), GaveUp)
            with pytest.raises(ServerNotConnected, match="cannot be restarted"):
                host.server("s").restart()
            with pytest.raises(ServerNotConnected) as info:
                await host.server("s").connected()
    assert str(info.value) == "server 's' is not connected (it gave up)"

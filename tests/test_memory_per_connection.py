"""What keeps a connection's memory down without changing what it does: ``LazyEvent``
(``_tasks``) makes its backend event only when a task first waits, and the objects of one
connection with more attributes than a shared-key dict holds have slots; the stderr tail,
the manifest fetch window, the inbound queue, the stateless era's listen and the tasks calls
are made when first used, and the stderr pump's done event when a close first waits on it; a
stdio transport's two tasks run in its connection's task group, not in a group of its own."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from mcpl_host._tasks import LazyEvent, Lifetime, Waiter
from mcpl_host.config import ServerConfig
from mcpl_host.connection import Connection
from mcpl_host.hosted import HostedServer, connect
from mcpl_host.jsonrpc.errors import LocalProtocolError
from mcpl_host.mcp_methods import MCPClient
from mcpl_host.transports.stdio import StdioTransport

MCPL_SERVER = Path(__file__).resolve().parent.parent / "fixtures" / "mcpl_server.py"


class Counting:
    """An event factory that counts the events it made."""

    def __init__(self) -> None:
        self.made: list[anyio.Event] = []

    def __call__(self) -> Waiter:
        event = anyio.Event()
        self.made.append(event)
        return event


@pytest.mark.anyio
async def test_an_event_set_before_anyone_waits_makes_no_backend_event() -> None:
    factory = Counting()
    event = LazyEvent(factory)
    assert not event.is_set()
    event.set()
    event.set()  # idempotent
    assert event.is_set() and factory.made == []


@pytest.mark.anyio
async def test_a_wait_after_set_returns_with_the_event_it_makes_set() -> None:
    factory = Counting()
    event = LazyEvent(factory)
    event.set()
    with anyio.fail_after(5):
        await event.wait()
        await event.wait()
    assert len(factory.made) == 1 and factory.made[0].is_set()


@pytest.mark.anyio
async def test_set_wakes_every_task_waiting_on_one_backend_event() -> None:
    factory = Counting()
    event = LazyEvent(factory)
    woken: list[int] = []

    async def waiter(number: int) -> None:
        await event.wait()
        woken.append(number)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for number in range(3):
                tg.start_soon(waiter, number)
            await anyio.wait_all_tasks_blocked()
            assert woken == [] and not event.is_set()
            event.set()
    assert sorted(woken) == [0, 1, 2] and len(factory.made) == 1


@pytest.mark.anyio
async def test_a_cancelled_wait_leaves_the_event_usable() -> None:
    event = LazyEvent()
    with anyio.move_on_after(0):
        await event.wait()
    assert not event.is_set()

    async def set_later() -> None:
        await anyio.wait_all_tasks_blocked()
        event.set()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(set_later)
            await event.wait()
    assert event.is_set()


@pytest.mark.anyio
async def test_a_second_close_of_a_lifetime_waits_for_the_first() -> None:
    # Lifetime.closed is a LazyEvent: set by the first closer, waited on by a later one.
    life = Lifetime("a thing")
    entered, release, order = anyio.Event(), anyio.Event(), []

    async def close(name: str) -> None:
        first = await life.first_close()
        if first:  # the owner's close: the work, then closed
            entered.set()
            await release.wait()
            order.append("closed")
            life.closed.set()
        order.append(f"{name} first={first}")

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(close, "a")
            await entered.wait()
            tg.start_soon(close, "b")
            await anyio.wait_all_tasks_blocked()
            assert order == []
            release.set()
    assert order == ["closed", "a first=True", "b first=False"]


def test_the_objects_of_one_connection_have_no_dict_of_their_own() -> None:
    # More than 30 attributes each: without slots, each instance had a dict of 1.6 KiB.
    for cls in (Connection, HostedServer, MCPClient):
        assert "__dict__" not in dir(cls), cls


@pytest.mark.anyio
async def test_an_idle_connection_holds_no_stderr_tail_nor_fetch_window_until_used() -> None:
    # The stderr tail (a deque of Limits.stderr_tail_lines) is made by the first stderr line
    # and the manifest fetch window by the first fetch, each about 0.7 KiB: a connection
    # whose server wrote no stderr and changed no manifest holds neither. What they keep
    # once used: test_handshake (a crashing server's stderr tail), test_manifest (the window).
    config = ServerConfig(command=sys.executable, args=(str(MCPL_SERVER),))
    with anyio.fail_after(30):
        async with connect(config) as conn:
            await conn.mcp.ping()
            transport = conn.connection.transport
            assert isinstance(transport, StdioTransport)
            limiter = conn.inbound._manifest._fetch_limiter  # pyright: ignore[reportPrivateUsage]
            assert transport._tail is None and limiter._allowed is None  # pyright: ignore[reportPrivateUsage]
            assert transport.stderr_tail == [] and "0/" in repr(limiter)
            assert limiter.allow(0.0) and limiter._allowed is not None  # pyright: ignore[reportPrivateUsage]


@pytest.mark.anyio
async def test_an_idle_connection_holds_no_inbound_queue_nor_pump_done_event_until_used() -> None:
    # The inbound queue (a deque, about 0.75 KiB) is made by the first job the server sends,
    # and the stderr pump's done event (an asyncio.Event and its deque, about 0.9 KiB) by the
    # first close that waits for the pump: an idle connection holds neither. What they do
    # once used: test_inbound (jobs queued, back-pressure), test_handshake and test_close
    # (the pump's last lines read before a close ends).
    config = ServerConfig(command=sys.executable, args=(str(MCPL_SERVER),))
    with anyio.fail_after(30):
        async with connect(config) as conn:
            await conn.mcp.ping()
            transport = conn.connection.transport
            assert isinstance(transport, StdioTransport)
            pump_done = transport._pump_done  # pyright: ignore[reportPrivateUsage]
            assert isinstance(pump_done, LazyEvent) and pump_done._event is None  # pyright: ignore[reportPrivateUsage]
            assert conn.connection.pool._queue is None  # pyright: ignore[reportPrivateUsage]
        assert pump_done.is_set()


@pytest.mark.anyio
async def test_a_handshake_era_connection_makes_no_listen_nor_task_polling_until_used() -> None:
    # The stateless era's listen and the tasks calls are made on first use. Until then a
    # listen acknowledgment or a task status has nothing to act on and is dropped, as the
    # objects made at once would have dropped it; their first use makes them, with the
    # rules of before (TK1: the tasks calls belong to the stateless era).
    config = ServerConfig(command=sys.executable, args=(str(MCPL_SERVER),), protocol="handshake")
    with anyio.fail_after(30):
        async with connect(config) as conn:
            mcp = conn.mcp
            await mcp.ping()
            assert mcp._listening is None and mcp._tasks is None  # pyright: ignore[reportPrivateUsage]
            mcp.on_notification("notifications/tasks", {"taskId": "t1", "status": "working"})
            mcp.on_notification("notifications/subscriptions/acknowledged", {"subscriptionId": 1})
            assert mcp.resource_subscriptions == frozenset()
            assert mcp._listening is None and mcp._tasks is None  # pyright: ignore[reportPrivateUsage]
            with pytest.raises(LocalProtocolError, match="TK1"):
                await mcp.get_task("t1")
            assert mcp._tasks is not None  # pyright: ignore[reportPrivateUsage]


@pytest.mark.anyio
async def test_a_stdio_connection_runs_its_transports_tasks_in_its_own_task_group() -> None:
    # transports.base.OpensInGroup: the stderr pump and the process watcher run beside the
    # reader, the writer and the timer, so a connection holds one task group, not two (a
    # nursery and its cancel scope fewer each). The era probe's restart opens the next
    # transport in the same group (test_era_probe); the close reaps the server and both
    # tasks end with it.
    config = ServerConfig(command=sys.executable, args=(str(MCPL_SERVER),))
    with anyio.fail_after(30):
        async with connect(config) as conn:
            await conn.mcp.ping()
            transport = conn.connection.transport
            assert isinstance(transport, StdioTransport)
            assert transport._life.task_group is None  # pyright: ignore[reportPrivateUsage]
            assert transport._pump_started and not transport._watch_ended  # pyright: ignore[reportPrivateUsage]
    assert transport._pump_done.is_set() and transport._watch_ended  # pyright: ignore[reportPrivateUsage]
    assert transport.exit_status is not None


BIG = 8 * 2**20  # bytes: the message a test checks is not kept


async def _kept_after_ping(tmp_path: Path, params: object, answer: object, stderr: str | None = None) -> int:
    """Bytes (``tracemalloc``) still allocated after one ``ping`` of ``params`` answered
    ``answer`` (the server first writes the line ``stderr`` to its stderr, if given), its
    result dropped, while the connection waits on a server that stays silent."""
    from .memory import kept_bytes
    from .wire import MCP_HANDSHAKE, Script

    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"expect": {"method": "ping"}},
            *([{"stderr": stderr}] if stderr is not None else []),
            {"reply": answer},
            {"expect": {"method": "test/never"}, "timeout": 60},  # silent until the close
        ],
    )
    with anyio.fail_after(30):
        async with script.connect() as conn:
            with kept_bytes() as kept:
                assert await conn.connection.request("ping", params) == answer
                await anyio.wait_all_tasks_blocked()  # the stderr written before it read too
    return kept.bytes


@pytest.mark.anyio
async def test_the_read_loop_keeps_nothing_of_the_last_answer_while_it_waits(tmp_path: Path) -> None:
    # The read loop waits for the next line holding nothing of the last one: an 8 MiB answer
    # its requester has dropped is freed while the server stays silent, not kept (the line's
    # bytes and the parsed result) until the server next writes.
    kept = await _kept_after_ping(tmp_path, None, {"blob": "x" * BIG})
    assert kept < 2**20, f"{kept} bytes kept after the answer was dropped"


@pytest.mark.anyio
async def test_the_writer_keeps_nothing_of_what_it_wrote_while_it_waits(tmp_path: Path) -> None:
    # The writer waits for more to write holding nothing of what it wrote last: an 8 MiB
    # request, once written, is freed, not kept until the next write.
    kept = await _kept_after_ping(tmp_path, {"blob": "x" * BIG}, {})
    assert kept < 2**20, f"{kept} bytes kept after the request was written"


@pytest.mark.anyio
async def test_the_stderr_pump_keeps_nothing_of_its_last_read_while_it_waits(tmp_path: Path) -> None:
    # The stderr pump waits for the next read holding nothing of the last one (the chunk and
    # its last line, up to 64 KiB each): what stays is the tail's line, cut, about 260
    # characters.
    kept = await _kept_after_ping(tmp_path, None, {}, stderr="y" * 60_000)
    assert kept < 32 * 1024, f"{kept} bytes kept after the stderr line was read"

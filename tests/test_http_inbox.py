"""The HTTP transports' inbox (``http_common.Inbox``): lines wait for the connection in the
order received, up to ``Limits.max_http_inbox_bytes``; past it the streams' readers wait
until every line held is taken; closing and losing the transport wake them."""

from __future__ import annotations

import anyio
import pytest

from mcpl_host.jsonrpc.errors import ConnectionClosed, ConnectionLost
from mcpl_host.jsonrpc.framing import LineTooLong
from mcpl_host.limits import Limits
from mcpl_host.transports.http_common import Inbox

pytestmark = pytest.mark.anyio


def test_the_bound_is_a_limit() -> None:
    assert Limits().max_http_inbox_bytes == 64 * 1024


async def test_small_lines_are_held_together_and_taken_in_order() -> None:
    inbox = Inbox(max_bytes=100)
    with anyio.fail_after(5):
        for index in range(10):  # 10 lines of 10 bytes: no reader waits
            await inbox.put(b"line %04d!" % index)
        assert [await inbox.get() for _ in range(10)] == [b"line %04d!" % index for index in range(10)]


async def test_a_line_over_the_bound_waits_until_every_held_line_is_taken() -> None:
    inbox = Inbox(max_bytes=30)
    put_done = anyio.Event()

    async def put_big() -> None:
        await inbox.put(b"b" * 20)
        put_done.set()

    with anyio.fail_after(5):
        await inbox.put(b"a" * 10)
        await inbox.put(b"c" * 10)
        async with anyio.create_task_group() as tg:
            tg.start_soon(put_big)
            await anyio.wait_all_tasks_blocked()
            assert not put_done.is_set()  # 10 + 10 + 20 > 30
            assert await inbox.get() == b"a" * 10
            await anyio.wait_all_tasks_blocked()
            assert not put_done.is_set()  # it would fit now, but lines are still held
            assert await inbox.get() == b"c" * 10
            await put_done.wait()
        assert await inbox.get() == b"b" * 20


async def test_no_reader_gets_in_while_another_waits_for_the_inbox_to_empty() -> None:
    inbox = Inbox(max_bytes=30)
    order: list[str] = []

    async def put(name: str, line: bytes) -> None:
        await inbox.put(line)
        order.append(name)

    with anyio.fail_after(5):
        await inbox.put(b"a" * 20)
        async with anyio.create_task_group() as tg:
            tg.start_soon(put, "big", b"b" * 20)  # 40 > 30: waits
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(put, "small", b"s")  # 21 would fit, but the big one waits first
            await anyio.wait_all_tasks_blocked()
            assert order == []
            assert await inbox.get() == b"a" * 20
        assert sorted(order) == ["big", "small"]
        assert sorted([await inbox.get(), await inbox.get()]) == [b"b" * 20, b"s"]


async def test_a_line_larger_than_the_bound_is_taken_in_alone() -> None:
    inbox = Inbox(max_bytes=8)
    with anyio.fail_after(5):
        await inbox.put(b"x" * 100)
        assert await inbox.get() == b"x" * 100
        too_long = LineTooLong(max_line_bytes=8, size=100, head=b"{")
        await inbox.put(too_long)  # counts no bytes
        await inbox.put(b"y" * 8)
        assert await inbox.get() is too_long
        assert await inbox.get() == b"y" * 8


@pytest.mark.parametrize("end", ["close", "lose"])
async def test_closing_or_losing_wakes_a_waiting_reader(end: str) -> None:
    inbox = Inbox(max_bytes=10)
    raised: list[BaseException] = []

    async def put() -> None:
        try:
            await inbox.put(b"b" * 10)
        except (ConnectionClosed, ConnectionLost) as exc:
            raised.append(exc)

    with anyio.fail_after(5):
        await inbox.put(b"a" * 10)
        async with anyio.create_task_group() as tg:
            tg.start_soon(put)
            await anyio.wait_all_tasks_blocked()
            if end == "close":
                inbox.close()
            else:
                inbox.lose("the server went away")
        assert len(raised) == 1
        if end == "close":
            assert isinstance(raised[0], ConnectionClosed)
            with pytest.raises(ConnectionClosed):
                await inbox.get()
        else:
            assert isinstance(raised[0], ConnectionLost)
            assert await inbox.get() == b"a" * 10  # what was received comes first
            with pytest.raises(ConnectionLost, match="the server went away"):
                await inbox.get()


async def test_a_reader_cancelled_while_waiting_leaves_the_inbox_working() -> None:
    inbox = Inbox(max_bytes=10)
    with anyio.fail_after(5):
        await inbox.put(b"a" * 10)
        async with anyio.create_task_group() as tg:
            tg.start_soon(inbox.put, b"b" * 10)  # waits: cancelled, its line dropped
            await anyio.wait_all_tasks_blocked()
            tg.cancel_scope.cancel()
        assert await inbox.get() == b"a" * 10
        await inbox.put(b"c" * 10)
        assert await inbox.get() == b"c" * 10

        async def get_one(into: list[bytes]) -> None:
            item = await inbox.get()
            assert isinstance(item, bytes)
            into.append(item)

        got: list[bytes] = []
        async with anyio.create_task_group() as tg:  # a waiting get is woken by a put
            tg.start_soon(get_one, got)
            await anyio.wait_all_tasks_blocked()
            await inbox.put(b"d")
        assert got == [b"d"]


async def test_put_all_holds_what_fits_and_waits_mid_batch_as_put_does() -> None:
    """``Inbox.put_all`` (the events of one read): the lines that fit go in at once and wake
    the waiting reader; one that would pass the bound waits until every held line is taken
    (the reader is woken first, or it would wait for ever); the rest follow in order."""
    inbox = Inbox(max_bytes=30)
    taken: list[bytes] = []
    batch = [b"a" * 10, b"b" * 10, b"c" * 20, b"d" * 5]  # c: 10 + 10 + 20 > 30

    async def reader(count: int) -> None:
        for _ in range(count):
            taken.append(await inbox.get())

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader, 4)
            await anyio.wait_all_tasks_blocked()  # the reader waits on an empty inbox
            await inbox.put_all(batch)
        assert taken == batch
        await inbox.put_all([b"e" * 10, b"f" * 10])
        assert [await inbox.get(), await inbox.get()] == [b"e" * 10, b"f" * 10]
        inbox.lose("gone")
        with pytest.raises(ConnectionLost):
            await inbox.put_all([b"g"])


async def test_put_all_waits_while_another_reader_waits_for_the_inbox_to_empty() -> None:
    inbox = Inbox(max_bytes=30)
    order: list[str] = []

    async def put(name: str, lines: list[bytes]) -> None:
        await inbox.put_all(lines)
        order.append(name)

    with anyio.fail_after(5):
        await inbox.put(b"a" * 20)
        async with anyio.create_task_group() as tg:
            tg.start_soon(put, "big", [b"b" * 20])  # 40 > 30: waits
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(put, "small", [b"s"])  # would fit, but the big one waits first
            await anyio.wait_all_tasks_blocked()
            assert order == []
            assert await inbox.get() == b"a" * 20
        assert sorted(order) == ["big", "small"]


async def test_get_now_takes_what_is_held_in_order_and_never_waits() -> None:
    inbox = Inbox(max_bytes=100)
    assert inbox.get_now() is None  # nothing held: get() waits instead
    with anyio.fail_after(5):
        await inbox.put_all([b"one", b"two"])
        await inbox.put(LineTooLong(max_line_bytes=8, size=200))
    assert inbox.get_now() == b"one"
    assert inbox.get_now() == b"two"
    assert isinstance(inbox.get_now(), LineTooLong)
    assert inbox.get_now() is None


async def test_get_now_taking_the_last_held_line_lets_a_waiting_reader_in() -> None:
    inbox = Inbox(max_bytes=30)
    put_done = anyio.Event()

    async def put_big() -> None:
        await inbox.put(b"b" * 20)
        put_done.set()

    with anyio.fail_after(5):
        await inbox.put(b"a" * 20)
        async with anyio.create_task_group() as tg:
            tg.start_soon(put_big)
            await anyio.wait_all_tasks_blocked()
            assert not put_done.is_set()  # 20 + 20 > 30
            assert inbox.get_now() == b"a" * 20
            await put_done.wait()  # woken by get_now emptying the inbox
        assert inbox.get_now() == b"b" * 20
        await inbox.put(b"c" * 20)  # the inbox drained: a put goes in at once again
        assert inbox.get_now() == b"c" * 20


@pytest.mark.parametrize("end", ["close", "lose"])
async def test_get_now_after_the_end(end: str) -> None:
    # Closed: lines held are dropped. Lost: they are taken first; get() then says why.
    inbox = Inbox(max_bytes=100)
    with anyio.fail_after(5):
        await inbox.put(b"held")
        if end == "close":
            inbox.close()
            assert inbox.get_now() is None
            with pytest.raises(ConnectionClosed):
                await inbox.get()
        else:
            inbox.lose("gone")
            assert inbox.get_now() == b"held"
            assert inbox.get_now() is None
            with pytest.raises(ConnectionLost):
                await inbox.get()

"""The one timer of a connection (``mcpl_host.timer``): which pending requests are past
their deadline at a given moment, and when the timer wakes next. Plain calls: no loop, no
clock (docs/architecture.md, "Outgoing traffic")."""

from __future__ import annotations

import math
import time

import anyio
import pytest

from mcpl_host.jsonrpc.session import PendingRequest
from mcpl_host.link import Slot
from mcpl_host.timer import Timer, due


def pending(request_id: int, deadline: float) -> PendingRequest:
    slot = Slot()
    slot.deadline = deadline
    return PendingRequest(request_id, "tools/list", slot)


def test_nothing_is_due_before_its_deadline_and_the_earliest_is_next() -> None:
    requests = [pending(1, 30.0), pending(2, 10.0), pending(3, 20.0)]
    assert due(requests, 5.0) == ([], 10.0)


def test_a_deadline_at_now_is_due_and_the_rest_give_the_next() -> None:
    first, second, third = pending(1, 10.0), pending(2, 10.5), pending(3, 9.0)
    expired, following = due([first, second, third], 10.0)
    assert expired == [first, third]  # in the order given
    assert following == 10.5


def test_requests_without_a_deadline_never_expire_and_never_wake_the_timer() -> None:
    long_lived = pending(1, math.inf)
    assert due([long_lived], 1e12) == ([], math.inf)
    assert due([], 0.0) == ([], math.inf)


def test_arming_keeps_the_earliest_deadline() -> None:
    timer = Timer(lambda now: math.inf)
    assert timer.at == math.inf
    timer.arm(20.0)
    timer.arm(30.0)  # later: the timer goes on sleeping towards 20
    assert timer.at == 20.0
    timer.arm(5.0)
    assert timer.at == 5.0
    timer.wake()  # not sleeping: nothing to stop


# --- the timer at work (both backends) -------------------------------------------------------


@pytest.mark.anyio
async def test_a_running_timer_wakes_for_an_earlier_deadline_and_ends_at_stop() -> None:
    # It sleeps on an event: arm() of an earlier deadline must wake it (no deadline before:
    # it would sleep for ever), and stop() must end run() with nothing cancelled.
    expired: list[float] = []
    woken = anyio.Event()

    def expire(now: float) -> float:
        expired.append(now)
        woken.set()
        return math.inf

    timer = Timer(expire)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(timer.run, anyio.Event)
            await anyio.wait_all_tasks_blocked()  # asleep, with no deadline
            timer.arm(time.monotonic())  # due at once
            await woken.wait()
            await anyio.wait_all_tasks_blocked()  # asleep again
            timer.stop()
        assert not tg.cancel_scope.cancel_called
    assert len(expired) == 1
    timer.stop()  # idempotent, and nothing runs


@pytest.mark.anyio
async def test_an_earlier_deadline_or_look_moves_the_sleep_without_waking_the_timer() -> None:
    # arm() and watch() of an earlier moment move the sleeping scope's deadline: the timer
    # is not woken to sleep again, so each sleep (one event made) ends at a due moment.
    # (The moments are a little ahead, so that a wake would be seen; nothing is timed.)
    sleeps = 0
    expired: list[float] = []
    looks: list[float] = []
    woken = anyio.Event()

    def new_event() -> anyio.Event:
        nonlocal sleeps
        sleeps += 1
        return anyio.Event()

    def expire(now: float) -> float:
        expired.append(now)
        woken.set()
        return math.inf

    def look() -> float:
        looks.append(time.monotonic())
        if len(looks) == 2:
            woken.set()
        return 0.02 if len(looks) == 1 else math.inf  # the next look: due soon

    timer = Timer(expire)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(timer.run, new_event)
            await anyio.wait_all_tasks_blocked()  # asleep, with no deadline
            assert sleeps == 1
            timer.arm(time.monotonic() + 0.02)  # due soon: the sleep's deadline moves there
            await woken.wait()
            await anyio.wait_all_tasks_blocked()  # asleep again, with no deadline
            assert (len(expired), sleeps) == (1, 2)
            woken = anyio.Event()
            timer.watch(look)  # looks at once, and asks for the next look soon
            await woken.wait()
            await anyio.wait_all_tasks_blocked()
            assert (len(looks), sleeps) == (2, 3)
            timer.stop()
        assert not tg.cancel_scope.cancel_called

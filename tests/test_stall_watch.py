"""The stall watch (``mcpl_host.stall_watch``) has no task of its own: the connection's timer
calls its ``look`` (``timer.Timer.watch``), and it asks for no more looks once its
connection has ended; the connection's close cancels nothing of it. Its verdicts and
sentences are tested in test_compat.py (plain calls, and a real server whose stall is
reported through the timer)."""

from __future__ import annotations

import math

import anyio
import pytest

from mcpl_host.logging import get_logger
from mcpl_host.observe import Reporter
from mcpl_host.stall_watch import StallWatch
from mcpl_host.timer import Timer

from .wire import TestHandlers


class Quiet:
    """A connection with nothing waiting, open until ``is_open`` is set False."""

    def __init__(self) -> None:
        self.is_open = True
        self.looked = 0

    def waiting(self) -> list[tuple[str, float]]:
        self.looked += 1
        return []

    @property
    def last_received(self) -> float | None:
        return None


def _watch(conn: Quiet, bound: float) -> StallWatch:
    return StallWatch(
        conn,
        Reporter("s", TestHandlers(), None),
        bound=bound,
        profile=lambda: None,
        last_refusal=lambda: None,
        log=get_logger("test"),
    )


@pytest.mark.anyio
async def test_a_quiet_connection_is_looked_at_again_after_the_bound_and_never_once_ended() -> None:
    conn = Quiet()
    watch = _watch(conn, 3600.0)
    assert watch.look() == 3600.0  # nothing waits: look again after the bound
    conn.is_open = False
    assert watch.look() == math.inf  # ended: no more looks
    assert conn.looked == 1


@pytest.mark.parametrize("bound", [0.0, math.inf])
def test_a_bound_of_zero_or_infinity_watches_nothing(bound: float) -> None:
    watched: list[object] = []
    _watch(Quiet(), bound).begin(watched.append)
    assert watched == []


@pytest.mark.anyio
async def test_the_timer_looks_at_once_then_after_the_seconds_each_look_asks_and_stops_with_nothing_cancelled() -> (
    None
):
    looks: list[float] = []
    third = anyio.Event()
    answers = iter([0.0, 0.001, math.inf])  # at once, soon, then no more

    def look() -> float:
        looks.append(anyio.current_time())
        if len(looks) == 3:
            third.set()
        return next(answers)

    timer = Timer(lambda now: math.inf)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(timer.run, anyio.Event)
            await anyio.wait_all_tasks_blocked()  # asleep, with no deadline
            timer.watch(look)  # looks once here, and wakes the timer for the next
            await third.wait()
            await anyio.wait_all_tasks_blocked()  # asleep again, with no look due
            timer.stop()
        assert not tg.cancel_scope.cancel_called
    assert len(looks) == 3

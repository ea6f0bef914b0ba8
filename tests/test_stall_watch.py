"""The stall watch (``mcpl_host.stall_watch``) ends with its connection, on its own: the
connection's close cancels nothing of it. Its verdicts and sentences are tested in
test_compat.py (plain calls and real servers)."""

from __future__ import annotations

import math

import anyio
import pytest

from mcpl_host.logging import get_logger
from mcpl_host.observe import Reporter
from mcpl_host.stall_watch import StallWatch

from .wire import TestHandlers

pytestmark = pytest.mark.anyio


class Quiet:
    """A connection with nothing waiting, that ends when ``ended`` is set."""

    def __init__(self) -> None:
        self.ended = anyio.Event()
        self.looked = 0

    def waiting(self) -> list[tuple[str, float]]:
        self.looked += 1
        return []

    @property
    def last_received(self) -> float | None:
        return None

    async def wait_closed(self) -> object:
        await self.ended.wait()
        return None


@pytest.mark.parametrize("bound", [3600.0, math.inf])
async def test_the_watch_returns_when_its_connection_ends(bound: float) -> None:
    conn = Quiet()
    watch = StallWatch(
        conn,
        Reporter("s", TestHandlers(), None),
        bound=bound,
        profile=lambda: None,
        last_refusal=lambda: None,
        log=get_logger("test"),
    )
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch.run)
            await anyio.wait_all_tasks_blocked()
            conn.ended.set()  # far before the bound: the watch must not sleep it out
        assert not tg.cancel_scope.cancel_called
    assert conn.looked == (1 if bound < math.inf else 0)

"""``FutureWaiter``: a ``Slot``'s waiter on asyncio (``link.slot_waiter_type``; imported
only in an asyncio run, so that ``import mcpl_host`` does not load asyncio, and ssl with it)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

__all__ = ["FutureWaiter"]


class FutureWaiter:
    """An event on asyncio for one waiting task (a ``Slot``'s requester): a bare future.
    Made in a running loop. If its waiter is cancelled, the future is cancelled with it, so
    it must never have two waiters; ``set()`` after that does nothing."""

    __slots__ = ("_future",)

    def __init__(self) -> None:
        self._future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def set(self) -> None:
        if not self._future.done():
            self._future.set_result(None)

    def is_set(self) -> bool:
        return self._future.done()

    def wait(self) -> Awaitable[None]:
        return self._future  # awaited as it is: no coroutine of its own

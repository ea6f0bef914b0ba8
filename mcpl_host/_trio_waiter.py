"""``TrioWaiter``: a ``Slot``'s waiter on trio (``link.slot_waiter_type``; imported only
in a trio run, as trio is not a dependency of the library)."""

from __future__ import annotations

from collections.abc import Awaitable

import trio
import trio.lowlevel

__all__ = ["TrioWaiter"]


class TrioWaiter:
    """An event for one waiting task (a ``Slot``'s requester): ``wait()`` parks the task
    until ``set()`` reschedules it; a cancelled wait is aborted (trio raises ``Cancelled``
    in the task) and a later ``set()`` only marks it set. Never two waiters at once."""

    __slots__ = ("_set", "_task")

    def __init__(self) -> None:
        self._set = False
        self._task: trio.lowlevel.Task | None = None

    def set(self) -> None:
        if self._set:
            return
        self._set = True
        task = self._task
        if task is not None:
            self._task = None
            trio.lowlevel.reschedule(task)

    def is_set(self) -> bool:
        return self._set

    def _abort(self, _: object) -> trio.lowlevel.Abort:
        self._task = None
        return trio.lowlevel.Abort.SUCCEEDED

    def wait(self) -> Awaitable[object]:
        """The wait, to await at once in the waiting task (trio's own coroutine, with no
        coroutine of this waiter around it: one frame less in each resumption)."""
        if self._set:
            return trio.lowlevel.checkpoint()  # noqa: ASYNC105 (awaited by the caller, at once)
        self._task = trio.lowlevel.current_task()
        return trio.lowlevel.wait_task_rescheduled(self._abort)  # noqa: ASYNC105 (the same)

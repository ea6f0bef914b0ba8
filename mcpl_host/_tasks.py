"""Leaving a task group an object entered in its own ``__aenter__``, and the once-only life
of such an object (``Lifetime``).

The owner closes itself first (its tasks end), then leaves the group. Only a cancellation is
handed to the group, whose scope may own it; any other exception propagates as it is, not
wrapped in an ExceptionGroup. An owner is entered at most once and closed once: the first
caller of its close does the work, a later caller waits for it to finish.

``LazyEvent``: a once-only event that makes its backend event only when a task first waits
on it (memory per connection: most such events are set before anyone waits, or never waited
on).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Protocol

import anyio
import anyio.abc

__all__ = ["LazyEvent", "Lifetime", "Waiter", "close_then_leave", "leave_task_group"]


async def leave_task_group(
    task_group: anyio.abc.TaskGroup | None,
    exc_type: type[BaseException] | None,
    exc: BaseException | None,
    tb: TracebackType | None,
) -> None:
    """Exit ``task_group`` (None: nothing to do) after its owner has closed."""
    if task_group is None:
        return
    if isinstance(exc, anyio.get_cancelled_exc_class()):
        await task_group.__aexit__(exc_type, exc, tb)
    else:
        await task_group.__aexit__(None, None, None)


async def close_then_leave(
    aclose: Callable[[], Awaitable[None]],
    task_group: anyio.abc.TaskGroup | None,
    exc_type: type[BaseException] | None,
    exc: BaseException | None,
    tb: TracebackType | None,
) -> None:
    """An owner's ``__aexit__`` (the owner has already let go of ``task_group``): ``aclose()``,
    then, whatever it raised, leave ``task_group`` (``leave_task_group``), once the owner's
    tasks have ended."""
    try:
        await aclose()
    finally:
        await leave_task_group(task_group, exc_type, exc, tb)


class Waiter(Protocol):
    """An event: ``anyio.Event``, ``asyncio.Event`` and ``trio.Event`` all are one."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...

    def wait(self) -> Awaitable[Any]: ...


class LazyEvent:
    """An event (``Waiter``) whose backend event, ``new_event()``, is made when a task first
    waits on it, so that an event set before anyone waits, or never waited on, costs no
    backend event (on asyncio an ``asyncio.Event`` and its deque, about 0.8 KiB; a
    connection's once-only events are mostly such). It behaves as the event it makes: a
    wait after ``set()`` is that event's wait once set."""

    __slots__ = ("_event", "_is_set", "_new_event")

    def __init__(self, new_event: Callable[[], Waiter] = anyio.Event) -> None:
        self._new_event = new_event
        self._event: Waiter | None = None
        self._is_set = False

    def set(self) -> None:
        self._is_set = True
        if self._event is not None:
            self._event.set()

    def is_set(self) -> bool:
        return self._is_set

    def wait(self) -> Awaitable[Any]:
        event = self._event
        if event is None:
            event = self._event = self._new_event()
            if self._is_set:
                event.set()
        return event.wait()


class Lifetime:
    """The life of an object with a task group of its own (a transport): ``entered`` once,
    ``closing`` from the first close on, ``closed`` set when that close is done.

    ``what`` names the owner in the error of a second entry ("a StdioTransport").
    """

    __slots__ = ("_what", "closed", "closing", "entered", "task_group")

    def __init__(self, what: str) -> None:
        self._what = what
        self.entered = False
        self.closing = False
        self.closed = LazyEvent()  # waited on only by a second closer
        self.task_group: anyio.abc.TaskGroup | None = None

    def enter(self) -> None:
        """Mark the owner entered.

        Raises:
            RuntimeError: it was already entered, or closed.
        """
        if self.entered or self.closing:
            raise RuntimeError(f"{self._what} can be entered only once")
        self.entered = True

    async def start(
        self,
        start: Callable[[anyio.abc.TaskGroup], Awaitable[object]],
        aclose: Callable[[], Awaitable[None]],
    ) -> None:
        """Enter a new task group (held as ``task_group``, left by ``leave``) and await
        ``start(task_group)``. On any exception, cancellation included, the owner is closed
        and the group left (``leave``), then the exception goes on."""
        try:
            task_group = anyio.create_task_group()
            await task_group.__aenter__()
            self.task_group = task_group
            await start(task_group)
        except BaseException as exc:
            await self.leave(aclose, type(exc), exc, exc.__traceback__)
            raise

    async def first_close(self) -> bool:
        """True for the first caller: it closes the owner, then sets ``closed``. A later
        caller waits for that and gets False; once closed it returns at once, with no
        checkpoint, so a pending cancellation is not raised here."""
        if self.closing:
            if not self.closed.is_set():  # a second caller waits for the first to finish
                await self.closed.wait()
            return False
        self.closing = True
        return True

    async def leave(
        self,
        aclose: Callable[[], Awaitable[None]],
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """The owner's ``__aexit__``: ``aclose()`` (shielded by the owner), then leave the
        task group (``leave_task_group``): the owner's tasks have ended."""
        try:
            await aclose()
        finally:
            task_group, self.task_group = self.task_group, None
            await leave_task_group(task_group, exc_type, exc, tb)

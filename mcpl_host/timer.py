"""The one timer of a connection: the deadlines of its pending requests.

Rules of this module (docs/architecture.md, "Outgoing traffic"; JSON-RPC 2.0 §4: a request
the server never answers must not wait for ever):

- Nothing is armed per request: a request's deadline is its ``Slot.deadline``
  (``time.monotonic()`` seconds; ``math.inf``: none), and one ``Timer`` per connection
  sleeps until the earliest one. ``Timer.arm`` moves it earlier when a request with a
  shorter deadline is sent; a later deadline never wakes it.
- When it wakes, ``due`` (pure) says which requests are past their deadline at ``now`` and
  when the next one falls; the connection fails those (``RequestTimeout``, and
  ``notifications/cancelled`` goes out). Settled requests are never looked at again, so
  the timer wakes about once per timeout period when nothing times out.
- The ``Timer`` is run by a task of the connection's task group, until
  ``stop()`` (the connection closes): it waits on an event (``wake`` sets it) in a cancel
  scope whose deadline is the next moment it must act, so neither a wake nor the stop
  cancels a scope (each cancel costs anyio a formatted repr of the current task). An
  earlier deadline (``arm``, ``watch``) moves that scope's deadline: the sleeping task is
  not woken to sleep again (one task switch less per request that moves it, such as the
  first request of a connection).
- It also runs one watch of the connection (``watch``: the stall watch), no task of its
  own: ``look()`` is called at once, then again whenever the seconds it returned have
  passed (``math.inf``: no more looks), until ``stop()``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

import anyio

from mcpl_host.jsonrpc.session import PendingRequest
from mcpl_host.link import Waiter

__all__ = ["Timer", "due", "progress_deadline"]


def due(pending: Iterable[PendingRequest], now: float) -> tuple[list[PendingRequest], float]:
    """The requests of ``pending`` whose ``slot.deadline`` is at or before ``now`` (in the
    order given), and the earliest deadline of the others (``math.inf`` when none has one).
    Times are ``time.monotonic()`` seconds. Pure."""
    expired: list[PendingRequest] = []
    following = math.inf
    for request in pending:
        deadline: float = request.slot.deadline
        if deadline <= now:
            expired.append(request)
        elif deadline < following:
            following = deadline
    return expired, following


def progress_deadline(now: float, seconds: float, sent: float, total: float) -> float:
    """A request's deadline when a progress notification for it arrives at ``now``: its
    timeout of ``seconds`` starts again, never past ``total`` seconds since it was ``sent``
    (``time.monotonic()`` seconds; MCP 2025-11-25 "Lifecycle", Timeouts; docs/protocol.md
    R8). Pure."""
    return min(now + seconds, sent + total)


class Timer:
    """Sleeps until ``at`` (the earliest deadline, ``time.monotonic()`` seconds;
    ``math.inf``: none), then calls ``expire(now)``, which fails what is due and returns
    the next deadline. ``arm``, ``wake`` and ``stop`` may be called from any task of the
    connection.
    """

    __slots__ = ("_expire", "_look", "_look_at", "_sleep", "_stopped", "_wakeup", "at")

    def __init__(self, expire: Callable[[float], float]) -> None:
        self._expire = expire
        self.at = math.inf
        self._look: Callable[[], float] | None = None  # the watch (``watch``)
        self._look_at = math.inf  # when it looks next (time.monotonic() seconds)
        self._wakeup: Waiter | None = None  # set to end the current sleep
        self._sleep: anyio.CancelScope | None = None  # the current sleep's scope (its deadline)
        self._stopped = False

    def arm(self, deadline: float) -> None:
        """A request was sent with ``deadline``: wake earlier if it is the earliest."""
        if deadline < self.at:
            self.at = deadline
            self._sooner(deadline)

    def wake(self) -> None:
        """End the current sleep (the deadlines changed: an earlier one, or a lost link)."""
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            wakeup.set()

    def watch(self, look: Callable[[], float]) -> None:
        """Call ``look()`` now, then again whenever the seconds it returns (``math.inf``:
        never again) have passed, until ``stop()`` (module rules). It must not block; what
        it raises goes out of ``run()``. One watch: a second replaces the first."""
        self._look = look
        self._look_at = time.monotonic() + look()
        if self._look_at < self.at:
            self._sooner(self._look_at)  # it may sleep towards a later moment, or with none

    def _sooner(self, moment: float) -> None:
        """End the current sleep by ``moment`` (``time.monotonic()`` seconds): its scope's
        deadline is moved there (module rules); not sleeping, nothing to do (the loop
        computes its next sleep from ``at`` and the watch's next look)."""
        sleep = self._sleep
        if sleep is not None and self._wakeup is not None:
            deadline = anyio.current_time() + (moment - time.monotonic())
            if deadline < sleep.deadline:
                sleep.deadline = deadline

    def stop(self) -> None:
        """End ``run()`` at its next turn (the connection closes). Idempotent."""
        self._stopped = True
        self.wake()

    async def run(self, new_event: Callable[[], Waiter]) -> None:
        """The timer's loop, until ``stop()``; ``new_event`` makes the event it sleeps on
        (the running backend's own: ``link.native_event_type``)."""
        while not self._stopped:
            now = time.monotonic()
            if now >= self.at:
                self.at = self._expire(now)
                continue
            if now >= self._look_at:
                assert self._look is not None
                self._look_at = now + self._look()
                continue
            until = min(self.at, self._look_at)
            self._wakeup = wakeup = new_event()
            with anyio.CancelScope(deadline=anyio.current_time() + (until - now)) as sleep:
                self._sleep = sleep
                await wakeup.wait()
            self._sleep = self._wakeup = None

"""``StallWatch``: the library says, the moment it happens, that a server stopped answering
(docs/protocol.md, "Explaining a silence").

Rules of this module:

- One watch per connection, from the end of the handshake's answer until the connection
  ends, with ``Limits.stall_seconds`` as the bound (0 or ``inf``: no watch). The verdict is
  ``mcpl.explain.stall_verdict`` and the sentence ``mcpl.explain.silence_sentence`` (with
  ``LIBRARY_SWITCH``): the very rule and words of ``mcpl-host probe``'s watch, so the
  application learns within the bound what the probe says.
- Each stall is reported once (an info log line, ``explanation`` set, and a ``stalled``
  observation through the ``Reporter``); a later silence, after the server sent something
  or answered, is a new stall.
- It only tells: nothing is cancelled or refused because of it. A request still ends at its
  own timeout, and a server that answers late is served (defaults never cost a server).
- No polling, and no task of its own: the connection's timer (``timer.Timer.watch``) calls
  ``look`` after the handshake, then again at the moment a stall could begin
  (``mcpl.explain.stall_due``), or after the bound while nothing waits; once the connection
  has ended it asks for no more looks (and the timer stops with the connection).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

import anyio

from mcpl_host.logging import Logger
from mcpl_host.mcpl.compat import Profile
from mcpl_host.mcpl.explain import (
    LIBRARY_SWITCH,
    RefusalRecord,
    Stall,
    silence_sentence,
    stall_due,
    stall_verdict,
)
from mcpl_host.observe import Reporter

__all__ = ["StallWatch", "Watched"]


class Watched(Protocol):
    """What the watch reads of a connection (its ``Connection``)."""

    def waiting(self) -> list[tuple[str, float]]:
        """``(method, sent_at)`` of each host request waiting (``anyio.current_time()``)."""
        ...

    @property
    def last_received(self) -> float | None: ...

    @property
    def is_open(self) -> bool:
        """False once the connection has ended (the server went away, or we closed)."""
        ...


class StallWatch:
    """Watches ``conn`` for stalls of ``bound`` seconds (module rules). ``profile()``: the
    connection's compatibility profile, None for plain MCP; ``last_refusal()``: the last
    server request refused on it (``InboundDispatcher.last_refusal``). ``explanation`` is
    the sentence of the last stall found (None before one)."""

    def __init__(
        self,
        conn: Watched,
        reporter: Reporter,
        *,
        bound: float,
        profile: Callable[[], Profile | None],
        last_refusal: Callable[[], RefusalRecord | None],
        log: Logger,
    ) -> None:
        self._conn = conn
        self._last_refusal = last_refusal
        self._reporter = reporter
        self._bound = bound
        self._profile = profile
        self._log = log
        self._reported: tuple[float | None, float] | None = None  # the silence last reported
        self.explanation: str | None = None

    @property
    def enabled(self) -> bool:
        return 0 < self._bound < math.inf

    def begin(self, watch: Callable[[Callable[[], float]], None]) -> None:
        """Start watching (after the handshake's answer): hand ``look`` to ``watch`` (the
        connection's ``Connection.watch``), unless the bound turns the watch off."""
        if self.enabled:
            watch(self.look)

    def look(self) -> float:
        """Look at the connection once: a stall found is reported (once per silence). Returns
        the seconds until the next look: until a stall could begin, or the bound while
        nothing waits or after a report; ``math.inf`` once the connection has ended."""
        if not self._conn.is_open:
            return math.inf
        now = anyio.current_time()
        waiting = self._conn.waiting()
        last = self._conn.last_received
        verdict = stall_verdict(now, waiting, last, self._bound)
        if verdict is None:
            due = stall_due(waiting, last, self._bound)
            return self._bound if due is None else max(due - now, 0.0)
        silence = (last, min(sent for _, sent in waiting))
        if silence != self._reported:
            self._reported = silence
            self._report(verdict)
        return self._bound

    def _report(self, stall: Stall) -> None:
        refusal = self._last_refusal()
        profile = self._profile()
        self.explanation = sentence = silence_sentence(stall, refusal, profile, switch=LIBRARY_SWITCH)
        self._log.info("the server stopped answering", explanation=sentence)
        self._reporter.stalled(stall, sentence, refusal.phrase if refusal is not None else None, profile)

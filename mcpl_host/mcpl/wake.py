"""The wake rules of the event inbox (MCPL RFC-006 rev 8 §4.2), pure: no I/O, no clock
reads, no logging. ``now`` is always an argument, in seconds on a monotonic scale (the
caller's ``time.monotonic`` or a test's clock). ``services/coalescing.py`` feeds a
``WakeSchedule`` per conversation from what the inbox admits, replaces, retracts and drains.

Rules (docs/protocol.md EC13, EC15):

- A **cause** is an admitted occurrence that qualifies for a wake under the application's
  policy (``WakePolicy.qualifies``, RFC-006 §16.6's host policy; one that does not qualify
  creates no cause). An **ordinary** cause (an occurrence without a subject: no
  ``coalesce``, a deletion notice, an overflow append) is due ``quiet_seconds`` after it
  arrived. A **subject** cause (a coalesced subject's unconsumed occurrence or batch, keyed
  by the subject) is one per subject.
- A qualifying replacement gets the normal treatment (its quiet period starts again,
  debounce-style) but never a second cause for the subject; the subject's deadline is never
  later than its first pending arrival + ``max_postpone_seconds`` (the finite no-starvation
  bound, §4.2). A replacement that does not qualify, or a retraction, withdraws the cause:
  no wake comes solely for it (§4.2, §6).
- A subject's bound never moves another cause's deadline (§4.2's last bullet, vector 44):
  each cause has its own deadline, computed from its own arrivals only.
- A drain (``consume``) retires every ordinary cause due at it and every subject cause
  whose content it consumed. An ordinary cause not yet due whose content the drain delivered keeps its
  deadline (EC15): it is marked ``delivered`` and is reported due at its own time, once.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from mcpl_host.mcpl.coalescing import SubjectKey

__all__ = ["WakeCause", "WakePolicy", "WakeSchedule", "qualifies_everything"]


def qualifies_everything(event: Mapping[str, Any]) -> bool:
    """The default policy: every occurrence qualifies for a wake."""
    return True


def _seconds(value: object) -> bool:
    """A finite number (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True, slots=True)
class WakePolicy:
    """The application's wake policy (RFC-006 §4.2, §16.6).

    Args:
        quiet_seconds: how long after an occurrence its wake is due (seconds, ≥ 0, finite);
            a qualifying replacement starts it again (debounce).
        max_postpone_seconds: the no-starvation bound: a subject's wake is due at most this
            long after its first pending arrival, however many replacements follow (seconds,
            > 0, finite, ≥ ``quiet_seconds``).
        qualifies: whether an occurrence qualifies for a wake, over its host copy (a
            ``push/event``'s params or a ``channels/incoming`` message, ``modelContent``
            included); the default qualifies everything. It must not raise.

    Raises:
        ValueError: a bound out of range.
    """

    quiet_seconds: float = 1.0
    max_postpone_seconds: float = 10.0
    qualifies: Callable[[Mapping[str, Any]], bool] = qualifies_everything

    def __post_init__(self) -> None:
        quiet, bound = self.quiet_seconds, self.max_postpone_seconds
        if not (_seconds(quiet) and quiet >= 0):
            raise ValueError("quiet_seconds must be a finite number of seconds, at least 0")
        if not (_seconds(bound) and bound > 0):
            raise ValueError(
                "max_postpone_seconds must be a finite number of seconds above 0 (RFC-006 §4.2: a finite bound)"
            )
        if bound < quiet:
            raise ValueError("max_postpone_seconds must be at least quiet_seconds")


@dataclass(slots=True)
class WakeCause:
    """One pending cause of a wake (module rules). ``subject`` None for an ordinary cause;
    ``first``: its first pending arrival, ``latest``: its newest qualifying arrival, ``due``:
    when its wake is due (seconds, the schedule's scale); ``delivered``: an earlier drain
    already delivered its content (EC15); ``token`` numbers it within its schedule."""

    token: int
    subject: SubjectKey | None
    first: float
    latest: float
    due: float
    delivered: bool = False


def _finite(now: float) -> float:
    if not math.isfinite(now):
        raise ValueError("now must be a finite number of seconds")
    return now


@dataclass(slots=True)
class WakeSchedule:
    """One conversation's pending causes and their deadlines (module rules).
    ``max_delivered``: ordinary causes kept past a drain that delivered their content (≥ 1);
    past it the oldest goes (a wake for content already read; a bound on memory when a
    server pushes fast under a long quiet period). Undelivered causes are bounded by what
    the inbox holds unread."""

    policy: WakePolicy
    max_delivered: int = 10_000
    _ordinary: dict[int, WakeCause] = field(default_factory=dict[int, WakeCause])
    _subjects: dict[SubjectKey, WakeCause] = field(default_factory=dict[SubjectKey, WakeCause])
    _tokens: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def ordinary(self, now: float, *, qualifies: bool) -> WakeCause | None:
        """An ordinary occurrence arrived at ``now``: its cause (due ``quiet_seconds``
        later), or None when it does not qualify. Raises ``ValueError`` for a non-finite ``now``."""
        _finite(now)
        if not qualifies:
            return None
        cause = WakeCause(next(self._tokens), None, now, now, now + self.policy.quiet_seconds)
        self._ordinary[cause.token] = cause
        return cause

    def subject(self, key: SubjectKey, now: float, *, qualifies: bool) -> WakeCause | None:
        """An occurrence of subject ``key`` arrived at ``now`` (the first, or a replacement
        of its unconsumed one). Qualifying: the subject's one cause, due ``quiet_seconds``
        after ``now`` but never later than its first pending arrival +
        ``max_postpone_seconds``. Not qualifying: the subject's cause is withdrawn; None.
        Raises ``ValueError`` for a non-finite ``now``."""
        _finite(now)
        if not qualifies:
            self._subjects.pop(key, None)
            return None
        policy = self.policy
        cause = self._subjects.get(key)
        if cause is None:
            cause = self._subjects[key] = WakeCause(
                next(self._tokens), key, now, now, now + policy.quiet_seconds
            )
            return cause
        cause.latest = max(cause.latest, now)
        cause.due = min(cause.latest + policy.quiet_seconds, cause.first + policy.max_postpone_seconds)
        return cause

    def withdraw(self, key: SubjectKey) -> WakeCause | None:
        """Subject ``key``'s unconsumed work was retracted: its cause goes (returned, or None)."""
        return self._subjects.pop(key, None)

    def causes(self) -> list[WakeCause]:
        """Every pending cause, earliest deadline first."""
        return sorted([*self._ordinary.values(), *self._subjects.values()], key=lambda c: (c.due, c.token))

    def due(self, now: float) -> list[WakeCause]:
        """The causes whose wake is due at ``now`` (deadline ≤ ``now``), earliest first."""
        return [cause for cause in self.causes() if cause.due <= now]

    def next_deadline(self) -> float | None:
        """The earliest deadline (seconds, the schedule's scale), or None with no cause."""
        deadlines = [c.due for c in self._ordinary.values()] + [c.due for c in self._subjects.values()]
        return min(deadlines, default=None)

    def consume(self, now: float, *, keep: Collection[SubjectKey] = ()) -> None:
        """The conversation drained at ``now`` (everything it had unread is consumed):
        ordinary causes due at ``now`` retire, and every subject cause except those in
        ``keep`` (a subject whose work is still pending after the drain: a notice that came
        while its batch rendered; its cause stays as it was). An ordinary cause not yet due
        is marked ``delivered`` and keeps its deadline (EC15). Raises ``ValueError`` for a
        non-finite ``now``."""
        _finite(now)
        for token, cause in list(self._ordinary.items()):
            if cause.due <= now:
                del self._ordinary[token]
            else:
                cause.delivered = True
        while len(self._ordinary) > max(1, self.max_delivered):  # all delivered now: oldest first
            del self._ordinary[next(iter(self._ordinary))]
        for key in list(self._subjects):
            if key not in keep:
                del self._subjects[key]

    def __len__(self) -> int:
        return len(self._ordinary) + len(self._subjects)

"""Event coalescing (MCPL RFC-006 rev 8): the inbox's decisions, pure (no I/O, no clock, no
logging; the caller passes ``now``). ``services/coalescing.py`` applies them.

What is kept (docs/protocol.md EC1-EC12):

- An **occurrence** is one model-visible item (a push's or a channel message's host copy,
  ``modelContent`` included) with the conversations that have not read it (``unread``) and
  those that have (``read``). Consumption (RFC-006 §3.3, EC4) is ``"shared"`` by default:
  an occurrence read by one conversation is history everywhere; it stays unread in the
  others until they drain. With ``"per-conversation"`` consumption it is history only where
  it was read, and stays replaceable and withdrawable where it is unread (the receipt then
  reports the more conservative outcome, §3.3); a materialized render read anywhere is
  still history everywhere (§3.3's shared baseline), so batches are shared in both modes.
- A **subject** (RFC-006 §3.2: ``(binding, scope kind, scope id, key)``) has its consumed
  history (``"none"`` / ``"some"`` / ``"unknown"``), at most one unconsumed occupant (a plain
  occurrence or a materialized render), at most one pending batch and one rendering batch
  (§5.4). History only rises, or degrades to ``"unknown"`` (``forget_history``); never to
  ``"none"``. Per conversation (``history(key, conversation)``): ``"some"`` where the
  conversation has read an occurrence of the subject (or holds a render read elsewhere),
  else the subject's history before its first consumption; with shared consumption, the
  subject's history.
- A **batch** (§5.1) holds the retained notices (oldest first, at most ``retain_notices``;
  the older ones counted in ``dropped``), the latest notice's params (the fallback) and its
  audience. Its states: pending, rendering (frozen), cancelled, closed.
- **Receipts** (§3.1): the answer to each admitted coalesced occurrence, by ``(binding,
  eventId)``, for the retry window from its first admission (EC9).

Outcomes follow RFC-006 §4, §5.1, §6 and §7; ``Drained.model_needed`` says §5.2's "no
inference when every cause rendered empty".
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import orjson

from mcpl_host.jsonrpc.values import is_mapping

__all__ = [
    "CONSUMPTIONS",
    "DEFAULT_RETRY_WINDOW_SECONDS",
    "EVICTION_SCAN",
    "MAX_DATA_BYTES",
    "MAX_KEY_BYTES",
    "AuditEntry",
    "AuditWhat",
    "Batch",
    "CoalescingState",
    "Consumption",
    "Drained",
    "History",
    "Lane",
    "Notice",
    "Occurrence",
    "Outcome",
    "Receipt",
    "SubjectKey",
    "coalesce_problem",
]

History = Literal["none", "some", "unknown"]
Outcome = Literal["first", "replaced", "appended", "retracted", "noted", "consumed"]
Lane = Literal["push", "channel"]
#: Where a consumed occurrence is history (RFC-006 §3.3; docs/protocol.md EC4): everywhere
#: (``"shared"``, the conservative rule) or only in the conversations that read it.
Consumption = Literal["shared", "per-conversation"]
CONSUMPTIONS: tuple[Consumption, ...] = get_args(Consumption)
#: ``(binding, scope kind, scope id, key)`` (RFC-006 §3.2).
SubjectKey = tuple[str, str, str, str]
#: RFC-006 §13: a key is 1..256 bytes of UTF-8; notice ``data`` at most 4 KiB serialized.
MAX_KEY_BYTES = 256
MAX_DATA_BYTES = 4096
#: Subjects looked at, oldest first, for one that can be forgotten when ``max_subjects`` are
#: tracked (a bound on the work of one admission).
EVICTION_SCAN = 16
#: RFC-006 §3.1: retries are recognised for at least 3,600,000 ms.
DEFAULT_RETRY_WINDOW_SECONDS = 3600.0
_BOOLEANS = ("initial", "deferred", "retract")


def coalesce_problem(
    params: Mapping[str, Any], *, lane: Lane, deferred_ok: bool, channel_scoped_ok: bool
) -> tuple[str, str] | None:
    """``(field, reason)`` when the ``coalesce`` member of ``params`` (a ``push/event``'s
    params or a ``channels/incoming`` message) is malformed (RFC-006 §13), else None.
    ``deferred_ok`` / ``channel_scoped_ok``: the host advertises ``deferred`` /
    ``channelScopedPush``. Never raises."""
    coalesce = params.get("coalesce")
    if not is_mapping(coalesce):
        return "coalesce", "must be an object"
    key = coalesce.get("key")
    if not isinstance(key, str) or not key:
        return "coalesce.key", "must be a non-empty string"
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        return "coalesce.key", f"must be at most {MAX_KEY_BYTES} bytes of UTF-8"
    for name in _BOOLEANS:
        if name in coalesce and not isinstance(coalesce[name], bool):
            return f"coalesce.{name}", "must be a boolean"
    initial, deferred, retract = (coalesce.get(name) is True for name in _BOOLEANS)
    if retract and deferred:
        return "coalesce.retract", "is exclusive with deferred"
    if retract and initial:
        return "coalesce.initial", "is exclusive with retract"
    if "data" in coalesce:
        if not deferred:
            return "coalesce.data", "is allowed only with deferred"
        try:
            size = len(orjson.dumps(coalesce["data"]))
        except (TypeError, orjson.JSONEncodeError):
            return "coalesce.data", "is not JSON"
        if size > MAX_DATA_BYTES:
            return "coalesce.data", f"must be at most {MAX_DATA_BYTES} bytes serialized"
    channel_id = coalesce.get("channelId")
    if lane == "channel":
        if deferred or "deferred" in coalesce:
            return "coalesce.deferred", "is not allowed on channels/incoming"
        if "channelId" in coalesce:
            return "coalesce.channelId", "is not allowed on channels/incoming"
        event_id = params.get("eventId")
        if not isinstance(event_id, str) or not event_id:
            return "eventId", "is required with coalesce"
        return None
    if "channelId" in coalesce:
        if not isinstance(channel_id, str) or not channel_id:
            return "coalesce.channelId", "must be a non-empty string"
        if not channel_scoped_ok:
            return "coalesce.channelId", "channelScopedPush is not advertised"
    if deferred and not deferred_ok:
        return "coalesce.deferred", "deferred is not advertised"
    return None


@dataclass(slots=True, eq=False)
class Occurrence:
    """One model-visible item: ``event`` is the host copy (push params or channel message,
    ``modelContent`` included); ``seq`` orders the inbox; ``subject`` None for an ordinary
    occurrence (no coalescing, a deletion notice, an overflow append)."""

    seq: int
    lane: Lane
    event_id: str
    event: dict[str, Any]
    subject: SubjectKey | None
    unread: set[str]
    consumed: bool = False  # read by some conversation
    materialized: bool = False  # a settled batch (render or fallback): a notice keeps it (§3.3)
    read: set[str] = field(default_factory=set[str])  # the conversations that read it


@dataclass(frozen=True, slots=True)
class Notice:
    """A retained notice (RFC-006 §5.2 ``Notice``): ``data`` absent when None is ``has_data`` False."""

    event_id: str
    timestamp: Any
    data: Any = None
    has_data: bool = False

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"eventId": self.event_id, "timestamp": self.timestamp}
        if self.has_data:
            wire["data"] = self.data
        return wire


@dataclass(slots=True, eq=False)
class Batch:
    """A deferred batch of one subject (RFC-006 §5.1, §5.4)."""

    id: int
    seq: int
    subject: SubjectKey
    notices: deque[Notice]
    fallback: dict[str, Any]
    audience: set[str]
    received: int = 1
    state: Literal["pending", "rendering", "cancelled", "closed"] = "pending"

    @property
    def dropped(self) -> int:
        return self.received - len(self.notices)

    def render_params(self) -> dict[str, Any]:
        """``push/render`` params of the frozen batch (RFC-006 §5.2)."""
        _, kind, scope, key = self.subject
        params: dict[str, Any] = {"featureSet": self.fallback.get("featureSet")}
        if kind == "channel":
            params["channelId"] = scope
        params.update(
            key=key,
            eventId=self.notices[-1].event_id,
            notices=[notice.to_wire() for notice in self.notices],
            dropped=self.dropped,
        )
        return params


@dataclass(slots=True, eq=False)
class _Subject:
    history: History
    occupant: Occurrence | None = None
    pending: Batch | None = None
    rendering: Batch | None = None
    last_event_id: str | None = None  # the newest occurrence found consumed
    reply_target: dict[str, Any] | None = None  # the newest channel message's identity
    earlier: list[Occurrence] = field(default_factory=list["Occurrence"])  # renders kept unread
    # Per-conversation history (EC4): the conversations where the subject is history (they
    # read an occurrence of it, or hold a render read elsewhere), and what ``history`` was
    # before its first consumption (``"none"`` / ``"unknown"``: the others' history).
    readers: set[str] = field(default_factory=set[str])
    base: History = "unknown"


#: What an audit entry records (RFC-006 §11): an unread occurrence replaced (``displaced``)
#: or withdrawn (``removed``), a batch cancelled before it settled (``cancelled``), a render
#: answer that came for a cancelled or settled batch (``discarded``), a batch shown as
#: rendered content, as its fallback, as nothing (``rendered``, ``fallback``, ``empty``) or
#: dropped for lapsed authority (``dropped``); ``folded`` lists its notices.
AuditWhat = Literal[
    "displaced", "removed", "cancelled", "discarded", "rendered", "fallback", "empty", "dropped"
]


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One audit record: ``what`` happened to the occurrence ``event_id`` of ``subject``;
    ``folded``: the eventIds of a batch's retained notices (oldest first), else empty."""

    what: AuditWhat
    event_id: str
    subject: SubjectKey | None
    folded: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Receipt:
    """An admitted coalesced occurrence's answer (RFC-006 §3.1): kept until ``expires``
    (seconds, the caller's clock)."""

    fingerprint: str
    result: bytes
    expires: float


@dataclass(frozen=True, slots=True)
class Drained:
    """What one conversation's drain returns: ``items`` the occurrences the model now reads,
    oldest first; ``rendered`` the batches settled for it; ``model_needed`` False only when
    batches were its causes and none materialized anything (RFC-006 §5.2, rev 8)."""

    items: tuple[Occurrence, ...]
    rendered: int

    @property
    def model_needed(self) -> bool:
        return bool(self.items) or self.rendered == 0


@dataclass(slots=True)
class CoalescingState:
    """The inbox's state and rules (module rules). ``conversations``: the contexts an
    occurrence is delivered to (each fresh occurrence reaches all of them);
    ``max_subjects``: tracked subjects; past it the oldest idle one is forgotten (its
    history then reads ``"unknown"``), or, when none is idle, an occurrence of a new subject
    is appended as ordinary work (RFC-006 §11, EC8); ``retain_notices``: notices kept per
    batch (≥ 64, §5.1); ``max_receipts``: receipts kept (the oldest goes first past it, EC9);
    ``consumption``: ``"shared"`` or ``"per-conversation"`` (module rules, EC4; ``ValueError``
    for another value).
    """

    conversations: list[str]
    max_subjects: int = 100_000
    retain_notices: int = 64
    max_receipts: int = 100_000
    max_audit: int = 1000
    consumption: Consumption = "shared"
    _subjects: dict[SubjectKey, _Subject] = field(default_factory=dict[SubjectKey, _Subject])
    _items: dict[int, Occurrence] = field(default_factory=dict[int, Occurrence])
    _batches: dict[int, Batch] = field(default_factory=dict[int, Batch])
    _receipts: dict[tuple[str, str], Receipt] = field(default_factory=dict[tuple[str, str], Receipt])
    _seq: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _audit: deque[AuditEntry] = field(default_factory=deque[AuditEntry])

    def __post_init__(self) -> None:
        if self.consumption not in CONSUMPTIONS:
            raise ValueError(f"consumption must be one of {', '.join(CONSUMPTIONS)}")
        self._audit = deque(maxlen=self.max_audit)

    def audit(self) -> list[AuditEntry]:
        """The newest ``max_audit`` audit entries, oldest first (RFC-006 §11: displaced
        occurrences, folded notices, discarded late renders; for humans and logs, never a
        model)."""
        return list(self._audit)

    def _record(
        self, what: AuditWhat, event_id: str, subject: SubjectKey | None, batch: Batch | None = None
    ) -> None:
        folded = tuple(n.event_id for n in batch.notices) if batch is not None else ()
        self._audit.append(AuditEntry(what, event_id, subject, folded))

    # --- conversations ---------------------------------------------------------------------

    def add_conversation(self, name: str) -> None:
        """A new context; it receives occurrences admitted from now on."""
        if name not in self.conversations:
            self.conversations.append(name)

    # --- receipts (RFC-006 §3.1) -------------------------------------------------------------

    def receipt(self, binding: str, event_id: str, now: float) -> Receipt | None:
        """The receipt of an admitted occurrence still in its window, else None."""
        found = self._receipts.get((binding, event_id))
        if found is None:
            return None
        if found.expires <= now:
            del self._receipts[(binding, event_id)]
            return None
        return found

    def remember(self, binding: str, event_id: str, fingerprint: str, result: bytes, expires: float) -> None:
        """Keep an answer until ``expires``; past ``max_receipts`` the oldest goes (EC9)."""
        receipts = self._receipts
        receipts.pop((binding, event_id), None)
        while len(receipts) >= self.max_receipts:
            del receipts[next(iter(receipts))]
        receipts[(binding, event_id)] = Receipt(fingerprint, result, expires)

    def receipts(self) -> dict[tuple[str, str], Receipt]:
        """A copy of the receipts (to store them durably)."""
        return dict(self._receipts)

    # --- admission outcomes -------------------------------------------------------------------

    def _subject(self, key: SubjectKey, initial: bool) -> _Subject | None:
        """The tracked subject, made on first sight (``"none"`` only from ``initial``, §3.3);
        None when capacity is exhausted (EC8)."""
        subject = self._subjects.get(key)
        if subject is None:
            if len(self._subjects) >= self.max_subjects and not self._evict_idle():
                return None
            subject = self._subjects[key] = _Subject("none" if initial else "unknown")
        return subject

    def _evict_idle(self) -> bool:
        """Make room (RFC-006 §11): forget the oldest subject with no unread work among the
        ``EVICTION_SCAN`` oldest (those with work go to the end, so the scan moves on). A
        forgotten subject is untracked again: its history reads ``"unknown"``, never
        ``"none"`` (§3.3). False when none of them is idle."""
        subjects = self._subjects
        for key in list(itertools.islice(subjects, EVICTION_SCAN)):
            subject = subjects.pop(key)
            occupant = subject.occupant
            busy = (
                (occupant is not None and self._replaceable(occupant)) or subject.pending or subject.rendering
            )
            if not busy and not any(not r.consumed for r in subject.earlier):
                return True
            subjects[key] = subject  # busy: to the end
        return False

    def _append(
        self,
        lane: Lane,
        event_id: str,
        event: dict[str, Any],
        subject: SubjectKey | None,
        audience: Iterable[str],
    ) -> Occurrence:
        occurrence = Occurrence(next(self._seq), lane, event_id, event, subject, set(audience))
        if occurrence.unread:
            self._items[occurrence.seq] = occurrence
        return occurrence

    def _replaceable(self, occurrence: Occurrence) -> set[str]:
        """The conversations where ``occurrence`` may still be replaced or withdrawn: those
        that have not read it, unless it is history everywhere (read somewhere with shared
        consumption, or a render read anywhere: the shared baseline, RFC-006 §3.3; EC4)."""
        if occurrence.consumed and (self.consumption == "shared" or occurrence.materialized):
            return set()
        return set(occurrence.unread)

    def _history_in(self, subject: _Subject, conversation: str) -> History:
        """The subject's consumed history in ``conversation`` (module rules, EC4)."""
        if self.consumption == "shared" or subject.history != "some":
            return subject.history
        return "some" if conversation in subject.readers else subject.base

    def _unoccupy(self, subject: _Subject, what: AuditWhat) -> tuple[set[str] | None, str | None, set[str]]:
        """Remove every unconsumed piece of work of ``subject`` (the occupant where it is
        replaceable, pending batch; a rendering batch is cancelled, §5.4 rule 6): the
        conversations it was removed from (None: nothing was removed), the newest removed
        occurrence's eventId, and the conversations that had read the removed occupant
        (per-conversation consumption: it stays history there, EC4)."""
        audience: set[str] | None = None
        prior: str | None = None
        read: set[str] = set()
        occupant = subject.occupant
        where = self._replaceable(occupant) if occupant is not None else set[str]()
        if occupant is not None and where:
            audience = where
            prior = occupant.event_id
            read = set(occupant.read)
            occupant.unread -= where
            if not occupant.unread:
                self._items.pop(occupant.seq, None)
            self._record(what, occupant.event_id, occupant.subject)
        subject.occupant = None
        for render in subject.earlier:  # earlier unread renders: all older unconsumed work
            if not render.consumed:
                self._items.pop(render.seq, None)
                self._record(what, render.event_id, render.subject)
        subject.earlier.clear()
        for batch in (subject.rendering, subject.pending):
            if batch is None:
                continue
            audience = (audience or set()) | batch.audience
            prior = batch.notices[-1].event_id
            batch.state = "cancelled"
            self._batches.pop(batch.id, None)
            self._record("cancelled", prior, batch.subject, batch)
        subject.rendering = subject.pending = None
        return audience, prior, read

    def plain(
        self, key: SubjectKey, lane: Lane, event_id: str, event: dict[str, Any], *, initial: bool
    ) -> tuple[Outcome, str | None]:
        """A plain occurrence (RFC-006 §4): replaces the unconsumed occupant (and a pending or
        rendering batch, §5.4 rule 6) in its audience, else appends. Per conversation (EC4):
        replaced where the occupant is unread, appended where it was read; ``"appended"``
        then, the more conservative (§3.3), and it reaches the occupant's conversations."""
        subject = self._subject(key, initial)
        if subject is None:
            self._append(lane, event_id, event, None, self.conversations)
            return "appended", None
        audience, prior, read = self._unoccupy(subject, "displaced")
        if audience is not None:
            outcome: Outcome = "appended" if read else "replaced"
            # the audience only narrows (§3.2): the conversations the occupant reached
            reach = [name for name in self.conversations if name in audience or name in read]
        else:
            outcome = "first" if subject.history == "none" else "appended"
            prior = subject.last_event_id if subject.history == "some" else None
            reach = list(self.conversations)
        subject.occupant = self._append(lane, event_id, event, key, reach)
        return outcome, prior

    def notice(
        self, key: SubjectKey, event_id: str, event: dict[str, Any], *, initial: bool
    ) -> tuple[Outcome, str | None]:
        """A deferred notice (RFC-006 §5.1): joins the pending batch, displaces an unread
        plain occupant, else opens a batch. Past capacity: appended as its fallback (§11)."""
        coalesce: Mapping[str, Any] = event.get("coalesce") or {}
        notice = Notice(event_id, event.get("timestamp"), coalesce.get("data"), "data" in coalesce)
        subject = self._subject(key, initial)
        if subject is None:
            self._append("push", event_id, event, None, self.conversations)
            return "appended", None
        pending = subject.pending
        if pending is not None:
            pending.notices.append(notice)
            pending.received += 1
            pending.fallback, last = event, pending.fallback
            return "replaced", str(last.get("eventId"))
        occupant = subject.occupant
        outcome: Outcome = "first"
        prior: str | None = None
        audience = set(self.conversations)
        # An unread plain occupant is displaced (§5.1); an unread materialized render stays:
        # the next render describes what changed since it (§3.3, the shared baseline). Per
        # conversation (EC4): displaced where unread, history where read ("first" then, the
        # more conservative; the batch reaches the occupant's conversations).
        where = self._replaceable(occupant) if occupant is not None else set[str]()
        if occupant is not None and where and not occupant.materialized:
            occupant.unread -= where
            if not occupant.unread:
                self._items.pop(occupant.seq, None)
            self._record("displaced", occupant.event_id, key)
            subject.occupant = None
            if occupant.read:
                audience = where | occupant.read
            else:
                outcome, prior, audience = "replaced", occupant.event_id, where
        batch = Batch(
            next(self._seq),
            next(self._seq),
            key,
            deque([notice], maxlen=self.retain_notices),
            event,
            audience,
        )
        subject.pending = batch
        self._batches[batch.id] = batch
        return outcome, prior

    def retract(
        self, key: SubjectKey, lane: Lane, event_id: str, event: dict[str, Any], *, empty: bool
    ) -> tuple[Outcome, str | None]:
        """A retraction (RFC-006 §6): every unconsumed piece of work of the subject goes (per
        conversation: where it is unread, EC4); the notice is appended (an ordinary
        occurrence) for each conversation whose history is ``some`` or ``unknown``; the
        outcome is ``noted`` / ``consumed`` when there is one such conversation (§3.3)."""
        subject = self._subject(key, initial=False)  # tracked from now on (None: no room)
        prior: str | None = None
        heard = list(self.conversations)  # the conversations with some or unknown history
        if subject is not None:
            _, prior, _ = self._unoccupy(subject, "removed")
            if prior is None and subject.history == "some":
                prior = subject.last_event_id
            heard = [name for name in heard if self._history_in(subject, name) != "none"]
        if not heard:
            return "retracted", prior
        if empty:
            return "consumed", prior
        self._append(lane, event_id, event, None, heard)
        return "noted", prior

    def ordinary(self, lane: Lane, event_id: str, event: dict[str, Any]) -> Occurrence:
        """An occurrence without ``coalesce``: appended, for every conversation (§2 principle 6)."""
        return self._append(lane, event_id, event, None, self.conversations)

    def forget_history(self) -> None:
        """Operator intervention or loss of state (RFC-006 §3.3): every tracked subject's
        history degrades to ``"unknown"`` (never to ``"none"``)."""
        for subject in self._subjects.values():
            subject.history = subject.base = "unknown"
            subject.readers.clear()

    def seal_pending(self) -> None:
        """Conservative recovery (RFC-006 §3.2, EC7): each unconsumed occupant becomes an
        ordinary occurrence and its subject's history ``"unknown"``; pending batches stay."""
        for subject in self._subjects.values():
            occupant = subject.occupant
            if occupant is not None and self._replaceable(occupant):
                occupant.subject = None
                subject.occupant = None
                subject.history = "unknown"

    # --- deferred batches (RFC-006 §5.4) --------------------------------------------------------

    def due_batches(self, conversation: str) -> list[Batch]:
        """The pending batches a drain of ``conversation`` renders now."""
        return [
            batch
            for batch in self._batches.values()
            if batch.state == "pending" and conversation in batch.audience
        ]

    def freeze(self, batch: Batch) -> None:
        """Rule 1: rendering starts; notices from now on open a new pending batch."""
        subject = self._subjects[batch.subject]
        batch.state = "rendering"
        subject.rendering = batch
        if subject.pending is batch:
            subject.pending = None

    def settle(
        self,
        batch: Batch,
        content: list[Any] | None,
        *,
        fallback: bool = False,
        drop: bool = False,
        timestamp: str | None = None,
    ) -> bool:
        """Rules 2-7: the one materialization of a frozen batch, atomically. ``content``: the
        rendered model content (empty: nothing happened); ``fallback``: the fallback instead
        (timeout, error, disconnect); ``drop``: authority lapsed; ``timestamp``: the render's
        as-of time (§5.2; else the latest notice's). A cancelled or settled batch
        materializes nothing. True when an occurrence was materialized."""
        latest = batch.notices[-1].event_id
        if batch.state != "rendering":
            if content is not None:  # an answer nobody will see (rules 3, 6)
                self._record("discarded", latest, batch.subject, batch)
            return False
        batch.state = "closed"
        self._batches.pop(batch.id, None)
        subject = self._subjects.get(batch.subject)
        if subject is not None and subject.rendering is batch:
            subject.rendering = None
        self._record(
            "dropped" if drop else "fallback" if fallback else "rendered" if content else "empty",
            latest,
            batch.subject,
            batch,
        )
        if drop or (not fallback and not content):
            return False
        event = dict(batch.fallback)
        if not fallback:
            event["payload"] = {"content": content}
            event["modelContent"] = content
            if timestamp is not None:
                event["timestamp"] = timestamp
        occurrence = Occurrence(
            batch.seq,
            "push",
            batch.notices[-1].event_id,
            event,
            batch.subject,
            set(batch.audience),
            materialized=True,
        )
        if not occurrence.unread:
            return False
        self._items[occurrence.seq] = occurrence
        if subject is not None:
            kept = subject.occupant
            if kept is not None and not kept.consumed and kept.materialized:
                subject.earlier = [r for r in subject.earlier if not r.consumed] + [kept]
            subject.occupant = occurrence
        return True

    def drop_pending(self, batch: Batch) -> None:
        """Rule 4: a batch whose authority lapsed before assembly goes without a render."""
        self._record("dropped", batch.notices[-1].event_id, batch.subject, batch)
        batch.state = "closed"
        self._batches.pop(batch.id, None)
        subject = self._subjects.get(batch.subject)
        if subject is not None and subject.pending is batch:
            subject.pending = None

    # --- consumption (RFC-006 §3.3) -----------------------------------------------------------

    def unread(self, conversation: str) -> list[Occurrence]:
        """What ``conversation`` has not read, oldest first (nothing changes)."""
        return sorted((o for o in self._items.values() if conversation in o.unread), key=lambda o: o.seq)

    def consume(self, conversation: str, rendered: int = 0) -> Drained:
        """``conversation`` assembles a model request now: what it reads, each occurrence
        consumed (history everywhere with shared consumption; with per-conversation
        consumption, in ``conversation`` only, but a render in every conversation it reached:
        the shared baseline, §3.3; EC4) and its subject's history ``"some"``."""
        items = self.unread(conversation)
        for occurrence in items:
            occurrence.unread.discard(conversation)
            occurrence.read.add(conversation)
            if not occurrence.unread:
                del self._items[occurrence.seq]
            first, occurrence.consumed = not occurrence.consumed, True
            subject = self._subjects.get(occurrence.subject) if occurrence.subject is not None else None
            if subject is None:
                continue
            if first:
                if subject.history != "some":
                    subject.base = subject.history
                subject.history = "some"
                subject.last_event_id = occurrence.event_id
            subject.readers.add(conversation)
            if occurrence.materialized:
                subject.readers |= occurrence.unread
            if subject.occupant is occurrence and not self._replaceable(occurrence):
                subject.occupant = None
        return Drained(tuple(items), rendered)

    # --- durability (RFC-006 §3.1, §3.2; EC7) -----------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Everything kept, as JSON values (``recover`` reads it back)."""
        subjects: list[dict[str, Any]] = []
        for key, subject in self._subjects.items():
            subjects.append(
                {
                    "key": list(key),
                    "history": subject.history,
                    "last": subject.last_event_id,
                    "occupant": subject.occupant.seq if subject.occupant is not None else None,
                    "replyTarget": subject.reply_target,
                    "readers": sorted(subject.readers),
                    "base": subject.base,
                }
            )
        items = [
            {
                "seq": o.seq,
                "lane": o.lane,
                "eventId": o.event_id,
                "event": o.event,
                "subject": list(o.subject) if o.subject is not None else None,
                "unread": sorted(o.unread),
                "consumed": o.consumed,
            }
            for o in self._items.values()
        ]
        batches = [
            {
                "id": b.id,
                "seq": b.seq,
                "subject": list(b.subject),
                "notices": [[n.event_id, n.timestamp, n.data, n.has_data] for n in b.notices],
                "fallback": b.fallback,
                "audience": sorted(b.audience),
                "received": b.received,
                "state": b.state,
            }
            for b in self._batches.values()
        ]
        receipts = [
            [binding, event_id, r.fingerprint, r.result.decode(), r.expires]
            for (binding, event_id), r in self._receipts.items()
        ]
        return {
            "conversations": list(self.conversations),
            "consumption": self.consumption,
            "subjects": subjects,
            "items": items,
            "batches": batches,
            "receipts": receipts,
            "seq": next(self._seq),
        }

    def recover(self, snapshot: Mapping[str, Any]) -> None:
        """Take ``snapshot`` (of an earlier run) as this state, conservatively (EC7): each
        unconsumed occupant is delivered as an ordinary occurrence and its subject's history
        is ``"unknown"`` (RFC-006 §3.2); each batch, pending or rendering, materializes its
        fallback once (an interrupted render is not replayed, §3.2, §5.3; the server that
        would render it is another process now); receipts keep their expiry. Per-conversation
        history (EC4) is carried when the snapshot was taken with this consumption; else (or
        from an older store) a subject's ``"some"`` reads ``"unknown"`` in every conversation
        that is not known to have read it. Raises ``KeyError`` / ``TypeError`` /
        ``ValueError`` on a snapshot of another shape (the caller starts empty then)."""
        same = snapshot.get("consumption", "shared") == self.consumption
        for name in snapshot["conversations"]:
            self.add_conversation(str(name))
        for entry in snapshot["items"]:
            occurrence = Occurrence(  # sealed: ordinary from now on (no subject)
                int(entry["seq"]),
                entry["lane"],
                str(entry["eventId"]),
                dict(entry["event"]),
                None,
                set(entry["unread"]),
                bool(entry["consumed"]),
            )
            self._items[occurrence.seq] = occurrence
        for entry in snapshot["subjects"]:
            key: SubjectKey = (
                str(entry["key"][0]),
                str(entry["key"][1]),
                str(entry["key"][2]),
                str(entry["key"][3]),
            )
            history: History = (
                entry["history"] if entry["history"] in ("none", "some", "unknown") else "unknown"
            )
            readers = {str(name) for name in entry.get("readers") or ()} if same else set[str]()
            base: History = "none" if same and entry.get("base") == "none" else "unknown"
            if entry["occupant"] is not None:
                history, readers = "unknown", set[str]()
            target = entry.get("replyTarget")
            self._subjects[key] = _Subject(
                history,
                last_event_id=entry["last"],
                reply_target=dict(target) if is_mapping(target) else None,
                readers=readers,
                base=base,
            )
        for entry in snapshot["batches"]:
            key = (
                str(entry["subject"][0]),
                str(entry["subject"][1]),
                str(entry["subject"][2]),
                str(entry["subject"][3]),
            )
            notices = deque(
                (Notice(str(n[0]), n[1], n[2], bool(n[3])) for n in entry["notices"]),
                maxlen=self.retain_notices,
            )
            batch = Batch(
                int(entry["id"]),
                int(entry["seq"]),
                key,
                notices,
                dict(entry["fallback"]),
                set(entry["audience"]),
                int(entry["received"]),
            )
            owner = self._subjects.setdefault(key, _Subject("unknown"))
            owner.history = "unknown"  # its fallback is delivered as ordinary work
            occurrence = Occurrence(
                batch.seq, "push", notices[-1].event_id, batch.fallback, None, set(batch.audience)
            )
            if occurrence.unread:
                self._items[occurrence.seq] = occurrence
        for binding, event_id, fingerprint, result, expires in snapshot["receipts"]:
            self._receipts[(str(binding), str(event_id))] = Receipt(
                str(fingerprint), str(result).encode(), float(expires)
            )
        self._seq = itertools.count(int(snapshot["seq"]))

    def reply_target(
        self, key: SubjectKey, message: Mapping[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """A channel subject's reply target (RFC-006 §3.1, vector 45): ``message`` (a
        ``channels/incoming`` message) supplies its own ``channelId``, ``messageId`` and
        ``threadId``, kept for the subject; without it, the one kept (None if none)."""
        subject = self._subjects.get(key)
        if message is None:
            return dict(subject.reply_target) if subject is not None and subject.reply_target else None
        target = {name: message[name] for name in ("channelId", "messageId", "threadId") if name in message}
        if subject is not None:
            subject.reply_target = target
        return target

    def audience(self, key: SubjectKey) -> set[str]:
        """The conversations that have subject ``key``'s unconsumed work unread (its
        occupant, earlier unread renders, its pending or rendering batch); empty for an
        untracked subject (the wake rules, ``mcpl/wake.py``, follow a replacement there)."""
        subject = self._subjects.get(key)
        if subject is None:
            return set()
        reach: set[str] = set()
        for occurrence in (subject.occupant, *subject.earlier):
            if occurrence is not None and not occurrence.consumed:
                reach |= occurrence.unread
        for batch in (subject.pending, subject.rendering):
            if batch is not None:
                reach |= batch.audience
        return reach

    def unread_count(self) -> int:
        """Occurrences some conversation has not read."""
        return len(self._items)

    def history(self, key: SubjectKey, conversation: str | None = None) -> History:
        """A subject's consumed history (in ``conversation``, module rules; None: in any);
        ``"unknown"`` for an untracked one."""
        subject = self._subjects.get(key)
        if subject is None:
            return "unknown"
        return subject.history if conversation is None else self._history_in(subject, conversation)

    def __len__(self) -> int:
        return len(self._subjects)

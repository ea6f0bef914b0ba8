"""Event tags, ``push/event`` params and ``eventId`` deduplication.

Rules (MCPL §9.2-§9.4, §16; docs/protocol.md, "Push idempotency"):

- **Core closure** (§16.3), applied by the host without consulting any producer ontology:
  ``chat:mention => chat:addressed``, ``chat:reply => chat:addressed``,
  ``chat:dm => chat:addressed, chat:private``. It is transitive and additive (nothing is
  removed by it); afterwards ``chat:ambient`` is dropped when ``chat:addressed`` is present.
  Tags are exact, case-sensitive strings. A tag list is a set: duplicates are dropped.
  Output order is deterministic: first-seen order, implied tags appended as found.
- **Producer ontologies are not applied.** ``implies`` edges and ``suggestedTreatment`` (and
  its deprecated alias ``defaultTreatment``) from a ``tagOntology`` take effect only on explicit
  host or operator acceptance (§16.5, §16.6), which is not this module's business: nothing
  here reads an ontology.
- **Tolerance** (§16.4): tags no ontology describes, non-chat tags and unknown namespaces pass
  untouched. A non-string or empty entry is dropped and reported; an un-namespaced tag (no
  ``:``) is a producer violation, reported but kept. Tags are untrusted claims and never
  authority (§16): admission is decided before they are read.
- **``push/event`` params** (§9.2): ``featureSet`` (non-empty string), ``eventId`` (non-empty
  string), ``timestamp`` (ISO 8601 string, read by ``datetime.fromisoformat`` after turning a
  trailing ``Z`` into ``+00:00``; on Python 3.10 that parser is stricter about fractions;
  the text last found good is remembered, one per process, and not parsed again),
  ``payload`` (object) with ``payload.content`` (array of objects, each with a string
  ``type``), optional ``tags`` (array of strings), optional ``origin`` (object). Each broken
  rule is one problem sentence; the caller answers ``-32602`` when there are any (§9.2).
- **Deduplication** (§9.4 SHOULD; docs/protocol.md, "Push idempotency"): an
  ``EventDeduplicator`` is one server's window, kept by its ``HostedServer`` across
  transports (``services.push`` decides what counts as a duplicate). A duplicate within the
  window gets the original result back. The window is bounded both by size (oldest inserted evicted) and
  by age; ``now`` is passed in (seconds on a monotonic clock).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mcpl_host.jsonrpc.values import is_array, is_list_or_tuple, is_mapping
from mcpl_host.limits import DEFAULT_EVENT_ID_TTL_SECONDS, DEFAULT_MAX_REMEMBERED_EVENT_IDS, DEFAULT_MAX_TAGS

__all__ = [
    "CORE_IMPLICATIONS",
    "DEFAULT_DEDUPE_MAX_ENTRIES",
    "DEFAULT_DEDUPE_TTL_SECONDS",
    "EventDeduplicator",
    "TagClosure",
    "close_tags",
    "push_event_problems",
    "read_tags",
    "validate_push_event",
]

#: MCPL §16.3: the core closure edges. The host applies these and no others by itself.
CORE_IMPLICATIONS: Mapping[str, tuple[str, ...]] = {
    "chat:mention": ("chat:addressed",),
    "chat:reply": ("chat:addressed",),
    "chat:dm": ("chat:addressed", "chat:private"),
}
_ADDRESSED = "chat:addressed"
_AMBIENT = "chat:ambient"

#: How many ``eventId``s one server remembers, and for how long (seconds): the defaults of
#: ``Limits.max_remembered_event_ids`` and ``event_id_ttl_seconds``.
DEFAULT_DEDUPE_MAX_ENTRIES = DEFAULT_MAX_REMEMBERED_EVENT_IDS
DEFAULT_DEDUPE_TTL_SECONDS = DEFAULT_EVENT_ID_TTL_SECONDS


@dataclass(frozen=True, slots=True)
class TagClosure:
    """``tags``: the closed tag set in deterministic order; ``problems``: sentences about
    entries dropped or kept with a producer violation."""

    tags: list[str] = field(default_factory=list[str])
    problems: list[str] = field(default_factory=list[str])


def read_tags(value: object, *, max_tags: int = DEFAULT_MAX_TAGS) -> TagClosure:
    """Read a ``tags`` value (any JSON; None means no tags) and apply the core closure (§16.3).

    Only the first ``max_tags`` entries are read (``Limits.max_tags``); the rest are dropped
    with one problem, so the work and the problems are bounded whatever the list.
    Never raises. A value that is not an array yields no tags and one problem.
    """
    if value is None:
        return TagClosure()
    if not is_list_or_tuple(value):
        return TagClosure(problems=["tags is not an array; ignored"])
    problems: list[str] = []
    seen: dict[str, None] = {}  # insertion-ordered set
    entries: list[Any] | tuple[Any, ...] = value  # pyright: ignore[reportUnknownVariableType]
    for index, tag in enumerate(entries[:max_tags]):
        if not isinstance(tag, str) or tag == "":
            problems.append(f"tags[{index}] is not a non-empty string; dropped")
            continue
        if ":" not in tag:
            problems.append(f"tags[{index}] has no namespace (producer violation, MCPL §16); kept")
        seen.setdefault(tag, None)
    if len(entries) > max_tags:
        problems.append(f"{len(entries) - max_tags} tags beyond Limits.max_tags = {max_tags} dropped")
    ordered = list(seen)
    # Transitive closure: walk the growing list; every implied tag is itself walked later.
    index = 0
    while index < len(ordered):
        for implied in CORE_IMPLICATIONS.get(ordered[index], ()):
            if implied not in seen:
                seen[implied] = None
                ordered.append(implied)
        index += 1
    if _ADDRESSED in seen and _AMBIENT in seen:
        ordered.remove(_AMBIENT)
    return TagClosure(tags=ordered, problems=problems)


def close_tags(tags: object) -> list[str]:
    """The core closure of ``tags`` (§16.3; see ``read_tags``, which also returns problems)."""
    return read_tags(tags).tags


#: RFC 3339 §5.6's "Z", either case (ISO 8601 writes it upper case; RFC 3339 §5.6 takes both).
_UTC_DESIGNATORS = ("Z", "z")


#: The last timestamp text found good (an exact ``str``), or None. ``datetime.fromisoformat``
#: reads a text the same way each time, and a burst of pushes tends to repeat one timestamp:
#: the same text is good again without a parse. A text found bad is never kept.
_good_timestamp: str | None = None


def _timestamp_problem(value: object) -> str | None:
    global _good_timestamp
    if type(value) is str and value == _good_timestamp:
        return None
    if not isinstance(value, str):
        return "timestamp is missing or not a string"
    # A UTC designator read as +00:00 (Python 3.10 takes no "Z"); the last character told by
    # a slice and a tuple look-up, cheaper than ``endswith`` with a tuple.
    text = value[:-1] + "+00:00" if value[-1:] in _UTC_DESIGNATORS else value
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return "timestamp is not an ISO 8601 date-time"
    if type(value) is str:  # (a subclass's own ``==`` could say anything)
        _good_timestamp = value
    return None


def _content_problems(payload: object) -> list[str] | None:
    """The problems of ``payload``, or None (not an empty list: the usual case allocates
    nothing)."""
    if not is_mapping(payload):
        return ["payload is missing or not an object"]
    content = payload.get("content")
    if not is_array(content):
        return ["payload.content is missing or not an array"]
    for block in content:  # the usual case, every block good, allocates nothing
        if not (is_mapping(block) and isinstance(block.get("type"), str)):
            break
    else:
        return None
    return [
        f"payload.content[{index}] is not an object with a string type"
        for index, block in enumerate(content)
        if not (is_mapping(block) and isinstance(block.get("type"), str))
    ]


def _tags_ok(tags: object) -> bool:
    if not is_array(tags):
        return False
    for tag in tags:
        if not isinstance(tag, str):
            return False
    return True


def validate_push_event(params: object) -> list[str]:
    """Problems with ``push/event`` params (MCPL §9.2); empty when valid.

    Unknown members are tolerated (MCPL §8, compatibility note). Never raises.
    """
    if not is_mapping(params):
        return ["params is missing or not an object"]
    return push_event_problems(params)


def push_event_problems(params: Mapping[str, object]) -> list[str]:
    """``validate_push_event`` for params already known to be an object (admission has
    checked that, MCPL §6.6 step 4): the same problems, the object check not made twice.

    The usual push is told first, by the same rules: parsed JSON (exact ``str``, ``dict`` and
    ``list``), every field good, its timestamp the last one found good (``_good_timestamp``),
    no ``tags`` nor ``origin``; then no list of problems is built nor any call made."""
    get = params.get
    feature_set, event_id, timestamp = get("featureSet"), get("eventId"), get("timestamp")
    payload: Any = get("payload")
    if (
        type(feature_set) is str
        and feature_set
        and type(event_id) is str
        and event_id
        and type(timestamp) is str
        and timestamp == _good_timestamp
        and type(payload) is dict
        and get("tags") is None
        and get("origin") is None
    ):
        body: dict[str, Any] = payload  # pyright: ignore[reportUnknownVariableType] (parsed)
        content: Any = body.get("content")
        if type(content) is list:
            blocks: list[Any] = content  # pyright: ignore[reportUnknownVariableType] (parsed)
            for block in blocks:
                if type(block) is not dict:
                    break
                entry: dict[str, Any] = block  # pyright: ignore[reportUnknownVariableType] (parsed)
                if type(entry.get("type")) is not str:
                    break
            else:
                return []
    problems: list[str] = []
    if not (isinstance(feature_set, str) and feature_set):
        problems.append("featureSet is missing or not a non-empty string")
    if not (isinstance(event_id, str) and event_id):
        problems.append("eventId is missing or not a non-empty string")
    timestamp_problem = _timestamp_problem(timestamp)
    if timestamp_problem is not None:
        problems.append(timestamp_problem)
    content_problems = _content_problems(get("payload"))
    if content_problems is not None:
        problems += content_problems
    tags = get("tags")
    if tags is not None and not _tags_ok(tags):
        problems.append("tags is not an array of strings")
    origin = get("origin")
    if origin is not None and not is_mapping(origin):
        problems.append("origin is not an object")
    return problems


class EventDeduplicator:
    """Remembers answered ``eventId``s for one server (MCPL §9.4; docs/protocol.md,
    "Push idempotency").

    ``check(event_id, now)`` returns the result remembered for ``event_id`` if it is younger
    than ``ttl_seconds``, else None. ``remember(event_id, result, now)`` stores ``result``
    (any value but None); remembering an id again replaces its result and restarts its age,
    so a caller may store an in-flight marker first and the final result later. At most
    ``max_entries`` ids are kept; the oldest inserted goes first. ``now`` must not go back.

    Entries are kept in insertion order, so their times never decrease along it; ``_oldest``
    is a time no later than the first entry's (``math.inf`` while there is none), so a call
    whose ``now`` is within ``ttl_seconds`` of it looks at no entry to expire them.
    """

    __slots__ = ("_entries", "_oldest", "max_entries", "ttl_seconds")

    def __init__(
        self,
        max_entries: int = DEFAULT_DEDUPE_MAX_ENTRIES,
        ttl_seconds: float = DEFAULT_DEDUPE_TTL_SECONDS,
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        if not ttl_seconds > 0:
            raise ValueError("ttl_seconds must be positive")
        self.max_entries = max_entries
        self.ttl_seconds = ttl_seconds
        self._entries: OrderedDict[str, tuple[float, Any]] = OrderedDict()
        self._oldest = math.inf

    def _expire(self, now: float) -> None:
        """Forget every entry ``ttl_seconds`` old or older at ``now``."""
        if now - self._oldest < self.ttl_seconds:  # not even the first entry can be
            return
        entries = self._entries
        while entries:
            stored_at, _ = next(iter(entries.values()))
            if now - stored_at < self.ttl_seconds:
                self._oldest = stored_at
                return
            entries.popitem(False)
        self._oldest = math.inf

    def _stored(self, now: float) -> None:
        """An entry was stored at ``now`` (at the end)."""
        if now < self._oldest:
            self._oldest = now

    def check(self, event_id: str, now: float) -> Any | None:
        """The original result for a duplicate ``event_id``, or None for a new one."""
        self._expire(now)
        entry = self._entries.get(event_id)
        return None if entry is None else entry[1]

    def claim(self, event_id: str, marker: object, now: float) -> Any | None:
        """``check`` and, for a new ``event_id``, ``remember(event_id, marker, now)`` in one
        step: what is remembered for a duplicate, or None once ``marker`` is stored."""
        entries = self._entries
        if now - self._oldest >= self.ttl_seconds:  # (``_expire``'s own first test, inlined)
            self._expire(now)
        entry = entries.get(event_id)
        if entry is not None:
            return entry[1]
        if marker is None:
            raise ValueError("a remembered result must not be None (check() uses None for 'new')")
        entries[event_id] = (now, marker)
        if now < self._oldest:  # (``_stored``, inlined)
            self._oldest = now
        if len(entries) > self.max_entries:
            entries.popitem(False)  # the oldest
        return None

    def remember(self, event_id: str, result: object, now: float) -> None:
        """Store the answer given for ``event_id`` at ``now``."""
        if result is None:
            raise ValueError("a remembered result must not be None (check() uses None for 'new')")
        self._expire(now)
        self._entries.pop(event_id, None)
        self._entries[event_id] = (now, result)
        self._stored(now)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def replace(self, event_id: str, old: object, new: Any | None) -> bool:
        """If ``event_id`` still holds ``old`` (the same object), hold ``new`` instead, keeping
        the entry's age and place; ``new`` None forgets the id. False when it holds something
        else (or nothing: evicted or expired), which is left as it is."""
        entry = self._entries.get(event_id)
        if entry is None or entry[1] is not old:
            return False
        if new is None:
            del self._entries[event_id]
        else:
            self._entries[event_id] = (entry[0], new)
        return True

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return (
            f"<EventDeduplicator entries={len(self._entries)}/{self.max_entries} ttl={self.ttl_seconds:g}s>"
        )

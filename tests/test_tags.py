"""Tags closure, push/event params, eventId deduplication (MCPL §9.2-§9.4, §16.3-§16.4;
docs/protocol.md, "Push idempotency")."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpl_host.mcpl.tags import (
    DEFAULT_DEDUPE_MAX_ENTRIES,
    DEFAULT_DEDUPE_TTL_SECONDS,
    EventDeduplicator,
    close_tags,
    read_tags,
    validate_push_event,
)

# --- core closure ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tags", "closed"),
    [
        (["chat:mention"], ["chat:mention", "chat:addressed"]),
        (["chat:reply"], ["chat:reply", "chat:addressed"]),
        (["chat:dm"], ["chat:dm", "chat:addressed", "chat:private"]),
        (["chat:dm", "chat:mention"], ["chat:dm", "chat:mention", "chat:addressed", "chat:private"]),
        (["chat:addressed"], ["chat:addressed"]),
        (["chat:private"], ["chat:private"]),  # closure edges run one way only
        ([], []),
    ],
)
def test_core_tag_closure(tags: list[str], closed: list[str]) -> None:
    assert close_tags(tags) == closed


@pytest.mark.parametrize(
    ("tags", "closed"),
    [
        (["chat:ambient", "chat:mention"], ["chat:mention", "chat:addressed"]),
        (["chat:ambient", "chat:addressed"], ["chat:addressed"]),
        (["chat:dm", "chat:ambient"], ["chat:dm", "chat:addressed", "chat:private"]),
        (["chat:ambient"], ["chat:ambient"]),  # kept when nothing addresses
        (["chat:ambient", "chat:private"], ["chat:ambient", "chat:private"]),
    ],
)
def test_ambient_dropped_when_addressed(tags: list[str], closed: list[str]) -> None:
    assert close_tags(tags) == closed


def test_closure_dedupes_and_keeps_first_seen_order() -> None:
    tags = ["x:a", "chat:mention", "x:a", "chat:addressed", "chat:reply"]
    assert close_tags(tags) == ["x:a", "chat:mention", "chat:addressed", "chat:reply"]


def test_unknown_and_non_chat_tags_accepted_untouched() -> None:
    tags = ["discord:guild=123", "vendor:thing", "chat:unknownvalue", "mcpl:whatever"]
    result = read_tags(tags)
    assert result.tags == tags and result.problems == []


def test_producer_ontology_edges_are_not_applied() -> None:
    # A producer's ontology might say "discord:ping implies chat:mention"; the host ignores it.
    assert close_tags(["discord:ping"]) == ["discord:ping"]


def test_tags_are_case_sensitive() -> None:
    assert close_tags(["Chat:Mention"]) == ["Chat:Mention"]


def test_non_string_entries_dropped_and_reported() -> None:
    result = read_tags(["chat:dm", 3, None, "", {"t": 1}])
    assert result.tags == ["chat:dm", "chat:addressed", "chat:private"]
    assert len(result.problems) == 4


def test_un_namespaced_tag_is_reported_but_kept() -> None:
    result = read_tags(["urgent"])
    assert result.tags == ["urgent"] and len(result.problems) == 1


@pytest.mark.parametrize(("value", "n_problems"), [(None, 0), ("chat:dm", 1), ({"a": 1}, 1), (7, 1)])
def test_tags_value_not_an_array(value: Any, n_problems: int) -> None:
    result = read_tags(value)
    assert result.tags == [] and len(result.problems) == n_problems


CHAT = ["chat:mention", "chat:reply", "chat:dm", "chat:addressed", "chat:ambient", "chat:private"]
tag_lists = st.lists(
    st.sampled_from(CHAT) | st.from_regex(r"[a-z]{1,4}:[a-z]{1,4}", fullmatch=True), max_size=8
)


@given(tag_lists)
def test_tag_closure_properties(tags: list[str]) -> None:
    closed = close_tags(tags)
    assert len(closed) == len(set(closed))  # a set
    assert close_tags(closed) == closed  # idempotent
    assert set(tags) - {"chat:ambient"} <= set(closed)  # additive, except the ambient drop
    if {"chat:mention", "chat:reply", "chat:dm"} & set(tags):
        assert "chat:addressed" in closed and "chat:ambient" not in closed
    if "chat:dm" in tags:
        assert "chat:private" in closed
    assert closed[: len(dict.fromkeys(t for t in tags if t in closed))] == [
        t for t in dict.fromkeys(tags) if t in closed
    ]  # first-seen order, additions appended


# --- push/event params (§9.2) -------------------------------------------------------------------


def valid_push(**changes: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "featureSet": "clock",
        "eventId": "e1",
        "timestamp": "2025-01-01T00:00:00Z",
        "payload": {"content": [{"type": "text", "text": "tick"}]},
    }
    for key, value in changes.items():
        if value is ...:
            params.pop(key, None)
        else:
            params[key] = value
    return params


@pytest.mark.parametrize(
    "params",
    [
        valid_push(),
        valid_push(timestamp="2025-01-01T00:00:00.123456+02:00"),
        valid_push(timestamp="2025-01-01T00:00:00.123Z"),
        valid_push(timestamp="2025-01-01T00:00:00z"),  # RFC 3339 §5.6: either case
        valid_push(timestamp="2025-01-01T00:00:00"),
        valid_push(payload={"content": []}),
        valid_push(tags=["chat:dm"], origin={"source": "x"}, extra="tolerated"),
        valid_push(tags=None, origin=None),
    ],
)
def test_valid_push_event(params: dict[str, Any]) -> None:
    assert validate_push_event(params) == []


INVALID_PUSHES = [
    (valid_push(featureSet=...), "featureSet"),
    (valid_push(featureSet=3), "featureSet"),
    (valid_push(eventId=...), "eventId"),
    (valid_push(eventId=""), "eventId"),
    (valid_push(eventId=7), "eventId"),
    (valid_push(timestamp=...), "timestamp"),
    (valid_push(timestamp=1735689600), "timestamp"),
    (valid_push(timestamp="yesterday"), "timestamp"),
    (valid_push(timestamp="2025-13-01T00:00:00Z"), "timestamp"),
    (valid_push(timestamp=""), "timestamp"),
    (valid_push(timestamp="Z"), "timestamp"),
    (valid_push(timestamp="2025-01-01T00:00:00ZZ"), "timestamp"),
    (valid_push(timestamp="2025-01-01T00:00:00+01:00Z"), "timestamp"),
    (valid_push(payload=...), "payload"),
    (valid_push(payload="tick"), "payload"),
    (valid_push(payload={}), "payload.content"),
    (valid_push(payload={"content": "tick"}), "payload.content"),
    (valid_push(payload={"content": ["tick"]}), "payload.content[0]"),
    (valid_push(payload={"content": [{"text": "no type"}]}), "payload.content[0]"),
    (valid_push(tags="chat:dm"), "tags"),
    (valid_push(tags=["chat:dm", 3]), "tags"),
    (valid_push(origin="discord"), "origin"),
    (valid_push(tags=["chat:dm"], origin="discord"), "origin"),
    (valid_push(origin={"source": "x"}, tags=[None]), "tags"),
    (valid_push(payload={"content": [{"type": "text"}, {"type": None}]}), "payload.content[1]"),
]


@pytest.mark.parametrize(("params", "word"), INVALID_PUSHES)
def test_invalid_push_event(params: dict[str, Any], word: str) -> None:
    problems = validate_push_event(params)
    assert len(problems) == 1 and problems[0].startswith(word)


@pytest.mark.parametrize(("params", "word"), INVALID_PUSHES)
def test_a_remembered_good_timestamp_takes_no_other_rule_with_it(params: dict[str, Any], word: str) -> None:
    # The timestamp last found good is not parsed again, and the usual push is told first:
    # every other rule still holds for a push carrying it (each case right after a good push
    # with the very timestamp it carries, or with the default one).
    assert validate_push_event(valid_push()) == []
    if isinstance(params.get("timestamp"), str):
        validate_push_event(valid_push(timestamp=params["timestamp"]))
    problems = validate_push_event(params)
    assert len(problems) == 1 and problems[0].startswith(word)


def test_a_bad_timestamp_is_refused_every_time() -> None:
    # Only a text found good is remembered: a bad one is read (and refused) each time, and a
    # text only close to the good one is no match.
    assert validate_push_event(valid_push()) == []
    for text in (
        "2025-13-01T00:00:00Z",
        "2025-13-01T00:00:00Z",
        "2025-01-01T00:00:00Z ",
        "2025-01-01T00:00:00"[:-1],
    ):
        problems = validate_push_event(valid_push(timestamp=text))
        assert problems == ["timestamp is not an ISO 8601 date-time"], text
    assert validate_push_event(valid_push()) == []


class _EqualToAll(str):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


def test_a_string_subclass_is_parsed_not_compared_with_the_remembered_timestamp() -> None:
    assert validate_push_event(valid_push()) == []
    assert validate_push_event(valid_push(timestamp=_EqualToAll("yesterday"))) == [
        "timestamp is not an ISO 8601 date-time"
    ]
    assert validate_push_event(valid_push(timestamp=_EqualToAll("2025-01-02T00:00:00Z"))) == []
    assert validate_push_event(valid_push(timestamp="yesterday")) == [
        "timestamp is not an ISO 8601 date-time"
    ]


@pytest.mark.parametrize("params", [None, [], "x", 3])
def test_push_params_not_an_object(params: Any) -> None:
    assert validate_push_event(params) == ["params is missing or not an object"]


def test_any_mapping_is_read_as_an_object_not_only_a_dict() -> None:
    # Parsed values are exact dicts; an application's own mapping is an object too.
    params = valid_push(payload=MappingProxyType({"content": [MappingProxyType({"type": "text"})]}))
    assert validate_push_event(MappingProxyType(params)) == []
    assert validate_push_event(MappingProxyType(valid_push(payload={"content": [3]}))) == [
        "payload.content[0] is not an object with a string type"
    ]


def test_every_block_and_every_field_at_fault_is_named() -> None:
    params = valid_push(eventId=7, payload={"content": [{"type": "text"}, "x", {"type": 1}]}, tags=["a:b", 2])
    assert validate_push_event(params) == [
        "eventId is missing or not a non-empty string",
        "payload.content[1] is not an object with a string type",
        "payload.content[2] is not an object with a string type",
        "tags is not an array of strings",
    ]


def test_every_missing_field_is_reported() -> None:
    assert len(validate_push_event({})) == 4


@given(
    st.dictionaries(
        st.sampled_from(["featureSet", "eventId", "timestamp", "payload", "tags", "origin"]),
        st.none()
        | st.integers()
        | st.text(max_size=30)
        | st.lists(st.text(max_size=3), max_size=2)
        | st.dictionaries(st.text(max_size=8), st.text(max_size=3), max_size=2),
    )
)
def test_push_validator_never_raises(params: dict[str, Any]) -> None:
    assert isinstance(validate_push_event(params), list)


# --- eventId deduplication (§9.4) --------------------------------------------------------------


def test_duplicate_event_id_replays_original_result() -> None:
    dedupe = EventDeduplicator(max_entries=8, ttl_seconds=60)
    assert dedupe.check("e1", now=0.0) is None
    original = {"accepted": True, "inferenceId": "inf-1"}
    dedupe.remember("e1", original, now=0.0)
    assert dedupe.check("e1", now=10.0) == original
    assert dedupe.check("e2", now=10.0) is None


def test_dedupe_entries_expire_after_ttl() -> None:
    dedupe = EventDeduplicator(max_entries=8, ttl_seconds=60)
    dedupe.remember("e1", {"accepted": True}, now=0.0)
    assert dedupe.check("e1", now=59.9) is not None
    assert dedupe.check("e1", now=60.0) is None
    assert len(dedupe) == 0


def test_dedupe_bounded_oldest_inserted_evicted_first() -> None:
    dedupe = EventDeduplicator(max_entries=3, ttl_seconds=60)
    for n in range(5):
        dedupe.remember(f"e{n}", {"n": n}, now=float(n))
    assert len(dedupe) == 3
    assert [dedupe.check(f"e{n}", now=5.0) for n in range(5)] == [None, None, {"n": 2}, {"n": 3}, {"n": 4}]
    dedupe.check("e2", now=5.0)  # a lookup does not refresh: eviction is by insertion
    dedupe.remember("e5", {"n": 5}, now=5.0)
    assert dedupe.check("e2", now=5.0) is None


def test_dedupe_remember_again_replaces_and_restarts_age() -> None:
    dedupe = EventDeduplicator(max_entries=2, ttl_seconds=10)
    dedupe.remember("e1", {"pending": True}, now=0.0)
    dedupe.remember("e2", {"accepted": True}, now=1.0)
    dedupe.remember("e1", {"accepted": False, "reason": "muted"}, now=2.0)
    dedupe.remember("e3", {"accepted": True}, now=3.0)  # evicts e2, now the oldest inserted
    assert dedupe.check("e2", now=3.0) is None
    assert dedupe.check("e1", now=11.0) == {"accepted": False, "reason": "muted"}


def test_claim_stores_the_marker_of_a_new_id_and_gives_a_duplicate_what_is_remembered() -> None:
    dedupe = EventDeduplicator(max_entries=2, ttl_seconds=10)
    marker = object()
    assert dedupe.claim("e1", marker, now=0.0) is None  # new: the marker is stored
    assert dedupe.check("e1", now=1.0) is marker
    assert dedupe.claim("e1", object(), now=1.0) is marker  # a duplicate: left as it is
    dedupe.claim("e2", "m2", now=2.0)
    dedupe.claim("e3", "m3", now=3.0)  # the bound: e1, the oldest inserted, goes
    assert (dedupe.check("e1", now=3.0), len(dedupe)) == (None, 2)
    assert dedupe.claim("e2", "again", now=12.0) is None  # e2's age is up: new again
    with pytest.raises(ValueError):
        dedupe.claim("e9", None, now=12.0)


def test_replace_settles_only_its_own_marker_and_keeps_its_age_and_place() -> None:
    dedupe = EventDeduplicator(max_entries=2, ttl_seconds=10)
    marker = object()
    dedupe.claim("e1", marker, now=0.0)
    dedupe.claim("e2", "m2", now=5.0)
    assert dedupe.replace("e1", object(), "not mine") is False  # another marker: untouched
    assert dedupe.replace("e1", marker, {"accepted": True}) is True
    assert dedupe.check("e1", now=9.9) == {"accepted": True}
    assert dedupe.check("e1", now=10.0) is None  # its age counts from the claim, not the reply
    assert dedupe.replace("e1", marker, "late") is False  # expired: nothing comes back
    dedupe.claim("e3", "m3", now=10.0)
    assert dedupe.replace("e2", "m2", "done") is True
    dedupe.claim("e4", "m4", now=11.0)  # e2 kept its place: the oldest inserted, it goes
    assert [dedupe.check(key, now=11.0) for key in ("e2", "e3", "e4")] == [None, "m3", "m4"]


def test_replace_with_none_forgets_the_id() -> None:
    dedupe = EventDeduplicator(max_entries=4, ttl_seconds=10)
    dedupe.claim("e1", "marker", now=0.0)
    assert dedupe.replace("e1", "marker", None) is True
    assert (dedupe.check("e1", now=1.0), len(dedupe)) == (None, 0)


def test_dedupe_arguments_checked() -> None:
    assert EventDeduplicator().max_entries == DEFAULT_DEDUPE_MAX_ENTRIES
    assert EventDeduplicator().ttl_seconds == DEFAULT_DEDUPE_TTL_SECONDS
    with pytest.raises(ValueError):
        EventDeduplicator(max_entries=0)
    with pytest.raises(ValueError):
        EventDeduplicator(ttl_seconds=0)
    with pytest.raises(ValueError):
        EventDeduplicator().remember("e1", None, now=0.0)
    assert repr(EventDeduplicator(4, 30)) == "<EventDeduplicator entries=0/4 ttl=30s>"


@given(st.lists(st.tuples(st.integers(0, 20), st.floats(0, 5)), max_size=60))
def test_dedupe_never_exceeds_bound(events: list[tuple[int, float]]) -> None:
    dedupe = EventDeduplicator(max_entries=5, ttl_seconds=30)
    now = 0.0
    for event_id, step in events:
        now += step
        if dedupe.check(str(event_id), now) is None:
            dedupe.remember(str(event_id), {"id": event_id}, now)
        assert dedupe.check(str(event_id), now) == {"id": event_id}
        assert len(dedupe) <= 5


class _ReferenceWindow:
    """The window's rules written plainly: every call first forgets every entry
    ``ttl`` old or older (scanning from the oldest inserted), as the window did before it
    kept ``_oldest`` to skip that scan."""

    def __init__(self, max_entries: int, ttl: float) -> None:
        self.max_entries, self.ttl = max_entries, ttl
        self.entries: dict[str, tuple[float, Any]] = {}

    def expire(self, now: float) -> None:
        for key, (stored_at, _) in list(self.entries.items()):
            if now - stored_at < self.ttl:
                break
            del self.entries[key]

    def check(self, key: str, now: float) -> Any:
        self.expire(now)
        entry = self.entries.get(key)
        return None if entry is None else entry[1]

    def claim(self, key: str, marker: Any, now: float) -> Any:
        self.expire(now)
        if key in self.entries:
            return self.entries[key][1]
        self.entries[key] = (now, marker)
        if len(self.entries) > self.max_entries:
            del self.entries[next(iter(self.entries))]
        return None

    def remember(self, key: str, result: Any, now: float) -> None:
        self.expire(now)
        self.entries.pop(key, None)
        self.entries[key] = (now, result)
        while len(self.entries) > self.max_entries:
            del self.entries[next(iter(self.entries))]

    def replace(self, key: str, old: Any, new: Any) -> bool:
        entry = self.entries.get(key)
        if entry is None or entry[1] is not old:
            return False
        if new is None:
            del self.entries[key]
        else:
            self.entries[key] = (entry[0], new)
        return True


_OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["check", "claim", "remember", "forget", "settle"]),
        st.integers(0, 6),
        st.sampled_from([0.0, 0.0, 0.5, 3.0, 9.9, 10.0, 25.0]),
    ),
    max_size=80,
)


@given(_OPERATIONS)
def test_the_window_expires_and_evicts_as_its_plain_rules_say(
    operations: list[tuple[str, int, float]],
) -> None:
    # Whatever entries the bound evicted, a replace forgot or a remember moved, an entry is
    # forgotten at ttl exactly as a scan at every call would forget it.
    window, reference = EventDeduplicator(max_entries=4, ttl_seconds=10), _ReferenceWindow(4, 10)
    now, serial = 0.0, 0
    for operation, number, step in operations:
        now += step
        key = f"e{number}"
        if operation == "check":
            assert window.check(key, now) == reference.check(key, now)
        elif operation == "claim":
            serial += 1
            marker = f"m{serial}"  # one object: replace() tells markers by identity
            assert window.claim(key, marker, now) == reference.claim(key, marker, now)
        elif operation == "remember":
            serial += 1
            result = f"r{serial}"
            window.remember(key, result, now)
            reference.remember(key, result, now)
        else:
            held = reference.entries.get(key)
            old = held[1] if held is not None else "none"
            new = None if operation == "forget" else f"s{serial}"
            assert window.replace(key, old, new) == reference.replace(key, old, new)
        assert len(window) == len(reference.entries)

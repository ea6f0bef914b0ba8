"""Per-conversation consumption in the event inbox's decisions (``mcpl_host.mcpl.coalescing``,
``CoalescingState(consumption="per-conversation")``; MCPL RFC-006 rev 8 §3.3; docs/protocol.md
EC4), by plain calls and two properties:

- An occurrence one conversation read is history there only; in a conversation that has not
  read it, it is replaced or withdrawn as if nobody had (vector 46); the receipt reports the
  more conservative outcome (``appended`` over ``replaced``, ``noted`` / ``consumed`` over
  ``retracted``, ``first`` over ``replaced`` for a notice).
- A retraction's notice reaches exactly the conversations whose history is ``some`` or
  ``unknown``.
- A render read in one conversation stays in every conversation it reached (the shared
  baseline, vector 49); a batch renders once for all of them.
- The audience only narrows: a replacement reaches the conversations its predecessor reached.
- The snapshot carries each conversation's history; a snapshot of the other mode, or an
  occupant some conversation had not read, degrades to ``unknown``.
- Properties: in per-conversation mode a conversation never loses an occurrence it has read
  (what comes later for the subject reaches it, appended or as a notice; a render read
  elsewhere stays until it reads it) and never holds a replaced one it has not read; with one
  conversation the two modes decide alike.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcpl_host.mcpl.coalescing import CoalescingState, Consumption, SubjectKey
from mcpl_host.services.coalescing import EventInbox

K: SubjectKey = ("server", "featureSet", "doc", "K")
PER: Consumption = "per-conversation"


def _push(event_id: str, text: str, key: str = "K", **coalesce: Any) -> dict[str, Any]:
    return {
        "featureSet": "doc",
        "eventId": event_id,
        "timestamp": "t",
        "coalesce": {"key": key, **coalesce},
        "modelContent": [{"type": "text", "text": text}] if text else [],
    }


def _pending(state: CoalescingState, conversation: str) -> list[str]:
    return [o.event_id for o in state.unread(conversation)]


def _read(state: CoalescingState, conversation: str) -> list[str]:
    return [o.event_id for o in state.consume(conversation).items]


def _read_then_edit(consumption: Consumption) -> tuple[CoalescingState, tuple[str, str | None]]:
    """Vector 46's timeline: E1 delivered to A and B, A reads it, E2 for the same subject."""
    state = CoalescingState(["a", "b"], consumption=consumption)
    state.plain(K, "push", "e1", _push("e1", "FIRST", initial=True), initial=True)
    assert _read(state, "a") == ["e1"]
    return state, state.plain(K, "push", "e2", _push("e2", "EDIT"), initial=False)


def test_per_conversation_replaces_where_unread_and_appends_where_read() -> None:
    state, result = _read_then_edit(PER)
    assert result == ("appended", "e1")  # the more conservative outcome; e1 displaced and read
    assert _pending(state, "a") == ["e2"]  # A: e1 (read), then e2
    assert _pending(state, "b") == ["e2"]  # B: e2 only, no trace of e1
    assert state.history(K) == "some"
    assert state.history(K, "a") == "some" and state.history(K, "b") == "none"


def test_shared_consumption_is_unchanged() -> None:
    state, result = _read_then_edit("shared")
    assert result == ("appended", "e1")
    assert _pending(state, "a") == ["e2"]
    assert _pending(state, "b") == ["e1", "e2"]  # read by A: history in B too
    assert state.history(K, "b") == "some"


def test_nobody_read_it_replaces_everywhere_in_both_modes() -> None:
    for consumption in ("shared", PER):
        state = CoalescingState(["a", "b"], consumption=consumption)
        state.plain(K, "push", "e1", _push("e1", "FIRST", initial=True), initial=True)
        assert state.plain(K, "push", "e2", _push("e2", "EDIT"), initial=False) == ("replaced", "e1")
        assert _pending(state, "a") == _pending(state, "b") == ["e2"]


def test_a_second_edit_replaces_the_first_edit_in_both_conversations() -> None:
    state, _ = _read_then_edit(PER)
    assert state.plain(K, "push", "e3", _push("e3", "EDIT2"), initial=False) == ("replaced", "e2")
    assert _pending(state, "a") == _pending(state, "b") == ["e3"]
    assert _read(state, "b") == ["e3"]
    assert state.history(K, "b") == "some"


@pytest.mark.parametrize(
    ("content", "outcome", "in_a"),
    [("GONE", "noted", ["z"]), ("", "consumed", [])],
)
def test_a_retraction_s_notice_reaches_only_conversations_with_history(
    content: str, outcome: str, in_a: list[str]
) -> None:
    state, _ = _read_then_edit(PER)
    result = state.retract(K, "push", "z", _push("z", content, retract=True), empty=not content)
    assert result == (outcome, "e2")
    assert _pending(state, "a") == in_a  # A read e1: it learns the subject is gone
    assert _pending(state, "b") == []  # B read nothing of it: nothing to correct


def test_a_retraction_read_nowhere_is_retracted_everywhere() -> None:
    state = CoalescingState(["a", "b"], consumption=PER)
    state.plain(K, "push", "e1", _push("e1", "FIRST", initial=True), initial=True)
    assert state.retract(K, "push", "z", _push("z", "GONE", retract=True), empty=False) == ("retracted", "e1")
    assert _pending(state, "a") == _pending(state, "b") == []


def test_an_untracked_subject_s_notice_reaches_every_conversation() -> None:
    state = CoalescingState(["a", "b"], consumption=PER)
    assert state.retract(K, "push", "z", _push("z", "GONE", retract=True), empty=False) == ("noted", None)
    assert _pending(state, "a") == _pending(state, "b") == ["z"]


def test_a_notice_displaces_an_edit_only_where_it_is_unread() -> None:
    state = CoalescingState(["a", "b"], consumption=PER)
    state.plain(K, "push", "p", _push("p", "PLAIN", initial=True), initial=True)
    _read(state, "a")
    assert state.notice(K, "n1", _push("n1", "FB", deferred=True), initial=False) == ("first", None)
    assert _pending(state, "b") == []  # displaced in B
    (batch,) = state.due_batches("a")
    assert batch.audience == {"a", "b"} and state.due_batches("b") == [batch]  # one batch
    state.freeze(batch)
    assert state.settle(batch, [{"type": "text", "text": "R"}]) is True
    assert state.due_batches("b") == []  # rendered once, for both
    assert _read(state, "a") == _read(state, "b") == ["n1"]


def test_a_render_read_in_one_conversation_stays_in_the_other() -> None:
    """Vector 49 in this mode: per-conversation replacement never strands a delta (§3.3)."""
    state = CoalescingState(["a", "b"], consumption=PER)
    state.notice(K, "n1", _push("n1", "FB", deferred=True), initial=False)
    (batch,) = state.due_batches("a")
    state.freeze(batch)
    state.settle(batch, [{"type": "text", "text": "R1"}])
    assert _read(state, "a") == ["n1"]
    assert state.history(K, "b") == "some"  # B holds R1, read elsewhere: history there too
    assert state.plain(K, "push", "p", _push("p", "PLAIN"), initial=False) == ("appended", "n1")
    assert _pending(state, "b") == ["n1", "p"]  # R1 kept before p
    assert state.retract(K, "push", "z", _push("z", "GONE", retract=True), empty=False)[0] == "noted"
    assert _pending(state, "b") == ["n1", "z"]  # the notice follows the kept render


def test_a_replacement_reaches_only_the_conversations_its_predecessor_reached() -> None:
    state, _ = _read_then_edit(PER)
    state.add_conversation("c")  # came after e2
    assert state.plain(K, "push", "e3", _push("e3", "EDIT2"), initial=False)[0] == "replaced"
    assert _pending(state, "c") == []  # e3 replaces e2, which never reached c (§3.2)
    _read(state, "a")
    _read(state, "b")
    assert state.plain(K, "push", "e4", _push("e4", "EDIT3"), initial=False) == ("appended", "e3")
    assert _pending(state, "c") == ["e4"]  # read everywhere it went: a fresh append


def test_consumption_is_one_of_the_two_modes() -> None:
    with pytest.raises(ValueError, match="consumption must be one of shared, per-conversation"):
        CoalescingState(["a"], consumption="per-context")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="consumption"):
        EventInbox(consumption="everywhere")  # type: ignore[arg-type]
    assert EventInbox().state.consumption == "shared"


def _read_by_a_only() -> CoalescingState:
    """K read in A, never in B, and no occupant left (B's unread copy withdrawn empty)."""
    state = CoalescingState(["a", "b"], consumption=PER)
    state.plain(K, "push", "e1", _push("e1", "FIRST", initial=True), initial=True)
    _read(state, "a")
    assert state.retract(K, "push", "w", _push("w", "", retract=True), empty=True)[0] == "consumed"
    return state


@pytest.mark.parametrize(
    ("written", "read", "b_hears"),
    [
        (PER, PER, False),  # carried: B's history is still none
        ("shared", PER, True),  # a shared store read per conversation: unknown, conservatively
        (PER, "shared", True),  # shared: A's reading is history everywhere
    ],
)
def test_the_snapshot_carries_each_conversation_s_history(
    written: Consumption, read: Consumption, b_hears: bool
) -> None:
    state = _read_by_a_only()
    snapshot = state.snapshot()
    snapshot["consumption"] = written
    recovered = CoalescingState(["a", "b"], consumption=read)
    recovered.recover(snapshot)
    assert recovered.retract(K, "push", "z", _push("z", "GONE", retract=True), empty=False)[0] == "noted"
    assert _pending(recovered, "a") == ["z"]
    assert _pending(recovered, "b") == (["z"] if b_hears else [])


def test_a_store_without_the_mode_reads_as_shared() -> None:
    snapshot = _read_by_a_only().snapshot()
    del snapshot["consumption"]
    for subject in snapshot["subjects"]:
        del subject["readers"], subject["base"]
    recovered = CoalescingState(["a", "b"], consumption=PER)
    recovered.recover(snapshot)
    assert recovered.history(K, "a") == recovered.history(K, "b") == "unknown"


def test_an_occupant_read_in_one_conversation_is_sealed_at_recovery() -> None:
    state, _ = _read_then_edit(PER)
    _read(state, "a")  # e2 read in A, unread in B: still B's occupant
    recovered = CoalescingState(["a", "b"], consumption=PER)
    recovered.recover(state.snapshot())
    assert recovered.history(K, "a") == recovered.history(K, "b") == "unknown"
    assert recovered.plain(K, "push", "e3", _push("e3", "EDIT2"), initial=False) == ("appended", None)
    assert _pending(recovered, "b") == ["e2", "e3"]  # sealed: delivered as ordinary work
    assert _pending(recovered, "a") == ["e3"]


# --- properties ----------------------------------------------------------------------------

CONVERSATIONS = ("a", "b", "c")
KEYS = ("K", "L")
_op = st.one_of(
    st.tuples(st.just("plain"), st.sampled_from(KEYS), st.booleans()),
    st.tuples(st.just("retract"), st.sampled_from(KEYS), st.booleans()),
    st.tuples(st.just("notice"), st.sampled_from(KEYS), st.booleans()),
    st.tuples(st.just("render"), st.sampled_from(CONVERSATIONS), st.booleans()),
    st.tuples(st.just("consume"), st.sampled_from(CONVERSATIONS), st.just(False)),
    st.tuples(st.just("join"), st.just("c"), st.just(False)),
)


def _key(name: str) -> SubjectKey:
    return ("server", "featureSet", "doc", name)


@settings(max_examples=300, deadline=None)
@given(st.lists(_op, max_size=40))
def test_a_conversation_never_loses_what_it_read_nor_holds_what_was_replaced_unread(
    ops: list[tuple[str, str, bool]],
) -> None:
    """Conversations ``a`` and ``b``, and ``c`` once it joins; plain occurrences, retractions,
    notices, renders (a drain's, without its consumption: rendered or the fallback) and drains
    of two subjects, in any order."""
    state = CoalescingState(["a", "b"], consumption=PER)
    latest: dict[str, str | None] = dict.fromkeys(KEYS)  # the newest plain occurrence, while unreplaced
    read: dict[str, set[str]] = {name: set() for name in CONVERSATIONS}  # keys each has read
    read_latest: dict[str, set[str]] = {key: set() for key in KEYS}  # who read latest[key]
    plain_of: dict[str, str] = {}  # eventId -> key, for plain occurrences
    renders: set[str] = set()  # eventIds of materialized occurrences
    kept: dict[str, set[str]] = {}  # a render read somewhere -> the conversations yet to read it
    for index, (op, arg, flag) in enumerate(ops):
        event_id = f"e{index}"
        if op == "plain":
            outcome, prior = state.plain(_key(arg), "push", event_id, _push(event_id, "X", arg), initial=flag)
            if read_latest[arg]:  # its predecessor was read somewhere: appended (§3.3)
                assert (outcome, prior) == ("appended", latest[arg])
            plain_of[event_id] = arg
            latest[arg], read_latest[arg] = event_id, set()
            for name in state.conversations:
                if arg in read[name]:  # a conversation that read the subject gets what follows
                    assert event_id in _pending(state, name)
        elif op == "retract":
            params = _push(event_id, "GONE" if flag else "", arg, retract=True)
            outcome, _ = state.retract(_key(arg), "push", event_id, params, empty=not flag)
            latest[arg], read_latest[arg] = None, set()
            for name in state.conversations:
                if arg in read[name]:  # it read a version: the notice reaches it
                    assert outcome == ("noted" if flag else "consumed")
                    assert (event_id in _pending(state, name)) is flag
        elif op == "notice":  # displaces an unread plain occupant where it is unread
            state.notice(_key(arg), event_id, _push(event_id, "FB", arg, deferred=True), initial=flag)
            latest[arg], read_latest[arg] = None, set()
        elif op == "render":
            for batch in state.due_batches(arg):
                state.freeze(batch)
                if state.settle(batch, [{"type": "text", "text": "R"}] if flag else None, fallback=not flag):
                    renders.add(batch.notices[-1].event_id)
        elif op == "consume":
            for occurrence in state.consume(arg).items:
                kept.get(occurrence.event_id, set()).discard(arg)
                if occurrence.event_id in renders and occurrence.event_id not in kept:
                    kept[occurrence.event_id] = {
                        n for n in state.conversations if occurrence.event_id in _pending(state, n)
                    }
                key = plain_of.get(occurrence.event_id)
                if key is not None:
                    read[arg].add(key)
                    if occurrence.event_id == latest[key]:
                        read_latest[key].add(arg)
        else:
            state.add_conversation(arg)
        for name in state.conversations:
            pending = _pending(state, name)
            for event in pending:  # unread plain occurrences of a key: its newest, at most
                if event in plain_of:
                    assert event == latest[plain_of[event]], (name, event)
        for render, waiting in kept.items():  # a render read somewhere stays where unread (§3.3)
            for name in waiting:
                assert render in _pending(state, name), (render, name)


_single_op = st.one_of(
    st.tuples(st.just("plain"), st.sampled_from(KEYS), st.booleans()),
    st.tuples(st.just("retract"), st.sampled_from(KEYS), st.booleans()),
    st.tuples(st.just("notice"), st.sampled_from(KEYS), st.booleans()),
    st.tuples(st.just("render"), st.just(""), st.booleans()),
    st.tuples(st.just("consume"), st.just(""), st.booleans()),
)


def _run(consumption: Consumption, ops: list[tuple[str, str, bool]]) -> list[Any]:
    state = CoalescingState(["main"], consumption=consumption)
    trace: list[Any] = []
    for index, (op, arg, flag) in enumerate(ops):
        event_id = f"e{index}"
        if op == "plain":
            trace.append(state.plain(_key(arg), "push", event_id, _push(event_id, "X", arg), initial=flag))
        elif op == "retract":
            params = _push(event_id, "GONE" if flag else "", arg, retract=True)
            trace.append(state.retract(_key(arg), "push", event_id, params, empty=not flag))
        elif op == "notice":
            trace.append(
                state.notice(_key(arg), event_id, _push(event_id, "FB", arg, deferred=True), initial=flag)
            )
        elif op == "render":  # each due batch, rendered (flag) or empty
            for batch in state.due_batches("main"):
                state.freeze(batch)
                trace.append(state.settle(batch, [{"type": "text", "text": "R"}] if flag else []))
        else:
            trace.append(_read(state, "main"))
    return trace


@settings(max_examples=200, deadline=None)
@given(st.lists(_single_op, max_size=30))
def test_with_one_conversation_both_modes_decide_alike(ops: list[tuple[str, str, bool]]) -> None:
    assert _run(PER, ops) == _run("shared", ops)

"""The event inbox's decisions (``mcpl_host.mcpl.coalescing``; MCPL RFC-006 rev 8), by plain
calls: what replaces what, the consumed-history tri-state, retraction outcomes, batch
freezing and settling, receipts, malformed ``coalesce``, capacity, recovery
(docs/protocol.md EC1-EC14)."""

from __future__ import annotations

from typing import Any

import pytest

from mcpl_host.mcpl.coalescing import CoalescingState, SubjectKey, coalesce_problem

K: SubjectKey = ("server", "featureSet", "doc", "K")


def _push(event_id: str, text: str, **coalesce: Any) -> dict[str, Any]:
    return {
        "featureSet": "doc",
        "eventId": event_id,
        "timestamp": "t",
        "coalesce": {"key": "K", **coalesce},
        "modelContent": [{"type": "text", "text": text}] if text else [],
    }


def _texts(state: CoalescingState, conversation: str = "main") -> list[str]:
    drained = state.consume(conversation)
    return [block["text"] for item in drained.items for block in item.event["modelContent"]]


def test_initial_establishes_none_and_without_it_history_is_unknown() -> None:
    state = CoalescingState(["main"])
    assert state.plain(K, "push", "a", _push("a", "A", initial=True), initial=True) == ("first", None)
    other: SubjectKey = ("server", "featureSet", "doc", "other")
    assert state.plain(other, "push", "b", _push("b", "B"), initial=False) == ("appended", None)
    assert state.history(K) == "none" and state.history(other) == "unknown"


def test_unread_is_replaced_without_a_trace_and_read_is_history() -> None:
    state = CoalescingState(["main"])
    state.plain(K, "push", "a", _push("a", "A", initial=True), initial=True)
    assert state.plain(K, "push", "b", _push("b", "B"), initial=False) == ("replaced", "a")
    assert _texts(state) == ["B"]
    assert state.history(K) == "some"
    assert state.plain(K, "push", "c", _push("c", "C"), initial=False) == ("appended", "b")
    assert _texts(state) == ["C"]


def test_initial_never_lowers_history() -> None:
    state = CoalescingState(["main"])
    state.plain(K, "push", "a", _push("a", "A", initial=True), initial=True)
    state.consume("main")
    state.plain(K, "push", "b", _push("b", "B", initial=True), initial=True)
    assert state.history(K) == "some"


@pytest.mark.parametrize(
    ("read_first", "content", "outcome", "seen"),
    [
        (False, "GONE", "retracted", []),  # known none: nothing appended
        (True, "GONE", "noted", ["GONE"]),  # some: the notice
        (True, "", "consumed", []),  # some, pure withdrawal
    ],
)
def test_retraction_outcomes(read_first: bool, content: str, outcome: str, seen: list[str]) -> None:
    state = CoalescingState(["main"])
    state.plain(K, "push", "a", _push("a", "A", initial=True), initial=True)
    if read_first:
        state.consume("main")
    state.plain(K, "push", "edit", _push("edit", "EDIT"), initial=False)
    result = state.retract(K, "push", "z", _push("z", content, retract=True), empty=not content)
    assert result[0] == outcome
    assert _texts(state) == seen  # the pending edit is gone either way


def test_untracked_retraction_is_noted_and_history_survives_the_empty_slot() -> None:
    state = CoalescingState(["main"])
    assert state.retract(K, "push", "z", _push("z", "GONE", retract=True), empty=False) == ("noted", None)
    state.consume("main")
    state.plain(K, "push", "a", _push("a", "A", initial=True), initial=True)
    # the deletion notice is ordinary work, never the subject's occupant (RFC-006 §6)
    assert state.history(K) == "unknown"


def test_forgetting_history_degrades_to_unknown_never_none() -> None:
    state = CoalescingState(["main"])
    state.plain(K, "push", "a", _push("a", "A", initial=True), initial=True)
    state.forget_history()
    assert state.history(K) == "unknown"
    assert state.retract(K, "push", "z", _push("z", "GONE", retract=True), empty=False)[0] == "noted"


def test_notices_join_one_batch_and_render_params_keep_the_newest_64() -> None:
    state = CoalescingState(["main"])
    outcomes = [
        state.notice(K, f"n{i}", _push(f"n{i}", "FB", deferred=True, data=i), initial=False)[0]
        for i in range(100)
    ]
    assert outcomes[0] == "first" and set(outcomes[1:]) == {"replaced"}
    (batch,) = state.due_batches("main")
    params = batch.render_params()
    assert params["dropped"] == 36 and len(params["notices"]) == 64
    assert params["notices"][0] == {"eventId": "n36", "timestamp": "t", "data": 36}
    assert params["eventId"] == "n99" and params["key"] == "K" and "channelId" not in params


def test_freezing_opens_a_new_batch_and_settling_materializes_once() -> None:
    state = CoalescingState(["main"])
    state.notice(K, "n1", _push("n1", "FB1", deferred=True), initial=False)
    (batch,) = state.due_batches("main")
    state.freeze(batch)
    assert state.notice(K, "n2", _push("n2", "FB2", deferred=True), initial=False) == ("first", None)
    assert state.settle(batch, [{"type": "text", "text": "R1"}]) is True
    assert state.settle(batch, None, fallback=True) is False  # exactly one materialization
    (second,) = state.due_batches("main")
    assert [n.event_id for n in second.notices] == ["n2"]
    assert _texts(state) == ["R1"]


@pytest.mark.parametrize("cancel", ["retract", "plain"])
def test_a_render_cancelled_by_retraction_or_plain_materializes_nothing(cancel: str) -> None:
    state = CoalescingState(["main"])
    state.notice(K, "n1", _push("n1", "FB", deferred=True, initial=True), initial=True)
    (batch,) = state.due_batches("main")
    state.freeze(batch)
    state.notice(K, "n2", _push("n2", "FB2", deferred=True), initial=False)  # a new pending batch
    if cancel == "retract":
        assert state.retract(K, "push", "z", _push("z", "GONE", retract=True), empty=False)[0] == "retracted"
    else:
        assert state.plain(K, "push", "p", _push("p", "PLAIN"), initial=False)[0] == "replaced"
    assert state.settle(batch, [{"type": "text", "text": "LATE"}]) is False
    assert state.due_batches("main") == []  # the pending batch went too
    assert _texts(state) == ([] if cancel == "retract" else ["PLAIN"])


def test_empty_render_and_lapsed_authority_materialize_nothing() -> None:
    state = CoalescingState(["main"])
    state.notice(K, "n1", _push("n1", "FB", deferred=True), initial=False)
    (batch,) = state.due_batches("main")
    state.freeze(batch)
    assert state.settle(batch, []) is False
    drained = state.consume("main", rendered=1)
    assert drained.items == () and drained.model_needed is False  # RFC-006 §5.2 rev 8
    assert state.consume("main").model_needed is True  # no batch: the application's own cause


def test_shared_consumption_keeps_a_rendered_baseline_for_the_unread_context() -> None:
    state = CoalescingState(["a", "b"])
    state.notice(K, "n1", _push("n1", "FB", deferred=True), initial=False)
    (batch,) = state.due_batches("a")
    state.freeze(batch)
    state.settle(batch, [{"type": "text", "text": "R1"}])
    assert _texts(state, "a") == ["R1"]
    state.notice(K, "n2", _push("n2", "FB", deferred=True), initial=False)
    (second,) = state.due_batches("a")
    state.freeze(second)
    state.settle(second, [{"type": "text", "text": "R2"}])
    assert _texts(state, "b") == ["R1", "R2"]  # EC4: B keeps R1 before R2


def test_capacity_degrades_to_append_never_refuses() -> None:
    state = CoalescingState(["main"], max_subjects=1)
    state.plain(K, "push", "a", _push("a", "A", initial=True), initial=True)
    full: SubjectKey = ("server", "featureSet", "doc", "new")
    assert state.plain(full, "push", "b", _push("b", "B", initial=True), initial=True) == ("appended", None)
    assert state.notice(full, "n", _push("n", "FB", deferred=True), initial=False) == ("appended", None)
    assert state.due_batches("main") == []
    assert _texts(state) == ["A", "B", "FB"]


def test_receipts_expire_and_make_room() -> None:
    state = CoalescingState(["main"], max_receipts=2)
    state.remember("s", "a", "f", b"{}", expires=10.0)
    assert state.receipt("s", "a", 9.0) is not None
    assert state.receipt("s", "a", 10.0) is None
    state.remember("s", "b", "f", b"{}", 10.0)
    state.remember("s", "c", "f", b"{}", 10.0)
    state.remember("s", "d", "f", b"{}", 10.0)
    assert state.receipt("s", "b", 0.0) is None and state.receipt("s", "d", 0.0) is not None


def test_recovery_is_conservative_and_keeps_receipts() -> None:
    state = CoalescingState(["main"])
    state.plain(K, "push", "a", _push("a", "A", initial=True), initial=True)
    other: SubjectKey = ("server", "featureSet", "doc", "D")
    state.notice(other, "n1", _push("n1", "FALLBACK", deferred=True), initial=False)
    (batch,) = state.due_batches("main")
    state.freeze(batch)  # interrupted while rendering
    state.remember("server", "a", "f", b'{"accepted":true}', 99.0)
    recovered = CoalescingState(["main"])
    recovered.recover(state.snapshot())
    assert recovered.plain(K, "push", "b", _push("b", "B"), initial=False)[0] == "appended"  # sealed
    assert recovered.due_batches("main") == []  # no second render: the fallback instead
    assert _texts(recovered) == ["A", "FALLBACK", "B"]
    assert recovered.receipt("server", "a", 0.0) is not None


@pytest.mark.parametrize(
    ("params", "lane", "field"),
    [
        ({"coalesce": {"key": "x" * 257}}, "push", "coalesce.key"),
        ({"coalesce": {"key": ""}}, "push", "coalesce.key"),
        ({"coalesce": {"key": "K", "initial": "yes"}}, "push", "coalesce.initial"),
        ({"coalesce": {"key": "K", "retract": True, "deferred": True}}, "push", "coalesce.retract"),
        ({"coalesce": {"key": "K", "retract": True, "initial": True}}, "push", "coalesce.initial"),
        ({"coalesce": {"key": "K", "data": 1}}, "push", "coalesce.data"),
        ({"coalesce": {"key": "K", "deferred": True, "data": "x" * 5000}}, "push", "coalesce.data"),
        ({"coalesce": {"key": "K", "channelId": "c"}}, "push-no-channel", "coalesce.channelId"),
        ({"eventId": "e", "coalesce": {"key": "K", "deferred": True}}, "channel", "coalesce.deferred"),
        ({"eventId": "e", "coalesce": {"key": "K", "channelId": "c"}}, "channel", "coalesce.channelId"),
        ({"eventId": "", "coalesce": {"key": "K"}}, "channel", "eventId"),
        ({"coalesce": {"key": "K"}}, "channel", "eventId"),
    ],
)
def test_malformed_coalesce_names_its_field(params: dict[str, Any], lane: str, field: str) -> None:
    problem = coalesce_problem(
        params,
        lane="channel" if lane == "channel" else "push",
        deferred_ok=True,
        channel_scoped_ok=lane != "push-no-channel",
    )
    assert problem is not None and problem[0] == field


def test_well_formed_coalesce_passes() -> None:
    assert (
        coalesce_problem(
            {"coalesce": {"key": "K", "deferred": True, "data": {"a": 1}}},
            lane="push",
            deferred_ok=True,
            channel_scoped_ok=True,
        )
        is None
    )
    assert (
        coalesce_problem(
            {"eventId": "e", "coalesce": {"key": "K", "initial": True}},
            lane="channel",
            deferred_ok=False,
            channel_scoped_ok=False,
        )
        is None
    )


def test_a_rendered_occurrence_carries_the_render_s_time_and_the_batch_s_tags() -> None:
    state = CoalescingState(["main"])
    state.notice(K, "n1", {**_push("n1", "FB", deferred=True), "tags": ["doc:edit"]}, initial=False)
    (batch,) = state.due_batches("main")
    state.freeze(batch)
    state.settle(batch, [{"type": "text", "text": "R"}], timestamp="2026-09-21T14:02:09Z")
    (item,) = state.consume("main").items
    assert item.event["timestamp"] == "2026-09-21T14:02:09Z" and item.event["tags"] == ["doc:edit"]
    assert item.event["payload"] == {"content": [{"type": "text", "text": "R"}]}


def test_a_notice_keeps_an_unread_render_as_the_next_one_s_baseline() -> None:
    state = CoalescingState(["main"])
    state.notice(K, "n1", _push("n1", "FB", deferred=True), initial=False)
    (batch,) = state.due_batches("main")
    state.freeze(batch)
    state.settle(batch, [{"type": "text", "text": "R1"}])  # materialized, not yet read
    assert state.notice(K, "n2", _push("n2", "FB", deferred=True), initial=False) == ("first", None)
    (second,) = state.due_batches("main")
    state.freeze(second)
    state.settle(second, [{"type": "text", "text": "R2"}])
    assert _texts(state) == ["R1", "R2"]


def test_a_plain_occurrence_supersedes_every_unread_render() -> None:
    state = CoalescingState(["main"])
    for n in (1, 2):
        state.notice(K, f"n{n}", _push(f"n{n}", "FB", deferred=True), initial=False)
        (batch,) = state.due_batches("main")
        state.freeze(batch)
        state.settle(batch, [{"type": "text", "text": f"R{n}"}])
    assert state.plain(K, "push", "p", _push("p", "SNAPSHOT"), initial=False)[0] == "replaced"
    assert _texts(state) == ["SNAPSHOT"]


def test_an_idle_subject_is_forgotten_for_room_and_its_history_then_reads_unknown() -> None:
    state = CoalescingState(["main"], max_subjects=1)
    state.plain(K, "push", "a", _push("a", "A", initial=True), initial=True)
    state.consume("main")  # K is idle now: history some, nothing unread
    other: SubjectKey = ("server", "featureSet", "doc", "L")
    assert state.plain(other, "push", "b", _push("b", "B", initial=True), initial=True) == ("first", None)
    assert state.history(K) == "unknown"  # forgotten: never "none"
    assert state.retract(K, "push", "z", _push("z", "GONE", retract=True), empty=False)[0] == "noted"


def test_the_audit_shows_what_the_model_never_saw() -> None:
    state = CoalescingState(["main"], max_audit=8)
    state.plain(K, "push", "a", _push("a", "A", initial=True), initial=True)
    state.plain(K, "push", "b", _push("b", "B"), initial=False)  # a displaced
    state.retract(K, "push", "z", _push("z", "GONE", retract=True), empty=False)  # b removed
    doc: SubjectKey = ("server", "featureSet", "doc", "D")
    for n in (1, 2, 3):
        state.notice(doc, f"n{n}", _push(f"n{n}", "FB", deferred=True), initial=False)
    (batch,) = state.due_batches("main")
    state.freeze(batch)
    state.settle(batch, [{"type": "text", "text": "R"}])
    state.notice(doc, "n4", _push("n4", "FB", deferred=True), initial=False)
    (late,) = state.due_batches("main")
    state.freeze(late)
    state.retract(doc, "push", "y", _push("y", "", retract=True), empty=True)  # cancels n4
    state.settle(late, [{"type": "text", "text": "LATE"}])  # its answer, discarded
    shown = [(e.what, e.event_id, e.folded) for e in state.audit()]
    assert shown == [
        ("displaced", "a", ()),
        ("removed", "b", ()),
        ("rendered", "n3", ("n1", "n2", "n3")),
        ("removed", "n3", ()),  # the unread render, withdrawn
        ("cancelled", "n4", ("n4",)),
        ("discarded", "n4", ("n4",)),
    ]

"""``admission.PushAdmissions``: ``admit`` for ``push/event`` on one connection, remembering
which feature sets passed steps 1-3 (MCPL §6.6). Every change of what those steps read is
seen at the next push: the grant, the derivation, the declarations (a manifest change),
what is advertised and the state; and a push remembered still has its params checked."""

from __future__ import annotations

from typing import Any

import pytest

from mcpl_host import GrantPolicy
from mcpl_host.mcpl import admission
from mcpl_host.mcpl.admission import Admitted, Held, PushAdmissions, Refused, admit
from mcpl_host.mcpl.compat import choose_profile
from mcpl_host.mcpl.feature_sets import Derivation, FeatureSetPolicy, read_feature_sets
from mcpl_host.mcpl.grants import Grant
from mcpl_host.mcpl.policy_state import MCPLState, PolicyState

MANIFEST: dict[str, Any] = {
    "version": "0.5",
    "pushEvents": True,
    "featureSets": {
        "heartbeat": {"description": "h", "uses": ["pushEvents"]},
        "other": {"description": "o", "uses": ["pushEvents"]},
    },
}


def push(feature_set: str = "heartbeat", **changes: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "featureSet": feature_set,
        "eventId": "e1",
        "timestamp": "2026-01-01T00:00:00Z",
        "payload": {"content": [{"type": "text", "text": "x"}]},
    }
    params.update(changes)
    return params


def ready(compat: Any = "strict") -> PolicyState:
    """A policy state with the policy in force (a receipt accepted it), pushEvents granted."""
    state = PolicyState(compat=compat)
    state.begin(MANIFEST, tools=False)
    proposal = state.propose(GrantPolicy(grant_all_advertised=True), FeatureSetPolicy(), initial=True)
    state.receipt(proposal, {"accepted": True})
    assert state.state is MCPLState.READY and state.grant is not None and state.grant.allows("pushEvents")
    return state


@pytest.fixture
def admit_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The feature sets of the pushes that ran ``admit`` itself (not remembered)."""
    calls: list[str] = []

    def counted(method: str, params: Any, view: Any, **options: Any) -> admission.Admission:
        calls.append(params.get("featureSet") if isinstance(params, dict) else None)
        return admit(method, params, view, **options)

    monkeypatch.setattr(admission, "admit", counted)
    return calls


def remembered(memo: PushAdmissions, admit_calls: list[str], feature_set: str = "heartbeat") -> None:
    """``feature_set`` is admitted and remembered: its next push runs no ``admit``."""
    assert memo.admit(push(feature_set)) == Admitted()
    before = len(admit_calls)
    assert memo.admit(push(feature_set, eventId="e2")) == Admitted()
    assert len(admit_calls) == before


def shown(decision: admission.Admission) -> object:
    """A decision as comparable values (a ``HandlerError`` compares by identity)."""
    if isinstance(decision, Refused):
        error = decision.error
        return (Refused, error.code, error.message, error.data, decision.diagnostic, decision.reason)
    return decision


def same_as_admit(memo: PushAdmissions, view: PolicyState, params: Any) -> admission.Admission:
    decision = memo.admit(params)
    assert shown(decision) == shown(admit("push/event", params, view))
    return decision


def test_a_remembered_feature_set_still_has_its_params_checked(admit_calls: list[str]) -> None:
    view = ready()
    memo = PushAdmissions(view)
    remembered(memo, admit_calls)
    before = len(admit_calls)
    for bad in (
        push(eventId=""),
        push(timestamp="yesterday"),
        push(payload={"content": [3]}),
        push(tags=[1]),
    ):
        decision = same_as_admit(memo, view, bad)
        assert isinstance(decision, Refused) and decision.error.code == -32602
        assert decision.error.data is not None and decision.error.data["problems"]
    assert len(admit_calls) == before  # each refused on the remembered path, step 4 alone


def test_another_feature_set_runs_admit_and_an_undeclared_one_is_refused(admit_calls: list[str]) -> None:
    view = ready()
    memo = PushAdmissions(view)
    remembered(memo, admit_calls)
    remembered(memo, admit_calls, "other")
    remembered(memo, admit_calls)  # both are remembered together
    decision = same_as_admit(memo, view, push("undeclared"))
    assert isinstance(decision, Refused) and decision.error.code == -32003
    assert isinstance(same_as_admit(memo, view, push(None)), Refused)


def test_a_grant_change_is_seen() -> None:
    view = ready()
    memo = PushAdmissions(view)
    assert memo.admit(push()) == Admitted()
    # A runtime reduction is in force at once (a new Grant without pushEvents).
    view.propose_grant(Grant(frozenset(), frozenset()), FeatureSetPolicy(), initial=False)
    decision = same_as_admit(memo, view, push())
    assert isinstance(decision, Refused) and decision.reason == "denied_by_policy"


def test_the_grant_alone_is_seen() -> None:
    view = ready()
    memo = PushAdmissions(view)
    assert memo.admit(push()) == Admitted()
    view.grant = Grant(frozenset(), frozenset({"pushEvents"}))  # the derivation left as it was
    decision = same_as_admit(memo, view, push())
    assert isinstance(decision, Refused) and decision.reason == "denied_by_policy"


def test_the_declarations_alone_are_seen() -> None:
    view = ready()
    memo = PushAdmissions(view)
    assert memo.admit(push("other")) == Admitted()
    view.feature_sets = read_feature_sets(
        {**MANIFEST, "featureSets": {"heartbeat": MANIFEST["featureSets"]["heartbeat"]}}
    )
    decision = same_as_admit(memo, view, push("other"))
    assert isinstance(decision, Refused) and decision.error.code == -32003


def test_a_refused_policy_is_seen() -> None:
    view = ready()
    memo = PushAdmissions(view)
    assert memo.admit(push()) == Admitted()
    assert view.proposed is not None
    view.receipt(view.proposed, {"accepted": False})  # MCPL is off (§6.7)
    decision = same_as_admit(memo, view, push())
    assert isinstance(decision, Refused) and decision.reason == "mcpl_off"


def test_a_manifest_change_is_seen() -> None:
    view = ready()
    memo = PushAdmissions(view)
    assert memo.admit(push("other")) == Admitted()
    without_other = {**MANIFEST, "featureSets": {"heartbeat": MANIFEST["featureSets"]["heartbeat"]}}
    view.apply_manifest(without_other, FeatureSetPolicy())
    decision = same_as_admit(memo, view, push("other"))
    assert isinstance(decision, Refused) and decision.error.code == -32003  # no longer declared


def test_a_derivation_change_is_seen() -> None:
    view = ready()
    memo = PushAdmissions(view)
    assert memo.admit(push()) == Admitted()
    view.derivation = Derivation(frozenset({"other"}))  # heartbeat no longer enabled
    decision = same_as_admit(memo, view, push())
    assert isinstance(decision, Refused) and decision.error.code == -32001
    assert same_as_admit(memo, view, push("other")) == Admitted()


def test_what_is_advertised_is_seen_for_the_04_note() -> None:
    view = ready("0.4")
    memo = PushAdmissions(view)
    assert memo.admit(push()) == Admitted()
    view.advertised = frozenset()  # pushEvents granted, no longer advertised by the server itself
    decision = same_as_admit(memo, view, push())
    assert isinstance(decision, Admitted) and [note.kind for note in decision.notes] == ["unadvertised_leaf"]


def test_the_state_is_seen_a_pending_04_push_is_held() -> None:
    view = ready("0.4")
    memo = PushAdmissions(view)
    assert memo.admit(push()) == Admitted()
    view.state = MCPLState.PENDING  # the grant still there, the policy not settled again
    assert isinstance(same_as_admit(memo, view, push()), Held)


def test_nothing_is_remembered_while_pending(admit_calls: list[str]) -> None:
    """Under the strict profile a push in PENDING with a grant is admitted, but not
    remembered: were the profile then 0.4, it would be held."""
    view = ready()
    view.state = MCPLState.PENDING
    memo = PushAdmissions(view)
    assert memo.admit(push()) == Admitted()
    assert memo.admit(push()) == Admitted()
    assert len(admit_calls) == 2
    view.choice = choose_profile("0.4", {**MANIFEST, "version": "0.4"})
    assert view.profile == "0.4"
    assert isinstance(same_as_admit(memo, view, push()), Held)


def test_params_that_are_not_a_dict_run_admit() -> None:
    view = ready()
    memo = PushAdmissions(view)
    assert memo.admit(push()) == Admitted()
    decision = same_as_admit(memo, view, ["heartbeat"])
    assert isinstance(decision, Refused) and decision.error.code == -32602


def test_nothing_is_remembered_for_a_path_the_server_did_not_advertise(admit_calls: list[str]) -> None:
    """The strict profile admits, with no note, a granted path the server did not advertise
    itself; the 0.4 profile notes it. Such a push is not remembered: were the profile then
    0.4, the note would be given."""
    view = ready()
    view.advertised = frozenset()
    memo = PushAdmissions(view)
    assert memo.admit(push()) == Admitted()
    assert memo.admit(push()) == Admitted()
    assert len(admit_calls) == 2
    view.choice = choose_profile("0.4", {**MANIFEST, "version": "0.4"})
    decision = same_as_admit(memo, view, push())
    assert isinstance(decision, Admitted) and [note.kind for note in decision.notes] == ["unadvertised_leaf"]


@pytest.mark.parametrize("feature_set", [["heartbeat"], {"name": "heartbeat"}, 1, True, None, ""])
def test_a_feature_set_that_is_not_a_name_is_refused_as_admit_refuses_it(feature_set: Any) -> None:
    """Once a feature set is remembered, a push naming one by a value that is not a string
    (a list or an object cannot even be looked up in a set) is still refused by ``admit``'s
    rule, not raised out of the read loop (which leaves the request unanswered)."""
    view = ready()
    memo = PushAdmissions(view)
    assert memo.admit(push()) == Admitted()
    decision = same_as_admit(memo, view, push(feature_set))
    assert isinstance(decision, Refused) and decision.error.code == -32602

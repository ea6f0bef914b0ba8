"""Feature sets: declarations, name patterns, derivation, update params, admission
(MCPL §5.3, §5.4, §6.1-§6.7; docs/protocol.md, "Feature-set declarations", "Feature-set name
patterns", "Policy requests", "Admission order")."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpl_host.jsonrpc.errors import ErrorCode
from mcpl_host.mcpl.admission import Refused, admit
from mcpl_host.mcpl.feature_sets import (
    DeclarationMismatch,
    Derivation,
    DisabledReason,
    FeatureSet,
    FeatureSetDeclarations,
    FeatureSetPolicy,
    derive,
    name_matches,
    read_feature_sets,
    unavailable_feature_names,
)
from mcpl_host.mcpl.grants import VOCABULARY, Grant
from mcpl_host.mcpl.policy import read_receipt
from mcpl_host.mcpl.policy_state import PolicyState

EVERYTHING = Grant(paths=VOCABULARY, advertised=VOCABULARY)
NO_POLICY = FeatureSetPolicy()


def grant_of(*paths: str, advertised: tuple[str, ...] = ()) -> Grant:
    return Grant(paths=frozenset(paths), advertised=frozenset(paths) | frozenset(advertised))


def declare(**sets: list[str] | Any) -> FeatureSetDeclarations:
    return read_feature_sets(
        {
            "featureSets": {
                name.replace("_", "."): {"description": name, "uses": uses} for name, uses in sets.items()
            }
        }
    )


# --- reading declarations ------------------------------------------------------------------


def test_featuresets_object_map_shape() -> None:
    decl = read_feature_sets(
        {
            "version": "0.5",
            "featureSets": {
                "memory.retrieval": {
                    "description": "recall",
                    "uses": ["contextHooks.beforeInference.observe"],
                    "rollback": True,
                    "tagOntology": {"namespace": "mem"},
                },
                "clock": {"description": "ticks", "uses": ["pushEvents"]},
            },
        }
    )
    assert decl.shape == "object"
    assert decl.problems == []
    assert list(decl.sets) == ["memory.retrieval", "clock"]
    mem = decl.sets["memory.retrieval"]
    assert mem == FeatureSet(
        name="memory.retrieval",
        description="recall",
        uses=("contextHooks.beforeInference.observe",),
        rollback=True,
        tag_ontology={"namespace": "mem"},
        raw=mem.raw,
    )
    assert decl.sets["clock"].rollback is False


def test_featuresets_object_map_repeated_name_same_as_key_is_fine() -> None:
    decl = read_feature_sets({"featureSets": {"a": {"name": "a", "description": "", "uses": ["tools"]}}})
    assert decl.problems == [] and list(decl.sets) == ["a"]


def test_featuresets_object_map_key_wins_over_differing_name() -> None:
    decl = read_feature_sets({"featureSets": {"a": {"name": "b", "description": "", "uses": ["tools"]}}})
    assert list(decl.sets) == ["a"]
    assert decl.sets["a"].name == "a"
    assert any("key wins" in p for p in decl.problems)


def test_featuresets_array_shape() -> None:
    decl = read_feature_sets(
        {
            "featureSets": [
                {"name": "clock", "description": "ticks", "uses": ["pushEvents"]},
                {"name": "ask", "description": "asks", "uses": ["inferenceRequest"]},
            ]
        }
    )
    assert decl.shape == "array"
    assert list(decl.sets) == ["clock", "ask"]
    assert decl.sets["ask"].uses == ("inferenceRequest",)
    assert len(decl.problems) == 1 and "RFC-001" in decl.problems[0]  # the non-conformance note


@pytest.mark.parametrize(
    "entry",
    [
        {"description": "no name", "uses": ["pushEvents"]},
        {"name": "", "uses": ["pushEvents"]},
        {"name": 3, "uses": ["pushEvents"]},
        {"name": None, "uses": ["pushEvents"]},
        "clock",
        ["clock"],
        None,
    ],
)
def test_featuresets_array_index_is_never_a_name(entry: Any) -> None:
    decl = read_feature_sets({"featureSets": [entry, {"name": "ok", "description": "", "uses": ["tools"]}]})
    assert list(decl.sets) == ["ok"]
    assert "0" not in decl.sets and 0 not in decl.sets
    assert any("featureSets[0]" in p and "skipped" in p for p in decl.problems)


def test_featuresets_array_duplicate_first_wins() -> None:
    decl = read_feature_sets(
        {
            "featureSets": [
                {"name": "x", "description": "first", "uses": ["tools"]},
                {"name": "x", "description": "second", "uses": ["pushEvents"]},
            ]
        }
    )
    assert decl.sets["x"].description == "first"
    assert any("first wins" in p for p in decl.problems)


def test_featuresets_object_map_invalid_keys_skipped() -> None:
    decl = read_feature_sets(
        {
            "featureSets": {
                "": {"uses": ["tools"]},
                5: {"uses": ["tools"]},
                "ok": {"description": "", "uses": ["tools"]},
            }
        }
    )
    assert list(decl.sets) == ["ok"]
    assert sum("skipped" in p for p in decl.problems) == 2


@pytest.mark.parametrize(
    ("manifest", "shape", "n_problems"),
    [
        (None, "absent", 0),
        ({}, "absent", 0),
        ({"featureSets": None}, "absent", 0),
        ({"featureSets": "memory"}, "invalid", 1),
        ({"featureSets": 7}, "invalid", 1),
        ([1, 2], "invalid", 1),
        ("mcpl", "invalid", 1),
    ],
)
def test_featuresets_absent_and_invalid_shapes(manifest: Any, shape: str, n_problems: int) -> None:
    decl = read_feature_sets(manifest)
    assert (decl.shape, decl.sets, len(decl.problems)) == (shape, {}, n_problems)


def test_featuresets_non_object_value_is_declared_but_invalid() -> None:
    decl = read_feature_sets({"featureSets": {"x": True}})
    assert "x" in decl.sets and decl.sets["x"].uses_problem is not None
    assert derive(decl, EVERYTHING, NO_POLICY).disabled["x"].reason == "invalid_uses"


def test_featuresets_missing_description_is_a_problem_not_a_skip() -> None:
    decl = read_feature_sets({"featureSets": {"x": {"uses": ["tools"]}}})
    assert decl.sets["x"].description == ""
    assert any("description" in p for p in decl.problems)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)


@given(st.dictionaries(st.text(max_size=5), json_values, max_size=4) | st.lists(json_values, max_size=5))
def test_featuresets_reader_never_raises_and_names_are_declared_strings(declared: Any) -> None:
    decl = read_feature_sets({"featureSets": declared})
    for name, feature_set in decl.sets.items():
        assert isinstance(name, str) and name and feature_set.name == name
        if isinstance(declared, dict):
            assert name in declared
        else:
            assert any(isinstance(e, dict) and e.get("name") == name for e in declared)
    derive(decl, EVERYTHING, NO_POLICY)  # derivation never raises either


# --- name patterns (MCPL §6.3; docs/protocol.md, "Feature-set name patterns") -------------


@pytest.mark.parametrize(
    ("pattern", "name", "expected"),
    [
        ("memory.*", "memory.retrieval", True),
        ("memory.*", "memory.a.b", True),  # prefix, any depth (unlike the capability *)
        ("memory.*", "memory", False),
        ("memory.*", "memoryx.a", False),
        ("memory.*", "other.memory.a", False),
        ("*", "anything.at.all", True),
        ("memory", "memory", True),
        ("memory", "memory.retrieval", False),  # a bare parent names only itself
        ("memory.*.x", "memory.a.x", False),  # an inner * is literal
        ("mem*", "memory", False),
    ],
)
def test_feature_set_name_pattern_rule(pattern: str, name: str, expected: bool) -> None:
    assert name_matches(pattern, name) is expected


# --- derivation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "uses",
    [
        None,  # absent
        [],
        "pushEvents",  # not a list
        ["pushEvent"],  # typo
        ["channels.*"],  # wildcard
        ["*"],
        ["channels"],  # a bare parent is not a vocabulary path
        ["pushEvents", "contextHooks.afterInference"],  # one bad value spoils the set
        ["pushEvents", 3],
    ],
)
def test_invalid_uses_disables_with_reason(uses: Any) -> None:
    body: dict[str, Any] = {"description": "d"}
    if uses is not None:
        body["uses"] = uses
    decl = read_feature_sets({"featureSets": {"x": body}})
    derivation = derive(decl, EVERYTHING, NO_POLICY)
    assert derivation.enabled == frozenset()
    reason = derivation.disabled["x"]
    assert reason.reason == "invalid_uses" and reason.detail and reason.missing_capabilities == ()


def test_hand_built_set_with_empty_uses_is_invalid() -> None:
    decl = FeatureSetDeclarations(sets={"x": FeatureSet(name="x")}, shape="object")
    assert derive(decl, EVERYTHING, NO_POLICY).disabled["x"].reason == "invalid_uses"


def test_capability_denied_lists_missing_paths() -> None:
    decl = declare(ask=["inferenceRequest", "inferenceRequest.streaming", "pushEvents"])
    derivation = derive(decl, grant_of("inferenceRequest"), NO_POLICY)
    assert derivation.disabled["ask"] == DisabledReason(
        "capability_denied", missing_capabilities=("inferenceRequest.streaming", "pushEvents")
    )


def test_denied_capability_disables_every_set_that_uses_it() -> None:
    decl = declare(a=["pushEvents"], b=["pushEvents", "tools"], c=["tools"])
    derivation = derive(decl, grant_of("tools"), NO_POLICY)
    assert derivation.enabled == {"c"}
    assert set(derivation.disabled) == {"a", "b"}


def test_enabled_allowlist_disables_others_not_selected() -> None:
    decl = declare(memory_retrieval=["tools"], memory_write=["tools"], clock=["tools"])
    derivation = derive(decl, EVERYTHING, FeatureSetPolicy(enabled=("memory.*",)))
    assert derivation.enabled == {"memory.retrieval", "memory.write"}
    assert derivation.disabled == {"clock": DisabledReason("not_selected")}


def test_enabled_none_means_no_constraint_and_empty_tuple_selects_nothing() -> None:
    decl = declare(a=["tools"])
    assert derive(decl, EVERYTHING, FeatureSetPolicy(enabled=None)).enabled == {"a"}
    assert derive(decl, EVERYTHING, FeatureSetPolicy(enabled=())).disabled["a"].reason == "not_selected"


def test_disabled_always_subtracts() -> None:
    decl = declare(memory_retrieval=["tools"], clock=["tools"])
    policy = FeatureSetPolicy(enabled=("*",), disabled=("memory.*",))
    derivation = derive(decl, EVERYTHING, policy)
    assert derivation.enabled == {"clock"}
    assert derivation.disabled["memory.retrieval"].reason == "disabled_by_policy"


def test_naming_never_widens() -> None:
    decl = declare(ask=["inferenceRequest"], bad=["inferenceRequst"])
    derivation = derive(decl, grant_of(), FeatureSetPolicy(enabled=("ask", "bad")))
    assert derivation.enabled == frozenset()
    assert derivation.disabled["ask"].reason == "capability_denied"
    assert derivation.disabled["bad"].reason == "invalid_uses"


def test_disabled_reason_precedence() -> None:
    """invalid_uses, then capability_denied, then not_selected, then disabled_by_policy."""
    decl = declare(a=[], b=["pushEvents"], c=["tools"], d=["tools"])
    policy = FeatureSetPolicy(enabled=("a", "b", "d"), disabled=("*",))
    reasons = {k: v.reason for k, v in derive(decl, grant_of("tools"), policy).disabled.items()}
    assert reasons == {
        "a": "invalid_uses",
        "b": "capability_denied",
        "c": "not_selected",
        "d": "disabled_by_policy",
    }


@given(
    granted=st.sets(st.sampled_from(sorted(VOCABULARY))),
    uses=st.lists(st.sampled_from(sorted(VOCABULARY) + ["bogus", "channels.*"]), max_size=4),
)
def test_enabled_sets_are_fully_granted(granted: set[str], uses: list[str]) -> None:
    decl = read_feature_sets({"featureSets": {"x": {"description": "", "uses": uses}}})
    derivation = derive(decl, grant_of(*granted), NO_POLICY)
    assert ("x" in derivation.enabled) == (bool(uses) and set(uses) <= granted)
    assert ("x" in derivation.enabled) != ("x" in derivation.disabled)


# --- featureSets/update params ---------------------------------------------------------------


def test_policy_params_full_shape() -> None:
    decl = declare(clock=["pushEvents"], ask=["inferenceRequest"])
    grant = grant_of("pushEvents", "tools", advertised=("inferenceRequest",))
    params = derive(decl, grant, NO_POLICY).policy_params(grant)
    assert params == {
        "effectiveCapabilities": ["pushEvents", "tools"],
        "deniedCapabilities": ["inferenceRequest"],
        "enabled": ["clock"],
        "disabled": ["ask"],
    }


def test_policy_params_minimal_shape_always_has_lists() -> None:
    params = derive(FeatureSetDeclarations(), grant_of(), NO_POLICY).policy_params(grant_of())
    assert params == {"effectiveCapabilities": [], "enabled": [], "disabled": []}


@given(
    granted=st.sets(st.sampled_from(sorted(VOCABULARY))),
    advertised=st.sets(st.sampled_from(sorted(VOCABULARY))),
)
def test_effective_and_denied_never_overlap(granted: set[str], advertised: set[str]) -> None:
    grant = grant_of(*granted, advertised=tuple(advertised))
    params = Derivation().policy_params(grant)
    assert not set(params["effectiveCapabilities"]) & set(params.get("deniedCapabilities", []))
    assert params["effectiveCapabilities"] == sorted(granted)


# --- admission by feature set (docs/protocol.md, "Admission order", step 2) --------------------


def setup(grant: Grant, policy: FeatureSetPolicy = NO_POLICY) -> tuple[FeatureSetDeclarations, Derivation]:
    decl = declare(
        clock=["pushEvents"],
        ask=["inferenceRequest"],
        stream=["inferenceRequest", "inferenceRequest.streaming"],
        tool=["tools"],
    )
    return decl, derive(decl, grant, policy)


PUSH_GRANT = grant_of("pushEvents", "inferenceRequest", "inferenceRequest.streaming", "tools")
MESSAGES = [{"role": "user", "content": "hi"}]


def admit_fs(
    method: str, params: Any, decl: FeatureSetDeclarations, derivation: Derivation, grant: Grant | None
) -> Refused | None:
    """The one admission pipeline, with this grant, derivation and declarations in force."""
    view = PolicyState(grant=grant, derivation=derivation if grant is not None else None, feature_sets=decl)
    decision = admit(method, params, view)
    return decision if isinstance(decision, Refused) else None


def push(feature_set: Any = "clock", **extra: Any) -> dict[str, Any]:
    params = {"eventId": "e1", "timestamp": "2025-01-01T00:00:00Z", "payload": {"content": []}, **extra}
    if feature_set is not ...:
        params["featureSet"] = feature_set
    return params


def test_e_admitted_when_enabled_and_declared() -> None:
    decl, derivation = setup(PUSH_GRANT)
    assert admit_fs("push/event", push(), decl, derivation, PUSH_GRANT) is None


@pytest.mark.parametrize("value", [..., None, 3, "", ["clock"]])
def test_missing_or_non_string_feature_set_is_invalid_params(value: Any) -> None:
    decl, derivation = setup(PUSH_GRANT)
    outcome = admit_fs("push/event", push(value), decl, derivation, PUSH_GRANT)
    assert outcome.error is not None and outcome.error.code == ErrorCode.INVALID_PARAMS


def test_params_not_an_object_is_invalid_params() -> None:
    decl, derivation = setup(PUSH_GRANT)
    outcome = admit_fs("push/event", ["clock"], decl, derivation, PUSH_GRANT)
    assert outcome.error is not None and outcome.error.code == -32602


def test_undeclared_feature_set_is_unknown() -> None:
    decl, derivation = setup(PUSH_GRANT)
    outcome = admit_fs("push/event", push("nope"), decl, derivation, PUSH_GRANT)
    assert outcome.error is not None
    assert outcome.error.to_error() == {
        "code": -32003,
        "message": "Unknown feature set",
        "data": {"featureSet": "nope"},
    }


def test_disabled_feature_set_is_not_enabled_without_can_enable() -> None:
    decl, derivation = setup(PUSH_GRANT, FeatureSetPolicy(disabled=("clock",)))
    outcome = admit_fs("push/event", push(), decl, derivation, PUSH_GRANT)
    assert outcome.error is not None
    assert outcome.error.to_error() == {
        "code": -32001,
        "message": "Feature set not enabled",
        "data": {"featureSet": "clock"},
    }
    assert outcome.diagnostic is None


def test_declared_but_missing_from_a_stale_derivation_fails_closed() -> None:
    decl, _ = setup(PUSH_GRANT)
    outcome = admit_fs("push/event", push(), decl, Derivation(), PUSH_GRANT)
    assert outcome.error is not None and outcome.error.code == ErrorCode.FEATURE_SET_NOT_ENABLED


@pytest.mark.parametrize(
    ("method", "params", "capability"),
    [
        ("push/event", push("tool"), "pushEvents"),
        ("push/event", push("ask"), "pushEvents"),
        ("inference/request", {"featureSet": "clock", "messages": MESSAGES}, "inferenceRequest"),
        (
            "inference/request",
            {"featureSet": "ask", "stream": True, "messages": MESSAGES},
            "inferenceRequest.streaming",
        ),
    ],
)
def test_uses_lacks_exercised_capability_is_mismatch(
    method: str, params: dict[str, Any], capability: str
) -> None:
    decl, derivation = setup(PUSH_GRANT)
    outcome = admit_fs(method, params, decl, derivation, PUSH_GRANT)
    assert outcome.error is not None
    assert outcome.error.to_error() == {
        "code": -32002,
        "message": "Capability denied",
        "data": {"capability": capability, "featureSet": params["featureSet"]},
    }
    assert outcome.diagnostic == DeclarationMismatch(
        method=method, feature_set=params["featureSet"], capability=capability
    )


def test_streaming_set_admits_streamed_and_plain_requests() -> None:
    decl, derivation = setup(PUSH_GRANT)
    for stream in (True, False):
        params = {"featureSet": "stream", "stream": stream, "messages": MESSAGES}
        assert admit_fs("inference/request", params, decl, derivation, PUSH_GRANT) is None


@pytest.mark.parametrize(
    ("grant", "capability"),
    [
        (None, "pushEvents"),  # pre-policy window
        (grant_of("tools"), "pushEvents"),
    ],
)
def test_capability_gate_is_rechecked_first(grant: Grant | None, capability: str) -> None:
    decl, derivation = setup(PUSH_GRANT)
    outcome = admit_fs("push/event", push("nope"), decl, derivation, grant)
    assert outcome.error is not None
    assert outcome.error.to_error()["data"] == {"capability": capability}


def test_e_methods_without_feature_sets_pass_through() -> None:
    decl, derivation = setup(PUSH_GRANT)
    grant = grant_of("channels.register")
    assert admit_fs("channels/register", {"channels": []}, decl, derivation, grant) is None


# --- receipt helper ----------------------------------------------------------------------------


def test_unavailable_feature_names_reads_the_receipt() -> None:
    outcome = read_receipt(
        {
            "accepted": True,
            "mode": "degraded",
            "unavailableFeatures": [
                {"featureSet": "ask", "missingCapabilities": ["inferenceRequest"], "effect": "disabled"},
                {"featureSet": "ask", "effect": "disabled"},
                {"featureSet": 3},
                "junk",
                {},
            ],
        }
    )
    assert unavailable_feature_names(outcome) == ("ask",)

"""Capability grant: advertisement walk, matcher, effective grant (MCPL §5.1, §5.4;
docs/protocol.md, "Capability advertisement")."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpl_host.jsonrpc.errors import ErrorCode
from mcpl_host.mcpl.admission import Admitted, admit, required_capabilities
from mcpl_host.mcpl.grants import VOCABULARY, GrantPolicy, expand_advertisement, matches
from mcpl_host.mcpl.policy_state import PolicyState

INJECT = {
    "contextHooks.beforeInference.inject.system",
    "contextHooks.beforeInference.inject.beforeUser",
    "contextHooks.beforeInference.inject.afterUser",
}
ALL = expand_advertisement(
    {
        "pushEvents": True,
        "modelInfo": True,
        "inferenceRequest": True,
        "inferenceLifecycle": True,
        "contextHooks": True,
        "channels": True,
        "toolLifecycle": True,
    },
    tools=True,
)


def test_vocabulary_has_20_paths() -> None:
    assert len(VOCABULARY) == 20  # with RFC-007's two and RFC-009's channels.incoming.streaming
    # ``channels: true`` is no advertisement of input streaming (RFC-009 §2.1, IS1)
    assert ALL == VOCABULARY - {"channels.incoming.streaming"}


def test_true_means_every_leaf_beneath() -> None:
    assert expand_advertisement({"contextHooks": {"beforeInference": True}}) == {
        "contextHooks.beforeInference.observe",
        *INJECT,
    }


def test_walk_is_generic_and_reaches_depth_four() -> None:
    adv = {"contextHooks": {"beforeInference": {"inject": {"afterUser": True}, "observe": False}}}
    assert expand_advertisement(adv) == {"contextHooks.beforeInference.inject.afterUser"}


def test_object_at_a_path_node_advertises_the_node_too() -> None:
    assert expand_advertisement({"inferenceRequest": {"streaming": True}}) == {
        "inferenceRequest",
        "inferenceRequest.streaming",
    }


def test_false_absent_and_unknown_members_mint_nothing() -> None:
    adv = {
        "version": "0.5",
        "pushEvents": False,
        "vendorX": True,
        "channels": {"bogus": True},
        "featureSets": {"a": {"uses": ["pushEvents"]}},
    }
    assert expand_advertisement(adv) == frozenset()


def test_tools_comes_from_the_outer_mcp_capability() -> None:
    assert expand_advertisement({}, tools=True) == {"tools"}
    assert expand_advertisement({"tools": True}) == {"tools"}


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("channels.*", "channels.publish", True),
        ("channels.*", "channels.publish.x", False),  # MCPL §5.4: same segment count
        ("contextHooks.*", "contextHooks.beforeInference.inject.system", False),  # MCPL §5.4
        ("contextHooks.beforeInference.inject.*", "contextHooks.beforeInference.inject.system", True),
        ("*", "pushEvents", True),  # MCPL §5.4: bare * matches depth-1 paths only
        ("*", "channels.publish", False),
        ("channels", "channels.publish", False),  # MCPL §5.4: bare parent grants no leaf
        ("pushEvents", "pushEvents", True),
    ],
)
def test_matcher_spec_examples(pattern: str, path: str, expected: bool) -> None:
    assert matches(pattern, path) is expected


def test_contexthooks_star_grants_no_inject_leaf() -> None:
    grant = GrantPolicy(grant=("contextHooks.*",)).compute(ALL)
    assert grant.paths == frozenset()


def test_bare_star_grants_only_depth_one_paths() -> None:
    grant = GrantPolicy(grant=("*",)).compute(ALL)
    assert grant.paths == {"pushEvents", "tools", "modelInfo", "inferenceRequest", "inferenceLifecycle"}


def test_bare_parent_grants_nothing() -> None:
    assert GrantPolicy(grant=("channels",)).compute(ALL).paths == frozenset()


def test_channels_star_grants_every_channel_leaf() -> None:
    grant = GrantPolicy(grant=("channels.*",)).compute(ALL)
    # one segment: not the depth-three channels.incoming.streaming (RFC-009 §2.2)
    assert grant.paths == {p for p in VOCABULARY if p.startswith("channels.") and p.count(".") == 1}


def test_never_advertised_is_never_granted() -> None:
    grant = GrantPolicy(grant=("*", "channels.*")).compute({"pushEvents"})
    assert grant.paths == {"pushEvents"}


def test_default_policy_grants_nothing_and_deny_wins() -> None:
    assert GrantPolicy().compute(ALL).paths == frozenset()
    grant = GrantPolicy(grant_all_advertised=True, deny=("pushEvents", "channels.*")).compute(ALL)
    assert "pushEvents" not in grant.paths
    assert not any(p.startswith("channels.") for p in grant.paths)
    assert "modelInfo" in grant.paths


def test_policy_params_always_carry_effective_and_never_overlap() -> None:
    assert GrantPolicy().compute(frozenset()).policy_params() == {"effectiveCapabilities": []}
    params = GrantPolicy(grant=("*",)).compute(ALL).policy_params()
    assert not set(params["effectiveCapabilities"]) & set(params["deniedCapabilities"])


@given(
    st.sets(st.sampled_from(sorted(VOCABULARY))),
    st.lists(
        st.sampled_from(
            ["*", "*.*", "channels.*", "channels", "contextHooks.*", "pushEvents", "a.b.c.*", "*.*.*.*"]
        ),
        max_size=4,
    ),
)
def test_property_grant_is_within_advertisement_and_policy(advertised: set[str], patterns: list[str]) -> None:
    grant = GrantPolicy(grant=tuple(patterns)).compute(advertised)
    assert grant.paths <= advertised
    assert all(any(matches(p, path) for p in patterns) for path in grant.paths)
    assert not grant.paths & grant.denied


def test_d3_admission_refuses_with_32002_and_the_capability() -> None:
    denial = admit("push/event", {}, PolicyState())  # before the receipt: nothing in force
    assert denial is not None
    assert denial.error.code == ErrorCode.CAPABILITY_DENIED
    assert denial.error.data == {"capability": "pushEvents"}
    grant = GrantPolicy(grant=("inferenceRequest",)).compute(ALL)
    assert required_capabilities("inference/request", {"stream": False}) == ("inferenceRequest",)
    streaming = admit("inference/request", {"stream": True}, PolicyState(grant=grant))
    assert streaming is not None and streaming.error.data == {"capability": "inferenceRequest.streaming"}
    assert isinstance(admit("tools/list", {}, PolicyState()), Admitted)  # not gated here

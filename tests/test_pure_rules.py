"""MCPL rules that are rules of a pure function (MCPL §5.3, §5.4, §6.5)."""

from __future__ import annotations

import sys

import pytest

from mcpl_host import GrantPolicy, ServerConfig, connect
from mcpl_host.mcpl.admission import admit
from mcpl_host.mcpl.grants import Grant
from mcpl_host.mcpl.injections import read_injections
from mcpl_host.mcpl.policy_state import PolicyState

INJECT_BEFORE = "contextHooks.beforeInference.inject.beforeUser"


@pytest.mark.anyio
async def test_no_hook_traffic_before_the_receipt() -> None:
    conn = connect(
        ServerConfig(
            command=sys.executable, args=("-c", "pass"), grant_policy=GrantPolicy(grant_all_advertised=True)
        )
    )
    assert conn.grant is None  # nothing in force until a receipt
    assert not conn.hooks.eligible


def test_denied_capabilities_never_feed_authorization() -> None:
    grant = Grant(paths=frozenset({"pushEvents"}), advertised=frozenset({"pushEvents", "modelInfo"}))
    assert grant.policy_params()["deniedCapabilities"] == ["modelInfo"]
    push = {
        "featureSet": "f",
        "eventId": "e",
        "timestamp": "2026-01-01T00:00:00Z",
        "payload": {"content": []},
    }
    assert admit("model/info", {}, PolicyState(grant=grant)) is not None  # denied stays denied
    refused = admit("push/event", push, PolicyState(grant=grant))
    assert refused is not None and refused.error.code != -32002  # past the gate: the feature set


def test_featureset_and_namespace_in_a_response_never_authorize() -> None:
    grant = Grant(paths=frozenset({INJECT_BEFORE}))
    answer = {
        "featureSet": "all-powerful",
        "contextInjections": [
            {"namespace": "system", "position": "system", "content": "x"},
            {"namespace": "granted-looking", "position": "beforeUser", "content": "y"},
        ],
    }
    reading = read_injections(answer, grant)
    assert [i.position for i in reading.injections] == ["beforeUser"]
    assert len(reading.dropped) == 1


def test_host_advertises_what_it_implements_in_the_server_shape() -> None:
    from mcpl_host.handshake import HOST_MCPL_ADVERTISEMENT
    from mcpl_host.mcpl.grants import expand_advertisement

    advertised = expand_advertisement(HOST_MCPL_ADVERTISEMENT)
    assert HOST_MCPL_ADVERTISEMENT["version"] == "0.5"
    assert "inferenceRequest.streaming" in advertised and "channels.register" in advertised
    assert "channels.acknowledge" not in advertised and "channels.typing" not in advertised

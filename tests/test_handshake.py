"""The handshake at the wire level (MCP 2025-11-25, "Lifecycle"; MCPL §5.2-§5.3,
§6.7; docs/protocol.md H1-H6, D4)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mcpl_host import GrantPolicy, InitializeError, MCPLState
from mcpl_host.handshake import LATEST_PROTOCOL_VERSION

from .wire import MCP_HANDSHAKE, MCPL_HANDSHAKE, MCPL_RESULT, Script

pytestmark = pytest.mark.anyio


async def test_h1_h6_initialize_first_then_initialized_strictly_next(tmp_path: Path) -> None:
    # The server pings right after its answer: initialized must still be the next message.
    script = Script(
        tmp_path,
        [
            {"expect": {"method": "initialize"}},
            {"reply": MCPL_RESULT},
            {"send": {"jsonrpc": "2.0", "id": 1, "method": "ping"}},
            {"expect": {"method": "notifications/initialized"}},
            {"wait_for": {"method": "featureSets/update"}},  # may come before the ping answer
            {"reply": {"accepted": True}},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect(grant_policy=GrantPolicy(grant=("pushEvents",))) as conn:
            assert conn.mcpl_state is MCPLState.READY
            assert conn.grant is not None and conn.grant.allows("pushEvents")
    # A grant of MCPL paths says MCPL, which runs on the handshake era: no era probe
    # (docs/protocol.md S3b), initialize is first and takes id 1.
    assert script.messages(probe=True)[0]["method"] == "initialize"
    messages = script.messages()
    initialize = messages[0]
    assert initialize["id"] == 1 and initialize["method"] == "initialize"
    assert initialize["params"]["protocolVersion"] == LATEST_PROTOCOL_VERSION
    assert initialize["params"]["clientInfo"]["name"] == "mcpl-host"
    assert initialize["params"]["capabilities"]["experimental"]["mcpl"]["version"] == "0.5"
    # MCPL §5.2: the initial feature configuration is not in initialize.
    assert "effectiveCapabilities" not in str(initialize["params"])
    assert messages[1] == {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert {"jsonrpc": "2.0", "id": 1, "result": {}} in messages[2:]
    (policy,) = [m for m in messages if m.get("method") == "featureSets/update"]
    assert "id" in policy
    assert policy["params"]["effectiveCapabilities"] == ["pushEvents"]


async def test_policy_request_sent_even_when_nothing_is_granted(tmp_path: Path) -> None:
    script = Script(tmp_path, MCPL_HANDSHAKE)
    with anyio.fail_after(20):
        async with script.connect() as conn:  # library default: grants nothing
            assert conn.mcpl_state is MCPLState.READY
            assert conn.grant is not None and not conn.grant.paths
    policy = script.messages()[2]
    assert policy["method"] == "featureSets/update"
    assert policy["params"]["effectiveCapabilities"] == []
    assert "pushEvents" in policy["params"]["deniedCapabilities"]


async def test_plain_mcp_server_gets_no_policy_request(tmp_path: Path) -> None:
    script = Script(tmp_path, MCP_HANDSHAKE)
    with anyio.fail_after(20):
        async with script.connect() as conn:
            assert conn.mcpl_state is MCPLState.NONE
            assert conn.server_info is not None and conn.server_info.name == "scripted"
    assert [m.get("method") for m in script.messages()] == ["initialize", "notifications/initialized"]


async def test_h2_idless_error_fails_initialize_at_once(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            {"expect": {"method": "initialize"}},
            {
                "reply_error": {
                    "code": -32602,
                    "message": "Unsupported protocol version",
                    "data": {"supported": ["1999-01-01"]},
                },
                "no_id": True,
            },
            {"hang": True},
        ],
    )
    with anyio.fail_after(8):  # far below the 10 s handshake timeout of FAST
        with pytest.raises(InitializeError) as caught:
            async with script.connect():
                pass
    assert caught.value.code == -32602
    assert caught.value.data == {"supported": ["1999-01-01"]}
    assert "Unsupported protocol version" in str(caught.value)


async def test_h2_null_id_error_fails_initialize_at_once(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            {"expect": {"method": "initialize"}},
            {"reply_error": {"code": -32700, "message": "Parse error"}, "id": None},
            {"hang": True},
        ],
    )
    with anyio.fail_after(8), pytest.raises(InitializeError) as caught:
        async with script.connect():
            pass
    assert caught.value.code == -32700


async def test_h3_ping_answered_with_null_id_other_requests_and_invalid_ignored(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            {"expect": {"method": "initialize"}},
            {"send": {"jsonrpc": "2.0", "id": None, "method": "ping"}},
            {"wait_response": None},
            {"send": {"jsonrpc": "2.0", "id": 7, "method": "roots/list"}},
            {"send": {"jsonrpc": "2.0", "id": 8, "method": 42}},
            {"send": {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}},
            {"reply": MCP_HANDSHAKE[1]["reply"]},
            {"expect": {"method": "notifications/initialized"}},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect():
            pass
    messages = script.messages()
    assert messages[1] == {"jsonrpc": "2.0", "id": None, "result": {}}
    assert messages[2] == {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert len(messages) == 3  # roots/list and the invalid request got nothing


async def test_h5_exit_before_answer_fails_at_once_with_status_and_stderr(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            {"expect": {"method": "initialize"}},
            {"stderr": "fatal: config missing"},
            {"exit": 3},
        ],
    )
    with anyio.fail_after(8), pytest.raises(InitializeError) as caught:
        async with script.connect():
            pass
    assert caught.value.exit_status == 3
    assert any("fatal: config missing" in line for line in caught.value.stderr_tail)


async def test_d4_unsupported_version_fails_naming_it_and_sends_no_initialized(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            {"expect": {"method": "initialize"}},
            {"reply": {"protocolVersion": "1999-12-31", "capabilities": {}, "serverInfo": {"name": "old"}}},
        ],
    )
    with anyio.fail_after(20), pytest.raises(InitializeError, match="1999-12-31"):
        async with script.connect():
            pass
    assert [m.get("method") for m in script.messages()] == ["initialize"]


async def test_d4_no_version_in_answer_fails(tmp_path: Path) -> None:
    script = Script(tmp_path, [{"expect": {"method": "initialize"}}, {"reply": {"capabilities": {}}}])
    with anyio.fail_after(20), pytest.raises(InitializeError, match="no protocolVersion"):
        async with script.connect():
            pass


async def test_handshake_timeout_fails_without_cancelling_initialize(tmp_path: Path) -> None:
    from .wire import FAST

    script = Script(tmp_path, [{"expect": {"method": "initialize"}}, {"hang": True}])
    limits = FAST.__class__(
        handshake_timeout_seconds=0.5, close_grace_seconds=0.5, terminate_grace_seconds=0.5
    )
    with anyio.fail_after(10), pytest.raises(InitializeError, match="did not answer initialize"):
        async with script.connect(limits=limits):
            pass
    assert [m.get("method") for m in script.messages()] == ["initialize"]  # no cancelled


async def test_policy_error_leaves_the_connection_mcp_only(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCPL_HANDSHAKE[:4],
            {"reply_error": {"code": -32601, "message": "Method not found"}},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect(grant_policy=GrantPolicy(grant_all_advertised=True)) as conn:
            assert conn.mcpl_state is MCPLState.MCP_ONLY
            assert conn.grant is None


async def test_refused_receipt_leaves_the_connection_mcp_only(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCPL_HANDSHAKE[:4],
            {"reply": {"accepted": False, "fallback": "mcp-only", "reason": "no"}},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect(grant_policy=GrantPolicy(grant_all_advertised=True)) as conn:
            assert conn.mcpl_state is MCPLState.MCP_ONLY
            assert conn.policy.state.outcome is not None and conn.policy.state.outcome.fallback == "mcp-only"
            assert conn.grant is None


def test_server_info_is_stateless_follows_its_era_and_stays_out_of_repr_and_equality() -> None:
    # ``is_stateless`` is read before every request, so it is kept rather than computed
    # per read: it must still be the era's, after ``dataclasses.replace`` too.
    import dataclasses

    from mcpl_host.handshake import ServerInfo

    handshake = ServerInfo("s", "1", LATEST_PROTOCOL_VERSION)
    stateless = ServerInfo("s", "1", "2026-07-28", era="stateless")
    assert not handshake.is_stateless
    assert stateless.is_stateless
    assert dataclasses.replace(handshake, era="stateless").is_stateless
    assert not dataclasses.replace(stateless, era="handshake").is_stateless
    assert "is_stateless" not in repr(stateless)
    assert dataclasses.replace(handshake, era="stateless") == ServerInfo(
        "s", "1", LATEST_PROTOCOL_VERSION, era="stateless"
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        handshake.is_stateless = True  # type: ignore[misc]

"""Grant changes and receipts at the wire level (MCPL §6.7; docs/protocol.md,
"Policy requests", "Policy receipts")."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from structlog.testing import capture_logs

from mcpl_host import GrantPolicy, MCPLState

from .wire import MCPL_HANDSHAKE, MCPL_RESULT, Script, mark, push_event

pytestmark = pytest.mark.anyio
BOTH = GrantPolicy(grant=("pushEvents", "tools"))


async def test_reduction_takes_effect_before_its_request_is_answered(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCPL_HANDSHAKE,
            {"expect": {"method": "featureSets/update"}},  # the reduction, not answered yet
            {"send": push_event(60)},
            {"wait_response": 60, "expect_error_code": -32002},
            {"reply": {"accepted": True}},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect(grant_policy=BOTH) as conn:
            assert conn.grant is not None and conn.grant.allows("pushEvents")
            change = await conn.policy.update(GrantPolicy(grant=("tools",)))
            assert change.outcome is not None and change.outcome.accepted
            assert not conn.grant.allows("pushEvents")
            await script.finished(conn)
    updates = [m for m in script.messages() if m.get("method") == "featureSets/update"]
    assert len(updates) == 2 and "id" in updates[1]  # MCPL §6.7: a request, never a notification
    assert "pushEvents" not in updates[1]["params"]["effectiveCapabilities"]


async def test_expansion_takes_effect_only_when_its_receipt_arrives(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCPL_HANDSHAKE,
            {"expect": {"method": "featureSets/update"}},  # the expansion, not answered yet
            {"send": push_event(61)},
            {"wait_response": 61, "expect_error_code": -32002},
            {"reply": {"accepted": True}},
            {"send": push_event(62, "e2")},
            {"wait_response": 62, "expect_result": {"accepted": True}},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect(grant_policy=GrantPolicy(grant=("tools",))) as conn:
            await conn.policy.update(BOTH)
            assert conn.grant is not None and conn.grant.allows("pushEvents")
            await script.finished(conn)


async def test_unanswered_expansion_never_activates(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCPL_HANDSHAKE,
            {"expect": {"method": "featureSets/update"}},
            {"reply_error": {"code": -32603, "message": "no"}},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect(grant_policy=GrantPolicy(grant=("tools",))) as conn:
            change = await conn.policy.update(BOTH)
            assert change.error is not None
            assert conn.grant is not None and not conn.grant.allows("pushEvents")


async def test_receipt_never_widens_the_grant(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCPL_HANDSHAKE[:4],
            {
                "reply": {
                    "accepted": True,
                    "effectiveCapabilities": ["pushEvents", "tools", "modelInfo"],
                    "unavailableFeatures": [],
                    "notes": ["please grant more"],
                }
            },
        ],
    )
    with anyio.fail_after(20):
        async with script.connect(grant_policy=GrantPolicy(grant=("tools",))) as conn:
            assert conn.grant is not None and conn.grant.paths == {"tools"}


async def test_mcp_only_fallback_keeps_tools(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCPL_HANDSHAKE[:4],
            {"reply": {"accepted": False, "fallback": "mcp-only", "reason": "policy too narrow"}},
            {"expect": {"method": "tools/list"}},
            {"reply": {"tools": [{"name": "still-here", "inputSchema": {}}]}},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect(grant_policy=BOTH) as conn:
            assert conn.mcpl_state is MCPLState.MCP_ONLY
            assert [t.name for t in await conn.mcp.list_tools()] == ["still-here"]


async def test_close_fallback_closes_unless_configured_otherwise(tmp_path: Path) -> None:
    from mcpl_host import InitializeError

    steps = [*MCPL_HANDSHAKE[:4], {"reply": {"accepted": False, "fallback": "close"}}]
    with anyio.fail_after(20), pytest.raises(InitializeError, match="asked to be closed"):
        async with Script(tmp_path, steps, name="follow").connect(grant_policy=BOTH):
            pass
    with anyio.fail_after(20):
        async with Script(tmp_path, steps, name="stay").connect(
            grant_policy=BOTH, on_refusal="mcp-only"
        ) as conn:
            assert conn.mcpl_state is MCPLState.MCP_ONLY


async def test_refusal_without_fallback_is_logged_as_a_defect(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCPL_HANDSHAKE[:4],
            {
                "reply": {
                    "accepted": True,
                    "mode": "degraded",
                    "unavailableFeatures": [{"featureSet": "demo", "missingCapabilities": ["pushEvents"]}],
                }
            },
        ],
    )
    with capture_logs() as logs, anyio.fail_after(20):
        async with script.connect(grant_policy=BOTH):
            pass
    assert any(e["event"] == "policy receipt defect" and "effect" in e["defect"] for e in logs)
    script = Script(tmp_path, [*MCPL_HANDSHAKE[:4], {"reply": {"accepted": False}}], name="nofallback")
    with capture_logs() as logs, anyio.fail_after(20):
        async with script.connect(grant_policy=BOTH, on_refusal="mcp-only"):
            pass
    assert any(e["event"] == "policy receipt defect" and "fallback" in e["defect"] for e in logs)


async def test_a_featuresets_update_notification_never_makes_the_connection_ready(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCPL_HANDSHAKE[:4],  # our request is pending
            {"send": {"jsonrpc": "2.0", "method": "featureSets/update", "params": {"accepted": True}}},
            {"send": push_event(63)},
            {"wait_response": 63, "expect_error_code": -32002},
            mark("refused while pending"),
            {"reply": {"accepted": True}},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect(grant_policy=BOTH) as conn:
            assert conn.mcpl_state is MCPLState.READY  # from the receipt, not the notification
            await script.finished(conn)


async def test_featuresets_changed_ignored_as_notification_and_32601_as_request(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCPL_HANDSHAKE,
            {"send": {"jsonrpc": "2.0", "method": "featureSets/changed", "params": {}}},
            {"send": {"jsonrpc": "2.0", "id": "fc", "method": "featureSets/changed", "params": {}}},
            {"wait_response": "fc", "expect_error_code": -32601},
        ],
    )
    with capture_logs() as logs, anyio.fail_after(20):
        async with script.connect(grant_policy=BOTH) as conn:
            await script.finished(conn)
    assert any("featureSets/changed" in e["event"] for e in logs)
    assert MCPL_RESULT  # the manifest used by every test here


async def test_refusal_of_a_runtime_change_turns_mcpl_off(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCPL_HANDSHAKE,
            {"expect": {"method": "featureSets/update"}},
            {"reply": {"accepted": False, "fallback": "mcp-only"}},
            {"send": push_event(64)},
            {"wait_response": 64, "expect_error_code": -32002},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect(grant_policy=BOTH) as conn:
            await conn.policy.update(GrantPolicy(grant=("pushEvents",)))
            assert conn.mcpl_state is MCPLState.MCP_ONLY and conn.grant is None
            await script.finished(conn)

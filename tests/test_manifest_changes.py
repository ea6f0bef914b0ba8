"""Manifest changes on a live connection (MCPL §17; docs/protocol.md, "Manifest
changes")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from mcpl_host import GrantPolicy
from mcpl_host.mcpl.manifest import manifest_digest

from .wire import Script, TestHandlers, mcpl_handshake, push_event

pytestmark = pytest.mark.anyio

OLD = {
    "version": "0.5",
    "pushEvents": True,
    "channels": {"register": True},
    "featureSets": {"demo": {"description": "d", "uses": ["pushEvents"]}},
}
NEW = {
    "version": "0.5",
    "channels": {"register": True, "publish": True},
    "featureSets": {"other": {"description": "o", "uses": ["channels.register"]}},
}


def result(manifest: dict[str, Any]) -> dict[str, Any]:
    return {
        "protocolVersion": "2025-06-18",
        "serverInfo": {"name": "s", "version": "0"},
        "capabilities": {"experimental": {"mcpl": manifest}},
    }


def changed(manifest: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "mcpl/manifestChanged",
        "params": {"revision": manifest_digest(manifest), "domains": ["capabilities", "featureSets"]},
    }


def handshake(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    return mcpl_handshake(result(manifest))


class Receipts(TestHandlers):
    def __init__(self) -> None:
        super().__init__()
        self.receipts: list[Any] = []
        self.changed = anyio.Event()

    def on_manifest_change(self, server: str, receipt: Any) -> None:
        self.receipts.append(receipt)
        self.changed.set()


async def test_change_fetches_first_then_revokes_removals_never_grants_additions(
    tmp_path: Path,
) -> None:
    script = Script(
        tmp_path,
        [
            *handshake(OLD),
            {"send": changed(NEW)},
            {"expect": {"method": "mcpl/manifest"}},
            {"reply": NEW},
            {"expect": {"method": "featureSets/update"}},
            {"reply": {"accepted": True}},
            {"send": push_event(50)},
            {"wait_response": 50, "expect_error_code": -32002},
        ],
    )
    handlers = Receipts()
    with anyio.fail_after(20):
        async with script.connect(
            handlers=handlers, grant_policy=GrantPolicy(grant_all_advertised=True)
        ) as conn:
            await handlers.changed.wait()
            assert conn.grant is not None
            assert conn.grant.paths == {"channels.register"}  # pushEvents revoked, publish not granted
            assert conn.policy.state.manifest == NEW
            await script.finished(conn)
    messages = script.messages()
    methods = [m.get("method") for m in messages]
    # MCPL §17.3: the notification is never answered, and the fetch comes before any change.
    assert methods.index("mcpl/manifest") < len(methods) - 1 - methods[::-1].index("featureSets/update")
    update = [m for m in messages if m.get("method") == "featureSets/update"][-1]
    assert update["params"]["effectiveCapabilities"] == ["channels.register"]
    (receipt,) = handlers.receipts
    impacts = {(i.impact, i.detail) for i in receipt.impacts}
    assert ("capability-revoked", "pushEvents") in impacts
    assert ("capability-expansion-pending", "channels.publish") in impacts
    assert all(
        i.disposition == "decision-needed"
        for i in receipt.impacts
        if i.impact == "capability-expansion-pending"
    )


async def test_fetches_are_rate_limited_and_excess_notifications_dropped(tmp_path: Path) -> None:
    rounds = [
        step
        for n in range(5)
        for step in (
            {"send": changed({"version": "0.5", "pushEvents": True, "n": n})},
            {"expect": {"method": "mcpl/manifest"}},
            {"reply": OLD},
        )
    ]
    excess = [{"send": changed({"version": "0.5", "n": 100 + n})} for n in range(3)]
    script = Script(tmp_path, [*handshake(OLD), *rounds, *excess])
    handlers = Receipts()
    with capture_logs() as logs, anyio.fail_after(20):
        async with script.connect(
            handlers=handlers, grant_policy=GrantPolicy(grant_all_advertised=True)
        ) as conn:
            await script.finished(conn)
    fetched = [m for m in script.messages() if m.get("method") == "mcpl/manifest"]
    assert len(fetched) == 5  # the default bound: 5 fetches a minute
    assert any("over the fetch limit" in e["event"] for e in logs)


async def test_changes_during_a_fetch_are_merged_into_one_more_fetch(tmp_path: Path) -> None:
    # One fetch in flight, one pending (mcpl_host.coalesce): 50 changes announced while the
    # first fetch waits for its answer cost one fetch more, not 50 (nor the limiter's 5).
    burst = [{"send": changed({"version": "0.5", "n": 200 + n})} for n in range(50)]
    steps = [
        *handshake(OLD),
        {"send": changed({"version": "0.5", "n": 1})},
        {"expect": {"method": "mcpl/manifest"}},
        *burst,
        {"reply": OLD},
        {"expect": {"method": "mcpl/manifest"}},
        {"reply": OLD},
    ]
    script = Script(tmp_path, steps)
    with anyio.fail_after(20):
        async with script.connect(grant_policy=GrantPolicy(grant_all_advertised=True)) as conn:
            await script.finished(conn)
    fetched = [m for m in script.messages() if m.get("method") == "mcpl/manifest"]
    assert len(fetched) == 2


async def test_unparseable_fetch_keeps_the_manifest_and_mcpl(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *handshake(OLD),
            {"send": changed(NEW)},
            {"expect": {"method": "mcpl/manifest"}},
            {"reply": "not a manifest"},
            {"send": push_event(51)},
            {"wait_response": 51, "expect_result": {"accepted": True}},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect(grant_policy=GrantPolicy(grant_all_advertised=True)) as conn:
            await script.finished(conn)
            assert (
                conn.policy.state.manifest == OLD
                and conn.grant is not None
                and conn.grant.allows("pushEvents")
            )


async def test_error_on_fetch_warns_and_keeps_the_manifest(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *handshake(OLD),
            {"send": changed(NEW)},
            {"expect": {"method": "mcpl/manifest"}},
            {"reply_error": {"code": -32601, "message": "Method not found"}},
        ],
    )
    with capture_logs() as logs, anyio.fail_after(20):
        async with script.connect(grant_policy=GrantPolicy(grant_all_advertised=True)) as conn:
            await script.finished(conn)
            assert conn.policy.state.manifest == OLD
    assert any("refused mcpl/manifest" in e["event"] for e in logs)


async def test_revision_mismatch_is_a_logged_defect_and_the_manifest_is_used(tmp_path: Path) -> None:
    wrong = {**NEW, "revision": "sha256:" + "A" * 43}
    script = Script(
        tmp_path,
        [
            *handshake(OLD),
            {"send": changed(NEW)},
            {"expect": {"method": "mcpl/manifest"}},
            {"reply": wrong},
            {"expect": {"method": "featureSets/update"}},
            {"reply": {"accepted": True}},
        ],
    )
    handlers = Receipts()
    with capture_logs() as logs, anyio.fail_after(20):
        async with script.connect(
            handlers=handlers, grant_policy=GrantPolicy(grant_all_advertised=True)
        ) as conn:
            await handlers.changed.wait()
            assert conn.policy.state.manifest == wrong
    assert any("does not match its digest" in e["event"] for e in logs)


async def test_same_revision_as_in_force_is_not_fetched(tmp_path: Path) -> None:
    manifest = {**OLD, "revision": manifest_digest(OLD)}
    script = Script(tmp_path, [*handshake(manifest), {"send": changed(OLD)}])
    with anyio.fail_after(20):
        async with script.connect(grant_policy=GrantPolicy(grant_all_advertised=True)) as conn:
            await script.finished(conn)
    assert "mcpl/manifest" not in [m.get("method") for m in script.messages()]
    assert json.dumps(manifest)  # the revision in force is the server's own


async def test_change_while_the_initial_receipt_is_pending_never_widens(tmp_path: Path) -> None:
    shrunk = {
        "version": "0.5",
        "channels": {"register": True},
        "featureSets": {"demo": {"description": "d", "uses": ["pushEvents"]}},
    }
    script = Script(
        tmp_path,
        [
            {"expect": {"method": "initialize"}},
            {"reply": result(OLD)},
            {"expect": {"method": "notifications/initialized"}},
            {"expect": {"method": "featureSets/update"}},  # the initial request, held back
            {"send": changed(shrunk)},
            {"expect": {"method": "mcpl/manifest"}},
            {"reply": shrunk},
            {"reply": {"accepted": True}, "id": 3},  # now the initial receipt (1: the probe)
            {"expect": {"method": "featureSets/update"}},  # the host tells what is in force
            {"reply": {"accepted": True}},
            {"send": push_event(70)},
            {"wait_response": 70, "expect_error_code": -32002},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect(grant_policy=GrantPolicy(grant_all_advertised=True)) as conn:
            await script.finished(conn)
            assert conn.grant is not None and not conn.grant.allows("pushEvents")
    updates = [m for m in script.messages() if m.get("method") == "featureSets/update"]
    assert "pushEvents" not in updates[-1]["params"]["effectiveCapabilities"]

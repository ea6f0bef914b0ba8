"""Connection lifecycle over real processes: cancellation and bounded close (MCP lifecycle,
stdio shutdown; DESIGN.md "aclose() always closes")."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from mcpl_host import ConnectionClosed, Limits

from .wire import MCP_HANDSHAKE, Script

pytestmark = pytest.mark.anyio


def gone(pid: int) -> bool:
    return not os.path.exists(f"/proc/{pid}")


async def test_cancelling_the_host_during_the_handshake_leaves_no_process(tmp_path: Path) -> None:
    script = Script(tmp_path, [{"expect": {"method": "initialize"}}, {"hang": True}])
    conn = script.connect(limits=Limits(close_grace_seconds=0.3, terminate_grace_seconds=0.3))
    with anyio.fail_after(10):
        with anyio.move_on_after(0.5) as scope:
            async with conn:
                pytest.fail("the handshake cannot complete")
    assert scope.cancelled_caught
    transport = conn._link.transport if conn._link else None
    assert transport is not None and transport.pid is not None
    assert transport.exit_status is not None and gone(transport.pid)


async def test_cancelling_a_call_then_closing_leaves_no_process(tmp_path: Path) -> None:
    script = Script(tmp_path, [*MCP_HANDSHAKE, {"expect": {"method": "tools/list"}}, {"hang": True}])
    with anyio.fail_after(10):
        async with script.connect(limits=Limits(close_grace_seconds=0.3, terminate_grace_seconds=0.3)) as conn:
            with anyio.move_on_after(0.3):
                await conn.list_tools()
            pid = conn._link.transport.pid
    assert gone(pid)


async def test_close_of_a_server_ignoring_sigterm_is_bounded_by_the_graces(tmp_path: Path) -> None:
    script = Script(tmp_path, [{"ignore_sigterm": True}, *MCP_HANDSHAKE, {"hang": True}])
    limits = Limits(close_grace_seconds=0.5, terminate_grace_seconds=0.5)
    with anyio.fail_after(10):
        async with script.connect(limits=limits) as conn:
            pid = conn._link.transport.pid
            start = anyio.current_time()
            await conn.aclose()
            elapsed = anyio.current_time() - start
    assert gone(pid)
    # The two graces, plus scheduling slack; never the request or handshake timeouts.
    assert elapsed < limits.close_grace_seconds + limits.terminate_grace_seconds + 1.5


async def test_requests_after_close_raise_connection_closed(tmp_path: Path) -> None:
    script = Script(tmp_path, MCP_HANDSHAKE)
    with anyio.fail_after(10):
        async with script.connect() as conn:
            await conn.aclose()
            await conn.aclose()  # idempotent
            with pytest.raises(ConnectionClosed):
                await conn.list_tools()

"""Connection lifecycle over real processes: cancellation and bounded close (MCP 2025-11-25,
"Lifecycle", stdio shutdown): aclose() always closes."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from mcpl_host import ConnectionClosed, ConnectionLost, Limits, ServerConfig, connect
from mcpl_host.transports.stdio import StdioTransport

from .conftest import FIXTURES
from .wire import MCP_HANDSHAKE, ExitWatch, Script

SLACK = 0.05  # seconds: clock granularity between processes

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
    transport = conn.connection.transport
    assert transport is not None and transport.pid is not None
    assert transport.exit_status is not None and gone(transport.pid)


async def test_cancelling_a_call_then_closing_leaves_no_process(tmp_path: Path) -> None:
    script = Script(tmp_path, [*MCP_HANDSHAKE, {"expect": {"method": "tools/list"}}, {"hang": True}])
    with anyio.fail_after(10):
        async with script.connect(
            limits=Limits(close_grace_seconds=0.3, terminate_grace_seconds=0.3)
        ) as conn:
            with anyio.move_on_after(0.3):
                await conn.mcp.list_tools()
            pid = conn.connection.pid
    assert gone(pid)


async def test_a_request_still_being_written_at_close_goes_out_whole_before_end_of_input(
    tmp_path: Path,
) -> None:
    # Many pipe buffers long: the writer is still at it when the connection closes, and the
    # close waits for it (within the close grace) before the server's stdin is closed.
    script = Script(tmp_path, [*MCP_HANDSHAKE, {"hang": True}])
    blob = "x" * (8 << 20)
    with anyio.fail_after(10):
        async with script.connect() as conn, anyio.create_task_group() as tg:

            async def call() -> None:
                with pytest.raises(ConnectionClosed):
                    await conn.mcp.call_tool("big", {"blob": blob})

            tg.start_soon(call)
            link = conn.connection._link  # white-box: close while the writer is still at it
            assert link is not None
            while not link.queued_bytes:  # until the call is sent (the pipe takes 64 KiB a turn)
                await anyio.lowlevel.checkpoint()
            await conn.aclose()
    (called,) = [m for m in script.messages() if m.get("method") == "tools/call"]
    assert called["params"]["arguments"]["blob"] == blob
    assert not [row for row in script.rows() if row.get("partial")]


async def test_close_of_a_server_ignoring_sigterm_goes_through_every_step_in_order(tmp_path: Path) -> None:
    script = Script(tmp_path, [{"ignore_sigterm": True}, *MCP_HANDSHAKE, {"hang": True}])
    limits = Limits(close_grace_seconds=0.5, terminate_grace_seconds=0.5)
    with anyio.fail_after(10):
        async with script.connect(limits=limits) as conn:
            pid = conn.connection.pid
            exit_watch = ExitWatch(pid)
            start = time.monotonic()
            await conn.aclose()
            elapsed = time.monotonic() - start
    died = exit_watch.result()
    assert gone(pid)
    # As the server saw it: stdin closed, then (after the close grace) SIGTERM, then (after
    # the terminate grace) SIGKILL, seen from outside as its exit.
    seen = [(e["event"], e["time"]) for e in script.events() if e["event"] != "started"]
    assert [name for name, _ in seen] == ["stdin closed", "SIGTERM"]
    (_, stdin_closed), (_, sigterm) = seen
    assert start - SLACK <= stdin_closed <= sigterm <= died
    assert sigterm - start >= limits.close_grace_seconds - SLACK
    assert died - sigterm >= limits.terminate_grace_seconds - SLACK
    # The two graces, plus scheduling slack; never the request or handshake timeouts.
    assert elapsed < limits.close_grace_seconds + limits.terminate_grace_seconds + 1.5


async def test_a_server_that_exits_leaving_a_child_on_its_stdout_fails_pending_calls_at_once(
    tmp_path: Path,
) -> None:
    """The server process is watched, not only end of file: its child keeps stdout open."""
    script = Script(
        tmp_path,
        [*MCP_HANDSHAKE, {"spawn_holder": True}, {"expect": {"method": "tools/call"}}, {"exit": 5}],
    )
    with anyio.fail_after(10):
        async with script.connect() as conn:
            with pytest.raises(ConnectionLost) as caught:
                await conn.mcp.call_tool("x", timeout=60)
            assert not conn.is_open
    assert caught.value.exit_status == 5
    assert str(caught.value) == "server process exited with status 5"


async def test_requests_after_close_raise_connection_closed(tmp_path: Path) -> None:
    script = Script(tmp_path, MCP_HANDSHAKE)
    with anyio.fail_after(10):
        async with script.connect() as conn:
            await conn.aclose()
            await conn.aclose()  # idempotent
            with pytest.raises(ConnectionClosed):
                await conn.mcp.list_tools()


async def test_wait_closed_and_on_connection_lost_report_a_server_that_exits(tmp_path: Path) -> None:
    from .wire import TestHandlers

    lost: list[ConnectionLost] = []

    class Handlers(TestHandlers):
        def on_connection_lost(self, server: str, error: ConnectionLost) -> None:
            lost.append(error)

    script = Script(tmp_path, [*MCP_HANDSHAKE, {"stderr": "bye"}, {"exit": 4}])
    with anyio.fail_after(10):
        async with script.connect(handlers=Handlers()) as conn:
            reason = await conn.wait_closed()
            assert not conn.is_open
    assert isinstance(reason, ConnectionLost) and reason.exit_status == 4
    assert [e.exit_status for e in lost] == [4]


async def test_our_own_close_is_no_loss_though_the_server_exits_during_it(tmp_path: Path) -> None:
    # The server exits at the end of its input, while the close is under way: its end of
    # output is not reported as a loss, a call still waiting fails as closed, and the
    # process is reaped.
    from .wire import TestHandlers

    lost: list[ConnectionLost] = []

    class Handlers(TestHandlers):
        def on_connection_lost(self, server: str, error: ConnectionLost) -> None:
            lost.append(error)

    steps = [*MCP_HANDSHAKE, {"expect": {"method": "tools/list"}}, {"expect": {"method": "x"}, "timeout": 60}]
    script = Script(tmp_path, steps)  # exits 0 at the end of its input (exit_on_eof)
    with anyio.fail_after(10):
        async with script.connect(handlers=Handlers()) as conn, anyio.create_task_group() as tg:
            failed: list[BaseException] = []

            async def call() -> None:
                try:
                    await conn.mcp.list_tools()
                except ConnectionClosed as exc:
                    failed.append(exc)

            tg.start_soon(call)
            await anyio.wait_all_tasks_blocked()
            pid = conn.connection.pid
            await conn.aclose()
            reason = await conn.wait_closed()
    assert isinstance(reason, ConnectionClosed) and not lost
    assert len(failed) == 1
    assert [e["event"] for e in script.events()][-1:] == ["stdin closed"]  # no SIGTERM: it exited
    assert gone(pid) and conn.connection.transport is not None
    assert conn.connection.transport.exit_status == 0


async def test_stderr_written_while_shutting_down_reaches_the_tail() -> None:
    import sys

    from .wire import FIXTURES

    with anyio.fail_after(20):
        async with connect(
            ServerConfig(
                command=sys.executable, args=(str(FIXTURES / "demo_server.py"),), env={"DEMO_PUSH_COUNT": "0"}
            )
        ) as conn:
            pass
    assert any("stdin closed" in line for line in conn.connection.stderr_tail)


async def test_the_connection_names_the_process_of_the_server_it_started() -> None:
    # What an embedding application's supervision reads: the server's pid, None before the
    # transport opens; after the close that process is gone.
    conn = connect(
        ServerConfig(
            command=sys.executable, args=(str(FIXTURES / "demo_server.py"),), env={"DEMO_PUSH_COUNT": "0"}
        )
    )
    assert conn.connection.pid is None
    with anyio.fail_after(10):
        async with conn:
            pid = conn.connection.pid
            assert isinstance(pid, int) and pid != os.getpid() and not gone(pid)
            transport = conn.connection.transport
            assert isinstance(transport, StdioTransport) and pid == transport.pid
            await conn.mcp.ping()
    assert gone(pid)

"""StdioTransport against real fixture processes over real pipes, on asyncio and trio.

Rules under test: MCP 2025-11-25, "Lifecycle" (stdio shutdown); docs/protocol.md H5 (exit
status and stderr tail), L1-L3 (stderr escaped, redacted, forwarded) and "stdio"; aclose()
always closes, and every pipe has a reader. Synchronisation is by events and ``fail_after`` only. The
close steps are checked in order as the server saw them (the scripted server records stdin
EOF and each SIGTERM with the machine's monotonic clock; its exit is watched from outside),
each after its grace; the one upper bound is on closing a child that ignores SIGTERM.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import time
from typing import Any

import anyio
import pytest

from mcpl_host.jsonrpc.errors import ConnectionClosed, ConnectionLost
from mcpl_host.jsonrpc.framing import LineReader, LineTooLong, ReadItem
from mcpl_host.limits import Limits
from mcpl_host.logging import Redactor
from mcpl_host.transports.base import OpensInGroup, ReceivesNow, Transport, opens_in_group
from mcpl_host.transports.stdio import (
    ENV_ALLOWLIST,
    StdioParameters,
    StdioTransport,
    child_environment,
)

from .conftest import FIXTURES
from .wire import ExitWatch

# Every test here captures its log events (tests/conftest.py ``logs``).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("logs")]

#: Seconds: a generous bound on anything that should be prompt.
TIMEOUT = 15
GRACE = 0.3
SHORT = Limits(close_grace_seconds=GRACE, terminate_grace_seconds=GRACE)
SECRET = "s3cr3t-token-value"


def fixture(name: str, *args: str, **kwargs: Any) -> StdioParameters:
    return StdioParameters(sys.executable, (str(FIXTURES / name), *args), **kwargs)


def is_gone(pid: int | None) -> bool:
    assert pid is not None
    return not os.path.exists(f"/proc/{pid}")


def stderr_events(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [entry for entry in logs if entry["event"] == "server stderr"]


# -- environment (no process needed) -----------------------------------------------------


def test_child_environment_is_minimal_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCPL_TEST_HOST_SECRET", "do-not-pass")
    monkeypatch.setenv("LC_MCPL_TEST", "kept")
    monkeypatch.setenv("https_proxy", "http://proxy.invalid")
    env = child_environment(StdioParameters("x", env={"CONFIGURED": "yes", "PATH": "/p"}))
    assert "MCPL_TEST_HOST_SECRET" not in env
    assert env["LC_MCPL_TEST"] == "kept"
    assert env["https_proxy"] == "http://proxy.invalid"
    assert env["CONFIGURED"] == "yes"
    assert env["PATH"] == "/p"  # configured values win
    assert set(env) <= ENV_ALLOWLIST | {"CONFIGURED", *(n for n in env if n.startswith("LC_"))}


def test_child_environment_inherit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCPL_TEST_HOST_SECRET", "passed")
    env = child_environment(StdioParameters("x", env={"CONFIGURED": "yes"}, inherit_env=True))
    assert env == {**os.environ, "CONFIGURED": "yes"}


def test_unknown_stderr_log_level_is_refused() -> None:
    with pytest.raises(ValueError, match="stderr_log_level"):
        StdioTransport(StdioParameters("x"), stderr_log_level="loud")


# -- reading and writing -----------------------------------------------------------------


async def test_echo_roundtrip_and_live_state() -> None:
    t = StdioTransport(fixture("proc_echo.py"))
    assert "new" in repr(t) and t.pid is None
    with anyio.fail_after(TIMEOUT):
        async with t:
            assert isinstance(t, Transport)
            assert t.describe() == f"stdio:{os.path.basename(sys.executable)} pid={t.pid}"
            assert "running" in repr(t) and t.exit_status is None
            await t.send(b'{"jsonrpc":"2.0","method":"ping","id":1}\n{"b":2}\n')
            assert await t.receive() == b'{"jsonrpc":"2.0","method":"ping","id":1}'
            assert await t.receive() == b'{"b":2}'
    assert t.exit_status == 0  # the echo server exits when its stdin closes
    assert "closed" in repr(t)
    assert is_gone(t.pid)


async def test_lines_already_read_are_handed_over_at_once_until_the_close() -> None:
    t = StdioTransport(fixture("proc_exit.py", "0", '{"a":1}\n{"b":2}\n{"c":3}\n'))
    with anyio.fail_after(TIMEOUT):
        async with t:
            assert isinstance(t, ReceivesNow)
            assert t.receive_now() is None  # nothing read yet: receive() reads
            assert await t.receive() == b'{"a":1}'
            assert t.receive_now() == b'{"b":2}'  # one write, one read: the rest is held
            with pytest.raises(ConnectionLost):
                while True:  # each line once, in order, then the end as receive() says it
                    assert await t.receive() == b'{"c":3}'
        assert t.receive_now() is None
    t = StdioTransport(fixture("proc_exit.py", "0", '{"a":1}\n{"b":2}\n'))
    with anyio.fail_after(TIMEOUT):
        async with t:
            assert await t.receive() == b'{"a":1}'
        assert t.receive_now() is None  # closed: a line still held is not handed over


async def test_crlf_lines() -> None:
    with anyio.fail_after(TIMEOUT):
        async with StdioTransport(fixture("proc_echo.py")) as t:
            await t.send(b'{"a":1}\r\n')
            assert await t.receive() == b'{"a":1}'


async def test_unterminated_last_line_comes_before_connection_lost() -> None:
    with anyio.fail_after(TIMEOUT):
        async with StdioTransport(fixture("proc_exit.py", "0", '{"last": 1}')) as t:
            assert await t.receive() == b'{"last": 1}'
            with pytest.raises(ConnectionLost) as info:
                await t.receive()
    assert info.value.exit_status == 0
    assert str(info.value) == "server process exited with status 0"


async def test_crash_gives_exit_status_and_stderr_tail(logs: list[dict[str, Any]]) -> None:
    """docs/protocol.md H5, L1, L3: the exit status and the escaped stderr lines."""
    params = fixture("proc_exit.py", "3")
    with anyio.fail_after(TIMEOUT):
        async with StdioTransport(params, stderr_log_level="warning") as t:
            with pytest.raises(ConnectionLost) as info:
                await t.receive()
            with pytest.raises(ConnectionLost):  # and again: the end is sticky
                await t.receive()
    exc = info.value
    assert str(exc) == "server process exited with status 3"
    assert exc.exit_status == 3 == t.exit_status
    expected = [
        "starting up",
        "token=",
        'bad "thing" \\u001b[31mhappened\\u001b[0m',  # quotes are text: kept
        "fatal: giving up",
    ]
    assert exc.stderr_tail == expected == t.stderr_tail
    events = stderr_events(logs)
    assert [str(entry["line"]) for entry in events] == expected
    assert {entry["log_level"] for entry in events} == {"warning"}


async def test_stderr_written_at_the_close_reaches_the_tail_of_a_transport_closed_at_once() -> None:
    """H5: the stderr pump is started without waiting for it to run; a transport closed
    right after entering (no checkpoint of its user between) still reads what the server
    writes to stderr as its stdin closes, and its pump ends with the close."""
    code = "import sys; sys.stdin.read(); sys.stderr.write('closing now\\n')"
    params = StdioParameters(sys.executable, ["-c", code])
    with anyio.fail_after(TIMEOUT):
        async with StdioTransport(params) as t:
            pass
    assert t.stderr_tail == ["closing now"]
    assert is_gone(t.pid)


async def test_killed_by_signal() -> None:
    with anyio.fail_after(TIMEOUT):
        async with StdioTransport(fixture("proc_exit.py", "kill")) as t:
            with pytest.raises(ConnectionLost) as info:
                await t.receive()
    assert info.value.exit_status == -signal.SIGKILL
    assert str(info.value) == "server process was killed by signal 9 (SIGKILL)"


async def test_closed_stdout_of_a_running_server() -> None:
    code = "import os, time; os.close(1); time.sleep(60)"
    with anyio.fail_after(TIMEOUT):
        async with StdioTransport(StdioParameters(sys.executable, ("-c", code)), limits=SHORT) as t:
            with pytest.raises(ConnectionLost) as info:
                await t.receive()
            assert info.value.exit_status is None
            assert str(info.value) == "server closed its stdout"
    assert is_gone(t.pid)


async def test_env_secret_is_redacted_in_stderr_tail_and_logs(logs: list[dict[str, Any]]) -> None:
    """docs/protocol.md L2: a secret env value is redacted, by default and with a given redactor."""
    for redactor in (None, Redactor([SECRET])):
        params = fixture("proc_exit.py", "1", env={"API_TOKEN": SECRET})
        with anyio.fail_after(TIMEOUT):
            async with StdioTransport(params, redactor=redactor) as t:
                with pytest.raises(ConnectionLost) as info:
                    await t.receive()
        assert "token=[redacted]" in info.value.stderr_tail
        assert "token=[redacted]" in [str(entry["line"]) for entry in stderr_events(logs)]
        assert SECRET not in repr(logs) + repr(t.stderr_tail) + repr(info.value.stderr_tail)


async def test_stderr_flood_does_not_block() -> None:
    limits = Limits(stderr_tail_lines=5)
    with anyio.fail_after(TIMEOUT):
        async with StdioTransport(fixture("proc_stderr_flood.py"), limits=limits) as t:
            assert await t.receive() == b'{"flood": "done"}'
            assert len(t.stderr_tail) <= 5


class _PeakReader(LineReader):
    """A LineReader that records the most bytes it ever held."""

    def __init__(self, max_line_bytes: int) -> None:
        super().__init__(max_line_bytes, head_bytes=max_line_bytes)
        self.peak = 0

    def feed(self, data: bytes) -> list[ReadItem]:
        out = super().feed(data)
        self.peak = max(self.peak, self.buffered_bytes)
        return out


async def test_stdout_flood_without_newline_is_dropped_in_bounded_memory() -> None:
    limits = Limits(max_line_bytes=1024)
    with anyio.fail_after(TIMEOUT):
        async with StdioTransport(fixture("proc_no_newline.py"), limits=limits) as t:
            reader = t._reader = _PeakReader(1024)  # white-box: watch the buffer
            assert await t.receive() == LineTooLong(1024, 8 * 1024 * 1024, b"x" * 1024)
            assert await t.receive() == b'{"after": true}'  # one marker for 8 MiB, then on
            assert reader.peak <= 2 * 1024  # the line's head, and at most the bound


async def test_send_to_a_dead_child_is_connection_lost() -> None:
    with anyio.fail_after(TIMEOUT):
        async with StdioTransport(fixture("proc_exit.py", "0")) as t:
            with pytest.raises(ConnectionLost):
                await t.receive()
            assert t.exit_status == 0  # it never read its stdin, and is gone
            for _ in range(2):  # EPIPE every time, never a crash
                with pytest.raises(ConnectionLost) as info:
                    await t.send(b"x" * 200_000 + b"\n")
    assert info.value.exit_status == 0
    assert str(info.value).startswith("could not write to the server")


@pytest.mark.parametrize("case", ["missing", "not executable", "bad cwd"])
async def test_spawn_failure_is_connection_lost(case: str, tmp_path: Any) -> None:
    if case == "missing":
        params = StdioParameters("mcpl-host-no-such-command")
    elif case == "not executable":
        script = tmp_path / "server.sh"
        script.write_text("#!/bin/sh\n")
        script.chmod(0o644)
        params = StdioParameters(str(script))
    else:
        params = StdioParameters(sys.executable, cwd=tmp_path / "missing")
    t = StdioTransport(params)
    with anyio.fail_after(TIMEOUT), pytest.raises(ConnectionLost) as info:
        async with t:
            pytest.fail("entered")
    message = str(info.value)
    assert message.startswith(f"could not start server command {params.command!r} (")
    assert "\n" not in message and "Traceback" not in message
    if case == "bad cwd":
        assert "working directory" in message
    assert t.pid is None


# -- closing -----------------------------------------------------------------------------


def scripted(tmp_path: Any, steps: list[Any]) -> tuple[StdioParameters, Any]:
    script, record = tmp_path / "script.json", tmp_path / "record.jsonl"
    script.write_text(json.dumps(steps))
    return StdioParameters(
        sys.executable, (str(FIXTURES / "scripted_server.py"), str(script), str(record))
    ), record


def events(record: Any) -> list[tuple[str, float]]:
    rows = [json.loads(row) for row in record.read_text().splitlines()]
    return [(row["event"], row["time"]) for row in rows if "event" in row and row["event"] != "started"]


READY = {"send": {"ready": True}}
SLACK = 0.05  # seconds: clock granularity between processes


@pytest.mark.parametrize(
    ("behaviour", "steps", "status"),
    [
        ("exits when stdin closes", [READY], 0),
        ("exits on SIGTERM", [{"exit_on_sigterm": 3}, READY, {"hang": True}], 3),
        ("ignores SIGTERM", [{"ignore_sigterm": True}, READY, {"hang": True}], -signal.SIGKILL),
    ],
)
async def test_close_steps_come_in_order_each_after_its_grace(
    tmp_path: Any, behaviour: str, steps: list[Any], status: int
) -> None:
    """MCP lifecycle (stdio shutdown): stdin close, grace, SIGTERM, grace, SIGKILL, reap;
    each step only if the one before did not end the server, as the server saw them."""
    params, record = scripted(tmp_path, steps)
    with anyio.fail_after(TIMEOUT):
        async with StdioTransport(params, limits=SHORT) as t:
            assert await t.receive() == b'{"ready":true}'
            assert t.pid is not None
            exit_watch = ExitWatch(t.pid)
            closing = time.monotonic()
            await t.aclose()
    died = exit_watch.result()
    assert t.exit_status == status
    assert is_gone(t.pid)
    seen = events(record)
    names = [name for name, _ in seen]
    if status == 0:
        assert names == ["stdin closed"]
        return
    assert names == ["stdin closed", "SIGTERM"]  # never SIGTERM first, never twice
    (_, stdin_closed), (_, sigterm) = seen
    assert closing - SLACK <= stdin_closed
    assert sigterm - closing >= GRACE - SLACK  # the close grace was given
    if status == -signal.SIGKILL:
        assert died - sigterm >= GRACE - SLACK  # the terminate grace was given, then SIGKILL
    else:
        assert died >= sigterm  # it exited on SIGTERM: no SIGKILL was needed


async def test_close_of_a_child_ignoring_sigterm_is_bounded_and_reaps() -> None:
    """An upper bound as well: a child that ignores SIGTERM costs the two graces, not more."""
    with anyio.fail_after(TIMEOUT):
        async with StdioTransport(fixture("proc_ignore_term.py"), limits=SHORT) as t:
            assert await t.receive() == b"ready"  # SIGTERM is ignored from here on
            start = anyio.current_time()
            await t.aclose()
            elapsed = anyio.current_time() - start
    assert elapsed < 2 * GRACE + 1.5
    assert t.exit_status == -signal.SIGKILL
    assert is_gone(t.pid)


@pytest.mark.parametrize("mode", ["wait", "exit"])
async def test_a_wrappers_grandchild_is_killed_with_the_group(mode: str) -> None:
    """The leader waits for, or has left behind, a grandchild that ignores SIGTERM."""
    grandchild, ready = None, False
    with anyio.fail_after(TIMEOUT):
        async with StdioTransport(fixture("proc_wrapper.py", mode), limits=SHORT) as t:
            # "wait": until the grandchild is ready (it ignores SIGTERM from then on);
            # "exit": the wrapper announces it once it ignores SIGTERM, then exits, and the
            # transport is lost (the server exited) while the grandchild holds stdout.
            with contextlib.suppress(ConnectionLost):
                while grandchild is None or (mode == "wait" and not ready):
                    line = await t.receive()
                    assert isinstance(line, bytes)
                    if line == b"ready":
                        ready = True
                    else:
                        grandchild = json.loads(line)["grandchild"]
            assert grandchild is not None
            pidfd = os.pidfd_open(grandchild)
            alive_before_close = select.select([pidfd], [], [], 0)[0] == []
    try:
        assert alive_before_close
        with anyio.fail_after(TIMEOUT):
            await anyio.wait_readable(pidfd)  # readable: the grandchild has exited
    finally:
        os.close(pidfd)
    assert is_gone(t.pid)


async def test_a_server_that_exits_while_a_grandchild_holds_stdout_is_lost_at_once() -> None:
    """The process is watched, not only stdout: no end of file ever comes here."""
    lines: list[ReadItem] = []
    with anyio.fail_after(TIMEOUT):
        async with StdioTransport(fixture("proc_wrapper.py", "exit"), limits=SHORT) as t:
            with pytest.raises(ConnectionLost) as info:
                while True:
                    lines.append(await t.receive())
            assert t._process is not None and t._process.stdout is not None
            assert not t._stdout_ended  # the grandchild still holds stdout open
    assert info.value.exit_status == 0
    assert str(info.value) == "server process exited with status 0"
    assert any(isinstance(line, bytes) and b"grandchild" in line for line in lines)  # read first


async def test_a_close_ends_the_stderr_pump_while_a_daemon_still_holds_stderr_open() -> None:
    """The pump has no scope of its own: the close ends its read by closing stderr, even
    when no end of file can come (a daemon outside the group, the tree not kept, holds
    stderr open), and the close does not wait for that daemon."""
    code = (
        "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', 'import time; "
        "time.sleep(60)'], start_new_session=True, stdin=subprocess.DEVNULL, "
        "stdout=subprocess.DEVNULL); print(p.pid, flush=True); sys.stdin.read()"
    )
    params = StdioParameters(sys.executable, ["-c", code], keep_tree=False)
    daemon = None
    try:
        with anyio.fail_after(TIMEOUT):
            async with StdioTransport(params, limits=SHORT) as t:
                line = await t.receive()
                assert isinstance(line, bytes)
                daemon = int(line)
        assert is_gone(t.pid)
        assert not is_gone(daemon)  # it still holds stderr: no end of file came
    finally:
        if daemon is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(daemon, signal.SIGKILL)


async def test_cancelling_the_user_task_still_kills_and_reaps() -> None:
    transports: list[StdioTransport] = []
    in_use = anyio.Event()

    async def use() -> None:
        async with StdioTransport(fixture("proc_ignore_term.py"), limits=SHORT) as t:
            transports.append(t)
            assert await t.receive() == b"ready"
            in_use.set()
            await t.receive()  # blocks: the child writes nothing more
            pytest.fail("receive returned")

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(use)
            await in_use.wait()
            tg.cancel_scope.cancel()
    (t,) = transports
    assert t.exit_status == -signal.SIGKILL
    assert is_gone(t.pid)


async def test_aclose_completes_when_its_caller_is_cancelled() -> None:
    with anyio.fail_after(TIMEOUT):
        async with StdioTransport(fixture("proc_ignore_term.py"), limits=SHORT) as t:
            assert await t.receive() == b"ready"
            with anyio.CancelScope() as scope:
                scope.cancel()
                await t.aclose()
            assert t.exit_status == -signal.SIGKILL  # stopped and reaped all the same
            assert is_gone(t.pid)


async def test_close_from_another_task_gives_connection_closed() -> None:
    outcomes: list[str] = []
    with anyio.fail_after(TIMEOUT):
        async with StdioTransport(fixture("proc_ignore_term.py"), limits=SHORT) as t:
            assert await t.receive() == b"ready"

            async def blocked_reader(*, task_status: Any) -> None:
                task_status.started()
                with pytest.raises(ConnectionClosed):
                    await t.receive()
                outcomes.append("receive closed")

            async def blocked_writer(*, task_status: Any) -> None:
                task_status.started()
                with pytest.raises(ConnectionClosed):  # more than the pipe holds: it waits
                    await t.send(b"x" * (1 << 20) + b"\n")
                outcomes.append("send closed")

            async with anyio.create_task_group() as tg:
                await tg.start(blocked_reader)
                await tg.start(blocked_writer)
                await anyio.wait_all_tasks_blocked()
                await t.aclose()
            assert sorted(outcomes) == ["receive closed", "send closed"]
            with pytest.raises(ConnectionClosed):
                await t.send(b"{}\n")
            with pytest.raises(ConnectionClosed):
                await t.receive()
            await t.aclose()  # idempotent
    assert is_gone(t.pid)


def open_descriptors() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
async def test_no_descriptor_outlives_its_transport_and_a_late_write_reaches_no_other_file(
    tmp_path: Any,
) -> None:
    # The transport owns its server's stdin pipe (os.pipe, os.close): every way a transport
    # ends gives back every descriptor, and once closed it never writes to the number its
    # stdin had, whatever file holds that number now.
    with anyio.fail_after(TIMEOUT):
        async with StdioTransport(fixture("proc_echo.py"), limits=SHORT) as t:  # the backend's own
            await t.send(b"warm\n")
            assert await t.receive() == b"warm"
        before = open_descriptors()
        for _ in range(3):
            async with StdioTransport(fixture("proc_echo.py"), limits=SHORT) as t:
                t.send_now(b"one\n")
                assert await t.receive() == b"one"
            async with StdioTransport(fixture("proc_exit.py", "3"), limits=SHORT) as t:
                with pytest.raises(ConnectionLost):
                    await t.receive()
                with pytest.raises(ConnectionLost):
                    await t.send(b"x" * 200_000 + b"\n")  # EPIPE
            async with StdioTransport(fixture("proc_ignore_term.py"), limits=SHORT) as t:
                assert await t.receive() == b"ready"
                assert t.send_now(b"x" * (1 << 20)) < 1 << 20  # the pipe is full: closed full
            with pytest.raises(ConnectionLost):
                async with StdioTransport(StdioParameters("mcpl-host-no-such-command"), limits=SHORT):
                    pass
        assert open_descriptors() == before
        async with StdioTransport(fixture("proc_echo.py"), limits=SHORT) as t:
            assert t._stdin is not None
            stdin_fd = t._stdin._fd  # white-box: the number to watch
        other = tmp_path / "other"
        held = [os.open(other, os.O_WRONLY | os.O_CREAT)]
        try:
            while held[-1] != stdin_fd and len(held) < 64:  # the lowest free number comes first
                held.append(os.open(other, os.O_WRONLY))
            assert held[-1] == stdin_fd  # another file holds the number now
            assert t.send_now(b"late\n") == 0
            with pytest.raises(ConnectionClosed):
                await t.send(b"late\n")
        finally:
            for fd in held:
                os.close(fd)
    assert other.read_bytes() == b""


async def test_a_body_error_propagates_unwrapped_and_the_child_is_reaped() -> None:
    with anyio.fail_after(TIMEOUT):
        with pytest.raises(KeyError):
            async with StdioTransport(fixture("proc_echo.py")) as t:
                raise KeyError("boom")
    assert t.exit_status == 0
    assert is_gone(t.pid)


# -- opened in the opener's task group (OpensInGroup) -------------------------------------


async def test_open_in_runs_the_pump_and_the_watcher_in_the_openers_group() -> None:
    """A ``Connection`` opens its stdio transport with ``open_in``: the stderr pump and the
    process watcher run in the given group (the transport holds none of its own), a crash
    still gives its exit status and stderr tail (H5), and after ``aclose()`` both tasks
    end on their own, so the group's exit returns."""
    t = StdioTransport(fixture("proc_exit.py", "3"))
    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            assert isinstance(t, OpensInGroup) and opens_in_group(t)
            assert await t.open_in(tg) is t
            assert t._life.task_group is None  # pyright: ignore[reportPrivateUsage]
            with pytest.raises(ConnectionLost) as info:
                await t.receive()
            await t.aclose()
    assert info.value.exit_status == 3 == t.exit_status
    assert info.value.stderr_tail[-1] == "fatal: giving up"
    assert is_gone(t.pid)


async def test_open_in_a_server_that_ignores_sigterm_is_stopped_and_its_tasks_end() -> None:
    # The watcher still waits and the pump still reads when the close begins: the close
    # cancels the one and ends the other, and the group is left with the server reaped.
    t = StdioTransport(fixture("proc_ignore_term.py"), limits=SHORT)
    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            await t.open_in(tg)
            assert await t.receive() == b"ready"
            await t.aclose()
            with pytest.raises(ConnectionClosed):
                await t.receive()
    assert t.exit_status == -signal.SIGKILL
    assert is_gone(t.pid)


async def test_open_in_is_once_only_and_not_after_entering() -> None:
    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            t = StdioTransport(fixture("proc_echo.py"))
            await t.open_in(tg)
            with pytest.raises(RuntimeError, match="only once"):
                await t.open_in(tg)
            with pytest.raises(RuntimeError, match="only once"):
                await t.__aenter__()
            await t.aclose()
            async with StdioTransport(fixture("proc_echo.py")) as entered:
                with pytest.raises(RuntimeError, match="only once"):
                    await entered.open_in(tg)


async def test_open_in_a_group_that_takes_no_more_tasks_stops_and_reaps_the_server() -> None:
    async with anyio.create_task_group() as ended:
        pass  # left: it starts no more tasks
    t = StdioTransport(fixture("proc_echo.py"))
    with anyio.fail_after(TIMEOUT):
        with pytest.raises(RuntimeError):
            await t.open_in(ended)
    assert t.pid is not None and t.exit_status == 0  # spawned, then closed and reaped
    assert is_gone(t.pid)


# -- how the child is started ------------------------------------------------------------


async def report(params: StdioParameters) -> dict[str, Any]:
    with anyio.fail_after(TIMEOUT):
        async with StdioTransport(params) as t:
            line = await t.receive()
    assert isinstance(line, bytes)
    return json.loads(line)


async def test_minimal_environment_in_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCPL_TEST_HOST_SECRET", "do-not-pass")
    env = (await report(fixture("proc_report.py", env={"CONFIGURED": "yes"})))["env"]
    assert env["CONFIGURED"] == "yes"
    assert "MCPL_TEST_HOST_SECRET" not in env
    assert env.get("PATH") == os.environ.get("PATH")


async def test_inherit_env_in_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCPL_TEST_HOST_SECRET", "passed")
    params = fixture("proc_report.py", env={"CONFIGURED": "yes"}, inherit_env=True)
    env = (await report(params))["env"]
    assert env["CONFIGURED"] == "yes"
    assert env["MCPL_TEST_HOST_SECRET"] == "passed"


async def test_cwd_is_honored(tmp_path: Any) -> None:
    cwd = (await report(fixture("proc_report.py", cwd=tmp_path)))["cwd"]
    assert os.path.realpath(cwd) == os.path.realpath(tmp_path)

"""Stopping on SIGTERM, SIGHUP and SIGINT alike, and when stdout's reader goes away.

The CLI runs as a child process (``mcpl-host run`` / ``probe``) hosting scripted servers
that record, with the machine's monotonic clock, when their stdin closed and when a SIGTERM
came (``fixtures/scripted_server.py``); their exit is watched from outside (``ExitWatch``).
The library helper (``close_on_signals``) is tested in this process. No sleeps: each step
waits for a line of output or an event.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpl_host import signals as host_signals
from mcpl_host.signals import StopRouter, close_on_signals

from .test_cli import CLI, TIMEOUT, Running, scripted
from .test_cli_run import scripted_entry, wait_for_all, write_config
from .test_supervisor import processes_with
from .wire import MCP_HANDSHAKE, ExitWatch, Script, TestHandlers, mark

SLACK = 0.05  # seconds: clock granularity between processes
CLOSE_GRACE, TERMINATE_GRACE = 0.5, 1.0  # scripted_entry's timeouts


def record_rows(tmp_path: Path, name: str) -> list[dict[str, Any]]:
    path = tmp_path / (f"{name}.jsonl" if name == "record" else f"{name}.record")
    return [json.loads(row) for row in path.read_text().splitlines() if row] if path.exists() else []


def started_pid(tmp_path: Path, name: str) -> int:
    (pid,) = [row["pid"] for row in record_rows(tmp_path, name) if row.get("event") == "started"]
    return int(pid)


def close_events(tmp_path: Path, name: str) -> list[tuple[str, float]]:
    rows = record_rows(tmp_path, name)
    return [(row["event"], row["time"]) for row in rows if row.get("event") in ("stdin closed", "SIGTERM")]


SERVERS = {
    # exits when its stdin closes: gets no signal at all
    "polite": [*MCP_HANDSHAKE],
    # exits on SIGTERM: never needs SIGKILL
    "termable": [{"exit_on_sigterm": 0}, *MCP_HANDSHAKE, {"hang": True}],
    # ignores SIGTERM: SIGKILL after the terminate grace
    "stubborn": [{"ignore_sigterm": True}, *MCP_HANDSHAKE, {"hang": True}],
}


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_run_closes_every_server_in_order_on_a_shutdown_signal(tmp_path: Path, signum: int) -> None:
    config = write_config(
        tmp_path, {name: scripted_entry(tmp_path, steps, name) for name, steps in SERVERS.items()}
    )
    cli = Running("run", "--json", str(config))
    try:
        wait_for_all(cli, *(f'"server":"{name}","kind":"ready"' for name in SERVERS))
        watches = {name: ExitWatch(started_pid(tmp_path, name)) for name in SERVERS}
        sent = time.monotonic()
        cli.process.send_signal(signum)
    finally:
        status, out, err = cli.finish()
    assert status == 0, err
    assert "Traceback" not in err
    died = {name: watch.result() for name, watch in watches.items()}
    assert [name for name, _ in close_events(tmp_path, "polite")] == ["stdin closed"]
    for name in ("termable", "stubborn"):
        seen = close_events(tmp_path, name)
        assert [event for event, _ in seen] == ["stdin closed", "SIGTERM"], (name, seen)
        (_, stdin_closed), (_, sigterm) = seen
        assert sent - SLACK <= stdin_closed <= sigterm <= died[name]
        assert sigterm - stdin_closed >= CLOSE_GRACE - SLACK  # the close grace came first
    (_, sigterm) = close_events(tmp_path, "stubborn")[1]
    assert died["stubborn"] - sigterm >= TERMINATE_GRACE - SLACK  # then SIGKILL, not before
    assert not processes_with(str(tmp_path))


def test_run_ends_when_the_reader_of_stdout_goes_away_while_nothing_happens(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"idle": scripted_entry(tmp_path, [*MCP_HANDSHAKE], "idle")})
    process = subprocess.Popen(
        [*CLI, "run", "--json", str(config)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None and process.stderr is not None
    try:
        while b'"kind":"ready"' not in process.stdout.readline():  # then no event comes
            pass
        process.stdout.close()  # as `| head` does once it has what it wants
        status = process.wait(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    err = process.stderr.read().decode()
    process.stderr.close()
    assert status == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err
    assert [name for name, _ in close_events(tmp_path, "idle")] == ["stdin closed"]
    assert not processes_with(str(tmp_path))


@pytest.mark.parametrize("as_json", [True, False])
def test_run_piped_to_head_ends_and_closes_the_servers(tmp_path: Path, as_json: bool) -> None:
    ticker = [
        *MCP_HANDSHAKE,
        *({"send": {"jsonrpc": "2.0", "method": "test/tick", "params": {"n": n}}} for n in range(3)),
    ]
    config = write_config(tmp_path, {"ticker": scripted_entry(tmp_path, ticker, "ticker")})
    command = " ".join(map(shlex.quote, [*CLI, "run", *(["--json"] if as_json else []), str(config)]))
    done = subprocess.run(
        ["bash", "-c", f'{command} | head -1; echo "status=${{PIPESTATUS[0]}}"'],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    first, status = done.stdout.splitlines()
    assert status == "status=0", done
    assert ("connecting" in first) if as_json else ("Hosting 1 server(s)" in first)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr
    assert not processes_with(str(tmp_path))


def test_probe_on_sigterm_during_the_handshake_closes_the_server_and_exits_130(tmp_path: Path) -> None:
    steps = [{"expect": {"method": "initialize"}}, {"stderr": "got initialize"}, {"hang": True}]
    cli = Running("probe", "--json", "--stderr-level", "warning", *scripted(tmp_path, steps))
    try:
        cli.wait_for("stderr", "got initialize")
        cli.process.send_signal(signal.SIGTERM)
    finally:
        status, out, err = cli.finish()
    assert status == 130, err
    doc = json.loads(out)
    assert doc["error"]["type"] == "Interrupted"
    assert doc["error"]["message"] == "interrupted by SIGTERM during the handshake"
    assert [name for name, _ in close_events(tmp_path, "record")][:1] == ["stdin closed"]
    assert not processes_with(str(tmp_path))


def test_probe_on_sighup_while_listening_reports_and_exits_0() -> None:
    cli = Running("probe", "--listen", "inf")
    try:
        cli.wait_for("stdout", "Listening until Ctrl-C")
        cli.process.send_signal(signal.SIGHUP)
    finally:
        status, out, err = cli.finish()
    assert status == 0, err
    assert "stopped by SIGHUP after" in out and "Traceback" not in err


# -- the library helper --------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
async def test_close_on_signals_closes_a_connection_as_ctrl_c_does(tmp_path: Path, signum: int) -> None:
    script = Script(tmp_path, [{"ignore_sigterm": True}, *MCP_HANDSHAKE, mark("up"), {"hang": True}])
    handlers = TestHandlers()
    after_signal: list[str] = []
    with anyio.fail_after(TIMEOUT):
        async with close_on_signals() as stop:
            async with script.connect(handlers=handlers) as conn:
                await handlers.mark("up").wait()
                os.kill(os.getpid(), signum)
                await anyio.sleep_forever()  # cancelled by the signal
            after_signal.append("unreachable")
    assert stop.reason == signal.Signals(signum).name
    assert after_signal == [] and not conn.is_open
    assert [e["event"] for e in script.events() if e["event"] != "started"] == ["stdin closed", "SIGTERM"]


@pytest.mark.anyio
async def test_close_on_signals_returns_normally_when_the_body_ends() -> None:
    with anyio.fail_after(TIMEOUT):
        async with close_on_signals() as stop:
            pass
    assert stop.reason is None


@pytest.mark.anyio
async def test_a_stop_while_no_phase_is_open_is_ignored() -> None:
    router = StopRouter()
    router.stop("SIGTERM")  # nothing open: nothing to cancel, nothing noted
    assert router.reason is None
    with router.phase() as scope:
        router.stop("stdout closed")
        router.stop("SIGTERM")
        await anyio.sleep_forever()
    assert scope.cancelled_caught and router.reason == "stdout closed"


def test_shutdown_signals_and_the_pipe_check() -> None:
    assert set(host_signals.SHUTDOWN_SIGNALS) == {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "w") as writer, os.fdopen(read_end) as reader:
        assert host_signals.stdout_is_a_pipe(writer)  # type: ignore[arg-type]
        assert not host_signals.stdout_is_a_pipe(reader)  # type: ignore[arg-type]
    with open(os.devnull, "w") as null:
        assert not host_signals.stdout_is_a_pipe(null)

"""The progress line of the commands that wait on a server (issue 23): what it counts, that it
appears on a terminal and is cleared, and that nothing of it reaches a pipe.

Terminal behaviour is the point here, so these tests run the CLI in a real pseudo-terminal
(pexpect); the pipe tests use the fork server. No sleeps: each test waits for output.
"""

from __future__ import annotations

import re
from pathlib import Path

import pexpect

from .forkpty import spawn_pty
from .test_cli import CLI, TIMEOUT, run_cli, scripted
from .test_terminal_output import pty_env
from .wire import initialize_steps

WAITING = re.compile(r"waiting for [^:]+: (\S+) \((\d+) s\)")


def _slow_discover_steps(seconds: float) -> list[object]:
    """A server that takes ``seconds`` to refuse ``server/discover``, then answers the handshake."""
    return [
        {"options": {"discover": "steps"}},
        {"wait_for": {"method": "server/discover"}},
        {"sleep": seconds},
        {"reply_error": {"code": -32601, "message": "Method not found"}},
        *initialize_steps({}, {"name": "sleepy", "version": "1"}),
        {"expect": {"method": "notifications/initialized"}},
    ]


def test_waiting_for_server_discover_counts_from_when_it_was_sent(tmp_path: Path) -> None:
    """The defect: ``server/discover`` never recorded when it was sent, so the line counted
    from the machine's boot (``server/discover (592 s)`` under a second after the start)."""
    child = spawn_pty(
        CLI[0],
        [*CLI[1:], "probe", *scripted(tmp_path, _slow_discover_steps(2.5))],
        encoding="utf-8",
        timeout=TIMEOUT,
        env=pty_env(),
    )
    child.expect(r"waiting for [^:]+: server/discover \((\d+) s\)")
    shown = int(child.match.group(1))
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    assert shown < 10
    silences = [int(n) for n in re.findall(r"nothing received for (\d+) s", child.before or "")]
    assert all(n < 10 for n in silences), silences


def test_no_progress_line_in_a_pipe(tmp_path: Path) -> None:
    done = run_cli("probe", *scripted(tmp_path, _slow_discover_steps(1.5)))
    assert done.returncode == 0, done.stderr
    assert "waiting for" not in done.stderr + done.stdout
    assert "\x1b[2K" not in done.stderr + done.stdout


#: What rich writes to erase a transient line (up a line, then erase it).
ERASED = "\x1b[2K"


def _pty_run(*args: str) -> str:
    child = spawn_pty(CLI[0], [*CLI[1:], *args], encoding="utf-8", timeout=TIMEOUT, env=pty_env())
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    return child.before or ""


def test_check_shows_its_step_on_a_terminal_and_erases_it_before_the_summary() -> None:
    seen = _pty_run("check", "--only", "jsonrpc.ping", "--only", "init.answers")
    steps = re.findall(r"checking: ([^…\r\n]+)…", seen)
    assert "the handshake and the policy exchange" in steps
    assert "server/discover and the raw JSON-RPC probes" in steps
    last, summary = seen.rfind("checking:"), seen.find("mcpl-host check")
    assert 0 <= last < seen.find(ERASED, last) < summary


def test_check_shows_no_progress_in_a_pipe_nor_with_json() -> None:
    piped = run_cli("check", "--only", "jsonrpc.ping")
    assert piped.returncode == 0, piped.stderr
    assert "checking:" not in piped.stderr + piped.stdout and ERASED not in piped.stderr
    seen = _pty_run("check", "--only", "jsonrpc.ping", "--json")
    assert "checking:" not in seen


def test_call_shows_what_it_waits_for_on_a_terminal_and_erases_it() -> None:
    seen = _pty_run("call", "--text", "add", "a=1", "b=2")
    waiting = seen.rfind("waiting for mcpl-demo")
    erased = seen.find(ERASED, waiting)
    assert 0 <= waiting < erased and seen[erased + len(ERASED) :].startswith("3\r\n")
    piped = run_cli("call", "--text", "add", "a=1", "b=2")
    assert piped.returncode == 0 and "waiting for" not in piped.stderr and piped.stdout == "3\n"

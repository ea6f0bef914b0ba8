"""What ``probe`` and ``run`` print for a person: event lines wrapped at word boundaries on a
narrow terminal (a real pseudo-terminal, pexpect), "closing N servers" as soon as Ctrl-C
arrives, and server log messages shown without a ``[null]`` logger.

No sleeps: each test waits for a line of the CLI's output.
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pexpect

from .forkpty import spawn_pty
from .test_cli import CLI, TIMEOUT, Running, probe_json, run_cli, scripted
from .test_cli_run import demo_entry, interrupt, wait_for_all, write_config
from .wire import initialize_steps, server_notification

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\r")
LOG_STEPS = [
    *initialize_steps({"logging": {}}, {"name": "logs", "version": "1"}),
    {"expect": {"method": "notifications/initialized"}},
    server_notification("notifications/message", {"level": "info", "data": "no logger"}),
    server_notification("notifications/message", {"level": "warning", "logger": None, "data": "null logger"}),
    server_notification("notifications/message", {"level": "error", "logger": "db", "data": {"k": 1}}),
]


def pty_env() -> dict[str, str]:
    """This environment without COLUMNS and LINES (set during a test session), so that the
    child sees the pseudo-terminal's own size."""
    return {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "LINES")}


def terminal_lines(output: str) -> list[str]:
    """The lines a terminal shows for ``output``: a new line moves the cursor to the next row,
    a carriage return to the first column (what follows writes over the row), ESC [nA n rows
    up, ESC [2K blanks the row (the transient progress line is written and erased so); other
    escape sequences show nothing."""
    rows, row, column = [""], 0, 0
    for part in re.split(r"(\n|\r|\x1b\[2K|\x1b\[\d*A)", output):
        if part == "\n":
            row, column = row + 1, 0
            if row == len(rows):
                rows.append("")
        elif part == "\r":
            column = 0
        elif part == "\x1b[2K":
            rows[row] = ""
        elif part.startswith("\x1b[") and part.endswith("A"):
            row = max(0, row - int(part[2:-1] or 1))
        else:
            text = ANSI.sub("", part)
            line = rows[row]
            rows[row] = line[:column].ljust(column) + text + line[column + len(text) :]
            column += len(text)
    return [line.rstrip() for line in rows]


def test_event_lines_wrap_at_word_boundaries_at_60_columns() -> None:
    child = spawn_pty(
        CLI[0],
        [*CLI[1:], "probe", "--listen", "1", "--env", "DEMO_PUSH_INTERVAL=0.1", "--env", "DEMO_PUSH_COUNT=4"],
        encoding="utf-8",
        timeout=TIMEOUT,
        dimensions=(50, 60),
        env=pty_env(),
    )
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    lines = terminal_lines(child.before or "")
    assert max(len(line) for line in lines) <= 60, [line for line in lines if len(line) > 60]
    start = next(i for i, line in enumerate(lines) if line.startswith("Listening"))
    events = lines[start + 1 : start + 7]
    # "12:00:00.000  push/event demo.clock tick-1: tick 1  → accepted" is 62 columns: it
    # wraps before the word "accepted", which goes whole on the next line, under the text.
    # (Ticks 1-3 of 4: the last tick also carries a reference stub, a longer line.)
    for first, second in zip(events[0::2], events[1::2]):
        assert re.fullmatch(r"\d\d:\d\d:\d\d\.\d{3}  push/event demo\.clock tick-\d: tick \d  →", first), (
            events
        )
        assert second == " " * 14 + "accepted", events


def test_piped_event_lines_stay_whole() -> None:
    done = run_cli("probe", "--listen", "1", "--env", "DEMO_PUSH_INTERVAL=0.1", "--env", "DEMO_PUSH_COUNT=2")
    assert done.returncode == 0, done.stderr
    assert re.search(
        r"\d\d:\d\d:\d\d\.\d{3}  push/event demo\.clock tick-1: tick 1  → accepted\n", done.stdout
    )


def test_ctrl_c_says_how_many_servers_are_being_closed(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"one": demo_entry(tmp_path), "two": demo_entry(tmp_path)})
    cli = Running("run", str(config))
    try:
        wait_for_all(cli, "one  ready", "two  ready")
    finally:
        status, out, err = interrupt(cli)
    assert status == 0, err
    assert out.index("stopping: closing 2 servers…") < out.index("stopped: every server is closed")
    probe = Running("probe", "--listen", "inf")
    probe.wait_for("stdout", "Listening until Ctrl-C")
    probe.process.send_signal(signal.SIGINT)
    status, out, err = probe.finish()
    assert status == 0, err
    assert out.index("stopping: closing 1 server…") < out.index("stopped by Ctrl-C")


def test_a_log_message_without_a_logger_shows_no_null(tmp_path: Path) -> None:
    server = scripted(tmp_path, LOG_STEPS)
    done = run_cli("probe", "--listen", "1", "--log-level", "info", *server)
    assert done.returncode == 0, done.stderr
    assert "[null]" not in done.stdout + done.stderr and "[None]" not in done.stdout + done.stderr
    assert "notification notifications/message info: no logger\n" in done.stdout
    assert "notification notifications/message warning: null logger\n" in done.stdout
    assert 'notification notifications/message error [db]: {"k":1}\n' in done.stdout
    log_lines = [line for line in done.stderr.splitlines() if "server log message" in line]
    assert len(log_lines) == 3 and "[db]" in log_lines[2]
    assert all("[" not in line.split("server log message")[1] for line in log_lines[:2])
    doc, _ = probe_json("--listen", "1", *server)  # the document keeps what was sent
    assert [e["params"].get("logger", "absent") for e in doc["events"]] == ["absent", None, "db"]
    config = tmp_path / "logs.json"
    entry = {"command": server[1], "args": server[2:], "timeouts": {"closeGrace": 0.5, "terminateGrace": 1}}
    config.write_text(json.dumps({"mcpServers": {"logs": entry}}))
    run = Running("run", str(config))
    try:
        wait_for_all(run, "error [db]")
    finally:
        status, out, err = interrupt(run)
    assert "logs  notification notifications/message info: no logger" in out and "[null]" not in out

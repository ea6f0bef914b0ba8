"""``mcpl-host probe`` end to end: the CLI as a child process (forked from one that has
imported it, tests/forkserver.py; the console script itself in
``test_console_script_is_installed``), against the bundled demo server and the
scripted fixture server (``fixtures/scripted_server.py``).

No mocks and no sleeps: a test that must act mid-run (Ctrl-C) waits for a line of the
CLI's output. Every child gets a generous timeout so a hang fails instead of blocking.
"""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from . import forkserver
from .conftest import FIXTURES

TIMEOUT = 60  # seconds for any one CLI run
SECRET = "supersecretvalue"
CLI = forkserver.CLI


def _demo_module() -> Any:
    spec = importlib.util.spec_from_file_location("demo_server", FIXTURES / "demo_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return forkserver.run([*CLI, *args], capture_output=True, text=True, timeout=TIMEOUT)


def probe_json(*args: str, status: int = 0) -> tuple[dict[str, Any], str]:
    """Run ``probe --json``; check the exit status and that stdout is one JSON document."""
    done = run_cli("probe", "--json", *args)
    assert done.returncode == status, done.stderr
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout), done.stderr


def scripted(tmp_path: Path, steps: list[Any]) -> list[str]:
    """``-- python scripted_server.py SCRIPT RECORD`` for these steps."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps(steps), encoding="utf-8")
    return [
        "--",
        sys.executable,
        str(FIXTURES / "scripted_server.py"),
        str(script),
        str(tmp_path / "record.jsonl"),
    ]


def initialize_reply(capabilities: dict[str, Any] | None = None, version: str = "2025-06-18") -> list[Any]:
    return [
        {"expect": {"method": "initialize"}},
        {
            "reply": {
                "protocolVersion": version,
                "capabilities": capabilities or {},
                "serverInfo": {"name": "scripted", "version": "7"},
            }
        },
    ]


class Running:
    """The CLI as a running child (forked, ``forkserver.Forked``) whose stdout and stderr lines
    are pumped into queues."""

    def __init__(self, *args: str) -> None:
        self.process = forkserver.Forked([*CLI, *args])
        self.lines: dict[str, queue.Queue[str | None]] = {}
        self.seen: dict[str, list[str]] = {"stdout": [], "stderr": []}
        for name in ("stdout", "stderr"):
            self.lines[name] = queue.Queue()
            threading.Thread(target=self._pump, args=(name,), daemon=True).start()

    def _pump(self, name: str) -> None:
        for line in getattr(self.process, name):
            self.lines[name].put(line)
        self.lines[name].put(None)

    def _take(self, name: str) -> str | None:
        line = self.lines[name].get(timeout=TIMEOUT)
        if line is not None:
            self.seen[name].append(line)
        return line

    def wait_for(self, name: str, marker: str) -> None:
        while True:
            line = self._take(name)
            assert line is not None, f"{name} ended before {marker!r}: {self.seen}"
            if marker in line:
                return

    def finish(self) -> tuple[int, str, str]:
        status = self.process.wait(timeout=TIMEOUT)
        for name in ("stdout", "stderr"):
            while self._take(name) is not None:
                pass
        return status, "".join(self.seen["stdout"]), "".join(self.seen["stderr"])


# --- the demo server ---------------------------------------------------------------------------


def test_probe_demo_json() -> None:
    doc, _ = probe_json()
    assert doc["ok"] is True and doc["error"] is None
    assert doc["server"] == {"name": "mcpl-demo", "version": "0.1.0"}
    assert doc["protocolVersion"] == "2025-11-25"
    assert [tool["name"] for tool in doc["tools"]] == ["echo", "add", "now"]
    assert doc["tools"][0]["inputSchema"]["required"] == ["text"]  # the raw tool objects
    assert doc["mcpl"] == _demo_module().MCPL_ADVERTISEMENT
    assert doc["grant"]["state"] == "ready"
    assert "pushEvents" in doc["grant"]["effectiveCapabilities"]
    assert doc["grant"]["deniedCapabilities"] == []
    assert doc["grant"]["receipt"] == {"accepted": True}
    assert [r["uri"] for r in doc["resources"]] == ["demo://readme"]
    assert doc["resourceTemplates"] == []
    assert [p["name"] for p in doc["prompts"]] == ["greet"]


def test_listen_reports_accepted_push_events() -> None:
    doc, _ = probe_json("--env", "DEMO_PUSH_INTERVAL=0.3", "--listen", "3")
    pushes = [event for event in doc["events"] if event["kind"] == "push/event"]
    assert pushes, doc["events"]
    assert [e["params"]["eventId"] for e in pushes] == [f"tick-{n}" for n in range(1, len(pushes) + 1)]
    assert all(e["answer"] == {"accepted": True} and "error" not in e for e in pushes)
    assert all(e["method"] == "push/event" and e["time"].endswith("Z") for e in pushes)
    assert doc["listenedSeconds"] >= 3 and doc["listenInterrupted"] is False


def test_demo_channels_show_the_publish_target_the_thread_and_a_reference_stub() -> None:
    """DEMO_CHANNELS: probe shows the lobby's publish target (RFC-011 §3), the tick's thread
    origin, and the reference of the last tick as the stub a model sees (MCPL §19), never its
    URI. One tick, sent 0.2 s after the lobby is registered: the window is 3 s."""
    doc, out = probe_json(
        "--env",
        "DEMO_CHANNELS=1",
        "--env",
        "DEMO_PUSH_COUNT=1",
        "--env",
        "DEMO_PUSH_INTERVAL=0.2",
        "--listen",
        "3",
    )
    assert doc["channels"] == [
        {
            "id": "demo:lobby",
            "type": "demo",
            "label": "Lobby",
            "direction": "bidirectional",
            "capabilities": {"publish": {"target": "exact"}},
        }
    ]
    assert {"channels.register", "channels.publish"} <= set(doc["grant"]["effectiveCapabilities"])
    pushes = [event for event in doc["events"] if event["kind"] == "push/event"]
    assert [push["params"]["eventId"] for push in pushes] == ["tick-1"], doc["events"]
    assert pushes[0]["params"]["origin"] == {
        "source": "demo-clock",
        "mcplChannelId": "demo:lobby",
        "threadId": "ticks",
    }
    text, stub = pushes[0]["modelContent"]
    assert text == {"type": "text", "text": "tick 1"}
    assert stub["text"].startswith("[reference ref_") and "not-for-models" not in stub["text"]
    assert 'name "tick-1.wav"' in stub["text"] and stub["_meta"]["mcpl-host/referenceId"] in stub["text"]


def test_denied_push_events_are_reported_refused() -> None:
    doc, _ = probe_json("--env", "DEMO_PUSH_INTERVAL=0.3", "--deny", "pushEvents", "--listen", "2")
    assert doc["grant"]["effectiveCapabilities"] == ["tools"]
    assert doc["grant"]["deniedCapabilities"] == ["pushEvents"]
    assert doc["grant"]["receipt"]["mode"] == "degraded"
    pushes = [event for event in doc["events"] if event["kind"] == "push/event"]
    assert pushes, doc["events"]
    for event in pushes:
        assert event["error"]["code"] == -32002
        assert event["error"]["data"] == {"capability": "pushEvents"}
        assert "answer" not in event


def test_grant_patterns_replace_the_default_policy() -> None:
    doc, _ = probe_json("--grant", "tools")
    assert doc["grant"]["effectiveCapabilities"] == ["tools"]
    assert doc["grant"]["deniedCapabilities"] == ["pushEvents"]


def test_terminal_report_names_server_and_tools() -> None:
    done = run_cli("probe")
    assert done.returncode == 0, done.stderr
    for text in ("mcpl-demo", "2025-11-25", "echo", "add", "now", "demo://readme", "greet", "ready"):
        assert text in done.stdout


def test_terminal_listen_prints_events_live() -> None:
    done = run_cli("probe", "--env", "DEMO_PUSH_INTERVAL=0.3", "--listen", "3")
    assert done.returncode == 0, done.stderr
    assert "Listening for 3 s" in done.stdout
    assert "demo.clock tick-1: tick 1  → accepted" in done.stdout


def test_ctrl_c_while_listening_still_reports_and_exits_0() -> None:
    cli = Running("probe", "--listen", "inf")
    cli.wait_for("stdout", "Listening until Ctrl-C")
    cli.process.send_signal(signal.SIGINT)
    status, out, err = cli.finish()
    assert status == 0, err
    assert "echo" in out and "stopped by Ctrl-C" in out
    assert "Traceback" not in err


def test_a_reader_going_away_is_not_a_crash() -> None:
    process = subprocess.Popen(
        [*CLI, "probe", "--env", "DEMO_PUSH_INTERVAL=0.1", "--listen", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline()  # the CLI exits within seconds: never blocks for long
    process.stdout.close()  # as `mcpl-host probe | head -1` does
    status = process.wait(timeout=TIMEOUT)
    err = process.stderr.read()
    process.stderr.close()
    assert "mcpl-demo" in first
    assert status == 0 and "Traceback" not in err and "Error" not in err


# --- failures ----------------------------------------------------------------------------------


def test_handshake_refused_exits_1_with_the_code(tmp_path: Path) -> None:
    steps = [
        {"expect": {"method": "initialize"}},
        {"reply_error": {"code": -32602, "message": "Unsupported client"}},
    ]
    doc, err = probe_json(*scripted(tmp_path, steps), status=1)
    assert doc["ok"] is False
    assert doc["error"]["type"] == "InitializeError"
    assert doc["error"]["code"] == -32602
    assert "Unsupported client" in doc["error"]["message"] and "\n" not in doc["error"]["message"]
    assert err.strip().splitlines() == [f"Error: {doc['error']['message']} (code -32602)"]


def test_server_exiting_at_once_shows_its_stderr_tail(tmp_path: Path) -> None:
    steps = [{"stderr": "fatal: no config file"}, {"stderr": "giving up"}, {"exit": 3}]
    args = scripted(tmp_path, steps)
    doc, _ = probe_json(*args, status=1)
    assert doc["error"]["stderrTail"] == ["fatal: no config file", "giving up"]
    assert "status 3" in doc["error"]["message"]
    done = run_cli("probe", *args)  # on a terminal: the sentence, then the tail under it
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines[0].startswith("Error: ") and "status 3" in lines[0]
    assert "fatal: no config file" in lines[-2] and "giving up" in lines[-1]


def test_unsupported_protocol_version_exits_1_naming_it(tmp_path: Path) -> None:
    doc, _ = probe_json(*scripted(tmp_path, initialize_reply(version="1999-01-01")), status=1)
    assert doc["error"]["type"] == "InitializeError"
    assert "1999-01-01" in doc["error"]["message"]


def test_command_not_found_exits_1() -> None:
    doc, err = probe_json("--", str(Path(__file__).parent / "no-such-server"), status=1)
    assert "no-such-server" in doc["error"]["message"]
    assert err.startswith("Error: ")


def test_secrets_never_reach_the_output(tmp_path: Path) -> None:
    steps = [
        {"echo_env": "TOKEN"},
        {"expect": {"method": "initialize"}},
        {"reply_error": {"code": -32600, "message": f"bad token {SECRET}", "data": {SECRET: SECRET}}},
    ]
    args = ["--env", f"TOKEN={SECRET}", "--log-level", "debug", *scripted(tmp_path, steps)]
    doc, _ = probe_json(*args, status=1)
    assert "env TOKEN=[redacted]" in doc["error"]["stderrTail"]
    assert "[redacted]" in doc["error"]["message"]
    for done in (run_cli("probe", "--json", *args), run_cli("probe", *args)):
        assert done.returncode == 1
        assert SECRET not in done.stdout and SECRET not in done.stderr
        assert "[redacted]" in done.stderr


def test_ctrl_c_during_handshake_exits_130(tmp_path: Path) -> None:
    steps = [{"expect": {"method": "initialize"}}, {"stderr": "got initialize"}, {"hang": True}]
    cli = Running("probe", "--json", "--stderr-level", "warning", *scripted(tmp_path, steps))
    cli.wait_for("stderr", "got initialize")
    cli.process.send_signal(signal.SIGINT)
    status, out, err = cli.finish()
    assert status == 130, err
    doc = json.loads(out)
    assert doc["ok"] is False and doc["error"]["type"] == "Interrupted"
    assert "handshake" in doc["error"]["message"]


# --- plain MCP servers, server requests --------------------------------------------------------


def test_list_errors_are_unavailable_not_failures(tmp_path: Path) -> None:
    tool = {"name": "t1", "inputSchema": {"type": "object"}}
    steps = [
        *initialize_reply({"tools": {}, "prompts": {}}),
        {"wait_for": {"method": "tools/list"}},
        {"reply": {"tools": [tool]}},
        {"wait_for": {"method": "prompts/list"}},
        {"reply_error": {"code": -32601, "message": "Method not found"}},
    ]
    doc, _ = probe_json(*scripted(tmp_path, steps))
    assert doc["ok"] is True
    assert doc["server"] == {"name": "scripted", "version": "7"}
    assert doc["mcpl"] is None and doc["grant"]["state"] == "none"
    assert doc["tools"] == [tool]
    assert doc["unavailable"]["prompts"]["code"] == -32601
    assert doc["skipped"] == ["resources", "resourceTemplates"]  # not advertised: not asked


def test_server_requests_are_answered_32601_and_recorded(tmp_path: Path) -> None:
    steps = [
        *initialize_reply(),
        {"wait_for": {"method": "notifications/initialized"}},
        {"send": {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}},
        {"send": {"jsonrpc": "2.0", "id": "r1", "method": "roots/list"}},
        {"wait_response": "r1", "expect_error_code": -32601},
        {"stderr": "answered"},
    ]
    doc, _ = probe_json("--listen", "1", *scripted(tmp_path, steps))
    by_kind = {event["kind"]: event for event in doc["events"]}
    assert by_kind["notification"]["method"] == "notifications/tools/list_changed"
    assert by_kind["request"]["method"] == "roots/list"
    assert by_kind["request"]["error"]["code"] == -32601


def test_server_text_cannot_drive_the_terminal(tmp_path: Path) -> None:
    tool = {
        "name": "evil\u202e",
        "description": "\u001b[2J\u001b]0;title\u0007[bold]x[/bold]",
        "inputSchema": {"type": "object"},
    }
    steps = [
        *initialize_reply({"tools": {}}),
        {"wait_for": {"method": "tools/list"}},
        {"reply": {"tools": [tool]}},
    ]
    done = run_cli("probe", *scripted(tmp_path, steps))
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout and "\u202e" not in done.stdout
    assert "\\u001b[2J" in done.stdout and "[bold]x[/bold]" in done.stdout  # shown, not obeyed
    assert "evil\\u202e" in done.stdout


def test_bidi_and_invisible_characters_are_escaped_alike_in_log_lines_and_the_report(tmp_path: Path) -> None:
    name = "file\u202etxt.exe\u2066\u200b\ufeff"
    shown = "file\\u202etxt.exe\\u2066\\u200b\\ufeff"
    steps = [
        {"stderr": f"loading {name}"},
        *initialize_reply({"tools": {}}),
        {"wait_for": {"method": "tools/list"}},
        {"reply": {"tools": [{"name": name, "description": f'say "{name}"', "inputSchema": {}}]}},
    ]
    done = forkserver.run(
        [*CLI, "probe", "--stderr-level", "warning", *scripted(tmp_path, steps)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "COLUMNS": "200"},  # no cell folds
    )
    assert done.returncode == 0, done.stderr
    assert f"loading {shown}" in done.stderr  # the server's stderr, as a log line
    assert shown in done.stdout and f'say "{shown}"' in done.stdout  # the report keeps quotes
    for char in "\u202e\u2066\u200b\ufeff":
        assert char not in done.stdout + done.stderr


def test_values_orjson_cannot_write_are_still_reported(tmp_path: Path) -> None:
    big = 2**70  # kept exact by the library's parser (docs/protocol.md D6)
    tool = {"name": "odd", "description": "half \ud800 a pair", "inputSchema": {"maximum": big}}
    steps = [
        *initialize_reply({"tools": {}}),
        {"wait_for": {"method": "tools/list"}},
        {"reply": {"tools": [tool]}},
    ]
    args = scripted(tmp_path, steps)
    doc, _ = probe_json(*args)
    # Strict JSON holds no lone surrogate: it is written as the escaper's text (the number
    # beyond 64 bits stays exact).
    assert doc["tools"] == [{**tool, "description": "half \\ud800 a pair"}]
    done = run_cli("probe", *args)
    assert done.returncode == 0, done.stderr
    assert "half \\ud800 a pair" in done.stdout


# --- usage -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--env", "NOEQUALS"],
        ["--env", "=value"],
        ["--cwd", "/no/such/directory"],
        ["--timeout", "-1"],
        ["--timeout", "0"],
        ["--request-timeout", "soon"],
        ["--listen", "-2"],
        ["--listen", "nan"],
        ["--log-level", "loud"],
    ],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    done = run_cli("probe", "--json", *args)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert "Error" in done.stderr and "Traceback" not in done.stderr


def test_a_bad_env_value_is_not_echoed() -> None:
    done = run_cli("probe", "--env", SECRET)
    assert done.returncode == 2 and SECRET not in done.stderr


def test_help_and_version() -> None:
    top = run_cli("--help")
    assert top.returncode == 0 and "probe" in top.stdout
    probe = run_cli("probe", "--help")
    assert probe.returncode == 0
    for text in ("--listen SECONDS", "--env KEY=VALUE", "--grant PATTERN", "Exit status", "130"):
        assert text in probe.stdout
    version = run_cli("--version")
    assert version.returncode == 0 and "0.1.0" in version.stdout


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "mcpl-host"
    if not script.exists():
        pytest.skip("no mcpl-host console script next to this interpreter")
    done = subprocess.run(
        [str(script), "probe", "--json"], capture_output=True, text=True, timeout=TIMEOUT, env={**os.environ}
    )
    assert done.returncode == 0 and json.loads(done.stdout)["ok"] is True


def test_server_exiting_while_listening_is_a_failure(tmp_path: Path) -> None:
    steps = [
        *initialize_reply({"tools": {}}),
        {"expect": {"method": "notifications/initialized"}},
        {"wait_for": {"method": "tools/list"}, "timeout": 30},
        {"reply": {"tools": []}},
        {"stderr": "server giving up"},
        {"exit": 7},
    ]
    doc, _ = probe_json("--listen", "30", *scripted(tmp_path, steps), status=1)
    assert doc["ok"] is False
    assert "status 7" in doc["error"]["message"]
    assert any("server giving up" in line for line in doc["error"]["stderrTail"])


def test_deeply_nested_tool_schema_is_cut_in_the_report(tmp_path: Path) -> None:
    schema = '{"a":' * 900 + "1" + "}" * 900
    steps = [
        *initialize_reply({"tools": {}}),
        {"expect": {"method": "notifications/initialized"}},
        {"expect": {"method": "tools/list"}},
        {"raw": '{"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"deep","inputSchema":' + schema + "}]}}"},
    ]
    doc, _ = probe_json(*scripted(tmp_path, steps))
    assert doc["ok"] is True and doc["tools"][0]["name"] == "deep"
    assert "nested deeper than" in json.dumps(doc["tools"][0]["inputSchema"])

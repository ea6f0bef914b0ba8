"""``mcpl-host call``, ``read``, ``prompt`` and ``send`` end to end: the CLI as a child process
against the bundled demo server, ``mcp-server-time`` (PyPI) and the scripted fixture server.

stdout must be exactly one JSON document (what ``| jq`` reads) or, with ``--text``, the text;
the exit status says how the call went. Progress lines need stderr to be a terminal: that
test runs the CLI in a real pseudo-terminal (pexpect).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pexpect
import pytest

from .conftest import FIXTURES
from .forkpty import spawn_pty
from .test_cli import CLI, TIMEOUT, run_cli, scripted
from .wire import initialize_steps

DEMO = ["--", sys.executable, str(FIXTURES / "demo_server.py")]
EXTRAS = ["--env", "DEMO_EXTRAS=1"]
TIME = ["--", sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]


def one_document(stdout: str) -> Any:
    """stdout parsed as exactly one JSON document (json.loads refuses anything after it)."""
    return json.loads(stdout)


def test_call_with_key_value_arguments_prints_the_result_as_one_json_document() -> None:
    done = run_cli("call", "add", "a=2", "b=3.5")
    assert done.returncode == 0, done.stderr
    assert one_document(done.stdout) == {
        "content": [{"type": "text", "text": "5.5"}],
        "structuredContent": {"sum": 5.5},
    }
    assert done.stderr == ""


def test_call_with_one_json_object_and_the_server_command_after_the_dashes() -> None:
    done = run_cli("call", "add", '{"a": 1, "b": 2}', *DEMO)
    assert done.returncode == 0, done.stderr
    assert one_document(done.stdout)["structuredContent"] == {"sum": 3}


def test_call_text_prints_the_text_alone() -> None:
    done = run_cli("call", "--text", "echo", "text=hello world", *DEMO)
    assert (done.returncode, done.stdout) == (0, "hello world\n"), done.stderr


def test_a_schema_error_names_the_argument_exits_2_and_sends_nothing(tmp_path: Path) -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}, "s": {"type": "string"}},
        "required": ["s"],
    }
    steps = [
        *initialize_steps({"tools": {}}, {"name": "s", "version": "1"}),
        {"expect": {"method": "notifications/initialized"}},
        {"expect": {"method": "tools/list"}},
        {"reply": {"tools": [{"name": "t", "inputSchema": schema}]}},
    ]
    wrong_type = run_cli("call", "t", "n=many", "s=x", *scripted(tmp_path, steps))
    assert wrong_type.returncode == 2 and wrong_type.stdout == ""
    assert "argument 'n' must be an integer, not 'many'" in wrong_type.stderr
    missing = run_cli("call", "t", '{"n": 1}', *scripted(tmp_path, steps))
    assert missing.returncode == 2 and missing.stdout == ""
    assert "argument 's' is required" in missing.stderr and "nothing was sent" in missing.stderr
    entries = [json.loads(line) for line in (tmp_path / "record.jsonl").read_text().splitlines()]
    methods = [json.loads(entry["line"]).get("method") for entry in entries if "line" in entry]
    methods = [method for method in methods if method != "server/discover"]  # the era probe
    assert methods == ["initialize", "notifications/initialized", "tools/list"] * 2  # no tools/call


def test_an_unknown_tool_exits_2_naming_the_tools() -> None:
    done = run_cli("call", "ad", "a=1")
    assert done.returncode == 2 and done.stdout == ""
    assert "the server has no tool 'ad' (it has: echo, add, now)" in done.stderr


def test_is_error_exits_1_with_the_result_on_stdout() -> None:
    done = run_cli("call", *EXTRAS, "fail", "message=boom")
    assert done.returncode == 1
    assert one_document(done.stdout) == {"content": [{"type": "text", "text": "boom"}], "isError": True}
    assert "the tool answered isError" in done.stderr


def test_mcp_server_time_key_value_json_and_is_error() -> None:
    utc = run_cli("call", "get_current_time", "timezone=UTC", *TIME)
    assert utc.returncode == 0, utc.stderr
    assert one_document(utc.stdout)["structuredContent"]["timezone"] == "UTC"
    converted = run_cli(
        "call",
        "convert_time",
        '{"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}',
        *TIME,
    )
    assert converted.returncode == 0, converted.stderr
    assert one_document(converted.stdout)["structuredContent"]["target"]["datetime"].endswith(
        "T21:00:00+09:00"
    )
    bad_zone = run_cli("call", "get_current_time", "timezone=Nowhere/Special", *TIME)
    assert bad_zone.returncode == 1
    assert one_document(bad_zone.stdout)["isError"] is True
    missing = run_cli("call", "convert_time", "time=12:00", *TIME)
    assert missing.returncode == 2 and "argument 'source_timezone' is required" in missing.stderr


def test_an_error_answer_is_an_error_document_and_exit_1() -> None:
    done = run_cli("read", "demo://nope")
    assert done.returncode == 1
    assert one_document(done.stdout) == {
        "error": {"code": -32002, "message": "Resource not found", "data": None}
    }
    assert "server error -32002: Resource not found" in done.stderr


def test_read_prompt_and_send() -> None:
    read = run_cli("read", "demo://readme")
    assert read.returncode == 0, read.stderr
    assert one_document(read.stdout)["contents"][0]["uri"] == "demo://readme"
    text = run_cli("read", "--text", "demo://readme")
    assert text.stdout.startswith("mcpl-demo is the example MCPL server") and not text.stdout.endswith("\n\n")
    prompt = run_cli("prompt", "--text", "greet", "name=Ada")
    assert (prompt.returncode, prompt.stdout) == (0, "Say hello to Ada.\n"), prompt.stderr
    missing = run_cli("prompt", "greet")
    assert missing.returncode == 2 and "argument 'name' is required" in missing.stderr
    ping = run_cli("send", "ping")
    assert (ping.returncode, one_document(ping.stdout)) == (0, {})
    listed = run_cli("send", "tools/list", "{}", *DEMO)
    assert [tool["name"] for tool in one_document(listed.stdout)["tools"]] == ["echo", "add", "now"]
    unknown = run_cli("send", "no/such/method")
    assert unknown.returncode == 1 and one_document(unknown.stdout)["error"]["code"] == -32601
    bad = run_cli("send", "ping", "[1")
    assert bad.returncode == 2 and "PARAMS is not JSON" in bad.stderr and bad.stdout == ""


def test_a_server_that_fails_exits_1_with_its_stderr_tail(tmp_path: Path) -> None:
    done = run_cli("call", "x", *scripted(tmp_path, [{"stderr": "fatal: no config"}, {"exit": 3}]))
    assert done.returncode == 1 and done.stdout == ""
    assert "Error:" in done.stderr and "fatal: no config" in done.stderr and "Traceback" not in done.stderr


def test_secrets_are_redacted_from_the_result() -> None:
    secret = "hunter2-very-secret"
    done = run_cli("call", "--secret", f"X={secret}", "echo", f"text=the password is {secret}")
    assert done.returncode == 0, done.stderr
    assert one_document(done.stdout)["content"][0]["text"] == "the password is [redacted]"
    assert secret not in done.stdout + done.stderr


def test_usage_errors_exit_2() -> None:
    assert run_cli("call").returncode == 2
    both = run_cli("call", "add", "--ws", "ws://127.0.0.1:9/", *DEMO)
    assert both.returncode == 2 and "not a command and --ws" in both.stderr
    listing = run_cli("--help")
    assert all(name in listing.stdout for name in ("call", "read", "prompt", "send"))


def test_progress_is_shown_on_stderr_when_it_is_a_terminal() -> None:
    child = spawn_pty(
        CLI[0], [*CLI[1:], "call", *EXTRAS, "--text", "steps", "count=3"], encoding="utf-8", timeout=TIMEOUT
    )
    child.expect_exact("progress 1/3: step 1")
    child.expect_exact("progress 3/3: step 3")
    child.expect_exact("counted to 3")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    piped = run_cli("call", *EXTRAS, "--text", "steps", "count=2")
    assert piped.returncode == 0 and "progress" not in piped.stderr and piped.stdout == "counted to 2\n"


@pytest.mark.parametrize("command", ["call", "read", "prompt", "send"])
def test_each_command_has_help_with_exit_statuses(command: str) -> None:
    done = run_cli(command, "--help")
    words = " ".join(done.stdout.split())
    assert done.returncode == 0 and "Exit status" in words and "[-- COMMAND [ARG...]]" in words

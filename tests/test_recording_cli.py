"""``--record FILE`` through the real CLI (forked, tests/forkserver.py): every command that
connects writes a recording of the bundled demo server, valid against the shipped schema;
``run`` records a server's restarts; no secret (environment, header, token, URL query, tool
argument) reaches the file, over stdio, Streamable HTTP and WebSocket (whose close code is
recorded).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from . import forkserver
from .conftest import FIXTURES
from .test_cli import CLI, TIMEOUT
from .test_recording import valid_file
from .wire import bridge_url

PY = sys.executable
SECRET = "env-secret-value-4711"
HEADER_SECRET = "header-secret-value-0815"
TOKEN = "bearer-token-value-2342"
QUERY_SECRET = "query-secret-value-1337"
GITHUB_TOKEN = "ghp_" + "a1B2c3D4" * 5  # a shape every redactor masks, given to nobody
ALL_SECRETS = (SECRET, HEADER_SECRET, TOKEN, QUERY_SECRET, GITHUB_TOKEN)


def record(tmp_path: Path, *args: str, input: str | None = None, status: int = 0) -> list[dict[str, Any]]:
    """Run the CLI with ``--record`` (after the command's words), check its exit status,
    that no secret is in the file's bytes, and return its entries (schema-checked)."""
    path = tmp_path / "session.jsonl"
    command, rest = args[0], list(args[1:])
    where = rest.index("--") if "--" in rest else len(rest)
    argv = [*CLI, command, *rest[:where], "--record", str(path), *rest[where:]]
    done = forkserver.run(argv, input=input, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == status, done.stderr
    assert "Traceback" not in done.stderr
    data = path.read_bytes()
    for secret in ALL_SECRETS:
        assert secret.encode() not in data, secret
    return valid_file(path)


def kinds(entries: list[dict[str, Any]]) -> set[str]:
    return {entry["kind"] for entry in entries}


def lifecycle(entries: list[dict[str, Any]]) -> list[str]:
    return [entry["event"] for entry in entries if entry["kind"] == "lifecycle"]


def methods(entries: list[dict[str, Any]], kind: str = "sent") -> list[str]:
    return [
        entry["message"]["method"]
        for entry in entries
        if entry["kind"] == kind and "message" in entry and "method" in entry["message"]
    ]


COMMANDS = {
    "probe": ["probe"],
    "tools": ["tools"],
    "resources": ["resources"],
    "prompts": ["prompts"],
    "call": ["call", "echo", f"text=say {GITHUB_TOKEN}"],
    "read": ["read", "demo://readme"],
    "prompt": ["prompt", "greet", "name=you"],
    "send": ["send", "ping"],
    "check": ["check", "--only", "init.answers", "--listen", "0", "--reduction-listen", "0"],
    "shell": ["shell"],
}
SENT = {
    "tools": "tools/list",
    "resources": "resources/list",
    "prompts": "prompts/list",
    "call": "tools/call",
    "read": "resources/read",
    "prompt": "prompts/get",
    "send": "ping",
    "shell": "tools/list",
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_record_on_each_command(tmp_path: Path, command: str) -> None:
    entries = record(
        tmp_path,
        *COMMANDS[command],
        "--env",
        f"API_TOKEN={SECRET}",
        input="tools\n" if command == "shell" else None,
    )
    assert {"sent", "received", "lifecycle", "decision"} <= kinds(entries)
    assert lifecycle(entries)[:2] == ["spawn", "connect"] and lifecycle(entries)[-2:] == ["exit", "closed"]
    assert methods(entries)[0] in ("initialize", "server/discover")
    assert SENT.get(command, "initialize") in methods(entries)
    assert {entry["server"] for entry in entries} == {"mcpl-demo"}


def test_run_records_each_restart_on_a_new_connection(tmp_path: Path) -> None:
    crashing = {
        "command": PY,
        "args": [str(FIXTURES / "proc_exit.py"), "3"],
        "env": {"API_TOKEN": SECRET},
        "restart": {"baseDelay": 0.01, "maxDelay": 0.01, "jitter": 0, "maxFailures": 2},
    }
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"crash": crashing}}), encoding="utf-8")
    entries = record(tmp_path, "run", str(config), status=1)  # 1: every server gave up
    events = [(entry["connection"], entry["event"]) for entry in entries if entry["kind"] == "lifecycle"]
    restarts = [index for index, (_, event) in enumerate(events) if event == "restart"]
    assert len(restarts) == 1  # maxFailures 2: one restart, then the server gives up
    before, after = events[: restarts[0]], events[restarts[0] + 1 :]
    # Each transport (the era probe's restart of a stdio server is one too) has its number,
    # 1, 2, ..., and its whole lifecycle; the restart names the transport that ended.
    for part in (before, after):
        numbers = sorted({number for number, _ in part})
        for number in numbers:
            assert [event for n, event in part if n == number] == ["spawn", "connect", "exit", "closed"]
    assert [number for number, _ in before + after] == sorted(number for number, _ in before + after)
    assert events[restarts[0]][0] == before[-1][0]
    assert {entry["status"] for entry in entries if entry.get("event") == "exit"} == {3}


def test_an_unwritable_record_file_is_a_usage_error(tmp_path: Path) -> None:
    done = forkserver.run(
        [*CLI, "probe", "--record", str(tmp_path / "no" / "such" / "dir.jsonl")],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 2 and "--record: cannot write" in done.stderr


# --- secrets over HTTP and WebSocket ------------------------------------------------------------


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    """The demo server over Streamable HTTP (a new child per session)."""
    with bridge_url(
        [PY, str(FIXTURES / "http_bridge.py"), "--", PY, str(FIXTURES / "demo_server.py")], "http"
    ) as url:
        yield f"{url}mcp"


def test_http_secrets_never_reach_the_recording(tmp_path: Path, http_url: str) -> None:
    entries = record(
        tmp_path,
        "call",
        "echo",
        f"text={HEADER_SECRET} {TOKEN} {QUERY_SECRET} {GITHUB_TOKEN}",
        "--url",
        f"{http_url}?token={QUERY_SECRET}",
        "--header",
        f"X-Api-Key={HEADER_SECRET}",
        "--token",
        TOKEN,
    )
    connect = next(entry for entry in entries if entry["kind"] == "lifecycle")
    assert connect["event"] == "connect" and connect["transport"] == "http"
    assert connect["url"] == f"{http_url}?token=[redacted]"
    assert "http-session" in lifecycle(entries)
    assert {entry["transport"] for entry in entries if entry["kind"] in ("sent", "received")} == {"http"}
    answer = next(
        entry
        for entry in entries
        if entry["kind"] == "received"
        and "result" in entry["message"]
        and "content" in entry["message"]["result"]
    )
    assert answer["message"]["result"]["content"][0]["text"].count("[redacted]") == 4


def test_websocket_close_code_is_recorded(tmp_path: Path) -> None:
    argv = [
        PY,
        str(FIXTURES / "ws_bridge.py"),
        "--close-on",
        "tools/call",
        "--",
        PY,
        str(FIXTURES / "demo_server.py"),
    ]
    with bridge_url(argv, "ws") as url:
        entries = record(
            tmp_path, "call", "add", "a=1", "b=2", "--ws", f"{url}?token={QUERY_SECRET}", status=1
        )
    closes = [entry for entry in entries if entry["kind"] == "lifecycle" and entry["event"] == "ws-close"]
    assert [entry["code"] for entry in closes] == [1011]
    assert {entry["transport"] for entry in entries if entry["kind"] in ("sent", "received")} == {"websocket"}

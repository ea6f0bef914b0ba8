"""Hostile servers against ``mcpl-host call``: what a tool's ``inputSchema`` (server data)
makes the CLI do before anything is sent (mcpl_host/coerce.py ``schema_problems``).

The CLI runs as a child process against ``fixtures/scripted_server.py`` over real pipes; a
loopback HTTP listener stands for a remote ``$ref`` target. A run that does not end within
``HANG_SECONDS`` is a hang (the child is killed): the bound detects a hang, it does not
measure speed (the inputs below would take hours).
"""

from __future__ import annotations

import http.server
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from . import forkserver
from .test_cli import CLI, TIMEOUT, run_cli, scripted

HANG_SECONDS = 20
MCP_RESULT = {
    "protocolVersion": "2025-06-18",
    "capabilities": {"tools": {}},
    "serverInfo": {"name": "x", "version": "0"},
}


def call_within(args: list[str], seconds: float) -> subprocess.CompletedProcess[str]:
    """Run ``mcpl-host call`` (``args``): it must end within ``seconds`` (else it was still
    checking the arguments) and without a traceback."""
    try:
        done = forkserver.run(args, capture_output=True, text=True, timeout=seconds)
    except subprocess.TimeoutExpired:
        pytest.fail(f"mcpl-host call was still checking the arguments after {seconds} s")
    assert "Traceback" not in done.stderr
    return done


def tool_server(tmp_path: Path, tool: dict[str, Any], result: dict[str, Any] | None = None) -> list[str]:
    """A server that lists ``tool`` and answers one ``tools/call`` with ``result``."""
    steps: list[Any] = [
        {"expect": {"method": "initialize"}},
        {"reply": MCP_RESULT},
        {"expect": {"method": "notifications/initialized"}},
        {"wait_for": {"method": "tools/list"}},
        {"reply": {"tools": [tool]}},
        {"wait_for": {"method": "tools/call"}},
        {"reply": result or {"content": [{"type": "text", "text": "ok"}]}},
    ]
    return scripted(tmp_path, steps)


class _Recorder(http.server.BaseHTTPRequestHandler):
    fetched: list[str]

    def do_GET(self) -> None:
        self.fetched.append(self.path)
        body = b'{"type": "object"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def listener() -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server: its base URL and the paths it was asked for."""
    fetched: list[str] = []
    handler = type("Recorder", (_Recorder,), {"fetched": fetched})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", fetched
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_remote_ref_in_an_input_schema_is_never_fetched(
    tmp_path: Path, listener: tuple[str, list[str]]
) -> None:
    # Fixed here (coerce.schema_problems now validates with the local metaschema registry).
    # Before, jsonschema's default registry retrieved the URL: a server could make
    # `mcpl-host call` issue a GET to any address it named (and the fetched schema decided
    # whether the operator's arguments were sent).
    base, fetched = listener
    tool = {
        "name": "t",
        "inputSchema": {"type": "object", "properties": {"a": {"$ref": f"{base}/remote-schema.json"}}},
    }
    done = run_cli("call", "t", "a=1", *tool_server(tmp_path, tool))
    assert fetched == []
    assert "Traceback" not in done.stderr
    assert "cannot be checked" in done.stderr  # the unusable schema is said, arguments sent unchecked
    assert done.returncode == 0, done.stderr


def test_a_catastrophic_pattern_in_an_input_schema_does_not_hang_call(tmp_path: Path) -> None:
    tool = {
        "name": "t",
        "inputSchema": {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}}},
    }
    args = [*CLI, "call", "t", "a=" + "a" * 60 + "b", *tool_server(tmp_path, tool)]
    done = call_within(args, HANG_SECONDS)
    # The check runs in a worker stopped after Limits.max_schema_check_seconds: the schema
    # cannot be checked, said so, and the arguments go unchecked (as for an unresolvable $ref).
    assert "cannot be checked: checking it took longer than Limits.max_schema_check_seconds" in done.stderr
    assert done.returncode == 0, done.stderr


def test_an_output_schema_whose_dialect_is_not_a_string_is_a_clear_error(tmp_path: Path) -> None:
    tool = {
        "name": "t",
        "inputSchema": {"type": "object"},
        "outputSchema": {"$schema": 5, "type": "object"},
    }
    result: dict[str, Any] = {"content": [], "structuredContent": {}}
    done = forkserver.run(
        [*CLI, "call", "t", *tool_server(tmp_path, tool, result)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert "Traceback" not in done.stderr
    assert "outputSchema" in done.stderr
    assert done.returncode == 1, done.stderr

"""``mcpl-host check --against FILE``: the live server's answers compared with a recording
(check ``recording.same``, docs/protocol.md RP8), the first difference named. The recording
is made once per module by the host (``record=``) with the demo server (stdlib fixture); a
changed server is the same demo with ``DEMO_EXTRAS=1`` (more tools, one more capability).
The pure comparison is also tested by plain calls, on a recording of a raw session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpl_host import GrantPolicy, ServerConfig, connect
from mcpl_host.recording import Recorder
from mcpl_host.replay.against import Asked, RecordedRequest, first_answer_difference, requests_to_ask
from mcpl_host.replay.script import read_script
from tests.conftest import FIXTURES
from tests.replay_recordings import Book

from . import forkserver

DEMO = [sys.executable, str(FIXTURES / "demo_server.py")]
ASKED: list[tuple[str, dict[str, Any]]] = [
    (
        "initialize",
        {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    ),
    ("tools/list", {}),
    ("tools/call", {"name": "echo", "arguments": {"text": "hello"}}),
]


def _raw_recording(env: dict[str, str]) -> Book:
    """A recording of the demo server answering ``ASKED`` (one raw session)."""
    lines = [
        json.dumps({"jsonrpc": "2.0", "id": i, "method": m, "params": p}) for i, (m, p) in enumerate(ASKED)
    ]
    done = subprocess.run(
        DEMO, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=30, env=env
    )
    answers = {
        message["id"]: message for message in map(json.loads, done.stdout.splitlines()) if "id" in message
    }
    book = Book("demo")
    for i, (method, params) in enumerate(ASKED):
        book.request(i, method, params)
        book.received(answers[i])
    return book


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The host's session with the demo server (handshake, policy, a listing, a call), recorded."""
    path = tmp_path_factory.mktemp("against") / "demo.jsonl"

    async def session() -> None:
        config = ServerConfig(
            name="demo",
            command=DEMO[0],
            args=tuple(DEMO[1:]),
            grant_policy=GrantPolicy(grant_all_advertised=True),
        )
        with Recorder(path) as recorder, anyio.fail_after(60):
            async with connect(config, record=recorder) as conn:
                await conn.mcp.list_tools()
                await conn.mcp.call_tool("echo", {"text": "hello"})

    anyio.run(session)
    return path


def _check(recording: Path, *options: str) -> tuple[int, dict[str, Any]]:
    argv = [*forkserver.CLI, "check", "--only", "recording", "--against", str(recording), "--json", *options]
    done = forkserver.run([*argv, "--", *DEMO], timeout=60)
    document = json.loads(done.stdout)
    (entry,) = [c for c in document["checks"] if c["id"] == "recording.same"]
    return done.returncode, entry


def test_the_same_server_answers_as_recorded(recording: Path) -> None:
    status, entry = _check(recording)
    assert (status, entry["status"]) == (0, "passed"), entry
    assert (
        entry["reason"] == "initialize and 2 recorded requests answered as recorded"
    )  # tools/list, tools/call


def test_a_changed_server_is_named_at_its_first_difference(recording: Path) -> None:
    status, entry = _check(recording, "--env", "DEMO_EXTRAS=1")
    assert (status, entry["status"]) == (1, "failed"), entry
    assert entry["reason"].startswith(
        "initialize (recorded entry seq 5, line 6) is answered differently at "
        "/result/capabilities/experimental/mcpl/featureSets/demo.ask: recorded (absent), live {"
    )


def test_the_first_answer_that_differs_is_named_by_plain_calls() -> None:
    script = read_script(_raw_recording(dict(os.environ)).lines())
    asked = requests_to_ask(script)
    assert [request.method for request in asked] == ["tools/list", "tools/call"]
    same = [Asked(request, request.answer) for request in asked]
    assert first_answer_difference(None, None, same) is None
    changed = {"result": {"content": [{"type": "text", "text": "HELLO"}]}}
    found = first_answer_difference(None, None, [same[0], Asked(asked[1], changed)])
    assert found is not None and found.startswith(
        "tools/call (recorded entry seq 5, line 6) is answered differently at /result/"
    )
    lost = first_answer_difference(None, None, [Asked(asked[0], {"failure": "no answer within 1 s"})])
    assert lost is not None and "at /result: recorded" in lost and "live (absent)" in lost
    init = RecordedRequest(
        "initialize", None, {"result": {"serverInfo": {"name": "a", "version": "1"}}}, 1, 2
    )
    assert (
        first_answer_difference(
            init, {"serverInfo": {"name": "a", "version": "1"}, "protocolVersion": "x"}, []
        )
        is None
    )
    moved = first_answer_difference(init, {"serverInfo": {"name": "a", "version": "2"}}, [])
    assert (
        moved
        == 'initialize (recorded entry seq 1, line 2) is answered differently at /result/serverInfo/version: recorded "1", live "2"'
    )


def test_an_unusable_against_is_a_usage_error(tmp_path: Path) -> None:
    not_a_recording = tmp_path / "notes.txt"
    not_a_recording.write_text("hello\n")
    for options in (["--against", str(not_a_recording)], ["--against-server", "demo"]):
        done = forkserver.run([*forkserver.CLI, "check", "--only", "recording", *options], timeout=60)
        assert done.returncode == 2, done.stderr
    assert (
        b"not an mcpl-host recording"
        in forkserver.run([*forkserver.CLI, "check", "--against", str(not_a_recording)], timeout=60).stderr
    )

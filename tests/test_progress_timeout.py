"""Progress that extends a request's timeout, up to a total (docs/protocol.md R8; MCP
2025-11-25 "Lifecycle", Timeouts).

Over real pipes to ``fixtures/scripted_server.py``: the server reports progress every 0.1 s
for 2.5 s and then answers, so a 1 s timeout ends the call unless progress extends it. The
margins are wide (a progress gap of 0.9 s would be needed to end an extended call early).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpl_host.jsonrpc.errors import RequestTimeout
from mcpl_host.limits import Limits, limit_problem
from mcpl_host.timer import progress_deadline

from . import forkserver
from .test_cli import CLI
from .test_found_cli_call import scripted
from .wire import FAST, MCP_HANDSHAKE, Script

pytestmark = pytest.mark.anyio

#: The token the connection gives its first request that carries one.
TOKEN = "progress-1"


def reporting(steps: int, *, then_answer: bool) -> list[dict[str, Any]]:
    """The script: handshake, then a ``tools/call`` answered by ``steps`` progress reports
    0.1 s apart and, with ``then_answer``, a result."""
    script: list[dict[str, Any]] = [*MCP_HANDSHAKE, {"wait_for": {"method": "tools/call"}}]
    for n in range(1, steps + 1):
        progress = {"progressToken": TOKEN, "progress": n}
        script += [
            {"send": {"jsonrpc": "2.0", "method": "notifications/progress", "params": progress}},
            {"sleep": 0.1},
        ]
    if then_answer:
        script.append({"reply": {"content": [{"type": "text", "text": "done"}]}})
    script.append({"hang": True})
    return script


def test_progress_moves_the_deadline_but_never_past_the_total() -> None:
    assert progress_deadline(now=10.0, seconds=5.0, sent=0.0, total=60.0) == 15.0
    assert progress_deadline(now=58.0, seconds=5.0, sent=0.0, total=60.0) == 60.0
    assert progress_deadline(now=70.0, seconds=5.0, sent=0.0, total=60.0) == 60.0


def test_the_total_is_a_limit_that_may_be_none() -> None:
    assert Limits().max_total_request_seconds is None
    assert limit_problem("max_total_request_seconds", None) is None
    assert limit_problem("max_total_request_seconds", 0) is not None


async def call(tmp_path: Path, steps: int, *, then_answer: bool, **call: Any) -> Any:
    script = Script(tmp_path, reporting(steps, then_answer=then_answer))
    limits = dataclasses.replace(FAST, request_timeout_seconds=1.0)
    with anyio.fail_after(20):
        async with script.connect(limits=limits) as conn:
            try:
                return await conn.mcp.call_tool("t", {}, **call)
            finally:
                sent = [json.loads(line) for line in script.lines()]
                calls = [m for m in sent if m.get("method") == "tools/call"]
                assert calls[0]["params"]["_meta"]["progressToken"] == TOKEN


async def test_progress_extends_the_timeout_when_a_total_is_set(tmp_path: Path) -> None:
    result = await call(tmp_path, 25, then_answer=True, max_total_timeout=30.0)
    assert result.content[0]["text"] == "done"


async def test_without_a_total_progress_does_not_extend_the_timeout(tmp_path: Path) -> None:
    script = Script(tmp_path, reporting(25, then_answer=True))
    limits = dataclasses.replace(FAST, request_timeout_seconds=1.0)
    with anyio.fail_after(20):
        async with script.connect(limits=limits) as conn:
            with pytest.raises(RequestTimeout) as caught:
                await conn.mcp.call_tool("t", {}, progress=lambda params: None)
    assert caught.value.total is None
    assert str(caught.value) == "'tools/call' got no answer within 1 second"


async def test_the_total_ends_a_call_that_reports_progress_for_ever(tmp_path: Path) -> None:
    with pytest.raises(RequestTimeout) as caught:
        await call(tmp_path, 100, then_answer=False, max_total_timeout=2.0)
    assert caught.value.total == 2.0
    assert str(caught.value) == (
        "'tools/call' got no answer within 2 seconds in all"
        " (its progress kept extending its 1 second timeout)"
    )


async def test_the_total_comes_from_the_server_limits(tmp_path: Path) -> None:
    script = Script(tmp_path, reporting(25, then_answer=True))
    limits = dataclasses.replace(FAST, request_timeout_seconds=1.0, max_total_request_seconds=30.0)
    with anyio.fail_after(20):
        async with script.connect(limits=limits) as conn:
            result = await conn.mcp.call_tool("t", {})
    assert result.content[0]["text"] == "done"


def test_the_cli_takes_the_total_as_max_total_timeout(tmp_path: Path) -> None:
    tool = {"name": "t", "inputSchema": {"type": "object"}}
    steps = reporting(25, then_answer=True)
    at = steps.index({"wait_for": {"method": "tools/call"}})
    # ``call`` lists the tools first; that request takes the first token.
    steps[at:at] = [{"wait_for": {"method": "tools/list"}}, {"reply": {"tools": [tool]}}]
    for step in steps:
        if "send" in step:
            step["send"]["params"]["progressToken"] = "progress-2"
    argv = ["call", "t", "--request-timeout", "1", "--max-total-timeout", "30"]
    done = forkserver.run([*CLI, *argv, *scripted(tmp_path, steps)], timeout=30, text=True)
    assert done.returncode == 0, done.stderr
    assert "done" in done.stdout

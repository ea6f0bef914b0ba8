"""Schemas whose check costs what a server chooses, beyond ``pattern`` and ``uniqueItems``:
30 ``$defs``, each an ``allOf`` of the next twice (2 KB of JSON, 2^30 evaluations). Every
check of a server's schema is bounded by ``Limits.max_schema_check_seconds`` and never runs
in the event loop (mcpl_host/output_schema.py, module rules).

Over real pipes to ``fixtures/scripted_server.py``: ``mcpl-host call`` and ``shell`` as child
processes (a run that does not end within ``HANG_SECONDS`` is a hang: the bound detects it,
it measures no speed), and a ``Host`` of two servers in this process, where the other
server's ``ping`` must be answered while the check runs (asserted by events: the call has not
ended when the ping's answer arrives).
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpl_host import Limits
from mcpl_host.coerce import allowed_types
from mcpl_host.host import Host
from mcpl_host.output_schema import inline_check

from . import forkserver
from .conftest import FIXTURES
from .test_check_cli import _bridge  # pyright: ignore[reportPrivateUsage]
from .test_cli import CLI, Running, scripted
from .test_cli_run import scripted_entry, write_config
from .test_found_cli_call import call_within, tool_server
from .test_host import QUICK, collect, stdio_config
from .wire import MCP_HANDSHAKE, Script

HANG_SECONDS = 30
LEVELS = 30


def doubling_schema(levels: int = LEVELS) -> dict[str, Any]:
    """``$defs`` d0..d<levels>: each an ``allOf`` of the next one twice; 2^levels checks."""
    defs: dict[str, Any] = {
        f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
        for i in range(levels)
    }
    defs[f"d{levels}"] = {"type": "object"}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


def doubling_tool(*, output: bool) -> dict[str, Any]:
    if output:
        return {"name": "t", "inputSchema": {"type": "object"}, "outputSchema": doubling_schema()}
    return {"name": "t", "inputSchema": doubling_schema()}


STRUCTURED_RESULT = {"content": [], "structuredContent": {}}


def test_the_doubling_schema_is_sent_to_the_worker_and_a_plain_one_is_not() -> None:
    # The decision itself (pure): the expanded size of the schema times the instance's.
    plain = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"$ref": "#/$defs/n"}}}
    plain["$defs"] = {"n": {"type": "integer"}}
    assert inline_check(plain, {"a": "x", "b": 1}, budget=1000)
    assert not inline_check(doubling_schema(), {}, budget=1000)
    assert not inline_check(doubling_schema(5), {}, budget=10)  # 2^5 evaluations over 10
    assert inline_check(doubling_schema(3), {}, budget=1000)
    cyclic = {"$defs": {"n": {"properties": {"next": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"}
    assert not inline_check(cyclic, {}, budget=1000)  # recursive: its cost follows the instance
    assert not inline_check({"$ref": "https://example.com/s.json"}, {}, budget=1000)
    assert not inline_check({"type": "string", "pattern": "^(a+)+$"}, "a", budget=1000)


@pytest.mark.parametrize("transport", ["stdio", "websocket", "http"])
def test_call_with_a_doubling_output_schema_ends_within_the_bound(tmp_path: Path, transport: str) -> None:
    # The bound of the config entry, a quarter second (its default, 2 s, is shown by the
    # input-schema and shell tests): what is measured is that the check ends at the bound.
    server = tool_server(tmp_path, doubling_tool(output=True), STRUCTURED_RESULT)
    limits = {"maxSchemaCheckSeconds": 0.25}
    with contextlib.ExitStack() as stack:
        if transport == "stdio":
            entry: dict[str, Any] = {"command": server[1], "args": server[2:], "limits": limits}
        elif transport == "websocket":
            url = stack.enter_context(_bridge("ws_bridge.py", server[1:], "ws"))
            entry = {"url": url, "transport": "websocket", "limits": limits}
        else:
            url = stack.enter_context(_bridge("http_bridge.py", server[1:], "http")) + "mcp"
            entry = {"url": url, "limits": limits}
        config = write_config(tmp_path, {"s": entry})
        try:
            done = forkserver.run(
                [*CLI, "call", "t", "--config", str(config)],
                capture_output=True,
                text=True,
                timeout=HANG_SECONDS,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"mcpl-host call was still checking the structuredContent after {HANG_SECONDS} s")
    assert "Traceback" not in done.stderr
    assert done.returncode == 1, done.stderr
    assert "does not match its outputSchema" in done.stderr
    assert "checking it took longer than Limits.max_schema_check_seconds = 0.25 s" in done.stderr


def test_call_with_a_doubling_input_schema_ends_within_the_bound(tmp_path: Path) -> None:
    args = [*CLI, "call", "t", "a=1", *tool_server(tmp_path, doubling_tool(output=False))]
    done = call_within(args, HANG_SECONDS)
    assert "cannot be checked: checking it took longer than Limits.max_schema_check_seconds" in done.stderr
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_call_while_a_doubling_output_schema_is_checked(
    tmp_path: Path, signum: signal.Signals
) -> None:
    # The bound is ten minutes here: only the signal can end the check in time.
    tool = doubling_tool(output=True)
    steps = [
        *MCP_HANDSHAKE,
        {"wait_for": {"method": "tools/list"}},
        {"reply": {"tools": [tool]}},
        {"wait_for": {"method": "tools/call"}},
        {"reply": STRUCTURED_RESULT},
        {"hang": True},
    ]
    entry = scripted_entry(tmp_path, steps, "s", limits={"maxSchemaCheckSeconds": 600})
    config = write_config(tmp_path, {"s": entry})
    cli = Running("call", "t", "--config", str(config), "--server", "s", "--log-level", "debug")
    try:
        cli.wait_for("stderr", "schema check in a worker process")
        cli.process.send_signal(signum)
    finally:
        if cli.process.poll() is None:
            try:
                cli.process.wait(timeout=HANG_SECONDS)
            except subprocess.TimeoutExpired:
                cli.process.kill()
        status, _, err = cli.finish()
    assert status == 130, err
    assert "Traceback" not in err


def test_the_shell_checks_a_doubling_input_schema_within_the_bound(tmp_path: Path) -> None:
    steps = [
        *MCP_HANDSHAKE,
        {"wait_for": {"method": "tools/list"}},
        {"reply": {"tools": [doubling_tool(output=False)]}},
        {"wait_for": {"method": "tools/list"}},
        {"reply": {"tools": [doubling_tool(output=False)]}},
        {"wait_for": {"method": "tools/call"}},
        {"reply": {"content": [{"type": "text", "text": "called"}]}},
        {"hang": True},
    ]
    server = scripted(tmp_path, steps)
    try:
        done = forkserver.run(
            [*CLI, "shell", *server],
            input="call t a=1\n",
            capture_output=True,
            text=True,
            timeout=HANG_SECONDS,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"mcpl-host shell was still checking the arguments after {HANG_SECONDS} s")
    assert "Traceback" not in done.stderr
    assert (
        "cannot be checked: checking it took longer than Limits.max_schema_check_seconds = 2 s; sending unchecked"
        in done.stdout
    ), done.stdout + done.stderr
    assert "\ncalled\n" in done.stdout


@pytest.mark.anyio
async def test_a_host_answers_another_servers_ping_while_an_output_schema_is_checked(
    tmp_path: Path,
) -> None:
    # Server "slow" answers tools/call, then sends test/after: by the time the host has read
    # that notification it has read the result, and its check has begun. Server "other"
    # answers pings. Its ping must be answered while the call on "slow" has not ended.
    slow = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"wait_for": {"method": "tools/list"}},
            {"reply": {"tools": [doubling_tool(output=True)]}},
            {"wait_for": {"method": "tools/call"}},
            {"reply": STRUCTURED_RESULT},
            {"send": {"jsonrpc": "2.0", "method": "test/after", "params": {}}},
            {"hang": True},
        ],
        name="slow",
    )
    other = Script(
        tmp_path,
        [*MCP_HANDSHAKE, {"wait_for": {"method": "ping"}}, {"reply": {}}, {"hang": True}],
        name="other",
    )
    bounded = Limits(
        close_grace_seconds=QUICK.close_grace_seconds,
        terminate_grace_seconds=QUICK.terminate_grace_seconds,
        handshake_timeout_seconds=QUICK.handshake_timeout_seconds,
        max_schema_check_seconds=600,
    )
    host = Host({"slow": stdio_config("slow", slow, limits=bounded), "other": stdio_config("other", other)})
    call_ended = anyio.Event()

    async def call() -> None:
        try:
            await (await host.server("slow").connected()).mcp.call_tool("t", {})
        finally:
            call_ended.set()

    with anyio.fail_after(60):
        async with host:
            await collect(
                host, lambda seen: {e.server for e in seen if e.kind == "ready"} == {"slow", "other"}
            )
            await (await host.server("slow").connected()).mcp.list_tools()
            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await collect(
                    host, lambda seen: any(e.kind == "notification" and e.server == "slow" for e in seen)
                )
                await (await host.server("other").connected()).mcp.ping()
                assert not call_ended.is_set()  # the check still runs, and the loop ticks
                tg.cancel_scope.cancel()


def test_check_validates_huge_tool_schemas_within_its_validation_bound(tmp_path: Path) -> None:
    # About 12 MB of inputSchema: minutes against the metaschema, had check's rule run it in
    # the event loop; the worker stops at Limits.check_validation_timeout_seconds, here the
    # config entry's checkValidationTimeoutSeconds (1 s), not the default (10 s).
    entry = {
        "command": sys.executable,
        "args": [str(FIXTURES / "check" / "plain_mcp.py"), "--fault", "huge-tool-schema"],
        "limits": {"checkValidationTimeoutSeconds": 1},
    }
    config = write_config(tmp_path, {"huge": entry})
    args = [*CLI, "check", "--json", "--only", "tools", "--config", str(config), "--server", "huge"]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=HANG_SECONDS * 2)
    except subprocess.TimeoutExpired:
        pytest.fail(f"mcpl-host check was still validating the tool schemas after {HANG_SECONDS * 2} s")
    doc = json.loads(done.stdout)
    (verdict,) = [c for c in doc["checks"] if c["id"] == "tools.list.schema"]
    assert verdict["status"] == "failed", verdict
    assert "did not finish within 1 s" in verdict["reason"]


def branching_input_schema(levels: int, width: int) -> dict[str, Any]:
    """Argument ``a`` of a schema whose $defs are each an anyOf of ``width`` references to the
    next: ``width ** levels`` schemas to look at for its types, had the walk no bound."""
    defs: dict[str, Any] = {
        f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"} for _ in range(width)]} for i in range(levels)
    }
    defs[f"d{levels}"] = {"type": "integer"}
    return {"$defs": defs, "properties": {"a": {"$ref": "#/$defs/d0"}}}


def test_the_types_of_an_argument_are_read_from_a_bounded_number_of_schemas() -> None:
    small = branching_input_schema(2, 3)
    assert allowed_types(small["properties"]["a"], small) == {"integer"}
    wide = branching_input_schema(3, 200)  # 8 million schemas
    assert allowed_types(wide["properties"]["a"], wide) is None  # no type known: read as JSON


def test_call_coerces_by_a_branching_input_schema_within_a_bounded_walk(tmp_path: Path) -> None:
    tool = {"name": "t", "inputSchema": branching_input_schema(3, 200)}
    args = [*CLI, "call", "t", "a=1", *tool_server(tmp_path, tool)]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=HANG_SECONDS)
    except subprocess.TimeoutExpired:
        pytest.fail(f"mcpl-host call was still reading the inputSchema after {HANG_SECONDS} s")
    assert "Traceback" not in done.stderr
    assert done.returncode == 0, done.stderr

"""Pathological ``outputSchema``s and ``structuredContent`` from a hostile server, through
``MCPClient.call_tool`` (mcpl_host/output_schema.py ``check_structured_content``).

Over real pipes to ``fixtures/scripted_server.py``. Validation runs in the event loop, so a
validation that never ends cannot be cut by ``anyio.fail_after``: those cases run
``mcpl-host call`` as a child process, killed after ``HANG_SECONDS`` (a hang detector, not a
speed measurement: the inputs below would take hours).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpl_host.mcp_methods import OutputSchemaError

from .test_cli import CLI
from .test_found_cli_call import tool_server
from .wire import MCP_HANDSHAKE, Script

pytestmark = pytest.mark.anyio

HANG_SECONDS = 20


def listed_and_called(tool: dict[str, Any], result: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        *MCP_HANDSHAKE,
        {"wait_for": {"method": "tools/list"}},
        {"reply": {"tools": [tool]}},
        {"wait_for": {"method": "tools/call"}},
        {"reply": result},
    ]


async def call_error(tmp_path: Path, output_schema: dict[str, Any], structured: Any) -> BaseException:
    """What ``call_tool`` raises for a tool with this outputSchema returning this content."""
    tool = {"name": "t", "inputSchema": {"type": "object"}, "outputSchema": output_schema}
    script = Script(tmp_path, listed_and_called(tool, {"content": [], "structuredContent": structured}))
    with anyio.fail_after(20):
        async with script.connect() as conn:
            await conn.mcp.list_tools()
            with pytest.raises(Exception) as caught:
                await conn.mcp.call_tool("t", {})
    return caught.value


async def test_a_dialect_that_is_not_a_string_is_an_output_schema_error(tmp_path: Path) -> None:
    error = await call_error(tmp_path, {"$schema": 5, "type": "object"}, {})
    assert isinstance(error, OutputSchemaError), repr(error)
    assert error.path is None  # the schema is at fault


async def test_a_deep_output_schema_is_not_called_not_json(tmp_path: Path) -> None:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(300):  # valid JSON, well within the host's parser (orjson reads 1,024 levels)
        schema = {"type": "object", "properties": {"x": schema}}
    error = await call_error(tmp_path, schema, {"x": {}})
    assert isinstance(error, OutputSchemaError), repr(error)
    assert "not JSON" not in str(error)


def _cli_call(
    tmp_path: Path, tool: dict[str, Any], result: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    args = [*CLI, "call", "t", *tool_server(tmp_path, tool, result)]
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=HANG_SECONDS)
    except subprocess.TimeoutExpired:
        pytest.fail(f"mcpl-host call was still checking the structuredContent after {HANG_SECONDS} s")


def test_a_catastrophic_pattern_in_an_output_schema_does_not_hang_the_call(tmp_path: Path) -> None:
    tool = {
        "name": "t",
        "inputSchema": {"type": "object"},
        "outputSchema": {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}},
    }
    done = _cli_call(tmp_path, tool, {"content": [], "structuredContent": {"s": "a" * 60 + "b"}})
    assert "Traceback" not in done.stderr
    assert done.returncode == 1, done.stderr


def test_unique_items_over_many_objects_does_not_hang_the_call(tmp_path: Path) -> None:
    tool = {
        "name": "t",
        "inputSchema": {"type": "object"},
        "outputSchema": {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}},
    }
    items = [{"i": i} for i in range(300_000)]  # about 3 MB, far below Limits.max_line_bytes
    done = _cli_call(tmp_path, tool, {"content": [], "structuredContent": {"a": items}})
    assert "Traceback" not in done.stderr
    assert done.returncode in (0, 1), done.stderr

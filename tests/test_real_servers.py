"""Servers we did not write: mcp-server-time (PyPI) and server-everything (npm).

server-everything runs when ``MCPL_TEST_SERVER_EVERYTHING`` names its executable (``.ci/run``
installs it from the npm registry) and is skipped otherwise.
"""

from __future__ import annotations

import os
import sys

import anyio
import pytest

from mcpl_host import GrantPolicy, MCPLState, ServerConfig, connect

pytestmark = pytest.mark.anyio


async def test_mcp_server_time_lists_and_calls_its_tools() -> None:
    with anyio.fail_after(60):
        async with connect(
            ServerConfig(
                command=sys.executable,
                args=("-m", "mcp_server_time"),
                grant_policy=GrantPolicy(grant_all_advertised=True),
            )
        ) as conn:
            assert conn.server_info is not None and conn.server_info.name == "mcp-time"
            assert conn.mcpl_state is MCPLState.NONE  # plain MCP: no MCPL traffic
            names = {tool.name for tool in await conn.mcp.list_tools()}
            assert {"get_current_time", "convert_time"} <= names
            result = await conn.mcp.call_tool("get_current_time", {"timezone": "UTC"})
            assert not result.is_error and "UTC" in result.text


async def test_server_everything_lists_tools_resources_and_prompts() -> None:
    executable = os.environ.get("MCPL_TEST_SERVER_EVERYTHING")
    if not executable or not os.path.exists(executable):
        pytest.skip("set MCPL_TEST_SERVER_EVERYTHING to the mcp-server-everything executable (.ci/run does)")
    with anyio.fail_after(60):
        async with connect(ServerConfig(command=executable, args=("stdio",))) as conn:
            assert conn.server_info is not None and "everything" in conn.server_info.name
            tools = {tool.name for tool in await conn.mcp.list_tools()}
            assert "echo" in tools
            result = await conn.mcp.call_tool("echo", {"message": "hello from mcpl-host"})
            assert "hello from mcpl-host" in result.text
            assert await conn.mcp.list_resources()  # paginated in server-everything
            assert await conn.mcp.list_prompts()
            await conn.mcp.ping()

"""MCP 2026-07-28 over Streamable HTTP against a server we did not write: ``Mcp-Param-*``
headers mirrored from ``x-mcp-header`` tool parameters (docs/protocol.md S10) and the
``ttlMs`` / ``cacheScope`` of list results honoured (S11).

Server: ``fixtures/sdk_features_server.py`` on the MCP Python SDK 2.x in its stateless mode
(``--header-tools``: a tool that reports the ``Mcp-Param-*`` headers it received, the SDK
answering ``-32020`` to a call whose headers do not match its body, and tools with hostile
schemas; ``--cache-ttl-ms``: hints on every list and a count of ``tools/list`` POSTs);
over stdio the annotations are ignored, as the revision allows.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from mcpl_host import Limits, ServerConfig, connect
from mcpl_host.limits import LimitExceeded

from .test_client_features_real import FAST, SDK_FEATURES, TIMEOUT, sdk_over_http, sdk_over_http_for_module

pytestmark = pytest.mark.anyio

#: The fixture's usual tools (``grow`` and ``touch`` serve the listen tests) and ``route``.
BASE = {"add", "ask_client", "grow", "touch"}
VALID = {"route", *BASE}
HOSTILE = {"bad_token", "too_many", "number_typed"}


@pytest.fixture(scope="module")
def header_tools_port() -> Iterator[int]:
    """One stateless server with the header tools for the tests that only call it (a
    stateless server keeps nothing between requests; each start costs the SDK's imports)."""
    with sdk_over_http_for_module("--stateless", "--header-tools") as port:
        yield port


@pytest.fixture(scope="module")
def handshake_header_tools_port() -> Iterator[int]:
    """One server with sessions and the header tools for the handshake-era test on each
    backend (each connection has a session of its own; the test only lists and calls)."""
    with sdk_over_http_for_module("--header-tools") as port:
        yield port


def rendered(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


async def count(conn: Any) -> int:
    return int((await conn.mcp.call_tool("list_count", {})).text)


@pytest.mark.parametrize("transport", ["http", "streamable-http"])
async def test_marked_parameters_reach_the_sdk_server_as_mcp_param_headers(
    rendered_logs: io.StringIO, transport: Any, header_tools_port: int
) -> None:
    port = header_tools_port
    with anyio.fail_after(TIMEOUT):
        url = f"http://127.0.0.1:{port}/mcp"
        async with connect(ServerConfig(url=url, transport=transport, limits=FAST)) as conn:
            assert conn.era == "stateless"
            # Hostile schemas: left out of tools/list, each with one warning naming it.
            assert {tool.name for tool in await conn.mcp.list_tools()} == VALID
            route = await conn.mcp.call_tool(
                "route", {"region": "us-west1", "shard": 7, "note": "Hello, 世界"}
            )
            assert not route.is_error, route.text
            assert json.loads(route.text) == {
                "mcp-param-region": "us-west1",
                "mcp-param-shard": "7",
                "mcp-param-note": "=?base64?SGVsbG8sIOS4lueVjA==?=",
            }
            # An argument not given: no header (and the SDK does not expect one).
            assert json.loads((await conn.mcp.call_tool("route", {"region": "eu"})).text) == {
                "mcp-param-region": "eu"
            }
            assert (await conn.mcp.call_tool("add", {"a": 1, "b": 2})).text == "3"
    warnings = [line for line in rendered(rendered_logs) if "x-mcp-header" in line["event"]]
    assert {line["tool"] for line in warnings} == HOSTILE
    bad = next(line for line in warnings if line["tool"] == "bad_token")
    assert bad["level"] == "warning"
    assert (
        bad["reason"]
        == "the x-mcp-header A\\r\\nX-Injected: yes of the property a is not an HTTP header token"
    )
    many = next(line for line in warnings if line["tool"] == "too_many")
    assert many["reason"] == "the tool marks more than 32 parameters x-mcp-header (Limits.max_param_headers)"


async def test_a_call_before_any_listing_is_refused_then_listed_and_sent_again(
    header_tools_port: int,
) -> None:
    port = header_tools_port
    with anyio.fail_after(TIMEOUT):
        async with connect(ServerConfig(url=f"http://127.0.0.1:{port}/mcp", limits=FAST)) as conn:
            # Unlisted, the call carries no Mcp-Param header: the SDK answers -32020, the
            # host lists the tools and sends the call again with the headers.
            route = await conn.mcp.call_tool("route", {"region": "ap-south1"})
            assert json.loads(route.text) == {"mcp-param-region": "ap-south1"}
            assert conn.mcp.cached_tools is not None


async def test_headers_over_the_byte_bound_fail_the_call_before_it_is_sent(header_tools_port: int) -> None:
    limits = Limits(
        close_grace_seconds=2.0,
        terminate_grace_seconds=1.0,
        handshake_timeout_seconds=30.0,
        max_param_header_bytes=64,
    )
    port = header_tools_port
    with anyio.fail_after(TIMEOUT):
        async with connect(ServerConfig(url=f"http://127.0.0.1:{port}/mcp", limits=limits)) as conn:
            await conn.mcp.list_tools()
            with pytest.raises(LimitExceeded, match="max_param_header_bytes"):
                await conn.mcp.call_tool("route", {"region": "r" * 100})
            assert json.loads((await conn.mcp.call_tool("route", {"region": "r"})).text) == {
                "mcp-param-region": "r"
            }


async def test_the_handshake_era_mirrors_nothing_and_lists_every_tool(
    handshake_header_tools_port: int,
) -> None:
    port = handshake_header_tools_port
    with anyio.fail_after(TIMEOUT):
        async with connect(
            ServerConfig(url=f"http://127.0.0.1:{port}/mcp", protocol="handshake", limits=FAST)
        ) as conn:
            assert conn.era == "handshake"
            assert {tool.name for tool in await conn.mcp.list_tools()} == VALID | HOSTILE
            assert json.loads((await conn.mcp.call_tool("route", {"region": "us"})).text) == {}


@pytest.mark.parametrize("scope", ["public", "private"])
async def test_a_fresh_list_is_served_without_a_request_and_listed_again_once_stale(scope: str) -> None:
    async with sdk_over_http("--stateless", "--cache-ttl-ms", "600000", "--cache-scope", scope) as port:
        with anyio.fail_after(TIMEOUT):
            async with connect(ServerConfig(url=f"http://127.0.0.1:{port}/mcp", limits=FAST)) as conn:
                now = [0.0]
                conn.mcp.clock = lambda: now[0]
                first = await conn.mcp.list_tools()
                assert {tool.name for tool in first} == {*BASE, "list_count"}
                assert conn.mcp.cache_freshness["tools"].until == 600.0
                assert conn.mcp.cache_freshness["tools"].scope == scope
                assert await conn.mcp.list_tools() == first
                assert await count(conn) == 1  # the second listing sent nothing
                now[0] = 599.999
                await conn.mcp.list_tools()
                assert await count(conn) == 1
                now[0] = 600.0  # stale: listed again
                await conn.mcp.list_tools()
                assert await count(conn) == 2
                await conn.mcp.list_tools(refresh=True)
                assert await count(conn) == 3


async def test_a_list_with_ttl_zero_is_listed_each_time() -> None:
    async with sdk_over_http("--stateless", "--cache-ttl-ms", "0") as port:
        with anyio.fail_after(TIMEOUT):
            async with connect(ServerConfig(url=f"http://127.0.0.1:{port}/mcp", limits=FAST)) as conn:
                await conn.mcp.list_tools()
                await conn.mcp.list_tools()
                assert await count(conn) == 2


async def test_a_handshake_era_connection_lists_each_time_as_before() -> None:
    async with sdk_over_http("--cache-ttl-ms", "600000") as port:
        with anyio.fail_after(TIMEOUT):
            async with connect(
                ServerConfig(url=f"http://127.0.0.1:{port}/mcp", protocol="handshake", limits=FAST)
            ) as conn:
                assert conn.era == "handshake"
                await conn.mcp.list_tools()
                await conn.mcp.list_tools()
                assert conn.mcp.cache_freshness == {} and await count(conn) == 2


async def test_over_stdio_the_annotations_are_ignored() -> None:
    # The revision lets transports other than Streamable HTTP ignore x-mcp-header.
    with anyio.fail_after(TIMEOUT):
        async with connect(
            ServerConfig(
                command=sys.executable, args=(str(SDK_FEATURES), "stdio", "--header-tools"), limits=FAST
            )
        ) as conn:
            assert conn.era == "stateless" and not conn.mcp.mirrors_param_headers
            assert {tool.name for tool in await conn.mcp.list_tools()} == VALID | HOSTILE
            assert json.loads((await conn.mcp.call_tool("route", {"region": "us"})).text) == {}

"""Roots, sampling and elicitation served to servers we did not write, in both protocol eras.

Servers: ``@modelcontextprotocol/server-everything`` (npm; TypeScript SDK 1.x, handshake era)
over stdio, Streamable HTTP (its ``streamableHttp`` mode) and HTTP+SSE (its ``sse`` mode),
run when ``MCPL_TEST_SERVER_EVERYTHING`` names it (``.ci/run`` installs it);
``fixtures/sdk_features_server.py`` on the MCP Python SDK 2.x over stdio and Streamable HTTP
(stateful, and its stateless 2026-07-28 mode); ``mcp-server-time`` (PyPI, SDK 2.x).
Rules under test: MCP 2025-11-25 "Client Features" (Roots, Sampling, Elicitation), the
host's advertisement (a capability exactly when its handler is given), MCP 2026-07-28
"Versioning and Compatibility" (the ``server/discover`` probe and its fallback) and
"Multi Round-Trip Requests" (input requests answered by the same handlers).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Collection, Iterator
from pathlib import Path
from subprocess import PIPE
from typing import Any

import anyio
import anyio.abc
import pytest

from mcpl_host import HostHandlers, Limits, RequestContext, ServerConfig, connect
from mcpl_host.client_features import (
    ElicitationMode,
    ElicitationRequest,
    ElicitationResult,
    Roots,
    SamplingRequest,
    SamplingResult,
)

from . import forkserver
from .conftest import FIXTURES
from .wire import port_server, stop_server_process

pytestmark = pytest.mark.anyio

TIMEOUT = 60
SDK_FEATURES = FIXTURES / "sdk_features_server.py"
FAST = Limits(close_grace_seconds=2.0, terminate_grace_seconds=1.0, handshake_timeout_seconds=30.0)
#: server-everything's tools: 13 always, 4 more for a client that serves roots, sampling
#: and elicitation (form and URL modes).
EVERYTHING_CONDITIONAL = {
    "get-roots-list",
    "trigger-sampling-request",
    "trigger-elicitation-request",
    "trigger-url-elicitation",
}


class Sampler:
    """A sampling handler that records what it was asked."""

    supports_tools = False

    def __init__(self) -> None:
        self.requests: list[SamplingRequest] = []

    async def create_message(self, context: RequestContext, request: SamplingRequest) -> SamplingResult:
        self.requests.append(request)
        return SamplingResult.text("the answer is forty-two", "test-model")


class Elicitor:
    """An elicitation handler that accepts forms with a name and declines URLs."""

    modes: Collection[ElicitationMode] = ("form", "url")

    def __init__(self) -> None:
        self.requests: list[ElicitationRequest] = []

    async def elicit(self, context: RequestContext, request: ElicitationRequest) -> ElicitationResult:
        self.requests.append(request)
        if request.mode == "url":
            return ElicitationResult("decline")
        return ElicitationResult("accept", {"name": "Ada Lovelace", "check": True})


def served(tmp_path: Path) -> tuple[HostHandlers, Sampler, Elicitor]:
    sampler, elicitor = Sampler(), Elicitor()
    return HostHandlers(roots=Roots([tmp_path]), sampling=sampler, elicitation=elicitor), sampler, elicitor


def everything() -> str:
    executable = os.environ.get("MCPL_TEST_SERVER_EVERYTHING")
    if not executable or not os.path.exists(executable):
        pytest.skip("set MCPL_TEST_SERVER_EVERYTHING to the mcp-server-everything executable (.ci/run does)")
    return executable


@contextlib.asynccontextmanager
async def everything_over_http(mode: str) -> AsyncIterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = await anyio.open_process(
        [everything(), mode],
        stdout=PIPE,
        stderr=PIPE,
        env={**os.environ, "PORT": str(port)},
        start_new_session=True,
    )
    try:
        assert process.stderr is not None
        seen = b""
        with anyio.fail_after(TIMEOUT):
            while b"port" not in seen.lower():  # "... listening on port N"
                seen += await process.stderr.receive()
        yield port
    finally:
        await stop_server_process(process, TIMEOUT)


@contextlib.contextmanager
def sdk_over_http_for_module(*options: str) -> Iterator[int]:
    """``sdk_over_http`` for a module-scoped fixture (no event loop): the server's port; it
    is stopped on exit. For tests that leave no state in the server (its stateless mode)."""
    argv = [sys.executable, str(SDK_FEATURES), "streamable-http", *options]
    process = subprocess.Popen(
        argv, stdout=PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True
    )
    try:
        assert process.stdout is not None
        yield int(process.stdout.readline().split()[1])
    finally:
        process.terminate()
        process.wait(TIMEOUT)


@contextlib.asynccontextmanager
async def sdk_over_http(*options: str) -> AsyncIterator[int]:
    argv = [sys.executable, str(SDK_FEATURES), "streamable-http", *options]
    async with port_server(argv, stderr=PIPE, seconds=TIMEOUT) as (_, port):
        yield port


# -- server-everything: 17 tools, and its roots, sampling and elicitation tools ----------------


async def _everything_session(conn: Any, tmp_path: Path, sampler: Sampler, elicitor: Elicitor) -> None:
    assert conn.era == "handshake"  # TypeScript SDK 1.x: the probe is refused, initialize follows
    tools = {tool.name for tool in await conn.mcp.list_tools()}
    assert len(tools) == 17 and EVERYTHING_CONDITIONAL <= tools
    roots = await conn.mcp.call_tool("get-roots-list", {})
    assert tmp_path.as_uri() in roots.text
    sampled = await conn.mcp.call_tool("trigger-sampling-request", {"prompt": "what is six times seven?"})
    assert "the answer is forty-two" in sampled.text and "test-model" in sampled.text
    assert "what is six times seven?" in sampler.requests[-1].messages[0].text
    form = await conn.mcp.call_tool("trigger-elicitation-request", {})
    assert "User provided the requested information" in form.text and "Ada Lovelace" in form.text
    url = await conn.mcp.call_tool(
        "trigger-url-elicitation", {"url": "https://example.com/consent", "message": "Consent?"}
    )
    assert "declined to open the URL" in url.text
    assert [r.mode for r in elicitor.requests] == ["form", "url"]
    assert elicitor.requests[1].url == "https://example.com/consent" and elicitor.requests[1].elicitation_id


async def test_server_everything_over_stdio_offers_17_tools_and_its_client_tools_use_the_handlers(
    tmp_path: Path,
) -> None:
    handlers, sampler, elicitor = served(tmp_path)
    with anyio.fail_after(TIMEOUT):
        async with connect(
            ServerConfig(command=everything(), args=("stdio",), limits=FAST), handlers=handlers
        ) as conn:
            await _everything_session(conn, tmp_path, sampler, elicitor)


async def test_server_everything_offers_13_tools_to_a_host_serving_no_client_feature() -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(ServerConfig(command=everything(), args=("stdio",), limits=FAST)) as conn:
            tools = {tool.name for tool in await conn.mcp.list_tools()}
    assert len(tools) == 13 and not tools & EVERYTHING_CONDITIONAL


@pytest.mark.parametrize(("mode", "path"), [("streamableHttp", "/mcp"), ("sse", "/sse")])
async def test_server_everything_over_http_offers_17_tools_and_uses_the_handlers(
    tmp_path: Path, mode: str, path: str
) -> None:
    handlers, sampler, elicitor = served(tmp_path)
    async with everything_over_http(mode) as port:
        with anyio.fail_after(TIMEOUT):
            async with connect(
                ServerConfig(url=f"http://127.0.0.1:{port}{path}", limits=FAST), handlers=handlers
            ) as conn:
                await _everything_session(conn, tmp_path, sampler, elicitor)


# -- a server on the MCP Python SDK 2.x, in both eras ------------------------------------------------


def _asked(text: str, tmp_path: Path) -> None:
    assert text == f"roots={tmp_path.as_uri()} | sampled=the answer is forty-two | form=accept:Ada Lovelace"


@pytest.mark.parametrize(("protocol", "era"), [("auto", "stateless"), ("handshake", "handshake")])
async def test_sdk_server_over_stdio_in_each_era(tmp_path: Path, protocol: Any, era: str) -> None:
    handlers, sampler, _ = served(tmp_path)
    with anyio.fail_after(TIMEOUT):
        async with connect(
            ServerConfig(
                command=sys.executable, args=(str(SDK_FEATURES), "stdio"), protocol=protocol, limits=FAST
            ),
            handlers=handlers,
        ) as conn:
            assert conn.era == era and conn.server_info is not None
            assert conn.server_info.name == "sdk-features-fixture"
            expected = "2026-07-28" if era == "stateless" else "2025-11-25"
            assert conn.server_info.protocol_version == expected
            tools = await conn.mcp.list_tools()
            add = next(tool for tool in tools if tool.name == "add")
            assert add.output_schema is not None and add.output_schema["required"] == ["result"]
            assert (await conn.mcp.call_tool("add", {"a": 20, "b": 22})).structured_content == {"result": 42}
            # Roots, sampling and elicitation: server requests in the handshake era, one
            # InputRequiredResult and a retry in the stateless era; the same handlers.
            _asked((await conn.mcp.call_tool("ask_client", {"topic": "numbers"})).text, tmp_path)
            assert sampler.requests[-1].messages[0].text == "About numbers?"
            await conn.mcp.ping()


@pytest.fixture(scope="module")
def sdk_http_ports() -> Iterator[Callable[[tuple[str, ...]], int]]:
    """The port of the fixture over Streamable HTTP with ``options``, one process per
    ``options`` for the module (the tests that take it list, call and ask, which leaves no
    state in the server; each start costs the SDK's imports)."""
    with contextlib.ExitStack() as stack:
        ports: dict[tuple[str, ...], int] = {}

        def port(options: tuple[str, ...]) -> int:
            if options not in ports:
                ports[options] = stack.enter_context(sdk_over_http_for_module(*options))
            return ports[options]

        yield port


@pytest.mark.parametrize(
    "options",
    [
        ["--stateless", "--json"],
        ["--stateless"],
        [],  # stateful too: the SDK serves a request that names 2026-07-28 statelessly
    ],
)
async def test_sdk_server_over_streamable_http_speaks_the_stateless_revision(
    tmp_path: Path, options: list[str], sdk_http_ports: Callable[[tuple[str, ...]], int]
) -> None:
    handlers, _, _ = served(tmp_path)
    port = sdk_http_ports(tuple(options))
    with anyio.fail_after(TIMEOUT):
        async with connect(
            ServerConfig(url=f"http://127.0.0.1:{port}/mcp", limits=FAST), handlers=handlers
        ) as conn:
            assert conn.era == "stateless"
            assert {tool.name for tool in await conn.mcp.list_tools()} == {
                "add",
                "ask_client",
                "grow",
                "touch",
            }
            assert (await conn.mcp.call_tool("add", {"a": 1, "b": 2})).text == "3"
            _asked((await conn.mcp.call_tool("ask_client", {"topic": "numbers"})).text, tmp_path)
            await conn.mcp.ping()


async def test_sdk_server_over_streamable_http_in_the_handshake_era(
    tmp_path: Path, sdk_http_ports: Callable[[tuple[str, ...]], int]
) -> None:
    handlers, _, _ = served(tmp_path)
    port = sdk_http_ports(())  # the module's server with sessions: this connection has its own
    with anyio.fail_after(TIMEOUT):
        async with connect(
            ServerConfig(url=f"http://127.0.0.1:{port}/mcp", protocol="handshake", limits=FAST),
            handlers=handlers,
        ) as conn:
            assert conn.era == "handshake" and conn.server_info is not None
            assert conn.server_info.protocol_version == "2025-11-25"
            _asked((await conn.mcp.call_tool("ask_client", {"topic": "numbers"})).text, tmp_path)


async def test_mcp_server_time_speaks_the_stateless_revision_over_stdio() -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(
            ServerConfig(command=sys.executable, args=("-m", "mcp_server_time"), limits=FAST)
        ) as conn:
            assert conn.era == "stateless" and conn.server_info is not None
            assert conn.server_info.name == "mcp-time" and conn.server_info.protocol_version == "2026-07-28"
            result = await conn.mcp.call_tool("get_current_time", {"timezone": "UTC"})
            assert not result.is_error and "UTC" in result.text


def test_probe_reports_the_era_of_a_stateless_http_server(tmp_path: Path) -> None:
    server = subprocess.Popen(
        [sys.executable, str(SDK_FEATURES), "streamable-http", "--stateless"],
        stdout=PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline().split()[1])
        cli = [*forkserver.CLI, "probe"]
        url = f"http://127.0.0.1:{port}/mcp"
        done = forkserver.run([*cli, "--json", "--url", url], capture_output=True, text=True, timeout=TIMEOUT)
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
        assert doc["era"] == "stateless" and doc["protocolVersion"] == "2026-07-28"
        assert doc["supportedVersions"] == ["2026-07-28"] and doc["server"]["name"] == "sdk-features-fixture"
        assert {tool["name"] for tool in doc["tools"]} == {"add", "ask_client", "grow", "touch"}
        text = forkserver.run([*cli, "--url", url], capture_output=True, text=True, timeout=TIMEOUT)
        assert text.returncode == 0 and "2026-07-28 (stateless: server/discover)" in text.stdout
        legacy = forkserver.run(
            [*cli, "--json", "--protocol", "handshake", "--url", url],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert json.loads(legacy.stdout)["era"] == "handshake"
    finally:
        server.terminate()
        server.wait(TIMEOUT)


def test_the_library_pages_client_features_example_runs_as_written(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parent.parent
    section = (root / "docs" / "library.md").read_text().split("## Roots, sampling and elicitation", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "no python block under 'Roots, sampling and elicitation'"
    program = tmp_path / "client_features.py"
    program.write_text(found.group(1))
    done = subprocess.run(
        [sys.executable, str(program)], cwd=root, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [
        "stateless 2026-07-28",
        f"roots={root.as_uri()} | sampled=you asked: About tea? | form=accept:Ada",
    ]

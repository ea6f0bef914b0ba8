#!/usr/bin/env python3
"""mcpl-host and the official MCP Python SDK client side by side on real servers.

Usage:
    .venv/bin/python scripts/compare_sdk.py [--everything PATH] [--json]

For each server and transport it offers, each client connects (serving roots, sampling and
elicitation), lists tools, calls one tool, lists resources and prompts, and the script prints
one Markdown table row per (server, transport, client): the protocol version and era each
reached, the number of tools, the call's outcome, the numbers of resources and prompts.

Servers: ``@modelcontextprotocol/server-everything`` (``--everything`` or
``$MCPL_TEST_SERVER_EVERYTHING``; skipped without it) over stdio, Streamable HTTP and
HTTP+SSE; ``mcp-server-time`` (PyPI) over stdio; ``fixtures/sdk_features_server.py`` (SDK
2.x) over stdio and Streamable HTTP (stateful and ``--stateless``). The SDK client is
``mcp.Client`` (``mode="auto"`` and ``"legacy"``); mcpl-host is ``connect`` of a stdio or HTTP
``ServerConfig`` (``protocol="auto"`` and ``"handshake"``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mcpl_host import HostHandlers, Limits, ServerConfig, connect  # noqa: E402
from mcpl_host.client_features import ElicitationResult, Roots, SamplingResult  # noqa: E402

FEATURES = ROOT / "fixtures" / "sdk_features_server.py"
TIMEOUT = 60


@dataclass
class Row:
    server: str
    transport: str
    client: str
    protocol: str = ""
    tools: int | str = ""
    call: str = ""
    resources: int | str = ""
    prompts: int | str = ""
    error: str = ""


@dataclass
class Target:
    server: str
    transport: str  # "stdio", "streamable-http", "sse"
    command: list[str] | None = None
    url: str | None = None
    call: tuple[str, dict[str, Any]] = ("echo", {"message": "hi"})


# -- mcpl-host ------------------------------------------------------------------------------------


class _Sampler:
    supports_tools = False

    async def create_message(self, context: Any, request: Any) -> SamplingResult:
        return SamplingResult.text("forty-two", "compare")


class _Elicitor:
    modes = ("form", "url")

    async def elicit(self, context: Any, request: Any) -> ElicitationResult:
        return ElicitationResult("decline")


async def run_mcpl(target: Target, protocol: str) -> Row:
    row = Row(target.server, target.transport, f"mcpl-host ({protocol})")
    handlers = HostHandlers(roots=Roots([ROOT]), sampling=_Sampler(), elicitation=_Elicitor())
    limits = Limits(handshake_timeout_seconds=30, close_grace_seconds=2, terminate_grace_seconds=1)
    settings: dict[str, Any] = {"limits": limits, "protocol": protocol}
    if target.command is not None:
        config = ServerConfig(command=target.command[0], args=tuple(target.command[1:]), **settings)
    else:
        assert target.url is not None
        config = ServerConfig(
            url=target.url, transport="sse" if target.transport == "sse" else "http", **settings
        )
    conn = connect(config, handlers=handlers)
    try:
        with anyio.fail_after(TIMEOUT):
            async with conn:
                info = conn.server_info
                assert info is not None
                row.protocol = f"{info.protocol_version} ({info.era})"
                row.tools = len(await conn.mcp.list_tools())
                result = await conn.mcp.call_tool(*target.call)
                row.call = "error result" if result.is_error else "ok"
                caps = info.capabilities
                row.resources = len(await conn.mcp.list_resources()) if "resources" in caps else "-"
                row.prompts = len(await conn.mcp.list_prompts()) if "prompts" in caps else "-"
    except Exception as exc:  # a comparison reports every failure as a cell
        row.error = f"{type(exc).__name__}: {exc}"[:160]
    return row


# -- the SDK --------------------------------------------------------------------------------------


async def run_sdk(target: Target, mode: str) -> Row:
    from mcp import Client, StdioServerParameters
    from mcp.client.sse import sse_client
    from mcp_types import CreateMessageResult, ElicitResult, ListRootsResult, Root, TextContent

    row = Row(target.server, target.transport, f"SDK Client ({mode})")

    async def sampling(context: Any, params: Any) -> Any:
        return CreateMessageResult(
            role="assistant", content=TextContent(type="text", text="forty-two"), model="compare"
        )

    async def roots(context: Any) -> Any:
        return ListRootsResult(roots=[Root(uri=ROOT.as_uri(), name=ROOT.name)])  # type: ignore[arg-type]

    async def elicitation(context: Any, params: Any) -> Any:
        return ElicitResult(action="decline")

    server: Any
    if target.command is not None:
        server = StdioServerParameters(command=target.command[0], args=target.command[1:])
    elif target.transport == "sse":
        assert target.url is not None
        server = sse_client(target.url)
    else:
        server = target.url
    client = Client(
        server,
        mode=mode,  # type: ignore[arg-type]
        sampling_callback=sampling,
        list_roots_callback=roots,
        elicitation_callback=elicitation,
        read_timeout_seconds=TIMEOUT,
    )
    try:
        with anyio.fail_after(TIMEOUT):
            async with client:
                session = client.session
                version = session.protocol_version if hasattr(session, "protocol_version") else "?"
                era = "stateless" if session.discover_result is not None else "handshake"
                row.protocol = f"{version} ({era})"
                row.tools = len((await client.list_tools()).tools)
                result = await client.call_tool(*target.call)
                row.call = "error result" if result.is_error else "ok"
                caps = session.server_capabilities
                row.resources = (
                    len((await client.list_resources()).resources) if caps and caps.resources else "-"
                )
                row.prompts = len((await client.list_prompts()).prompts) if caps and caps.prompts else "-"
    except Exception as exc:
        row.error = f"{type(exc).__name__}: {exc}"[:160]
    return row


# -- servers ---------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _http_server(
    command: list[str], env: dict[str, str] | None = None, port_line: bool = False
) -> Iterator[int]:
    port = 0 if port_line else _free_port()
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {}), **({} if port_line else {"PORT": str(port)})},
        start_new_session=True,
    )
    try:
        if port_line:
            assert process.stdout is not None
            port = int(process.stdout.readline().split()[1])
        else:
            deadline = time.monotonic() + TIMEOUT
            while time.monotonic() < deadline:
                with socket.socket() as sock:
                    if sock.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        process.wait(TIMEOUT)


Pairs = list[tuple[str, str]]
BOTH: Pairs = [("mcpl", "auto"), ("sdk", "auto"), ("mcpl", "handshake"), ("sdk", "legacy")]


async def _row(kind: str, mode: str, target: Target) -> Row:
    return await (run_mcpl(target, mode) if kind == "mcpl" else run_sdk(target, mode))


async def compare(everything: str | None) -> list[Row]:
    rows: list[Row] = []
    python = sys.executable

    async def each(target: Target, pairs: Pairs = BOTH) -> None:
        for kind, mode in pairs:
            rows.append(await _row(kind, mode, target))
            print(json.dumps(asdict(rows[-1])), file=sys.stderr)

    if everything:
        await each(Target("server-everything", "stdio", command=[everything, "stdio"]))
        for mode, path, name in (("streamableHttp", "/mcp", "streamable-http"), ("sse", "/sse", "sse")):
            with _http_server([everything, mode]) as port:
                await each(Target("server-everything", name, url=f"http://127.0.0.1:{port}{path}"))
    time_call = ("get_current_time", {"timezone": "UTC"})
    await each(Target("mcp-server-time", "stdio", command=[python, "-m", "mcp_server_time"], call=time_call))
    add = ("add", {"a": 1, "b": 2})
    await each(Target("SDK 2.x server", "stdio", command=[python, str(FEATURES), "stdio"], call=add))
    for options, name in (([], "streamable-http"), (["--stateless"], "streamable-http --stateless")):
        with _http_server([python, str(FEATURES), "streamable-http", *options], port_line=True) as port:
            await each(Target("SDK 2.x server", name, url=f"http://127.0.0.1:{port}/mcp", call=add))
    return rows


def table(rows: list[Row]) -> str:
    lines = [
        "| server | transport | client | protocol (era) | tools | one call | resources | prompts |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        cells: list[Any] = [r.server, r.transport, r.client]
        if r.error:
            cells += [f"failed: {r.error}", "", "", "", ""]
        else:
            cells += [r.protocol, r.tools, r.call, r.resources, r.prompts]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--everything", default=os.environ.get("MCPL_TEST_SERVER_EVERYTHING"))
    parser.add_argument("--json", action="store_true", help="one JSON array instead of the table")
    args = parser.parse_args(argv)
    rows = anyio.run(compare, args.everything)
    print(json.dumps([asdict(r) for r in rows], indent=2) if args.json else table(rows))


if __name__ == "__main__":
    main()

"""The era probe never costs a server (docs/protocol.md S2, S3, S3a, S3b).

Real shapes of deployed servers, hosted by default (no options): a stdio server that exits
with status 0, or 1, when its first method is unknown, one that closes its stdout and keeps
running, one that never answers the probe (``fixtures/unknown_first_server.py``), and an
HTTP server whose answer to the ``server/discover`` POST is HTTP 500, a body that is not
JSON, or a closed connection (``fixtures/http_bridge.py --discover-answer``). Each is hosted
through ``mcpl-host probe``, ``connect`` and ``Host`` (ready, a call
works, and a killed server comes back without a second probe: the fixture logs, per process,
the methods it read). Real processes and loopback HTTP, on asyncio and trio.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpl_host import GrantPolicy, Host, HostEvent, Limits, connect
from mcpl_host.config import ServerConfig
from mcpl_host.events import LIFECYCLE_KINDS
from mcpl_host.hosted import HostedServer
from mcpl_host.stateless import probe_skipped

from . import forkserver
from .conftest import FIXTURES
from .wire import port_line, stop_server_process

TIMEOUT = 60
CLI = [sys.executable, "-m", "mcpl_host.cli"]
SERVER = FIXTURES / "unknown_first_server.py"
BRIDGE = FIXTURES / "http_bridge.py"
DYING = ("exit0", "exit1", "close-stdout")
RESTARTED = "initialize on a restarted server"


def command(mode: str, log: Path) -> list[str]:
    return [sys.executable, str(SERVER), mode, "--log", str(log)]


def methods_by_process(log: Path) -> list[list[str | None]]:
    """The methods each start of the fixture read, in order of starts."""
    starts: dict[int, list[str | None]] = {}
    for line in log.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        starts.setdefault(row["pid"], []).append(row["method"])
    return list(starts.values())


def probe_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "240"}  # the era line on one line of the panel
    return forkserver.run([*CLI, "probe", *args], capture_output=True, text=True, timeout=TIMEOUT, env=env)


# --- pure rules ------------------------------------------------------------------------------


def test_probe_skipped_only_for_auto_after_the_handshake_era_or_an_mcpl_entry() -> None:
    assert probe_skipped("auto", learned=None, says_mcpl=False) is None
    assert probe_skipped("auto", learned="stateless", says_mcpl=False) is None
    assert "earlier connection" in str(probe_skipped("auto", learned="handshake", says_mcpl=False))
    assert "MCPL" in str(probe_skipped("auto", learned=None, says_mcpl=True))
    for forced in ("handshake", "stateless"):
        assert probe_skipped(forced, learned="handshake", says_mcpl=True) is None  # type: ignore[arg-type]


def test_an_entry_says_mcpl_by_an_explicit_compat_or_a_grant_pattern() -> None:
    def hosted(**options: Any) -> HostedServer:
        return HostedServer(ServerConfig(command=sys.executable, args=(str(SERVER),), **options))

    assert not hosted().says_mcpl
    assert hosted(compat="0.4").says_mcpl
    assert hosted(compat="strict").says_mcpl
    assert hosted(grant_policy=GrantPolicy(grant=("pushEvents",))).says_mcpl
    assert not hosted(grant_policy=GrantPolicy(grant_all_advertised=True)).says_mcpl


# --- stdio: the library --------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("mode", DYING)
async def test_connect_stdio_restarts_a_server_the_probe_cost_and_speaks_initialize(
    mode: str, tmp_path: Path
) -> None:
    log = tmp_path / "methods.jsonl"
    with anyio.fail_after(TIMEOUT):
        async with connect(ServerConfig(command=sys.executable, args=tuple(command(mode, log)[1:]))) as conn:
            assert conn.era == "handshake"
            tools = await conn.mcp.list_tools()
            result = await conn.mcp.call_tool("echo", {"text": "still here"})
            probe = conn.era_probe
    assert [tool.name for tool in tools] == ["echo"]
    assert result.content[0]["text"] == "still here"
    assert probe is not None and probe.sent == "server/discover" and probe.fallback == RESTARTED
    expected = {
        "exit0": "exited with status 0",
        "exit1": "exited with status 1",
        "close-stdout": "closed its output",
    }
    assert expected[mode] in probe.outcome
    first, second = methods_by_process(log)
    assert first == ["server/discover"]
    assert second[:2] == ["initialize", "notifications/initialized"]


@pytest.mark.anyio
async def test_a_server_that_refuses_the_probe_and_then_exits_is_restarted_too(tmp_path: Path) -> None:
    log = tmp_path / "methods.jsonl"
    with anyio.fail_after(TIMEOUT):
        async with connect(
            ServerConfig(command=sys.executable, args=tuple(command("refuse-exit", log)[1:]))
        ) as conn:
            result = await conn.mcp.call_tool("echo", {"text": "again"})
            probe = conn.era_probe
    assert result.content[0]["text"] == "again"
    assert probe is not None
    assert probe.outcome == "refused with error -32601, then the server exited with status 0"
    assert probe.fallback == RESTARTED
    assert [start[0] for start in methods_by_process(log)] == ["server/discover", "initialize"]


@pytest.mark.anyio
async def test_a_silent_server_costs_only_the_probe_window_and_initialize_keeps_the_rest(
    tmp_path: Path,
) -> None:
    log = tmp_path / "methods.jsonl"
    # A 3 s deadline: before, the probe's window took all of it and initialize none.
    limits = Limits(handshake_timeout_seconds=3.0, request_timeout_seconds=3.0)
    with anyio.fail_after(TIMEOUT):
        async with connect(
            ServerConfig(command=sys.executable, args=tuple(command("silent", log)[1:]), limits=limits)
        ) as conn:
            result = await conn.mcp.call_tool("echo", {"text": "late but fine"})
            probe = conn.era_probe
    assert result.content[0]["text"] == "late but fine"
    assert (
        probe is not None and probe.outcome.startswith("no answer within") and probe.fallback == "initialize"
    )
    assert methods_by_process(log) == [
        ["server/discover", "initialize", "notifications/initialized", "tools/call"]
    ]


# --- stdio: mcpl-host probe ------------------------------------------------------------------


@pytest.mark.parametrize("mode", DYING)
def test_probe_hosts_a_server_the_probe_cost_and_says_so(mode: str, tmp_path: Path) -> None:
    log = tmp_path / "methods.jsonl"
    # --timeout 3: the restart (and the stop of a server that closed its stdout but runs on)
    # fits in the deadline with initialize.
    done = probe_cli("--timeout", "3", "--", *command(mode, log))
    assert done.returncode == 0, done.stderr
    era = next(line for line in done.stdout.splitlines() if "handshake era" in line)
    assert "server/discover:" in era and "restarted" in era
    done = probe_cli("--json", "--", *command(mode, log))
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["era"] == "handshake"
    assert doc["eraProbe"]["sent"] == "server/discover" and doc["eraProbe"]["fallback"] == RESTARTED
    assert [tool["name"] for tool in doc["tools"]] == ["echo"]


def test_probe_of_a_silent_server_under_a_short_timeout_succeeds(tmp_path: Path) -> None:
    done = probe_cli("--json", "--timeout", "3", "--", *command("silent", tmp_path / "methods.jsonl"))
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["eraProbe"]["fallback"] == "initialize"
    assert doc["eraProbe"]["outcome"].startswith("no answer within")


def test_protocol_handshake_still_forces_the_era_without_a_probe(tmp_path: Path) -> None:
    log = tmp_path / "methods.jsonl"
    done = probe_cli("--json", "--protocol", "handshake", "--", *command("exit0", log))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["eraProbe"] == {
        "sent": None,
        "outcome": "not sent: the protocol is set to handshake",
        "fallback": None,
    }
    assert methods_by_process(log)[0][0] == "initialize"


# --- stdio: Host, with a restart -----------------------------------------------------------


async def next_kind(stream: Any, kind: str, seen: list[HostEvent]) -> HostEvent:
    async for event in stream:
        seen.append(event)
        if event.kind == kind:
            return event
    raise AssertionError(f"the host closed before a {kind!r} event")


@pytest.mark.anyio
@pytest.mark.parametrize("mode", DYING)
async def test_host_brings_up_a_server_the_probe_cost_and_a_restart_does_not_probe_again(
    mode: str, tmp_path: Path
) -> None:
    log = tmp_path / "methods.jsonl"
    argv = command(mode, log)
    config = ServerConfig(name="s", transport="stdio", command=argv[0], args=tuple(argv[1:]))
    seen: list[HostEvent] = []
    with anyio.fail_after(TIMEOUT):
        async with Host({"s": config}) as host:
            stream = host.events()
            await next_kind(stream, "ready", seen)
            server = host.server("s")
            conn = await server.connected()
            result = await conn.mcp.call_tool("echo", {"text": "one"})
            pid = conn.connection.pid
            assert isinstance(pid, int)
            os.kill(pid, signal.SIGKILL)
            await next_kind(stream, "ready", seen)
            again = await (await server.connected()).mcp.call_tool("echo", {"text": "two"})
            assert server.hosted.learned_era == "handshake"
    assert result.content[0]["text"] == "one" and again.content[0]["text"] == "two"
    kinds = [event.kind for event in seen if event.kind in LIFECYCLE_KINDS]
    assert kinds.count("ready") == 2 and "gave_up" not in kinds
    starts = methods_by_process(log)
    assert len(starts) == 3, starts  # the probe's casualty, its restart, the restart after the kill
    assert starts[0] == ["server/discover"]
    assert starts[1][0] == "initialize" and "server/discover" not in starts[1]
    assert starts[2][0] == "initialize" and "server/discover" not in starts[2]


# --- HTTP: the discover POST answered with no JSON-RPC answer -------------------------------


@asynccontextmanager
async def bridge(answer: str, log: Path) -> AsyncIterator[str]:
    argv = [sys.executable, str(BRIDGE), "--json", "--discover-answer", answer, "--", *command("exit0", log)]
    process = await anyio.open_process(argv, start_new_session=True, stderr=None)
    try:
        port = await port_line(process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        await stop_server_process(process)


ANSWERS = {"500": "HTTP 500", "html": "HTTP 200", "notjson": "HTTP 200", "close": "ended without"}


@pytest.mark.anyio
@pytest.mark.parametrize("answer", sorted(ANSWERS))
async def test_connect_http_falls_back_when_the_discover_post_gets_no_json_rpc_answer(
    answer: str, tmp_path: Path
) -> None:
    log = tmp_path / "methods.jsonl"
    with anyio.fail_after(TIMEOUT):
        async with bridge(answer, log) as url:
            async with connect(ServerConfig(url=url)) as conn:
                assert conn.era == "handshake"
                result = await conn.mcp.call_tool("echo", {"text": "over http"})
                probe = conn.era_probe
    assert result.content[0]["text"] == "over http"
    assert probe is not None and probe.fallback == "initialize" and ANSWERS[answer] in probe.outcome
    # The bridge never passed the probe to the server: the one start of it saw initialize first.
    assert methods_by_process(log)[0][:2] == ["initialize", "notifications/initialized"]


@pytest.mark.anyio
async def test_a_discover_post_never_answered_costs_only_the_probe_window(tmp_path: Path) -> None:
    limits = Limits(handshake_timeout_seconds=3.0, request_timeout_seconds=3.0)
    with anyio.fail_after(TIMEOUT):
        async with bridge("hold", tmp_path / "methods.jsonl") as url:
            async with connect(ServerConfig(url=url, limits=limits)) as conn:
                result = await conn.mcp.call_tool("echo", {"text": "in time"})
                probe = conn.era_probe
    assert result.content[0]["text"] == "in time"
    assert (
        probe is not None
        and probe.outcome == "no answer within 1.5 seconds"
        and probe.fallback == "initialize"
    )


@pytest.mark.anyio
@pytest.mark.parametrize("answer", sorted(ANSWERS))
async def test_probe_and_host_over_http_fall_back_and_come_back_after_a_session_loss(
    answer: str, tmp_path: Path
) -> None:
    log = tmp_path / "methods.jsonl"
    with anyio.fail_after(TIMEOUT):
        async with bridge(answer, log) as url:
            done = await forkserver.run_async([*CLI, "probe", "--json", "--url", url])
            assert done.returncode == 0, done.stderr.decode()
            doc = json.loads(done.stdout)
            assert doc["era"] == "handshake" and doc["eraProbe"]["fallback"] == "initialize"
            config = ServerConfig(name="h", transport="http", url=url)
            seen: list[HostEvent] = []
            async with Host({"h": config}) as host:
                stream = host.events()
                await next_kind(stream, "ready", seen)
                server = host.server("h")
                result = await (await server.connected()).mcp.call_tool("echo", {"text": "one"})
                server.restart()
                await next_kind(stream, "ready", seen)
                conn = await server.connected()
                again = await conn.mcp.call_tool("echo", {"text": "two"})
                probe = conn.era_probe
    assert result.content[0]["text"] == "one" and again.content[0]["text"] == "two"
    assert probe is not None and probe.sent is None and "earlier connection" in probe.outcome


# --- mcpl-host run, with a kill ----------------------------------------------------------------


@pytest.mark.parametrize("mode", DYING)
def test_run_brings_up_a_server_the_probe_cost_and_a_restart_does_not_probe_again(
    mode: str, tmp_path: Path
) -> None:
    from .test_cli import Running

    log = tmp_path / "methods.jsonl"
    argv = command(mode, log)
    config = tmp_path / "servers.json"
    entry = {"command": argv[0], "args": argv[1:], "timeouts": {"closeGrace": 1, "terminateGrace": 1}}
    config.write_text(json.dumps({"mcpServers": {"s": entry}}), encoding="utf-8")
    cli = Running("run", str(config))
    try:
        cli.wait_for("stdout", "ready unknown-first 1.0.0")
        current = methods_by_process(log)
        assert len(current) == 2 and current[1][0] == "initialize", current
        pid = next(
            row["pid"]
            for row in map(json.loads, log.read_text(encoding="utf-8").splitlines())
            if row["method"] == "initialize"
        )
        os.kill(pid, signal.SIGKILL)
        cli.wait_for("stdout", "(attempt 2)")
    finally:
        cli.process.send_signal(signal.SIGINT)
        status, out, err = cli.finish()
    assert status == 0, err
    assert "gave up" not in out + err
    starts = methods_by_process(log)
    assert len(starts) == 3, starts
    assert starts[0] == ["server/discover"]
    assert starts[2][0] == "initialize" and "server/discover" not in starts[2]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["exit0", "refuse-exit"])
async def test_the_transport_the_probe_cost_is_not_reported_lost(mode: str, tmp_path: Path) -> None:
    from mcpl_host import HostHandlers
    from mcpl_host.jsonrpc.errors import ConnectionLost

    class Recording(HostHandlers):
        def __init__(self) -> None:
            super().__init__()
            self.lost: list[str] = []

        def on_connection_lost(self, server: str, error: ConnectionLost) -> None:
            self.lost.append(str(error))

    handlers = Recording()
    log = tmp_path / "methods.jsonl"
    with anyio.fail_after(TIMEOUT):
        async with connect(
            ServerConfig(command=sys.executable, args=tuple(command(mode, log)[1:])), handlers=handlers
        ) as conn:
            await conn.mcp.list_tools()
            lost_while_open = list(handlers.lost)
            pid = conn.connection.pid
            assert isinstance(pid, int)
            os.kill(pid, signal.SIGKILL)  # a loss after the handshake is reported, as ever
            await conn.wait_closed()
    assert lost_while_open == []
    assert len(handlers.lost) == 1, handlers.lost

"""What the issue asks replay to show: a recording of each fixture server the suite uses (the
demo MCPL server, the MCPL fixture, the SDK-based server) and of server-everything (when
``MCPL_TEST_SERVER_EVERYTHING`` names it), replayed by ``mcpl-host replay``; the same host
test (the handshake, the lists, a tool call, and server requests served during a call)
gives the same answers against the replay as against the live server.

Each server is recorded once per module (a live run with ``record=``, on first use), and
each backend replays it: the demo over stdio (the CLI as the server's command), the others
over Streamable HTTP (the CLI forked, without its start-up cost).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from mcpl_host import GrantPolicy, HostHandlers, RequestContext, ServerConfig, connect
from mcpl_host.client_features import (
    ElicitationRequest,
    ElicitationResult,
    Roots,
    SamplingRequest,
    SamplingResult,
)
from mcpl_host.limits import Limits
from mcpl_host.recording import Recorder

from . import forkserver
from .conftest import FIXTURES

pytestmark = pytest.mark.anyio
TIMEOUT = 60
FAST = Limits(close_grace_seconds=2.0, terminate_grace_seconds=1.0, handshake_timeout_seconds=30.0)


class Sampler:
    """Answers every sampling request with one fixed text."""

    supports_tools = False

    async def create_message(self, context: RequestContext, request: SamplingRequest) -> SamplingResult:
        return SamplingResult.text("forty-two", "test-model")


class Elicitor:
    """Accepts every form with one fixed name."""

    modes = ("form",)

    async def elicit(self, context: RequestContext, request: ElicitationRequest) -> ElicitationResult:
        return ElicitationResult("accept", {"name": "Ada"})


def handlers() -> HostHandlers:
    """Roots, sampling and elicitation served: the servers' requests during a call are
    answered (and replayed)."""
    return HostHandlers(roots=Roots([Path("/srv/replay-root")]), sampling=Sampler(), elicitation=Elicitor())


@dataclass(frozen=True)
class Server:
    """A server the suite uses and the host test's calls for it (tool -> arguments)."""

    name: str
    command: str
    args: tuple[str, ...]
    calls: Mapping[str, dict[str, Any]] = field(default_factory=dict[str, dict[str, Any]])
    env: Mapping[str, str] = field(default_factory=dict[str, str])
    #: How the replay is served: "stdio" (the CLI as the server's command) or "http" (the
    #: CLI forked, tests/forkserver.py, serving Streamable HTTP: no start-up cost).
    replay_over: str = "http"


def _everything() -> str | None:
    executable = os.environ.get("MCPL_TEST_SERVER_EVERYTHING")
    return executable if executable and os.path.exists(executable) else None


SERVERS = [
    Server(
        "demo",
        sys.executable,
        (str(FIXTURES / "demo_server.py"),),
        {"add": {"a": 2, "b": 3}, "echo": {"text": "hi"}},
        replay_over="stdio",
    ),
    # The era probe costs it its transport (exit 0 on server/discover): the replay ends there
    # too (docs/protocol.md RP7) and the host's second transport is answered from initialize.
    Server(
        "probe-killed",
        sys.executable,
        (str(FIXTURES / "unknown_first_server.py"), "exit0"),
        {"echo": {"text": "x"}},
        replay_over="stdio",
    ),
    Server(
        "mcpl-fixture",
        sys.executable,
        (str(FIXTURES / "mcpl_server.py"),),
        {"push": {"text": "pushed"}, "model": {}},
    ),
    Server(
        "sdk",
        sys.executable,
        (str(FIXTURES / "sdk_features_server.py"), "stdio"),
        {"add": {"a": 1, "b": 2}, "ask_client": {"topic": "replay"}},
    ),
    Server("listing", sys.executable, (str(FIXTURES / "listing_server.py"),)),
    Server(
        "current-spec",
        sys.executable,
        (str(FIXTURES / "current_spec" / "server.py"),),
    ),
    Server("trace", sys.executable, (str(FIXTURES / "trace_server.py"),), {"meta": {}}),
    Server("tasks", sys.executable, (str(FIXTURES / "tasks_server.py"),), {"count": {"polls": 1}}),
    Server(
        "everything",
        _everything() or "",
        ("stdio",),
        {
            "echo": {"message": "hello"},
            "get-sum": {"a": 1, "b": 2},
            "trigger-sampling-request": {"prompt": "hi", "maxTokens": 10},
        },
    ),
]


def config(server: Server) -> ServerConfig:
    return ServerConfig(
        name=server.name,
        command=server.command,
        args=server.args,
        env=dict(server.env),
        grant_policy=GrantPolicy(grant_all_advertised=True),
        limits=FAST,
    )


async def host_test(
    server_config: ServerConfig, calls: Mapping[str, dict[str, Any]], **runtime: Any
) -> dict[str, Any]:
    """What the host sees of a server: its info, the era probe's fallback, MCPL state, lists
    and the calls' results."""
    seen: dict[str, Any] = {}
    with anyio.fail_after(TIMEOUT):
        async with connect(server_config, handlers=handlers(), **runtime) as conn:
            info = conn.server_info
            assert info is not None
            seen["server"] = [info.name, info.version, info.capabilities]
            seen["mcpl"] = conn.mcpl_state.name
            # What followed the era probe: "initialize on a restarted server" when it cost
            # the server its transport (docs/protocol.md S3a; the replay's RP7).
            seen["era"] = conn.era_probe.fallback if conn.era_probe is not None else None
            seen["tools"] = sorted(tool.name for tool in await conn.mcp.list_tools())
            if "resources" in info.capabilities:
                seen["resources"] = sorted(resource.uri for resource in await conn.mcp.list_resources())
            if "prompts" in info.capabilities:
                seen["prompts"] = sorted(prompt.name for prompt in await conn.mcp.list_prompts())
            for name, arguments in calls.items():
                result = await conn.mcp.call_tool(name, arguments)
                seen[f"call {name}"] = [result.is_error, result.text]
    return seen


@dataclass
class Recorded:
    """A server's live run, recorded: the recording's path and what the host test saw."""

    path: Path
    seen: dict[str, Any]


def _present(server: Server) -> None:
    if server.name == "everything" and _everything() is None:
        pytest.skip("set MCPL_TEST_SERVER_EVERYTHING to the mcp-server-everything executable (.ci/run does)")


@pytest.fixture(scope="module")
def recorded() -> dict[str, Recorded]:
    """Each server run live once, recorded (``record=``), on asyncio; filled on first use."""
    return {}


def _recorded(server: Server, cache: dict[str, Recorded], folder: Path) -> Recorded:
    if server.name not in cache:
        path = folder / f"{server.name}.jsonl"

        async def live() -> dict[str, Any]:
            with Recorder(path) as recorder:
                return await host_test(config(server), server.calls, record=recorder)

        cache[server.name] = Recorded(path, anyio.run(live))
    return cache[server.name]


@pytest.mark.parametrize("server", SERVERS, ids=[server.name for server in SERVERS])
async def test_the_replay_answers_the_host_test_as_the_live_server_did(
    server: Server, recorded: dict[str, Recorded], tmp_path_factory: pytest.TempPathFactory
) -> None:
    _present(server)
    live = await anyio.to_thread.run_sync(_recorded, server, recorded, tmp_path_factory.mktemp("rec"))
    policy = GrantPolicy(grant_all_advertised=True)
    if server.replay_over == "stdio":
        command = ServerConfig(
            name=server.name, command=sys.executable, args=("-m", "mcpl_host.cli", "replay", str(live.path)),
            grant_policy=policy, limits=FAST,
        )  # fmt: skip
        assert await host_test(command, server.calls) == live.seen
        return
    # Over HTTP the host probes the era as over stdio (docs/protocol.md S1).
    process = forkserver.Forked(
        [*forkserver.CLI, "replay", str(live.path), "--http", "127.0.0.1:0"],
        stdin=os.open(os.devnull, os.O_RDONLY),
    )
    try:
        url = await anyio.to_thread.run_sync(process.stdout.readline)
        replay = ServerConfig(name=server.name, url=url.strip(), grant_policy=policy, limits=FAST)
        assert await host_test(replay, server.calls) == live.seen
    finally:
        process.send_signal(signal.SIGTERM)
        await anyio.to_thread.run_sync(process.wait, 10)
        process.stdout.close()
        process.stderr.close()

"""RFC-009 (experimental) conformance vectors (``tests/vectors/mcpl-spec/input-stream-vectors.json``,
a byte-for-byte copy; tests/vectors/README.md) run against the real host.

Each trace gets a fresh ``HostedServer`` with ``input_streams`` on, over real pipes to
``fixtures/current_spec/server.py``, whose ``input_streams`` part is the producer: each
request of the trace goes out as the tool call ``input_call`` (the fixture sends it to the
host and returns the host's answer), and the registered channels follow the trace's channel
map through ``input_channels``. The trace's host-side facts are the application's:
``config``/``control`` become the ``ServerConfig`` (grant patterns, limits, mode; the
advertisement through ``MCPL_FIXTURE_CHANNELS``), the handlers (the sender binding and channel
identity of ``HostHandlers.input_stream_binding``, a permitted channel; ``finalAccepted`` the
ordinary ``channel_message`` accepting or refusing the final), the ``input_clock`` (``now``),
a grant change (``HostedServer.update_policy``), a new transport (``transportEpoch``: the
next connection is ``epoch-2``), a re-registration (``generation``: the fixture sends the
channel again as ``updated``). ``prepare`` records the host's preparation artifact
(``InputStreamService.prepare``). The expected state is compared with
``InputStreamService.snapshot()`` and the messages the application's ``channel_message``
received, as the file says (non-empty objects partial, empty ones and arrays exact).

The 7 advertisement vectors run through the handshake: the fixture advertises the vector's
``channels`` member, and the connection's advertised paths are compared. asyncio and trio.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpl_host import HostHandlers, ServerConfig
from mcpl_host.handlers import RequestContext
from mcpl_host.hosted import HostedServer
from mcpl_host.jsonrpc.errors import HandlerError
from mcpl_host.mcpl.grants import GrantPolicy
from mcpl_host.mcpl.input_streams import SenderBinding
from mcpl_host.server_connection import ServerConnection

from .conftest import FIXTURES, record_vector
from .test_input_streams import READ_DIFFERENTLY, same_answer, subset
from .wire import FAST

FILE_NAME = "input-stream-vectors.json"
FILE = json.loads((Path(__file__).parent / "vectors" / "mcpl-spec" / FILE_NAME).read_text(encoding="utf-8"))
TRACES: list[dict[str, Any]] = FILE["traces"]
SERVER = str(FIXTURES / "current_spec" / "server.py")
TIMEOUT = 30
#: Traces whose host facts this runner cannot set up on the real host: listed with the rule
#: in docs/protocol.md, "Input streams (RFC-009)".
READ_DIFFERENTLY_TRACES: dict[str, str] = {
    # The server principal is the server (one HostedServer, IS7): another principal is
    # another server, whose epochs and leases are numbered on their own. Its ids are
    # taken as issued (``_Aliases``); the rest of the trace is checked as written.
    "unrelated-principal-is-not-a-duplicate": "IS7",
}


class _Aliases:
    """Expected ``transportEpoch``/``leaseId`` -> the one the host issued (a read-differently
    trace only): learned from open results, applied to later params."""

    KEYS = ("transportEpoch", "leaseId")

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}

    def learn(self, answer: dict[str, Any], expect: dict[str, Any]) -> None:
        result, wanted = answer.get("result"), expect.get("result")
        if isinstance(result, dict) and isinstance(wanted, dict):
            for key in self.KEYS:
                if key in result and key in wanted:
                    self.ids[wanted[key]] = result[key]
                    result[key] = wanted[key]

    def params(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            k: self.ids.get(v, v) if k in self.KEYS and isinstance(v, str) else v for k, v in params.items()
        }


def test_file_is_the_one_described() -> None:
    """The coverage the file promises (conformance/README.md §7): 7 advertisements, 83 traces."""
    assert FILE["profile"] == "rfc-009-text-input"
    assert len(FILE["advertisements"]) == 7
    assert len(TRACES) == 83


class Env:
    """The trace's host facts: ``defaults``, then ``config``, then each ``control``."""

    def __init__(self, trace: dict[str, Any]) -> None:
        self.values: dict[str, Any] = {**FILE["defaults"], **trace.get("config", {})}

    def __getitem__(self, key: str) -> Any:
        return self.values[key]


class TraceClock:
    """The trace's ``now``, as both clocks (RFC-009 §4.1, §8)."""

    def __init__(self, env: Env) -> None:
        self.env = env

    def wall_ms(self) -> int:
        return int(self.env["now"])

    def monotonic_ms(self) -> float:
        return float(self.env["now"])


class TraceHandlers(HostHandlers):
    """The application: the sender bindings and channel identities of the trace's channel
    map, and the ordinary incoming path, which keeps what it accepts."""

    def __init__(self, env: Env) -> None:
        super().__init__()
        self.env = env
        self.messages: list[dict[str, Any]] = []

    def input_stream_binding(self, server: str, channel_id: str, descriptor: Any) -> SenderBinding | None:
        channel = self.env["channels"].get(channel_id)
        if channel is None or not channel["permitted"]:
            return None
        return SenderBinding(frozenset(channel["senders"]), channel["identity"])

    async def channel_message(self, context: RequestContext, message: dict[str, Any]) -> str | None:
        if not self.env["finalAccepted"]:
            raise HandlerError(-32603, "refused by the ordinary incoming policy")
        self.messages.append(message)
        return None


def _grant(env: Env) -> GrantPolicy:
    return GrantPolicy(grant=(*env["grants"], "channels.register"))


def _config(env: Env) -> ServerConfig:
    channels = env["advertisement"].get("channels")
    if isinstance(channels, dict):  # so the channel map can be registered at all
        channels = {"register": True, **channels}
    limits = dataclasses.replace(
        FAST,
        input_stream_max_chars=env["maxChars"],
        input_stream_update_interval_seconds=1 / env["maxUpdateHz"],
        input_stream_max_seconds=env["maxDurationMs"] / 1000,
        max_input_streams=env["maxStreams"],
    )
    return ServerConfig(
        name=env["serverPrincipal"],
        command=sys.executable,
        args=(SERVER,),
        env={"MCPL_FIXTURE_CHANNELS": json.dumps(channels if channels is not None else False)},
        limits=limits,
        grant_policy=_grant(env),
        input_streams=True,
        input_stream_mode=env["mode"],
    )


async def _text_answer(conn: ServerConnection, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await conn.mcp.call_tool(tool, args)
    answer = json.loads(result.content[0]["text"])
    assert isinstance(answer, dict)
    return answer


async def _register(conn: ServerConnection, env: Env, renew: list[str], *, always: bool = False) -> None:
    descriptors = [
        {"id": cid, "type": "voice", "direction": c["direction"]} for cid, c in env["channels"].items()
    ]
    if descriptors or always:
        await _text_answer(conn, "input_channels", {"channels": descriptors, "renew": renew})


async def run_trace(trace: dict[str, Any]) -> None:
    env = Env(trace)
    handlers = TraceHandlers(env)
    aliases = _Aliases() if trace["name"] in READ_DIFFERENTLY_TRACES else None
    config = _config(env)
    if not env["ready"]:  # the first request goes out before the policy receipt (fixture)
        first = trace["steps"][0]
        early = json.dumps({"method": first["method"], "params": first["params"]})
        config = dataclasses.replace(config, env={**config.env, "MCPL_FIXTURE_EARLY_CALL": early})
    hosted = HostedServer(config, handlers=handlers, input_clock=TraceClock(env))
    conn = hosted.open_connection()
    await conn.__aenter__()
    try:
        await _register(conn, env, [])
        for number, step in enumerate(trace["steps"]):
            where = f"{trace['name']} step {number}"
            control = step.get("control")
            if control is not None:
                before = {cid: dict(c) for cid, c in env["channels"].items()}
                env.values.update(control)
                if "transportEpoch" in control or "serverPrincipal" in control:
                    await conn.__aexit__(None, None, None)
                    if "serverPrincipal" in control:
                        hosted = HostedServer(_config(env), handlers=handlers, input_clock=TraceClock(env))
                    conn = hosted.open_connection()
                    await conn.__aenter__()
                    await _register(conn, env, [])
                else:
                    if "grants" in control:
                        await hosted.update_policy(_grant(env))
                    if "channels" in control:
                        renew = [
                            cid
                            for cid, c in env["channels"].items()
                            if cid in before and c["generation"] != before[cid]["generation"]
                        ]
                        await _register(conn, env, renew, always=True)
            streams = conn.input_streams
            assert streams is not None
            if "prepare" in step:
                streams.prepare(step["prepare"])
            if "method" in step:
                if number == 0 and not env["ready"]:
                    answer = await _text_answer(conn, "input_early", {})
                else:
                    params = aliases.params(step["params"]) if aliases is not None else step["params"]
                    answer = await _text_answer(
                        conn, "input_call", {"method": step["method"], "params": params}
                    )
                if aliases is not None:
                    aliases.learn(answer, step["expect"])
                assert same_answer(answer, step["expect"]), f"{where}: {answer} != {step['expect']}"
            if "expectState" in step:
                state = {**streams.snapshot(), "messages": handlers.messages}
                assert subset(step["expectState"], state), f"{where}: {state} !~ {step['expectState']}"
    finally:
        await conn.__aexit__(None, None, None)


@pytest.mark.anyio
@pytest.mark.parametrize("trace", TRACES, ids=[t["name"] for t in TRACES])
async def test_trace(trace: dict[str, Any], anyio_backend: str, request: pytest.FixtureRequest) -> None:
    status = "read differently" if trace["name"] in READ_DIFFERENTLY_TRACES else "passed"
    record_vector(request, FILE_NAME, trace["name"], status)  # first: a failure below counts as failed
    with anyio.fail_after(TIMEOUT):
        await run_trace(trace)


@pytest.mark.anyio
@pytest.mark.parametrize("vector", FILE["advertisements"], ids=[v["name"] for v in FILE["advertisements"]])
async def test_advertisement(
    vector: dict[str, Any], anyio_backend: str, request: pytest.FixtureRequest
) -> None:
    read_differently = vector["name"] == READ_DIFFERENTLY
    record_vector(request, FILE_NAME, vector["name"], "read differently" if read_differently else "passed")
    channels = vector["input"].get("channels", False)
    config = ServerConfig(
        name="adv",
        command=sys.executable,
        args=(SERVER,),
        env={"MCPL_FIXTURE_CHANNELS": json.dumps(channels)},
        limits=FAST,
        input_streams=True,
    )
    with anyio.fail_after(TIMEOUT):
        async with HostedServer(config).open_connection() as conn:
            advertised = conn.policy.state.advertised
    incoming = True if read_differently else vector["expect"]["incoming"]  # docs/protocol.md IS1
    assert ("channels.incoming" in advertised) == incoming
    assert ("channels.incoming.streaming" in advertised) == vector["expect"]["streaming"]

"""RFC-007 revision 3 §14 conformance vectors (``tests/vectors/mcpl-spec/
tool-lifecycle-vectors.json``, a byte-for-byte copy; tests/vectors/README.md) run against the
real ``Host``, asyncio and trio.

Each vector gets a fresh ``Host`` over real pipes: one server per observer (named by its id)
and one per provider prefix of the vector's tools (``x--run``: server ``x``, tool ``run``;
docs/protocol.md TL8), all ``fixtures/current_spec/server.py`` (its ``lifecycle`` part). The
observer's ``policy`` becomes its ``grant_policy`` (``enabledCapabilities`` as ``grant``
patterns) and its ``tool_lifecycle`` narrowings; a provider stages the vector's tools with
their classes declared (``lifecycle_tools``). ``host--*`` tools are the application's own
(``Host.tool_call(None, ...)``, with the vector's classes). Actions:

- ``observe``: the observer sends ``tools/observe`` (``lifecycle_observe``); the answer is
  ``{}`` or the ``expectCode`` error (with ``data.limit`` for ``expectLimit``);
- ``call``: each call through ``Host.tool_call(...)`` and ``call.execute()``; a ``hold`` is
  planned on the provider (``lifecycle_plan``) and the next action waits until the call is
  opened; ``background`` calls run in a task group; an ``approval`` call is made with
  ``pending=True`` and waits for ``approve`` / ``refuse``;
- ``release`` (``lifecycle_release``), ``wait`` (every background call done), ``settle``
  (nothing to do: the read-back below is the barrier), ``disconnect`` (the provider ends,
  ``lifecycle_exit``), ``interrupt`` (the conversation's background calls are cancelled),
  ``grant`` (``HostedServer.update_policy``).

Then each observer's ``tools/lifecycle`` notifications are read back in order (``seen``: a
request on the same ordered pipe, so every notification sent before it is there) and
compared with ``expect``: per call, the phases, ``tool``, ``conversationId``, ``class`` (a
set), ``serverId``/``serverTool`` (absent for the host's own tool), ``input``,
``inputWithheld``, ``inputAltered``, ``isError``, the bound; no other call reported; no
``result``/``output``/``content`` member anywhere, no ``forbiddenText``. A call's ``modelId``
is given to the host (``provider_call_id``) only when it is a ``toolu_`` id, one the provider
guarantees unique (TL9); vector 18's ``call_0`` never is.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from mcpl_host import Host, ServerConfig
from mcpl_host.jsonrpc.errors import MCPLHostError
from mcpl_host.limits import Limits
from mcpl_host.mcpl.grants import GrantPolicy
from mcpl_host.mcpl.tool_lifecycle import DEFAULT_INPUTS_CLASSES, Narrowing, ToolLifecyclePolicy
from mcpl_host.schema_check import judge
from mcpl_host.server_connection import ServerConnection
from mcpl_host.services.tool_lifecycle import ReportedToolCall

from .conftest import FIXTURES, record_vector
from .wire import FAST

FILE_NAME = "tool-lifecycle-vectors.json"
HERE = Path(__file__).parent / "vectors" / "mcpl-spec"
FILE = json.loads((HERE / FILE_NAME).read_text(encoding="utf-8"))
#: RFC-007 §13 ToolLifecycleParams, transcribed (tests/vectors/README.md).
PARAMS_SCHEMA = json.loads((HERE / "tool-lifecycle-params.schema.json").read_text(encoding="utf-8"))
VECTORS: list[dict[str, Any]] = FILE["vectors"]
SERVER = str(FIXTURES / "current_spec" / "server.py")
TIMEOUT = 30
LIMITS: Limits = FAST
CONTENT_FIELDS = ("result", "output", "content")


def test_file_is_the_one_described() -> None:
    assert FILE["profile"] == "rfc-007-revision-3"
    assert [v["rfcVector"] for v in VECTORS] == list(range(1, 55))


def _split(model_name: str) -> tuple[str, str]:
    server, _, tool = model_name.partition("--")
    assert tool, model_name
    return server, tool


def _narrowing(block: dict[str, Any] | None) -> Narrowing | None:
    if block is None:
        return None
    classes = block.get("classes")
    if classes == "default":
        classes = DEFAULT_INPUTS_CLASSES
    return Narrowing(
        tools=tuple(block["tools"]) if "tools" in block else None,
        classes=tuple(classes) if classes is not None else None,
        conversations=tuple(block["conversations"]) if "conversations" in block else None,
    )


def _lifecycle_policy(policy: dict[str, Any]) -> ToolLifecyclePolicy:
    block = policy.get("toolLifecycle") or {}
    return ToolLifecyclePolicy(
        observe=_narrowing(block.get("observe")), inputs=_narrowing(block.get("inputs"))
    )


def _grant(policy: dict[str, Any]) -> GrantPolicy:
    return GrantPolicy(grant=tuple(policy.get("enabledCapabilities") or ()))


@dataclass
class Run:
    host: Host
    vector: dict[str, Any]
    observers: list[str]
    tg: anyio.abc.TaskGroup
    calls: dict[str, ReportedToolCall] = field(default_factory=dict[str, ReportedToolCall])
    call_tools: dict[str, str] = field(default_factory=dict[str, str])
    gates: dict[str, anyio.Event] = field(default_factory=dict[str, anyio.Event])
    refused: set[str] = field(default_factory=set[str])
    scopes: dict[str, list[anyio.CancelScope]] = field(default_factory=dict[str, list[anyio.CancelScope]])
    background: list[anyio.Event] = field(default_factory=list[anyio.Event])
    approved_at: dict[str, float] = field(default_factory=dict[str, float])
    ended_at: dict[str, float] = field(default_factory=dict[str, float])
    classes: dict[str, list[str]] = field(default_factory=dict[str, list[str]])

    async def conn(self, name: str) -> ServerConnection:
        return await self.host.server(name).connected(timeout=TIMEOUT)


async def _call(
    run: Run, spec: dict[str, Any], conversation: str, opened: anyio.Event, done: anyio.Event
) -> None:
    key, model_name = spec["key"], spec["tool"]
    server, tool = _split(model_name)
    scope = anyio.CancelScope()
    run.scopes.setdefault(conversation, []).append(scope)
    try:
        with scope:
            if server == "host":
                call = run.host.tool_call(
                    None,
                    model_name,
                    _arguments(spec["input"]),
                    conversation_id=conversation,
                    inference_id=f"inf-{conversation}",
                    classes=run.classes[model_name],
                    pending=bool(spec.get("approval")),
                    provider_call_id=_provider_id(spec),
                )
            else:
                call = run.host.tool_call(
                    server,
                    tool,
                    _arguments(spec["input"]),
                    conversation_id=conversation,
                    inference_id=f"inf-{conversation}",
                    pending=bool(spec.get("approval")),
                    provider_call_id=_provider_id(spec),
                )
            run.calls[key] = call
            run.call_tools[key] = model_name
            async with call:
                opened.set()
                if spec.get("approval"):
                    gate = run.gates.setdefault(key, anyio.Event())
                    await gate.wait()
                    if key in run.refused:
                        return
                if server == "host":
                    call.start() if "started" not in call.phases else None
                    call.completed(is_error=bool(spec.get("isError")))
                else:
                    try:
                        await call.execute()
                    except MCPLHostError:
                        pass  # the provider went away: reported failed
    finally:
        run.ended_at[key] = anyio.current_time()
        opened.set()
        done.set()


async def _do_call(run: Run, action: dict[str, Any]) -> None:
    conversation = action["conversation"]
    for spec in action["calls"]:
        server, tool = _split(spec["tool"])
        step = {k: spec[k] for k in ("hold", "isError", "resultText") if k in spec}
        if server != "host":
            provider = await run.conn(server)
            await provider.mcp.call_tool("lifecycle_plan", {"tool": tool, "plan": [step]})
    pairs = [(anyio.Event(), anyio.Event()) for _ in action["calls"]]
    for spec, (opened, done) in zip(action["calls"], pairs):
        run.tg.start_soon(_call, run, spec, conversation, opened, done)
        await opened.wait()  # opened in order: the host has sent its opening phase
    if action.get("background"):
        run.background.extend(done for _, done in pairs)
    else:
        for _, done in pairs:
            await done.wait()


def _arguments(value: dict[str, Any]) -> dict[str, Any]:
    """A call's ``input``, its ``$fixture`` expanded: ``object-utf8-bytes`` is an object whose
    compact JSON is ``bytes`` bytes of UTF-8, multi-byte characters included."""
    if value.get("$fixture") != "object-utf8-bytes":
        return value
    size = int(value["bytes"])
    head = '{"text":""}'
    unit = "é"  # two bytes of UTF-8
    text = unit * ((size - len(head)) // 2) + "x" * ((size - len(head)) % 2)
    built = {"text": text}
    assert len(json.dumps(built, separators=(",", ":"), ensure_ascii=False).encode()) == size
    return built


def _provider_id(spec: dict[str, Any]) -> str | None:
    """The model's id, given to the host only when the provider guarantees it unique (RFC-007
    §3): a ``toolu_`` id; ``call_0`` and the like are per-response counters, never given."""
    model_id = spec.get("modelId")
    return model_id if isinstance(model_id, str) and model_id.startswith("toolu_") else None


def _rules_over_limit() -> dict[str, Any]:
    return {"rules": [{"match": {}}] * (LIMITS.max_observe_rules + 1)}


async def _act(run: Run, action: dict[str, Any]) -> None:
    op = action["op"]
    if op == "observe":
        params = action["params"]
        if params.get("$fixture") == "rules-over-limit":
            params = _rules_over_limit()
        observer = await run.conn(run.observers[0])
        result = await observer.mcp.call_tool("lifecycle_observe", {"params": params})
        answer = json.loads(result.text)
        code = action.get("expectCode")
        if code is None:
            assert answer == {"result": {}}, answer
        else:
            assert answer["error"]["code"] == code, answer
            if action.get("expectLimit"):
                assert "limit" in answer["error"]["data"]
    elif op == "call":
        await _do_call(run, action)
    elif op == "release":
        for key in action["keys"]:
            server, tool = _split(run.call_tools[key])
            provider = await run.conn(server)
            result = await provider.mcp.call_tool("lifecycle_release", {"tool": tool})
            assert result.text == "released"
    elif op == "wait":
        for done in run.background:
            await done.wait()
    elif op == "settle":
        pass  # the read-back is the barrier
    elif op == "disconnect":
        provider = await run.conn(action["server"])
        with pytest.raises(MCPLHostError):
            await provider.mcp.call_tool("lifecycle_exit", {})
    elif op == "interrupt":
        for scope in run.scopes.get(action["conversation"], []):
            scope.cancel()
    elif op == "grant":
        observer = run.observers[0]
        assert _lifecycle_policy(action["policy"]) in (
            ToolLifecyclePolicy(),
            run.host.server(observer).hosted.tool_lifecycle,
        ), "this runner changes the grant only; the narrowing stays the configured one"
        await run.host.server(observer).hosted.update_policy(_grant(action["policy"]))
    elif op in ("approve", "refuse"):
        key = action["key"]
        if op == "refuse":
            run.refused.add(key)
        run.approved_at[key] = anyio.current_time()
        run.gates.setdefault(key, anyio.Event()).set()
    else:
        raise AssertionError(f"unknown op {op!r}")


async def _seen(run: Run, name: str, method: str = "tools/lifecycle") -> list[dict[str, Any]]:
    conn = await run.conn(name)
    result = await conn.mcp.call_tool("seen", {})
    seen: dict[str, list[dict[str, Any]]] = json.loads(result.text)
    return seen.get(method, [])


def _check_observer(
    run: Run, name: str, events: list[dict[str, Any]], expected: list[dict[str, Any]]
) -> None:
    vector = run.vector
    forbidden = vector.get("forbiddenText")
    for event in events:
        assert judge(PARAMS_SCHEMA, "Draft202012Validator", event) is None, event
        for member in CONTENT_FIELDS:
            assert member not in event, event
        if forbidden is not None:
            assert forbidden not in json.dumps(event)
        if event["phase"] == "pending":
            assert not {"input", "inputWithheld", "inputAltered"} & set(event)
    ids = {key: call.call_id for key, call in run.calls.items()}
    expected_keys = {e["key"] for e in expected}
    reported = {event["toolCallId"] for event in events}
    assert reported == {ids[key] for key in expected_keys}, (name, reported, ids)
    for want in expected:
        mine = [e for e in events if e["toolCallId"] == ids[want["key"]]]
        assert [e["phase"] for e in mine] == want["phases"], (name, want, mine)
        for event in mine:
            assert event["tool"] == want["tool"]
            assert event["conversationId"] == want["conversationId"]
            assert set(event["class"]) == set(want["class"]) and len(event["class"]) == len(want["class"])
            if want.get("host"):
                assert "serverId" not in event and "serverTool" not in event
            else:
                assert (event["serverId"], event["serverTool"]) == _split(want["tool"])
            if event["phase"] != "started":
                assert not {"input", "inputWithheld", "inputAltered"} & set(event), event
            if event["phase"] != "completed":
                assert "isError" not in event
        started = [e for e in mine if e["phase"] == "started"]
        for event in started:
            if "input" in want:
                assert event.get("input") == want["input"], event
            elif want.get("bounded"):
                assert isinstance(event.get("input"), dict)
                size = len(json.dumps(event["input"], separators=(",", ":"), ensure_ascii=False).encode())
                assert size <= LIMITS.max_lifecycle_input_bytes
            else:
                assert "input" not in event, event
            assert event.get("inputWithheld", False) == bool(want.get("inputWithheld")), event
            assert event.get("inputAltered", False) == bool(want.get("inputAltered")), event
        completed = [e for e in mine if e["phase"] == "completed"]
        for event in completed:
            assert event.get("isError", False) == bool(want.get("isError")), event
        if want.get("durationExcludesApproval"):
            (terminal,) = [e for e in mine if e["phase"] in ("completed", "failed", "aborted")]
            key = want["key"]
            waited_ms = (run.ended_at[key] - run.approved_at[key]) * 1000
            assert terminal["durationMs"] <= waited_ms + 1  # measured from started, after approval


@pytest.mark.anyio
@pytest.mark.parametrize("vector", VECTORS, ids=[v["id"] for v in VECTORS])
async def test_vector(
    vector: dict[str, Any], anyio_backend: str, logs: list[dict[str, Any]], request: pytest.FixtureRequest
) -> None:
    record_vector(request, FILE_NAME, vector["id"])
    observers = [o["id"] for o in vector["observers"]]
    providers = list(dict.fromkeys(_split(t["name"])[0] for t in vector["tools"]))
    configs: dict[str, ServerConfig] = {}
    for observer in vector["observers"]:
        env = {"MCPL_FIXTURE_LIFECYCLE_BAD_SET": "1"} if "featureSets" in observer else {}
        configs[observer["id"]] = ServerConfig(
            name=observer["id"],
            command=sys.executable,
            args=(SERVER,),
            limits=LIMITS,
            env=env,
            grant_policy=_grant(observer["policy"]),
            tool_lifecycle=_lifecycle_policy(observer["policy"]),
        )
    for provider in providers:
        if provider != "host" and provider not in configs:
            configs[provider] = ServerConfig(
                name=provider, command=sys.executable, args=(SERVER,), limits=LIMITS
            )
    with anyio.fail_after(TIMEOUT):
        async with Host(configs, subscribe_all=False) as host:
            await host.wait_ready(timeout=TIMEOUT)
            for provider in providers:
                if provider == "host":
                    continue
                tools = [
                    {"name": _split(t["name"])[1], "classes": t["classes"]}
                    for t in vector["tools"]
                    if _split(t["name"])[0] == provider
                ]
                conn = await host.server(provider).connected()
                await conn.mcp.call_tool("lifecycle_tools", {"tools": tools})
                await conn.mcp.list_tools(refresh=True)
            async with anyio.create_task_group() as tg:
                run = Run(host, vector, observers, tg)
                run.classes = {t["name"]: t["classes"] for t in vector["tools"]}
                for action in vector["actions"]:
                    await _act(run, action)
                for done in run.background:
                    await done.wait()
            for name in observers:
                _check_observer(run, name, await _seen(run, name), vector["expect"].get(name, []))
            await _extra_checks(run, logs)


async def _extra_checks(run: Run, logs: list[dict[str, Any]]) -> None:
    vector = run.vector
    host = run.host
    if "distinctIds" in vector:
        ids = [run.calls[key].call_id for key in vector["distinctIds"]]
        assert len(set(ids)) == len(ids)
    reuse = vector.get("recommendedReuse")
    if reuse is not None:  # RECOMMENDED: a qualifying provider id is the toolCallId
        assert run.calls[reuse["key"]].call_id == reuse["modelId"]
    if "parallel" in vector:  # both started before either ended, on every observer
        for name in run.observers:
            phases = [e["phase"] for e in await _seen(run, name)]
            assert phases[:2] == ["started", "started"], phases
    if "diagnostic" in vector:
        lines = " ".join(str(entry.get("diagnostic", "")) for entry in logs)
        assert vector["diagnostic"] in lines, lines
    if "disabledFeature" in vector:
        want = vector["disabledFeature"]
        derivation = host.server(run.observers[0]).hosted.current
        assert derivation is not None
        disabled = derivation.policy.state.derivation
        assert (
            disabled is not None
            and (reason := disabled.disabled.get(want["name"])) is not None
            and reason.reason == want["reason"]
        )
    if "grant" in vector:
        conn = host.server(run.observers[0]).hosted.current
        assert conn is not None and conn.grant is not None
        for path in vector["grant"]["include"]:
            assert conn.grant.allows(path)
        for path in vector["grant"]["exclude"]:
            assert not conn.grant.allows(path)
    if vector.get("grantUnchanged"):
        conn = host.server(run.observers[0]).hosted.current
        assert conn is not None and conn.grant is not None and conn.grant.allows("toolLifecycle.observe")
    for call in vector.get("providerCalls", []):  # the provider saw the call as tools/call
        calls = await _seen(run, call["server"], "tools/call")
        assert call["tool"] in [c.get("name") for c in calls]
    for action in vector["actions"]:
        for spec in action.get("calls", []):
            if spec.get("expectExecution") is False:
                assert "started" not in run.calls[spec["key"]].phases
                server, tool = _split(spec["tool"])
                assert tool not in [c.get("name") for c in await _seen(run, server, "tools/call")]

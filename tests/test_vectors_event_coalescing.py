"""RFC-006 rev 8 conformance vectors (``tests/vectors/mcpl-spec/event-coalescing-vectors.json``,
a byte-for-byte copy; tests/vectors/README.md) driven through the real host.

Each variant gets fresh servers: ``HostedServer``s sharing one ``EventInbox`` (the
application's), each over real pipes to ``fixtures/current_spec/server.py`` and its
``coalescing`` part, on asyncio and trio. The fixture sends the vector's wire requests
unmodified (its ``send`` tool) and answers ``push/render`` as the vector's plan says. The
application side is this module's ``Agent``: one conversation per agent of the setup, drained
once per model request (``assemble``: always a model request; ``turn``: a request for each
conversation with a cause, skipped when its only causes were batches that rendered nothing,
RFC-006 §5.2). The "model" is a record of each request's text (the JSON list of the
model-visible text blocks of the conversation so far), which the checks read.

A host restart (``restart``, ``kill``) closes every connection and builds a new
``EventInbox`` from the same store file (``EventInbox(store=...)``); the server process is
started again. Profile (docs/protocol.md EC13): ``initial`` establishes ``none``; shared
consumption (EC4), except that a variant requiring ``per-context-consumption`` (46) runs with
``EventInbox(consumption="per-conversation")``, the only runs where the profile meets that
precondition (``consumeContext``: one conversation's model request); the other variants with
several conversations (12, 25, 49) run in both modes and count as passed only if both pass;
a variant with one conversation runs once, in shared mode, since with one conversation the
two modes are the same rule (a property in tests/test_coalescing_per_conversation.py);
conservative recovery; 64 notices; a one-hour window; the library's wake
rules (``EventInbox(wake=WakePolicy(...))``, RFC-006 §4.2, EC15): the setup's ``gate`` is
played only as configuration (which tags qualify, its debounce as the quiet period), the
inbox decides, and a ``turn`` drains each conversation with a wake due (``inbox.due``). The
wake clock is a virtual monotonic clock (``WakeClock``) that ``wait`` and the timing ops
advance, so no check depends on real time; ``continuousReplacements`` (36) and
``unrelatedDebounce`` (44) send every occurrence over the wire at its virtual time and run
each wake at its deadline. The advisory vector 37 is checked against the inbox's audit
record. Variants whose ``requires``
the profile does not meet are recorded "not applicable"; those the project reads
differently are recorded "read differently" (docs/protocol.md EC13).
"""

from __future__ import annotations

import json
import math
import sys
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpl_host import GrantPolicy, HostHandlers, RequestContext, ServerConfig
from mcpl_host.hosted import HostedServer
from mcpl_host.mcpl.coalescing import Consumption
from mcpl_host.mcpl.feature_sets import FeatureSetPolicy
from mcpl_host.mcpl.wake import WakeCause, WakePolicy
from mcpl_host.server_connection import ServerConnection
from mcpl_host.services.coalescing import EventInbox

from .conftest import FIXTURES, record_vector
from .wire import FAST

FILE_NAME = "event-coalescing-vectors.json"
FILE = json.loads((Path(__file__).parent / "vectors" / "mcpl-spec" / FILE_NAME).read_text(encoding="utf-8"))
CASES: list[dict[str, Any]] = FILE["cases"]
VARIANTS = [(case, variant) for case in CASES for variant in case["variants"]]
SERVER = str(FIXTURES / "current_spec" / "server.py")
TIMEOUT = 30
#: What this host's profile meets (module docstring; docs/protocol.md EC13).
PROFILE = {
    "initial-history-none",
    "untracked-history-unknown",
    "retain-64-notices",
    "restart-without-history",
    "conservative-recovery",
    "unadvertised-channel-scoped-push",
    "hard-subject-limit",
    "changing-advertised-retry-window",
    "materialized-unread",
    # The runner constructs these (``continuousReplacements``, ``unrelatedDebounce``): sustained
    # eligible replacements at a virtual cadence, the library's finite bound, and an
    # ordinary-only control run beside the combined one.
    "timing-observation",
    "finite-wake-postponement-bound",
    "paired-debounce-control",
}
#: The precondition met only by the runs with per-conversation consumption (module docstring).
PER_CONTEXT = "per-context-consumption"


def _consumption(variant: dict[str, Any]) -> Consumption:
    """The inbox's consumption for ``variant``: per conversation where it requires it."""
    return "per-conversation" if PER_CONTEXT in variant["requires"] else "shared"


#: Variants with several conversations that do not require per-context consumption: run in
#: both modes (with one conversation the two modes are the same rule).
ALSO_PER_CONVERSATION = [
    (case, variant)
    for case, variant in VARIANTS
    if len(variant["setup"].get("agents") or ()) > 1 and _consumption(variant) == "shared"
]
#: The host's stated no-starvation bound in this profile (``WakePolicy.max_postpone_seconds``).
BOUND_SECONDS = 0.5
#: Variants read differently (docs/protocol.md EC13), with the rule.
READ_DIFFERENTLY: dict[str, str] = {
    "41/default": "EC14: a channel registration lives as long as the transport that made it (SPEC §14.5;"
    " docs/protocol.md, Channels); after a reconnect the server registers again, as before this RFC",
}
#: A render the vector holds past the end of its turn times out after this (Limits); others
#: get 10 s and are always answered first. Long enough for the steps between the render's
#: start and its timeout (a tool call and a send) on a loaded machine, short for the suite.
SHORT_RENDER = 1.0


def test_file_is_the_one_described() -> None:
    """65 cases, 80 variants (RFC-006 §14)."""
    assert FILE["format"] == "mcpl-event-coalescing-1"
    assert len(CASES) == 65
    assert len(VARIANTS) == 80


class Handlers(HostHandlers):
    """The application serves ``inference/request`` (so a refusal during ``push/render`` is
    the render rule's, not the gate's)."""

    async def inference_request(
        self, context: RequestContext, params: dict[str, Any], stream: Any
    ) -> dict[str, Any]:
        return {"content": "fixture answer", "model": "fixture", "finishReason": "end_turn"}


def _texts(occurrence_event: dict[str, Any]) -> list[str]:
    blocks = occurrence_event.get("modelContent")
    if blocks is None:
        payload = occurrence_event.get("payload")
        blocks = payload.get("content") if isinstance(payload, dict) else occurrence_event.get("content")
    return [b.get("text", "") for b in blocks or [] if isinstance(b, dict)]


class Clock:
    """The inbox's clock (seconds), advanced by ``advanceClock``."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


class WakeClock:
    """The inbox's monotonic wake clock (seconds): virtual, moved only by the runner."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _gate_qualifies(gate: dict[str, Any] | None) -> Any:
    """The setup's gate as a ``WakePolicy.qualifies``: a policy whose ``tagsAny`` matches
    qualifies unless it says skip; else the default (everything qualifies with no gate)."""

    def qualifies(event: Any) -> bool:
        if gate is None:
            return True
        tags = set(event.get("tags") or [])
        for policy in gate.get("policies", []):
            if tags & set(policy["match"].get("tagsAny", [])):
                return bool(policy.get("behavior") != "skip")
        return bool(gate.get("default") != "skip")

    return qualifies


def _quiet_seconds(variant: dict[str, Any]) -> float:
    """The configured quiet period: the timing op's, else the gate's one debounce, else 0."""
    for step in variant["steps"]:
        if step["op"] == "continuousReplacements":
            return float(step["quietMs"]) / 1000
        if step["op"] == "unrelatedDebounce":
            return float(step["ordinaryQuietMs"]) / 1000
    gate = variant["setup"].get("gate")
    debounces = {
        p["behavior"]["debounce"] for p in (gate or {}).get("policies", []) if isinstance(p["behavior"], dict)
    }
    assert len(debounces) <= 1, debounces  # one quiet period per inbox
    return float(debounces.pop()) / 1000 if debounces else 0.0


@dataclass
class Agent:
    """The application: conversations, their histories and the model requests made."""

    inbox: EventInbox
    names: list[str]
    histories: dict[str, list[str]] = field(default_factory=dict[str, list[str]])
    requests: list[tuple[str, str]] = field(default_factory=list[tuple[str, str]])
    failures: int = 0
    fail_next: bool = False
    queued: bool = False
    suppressed: set[str] = field(default_factory=set[str])
    summary_level: int = 0

    def __post_init__(self) -> None:
        for name in self.names:
            self.histories.setdefault(name, [])
            self.inbox.conversation(name)

    def model(self, name: str) -> None:
        self.requests.append((name, json.dumps(self.histories[name])))
        if self.fail_next:
            self.fail_next = False
            self.failures += 1

    async def assemble(self, name: str) -> None:
        drained = await self.inbox.drain(name)
        for item in drained.items:
            self.histories[name].extend(_texts(item.event))
        self.model(name)

    async def turn(self) -> None:
        for name in self.names:
            if name in self.suppressed:
                self.suppressed.discard(name)
                continue
            cause = self.queued and name == self.names[0]
            if not (cause or self.inbox.due(name)):  # the library's wake decision (§4.2)
                continue
            drained = await self.inbox.drain(name)
            for item in drained.items:
                self.histories[name].extend(_texts(item.event))
            if cause or drained.model_needed:
                self.model(name)
            if name == self.names[0]:
                self.queued = False

    def context(self, name: str) -> list[str]:
        pending = [t for item in self.inbox.pending(name) for t in _texts(item.event)]
        return self.histories[name] + pending


@dataclass
class Session:
    case: dict[str, Any]
    variant: dict[str, Any]
    store: Path
    stack: AsyncExitStack
    clock: Clock = field(default_factory=Clock)
    wake_clock: WakeClock = field(default_factory=WakeClock)
    hosted: dict[str, HostedServer] = field(default_factory=dict[str, HostedServer])
    conns: dict[str, ServerConnection] = field(default_factory=dict[str, ServerConnection])
    observations: dict[str, Any] = field(default_factory=dict[str, Any])
    inbox: EventInbox | None = None
    agent: Agent | None = None
    turn_task: anyio.Event | None = None
    reassigned: bool = False
    window: float = 3600.0
    max_subjects: int = 100_000
    earlier_renders: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    current_renders: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    turn_scope: anyio.CancelScope | None = None
    consumption: Consumption = "shared"

    @property
    def setup(self) -> dict[str, Any]:
        return dict(self.variant["setup"])

    def render_timeout(self) -> float:
        ops = [s["op"] for s in self.variant["steps"]]
        if (
            "releaseRender" in ops
            and "joinTurn" in ops
            and ops.index("joinTurn") < ops.index("releaseRender")
        ):
            return SHORT_RENDER
        if "kill" in ops and "startTurn" in ops:
            return SHORT_RENDER
        if "materializeWithoutConsume" in ops and "releaseRender" in ops:
            return SHORT_RENDER  # materialized before the late answer: by its timeout
        return 10.0

    def new_inbox(self) -> EventInbox:
        advertised = self.setup.get("eventCoalescing") or {}
        names = self.setup.get("agents") or ["agent"]
        inbox = EventInbox(
            names,
            channel_scoped_push=advertised.get("channelScopedPush", True),
            retry_window_seconds=self.window,
            max_subjects=self.max_subjects,
            consumption=self.consumption,
            clock=self.clock,
            store=self.store,
            wake=WakePolicy(
                quiet_seconds=_quiet_seconds(self.variant),
                max_postpone_seconds=BOUND_SECONDS,
                qualifies=_gate_qualifies(self.setup.get("gate")),
            ),
            monotonic=self.wake_clock,
        )
        if self.agent is None:
            self.agent = Agent(inbox, list(names))
        else:
            self.agent.inbox = inbox
            for name in names:
                inbox.conversation(name)
        self.inbox = inbox
        return inbox

    def config(self, name: str) -> ServerConfig:
        args: tuple[str, ...] = (SERVER,)
        if self.reassigned and name == self.servers[0]:
            args = (SERVER, "--reassigned")
        return ServerConfig(
            name=name,
            command=sys.executable,
            args=args,
            grant_policy=GrantPolicy(grant_all_advertised=True),
            limits=replace(FAST, push_render_timeout_seconds=self.render_timeout()),
        )

    @property
    def servers(self) -> list[str]:
        return list(self.setup.get("servers") or ["editor"])

    async def start(self) -> None:
        inbox = self.inbox or self.new_inbox()
        for name in self.servers:
            hosted = HostedServer(self.config(name), event_inbox=inbox, handlers=Handlers())
            self.hosted[name] = hosted
            await self.open(name)

    async def open(self, name: str) -> None:
        conn = self.hosted[name].open_connection()
        await self.stack.enter_async_context(conn)
        self.conns[name] = conn

    async def close(self, name: str) -> None:
        await self.conns[name].aclose()

    async def restart_host(self, kill: bool) -> None:
        """The host stops (``kill``: at once, its turn in flight cancelled, nothing more
        written) and a new one starts on the same store; the servers start again."""
        await self.renders()
        assert self.inbox is not None
        if kill:
            self.inbox.close()
            if self.turn_scope is not None:
                self.turn_scope.cancel()
        for name in self.servers:
            await self.close(name)
        self.earlier_renders += self.current_renders
        self.current_renders = []
        self.hosted.clear()
        self.inbox = None
        self.new_inbox()
        await self.start()

    async def tool(self, name: str, server: str | None = None, **arguments: Any) -> Any:
        conn = self.conns[server or self.servers[0]]
        tool = name if name in ("seen", "notify") else f"co_{name}"  # the part's tools: co_<name>
        result = await conn.mcp.call_tool(tool, arguments, timeout=20)
        assert not result.is_error, result.text
        return json.loads(result.text)

    async def renders(self) -> list[dict[str, Any]]:
        """The ``push/render`` requests every server process of the session saw (a closed
        connection's last reading is kept; a restarted server starts a new list)."""
        conn = self.conns.get(self.servers[0])
        if conn is not None and conn.is_open:
            self.current_renders = await self.tool("renders")
        return self.earlier_renders + self.current_renders

    def server_observation(self, name: str) -> dict[str, Any]:
        conn = self.conns.get(name)
        hosted = self.hosted.get(name)
        grant = conn.grant if conn is not None else None
        return {
            "connected": conn is not None and conn.is_open,
            "policyEstablished": grant is not None,
            "binding": hosted.binding if hosted else None,
            "grant": sorted(grant.paths) if grant is not None else None,
            "operatorPolicy": repr(hosted.policy) if hosted else None,
            "enabledFeatures": sorted(conn.policy.state.derivation.enabled)
            if conn is not None and conn.policy.state.derivation is not None
            else None,
        }

    async def observe(self, reply: Any = None) -> dict[str, Any]:
        agent = self.agent
        assert agent is not None
        requests = agent.requests
        first = agent.names[0]
        own = [text for name, text in requests if name == first]
        observation: dict[str, Any] = {
            "reply": reply,
            "renders": await self.renders(),
            "modelCalls": len(requests),
            "modelFailures": agent.failures,
            "requestText": own[-1] if own else "",
            "allRequestText": "\n".join(text for _, text in requests),
            "allContextText": json.dumps([agent.context(n) for n in agent.names]),
            "contexts": {n: json.dumps(agent.context(n)) for n in agent.names},
            "requests": [text for _, text in requests],
            "summaryLevel": agent.summary_level,
            "servers": {name: self.server_observation(name) for name in self.servers},
            "agents": list(agent.names),
            "capacity": {"subjects": len(self.inbox.state) if self.inbox else 0, "max": self.max_subjects},
        }
        return observation


def _get(value: Any, path: str) -> Any:
    for part in path.split("."):
        if part == "length" and isinstance(value, list):
            value = len(value)
        elif isinstance(value, list):
            value = value[int(part)]
        elif isinstance(value, dict):
            value = value[part]
        else:
            raise AssertionError(f"{path}: no {part!r} in {value!r}")
    return value


def _check(check: dict[str, Any], observed: dict[str, Any], session: Session) -> None:
    agent = session.agent
    assert agent is not None
    if "model" in check:
        name = check["model"].removeprefix("fixture-")
        texts = [text for who, text in agent.requests if who == name]
        if "requestCount" in check:
            assert len(texts) == check["requestCount"], (check, texts)
        last = texts[-1] if texts else ""
        for needle in check.get("includes", []):
            assert needle in last, (check, last)
        if "order" in check:
            positions = [last.find(n) for n in check["order"]]
            assert all(p >= 0 for p in positions) and positions == sorted(positions), (check, last)
        return
    if "audienceFrom" in check:
        before = session.observations[check["audienceFrom"]]["contexts"]
        for name, text in observed["contexts"].items():
            if check["original"] in before.get(name, ""):
                assert check["replacement"] in text and check["original"] not in text, (name, text)
            else:
                assert check["replacement"] not in text, (name, text)
        return
    if "event" in check:
        items = [i for n in agent.names for i in session.inbox.pending(n)] if session.inbox else []
        found = [i for i in items if i.event_id == check["event"]]
        assert found, f"no pending occurrence {check['event']!r}"
        target = found[0].event.get("replyTarget") or {}
        for key, value in check["metadata"].items():
            assert target.get(key) == value, (key, target)
        return
    value = _get(observed, check["path"])
    if "eq" in check:
        assert value == check["eq"], (check, value)
    if "oneOf" in check:
        assert value in check["oneOf"], (check, value)
    if "gte" in check:
        assert value >= check["gte"], (check, value)
    if "sameAs" in check:
        step, _, rest = check["sameAs"].partition(".")
        assert value == _get(session.observations[step], rest), (check, value)
    for needle in check.get("includes", []):
        assert needle in value, (check, value)
    for needle in check.get("excludes", []):
        assert needle not in value, (check, value)
    for needle, count in (check.get("counts") or {}).items():
        assert value.count(needle) == count, (check, value)
    if "order" in check:
        positions = [value.find(n) for n in check["order"]]
        assert all(p >= 0 for p in positions) and positions == sorted(positions), (check, value)
    if "everyIncludes" in check:
        assert value and all(check["everyIncludes"] in text for text in value), (check, value)
    if "exactlyOneOf" in check:
        assert sum(value.count(n) for n in check["exactlyOneOf"]) == 1, (check, value)
    if "recoveryContent" in check:
        step, _, rest = check["recoveryFrom"].partition(".")
        outcome = _get(session.observations[step], rest)
        old, new = check["recoveryContent"]
        if outcome == "replaced":
            assert old not in value and value.count(new) == 1, (check, value)
        else:
            assert value.count(old) == 1 and value.count(new) == 1 and value.find(old) < value.find(new)
    if check.get("ordinaryAdmission"):
        assert value.get("accepted") is True and "coalesce" not in value, (check, value)
    if check.get("capacitySaturated"):
        assert value["subjects"] >= value["max"], (check, value)
    if check.get("timing") == "replacement":
        _check_replacement_timing(value)
    if check.get("timing") == "ordinary-preserved":
        _check_ordinary_preserved(value)


async def _step(session: Session, step: dict[str, Any], group: Any) -> dict[str, Any] | None:
    op = step["op"]
    agent = session.agent
    assert agent is not None
    reply: Any = None
    timing: dict[str, Any] | None = None
    if op == "send":
        reply = await session.tool("send", step.get("server"), method=step["method"], params=step["params"])
    elif op == "register":
        reply = await session.tool("register", channel=step["channel"])
    elif op == "render":
        await session.tool("render_plan", plan=step["plan"])
    elif op == "assemble":
        await agent.assemble(agent.names[0])
    elif op == "consumeContext":  # one recipient's model request only
        await agent.assemble(step["agent"])
    elif op == "turn":
        await agent.turn()
    elif op == "startTurn":
        done = session.turn_task = anyio.Event()

        scope = session.turn_scope = anyio.CancelScope()

        async def run() -> None:
            try:
                with scope:
                    await agent.turn()
            finally:
                done.set()

        group.start_soon(run)
    elif op == "joinTurn":
        assert session.turn_task is not None
        await session.turn_task.wait()
    elif op == "waitRender":
        seen = await session.tool("wait_render", count=step["count"])
        assert seen["renders"] >= step["count"]
    elif op == "releaseRender":
        await session.tool("release", text=step["text"])
    elif op == "queueInference":
        agent.queued = True
    elif op == "failNextModel":
        agent.fail_next = True
    elif op == "compress":
        await agent.assemble(agent.names[0])  # the summarizer's request consumes (§3.3)
        agent.requests.pop()
        agent.summary_level += 1
    elif op == "observe":
        pass
    elif op == "wait":
        session.wake_clock.advance(step["ms"] / 1000)
    elif op == "continuousReplacements":
        timing = await _continuous_replacements(session, step)
    elif op == "unrelatedDebounce":
        timing = await _unrelated_debounce(session, step)
    elif op == "channelTool":
        conn = session.conns[session.servers[0]]
        if step["name"] == "channel_close":
            await conn.channels.close("chat")
        else:
            await conn.channels.open(channel_id="chat")
    elif op == "grant":
        conn = session.conns[session.servers[0]]
        await conn.policy.update(GrantPolicy(grant=tuple(step["leaves"])))
    elif op == "disableFeature":
        conn = session.conns[session.servers[0]]
        await conn.policy.update(feature_set_policy=FeatureSetPolicy(disabled=("doc",)))
    elif op in ("disconnect",):
        await session.renders()
        for name in session.servers:
            await session.close(name)
    elif op == "reconnect":
        for name in session.servers:
            await session.open(name)
    elif op in ("restart", "kill"):
        await session.restart_host(kill=op == "kill")
    elif op == "restartWithoutHistory":
        assert session.inbox is not None
        session.inbox.forget_history()
    elif op == "reassign":
        name = session.servers[0]
        await session.close(name)
        session.reassigned = True
        assert session.inbox is not None
        session.hosted[name] = HostedServer(
            session.config(name), event_inbox=session.inbox, handlers=Handlers()
        )
        await session.open(name)
    elif op == "fillCapacity":
        assert session.inbox is not None
        for index in range(session.max_subjects):
            message = {
                "channelId": step["channel"],
                "messageId": f"FILL{index}",
                "eventId": f"fill-{index}",
                "content": [{"type": "text", "text": f"FILL{index}"}],
                "coalesce": {"key": f"fill-{index}", "initial": True},
            }
            await session.tool("send", method="channels/incoming", params={"messages": [message]})
    elif op == "advertiseWindow":
        pass  # set before the servers started (_window)
    elif op == "reconnectWithWindow":
        for name in session.servers:
            await session.close(name)
        assert session.inbox is not None
        session.inbox.retry_window_seconds = step["ms"] / 1000
        for name in session.servers:
            await session.open(name)
    elif op == "advanceClock":
        session.clock.offset += step["ms"] / 1000
        session.wake_clock.advance(step["ms"] / 1000)
    elif op == "materializeWithoutConsume":
        assert session.inbox is not None
        await session.inbox.prepare(agent.names[0])
    elif op == "suppressWake":
        agent.suppressed.add(step["agent"])
    else:
        raise AssertionError(f"op {op!r} has no driver")
    observed = await session.observe(reply)
    observed["timing"] = timing
    session.observations[step["id"]] = observed
    for check in step.get("checks", []):
        _check(check, observed, session)
    return observed


#: The clock allowance of the timing checks (seconds): the wake clock is virtual, so only
#: float rounding separates a deadline from its arrival + quiet period.
EPSILON = 1e-9


@dataclass
class Wake:
    """One wake the runner ran: when (the wake clock), the causes due (copies, as the inbox
    reported them), and the model requests the turn made."""

    at: float
    causes: list[WakeCause]
    requests: list[str]


async def _send_push(session: Session, event_id: str, text: str, *, key: str | None, tags: list[str]) -> Any:
    """One ``push/event`` over the wire (the fixture's ``send``); its accepted result."""
    params: dict[str, Any] = {
        "featureSet": "doc",
        "eventId": event_id,
        "timestamp": "2026-01-01T00:00:00Z",
        "payload": {"content": [{"type": "text", "text": text}]},
    }
    if key is not None:
        params["coalesce"] = {"key": key}
    if tags:
        params["tags"] = tags
    reply = await session.tool("send", method="push/event", params=params)
    result = reply.get("result")
    assert isinstance(result, dict) and result.get("accepted") is True, reply
    return result


async def _wakes_until(session: Session, limit: float, wakes: list[Wake]) -> None:
    """Run each wake of the agent's first conversation due at or before ``limit`` (the wake
    clock set to its deadline, then a ``turn``), in order."""
    agent, inbox, clock = session.agent, session.inbox, session.wake_clock
    assert agent is not None and inbox is not None
    name = agent.names[0]
    while True:
        deadline = inbox.next_wake(name)
        if deadline is None or deadline > limit:
            return
        clock.now = max(clock.now, deadline)
        causes = [replace(cause) for cause in inbox.due(name)]
        assert causes, "next_wake named a deadline with nothing due"
        before = len(agent.requests)
        await agent.turn()
        wakes.append(Wake(clock.now, causes, [text for _, text in agent.requests[before:]]))


def _qualifying_tags(session: Session) -> list[str]:
    """A tag the setup's gate makes qualifying (none without a gate: everything qualifies)."""
    gate = session.setup.get("gate")
    for policy in (gate or {}).get("policies", []):
        if policy.get("behavior") != "skip":
            return list(policy["match"]["tagsAny"][:1])
    return []


async def _continuous_replacements(session: Session, step: dict[str, Any]) -> dict[str, Any]:
    """Vector 36: an ordinary-event control, then ``count`` eligible same-subject
    replacements ``intervalMs`` apart (faster than ``quietMs``), each sent over the wire at its
    virtual time, every wake run at its deadline. What happened, for the ``replacement`` check."""
    clock = session.wake_clock
    tags = _qualifying_tags(session)
    quiet, interval = step["quietMs"] / 1000, step["intervalMs"] / 1000
    control_at = clock.now
    await _send_push(session, "wake-control", "CONTROL-ORDINARY", key=None, tags=tags)
    control: list[Wake] = []
    await _wakes_until(session, math.inf, control)
    start = clock.now
    arrivals: list[tuple[float, str]] = []
    stream: list[Wake] = []
    for index in range(step["count"]):
        at = start + index * interval
        await _wakes_until(session, at, stream)
        clock.now = at
        text = f"REPLACEMENT-{index:02d}"
        result = await _send_push(session, f"wake-r{index}", text, key="wake-subject", tags=tags)
        assert result["coalesce"]["outcome"] in ("first", "replaced", "appended"), result
        arrivals.append((at, text))
    await _wakes_until(session, math.inf, stream)
    return {
        "quiet": quiet,
        "interval": interval,
        "bound": BOUND_SECONDS,
        "controlAt": control_at,
        "control": control,
        "arrivals": arrivals,
        "wakes": stream,
    }


def _check_replacement_timing(timing: dict[str, Any]) -> None:
    """Vector 36 (RFC-006 §4.2 no starvation): the control woke once, its quiet period after
    it arrived; replacements came faster than the quiet period; every wake of the stream was
    the subject's one cause, came at most ``bound`` after the first pending arrival and
    carried the content current then; superseded content reached no request; the last
    content was delivered; the stream outlasted the bound and delivery came while it still
    went on."""
    quiet, interval, bound = timing["quiet"], timing["interval"], timing["bound"]
    [control] = timing["control"]
    [control_cause] = control.causes
    assert control_cause.subject is None
    assert abs(control.at - timing["controlAt"] - quiet) <= EPSILON, control
    assert len(control.requests) == 1 and "CONTROL-ORDINARY" in control.requests[0], control
    assert interval < quiet, timing  # the precondition: replacements faster than the quiet period
    arrivals: list[tuple[float, str]] = timing["arrivals"]
    wakes: list[Wake] = timing["wakes"]
    timeline = sorted(
        [(w.at, 0, w) for w in wakes] + [(at, 1, text) for at, text in arrivals], key=lambda x: x[:2]
    )
    pending_since: float | None = None
    current = ""
    delivered: list[str] = []
    for at, _, item in timeline:
        if isinstance(item, str):
            current = item
            pending_since = at if pending_since is None else pending_since
            continue
        assert pending_since is not None, item  # a wake has a cause
        assert [c.subject is not None for c in item.causes] == [True], item  # one cause, the subject's
        assert at - pending_since <= bound + EPSILON, (at, pending_since, bound)
        assert len(item.requests) == 1 and current in item.requests[0], (current, item)
        delivered.append(current)
        pending_since = None
    assert pending_since is None and delivered and delivered[-1] == arrivals[-1][1], delivered
    every_request = "\n".join(r for w in wakes for r in w.requests)
    for _, text in arrivals:
        assert (text in every_request) == (text in delivered), text  # superseded content never shown
    # The condition constructed: replacements went on past the stated bound, and the bound
    # fired while they did (a host without one wakes only once they stop).
    assert arrivals[-1][0] - arrivals[0][0] > bound, (arrivals, bound)
    assert wakes[0].at < arrivals[-1][0], wakes


async def _unrelated_debounce(session: Session, step: dict[str, Any]) -> dict[str, Any]:
    """Vector 44: an ordinary-only control, then a coalesced subject replaced every fifth of
    the quiet period until it reaches its bound while an ordinary event (sent half a quiet
    period before the bound) still awaits its quiet period; every occurrence sent over the
    wire at its virtual time, every wake run at its deadline, and the ordinary cause's deadline
    read after each step. What happened, for the ``ordinary-preserved`` check."""
    agent, inbox, clock = session.agent, session.inbox, session.wake_clock
    assert agent is not None and inbox is not None
    quiet = step["ordinaryQuietMs"] / 1000
    control_at = clock.now
    await _send_push(session, "ordinary-control", "ORDINARY-CONTROL", key=None, tags=[])
    control: list[Wake] = []
    await _wakes_until(session, math.inf, control)
    start = clock.now
    ordinary_at = start + BOUND_SECONDS - quiet / 2
    sends = [
        (start + index * quiet / 5, f"SUBJECT-{index:02d}")
        for index in range(int(5 * (BOUND_SECONDS + quiet) / quiet))
    ]
    sends.append((ordinary_at, "ORDINARY-COMBINED"))
    sends.sort(key=lambda send: (send[0], send[1] != "ORDINARY-COMBINED"))
    wakes: list[Wake] = []
    deadlines: list[tuple[int, float]] = []  # the ordinary cause's (token, deadline), read after each step
    for at, text in sends:
        await _wakes_until(session, at, wakes)
        clock.now = at
        ordinary = text.startswith("ORDINARY")
        await _send_push(session, text.lower(), text, key=None if ordinary else "wake-subject", tags=[])
        deadlines += [(c.token, c.due) for c in inbox.causes(agent.names[0]) if c.subject is None]
    while (deadline := inbox.next_wake(agent.names[0])) is not None:
        deadlines += [(c.token, c.due) for c in inbox.causes(agent.names[0]) if c.subject is None]
        await _wakes_until(session, deadline, wakes)
    return {
        "quiet": quiet,
        "bound": BOUND_SECONDS,
        "controlAt": control_at,
        "control": control,
        "ordinaryAt": ordinary_at,
        "sends": sends,
        "wakes": wakes,
        "deadlines": deadlines,
    }


def _check_ordinary_preserved(timing: dict[str, Any]) -> None:
    """Vector 44 (RFC-006 §4.2 last bullet): the ordinary-only control woke once, its quiet
    period after it arrived; in the combined run the subject's bound wake came at its first
    arrival + bound, caused by the subject alone, while the ordinary cause was pending and not
    yet due, and carried the subject's current content; the ordinary cause kept one deadline
    throughout and woke once, its own cause, at the control's offset (EC15: the bound wake's
    request may already have carried its content)."""
    quiet, bound = timing["quiet"], timing["bound"]
    [control] = timing["control"]
    [control_cause] = control.causes
    offset = control.at - timing["controlAt"]
    assert control_cause.subject is None and abs(offset - quiet) <= EPSILON, control
    assert len(control.requests) == 1 and "ORDINARY-CONTROL" in control.requests[0], control
    wakes: list[Wake] = timing["wakes"]
    ordinary_at = timing["ordinaryAt"]
    bound_wakes = [
        w
        for w in wakes
        for c in w.causes
        if c.subject is not None and abs(c.due - (c.first + bound)) <= EPSILON
    ]
    assert bound_wakes, wakes  # the subject reached its bound
    bound_wake = bound_wakes[0]
    assert [c.subject is not None for c in bound_wake.causes] == [True], bound_wake
    assert ordinary_at < bound_wake.at < ordinary_at + quiet, (bound_wake, ordinary_at)  # still pending
    current = [text for at, text in timing["sends"] if at < bound_wake.at and text.startswith("SUBJECT")][-1]
    assert len(bound_wake.requests) == 1 and current in bound_wake.requests[0], (current, bound_wake)
    tokens = {token for token, _ in timing["deadlines"]}
    assert len(tokens) == 1, timing["deadlines"]  # the ordinary cause, uniquely identified
    assert all(abs(due - (ordinary_at + quiet)) <= EPSILON for _, due in timing["deadlines"]), timing[
        "deadlines"
    ]
    ordinary_wakes = [w for w in wakes if any(c.subject is None for c in w.causes)]
    assert len(ordinary_wakes) == 1, ordinary_wakes
    [ordinary_wake] = ordinary_wakes
    [ordinary_cause] = [c for c in ordinary_wake.causes if c.subject is None]
    assert ordinary_cause.token in tokens and ordinary_cause.first == ordinary_at, ordinary_cause
    assert abs((ordinary_wake.at - ordinary_at) - offset) <= EPSILON, (ordinary_wake, offset)
    assert len(ordinary_wake.requests) == 1 and "ORDINARY-COMBINED" in ordinary_wake.requests[0]


def _window(variant: dict[str, Any]) -> float:
    for step in variant["steps"]:
        if step["op"] == "advertiseWindow":
            return float(step["ms"]) / 1000
    return 3600.0


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("case", "variant"), VARIANTS, ids=[f"{case['id']}/{variant['name']}" for case, variant in VARIANTS]
)
async def test_vector(
    case: dict[str, Any], variant: dict[str, Any], request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    vector = f"{case['id']}/{variant['name']}"
    consumption = _consumption(variant)
    profile = PROFILE | ({PER_CONTEXT} if consumption == "per-conversation" else set())
    missing = [need for need in variant["requires"] if need not in profile]
    if missing:
        record_vector(request, FILE_NAME, vector, "not applicable")
        pytest.skip(f"profile lacks {missing}")
    if vector in READ_DIFFERENTLY:
        record_vector(request, FILE_NAME, vector, "read differently")
        pytest.skip(READ_DIFFERENTLY[vector])
    record_vector(request, FILE_NAME, vector)  # first: a failure below counts as failed
    await _run(case, variant, tmp_path, consumption)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("case", "variant"),
    ALSO_PER_CONVERSATION,
    ids=[f"{case['id']}/{variant['name']}" for case, variant in ALSO_PER_CONVERSATION],
)
async def test_vector_per_conversation(
    case: dict[str, Any], variant: dict[str, Any], request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The variants with several conversations run again with per-conversation consumption
    (the mode vector 46 runs in): the same expectations hold (module docstring). Recorded
    under the same vector: it passes only if both runs pass."""
    record_vector(request, FILE_NAME, f"{case['id']}/{variant['name']}")
    await _run(case, variant, tmp_path, "per-conversation")


async def _run(
    case: dict[str, Any], variant: dict[str, Any], tmp_path: Path, consumption: Consumption
) -> None:
    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as group, AsyncExitStack() as stack:
            session = Session(case, variant, tmp_path / "inbox.json", stack, window=_window(variant))
            session.consumption = consumption
            if any(step["op"] == "fillCapacity" for step in variant["steps"]):
                session.max_subjects = 4
            await session.start()
            for step in variant["steps"]:
                await _step(session, step, group)
            if case["kind"] == "advisory":  # 37: this host's audit record (EC13)
                assert session.inbox is not None
                audited = {(entry.what, entry.event_id) for entry in session.inbox.audit()}
                assert ("displaced", "a") in audited, audited

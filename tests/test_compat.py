"""Compatibility profiles (docs/protocol.md, "Compatibility profiles", "Explaining a silence"):
the pure decisions by plain calls, then the four server shapes of ``fixtures/compat_server.py``
hosted end to end over real pipes (and shape 3 over a real WebSocket through
``fixtures/ws_bridge.py``), on asyncio and trio.

Synchronisation is by events and ``anyio.fail_after`` only: a test waits for the handler
call it expects, never for time to pass.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpl_host import GrantPolicy, HostedServer, HostHandlers, Limits, RequestContext, connect, report
from mcpl_host.config import ServerConfig, default_server_name
from mcpl_host.events import HostEvent, Stalled, event_json
from mcpl_host.host import Host
from mcpl_host.mcpl.admission import Admitted, Held, Refused, admit
from mcpl_host.mcpl.compat import CompatNote, NoteLedger, choose_profile, widen
from mcpl_host.mcpl.explain import CLI_SWITCH, LIBRARY_SWITCH, RefusalRecord, silence_sentence, stall_verdict
from mcpl_host.mcpl.feature_sets import FeatureSetPolicy, declaration_notes, derive, read_feature_sets
from mcpl_host.mcpl.grants import VOCABULARY, Grant
from mcpl_host.mcpl.policy_state import MCPLState, PolicyState

from .conftest import FIXTURES
from .wire import port_line, split_runtime, stop_server_process

SERVER = str(FIXTURES / "compat_server.py")
TIMEOUT = 30
FAST = Limits(close_grace_seconds=1.0, terminate_grace_seconds=1.0, policy_fallback_seconds=1.0)
ALL = GrantPolicy(grant_all_advertised=True)
PUSH = {
    "featureSet": "heartbeat",
    "eventId": "e1",
    "timestamp": "2026-01-01T00:00:00Z",
    "payload": {"content": [{"type": "text", "text": "x"}]},
}
SHAPE1 = {
    "version": "0.4",
    "pushEvents": True,
    "featureSets": [{"name": "heartbeat", "description": "h", "uses": ["tools"]}],
}
SHAPE3 = {
    "version": "0.5",
    "channels": {"register": True, "publish": True},
    "featureSets": {
        "chat": {"description": "c", "uses": ["channels.register", "channels.observe", "stateUpdate"]}
    },
}


def begun(manifest: dict[str, Any], compat: Any, policy: GrantPolicy = ALL, *, ready: bool) -> PolicyState:
    """A PolicyState after ``begin``; with ``ready`` the policy is in force (as a receipt)."""
    state = PolicyState(compat=compat)
    state.begin(manifest, tools=True)
    proposal = state.propose(policy, FeatureSetPolicy(), initial=True)
    if ready:
        state.receipt(proposal, {"accepted": True})
    return state


# --- choosing the profile ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "version", "profile"),
    [
        ("auto", "0.5", "strict"),
        ("auto", "0.5.1", "strict"),
        ("auto", "0.4", "0.4"),
        ("auto", None, "0.4"),
        ("auto", 5, "0.4"),
        ("auto", "0.50", "0.4"),
        ("strict", "0.4", "strict"),
        ("0.4", "0.5", "0.4"),
    ],
)
def test_auto_is_strict_only_for_an_advertisement_that_says_05(
    setting: Any, version: Any, profile: str
) -> None:
    manifest = {} if version is None else {"version": version}
    choice = choose_profile(setting, manifest)
    assert choice.profile == profile and choice.setting == setting
    if setting == "auto":
        assert choice.reason.startswith("chosen automatically")


def test_an_unknown_setting_is_refused() -> None:
    with pytest.raises(ValueError, match="compat must be one of strict, 0.4, auto"):
        choose_profile("0.3", {})  # type: ignore[arg-type]


def test_widen_takes_every_leaf_under_an_advertised_top_level_capability() -> None:
    channels = {p for p in VOCABULARY if p.startswith("channels.")}
    # RFC-009 §2.1: input streaming only when advertised itself, never by widening (IS1)
    assert widen({"channels.register"}) == channels - {"channels.incoming.streaming"}
    assert widen({"channels.register", "channels.incoming.streaming"}) == channels
    assert widen({"pushEvents", "tools"}) == {"pushEvents", "tools"}
    assert widen(set()) == frozenset()


# --- the grant never exceeds the host's policy -----------------------------------------------

PATHS = st.frozensets(st.sampled_from(sorted(VOCABULARY)))


@given(advertised=PATHS, granted=PATHS, denied=PATHS, compat=st.sampled_from(["strict", "0.4", "auto"]))
def test_no_profile_grants_what_the_policy_denies(
    advertised: frozenset[str], granted: frozenset[str], denied: frozenset[str], compat: Any
) -> None:
    policy = GrantPolicy(grant=tuple(sorted(granted)), deny=tuple(sorted(denied)))
    manifest: dict[str, Any] = {"version": "0.4"}
    for path in advertised - {"tools"}:  # advertise each leaf as an object path
        node = manifest
        *parents, leaf = path.split(".")
        for segment in parents:
            node = node.setdefault(segment, {})
        node.setdefault(leaf, {})  # an object at a path node advertises it
    state = begun(manifest, compat, policy, ready=True)
    assert state.grant is not None
    assert all(policy.allows(path) for path in state.grant.paths)
    assert not state.grant.paths & denied
    for path in denied:  # and admission refuses a denied path, whatever the profile
        assert not state.grant.allows(path)


@pytest.mark.parametrize("compat", ["strict", "0.4", "auto"])
def test_a_denied_capability_is_refused_in_every_profile(compat: Any) -> None:
    state = begun(SHAPE1, compat, GrantPolicy(grant_all_advertised=True, deny=("pushEvents",)), ready=True)
    decision = admit("push/event", PUSH, state)
    assert isinstance(decision, Refused) and decision.reason == "denied_by_policy"
    assert decision.error.message == "Capability denied: the host's policy denies it"
    assert decision.error.data == {"capability": "pushEvents"}


# --- admission under each profile ------------------------------------------------------------


def test_refusal_reasons_are_distinct() -> None:
    pending = begun(SHAPE1, "strict", ready=False)
    reasons = {"pending": admit("push/event", PUSH, pending)}
    ready = begun(SHAPE1, "strict", GrantPolicy(grant=("tools",)), ready=True)
    reasons["denied"] = admit("push/event", PUSH, ready)
    reasons["unadvertised"] = admit("model/info", None, ready)
    off = begun(SHAPE1, "strict", ready=False)
    off.request_failed(off.proposed or pytest.fail("no proposal"), "the policy request failed")
    reasons["off"] = admit("push/event", PUSH, off)
    got = {name: d.reason if isinstance(d, Refused) else d for name, d in reasons.items()}
    assert got == {
        "pending": "not_in_force",
        "denied": "denied_by_policy",
        "unadvertised": "not_advertised",
        "off": "mcpl_off",
    }
    assert isinstance(reasons["pending"], Refused)
    assert reasons["pending"].error.message == "Capability denied: the policy is not yet in force"


def test_04_holds_privileged_requests_before_the_policy_and_strict_refuses_them() -> None:
    assert isinstance(admit("push/event", PUSH, begun(SHAPE1, "0.4", ready=False)), Held)
    assert isinstance(
        admit("state/get", {"featureSet": "heartbeat"}, begun(SHAPE1, "0.4", ready=False)), Held
    )
    assert isinstance(admit("tools/list", {}, begun(SHAPE1, "0.4", ready=False)), Admitted)  # MCP: ungated
    again = admit("push/event", PUSH, begun(SHAPE1, "0.4", ready=False), may_hold=False)
    assert isinstance(again, Refused) and again.reason == "not_in_force"
    assert isinstance(admit("push/event", PUSH, begun(SHAPE1, "strict", ready=False)), Refused)


def test_04_reads_uses_and_leaves_as_information_and_notes_each() -> None:
    strict = admit("push/event", PUSH, begun(SHAPE1, "strict", ready=True))
    assert isinstance(strict, Refused) and strict.diagnostic is not None  # uses lacks pushEvents
    lenient = admit("push/event", PUSH, begun(SHAPE1, "0.4", ready=True))
    assert lenient == Admitted(
        (CompatNote("uses_lacks", method="push/event", feature_set="heartbeat", capability="pushEvents"),)
    )
    incoming = {"messages": []}
    assert isinstance(admit("channels/incoming", incoming, begun(SHAPE3, "strict", ready=True)), Refused)
    decision = admit("channels/incoming", incoming, begun(SHAPE3, "0.4", ready=True))
    assert decision == Admitted(
        (CompatNote("unadvertised_leaf", method="channels/incoming", capability="channels.incoming"),)
    )


def test_unadvertised_leaf_is_noted_only_under_the_04_profile() -> None:
    """A granted path the server did not advertise itself gives the note under the 0.4
    profile only; the strict profile admits the same request with no note (plain calls,
    each view set by hand: admission reads the profile only for the note)."""
    incoming = {"messages": []}
    for compat, notes in (
        (
            "0.4",
            (CompatNote("unadvertised_leaf", method="channels/incoming", capability="channels.incoming"),),
        ),
        ("strict", ()),
    ):
        view = begun(SHAPE3, compat, ready=True)
        paths = frozenset({"channels.register", "channels.incoming"})
        view.grant = Grant(paths, paths)
        view.advertised = frozenset({"channels.register"})  # channels.incoming: not its own
        assert view.profile == compat
        assert admit("channels/incoming", incoming, view) == Admitted(notes)


def test_04_derivation_ignores_unknown_uses_and_notes_them() -> None:
    declarations = read_feature_sets(SHAPE3)
    grant = Grant(frozenset({"channels.register"}), frozenset({"channels.register"}))
    assert derive(declarations, grant, FeatureSetPolicy()).disabled["chat"].reason == "invalid_uses"
    assert derive(declarations, grant, FeatureSetPolicy(), lenient=True).enabled == {"chat"}
    none = Grant(frozenset(), frozenset({"channels.register"}))
    assert derive(declarations, none, FeatureSetPolicy(), lenient=True).disabled["chat"].reason == (
        "capability_denied"
    )  # a known path not granted still disables the set
    (note,) = declaration_notes(declarations)
    assert note.kind == "unknown_uses" and note.values == ("channels.observe", "stateUpdate")


def test_the_note_ledger_takes_each_note_once_and_stays_bounded() -> None:
    ledger = NoteLedger(limit=2)
    notes = [CompatNote("unknown_uses", feature_set=str(n)) for n in range(4)]
    assert [ledger.take(notes[0]), ledger.take(notes[0])] == ["log", "quiet"]
    assert [ledger.take(n) for n in notes[1:]] == ["log", "last", "quiet"]
    assert len(ledger.notes) == 2


def test_assume_puts_the_proposal_in_force_without_a_receipt() -> None:
    state = begun(SHAPE1, "0.4", ready=False)
    assert state.proposed is not None
    state.assume(state.proposed, "the server answered with an error")
    assert state.state is MCPLState.READY and state.settled_by == "notification" and state.outcome is None
    assert state.grant is not None and state.grant.paths == {"pushEvents", "tools"}


# --- explaining a silence --------------------------------------------------------------------


def test_stall_verdict_counts_from_the_later_of_the_last_message_and_the_oldest_wait() -> None:
    assert stall_verdict(100.0, [], 0.0, 10) is None  # nothing pending: a quiet server is fine
    assert stall_verdict(100.0, [("tools/list", 95.0)], 0.0, 10) is None
    assert stall_verdict(100.0, [("tools/list", 80.0)], 95.0, 10) is None  # it spoke 5 s ago
    stall = stall_verdict(100.0, [("tools/list", 85.0), ("featureSets/update", 80.0)], 70.0, 10)
    assert stall is not None and stall.silent_seconds == 20.0
    assert stall.pending_phrase == "featureSets/update (20 s), tools/list (15 s)"


def test_the_silence_sentence_names_the_refusal_and_the_switch_only_when_it_applies() -> None:
    stall = stall_verdict(20.0, [("featureSets/update", 0.0)], 5.0, 10)
    refused = RefusalRecord("channels/register", -32002, "not_in_force", "channels.register")
    sentence = silence_sentence(stall, refused, "strict")
    assert sentence == (
        "The host refused channels/register (-32002: the policy is not yet in force), and then the "
        "server stopped answering: nothing received for 15 s while the host waits for "
        "featureSets/update (20 s); servers written for MCPL 0.4 behave this way (they send "
        "privileged requests before the policy and stop at a refusal): use --compat 0.4 "
        '(or "compat": "0.4" in a config file)'
    )
    assert "--compat" not in silence_sentence(stall, refused, "0.4")
    assert silence_sentence(stall, None, "strict").startswith("The server stopped answering")
    denied = RefusalRecord("push/event", -32002, "denied_by_policy", "pushEvents")
    assert "0.4" not in silence_sentence(stall, denied, "strict")


def test_servers_are_named_by_their_script() -> None:
    assert default_server_name("node", ["/x/server-everything/dist/index.js", "stdio"]) == "server-everything"
    assert default_server_name("node", ["--inspect", "weather.js"]) == "weather"
    assert default_server_name(sys.executable, [SERVER, "shape1"]) == "compat_server"
    assert default_server_name("deno", ["run", "-A", "/p/notes/main.ts"]) == "notes"
    assert default_server_name("npx", ["-y", "pkg"]) == "pkg"


# --- the four shapes, hosted end to end --------------------------------------------------------


class Recorder(HostHandlers):
    """Records pushes, channel messages and refusals; events say when enough arrived."""

    def __init__(self, pushes: int = 1) -> None:
        self.wanted = pushes
        self.pushes: list[dict[str, Any]] = []
        self.messages: list[dict[str, Any]] = []
        self.refused: list[tuple[str, dict[str, Any]]] = []
        self.pushed = anyio.Event()
        self.message = anyio.Event()
        self.registered = anyio.Event()
        self.first_refusal = anyio.Event()
        self.all_answered = anyio.Event()  # pushes accepted plus requests refused >= wanted

    def _count(self) -> None:
        if len(self.pushes) + len(self.refused) >= self.wanted:
            self.all_answered.set()

    async def push_event(self, context: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        self.pushes.append(params)
        if len(self.pushes) >= self.wanted:
            self.pushed.set()
        self._count()
        return {"accepted": True}

    async def channel_message(self, context: RequestContext, message: dict[str, Any]) -> str | None:
        self.messages.append(message)
        self.message.set()
        return "conversation-1"

    def on_channels_changed(self, server: str, channels: list[dict[str, Any]]) -> None:
        if channels:
            self.registered.set()

    def on_refused(self, server: str, method: str, params: Any, error: dict[str, Any]) -> None:
        self.refused.append((method, error))
        self.first_refusal.set()
        if method == "push/event":
            self.pushed.set()
        self._count()


def shape(name: str, **kwargs: Any) -> Any:
    settings, runtime = split_runtime(kwargs)
    settings.setdefault("limits", FAST)
    settings.setdefault("grant_policy", ALL)
    return connect(ServerConfig(command=sys.executable, args=(SERVER, name), **settings), **runtime)


async def tool_json(conn: Any, name: str) -> Any:
    result = await conn.mcp.call_tool(name, {}, timeout=10)
    return json.loads(result.text)


@pytest.mark.anyio
async def test_shape1_by_default_gets_its_pushes_accepted(logs: list[dict[str, Any]]) -> None:
    handlers = Recorder(pushes=5)
    with anyio.fail_after(TIMEOUT):
        async with shape("shape1", handlers=handlers, env={"COMPAT_PUSH_INTERVAL": "0.05"}) as conn:
            assert conn.policy.state.profile == "0.4" and conn.mcpl_state is MCPLState.READY
            assert conn.policy.state.settled_by == "notification" and conn.policy.state.outcome is None
            await handlers.pushed.wait()
            assert conn.inbound.held_total >= 1  # hb-1 came before the policy
    assert [p["eventId"] for p in handlers.pushes] == [f"hb-{n}" for n in range(1, 6)]
    assert handlers.refused == []
    lines = [e for e in logs if e["event"] == "compatibility note (0.4 profile)"]
    assert len(lines) == 1 and "uses pushEvents, which the set's uses does not list" in str(lines[0]["note"])
    assert any(e["event"] == "MCPL compatibility profile" and e["profile"] == "0.4" for e in logs)


@pytest.mark.anyio
async def test_shape1_in_strict_is_mcp_only_and_every_push_refused_with_its_reason() -> None:
    handlers = Recorder(pushes=1)
    with anyio.fail_after(TIMEOUT):
        async with shape("shape1", handlers=handlers, compat="strict") as conn:
            assert conn.mcpl_state is MCPLState.MCP_ONLY
            assert "-32601" in (conn.policy.state.off_reason or "")
            await handlers.pushed.wait()
    method, error = handlers.refused[0]
    assert method == "push/event" and error["code"] == -32002
    assert error["message"] in (
        "Capability denied: the policy is not yet in force",
        "Capability denied: MCPL is off for this connection",
    )


@pytest.mark.anyio
@pytest.mark.parametrize("compat", ["strict", "0.4", "auto"])
async def test_shape1_denied_pushes_are_refused_in_every_profile(compat: Any) -> None:
    handlers = Recorder(pushes=1)
    policy = GrantPolicy(grant_all_advertised=True, deny=("pushEvents",))
    with anyio.fail_after(TIMEOUT):
        async with shape("shape1", handlers=handlers, compat=compat, grant_policy=policy) as conn:
            await handlers.pushed.wait()
            beats = await tool_json(conn, "beats")
    assert handlers.pushes == []
    assert handlers.refused and all(error["code"] == -32002 for _, error in handlers.refused)
    assert all(outcome == "refused -32002" for outcome in beats.values())


@pytest.mark.anyio
@pytest.mark.parametrize("compat", ["auto", "strict", "0.4"])
async def test_shape2_keeps_working(compat: Any) -> None:
    handlers = Recorder(pushes=2)
    with anyio.fail_after(TIMEOUT):
        async with shape("shape2", handlers=handlers, compat=compat) as conn:
            assert conn.mcpl_state is MCPLState.READY and conn.policy.state.settled_by == "receipt"
            assert conn.policy.state.profile == ("strict" if compat == "strict" else "0.4")
            await handlers.pushed.wait()
            await handlers.registered.wait()
            assert [tool.name for tool in await conn.mcp.list_tools()] == ["headline"]
    # Both delivered; concurrent requests are served in no fixed order.
    assert sorted(p["eventId"] for p in handlers.pushes) == ["news-1", "news-2"]
    assert handlers.refused == []


@pytest.mark.anyio
@pytest.mark.parametrize("compat", ["auto", "strict", "0.4"])
async def test_shape4_keeps_working(compat: Any) -> None:
    handlers = Recorder(pushes=1)
    with anyio.fail_after(TIMEOUT):
        async with shape("shape4", handlers=handlers, compat=compat) as conn:
            assert conn.mcpl_state is MCPLState.READY and conn.policy.state.settled_by == "receipt"
            await handlers.pushed.wait()
            await handlers.message.wait()
            seen = await tool_json(conn, "status")
            while seen["incoming"] is None:  # our answer is on its way: ask again (a round trip)
                seen = await tool_json(conn, "status")
    assert seen["itemized"] is True and seen["registered"] is True
    assert seen["alert"] == {"accepted": True}
    assert seen["incoming"] == {
        "results": [{"messageId": "m1", "accepted": True, "conversationId": "conversation-1"}]
    }
    assert handlers.refused == []


async def _shape3_works(conn: Any, handlers: Recorder) -> None:
    assert conn.policy.state.profile == "0.4" and conn.policy.state.settled_by == "notification"
    await handlers.registered.wait()
    await handlers.message.wait()
    assert [tool.name for tool in await conn.mcp.list_tools()] == ["published"]
    published = await conn.channels.publish("conversation-1", "chat:general", "hi there")
    assert published.mode == "notification"  # the request was -32601: re-sent as a notification
    assert await tool_json(conn, "published") == [
        {
            "conversationId": "conversation-1",
            "channelId": "chat:general",
            "stream": False,
            "content": [{"type": "text", "text": "hi there"}],
        }
    ]
    assert [m["content"][0]["text"] for m in handlers.messages] == ["hello from chat"]
    assert conn.inbound.channel_registry.get("chat:general") is not None
    assert handlers.refused == []


@pytest.mark.anyio
async def test_shape3_with_the_04_profile_registers_answers_and_delivers() -> None:
    handlers = Recorder()
    with anyio.fail_after(TIMEOUT):
        async with shape("shape3", handlers=handlers, compat="0.4") as conn:
            await _shape3_works(conn, handlers)


@pytest.mark.anyio
async def test_a_request_in_the_same_read_as_the_initialize_result_meets_the_pending_policy() -> None:
    # The server's channels/register arrives with its initialize result, so the read loop
    # judges it before the handshake's caller runs again: the policy must already be pending
    # (strict: refused "not yet in force", never as from a plain MCP server).
    handlers = Recorder()
    limits = Limits(close_grace_seconds=1, terminate_grace_seconds=1, request_timeout_seconds=2)
    with anyio.fail_after(TIMEOUT):
        async with shape("shape3", handlers=handlers, limits=limits, env={"COMPAT_EAGER": "1"}) as conn:
            await handlers.first_refusal.wait()
            assert conn.policy.state.profile == "strict"
    assert handlers.refused[0][0] == "channels/register"
    assert handlers.refused[0][1]["message"] == "Capability denied: the policy is not yet in force"


@pytest.mark.anyio
async def test_a_request_in_the_same_read_as_the_initialize_result_is_held_under_04() -> None:
    handlers = Recorder()
    with anyio.fail_after(TIMEOUT):
        async with shape("shape3", handlers=handlers, compat="0.4", env={"COMPAT_EAGER": "1"}) as conn:
            await handlers.registered.wait()
            assert conn.inbound.held_total >= 1  # it came before the policy
            assert conn.inbound.channel_registry.get("chat:general") is not None
    assert handlers.refused == []


@pytest.mark.anyio
async def test_shape3_over_a_websocket_with_the_04_profile() -> None:
    from .test_websocket import bridge

    handlers = Recorder()
    async with bridge(command=[sys.executable, SERVER, "shape3"]) as server:
        with anyio.fail_after(TIMEOUT):
            async with connect(
                ServerConfig(url=server.url(), grant_policy=ALL, compat="0.4", limits=FAST), handlers=handlers
            ) as conn:
                await _shape3_works(conn, handlers)


@pytest.mark.anyio
async def test_shape3_denied_incoming_is_refused_under_04() -> None:
    handlers = Recorder()
    policy = GrantPolicy(grant_all_advertised=True, deny=("channels.incoming",))
    with anyio.fail_after(TIMEOUT):
        async with shape("shape3", handlers=handlers, compat="0.4", grant_policy=policy) as conn:
            await handlers.registered.wait()
            assert conn.grant is not None and "channels.incoming" not in conn.grant.paths
            await handlers.first_refusal.wait()
    assert handlers.messages == []
    assert handlers.refused[0][0] == "channels/incoming"
    assert handlers.refused[0][1]["message"] == "Capability denied: the host's policy denies it"


@pytest.mark.anyio
async def test_shape3_in_strict_refuses_early_and_explains_the_silence(logs: list[dict[str, Any]]) -> None:
    handlers = Recorder()
    limits = Limits(close_grace_seconds=1, terminate_grace_seconds=1, request_timeout_seconds=2)
    with anyio.fail_after(TIMEOUT):
        async with shape("shape3", handlers=handlers, limits=limits) as conn:
            assert conn.policy.state.profile == "strict" and conn.mcpl_state is MCPLState.MCP_ONLY
            reason = conn.policy.state.off_reason or ""
    assert handlers.refused[0][0] == "channels/register"
    assert handlers.refused[0][1]["message"] == "Capability denied: the policy is not yet in force"
    assert reason.startswith("The host refused channels/register (-32002: the policy is not yet in force)")
    assert 'compat="0.4"' in reason
    failed = [e for e in logs if e["event"].startswith("policy request failed")]
    assert failed and failed[0]["explanation"] == reason
    refused = [e for e in logs if e["event"] == "refused a server request"]
    assert refused[0]["reason"] == "not_in_force" and refused[0]["capability"] == "channels.register"


@pytest.mark.anyio
async def test_a_server_known_to_read_only_notifications_gets_the_policy_as_one_at_once() -> None:
    hosted = HostedServer(
        ServerConfig(command=sys.executable, args=(SERVER, "shape1"), grant_policy=ALL, limits=FAST),
        handlers=Recorder(),
    )
    with anyio.fail_after(TIMEOUT):
        async with hosted.open_connection() as first:
            assert first.policy.state.notification_reason is not None
            assert "error" in first.policy.state.notification_reason
        assert hosted.policy_as_notification is True
        async with hosted.open_connection() as second:
            assert second.policy.state.notification_reason == (
                "the server is known to read only the notification form of featureSets/update"
            )
            assert second.connection.waiting() == []  # no request was sent: nothing waits


@pytest.mark.anyio
async def test_holding_is_bounded_in_count() -> None:
    handlers = Recorder(pushes=5)
    limits = Limits(
        close_grace_seconds=1, terminate_grace_seconds=1, policy_fallback_seconds=1, max_held_requests=1
    )
    env = {"COMPAT_PUSH_INTERVAL": "0", "COMPAT_POLICY_REQUEST": "ignore"}  # all five come early
    with anyio.fail_after(TIMEOUT):
        async with shape("shape1", handlers=handlers, limits=limits, env=env) as conn:
            await handlers.all_answered.wait()
    assert conn.inbound.held_total == 1
    assert [p["eventId"] for p in handlers.pushes] == ["hb-1"]
    assert [error["code"] for _, error in handlers.refused] == [-32002] * 4
    assert all(error["message"].endswith("not yet in force") for _, error in handlers.refused)


@pytest.mark.anyio
async def test_holding_is_bounded_in_bytes() -> None:
    handlers = Recorder(pushes=5)
    # One push's params are about 140 bytes: the second would pass the bound.
    limits = Limits(
        close_grace_seconds=1, terminate_grace_seconds=1, policy_fallback_seconds=1, max_held_bytes=200
    )
    env = {"COMPAT_PUSH_INTERVAL": "0", "COMPAT_POLICY_REQUEST": "ignore"}  # all five come early
    with anyio.fail_after(TIMEOUT):
        async with shape("shape1", handlers=handlers, limits=limits, env=env) as conn:
            await handlers.all_answered.wait()
    assert conn.inbound.held_total == 1
    assert [p["eventId"] for p in handlers.pushes] == ["hb-1"]
    assert [error["code"] for _, error in handlers.refused] == [-32002] * 4
    assert all(error["message"].endswith("not yet in force") for _, error in handlers.refused)


@pytest.mark.anyio
async def test_holding_is_bounded_in_time() -> None:
    handlers = Recorder(pushes=1)
    limits = Limits(
        close_grace_seconds=1, terminate_grace_seconds=1, policy_fallback_seconds=2, held_request_seconds=0.2
    )
    env = {"COMPAT_PUSH_COUNT": "1", "COMPAT_POLICY_REQUEST": "ignore"}  # the policy settles after 2 s
    with anyio.fail_after(TIMEOUT):
        async with shape("shape1", handlers=handlers, limits=limits, env=env) as conn:
            await handlers.all_answered.wait()
            assert conn.inbound.held_total == 1
    assert handlers.pushes == []
    assert handlers.refused[0][1]["message"] == "Capability denied: the policy is not yet in force"


def test_the_config_key_compat() -> None:
    from pathlib import Path

    from mcpl_host.config import ConfigError, parse_config

    entry = {"command": "x"}
    config = parse_config(
        {"mcpServers": {"a": {**entry, "compat": "0.4"}, "b": entry}}, base_dir=Path("/"), source="t"
    )
    assert config.servers["a"].compat == "0.4" and config.servers["b"].compat == "auto"
    assert config.servers["b"].grant_policy.grants_nothing
    with pytest.raises(ConfigError) as info:
        parse_config({"mcpServers": {"a": {**entry, "compat": "0.3"}}}, base_dir=Path("/"), source="t")
    assert (
        str(info.value) == 't: mcpServers.a.compat: must be "strict", "0.4" or "auto", not the string "0.3"'
    )


def test_the_config_key_protocol_chooses_the_era_and_is_checked() -> None:
    from pathlib import Path

    from mcpl_host.config import ConfigError, parse_config

    entry = {"command": "x"}
    config = parse_config(
        {"mcpServers": {"a": {**entry, "protocol": "handshake"}, "b": entry}}, base_dir=Path("/"), source="t"
    )
    assert config.servers["a"].protocol == "handshake" and config.servers["b"].protocol == "auto"
    assert HostedServer(config.servers["a"]).protocol == "handshake"
    for bad, shown in (("v2", 'the string "v2"'), ([1], "an array")):
        with pytest.raises(ConfigError) as info:
            parse_config({"mcpServers": {"a": {**entry, "protocol": bad}}}, base_dir=Path("/"), source="t")
        assert str(info.value).startswith(
            't: mcpServers.a.protocol: must be "auto", "handshake" or "stateless", not '
        ), str(info.value)
        assert str(info.value).endswith(shown)


def test_a_long_compatibility_note_wraps_indented_under_its_heading() -> None:
    out = io.StringIO()
    console = report.ReportConsole(file=out, width=60, color_system=None, highlight=False)
    sentence = "channels/incoming uses channels.incoming, which the server did not advertise; " * 2
    report.render_notes(console, [{"sentence": sentence.strip()}])
    heading, *lines = out.getvalue().splitlines()
    assert heading.startswith("Compatibility notes") and len(lines) >= 3
    assert all(line.startswith("  ") and line[2] != " " for line in lines), lines


# --- shape 3 in strict: the library explains the stall when the probe does --------------------

#: What the library says of shape 3 in strict after a stall of STALL seconds.
STALL = 2.0
LIBRARY_STALL_SENTENCE = (
    "The host refused channels/register (-32002: the policy is not yet in force), and then the "
    "server stopped answering: nothing received for 2 s while the host waits for featureSets/update "
    "(2 s); servers written for MCPL 0.4 behave this way (they send privileged requests before the "
    'policy and stop at a refusal): use compat="0.4" (or "compat": "0.4" in a config file)'
)
STALL_LIMITS = Limits(close_grace_seconds=1.0, terminate_grace_seconds=1.0, stall_seconds=STALL)


class StallSeen:
    """An observer that keeps the ``stalled`` event."""

    def __init__(self) -> None:
        self.seen = anyio.Event()
        self.stalled: Stalled | None = None

    def observe(self, event: HostEvent) -> None:
        if isinstance(event, Stalled) and not self.seen.is_set():
            self.stalled = event
            self.seen.set()


async def _explains_the_stall_while_the_policy_waits(conn: Any, observer: StallSeen) -> None:
    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:

            async def enter() -> None:
                async with conn:
                    pass

            tg.start_soon(enter)
            await observer.seen.wait()  # the policy request still waits (60 s timeout)
            assert conn.server_info is not None and conn.mcpl_state is MCPLState.PENDING
            assert conn.stall_explanation == LIBRARY_STALL_SENTENCE
            tg.cancel_scope.cancel()
    stalled = observer.stalled
    assert stalled is not None
    assert stalled.explanation == LIBRARY_STALL_SENTENCE
    assert stalled.refused == "channels/register (-32002: the policy is not yet in force)"
    assert stalled.profile == "strict"
    assert [w["method"] for w in stalled.waiting] == ["featureSets/update"]
    assert stalled.silent_seconds >= STALL


@pytest.mark.anyio
async def test_shape3_in_strict_through_connect_stdio_explains_the_stall_while_the_policy_waits() -> None:
    observer = StallSeen()
    await _explains_the_stall_while_the_policy_waits(
        shape("shape3", limits=STALL_LIMITS, observer=observer), observer
    )


@pytest.mark.anyio
async def test_shape3_in_strict_through_connect_websocket_explains_the_stall_too() -> None:
    from .test_websocket import bridge

    observer = StallSeen()
    async with bridge(command=[sys.executable, SERVER, "shape3"]) as server:
        conn = connect(
            ServerConfig(url=server.url(), grant_policy=ALL, limits=STALL_LIMITS), observer=observer
        )
        await _explains_the_stall_while_the_policy_waits(conn, observer)


@pytest.mark.anyio
async def test_shape3_in_strict_under_a_host_gives_the_stall_as_an_event_and_in_the_snapshot(
    rendered_logs: io.StringIO,
) -> None:
    config = ServerConfig(
        name="s",
        transport="stdio",
        command=sys.executable,
        args=(SERVER, "shape3"),
        grant_policy=ALL,
        limits=STALL_LIMITS,
    )
    host = Host({"s": config})
    stalls = host.subscribe(kinds=["stalled"])
    with anyio.fail_after(TIMEOUT):
        async with host:
            event = await stalls.receive()
            snapshot = host.snapshot()["s"]
            assert snapshot.state == "connecting"  # at the stall, not at the request's timeout
            assert snapshot.stall_explanation == LIBRARY_STALL_SENTENCE
            shown = report.run_event(event_json(event), host.server("s").hosted.redactor)
    assert isinstance(event, Stalled) and event.explanation == LIBRARY_STALL_SENTENCE
    assert report.run_event_text(shown)[1].plain == f"s  stalled {LIBRARY_STALL_SENTENCE}"
    lines = [json.loads(line) for line in rendered_logs.getvalue().splitlines()]
    (said,) = [line for line in lines if line["event"] == "the server stopped answering"]
    assert said["explanation"] == LIBRARY_STALL_SENTENCE and said["level"] == "info" and said["server"] == "s"


def test_the_probe_and_the_library_say_the_same_sentence_but_for_the_switch() -> None:
    stall = stall_verdict(2.0, [("featureSets/update", 0.0)], None, STALL)
    refused = RefusalRecord("channels/register", -32002, "not_in_force", "channels.register")
    library = silence_sentence(stall, refused, "strict", switch=LIBRARY_SWITCH)
    assert library == LIBRARY_STALL_SENTENCE
    assert silence_sentence(stall, refused, "strict") == library.replace(LIBRARY_SWITCH, CLI_SWITCH)


@pytest.mark.anyio
async def test_shape3_in_strict_through_connect_http_explains_the_stall_too() -> None:
    process = await anyio.open_process(
        [sys.executable, str(FIXTURES / "http_bridge.py"), "--", sys.executable, SERVER, "shape3"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=None,
        start_new_session=True,
    )
    try:
        port = await port_line(process, TIMEOUT)
        observer = StallSeen()
        conn = connect(
            ServerConfig(url=f"http://127.0.0.1:{port}/mcp", grant_policy=ALL, limits=STALL_LIMITS),
            observer=observer,
        )
        await _explains_the_stall_while_the_policy_waits(conn, observer)
    finally:
        with anyio.CancelScope(shield=True):
            await stop_server_process(process, TIMEOUT)

"""Targeted publish (MCPL RFC-011 rev 3): the 14 cases of RFC-011 §10, one test each.

No frozen vector file exists upstream (RFC-011 §10 lists the cases; ``conformance/rfc-011/``
holds none): each test is written from the RFC text and named after its case
(docs/protocol.md, "Targeted publish (RFC-011)"). Each drives the real host (``connect``, a
``ServerConnection``) over real pipes to ``fixtures/current_spec/server.py`` and its
``publish`` part, on asyncio and trio. Platform boundary (RFC-011 §10): a stub at the
platform client (the fixture's ``POSTS``); nothing here establishes what a real platform does.

One server per backend for the module; a case that kills its server (the lost connection of
case 7) opens its own. The summary line ``VECTORS RFC-011 §10: ...`` is printed by
tests/conftest.py at the end of the session.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest

from mcpl_host import GrantPolicy, HostHandlers, Limits, RequestContext, ServerConfig, connect
from mcpl_host.events import HostEvent, PushEvent
from mcpl_host.jsonrpc.errors import LocalProtocolError, RemoteError, RequestTimeout
from mcpl_host.mcpl.publish_target import (
    ABSENT,
    ReplyTarget,
    reply_target_of_message,
    targeted_outcome,
)
from mcpl_host.server_connection import ServerConnection
from mcpl_host.services.channel_calls import NoPublishTarget, PublishResult, TargetedPublishResult
from mcpl_host.services.turns import OutgoingStream

from .wire import FIXTURES

pytestmark = pytest.mark.anyio
SERVER = [str(FIXTURES / "current_spec" / "server.py")]
EXACT_THREADS = ("t-1", "t-2")


@pytest.fixture(scope="module", params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Handlers(HostHandlers):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[dict[str, Any]] = []
        self.registered = anyio.Event()

    async def channel_message(self, context: RequestContext, message: dict[str, Any]) -> str | None:
        self.messages.append(message)
        return "conv"

    def on_channels_changed(self, server: str, channels: list[dict[str, Any]]) -> None:
        if any(c["id"] == "pub:exact" for c in channels):
            self.registered.set()


@dataclass
class Observer:
    pushes: list[PushEvent] = field(default_factory=list[PushEvent])

    def observe(self, event: HostEvent) -> None:
        if isinstance(event, PushEvent):
            self.pushes.append(event)


@dataclass
class Peer:
    conn: ServerConnection
    handlers: Handlers
    observer: Observer

    async def tool(self, name: str, **arguments: Any) -> Any:
        result = await self.conn.mcp.call_tool(name, arguments, timeout=20)
        assert not result.is_error, result.text
        return json.loads(result.text)

    async def posts(self, conversation: str) -> list[dict[str, Any]]:
        """The fixture platform's posts of ``conversation`` (its text is the conversation id)."""
        return [p for p in await self.tool("posts") if p["text"] == conversation]

    async def sent(self, method: str, conversation: str) -> list[dict[str, Any]]:
        seen = await self.tool("seen")
        return [p for p in seen.get(method, []) if p.get("conversationId") == conversation]

    async def publish(self, conversation: str, channel: str, thread: Any = ABSENT, **kw: Any) -> Any:
        return await self.conn.channels.publish(conversation, channel, conversation, thread_id=thread, **kw)


def _server(handlers: HostHandlers, observer: Observer) -> ServerConnection:
    config = ServerConfig(
        command=sys.executable,
        args=tuple(SERVER),
        grant_policy=GrantPolicy(grant_all_advertised=True),
        limits=Limits(close_grace_seconds=1, terminate_grace_seconds=1),
    )
    return connect(config, handlers=handlers, observer=observer)


@pytest.fixture(scope="module")
async def peer(anyio_backend: str) -> AsyncIterator[Peer]:
    handlers, observer = Handlers(), Observer()
    async with _server(handlers, observer) as conn:
        with anyio.fail_after(20):
            await handlers.registered.wait()
        yield Peer(conn, handlers, observer)


# --- the cases of RFC-011 §10 ----------------------------------------------------------------


async def test_case_01_declaration_accepted_other_capabilities_intact(peer: Peer) -> None:
    registry = peer.conn.inbound.channel_registry
    exact = registry.get("pub:exact")
    assert exact is not None
    assert exact["capabilities"] == {"publish": {"target": "exact"}, "history": True}
    assert [peer.conn.channels.publish_target(c) for c in ("pub:exact", "pub:root", "pub:plain")] == [
        "exact",
        "root",
        None,
    ]
    # An invalid value declares nothing; the descriptor stays, its other capabilities intact.
    invalid = registry.get("pub:invalid")
    assert invalid is not None and invalid["capabilities"]["history"] is True
    assert peer.conn.channels.publish_target("pub:invalid") is None
    # Not a capability path: neither in the advertisement walk nor in the grant.
    grant = peer.conn.policy.state.grant
    assert grant is not None
    assert not [
        p for p in grant.advertised | grant.paths if "target" in p or p.startswith("channels.publish.")
    ]


async def test_case_02_exact_string_thread_posted_there_echo_equal(peer: Peer) -> None:
    result = await peer.publish("case-02", "pub:exact", "t-1")
    assert isinstance(result, TargetedPublishResult)
    assert (result.outcome, result.echo, result.delivered, result.target) == (
        "delivered",
        "t-1",
        True,
        "exact",
    )
    assert result.message_id is not None
    assert await peer.posts("case-02") == [
        {"channelId": "pub:exact", "threadId": "t-1", "text": "case-02", "as": "request"}
    ]
    assert [p["threadId"] for p in await peer.sent("channels/publish", "case-02")] == ["t-1"]


async def test_case_03_exact_null_posts_at_root_despite_newer_thread_message(peer: Peer) -> None:
    await peer.tool("incoming", channelId="pub:exact", threadId="t-2", text="newer, in a thread")
    result = await peer.publish("case-03", "pub:exact", None)
    assert (result.outcome, result.echo) == ("delivered", None)
    assert [p["threadId"] for p in await peer.posts("case-03")] == [None]
    sent = await peer.sent("channels/publish", "case-03")
    assert len(sent) == 1 and "threadId" in sent[0] and sent[0]["threadId"] is None


async def test_case_04_exact_unknown_thread_refused_nothing_posted(peer: Peer) -> None:
    result = await peer.publish("case-04", "pub:exact", "t-404")
    assert (result.outcome, result.delivered, result.message_id) == ("failed", False, None)
    assert result.reason
    assert await peer.posts("case-04") == []


async def test_case_05_root_refuses_string_honours_null(peer: Peer) -> None:
    refused = await peer.publish("case-05", "pub:root", "t-1")
    assert (refused.outcome, refused.message_id) == ("failed", None)
    assert await peer.posts("case-05") == []
    posted = await peer.publish("case-05", "pub:root", None)
    assert (posted.outcome, posted.echo, posted.target) == ("delivered", None, "root")
    assert [p["threadId"] for p in await peer.posts("case-05")] == [None]


async def test_case_06_absent_thread_legacy_shape_and_placement(peer: Peer) -> None:
    await peer.tool("incoming", channelId="pub:exact", threadId="t-1", text="sets the legacy place")
    result = await peer.publish("case-06", "pub:exact")
    assert isinstance(result, PublishResult) and result.delivered is True
    assert "threadId" not in result.raw  # the legacy result shape
    assert "threadId" not in (await peer.sent("channels/publish", "case-06"))[0]
    assert [p["threadId"] for p in await peer.posts("case-06")] == ["t-1"]  # the legacy placement


async def test_case_07_host_verification_unconfirmed(peer: Peer) -> None:
    outcomes = {}
    for channel in ("pub:echo-missing", "pub:echo-different", "pub:false-with-id", "pub:error"):
        outcomes[channel] = await peer.publish("case-07", channel, "t-1")
    assert {c: r.outcome for c, r in outcomes.items()} == dict.fromkeys(outcomes, "unconfirmed")
    assert outcomes["pub:echo-missing"].echo is ABSENT
    assert outcomes["pub:echo-different"].echo == "t-elsewhere"
    assert outcomes["pub:false-with-id"].message_id == "m-contradictory"
    assert isinstance(outcomes["pub:error"].error, RemoteError)
    silent = await peer.publish("case-07", "pub:silent", "t-1", timeout=0.5)
    assert silent.outcome == "unconfirmed" and isinstance(silent.error, RequestTimeout)
    # A lost connection after dispatch: its own server, since the fixture exits.
    handlers = Handlers()
    with anyio.fail_after(20):
        async with _server(handlers, Observer()) as conn:
            await handlers.registered.wait()
            lost = await conn.channels.publish("case-07", "pub:lost", "x", thread_id="t-1")
    assert lost.outcome == "unconfirmed" and lost.error is not None


async def test_case_08_undeclared_channel_receives_no_thread_id(peer: Peer) -> None:
    # The host's share of "plain speech is held": nothing goes out, the caller is told.
    for channel in ("pub:plain", "pub:invalid", "pub:unregistered"):
        for thread in ("t-1", None):
            with pytest.raises(NoPublishTarget):
                await peer.publish("case-08", channel, thread)
    registered = [d["id"] for d in peer.conn.inbound.channel_registry.descriptors()]
    async with OutgoingStream(
        [(peer.conn, registered)], inference_id="case-08", conversation_id="case-08"
    ) as out:
        assert not await out.chunk("pub:plain", "held", thread_id="t-1")
    assert await peer.sent("channels/publish", "case-08") == []
    assert await peer.sent("channels/outgoing/chunk", "case-08") == []
    assert await peer.posts("case-08") == []


async def test_case_09_incoming_thread_ids_are_publish_targets(peer: Peer) -> None:
    before = len(peer.handlers.messages)
    for thread in EXACT_THREADS:
        await peer.tool("incoming", channelId="pub:exact", threadId=thread, text="case-09")
    await peer.tool("incoming", channelId="pub:root", text="case-09")
    messages = peer.handlers.messages[before:]
    targets = [reply_target_of_message(m) for m in messages]
    assert targets == [
        ReplyTarget("pub:exact", "t-1"),
        ReplyTarget("pub:exact", "t-2"),
        ReplyTarget("pub:root", None),
    ]
    assert "threadId" not in messages[2]  # root: no incoming message carries threadId
    for target in targets:
        assert target is not None
        result = await peer.publish("case-09", target.channel_id, target.thread_id)
        assert (result.outcome, result.echo) == ("delivered", target.thread_id)
    assert [p["threadId"] for p in await peer.posts("case-09")] == ["t-1", "t-2", None]


async def test_case_10_withdrawn_declaration_in_flight_never_posted_elsewhere(peer: Peer) -> None:
    result = await peer.publish("case-10", "pub:withdraw", "t-2")
    assert result.outcome in ("delivered", "failed")
    assert [p["threadId"] for p in await peer.posts("case-10")] in ([], ["t-2"])
    # The host acts on the declaration it holds when it sends: now none.
    assert peer.conn.channels.publish_target("pub:withdraw") is None
    with pytest.raises(NoPublishTarget):
        await peer.publish("case-10-after", "pub:withdraw", "t-2")
    assert await peer.sent("channels/publish", "case-10-after") == []


async def test_case_11_invalid_values_refused(peer: Peer) -> None:
    # The host never sends one (RFC-011 §4's closed domain), ...
    for value in (5, "", {}):
        with pytest.raises(LocalProtocolError):
            await peer.publish("case-11", "pub:exact", value)
    assert await peer.sent("channels/publish", "case-11") == []
    # ... and a server refuses one as a result: failed, nothing posted.
    for value in (5, "", {}):
        params = {"conversationId": "case-11", "channelId": "pub:exact", "threadId": value}
        answer = await peer.conn.mcp.request("channels/publish", {**params, "content": []})
        assert answer["delivered"] is False and "messageId" not in answer and answer["reason"]
        assert targeted_outcome(answer, "t-1")[0] == "failed"
    assert await peer.posts("case-11") == []


async def test_case_12_targeted_publish_always_a_request(peer: Peer) -> None:
    channels = peer.conn.channels
    channels.publish_mode = "notification"
    try:
        assert channels.publishes_as_notification
        targeted = await peer.publish("case-12", "pub:exact", "t-1")
        untargeted = await peer.publish("case-12", "pub:exact")
    finally:
        channels.publish_mode = "auto"
    assert (targeted.mode, targeted.outcome) == ("request", "delivered")
    assert untargeted.mode == "notification"
    # One pipe, in order: the notification is read before the tool call that follows it.
    posts = await peer.posts("case-12")
    assert [p["as"] for p in posts] == ["request", "notification"] and posts[0]["threadId"] == "t-1"


async def test_case_13_stream_carries_the_final_thread_id(peer: Peer) -> None:
    registered = [d["id"] for d in peer.conn.inbound.channel_registry.descriptors()]
    routes = [(peer.conn, registered)]
    async with OutgoingStream(routes, inference_id="case-13", conversation_id="case-13") as out:
        assert await out.chunk("pub:exact", "Hel", thread_id="t-2")
        assert await out.chunk("pub:exact", "lo", thread_id="t-2")
        with pytest.raises(LocalProtocolError):
            await out.chunk("pub:exact", "elsewhere", thread_id="t-1")
        assert await out.chunk("pub:root", "Hi", thread_id=None)
    final = await peer.publish("case-13", "pub:exact", "t-2")
    assert final.outcome == "delivered"
    completes = await peer.sent("channels/outgoing/complete", "case-13")
    assert len(completes) == 2
    chunks = await peer.sent("channels/outgoing/chunk", "case-13")
    places = {(p["channelId"], p["threadId"]) for p in chunks + completes}
    assert places == {("pub:exact", "t-2"), ("pub:root", None)}
    rendered = await peer.tool("rendered")
    assert rendered["pub:exact#t-2"] == "Hello" and "pub:exact#t-1" not in rendered


async def test_case_14_push_names_channel_and_thread(peer: Peer) -> None:
    await peer.tool("push", eventId="case-14-a", channelId="pub:exact", threadId="t-1")
    await peer.tool("push", eventId="case-14-b", channelId="pub:exact", coalesceChannelId="pub:exact")
    await peer.tool("push", eventId="case-14-c", channelId="pub:root")
    await peer.tool("push", eventId="case-14-d")  # names no channel: no reply target
    pushes = {e.event_id: e for e in peer.observer.pushes if e.event_id.startswith("case-14")}
    assert pushes["case-14-b"].params["coalesce"]["channelId"] == "pub:exact"
    assert {k: e.reply_target for k, e in pushes.items()} == {
        "case-14-a": ReplyTarget("pub:exact", "t-1"),
        "case-14-b": ReplyTarget("pub:exact", None),
        "case-14-c": ReplyTarget("pub:root", None),
        "case-14-d": None,
    }
    target = pushes["case-14-a"].reply_target
    assert target is not None
    reply = await peer.publish("case-14", target.channel_id, target.thread_id)
    assert reply.outcome == "delivered"
    assert [p["threadId"] for p in await peer.posts("case-14")] == ["t-1"]

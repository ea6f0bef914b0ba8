"""RFC-009 input streams (experimental) end to end through ``Host``, over real pipes to
``fixtures/current_spec/server.py`` (its ``input_streams`` part is the producer, scripted by
tool calls): with ``ServerConfig.input_streams`` on, provisional snapshots reach the
application as ``input_stream`` events only, and the completed final as exactly one ordinary
channel message; with it off, nothing of RFC-009 is advertised or granted and the methods are
``-32601``. asyncio and trio.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from typing import Any

import anyio
import pytest

from mcpl_host import Host, HostHandlers, ServerConfig
from mcpl_host.events import InputStream, event_json
from mcpl_host.handlers import RequestContext
from mcpl_host.mcpl.grants import GrantPolicy
from mcpl_host.mcpl.input_streams import SenderBinding
from mcpl_host.server_connection import ServerConnection

from .conftest import FIXTURES
from .wire import FAST

SERVER = str(FIXTURES / "current_spec" / "server.py")
TIMEOUT = 30
GRANT = GrantPolicy(grant=("channels.register", "channels.incoming", "channels.incoming.streaming"))
#: Updates a microsecond apart at most are refused as too fast: two tool calls over pipes
#: are never that close.
LIMITS = dataclasses.replace(FAST, input_stream_update_interval_seconds=1e-6)
LOBBY = {"id": "voice:lobby", "type": "voice", "direction": "inbound"}


class App(HostHandlers):
    """The application: alice may be spoken for on the lobby; ordinary messages are kept."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[dict[str, Any]] = []

    def input_stream_binding(self, server: str, channel_id: str, descriptor: Any) -> SenderBinding | None:
        return SenderBinding(frozenset({"alice"})) if channel_id == "voice:lobby" else None

    async def channel_message(self, context: RequestContext, message: dict[str, Any]) -> str | None:
        self.messages.append(message)
        return "conversation-1"


async def _call(conn: ServerConnection, method: str, params: dict[str, Any]) -> dict[str, Any]:
    result = await conn.mcp.call_tool("input_call", {"method": method, "params": params})
    answer = json.loads(result.content[0]["text"])
    assert isinstance(answer, dict)
    return answer


def _config(name: str, *, on: bool, limits: Any = LIMITS) -> ServerConfig:
    return ServerConfig(
        name=name, command=sys.executable, args=(SERVER,), limits=limits, grant_policy=GRANT, input_streams=on
    )


async def _open_call(
    conn: ServerConnection, stream_id: str, message_id: str, sender: dict[str, Any] | None = None
) -> tuple[dict[str, Any], int]:
    """Ask to open a stream on the lobby for ``sender`` (alice): the answer as sent and the
    ``startedAt`` given (milliseconds since the epoch)."""
    now = int(time.time() * 1000)
    params = {
        "streamId": stream_id,
        "channelId": "voice:lobby",
        "messageId": message_id,
        "sender": sender or {"id": "alice"},
        "contentType": "text/plain",
        "startedAt": now,
        "expiresAt": now + 30_000,
    }
    return await _call(conn, "channels/input/open", params), now


async def _open(conn: ServerConnection, stream_id: str, message_id: str) -> dict[str, Any]:
    """Open a stream on the lobby for alice; its envelope for the later calls."""
    answer, now = await _open_call(conn, stream_id, message_id)
    return _envelope(stream_id, answer["result"], now)


def _envelope(stream_id: str, lease: dict[str, Any], started_at: int) -> dict[str, Any]:
    """The envelope of alice's stream on the lobby under ``lease`` (RFC-009 §5.1)."""
    return {
        "streamId": stream_id,
        "transportEpoch": lease["transportEpoch"],
        "leaseId": lease["leaseId"],
        "channelId": "voice:lobby",
        "senderId": "alice",
        "contentType": "text/plain",
        "startedAt": started_at,
        "expiresAt": lease["expiresAt"],
    }


async def _incoming(conn: ServerConnection, message_id: str) -> dict[str, Any]:
    message = {
        "channelId": "voice:lobby",
        "messageId": message_id,
        "author": {"id": "alice"},
        "timestamp": "2026-12-03T00:00:00Z",
        "content": [{"type": "text", "text": "typed"}],
    }
    (result,) = (await _call(conn, "channels/incoming", {"messages": [message]}))["result"]["results"]
    assert isinstance(result, dict)
    return result


@pytest.mark.anyio
async def test_ordinary_incoming_and_streams_share_one_message_key(anyio_backend: str) -> None:
    """RFC-009 §4.3 (IS7): an open stream's key refuses an ordinary message, a completed one
    too, and an ordinary message's key refuses a stream."""
    app = App()
    host = Host({"voice": _config("voice", on=True)}, handlers_factory=lambda name: app)
    with anyio.fail_after(TIMEOUT):
        async with host:
            await host.wait_ready(timeout=TIMEOUT)
            conn = await host.server("voice").connected()
            await conn.mcp.call_tool("input_channels", {"channels": [LOBBY]})
            envelope = await _open(conn, "u1", "m1")
            held = await _incoming(conn, "m1")
            done = await _call(conn, "channels/input/complete", {**envelope, "revision": 1, "text": "spoken"})
            committed = await _incoming(conn, "m1")
            typed = await _incoming(conn, "m2")
            reopened, _ = await _open_call(conn, "u2", "m2")
    assert held == {"messageId": "m1", "accepted": False, "reason": "duplicate"}
    assert done["result"]["status"] == "completed"
    assert committed == {"messageId": "m1", "accepted": False, "reason": "duplicate"}
    assert typed["accepted"] is True
    assert reopened["error"]["data"] == {"reason": "conflict"}
    assert [m["content"][0]["text"] for m in app.messages] == ["spoken", "typed"]


@pytest.mark.anyio
async def test_a_grant_reduction_ends_the_lease_before_any_further_call(anyio_backend: str) -> None:
    """RFC-009 §8 (IS5): the reduction is in force before its policy request goes out, and the
    open stream ends there, its text cleared."""
    app = App()
    host = Host({"voice": _config("voice", on=True)}, handlers_factory=lambda name: app)
    with anyio.fail_after(TIMEOUT):
        async with host:
            events = host.subscribe(kinds=["input_stream"])
            await host.wait_ready(timeout=TIMEOUT)
            conn = await host.server("voice").connected()
            await conn.mcp.call_tool("input_channels", {"channels": [LOBBY]})
            envelope = await _open(conn, "u1", "m1")
            await _call(conn, "channels/input/update", {**envelope, "revision": 1, "text": "half"})
            await conn.hosted.update_policy(GrantPolicy(grant=("channels.register", "channels.incoming")))
            updated, ended = await events.receive(), await events.receive()
            streams = conn.input_streams
            assert streams is not None
            state = streams.machine.snapshot()["streams"]
    assert isinstance(updated, InputStream) and updated.update.status == "updated"
    assert isinstance(ended, InputStream) and (ended.update.status, ended.update.text) == ("aborted", None)
    assert state == {"u1": {"status": "aborted", "revision": 1, "provisional": None}}
    assert app.messages == []


@pytest.mark.anyio
async def test_a_lease_expires_on_its_deadline_without_another_packet(anyio_backend: str) -> None:
    """RFC-009 §8 (IS6): the host shortens the lease to ``input_stream_max_seconds`` and ends
    it at the deadline by itself."""
    limits = dataclasses.replace(LIMITS, input_stream_max_seconds=0.2)
    host = Host({"voice": _config("voice", on=True, limits=limits)}, handlers_factory=lambda name: App())
    with anyio.fail_after(TIMEOUT):
        async with host:
            events = host.subscribe(kinds=["input_stream"])
            await host.wait_ready(timeout=TIMEOUT)
            conn = await host.server("voice").connected()
            await conn.mcp.call_tool("input_channels", {"channels": [LOBBY]})
            envelope = await _open(conn, "u1", "m1")
            ended = await events.receive()
            late = await _call(conn, "channels/input/update", {**envelope, "revision": 1, "text": "late"})
    assert envelope["expiresAt"] < envelope["startedAt"] + 30_000  # the host shortened it
    assert isinstance(ended, InputStream) and ended.update.status == "expired"
    assert late["error"]["data"] == {"reason": "expired"}


@pytest.mark.anyio
async def test_provisional_updates_are_events_and_the_final_one_ordinary_message(anyio_backend: str) -> None:
    app = App()
    host = Host({"voice": _config("voice", on=True)}, handlers_factory=lambda name: app)
    with anyio.fail_after(TIMEOUT):
        async with host:
            events = host.subscribe(kinds=["input_stream"])
            notifications = host.subscribe(kinds=["notification"])
            everything = host.subscribe()
            await host.wait_ready(timeout=TIMEOUT)
            conn = await host.server("voice").connected()
            # RFC-009 §11: a method sent as a notification is ignored, its text shown nowhere
            forbidden = {"method": "channels/input/update", "params": {"streamId": "u1", "text": "secret"}}
            await conn.mcp.call_tool("notify", forbidden)
            assert conn.policy.state.grant is not None
            assert conn.policy.state.grant.allows("channels.incoming.streaming")
            await conn.mcp.call_tool("input_channels", {"channels": [LOBBY]})
            opened, now = await _open_call(conn, "u1", "u1-final", {"id": "alice", "name": "Alice"})
            lease = opened["result"]
            assert lease["transportEpoch"] == "epoch-1" and lease["mode"] == "volatile"
            envelope = _envelope("u1", lease, now)
            for revision, text in ((1, "turn left"), (2, "turn right")):
                answer = await _call(
                    conn, "channels/input/update", {**envelope, "revision": revision, "text": text}
                )
                assert answer == {"result": {"accepted": True, "status": "updated", "revision": revision}}
            assert app.messages == []  # nothing provisional is a message
            done = await _call(
                conn, "channels/input/complete", {**envelope, "revision": 2, "text": "turn right"}
            )
            assert done["result"]["status"] == "completed"
            assert done["result"]["conversationId"] == "conversation-1"
            again = await _call(
                conn, "channels/input/complete", {**envelope, "revision": 2, "text": "turn right"}
            )
            assert again == done  # an exact retry: the same receipt, no second message
            seen = [await events.receive() for _ in range(3)]
            with pytest.raises(anyio.WouldBlock):  # read before the later answers: not reported
                notifications.receive_nowait()
            shown: list[str] = []
            while True:
                try:
                    shown.append(json.dumps(event_json(everything.receive_nowait())))
                except anyio.WouldBlock:
                    break
    # RFC-009 §10: no event (answered requests included) carries provisional or final text
    assert shown and not any(
        word in line for line in shown for word in ("turn left", "turn right", "secret", "sha256:")
    )
    assert [(e.update.status, e.update.text) for e in seen if isinstance(e, InputStream)] == [
        ("updated", "turn left"),
        ("updated", "turn right"),
        ("completed", None),
    ]
    assert all("text" not in e.to_json() for e in seen)
    (message,) = app.messages
    assert message["messageId"] == "u1-final" and message["author"] == {"id": "alice", "name": "Alice"}
    assert message["content"] == [{"type": "text", "text": "turn right"}]


@pytest.mark.anyio
async def test_switched_off_nothing_is_advertised_or_granted_and_the_methods_are_unknown(
    anyio_backend: str,
) -> None:
    host = Host({"plain": _config("plain", on=False)}, handlers_factory=lambda name: App())
    with anyio.fail_after(TIMEOUT):
        async with host:
            await host.wait_ready(timeout=TIMEOUT)
            conn = await host.server("plain").connected()
            grant = conn.policy.state.grant
            assert grant is not None and grant.allows("channels.incoming")
            assert not grant.allows("channels.incoming.streaming")  # advertised by the server, withheld
            answer = await _call(conn, "channels/input/open", {"streamId": "u1"})
            seen = json.loads((await conn.mcp.call_tool("seen", {})).content[0]["text"])
    assert answer["error"]["code"] == -32601
    channels = seen["initialize"][0]["capabilities"]["experimental"]["mcpl"]["channels"]
    assert "inputStreaming" not in channels

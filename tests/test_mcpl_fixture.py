"""Every MCPL method in both directions against fixtures/mcpl_server.py, over real pipes."""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import pytest

from mcpl_host import GrantPolicy, HostHandlers, Limits, RequestContext, ServerConfig, connect
from mcpl_host.services.turns import OutgoingStream, before_inference_fanout, inference_lifecycle

from .wire import FIXTURES, split_runtime

pytestmark = pytest.mark.anyio
SERVER = [str(FIXTURES / "mcpl_server.py")]
MODEL = {"id": "test-model", "vendor": "test", "contextWindow": 1000, "capabilities": ["text"]}
# The injection paths are granted only when named (RFC-010 §4.1), never by grant-all.
NOT_SYSTEM = GrantPolicy(
    grant=("contextHooks.beforeInference.inject.*",),
    grant_all_advertised=True,
    deny=("contextHooks.beforeInference.inject.system",),
)


class Handlers(HostHandlers):
    def __init__(self) -> None:
        super().__init__(model_info=MODEL)
        self.pushes: list[dict[str, Any]] = []
        self.incoming: list[dict[str, Any]] = []
        self.registered = anyio.Event()
        self.manifest_changed = anyio.Event()

    async def push_event(self, context: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        self.pushes.append(params)
        return {"accepted": True, "inferenceId": "inf-1"}

    async def inference_request(
        self, context: RequestContext, params: dict[str, Any], stream: Any
    ) -> dict[str, Any]:
        if stream is not None:
            for delta in ("Hel", "lo"):
                stream.send(delta)
        return {
            "content": "Hello",
            "model": "test-model",
            "finishReason": "end_turn",
            "usage": {"inputTokens": 3, "outputTokens": 2},
        }

    async def channel_message(self, context: RequestContext, message: dict[str, Any]) -> str | None:
        self.incoming.append(message)
        return "conv-1"

    def on_channels_changed(self, server: str, channels: Any) -> None:
        self.registered.set()

    def on_manifest_change(self, server: str, receipt: Any) -> None:
        self.manifest_changed.set()


async def tool(conn: Any, name: str, **arguments: Any) -> Any:
    result = await conn.mcp.call_tool(name, arguments, timeout=20)
    assert not result.is_error, result.text
    return json.loads(result.text)


def fixture(**kwargs: Any) -> Any:
    settings, runtime = split_runtime(kwargs)
    settings.setdefault("grant_policy", NOT_SYSTEM)
    settings.setdefault("limits", Limits(close_grace_seconds=1, terminate_grace_seconds=1))
    return connect(ServerConfig(command=sys.executable, args=tuple(SERVER), **settings), **runtime)


async def test_server_to_host_methods_end_to_end() -> None:
    handlers = Handlers()
    with anyio.fail_after(30):
        async with fixture(handlers=handlers) as conn:
            assert conn.policy.state.is_ready
            await handlers.registered.wait()  # it blocked on channels/register until answered
            push = await tool(conn, "push", text="hello", eventId="e-1")
            assert push == {"accepted": True, "inferenceId": "inf-1"}
            assert await tool(conn, "push", text="again", eventId="e-1") == push  # replayed
            assert len(handlers.pushes) == 1
            assert set(handlers.pushes[0]["tags"]) == {"chat:mention", "chat:addressed"}
            streamed = await tool(conn, "infer", stream=True)
            assert streamed["answer"]["content"] == "Hello"
            assert [c["delta"] for c in streamed["chunks"]] == ["Hel", "lo"]
            assert await tool(conn, "model") == MODEL
            listed = await tool(conn, "list_channels")
            assert {c["id"] for c in listed["channels"]} == {"fx:general", "fx:alerts"}
            incoming = await tool(conn, "incoming", channelId="fx:general", text="hi")
            assert incoming["results"][0]["accepted"] is True
            refused = await tool(conn, "incoming", channelId="fx:unknown", text="hi")
            assert refused["results"][0]["accepted"] is False
            assert len(handlers.incoming) == 1


async def test_host_to_server_methods_end_to_end() -> None:
    handlers = Handlers()
    with anyio.fail_after(30):
        async with fixture(handlers=handlers) as conn:
            await handlers.registered.wait()
            # A mixed injection array: the system position is not granted and is dropped.
            fan = await before_inference_fanout(
                [conn],
                inference_id="inf-1",
                conversation_id="c-1",
                turn_index=0,
                user_message="hi",
                model=MODEL,
            )
            assert not fan.by_position["system"]
            assert len(fan.by_position["beforeUser"]) == len(fan.by_position["afterUser"]) == 1
            async with inference_lifecycle(
                [conn], inference_id="inf-1", conversation_id="c-1", turn_index=0, model=MODEL
            ) as turn:
                turn.set_usage(3, 2)
                registered = {d["id"] for d in conn.inbound.channel_registry.descriptors()}
                async with OutgoingStream(
                    [(conn, registered)], inference_id="inf-1", conversation_id="c-1"
                ) as stream:
                    await stream.chunk("fx:general", "Hel")
                    await stream.chunk("fx:general", "lo")
            published = await conn.channels.publish("c-1", "fx:general", "Hello")
            assert published.delivered
            opened = await conn.channels.open(type="chat", address="room-9")
            assert opened is not None
            assert await conn.channels.close("fx:opened")
            state = await conn.state.call_tool_with_state("stateful", {"n": 1}, feature_set="fx.state")
            assert state.text == "1"
            rollback = await conn.state.rollback("fx.state", "cp-0")
            assert rollback.outcome == "rolled_back"
            missing = await conn.state.rollback("fx.state", "cp-404")
            assert missing.outcome == "not_found"
            seen = await tool(conn, "seen")
    assert [p["phase"] for p in seen["lifecycle"]] == ["started", "completed"]
    assert seen["lifecycle"][1]["usage"] == {"inputTokens": 3, "outputTokens": 2}
    assert "userMessage" not in seen["lifecycle"][0]
    assert seen["hooks"][0]["userMessage"] == "hi"  # observe is granted
    assert [c["index"] for c in seen["chunks"]] == [0, 1]
    assert len(seen["completes"]) == 1 and seen["completes"][0]["channelId"] == "fx:general"
    assert seen["publish"][0]["as"] == "request"


async def test_publish_falls_back_to_a_notification_for_a_server_that_refuses_requests() -> None:
    handlers = Handlers()
    conn = connect(
        ServerConfig(
            command=sys.executable,
            args=tuple(SERVER),
            env={"MCPL_FX_PUBLISH": "notification"},
            grant_policy=NOT_SYSTEM,
            limits=Limits(close_grace_seconds=1, terminate_grace_seconds=1),
        ),
        handlers=handlers,
    )
    with anyio.fail_after(30):
        async with conn:
            await handlers.registered.wait()
            await conn.channels.publish("c-1", "fx:general", "Hello")
            seen = await tool(conn, "seen")
    assert [p["as"] for p in seen["publish"]] == ["notification"]


async def test_manifest_change_revokes_push_events() -> None:
    handlers = Handlers()
    with anyio.fail_after(30):
        async with fixture(handlers=handlers) as conn:
            assert conn.grant is not None and conn.grant.allows("pushEvents")
            await tool(conn, "change_manifest")
            await handlers.manifest_changed.wait()
            assert not conn.grant.allows("pushEvents")
            refused = await tool(conn, "push", text="after")
            assert refused["error"]["code"] == -32002

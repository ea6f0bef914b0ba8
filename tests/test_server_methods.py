"""Server -> host MCPL methods at the wire level (MCPL §8, §9, §11, §12, §14, §16;
docs/protocol.md R2, "Admission order", "Push results", "Push idempotency", "Channels",
"State"). Two failures seen before are pinned by name: "blocking until its channels/register
is answered" is ``test_channels_register_blocks_until_answered_while_ids_collide``;
"push/event although MCPL was not negotiated" is
``test_routing.test_push_event_from_plain_mcp_server_is_refused_and_answered``. A streamed
``inference/request`` without its grant, and its chunks (MCPL §11.4), are pinned in
``test_routing``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from mcpl_host import GrantPolicy, HandlerError, HostedServer, HostHandlers, RequestContext, ServerConfig
from mcpl_host.mcpl.feature_sets import FeatureSetPolicy
from mcpl_host.mcpl.server_shapes import ChannelRegistry
from mcpl_host.mcpl.state import FeatureSetStateStore

from .conftest import FIXTURES
from .wire import (
    FAST,
    MCP_HANDSHAKE,
    Script,
    TestHandlers,
    mark,
    mcpl_handshake,
    mcpl_result,
    server_notification,
    server_request,
)

pytestmark = pytest.mark.anyio

MANIFEST = {
    "version": "0.5",
    "pushEvents": True,
    "inferenceRequest": True,
    "modelInfo": True,
    "channels": {"register": True, "incoming": True, "publish": True},
    "featureSets": {
        "demo": {"description": "d", "uses": ["pushEvents", "inferenceRequest", "modelInfo"]},
        "chat": {"description": "c", "uses": ["channels.register", "channels.incoming"]},
        "off": {"description": "o", "uses": ["pushEvents"]},
    },
}
ALL = GrantPolicy(grant_all_advertised=True)
OFF = FeatureSetPolicy(disabled=("off",))
MODEL = {"id": "m-1", "vendor": "acme", "contextWindow": 200000, "capabilities": ["text"]}


def handshake(manifest: dict[str, Any] = MANIFEST) -> list[dict[str, Any]]:
    return mcpl_handshake(mcpl_result(manifest))


call = server_request


notify = server_notification


def push(request_id: Any, event_id: str = "e1", **changes: Any) -> dict[str, Any]:
    params = {
        "featureSet": "demo",
        "eventId": event_id,
        "timestamp": "2026-01-01T00:00:00Z",
        "payload": {"content": [{"type": "text", "text": "hi"}]},
        **changes,
    }
    return call(request_id, "push/event", {k: v for k, v in params.items() if v is not None})


def channel(channel_id: str, direction: str = "inbound", **extra: Any) -> dict[str, Any]:
    return {"id": channel_id, "type": "chat", "label": channel_id, "direction": direction, **extra}


def message(message_id: Any, channel_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "channelId": channel_id,
        "messageId": message_id,
        "author": {"id": "u", "name": "U"},
        "timestamp": "2026-01-01T00:00:00Z",
        "content": [{"type": "text", "text": "yo"}],
        **extra,
    }


def answers(script: Script) -> dict[str, dict[str, Any]]:
    """The host's answers to server requests, by id as JSON text."""
    return {json.dumps(m["id"]): m for m in script.messages() if "method" not in m and "id" in m}


def result(script: Script, request_id: Any) -> Any:
    return answers(script)[json.dumps(request_id)]["result"]


def error(script: Script, request_id: Any) -> dict[str, Any]:
    return answers(script)[json.dumps(request_id)]["error"]


class Recorder(TestHandlers):
    """Handlers recording what reaches them; behaviour chosen by eventId / content / messageId."""

    def __init__(self, **config: Any) -> None:
        TestHandlers.__init__(self)
        HostHandlers.__init__(self, **config)
        self.pushes: list[dict[str, Any]] = []
        self.messages: list[dict[str, Any]] = []
        self.refused: list[tuple[str, dict[str, Any]]] = []
        self.changes: list[list[dict[str, Any]]] = []
        self.release = anyio.Event()
        self.started = anyio.Event()
        self.got_message = anyio.Event()
        self.failures = 0

    async def push_event(self, context: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        self.pushes.append(params)
        event_id = params["eventId"]
        if event_id == "slow":
            self.started.set()
            await self.release.wait()
        if event_id == "boom" and self.failures == 0:
            self.failures += 1
            raise RuntimeError("first attempt fails")
        if event_id == "refuse":
            return {"accepted": False}
        if event_id == "malformed":
            return {"accepted": "yes"}
        if event_id == "huge":  # a member orjson cannot write (beyond 64 bits)
            return {"accepted": True, "count": 2**70}
        return {"accepted": True, "inferenceId": f"inf-{len(self.pushes)}"}

    async def inference_request(self, context: RequestContext, params: dict[str, Any], stream: Any) -> Any:
        good = {
            "content": "ok",
            "model": "m-1",
            "finishReason": "end_turn",
            "usage": {"inputTokens": 3, "outputTokens": 1},
        }
        kind = params["messages"][0]["content"]
        if kind == "bad finish":
            return {**good, "finishReason": "done"}
        if kind == "no usage":
            return {k: v for k, v in good.items() if k != "usage"}
        return good

    async def channel_message(self, context: RequestContext, message: dict[str, Any]) -> str | None:
        self.messages.append(message)
        self.got_message.set()
        if message["messageId"] == "muted":
            raise HandlerError(-32000, "muted")
        if message["messageId"] == "quiet":
            return None
        return f"conv-{message['channelId']}"

    def on_refused(self, server: str, method: str, params: Any, error: dict[str, Any]) -> None:
        self.refused.append((method, error))

    def on_channels_changed(self, server: str, channels: list[dict[str, Any]]) -> None:
        self.changes.append(channels)


async def run(script: Script, handlers: TestHandlers | None = None, **kwargs: Any) -> TestHandlers:
    handlers = handlers or Recorder()
    kwargs.setdefault("grant_policy", ALL)
    kwargs.setdefault("feature_set_policy", OFF)
    with anyio.fail_after(20):
        async with script.connect(handlers=handlers, **kwargs) as conn:
            await script.finished(conn)
    return handlers


# --- G: push/event and tags ------------------------------------------------------------------


async def test_push_without_the_grant_is_refused_whatever_its_tags(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *handshake(),
            push(1, tags=["chat:dm", "chat:mention"]),
            {"wait_response": 1, "expect_error_code": -32002},
        ],
    )
    await run(script, grant_policy=GrantPolicy(grant_all_advertised=True, deny=("pushEvents",)))
    assert error(script, 1)["data"] == {"capability": "pushEvents"}


async def test_a_list_or_object_feature_set_after_a_remembered_push_is_32602(tmp_path: Path) -> None:
    # The first push leaves its feature set remembered (admission.PushAdmissions); a list or
    # an object is still refused as admit refuses it, and the pushes after it are served.
    script = Script(
        tmp_path,
        [
            *handshake(),
            push(1),
            {"wait_response": 1},
            push(2, "e2", featureSet=["demo"]),
            {"wait_response": 2, "expect_error_code": -32602},
            push(3, "e3", featureSet={"name": "demo"}),
            {"wait_response": 3, "expect_error_code": -32602},
            push(4, "e4"),
            {"wait_response": 4},
        ],
    )
    await run(script)


async def test_push_event_missing_fields_is_32602(tmp_path: Path) -> None:
    broken = {
        2: {"eventId": None},
        3: {"timestamp": None},
        4: {"timestamp": "yesterday"},
        5: {"payload": None},
        6: {"payload": {"text": "no content"}},
        7: {"payload": {"content": ["x"]}},
        8: {"tags": ["chat:dm", 7]},
        9: {"origin": "discord"},
        10: {"featureSet": None},
    }
    steps = [
        step
        for n, changes in broken.items()
        for step in (push(n, f"e{n}", **changes), {"wait_response": n, "expect_error_code": -32602})
    ]
    script = Script(tmp_path, [*handshake(), *steps])
    handlers = await run(script)
    assert isinstance(handlers, Recorder) and handlers.pushes == []  # no handler saw any
    named = {
        2: "eventId",
        3: "timestamp",
        4: "timestamp",
        5: "payload",
        6: "payload.content",
        7: "payload.content[0]",
        8: "tags",
        9: "origin",
    }
    for n, field in named.items():
        assert any(p.startswith(field) for p in error(script, n)["data"]["problems"]), n
    assert "featureSet" in error(script, 10)["message"]
    assert [m for m, e in handlers.refused] == ["push/event"] * len(broken)


async def test_duplicate_event_id_replays_result(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *handshake(),
            push(1, "e1"),
            {"wait_response": 1},
            push(2, "e1"),
            {"wait_response": 2},
            push(3, "e2"),
            {"wait_response": 3},
        ],
    )
    handlers = await run(script)
    assert result(script, 1) == result(script, 2) == {"accepted": True, "inferenceId": "inf-1"}
    assert result(script, 3) == {"accepted": True, "inferenceId": "inf-2"}
    assert [p["eventId"] for p in handlers.pushes] == ["e1", "e2"]  # no second inference


async def test_duplicate_while_the_first_is_in_flight_waits_for_its_result(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *handshake(),
            push(1, "slow"),
            push(2, "slow"),
            mark("both sent"),
            # Either may be the one handled (trio shuffles its run queue): wait for two answers.
            *[{"wait_for": {"result": {"accepted": True, "inferenceId": "inf-1"}}}] * 2,
        ],
    )
    handlers = Recorder()
    with anyio.fail_after(20):
        async with script.connect(handlers=handlers, grant_policy=ALL) as conn:
            await handlers.started.wait()
            await handlers.mark("both sent").wait()
            await anyio.wait_all_tasks_blocked()  # the duplicate is waiting, not handled
            assert len(handlers.pushes) == 1
            handlers.release.set()
            await script.finished(conn)
    assert result(script, 1) == result(script, 2) == {"accepted": True, "inferenceId": "inf-1"}
    assert len(handlers.pushes) == 1


async def test_an_error_is_not_remembered_the_retry_is_handled_anew(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *handshake(),
            push(1, "boom"),
            {"wait_response": 1, "expect_error_code": -32603},
            push(2, "boom"),
            {"wait_response": 2},
        ],
    )
    handlers = await run(script)
    assert result(script, 2)["accepted"] is True
    assert len(handlers.pushes) == 2


async def test_a_duplicate_of_a_result_orjson_cannot_write_gets_it_unchanged(tmp_path: Path) -> None:
    script = Script(
        tmp_path, [*handshake(), push(1, "huge"), {"wait_response": 1}, push(2, "huge"), {"wait_response": 2}]
    )
    handlers = await run(script)
    assert result(script, 1) == result(script, 2) == {"accepted": True, "count": 2**70}
    assert isinstance(handlers, Recorder) and len(handlers.pushes) == 1


async def test_a_retry_after_a_reconnect_is_a_duplicate_and_a_reused_id_with_other_params_is_new(
    tmp_path: Path,
) -> None:
    other = {"content": [{"type": "text", "text": "a restarted server's own e2"}]}
    first = Script(
        tmp_path,
        [
            *handshake(),
            push(1, "e1"),
            {"wait_response": 1},
            push(2, "e2"),
            {"wait_response": 2},
            mark("first"),
        ],
        name="first",
    )
    second = Script(
        tmp_path,
        [
            *handshake(),
            push(3, "e1"),  # the same params: a retry of the first transport's e1
            {"wait_response": 3},
            push(4, "e2", payload=other),  # the same id, other params: a new event
            {"wait_response": 4},
            mark("second"),
        ],
        name="second",
    )
    args = [str(FIXTURES / "attempts.py"), str(tmp_path / "starts")]
    for script in (first, second):
        args += [str(script.path), str(script.record_path)]
    handlers = Recorder()
    hosted = HostedServer(
        ServerConfig(
            command=sys.executable, args=tuple(args), grant_policy=ALL, feature_set_policy=OFF, limits=FAST
        ),
        handlers=handlers,
    )
    with capture_logs() as logs, anyio.fail_after(30):
        async with hosted.open_connection():
            await handlers.mark("first").wait()
        async with hosted.open_connection():
            await handlers.mark("second").wait()
    assert result(first, 1) == result(second, 3) == {"accepted": True, "inferenceId": "inf-1"}
    assert result(second, 4) == {"accepted": True, "inferenceId": "inf-3"}
    assert [p["eventId"] for p in handlers.pushes] == ["e1", "e2", "e2"]
    reused = [e for e in logs if e["event"].startswith("push/event reuses an eventId")]
    assert [e["log_level"] for e in reused] == ["info"]


async def test_a_push_admitted_with_a_compatibility_note_logs_the_note_once(tmp_path: Path) -> None:
    lacking = {**MANIFEST, "featureSets": {"demo": {"description": "d", "uses": ["modelInfo"]}}}
    script = Script(
        tmp_path,
        [
            *handshake(lacking),
            push(1, "e1"),  # after the receipt: admitted at once (0.4: uses_lacks is a note)
            {"wait_response": 1},
            push(2, "e2"),
            {"wait_response": 2},
        ],
    )
    with capture_logs() as logs:
        async with script.connect(handlers=Recorder(), grant_policy=ALL, compat="0.4") as conn:
            with anyio.fail_after(20):
                await script.finished(conn)
            held = conn.inbound.held_total
    assert held == 0 and result(script, 1)["accepted"] is True and result(script, 2)["accepted"] is True
    notes = [e for e in logs if e["event"] == "compatibility note (0.4 profile)"]
    assert len(notes) == 1 and "which the set's uses does not list" in str(notes[0]["note"])


async def test_push_result_shape_reason_filled_and_malformed_is_32603(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *handshake(),
            push(1, "refuse"),
            {"wait_response": 1},
            push(2, "malformed"),
            {"wait_response": 2, "expect_error_code": -32603},
        ],
    )
    with capture_logs() as logs:
        await run(script)
    assert result(script, 1) == {"accepted": False, "reason": "not_accepted"}
    assert error(script, 2) == {"code": -32603, "message": "Internal error"}
    assert any(e["event"] == "handler returned a malformed result" for e in logs)
    assert any("without a reason" in e["event"] for e in logs)


async def test_tags_closed_unknown_tags_kept_origin_as_given(tmp_path: Path) -> None:
    origin = {"source": "discord", "nested": {"x": [1, 2]}}
    tags = ["chat:ambient", "chat:mention", "vendor:odd=1", "chat:dm", "nonamespace", "chat:mention"]
    script = Script(
        tmp_path,
        [
            *handshake(),
            push(1, origin=origin, tags=tags),
            {"wait_response": 1},
            push(2, "e2"),
            {"wait_response": 2},
        ],
    )
    handlers = await run(script)
    assert isinstance(handlers, Recorder)
    seen = handlers.pushes[0]
    assert seen["tags"] == [
        "chat:mention",
        "vendor:odd=1",
        "chat:dm",
        "nonamespace",
        "chat:addressed",
        "chat:private",
    ]  # ambient dropped (§16.3)
    assert seen["origin"] == origin
    assert "tags" not in handlers.pushes[1]  # not invented when the server sent none
    assert result(script, 1)["accepted"] is True


# --- H: inference/request and model/info ------------------------------------------------------


def inference(request_id: Any, content: Any = "hi", **changes: Any) -> dict[str, Any]:
    params = {"featureSet": "demo", "messages": [{"role": "user", "content": content}], **changes}
    return call(request_id, "inference/request", params)


async def test_inference_params_and_result_shape(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *handshake(),
            inference(1),
            {"wait_response": 1},
            inference(2, [{"type": "text", "text": "blocks are fine"}]),
            {"wait_response": 2},
            inference(3, messages=[]),
            {"wait_response": 3, "expect_error_code": -32602},
            inference(4, messages=[{"content": "no role"}]),
            {"wait_response": 4, "expect_error_code": -32602},
            inference(5, stream="yes"),
            {"wait_response": 5, "expect_error_code": -32602},
            inference(6, "bad finish"),
            {"wait_response": 6, "expect_error_code": -32603},
            inference(7, "no usage"),
            {"wait_response": 7, "expect_error_code": -32603},
        ],
    )
    with capture_logs() as logs:
        await run(script)
    assert result(script, 1) == {
        "content": "ok",
        "model": "m-1",
        "finishReason": "end_turn",
        "usage": {"inputTokens": 3, "outputTokens": 1},
    }
    assert "messages" in error(script, 3)["data"]["problems"][0]
    assert "role" in error(script, 4)["data"]["problems"][0]
    assert error(script, 5)["data"]["problems"] == ["stream is not a boolean"]
    malformed = [e for e in logs if e["event"] == "handler returned a malformed result"]
    assert [e["method"] for e in malformed] == ["inference/request"] * 2
    assert any("finishReason" in p for p in malformed[0]["problems"])


async def test_model_info_answered_from_configuration(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *handshake(),
            call(1, "model/info", {}),
            {"wait_response": 1},
            call(2, "model/info"),
            {"wait_response": 2},
        ],
    )
    await run(script, Recorder(model_info=MODEL))
    assert result(script, 1) == result(script, 2) == MODEL


async def test_model_info_unconfigured_or_malformed_is_an_error_never_silence(tmp_path: Path) -> None:
    script = Script(
        tmp_path, [*handshake(), call(1, "model/info", {}), {"wait_response": 1, "expect_error_code": -32601}]
    )
    await run(script)
    assert "no model information" in error(script, 1)["message"]
    script = Script(
        tmp_path,
        [*handshake(), call(1, "model/info", {}), {"wait_response": 1, "expect_error_code": -32603}],
        name="malformed",
    )
    await run(script, Recorder(model_info={**MODEL, "contextWindow": "big"}))


async def test_model_info_not_granted_is_32002(tmp_path: Path) -> None:
    script = Script(
        tmp_path, [*handshake(), call(1, "model/info", {}), {"wait_response": 1, "expect_error_code": -32002}]
    )
    await run(
        script,
        Recorder(model_info=MODEL),
        grant_policy=GrantPolicy(grant_all_advertised=True, deny=("modelInfo",)),
    )
    assert error(script, 1)["data"] == {"capability": "modelInfo"}


# --- I: channels ---------------------------------------------------------------------------


async def test_channels_authorized_by_the_grant_never_by_a_feature_set(tmp_path: Path) -> None:
    register = {"channels": [channel("a")], "featureSet": "off"}  # a disabled set's name: ignored
    script = Script(tmp_path, [*handshake(), call(1, "channels/register", register), {"wait_response": 1}])
    await run(script)
    assert result(script, 1) == {"results": [{"id": "a", "accepted": True}]}
    script = Script(
        tmp_path,
        [
            *handshake(),
            call(1, "channels/register", {**register, "featureSet": "chat"}),
            {"wait_response": 1, "expect_error_code": -32002},
        ],
        name="denied",
    )
    await run(script, grant_policy=GrantPolicy(grant_all_advertised=True, deny=("channels.register",)))
    assert error(script, 1)["data"] == {"capability": "channels.register"}


async def test_channels_register_itemized_results(tmp_path: Path) -> None:
    descriptors = [
        channel("discord:acme/general"),
        {"type": "chat", "direction": "inbound"},  # no id
        channel("discord:acme/bad", direction="sideways"),
        channel("discord:acme/general", direction="outbound"),  # the same id twice
        channel("discord:other/x"),  # outside the host's patterns
        channel("discord:acme/labelled", label=7),
        channel("discord:acme/out", direction="outbound", address={"guild": 1}),
    ]
    script = Script(
        tmp_path,
        [
            *handshake(),
            call(1, "channels/register", {"channels": descriptors}),
            {"wait_response": 1},
            call(2, "channels/list"),
            {"wait_response": 2},
        ],
    )
    handlers = await run(script, Recorder(channel_patterns=("discord:acme/*",)))
    assert result(script, 1) == {
        "results": [
            {"id": "discord:acme/general", "accepted": True},
            {"id": None, "accepted": False, "reason": "invalid_descriptor"},
            {"id": "discord:acme/bad", "accepted": False, "reason": "invalid_descriptor"},
            {"id": "discord:acme/general", "accepted": False, "reason": "duplicate_id"},
            {"id": "discord:other/x", "accepted": False, "reason": "capability_denied"},
            {"id": "discord:acme/labelled", "accepted": False, "reason": "invalid_descriptor"},
            {"id": "discord:acme/out", "accepted": True},
        ]
    }
    assert result(script, 2) == {"channels": [descriptors[0], descriptors[6]]}
    # Told of the registration, then of its lapse when the transport closed.
    assert isinstance(handlers, Recorder) and handlers.changes == [[descriptors[0], descriptors[6]], []]


async def test_channels_register_blocks_until_answered_while_ids_collide(tmp_path: Path) -> None:
    # Right after the receipt the server registers with id 4, which is also the id of our
    # tools/list (after the era probe, initialize and featureSets/update), and reads nothing but its answer before it answers us.
    script = Script(
        tmp_path,
        [
            *handshake(),
            call(4, "channels/register", {"channels": [channel("c")]}),
            {"wait_response": 4, "expect_result": {"results": [{"id": "c", "accepted": True}]}},
            {"reply": {"tools": [{"name": "t", "inputSchema": {}}]}, "id": 4},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect(handlers=Recorder(), grant_policy=ALL) as conn:
            tools = await conn.mcp.list_tools()
            await script.finished(conn)
            assert [d["id"] for d in conn.inbound.channel_registry.descriptors()] == ["c"]
    assert [t.name for t in tools] == ["t"]
    ours = [m for m in script.messages() if m.get("method") == "tools/list"]
    assert ours[0]["id"] == 4


async def test_channels_changed_notification_filtered_with_diagnostic(tmp_path: Path) -> None:
    changed = {
        "added": [channel("ok:b"), channel("no:c"), {"id": 5}],
        "removed": ["ok:a", "ghost"],
        "updated": [channel("ok:never")],
    }
    script = Script(
        tmp_path,
        [
            *handshake(),
            call(1, "channels/register", {"channels": [channel("ok:a")]}),
            {"wait_response": 1},
            notify("channels/changed", changed),
            call(2, "channels/list", {}),
            {"wait_response": 2},
        ],
    )
    with capture_logs() as logs:
        await run(script, Recorder(channel_patterns=("ok:*",)))
    assert result(script, 2) == {"channels": [channel("ok:b")]}
    refused = [e for e in logs if e["event"] == "channels/changed notification: item refused"]
    assert sorted((str(e["id"]), e["reason"]) for e in refused) == [
        ("ghost", "unknown_channel"),
        ("no:c", "capability_denied"),
        ("null", "invalid_descriptor"),
        ("ok:never", "unknown_channel"),
    ]
    assert all(e["log_level"] == "warning" for e in refused)


async def test_channels_changed_request_gets_itemized_results(tmp_path: Path) -> None:
    changed = {"removed": ["a", "ghost"], "added": [channel("b")], "updated": [channel("b", "bidirectional")]}
    script = Script(
        tmp_path,
        [
            *handshake(),
            call(1, "channels/register", {"channels": [channel("a")]}),
            {"wait_response": 1},
            call(2, "channels/changed", changed),
            {"wait_response": 2},
            call(3, "channels/changed", {"removed": "a"}),
            {"wait_response": 3, "expect_error_code": -32602},
            call(4, "channels/list"),
            {"wait_response": 4},
        ],
    )
    await run(script)
    assert result(script, 2) == {
        "results": [  # removed, then added, then updated
            {"id": "a", "accepted": True},
            {"id": "ghost", "accepted": False, "reason": "unknown_channel"},
            {"id": "b", "accepted": True},
            {"id": "b", "accepted": False, "reason": "duplicate_id"},
        ]
    }
    assert result(script, 4) == {"channels": [channel("b")]}


async def test_channels_list_always_answered(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *handshake(),
            call(None, "channels/list"),
            {"wait_response": None},
            call(1, "channels/list", {}),
            {"wait_response": 1},
        ],
    )
    await run(script)
    assert answers(script)["null"]["result"] == result(script, 1) == {"channels": []}
    script = Script(
        tmp_path,
        [*MCP_HANDSHAKE, call(1, "channels/list"), {"wait_response": 1, "expect_error_code": -32002}],
        name="plain",
    )
    await run(script)  # a plain MCP server: refused, with an answer


async def test_channels_incoming_checked_against_registered_channels(tmp_path: Path) -> None:
    channels = [channel("in:a"), channel("out:b", "outbound"), channel("both:c", "bidirectional")]
    script = Script(
        tmp_path,
        [
            *handshake(),
            call(1, "channels/register", {"channels": channels}),
            {"wait_response": 1},
            call(
                2,
                "channels/incoming",
                {
                    "messages": [
                        message("m1", "in:a"),
                        message("m2", "out:b"),
                        message("m3", "both:c"),
                        message("m4", "elsewhere:d"),
                        message("m5", "registered-by-someone-else"),
                    ]
                },
            ),
            {"wait_response": 2},
        ],
    )
    await run(script)
    assert result(script, 2) == {
        "results": [
            {"messageId": "m1", "accepted": True, "conversationId": "conv-in:a"},
            {"messageId": "m2", "accepted": False, "reason": "not_permitted"},
            {"messageId": "m3", "accepted": True, "conversationId": "conv-both:c"},
            {"messageId": "m4", "accepted": False, "reason": "unknown_channel"},
            {"messageId": "m5", "accepted": False, "reason": "unknown_channel"},
        ]
    }


async def test_channel_registration_keeps_no_authority_after_policy_or_grant_narrows(tmp_path: Path) -> None:
    incoming = {"messages": [message("m", "in:a")]}
    script = Script(
        tmp_path,
        [
            *handshake(),
            call(1, "channels/register", {"channels": [channel("in:a")]}),
            {"wait_response": 1},
            call(2, "channels/incoming", incoming),
            {"wait_response": 2},
            mark("registered"),
            {"wait_for": {"method": "test/narrowed"}},
            call(3, "channels/incoming", incoming),
            {"wait_response": 3},
            mark("narrowed seen"),
            {"expect": {"method": "featureSets/update"}, "skip_notifications": True},
            {"reply": {"accepted": True}},
            call(4, "channels/incoming", incoming),
            {"wait_response": 4},
            call(5, "channels/list"),
            {"wait_response": 5, "expect_error_code": -32002},
        ],
    )
    handlers = Recorder()
    with anyio.fail_after(20):
        async with script.connect(handlers=handlers, grant_policy=ALL) as conn:
            await handlers.mark("registered").wait()
            handlers.channel_patterns = ("in:z*",)  # the host narrows its channel patterns
            await conn.mcp.notify("test/narrowed")
            await handlers.mark("narrowed seen").wait()
            handlers.channel_patterns = None
            # channels.register leaves the grant; channels.incoming stays.
            await conn.policy.update(GrantPolicy(grant_all_advertised=True, deny=("channels.register",)))
            await script.finished(conn)
    assert result(script, 2)["results"][0]["accepted"] is True
    for n in (3, 4):
        assert result(script, n) == {
            "results": [{"messageId": "m", "accepted": False, "reason": "capability_denied"}]
        }


async def test_channels_incoming_per_message_results(tmp_path: Path) -> None:
    messages = [
        message("m1", "in:a", tags=["chat:reply", "chat:ambient"]),
        message("muted", "in:a"),
        message("quiet", "in:a"),
        {"channelId": "in:a", "content": []},
        message("m5", "in:a", content="x"),
    ]
    script = Script(
        tmp_path,
        [
            *handshake(),
            call(1, "channels/register", {"channels": [channel("in:a")]}),
            {"wait_response": 1},
            call(2, "channels/incoming", {"messages": messages}),
            {"wait_response": 2},
            call(3, "channels/incoming", {"messages": "m1"}),
            {"wait_response": 3, "expect_error_code": -32602},
        ],
    )
    handlers = await run(script)
    assert result(script, 2) == {
        "results": [
            {"messageId": "m1", "accepted": True, "conversationId": "conv-in:a"},
            {"messageId": "muted", "accepted": False, "reason": "muted"},
            {"messageId": "quiet", "accepted": True},
            {"messageId": None, "accepted": False, "reason": "invalid_message"},
            {"messageId": "m5", "accepted": False, "reason": "invalid_message"},
        ]
    }
    assert isinstance(handlers, Recorder)
    assert handlers.messages[0]["tags"] == ["chat:reply", "chat:addressed"]


async def test_channels_incoming_as_a_notification_is_processed_with_a_diagnostic(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *handshake(),
            call(1, "channels/register", {"channels": [channel("in:a")]}),
            {"wait_response": 1},
            notify("channels/incoming", {"messages": [message("m1", "in:a"), message("m2", "ghost")]}),
        ],
    )
    handlers = Recorder()
    with capture_logs() as logs, anyio.fail_after(20):
        async with script.connect(handlers=handlers, grant_policy=ALL) as conn:
            await script.finished(conn)
            await handlers.got_message.wait()
            await anyio.wait_all_tasks_blocked()
    assert [m["messageId"] for m in handlers.messages] == ["m1"]
    events = [e["event"] for e in logs]
    assert "channels/incoming sent as a notification; processed, no reply possible" in events
    assert "channels/incoming notification: message refused" in events
    assert list(answers(script)) == ["1"]  # nothing answers a notification


async def test_channels_incoming_notification_without_the_grant_is_dropped_with_a_diagnostic(
    tmp_path: Path,
) -> None:
    script = Script(
        tmp_path, [*handshake(), notify("channels/incoming", {"messages": [message("m1", "in:a")]})]
    )
    handlers = Recorder()
    with capture_logs() as logs:
        await run(
            script, handlers, grant_policy=GrantPolicy(grant_all_advertised=True, deny=("channels.incoming",))
        )
    assert handlers.messages == []
    refused = [e for e in logs if e["event"] == "channels/incoming notification refused"]
    assert refused and refused[0]["code"] == -32002


# --- state/update, state/get (no spec basis; docs/protocol.md, "State") ----------------------


async def test_state_update_then_get_round_trip(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *handshake(),
            call(1, "state/get", {"featureSet": "demo"}),
            {"wait_response": 1},
            call(
                2,
                "state/update",
                {"featureSet": "demo", "checkpoint": "c1", "parent": None, "data": {"n": 1}},
            ),
            {"wait_response": 2},
            call(3, "state/get", {"featureSet": "demo"}),
            {"wait_response": 3},
            call(4, "state/update", {"featureSet": "chat", "checkpoint": "k1", "state": [1, 2]}),
            {"wait_response": 4},
            call(5, "state/get", {"featureSet": "chat"}),
            {"wait_response": 5},
            call(6, "state/update", {"featureSet": "demo", "checkpoint": "c2", "parent": "c1"}),
            {"wait_response": 6},
            call(7, "state/get", {"featureSet": "demo"}),
            {"wait_response": 7},
            call(
                8,
                "state/update",
                {
                    "featureSet": "demo",
                    "checkpoint": "c3",
                    "parent": "c2",
                    "patch": [{"op": "add", "path": "/m", "value": 2}],
                },
            ),
            {"wait_response": 8},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect(handlers=Recorder(), grant_policy=ALL, feature_set_policy=OFF) as conn:
            await script.finished(conn)
            held = conn.hosted.state_store.current("demo")
    assert result(script, 1) == {"checkpoint": None, "data": None}
    assert result(script, 2) == {"accepted": True}
    assert result(script, 3) == {"checkpoint": "c1", "data": {"n": 1}}
    assert result(script, 5) == {"checkpoint": "k1", "data": [1, 2], "state": [1, 2]}  # the alias echoed
    assert result(script, 7) == {"checkpoint": "c2", "data": None}  # an opaque reference
    # The parent c2 is an opaque reference: the patch cannot apply, and a refused update
    # leaves the held state as it was.
    assert result(script, 8) == {"accepted": False, "reason": "not_applied"}
    assert held is not None and held.checkpoint == "c2" and not held.has_data


async def test_state_methods_admitted_by_declared_and_enabled_feature_sets(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *handshake(),
            call(1, "state/get", {"featureSet": "nope"}),
            {"wait_response": 1, "expect_error_code": -32003},
            call(2, "state/get", {"featureSet": "off"}),
            {"wait_response": 2, "expect_error_code": -32001},
            call(3, "state/get", {}),
            {"wait_response": 3, "expect_error_code": -32602},
            call(4, "state/update", {"featureSet": "demo", "data": 1}),
            {"wait_response": 4, "expect_error_code": -32602},
            call(5, "state/update", {"featureSet": "demo", "checkpoint": "c", "data": 1, "patch": []}),
            {"wait_response": 5, "expect_error_code": -32602},
            call(6, "state/update", ["demo"]),
            {"wait_response": 6, "expect_error_code": -32602},
        ],
    )
    handlers = await run(script)
    assert error(script, 1)["data"] == {"featureSet": "nope"}
    assert error(script, 2)["data"] == {"featureSet": "off"}
    assert isinstance(handlers, Recorder) and len(handlers.refused) == 6
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            call(1, "state/get", {"featureSet": "demo"}),
            {"wait_response": 1, "expect_error_code": -32003},
        ],
        name="plain",
    )
    await run(script)


# --- pure parts --------------------------------------------------------------------------------


def test_registry_replaces_a_registered_id_and_globs_are_case_sensitive() -> None:
    registry = ChannelRegistry()
    assert [r.accepted for r in registry.change(added=[channel("Ok:a")], patterns=("ok:*",))] == [False]
    registry.change(added=[channel("ok:a")], patterns=("ok:*",))
    registry.change(added=[channel("ok:a", "outbound")])
    assert registry.get("ok:a") == channel("ok:a", "outbound") and len(registry) == 1


def test_state_store_applies_a_patch_against_a_held_parent() -> None:
    store = FeatureSetStateStore()
    assert store.apply("fs", {"data": 1}) is not None  # no checkpoint: not applied
    assert store.apply("fs", {"checkpoint": "a", "data": {"x": 1}}) is None
    assert (
        store.apply(
            "fs", {"checkpoint": "b", "parent": "a", "patch": [{"op": "replace", "path": "/x", "value": 2}]}
        )
        is None
    )
    current = store.current("fs")
    assert current is not None and current.data == {"x": 2} and current.parent == "a"
    assert store.apply("fs", {"checkpoint": "c", "parent": "zz", "patch": []}) is not None


def test_refused_state_update_leaves_the_held_state() -> None:
    store = FeatureSetStateStore()
    store.apply("fs", {"checkpoint": "c3", "data": {"a": 1}})
    bad = {"checkpoint": "c5", "parent": "c3", "patch": [{"op": "replace", "path": "/zz/b", "value": 1}]}
    assert store.apply("fs", bad, keep_reference_on_problem=False) is not None
    current = store.current("fs")
    assert current is not None and (current.checkpoint, current.data) == ("c3", {"a": 1})

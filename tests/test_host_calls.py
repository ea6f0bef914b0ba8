"""Host -> server MCPL calls at the wire level (MCPL §5.4, §8, §10, §14.3; docs/protocol.md,
"Context injections", "Inference lifecycle", "Channels", "State").

Each test drives scripted MCPL servers over real pipes and asserts on what the host wrote.
Host request ids are predictable: ``initialize`` is 1, the initial ``featureSets/update`` 2,
so the first call a test makes is 3.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from mcpl_host import GrantPolicy, RemoteError, ServerConnection
from mcpl_host.jsonrpc.errors import LocalProtocolError
from mcpl_host.services.channel_calls import NotGranted
from mcpl_host.services.turns import OutgoingStream, before_inference_fanout, inference_lifecycle

from .wire import MCP_HANDSHAKE, SERVER_INFO, Script, mark, mcpl_handshake, mcpl_result

pytestmark = pytest.mark.anyio

OBSERVE = "contextHooks.beforeInference.observe"
INJECT_SYSTEM = "contextHooks.beforeInference.inject.system"
INJECT_BEFORE = "contextHooks.beforeInference.inject.beforeUser"
INJECT_AFTER = "contextHooks.beforeInference.inject.afterUser"
INJECT_ALL = (INJECT_SYSTEM, INJECT_BEFORE, INJECT_AFTER)
#: The id of the first host call after the handshake: 1 is initialize (a grant of MCPL
#: paths says MCPL: no era probe, docs/protocol.md S3b), 2 the initial featureSets/update.
FIRST_CALL_ID = 3

MANIFEST = {
    "version": "0.5",
    "contextHooks": {"beforeInference": True},
    "inferenceLifecycle": True,
    "modelInfo": True,
    "channels": True,
    "featureSets": {
        "notes": {"description": "notes", "uses": ["tools"], "rollback": True},
        "plain": {"description": "plain", "uses": ["tools"]},
    },
}
MODEL = {"id": "model-1", "vendor": "acme", "contextWindow": 1000, "capabilities": ["tools"]}
TURN = {"inference_id": "inf-1", "conversation_id": "conv-1", "turn_index": 2}
HOOK_ARGS = {**TURN, "user_message": "secret question", "model": MODEL}
LIFECYCLE_KEYS = {"inferenceId", "conversationId", "turnIndex", "phase", "model", "usage"}


def handshake() -> list[dict[str, Any]]:
    """An MCPL server's handshake with ``MANIFEST``, up to and including the receipt."""
    return mcpl_handshake(mcpl_result(MANIFEST, SERVER_INFO))


def hook_answer(injections: list[Any], feature_set: str = "claimed-by-server") -> list[dict[str, Any]]:
    return [
        {"expect": {"method": "context/beforeInference"}},
        {"reply": {"featureSet": feature_set, "contextInjections": injections}},
    ]


def sent(script: Script, method: str) -> list[dict[str, Any]]:
    """What the host wrote with this method, in order."""
    return [m for m in script.messages() if m.get("method") == method]


@asynccontextmanager
async def _nested(
    pairs: Sequence[tuple[Script, tuple[str, ...]]], conns: list[ServerConnection]
) -> AsyncIterator[list[ServerConnection]]:
    # Nested ``async with`` rather than an AsyncExitStack: a failing test then fails instead
    # of looping in AsyncExitStack._fix_exception_context on a cyclic exception context.
    if len(conns) == len(pairs):
        yield conns
        return
    script, grant = pairs[len(conns)]
    async with script.connect(name=script.path.stem, grant_policy=GrantPolicy(grant=grant)) as conn:
        async with _nested(pairs, [*conns, conn]) as every:
            yield every


@asynccontextmanager
async def connected(*pairs: tuple[Script, tuple[str, ...]]) -> AsyncIterator[list[ServerConnection]]:
    """Open one connection per ``(script, granted paths)``; wait for every script on exit."""
    async with _nested(pairs, []) as conns:
        yield conns
        for (script, _grant), conn in zip(pairs, conns):
            await script.finished(conn)


def events(logs: Sequence[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [entry for entry in logs if entry["event"] == name]


# --- context/beforeInference ---------------------------------------------------------------


async def test_only_granted_servers_receive_before_inference(tmp_path: Path) -> None:
    observer = Script(tmp_path, [*handshake(), *hook_answer([])], name="observer")
    injector = Script(tmp_path, [*handshake(), *hook_answer([])], name="injector")
    ungranted = Script(tmp_path, handshake(), name="ungranted")
    plain = Script(tmp_path, MCP_HANDSHAKE, name="plain")
    with anyio.fail_after(30):
        async with connected(
            (observer, (OBSERVE,)),
            (injector, (INJECT_BEFORE,)),
            (ungranted, ("inferenceLifecycle", "modelInfo")),
            (plain, (OBSERVE,)),
        ) as conns:
            assert [c.hooks.eligible for c in conns] == [True, True, False, False]
            assert await conns[2].hooks.before_inference(**HOOK_ARGS) is None
            result = await before_inference_fanout(conns, **HOOK_ARGS)
    assert [r.server for r in result.results] == ["observer", "injector"]
    assert [r.outcome for r in result.results] == ["ok", "ok"]
    (seen,), (blind,) = sent(observer, "context/beforeInference"), sent(injector, "context/beforeInference")
    assert seen["params"]["userMessage"] == "secret question"
    assert blind["params"]["userMessage"] is None  # MCPL §10.1: null without observe, still called
    for params in (seen["params"], blind["params"]):
        assert params["inferenceId"] == "inf-1" and params["conversationId"] == "conv-1"
        assert params["turnIndex"] == 2 and params["model"] == MODEL  # MCPL §10.1
        assert "featureSet" not in params  # MCPL §6.5
    assert sent(ungranted, "context/beforeInference") == sent(plain, "context/beforeInference") == []


async def test_mixed_injection_array_keeps_only_granted_positions(tmp_path: Path) -> None:
    injections = [
        {"namespace": "memory", "position": "system", "content": "take over"},
        {
            "namespace": "system",
            "position": "beforeUser",
            "content": [{"type": "text", "text": "b"}],
            "metadata": {"k": 1},
        },
        {"namespace": "memory", "position": "afterUser", "content": "a"},
        {"namespace": "memory", "position": "system", "content": [{"type": "text", "text": "again"}]},
    ]
    script = Script(tmp_path, [*handshake(), *hook_answer(injections, feature_set="everything")])
    with capture_logs() as logs, anyio.fail_after(20):
        async with connected((script, (INJECT_BEFORE, INJECT_AFTER))) as (conn,):
            result = await conn.hooks.before_inference(**HOOK_ARGS)
    assert result is not None and result.outcome == "ok"
    # The claimed featureSet and a namespace of "system" authorize nothing (MCPL §5.4).
    assert [(i.position, i.index, i.namespace) for i in result.injections] == [
        ("beforeUser", 1, "system"),
        ("afterUser", 2, "memory"),
    ]
    assert result.injections[0].metadata == {"k": 1}
    assert [(d.index, d.reason) for d in result.dropped] == [(0, "not_granted"), (3, "not_granted")]
    dropped = events(logs, "context injection dropped")
    assert [(e["index"], e["reason"]) for e in dropped] == [(0, "not_granted"), (3, "not_granted")]


async def test_injections_are_authorized_by_the_grant_at_receipt(tmp_path: Path) -> None:
    answer = {
        "contextInjections": [
            {"namespace": "m", "position": "system", "content": "s"},
            {"namespace": "m", "position": "beforeUser", "content": "b"},
        ]
    }
    script = Script(
        tmp_path,
        [
            *handshake(),
            {"expect": {"method": "context/beforeInference"}},
            mark("hook"),
            {"expect": {"method": "featureSets/update"}},  # the revocation, sent mid-hook
            {"reply": {"accepted": True}},
            {"reply": answer, "id": FIRST_CALL_ID},  # the hook's answer arrives after it
        ],
    )
    outcome: list[Any] = []
    with anyio.fail_after(20):
        async with connected((script, (OBSERVE, *INJECT_ALL))) as (conn,):

            async def hook() -> None:
                outcome.append(await conn.hooks.before_inference(**HOOK_ARGS))

            async with anyio.create_task_group() as tg:
                tg.start_soon(hook)
                await conn.hosted.handlers.mark("hook").wait()
                await conn.policy.update(GrantPolicy(grant=(OBSERVE, INJECT_BEFORE)))
    (result,) = outcome
    assert [i.position for i in result.injections] == ["beforeUser"]  # granted at send time too
    assert [(d.position, d.reason) for d in result.dropped] == [("system", "not_granted")]


async def test_invalid_injections_dropped_and_string_content_is_one_text_block(
    tmp_path: Path,
) -> None:
    injections = [
        "not an object",
        {"position": "afterUser", "content": "no namespace"},
        {"namespace": "n", "content": "no position"},
        {"namespace": "n", "position": "middle", "content": "unknown position"},
        {"namespace": "n", "position": "afterUser"},
        {"namespace": "n", "position": "afterUser", "content": 7},
        {"namespace": "n", "position": "afterUser", "content": [{"type": "text"}]},
        {"namespace": "n", "position": "afterUser", "content": [{"text": "no type"}]},
        {"namespace": "n", "position": "afterUser", "content": "kept", "metadata": "not an object"},
    ]
    script = Script(tmp_path, [*handshake(), *hook_answer(injections)])
    with capture_logs() as logs, anyio.fail_after(20):
        async with connected((script, INJECT_ALL)) as (conn,):
            result = await conn.hooks.before_inference(**HOOK_ARGS)
    assert result is not None and result.outcome == "ok"
    (kept,) = result.injections
    assert kept.content == ({"type": "text", "text": "kept"},) and kept.metadata is None  # MCPL §10.3
    assert [(d.index, d.reason) for d in result.dropped] == [(i, "invalid") for i in range(8)]
    assert len(events(logs, "context injection dropped")) == 8


async def test_timeout_and_error_fail_open_with_a_log_line(tmp_path: Path) -> None:
    late = {"jsonrpc": "2.0", "id": FIRST_CALL_ID, "result": {"contextInjections": []}}
    script = Script(
        tmp_path,
        [
            *handshake(),
            {"expect": {"method": "context/beforeInference", "id": FIRST_CALL_ID}},
            {
                "expect": {
                    "method": "notifications/cancelled",
                    "params": {"requestId": FIRST_CALL_ID, "reason": "timeout"},
                }
            },
            {"send": late},  # a late answer: an orphan, ignored
            {"expect": {"method": "context/beforeInference", "id": FIRST_CALL_ID + 1}},
            {"reply_error": {"code": -32603, "message": "hook crashed"}},
            {"expect": {"method": "ping"}},
            {"reply": {}},
        ],
    )
    with capture_logs() as logs, anyio.fail_after(20):
        async with connected((script, (OBSERVE, INJECT_BEFORE))) as (conn,):
            timed_out = await conn.hooks.before_inference(**HOOK_ARGS, timeout=0.2)
            failed = await before_inference_fanout([conn], **HOOK_ARGS)
            await conn.mcp.ping()  # the connection is unharmed
    assert timed_out is not None and timed_out.outcome == "timeout" and timed_out.injections == ()
    assert [r.outcome for r in failed.results] == ["failure"]
    assert failed.injections("beforeUser") == ()
    assert [
        e["outcome"] for e in events(logs, "context/beforeInference failed open; the turn goes on without it")
    ] == ["timeout", "failure"]


async def test_injections_grouped_by_position_in_connection_then_response_order(tmp_path: Path) -> None:
    def inj(position: str, text: str) -> dict[str, Any]:
        return {"namespace": "n", "position": position, "content": text}

    first = Script(
        tmp_path,
        [*handshake(), *hook_answer([inj("afterUser", "a1"), inj("system", "a2"), inj("afterUser", "a3")])],
        name="first",
    )
    second = Script(
        tmp_path, [*handshake(), *hook_answer([inj("system", "b1"), inj("afterUser", "b2")])], name="second"
    )
    with anyio.fail_after(30):
        async with connected((first, INJECT_ALL), (second, INJECT_ALL)) as conns:
            result = await before_inference_fanout(conns, **HOOK_ARGS)

    def texts(position: str) -> list[str]:
        return [i.content[0]["text"] for i in result.injections(position)]  # type: ignore[arg-type]

    assert set(result.by_position) == {"system", "beforeUser", "afterUser"}
    assert texts("system") == ["a2", "b1"]
    assert texts("afterUser") == ["a1", "a3", "b2"]
    assert texts("beforeUser") == []


# --- inference/lifecycle -------------------------------------------------------------------


def lifecycle_script(tmp_path: Path, name: str, phases: int = 2) -> Script:
    steps = [{"expect": {"method": "inference/lifecycle"}} for _ in range(phases)]
    return Script(tmp_path, [*handshake(), *steps], name=name)


def phases(script: Script) -> list[dict[str, Any]]:
    return [m["params"] for m in sent(script, "inference/lifecycle")]


async def test_lifecycle_on_success(tmp_path: Path) -> None:
    with_model = lifecycle_script(tmp_path, "with_model")
    without_model = lifecycle_script(tmp_path, "without_model")
    ungranted = Script(tmp_path, handshake(), name="ungranted")
    with anyio.fail_after(30):
        async with connected(
            (with_model, ("inferenceLifecycle", "modelInfo")),
            (without_model, ("inferenceLifecycle",)),
            (ungranted, (OBSERVE, "modelInfo")),
        ) as conns:
            async with inference_lifecycle(conns, **TURN, model=MODEL) as turn:
                assert turn.recipients == ("with_model", "without_model")
                turn.set_usage(10, 5)
    full, bare = phases(with_model), phases(without_model)
    assert [p["phase"] for p in full] == [p["phase"] for p in bare] == ["started", "completed"]
    assert all(p["model"] == MODEL for p in full)  # MCPL §10.5: model only with modelInfo
    assert all("model" not in p for p in bare)
    assert "usage" not in full[0] and full[1]["usage"] == {"inputTokens": 10, "outputTokens": 5}
    for p in full + bare:  # MCPL §10.5: no content fields exist
        assert set(p) <= LIFECYCLE_KEYS
        assert (p["inferenceId"], p["conversationId"], p["turnIndex"]) == ("inf-1", "conv-1", 2)
    assert phases(ungranted) == []  # MCPL §10.5: only to the granted
    for script in (with_model, without_model, ungranted):  # MCPL §10.5: no afterInference
        assert sent(script, "context/afterInference") == []
        assert all(m.get("id") is None for m in sent(script, "inference/lifecycle"))  # notifications


async def test_exactly_one_terminal_on_exception_cancellation_and_abort(tmp_path: Path) -> None:
    script = lifecycle_script(tmp_path, "server", phases=6)
    with anyio.fail_after(20):
        async with connected((script, ("inferenceLifecycle",))) as (conn,):
            with pytest.raises(RuntimeError):
                async with inference_lifecycle([conn], **{**TURN, "inference_id": "failing"}):
                    raise RuntimeError("model crashed")
            with anyio.CancelScope() as scope:
                async with inference_lifecycle([conn], **{**TURN, "inference_id": "cancelled"}) as turn:
                    scope.cancel()
                    await anyio.sleep_forever()
            assert scope.cancelled_caught
            async with inference_lifecycle([conn], **{**TURN, "inference_id": "user-abort"}) as turn:
                turn.set_usage(1, 1)
                turn.abort()
            with pytest.raises(LocalProtocolError):
                async with turn:  # single use: no second start, no second terminal
                    pass
    assert [(p["inferenceId"], p["phase"]) for p in phases(script)] == [
        ("failing", "started"),
        ("failing", "failed"),
        ("cancelled", "started"),
        ("cancelled", "aborted"),
        ("user-abort", "started"),
        ("user-abort", "aborted"),
    ]
    assert all("usage" not in p for p in phases(script))  # usage only with completed


async def test_no_terminal_after_the_grant_lost_inference_lifecycle(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *handshake(),
            {"expect": {"method": "inference/lifecycle"}},
            {"expect": {"method": "featureSets/update"}},
            {"reply": {"accepted": True}},
        ],
    )
    with anyio.fail_after(20):
        async with connected((script, ("inferenceLifecycle", OBSERVE))) as (conn,):
            async with inference_lifecycle([conn], **TURN):
                await conn.policy.update(GrantPolicy(grant=(OBSERVE,)))
    # docs/protocol.md, "Inference lifecycle": the grant wins over pairing; the terminal is never
    # sent without its gate.
    assert [p["phase"] for p in phases(script)] == ["started"]


# --- channels/outgoing/* ------------------------------------------------------------------


async def test_outgoing_chunks_go_to_the_owner_with_one_index_per_inference(
    tmp_path: Path,
) -> None:
    chunk, complete = {"method": "channels/outgoing/chunk"}, {"method": "channels/outgoing/complete"}
    owner = Script(
        tmp_path, [*handshake(), *[{"expect": chunk}] * 3, *[{"expect": complete}] * 2], name="owner"
    )
    other = Script(tmp_path, [*handshake(), {"expect": chunk}, {"expect": complete}], name="other")
    unstreamed = Script(tmp_path, handshake(), name="unstreamed")
    with anyio.fail_after(30):
        async with connected(
            (owner, ("channels.streaming",)),
            (other, ("channels.streaming",)),
            (unstreamed, ("channels.publish",)),
        ) as (a, b, c):
            routes = {a: {"a:1", "a:2"}, b: lambda: ["b:1"], c: {"c:1"}}
            async with OutgoingStream(routes, inference_id="inf-1", conversation_id="conv-1") as out:
                assert await out.chunk("a:1", "Hel")
                assert await out.chunk("b:1", "X")
                assert not await out.chunk("c:1", "withheld: not granted channels.streaming")
                assert await out.chunk("a:2", "Yo")
                assert not await out.chunk("nobody:1", "withheld: no owner")
                assert await out.chunk("a:1", "lo")
    chunks = [m["params"] for m in sent(owner, "channels/outgoing/chunk")]
    assert [(p["channelId"], p["index"], p["delta"]) for p in chunks] == [
        ("a:1", 0, "Hel"),
        ("a:2", 2, "Yo"),
        ("a:1", 3, "lo"),
    ]
    assert [m["params"]["index"] for m in sent(other, "channels/outgoing/chunk")] == [1]
    assert sent(unstreamed, "channels/outgoing/chunk") == sent(unstreamed, "channels/outgoing/complete") == []
    completes = [m["params"] for m in sent(owner, "channels/outgoing/complete")]
    assert [(p["channelId"], p["content"]) for p in completes] == [
        ("a:1", [{"type": "text", "text": "Hello"}]),
        ("a:2", [{"type": "text", "text": "Yo"}]),
    ]
    assert all(p["inferenceId"] == "inf-1" and p["conversationId"] == "conv-1" for p in chunks + completes)


async def test_outgoing_complete_exactly_once_on_every_exit_path(tmp_path: Path) -> None:
    steps = [{"expect": {"method": m}} for m in ["channels/outgoing/chunk", "channels/outgoing/complete"] * 3]
    script = Script(tmp_path, [*handshake(), *steps])
    with anyio.fail_after(20):
        async with connected((script, ("channels.streaming",))) as (conn,):
            routes = [(conn, {"ch"})]
            with pytest.raises(RuntimeError):
                async with OutgoingStream(routes, inference_id="error", conversation_id="c") as out:
                    await out.chunk("ch", "partial")
                    raise RuntimeError("model failed")
            with anyio.CancelScope() as scope:
                async with OutgoingStream(routes, inference_id="cancel", conversation_id="c") as out:
                    await out.chunk("ch", "partial")
                    scope.cancel()
                    await anyio.sleep_forever()
            async with OutgoingStream(routes, inference_id="early", conversation_id="c") as out:
                await out.chunk("ch", "draft")
                await out.complete("ch", "moderated final")
                with pytest.raises(LocalProtocolError):
                    await out.chunk("ch", "too late")
    completes = [m["params"] for m in sent(script, "channels/outgoing/complete")]
    assert [(p["inferenceId"], p["content"][0]["text"]) for p in completes] == [
        ("error", "partial"),
        ("cancel", "partial"),
        ("early", "moderated final"),
    ]


# --- channels/open, close, publish -------------------------------------------------------


async def test_publish_as_request_and_both_open_forms(tmp_path: Path) -> None:
    descriptor = {"id": "discord:#general", "type": "discord", "direction": "bidirectional"}
    script = Script(
        tmp_path,
        [
            *handshake(),
            {
                "expect": {
                    "method": "channels/open",
                    "params": {"type": "discord", "address": {"channel": "#general"}, "metadata": {"m": 1}},
                }
            },
            {"reply": {"channel": descriptor}},
            {
                "expect": {
                    "method": "channels/open",
                    "params": {"channelId": "discord:#general", "history": 5},
                }
            },
            {"reply": {}},
            {"expect": {"method": "channels/publish"}},
            {"reply": {"delivered": True, "messageId": "msg-1"}},
            {"expect": {"method": "channels/close", "params": {"channelId": "discord:#general"}}},
            {"reply": {"closed": True}},
        ],
    )
    with anyio.fail_after(20):
        async with connected((script, ("channels.lifecycle", "channels.publish"))) as (conn,):
            for wrong in (
                {},
                {"type": "discord"},
                {"history": 5},
                {"type": "discord", "address": {}, "channel_id": "x"},
            ):
                with pytest.raises(LocalProtocolError):
                    await conn.channels.open(**wrong)
            opened = await conn.channels.open(
                type="discord", address={"channel": "#general"}, metadata={"m": 1}
            )
            assert opened.channel == descriptor
            assert (await conn.channels.open(channel_id="discord:#general", history=5)).channel is None
            conn.channels.publish_mode = "request"
            published = await conn.channels.publish("conv-1", "discord:#general", "hello")
            assert await conn.channels.close("discord:#general") is True
    assert (published.mode, published.delivered, published.message_id) == ("request", True, "msg-1")
    (publish,) = sent(script, "channels/publish")
    assert publish["id"] == FIRST_CALL_ID + 2
    assert publish["params"] == {
        "conversationId": "conv-1",
        "channelId": "discord:#general",
        "stream": False,
        "content": [{"type": "text", "text": "hello"}],
    }


async def test_shape6_publish_accepted_only_as_notification_by_one_only_as_request_by_another(
    tmp_path: Path,
) -> None:
    publish = {"expect": {"method": "channels/publish"}}
    notification_only = Script(
        tmp_path,
        [
            *handshake(),
            publish,
            {"reply_error": {"code": -32601, "message": "Method not found"}},
            publish,
            publish,
        ],
        name="notification_only",
    )
    request_only = Script(
        tmp_path,
        [
            *handshake(),
            publish,
            {"reply": {"delivered": True, "messageId": "m1"}},
            publish,
            {"reply": {"delivered": True, "messageId": "m2"}},
        ],
        name="request_only",
    )
    with anyio.fail_after(30):
        async with connected(
            (notification_only, ("channels.publish",)), (request_only, ("channels.publish",))
        ) as (n, r):
            assert n.channels.publish_mode == r.channels.publish_mode == "auto"  # the default
            first = [await conn.channels.publish("conv", "ch", "one") for conn in (n, r)]
            second = [await conn.channels.publish("conv", "ch", "two", stream=True) for conn in (n, r)]
            assert n.channels.publishes_as_notification and not r.channels.publishes_as_notification
    assert [p.mode for p in first + second] == ["notification", "request", "notification", "request"]
    assert [p.message_id for p in first + second] == [None, "m1", None, "m2"]
    tried, resent, direct = sent(notification_only, "channels/publish")
    assert "id" in tried and "id" not in resent and "id" not in direct
    assert tried["params"] == resent["params"]  # the same message, re-sent as a notification
    assert direct["params"]["stream"] is True
    assert all("id" in m for m in sent(request_only, "channels/publish"))


async def test_channel_calls_not_granted_send_nothing(tmp_path: Path) -> None:
    script = Script(tmp_path, [*handshake(), {"expect": {"method": "channels/publish"}}])
    with anyio.fail_after(20):
        async with connected((script, ("channels.publish",))) as (conn,):
            with pytest.raises(NotGranted) as refused:
                await conn.channels.open(type="discord", address={})
            assert refused.value.capability == "channels.lifecycle"
            with pytest.raises(NotGranted):
                await conn.channels.close("ch")
            conn.channels.publish_mode = "notification"
            assert (
                await conn.channels.publish("conv", "ch", [{"type": "text", "text": "x"}])
            ).mode == "notification"
            with pytest.raises(ValueError):
                conn.channels.publish_mode = "sometimes"  # type: ignore[assignment]
    assert sent(script, "channels/open") == sent(script, "channels/close") == []
    assert "id" not in sent(script, "channels/publish")[0]


# --- state ---------------------------------------------------------------------------------


def tool_call(state: dict[str, Any] | None) -> list[dict[str, Any]]:
    result: dict[str, Any] = {"content": [{"type": "text", "text": "ok"}]}
    if state is not None:
        result["state"] = state
    return [{"expect": {"method": "tools/call"}}, {"reply": result}]


def tool_params(script: Script) -> list[dict[str, Any]]:
    return [m["params"] for m in sent(script, "tools/call")]


async def test_tool_calls_carry_state_and_apply_data_patch_or_reference(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *handshake(),
            *tool_call({"checkpoint": "c1", "parent": None, "data": {"notes": []}}),
            *tool_call(
                {
                    "checkpoint": "c2",
                    "parent": "c1",
                    "patch": [{"op": "add", "path": "/notes/-", "value": "a"}],
                }
            ),
            *tool_call({"checkpoint": "c3", "parent": "c2"}),  # opaque: the server manages it
            *tool_call(
                {"checkpoint": "c4", "parent": "unknown", "patch": [{"op": "add", "path": "/x", "value": 1}]}
            ),
            *tool_call(None),
        ],
    )
    with capture_logs() as logs, anyio.fail_after(20):
        async with connected((script, ("tools",))) as (conn,):
            for _ in range(5):
                result = await conn.state.call_tool_with_state("note", {"text": "t"}, feature_set="notes")
                assert result.text == "ok"
            assert conn.hosted.state_store.current("notes").checkpoint == "c4"  # type: ignore[union-attr]
    calls = tool_params(script)
    assert "state" not in calls[0] and "checkpoint" not in calls[0]
    assert calls[1]["state"] == {"notes": []} and "checkpoint" not in calls[1]
    assert calls[2]["state"] == {"notes": ["a"]}  # the patch applied to c1's data
    assert calls[3]["checkpoint"] == "c3" and "state" not in calls[3]
    assert calls[4]["checkpoint"] == "c4"  # a patch that could not be applied: reference only
    assert all(c["name"] == "note" and c["arguments"] == {"text": "t"} for c in calls)
    assert all("featureSet" not in c for c in calls)
    assert len(events(logs, "tool result state not fully applied")) == 1


async def test_rollback_success_refusal_and_32005_keep_the_connection(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *handshake(),
            *tool_call({"checkpoint": "c1", "parent": None, "data": {"notes": []}}),
            *tool_call({"checkpoint": "c2", "parent": "c1", "data": {"notes": ["a"]}}),
            {"expect": {"method": "state/rollback", "params": {"featureSet": "notes", "checkpoint": "c1"}}},
            {"reply": {"checkpoint": "c1", "success": True}},
            *tool_call(
                {
                    "checkpoint": "c3",
                    "parent": "c1",  # a branch: patched against c1 (MCPL §8.3)
                    "patch": [{"op": "add", "path": "/notes/-", "value": "b"}],
                }
            ),
            *tool_call(
                {
                    "checkpoint": "c5",
                    "parent": "c2",  # against c2, not the current c3
                    "patch": [{"op": "add", "path": "/notes/-", "value": "z"}],
                }
            ),
            *tool_call(None),
            {"expect": {"method": "state/rollback"}},
            {"reply": {"checkpoint": "c2", "success": False, "reason": "irreversible"}},
            {"expect": {"method": "state/rollback"}},
            {
                "reply_error": {
                    "code": -32005,
                    "message": "Checkpoint not found",
                    "data": {"checkpoint": "c0"},
                }
            },
            {"expect": {"method": "state/rollback"}},
            {"reply_error": {"code": -32603, "message": "other failure"}},
            {"expect": {"method": "ping"}},
            {"reply": {}},
        ],
    )
    with anyio.fail_after(20):
        async with connected((script, ("tools",))) as (conn,):
            with pytest.raises(LocalProtocolError):
                await conn.state.rollback("plain", "c1")  # no rollback: true
            with pytest.raises(LocalProtocolError):
                await conn.state.rollback("undeclared", "c1")
            for _ in range(2):
                await conn.state.call_tool_with_state("note", feature_set="notes")
            done = await conn.state.rollback("notes", "c1")
            for _ in range(3):
                await conn.state.call_tool_with_state("note", feature_set="notes")
            refused = await conn.state.rollback("notes", "c2")
            pruned = await conn.state.rollback("notes", "c0")
            with pytest.raises(RemoteError):
                await conn.state.rollback("notes", "c3")
            await conn.mcp.ping()
            assert conn.is_open
    assert (done.outcome, done.success, done.checkpoint) == ("rolled_back", True, "c1")
    assert (refused.outcome, refused.success, refused.reason) == ("refused", False, "irreversible")
    assert (pruned.outcome, pruned.checkpoint, pruned.reason) == ("not_found", "c0", "Checkpoint not found")
    calls = tool_params(script)
    assert calls[2]["state"] == {"notes": []}  # after the rollback: c1's data
    assert calls[3]["state"] == {"notes": ["b"]}
    assert calls[4]["state"] == {"notes": ["a", "z"]}  # MCPL §8.3: the patch applies to its parent
    assert len(sent(script, "state/rollback")) == 4  # nothing for "plain" or "undeclared"

"""Routing at the wire level (docs/protocol.md R1-R7, A1-A4, T1-T3, D2-D6)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog
from structlog.testing import capture_logs

from mcpl_host import (
    ConnectionLost,
    GrantPolicy,
    HandlerError,
    RemoteError,
    RequestContext,
    RequestTimeout,
)
from mcpl_host.jsonrpc.envelope import Response
from mcpl_host.logging import configure_logging

from .wire import MCP_HANDSHAKE, MCPL_HANDSHAKE, MCPL_RESULT, Script, TestHandlers, mark, push_event

pytestmark = pytest.mark.anyio


def answers(script: Script) -> dict[Any, dict[str, Any]]:
    """The host's answers to server requests, by id (as JSON text, to keep types apart)."""
    return {json.dumps(m["id"]): m for m in script.messages() if "method" not in m and "id" in m}


async def test_r1_null_id_request_is_dispatched_and_answered_with_null(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"send": {"jsonrpc": "2.0", "id": None, "method": "roots/list"}},
            {"wait_response": None, "expect_error_code": -32601},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect() as conn:
            await script.finished(conn)
    assert answers(script)["null"]["error"]["code"] == -32601


async def test_r2_unknown_method_gets_32601_and_removed_methods_too(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"send": {"jsonrpc": "2.0", "id": "a", "method": "no/such"}},
            {"wait_response": "a", "expect_error_code": -32601},
            {"send": {"jsonrpc": "2.0", "id": "b", "method": "scope/elevate"}},
            {"wait_response": "b", "expect_error_code": -32601},
            {"send": {"jsonrpc": "2.0", "id": "c", "method": "context/afterInference"}},
            {"wait_response": "c", "expect_error_code": -32601},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect() as conn:
            await script.finished(conn)
    assert set(answers(script)) == {'"a"', '"b"', '"c"'}


async def test_r2_d3_privileged_method_refused_before_the_receipt(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCPL_HANDSHAKE[:4],  # featureSets/update received, not yet answered
            {"send": push_event(100)},
            {"wait_response": 100, "expect_error_code": -32002},
            {"reply": {"accepted": True}},
            {"send": push_event(101, "e2")},
            {"wait_response": 101, "expect_result": {"accepted": True}},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect(grant_policy=GrantPolicy(grant=("pushEvents",))) as conn:
            await script.finished(conn)
    refused = answers(script)["100"]["error"]
    assert refused["data"] == {"capability": "pushEvents"}


async def test_r2_d48_not_granted_is_refused_with_32002_and_the_capability(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCPL_HANDSHAKE,
            {"send": push_event(5)},
            {"wait_response": 5, "expect_error_code": -32002},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect(
            grant_policy=GrantPolicy(grant_all_advertised=True, deny=("pushEvents",))
        ) as conn:
            await script.finished(conn)
    assert answers(script)["5"]["error"]["data"] == {"capability": "pushEvents"}


async def test_push_event_from_plain_mcp_server_is_refused_and_answered(tmp_path: Path) -> None:
    script = Script(
        tmp_path, [*MCP_HANDSHAKE, {"send": push_event(9)}, {"wait_response": 9, "expect_error_code": -32002}]
    )
    with anyio.fail_after(20):
        async with script.connect(grant_policy=GrantPolicy(grant_all_advertised=True)) as conn:
            await script.finished(conn)
    assert answers(script)["9"]["error"]["code"] == -32002


class Failing(TestHandlers):
    async def request(self, context: RequestContext, params: Any) -> Any:
        if context.method == "boom":
            raise RuntimeError("secret internals /etc/passwd")
        if context.method == "custom":
            raise HandlerError(-32010, "custom refusal", {"why": "policy"})
        return {"echo": params}


async def test_r3_handler_exception_is_32603_without_its_text(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"send": {"jsonrpc": "2.0", "id": 1, "method": "boom"}},
            {"wait_response": 1, "expect_error_code": -32603},
            {"send": {"jsonrpc": "2.0", "id": 2, "method": "custom"}},
            {"wait_response": 2, "expect_error_code": -32010},
        ],
    )
    with capture_logs() as logs, anyio.fail_after(20):
        async with script.connect(handlers=Failing()) as conn:
            await script.finished(conn)
    error = answers(script)["1"]["error"]
    assert error == {"code": -32603, "message": "Internal error"}
    assert answers(script)["2"]["error"]["data"] == {"why": "policy"}
    assert any(entry["event"] == "handler failed" for entry in logs)


async def test_r3_a_failing_handler_is_logged_without_the_values_the_server_sent(tmp_path: Path) -> None:
    # The console renderer (the command line's, and the library's own when the application
    # has not configured structlog) prints the traceback: never with its frames' locals,
    # which hold the request as the server sent it, unredacted and unescaped (L1, L2).
    token = "ghp_" + "a" * 36
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {
                "send": {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "boom",
                    "params": {"note": token, "ink": "\u202e"},
                }
            },
            {"wait_response": 1, "expect_error_code": -32603},
        ],
    )
    saved = structlog.get_config()
    stream = io.StringIO()
    configure_logging("warning", stream=stream)
    try:
        with anyio.fail_after(20):
            async with script.connect(handlers=Failing()) as conn:
                await script.finished(conn)
    finally:
        structlog.configure(**saved)
    shown = stream.getvalue()
    assert "handler failed" in shown and "RuntimeError" in shown
    assert token not in shown and "\u202e" not in shown


async def test_r4_a_response_is_never_answered(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"send": {"jsonrpc": "2.0", "id": 999, "result": {}}},
            {"send": {"jsonrpc": "2.0", "id": 998, "error": {"code": -1, "message": "x"}}},
            {"send": {"jsonrpc": "2.0", "id": "z", "method": "ping"}},
            {"wait_response": "z"},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect() as conn:
            await script.finished(conn)
    assert set(answers(script)) == {'"z"'}


class Recording(TestHandlers):
    def __init__(self) -> None:
        super().__init__()
        self.orphans: list[Response] = []
        self.orphan_seen = anyio.Event()
        self.notifications: list[tuple[str, Any]] = []

    def on_orphan_response(self, server: str, response: Response) -> None:
        self.orphans.append(response)
        self.orphan_seen.set()

    def on_notification(self, server: str, method: str, params: Any) -> None:
        super().on_notification(server, method, params)
        self.notifications.append((method, params))


async def test_r5_timeout_sends_cancelled_and_the_late_answer_is_an_orphan(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"expect": {"method": "tools/call"}},
            {"wait_for": {"method": "notifications/cancelled"}},
            {"reply": {"content": []}, "id": 3},
        ],
    )
    handlers = Recording()
    with anyio.fail_after(20):
        async with script.connect(handlers=handlers) as conn:
            with pytest.raises(RequestTimeout):
                await conn.mcp.call_tool("slow", timeout=0.3)
            await handlers.orphan_seen.wait()
    assert handlers.orphans[0].id == 3
    cancelled = [m for m in script.messages() if m.get("method") == "notifications/cancelled"]
    assert cancelled == [
        {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": 3, "reason": "timeout"},
        }
    ]


async def test_r5_caller_cancellation_sends_cancelled(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"expect": {"method": "tools/list"}},
            {"wait_for": {"method": "notifications/cancelled"}},
            {"send": {"jsonrpc": "2.0", "id": "done", "method": "ping"}},
            {"wait_response": "done"},
        ],
    )
    handlers = Recording()
    with anyio.fail_after(20):
        async with script.connect(handlers=handlers) as conn:
            with anyio.move_on_after(0.3):
                await conn.mcp.list_tools()
            assert conn.connection.pending_count == 0
    assert {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": 3, "reason": "cancelled"},
    } in script.messages()


async def test_r5_unmatched_error_logged_json_log_lines_with_null_id_silent(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            *[{"send": {"id": None, "level": "info", "msg": f"log {n}"}} for n in range(50)],
            {"send": {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}},
            {"send": {"jsonrpc": "2.0", "id": "sync", "method": "ping"}},
            {"wait_response": "sync"},
        ],
    )
    with capture_logs() as logs, anyio.fail_after(20):
        async with script.connect() as conn:
            await script.finished(conn)
    unmatched = [e for e in logs if e["event"] == "error response naming no request of ours"]
    assert len(unmatched) == 1
    assert "Parse error" in str(unmatched[0]["error"])
    assert not [e for e in logs if "dropped" in e["event"]]


async def test_r6_plain_text_lines_dropped_three_logged_then_one_summary(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            *[{"raw": f"Server log line {n}"} for n in range(10)],
            {"send": [1, 2]},
            {"send": {"jsonrpc": "2.0", "id": "sync", "method": "ping"}},
            {"wait_response": "sync"},
        ],
    )
    with capture_logs() as logs, anyio.fail_after(20):
        async with script.connect() as conn:
            await script.finished(conn)  # the connection still works after them
    dropped = [e for e in logs if e["event"].startswith("dropped a line")]
    assert len(dropped) == 4
    assert "more of these go unlogged" in dropped[-1]["event"]


async def test_a1_a4_invalid_request_answered_once_and_logged_with_method(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"send": {"jsonrpc": "2.0", "method": 1, "params": "bar"}},
            {"wait_response": None, "expect_error_code": -32600},
            {"send": {"jsonrpc": "2.0", "id": {"x": 1}, "method": "tools/odd"}},
            {"send": {"jsonrpc": "2.0", "id": 77, "method": ["x"]}},
            {"wait_response": 77, "expect_error_code": -32600},
            {"send": {"jsonrpc": "2.0", "id": "sync", "method": "ping"}},
            {"wait_response": "sync"},
        ],
    )
    with capture_logs() as logs, anyio.fail_after(20):
        async with script.connect() as conn:
            await script.finished(conn)
    errors = [m for m in script.messages() if "error" in m]
    assert [m["id"] for m in errors] == [None, None, 77]
    assert errors[0]["error"]["message"] == "Invalid Request: the method must be a string, not a number"
    assert errors[1]["error"]["message"].endswith("not an object")
    invalid_logs = [e for e in logs if e["event"] == "invalid request from the server"]
    assert len(invalid_logs) == 3
    assert str(invalid_logs[1]["method"]) == "tools/odd"


async def test_server_ids_colliding_with_ours_settle_nothing(tmp_path: Path) -> None:
    # Our tools/list is id 3 (after the era probe and initialize); the server makes its own
    # request with id 3 in between.
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"expect": {"method": "tools/list", "id": 3}},
            {"send": {"jsonrpc": "2.0", "id": 3, "method": "ping"}},
            {"wait_response": 3, "expect_result": {}},
            {"reply": {"tools": [{"name": "t", "inputSchema": {}}]}, "id": 3},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect() as conn:
            tools = await conn.mcp.list_tools()
    assert [t.name for t in tools] == ["t"]


class Slow(TestHandlers):
    def __init__(self) -> None:
        super().__init__()
        self.release = anyio.Event()
        self.started = anyio.Event()

    async def request(self, context: RequestContext, params: Any) -> Any:
        if context.method == "slow":
            self.started.set()
            await self.release.wait()
            return {"slow": True}
        return {"fast": True}


async def test_inbound_requests_run_concurrently_and_server_requests_interleave(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"send": {"jsonrpc": "2.0", "id": "s", "method": "slow"}},
            {"send": {"jsonrpc": "2.0", "id": "f", "method": "fast"}},
            {"wait_response": "f", "expect_result": {"fast": True}},
            mark("fast answered"),
            {"expect": {"method": "tools/list"}},
            # The server asks something of the host while the host waits for tools/list.
            {"send": {"jsonrpc": "2.0", "id": "q", "method": "fast"}},
            {"wait_response": "q"},
            {"reply": {"tools": []}},
            {"wait_response": "s", "expect_result": {"slow": True}},
        ],
    )
    handlers = Slow()
    with anyio.fail_after(20):
        async with script.connect(handlers=handlers) as conn:
            await handlers.started.wait()
            await handlers.mark("fast answered").wait()
            assert await conn.mcp.list_tools() == []  # the slow handler blocks nothing
            handlers.release.set()
            await script.finished(conn)
    order = [json.dumps(m["id"]) for m in script.messages() if "result" in m]
    assert order.index('"f"') < order.index('"s"')


class Cancellable(TestHandlers):
    """A ``slow`` handler that waits for ``release`` and notes how it ended: ``"cancelled"``
    or ``"finished"`` (``ended`` is set either way)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = anyio.Event()
        self.started = anyio.Event()
        self.ended = anyio.Event()
        self.outcome: list[str] = []

    async def request(self, context: RequestContext, params: Any) -> Any:
        self.started.set()
        try:
            await self.release.wait()
        except anyio.get_cancelled_exc_class():
            self.outcome.append("cancelled")
            raise
        finally:
            self.ended.set()
        self.outcome.append("finished")
        return {"slow": True}


CANCEL_3 = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}}


async def test_server_cancellation_stops_the_handler_and_sends_no_answer(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"send": {"jsonrpc": "2.0", "id": 3, "method": "slow"}},
            {"wait_for": {"method": "test/started"}},  # the handler is running
            {"send": CANCEL_3},
            {"send": {"jsonrpc": "2.0", "id": "sync", "method": "ping"}},
            {"wait_response": "sync"},  # the cancellation has been read
            mark("synced"),
        ],
    )
    handlers = Cancellable()
    with anyio.fail_after(20):
        async with script.connect(handlers=handlers) as conn:
            await handlers.started.wait()
            await conn.mcp.notify("test/started")
            await handlers.mark("synced").wait()
            handlers.release.set()  # had the cancellation not stopped it, it would answer now
            await handlers.ended.wait()
            await script.finished(conn)
    assert handlers.outcome == ["cancelled"]
    assert "3" not in answers(script)


async def test_a_cancellation_read_in_the_same_chunk_as_its_request_stops_it(tmp_path: Path) -> None:
    request = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "slow"}, separators=(",", ":"))
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"raw": request + "\n" + json.dumps(CANCEL_3, separators=(",", ":"))},  # one write
            {"send": {"jsonrpc": "2.0", "id": "sync", "method": "ping"}},
            {"wait_response": "sync"},
            mark("synced"),
        ],
    )
    handlers = Cancellable()
    with anyio.fail_after(20):
        async with script.connect(handlers=handlers) as conn:
            await handlers.mark("synced").wait()
            if handlers.started.is_set():  # it ran: it must have been cancelled meanwhile
                handlers.release.set()
                await handlers.ended.wait()
            await script.finished(conn)
    assert "finished" not in handlers.outcome
    assert "3" not in answers(script)


async def test_a_cancellation_after_the_answer_changes_nothing(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"send": {"jsonrpc": "2.0", "id": 3, "method": "anything"}},
            {"wait_response": 3},  # answered (-32601): the request is over
            {"send": CANCEL_3},  # too late: it names no waiting or running job
            {"send": {"jsonrpc": "2.0", "id": "sync", "method": "ping"}},
            {"wait_response": "sync"},
            mark("synced"),
        ],
    )
    handlers = TestHandlers()
    with anyio.fail_after(20):
        async with script.connect(handlers=handlers) as conn:
            await handlers.mark("synced").wait()
            assert conn.connection.pool.waiting == 0
            await script.finished(conn)
    assert answers(script)["3"]["error"]["code"] == -32601


async def test_t3_transport_loss_fails_pending_requests_at_once(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"expect": {"method": "tools/call"}},
            {"stderr": "crashing now"},
            {"exit": 7},
        ],
    )
    with anyio.fail_after(8):
        async with script.connect() as conn:
            with pytest.raises(ConnectionLost) as caught:
                await conn.mcp.call_tool("x", timeout=60)
            with pytest.raises(ConnectionLost):
                await conn.mcp.list_tools()
    assert caught.value.exit_status == 7
    assert any("crashing now" in line for line in caught.value.stderr_tail)


async def test_remote_error_carries_code_message_data(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"expect": {"method": "resources/read"}},
            {"reply_error": {"code": -32002, "message": "Resource not found", "data": {"uri": "x://y"}}},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect() as conn:
            with pytest.raises(RemoteError) as caught:
                await conn.mcp.read_resource("x://y")
    assert (caught.value.code, caught.value.message, caught.value.data) == (
        -32002,
        "Resource not found",
        {"uri": "x://y"},
    )


async def test_progress_routed_to_the_caller_and_log_messages_logged(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"expect": {"method": "tools/call"}},
            {
                "send": {
                    "jsonrpc": "2.0",
                    "method": "notifications/message",
                    "params": {"level": "warning", "logger": "srv", "data": "disk\nalmost full"},
                }
            },
            {
                "send": {
                    "jsonrpc": "2.0",
                    "method": "notifications/progress",
                    "params": {"progressToken": "progress-1", "progress": 1, "total": 2},
                }
            },
            {
                "send": {
                    "jsonrpc": "2.0",
                    "method": "notifications/progress",
                    "params": {"progressToken": "other", "progress": 9},
                }
            },
            {"reply": {"content": [{"type": "text", "text": "ok"}]}},
        ],
    )
    seen: list[dict[str, Any]] = []
    handlers = Recording()
    with capture_logs() as logs, anyio.fail_after(20):
        async with script.connect(handlers=handlers) as conn:
            result = await conn.mcp.call_tool("work", progress=seen.append)
    assert result.text == "ok"
    assert seen == [{"progressToken": "progress-1", "progress": 1, "total": 2}]
    sent = [m for m in script.messages() if m.get("method") == "tools/call"][0]
    assert sent["params"]["_meta"] == {"progressToken": "progress-1"}
    message = [e for e in logs if e["event"] == "server log message"][0]
    assert message["log_level"] == "warning" and "\n" not in str(message["data"])
    assert [m for m, _ in handlers.notifications].count("notifications/progress") == 2


async def test_d6_integer_id_beyond_64_bits_is_echoed_exactly(tmp_path: Path) -> None:
    big = 2**80 + 7
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"raw": '{"jsonrpc":"2.0","id":' + str(big) + ',"method":"ping"}'},
            {"wait_response": big},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect() as conn:
            await script.finished(conn)
    assert any(f'"id":{big}' in line for line in script.lines())


async def test_pagination_follows_next_cursor_to_the_last_page_within_the_bound(tmp_path: Path) -> None:
    from .wire import FAST

    pages = []
    for n in range(3):
        cursor = {"nextCursor": f"c{n + 1}"} if n < 2 else {}  # the last page has none
        pages += [
            {"expect": {"method": "tools/list"}},
            {"reply": {"tools": [{"name": f"t{n}", "inputSchema": {}}], **cursor}},
        ]
    script = Script(tmp_path, [*MCP_HANDSHAKE, *pages])
    limits = FAST.__class__(max_list_pages=3, close_grace_seconds=2, terminate_grace_seconds=1)
    with anyio.fail_after(20):
        async with script.connect(limits=limits) as conn:
            tools = await conn.mcp.list_tools()
    assert [t.name for t in tools] == ["t0", "t1", "t2"]
    cursors = [
        m.get("params", {}).get("cursor") for m in script.messages() if m.get("method") == "tools/list"
    ]
    assert cursors == [None, "c1", "c2"]


async def test_mcpl_result_keeps_the_manifest_verbatim(tmp_path: Path) -> None:
    script = Script(tmp_path, MCPL_HANDSHAKE)
    with anyio.fail_after(20):
        async with script.connect() as conn:
            assert conn.server_info is not None
            assert conn.server_info.mcpl == MCPL_RESULT["capabilities"]["experimental"]["mcpl"]


class Streaming(TestHandlers):
    async def inference_request(
        self, context: RequestContext, params: dict[str, Any], stream: Any
    ) -> dict[str, Any]:
        if stream is not None:
            stream.send("Hel")
            stream.send("lo")
        return {
            "content": "Hello",
            "model": "test-model",
            "finishReason": "end_turn",
            "usage": {"inputTokens": 1, "outputTokens": 2},
        }


def inference(request_id: Any, stream: bool) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "inference/request",
        "params": {"featureSet": "demo", "stream": stream, "messages": [{"role": "user", "content": "hi"}]},
    }


async def test_r7_streamed_inference_chunks_name_the_request_null_id_answered_whole(
    tmp_path: Path,
) -> None:
    manifest = {
        "version": "0.5",
        "inferenceRequest": {"streaming": True},
        "featureSets": {
            "demo": {"description": "d", "uses": ["inferenceRequest", "inferenceRequest.streaming"]}
        },
    }
    result = {
        "protocolVersion": "2025-06-18",
        "serverInfo": {"name": "s", "version": "0"},
        "capabilities": {"experimental": {"mcpl": manifest}},
    }
    script = Script(
        tmp_path,
        [
            {"expect": {"method": "initialize"}},
            {"reply": result},
            {"expect": {"method": "notifications/initialized"}},
            {"expect": {"method": "featureSets/update"}},
            {"reply": {"accepted": True}},
            {"send": inference("r1", True)},
            {"wait_response": "r1"},
            {"send": inference(None, True)},
            {"wait_response": None},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect(
            handlers=Streaming(), grant_policy=GrantPolicy(grant_all_advertised=True)
        ) as conn:
            await script.finished(conn)
    messages = script.messages()[3:]
    chunks = [m for m in messages if m.get("method") == "inference/chunk"]
    assert [c["params"] for c in chunks] == [
        {"requestId": "r1", "index": 0, "delta": "Hel"},
        {"requestId": "r1", "index": 1, "delta": "lo"},
    ]
    final = [m for m in messages if "result" in m]
    assert [m["id"] for m in final] == ["r1", None]
    assert messages.index(chunks[-1]) < messages.index(final[0])  # chunks before the result
    assert final[1]["result"]["content"] == "Hello"


async def test_inference_streaming_not_granted_is_refused(tmp_path: Path) -> None:
    manifest = {"version": "0.5", "inferenceRequest": {"streaming": True}}
    result = {
        "protocolVersion": "2025-06-18",
        "serverInfo": {"name": "s", "version": "0"},
        "capabilities": {"experimental": {"mcpl": manifest}},
    }
    script = Script(
        tmp_path,
        [
            {"expect": {"method": "initialize"}},
            {"reply": result},
            {"expect": {"method": "notifications/initialized"}},
            {"expect": {"method": "featureSets/update"}},
            {"reply": {"accepted": True}},
            {"send": inference(4, True)},
            {"wait_response": 4, "expect_error_code": -32002},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect(
            handlers=Streaming(), grant_policy=GrantPolicy(grant=("inferenceRequest",))
        ) as conn:
            await script.finished(conn)
    assert answers(script)["4"]["error"]["data"] == {"capability": "inferenceRequest.streaming"}


async def test_t1_answer_to_a_request_whose_transport_closed_is_not_sent(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"send": {"jsonrpc": "2.0", "id": "s", "method": "slow"}},
            {"exit": 3},  # while "slow" is running
        ],
    )
    handlers = Slow()
    with capture_logs() as logs, anyio.fail_after(20):
        async with script.connect(handlers=handlers) as conn:
            await handlers.started.wait()
            await conn.wait_closed()
    lines = [e for e in logs if e["event"] == "not answering request"]
    assert [(str(e["id"]), str(e["method"])) for e in lines] == [("s", "slow")]
    assert "s" not in [m.get("id") for m in script.messages()]


async def test_t2_request_read_after_its_link_closed_is_not_dispatched(tmp_path: Path) -> None:
    # The server stops reading and floods pings: the answers fill the pipe, then the small
    # outbox, and the link is lost while the reader still reads the later pings, which are
    # then not dispatched.
    ping = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "ping"}) + "\n"
    script = Script(tmp_path, [*MCP_HANDSHAKE, {"stop_reading": True}, {"raw_repeat": [ping, 8000]}])
    from mcpl_host import Limits

    limits = Limits(max_outbox_bytes=4096, close_grace_seconds=0.3, terminate_grace_seconds=0.3)
    with capture_logs() as logs, anyio.fail_after(20):
        async with script.connect(limits=limits) as conn:
            await conn.wait_closed()
            await script.finished(conn)  # the reader has read every ping by now
    assert any(e["event"] == "not answering request" for e in logs)


async def test_d2_string_id_answer_is_an_orphan_and_the_request_times_out(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"expect": {"method": "tools/list"}},
            {"reply": {"tools": []}, "id": "2"},
        ],
    )
    handlers = Recording()
    with anyio.fail_after(20):
        async with script.connect(handlers=handlers) as conn:
            with pytest.raises(RequestTimeout):
                await conn.mcp.request("tools/list", timeout=1.0)
            await handlers.orphan_seen.wait()
    assert handlers.orphans[0].id == "2"


async def test_d5_unknown_mcpl_version_is_served_with_one_warning(tmp_path: Path) -> None:
    manifest = {"version": "0.9", "pushEvents": True}
    result = {
        "protocolVersion": "2025-06-18",
        "serverInfo": {"name": "s", "version": "0"},
        "capabilities": {"experimental": {"mcpl": manifest}},
    }
    script = Script(
        tmp_path,
        [
            {"expect": {"method": "initialize"}},
            {"reply": result},
            {"expect": {"method": "notifications/initialized"}},
            {"expect": {"method": "featureSets/update"}},
            {"reply": {"accepted": True}},
        ],
    )
    with capture_logs() as logs, anyio.fail_after(20):
        async with script.connect(grant_policy=GrantPolicy(grant_all_advertised=True)) as conn:
            assert conn.grant is not None and conn.grant.allows("pushEvents")
    warnings = [e for e in logs if "MCPL version" in e["event"]]
    assert len(warnings) == 1

"""Hostile input from a server: each gets a clear error or a bounded log line, never a crash,
a hang or unbounded memory (found by trying to break the host)."""

from __future__ import annotations

import io
import json
import tracemalloc
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from mcpl_host import ConnectionLost, GrantPolicy, InitializeError, Limits, RemoteError, RequestContext
from mcpl_host.jsonrpc.errors import LocalProtocolError
from mcpl_host.jsonrpc.framing import LineReader

from .wire import FAST, MCP_HANDSHAKE, MCPL_HANDSHAKE, Script, TestHandlers, mark

pytestmark = pytest.mark.anyio
SECRET = "S3CRET-VALUE-123"


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


def rendered(stream: io.StringIO) -> list[dict[str, Any]]:
    """The log lines written so far, parsed (each one a JSON object)."""
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def failures(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if line["event"] == "failed to act on a line from the server"]


async def test_unhashable_cancelled_request_id_does_not_break_the_connection(
    tmp_path: Path, rendered_logs: io.StringIO
) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"send": {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": [1]}}},
            {
                "send": {
                    "jsonrpc": "2.0",
                    "method": "notifications/cancelled",
                    "params": {"requestId": {"a": 1}},
                }
            },
            {"send": {"jsonrpc": "2.0", "id": "after", "method": "ping"}},
            {"wait_response": "after"},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect() as conn:
            await script.finished(conn)
            assert conn.is_open
    lines = rendered(rendered_logs)
    assert not failures(lines), failures(lines)  # ignored, not an exception in the read loop
    assert "Traceback" not in rendered_logs.getvalue()


async def test_deeply_nested_values_in_log_lines_do_not_break_the_connection(
    tmp_path: Path, rendered_logs: io.StringIO
) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"raw": '{"jsonrpc":"2.0","error":{"code":1,"message":"m","data":' + deep(1000) + "}}"},
            {
                "raw": '{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"error","data":'
                + deep(1000)
                + "}}"
            },
            {"send": {"jsonrpc": "2.0", "id": "after", "method": "ping"}},
            {"wait_response": "after"},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect() as conn:
            await script.finished(conn)
            assert conn.is_open
    lines = rendered(rendered_logs)
    assert not failures(lines), failures(lines)
    (message,) = [line for line in lines if line["event"] == "server log message"]
    assert message["level"] == "error" and isinstance(message["data"], str)
    assert len(message["data"]) <= 300  # rendered, cut and escaped, whatever the nesting
    (unmatched,) = [line for line in lines if line["event"] == "error response naming no request of ours"]
    assert isinstance(unmatched["error"], str) and len(unmatched["error"]) <= 300


@pytest.mark.parametrize(("levels", "mcpl"), [(20, True), (900, False)])
async def test_deeply_nested_advertisement_still_handshakes(tmp_path: Path, levels: int, mcpl: bool) -> None:
    # Within Limits.max_manifest_depth (32) it is served as MCPL; deeper, as plain MCP (the
    # work on a manifest stays bounded), and the handshake succeeds either way.
    nested = '{"pushEvents":true,"vendor":' + '{"a":' * levels + "1" + "}" * levels + "}"
    result = (
        '{"protocolVersion":"2025-06-18","serverInfo":{"name":"deep","version":"0"},'
        '"capabilities":{"experimental":{"mcpl":' + nested[:-1] + ',"version":"0.5"}}}}'
    )
    policy_exchange: list[dict[str, Any]] = [
        {"expect": {"method": "featureSets/update"}},
        {"reply": {"accepted": True}},
    ]
    script = Script(
        tmp_path,
        [
            {"expect": {"method": "initialize"}},
            {"raw": '{"jsonrpc":"2.0","id":2,"result":' + result + "}"},  # id 1: the era probe
            {"expect": {"method": "notifications/initialized"}},
            *(policy_exchange if mcpl else []),
        ],
    )
    with anyio.fail_after(20):
        async with script.connect(grant_policy=GrantPolicy(grant_all_advertised=True)) as conn:
            if mcpl:
                assert conn.grant is not None and conn.grant.paths == {"pushEvents"}
            else:
                assert conn.grant is None and conn.mcpl_state.value == "none"
            await script.finished(conn)


async def test_server_not_reading_its_input_loses_the_link_with_memory_bounded(tmp_path: Path) -> None:
    # The server floods pings and never reads: answers pile up until the bound.
    ping = json.dumps({"jsonrpc": "2.0", "id": "x" * 100, "method": "ping"})
    flood = 20000  # about 3 MB of answers (150 bytes each): many times the bound
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            mark("flooding"),
            {"stop_reading": True},  # from here on the host's answers fill the pipe
            {"raw_repeat": [ping + "\n", flood]},
            {"hang": True},
        ],
    )
    bound = 256 * 1024
    limits = Limits(max_outbox_bytes=bound, close_grace_seconds=0.3, terminate_grace_seconds=0.3)
    handlers = TestHandlers()
    with anyio.fail_after(30):
        async with script.connect(limits=limits, handlers=handlers) as conn:
            await handlers.mark("flooding").wait()
            tracemalloc.start()
            try:
                before, _ = tracemalloc.get_traced_memory()
                reason = await conn.wait_closed()
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
    assert isinstance(reason, ConnectionLost)
    assert "not reading its input" in str(reason)
    # What the host held meanwhile: the queued answers (up to the bound) plus what it read
    # and parsed, never the flood's 3 MB of answers. Measured 0.5-0.7 MB here; a few times the
    # bound leaves room for the read buffers and the allocator.
    assert peak - before < 6 * bound, f"peak {peak - before} bytes with a bound of {bound}"


class Handlers(TestHandlers):
    def __init__(self, expected: int) -> None:
        super().__init__()
        self.expected = expected
        self.running = 0
        self.most_running = 0
        self.served = 0
        self.all_served = anyio.Event()

    async def request(self, context: RequestContext, params: Any) -> Any:
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        await anyio.lowlevel.checkpoint()
        self.running -= 1
        self.served += 1
        if self.served == self.expected:
            self.all_served.set()
        return {}


async def test_requests_beyond_the_concurrency_bound_wait_their_turn(tmp_path: Path) -> None:
    steps: list[dict[str, Any]] = [*MCP_HANDSHAKE]
    steps += [{"send": {"jsonrpc": "2.0", "id": n, "method": "slow"}} for n in range(40)]
    steps += [{"wait_for": {"method": "test/all-served"}}]
    script = Script(tmp_path, steps)
    handlers = Handlers(40)
    limits = Limits(
        max_concurrent_inbound=4, max_queued_inbound=100, close_grace_seconds=1, terminate_grace_seconds=1
    )
    with anyio.fail_after(20):
        async with script.connect(handlers=handlers, limits=limits) as conn:
            await handlers.all_served.wait()
            await conn.mcp.notify("test/all-served")  # written after every answer (one writer)
            await script.finished(conn)
    answers = [m for m in script.messages() if "result" in m]
    assert sorted(m["id"] for m in answers) == list(range(40))  # none refused as busy
    assert handlers.most_running <= 4


async def test_secrets_and_control_characters_never_reach_error_messages(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            {"expect": {"method": "initialize"}},
            {"reply_error": {"code": -32000, "message": f"bad token {SECRET}\nFAKE LOG LINE \u001b[31m"}},
        ],
    )
    with anyio.fail_after(20), pytest.raises(InitializeError) as caught:
        async with script.connect(env={"TOKEN": SECRET}):
            pass
    text = str(caught.value)
    assert SECRET not in text and "\n" not in text and "\u001b" not in text
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"expect": {"method": "tools/call"}},
            {"reply_error": {"code": -5, "message": f"token {SECRET} rejected"}},
        ],
        name="remote",
    )
    with anyio.fail_after(20):
        async with script.connect(env={"TOKEN": SECRET}) as conn:
            with pytest.raises(RemoteError) as remote:
                await conn.mcp.call_tool("x")
    assert SECRET not in str(remote.value) and remote.value.message == f"token {SECRET} rejected"


async def test_unsupported_version_message_is_redacted(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            {"expect": {"method": "initialize"}},
            {"reply": {"protocolVersion": SECRET, "capabilities": {}}},
        ],
    )
    with anyio.fail_after(20), pytest.raises(InitializeError) as caught:
        async with script.connect(env={"TOKEN": SECRET}):
            pass
    assert SECRET not in str(caught.value) and "[redacted]" in str(caught.value)


async def test_negative_19_digit_id_is_echoed_exactly(tmp_path: Path) -> None:
    big = -(2**63) - 1
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


@pytest.mark.parametrize(
    "answer",
    [
        {"reply_error": "boom", "no_id": True},  # H2 with an error that is not an object
    ],
)
async def test_malformed_error_to_initialize_is_an_initialize_error(
    tmp_path: Path, answer: dict[str, Any]
) -> None:
    script = Script(tmp_path, [{"expect": {"method": "initialize"}}, answer, {"hang": True}])
    with anyio.fail_after(20), pytest.raises(InitializeError, match="malformed"):
        async with script.connect(
            limits=FAST.__class__(close_grace_seconds=0.3, terminate_grace_seconds=0.3)
        ):
            pass


async def test_error_null_beside_a_result_is_a_result(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            {"expect": {"method": "initialize"}},
            {
                "send": {
                    "jsonrpc": "2.0",
                    "id": 2,  # 1 is the era probe
                    "error": None,
                    "result": {"protocolVersion": "2025-06-18", "capabilities": {}},
                }
            },
            {"expect": {"method": "notifications/initialized"}},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect() as conn:
            assert conn.server_info is not None


async def test_request_before_entering_is_a_local_protocol_error(tmp_path: Path) -> None:
    conn = Script(tmp_path, MCPL_HANDSHAKE).connect()
    with pytest.raises(LocalProtocolError, match="async with"):
        await conn.mcp.list_tools()


def test_crlf_split_at_the_bound_is_not_too_long() -> None:
    reader = LineReader(max_line_bytes=4)
    assert reader.feed(b"abcd\r") == []
    assert reader.feed(b"\n") == [b"abcd"]

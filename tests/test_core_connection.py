"""The connection core under load and misuse, at the wire: deadlines kept by one timer,
back-pressure on inbound floods (and no deadlock when a handler calls back into its server),
an oversize outgoing message refused to its caller, look-alike answer ids named once, and
the handshake timeout that says what arrived instead (docs/protocol.md R5, D2, H4)."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from mcpl_host import InitializeError, Limits, RequestContext, RequestTimeout
from mcpl_host.jsonrpc.errors import MessageTooLarge
from mcpl_host.logging import log_value

from .wire import MCP_HANDSHAKE, Script, TestHandlers

pytestmark = pytest.mark.anyio
SECRET = "S3CRET-VALUE-123"
#: These tests number the host's requests from 1 (initialize): no ``server/discover`` era
#: probe before it (docs/protocol.md S1).
NO_PROBE = "handshake"


def rendered(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def answers(script: Script) -> dict[Any, dict[str, Any]]:
    """The host's answers to server requests, by id."""
    return {m["id"]: m for m in script.messages() if "method" not in m and "id" in m}


# --- deadlines -----------------------------------------------------------------------------


async def test_a_request_times_out_at_its_deadline_and_not_before(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"expect": {"method": "tools/list"}},
            {"wait_for": {"method": "notifications/cancelled"}},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect(protocol=NO_PROBE) as conn:
            started = time.monotonic()
            with pytest.raises(RequestTimeout) as caught:
                await conn.mcp.request("tools/list", timeout=0.5)
            assert time.monotonic() - started >= 0.5  # the deadline, never earlier
            assert conn.connection.pending_count == 0
            await script.finished(conn)
    assert str(caught.value) == "'tools/list' got no answer within 0.5 seconds"
    assert caught.value.method == "tools/list" and caught.value.timeout == 0.5
    assert {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": 2, "reason": "timeout"},
    } in script.messages()


async def test_a_request_is_sent_when_it_is_awaited_and_not_before(tmp_path: Path) -> None:
    # Connection.request and EraRequester.request hand back the coroutine that does the
    # work: one never awaited sends nothing and takes no id.
    script = Script(tmp_path, [*MCP_HANDSHAKE, {"expect": {"method": "ping", "id": 2}}, {"reply": {}}])
    with anyio.fail_after(20):
        async with script.connect(protocol=NO_PROBE) as conn:
            for unawaited in (conn.connection.request("ping"), conn.mcp.request("ping")):
                assert conn.connection.pending_count == 0
                unawaited.close()
            assert await conn.mcp.request("ping") == {}
            await script.finished(conn)
    assert [m.get("method") for m in script.messages() if "id" in m] == ["initialize", "ping"]


async def test_a_shorter_deadline_started_later_is_kept_while_a_longer_one_waits(tmp_path: Path) -> None:
    # The timer sleeps towards the earliest deadline: a later request with a shorter timeout
    # must wake it, and the earlier request must go on waiting (then be answered).
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"expect": {"method": "tools/list"}},  # id 2, 30 s: answered at the end
            {"expect": {"method": "prompts/list"}},  # id 3, 0.3 s: never answered
            {"wait_for": {"method": "notifications/cancelled"}},
            {"reply": {"tools": []}, "id": 2},
        ],
    )
    limits = Limits(handshake_timeout_seconds=60, close_grace_seconds=2.0, terminate_grace_seconds=1.0)
    with anyio.fail_after(20):
        async with script.connect(limits=limits, protocol=NO_PROBE) as conn, anyio.create_task_group() as tg:
            outcome: list[Any] = []

            async def long_one() -> None:
                outcome.append(await conn.mcp.request("tools/list", timeout=30))

            tg.start_soon(long_one)
            while conn.connection.pending_count < 1:
                await anyio.lowlevel.checkpoint()
            # Bounded far below the other deadlines (60 s, 30 s): the timer woke for it.
            with anyio.fail_after(5), pytest.raises(RequestTimeout):
                await conn.mcp.request("prompts/list", timeout=0.3)
            assert conn.connection.pending_count in (0, 1)  # the long one is still waiting, or answered
    assert outcome == [{"tools": []}]
    cancelled = [m["params"] for m in script.messages() if m.get("method") == "notifications/cancelled"]
    assert cancelled == [{"requestId": 3, "reason": "timeout"}]


# --- inbound floods: back-pressure -----------------------------------------------------------


class Gated(TestHandlers):
    """Server requests wait for ``gate``; counts what was served and when ``test/end``
    arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = anyio.Event()
        self.served = 0
        self.served_at_end: int | None = None
        self.end = anyio.Event()

    async def request(self, context: RequestContext, params: Any) -> Any:
        await self.gate.wait()
        await anyio.lowlevel.checkpoint()
        self.served += 1
        return {"n": params["n"]}

    def on_notification(self, server: str, method: str, params: Any) -> None:
        super().on_notification(server, method, params)
        if method == "test/end":
            self.served_at_end = self.served
            self.end.set()


FLOOD = 60
SMALL_BOUNDS = Limits(
    max_concurrent_inbound=2,
    max_queued_inbound=4,
    close_grace_seconds=2.0,
    terminate_grace_seconds=1.0,
    handshake_timeout_seconds=10.0,
)


async def test_a_request_flood_is_slowed_by_back_pressure_not_refused(tmp_path: Path) -> None:
    flood = [
        {"send": {"jsonrpc": "2.0", "id": n, "method": "work", "params": {"n": n}}} for n in range(FLOOD)
    ]
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            *flood,
            {"send": {"jsonrpc": "2.0", "method": "test/end"}},
            {"wait_responses": list(range(FLOOD))},
        ],
    )
    handlers = Gated()
    with anyio.fail_after(30):
        async with script.connect(handlers=handlers, limits=SMALL_BOUNDS) as conn:
            # The queue fills and the host stops reading: the notification behind the flood
            # is not read while the handlers hold their turns.
            while conn.connection.pool.waiting < SMALL_BOUNDS.max_queued_inbound:
                await anyio.lowlevel.checkpoint()
            assert not handlers.end.is_set()
            handlers.gate.set()
            await handlers.end.wait()
            await script.finished(conn)
    # Read only once all but the last requests had their turn: at most the running ones,
    # the queue and the one read before pausing were still unserved.
    assert handlers.served_at_end is not None
    assert handlers.served_at_end >= FLOOD - 2 - 4 - 1
    got = answers(script)
    assert sorted(got) == list(range(FLOOD))
    assert all(got[n] == {"jsonrpc": "2.0", "id": n, "result": {"n": n}} for n in range(FLOOD))


class Quick(TestHandlers):
    async def request(self, context: RequestContext, params: Any) -> Any:
        await anyio.lowlevel.checkpoint()
        return {"n": params["n"]}


async def test_a_queue_bound_of_zero_still_reads_and_serves(tmp_path: Path) -> None:
    # Reading pauses at one waiting job at least: a bound of 0 must not stop the reader.
    flood = [{"send": {"jsonrpc": "2.0", "id": n, "method": "work", "params": {"n": n}}} for n in range(8)]
    script = Script(tmp_path, [*MCP_HANDSHAKE, *flood, {"wait_responses": list(range(8))}])
    limits = Limits(
        max_concurrent_inbound=1, max_queued_inbound=0, close_grace_seconds=2.0, terminate_grace_seconds=1.0
    )
    with anyio.fail_after(20):
        async with script.connect(handlers=Quick(), limits=limits) as conn:
            await script.finished(conn)
    assert sorted(answers(script)) == list(range(8))
    assert all("result" in m for m in answers(script).values())


class CallingBack(TestHandlers):
    """Each server request asks the same server for ``tools/list`` before answering;
    ``all_done`` is set once ``expected`` have answered."""

    def __init__(self, expected: int) -> None:
        super().__init__()
        self.connection: Any = None
        self.expected = expected
        self.called_back = 0
        self.all_done = anyio.Event()

    async def request(self, context: RequestContext, params: Any) -> Any:
        if params["n"] == 0:
            # Call back only once the queue is full and reading has paused: the call itself
            # must make the host read on.
            while self.connection.connection.pool.waiting < 4:
                await anyio.lowlevel.checkpoint()
        await self.connection.mcp.request("tools/list")
        self.called_back += 1
        if self.called_back == self.expected:
            self.all_done.set()
        return {"n": params["n"]}


@pytest.mark.parametrize("backlog", [1024, 3])
async def test_a_handler_awaiting_its_own_server_cannot_deadlock_a_full_queue(
    tmp_path: Path, backlog: int, rendered_logs: io.StringIO
) -> None:
    # Every answer the handler waits for is written behind the whole flood: the host must
    # read past a full queue to find it. With a small backlog, the requests beyond it are
    # the documented last resort: answered "host busy" at once. One worker, so that which
    # requests fit is exact: the running one, the queue (4) and the backlog.
    count = 30
    served = count if backlog >= count else 1 + 4 + backlog
    flood = [
        {"send": {"jsonrpc": "2.0", "id": n, "method": "work", "params": {"n": n}}} for n in range(count)
    ]
    steps: list[dict[str, Any]] = [*MCP_HANDSHAKE, *flood]
    for _ in range(served):
        steps += [{"wait_for": {"method": "tools/list"}}, {"reply": {"tools": []}}]
    script = Script(tmp_path, steps)
    handlers = CallingBack(served)
    limits = Limits(
        max_concurrent_inbound=1,
        max_queued_inbound=4,
        max_inbound_backlog=backlog,
        close_grace_seconds=2.0,
        terminate_grace_seconds=1.0,
    )
    with anyio.fail_after(30):
        async with script.connect(handlers=handlers, limits=limits) as conn:
            handlers.connection = conn
            await script.finished(conn)
            await handlers.all_done.wait()
    got = answers(script)
    results = sorted(n for n, m in got.items() if "result" in m)
    busy = sorted(
        n for n, m in got.items() if m.get("error", {}).get("message") == "Internal error: host busy"
    )
    assert results == list(range(served)) and busy == list(range(served, count))
    lines = [line for line in rendered(rendered_logs) if "host busy" in line["event"]]
    if served == count:
        assert lines == []
    else:
        # 22 refusals: the budget's 10 lines, then one saying that more go unlogged.
        assert len(lines) == limits.invalid_requests_logged + 1
        assert lines[0]["level"] == "warning" and "max_inbound_backlog" in lines[0]["event"]


# --- an oversize outgoing message --------------------------------------------------------------


async def test_an_outgoing_request_over_the_outbox_bound_is_refused_and_the_connection_stays_up(
    tmp_path: Path,
) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"expect": {"method": "ping"}},
            {"reply": {}},
        ],
    )
    bound = 64 * 1024
    limits = Limits(max_outbox_bytes=bound, close_grace_seconds=2.0, terminate_grace_seconds=1.0)
    with anyio.fail_after(20):
        async with script.connect(limits=limits) as conn:
            with pytest.raises(MessageTooLarge) as caught:
                await conn.mcp.request("tools/call", {"name": "x", "arguments": {"blob": "a" * (2 * bound)}})
            with pytest.raises(MessageTooLarge):
                conn.mcp.notify_nowait("notifications/message", {"blob": "b" * (2 * bound)})
            assert conn.connection.pending_count == 0 and conn.is_open
            await conn.mcp.ping()  # answered: nothing of the refused messages was written
            await script.finished(conn)
    assert caught.value.limit == bound and caught.value.size > 2 * bound
    assert str(caught.value).startswith("'tools/call' is ") and "Limits.max_outbox_bytes" in str(caught.value)
    assert [m.get("method") for m in script.messages()] == ["initialize", "notifications/initialized", "ping"]


class Huge(TestHandlers):
    async def request(self, context: RequestContext, params: Any) -> Any:
        return {"blob": "z" * (128 * 1024)}


async def test_an_answer_over_the_outbox_bound_becomes_an_internal_error(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"send": {"jsonrpc": "2.0", "id": "big", "method": "huge"}},
            {"wait_response": "big", "expect_error_code": -32603},
        ],
    )
    limits = Limits(max_outbox_bytes=64 * 1024, close_grace_seconds=2.0, terminate_grace_seconds=1.0)
    with anyio.fail_after(20):
        async with script.connect(limits=limits, handlers=Huge()) as conn:
            await script.finished(conn)
            assert conn.is_open


# --- look-alike ids -------------------------------------------------------------------------------


@pytest.mark.parametrize("look_alike", ["2", 2.0])
async def test_an_answer_with_a_look_alike_id_is_never_matched_and_is_named_once(
    tmp_path: Path, look_alike: Any, rendered_logs: io.StringIO
) -> None:
    reply = {"reply": {"tools": []}, "id": look_alike}
    script = Script(tmp_path, [*MCP_HANDSHAKE, {"expect": {"method": "tools/list"}}, reply, reply])
    with anyio.fail_after(20):
        async with script.connect(protocol=NO_PROBE) as conn:
            with pytest.raises(RequestTimeout):
                await conn.mcp.request("tools/list", timeout=1.0)
            await script.finished(conn)
    lines = [line for line in rendered(rendered_logs) if "only looks like" in line["event"]]
    assert len(lines) == 1, lines  # once per connection, though two arrived
    (line,) = lines
    assert line["level"] == "warning"
    assert line["resembles"] == 2 and line["method"] == "tools/list"
    # As JSON, so that "2" and 2 differ (log_value escapes its quotes).
    assert line["id"] == log_value(json.dumps(look_alike) if isinstance(look_alike, str) else look_alike)


async def test_a_look_alike_answer_to_initialize_is_named_in_the_handshake_timeout(
    tmp_path: Path, rendered_logs: io.StringIO
) -> None:
    script = Script(
        tmp_path,
        [
            {"expect": {"method": "initialize"}},
            {"reply": {"protocolVersion": "2025-06-18", "capabilities": {}}, "id": True},
            {"hang": True},
        ],
    )
    limits = Limits(handshake_timeout_seconds=0.5, close_grace_seconds=0.3, terminate_grace_seconds=0.3)
    with anyio.fail_after(20), pytest.raises(InitializeError) as caught:
        async with script.connect(limits=limits, protocol=NO_PROBE):
            pass
    message = str(caught.value)
    assert message.startswith("the server did not answer initialize within 0.5 seconds; ")
    assert "the id true, which only looks like the id 1 of initialize" in message
    lines = [line for line in rendered(rendered_logs) if "only looks like" in line["event"]]
    assert len(lines) == 1 and lines[0]["method"] == "initialize" and lines[0]["resembles"] == 1


# --- noise before initialize --------------------------------------------------------------------


async def test_a_handshake_timeout_names_the_unreadable_lines_with_a_safe_sample(tmp_path: Path) -> None:
    noise = f"Loading model, token={SECRET} \u202e\u001b[31m" + "x" * 1000
    script = Script(
        tmp_path,
        [
            {"expect": {"method": "initialize"}},
            {"raw": noise},
            {"raw": "second line of noise"},
            # Glued in front of the answer, which is lost with it.
            {"raw": 'ready {"jsonrpc":"2.0","id":1,"result":{}}'},
            {"hang": True},
        ],
    )
    limits = Limits(handshake_timeout_seconds=0.5, close_grace_seconds=0.3, terminate_grace_seconds=0.3)
    with anyio.fail_after(20), pytest.raises(InitializeError) as caught:
        # No era probe: its window is half of this short deadline (a slow start would add
        # "(nor server/discover before it)" to the sentence).
        async with script.connect(limits=limits, env={"API_TOKEN": SECRET}, protocol=NO_PROBE):
            pass
    message = str(caught.value)
    assert message.startswith(
        "the server did not answer initialize within 0.5 seconds; 3 lines on its output could not be "
        "read as JSON-RPC; the first (not JSON): Loading model, token="
    )
    assert SECRET not in message and "[redacted]" in message
    assert "\u202e" not in message and "\u001b" not in message and "\\u202e" in message
    assert message.endswith("…[cut]") and len(message) < 600


async def test_a_handshake_timeout_without_noise_says_only_that(tmp_path: Path) -> None:
    script = Script(tmp_path, [{"expect": {"method": "initialize"}}, {"hang": True}])
    limits = Limits(handshake_timeout_seconds=0.3, close_grace_seconds=0.3, terminate_grace_seconds=0.3)
    # No era probe: its window is half of this short deadline, and a server slow to start
    # (a loaded machine) would rightly add "(nor server/discover before it)".
    with anyio.fail_after(20), pytest.raises(InitializeError) as caught:
        async with script.connect(limits=limits, protocol=NO_PROBE):
            pass
    assert str(caught.value) == "the server did not answer initialize within 0.3 seconds"


@pytest.mark.anyio
async def test_a_failure_in_the_handshakes_opening_hook_fails_the_handshake_at_once() -> None:
    # on_opened runs in the read loop; if it raises, the handshake must fail now, naming it,
    # not wait for the handshake timeout (60 s here) with the waiter never woken.
    import sys

    from mcpl_host.connection import ClientInfo, Connection
    from mcpl_host.opening import Opening
    from mcpl_host.transports.stdio import StdioParameters, StdioTransport

    from .conftest import FIXTURES

    limits = Limits(handshake_timeout_seconds=60, close_grace_seconds=0.3, terminate_grace_seconds=0.3)
    params = StdioParameters(sys.executable, (str(FIXTURES / "mcpl_server.py"),))

    def boom(info: Any) -> None:
        raise RuntimeError("opening hook failed")

    with anyio.fail_after(10):
        async with Connection(lambda: StdioTransport(params, limits=limits), limits=limits) as conn:
            with pytest.raises(InitializeError) as caught:
                await Opening(conn, ClientInfo(), None, protocol=NO_PROBE, on_opened=boom).run()
    assert "could not take up the server's initialize result" in str(caught.value)
    assert "opening hook failed" in str(caught.value)


# --- closing: every task of the connection ends ----------------------------------------------


async def test_closing_with_the_reader_paused_and_jobs_that_never_end_ends_every_task(tmp_path: Path) -> None:
    # The close cancels no scope of its own: the reader ends with the transport, and the
    # pool cancels its running jobs and the jobs not counted that still run; a reader held
    # by back-pressure wakes. None of them may keep the connection from closing.
    flood = [
        {"send": {"jsonrpc": "2.0", "id": n, "method": "work", "params": {"n": n}}} for n in range(FLOOD)
    ]
    script = Script(tmp_path, [*MCP_HANDSHAKE, *flood, {"wait_for": {"method": "never/sent"}}])
    handlers = Gated()  # the gate never opens: every served request waits for ever
    cancelled: list[str] = []
    started = anyio.Event()

    async def forever() -> None:
        try:
            started.set()
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled.append("uncounted")
            raise

    with anyio.fail_after(30):
        async with script.connect(handlers=handlers, limits=SMALL_BOUNDS) as conn:
            pool = conn.connection.pool
            while pool.waiting < SMALL_BOUNDS.max_queued_inbound:  # the reader pauses
                await anyio.lowlevel.checkpoint()
            assert pool.start_job(forever, counted=False)
            await started.wait()
            while pool.running < 1:  # a job waits at the gate (trio may run the job above first)
                await anyio.lowlevel.checkpoint()
    assert cancelled == ["uncounted"]
    assert pool.running == 0

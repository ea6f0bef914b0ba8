"""The MCP tasks extension (``io.modelcontextprotocol/tasks``, 2026-07-28): a ``tools/call``
answered with a task, polled with ``tasks/get``, its input requests answered with
``tasks/update``, ``tasks/cancel``, a failed task, status notifications through
``subscriptions/listen``, and the extension declared per request only.

Rules under test: the extension's specification "Tasks" 2026-07-28; ``mcpl_host.mcp_tasks``
(pure, by plain calls) and ``mcpl_host.task_polling`` (docs/protocol.md TK1-TK9). The I/O
against ``fixtures/tasks_server.py`` (stdlib, following the specification: no SDK serves the
extension) over stdio and Streamable HTTP (one HTTP server for the module).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from subprocess import PIPE
from typing import Any

import anyio
import pytest

from mcpl_host import HostHandlers, Limits, ServerConfig, ServerConnection, connect
from mcpl_host.client_features import ElicitationRequest, ElicitationResult, RequestContext
from mcpl_host.jsonrpc.errors import HandlerError, LocalProtocolError, RemoteError, RemoteProtocolError
from mcpl_host.listen import wanted_filter
from mcpl_host.mcp_methods import InputRefused
from mcpl_host.mcp_records import CallToolResult
from mcpl_host.mcp_tasks import (
    TASKS_EXTENSION,
    Task,
    TaskCancelled,
    TaskFailed,
    final_result,
    later_state,
    new_input_requests,
    poll_seconds,
    read_task,
)
from mcpl_host.stateless import http_request_headers, result_type, with_extensions
from mcpl_host.task_store import TaskStore, default_store_path, entry, recorded

from . import forkserver
from .test_cli import CLI
from .test_cli import TIMEOUT as CLI_TIMEOUT
from .test_client_features_real import Elicitor
from .wire import FIXTURES

pytestmark = pytest.mark.anyio

TASKS_SERVER = FIXTURES / "tasks_server.py"
TIMEOUT = 30
#: Small poll bounds: the fixture's tasks move on per poll, never per second.
FAST = Limits(task_poll_min_seconds=0.005, task_poll_default_seconds=0.01, close_grace_seconds=1.0)

WORKING: dict[str, Any] = {
    "taskId": "t1",
    "status": "working",
    "createdAt": "2026-07-28T10:00:00Z",
    "lastUpdatedAt": "2026-07-28T10:00:01Z",
    "ttlMs": 60000,
    "pollIntervalMs": 500,
}
ASK = {"method": "elicitation/create", "params": {"mode": "form", "message": "name?"}}


def task(**fields: Any) -> Task:
    return read_task({**WORKING, **fields}, "a test", max_input_requests=8)


# -- pure rules ----------------------------------------------------------------------------------


def test_a_task_is_read_whole_with_each_status_and_its_field() -> None:
    working = task()
    assert (working.task_id, working.status, working.ttl_ms, working.poll_interval_ms) == (
        "t1",
        "working",
        60000,
        500,
    )
    assert not working.terminal
    asking = task(status="input_required", inputRequests={"k": ASK})
    assert asking.input_requests == {"k": ("elicitation/create", ASK["params"])}
    done = task(status="completed", result={"content": [], "isError": True})
    assert done.terminal and done.result == {"content": [], "isError": True}
    failed = task(status="failed", error={"code": -32603, "message": "broke"})
    assert failed.terminal and failed.error == {"code": -32603, "message": "broke"}
    assert task(status="cancelled", ttlMs=None).ttl_ms is None


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"taskId": 7}, "no taskId"),
        ({"status": "paused"}, "unknown status"),
        ({"status": "input_required"}, "without inputRequests"),
        ({"status": "input_required", "inputRequests": {"k": {"method": "tools/call"}}}, "is not one of"),
        ({"status": "completed"}, "without a result"),
        ({"status": "failed", "error": {"message": "no code"}}, "without a JSON-RPC error"),
    ],
)
def test_a_task_missing_what_its_status_requires_is_refused(fields: dict[str, Any], says: str) -> None:
    with pytest.raises(RemoteProtocolError, match=says):
        read_task({**WORKING, **fields}, "a test", max_input_requests=8)


def test_an_answer_about_another_task_is_refused() -> None:
    with pytest.raises(RemoteProtocolError, match="with task"):
        read_task(WORKING, "tasks/get", expected_id="t2", max_input_requests=8)


def test_too_many_input_requests_are_refused() -> None:
    asks = {str(i): ASK for i in range(3)}
    with pytest.raises(RemoteProtocolError, match="at most 2"):
        read_task({**WORKING, "status": "input_required", "inputRequests": asks}, "x", max_input_requests=2)


def test_optional_fields_of_the_wrong_type_are_absent() -> None:
    odd = task(ttlMs="soon", pollIntervalMs=-5, statusMessage=3, createdAt=None)
    assert (odd.ttl_ms, odd.poll_interval_ms, odd.status_message, odd.created_at) == (None, None, None, "")


def test_a_terminal_state_is_final_and_others_move_to_any() -> None:
    working, done = task(), task(status="completed", result={"content": []})
    asking = task(status="input_required", inputRequests={"k": ASK})
    assert later_state(working, asking) is asking
    assert later_state(asking, working) is working
    assert later_state(working, done) is done
    assert later_state(done, working) is done  # a stale notification after the end
    assert later_state(task(status="cancelled"), done).status == "cancelled"


def test_the_poll_interval_is_the_servers_within_the_bounds() -> None:
    bounds = {"least": 0.25, "most": 30.0, "default": 1.0}
    assert poll_seconds(task(pollIntervalMs=500), **bounds) == 0.5
    assert poll_seconds(task(pollIntervalMs=0), **bounds) == 0.25
    assert poll_seconds(task(pollIntervalMs=3_600_000), **bounds) == 30.0
    assert poll_seconds(task(pollIntervalMs=None), **bounds) == 1.0


def test_input_requests_already_answered_are_not_asked_again() -> None:
    asking = task(status="input_required", inputRequests={"a": ASK, "b": ASK})
    assert set(new_input_requests(asking, set())) == {"a", "b"}
    assert set(new_input_requests(asking, {"a"})) == {"b"}
    assert new_input_requests(asking, {"a", "b"}) == {}


def test_the_final_result_of_each_terminal_status() -> None:
    assert final_result(task(status="completed", result={"content": []})) == {"content": []}
    with pytest.raises(TaskFailed) as failed:
        final_result(task(status="failed", error={"code": -32603, "message": "broke", "data": 1}))
    assert (failed.value.code, failed.value.message, failed.value.data, failed.value.task_id) == (
        -32603,
        "broke",
        1,
        "t1",
    )
    with pytest.raises(TaskCancelled, match="was cancelled: no longer wanted"):
        final_result(task(status="cancelled", statusMessage="no longer wanted"))
    with pytest.raises(ValueError, match="not terminal"):
        final_result(task())


def test_a_task_result_only_for_tools_call_that_declared_the_extension() -> None:
    answer = {**WORKING, "resultType": "task"}
    assert result_type(answer, "tools/call", task_declared=True) == "task"
    with pytest.raises(RemoteProtocolError, match="did not ask for"):
        result_type(answer, "tools/call")
    with pytest.raises(RemoteProtocolError, match="only tools/call"):
        result_type(answer, "prompts/get", task_declared=True)


def test_the_declaration_joins_the_capabilities_extensions() -> None:
    caps = {"sampling": {}, "extensions": {"other/x": {"a": 1}}}
    assert with_extensions(caps, {TASKS_EXTENSION: {}}) == {
        "sampling": {},
        "extensions": {"other/x": {"a": 1}, TASKS_EXTENSION: {}},
    }
    assert caps["extensions"] == {"other/x": {"a": 1}}  # not changed in place


def test_task_requests_carry_the_task_id_as_mcp_name() -> None:
    for method in ("tasks/get", "tasks/update", "tasks/cancel"):
        message = {"method": method, "params": {"taskId": "t-1", "_meta": {}}}
        assert http_request_headers(message)["Mcp-Name"] == "t-1"


def test_the_listen_asks_for_task_ids_only_of_a_server_that_advertises_the_extension() -> None:
    advertises = {"extensions": {TASKS_EXTENSION: {}}}
    assert wanted_filter(advertises, (), (), ["b", "a"]) == {"taskIds": ["a", "b"]}
    assert wanted_filter({"extensions": {}}, (), (), ["a"]) is None
    assert wanted_filter(advertises, (), (), []) is None


def test_the_store_keeps_the_newest_state_of_each_task_newest_first() -> None:
    first = entry(task(), server="s", tool="count", seen_at="1")
    other = entry(task(taskId="t2"), server="s", tool="slow", seen_at="2")
    done = entry(task(status="cancelled"), server="s", tool=None, seen_at="3")
    entries = recorded(recorded([], first), other)
    assert [e["taskId"] for e in entries] == ["t2", "t1"]
    entries = recorded(entries, done)
    assert [(e["taskId"], e["status"], e["tool"]) for e in entries] == [
        ("t1", "cancelled", "count"),
        ("t2", "working", "slow"),
    ]
    assert [e["taskId"] for e in recorded(entries, other, keep=1)] == ["t2"]


def test_the_store_lives_under_xdg_state_home_unless_it_is_relative() -> None:
    home = Path("/home/u")
    assert default_store_path({"XDG_STATE_HOME": "/s"}, home) == Path("/s/mcpl-host/tasks.json")
    for unset in ({}, {"XDG_STATE_HOME": ""}, {"XDG_STATE_HOME": "rel"}):
        assert default_store_path(unset, home) == home / ".local/state/mcpl-host/tasks.json"


def test_an_unreadable_store_is_empty_and_bad_entries_are_dropped(tmp_path: Path) -> None:
    store = TaskStore(tmp_path / "tasks.json")
    assert store.entries() == []
    store.path.write_text("not json", encoding="utf-8")
    assert store.entries() == []
    good = entry(task(), server="s", tool="count", seen_at="1")
    store.path.write_text(json.dumps({"tasks": [good, {"taskId": 3}, "x"]}), encoding="utf-8")
    assert store.entries() == [good]
    store.record(task(status="completed", result={"content": []}), server="s")
    assert [(e["status"], e["tool"]) for e in store.entries()] == [("completed", "count")]
    assert store.forget("t1") and not store.forget("t1") and store.entries() == []


# -- against the fixture server, over stdio and Streamable HTTP ----------------------------------


@pytest.fixture(scope="module")
def http_port() -> Iterator[int]:
    """One HTTP tasks server for the module (its tasks are independent of each other)."""
    process = subprocess.Popen(
        [sys.executable, str(TASKS_SERVER), "--http"],
        stdin=PIPE,
        stdout=PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        yield int(process.stdout.readline().split()[1])
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.terminate()
        process.wait(TIMEOUT)


@contextlib.asynccontextmanager
async def tasks_server(
    transport: str, port: int, *, limits: Limits = FAST, handlers: HostHandlers | None = None
) -> AsyncIterator[ServerConnection]:
    if transport == "stdio":
        config = ServerConfig(command=sys.executable, args=(str(TASKS_SERVER),), limits=limits)
    else:
        config = ServerConfig(url=f"http://127.0.0.1:{port}/mcp", limits=limits)
    async with connect(config, handlers=handlers) as conn:
        assert conn.era == "stateless"
        yield conn


TRANSPORTS = pytest.mark.parametrize("transport", ["stdio", "http"])


class Refusing(Elicitor):
    """Refuses every form (a handler error)."""

    async def elicit(self, context: RequestContext, request: ElicitationRequest) -> ElicitationResult:
        raise HandlerError(-32600, "no forms here")


async def stats(conn: ServerConnection, task_id: str) -> dict[str, int]:
    return json.loads((await conn.mcp.call_tool("stats", {"taskId": task_id})).text)


@TRANSPORTS
async def test_a_task_that_completes_after_three_polls_gives_the_tool_result(
    transport: str, http_port: int
) -> None:
    seen: list[Task] = []
    async with tasks_server(transport, http_port) as conn:
        with anyio.fail_after(TIMEOUT):
            result = await conn.mcp.call_tool("count", {"polls": 3}, task=True, on_task=seen.append)
            assert isinstance(result, CallToolResult) and result.text == "counted 3"
            assert [t.status for t in seen] == ["working", "working", "working", "completed"]
            assert len({t.task_id for t in seen}) == 1
            assert await stats(conn, seen[0].task_id) == {"gets": 3, "updates": 0, "cancels": 0}


@TRANSPORTS
async def test_the_extension_is_declared_only_when_the_caller_asks_for_a_task(
    transport: str, http_port: int
) -> None:
    async with tasks_server(transport, http_port) as conn:
        with anyio.fail_after(TIMEOUT):
            # Undeclared: the server runs the tool at once (it decides), or refuses with -32021.
            assert (await conn.mcp.call_tool("count", {"polls": 3})).text == "counted 0 (no task)"
            with pytest.raises(RemoteError) as refused:
                await conn.mcp.call_tool("slow")
            assert refused.value.code == -32021


@TRANSPORTS
async def test_a_task_that_needs_input_is_answered_with_tasks_update(transport: str, http_port: int) -> None:
    elicitor = Elicitor()
    async with tasks_server(transport, http_port, handlers=HostHandlers(elicitation=elicitor)) as conn:
        with anyio.fail_after(TIMEOUT):
            seen: list[Task] = []
            result = await conn.mcp.call_tool("ask_name", task=True, on_task=seen.append)
            assert result.text == "Hello, Ada Lovelace!"
            assert [r.message for r in elicitor.requests] == ["Please enter your name."]  # asked once
            assert "input_required" in [t.status for t in seen]
            assert (await stats(conn, seen[0].task_id))["updates"] == 1


@TRANSPORTS
async def test_a_refused_input_request_cancels_the_task(transport: str, http_port: int) -> None:
    async with tasks_server(transport, http_port, handlers=HostHandlers(elicitation=Refusing())) as conn:
        with anyio.fail_after(TIMEOUT):
            started = await conn.mcp.start_tool_task("ask_name")
            assert isinstance(started, Task)
            with pytest.raises(InputRefused, match="no forms here"):
                await conn.mcp.wait_task(started)
            assert (await conn.mcp.get_task(started.task_id)).status == "cancelled"


@TRANSPORTS
async def test_a_cancelled_task_ends_cancelled(transport: str, http_port: int) -> None:
    async with tasks_server(transport, http_port) as conn:
        with anyio.fail_after(TIMEOUT):
            started = await conn.mcp.start_tool_task("slow")
            assert isinstance(started, Task) and started.status == "working"
            await conn.mcp.cancel_task(started.task_id)
            ended = await conn.mcp.wait_task(started.task_id)
            assert ended.status == "cancelled" and ended.status_message == "cancelled at the client's request"
            with pytest.raises(TaskCancelled):
                await conn.mcp.task_tool_result(ended, "slow")


@TRANSPORTS
async def test_a_failed_task_raises_its_json_rpc_error(transport: str, http_port: int) -> None:
    async with tasks_server(transport, http_port) as conn:
        with anyio.fail_after(TIMEOUT), pytest.raises(TaskFailed) as failed:
            await conn.mcp.call_tool("fail", task=True)
        assert (failed.value.code, failed.value.message) == (-32603, "the tool broke")


@TRANSPORTS
async def test_an_unknown_task_is_the_servers_invalid_params(transport: str, http_port: int) -> None:
    async with tasks_server(transport, http_port) as conn:
        with anyio.fail_after(TIMEOUT), pytest.raises(RemoteError) as unknown:
            await conn.mcp.get_task("no-such-task")
        assert unknown.value.code == -32602


@TRANSPORTS
async def test_a_status_notification_ends_the_wait_without_a_poll(transport: str, http_port: int) -> None:
    # The notify task asks for a poll an hour away and the host may wait ten minutes: only its
    # notifications/tasks can end the wait within the test's deadline.
    slow_polls = Limits(task_poll_max_seconds=600.0, close_grace_seconds=1.0)
    async with tasks_server(transport, http_port, limits=slow_polls) as conn:
        with anyio.fail_after(TIMEOUT):
            seen: list[Task] = []
            result = await conn.mcp.call_tool("notify", task=True, on_task=seen.append)
            assert result.text == "notified"
            assert [t.status for t in seen] == ["working", "completed"]
            assert (await stats(conn, seen[0].task_id))["gets"] == 0


@TRANSPORTS
async def test_malformed_status_notifications_are_not_taken_and_the_wait_goes_on(
    transport: str, http_port: int
) -> None:
    slow_polls = Limits(task_poll_max_seconds=600.0, close_grace_seconds=1.0)
    async with tasks_server(transport, http_port, limits=slow_polls) as conn:
        with anyio.fail_after(TIMEOUT):
            seen: list[Task] = []
            result = await conn.mcp.call_tool("bad_notify", task=True, on_task=seen.append)
            assert result.text == "notified"
            assert [t.status for t in seen] == ["working", "completed"]


async def test_the_task_calls_need_the_stateless_era() -> None:
    config = ServerConfig(command=sys.executable, args=(str(FIXTURES / "demo_server.py"),), limits=FAST)
    async with connect(config) as conn:
        assert conn.era == "handshake"
        with pytest.raises(LocalProtocolError, match="handshake era"):
            await conn.mcp.get_task("t1")
        with pytest.raises(LocalProtocolError, match="handshake era"):
            await conn.mcp.start_tool_task("echo", {"text": "x"})


# -- the command line: call --async, task get | cancel | list, each a new process -----------------


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a new (forked) process whose task store is under ``tmp_path``."""
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path)}
    return forkserver.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT)


def stored(tmp_path: Path) -> list[dict[str, Any]]:
    return json.loads((tmp_path / "mcpl-host" / "tasks.json").read_text(encoding="utf-8"))["tasks"]


def test_a_task_started_by_one_process_is_waited_for_by_another(tmp_path: Path, http_port: int) -> None:
    server = ["--url", f"http://127.0.0.1:{http_port}/mcp"]
    started = cli(tmp_path, "call", "--async", "--text", "count", "polls=2", *server)
    assert started.returncode == 0, started.stderr
    task_id = started.stdout.strip()
    assert [(e["taskId"], e["tool"], e["status"]) for e in stored(tmp_path)] == [
        (task_id, "count", "working")
    ]
    assert (tmp_path / "mcpl-host" / "tasks.json").stat().st_mode & 0o777 == 0o600
    waited = cli(tmp_path, "task", "get", "--wait", "--text", task_id, *server)
    assert (waited.returncode, waited.stdout) == (0, "counted 2\n"), waited.stderr
    assert [(e["taskId"], e["tool"], e["status"]) for e in stored(tmp_path)] == [
        (task_id, "count", "completed")
    ]
    listed = cli(tmp_path, "task", "list", "--json")
    assert [e["taskId"] for e in json.loads(listed.stdout)["tasks"]] == [task_id]


def test_a_stdio_server_that_keeps_its_tasks_is_asked_again_after_a_restart(tmp_path: Path) -> None:
    server = ["--", sys.executable, str(TASKS_SERVER), "--state", str(tmp_path / "server-state.json")]
    started = cli(tmp_path, "call", "--async", "fail", *server)
    assert started.returncode == 0, started.stderr
    task = json.loads(started.stdout)
    assert task["status"] == "working" and "resultType" not in task
    failed = cli(tmp_path, "task", "get", "--wait", task["taskId"], *server)
    assert failed.returncode == 1 and "the task failed: the tool broke" in failed.stderr
    assert json.loads(failed.stdout)["error"] == {"code": -32603, "message": "the tool broke"}


def test_task_cancel_prints_the_cancelled_task(tmp_path: Path, http_port: int) -> None:
    server = ["--url", f"http://127.0.0.1:{http_port}/mcp"]
    task_id = cli(tmp_path, "call", "--async", "--text", "slow", *server).stdout.strip()
    cancelled = cli(tmp_path, "task", "cancel", task_id, *server)
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout)["status"] == "cancelled"
    assert stored(tmp_path)[0]["status"] == "cancelled"


def test_a_task_the_server_does_not_know_leaves_the_store(tmp_path: Path, http_port: int) -> None:
    server = ["--url", f"http://127.0.0.1:{http_port}/mcp"]
    task_id = cli(tmp_path, "call", "--async", "--text", "slow", *server).stdout.strip()
    elsewhere = ["--", sys.executable, str(TASKS_SERVER)]  # a server without the task
    unknown = cli(tmp_path, "task", "get", task_id, *elsewhere)
    assert unknown.returncode == 1 and json.loads(unknown.stdout)["error"]["code"] == -32602
    assert "no longer keeps this task" in unknown.stderr
    assert stored(tmp_path) == []


def test_call_async_against_a_handshake_era_server_is_a_usage_error(tmp_path: Path) -> None:
    done = cli(
        tmp_path, "call", "--async", "echo", "text=hi", "--", sys.executable, str(FIXTURES / "demo_server.py")
    )
    assert done.returncode == 2 and done.stdout == ""
    assert "handshake era" in done.stderr and "nothing was sent" in done.stderr


async def test_a_waited_task_keeps_nothing_of_the_input_it_sent_while_it_polls(tmp_path: Path) -> None:
    # Once tasks/update has carried the responses to a task's input requests, the wait holds
    # nothing of them while it polls on: an 8 MiB form answer is freed at once, not kept
    # until the task ends (or next asks for input).
    from .memory import kept_bytes
    from .test_stateless import STATELESS_OPENING
    from .wire import Script, TestHandlers, mark

    big = 8 * 2**20
    form = {"mode": "form", "message": "name?", "requestedSchema": {"type": "object"}}
    asking = {
        **WORKING,
        "status": "input_required",
        "inputRequests": {"who": {"method": "elicitation/create", "params": form}},
    }
    script = Script(
        tmp_path,
        [
            *STATELESS_OPENING,
            {"expect": {"method": "tools/call"}},
            {"reply": {**asking, "resultType": "task"}},
            {"wait_for": {"method": "tasks/update"}},
            {"reply": {"resultType": "complete"}},
            mark("updated"),
            {"wait_for": {"method": "test/never"}, "timeout": 60},  # the task never ends
        ],
    )

    class BigAnswer(Elicitor):
        async def elicit(self, context: RequestContext, request: ElicitationRequest) -> ElicitationResult:
            return ElicitationResult("accept", {"name": "x" * big})

    class Handlers(TestHandlers):
        def __init__(self) -> None:
            super().__init__()
            HostHandlers.__init__(self, elicitation=BigAnswer())

    handlers = Handlers()
    with anyio.fail_after(TIMEOUT):
        async with script.connect(handlers=handlers) as conn:
            async with anyio.create_task_group() as tg:
                with kept_bytes() as kept:
                    tg.start_soon(lambda: conn.mcp.call_tool("t", task=True))
                    await handlers.mark("updated").wait()
                    await anyio.wait_all_tasks_blocked()  # the wait polling on
                tg.cancel_scope.cancel()
    assert kept.bytes < 2**20, f"{kept.bytes} bytes kept after the input was sent"

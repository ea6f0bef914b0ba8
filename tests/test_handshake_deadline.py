"""Deadlines that bind: every step of opening a connection sits under the one handshake
deadline (``Limits.handshake_timeout_seconds``), on every transport, and a step that hangs
fails the connect with a sentence naming it (docs/protocol.md H7).

Steps and transports: ``notifications/initialized`` never accepted (Streamable HTTP and
HTTP+SSE: ``fixtures/http_bridge.py --hold-post``), the WebSocket opening handshake never
answered and the HTTP+SSE ``endpoint`` event never sent (loopback listeners that accept and
say nothing), the initial MCPL ``featureSets/update`` never answered (stdio and WebSocket:
the scripted server). Each bound the test sets elsewhere is far above the deadline, so only
the deadline can end the wait; the tests' own ``fail_after`` only stops a hang.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import pytest

from mcpl_host import GrantPolicy, InitializeError, Limits, ServerConfig, connect
from mcpl_host.mcpl.policy_state import MCPLState

from . import forkserver
from .conftest import FIXTURES
from .wire import MCPL_RESULT, SCRIPTED, Script, port_line, stop_server_process

pytestmark = pytest.mark.anyio

TIMEOUT = 60  # stops a hang; far above every deadline below
BRIDGE = FIXTURES / "http_bridge.py"
WS_BRIDGE = FIXTURES / "ws_bridge.py"
SERVER = [sys.executable, str(FIXTURES / "unknown_first_server.py"), "exit0"]
CLI = [sys.executable, "-m", "mcpl_host.cli"]
#: Only the handshake deadline is short.
SHORT = Limits(
    handshake_timeout_seconds=2.0,
    request_timeout_seconds=600.0,
    http_reply_timeout_seconds=600.0,
    websocket_open_timeout_seconds=600.0,
    close_grace_seconds=1.0,
    terminate_grace_seconds=1.0,
)


@asynccontextmanager
async def process_with_port(argv: list[str]) -> AsyncIterator[int]:
    process = await anyio.open_process(argv, start_new_session=True, stderr=None)
    try:
        yield await port_line(process)
    finally:
        await stop_server_process(process)


@asynccontextmanager
async def silent_listener() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A loopback TCP listener that reads what comes and never answers (a WebSocket upgrade
    left unanswered); yields its port and what it read."""
    received: list[bytes] = []

    async def serve(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            try:
                while True:
                    received.append(await stream.receive())
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        yield port, received
        tg.cancel_scope.cancel()


@asynccontextmanager
async def stream_without_endpoint() -> AsyncIterator[int]:
    """A loopback HTTP server whose GET opens an event stream and never sends an event."""

    async def serve(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            try:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += await stream.receive()
                await stream.send(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\r\n"
                )
                while True:
                    await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        yield listener.extra(anyio.abc.SocketAttribute.local_port)
        tg.cancel_scope.cancel()


# --- notifications/initialized never accepted ------------------------------------------------


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
async def test_an_initialized_post_never_accepted_fails_the_connect_at_the_deadline_naming_it(
    transport: str,
) -> None:
    legacy = ["--legacy"] if transport == "sse" else ["--json"]
    argv = [sys.executable, str(BRIDGE), *legacy, "--hold-post", "notifications/initialized", "--", *SERVER]
    with anyio.fail_after(TIMEOUT):
        async with process_with_port(argv) as port:
            url = f"http://127.0.0.1:{port}/mcp"
            with pytest.raises(InitializeError) as caught:
                async with connect(ServerConfig(url=url, transport=transport, limits=SHORT)):  # type: ignore[arg-type]
                    pass
    message = str(caught.value)
    assert "notifications/initialized" in message and "within 2 seconds" in message
    assert "tools/list" not in message


def test_probe_blames_notifications_initialized_not_tools_list() -> None:
    argv = [sys.executable, str(BRIDGE), "--json", "--hold-post", "notifications/initialized", "--", *SERVER]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.PIPE, start_new_session=True)
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline().split()[1])
        done = forkserver.run(
            [*CLI, "probe", "--timeout", "3", "--url", f"http://127.0.0.1:{port}/mcp"],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env={**os.environ, "COLUMNS": "240"},
        )
    finally:
        process.terminate()
        process.wait(TIMEOUT)
    assert done.returncode != 0
    assert "notifications/initialized within 3 seconds" in done.stderr + done.stdout
    assert "tools/list" not in done.stderr + done.stdout


# --- opening the transport -------------------------------------------------------------------


async def test_a_websocket_upgrade_never_answered_ends_at_the_handshake_deadline() -> None:
    with anyio.fail_after(TIMEOUT):
        async with silent_listener() as (port, received):
            with pytest.raises(InitializeError) as caught:
                async with connect(ServerConfig(url=f"ws://127.0.0.1:{port}/", limits=SHORT)):
                    pass
    assert b"Upgrade: websocket" in b"".join(received) or b"upgrade: websocket" in b"".join(received).lower()
    assert "no WebSocket handshake within 2 seconds" in str(caught.value)


async def test_an_sse_stream_without_an_endpoint_event_ends_at_the_handshake_deadline() -> None:
    with anyio.fail_after(TIMEOUT):
        async with stream_without_endpoint() as port:
            with pytest.raises(InitializeError) as caught:
                async with connect(
                    ServerConfig(url=f"http://127.0.0.1:{port}/sse", transport="sse", limits=SHORT)
                ):
                    pass
    assert "sent no endpoint event within 2 seconds" in str(caught.value)


# --- the initial MCPL policy exchange ----------------------------------------------------------

UNANSWERED_POLICY = [
    {"expect": {"method": "initialize"}},
    {"reply": MCPL_RESULT},
    {"expect": {"method": "notifications/initialized"}},
    {"expect": {"method": "featureSets/update"}},
    {"hang": True},
]


async def test_an_unanswered_policy_request_over_stdio_ends_at_the_handshake_deadline(tmp_path: Path) -> None:
    script = Script(tmp_path, UNANSWERED_POLICY)
    with anyio.fail_after(TIMEOUT):
        async with script.connect(limits=SHORT, grant_policy=GrantPolicy(grant=("pushEvents",))) as conn:
            state = conn.mcpl_state
    assert state is MCPLState.MCP_ONLY


async def test_an_unanswered_policy_request_over_websocket_ends_at_the_handshake_deadline(
    tmp_path: Path,
) -> None:
    script = Script(tmp_path, UNANSWERED_POLICY)
    command = [sys.executable, str(SCRIPTED), str(script.path), str(script.record_path)]
    with anyio.fail_after(TIMEOUT):
        async with process_with_port([sys.executable, str(WS_BRIDGE), "--", *command]) as port:
            policy = GrantPolicy(grant=("pushEvents",))
            async with connect(
                ServerConfig(url=f"ws://127.0.0.1:{port}/", limits=SHORT, grant_policy=policy)
            ) as conn:
                state = conn.mcpl_state
    assert state is MCPLState.MCP_ONLY

"""WebSocketTransport and connect() of a WebSocket ServerConfig against a real WebSocket server on loopback.

The server is ``fixtures/ws_bridge.py`` (the ``websockets`` package) bridging each WebSocket
to a stdio fixture server: ``demo_server.py`` or ``scripted_server.py``. Every test runs on
asyncio and trio. Rules under test: docs/protocol.md, "WebSocket" (one message per text
frame out, several per frame in; no redirect followed, MCPL RFC-004 §7; credentials never in
a log line, an error or a shown URL); the message bound equal to the stdio line bound; a
close from either side, a dropped connection or a missed keepalive pong failing pending
requests at once. Synchronisation is by events and ``fail_after`` only; the bridge process
and its children are stopped and reaped after each test.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tracemalloc
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from mcpl_host import (
    ConnectionClosed,
    ConnectionLost,
    GrantPolicy,
    HostHandlers,
    InitializeError,
    Limits,
    RequestContext,
    ServerConfig,
    connect,
)
from mcpl_host.jsonrpc.framing import dumps_message, loads_line
from mcpl_host.transports import websocket
from mcpl_host.transports.base import Transport
from mcpl_host.transports.websocket import (
    WebSocketParameters,
    WebSocketTransport,
    is_loopback_host,
    sends_cleartext_credential,
    shown_url,
)

from . import wire
from .conftest import FIXTURES
from .wire import MCP_HANDSHAKE, SCRIPTED, Script, TestHandlers, mark, open_server_process, port_line

# Every test here captures its log events (tests/conftest.py ``logs``).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("logs")]

#: Seconds: a generous bound on anything that should be prompt.
TIMEOUT = 15
#: Seconds: the bound on "at once" (far below any request timeout in these tests).
AT_ONCE = 5
SECRET = "s3cr3t-ws-token-value"
BRIDGE = FIXTURES / "ws_bridge.py"
DEMO = FIXTURES / "demo_server.py"
FAST = Limits(close_grace_seconds=1.0, terminate_grace_seconds=1.0, handshake_timeout_seconds=10.0)


assert_no_secret = functools.partial(wire.assert_no_secret, SECRET)


# -- the bridge process ---------------------------------------------------------------------


@dataclass
class Bridge:
    process: anyio.abc.Process
    port: int

    def url(self, path: str = "/mcp") -> str:
        return f"ws://127.0.0.1:{self.port}{path}"

    def signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signum)


@contextlib.asynccontextmanager
async def bridge(
    *options: str, command: list[str], env: dict[str, str] | None = None
) -> AsyncIterator[Bridge]:
    """Run ws_bridge.py with ``options -- command``; stop it (and its children) and reap
    it on exit, whatever state the test left it in (stopped, killed)."""
    process = await open_server_process([sys.executable, str(BRIDGE), *options, "--", *command], env=env)
    try:
        yield Bridge(process, await port_line(process, TIMEOUT))
    finally:
        with anyio.CancelScope(shield=True):
            handle = Bridge(process, 0)
            handle.signal_group(signal.SIGCONT)  # in case a test stopped it
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.terminate()
            with anyio.move_on_after(TIMEOUT):
                await process.wait()
            handle.signal_group(signal.SIGKILL)  # anything left in its group
            await process.wait()
            await process.aclose()


def scripted(script: Script) -> list[str]:
    return [sys.executable, str(SCRIPTED), str(script.path), str(script.record_path)]


def frames(path: Path, to: str) -> list[str]:
    rows = [json.loads(row) for row in path.read_text().splitlines() if row]
    return [row["frame"] for row in rows if row["to"] == to]


class PushHandlers(HostHandlers):
    """Counts accepted push events; ``pushed`` is set after ``wanted`` of them."""

    def __init__(self, wanted: int) -> None:
        self.wanted = wanted
        self.events: list[dict[str, Any]] = []
        self.pushed = anyio.Event()

    async def push_event(self, context: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        self.events.append(params)
        if len(self.events) >= self.wanted:
            self.pushed.set()
        return {"accepted": True}


# -- parameters, shown URL, cleartext check (no network) ---------------------------------


def test_parameters_refuse_bad_urls_without_showing_secrets() -> None:
    bad = {
        "http://127.0.0.1/x": "scheme",
        f"ws://user:{SECRET}@127.0.0.1/": "user-info",
        "ws://127.0.0.1/x#frag": "fragment",
        "ws:///nohost": "no host",
        "ws://127.0.0.1:99999/": "cannot be parsed",
    }
    for url, words in bad.items():
        with pytest.raises(ValueError, match=words) as info:
            WebSocketParameters(url)
        assert SECRET not in str(info.value)
    with pytest.raises(ValueError, match="both in the URL and as token=") as info:
        WebSocketParameters(f"ws://127.0.0.1/?token={SECRET}", token=SECRET, token_in="query")
    assert SECRET not in str(info.value)
    with pytest.raises(ValueError, match="NUL, CR or LF") as info:
        WebSocketParameters("ws://127.0.0.1/", headers={"X-Key": f"{SECRET}\r\nX-Evil: 1"})
    assert SECRET not in str(info.value)
    with pytest.raises(ValueError, match="set by the WebSocket handshake"):
        WebSocketParameters("ws://127.0.0.1/", headers={"Sec-WebSocket-Key": "x"})
    with pytest.raises(ValueError, match="Authorization header"):
        WebSocketParameters(
            "ws://127.0.0.1/", token=SECRET, token_in="header", headers={"authorization": "Basic x"}
        )
    with pytest.raises(ValueError, match="token_in"):
        WebSocketParameters("ws://127.0.0.1/", token=SECRET, token_in="cookie")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="keepalive_interval_seconds"):
        WebSocketParameters("ws://127.0.0.1/", keepalive_interval_seconds=0)


def test_shown_url_and_secrets() -> None:
    url = f"wss://h.example:8443/a/b?x=1&token={SECRET}&TOKEN=t%2Bwo&%74oken=3rd-one&y=a%20b&z"
    assert shown_url(url) == (
        "wss://h.example:8443/a/b?x=1&token=[redacted]&TOKEN=[redacted]&%74oken=[redacted]&y=a%20b&z"
    )
    params = WebSocketParameters(url, headers={"X-Api-Key": "header-secret"})
    assert {SECRET, "t%2Bwo", "t+wo", "3rd-one", "header-secret"} <= set(params.secrets())
    with_token = WebSocketParameters("ws://127.0.0.1/", token="a b/c+d")
    assert {"a b/c+d", "a%20b%2Fc%2Bd"} <= set(with_token.secrets())
    assert shown_url("ws://[::1]:9/p?q") == "ws://[::1]:9/p?q"
    assert shown_url("not a url \x00 at all").startswith(("<", "not"))


def test_cleartext_credential_check() -> None:
    for host in (
        "127.0.0.1",
        "127.3.2.1",
        "[::1]",
        "localhost",
        "LOCALHOST",
        "a.localhost",
        "[::ffff:127.0.0.1]",
    ):
        assert is_loopback_host(host), host
    for host in ("192.0.2.1", "example.com", "[2001:db8::1]", "10.0.0.1", "localhost.example.com"):
        assert not is_loopback_host(host), host
    assert sends_cleartext_credential(WebSocketParameters("ws://192.0.2.1:9/", token=SECRET))
    assert sends_cleartext_credential(WebSocketParameters(f"ws://example.com/?token={SECRET}"))
    assert sends_cleartext_credential(WebSocketParameters("ws://example.com/", headers={"X-Key": "v"}))
    assert not sends_cleartext_credential(WebSocketParameters("wss://192.0.2.1:9/", token=SECRET))
    assert not sends_cleartext_credential(WebSocketParameters("ws://192.0.2.1:9/"))
    assert not sends_cleartext_credential(WebSocketParameters("ws://127.0.0.1:9/", token=SECRET))


async def test_cleartext_credential_warned_before_dialling(
    monkeypatch: pytest.MonkeyPatch, logs: list[dict[str, Any]]
) -> None:
    # Never dial a non-loopback address from a test: the dialler is replaced, and it
    # records whether the warning had been logged when it was called.
    dialled: list[tuple[Any, bool]] = []

    async def refuse(host: Any, port: Any, **kwargs: Any) -> Any:
        dialled.append(((host, port), any("cleartext" in entry["event"] for entry in logs)))
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(websocket, "_connect_tcp", refuse)
    conn = connect(
        ServerConfig(
            url="ws://192.0.2.1:9/mcp",
            token=SECRET,
            limits=dataclasses.replace(FAST, websocket_open_timeout_seconds=0.5),
        )
    )
    with anyio.fail_after(AT_ONCE), pytest.raises(InitializeError) as info:
        async with conn:
            pass
    assert dialled == [(("192.0.2.1", 9), True)]
    warnings = [entry for entry in logs if "cleartext" in entry["event"]]
    assert len(warnings) == 1 and warnings[0]["log_level"] == "warning"
    assert warnings[0]["url"] == "ws://192.0.2.1:9/mcp"
    assert "could not connect to ws://192.0.2.1:9/mcp (Connection refused)" in str(info.value)
    assert_no_secret(logs, str(info.value), repr(conn))


# -- against the demo server ------------------------------------------------------------


async def test_demo_server_handshake_tools_and_push_events(logs: list[dict[str, Any]]) -> None:
    env = {"DEMO_PUSH_INTERVAL": "0.2", "DEMO_PUSH_COUNT": "5"}
    handlers = PushHandlers(wanted=5)
    # The server pings too, every 50 ms, and closes the WebSocket if a pong is 0.5 s late.
    options = ("--ping-interval", "0.05", "--ping-timeout", "0.5")
    async with bridge(*options, command=[sys.executable, str(DEMO)], env=env) as server:
        conn = connect(
            ServerConfig(
                url=server.url(),
                grant_policy=GrantPolicy(grant_all_advertised=True),
                limits=dataclasses.replace(
                    FAST, websocket_keepalive_interval_seconds=0.05, websocket_keepalive_timeout_seconds=0.5
                ),
            ),
            handlers=handlers,
        )
        with anyio.fail_after(TIMEOUT):
            async with conn:
                assert conn.mcpl_state.value == "ready"
                assert conn.grant is not None and "pushEvents" in conn.grant.paths
                assert [tool.name for tool in await conn.mcp.list_tools()] == ["echo", "add", "now"]
                result = await conn.mcp.call_tool("add", {"a": 2, "b": 3})
                assert result.content[0]["text"] == "5"
                # Meanwhile (1 s or more) a ping goes out every 50 ms each way; a ping not
                # answered, or a pong not taken for its ping, would end it within 0.55 s.
                await handlers.pushed.wait()
                assert conn.is_open
                assert conn.connection.stderr_tail == []
                assert conn.connection.pid is None  # not a server the host started
    assert [event["eventId"] for event in handlers.events] == [f"tick-{n}" for n in range(1, 6)]
    assert isinstance(await conn.wait_closed(), ConnectionClosed)


async def test_binary_frame_is_dropped_with_a_log_line(logs: list[dict[str, Any]]) -> None:
    async with bridge("--binary-first", command=[sys.executable, str(DEMO)]) as server:
        with anyio.fail_after(TIMEOUT):
            async with connect(ServerConfig(url=server.url(), limits=FAST)) as conn:
                assert len(await conn.mcp.list_tools()) == 3
    dropped = [entry for entry in logs if entry["event"].startswith("binary WebSocket message dropped")]
    assert len(dropped) == 1
    assert dropped[0]["log_level"] == "warning" and dropped[0]["first_frame_bytes"] == 8


async def test_server_closing_mid_request_fails_the_call_at_once(logs: list[dict[str, Any]]) -> None:
    async with bridge("--close-on", "tools/call", command=[sys.executable, str(DEMO)]) as server:
        conn = connect(ServerConfig(url=server.url(), limits=FAST))
        with anyio.fail_after(TIMEOUT):
            async with conn:
                with anyio.fail_after(AT_ONCE), pytest.raises(ConnectionLost) as info:
                    await conn.mcp.call_tool("echo", {"text": "x"}, timeout=60)
                assert not conn.is_open
                lost = await conn.wait_closed()
                with pytest.raises(ConnectionLost):
                    await conn.mcp.list_tools()
    message = str(info.value)
    assert message == "the server closed the WebSocket (code 1011, reason close-on tools/call)"
    assert str(lost) == message


async def test_transport_send_receive_and_close(logs: list[dict[str, Any]]) -> None:
    async with bridge(command=[sys.executable, str(DEMO)]) as server:
        # A long keepalive interval: aclose() must not wait for the keepalive task's sleep.
        params = WebSocketParameters(server.url("/direct"), keepalive_interval_seconds=60)
        baseline = len(anyio.get_running_tasks())
        with anyio.fail_after(TIMEOUT):
            async with WebSocketTransport(params) as transport:
                assert isinstance(transport, Transport)
                assert transport.describe() == server.url("/direct")
                assert repr(transport).endswith("open buffered=0>")
                assert len(anyio.get_running_tasks()) == baseline + 1  # the keepalive task
                init = {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "t", "version": "0"},
                    },
                }
                ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
                await transport.send(dumps_message(init) + dumps_message(ping))
                answers = [loads_line(await transport.receive()) for _ in range(2)]
                assert [answer["id"] for answer in answers] == [1, 2]
                assert answers[1]["result"] == {}

                outcome: list[BaseException] = []

                async def blocked_reader() -> None:
                    try:
                        await transport.receive()
                    except (ConnectionClosed, ConnectionLost) as exc:
                        outcome.append(exc)

                # The server hangs: only closing our socket can wake the blocked reader.
                server.signal_group(signal.SIGSTOP)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(blocked_reader)
                    await anyio.wait_all_tasks_blocked()
                    with anyio.fail_after(AT_ONCE):
                        await transport.aclose()
                        await transport.aclose()  # idempotent
                assert len(outcome) == 1 and isinstance(outcome[0], ConnectionClosed)
                with pytest.raises(ConnectionClosed):
                    await transport.receive()
                with pytest.raises(ConnectionClosed):
                    await transport.send(dumps_message(ping))
                assert repr(transport).endswith("closed buffered=0>")
        assert len(anyio.get_running_tasks()) == baseline


# -- credentials --------------------------------------------------------------------------


@pytest.mark.parametrize("token_in", ["query", "header", "url"])
async def test_token_arrives_and_never_shows(
    token_in: str, tmp_path: Path, logs: list[dict[str, Any]]
) -> None:
    headers_log = tmp_path / "headers.jsonl"
    options = ("--require-token", SECRET, "--log-headers", str(headers_log))
    async with bridge(*options, command=[sys.executable, str(DEMO)]) as server:
        if token_in == "url":
            conn = connect(ServerConfig(url=server.url(f"/mcp?x=1&token={SECRET}"), limits=FAST))
        else:
            conn = connect(ServerConfig(url=server.url(), token=SECRET, token_in=token_in, limits=FAST))  # type: ignore[arg-type]
        with anyio.fail_after(TIMEOUT):
            async with conn:
                assert len(await conn.mcp.list_tools()) == 3
                shown = [repr(conn), conn.name]
        request = json.loads(headers_log.read_text().splitlines()[0])
        received = {name.lower(): value for name, value in request["headers"]}
        if token_in == "header":
            assert received["authorization"] == f"Bearer {SECRET}"
            assert request["path"] == "/mcp"
        else:
            assert "authorization" not in received
            assert f"token={SECRET}" in request["path"].split("?")[1].split("&")

        # A wrong token: refused with 401, and neither token shows in the error.
        wrong = connect(
            ServerConfig(url=server.url(), token="wrong-" + SECRET, token_in="header", limits=FAST)
        )
        with anyio.fail_after(TIMEOUT), pytest.raises(InitializeError) as info:
            async with wrong:
                pass
    assert str(info.value) == f"the server at {server.url()} refused the WebSocket upgrade with HTTP 401"
    assert any(entry["event"] == "WebSocket open" for entry in logs)
    if token_in == "url":
        transport = WebSocketTransport(WebSocketParameters(server.url(f"/mcp?x=1&token={SECRET}")))
    else:
        transport = WebSocketTransport(WebSocketParameters(server.url(), token=SECRET, token_in=token_in))  # type: ignore[arg-type]
    shown += [transport.describe(), repr(transport)]
    assert_no_secret(logs, str(info.value), repr(wrong), *shown)


async def test_redirect_is_not_followed(logs: list[dict[str, Any]]) -> None:
    options = ("--redirect-to", "ws://127.0.0.1:1/elsewhere")
    async with bridge(*options, command=[sys.executable, str(DEMO)]) as server:
        with anyio.fail_after(TIMEOUT), pytest.raises(InitializeError) as info:
            async with connect(ServerConfig(url=server.url(), token=SECRET, limits=FAST)):
                pass
    # To another origin: refused naming both (MCPL §18.6).
    assert f"answered HTTP 302, a redirect from ws://127.0.0.1:{server.port} to another origin, " in str(
        info.value
    )
    assert "ws://127.0.0.1:1; it is not followed" in str(info.value)
    assert_no_secret(logs, str(info.value))
    # Within the origin: not followed either.
    options = ("--redirect-to", "/elsewhere")
    async with bridge(*options, command=[sys.executable, str(DEMO)]) as server:
        with anyio.fail_after(TIMEOUT), pytest.raises(InitializeError) as info:
            async with connect(ServerConfig(url=server.url(), token=SECRET, limits=FAST)):
                pass
    assert "answered HTTP 302 (a redirect)" in str(info.value)
    assert "redirects are not followed" in str(info.value)


# -- framing ------------------------------------------------------------------------------


async def test_one_message_per_text_frame_out(tmp_path: Path) -> None:
    steps = [*MCP_HANDSHAKE, *({"expect": {"method": f"test/{n}"}} for n in range(4))]
    script = Script(tmp_path, steps)
    frames_log = tmp_path / "frames.jsonl"
    async with bridge("--log-frames", str(frames_log), command=scripted(script)) as server:
        with anyio.fail_after(TIMEOUT):
            async with connect(ServerConfig(url=server.url(), limits=FAST), handlers=TestHandlers()) as conn:
                for n in range(4):  # queued without a wait: the writer joins them in one send()
                    await conn.mcp.notify(f"test/{n}", {"n": n, "text": "a\nb"})
                await Script.finished(conn)
    sent = frames(frames_log, "child")
    assert len(sent) == 6  # initialize, notifications/initialized, test/0..3
    for frame in sent:
        assert "\n" not in frame
        assert isinstance(json.loads(frame), dict)
    assert sent == script.lines()
    assert [message.get("method") for message in script.messages()][2:] == [f"test/{n}" for n in range(4)]


async def test_several_messages_in_one_frame_in(tmp_path: Path) -> None:
    steps = [
        *MCP_HANDSHAKE,
        mark("a"),
        mark("b"),
        {"raw": ""},
        {"raw": "  \t"},
        mark("c"),
        {"send": {"jsonrpc": "2.0", "id": "p1", "method": "ping"}},
        {"send": {"jsonrpc": "2.0", "id": "p2", "method": "ping"}},
        {"wait_response": "p1", "expect_result": {}},
        {"wait_response": "p2", "expect_result": {}},
    ]
    script = Script(tmp_path, steps)
    frames_log = tmp_path / "frames.jsonl"
    options = ("--combine", "5", "--log-frames", str(frames_log))
    handlers = TestHandlers()
    async with bridge(*options, command=scripted(script)) as server:
        with anyio.fail_after(TIMEOUT):
            async with connect(ServerConfig(url=server.url(), limits=FAST), handlers=handlers) as conn:
                await Script.finished(conn)
                assert all(handlers.mark(name).is_set() for name in "abc")
    received = frames(frames_log, "client")
    assert any(len([line for line in frame.split("\n") if line.strip()]) > 1 for frame in received), received
    answers = [message for message in script.messages() if message.get("id") in ("p1", "p2")]
    assert [answer["id"] for answer in answers] == ["p1", "p2"]


# -- failures that must fail pending requests at once ---------------------------------------


async def test_oversize_message_fails_the_pending_request_at_once(
    tmp_path: Path, logs: list[dict[str, Any]]
) -> None:
    steps = [
        *MCP_HANDSHAKE,
        {"expect": {"method": "tools/call"}},
        {"reply": {"content": [{"type": "text", "text": "x" * 100_000}]}},
    ]
    script = Script(tmp_path, steps)
    limits = Limits(max_line_bytes=4096, close_grace_seconds=1.0, handshake_timeout_seconds=10.0)
    async with bridge(command=scripted(script)) as server:
        conn = connect(ServerConfig(url=server.url(), token=SECRET, limits=limits), handlers=TestHandlers())
        with anyio.fail_after(TIMEOUT):
            async with conn:
                with anyio.fail_after(AT_ONCE), pytest.raises(ConnectionLost) as info:
                    await conn.mcp.call_tool("big", timeout=60)
                assert isinstance(await conn.wait_closed(), ConnectionLost)
    assert str(info.value) == (
        "the server sent a WebSocket message over 4096 bytes "
        "(limits.max_line_bytes); the connection was closed"
    )
    assert_no_secret(logs, str(info.value))


async def test_dropped_connection_fails_the_pending_request_at_once(tmp_path: Path) -> None:
    script = Script(tmp_path, [*MCP_HANDSHAKE, {"expect": {"method": "tools/call"}}, mark("called")])
    handlers = TestHandlers()
    async with bridge(command=scripted(script)) as server:
        conn = connect(
            ServerConfig(
                url=server.url(), limits=dataclasses.replace(FAST, websocket_keepalive_interval_seconds=None)
            ),
            handlers=handlers,
        )
        outcome: list[BaseException] = []

        async def call() -> None:
            try:
                await conn.mcp.call_tool("slow", timeout=60)
            except ConnectionLost as exc:
                outcome.append(exc)

        with anyio.fail_after(TIMEOUT):
            async with conn, anyio.create_task_group() as tg:
                tg.start_soon(call)
                await handlers.mark("called").wait()
                with anyio.fail_after(AT_ONCE):
                    server.signal_group(signal.SIGKILL)  # no close frame: the TCP connection ends
                    await conn.wait_closed()
    assert len(outcome) == 1
    assert (
        str(outcome[0]) == f"the connection to {server.url()} dropped without a WebSocket close (code 1006)"
    )


async def test_our_close_mid_request_fails_the_call_at_once(tmp_path: Path) -> None:
    script = Script(tmp_path, [*MCP_HANDSHAKE, {"expect": {"method": "tools/call"}}, mark("called")])
    handlers = TestHandlers()
    async with bridge(command=scripted(script)) as server:
        conn = connect(ServerConfig(url=server.url(), limits=FAST), handlers=handlers)
        outcome: list[BaseException] = []

        async def call() -> None:
            try:
                await conn.mcp.call_tool("slow", timeout=60)
            except ConnectionClosed as exc:
                outcome.append(exc)

        with anyio.fail_after(TIMEOUT):
            async with conn, anyio.create_task_group() as tg:
                tg.start_soon(call)
                await handlers.mark("called").wait()
                with anyio.fail_after(AT_ONCE):
                    await conn.aclose()
    assert len(outcome) == 1
    assert isinstance(await conn.wait_closed(), ConnectionClosed)


async def test_missed_keepalive_pong_fails_requests_at_once(logs: list[dict[str, Any]]) -> None:
    async with bridge(command=[sys.executable, str(DEMO)]) as server:
        conn = connect(
            ServerConfig(
                url=server.url(),
                token=SECRET,
                limits=dataclasses.replace(
                    FAST, websocket_keepalive_interval_seconds=0.05, websocket_keepalive_timeout_seconds=0.3
                ),
            )
        )
        with anyio.fail_after(TIMEOUT):
            async with conn:
                server.signal_group(signal.SIGSTOP)  # the server hangs: the kernel still ACKs
                with anyio.fail_after(AT_ONCE), pytest.raises(ConnectionLost) as info:
                    await conn.mcp.list_tools()
    assert str(info.value) == (
        f"the server at {server.url()} did not answer a keepalive ping within 0.3 seconds"
    )
    assert_no_secret(logs, str(info.value))


async def test_server_gone_before_initialize_answer_fails_at_once(tmp_path: Path) -> None:
    script = Script(tmp_path, [{"expect": {"method": "initialize"}}, {"exit": 3}])
    async with bridge(command=scripted(script)) as server:
        with anyio.fail_after(AT_ONCE), pytest.raises(InitializeError) as info:
            async with connect(ServerConfig(url=server.url(), limits=FAST)):
                pass
    assert str(info.value) == (
        "the server went away before answering initialize "
        "(the server closed the WebSocket (code 1000, reason server exited))"
    )


# -- opening --------------------------------------------------------------------------------


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 and localhost, and its key (PEM paths)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
        timeout=TIMEOUT,
    )
    return str(cert), str(key)


async def test_wss_verifies_the_server(certificate: tuple[str, str], logs: list[dict[str, Any]]) -> None:
    cert, key = certificate
    async with bridge("--tls", cert, key, command=[sys.executable, str(DEMO)]) as server:
        url = f"wss://127.0.0.1:{server.port}/mcp"
        trusted = ssl.create_default_context(cafile=cert)
        with anyio.fail_after(TIMEOUT):
            async with connect(ServerConfig(url=url, token=SECRET, ssl_context=trusted, limits=FAST)) as conn:
                assert len(await conn.mcp.list_tools()) == 3
        # The system's CAs do not know this certificate.
        with anyio.fail_after(TIMEOUT), pytest.raises(InitializeError) as info:
            async with connect(ServerConfig(url=url, token=SECRET, limits=FAST)):
                pass
    assert str(info.value).startswith(f"could not connect to {url} (")
    assert "certificate verify failed" in str(info.value)
    assert not [entry for entry in logs if "cleartext" in entry["event"]]
    assert_no_secret(logs, str(info.value))


@contextlib.asynccontextmanager
async def silent_listener() -> AsyncIterator[tuple[int, anyio.Event]]:
    """A loopback TCP port that accepts connections and never answers."""
    accepted = anyio.Event()

    async def handle(stream: anyio.abc.SocketStream) -> None:
        accepted.set()
        async with stream:
            await anyio.sleep_forever()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        yield listener.extra(anyio.abc.SocketAttribute.local_port), accepted
        tg.cancel_scope.cancel()


async def test_open_timeout(logs: list[dict[str, Any]]) -> None:
    async with silent_listener() as (port, accepted):
        url = f"ws://127.0.0.1:{port}/mcp"
        params = WebSocketParameters(url, token=SECRET, open_timeout_seconds=0.3)
        with anyio.fail_after(AT_ONCE), pytest.raises(ConnectionLost) as info:
            async with WebSocketTransport(params):
                pass
        assert accepted.is_set()
        assert str(info.value) == f"could not open {url}: no WebSocket handshake within 0.3 seconds"

        conn = connect(
            ServerConfig(
                url=url, token=SECRET, token_in="header", limits=Limits(websocket_open_timeout_seconds=0.3)
            )
        )
        with anyio.fail_after(AT_ONCE), pytest.raises(InitializeError) as init_info:
            async with conn:
                pass
        assert str(init_info.value) == str(info.value)
    assert_no_secret(logs, str(info.value), str(init_info.value))


async def test_connection_refused() -> None:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    await listener.aclose()  # nothing listens there now
    params = WebSocketParameters(f"ws://127.0.0.1:{port}/", token=SECRET)
    with anyio.fail_after(AT_ONCE), pytest.raises(ConnectionLost) as info:
        async with WebSocketTransport(params):
            pass
    assert str(info.value).startswith(f"could not connect to ws://127.0.0.1:{port}/ (")
    assert SECRET not in str(info.value)


# -- permessage-deflate (RFC 7692): never offered, so a compressed frame cannot inflate ------


@contextlib.asynccontextmanager
async def raw_ws_server(extensions: str | None, first_frame: bytes) -> AsyncIterator[int]:
    """A loopback WebSocket server written by hand: it answers the upgrade with 101 (with
    ``Sec-WebSocket-Extensions: extensions`` when given, offered or not), sends
    ``first_frame`` as it is, then holds the connection."""
    import base64
    import hashlib

    async def handle(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            request = b""
            while b"\r\n\r\n" not in request:
                request += await stream.receive()
            key = next(
                line.split(b":", 1)[1].strip()
                for line in request.split(b"\r\n")
                if line.lower().startswith(b"sec-websocket-key:")
            )
            accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
            head = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            head += b"Sec-WebSocket-Accept: " + accept + b"\r\n"
            if extensions is not None:
                head += b"Sec-WebSocket-Extensions: " + extensions.encode() + b"\r\n"
            await stream.send(head + b"\r\n" + first_frame)
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                while await stream.receive():
                    pass

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        yield listener.extra(anyio.abc.SocketAttribute.local_port)
        tg.cancel_scope.cancel()


def _deflate_frame(size: int) -> bytes:
    """A text frame with RSV1 set (compressed, RFC 7692 §6) whose payload inflates to
    ``size`` bytes."""
    import zlib

    squeezer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    payload = squeezer.compress(b"a" * size) + squeezer.flush(zlib.Z_SYNC_FLUSH)
    assert len(payload) < 2**16
    return bytes([0xC1, 126]) + len(payload).to_bytes(2, "big") + payload


async def test_the_handshake_offers_no_permessage_deflate(tmp_path: Path) -> None:
    headers_log = tmp_path / "headers.jsonl"
    script = Script(tmp_path, [*MCP_HANDSHAKE])
    command = [sys.executable, str(SCRIPTED), str(script.path), str(script.record_path)]
    async with bridge("--log-headers", str(headers_log), command=command) as server:
        with anyio.fail_after(TIMEOUT):
            async with connect(ServerConfig(url=server.url(), limits=FAST)):
                pass
    names = [
        name.lower()
        for row in map(json.loads, headers_log.read_text().splitlines())
        for name, _ in row["headers"]
    ]
    assert "sec-websocket-key" in names and "sec-websocket-extensions" not in names


async def test_a_compressed_frame_or_an_extension_not_offered_loses_the_transport() -> None:
    """A 64 MiB deflate bomb in a frame with RSV1 set is refused unread (no extension was
    negotiated: RFC 6455 §5.2), and so is a 101 that accepts an extension not offered; the
    host's traced memory stays small."""
    import tracemalloc

    bomb = _deflate_frame(64 * 1024 * 1024)
    for extensions, frame in (("permessage-deflate", b""), (None, bomb)):
        async with raw_ws_server(extensions, frame) as port:
            params = WebSocketParameters(f"ws://127.0.0.1:{port}/mcp", open_timeout_seconds=AT_ONCE)
            tracemalloc.start()
            try:
                with anyio.fail_after(TIMEOUT), pytest.raises(ConnectionLost):
                    async with WebSocketTransport(params, limits=FAST) as transport:
                        while True:
                            await transport.receive()
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
        assert peak < 8 * 1024 * 1024


async def test_a_message_in_fragments_of_two_characters_costs_what_it_costs_whole(tmp_path: Path) -> None:
    """A 64 KiB answer as 32,768 WebSocket fragments (RFC 6455 §5.4): kept as one bytes
    object each until the last, it peaked at 4.0 MiB traced, against 0.9 MiB sent in one
    frame (some 1.3 GiB at the default ``max_line_bytes``). Small fragments are gathered
    into one buffer (``framing.gather``)."""

    async def peak(*options: str) -> int:
        pad = "a" * (64 * 1024)
        script = Script(
            tmp_path,
            [*MCP_HANDSHAKE, {"expect": {"method": "tools/list"}}, {"reply": {"tools": [], "pad": pad}}],
        )
        async with bridge(*options, command=scripted(script)) as server:
            with anyio.fail_after(120):
                async with connect(ServerConfig(url=server.url(), limits=FAST)) as conn:
                    tracemalloc.start()
                    try:
                        assert await conn.mcp.list_tools() == []
                        return tracemalloc.get_traced_memory()[1]
                    finally:
                        tracemalloc.stop()

    whole = await peak()
    fragmented = await peak("--fragment", "2")
    assert fragmented < whole * 1.3, (
        f"{fragmented / 2**20:.1f} MiB in fragments, {whole / 2**20:.1f} MiB whole"
    )

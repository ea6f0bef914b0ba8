"""The HTTP transports (Streamable HTTP, HTTP+SSE, the fallback) against real HTTP servers
on loopback.

Servers: ``fixtures/http_bridge.py`` (stdlib; bridges each session to a stdio fixture
server, misbehaving on demand and logging every HTTP request it gets), a listener in the
test that accepts and never answers, ``fixtures/sdk_http_server.py`` (the MCP Python SDK
under uvicorn), and ``@modelcontextprotocol/server-everything`` in its ``streamableHttp``
and ``sse`` modes when ``MCPL_TEST_SERVER_EVERYTHING`` names it (``.ci/run`` installs it).
Every async test runs on asyncio and trio. Rules under test: MCP 2025-11-25 "Transports"
§Streamable HTTP (POST per message, JSON or event-stream answers, session id, protocol
version header, GET stream, resumption, DELETE) and §Backwards Compatibility, MCP
2024-11-05 §HTTP with SSE, and the host's own: credentials never shown, redirects never
followed, every bound from ``Limits``, a clear sentence for each refusal.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from subprocess import PIPE
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest

from mcpl_host import (
    ConnectionLost,
    GrantPolicy,
    HostHandlers,
    InitializeError,
    Limits,
    RequestContext,
    RequestTimeout,
    connect,
)
from mcpl_host.auth.settings import OAuthSettings
from mcpl_host.config import ServerConfig
from mcpl_host.jsonrpc.framing import dumps_message, loads_line
from mcpl_host.transports.base import ReceivesNow, Transport
from mcpl_host.transports.event_stream import as_event
from mcpl_host.transports.http import StreamableHTTPTransport
from mcpl_host.transports.http_common import BodyTooLarge, sse_events
from mcpl_host.transports.http_params import (
    HTTPParameters,
    join_endpoint,
    refusal_message,
    sends_cleartext_credential,
    shown_http_url,
)
from mcpl_host.transports.http_sse import AutoHTTPTransport, SSETransport

from . import forkserver, wire
from .conftest import FIXTURES
from .test_client_features_real import everything_over_http
from .wire import SCRIPTED, Script, port_server

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("logs")]

TIMEOUT = 30
SECRET = "s3cr3t-http-token-value"
BRIDGE = FIXTURES / "http_bridge.py"
SDK_SERVER = FIXTURES / "sdk_http_server.py"
DEMO = [sys.executable, str(FIXTURES / "demo_server.py")]
FAST = Limits(
    close_grace_seconds=1.0,
    terminate_grace_seconds=1.0,
    handshake_timeout_seconds=15.0,
    sse_reconnect_delay_seconds=0.05,
    sse_min_reconnect_delay_seconds=0.01,
)
MCP_RESULT = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "s"}}


assert_no_secret = functools.partial(wire.assert_no_secret, SECRET)


# -- servers ------------------------------------------------------------------------------


@dataclass
class Server:
    process: anyio.abc.Process
    port: int
    log: Path

    def url(self, path: str = "/mcp") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def requests(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(row) for row in self.log.read_text().splitlines() if row]


@contextlib.asynccontextmanager
async def bridge(
    tmp_path: Path, *options: str, command: list[str] | None = None, env: dict[str, str] | None = None
) -> AsyncIterator[Server]:
    """Run http_bridge.py with ``options -- command`` (default: the demo server); stop it
    and its children, and reap it, on exit."""
    log = tmp_path / "requests.jsonl"
    argv = [sys.executable, str(BRIDGE), "--log", str(log), *options, "--", *(command or DEMO)]
    async with port_server(argv, env=env, seconds=TIMEOUT) as (process, port):
        yield Server(process, port, log)


def scripted(script: Script) -> list[str]:
    return [sys.executable, str(SCRIPTED), str(script.path), str(script.record_path)]


class PushHandlers(HostHandlers):
    def __init__(self, wanted: int) -> None:
        self.wanted = wanted
        self.events: list[str] = []
        self.pushed = anyio.Event()

    async def push_event(self, context: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        self.events.append(str(params.get("eventId")))
        if len(self.events) >= self.wanted:
            self.pushed.set()
        return {"accepted": True}


def headers_of(rows: list[dict[str, Any]], method: str) -> list[dict[str, str]]:
    return [row["headers"] for row in rows if row["method"] == method]


# -- pure parts ------------------------------------------------------------------------------


def test_parameters_refuse_bad_urls_and_headers_without_showing_secrets() -> None:
    bad = {
        "ws://127.0.0.1/x": "scheme",
        f"http://user:{SECRET}@127.0.0.1/": "user-info",
        "http://127.0.0.1/x#frag": "fragment",
        "http:///nohost": "no host",
        "http://127.0.0.1:99999/": "cannot be parsed",
    }
    for url, words in bad.items():
        with pytest.raises(ValueError, match=words) as info:
            HTTPParameters(url)
        assert SECRET not in str(info.value)
    with pytest.raises(ValueError, match="NUL, CR or LF") as info:
        HTTPParameters("http://127.0.0.1/", headers={"X-Key": f"{SECRET}\r\nX-Evil: 1"})
    assert SECRET not in str(info.value)
    for name in ("Mcp-Session-Id", "accept", "Content-Length", "MCP-Protocol-Version"):
        with pytest.raises(ValueError, match="set by the HTTP transport"):
            HTTPParameters("http://127.0.0.1/", headers={name: "x"})
    with pytest.raises(ValueError, match="Authorization header"):
        HTTPParameters("http://127.0.0.1/", token=SECRET, headers={"authorization": "Basic x"})


def test_shown_url_secrets_and_cleartext_check() -> None:
    url = f"https://h.example:8443/a/mcp?api_key={SECRET}&profile=p%2B1&flag"
    assert shown_http_url(url) == "https://h.example:8443/a/mcp?api_key=[redacted]&profile=[redacted]&flag"
    params = HTTPParameters(url, token="tok-value", headers={"X-Api-Key": "header-secret"})
    assert {SECRET, "p%2B1", "p+1", "tok-value", "header-secret"} <= set(params.secrets())
    assert params.request_headers() == {"X-Api-Key": "header-secret", "Authorization": "Bearer tok-value"}
    assert sends_cleartext_credential(HTTPParameters("http://192.0.2.1/mcp", token=SECRET))
    assert sends_cleartext_credential(HTTPParameters(f"http://example.com/mcp?key={SECRET}"))
    assert not sends_cleartext_credential(HTTPParameters("https://192.0.2.1/mcp", token=SECRET))
    assert not sends_cleartext_credential(HTTPParameters("http://127.0.0.1/mcp", token=SECRET))
    assert not sends_cleartext_credential(HTTPParameters("http://192.0.2.1/mcp"))


def test_the_endpoint_of_an_http_sse_server_must_stay_on_its_origin() -> None:
    base = "http://127.0.0.1:8000/sse"
    assert join_endpoint(base, "/messages?session=1") == "http://127.0.0.1:8000/messages?session=1"
    assert join_endpoint(base, "http://127.0.0.1:8000/m") == "http://127.0.0.1:8000/m"
    for endpoint in (
        "http://127.0.0.2:8000/m",
        "https://127.0.0.1:8000/m",
        "//evil.example/m",
        "http://u@127.0.0.1:8000/",
    ):
        with pytest.raises(ValueError):
            join_endpoint(base, endpoint)


def test_refusal_sentences() -> None:
    shown = "http://h/mcp"
    oauth = refusal_message(
        401, what="the POST of initialize", shown_url=shown, www_authenticate='Bearer realm="x"'
    )
    assert oauth == (
        "the server at http://h/mcp answered the POST of initialize with HTTP 401 (unauthorized): the server "
        'wants OAuth authorization (WWW-Authenticate: Bearer realm="x"), and OAuth is off for it (a token or an'
        ' Authorization header is configured, or "oauth": {"enabled": false}); give a token it accepts, or leave'
        " OAuth on"
    )
    healed = refusal_message(403, what="x", shown_url=shown, auth_failure="OAuth failed at pkce: no S256")
    assert (
        healed
        == "the server at http://h/mcp answered x with HTTP 403 (forbidden): OAuth failed at pkce: no S256"
    )
    moved = refusal_message(302, what="x", shown_url=shown, location=f"http://other/?token={SECRET}")
    assert "a redirect to http://other/?token=[redacted]; redirects are not followed" in moved
    assert "ended the MCP session" in refusal_message(404, what="x", shown_url=shown, had_session=True)
    assert "is the URL the server's MCP endpoint?" in refusal_message(404, what="x", shown_url=shown)
    said = refusal_message(500, what="x", shown_url=shown, excerpt="boom\nline\x1b[31m")
    assert said.endswith("HTTP 500 (internal server error); it said: boom line\\u001b[31m")


class _Chunks(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


async def test_event_data_is_utf8_split_anywhere_whatever_charset_the_server_names() -> None:
    # The SSE spec: an event stream is UTF-8; a charset parameter changes nothing.
    data = '{"text":"é✓"}'.encode()
    body = b"event: message\ndata: " + data + b"\n\n"
    for cut in range(len(body) + 1):
        stream = _Chunks([body[:cut], body[cut:]])
        response = httpx.Response(
            200, headers={"content-type": "text/event-stream; charset=latin-1"}, stream=stream
        )
        events = [as_event(event) async for batch in sse_events(response, Limits()) for event in batch]
        assert [(event.event, event.data.decode()) for event in events] == [("message", '{"text":"é✓"}')]


async def test_the_events_read_with_one_over_its_bound_are_handed_over_before_the_error() -> None:
    # One read holds an answer and then a message over Limits.max_line_bytes: the answer is
    # passed on (its request answered) before the stream is refused.
    answer = b'{"jsonrpc":"2.0","id":1,"result":{}}'
    body = b"data: " + answer + b"\n\ndata: " + b"x" * 100 + b"\n\n"
    response = httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=_Chunks([body]))
    seen: list[bytes] = []
    with pytest.raises(BodyTooLarge, match="max_line_bytes"):
        async for batch in sse_events(response, Limits(max_line_bytes=64)):
            seen += [as_event(event).data for event in batch]
    assert seen == [answer]


async def test_the_http_transports_implement_the_transport_protocol() -> None:
    params = HTTPParameters("http://127.0.0.1:9/mcp")
    for transport in (StreamableHTTPTransport(params), SSETransport(params), AutoHTTPTransport(params)):
        assert isinstance(transport, Transport)
        assert isinstance(transport, ReceivesNow)  # the events of one read, taken without a call each
        assert transport.receive_now() is None  # nothing received yet
        assert transport.describe() == "http://127.0.0.1:9/mcp"
        assert transport.stderr_tail == []


# -- Streamable HTTP against the bridge -----------------------------------------------------------


@pytest.mark.parametrize("answers", ["event-stream", "json"])
async def test_session_id_protocol_version_token_get_stream_and_delete(
    tmp_path: Path, answers: str, logs: list[dict[str, Any]]
) -> None:
    options = ["--json"] if answers == "json" else []
    async with bridge(tmp_path, *options) as server:
        conn = connect(
            ServerConfig(
                url=server.url(),
                token=SECRET,
                transport="streamable-http",
                limits=FAST,
                headers={"X-Team": "blue"},
            )
        )
        with anyio.fail_after(TIMEOUT):
            async with conn:
                assert conn.server_info is not None and conn.server_info.name == "mcpl-demo"
                assert (await conn.mcp.call_tool("add", {"a": 2, "b": 3})).text == "5"
                await conn.mcp.ping()
        rows = server.requests()
    # The era probe (MCP 2026-07-28) comes first, with the stateless request headers and no
    # session; the bridge (a handshake-era server) refuses it and initialize follows.
    probes = [row for row in rows if row["method"] == "POST" and '"server/discover"' in row["body"]]
    assert len(probes) == 1
    assert probes[0]["headers"]["mcp-protocol-version"] == "2026-07-28"
    assert probes[0]["headers"]["mcp-method"] == "server/discover"
    assert "mcp-session-id" not in probes[0]["headers"]
    rows = [row for row in rows if row not in probes]
    posts = headers_of(rows, "POST")
    first, later = posts[0], posts[1:]
    assert first["accept"] == "application/json, text/event-stream"
    assert first["content-type"] == "application/json"
    assert first["authorization"] == f"Bearer {SECRET}" and first["x-team"] == "blue"
    assert "mcp-session-id" not in first and "mcp-protocol-version" not in first
    session = later[0]["mcp-session-id"]
    assert session and all(h["mcp-session-id"] == session for h in later)
    assert all(h["mcp-protocol-version"] == "2025-11-25" for h in later)
    bodies = [json.loads(row["body"]).get("method") for row in rows if row["method"] == "POST"]
    assert bodies[:3] == ["initialize", "notifications/initialized", "featureSets/update"]
    gets = headers_of(rows, "GET")
    assert gets and gets[0]["accept"] == "text/event-stream" and gets[0]["mcp-session-id"] == session
    deletes = headers_of(rows, "DELETE")
    assert [h["mcp-session-id"] for h in deletes] == [session]
    assert_no_secret(logs, repr(conn))


@pytest.mark.parametrize("answers", ["event-stream", "json"])
async def test_every_post_gives_its_connection_back_so_two_connections_carry_a_session(
    tmp_path: Path, answers: str
) -> None:
    # Two connections at most, one of them the GET stream's: each POST (a request read to
    # its answer, a notification accepted with 202 and its empty body never read, the era
    # probe refused) must give its connection back, or the next POST waits for ever. Every
    # request goes to the URL as configured, its query included (parsed once).
    limits = dataclasses.replace(FAST, max_http_connections=2)
    options = ["--json"] if answers == "json" else []
    async with bridge(tmp_path, *options) as server:
        url = server.url("/mcp?team=blue")
        conn = connect(ServerConfig(url=url, transport="streamable-http", limits=limits))
        with anyio.fail_after(TIMEOUT):
            async with conn:
                for _ in range(4):
                    await conn.mcp.notify("notifications/roots/list_changed")
                    await conn.mcp.ping()
        rows = server.requests()
    assert headers_of(rows, "GET")  # the GET stream held its connection meanwhile
    assert {row["path"] for row in rows} == {"/mcp?team=blue"}
    bodies = [row["body"] for row in rows if row["method"] == "POST"]
    assert sum('"notifications/roots/list_changed"' in body for body in bodies) == 4
    assert sum('"ping"' in body for body in bodies) == 4


async def test_negotiated_sets_the_protocol_version_header_and_without_it_the_result_does(
    tmp_path: Path,
) -> None:
    script = Script(
        tmp_path,
        [
            {"expect": {"method": "initialize"}},
            {"reply": MCP_RESULT},
            {"expect": {"method": "notifications/initialized"}},
            {"expect": {"method": "ping"}},
            {"reply": {}},
        ],
    )
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    async with bridge(tmp_path, "--no-get", command=scripted(script)) as server:
        for told in (None, "2025-03-26"):
            with anyio.fail_after(TIMEOUT):
                async with StreamableHTTPTransport(HTTPParameters(server.url()), limits=FAST) as transport:
                    await transport.send(dumps_message(initialize))
                    answer = loads_line(await transport.receive())
                    assert answer["result"]["protocolVersion"] == "2025-06-18"
                    if told is not None:
                        transport.negotiated(told)
                    await transport.send(
                        dumps_message({"jsonrpc": "2.0", "method": "notifications/initialized"})
                    )
                    await transport.send(dumps_message({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
                    assert loads_line(await transport.receive()) == {"jsonrpc": "2.0", "id": 2, "result": {}}
            script.record_path.unlink(missing_ok=True)
        rows = server.requests()
    versions = [row["headers"].get("mcp-protocol-version") for row in rows if row["method"] == "POST"]
    assert versions == [None, "2025-06-18", "2025-06-18", None, "2025-03-26", "2025-03-26"]


async def test_mcpl_push_events_on_the_get_stream_are_answered_by_post(tmp_path: Path) -> None:
    env = {"DEMO_PUSH_INTERVAL": "0.05", "DEMO_PUSH_COUNT": "3"}
    handlers = PushHandlers(wanted=3)
    async with bridge(tmp_path, env=env) as server:
        conn = connect(
            ServerConfig(url=server.url(), grant_policy=GrantPolicy(grant_all_advertised=True), limits=FAST),
            handlers=handlers,
        )
        with anyio.fail_after(TIMEOUT):
            async with conn:
                await handlers.pushed.wait()
                assert sorted(conn.grant.paths) == ["pushEvents", "tools"]
        rows = server.requests()
    answers = [json.loads(row["body"]) for row in rows if row["method"] == "POST"]
    push_answers = [a for a in answers if "result" in a and a["result"] == {"accepted": True}]
    assert len(push_answers) == 3
    sessions = {row["headers"].get("mcp-session-id") for row in rows if row["method"] == "POST"}
    assert len(sessions - {None}) == 1


async def test_the_get_stream_resumes_with_last_event_id_and_loses_nothing(tmp_path: Path) -> None:
    env = {"DEMO_PUSH_INTERVAL": "0.05", "DEMO_PUSH_COUNT": "5"}
    handlers = PushHandlers(wanted=5)
    options = ("--event-ids", "--retry-ms", "20", "--cut-get-after", "1")
    async with bridge(tmp_path, *options, env=env) as server:
        conn = connect(
            ServerConfig(url=server.url(), grant_policy=GrantPolicy(grant_all_advertised=True), limits=FAST),
            handlers=handlers,
        )
        with anyio.fail_after(TIMEOUT):
            async with conn:
                await handlers.pushed.wait()
        rows = server.requests()
    assert handlers.events == [f"tick-{n}" for n in range(1, 6)]  # each once, in order
    resumed = [h["last-event-id"] for h in headers_of(rows, "GET") if "last-event-id" in h]
    assert len(resumed) >= 4 and resumed == sorted(resumed, key=int)


# WHATWG HTML §9.2: an event id is any text; a resumption's Last-Event-ID carries its UTF-8
# bytes (docs/protocol.md SSE1). httpx refuses a header value outside ASCII given as text.
@pytest.mark.parametrize("prefix", ["", "é-"], ids=["ascii-ids", "non-ascii-ids"])
async def test_a_request_stream_cut_before_its_answer_is_resumed_by_get(tmp_path: Path, prefix: str) -> None:
    options = (
        "--event-ids",
        "--event-id-prefix",
        prefix,
        "--retry-ms",
        "20",
        "--cut-post",
        "tools/call",
        "--no-get",
    )
    async with bridge(tmp_path, *options) as server:
        conn = connect(ServerConfig(url=server.url(), limits=FAST))
        with anyio.fail_after(TIMEOUT):
            async with conn:
                assert (await conn.mcp.call_tool("add", {"a": 40, "b": 2})).text == "42"
        rows = server.requests()
    gets = headers_of(rows, "GET")
    assert [("last-event-id" in h) for h in gets] == [False, True]  # 405 first, then the resumption


async def test_a_server_request_on_a_post_stream_is_answered_by_post_in_the_session(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            {"expect": {"method": "initialize"}},
            {"reply": MCP_RESULT},
            {"expect": {"method": "notifications/initialized"}},
            {"expect": {"method": "tools/call"}},
            {"send": {"jsonrpc": "2.0", "id": "s-1", "method": "roots/list"}},
            {"wait_response": "s-1", "expect_error_code": -32601},
            {"reply": {"content": [{"type": "text", "text": "done"}]}, "id": 3},
        ],
    )
    async with bridge(tmp_path, "--no-get", command=scripted(script)) as server:
        conn = connect(ServerConfig(url=server.url(), limits=FAST))
        with anyio.fail_after(TIMEOUT):
            async with conn:
                assert (await conn.mcp.call_tool("t", {})).text == "done"
        rows = server.requests()
    answer = next(row for row in rows if row["method"] == "POST" and '"s-1"' in row["body"])
    assert json.loads(answer["body"])["error"]["code"] == -32601
    assert (
        answer["headers"]["mcp-session-id"] == headers_of(rows, "POST")[2]["mcp-session-id"]
    )  # after the probe and initialize


async def test_a_timed_out_request_is_cancelled_by_post_and_the_session_goes_on(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            {"expect": {"method": "initialize"}},
            {"reply": MCP_RESULT},
            {"expect": {"method": "notifications/initialized"}},
            {"expect": {"method": "tools/call"}},
            {
                "expect": {
                    "method": "notifications/cancelled",
                    "params": {"requestId": 3, "reason": "timeout"},
                }
            },
            {"expect": {"method": "ping"}},
            {"reply": {}},
        ],
    )
    async with bridge(tmp_path, "--no-get", command=scripted(script)) as server:
        conn = connect(ServerConfig(url=server.url(), limits=FAST))
        with anyio.fail_after(TIMEOUT):
            async with conn:
                with pytest.raises(RequestTimeout):
                    await conn.mcp.call_tool("slow", {}, timeout=0.3)
                await conn.mcp.ping()
        rows = server.requests()
    cancel = next(row for row in rows if "notifications/cancelled" in row["body"])
    assert (
        cancel["headers"]["mcp-session-id"] == headers_of(rows, "POST")[2]["mcp-session-id"]
    )  # after the probe and initialize


async def test_a_get_stream_refused_with_405_leaves_the_session_working(tmp_path: Path) -> None:
    async with bridge(tmp_path, "--no-get") as server:
        conn = connect(ServerConfig(url=server.url(), limits=FAST))
        with anyio.fail_after(TIMEOUT):
            async with conn:
                assert [tool.name for tool in await conn.mcp.list_tools()]
                assert conn.is_open


async def test_an_expired_session_loses_the_transport_at_once_with_renewal_off(tmp_path: Path) -> None:
    # With renewal on (the default) a new session starts: tests/test_http_session_renewal.py.
    limits = dataclasses.replace(FAST, max_session_renewals=0)
    async with bridge(tmp_path, "--no-get", "--expire-after", "4") as server:
        conn = connect(ServerConfig(url=server.url(), limits=limits))
        with anyio.fail_after(TIMEOUT):
            async with conn:  # initialize, initialized, featureSets/update: three POSTs
                await conn.mcp.call_tool("add", {"a": 1, "b": 1})  # the fourth
                with pytest.raises(ConnectionLost) as info:
                    await conn.mcp.call_tool("add", {"a": 1, "b": 2})
    assert (
        "answered the POST of tools/call with HTTP 404 (not found): the server ended the MCP session"
        in str(info.value)
    )


# -- refusals: one clear sentence each ---------------------------------------------------------


async def _entry_error(url: str, **kwargs: Any) -> str:
    kwargs.setdefault("limits", FAST)
    conn = connect(ServerConfig(url=url, **kwargs))
    with anyio.fail_after(TIMEOUT), pytest.raises(InitializeError) as info:
        async with conn:
            pass
    return str(info.value)


@pytest.mark.parametrize("transport", ["streamable-http", "http"])
async def test_401_with_www_authenticate_says_which_oauth_step_failed(tmp_path: Path, transport: str) -> None:
    challenge = 'Bearer resource_metadata="http://127.0.0.1:9/.well-known/oauth-protected-resource"'
    async with bridge(tmp_path, "--status", "401", "--www-authenticate", challenge) as server:
        message = await _entry_error(
            server.url(), transport=transport, oauth=OAuthSettings(keep_tokens=False)
        )
        off = await _entry_error(server.url(), transport=transport, oauth=OAuthSettings(enabled=False))
    # The first POST is the era probe (MCP 2026-07-28): the refusal comes to it.
    assert (
        "answered the POST of server/discover with HTTP 401 (unauthorized): OAuth failed at metadata"
        in message
    )
    assert "the server wants OAuth authorization (WWW-Authenticate: Bearer resource_metadata=" in off
    assert "OAuth is off for it" in off


async def test_a_refused_token_is_said_and_never_shown(tmp_path: Path, logs: list[dict[str, Any]]) -> None:
    async with bridge(tmp_path, "--require-token", SECRET) as server:
        message = await _entry_error(server.url(), token="not-the-right-one")
        assert "HTTP 401 (unauthorized): the credentials were refused or are missing" in message
        conn = connect(ServerConfig(url=server.url(), token=SECRET, limits=FAST))
        with anyio.fail_after(TIMEOUT):
            async with conn:
                assert await conn.mcp.list_tools()
    assert_no_secret(logs, message, repr(conn))


@pytest.mark.parametrize("transport", ["streamable-http", "http"])
async def test_404_on_the_endpoint(tmp_path: Path, transport: str) -> None:
    async with bridge(tmp_path, "--status", "404") as server:
        message = await _entry_error(server.url("/nope"), transport=transport)
    assert f"the server at {server.url('/nope')} answered the POST of initialize with HTTP 404" in message
    assert "is the URL the server's MCP endpoint?" in message
    if transport == "http":
        assert "the older HTTP+SSE transport failed too: the server at" in message
        assert "answered the GET of its event stream with HTTP 404" in message


async def test_a_wrong_content_type_is_named(tmp_path: Path) -> None:
    async with bridge(tmp_path, "--content-type", "text/html") as server:
        message = await _entry_error(server.url())
    assert (
        "answered the POST of initialize with Content-Type text/html; expected application/json or text/event-stream"
        in message
    )


async def test_a_redirect_is_not_followed(tmp_path: Path) -> None:
    target = f"http://127.0.0.1:9/elsewhere?token={SECRET}"
    async with bridge(tmp_path, "--status", "307", "--location", target) as server:
        message = await _entry_error(server.url(), token=SECRET)
        rows = server.requests()
    assert (
        "HTTP 307, a redirect to http://127.0.0.1:9/elsewhere?token=[redacted]; redirects are not followed"
        in message
    )
    assert SECRET not in message and len(rows) == 1


async def test_a_server_that_never_answers_times_out_clearly() -> None:
    held: list[anyio.abc.SocketStream] = []

    async def hold(stream: anyio.abc.SocketStream) -> None:
        held.append(stream)
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
            while True:
                await stream.receive()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, hold)
        message = await _entry_error(
            f"http://127.0.0.1:{port}/mcp",
            limits=Limits(handshake_timeout_seconds=0.5, close_grace_seconds=0.5),
        )
        tg.cancel_scope.cancel()
    assert (
        message == "the server did not answer initialize within 0.5 seconds (nor server/discover before it)"
    )
    assert held  # the POST reached it


async def test_a_closed_port_is_unreachable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    message = await _entry_error(f"http://127.0.0.1:{port}/mcp", transport="streamable-http")
    assert (
        f"could not connect to http://127.0.0.1:{port}/mcp for the POST of server/discover: connection refused"
        in message
    )


# -- bounds ------------------------------------------------------------------------------------------


async def test_an_event_over_max_sse_event_bytes_loses_the_transport(tmp_path: Path) -> None:
    limits = Limits(max_sse_event_bytes=100_000, close_grace_seconds=1.0)
    script = Script(tmp_path, [{"expect": {"method": "initialize"}}, {"reply": MCP_RESULT}, {"hang": True}])
    async with bridge(tmp_path, "--flood-get", "1000000", command=scripted(script)) as server:
        conn = connect(ServerConfig(url=server.url(), limits=limits))
        with anyio.fail_after(TIMEOUT):
            async with conn:
                reason = await conn.wait_closed()
    assert isinstance(reason, ConnectionLost)
    assert (
        "sent a Server-Sent Event over 100000 bytes (limits.max_sse_event_bytes); the transport was closed"
        in str(reason)
    )


@pytest.mark.parametrize("answers", ["event-stream", "json"])
async def test_a_message_over_max_line_bytes_loses_the_transport(tmp_path: Path, answers: str) -> None:
    script = Script(
        tmp_path,
        [
            {"expect": {"method": "initialize"}},
            {"reply": MCP_RESULT},
            {"expect": {"method": "notifications/initialized"}},
            {"expect": {"method": "tools/list"}},
            {"reply": {"tools": [], "padding": "x" * 5000}},
            {"hang": True},
        ],
    )
    options = ["--no-get", *(["--json"] if answers == "json" else [])]
    async with bridge(tmp_path, *options, command=scripted(script)) as server:
        conn = connect(
            ServerConfig(url=server.url(), limits=Limits(max_line_bytes=4096, close_grace_seconds=1.0))
        )
        with anyio.fail_after(TIMEOUT):
            async with conn:
                with pytest.raises(ConnectionLost) as info:
                    await conn.mcp.list_tools()
    assert "4096 bytes (limits.max_line_bytes)" in str(info.value)


# -- HTTP+SSE and the fallback ---------------------------------------------------------------------------


async def test_http_sse_transport_with_a_token(tmp_path: Path, logs: list[dict[str, Any]]) -> None:
    env = {"DEMO_PUSH_INTERVAL": "0.05", "DEMO_PUSH_COUNT": "2"}
    handlers = PushHandlers(wanted=2)
    async with bridge(tmp_path, "--legacy", "--require-token", SECRET, env=env) as server:
        conn = connect(
            ServerConfig(
                url=server.url("/sse"),
                transport="sse",
                token=SECRET,
                grant_policy=GrantPolicy(grant_all_advertised=True),
                limits=FAST,
            ),
            handlers=handlers,
        )
        with anyio.fail_after(TIMEOUT):
            async with conn:
                assert (await conn.mcp.call_tool("add", {"a": 2, "b": 2})).text == "4"
                await handlers.pushed.wait()
        rows = server.requests()
    assert [row["method"] for row in rows][:2] == ["GET", "POST"]
    assert all(row["path"].startswith("/messages?session=") for row in rows if row["method"] == "POST")
    assert all(row["headers"]["authorization"] == f"Bearer {SECRET}" for row in rows)
    assert_no_secret(logs, repr(conn))


async def test_auto_falls_back_to_http_sse_when_the_post_is_refused(tmp_path: Path) -> None:
    async with bridge(tmp_path, "--legacy") as server:
        conn = connect(ServerConfig(url=server.url("/sse"), limits=FAST))
        with anyio.fail_after(TIMEOUT):
            async with conn:
                assert (await conn.mcp.call_tool("add", {"a": 1, "b": 2})).text == "3"
        rows = server.requests()
    assert [(row["method"], row["path"]) for row in rows][:4] == [
        ("POST", "/sse"),  # the era probe over Streamable HTTP: 405, taken for a handshake-era server
        ("POST", "/sse"),  # initialize over Streamable HTTP: 405, so HTTP+SSE
        ("GET", "/sse"),
        ("POST", rows[3]["path"]),
    ]
    assert rows[3]["path"].startswith("/messages?session=")


async def test_an_endpoint_on_another_origin_is_refused(tmp_path: Path) -> None:
    async with bridge(tmp_path, "--legacy", "--endpoint", "http://127.0.0.2:9/messages") as server:
        message = await _entry_error(server.url("/sse"), transport="sse", token=SECRET)
        rows = server.requests()
    assert "endpoint URL is on another origin; it is not used" in message
    assert [row["method"] for row in rows] == ["GET"]


# -- config, host and probe -------------------------------------------------------------------------------


async def test_a_config_entry_of_type_http_connects(tmp_path: Path) -> None:
    async with bridge(tmp_path) as server:
        config = ServerConfig(name="remote", transport="http", url=server.url(), headers={"X-Key": SECRET})
        with anyio.fail_after(TIMEOUT):
            async with connect(config) as conn:
                assert await conn.mcp.list_tools()
                assert conn.hosted.redactor.redact(SECRET) == "[redacted]"
        rows = server.requests()
    assert all(row["headers"]["x-key"] == SECRET for row in rows)


def test_probe_url_prints_the_report_and_fails_clearly(tmp_path: Path) -> None:
    import subprocess

    cli = forkserver.CLI
    process = subprocess.Popen(
        [sys.executable, str(BRIDGE), "--", *DEMO], stdin=PIPE, stdout=PIPE, start_new_session=True
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline().split()[1])
        url = f"http://127.0.0.1:{port}/mcp"
        done = forkserver.run(
            [*cli, "probe", "--json", "--url", url, "--header", f"X-Key={SECRET}"],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
        assert doc["ok"] and doc["url"] == url and doc["server"]["name"] == "mcpl-demo"
        assert {tool["name"] for tool in doc["tools"]} >= {"add"}
        text = forkserver.run([*cli, "probe", "--url", url], capture_output=True, text=True, timeout=TIMEOUT)
        assert text.returncode == 0 and "mcpl-demo" in text.stdout
        assert SECRET not in done.stdout + done.stderr
    finally:
        process.terminate()
        process.wait(TIMEOUT)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        free = sock.getsockname()[1]
    failed = forkserver.run(
        [*cli, "probe", "--url", f"http://127.0.0.1:{free}/mcp", "--token", SECRET],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert failed.returncode == 1
    assert (
        f"could not connect to http://127.0.0.1:{free}/mcp" in failed.stderr and SECRET not in failed.stderr
    )


# -- real servers --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sdk_ports() -> Iterator[Callable[[tuple[str, ...]], int]]:
    """The port of the SDK fixture server started with ``args`` (one process per ``args``
    for the module: the tests only list and call, so both backends and both transports of a
    mode share it; each start costs some 0.9 CPU-s of the SDK's imports)."""
    started: dict[tuple[str, ...], tuple[subprocess.Popen[str], int]] = {}

    def port(args: tuple[str, ...]) -> int:
        if args not in started:
            process = subprocess.Popen(
                [sys.executable, str(SDK_SERVER), *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                start_new_session=True,
            )
            assert process.stdout is not None
            started[args] = (process, int(process.stdout.readline().split()[1]))
        return started[args][1]

    try:
        yield port
    finally:
        for process, _ in started.values():
            process.terminate()
            process.wait(TIMEOUT)


@pytest.mark.parametrize(
    ("args", "path", "transport"),
    [
        (["streamable-http"], "/mcp", "streamable-http"),
        (["streamable-http", "--json"], "/mcp", "http"),
        (["streamable-http", "--stateless"], "/mcp", "http"),
        (["sse"], "/sse", "sse"),
        (["sse"], "/sse", "http"),
    ],
)
async def test_the_mcp_python_sdk_server(
    sdk_ports: Callable[[tuple[str, ...]], int], args: list[str], path: str, transport: str
) -> None:
    port = sdk_ports(tuple(args))
    conn = connect(ServerConfig(url=f"http://127.0.0.1:{port}{path}", transport=transport, limits=FAST))  # type: ignore[arg-type]
    with anyio.fail_after(TIMEOUT):
        async with conn:
            assert conn.server_info is not None and conn.server_info.name == "sdk-http-fixture"
            assert {tool.name for tool in await conn.mcp.list_tools()} == {"add", "echo"}
            assert (await conn.mcp.call_tool("add", {"a": 20, "b": 22})).text == "42"
            assert [r.uri for r in await conn.mcp.list_resources()] == ["demo://greeting"]
            assert [p.name for p in await conn.mcp.list_prompts()] == ["greet"]
            await conn.mcp.ping()


@pytest.mark.parametrize(("mode", "path"), [("streamableHttp", "/mcp"), ("sse", "/sse")])
async def test_server_everything_over_http(mode: str, path: str) -> None:
    async with everything_over_http(mode) as port:
        progress: list[Any] = []
        conn = connect(
            ServerConfig(url=f"http://127.0.0.1:{port}{path}", limits=FAST)
        )  # auto: the fallback for sse
        with anyio.fail_after(60):
            async with conn:
                assert conn.server_info is not None and "everything" in conn.server_info.name
                tools = {tool.name for tool in await conn.mcp.list_tools()}
                assert {"echo", "get-sum", "trigger-long-running-operation"} <= tools
                assert (
                    "hello over HTTP"
                    in (await conn.mcp.call_tool("echo", {"message": "hello over HTTP"})).text
                )
                result = await conn.mcp.call_tool(
                    "trigger-long-running-operation", {"duration": 0.3, "steps": 3}, progress=progress.append
                )
                assert not result.is_error and len(progress) == 3  # notifications on the POST's stream
                assert await conn.mcp.list_resources() and await conn.mcp.list_prompts()
                await conn.mcp.ping()

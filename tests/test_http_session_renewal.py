"""A Streamable HTTP session the server ends is renewed on the same connection (MCP
2025-11-25 "Transports", session management: a 404 to a request carrying the session id
means the session ended, and the client starts a new one with a new ``initialize``;
docs/protocol.md HS1-HS5).

The pure decisions (``transports.http_session``) are tested by plain calls; the transport
against ``fixtures/http_bridge.py`` on loopback, bridging each session to a new demo server
process (MCPL: the grant in force is proposed again on the new session). The test ends a
session as a server does, by forgetting it (a DELETE with its id, or the bridge's
``--end-session-on`` while a request is in flight). Every async test runs on asyncio and
trio.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from mcpl_host import ConnectionLost, GrantPolicy, Limits, RemoteError, connect
from mcpl_host.config import ServerConfig
from mcpl_host.events import HostEvent, SessionRenewed
from mcpl_host.transports.http_session import (
    RENEWAL_ID_PREFIX,
    after_session_ended,
    manifest_of,
    renewal_initialize,
    renewal_problem,
    renewal_refused,
    says_session_ended,
    session_ended_answer,
)

from .test_client_features_real import everything_over_http
from .test_http_transport import FAST, TIMEOUT, Server, bridge, sdk_ports  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.usefixtures("logs")]

GRANT = GrantPolicy(grant_all_advertised=True)


# -- the decisions, pure --------------------------------------------------------------------


def test_what_was_in_flight_is_sent_again_only_when_it_changes_nothing() -> None:
    for method in ("tools/list", "resources/list", "resources/templates/list", "prompts/list", "ping"):
        assert after_session_ended("request", method) == "resend"
    for method in ("resources/read", "prompts/get", "completion/complete"):
        assert after_session_ended("request", method) == "resend"
    for method in ("tools/call", "featureSets/update", "resources/subscribe", "logging/setLevel", None):
        assert after_session_ended("request", method) == "fail"
    assert after_session_ended("notification", "notifications/roots/list_changed") == "resend"
    assert after_session_ended("notification", "notifications/cancelled") == "drop"
    assert after_session_ended("notification", "notifications/initialized") == "drop"
    assert after_session_ended("response", None) == "drop"


def test_the_renewal_initialize_is_the_first_under_an_id_of_the_hosts_own() -> None:
    first = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}'
    line, request_id = renewal_initialize(first, 2)
    assert request_id == f"{RENEWAL_ID_PREFIX}2"
    assert json.loads(line) == {**json.loads(first), "id": request_id}
    with pytest.raises(ValueError, match="not a JSON object"):
        renewal_initialize(b"[1]", 1)


def test_a_new_session_must_answer_as_the_first_did() -> None:
    mcpl = {"version": "0.6", "featureSets": {"a": {}}}
    first = {"protocolVersion": "2025-11-25", "capabilities": {"experimental": {"mcpl": mcpl}}}
    manifest = manifest_of(first)
    assert manifest is not None
    same = {
        "protocolVersion": "2025-11-25",
        "capabilities": {"experimental": {"mcpl": dict(reversed(mcpl.items()))}},
    }
    assert renewal_problem({"result": same}, protocol_version="2025-11-25", manifest=manifest) is None
    older = {**same, "protocolVersion": "2025-06-18"}
    assert renewal_problem({"result": older}, protocol_version="2025-11-25", manifest=manifest) == (
        "it answered initialize with another protocol version than 2025-11-25"
    )
    plain = {"protocolVersion": "2025-11-25", "capabilities": {}}
    assert renewal_problem({"result": plain}, protocol_version="2025-11-25", manifest=manifest) == (
        "its initialize result holds another MCPL manifest than the first"
    )
    refused = {"error": {"code": -32600, "message": "<b>go away</b>"}}
    assert (
        renewal_problem(refused, protocol_version=None, manifest=None)
        == "it refused initialize (error -32600)"
    )
    assert (
        renewal_problem([1], protocol_version=None, manifest=None)
        == "its answer to initialize is not a JSON object"
    )
    assert renewal_problem({"result": 3}, protocol_version=None, manifest=None) == (
        "its initialize result is not an object"
    )


def test_what_says_a_session_ended() -> None:
    assert says_session_ended(404, "")
    assert says_session_ended(404, "Session not found")
    # The TypeScript SDK's example servers (server-everything): 400 and a JSON-RPC error.
    typescript = '{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}'
    assert says_session_ended(400, typescript)
    assert not says_session_ended(400, "Bad Request: No valid session ID provided")  # not JSON-RPC
    assert not says_session_ended(400, typescript.replace("null", "3"))  # answers a request
    assert not says_session_ended(400, typescript.replace("session", "params"))
    assert not says_session_ended(
        400, '{"jsonrpc":"2.0","result":{},"id":null,"error":{"message":"session"}}'
    )
    assert not says_session_ended(500, typescript)
    assert not says_session_ended(400, "")


def test_new_sessions_are_bounded_within_a_window() -> None:
    limits = Limits(max_session_renewals=2, session_renewal_window_seconds=10.0)
    renewed_at: list[float] = []
    assert renewal_refused(renewed_at, 100.0, limits) is None
    renewed_at.append(100.0)
    assert renewal_refused(renewed_at, 105.0, limits) is None
    renewed_at.append(105.0)
    assert renewal_refused(renewed_at, 109.0, limits) == (
        "3 times within 10 seconds (Limits.max_session_renewals = 2, Limits.session_renewal_window_seconds = 10)"
    )
    assert renewal_refused(renewed_at, 110.0, limits) is None  # the first one left the window
    assert renewed_at == [105.0]
    assert renewal_refused([], 0.0, Limits(max_session_renewals=0)) is not None


def test_the_error_answer_of_a_call_not_sent_again_says_why() -> None:
    answer = session_ended_answer(7, "tools/call", "http://127.0.0.1:1/mcp")
    assert answer["id"] == 7
    assert answer["error"]["code"] == -32603
    assert answer["error"]["data"] == {"fromHost": True, "sessionEnded": True}
    assert answer["error"]["message"] == (
        "the server at http://127.0.0.1:1/mcp ended the HTTP session (404) while tools/call was in "
        "flight; a new session was started, and tools/call was not sent again: it may have taken "
        "effect in the ended session"
    )


# -- against a real HTTP server ---------------------------------------------------------------


class Seen:
    """The events a connection reported (``observer=``); ``renewed`` is set at the first
    ``SessionRenewed``."""

    def __init__(self) -> None:
        self.events: list[HostEvent] = []
        self.renewed = anyio.Event()

    def observe(self, event: HostEvent) -> None:
        self.events.append(event)
        if isinstance(event, SessionRenewed):
            self.renewed.set()


def posts(server: Server, method: str) -> list[dict[str, Any]]:
    """The bridge's log rows of the POSTs of ``method``, in order, their body parsed."""
    rows = []
    for row in server.requests():
        if row["method"] != "POST":
            continue
        try:
            body = json.loads(row["body"])
        except ValueError:  # a POST cut off when the connection closed: no message
            continue
        if body.get("method") == method:
            rows.append({**row, "body": body})
    return rows


async def end_session(server: Server, session: str) -> None:
    """End ``session`` as a server does: the bridge forgets it (404 from now on)."""
    async with httpx.AsyncClient() as client:
        response = await client.delete(server.url(), headers={"Mcp-Session-Id": session})
    assert response.status_code == 200


def session_of(conn: Any) -> str:
    session = conn.connection.transport.session_id
    assert isinstance(session, str)
    return session


@pytest.mark.anyio
async def test_a_list_after_the_session_ended_goes_to_a_new_session(tmp_path: Path) -> None:
    seen = Seen()
    async with bridge(tmp_path, "--no-get") as server:
        conn = connect(ServerConfig(url=server.url(), limits=FAST, grant_policy=GRANT), observer=seen)
        with anyio.fail_after(TIMEOUT):
            async with conn:
                first = session_of(conn)
                await conn.mcp.set_log_level("debug")
                await end_session(server, first)
                tools = await conn.mcp.list_tools()
                assert "add" in [tool.name for tool in tools]
                second = session_of(conn)
                assert second != first
                await seen.renewed.wait()  # told once the new session has the old one's state
                assert conn.is_open
                assert conn.grant is not None and conn.grant.paths
                result = await conn.mcp.call_tool("add", {"a": 2, "b": 3})
                assert not result.is_error
    initializes = posts(server, "initialize")
    assert [type(row["body"]["id"]) for row in initializes] == [int, str]  # the connection's, the host's own
    assert initializes[1]["body"] == {**initializes[0]["body"], "id": f"{RENEWAL_ID_PREFIX}1"}
    assert "mcp-session-id" not in initializes[1]["headers"]
    lists = posts(server, "tools/list")
    assert lists[0]["headers"]["mcp-session-id"] == first  # answered 404
    assert lists[1]["headers"]["mcp-session-id"] == second  # the same request again
    assert lists[1]["body"]["id"] == lists[0]["body"]["id"]
    initialized = posts(server, "notifications/initialized")
    assert [row["headers"].get("mcp-session-id") for row in initialized] == [first, second]
    # The new session got the log level and the MCPL grant in force again.
    levels = posts(server, "logging/setLevel")
    assert [(row["headers"]["mcp-session-id"], row["body"]["params"]) for row in levels] == [
        (first, {"level": "debug"}),
        (second, {"level": "debug"}),
    ]
    grants = posts(server, "featureSets/update")
    assert [row["headers"]["mcp-session-id"] for row in grants] == [first, second]
    assert grants[1]["body"]["params"] == grants[0]["body"]["params"]
    renewed = [event for event in seen.events if isinstance(event, SessionRenewed)]
    assert [event.to_json() for event in renewed] == [{"renewals": 1}]
    assert [row["body"]["params"]["name"] for row in posts(server, "tools/call")] == ["add"]


@pytest.mark.anyio
async def test_a_tool_call_after_the_session_ended_fails_and_is_not_sent_again(tmp_path: Path) -> None:
    seen = Seen()
    async with bridge(tmp_path, "--no-get") as server:
        url = server.url()
        conn = connect(ServerConfig(url=url, limits=FAST, grant_policy=GRANT), observer=seen)
        with anyio.fail_after(TIMEOUT):
            async with conn:
                first = session_of(conn)
                await end_session(server, first)
                with pytest.raises(RemoteError) as info:
                    await conn.mcp.call_tool("add", {"a": 1, "b": 1})
                await seen.renewed.wait()
                result = await conn.mcp.call_tool("add", {"a": 1, "b": 2})  # the new session
                assert not result.is_error
    assert info.value.code == -32603
    assert info.value.data == {"fromHost": True, "sessionEnded": True}
    assert info.value.message == (
        f"the server at {url} ended the HTTP session (404) while tools/call was in flight; a new "
        "session was started, and tools/call was not sent again: it may have taken effect in the "
        "ended session"
    )
    calls = posts(server, "tools/call")
    assert [row["body"]["params"]["arguments"] for row in calls] == [{"a": 1, "b": 1}, {"a": 1, "b": 2}]
    assert calls[0]["headers"]["mcp-session-id"] == first
    assert calls[1]["headers"]["mcp-session-id"] != first


@pytest.mark.anyio
@pytest.mark.parametrize(("method", "resent"), [("tools/list", True), ("tools/call", False)])
@pytest.mark.parametrize("event_ids", [True, False])
async def test_a_request_in_flight_when_the_session_ends(
    tmp_path: Path, method: str, resent: bool, event_ids: bool
) -> None:
    """The session ends while the request's event stream is open (the bridge forgets it
    before the child sees the request). With event ids the resumption GET meets the 404;
    without, the stream ends unanswered and cannot be resumed, and the GET stream, ended
    with the session, meets the 404 when it reopens: the request is sent again or fails
    then (HS2), not at its timeout."""
    seen = Seen()
    options = ("--no-get", "--event-ids") if event_ids else ()
    async with bridge(tmp_path, *options, "--end-session-on", method) as server:
        conn = connect(ServerConfig(url=server.url(), limits=FAST, grant_policy=GRANT), observer=seen)
        with anyio.fail_after(TIMEOUT):
            async with conn:
                first = session_of(conn)
                if resent:
                    assert "add" in [tool.name for tool in await conn.mcp.list_tools()]
                else:
                    with pytest.raises(RemoteError, match="while tools/call was in flight"):
                        await conn.mcp.call_tool("add", {"a": 1, "b": 1})
                await seen.renewed.wait()
                await conn.mcp.lists_settled()
                assert session_of(conn) != first
    resumed = [row for row in server.requests() if "last-event-id" in row["headers"]]
    assert [row["headers"]["mcp-session-id"] for row in resumed] == ([first] if event_ids else [])
    # tools/list: the first, the same again in the new session, then read again as every
    # list listed is (HS3); tools/call: once.
    assert len(posts(server, method)) == (3 if resent else 1)


@pytest.mark.anyio
async def test_the_get_stream_meeting_the_end_renews_the_session_unasked(tmp_path: Path) -> None:
    seen = Seen()
    async with bridge(tmp_path) as server:
        conn = connect(ServerConfig(url=server.url(), limits=FAST, grant_policy=GRANT), observer=seen)
        with anyio.fail_after(TIMEOUT):
            async with conn:
                first = session_of(conn)
                await end_session(server, first)  # the GET stream ends; its reopening meets 404
                await seen.renewed.wait()
                assert session_of(conn) != first
                assert "add" in [tool.name for tool in await conn.mcp.list_tools()]
    gets = [row for row in server.requests() if row["method"] == "GET"]
    assert first in [row["headers"].get("mcp-session-id") for row in gets]
    assert gets[-1]["headers"].get("mcp-session-id") == session_of(conn)
    assert "last-event-id" not in gets[-1]["headers"]


@pytest.mark.anyio
async def test_a_server_that_ends_every_session_loses_the_transport(tmp_path: Path) -> None:
    # Each session ends after its third POST. What a new session is told again (the grant,
    # the lists read again) meets the end of the next one: the renewals would go on for ever.
    limits = dataclasses.replace(FAST, max_session_renewals=2)
    async with bridge(tmp_path, "--no-get", "--expire-after", "3") as server:
        conn = connect(ServerConfig(url=server.url(), limits=limits, grant_policy=GRANT))
        with anyio.fail_after(TIMEOUT):
            async with conn:  # initialize, initialized, featureSets/update
                with contextlib.suppress(ConnectionLost):
                    await conn.mcp.list_tools()  # the fourth: 404, a new session
                lost = await conn.wait_closed()
    assert isinstance(lost, ConnectionLost)
    assert str(lost) == (
        f"the server at {server.url()} ended the HTTP session 3 times within 60 seconds "
        "(Limits.max_session_renewals = 2, Limits.session_renewal_window_seconds = 60)"
    )
    assert len(posts(server, "initialize")) == 3


@pytest.mark.anyio
async def test_the_mcp_python_sdk_server_ending_a_session(request: pytest.FixtureRequest) -> None:
    """The official SDK's server (``fixtures/sdk_http_server.py``) answers 404 for a session
    it terminated (here by a DELETE from elsewhere, as a server that drops a session)."""
    seen = Seen()
    sdk_port: Callable[[tuple[str, ...]], int] = request.getfixturevalue("sdk_ports")
    url = f"http://127.0.0.1:{sdk_port(('streamable-http',))}/mcp"
    # The handshake era: the SDK's server answers the stateless probe too, and stateless
    # requests have no session.
    config = ServerConfig(url=url, transport="streamable-http", protocol="handshake", limits=FAST)
    conn = connect(config, observer=seen)
    with anyio.fail_after(TIMEOUT):
        async with conn:
            first = session_of(conn)
            assert {tool.name for tool in await conn.mcp.list_tools()} == {"add", "echo"}
            version = conn.connection.transport.protocol_version
            async with httpx.AsyncClient() as client:
                headers = {"Mcp-Session-Id": first, "MCP-Protocol-Version": version}
                assert (await client.delete(url, headers=headers)).status_code == 200
            with pytest.raises(RemoteError, match="while tools/call was in flight"):
                await conn.mcp.call_tool("add", {"a": 1, "b": 1})
            await seen.renewed.wait()
            assert session_of(conn) != first
            assert (await conn.mcp.call_tool("add", {"a": 20, "b": 22})).text == "42"
            assert {tool.name for tool in await conn.mcp.list_tools()} == {"add", "echo"}


@pytest.mark.anyio
async def test_server_everything_ending_a_session() -> None:
    """``@modelcontextprotocol/server-everything`` in its ``streamableHttp`` mode answers 404
    for a session it ended (here by a DELETE from elsewhere)."""
    seen = Seen()
    async with everything_over_http("streamableHttp") as port:
        url = f"http://127.0.0.1:{port}/mcp"
        config = ServerConfig(url=url, transport="streamable-http", limits=FAST)
        conn = connect(config, observer=seen)
        with anyio.fail_after(60):
            async with conn:
                first = session_of(conn)
                assert "echo" in {tool.name for tool in await conn.mcp.list_tools()}
                version = conn.connection.transport.protocol_version
                async with httpx.AsyncClient() as client:
                    headers = {"Mcp-Session-Id": first, "MCP-Protocol-Version": version}
                    assert (await client.delete(url, headers=headers)).status_code == 200
                assert "echo" in {tool.name for tool in await conn.mcp.list_tools()}  # sent again
                await seen.renewed.wait()
                assert session_of(conn) != first
                assert "hello again" in (await conn.mcp.call_tool("echo", {"message": "hello again"})).text

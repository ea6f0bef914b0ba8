"""The stateless MCP revision 2026-07-28: the era probe and its fallback, per-request
``_meta``, ``resultType``, multi round-trip requests, and what the revision removed (no
``ping``, no ``logging/setLevel``, no ``resources/subscribe``).

Rules under test: MCP 2026-07-28 "Versioning and Compatibility" (protocol version
negotiation; backward compatibility), "Overview" (``resultType``; ``_meta``), "Multi
Round-Trip Requests", "Streamable HTTP" (request metadata), and ``mcpl_host.stateless``.
Pure rules by plain calls; the I/O over real pipes to ``fixtures/scripted_server.py`` (with
``"discover": "steps"``, the script itself answers the probe).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Collection
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpl_host import HostHandlers, InitializeError, Limits, RequestContext
from mcpl_host.client_features import (
    ElicitationMode,
    ElicitationRequest,
    ElicitationResult,
    SamplingRequest,
    SamplingResult,
)
from mcpl_host.handshake import ServerInfo
from mcpl_host.jsonrpc.errors import RemoteProtocolError
from mcpl_host.mcp_methods import SubscriptionRefused
from mcpl_host.stateless import (
    CLIENT_CAPABILITIES_KEY,
    CLIENT_INFO_KEY,
    LOG_LEVEL_KEY,
    PROTOCOL_VERSION_KEY,
    FallBack,
    Retry,
    after_discover_error,
    after_discover_result,
    after_initialize_refusal,
    header_value,
    http_request_headers,
    input_required,
    result_type,
    retry_params,
    stamped,
    stateless_capabilities,
)

from . import forkserver
from .wire import MCP_RESULT, SCRIPTED, Script, TestHandlers, mark

pytestmark = pytest.mark.anyio

STEPS = {"options": {"discover": "steps"}}
DISCOVER_RESULT = {
    "resultType": "complete",
    "supportedVersions": ["2026-07-28", "2025-11-25"],
    "capabilities": {"tools": {"listChanged": True}},
    "instructions": "be kind",
    "ttlMs": 0,
    "cacheScope": "private",
    "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "modern", "version": "3"}},
}
STATELESS_OPENING: list[dict[str, Any]] = [
    STEPS,
    {"expect": {"method": "server/discover"}},
    {"reply": DISCOVER_RESULT},
]
SAMPLING = {"messages": [{"role": "user", "content": {"type": "text", "text": "2+2?"}}], "maxTokens": 5}


# -- pure rules ---------------------------------------------------------------------------------


def test_what_follows_an_error_answer_to_the_probe() -> None:
    # Anything that is not stateless evidence is a handshake-era server (the denylist).
    assert isinstance(after_discover_error(-32601, "Method not found", None, retried=False), FallBack)
    assert isinstance(
        after_discover_error(-32000, "Bad Request: Server not initialized", None, retried=False), FallBack
    )
    assert isinstance(after_discover_error(-32600, "HTTP 404", {"httpStatus": 404}, retried=False), FallBack)
    # -32022 names the versions: a mutual stateless one is retried once, a handshake one falls back.
    newer = {"supported": ["2026-07-28", "2027-01-01"], "requested": "2027-01-01"}
    assert after_discover_error(-32022, "Unsupported protocol version", newer, retried=False) == Retry(
        "2026-07-28"
    )
    both = {"supported": ["2027-06-01", "2025-11-25"]}
    assert isinstance(after_discover_error(-32022, "Unsupported", both, retried=False), FallBack)
    disjoint = {"supported": ["2099-01-01"], "requested": "2026-07-28"}
    refused = after_discover_error(-32022, "Unsupported protocol version", disjoint, retried=False)
    assert isinstance(refused, InitializeError)
    assert refused.code == -32022 and refused.data == disjoint
    assert str(refused) == (
        "the server refused server/discover: Unsupported protocol version; it supports protocol versions"
        " 2099-01-01, none of which this host implements (2026-07-28, 2025-11-25, 2025-06-18, 2025-03-26,"
        " 2024-11-05)"
    )
    assert isinstance(
        after_discover_error(-32021, "Missing capability", None, retried=False), InitializeError
    )


def test_an_initialize_refusal_naming_a_stateless_version_is_probed_again() -> None:
    data = {"supported": ["2026-07-28"]}
    assert after_initialize_refusal(-32022, data, probed=False) == Retry("2026-07-28")
    assert after_initialize_refusal(-32022, data, probed=True) is None  # once
    assert after_initialize_refusal(-32602, data, probed=False) is None
    assert after_initialize_refusal(-32022, {"supported": ["2099-01-01"]}, probed=False) is None


def test_a_discover_result_is_read_or_taken_for_a_handshake_era_advertisement() -> None:
    info = after_discover_result(DISCOVER_RESULT, offers_mcpl=True)
    assert info == ServerInfo(
        name="modern",
        version="3",
        protocol_version="2026-07-28",
        capabilities={"tools": {"listChanged": True}},
        instructions="be kind",
        mcpl=None,
        era="stateless",
        supported_versions=("2026-07-28", "2025-11-25"),
    )
    assert isinstance(
        after_discover_result({**DISCOVER_RESULT, "supportedVersions": ["2025-11-25"]}, offers_mcpl=False),
        FallBack,
    )
    assert isinstance(after_discover_result({"tools": []}, offers_mcpl=False), FallBack)
    mcpl = {**DISCOVER_RESULT, "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}}}
    assert isinstance(
        after_discover_result(mcpl, offers_mcpl=True), FallBack
    )  # MCPL stays on the handshake era
    assert isinstance(after_discover_result(mcpl, offers_mcpl=False), ServerInfo)


def test_result_types_input_requests_and_the_retry() -> None:
    assert result_type({"tools": []}, "tools/list") == "complete"  # absent: complete
    assert result_type({"resultType": "input_required"}, "tools/call") == "input_required"
    with pytest.raises(RemoteProtocolError, match="unknown resultType"):
        result_type({"resultType": "partial"}, "tools/call")
    with pytest.raises(RemoteProtocolError, match="may not return"):
        result_type({"resultType": "input_required"}, "tools/list")
    wanted = input_required(
        {
            "resultType": "input_required",
            "inputRequests": {"r": {"method": "roots/list"}},
            "requestState": "s",
        },
        "tools/call",
        max_requests=4,
    )
    assert wanted.requests == {"r": ("roots/list", None)} and wanted.request_state == "s"
    for bad, reason in [
        ({"resultType": "input_required"}, "neither inputRequests nor requestState"),
        ({"inputRequests": {"x": {"method": "tools/call"}}}, "is not one of"),
        (
            {"inputRequests": {str(n): {"method": "roots/list"} for n in range(5)}},
            "Limits.max_input_requests",
        ),
        ({"requestState": 7}, "not a string"),
    ]:
        with pytest.raises(RemoteProtocolError, match=reason):
            input_required(bad, "tools/call", max_requests=4)
    params = {"name": "t", "arguments": {}, "inputResponses": {"old": {}}, "requestState": "old"}
    assert retry_params(params, {"r": {"roots": []}}, "new") == {
        "name": "t",
        "arguments": {},
        "inputResponses": {"r": {"roots": []}},
        "requestState": "new",
    }
    assert retry_params(params, {}, None) == {"name": "t", "arguments": {}}  # no state sent: none echoed


def test_meta_stamping_and_the_http_request_headers() -> None:
    meta = {PROTOCOL_VERSION_KEY: "2026-07-28", CLIENT_CAPABILITIES_KEY: {}}
    assert stamped({"_meta": {"progressToken": "p"}, "name": "x"}, meta) == {
        "name": "x",
        "_meta": {"progressToken": "p", **meta},
    }
    assert stamped(None, meta) == {"_meta": meta}
    caps = {"roots": {"listChanged": True}, "sampling": {}, "experimental": {"mcpl": {}}}
    assert stateless_capabilities(caps) == {"roots": {}, "sampling": {}}
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "héllo", "_meta": meta}}
    assert http_request_headers(message) == {
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "=?base64?aMOpbGxv?=",
    }
    assert header_value("us-west1") == "us-west1"
    assert header_value(" padded ") == "=?base64?IHBhZGRlZCA=?="
    assert header_value("=?base64?literal?=") == "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="


# -- over the wire --------------------------------------------------------------------------------


class Sampler:
    supports_tools = False

    async def create_message(self, context: RequestContext, request: SamplingRequest) -> SamplingResult:
        return SamplingResult.text("four", "m")


class Elicitor:
    modes: Collection[ElicitationMode] = ("form",)

    async def elicit(self, context: RequestContext, request: ElicitationRequest) -> ElicitationResult:
        return ElicitationResult("decline")


class Served(TestHandlers):
    def __init__(self, tmp_path: Path) -> None:
        super().__init__()
        HostHandlers.__init__(self, roots=[tmp_path], sampling=Sampler(), elicitation=Elicitor())


def requests(script: Script) -> list[dict[str, Any]]:
    return [m for m in script.messages(probe=True) if "method" in m and "id" in m]


async def test_a_stateless_connection_stamps_every_request_and_sends_nothing_removed(tmp_path: Path) -> None:
    # No listChanged and no resources.subscribe: nothing to listen for (tests/test_listen.py).
    quiet = {**DISCOVER_RESULT, "capabilities": {"tools": {}}}
    script = Script(
        tmp_path,
        [
            STEPS,
            {"expect": {"method": "server/discover"}},
            {"reply": quiet},
            {"expect": {"method": "tools/list"}},
            {"reply": {"resultType": "complete", "tools": [{"name": "t", "inputSchema": {}}]}},
            {"expect": {"method": "server/discover"}},  # ping(): MCP 2026-07-28 has no ping
            {"reply": DISCOVER_RESULT},
            {"expect": {"method": "tools/call"}},
            {"reply": {"resultType": "complete", "content": []}},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect(handlers=Served(tmp_path)) as conn:
            assert conn.era == "stateless" and conn.server_info is not None
            assert conn.server_info.name == "modern" and conn.server_info.instructions == "be kind"
            assert conn.mcpl_state.value == "none"
            assert [t.name for t in await conn.mcp.list_tools()] == ["t"]
            await conn.mcp.ping()
            await conn.mcp.set_log_level("warning")  # no request: the _meta of later ones
            await conn.mcp.call_tool("t")
            with pytest.raises(SubscriptionRefused, match="does not advertise resources.subscribe"):
                await conn.mcp.subscribe_resource("file:///a")
            assert conn.mcp.roots_changed() is False  # notifications/roots/list_changed is removed
    sent = requests(script)
    assert [m["method"] for m in sent] == ["server/discover", "tools/list", "server/discover", "tools/call"]
    methods = {m.get("method") for m in script.messages(probe=True)}
    assert not methods & {
        "initialize",
        "notifications/initialized",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "subscriptions/listen",
    }
    for message in sent:
        meta = message["params"]["_meta"]
        assert meta[PROTOCOL_VERSION_KEY] == "2026-07-28"
        assert meta[CLIENT_INFO_KEY] == {"name": "mcpl-host", "version": "0.1.0"}
        assert meta[CLIENT_CAPABILITIES_KEY] == {"roots": {}, "sampling": {}, "elicitation": {"form": {}}}
    assert LOG_LEVEL_KEY not in sent[1]["params"]["_meta"]
    assert sent[3]["params"]["_meta"][LOG_LEVEL_KEY] == "warning"


async def test_input_required_is_answered_by_the_handlers_and_retried(tmp_path: Path) -> None:
    asked = {
        "resultType": "input_required",
        "inputRequests": {
            "where": {"method": "roots/list"},
            "model": {"method": "sampling/createMessage", "params": SAMPLING},
            "who": {
                "method": "elicitation/create",
                "params": {"mode": "form", "message": "name?", "requestedSchema": {"type": "object"}},
            },
        },
        "requestState": "opaque-1",
    }
    script = Script(
        tmp_path,
        [
            *STATELESS_OPENING,
            {"expect": {"method": "tools/call"}},
            {"reply": asked},
            {"expect": {"method": "tools/call"}},
            {"reply": {"resultType": "input_required", "requestState": "opaque-2"}},  # state only
            {"expect": {"method": "tools/call"}},
            {"reply": {"resultType": "complete", "content": [{"type": "text", "text": "done"}]}},
        ],
    )
    handlers = Served(tmp_path)
    with anyio.fail_after(20):
        async with script.connect(handlers=handlers) as conn:
            assert (await conn.mcp.call_tool("t", {"x": 1})).text == "done"
    first, second, third = [m for m in requests(script) if m["method"] == "tools/call"]
    assert len({first["id"], second["id"], third["id"]}) == 3  # each retry is a new request
    assert "inputResponses" not in first["params"] and "requestState" not in first["params"]
    assert second["params"]["name"] == "t" and second["params"]["arguments"] == {"x": 1}
    assert second["params"]["requestState"] == "opaque-1"
    assert second["params"]["inputResponses"] == {
        "where": {"roots": [{"uri": tmp_path.as_uri(), "name": tmp_path.name}]},
        "model": {
            "role": "assistant",
            "content": {"type": "text", "text": "four"},
            "model": "m",
            "stopReason": "endTurn",
        },
        "who": {"action": "decline"},
    }
    assert third["params"]["requestState"] == "opaque-2" and "inputResponses" not in third["params"]


async def test_a_retry_keeps_nothing_of_the_answer_that_asked_for_it_while_it_waits(tmp_path: Path) -> None:
    # While the retry waits for its answer (a long tool run), the call holds what the retry
    # needs (its params: the request state and the input responses) and nothing else of the
    # input_required answer: neither 8 MiB of it no retry carries nor an answered input
    # request of 8 MiB, both freed once the retry is sent.
    from .memory import kept_bytes

    big = 8 * 2**20
    asked = {
        "resultType": "input_required",
        "inputRequests": {"where": {"method": "roots/list", "params": {"_meta": {"blob": "y" * big}}}},
        "requestState": "s",
        "_meta": {"blob": "x" * big},
    }
    script = Script(
        tmp_path,
        [
            *STATELESS_OPENING,
            {"expect": {"method": "tools/call"}},
            {"reply": asked},
            {"expect": {"method": "tools/call"}},
            mark("retried"),
            {"wait_for": {"method": "test/never"}, "timeout": 60},  # the retry is never answered
        ],
    )
    del asked
    handlers = Served(tmp_path)
    with anyio.fail_after(20):
        async with script.connect(handlers=handlers) as conn:
            async with anyio.create_task_group() as tg:
                with kept_bytes() as kept:
                    tg.start_soon(conn.mcp.call_tool, "t")
                    await handlers.mark("retried").wait()
                    await anyio.wait_all_tasks_blocked()  # the mark read, the retry's answer awaited
                tg.cancel_scope.cancel()
    assert kept.bytes < 2**20, f"{kept.bytes} bytes kept after the retry was sent"


async def test_input_rounds_are_bounded_and_undeclared_input_is_refused(tmp_path: Path) -> None:
    again = {"resultType": "input_required", "requestState": "again"}
    roots = {"resultType": "input_required", "inputRequests": {"r": {"method": "roots/list"}}}
    script = Script(
        tmp_path,
        [
            *STATELESS_OPENING,
            *[step for _ in range(3) for step in ({"expect": {"method": "tools/call"}}, {"reply": again})],
            {"expect": {"method": "tools/call"}},
            {"reply": roots},
            {"expect": {"method": "tools/call"}},
            {"reply": {"resultType": "later", "content": []}},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect(limits=Limits(max_input_rounds=2, close_grace_seconds=2.0)) as conn:
            with pytest.raises(
                RemoteProtocolError, match=r"after 2 retries of tools/call \(Limits.max_input_rounds\)"
            ):
                await conn.mcp.call_tool("t")
            with pytest.raises(RemoteProtocolError, match="a capability this host did not declare"):
                await conn.mcp.call_tool("t")
            with pytest.raises(RemoteProtocolError, match="unknown resultType"):
                await conn.mcp.call_tool("t")


async def test_a_silent_probe_falls_back_to_initialize_within_one_deadline_and_is_never_cancelled(
    tmp_path: Path,
) -> None:
    script = Script(
        tmp_path,
        [
            STEPS,
            {"expect": {"method": "server/discover"}},  # never answered
            {"expect": {"method": "initialize"}},
            {"reply": MCP_RESULT},
            {"expect": {"method": "notifications/initialized"}},
        ],
    )
    limits = Limits(discover_timeout_seconds=0.2, handshake_timeout_seconds=10.0, close_grace_seconds=2.0)
    with anyio.fail_after(20):
        async with script.connect(limits=limits) as conn:
            assert conn.era == "handshake"
            await script.finished(conn)
    assert "notifications/cancelled" not in [m.get("method") for m in script.messages(probe=True)]


async def test_an_initialize_refused_with_a_stateless_version_is_probed_again(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            STEPS,
            {"expect": {"method": "server/discover"}},  # still starting: no answer in the window
            {"expect": {"method": "initialize"}},
            {
                "reply_error": {
                    "code": -32022,
                    "message": "Unsupported protocol version",
                    "data": {"supported": ["2026-07-28"]},
                }
            },
            {"expect": {"method": "server/discover"}},
            {"reply": DISCOVER_RESULT},
        ],
    )
    limits = Limits(discover_timeout_seconds=0.2, handshake_timeout_seconds=10.0, close_grace_seconds=2.0)
    with anyio.fail_after(20):
        async with script.connect(limits=limits) as conn:
            assert conn.era == "stateless"


async def test_a_handshake_era_server_refusing_the_probe_gets_initialize(tmp_path: Path) -> None:
    script = Script(
        tmp_path,
        [
            STEPS,
            {"expect": {"method": "server/discover"}},
            {
                "reply_error": {
                    "code": -32022,
                    "message": "Unsupported",
                    "data": {"supported": ["2027-06-01", "2025-06-18"]},
                }
            },
            {"expect": {"method": "initialize"}},
            {"reply": MCP_RESULT},
            {"expect": {"method": "notifications/initialized"}},
        ],
    )
    with anyio.fail_after(20):
        async with script.connect() as conn:
            assert conn.era == "handshake" and conn.server_info is not None
            assert conn.server_info.protocol_version == "2025-06-18"


async def test_protocol_stateless_refuses_a_handshake_era_server_and_handshake_never_probes(
    tmp_path: Path,
) -> None:
    refusing = Script(tmp_path, [{"expect": {"method": "initialize"}}], name="refusing")
    with anyio.fail_after(20), pytest.raises(InitializeError) as failed:
        async with refusing.connect(protocol="stateless"):
            pass
    assert str(failed.value) == "the server refused server/discover: Method not found"
    assert failed.value.code == -32601
    plain = Script(tmp_path, [{"expect": {"method": "initialize"}}, {"reply": MCP_RESULT}], name="plain")
    with anyio.fail_after(20):
        async with plain.connect(protocol="handshake") as conn:
            assert conn.era == "handshake"
    assert "server/discover" not in [m.get("method") for m in plain.messages(probe=True)]


def test_the_probe_json_keeps_a_refused_version_complete(tmp_path: Path) -> None:
    refused = {
        "code": -32022,
        "message": "Unsupported protocol version",
        "data": {"supported": ["2099-01-01"], "requested": "2026-07-28"},
    }
    script = Script(tmp_path, [STEPS, {"expect": {"method": "server/discover"}}, {"reply_error": refused}])
    done = forkserver.run(
        [
            *forkserver.CLI,
            "probe",
            "--json",
            "--",
            sys.executable,
            str(SCRIPTED),
            str(script.path),
            str(script.record_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    error = json.loads(done.stdout)["error"]
    assert error["type"] == "InitializeError" and error["code"] == -32022
    assert error["data"] == {"supported": ["2099-01-01"], "requested": "2026-07-28"}
    assert "Unsupported protocol version; it supports protocol versions 2099-01-01" in error["message"]


def test_a_transport_says_whether_it_carries_the_stateless_revision() -> None:
    # stdio and Streamable HTTP (the automatic HTTP choice too) may carry MCP 2026-07-28;
    # HTTP+SSE and WebSocket do not say so, nor does any other object.
    from mcpl_host.transports.base import CarriesStateless, may_carry_stateless
    from mcpl_host.transports.http import StreamableHTTPTransport
    from mcpl_host.transports.http_sse import AutoHTTPTransport, SSETransport
    from mcpl_host.transports.stdio import StdioTransport
    from mcpl_host.transports.websocket import WebSocketTransport

    for carrier in (StdioTransport, StreamableHTTPTransport, AutoHTTPTransport):
        assert carrier.carries_stateless is True
    for other in (SSETransport, WebSocketTransport):
        assert not hasattr(other, "carries_stateless")
    assert not may_carry_stateless(object())

    class Says:
        carries_stateless = False

    assert isinstance(Says(), CarriesStateless) and not may_carry_stateless(Says())


def test_the_capability_checks_agree_with_isinstance_of_their_protocols() -> None:
    # starts_server / has_session / may_carry_stateless read one attribute instead of an
    # isinstance() against the runtime-checkable Protocol: the same answer for each
    # transport class, for a wrapper that sets the attribute on the instance only, for a
    # method blocked by None, and for objects without the attribute.
    from mcpl_host.transports.base import (
        CarriesStateless,
        HasSession,
        StartsServer,
        has_session,
        may_carry_stateless,
        starts_server,
    )
    from mcpl_host.transports.http import StreamableHTTPTransport
    from mcpl_host.transports.http_sse import AutoHTTPTransport, SSETransport
    from mcpl_host.transports.stdio import StdioTransport
    from mcpl_host.transports.websocket import WebSocketTransport

    class Bare:
        pass

    class Blocked:
        terminate_now = None

    class Stateless:
        carries_stateless = False

    wrapped = Bare()
    wrapped.terminate_now = lambda: None  # type: ignore[attr-defined]
    wrapped.session_id = None  # type: ignore[attr-defined]
    wrapped.carries_stateless = True  # type: ignore[attr-defined]
    samples: list[object] = [object(), Bare(), Blocked(), Stateless(), wrapped]
    for cls in (StdioTransport, StreamableHTTPTransport, AutoHTTPTransport, SSETransport, WebSocketTransport):
        samples.append(cls.__new__(cls))  # the class's attributes, no instance state
    for sample in samples:
        assert starts_server(sample) is isinstance(sample, StartsServer), sample
        assert has_session(sample) is isinstance(sample, HasSession), sample
        says = isinstance(sample, CarriesStateless) and bool(sample.carries_stateless)
        assert may_carry_stateless(sample) is says, sample
    assert starts_server(samples[-5]) and may_carry_stateless(samples[-5])  # stdio
    assert starts_server(wrapped) and has_session(wrapped) and may_carry_stateless(wrapped)

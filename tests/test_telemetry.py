"""OpenTelemetry (mcpl_host/telemetry.py) against fixtures/trace_server.py over real pipes:
the spans seen by the SDK's in-memory exporter (names, kinds, attributes, parent and child
across a server request served during a tool call), the trace context the server received
in ``params._meta``, the metrics read by the in-memory reader, and the package without
OpenTelemetry (a fresh interpreter)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from mcpl_host import (
    ConnectionLost,
    GrantPolicy,
    HandlerError,
    Host,
    HostedServer,
    HostHandlers,
    Limits,
    RemoteError,
    RequestContext,
    RequestTimeout,
    ServerConfig,
    connect,
)
from mcpl_host.telemetry import Telemetry, error_type, transport_attributes

from .wire import FIXTURES, bridge_url

pytestmark = pytest.mark.anyio
SERVER = (str(FIXTURES / "trace_server.py"),)
LIMITS = Limits(close_grace_seconds=1, terminate_grace_seconds=1)


class Recorded:
    """An SDK tracer provider and meter provider writing to memory, as a ``Telemetry``."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.metrics = InMemoryMetricReader()
        self.telemetry = Telemetry(
            tracer_provider=self.tracer_provider, meter_provider=MeterProvider(metric_readers=[self.metrics])
        )

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.spans.get_finished_spans() if span.name == name]

    def one(self, name: str) -> ReadableSpan:
        (span,) = self.named(name)
        return span

    def points(self, metric: str) -> list[HistogramDataPoint]:
        data = self.metrics.get_metrics_data()
        assert data is not None
        found: list[HistogramDataPoint] = []
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for each in scope.metrics:
                    if each.name == metric:
                        found.extend(p for p in each.data.data_points if isinstance(p, HistogramDataPoint))
        return found


class Handlers(HostHandlers):
    """Answers a push inside a span of the application's own (it must nest under the
    host's ``SERVER`` span)."""

    def __init__(self, tracer: trace.Tracer) -> None:
        super().__init__()
        self.tracer = tracer

    async def push_event(self, context: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        with self.tracer.start_as_current_span("app handles the push"):
            return {"accepted": True}


def fixture(recorded: Recorded) -> Any:
    config = ServerConfig(
        command=sys.executable,
        args=SERVER,
        grant_policy=GrantPolicy(grant_all_advertised=True),
        limits=LIMITS,
    )
    handlers = Handlers(recorded.tracer_provider.get_tracer("app"))
    return connect(config, handlers=handlers, telemetry=recorded.telemetry)


async def tool(conn: Any, name: str, **arguments: Any) -> Any:
    result = await conn.mcp.call_tool(name, arguments, timeout=20)
    return json.loads(result.text)


def traceparent(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


async def test_a_push_served_during_a_tool_call_is_a_child_of_the_call_and_parents_the_handlers_spans() -> (
    None
):
    recorded = Recorded()
    app = recorded.tracer_provider.get_tracer("app")
    with anyio.fail_after(30):
        async with fixture(recorded) as conn:
            with app.start_as_current_span("agent turn") as turn:
                assert await tool(conn, "push") == {"accepted": True}
            assert await tool(conn, "push", propagate=False) == {"accepted": True}
            version = conn.server_info.protocol_version
    call = recorded.named("tools/call push")[0]
    served, unparented = recorded.named("push/event")
    handler = recorded.named("app handles the push")[0]
    assert call.kind is SpanKind.CLIENT and served.kind is SpanKind.SERVER
    assert call.parent is not None and call.parent.span_id == turn.get_span_context().span_id
    assert served.parent is not None and served.parent.is_remote
    assert (served.parent.trace_id, served.parent.span_id) == (call.context.trace_id, call.context.span_id)
    assert handler.parent is not None and handler.parent.span_id == served.context.span_id
    assert call.attributes == {
        "mcp.method.name": "tools/call",
        "gen_ai.tool.name": "push",
        "gen_ai.operation.name": "execute_tool",
        "mcp.protocol.version": version,
        "network.transport": "pipe",
        "jsonrpc.request.id": call.attributes["jsonrpc.request.id"],
    }
    assert served.attributes is not None and served.attributes["mcp.method.name"] == "push/event"
    assert served.attributes["jsonrpc.request.id"] == "1"
    assert served.attributes["network.transport"] == "pipe"
    # Without trace context in _meta the served request is not a child of the call.
    assert unparented.context.trace_id != call.context.trace_id


async def test_the_server_sees_the_calls_trace_context_in_params_meta_and_failures_are_marked() -> None:
    recorded = Recorded()
    with anyio.fail_after(30):
        async with fixture(recorded) as conn:
            await conn.mcp.ping()
            seen = await tool(conn, "meta")
            with pytest.raises(Exception, match="bad arguments"):
                await conn.mcp.call_tool("fail", {}, timeout=20)
            broken = await conn.mcp.call_tool("broken", {}, timeout=20)
            unknown = await tool(conn, "unknown")
    assert broken.is_error
    assert unknown["error"]["code"] == -32601
    assert seen["meta"] == {"traceparent": traceparent(recorded.one("tools/call meta"))}
    assert seen["seen"]["ping"] == {"traceparent": traceparent(recorded.one("ping"))}
    assert seen["seen"]["initialize"] == {"traceparent": traceparent(recorded.one("initialize"))}
    fail = recorded.one("tools/call fail")
    assert fail.attributes is not None
    assert fail.attributes["error.type"] == fail.attributes["rpc.response.status_code"] == "-32602"
    assert fail.status.status_code is StatusCode.ERROR and fail.status.description == "bad arguments for fail"
    tool_error = recorded.one("tools/call broken")
    assert tool_error.attributes is not None and tool_error.attributes["error.type"] == "tool_error"
    assert tool_error.status.status_code is StatusCode.ERROR
    refused = recorded.one("fx/unknown")
    assert refused.kind is SpanKind.SERVER and refused.attributes is not None
    assert refused.attributes["error.type"] == "-32601" and refused.status.status_code is StatusCode.ERROR
    assert "mcp.protocol.version" not in (recorded.one("initialize").attributes or {})


async def test_operation_and_session_durations_are_recorded_in_seconds_with_the_conventions_attributes() -> (
    None
):
    recorded = Recorded()
    with anyio.fail_after(30):
        async with fixture(recorded) as conn:
            await conn.mcp.ping()
            await conn.mcp.ping()
            with pytest.raises(Exception, match="bad arguments"):
                await conn.mcp.call_tool("fail", {}, timeout=20)
            version = conn.server_info.protocol_version
    operations = recorded.points("mcp.client.operation.duration")
    pings = [
        p
        for p in operations
        if p.attributes
        == {"mcp.method.name": "ping", "mcp.protocol.version": version, "network.transport": "pipe"}
    ]
    assert len(pings) == 1 and pings[0].count == 2 and 0 < pings[0].sum < 60
    assert pings[0].explicit_bounds[:3] == (0.01, 0.02, 0.05)
    failed = [p for p in operations if (p.attributes or {}).get("gen_ai.tool.name") == "fail"]
    assert len(failed) == 1 and failed[0].attributes is not None
    assert failed[0].attributes["error.type"] == failed[0].attributes["rpc.response.status_code"] == "-32602"
    assert all("jsonrpc.request.id" not in (p.attributes or {}) for p in operations)
    (session,) = recorded.points("mcp.client.session.duration")
    assert session.count == 1
    assert session.attributes == {"mcp.protocol.version": version, "network.transport": "pipe"}


async def test_with_the_api_and_no_sdk_configured_the_connection_has_no_telemetry_and_sends_no_context() -> (
    None
):
    config = ServerConfig(command=sys.executable, args=SERVER, limits=LIMITS)
    assert HostedServer(config, telemetry=False).connection_telemetry() is None
    with anyio.fail_after(30):
        async with connect(config) as conn:  # the global providers: none configured
            assert conn.connection.telemetry is None  # nothing would record: nothing is paid
            await conn.mcp.ping()
            seen = await tool(conn, "meta")
    assert seen["meta"] is None and seen["seen"]["ping"] is None


def connected_in_a_new_process(before: str = "") -> list[Any]:
    """In a new interpreter, after ``before`` (code): ``import mcpl_host``, connect to the
    trace fixture and ping; the OpenTelemetry modules then loaded and whether the connection
    had no telemetry."""
    code = (
        "import json, sys\n"
        f"{before}"
        "import anyio, mcpl_host\n"
        "async def main():\n"
        f"    config = mcpl_host.ServerConfig(command=sys.executable, args={SERVER!r})\n"
        "    async with mcpl_host.connect(config) as conn:\n"
        "        await conn.mcp.ping()\n"
        "        return conn.connection.telemetry\n"
        "telemetry = anyio.run(main)\n"
        "loaded = [m for m, module in sys.modules.items()\n"
        "          if module is not None and m.startswith(('opentelemetry', 'mcpl_host.telemetry'))]\n"
        "print(json.dumps([loaded, telemetry is None]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result: list[Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_the_package_imports_and_connects_without_opentelemetry() -> None:
    not_installed = "sys.modules['opentelemetry'] = None\n"
    assert connected_in_a_new_process(not_installed) == [[], True]


def test_nothing_imports_opentelemetry_until_the_application_does() -> None:
    """Installed but not configured (the command line, an application without an SDK): a
    connection made with the default option never imports the API (docs/protocol.md OT4)."""
    assert connected_in_a_new_process() == [[], True]


def test_transport_attributes_follow_the_conventions_table_of_mcp_transports() -> None:
    assert transport_attributes(None) == {"network.transport": "pipe"}
    assert transport_attributes("https://user:pw@example.com/mcp") == {
        "network.transport": "tcp",
        "network.protocol.name": "http",
        "server.address": "example.com",
        "server.port": 443,
    }
    assert transport_attributes("ws://127.0.0.1:8765/") == {
        "network.transport": "tcp",
        "network.protocol.name": "websocket",
        "server.address": "127.0.0.1",
        "server.port": 8765,
    }
    assert transport_attributes("http://[::1]:notaport/") == {
        "network.transport": "tcp",
        "network.protocol.name": "http",
    }


def test_error_type_is_the_json_rpc_code_then_timeout_then_the_class_name() -> None:
    assert error_type(RemoteError(-32602, "bad")) == "-32602"
    assert error_type(HandlerError(-32001, "no")) == "-32001"
    assert error_type(RequestTimeout("tools/call", 1.0)) == "timeout"
    assert error_type(ConnectionLost("gone")) == "ConnectionLost"


async def test_a_host_gives_its_telemetry_to_every_server_and_false_turns_it_off() -> None:
    recorded = Recorded()
    configs = {"a": ServerConfig(command=sys.executable, args=SERVER)}
    assert Host(configs, telemetry=recorded.telemetry).server("a").hosted.telemetry is recorded.telemetry
    assert Host(configs, telemetry=False).server("a").hosted.telemetry is None


def test_the_library_pages_example_prints_the_spans_of_a_tool_call() -> None:
    page = (FIXTURES.parent / "docs" / "library.md").read_text(encoding="utf-8")
    found = re.search(r"^## OpenTelemetry\n.*?^```text\n(.*?)^```", page, re.S | re.M)
    assert found is not None
    done = subprocess.run(
        [sys.executable, "-c", found.group(1)],
        cwd=FIXTURES.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "5"
    assert (
        "CLIENT initialize " in lines
        and "CLIENT tools/call add add" in lines
        and "INTERNAL agent turn " in lines
    )


async def test_over_streamable_http_spans_carry_the_session_id_and_the_servers_address() -> None:
    recorded = Recorded()
    bridge = [sys.executable, str(FIXTURES / "http_bridge.py"), "--", sys.executable, *SERVER]
    with bridge_url(bridge, "http") as url, anyio.fail_after(30):
        config = ServerConfig(
            url=url,
            transport="streamable-http",
            grant_policy=GrantPolicy(grant_all_advertised=True),
            limits=LIMITS,
        )
        handlers = Handlers(recorded.tracer_provider.get_tracer("app"))
        async with connect(config, handlers=handlers, telemetry=recorded.telemetry) as conn:
            assert await tool(conn, "push") == {"accepted": True}
            session = conn.connection.transport.session_id
    assert isinstance(session, str) and session
    port = int(url.rsplit(":", 1)[1].strip("/"))
    remote = {
        "network.transport": "tcp",
        "network.protocol.name": "http",
        "server.address": "127.0.0.1",
        "server.port": port,
    }
    call, served = recorded.one("tools/call push"), recorded.one("push/event")
    for span in (call, served):
        assert span.attributes is not None
        assert {key: span.attributes.get(key) for key in remote} == remote
        assert span.attributes["mcp.session.id"] == session
    assert served.parent is not None and served.parent.span_id == call.context.span_id
    (operation,) = [
        p
        for p in recorded.points("mcp.client.operation.duration")
        if (p.attributes or {}).get("gen_ai.tool.name")
    ]
    assert (
        "mcp.session.id" not in (operation.attributes or {}) and operation.attributes["server.port"] == port
    )


async def test_a_push_refused_by_the_grant_has_a_server_span_with_its_code_and_no_secret_reaches_a_span() -> (
    None
):
    recorded = Recorded()
    config = ServerConfig(command=sys.executable, args=SERVER, limits=LIMITS)  # grants nothing
    with anyio.fail_after(30):
        async with connect(config, telemetry=recorded.telemetry) as conn:
            refused = await tool(conn, "push")
            with pytest.raises(RemoteError):
                await conn.mcp.read_resource(
                    "https://user:hunter2secret@example.com/r?access_token=abcdef123456"
                )
    call, served = recorded.one("tools/call push"), recorded.one("push/event")
    assert served.kind is SpanKind.SERVER and served.attributes is not None
    assert served.attributes["error.type"] == str(refused["error"]["code"])
    assert served.status.status_code is StatusCode.ERROR
    assert served.parent is not None and served.parent.span_id == call.context.span_id
    read = recorded.one("resources/read")
    assert read.attributes is not None
    shown = str(read.attributes["mcp.resource.uri"])
    assert shown.startswith("https://user:") and "hunter2secret" not in shown and "abcdef123456" not in shown


def test_a_telemetry_option_of_another_type_is_refused_when_the_server_is_made() -> None:
    with pytest.raises(TypeError, match="telemetry must be a bool, None or a Telemetry, not str"):
        HostedServer(ServerConfig(command=sys.executable, args=SERVER), telemetry="on")  # type: ignore[arg-type]

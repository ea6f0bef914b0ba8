"""OpenTelemetry spans and metrics of a connection (the ``mcpl-host[otel]`` extra).

This module imports ``opentelemetry`` (the API only) at the top: nothing imports it but
``hosted.resolve_telemetry``, when a ``HostedServer`` is made with telemetry on, so
``import mcpl_host`` never loads OpenTelemetry. A connection without telemetry holds None
where its ``ConnectionTelemetry`` would be (one ``is None`` check per request): telemetry
off, the API not installed, or, with the global providers, no SDK configured yet when the
transport was opened (``Telemetry.live``; a later transport of the server, after a restart
or on a new ``connect``, sees an SDK configured since).

What is emitted follows the OpenTelemetry semantic conventions for the Model Context
Protocol (semantic-conventions-genai, docs/gen-ai/mcp.md, status Development; "Spans",
"Metrics", "Recording MCP transport"):

- A ``CLIENT`` span per request the host sends (``Connection.request``), named
  ``{mcp.method.name} {target}`` where the target is the tool's name (``tools/call``) or the
  prompt's (``prompts/get``), else ``{mcp.method.name}``. Attributes: ``mcp.method.name``,
  ``jsonrpc.request.id``, ``mcp.protocol.version`` (once the handshake settled it),
  ``mcp.session.id`` (the Streamable HTTP ``Mcp-Session-Id``, when there is one),
  ``network.transport`` (``pipe`` for stdio, ``tcp`` otherwise), ``network.protocol.name``
  (``http``, ``websocket``), ``server.address`` / ``server.port`` (remote servers),
  ``gen_ai.tool.name`` and ``gen_ai.operation.name`` = ``execute_tool`` (``tools/call``
  only), ``gen_ai.prompt.name`` (``prompts/get``), ``mcp.resource.uri`` (``resources/read``,
  ``subscribe``, ``unsubscribe``; redacted). On failure ``error.type`` is the JSON-RPC error
  code as a string (with ``rpc.response.status_code`` the same), ``tool_error`` for a
  ``CallToolResult`` with ``isError: true``, ``timeout`` for ``RequestTimeout``,
  ``cancelled`` for a cancelled call, else the exception's class name; the span's status is
  ``ERROR`` with the error's message (escaped, cut and redacted: ``logging.log_value``).
- The trace context goes to the server in the request's ``params._meta`` through the
  configured propagators (``opentelemetry.propagate.inject``): W3C ``traceparent``,
  ``tracestate`` and ``baggage`` unprefixed (convention, "Context propagation"; MCP SEP-414,
  "Request _meta"). A request whose ``params`` is a list (JSON-RPC 2.0 §4.2 by-position)
  carries no context.
- A ``SERVER`` span for each request a server sends that the host serves
  (``InboundDispatcher``: ``push/event``, ``inference/request``, ``sampling/createMessage``,
  ``elicitation/create``, ``roots/list``...), its parent the context the server sent in
  ``params._meta`` when there is one (the ambient span, if any, is linked), else the
  ambient context; the span is current while the application's handler runs, so its own
  spans nest under it. A request refused at admission gets a span that ends at once with
  its error code. Only ``str`` values of ``_meta`` are read (a server's other values are
  ignored, never an error).
- Metrics: ``mcp.client.operation.duration`` (histogram, seconds, per request sent, with
  the span's low-cardinality attributes) and ``mcp.client.session.duration`` (histogram,
  seconds, from the end of the handshake to the end of the transport; ``error.type``
  ``ConnectionLost`` when the server went away), both with the convention's bucket
  boundaries.

The project's readings where the convention leaves a choice: docs/protocol.md OT1-OT5.

Not emitted: spans for notifications, the ``server/discover`` era probe
(``Connection.request_within``), ``mcp.server.*`` metrics, and the opt-in
``gen_ai.tool.call.arguments`` / ``result``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import anyio
from opentelemetry import context as otel_context
from opentelemetry import metrics, propagate, trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from mcpl_host.jsonrpc.errors import HandlerError, RemoteError, RequestTimeout
from mcpl_host.jsonrpc.values import is_object
from mcpl_host.logging import log_value
from mcpl_host.secrets import Redactor

__all__ = [
    "DURATION_BUCKETS",
    "INSTRUMENTATION_NAME",
    "ClientCall",
    "ConnectionTelemetry",
    "Telemetry",
    "error_type",
    "global_telemetry",
    "transport_attributes",
]

#: The instrumentation scope of every tracer and meter.
INSTRUMENTATION_NAME = "mcpl_host"
#: Seconds: the convention's ``ExplicitBucketBoundaries`` of both duration histograms.
DURATION_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
# The class of the API's global meter provider until one is set (not public, unlike
# ``trace.ProxyTracerProvider``).
_PROXY_METER_PROVIDER = "_ProxyMeterProvider"
_TARGETS = {"tools/call": "gen_ai.tool.name", "prompts/get": "gen_ai.prompt.name"}
_RESOURCE_METHODS = frozenset({"resources/read", "resources/subscribe", "resources/unsubscribe"})
# The attributes of a client span that stay off the operation-duration metric (ids: the
# convention's metric attributes name none of them; ``jsonrpc.request.id`` is set on the
# span alone).
_NOT_METRIC_KEYS = frozenset({"mcp.session.id", "mcp.resource.uri"})


class Telemetry:
    """Where a host's telemetry goes: ``tracer_provider`` and ``meter_provider`` (each None:
    the global one, ``opentelemetry.trace.get_tracer_provider()`` /
    ``metrics.get_meter_provider()``). Given as ``telemetry=`` to ``connect``,
    ``HostedServer`` or ``Host``; without it (or with ``telemetry=True``) the global
    providers are used whenever the OpenTelemetry API is installed, and ``telemetry=False``
    turns telemetry off."""

    __slots__ = (
        "_live",
        "_meter",
        "_tracer",
        "meter_provider",
        "operation_duration",
        "session_duration",
        "tracer_provider",
    )

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        # Whether something records; stays True once it is (a global provider is set once).
        self._live = tracer_provider is not None or meter_provider is not None
        # The scope has no version: reading the installed package's (importlib.metadata)
        # costs a scan of sys.path, and the layers below hold no copy of it.
        self._tracer = trace.get_tracer(INSTRUMENTATION_NAME, None, tracer_provider)
        self._meter = metrics.get_meter(INSTRUMENTATION_NAME, "", meter_provider)
        self.operation_duration = self._meter.create_histogram(
            "mcp.client.operation.duration",
            unit="s",
            description="The duration of the MCP request or notification as observed on the sender"
            " from the time it was sent until the response or ack is received.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.session_duration = self._meter.create_histogram(
            "mcp.client.session.duration",
            unit="s",
            description="The duration of the MCP session as observed on the MCP client.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )

    def __repr__(self) -> str:
        return f"<Telemetry tracer_provider={self.tracer_provider!r} meter_provider={self.meter_provider!r}>"

    @property
    def tracer(self) -> trace.Tracer:
        return self._tracer

    def live(self) -> bool:
        """Whether any span or measurement can be recorded: a provider was given, or a global
        one is set (the OpenTelemetry API's own proxies, in place until an SDK is configured,
        record nothing). Once True, always True (a global provider cannot be unset). Asked
        once per transport (``HostedServer.connection_telemetry``): reading the global
        providers costs microseconds, too much for every request."""
        if self._live:
            return True
        if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider) or (
            type(metrics.get_meter_provider()).__name__ != _PROXY_METER_PROVIDER
        ):
            self._live = True
        return self._live

    def for_connection(self, static: Mapping[str, AttributeValue], redactor: Redactor) -> ConnectionTelemetry:
        """The telemetry of one transport, with ``static`` attributes (``transport_attributes``)
        and the server's ``redactor`` for the server values shown."""
        return ConnectionTelemetry(self, static, redactor)


_shared: list[Telemetry] = []  # the global providers' one Telemetry, once made


def global_telemetry() -> Telemetry:
    """The one ``Telemetry`` of the global providers (made on first use, then shared, so its
    instruments are created once)."""
    if not _shared:
        _shared.append(Telemetry())
    return _shared[0]


def transport_attributes(url: str | None) -> dict[str, AttributeValue]:
    """The attributes of a server's transport (convention, "Recording MCP transport"):
    ``{"network.transport": "pipe"}`` for stdio (``url`` None); for a URL, ``tcp``,
    ``network.protocol.name`` ``websocket`` (``ws``/``wss``) or ``http``, and
    ``server.address`` / ``server.port`` (the scheme's default port when the URL names
    none). Never raises: an unreadable URL gives the transport only."""
    if url is None:
        return {"network.transport": "pipe"}
    found: dict[str, AttributeValue] = {"network.transport": "tcp"}
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        found["network.protocol.name"] = "websocket" if scheme in ("ws", "wss") else "http"
        host, port = parts.hostname, parts.port  # .port raises for a port that is no number
        if host:
            found["server.address"] = host
            found["server.port"] = port or (443 if scheme in ("https", "wss") else 80)
    except ValueError:
        pass
    return found


class _MetaGetter(Getter[Mapping[str, object]]):
    """Reads a server's ``_meta`` for the propagators: only ``str`` values (a server may
    send anything; a propagator given another type would raise)."""

    def get(self, carrier: Mapping[str, object], key: str) -> list[str] | None:
        value = carrier.get(key)
        return [value] if isinstance(value, str) else None

    def keys(self, carrier: Mapping[str, object]) -> list[str]:
        return list(carrier)


_META_GETTER = _MetaGetter()


def error_type(exc: BaseException) -> str:
    """``error.type`` of a failed operation: the JSON-RPC error code as a string
    (``RemoteError``, ``HandlerError``), ``timeout``, ``cancelled``, else the exception's
    class name (the convention's "Recording Errors")."""
    if isinstance(exc, (RemoteError, HandlerError)):
        return str(exc.code)
    if isinstance(exc, RequestTimeout):
        return "timeout"
    try:
        cancelled = anyio.get_cancelled_exc_class()
    except RuntimeError:  # no event loop: nothing was cancelled
        return type(exc).__qualname__
    return "cancelled" if isinstance(exc, cancelled) else type(exc).__qualname__


class ConnectionTelemetry:
    """The telemetry of one transport: starts the ``CLIENT`` span of each request sent
    (``client_call``), wraps each served server request in a ``SERVER`` span (``served``),
    and records the session's duration (``opened``, ``ended``). ``protocol_version`` and
    ``session_id`` are set when the handshake is over."""

    __slots__ = ("_started", "_static", "protocol_version", "redactor", "session_id", "settings")

    def __init__(self, settings: Telemetry, static: Mapping[str, AttributeValue], redactor: Redactor) -> None:
        self.settings = settings
        self._static = dict(static)
        self.redactor = redactor
        self._started: float | None = None
        self.protocol_version: str | None = None
        self.session_id: str | None = None

    def attributes(self, method: str) -> dict[str, AttributeValue]:
        """The attributes every span of ``method`` on this transport has (a new dict)."""
        attributes: dict[str, AttributeValue] = {"mcp.method.name": method, **self._static}
        if self.protocol_version is not None:
            attributes["mcp.protocol.version"] = self.protocol_version
        if self.session_id is not None:
            attributes["mcp.session.id"] = self.session_id
        return attributes

    # --- the session -----------------------------------------------------------------------

    def opened(self, protocol_version: str, session_id: str | None) -> None:
        """The handshake is over: later spans carry ``protocol_version`` and ``session_id``,
        and the session's duration counts from now."""
        self.protocol_version = protocol_version
        self.session_id = session_id
        self._started = time.perf_counter()

    def ended(self, lost: BaseException | None) -> None:
        """The transport ended (``lost``: why, when the server went away): records
        ``mcp.client.session.duration`` once, if the handshake was over."""
        started, self._started = self._started, None
        if started is None:
            return
        attributes = {
            key: value
            for key, value in self.attributes("").items()
            if key
            in (
                "mcp.protocol.version",
                "network.transport",
                "network.protocol.name",
                "server.address",
                "server.port",
            )
        }
        if lost is not None:
            attributes["error.type"] = type(lost).__qualname__
        self.settings.session_duration.record(time.perf_counter() - started, attributes)

    # --- host -> server ----------------------------------------------------------------------

    def client_call(self, method: str, params: Any) -> ClientCall:
        """Start the ``CLIENT`` span of a request of ``method`` with ``params`` (module
        rules); its ``params`` carry the trace context in ``_meta``."""
        return ClientCall(self, method, params)

    # --- server -> host ----------------------------------------------------------------------

    def served(
        self, method: str, request_id: object, params: Any, decision: Callable[[Any], Any] | HandlerError
    ) -> Callable[[Any], Any] | HandlerError:
        """``decision`` (the job that serves a server's request, or the error it is refused
        with at once), traced: a refusal's ``SERVER`` span ends now; a job is wrapped so its
        span covers the handler, current while it runs (module rules)."""
        if isinstance(decision, HandlerError):
            span = self._server_span(method, request_id, params)
            _failed(span, decision, self.redactor)
            span.end()
            return decision
        job = decision

        async def traced(request: Any) -> Any:
            span = self._server_span(method, request_id, params)
            try:
                with trace.use_span(
                    span, end_on_exit=False, record_exception=False, set_status_on_exception=False
                ):
                    result = await job(request)
            except BaseException as exc:
                _failed(span, exc, self.redactor)
                raise
            finally:
                span.end()
            return result

        return traced

    def _server_span(self, method: str, request_id: object, params: Any) -> trace.Span:
        attributes = self.attributes(log_value(method, self.redactor, quotes=False))
        if request_id is not None:
            attributes["jsonrpc.request.id"] = str(request_id)
        parent = None
        links: list[Link] = []
        meta = params.get("_meta") if is_object(params) else None
        if is_object(meta):
            extracted = propagate.extract(meta, getter=_META_GETTER)
            if trace.get_current_span(extracted).get_span_context().is_valid:
                parent = extracted
                ambient = trace.get_current_span().get_span_context()
                if ambient.is_valid:
                    links.append(Link(ambient))
        name = str(attributes["mcp.method.name"])
        return self.settings.tracer.start_span(
            name, context=parent, kind=SpanKind.SERVER, attributes=attributes, links=links
        )


class ClientCall:
    """One request's ``CLIENT`` span (``ConnectionTelemetry.client_call``): ``params`` (with
    the trace context in ``_meta``), ``sent(id)``, then ``succeeded(result)`` or
    ``failed(exc)``, which end the span and record ``mcp.client.operation.duration``."""

    __slots__ = ("_owner", "_span", "_start", "attributes", "params")

    def __init__(self, owner: ConnectionTelemetry, method: str, params: Any) -> None:
        self._owner = owner
        attributes = owner.attributes(method)
        name = method
        target_key = _TARGETS.get(method)
        if target_key is not None and is_object(params):
            target = params.get("name")
            if isinstance(target, str):
                attributes[target_key] = target
                name = f"{method} {target}"
                if method == "tools/call":
                    attributes["gen_ai.operation.name"] = "execute_tool"
        elif method in _RESOURCE_METHODS and is_object(params):
            uri = params.get("uri")
            if isinstance(uri, str):
                attributes["mcp.resource.uri"] = log_value(uri, owner.redactor, quotes=False)
        self.attributes = attributes
        self._span = span = owner.settings.tracer.start_span(
            name, kind=SpanKind.CLIENT, attributes=attributes
        )
        self.params = params
        if span.get_span_context().is_valid and (params is None or is_object(params)):
            carrier: dict[str, str] = {}
            propagate.inject(carrier, context=trace.set_span_in_context(span, otel_context.Context()))
            if carrier:
                params = dict(params or {})
                meta = params.get("_meta")
                params["_meta"] = {**(meta if is_object(meta) else {}), **carrier}
                self.params = params
        self._start = time.perf_counter()

    def sent(self, request_id: object) -> None:
        """The request went out with ``request_id``."""
        self._span.set_attribute("jsonrpc.request.id", str(request_id))

    def succeeded(self, result: Any) -> None:
        """The answer came: a ``tools/call`` result with ``isError: true`` is ``tool_error``."""
        if (
            self.attributes["mcp.method.name"] == "tools/call"
            and is_object(result)
            and result.get("isError") is True
        ):
            self.attributes["error.type"] = "tool_error"
            self._span.set_attribute("error.type", "tool_error")
            self._span.set_status(Status(StatusCode.ERROR))
        self._end()

    def failed(self, exc: BaseException) -> None:
        """The request failed with ``exc`` (module rules for ``error.type``)."""
        kind = _failed(self._span, exc, self._owner.redactor)
        self.attributes["error.type"] = kind
        if isinstance(exc, RemoteError):
            self.attributes["rpc.response.status_code"] = kind
        self._end()

    def _end(self) -> None:
        self._span.end()
        attributes = self.attributes
        chosen = attributes
        if "mcp.session.id" in attributes or "mcp.resource.uri" in attributes:
            chosen = {key: value for key, value in attributes.items() if key not in _NOT_METRIC_KEYS}
        self._owner.settings.operation_duration.record(time.perf_counter() - self._start, chosen)


def _failed(span: trace.Span, exc: BaseException, redactor: Redactor) -> str:
    """Mark ``span`` failed with ``exc``: ``error.type`` (and ``rpc.response.status_code``
    for a JSON-RPC error), status ``ERROR`` with the error's message (escaped, cut,
    redacted). Returns the ``error.type``."""
    kind = error_type(exc)
    span.set_attribute("error.type", kind)
    if isinstance(exc, (RemoteError, HandlerError)):
        span.set_attribute("rpc.response.status_code", kind)
        description = log_value(exc.message, redactor, quotes=False)
    else:
        description = log_value(str(exc), redactor, quotes=False)
    span.set_status(Status(StatusCode.ERROR, description))
    return kind

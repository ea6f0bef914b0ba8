"""The stateless MCP revision 2026-07-28, as pure rules: the ``server/discover`` probe and
the fallback to the ``initialize`` handshake, per-request ``_meta``, ``resultType`` and the
multi-round-trip form (MRTR) that replaces server-to-client requests.

Sources: MCP 2026-07-28 "Versioning and Compatibility" (protocol version negotiation;
backward compatibility with initialization-based versions), "Overview" (``resultType``;
``_meta`` per-request protocol fields; error codes), "Multi Round-Trip Requests",
"Streamable HTTP" (request metadata; backward compatibility), and its changelog (major
changes 2, 3, 5, 7, 8). The project's reading: docs/protocol.md, "The stateless revision".

Rules of this module:

- The era is a property of the server, settled once per connection by the handshake: the
  **handshake** era (``initialize``; every version in ``handshake.SUPPORTED_PROTOCOL_VERSIONS``)
  or the **stateless** era (``STATELESS_PROTOCOL_VERSIONS``).
- ``protocol="auto"`` (the default) probes with ``server/discover`` where the transport may
  carry the stateless revision (stdio, Streamable HTTP; never HTTP+SSE or WebSocket: the
  transport says so, ``transports.base.CarriesStateless``). What
  follows a probe is decided here (``after_discover_error``, ``after_discover_result``,
  ``after_initialize_refusal``): a recognized stateless error (``-32022`` with a
  ``supported`` list, ``-32020``, ``-32021``) is evidence of a stateless server; anything
  else (another error, an HTTP refusal without such a body, no answer within the probe
  window) is a handshake-era server and ``initialize`` follows. One deadline,
  ``Limits.handshake_timeout_seconds``, covers the probe and the handshake; the probe
  waits at most ``Limits.discover_timeout_seconds`` of it and is never cancelled.
- MCPL stays on the handshake era (its servers send requests to the host): a discover
  result whose capabilities carry ``experimental.mcpl`` is answered with ``initialize``
  when the host offers MCPL, and a stateless connection never speaks MCPL.
- In the stateless era every request carries ``_meta`` with the protocol version, the
  client's capabilities and identity, and the log level when the application set one
  (``request_meta``); ``ping`` and ``logging/setLevel`` are never sent, and
  ``notifications/roots/list_changed`` neither (removed, changelog major change 5).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from mcpl_host.handshake import SUPPORTED_PROTOCOL_VERSIONS, ServerInfo
from mcpl_host.jsonrpc.errors import InitializeError, RemoteProtocolError
from mcpl_host.jsonrpc.values import JSONObject, is_array, is_object
from mcpl_host.logging import Redactor, log_value

__all__ = [
    "checked_protocol",
    "CLIENT_CAPABILITIES_KEY",
    "CLIENT_INFO_KEY",
    "HEADER_MISMATCH",
    "INPUT_REQUEST_METHODS",
    "LATEST_STATELESS_VERSION",
    "LOG_LEVELS",
    "LOG_LEVEL_KEY",
    "PROTOCOL_CHOICES",
    "MISSING_REQUIRED_CLIENT_CAPABILITY",
    "PROTOCOL_VERSION_KEY",
    "SERVER_INFO_KEY",
    "STATELESS_PROTOCOL_VERSIONS",
    "UNSUPPORTED_PROTOCOL_VERSION",
    "Era",
    "EraProbe",
    "FallBack",
    "InputRequired",
    "ProtocolChoice",
    "Retry",
    "after_discover_error",
    "after_discover_result",
    "after_initialize_refusal",
    "discover_params",
    "header_value",
    "http_refusal_answer",
    "http_request_headers",
    "input_required",
    "is_stateless_request",
    "probe_skipped",
    "stateless_capabilities",
    "stream_lost_answer",
    "request_meta",
    "result_type",
    "retry_params",
    "stamped",
    "with_extensions",
]

#: Stateless protocol versions this host implements, newest first.
STATELESS_PROTOCOL_VERSIONS: tuple[str, ...] = ("2026-07-28",)
LATEST_STATELESS_VERSION = STATELESS_PROTOCOL_VERSIONS[0]

#: Reserved ``_meta`` keys (MCP 2026-07-28 "Overview", ``_meta``).
PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_INFO_KEY = "io.modelcontextprotocol/clientInfo"
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
LOG_LEVEL_KEY = "io.modelcontextprotocol/logLevel"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"

#: Error codes of MCP 2026-07-28 ("Overview", error codes).
HEADER_MISMATCH = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022
_STATELESS_ERRORS = frozenset(
    {HEADER_MISMATCH, MISSING_REQUIRED_CLIENT_CAPABILITY, UNSUPPORTED_PROTOCOL_VERSION}
)

#: The requests an ``InputRequiredResult`` may carry (MCP 2026-07-28 "Multi Round-Trip
#: Requests", InputRequests).
INPUT_REQUEST_METHODS = frozenset({"roots/list", "sampling/createMessage", "elicitation/create"})
#: The requests a server may answer with ``InputRequiredResult`` (same section, supported
#: requests).
MRTR_METHODS = frozenset({"tools/call", "prompts/get", "resources/read"})
#: MCP logging levels (RFC 5424 severities), least severe first.
LOG_LEVELS: tuple[str, ...] = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)

#: Which protocol era a connection is in.
Era = Literal["handshake", "stateless"]
#: What the application asks for: probe and fall back, only ``initialize``, or only stateless.
ProtocolChoice = Literal["auto", "handshake", "stateless"]
#: The values of ``ProtocolChoice``.
PROTOCOL_CHOICES: tuple[ProtocolChoice, ...] = ("auto", "handshake", "stateless")


def checked_protocol(protocol: ProtocolChoice) -> ProtocolChoice:
    """``protocol`` itself when it is one of ``PROTOCOL_CHOICES``; raises ``ValueError``
    naming them otherwise (the one check of the setting: config key ``protocol``,
    ``set_protocol``)."""
    if protocol not in PROTOCOL_CHOICES:
        raise ValueError(f"protocol must be one of {', '.join(PROTOCOL_CHOICES)}, not {protocol!r}")
    return protocol


@dataclass(frozen=True, slots=True)
class FallBack:
    """Speak the handshake era: send ``initialize``. ``reason``: why (for a debug log)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Retry:
    """Probe again with ``server/discover`` at ``version`` (a mutual stateless version the
    server named)."""

    version: str


@dataclass(frozen=True, slots=True)
class EraProbe:
    """What settled the era of one connection (docs/protocol.md S8, S3a), for the probe's era
    line and its JSON (``eraProbe``).

    ``sent``: the probe sent (``"server/discover"``), or None when none was; ``outcome``:
    what happened to it, or why none was sent (one phrase, no server text: it may be
    shown unescaped); ``fallback``: what followed (``"initialize"``, or
    ``"initialize on a restarted server"`` when the probe cost the server its transport),
    None when the probe's answer settled the stateless era or no probe was sent."""

    sent: str | None
    outcome: str
    fallback: str | None = None

    def as_json(self) -> JSONObject:
        """``{"sent", "outcome", "fallback"}``, as the probe's ``--json`` carries it."""
        return {"sent": self.sent, "outcome": self.outcome, "fallback": self.fallback}


def probe_skipped(setting: ProtocolChoice, *, learned: Era | None, says_mcpl: bool) -> str | None:
    """Why a new connection of a server with ``protocol="auto"`` sends ``initialize`` first,
    without the ``server/discover`` probe (docs/protocol.md S3a, S3b), or None: probe.

    ``setting``: the configured ``protocol`` (``"handshake"`` and ``"stateless"`` force an
    era and are not changed here: None); ``learned``: the era an earlier connection of the
    server spoke (``HostedServer.learned_era``): a handshake-era server is not probed
    again; ``says_mcpl``: the entry says the server speaks MCPL (a ``compat`` of
    ``"strict"`` or ``"0.4"``, or a grant of MCPL paths), and MCPL runs on the handshake
    era (S7), so the probe could only cost the server. Either way the connection stays
    ``auto``: a stateless server refuses ``initialize`` with ``-32022`` naming a stateless
    version and is probed at it (``after_initialize_refusal``)."""
    if setting != "auto":
        return None
    if learned == "handshake":
        return "not sent: the server spoke the handshake era on an earlier connection"
    if says_mcpl:
        return "not sent: the entry says MCPL, which runs on the handshake era"
    return None


def request_meta(
    version: str,
    client_info: Mapping[str, Any],
    capabilities: Mapping[str, Any],
    log_level: str | None = None,
) -> JSONObject:
    """The reserved ``_meta`` keys of one stateless request (MCP 2026-07-28 "Overview",
    per-request protocol fields): protocol version, client capabilities, client info and,
    when set, the least log level the server should emit."""
    meta: JSONObject = {
        PROTOCOL_VERSION_KEY: version,
        CLIENT_CAPABILITIES_KEY: dict(capabilities),
        CLIENT_INFO_KEY: dict(client_info),
    }
    if log_level is not None:
        meta[LOG_LEVEL_KEY] = log_level
    return meta


def with_extensions(capabilities: Mapping[str, Any], extensions: Mapping[str, Any]) -> dict[str, Any]:
    """``capabilities`` with ``extensions`` (identifier -> settings) added to their
    ``extensions`` object: the per-request declaration of an extension (MCP 2026-07-28
    "Overview", client capabilities; the tasks extension, "Capability Negotiation")."""
    out = dict(capabilities)
    existing = out.get("extensions")
    out["extensions"] = {**(existing if is_object(existing) else {}), **extensions}
    return out


def stamped(params: object, meta: Mapping[str, object]) -> JSONObject:
    """A copy of request ``params`` (an object or None) whose ``_meta`` holds ``meta`` (our
    reserved keys win; the caller's other ``_meta`` keys, such as ``progressToken``, stay).
    Raises ``ValueError`` for params that are not an object (the revision's requests all
    take objects)."""
    if params is None:
        params = {}
    if not is_object(params):
        raise ValueError("a stateless request's params must be an object")
    out = dict(params)
    existing = out.get("_meta")
    out["_meta"] = {**(existing if is_object(existing) else {}), **meta}
    return out


def discover_params(
    version: str, client_info: Mapping[str, object], capabilities: Mapping[str, object]
) -> JSONObject:
    """Params of ``server/discover`` at ``version`` (MCP 2026-07-28 "server/discover")."""
    return {"_meta": request_meta(version, client_info, capabilities)}


def stateless_capabilities(features: Mapping[str, Any]) -> dict[str, Any]:
    """The client capabilities of a stateless request from the handshake-era ones
    (``ClientFeatures.capabilities()``): ``roots`` loses ``listChanged`` (its notification
    is removed in 2026-07-28); MCPL is never offered (module rules)."""
    out = {
        key: dict(value) if is_object(value) else value
        for key, value in features.items()
        if key != "experimental"
    }
    if is_object(out.get("roots")):
        out["roots"] = {key: value for key, value in out["roots"].items() if key != "listChanged"}
    return out


def is_stateless_request(message: object) -> bool:
    """Whether a JSON-RPC message is a request that names a stateless protocol version in
    its ``_meta`` (the transports route it as a stateless request: MCP 2026-07-28
    "Streamable HTTP", request metadata)."""
    if not is_object(message) or "id" not in message:
        return False
    params = message.get("params")
    meta = params.get("_meta") if is_object(params) else None
    return is_object(meta) and isinstance(meta.get(PROTOCOL_VERSION_KEY), str)


#: Requests whose ``Mcp-Name`` header mirrors a params field (MCP 2026-07-28 "Streamable
#: HTTP", standard request headers).
_NAME_FIELDS = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    # The tasks extension, "Streamable HTTP: Routing Headers" (docs/protocol.md TK8).
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}
_HEADER_SAFE = frozenset(chr(c) for c in range(0x20, 0x7F))


def header_value(text: str) -> str:
    """``text`` as an HTTP header value (same section, value encoding): as is when it is
    visible ASCII and spaces without leading or trailing blanks and does not look like the
    sentinel, else ``=?base64?<base64 of its UTF-8>?=``."""
    plain = (
        text
        and all(ch in _HEADER_SAFE for ch in text)
        and text == text.strip(" \t")
        and not (text.startswith("=?base64?") and text.endswith("?="))
    )
    if plain:
        return text
    return "=?base64?" + base64.b64encode(text.encode("utf-8", "surrogatepass")).decode("ascii") + "?="


def http_request_headers(message: Mapping[str, object]) -> dict[str, str]:
    """The request metadata headers of one stateless request over Streamable HTTP (MCP
    2026-07-28 "Streamable HTTP", request metadata): ``MCP-Protocol-Version`` (its
    ``_meta`` version), ``Mcp-Method``, and ``Mcp-Name`` for ``tools/call``, ``prompts/get``
    (``params.name``) and ``resources/read`` (``params.uri``). Tool parameters marked
    ``x-mcp-header`` are mirrored by the transport (``param_headers``; docs/protocol.md
    S10)."""
    params = message.get("params")
    params = params if is_object(params) else {}
    meta = params.get("_meta")
    version = meta.get(PROTOCOL_VERSION_KEY) if is_object(meta) else None
    method = message.get("method")
    headers: dict[str, str] = {}
    if isinstance(version, str):
        headers["MCP-Protocol-Version"] = header_value(version)
    if isinstance(method, str):
        headers["Mcp-Method"] = header_value(method)
        field_name = _NAME_FIELDS.get(method)
        name = params.get(field_name) if field_name is not None else None
        if isinstance(name, str):
            headers["Mcp-Name"] = header_value(name)
    return headers


def http_refusal_answer(request_id: object, status: int, sentence: str) -> dict[str, Any]:
    """The JSON-RPC error answer a Streamable HTTP transport passes on for a stateless
    request refused with an HTTP status and no JSON-RPC answer of its own (a handshake-era
    server refusing the probe: MCP 2026-07-28 "Streamable HTTP", backward compatibility),
    and for any request whose JSON answer body held no answer to it (empty, or another
    message).
    Code ``-32600``, which is no stateless evidence; ``data.httpStatus`` says it was made
    here, not sent by the server."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": -32600, "message": sentence, "data": {"httpStatus": status, "fromHost": True}},
    }


def stream_lost_answer(request_id: object, what: str) -> dict[str, Any]:
    """The JSON-RPC error answer a Streamable HTTP transport passes on for a stateless
    request whose response stream ended without its answer (MCP 2026-07-28 "Streamable
    HTTP": a stream is not resumed across requests; "Subscriptions": a transport close ends
    a listen). ``what``: the request, for the message (``the POST of tools/call``). Code
    ``-32603``; ``data.fromHost`` says it was made here, not sent by the server."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {
            "code": -32603,
            "message": f"the stream of {what} ended before its answer",
            "data": {"fromHost": True},
        },
    }


def _supported(data: object) -> list[str] | None:
    supported = data.get("supported") if is_object(data) else None
    if not is_array(supported):
        return None
    return [v for v in supported if isinstance(v, str)]


def _mutual(versions: list[str]) -> str | None:
    return next((v for v in STATELESS_PROTOCOL_VERSIONS if v in versions), None)


def _refused(what: str, code: int, message: str, data: object, redactor: Redactor | None) -> InitializeError:
    supported = _supported(data)
    shown = log_value(message, redactor, quotes=False)  # shown once, as sent (escaped for a terminal)
    if supported is not None:
        names = ", ".join(log_value(v, redactor, max_units=40) for v in supported[:20]) or "none"
        implemented = ", ".join((*STATELESS_PROTOCOL_VERSIONS, *SUPPORTED_PROTOCOL_VERSIONS))
        text = (
            f"the server refused {what}: {shown}; it supports protocol versions {names}, none of"
            f" which this host implements ({implemented})"
        )
    else:
        text = f"the server refused {what}: {shown}"
    return InitializeError(text, code=code, data=data)


def after_discover_error(
    code: int, message: str, data: object, *, retried: bool, redactor: Redactor | None = None
) -> FallBack | Retry | InitializeError:
    """What follows an error answer to ``server/discover`` (MCP 2026-07-28 "Versioning and
    Compatibility", backward compatibility): ``Retry`` at a mutual stateless version the
    server's ``-32022`` names (once: ``retried`` says a retry was made); ``FallBack`` for
    any error that is not stateless evidence, and for a ``-32022`` whose ``supported`` list
    names a handshake version we implement; else the ``InitializeError`` to raise (a
    stateless server that shares no version with us, or refused the probe with ``-32020`` /
    ``-32021``), keeping the server's message, code and ``data`` (its ``supported`` list)."""
    if code not in _STATELESS_ERRORS:
        return FallBack(f"server/discover answered error {code}")
    supported = _supported(data)
    if code == UNSUPPORTED_PROTOCOL_VERSION and supported is not None:
        mutual = _mutual(supported)
        if mutual is not None and not retried:
            return Retry(mutual)
        if any(v in SUPPORTED_PROTOCOL_VERSIONS for v in supported):
            return FallBack("the server names a handshake-era version")
    return _refused("server/discover", code, message, data, redactor)


def after_initialize_refusal(code: int, data: object, *, probed: bool) -> Retry | None:
    """An ``initialize`` refused with ``-32022`` whose ``supported`` list names a stateless
    version we implement is stateless evidence (a server that did not answer the probe in
    its window, or was not probed): ``Retry`` the probe at that version, once (``probed``:
    a discover result was already refused or used). None: the refusal stands."""
    if code != UNSUPPORTED_PROTOCOL_VERSION or probed:
        return None
    mutual = _mutual(_supported(data) or [])
    return Retry(mutual) if mutual is not None else None


def after_discover_result(
    result: object, *, offers_mcpl: bool, redactor: Redactor | None = None
) -> ServerInfo | FallBack:
    """Read a ``server/discover`` result (``DiscoverResult``: ``supportedVersions``,
    ``capabilities``, ``instructions``, ``_meta`` serverInfo): the ``ServerInfo`` of a
    stateless connection at the newest mutual version, or ``FallBack`` when the result is
    not an object with a ``supportedVersions`` array, names no stateless version we
    implement (a handshake-era advertisement), or advertises MCPL while the host offers it
    (module rules).
    """
    if not is_object(result) or not is_array(result.get("supportedVersions")):
        return FallBack("the server's discover result is not a DiscoverResult")
    versions = [v for v in cast("list[Any]", result["supportedVersions"]) if isinstance(v, str)]
    mutual = _mutual(versions)
    if mutual is None:
        return FallBack("the server's discover result names no stateless version this host implements")
    capabilities = result.get("capabilities")
    capabilities = capabilities if is_object(capabilities) else {}
    experimental = capabilities.get("experimental")
    if offers_mcpl and is_object(experimental) and "mcpl" in experimental:
        return FallBack("the server advertises MCPL, which runs on the handshake era")
    meta = result.get("_meta")
    info = meta.get(SERVER_INFO_KEY) if is_object(meta) else None
    info = info if is_object(info) else {}
    instructions = result.get("instructions")
    name, version = info.get("name"), info.get("version")
    return ServerInfo(
        name=name if isinstance(name, str) else "",
        version=version if isinstance(version, str) else "",
        protocol_version=mutual,
        capabilities=capabilities,
        instructions=instructions if isinstance(instructions, str) else None,
        mcpl=None,
        era="stateless",
        supported_versions=tuple(versions),
    )


# --- results -----------------------------------------------------------------------------------


def result_type(
    result: object, method: str, *, task_declared: bool = False
) -> Literal["complete", "input_required", "task"]:
    """The ``resultType`` of a result (MCP 2026-07-28 "Overview", ResultType): absent
    (an earlier server) is ``"complete"``; ``"input_required"`` only where the revision
    allows it (``MRTR_METHODS``); ``"task"`` (the tasks extension, "Polymorphic Results")
    only for ``tools/call`` sent with the extension declared (``task_declared``;
    docs/protocol.md TK2).

    Raises:
        RemoteProtocolError: an unknown ``resultType`` (the revision: invalid), or
            ``input_required`` or ``task`` on a request that may not return it.
    """
    kind = result.get("resultType", "complete") if is_object(result) else "complete"
    if kind == "complete":
        return "complete"
    if kind == "task":
        if method != "tools/call" or not task_declared:
            raise RemoteProtocolError(
                f"the server answered {method} with a task, which"
                + (
                    " only tools/call may return"
                    if method != "tools/call"
                    else " the request did not ask for"
                )
            )
        return "task"
    if kind == "input_required":
        if method not in MRTR_METHODS:
            raise RemoteProtocolError(
                f"the server answered {method} with an input_required result, which {method} may not return"
            )
        return "input_required"
    shown = log_value(kind, max_units=40)
    raise RemoteProtocolError(f"the server's {method} result has an unknown resultType {shown}")


@dataclass(frozen=True, slots=True)
class InputRequired:
    """An ``InputRequiredResult`` (MCP 2026-07-28 "Multi Round-Trip Requests"): the input
    requests by key (``(method, params)``) and the opaque ``request_state`` to echo (None
    when not sent; never inspected)."""

    requests: dict[str, tuple[str, Any]] = field(default_factory=dict[str, tuple[str, Any]])
    request_state: str | None = None


def input_required(
    result: Mapping[str, object], method: str, *, max_requests: int, redactor: Redactor | None = None
) -> InputRequired:
    """Read an ``InputRequiredResult`` of ``method``; ``redactor`` hides the server's secrets
    in what an error names.

    Raises:
        RemoteProtocolError: neither ``inputRequests`` nor ``requestState`` (the revision
            requires one), ``inputRequests`` not an object of ``{method, params}`` objects
            whose methods are ``INPUT_REQUEST_METHODS``, more than ``max_requests`` of them
            (``Limits.max_input_requests``), or a ``requestState`` that is not a string.
    """
    raw_requests = result.get("inputRequests")
    state = result.get("requestState")
    if raw_requests is None and state is None:
        raise RemoteProtocolError(
            f"the server's input_required answer to {method} has neither inputRequests nor requestState"
        )
    if state is not None and not isinstance(state, str):
        raise RemoteProtocolError(
            f"the server's input_required answer to {method} has a requestState that is not a string"
        )
    requests: dict[str, tuple[str, Any]] = {}
    if raw_requests is not None:
        if not is_object(raw_requests):
            raise RemoteProtocolError(f"the server's inputRequests for {method} is not an object")
        if len(raw_requests) > max_requests:
            raise RemoteProtocolError(
                f"the server sent {len(raw_requests)} input requests for {method}; at most {max_requests}"
                " are served (Limits.max_input_requests)"
            )
        for key, request in raw_requests.items():
            wanted = request.get("method") if is_object(request) else None
            if wanted not in INPUT_REQUEST_METHODS:
                raise RemoteProtocolError(
                    f"the server's input request {log_value(key, redactor, max_units=40)} for {method} is not one of"
                    f" {', '.join(sorted(INPUT_REQUEST_METHODS))}"
                )
            requests[key] = (cast("str", wanted), cast("dict[str, Any]", request).get("params"))
    return InputRequired(requests, state)


def retry_params(params: Mapping[str, Any], responses: Mapping[str, Any], state: str | None) -> JSONObject:
    """The params of the retry of a request answered ``input_required``: the original
    params with ``inputResponses`` (by key) and, only when the server sent one, the exact
    ``requestState`` (MCP 2026-07-28 "Multi Round-Trip Requests", client requirements)."""
    out = {key: value for key, value in params.items() if key not in ("inputResponses", "requestState")}
    if responses:
        out["inputResponses"] = dict(responses)
    if state is not None:
        out["requestState"] = state
    return out

"""The ``initialize`` exchange: what we send, and how we read the answer (MCP 2025-11-25,
"Lifecycle"; MCPL §5.2; docs/protocol.md H1-H6, D4, D5).

Pure functions and values; ``mcpl_host.opening`` does the exchange over a connection.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from mcpl_host.jsonrpc.errors import InitializeError
from mcpl_host.jsonrpc.session import DroppedLine, LookAlikeResponse
from mcpl_host.jsonrpc.values import JSONObject, is_object
from mcpl_host.logging import Redactor, log_value

__all__ = [
    "HOST_MCPL_ADVERTISEMENT",
    "LATEST_PROTOCOL_VERSION",
    "MCPL_VERSION",
    "SERVED_MCPL_VERSIONS",
    "SUPPORTED_PROTOCOL_VERSIONS",
    "Noise",
    "ServerInfo",
    "client_capabilities",
    "host_advertisement",
    "id_text",
    "initialize_params",
    "read_initialize_result",
]

#: MCP protocol versions this host implements, newest first (docs/protocol.md D4).
SUPPORTED_PROTOCOL_VERSIONS: tuple[str, ...] = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
#: The version we ask for.
LATEST_PROTOCOL_VERSION = SUPPORTED_PROTOCOL_VERSIONS[0]
#: The MCPL version we advertise (docs/protocol.md D5).
MCPL_VERSION = "0.5"
#: MCPL versions served without a warning; real servers still say 0.4 (D5).
SERVED_MCPL_VERSIONS = frozenset({"0.4", "0.5"})

#: Everything this host implements, in the server-mirroring shape (MCPL §5.2). A connection
#: advertises the part of it that its handlers actually serve (``host_advertisement``):
#: advertise accurately (MCPL §5.2).
HOST_MCPL_ADVERTISEMENT: dict[str, Any] = {
    "version": MCPL_VERSION,
    "pushEvents": True,
    "contextHooks": {"beforeInference": True},
    "inferenceLifecycle": True,
    "inferenceRequest": {"streaming": True},
    "modelInfo": True,
    # channels.acknowledge and channels.typing are not built: not advertised.
    "channels": {"register": True, "publish": True, "incoming": True, "lifecycle": True, "streaming": True},
    "featureSets": True,
    # RFC-007 §4.2: tools/lifecycle for the calls the application reports, tools/observe.
    "toolLifecycle": {"observe": True, "inputs": True},
}


def host_advertisement(
    *, inference_request: bool, model_info: bool, input_streams: bool = False
) -> JSONObject:
    """The host's ``experimental.mcpl`` (MCPL §5.2): ``HOST_MCPL_ADVERTISEMENT`` without what
    the application does not serve. ``inference_request``: an inference provider answers
    ``inference/request`` (else ``inferenceRequest`` is not advertised); ``model_info``:
    ``model/info`` is answered (else ``modelInfo`` is not advertised); ``input_streams``:
    ``ServerConfig.input_streams`` (``channels.inputStreaming: true``, RFC-009 §2.1). The rest is served
    by the library itself."""
    advertisement = {key: value for key, value in HOST_MCPL_ADVERTISEMENT.items()}
    if not inference_request:
        del advertisement["inferenceRequest"]
    if not model_info:
        del advertisement["modelInfo"]
    if input_streams:  # RFC-009 §2.1 (experimental): the explicit member, nothing else
        advertisement["channels"] = {**advertisement["channels"], "inputStreaming": True}
    return advertisement


def client_capabilities(
    features: dict[str, Any] | None = None, mcpl_advertisement: dict[str, Any] | None = None
) -> JSONObject:
    """The host's ``ClientCapabilities`` (MCP 2025-11-25 "Lifecycle", capability
    negotiation; MCPL §5.2): ``features`` (``ClientFeatures.capabilities()``: ``roots``,
    ``sampling``, ``elicitation``, each only when served) and, unless None, the MCPL
    advertisement as ``experimental.mcpl``."""
    capabilities: JSONObject = {key: dict(value) for key, value in (features or {}).items()}
    if mcpl_advertisement is not None:
        capabilities["experimental"] = {"mcpl": dict(mcpl_advertisement)}
    return capabilities


def initialize_params(
    client_name: str,
    client_version: str,
    mcpl_advertisement: dict[str, Any] | None = None,
    features: dict[str, Any] | None = None,
) -> JSONObject:
    """Params of our ``initialize`` request (MCP 2025-11-25 "Lifecycle"; MCPL §5.2).
    ``mcpl_advertisement``: the host's ``experimental.mcpl``; None offers no MCPL.
    ``features``: the client feature capabilities served (``client_capabilities``)."""
    capabilities = client_capabilities(features, mcpl_advertisement)
    return {
        "protocolVersion": LATEST_PROTOCOL_VERSION,
        "capabilities": capabilities,
        "clientInfo": {"name": client_name, "version": client_version},
    }


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What the server said about itself in its ``initialize`` result.

    ``name``/``version`` from ``serverInfo`` (empty strings when missing), the agreed
    ``protocol_version``, the raw ``capabilities`` object, ``instructions`` (or None), and
    ``mcpl``: the ``experimental.mcpl`` object kept verbatim as the manifest in force
    (MCPL §17.1), or None for a plain MCP server.

    ``era``: ``"handshake"`` (an ``initialize`` result) or ``"stateless"`` (a
    ``server/discover`` result, MCP 2026-07-28; ``mcpl`` is then always None, MCPL stays on
    the handshake era); ``supported_versions``: what a discover result listed (empty for
    the handshake era).
    """

    name: str
    version: str
    protocol_version: str
    capabilities: dict[str, Any] = field(default_factory=dict[str, Any])
    instructions: str | None = None
    mcpl: dict[str, Any] | None = None
    era: Literal["handshake", "stateless"] = "handshake"
    supported_versions: tuple[str, ...] = ()
    #: ``era == "stateless"``, set once: read before every request of a connection.
    is_stateless: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_stateless", self.era == "stateless")

    @property
    def is_mcpl(self) -> bool:
        return self.mcpl is not None

    @property
    def mcpl_version(self) -> str | None:
        if self.mcpl is None:
            return None
        version = self.mcpl.get("version")
        return version if isinstance(version, str) else None


def read_initialize_result(result: object, redactor: Redactor | None = None) -> ServerInfo:
    """Validate an ``initialize`` result and read it into a ``ServerInfo``.

    Raises:
        InitializeError: the result is not an object, names no protocol version, or names
            one we do not implement (docs/protocol.md D4; the message names what was received,
            escaped and passed through ``redactor``).
    """
    if not is_object(result):
        raise InitializeError("the server's initialize result is not a JSON object")
    version = result.get("protocolVersion")
    if not isinstance(version, str):
        raise InitializeError("the server's initialize result names no protocolVersion")
    if version not in SUPPORTED_PROTOCOL_VERSIONS:
        shown = log_value(version, redactor, max_units=40)
        raise InitializeError(
            f'the server answered with protocol version "{shown}", which this host does not'
            f" implement (supported: {', '.join(SUPPORTED_PROTOCOL_VERSIONS)})"
        )
    capabilities = result.get("capabilities")
    capabilities = capabilities if is_object(capabilities) else {}
    info = result.get("serverInfo")
    info = info if is_object(info) else {}
    experimental = capabilities.get("experimental")
    mcpl = experimental.get("mcpl") if is_object(experimental) else None
    instructions = result.get("instructions")
    return ServerInfo(
        name=server_name if isinstance(server_name := info.get("name"), str) else "",
        version=server_version if isinstance(server_version := info.get("version"), str) else "",
        protocol_version=version,
        capabilities=capabilities,
        instructions=instructions if isinstance(instructions, str) else None,
        mcpl=mcpl if is_object(mcpl) else None,
    )


def id_text(value: object) -> Any:
    """An id as it reads in JSON where a string and a number differ (``"1"`` and ``1``;
    JSON-RPC 2.0 §5)."""
    return json.dumps(value) if isinstance(value, str) else value


class Noise:
    """What a server wrote that could not be taken as the answer waited for: the lines
    dropped before the handshake completed (``dropped`` of them; ``first_dropped``), and
    the first answer whose id only looked like the id of a pending request
    (``look_alike``; docs/protocol.md D2). The connection's read loop fills it, one per
    transport; ``described`` says it when ``initialize`` gets no answer in time (H4)."""

    __slots__ = ("dropped", "first_dropped", "look_alike")

    def __init__(self) -> None:
        self.dropped = 0
        self.first_dropped: DroppedLine | None = None
        self.look_alike: LookAlikeResponse | None = None

    def described(self, redactor: Redactor | None = None) -> str:
        """For a handshake timeout: what the server wrote that was not the answer, each part
        after ``"; "`` (empty when nothing); server text escaped and passed through
        ``redactor``."""
        parts: list[str] = []
        sample = self.first_dropped
        if sample is not None:
            lines = "line" if self.dropped == 1 else "lines"
            parts.append(
                f"{self.dropped} {lines} on its output could not be read as JSON-RPC; the first "
                f"({sample.kind}): {log_value(sample.line, redactor)}"
            )
        look_alike = self.look_alike
        if look_alike is not None and look_alike.resembles.method == "initialize":
            parts.append(
                "an answer arrived with the id "
                f"{log_value(id_text(look_alike.response.id), redactor)}, which only looks like the "
                f"id {look_alike.resembles.id} of initialize (JSON-RPC 2.0 §5: the same value and type)"
            )
        return "".join(f"; {part}" for part in parts)

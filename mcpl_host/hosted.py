"""``HostedServer``: what the host keeps for one server across all its transports.

Rules of this module:

- A server outlives each of its transports: a crash and a restart, or a dropped socket and a
  reconnect, give a new ``ServerConnection``, but the ``HostedServer`` stays. It holds what
  belongs to the server rather than to one transport:

  - the policy in force (``policy``, ``feature_set_policy``), every runtime change included:
    a capability the application revoked stays revoked when the server restarts;
  - the feature-set state store (``state_store``, a ``StateStore``; pluggable, so a
    framework can persist it);
  - ``eventId`` de-duplication (``event_dedupe``; MCPL §9.4);
  - the ``channels/publish`` mode learned from the server, and whether it reads only the
    notification form of ``featureSets/update`` (``policy_as_notification``, 0.4 profile);
  - the compatibility setting (``compat``) and the notes logged under the 0.4 profile
    (``compat_notes``: each once per server, docs/protocol.md, "Compatibility profiles");
  - the channels registered on the current transport, as the application last saw them
    (``channels``; they lapse with the transport, and the application is told so);
  - the protocol era the server spoke (``learned_era``): with ``protocol="auto"`` a server
    that spoke the handshake era is not probed with ``server/discover`` again, so a restart
    never repeats a probe that may cost it (docs/protocol.md S3a); nor is a server whose
    entry says MCPL (``says_mcpl``; S3b).

- Its state changes only through its own methods; everything else reads it through
  read-only properties. What the application sets: ``set_policy`` (the one place the policy
  is stored; ``update_policy`` runs it on the current connection too), ``set_publish_mode``,
  ``set_compat``, ``set_protocol``, ``set_transport_factory`` (each for later connections
  where it is read at the handshake). What the connections learn or tell:
  ``learn_publish_as_notification``, ``learn_policy_as_notification``, ``attach`` (the
  era spoken), ``channels_changed``, ``detach``.
- Each transport still starts with an empty grant and runs the handshake and the whole policy
  exchange again (MCPL §5.3), now with the policy the application set last.
- ``open_connection()`` builds a new, unopened ``ServerConnection`` for a new transport; the
  ``Supervisor`` calls it for each attempt.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, cast

from typing_extensions import TypedDict, Unpack

from mcpl_host._keywords import checked_keywords
from mcpl_host.client_features import ClientFeatures
from mcpl_host.connection import ClientInfo
from mcpl_host.handlers import HostHandlers, client_features, serves_inference, serves_model_info
from mcpl_host.handshake import host_advertisement
from mcpl_host.jsonrpc.values import JSONObject
from mcpl_host.limits import Limits
from mcpl_host.logging import Redactor
from mcpl_host.mcpl.compat import CompatSetting, NoteLedger, checked_compat
from mcpl_host.mcpl.endpoint_uri import EndpointURI
from mcpl_host.mcpl.feature_sets import FeatureSetPolicy
from mcpl_host.mcpl.grants import GrantPolicy
from mcpl_host.mcpl.policy_state import RefusalAction
from mcpl_host.mcpl.references import AuthBinding, ReferenceRegistry, origin_of
from mcpl_host.mcpl.state import FeatureSetStateStore, StateStore
from mcpl_host.mcpl.tags import EventDeduplicator
from mcpl_host.mcpl.tool_lifecycle import ToolLifecyclePolicy
from mcpl_host.observe import ConnectionObserver, Reporter
from mcpl_host.server_connection import ServerConnection
from mcpl_host.services.negotiation import PolicyChange
from mcpl_host.services.publish_settings import PUBLISH_MODES, PublishMode
from mcpl_host.stateless import Era, ProtocolChoice, checked_protocol, probe_skipped
from mcpl_host.tool_classes import ToolClassTables
from mcpl_host.transport_factory import transport_factory
from mcpl_host.transports.base import TransportFactory

if TYPE_CHECKING:
    from mcpl_host.config import ServerConfig
    from mcpl_host.mcpl.input_streams import InputStreams
    from mcpl_host.recording import Recorder
    from mcpl_host.services.coalescing import EventInbox
    from mcpl_host.services.input_streams import InputClock
    from mcpl_host.telemetry import ConnectionTelemetry, Telemetry

__all__ = ["HostedServer", "ServerRuntime", "TransportFactory", "connect", "resolve_telemetry"]


class ServerRuntime(TypedDict, total=False):
    """The runtime objects a builder takes besides the ``ServerConfig``, as keywords
    (``HostedServer(config, **runtime)``, ``connect(config, **runtime)``); they are not
    configuration.

    - ``handlers``: the application's ``HostHandlers``, used as given (default:
      ``HostHandlers()``).
    - ``observer``: sees every event of the connection (``mcpl_host.events``; the ``Host``,
      the probe), or None.
    - ``state_store``: held state per feature set (default: an in-memory
      ``FeatureSetStateStore``; MCPL §8).
    - ``client_info``: the ``clientInfo`` sent in ``initialize`` (MCP 2025-11-25
      "Lifecycle"; default: ``ClientInfo()``).
    - ``input_clock``: the clocks input-stream leases run on (RFC-009 §4.1, §8;
      ``services.input_streams.InputClock``; default: the system's).
    - ``record``: a ``recording.Recorder``: every line of every transport of the server, its
      lifecycle and the host's decisions are recorded there (the server's ``Redactor``
      applied); None (the default): nothing is recorded, no transport is wrapped.
    - ``event_inbox``: an ``EventInbox`` (``services.coalescing``; RFC-006): the host
      advertises ``eventCoalescing`` and coalesced events wait there; None (the default):
      not advertised, and ``coalesce`` members are ignored as before.
    - ``telemetry``: OpenTelemetry spans and metrics (``mcpl_host.telemetry``; the
      ``mcpl-host[otel]`` extra): None or True (the default) uses the global tracer and
      meter providers when the OpenTelemetry API is installed, and is off when it is not;
      a ``Telemetry(tracer_provider=..., meter_provider=...)`` uses those (the API must be
      installed); False is off.
    """

    handlers: HostHandlers | None
    input_clock: InputClock | None
    observer: ConnectionObserver | None
    state_store: StateStore | None
    client_info: ClientInfo | None
    event_inbox: EventInbox | None
    telemetry: Telemetry | bool | None
    record: Recorder | None


#: Holds the missing module's name once importing ``mcpl_host.telemetry`` failed for want
#: of OpenTelemetry (the API is not installed): later servers do not look again.
_without_opentelemetry: list[str] = []


def resolve_telemetry(option: Telemetry | bool | None) -> Telemetry | None:
    """The ``Telemetry`` a ``ServerRuntime.telemetry`` option means: None for False, and for
    None or True when the OpenTelemetry API is not installed or nothing in the process has
    imported ``opentelemetry.trace`` yet (``mcpl_host.telemetry`` is imported here and only
    here); the shared one of the global providers for None or True;
    a ``Telemetry`` as given. Raises ``TypeError`` for anything else."""
    if option is False:
        return None
    if option is None or option is True:
        if _without_opentelemetry or "opentelemetry.trace" not in sys.modules:
            # Nothing in this process configured a provider (that imports the API), so
            # nothing would record: the API is not even imported (docs/protocol.md OT4).
            return None
        try:
            from mcpl_host.telemetry import global_telemetry  # noqa: PLC0415 (lazy: the extra)
        except ModuleNotFoundError as exc:
            if exc.name is not None and exc.name.startswith("opentelemetry"):
                _without_opentelemetry.append(exc.name)  # not looked for again (an import costs ms)
                return None
            raise
        return global_telemetry()
    from mcpl_host.telemetry import Telemetry  # noqa: PLC0415 (importable: one was made)

    given = cast(object, option)  # the type is the caller's promise, not checked by Python
    if not isinstance(given, Telemetry):
        raise TypeError(f"telemetry must be a bool, None or a Telemetry, not {type(given).__name__}")
    return given


class HostedServer:
    """One server, across its transports (module rules), built from what it is
    (``config``, a ``ServerConfig``) and the runtime objects (``ServerRuntime``).

    Read-only, from ``config``: ``name`` (in logs, events and errors), ``on_refusal``,
    ``limits``, ``redactor`` (``ServerConfig.redactor()``), ``describe`` (where the server
    is, no secrets). Read, and changed only by their ``set_*`` methods: ``policy`` and
    ``feature_set_policy`` (from ``grant_policy``: default grant nothing, MCPL §5.4),
    ``compat`` (``"auto"``: the profile is chosen per connection from the advertisement;
    ``mcpl.compat``), ``protocol`` (``stateless.ProtocolChoice``: ``"auto"`` probes with
    ``server/discover`` where the transport may carry MCP 2026-07-28 and falls back to
    ``initialize``; ``"handshake"`` sends only ``initialize``; ``"stateless"`` only
    ``server/discover``; read at each handshake) and ``transport_factory``
    (``transport_factory.transport_factory``: opens one transport).

    ``config`` was checked when it was made (``ServerConfig``).
    """

    # Slots, for memory per connection: with more attributes than a shared-key dict holds
    # (30), each instance had a dict of its own (1.6 KiB).
    __slots__ = (
        "_channels",
        "_client_info",
        "_compat",
        "_compat_notes",
        "_config",
        "_connections_opened",
        "_current",
        "_describe",
        "_event_dedupe",
        "_event_inbox",
        "_feature_set_policy",
        "_handlers",
        "_input_clock",
        "_input_streams",
        "_learned_era",
        "_limits",
        "_name",
        "_observer",
        "_on_refusal",
        "_policy",
        "_policy_as_notification",
        "_protocol",
        "_publish_as_notification",
        "_publish_mode",
        "_recorder",
        "_redactor",
        "_reference_binding",
        "_references",
        "_reporter",
        "_sequence",
        "_state_store",
        "_telemetry",
        "_tool_classes",
        "_transport_factory",
    )

    def __init__(self, config: ServerConfig, **runtime: Unpack[ServerRuntime]) -> None:
        checked_keywords(ServerRuntime, runtime, type(self).__name__)
        self._config = config
        self._name = config.name
        self._compat: CompatSetting = config.compat  # checked when the config was made
        self._protocol: ProtocolChoice = config.protocol
        self._redactor = config.redactor()
        self._transport_factory: TransportFactory = transport_factory(config, self._redactor)
        handlers = runtime.get("handlers")
        self._handlers = handlers if handlers is not None else HostHandlers()
        self._observer = runtime.get("observer")
        self._policy = config.grant_policy
        self._feature_set_policy = config.feature_set_policy
        self._on_refusal: RefusalAction = config.on_refusal
        self._limits = config.limits
        self._client_info = runtime.get("client_info") or ClientInfo()
        state_store = runtime.get("state_store")
        self._state_store: StateStore = (
            state_store if state_store is not None else FeatureSetStateStore(self._limits)
        )
        self._describe = config.described(self._redactor)  # the settings scanned once
        self._event_inbox = runtime.get("event_inbox")
        self._telemetry = resolve_telemetry(runtime.get("telemetry"))
        self._event_dedupe = EventDeduplicator(
            max_entries=self._limits.max_remembered_event_ids, ttl_seconds=self._limits.event_id_ttl_seconds
        )
        self._publish_mode: PublishMode = "auto"
        self._publish_as_notification = False  # learned in "auto" from a -32601
        self._policy_as_notification = False  # learned under the 0.4 profile
        self._compat_notes = NoteLedger(self._limits.compat_notes_logged)
        self._references = ReferenceRegistry(self._limits.max_reference_records)
        self._reference_binding = reference_binding(config)
        self._tool_classes = ToolClassTables(config.tool_classes, config.host_tool_classes)
        # The lease machine and the system's clocks load only for a server with input streams.
        self._input_clock: InputClock | None = runtime.get("input_clock")
        self._input_streams: InputStreams | None = None
        if config.input_streams:
            from mcpl_host.mcpl.input_streams import InputStreams, input_stream_settings  # noqa: PLC0415

            self._input_streams = InputStreams(input_stream_settings(self._limits, config.input_stream_mode))
        self._channels: list[dict[str, Any]] = []
        self._connections_opened = 0
        self._sequence = 0
        self._learned_era: Era | None = None
        self._current: ServerConnection | None = None
        self._recorder = runtime.get("record")
        self._reporter = Reporter(self._name, self._handlers, self._observer, self._recorder)
        if self._recorder is not None:
            self._recorder.set_redactor(self._name, self._redactor)

    # --- what it is: fixed when it is made ----------------------------------------------------

    @property
    def config(self) -> ServerConfig:
        """What the server was made from (a ``ServerConfig``; the policy, compat and protocol
        in force may have changed since: read them here)."""
        return self._config

    @property
    def endpoint(self) -> EndpointURI | None:
        """The three values of an ``mcpl://`` URL (MCPL §18.4: ``ServerConfig.endpoint``), or
        None."""
        return self._config.endpoint

    @property
    def mcp_only_fallback(self) -> bool:
        """An ``mcpl://`` server without MCPL is hosted as plain MCP (MCPL §18.5)."""
        return self._config.mcp_only_fallback

    @property
    def name(self) -> str:
        """The server's name in logs, events and errors."""
        return self._name

    @property
    def handlers(self) -> HostHandlers:
        """The application's handlers, used as given."""
        return self._handlers

    @property
    def observer(self) -> ConnectionObserver | None:
        """Sees every ``Observation``, or None."""
        return self._observer

    @property
    def on_refusal(self) -> RefusalAction:
        """What a refused policy does (``RefusalAction``)."""
        return self._on_refusal

    @property
    def limits(self) -> Limits:
        """Every bound applied to this server."""
        return self._limits

    @property
    def redactor(self) -> Redactor:
        """Hides this server's secrets."""
        return self._redactor

    @property
    def client_info(self) -> ClientInfo:
        """The ``clientInfo`` sent in ``initialize``."""
        return self._client_info

    @property
    def state_store(self) -> StateStore:
        """Held state per feature set, across transports."""
        return self._state_store

    @property
    def describe(self) -> str:
        """Where the server is, without secrets (for reports)."""
        return self._describe

    @property
    def references(self) -> ReferenceRegistry:
        """The bulk content references this server sent, across transports (MCPL §19.5):
        what ``services.references.ReferenceFetcher`` looks ids up in."""
        return self._references

    @property
    def reference_binding(self) -> AuthBinding:
        """The authentication context of this server's connections (MCPL §19.6.1)."""
        return self._reference_binding

    @property
    def event_inbox(self) -> EventInbox | None:
        """The application's event inbox (RFC-006), or None: coalescing is off."""
        return self._event_inbox

    @property
    def binding(self) -> str:
        """The coalescing binding identity (RFC-006 §3.2): the server's name and where it is
        (``describe``), so a name reassigned to another server is another binding."""
        return f"{self._name}\x00{self._describe}"

    @property
    def event_dedupe(self) -> EventDeduplicator:
        """``eventId`` de-duplication across transports (MCPL §9.4)."""
        return self._event_dedupe

    @property
    def input_streams(self) -> InputStreams | None:
        """The server's input streams across its transports (RFC-009, experimental; the
        committed message keys outlive a transport), or None when ``input_streams`` is off."""
        return self._input_streams

    @property
    def input_clock(self) -> InputClock:
        """The clocks input-stream leases run on (``ServerRuntime.input_clock``; the
        system's, made when first asked for, when none was given)."""
        clock = self._input_clock
        if clock is None:
            from mcpl_host.services.input_streams import SystemInputClock  # noqa: PLC0415

            clock = self._input_clock = SystemInputClock()
        return clock

    @property
    def tool_classes(self) -> ToolClassTables:
        """The operator's and the application's tool classes (RFC-008 §5.1), from the config."""
        return self._tool_classes

    @property
    def tool_lifecycle(self) -> ToolLifecyclePolicy:
        """The operator's tool lifecycle narrowings (RFC-007 §4.3), from the config."""
        return self._config.tool_lifecycle

    @property
    def compat_notes(self) -> NoteLedger:
        """The notes logged under the 0.4 profile, each once per server."""
        return self._compat_notes

    # --- what the application sets: read here, changed by the set_* methods ---------------------

    @property
    def transport_factory(self) -> TransportFactory:
        """Opens each new transport (``set_transport_factory``)."""
        return self._transport_factory

    def set_transport_factory(self, factory: TransportFactory) -> None:
        """Open every later transport with ``factory``; the current one is left as it is."""
        self._transport_factory = factory

    @property
    def compat(self) -> CompatSetting:
        """The compatibility setting (``mcpl.compat``; ``set_compat``)."""
        return self._compat

    def set_compat(self, compat: CompatSetting) -> None:
        """Choose the compatibility profile of every later connection from ``compat``
        (``"strict"``, ``"0.4"``, ``"auto"``; docs/protocol.md, "Compatibility profiles").
        Raises ``ValueError`` for another value."""
        self._compat = checked_compat(compat)

    @property
    def protocol(self) -> ProtocolChoice:
        """The protocol era to speak (``stateless.ProtocolChoice``; ``set_protocol``)."""
        return self._protocol

    def set_protocol(self, protocol: ProtocolChoice) -> None:
        """Speak ``protocol`` on every later connection (``"auto"``, ``"handshake"``,
        ``"stateless"``; docs/protocol.md S1). Raises ``ValueError`` for another value."""
        self._protocol = checked_protocol(protocol)

    @property
    def policy(self) -> GrantPolicy:
        """The capability grant policy in force for this server (``set_policy``)."""
        return self._policy

    @property
    def feature_set_policy(self) -> FeatureSetPolicy:
        """The feature-set policy in force for this server (``set_policy``)."""
        return self._feature_set_policy

    def set_policy(
        self, policy: GrantPolicy | None = None, feature_set_policy: FeatureSetPolicy | None = None
    ) -> None:
        """Keep the policy given (None: that part unchanged) for this and every later
        transport of the server; the one place it is stored. It goes out only through a
        policy exchange (``update_policy``, or the next handshake's, MCPL §5.3)."""
        if policy is not None:
            self._policy = policy
        if feature_set_policy is not None:
            self._feature_set_policy = feature_set_policy

    @property
    def publish_mode(self) -> PublishMode:
        """How ``channels/publish`` goes out (``services.channel_calls``; ``set_publish_mode``)."""
        return self._publish_mode

    def set_publish_mode(self, mode: PublishMode) -> None:
        """Send ``channels/publish`` as ``mode`` from now on (``"request"``,
        ``"notification"``, ``"auto"``); what ``"auto"`` learned is forgotten. Raises
        ``ValueError`` for another value."""
        if mode not in PUBLISH_MODES:
            raise ValueError(f"publish_mode must be one of {PUBLISH_MODES}, not {mode!r}")
        self._publish_mode = mode
        self._publish_as_notification = False

    # --- what was learned from the server, across its transports ------------------------------

    @property
    def publish_as_notification(self) -> bool:
        """The server answered a ``channels/publish`` request with ``-32601``: in ``"auto"``,
        it goes out as a notification (``learn_publish_as_notification``)."""
        return self._publish_as_notification

    def learn_publish_as_notification(self) -> None:
        """The server does not take ``channels/publish`` as a request (MCPL §14.3)."""
        self._publish_as_notification = True

    @property
    def policy_as_notification(self) -> bool:
        """The server reads only the notification form of ``featureSets/update`` (0.4
        profile; ``learn_policy_as_notification``)."""
        return self._policy_as_notification

    def learn_policy_as_notification(self) -> None:
        """The server answered the ``featureSets/update`` request with an error, or not in
        time, under the 0.4 profile: every later policy goes to it as a notification."""
        self._policy_as_notification = True

    @property
    def learned_era(self) -> Era | None:
        """The era the last connection that finished its handshake spoke (None before)."""
        return self._learned_era

    @property
    def channels(self) -> list[dict[str, Any]]:
        """The channels registered on the current transport (descriptors as sent; a copy)."""
        return [dict(descriptor) for descriptor in self._channels]

    @property
    def connections_opened(self) -> int:
        """How many connections finished their handshake."""
        return self._connections_opened

    def __repr__(self) -> str:
        state = self._current.mcpl_state.value if self._current is not None else "not connected"
        return f"<HostedServer {self.name!r} {state} connections={self.connections_opened}>"

    def advertisement(self) -> JSONObject:
        """The host's ``experimental.mcpl`` for this server: only what the handlers serve
        (``handshake.host_advertisement``)."""
        advertisement = host_advertisement(
            inference_request=serves_inference(self.handlers),
            model_info=serves_model_info(self.handlers),
            input_streams=self._input_streams is not None,
        )
        if self._event_inbox is not None:  # RFC-006 §10: a top-level member
            advertisement["eventCoalescing"] = self._event_inbox.advertisement()
        return advertisement

    def client_features(self) -> ClientFeatures:
        """The client features the handlers serve now (``handlers.client_features``)."""
        return client_features(self.handlers)

    def capabilities(self) -> JSONObject:
        """The MCP client capabilities the host advertises to this server, MCPL aside
        (MCP 2025-11-25 "Lifecycle"): ``roots``, ``sampling``, ``elicitation``, each exactly
        when the handlers serve it (``ClientFeatures.capabilities``)."""
        return self.client_features().capabilities()

    @property
    def says_mcpl(self) -> bool:
        """Whether the entry says the server speaks MCPL (docs/protocol.md S3b): a
        ``compat`` of ``"strict"`` or ``"0.4"`` (``"auto"``, the default, says nothing), or
        a grant pattern naming MCPL paths (``grant_all_advertised``, the probe's default,
        says nothing: it grants whatever comes), or an ``mcpl://`` URL (MCPL §18.5: the
        operator's intent; only the handshake then proves it)."""
        return self.compat != "auto" or bool(self.policy.grant) or self.endpoint is not None

    def skip_probe(self) -> str | None:
        """Why the next connection sends ``initialize`` without the ``server/discover``
        probe, or None (``stateless.probe_skipped``)."""
        return probe_skipped(self.protocol, learned=self.learned_era, says_mcpl=self.says_mcpl)

    def next_sequence(self) -> int:
        """The number of the next ``ServerConnection`` made for this server (1, 2, ...; its
        ``sequence``, the ``RequestContext.transport`` of what comes on it)."""
        self._sequence += 1
        return self._sequence

    @property
    def telemetry(self) -> Telemetry | None:
        """Where this server's spans and metrics go (``ServerRuntime.telemetry``), None: off."""
        return self._telemetry

    def connection_telemetry(self) -> ConnectionTelemetry | None:
        """The telemetry of a new transport (``telemetry.ConnectionTelemetry``: the server's
        transport attributes and redactor), None when telemetry is off or nothing would be
        recorded (``Telemetry.live``: the global providers with no SDK configured yet)."""
        if self._telemetry is None or not self._telemetry.live():
            return None
        from mcpl_host.telemetry import transport_attributes  # noqa: PLC0415 (loaded already)

        endpoint = self._config.endpoint
        url = endpoint.resolved_transport if endpoint is not None else self._config.url
        return self._telemetry.for_connection(transport_attributes(url), self._redactor)

    @property
    def recorder(self) -> Recorder | None:
        """Where this server's session is recorded (``ServerRuntime.record``), or None."""
        return self._recorder

    def open_connection(self) -> ServerConnection:
        """A new, unopened ``ServerConnection`` over a new transport (each transport it
        opens recorded when a recorder was given: ``recording.recording_factory``)."""
        factory = self.transport_factory
        if self._recorder is not None:
            from mcpl_host.recording import recording_factory  # noqa: PLC0415 (loaded: a Recorder was made)

            config = self._config
            label = recorded_transport(config.transport)
            url = config.url if label != "stdio" else None
            command = config.command if label == "stdio" else None
            factory = recording_factory(factory, self._recorder, self._name, label, url=url, command=command)
        return ServerConnection(self, factory)

    @property
    def current(self) -> ServerConnection | None:
        """The connection whose handshake finished and whose transport has not ended."""
        conn = self._current
        return conn if conn is not None and conn.is_open else None

    def attach(self, conn: ServerConnection) -> None:
        """``conn`` finished its handshake: it is the current connection, and the era it
        spoke is learned (``learned_era``: a restart does not probe again, docs/protocol.md
        S3a)."""
        self._current = conn
        self._connections_opened += 1
        if conn.era is not None:
            self._learned_era = conn.era

    def detach(self, conn: ServerConnection) -> None:
        """``conn`` ended: its channel registrations lapse (the application is told)."""
        if self._current is conn:
            self._current = None
        if self._channels:
            self.channels_changed([])

    def channels_changed(self, channels: list[dict[str, Any]]) -> None:
        """The channels registered now changed (on the current transport): ``channels`` is
        the whole list of descriptors, as sent (kept as a copy); the application is told."""
        self._channels = [dict(descriptor) for descriptor in channels]
        self._reporter.channels_changed(self.channels)

    async def update_policy(
        self, policy: GrantPolicy | None = None, feature_set_policy: FeatureSetPolicy | None = None
    ) -> PolicyChange:
        """Change the policy for this server (MCPL §6.7). With an MCPL-ready connection, the
        change runs on it now (``PolicyExchange.update``, ``ServerConnection.policy``);
        otherwise it is stored and goes out with the next handshake
        (``PolicyChange.deferred``). Kept across restarts either way. This is the call by
        server that works between transports too (``Host.server(name).hosted``). Raises as
        ``PolicyExchange.update``."""
        conn = self.current
        if conn is not None and conn.policy.state.is_ready:
            return await conn.policy.update(policy, feature_set_policy)
        self.set_policy(policy, feature_set_policy)
        return PolicyChange(proposed=None, in_force=None, outcome=None, deferred=True)


def recorded_transport(transport: str | None) -> str:
    """The ``transport`` of a recording's entries for a ``ServerConfig.transport``:
    ``"stdio"``, ``"websocket"``, ``"sse"``, else ``"http"`` (Streamable HTTP, or the
    automatic choice until it chose HTTP+SSE: ``RecordingTransport`` reads that)."""
    return transport if transport is not None and transport in ("stdio", "websocket", "sse") else "http"


def reference_binding(config: ServerConfig) -> AuthBinding:
    """The authentication context a server's references may be fetched with (MCPL §19.6.1):
    the origin of its ``url`` (none for stdio: nothing is authenticated) and, with a
    ``token``, ``Authorization: Bearer`` for that origin only (also when the token rides in
    the URL's query: a reference URI is never given the token)."""
    if config.url is None:
        return AuthBinding()
    headers = {"Authorization": f"Bearer {config.token}"} if config.token else {}
    return AuthBinding(origin_of(config.url), headers)


def connect(config: ServerConfig, **runtime: Unpack[ServerRuntime]) -> ServerConnection:
    """One unopened ``ServerConnection`` of a new ``HostedServer(config, **runtime)``:
    entering it (``async with``) opens the transport and runs the handshake and the MCPL
    policy exchange (MCPL §5). See ``ServerConfig`` for the settings, ``ServerRuntime`` for
    the keywords and ``ServerConnection`` for the errors on entry."""
    return HostedServer(config, **runtime).open_connection()

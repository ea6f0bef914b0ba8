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

- Each transport still starts with an empty grant and runs the handshake and the whole policy
  exchange again (MCPL §5.3), now with the policy the application set last.
- ``open_connection()`` builds a new, unopened ``ServerConnection`` for a new transport; the
  ``Supervisor`` calls it for each attempt.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from typing_extensions import TypedDict, Unpack

from mcpl_host.client_features import ClientFeatures
from mcpl_host.connect import transport_factory
from mcpl_host.connection import ClientInfo
from mcpl_host.handlers import HostHandlers, client_features, serves_inference, serves_model_info
from mcpl_host.handshake import host_advertisement
from mcpl_host.mcpl.compat import CompatSetting, NoteLedger
from mcpl_host.mcpl.feature_sets import FeatureSetPolicy
from mcpl_host.mcpl.grants import GrantPolicy
from mcpl_host.mcpl.policy_state import RefusalAction
from mcpl_host.mcpl.state import FeatureSetStateStore, StateStore
from mcpl_host.mcpl.tags import EventDeduplicator
from mcpl_host.observe import ConnectionObserver, Reporter
from mcpl_host.server_connection import ServerConnection
from mcpl_host.services.channel_calls import PublishMode
from mcpl_host.services.negotiation import PolicyChange
from mcpl_host.stateless import Era, ProtocolChoice, probe_skipped
from mcpl_host.transports.base import Transport

if TYPE_CHECKING:
    from mcpl_host.config import ServerConfig

__all__ = ["HostedServer", "ServerRuntime", "TransportFactory"]

#: Opens one transport: a callable returning an async context manager that yields it.
TransportFactory = Callable[[], AbstractAsyncContextManager[Transport]]


class ServerRuntime(TypedDict, total=False):
    """The runtime objects a builder takes besides the ``ServerConfig``, as keywords
    (``HostedServer(config, **runtime)``, ``connect(config, **runtime)``); they are not
    configuration.

    - ``handlers``: the application's ``HostHandlers``, used as given (default:
      ``HostHandlers()``).
    - ``observer``: sees every ``Observation`` (the ``Host``, the probe), or None.
    - ``state_store``: held state per feature set (default: an in-memory
      ``FeatureSetStateStore``; MCPL §8).
    - ``client_info``: the ``clientInfo`` sent in ``initialize`` (MCP 2025-11-25
      "Lifecycle"; default: ``ClientInfo()``).
    """

    handlers: HostHandlers | None
    observer: ConnectionObserver | None
    state_store: StateStore | None
    client_info: ClientInfo | None


class HostedServer:
    """One server, across its transports (module rules), built from what it is
    (``config``, a ``ServerConfig``) and the runtime objects (``ServerRuntime``).

    Attributes set from ``config``: ``name`` (in logs, events and errors), ``policy`` and
    ``feature_set_policy`` (``grant_policy``: default grant nothing, MCPL §5.4),
    ``on_refusal``, ``compat`` (``"auto"``: the profile is chosen per connection from the
    advertisement; ``mcpl.compat``), ``limits``, ``protocol`` (``stateless.ProtocolChoice``:
    ``"auto"`` probes with ``server/discover`` where the transport may carry MCP 2026-07-28
    and falls back to ``initialize``; ``"handshake"`` sends only ``initialize``;
    ``"stateless"`` only ``server/discover``; settable until a connection opens),
    ``redactor`` (``ServerConfig.redactor()``), ``describe`` (where the server is, no
    secrets) and ``transport_factory`` (``connect.transport_factory``: opens one transport).
    """

    def __init__(self, config: ServerConfig, **runtime: Unpack[ServerRuntime]) -> None:
        self.config = config
        self.name = config.name
        self.compat: CompatSetting = config.compat
        self.redactor = config.redactor()
        self.transport_factory: TransportFactory = transport_factory(config, self.redactor)
        handlers = runtime.get("handlers")
        self.handlers = handlers if handlers is not None else HostHandlers()
        self.observer = runtime.get("observer")
        self.policy = config.grant_policy
        self.feature_set_policy = config.feature_set_policy
        self.on_refusal: RefusalAction = config.on_refusal
        self.limits = config.limits
        self.client_info = runtime.get("client_info") or ClientInfo()
        state_store = runtime.get("state_store")
        self.state_store: StateStore = (
            state_store if state_store is not None else FeatureSetStateStore(self.limits)
        )
        self.describe = config.describe
        self.protocol: ProtocolChoice = config.protocol
        self.event_dedupe = EventDeduplicator(
            max_entries=self.limits.max_remembered_event_ids, ttl_seconds=self.limits.event_id_ttl_seconds
        )
        self.publish_mode: PublishMode = "auto"
        self.publish_as_notification = False  # learned in "auto" from a -32601
        self.policy_as_notification = False  # learned under the 0.4 profile
        self.compat_notes = NoteLedger(self.limits.compat_notes_logged)
        #: The channels registered on the current transport (descriptors as sent).
        self.channels: list[dict[str, Any]] = []
        self.connections_opened = 0
        #: The era the last connection that finished its handshake spoke (None before).
        self.learned_era: Era | None = None
        self._current: ServerConnection | None = None
        self._reporter = Reporter(self.name, self.handlers, self.observer)

    def __repr__(self) -> str:
        state = self._current.mcpl_state.value if self._current is not None else "not connected"
        return f"<HostedServer {self.name!r} {state} connections={self.connections_opened}>"

    def advertisement(self) -> dict[str, Any]:
        """The host's ``experimental.mcpl`` for this server: only what the handlers serve
        (``handshake.host_advertisement``)."""
        return host_advertisement(
            inference_request=serves_inference(self.handlers), model_info=serves_model_info(self.handlers)
        )

    def client_features(self) -> ClientFeatures:
        """The client features the handlers serve now (``handlers.client_features``)."""
        return client_features(self.handlers)

    def capabilities(self) -> dict[str, Any]:
        """The MCP client capabilities the host advertises to this server, MCPL aside
        (MCP 2025-11-25 "Lifecycle"): ``roots``, ``sampling``, ``elicitation``, each exactly
        when the handlers serve it (``ClientFeatures.capabilities``)."""
        return self.client_features().capabilities()

    @property
    def says_mcpl(self) -> bool:
        """Whether the entry says the server speaks MCPL (docs/protocol.md S3b): a
        ``compat`` of ``"strict"`` or ``"0.4"`` (``"auto"``, the default, says nothing), or
        a grant pattern naming MCPL paths (``grant_all_advertised``, the probe's default,
        says nothing: it grants whatever comes)."""
        return self.compat != "auto" or bool(self.policy.grant)

    def skip_probe(self) -> str | None:
        """Why the next connection sends ``initialize`` without the ``server/discover``
        probe, or None (``stateless.probe_skipped``)."""
        return probe_skipped(self.protocol, learned=self.learned_era, says_mcpl=self.says_mcpl)

    def open_connection(self) -> ServerConnection:
        """A new, unopened ``ServerConnection`` over a new transport."""
        return ServerConnection(self, self.transport_factory)

    @property
    def current(self) -> ServerConnection | None:
        """The connection whose handshake finished and whose transport has not ended."""
        conn = self._current
        return conn if conn is not None and conn.is_open else None

    def attach(self, conn: ServerConnection) -> None:
        """``conn`` finished its handshake: it is the current connection."""
        self._current = conn
        self.connections_opened += 1
        if conn.era is not None:
            self.learned_era = conn.era

    def detach(self, conn: ServerConnection) -> None:
        """``conn`` ended: its channel registrations lapse (the application is told)."""
        if self._current is conn:
            self._current = None
        if self.channels:
            self.channels_changed([])

    def channels_changed(self, channels: list[dict[str, Any]]) -> None:
        """The channels registered now changed (on the current transport)."""
        self.channels = [dict(descriptor) for descriptor in channels]
        self._reporter.channels_changed(self.channels)

    async def update_policy(
        self, policy: GrantPolicy | None = None, feature_set_policy: FeatureSetPolicy | None = None
    ) -> PolicyChange:
        """Change the policy for this server (MCPL §6.7). With an MCPL-ready connection, the
        change runs on it now (``ServerConnection.update_policy``); otherwise it is stored and
        goes out with the next handshake (``PolicyChange.deferred``). Kept across restarts
        either way. Raises as ``ServerConnection.update_policy``."""
        conn = self.current
        if conn is not None and conn.is_mcpl_ready:
            return await conn.update_policy(policy, feature_set_policy)
        if policy is not None:
            self.policy = policy
        if feature_set_policy is not None:
            self.feature_set_policy = feature_set_policy
        return PolicyChange(proposed=None, in_force=None, outcome=None, deferred=True)

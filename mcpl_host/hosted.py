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
from typing import Any

from mcpl_host.client_features import ClientFeatures
from mcpl_host.connection import ClientInfo
from mcpl_host.handlers import HostHandlers, client_features, serves_inference, serves_model_info
from mcpl_host.handshake import host_advertisement
from mcpl_host.limits import Limits
from mcpl_host.logging import Redactor
from mcpl_host.mcpl.compat import COMPAT_SETTINGS, CompatSetting, NoteLedger
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

__all__ = ["HostedServer", "TransportFactory"]

#: Opens one transport: a callable returning an async context manager that yields it.
TransportFactory = Callable[[], AbstractAsyncContextManager[Transport]]


class HostedServer:
    """One server, across its transports (module rules).

    Args:
        name: the server's name in logs, events and errors.
        transport_factory: opens one transport (``StdioTransport``, ``WebSocketTransport``).
        handlers: the application's ``HostHandlers``, used as given (default: ``HostHandlers()``).
        observer: sees every ``Observation`` (the ``Host``, the probe), or None.
        policy, feature_set_policy: the capability grant policy (default: grant nothing,
            MCPL §5.4) and the feature-set policy.
        on_refusal: what a refused policy does (``RefusalAction``).
        compat: the compatibility setting (``"strict"``, ``"0.4"``, ``"auto"``: the profile
            is chosen per connection from the advertisement; ``mcpl.compat``). Raises
            ``ValueError`` for another value.
        limits: every bound (``Limits``). redactor: hides this server's secrets.
        client_info: the ``clientInfo`` sent in ``initialize``.
        state_store: held state per feature set (default: an in-memory store).
        describe: a short description of where the server is (no secrets), for reports.
        protocol: the protocol era to speak (``stateless.ProtocolChoice``): ``"auto"``
            probes with ``server/discover`` where the transport may carry MCP 2026-07-28 and
            falls back to ``initialize``; ``"handshake"`` sends only ``initialize``;
            ``"stateless"`` only ``server/discover``. Settable until a connection opens.
    """

    def __init__(
        self,
        name: str,
        transport_factory: TransportFactory,
        *,
        handlers: HostHandlers | None = None,
        observer: ConnectionObserver | None = None,
        policy: GrantPolicy | None = None,
        feature_set_policy: FeatureSetPolicy | None = None,
        on_refusal: RefusalAction = "follow",
        compat: CompatSetting = "auto",
        limits: Limits | None = None,
        redactor: Redactor | None = None,
        client_info: ClientInfo | None = None,
        state_store: StateStore | None = None,
        describe: str = "",
        protocol: ProtocolChoice = "auto",
    ) -> None:
        if compat not in COMPAT_SETTINGS:
            raise ValueError(f"compat must be one of {', '.join(COMPAT_SETTINGS)}, not {compat!r}")
        self.name = name
        self.compat: CompatSetting = compat
        self.transport_factory = transport_factory
        self.handlers = handlers if handlers is not None else HostHandlers()
        self.observer = observer
        self.policy = policy or GrantPolicy()
        self.feature_set_policy = feature_set_policy or FeatureSetPolicy()
        self.on_refusal: RefusalAction = on_refusal
        self.limits = limits or Limits()
        self.redactor = redactor or Redactor()
        self.client_info = client_info or ClientInfo()
        self.state_store: StateStore = (
            state_store if state_store is not None else FeatureSetStateStore(self.limits)
        )
        self.describe = describe
        self.protocol: ProtocolChoice = protocol
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
        self._sequence = 0
        #: The era the last connection that finished its handshake spoke (None before).
        self.learned_era: Era | None = None
        self._current: ServerConnection | None = None
        self._reporter = Reporter(name, self.handlers, observer)

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

    def next_sequence(self) -> int:
        """The number of the next ``ServerConnection`` made for this server (1, 2, ...; its
        ``sequence``, the ``RequestContext.transport`` of what comes on it)."""
        self._sequence += 1
        return self._sequence

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
        change runs on it now (``PolicyExchange.update``, ``ServerConnection.policy``);
        otherwise it is stored and goes out with the next handshake
        (``PolicyChange.deferred``). Kept across restarts either way. This is the call by
        server that works between transports too (``Host.server(name).hosted``). Raises as
        ``PolicyExchange.update``."""
        conn = self.current
        if conn is not None and conn.policy.state.is_ready:
            return await conn.policy.update(policy, feature_set_policy)
        if policy is not None:
            self.policy = policy
        if feature_set_policy is not None:
            self.feature_set_policy = feature_set_policy
        return PolicyChange(proposed=None, in_force=None, outcome=None, deferred=True)

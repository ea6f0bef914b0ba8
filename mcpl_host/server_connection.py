"""``ServerConnection``: one transport to one server, with MCPL, assembled from its parts.

Rules of this module:

- A ``ServerConnection`` lives as long as one transport. It holds its parts, inherits
  nothing and re-declares none of their calls: it exposes them (``connection``, ``mcp``,
  ``hooks``, ``channels``, ``state``, ``policy``, ``inbound``) and keeps only what is
  about the connection as a whole (its name, server info, era, whether it is open, the
  MCPL state and grant, the last stall, closing). The parts (and ``tool_observe``, the
  connection's RFC-007 ``tools/observe`` filter): the ``Connection`` shell
  (link, reader, writer, pending requests, handshake), the pure ``PolicyState`` and the
  ``PolicyExchange`` that drives it, the ``InboundDispatcher`` (admission and the inbound
  services) and the outbound services (``MCPClient``, ``HookCalls``, ``ChannelCalls``,
  ``StateCalls``).
- What outlives the transport is its ``HostedServer``'s: the policy in force (every runtime
  change included), the feature-set state store, ``eventId`` de-duplication, the publish mode
  learned, the channel list shown to the application. The connection sees it as a
  ``ConnectionOwner`` (this module does not import ``hosted``): it reads it and tells it
  through its methods, never assigns to it. Each transport still starts with an
  empty grant and runs the whole policy exchange again (MCPL §5.3), with the policy the
  application set last.
- Entering opens the transport, settles the protocol era (``opening.Opening`` with the
  ``HostedServer``'s ``protocol``: ``server/discover`` for MCP 2026-07-28, or ``initialize``
  and ``notifications/initialized``), and, for an MCPL server (handshake era only), the
  initial ``featureSets/update`` exchange; exiting closes everything.
- What the application serves of the client features (roots, sampling, elicitation) is
  read once per transport (``HostedServer.client_features``): advertised in the handshake,
  served by the ``ClientFeatureService`` for server requests and for the input requests of
  multi round-trip requests alike. In the handshake era a change of the roots is sent as
  ``notifications/roots/list_changed``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from mcpl_host.client_features import ClientFeatures, ClientFeatureService
from mcpl_host.connection import ClientInfo, Connection
from mcpl_host.handlers import HostHandlers
from mcpl_host.handshake import SERVED_MCPL_VERSIONS, ServerInfo
from mcpl_host.jsonrpc.errors import ConnectionClosed, ConnectionLost, MCPLRequired
from mcpl_host.limits import Limits
from mcpl_host.logging import Redactor, ServerValue, get_logger
from mcpl_host.mcp_methods import (
    EraRequester,
    MCPClient,
)
from mcpl_host.mcpl.compat import CompatSetting, NoteLedger
from mcpl_host.mcpl.endpoint_uri import EndpointURI
from mcpl_host.mcpl.explain import LIBRARY_SWITCH, silence_sentence
from mcpl_host.mcpl.feature_sets import (
    declaration_notes,
)
from mcpl_host.mcpl.grants import EXPLICIT_ONLY, Grant
from mcpl_host.mcpl.manifest import manifest_limit_problem
from mcpl_host.mcpl.policy_state import MCPLState, PolicyState, RefusalAction
from mcpl_host.mcpl.references import AuthBinding, ContentView, ReferenceRegistry
from mcpl_host.mcpl.state import StateStore
from mcpl_host.mcpl.tags import EventDeduplicator
from mcpl_host.mcpl.tool_lifecycle import ToolLifecyclePolicy, policy_diagnostics
from mcpl_host.observe import ConnectionObserver, Reporter
from mcpl_host.opening import Opening
from mcpl_host.services.channels import ChannelService
from mcpl_host.services.dispatch import InboundDispatcher
from mcpl_host.services.inference import InferenceService
from mcpl_host.services.manifest_changes import ManifestWatcher
from mcpl_host.services.negotiation import PolicyExchange, PolicySource
from mcpl_host.services.publish_settings import PublishSettings
from mcpl_host.services.push import PushService
from mcpl_host.services.state_service import StateService
from mcpl_host.services.tool_lifecycle import ObserveFilters
from mcpl_host.stall_watch import StallWatch
from mcpl_host.stateless import Era, EraProbe, ProtocolChoice
from mcpl_host.tool_classes import ToolClassTables
from mcpl_host.transports.base import TransportFactory

if TYPE_CHECKING:
    from mcpl_host.mcpl.input_streams import InputStreams
    from mcpl_host.recording import Recorder
    from mcpl_host.services.channel_calls import ChannelCalls
    from mcpl_host.services.coalescing import EventInbox
    from mcpl_host.services.hooks import HookCalls
    from mcpl_host.services.input_streams import InputClock, InputStreamService
    from mcpl_host.services.state_calls import StateCalls
    from mcpl_host.telemetry import ConnectionTelemetry

# The event inbox (services.coalescing, mcpl.coalescing, mcpl.wake: RFC-006) is imported by
# the first connection of a server given one, not by every connection.

__all__ = ["ConnectionOwner", "ServerConnection"]


class ConnectionOwner(PolicySource, PublishSettings, Protocol):
    """What a connection reads of its server and tells it: what outlives the transport (a
    ``HostedServer``; module rules). Read-only but for the methods."""

    @property
    def name(self) -> str: ...
    @property
    def handlers(self) -> HostHandlers: ...
    @property
    def recorder(self) -> Recorder | None: ...
    @property
    def observer(self) -> ConnectionObserver | None: ...
    @property
    def on_refusal(self) -> RefusalAction: ...
    @property
    def compat(self) -> CompatSetting: ...
    @property
    def protocol(self) -> ProtocolChoice: ...
    @property
    def limits(self) -> Limits: ...
    @property
    def redactor(self) -> Redactor: ...
    @property
    def client_info(self) -> ClientInfo: ...
    @property
    def state_store(self) -> StateStore: ...
    @property
    def event_dedupe(self) -> EventDeduplicator: ...
    @property
    def event_inbox(self) -> EventInbox | None: ...
    @property
    def binding(self) -> str: ...
    @property
    def compat_notes(self) -> NoteLedger: ...
    @property
    def references(self) -> ReferenceRegistry: ...
    @property
    def reference_binding(self) -> AuthBinding: ...
    @property
    def tool_classes(self) -> ToolClassTables: ...
    @property
    def tool_lifecycle(self) -> ToolLifecyclePolicy: ...
    @property
    def channels(self) -> list[dict[str, Any]]: ...
    @property
    def input_streams(self) -> InputStreams | None:
        """The server's input streams (RFC-009, experimental), or None when off."""
        ...

    @property
    def input_clock(self) -> InputClock: ...
    @property
    def endpoint(self) -> EndpointURI | None:
        """The three values of an ``mcpl://`` URL (MCPL §18.4), or None for another URL."""
        ...

    @property
    def mcp_only_fallback(self) -> bool:
        """An ``mcpl://`` server without MCPL is hosted as plain MCP (MCPL §18.5)."""
        ...

    def advertisement(self) -> dict[str, Any]:
        """The host's ``experimental.mcpl`` for this server."""
        ...

    def client_features(self) -> ClientFeatures:
        """The client features the handlers serve now."""
        ...

    def skip_probe(self) -> str | None:
        """Why the next connection sends ``initialize`` without the ``server/discover`` probe."""
        ...

    def next_sequence(self) -> int:
        """The number of a new connection: 1 for the first, one more for each after it."""
        ...

    def connection_telemetry(self) -> ConnectionTelemetry | None:
        """The OpenTelemetry of a new transport, None when off (``HostedServer``)."""
        ...

    def attach(self, conn: ServerConnection) -> None:
        """``conn`` finished its handshake."""
        ...

    def detach(self, conn: ServerConnection) -> None:
        """``conn`` ended."""
        ...

    def channels_changed(self, channels: list[dict[str, Any]]) -> None:
        """The channels registered on this transport changed."""
        ...


class ServerConnection:
    """One transport to one server (module rules). Build one with ``connect(config)``
    or ``HostedServer.open_connection()``; use it as an async context
    manager.

    Each call is made on the part that owns it:

    - ``mcp``: the ``MCPClient``, every MCP method (``list_tools``, ``call_tool``, ``ping``...)
      and the raw ``request`` / ``notify`` (MCP 2025-11-25; 2026-07-28 where stateless);
    - ``hooks``: ``context/beforeInference`` (``HookCalls``; MCPL §10);
    - ``channels``: ``channels/open``, ``/close``, ``/publish`` (``ChannelCalls``; MCPL §14.3);
    - ``state``: stateful ``tools/call`` and ``state/rollback`` (``StateCalls``; MCPL §8);
    - ``policy``: the policy exchange (``PolicyExchange``: ``update()``, MCPL §6.7) and, read
      only, the MCPL state (``policy.state``, a ``PolicyState``);
    - ``connection``: the transport shell (``Connection``: ``pid``, ``pending_count``,
      ``waiting()``, ``stderr_tail``...);
    - ``inbound``: what the server sent (``InboundDispatcher``: ``last_refusal``,
      ``held_total``, ``channel_registry``).

    ``era_probe``: what settled the protocol era. ``sequence``: this connection's number within its ``HostedServer``, counting from 1 (the
    ``transport`` of each ``RequestContext`` of a request that came on it).

    Raises on entry: ``InitializeError`` (refused, unsupported version, exited or closed
    before answering, no answer within ``limits.handshake_timeout_seconds``, or the server
    refused the policy and asked to be closed, with ``on_refusal`` "follow" or "close").
    """

    def __init__(self, hosted: ConnectionOwner, transport_factory: TransportFactory) -> None:
        self.hosted = hosted
        self.sequence = hosted.next_sequence()
        name, limits, redactor = hosted.name, hosted.limits, hosted.redactor
        self._log = get_logger("mcpl_host.connection", server=name)
        machine = hosted.input_streams
        state = PolicyState(
            on_refusal=hosted.on_refusal,
            compat=hosted.compat,
            withheld=frozenset() if machine is not None else EXPLICIT_ONLY,  # RFC-009 §2.2, IS2
        )
        self._reporter = Reporter(name, hosted.handlers, hosted.observer, hosted.recorder)
        self.connection = shell = Connection(
            transport_factory,
            name=name,
            limits=limits,
            redactor=redactor,
            on_lost=self._reporter.connection_lost,
            log=self._log,
        )
        self._opening: Opening | None = None  # made on entering
        #: True when an ``mcpl://`` server without MCPL was taken as plain MCP (MCPL §18.5).
        self.mcp_only_fallback_taken = False
        log = self._log
        #: The one maker of model-visible forms on this connection (MCPL §19.4, §19.5).
        self.content_view = view = ContentView(
            hosted.references,
            hosted.reference_binding,
            label_chars=limits.reference_label_chars,
            redactor=redactor,
        )
        self._stalls = StallWatch(
            shell,
            self._reporter,
            bound=limits.stall_seconds,
            profile=lambda: state.profile if state.choice is not None else None,
            last_refusal=lambda: self.inbound.last_refusal,
            log=log,
        )
        self.policy = PolicyExchange(
            shell,
            state,
            hosted,
            self._reporter,
            close=self.aclose,
            log=log,
            redactor=redactor,
            fallback_seconds=limits.policy_fallback_seconds,
            silence_hint=self._silence_hint,
        )
        manifest = ManifestWatcher(
            shell, state, self.policy, hosted, self._reporter, log=log, redactor=redactor, limits=limits
        )
        channel_service = ChannelService(
            name,
            hosted.handlers,
            state,
            on_changed=hosted.channels_changed,
            log=log,
            redactor=redactor,
            diagnostics_logged=limits.channel_diagnostics_logged,
            max_notification_deliveries=limits.max_queued_inbound,
            max_channels=limits.max_channels,
            max_descriptor_bytes=limits.max_channel_descriptor_bytes,
            max_tags=limits.max_tags,
            transport=self.sequence,
            content_view=view,
        )
        inbox = hosted.event_inbox
        lane = None
        if inbox is not None:  # RFC-006: this transport becomes its binding's render route
            from mcpl_host.services.coalescing import TransportRoute

            route = TransportRoute(
                shell,
                state,
                channel_service.registry,
                channel_service.patterns,
                view,
                limits.push_render_timeout_seconds,
                log=log,
                failures_logged=limits.render_failures_logged,
            )
            lane = channel_service.inbox = inbox.lane(hosted.binding, route)
        self._features = ClientFeatureService(hosted.client_features(), self._reporter, log=log)
        requester = EraRequester(shell, hosted.client_info, self._features.features.capabilities)
        self.mcp = MCPClient(
            requester,
            limits,
            features=self._features,
            server=name,
            spawn=lambda job: shell.pool.start_job(job, counted=False),
            stateless=lambda: requester.stateless,
            server_capabilities=lambda: shell.server_info.capabilities if shell.server_info else {},
            redactor=redactor,
            notify=shell.notify_nowait,
            era=lambda: self.era,
            transport=self.sequence,
            content_view=view.model_content,
            tool_classes=hosted.tool_classes,
        )
        self._unwatch_roots: Callable[[], None] | None = None
        #: The ``tools/observe`` filter of this transport (RFC-007 §6.5).
        self.tool_observe = ObserveFilters(
            state,
            max_rules=limits.max_observe_rules,
            max_paths=limits.max_observe_paths,
            log=log,
            redactor=redactor,
            refusals_logged=limits.refusals_logged,
        )
        self.inbound = InboundDispatcher(
            name,
            state,
            hosted.handlers,
            self._reporter,
            push=PushService(
                hosted.handlers,
                self._reporter,
                hosted.event_dedupe,
                log=log,
                redactor=redactor,
                max_tags=limits.max_tags,
                content_view=view,
                inbox=lane,
            ),
            inference=InferenceService(hosted.handlers, self._reporter, shell.notify_nowait, log=log),
            channels=channel_service,
            state=StateService(hosted.state_store, log=log, redactor=redactor),
            manifest=manifest,
            log=log,
            redactor=redactor,
            limits=limits,
            wait_settled=self.policy.settled.wait,
            notes=hosted.compat_notes,
            client_features=self._features,
            on_mcp_notification=self.mcp.on_notification,
            transport=self.sequence,
            tool_observe=self.tool_observe,
        )
        shell.inbound = self.inbound
        shell.telemetry = self.inbound.telemetry = hosted.connection_telemetry()
        #: RFC-009 input streams on this connection (experimental), or None when off.
        self.input_streams: InputStreamService | None = None
        if machine is not None:
            from mcpl_host.services.input_streams import InputStreamService  # noqa: PLC0415

            self.input_streams = InputStreamService(
                name,
                machine,
                hosted.handlers,
                state,
                channel_service.registry,
                epoch=f"epoch-{self.sequence}",
                clock=hosted.input_clock,
                incoming_one=channel_service.incoming_one,
                start_job=lambda job: shell.pool.start_job(job, counted=False),
                report=self._reporter.input_stream,
                log=log,
            )
            self.inbound.input_streams = channel_service.input_streams = self.input_streams
            self.policy.on_grant_changed = self.input_streams.reconcile
        if inbox is not None:
            binding = hosted.binding
            self.inbound.rendering = lambda: inbox.rendering(binding)
        self._channel_registry = channel_service.registry
        # hooks, channels and state (the outbound MCPL calls) are made on first use, with
        # their modules: a connection that never calls them holds neither.
        self._hooks: HookCalls | None = None
        self._channels: ChannelCalls | None = None
        self._state: StateCalls | None = None

    @property
    def hooks(self) -> HookCalls:
        """``context/beforeInference`` (``HookCalls``; MCPL §10), made on first use."""
        hooks = self._hooks
        if hooks is None:
            from mcpl_host.services.hooks import HookCalls  # noqa: PLC0415 (on first use)

            hosted, limits = self.hosted, self.hosted.limits
            hooks = self._hooks = HookCalls(
                self.connection,
                self.policy.state,
                log=self._log,
                redactor=hosted.redactor,
                drops_logged=limits.dropped_injections_logged,
                default_timeout=limits.hook_timeout_seconds,
                content_view=self.content_view,
                ignore_injections=lambda: hosted.policy.ignore_injections,
            )
        return hooks

    @property
    def channels(self) -> ChannelCalls:
        """``channels/open``, ``/close``, ``/publish`` (``ChannelCalls``; MCPL §14.3), made on
        first use."""
        channels = self._channels
        if channels is None:
            from mcpl_host.services.channel_calls import ChannelCalls  # noqa: PLC0415 (on first use)

            channels = self._channels = ChannelCalls(
                self.connection,
                self.policy.state,
                self.hosted,
                log=self._log,
                registry=self._channel_registry,
            )
        return channels

    @property
    def state(self) -> StateCalls:
        """Stateful ``tools/call`` and ``state/rollback`` (``StateCalls``; MCPL §8), made on
        first use."""
        state = self._state
        if state is None:
            from mcpl_host.services.state_calls import StateCalls  # noqa: PLC0415 (on first use)

            hosted = self.hosted
            state = self._state = StateCalls(
                self.connection,
                self.policy.state,
                hosted.state_store,
                log=self._log,
                redactor=hosted.redactor,
                content_view=self.content_view,
            )
        return state

    def __repr__(self) -> str:
        return (
            f"<ServerConnection {self.name!r} #{self.sequence} {self.connection.phase}"
            f" mcpl={self.mcpl_state.value} pending={self.connection.pending_count}>"
        )

    # --- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> ServerConnection:
        shell = self.connection
        await shell.__aenter__()
        mirror = getattr(shell.transport, "mirror_params", None)
        if callable(mirror):  # Streamable HTTP: tool parameters marked x-mcp-header (S10)
            mirror(self.mcp.param_headers)
            self.mcp.mirrors_param_headers = True
        watch = getattr(shell.transport, "watch_session", None)
        if callable(watch):  # Streamable HTTP: a session the server ends is renewed (HS3)
            watch(self._on_session_renewed)
        try:
            hosted = self.hosted
            self._opening = Opening(
                shell,
                hosted.client_info,
                hosted.advertisement(),
                self._features.features.capabilities(),
                protocol=hosted.protocol,
                on_opened=self._begin_mcpl,
                skip_probe=hosted.skip_probe(),
            )
            info = await self._opening.run()
            self._check_mcpl_present(info)
            self._stalls.begin(shell.watch)  # the handshake's answer is in
            if self.policy.state.state is MCPLState.PENDING:
                # H7: the policy exchange is the last step under the handshake deadline.
                within = min(hosted.limits.request_timeout_seconds, shell.handshake_remaining())
                await self.policy.initial(within=within)
                self._lifecycle_diagnostics()
        except BaseException:
            await shell.__aexit__(None, None, None)
            raise
        roots = self._features.features.roots
        if roots is not None and not info.is_stateless:
            self._unwatch_roots = roots.watch(self._on_roots_changed)
        hosted.attach(self)
        return self

    def _check_mcpl_present(self, info: ServerInfo) -> None:
        """MCPL §18.5: a server dialled by ``mcpl://`` must advertise ``experimental.mcpl``;
        without it the connection fails (``MCPLRequired``), or, with the operator's
        ``mcp_only_fallback``, goes on as plain MCP, logged and kept in
        ``mcp_only_fallback_taken``. The scheme, the resolution and the open socket prove
        nothing."""
        endpoint = self.hosted.endpoint
        if endpoint is None or info.mcpl is not None:
            return
        shown = self.hosted.redactor.redact(endpoint.canonical_uri)
        if not self.hosted.mcp_only_fallback:
            raise MCPLRequired(
                f"the server at {shown} did not advertise experimental.mcpl in its initialize "
                "result, and an mcpl:// endpoint must speak MCPL (MCPL §18.5); to host it as "
                "plain MCP, set mcp_only_fallback (config: mcpOnlyFallback, command line: "
                "--mcp-only-fallback)"
            )
        self.mcp_only_fallback_taken = True
        self._log.warning(
            "the mcpl:// server did not advertise MCPL: hosted as plain MCP (MCP-only fallback)",
            endpoint=shown,
        )

    def _on_session_renewed(self) -> None:
        """The transport started a new HTTP session after the server ended one
        (docs/protocol.md HS3). In the background: the MCP client sets the session's state
        again (``MCPClient.session_renewed``), the MCPL grant in force is proposed again
        (MCPL §6.7), then the application is told (``SessionRenewed``)."""
        renewals = getattr(self.connection.transport, "renewals", 0)
        count = renewals if isinstance(renewals, int) else 0
        policy, reporter = self.policy, self._reporter

        async def restore() -> None:
            await self.mcp.session_renewed()
            state = policy.state
            grant = state.grant
            if state.is_ready and grant is not None:
                with contextlib.suppress(ConnectionLost, ConnectionClosed):
                    await policy.exchange_grant(grant)
            reporter.session_renewed(count)

        self.connection.pool.start_job(restore, counted=False)

    def _on_roots_changed(self) -> None:
        self.mcp.roots_changed()

    def _begin_mcpl(self, info: ServerInfo) -> None:
        """The server's manifest is known: check its bounds and begin the policy (pending
        until the receipt, MCPL §6.7). Called by the handshake before the server may send
        anything else (``Opening``'s ``on_opened``), so a privileged request
        sent right after ``notifications/initialized`` is refused "not yet in force" (held
        under the 0.4 profile), never judged as from a plain MCP server. The policy
        exchange follows when the policy is then pending."""
        if info.mcpl is None:
            return
        limits, redactor, state = self.hosted.limits, self.hosted.redactor, self.policy.state
        over = manifest_limit_problem(info.mcpl, limits)
        if over is not None:  # the work on it must stay bounded: MCPL is not served
            self._log.warning(
                "MCPL manifest over a bound; served as a plain MCP server", problem=over[0], limit=over[1]
            )
            return
        if info.mcpl_version not in SERVED_MCPL_VERSIONS:
            self._log.warning(
                "MCPL version not known; serving best-effort",
                version=ServerValue(info.mcpl.get("version"), redactor),
            )
        for problem in state.begin(info.mcpl, tools="tools" in info.capabilities):
            self._log.info("feature set declaration problem", problem=ServerValue(problem, redactor))
        choice = state.choice
        assert choice is not None
        self._log.info(
            "MCPL compatibility profile", profile=choice.profile, setting=choice.setting, why=choice.reason
        )
        if state.lenient:
            self.inbound.note(tuple(declaration_notes(state.feature_sets)))

    def _lifecycle_diagnostics(self) -> None:
        """RFC-007 §4.1, §4.3: a grant of ``toolLifecycle.inputs`` that delivers nothing
        (without ``observe``, or without a narrowing) is said once per connection (TL4)."""
        proposed = self.policy.state.proposed
        if proposed is None:
            return
        for line in policy_diagnostics(proposed.grant.paths, self.hosted.tool_lifecycle):
            self._log.warning("tool lifecycle grant", diagnostic=line)

    async def __aexit__(self, *exc_info: object) -> None:
        if self._unwatch_roots is not None:
            self._unwatch_roots()
            self._unwatch_roots = None
        try:
            await self.connection.__aexit__(*exc_info)
        finally:
            if self.input_streams is not None:
                self.input_streams.close()  # RFC-009 §8: open streams abort with the transport
            self.hosted.detach(self)

    async def aclose(self) -> None:
        """Close the connection (``Connection.aclose``): fail pending requests, write what is
        queued (bounded by ``close_grace_seconds``), close the transport (for stdio: stdin,
        grace, SIGTERM, SIGKILL, reap). Idempotent. Cancellation: shielded."""
        await self.connection.aclose()

    async def wait_closed(self) -> ConnectionLost | ConnectionClosed:
        """Wait until the transport has ended and return why (``ConnectionLost`` with exit
        status and stderr tail, or ``ConnectionClosed``)."""
        return await self.connection.wait_closed()

    # --- what it is --------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The server's name (its ``HostedServer``'s)."""
        return self.hosted.name

    @property
    def server_info(self) -> ServerInfo | None:
        """What the server said in its ``initialize`` result, or its ``server/discover``
        answer (MCP 2026-07-28); None before it."""
        return self.connection.server_info

    @property
    def era(self) -> Era | None:
        """``"handshake"`` or ``"stateless"`` (MCP 2026-07-28) once the handshake settled it;
        None before."""
        info = self.connection.server_info
        return info.era if info is not None else None

    @property
    def era_probe(self) -> EraProbe | None:
        """What settled the era (``stateless.EraProbe``: the probe sent, what happened, the
        fallback), once the handshake has run; None before."""
        return self._opening.era_probe if self._opening is not None else None

    @property
    def is_open(self) -> bool:
        """True from the opening of the transport until it ends or we close."""
        return self.connection.is_open

    @property
    def mcpl_state(self) -> MCPLState:
        """Where the MCPL layer stands (``MCPLState``; MCPL §5.3, §6.7): ``policy.state.state``."""
        return self.policy.state.state

    @property
    def grant(self) -> Grant | None:
        """The capability grant in force (MCPL §5.4); None before the receipt, after a
        refusal, or for plain MCP: ``policy.state.grant``."""
        return self.policy.state.grant

    @property
    def stall_explanation(self) -> str | None:
        """The sentence of the last stall found on this connection (``stall_watch``), or None."""
        return self._stalls.explanation

    def _silence_hint(self) -> str | None:
        """After a refusal: the sentence explaining an unanswered initial policy request."""
        refusal = self.inbound.last_refusal
        if refusal is None:
            return None
        seconds = self.hosted.limits.request_timeout_seconds
        return silence_sentence(
            None,
            refusal,
            self.policy.state.profile,
            switch=LIBRARY_SWITCH,
            waited_for=f"featureSets/update within {seconds:g} s",
        )

"""``ServerConnection``: one transport to one server, with MCPL, assembled from its parts.

Rules of this module:

- A ``ServerConnection`` lives as long as one transport. It holds its parts and lends them
  their behaviour by delegation, never by inheritance: the ``Connection`` shell (link,
  reader, writer, pending requests, handshake), the pure ``PolicyState`` and the
  ``PolicyExchange`` that drives it, the ``InboundDispatcher`` (admission and the inbound
  services) and the outbound services (``MCPClient``, ``HookCalls``, ``ChannelCalls``,
  ``StateCalls``).
- What outlives the transport is its ``HostedServer``'s: the policy in force (every runtime
  change included), the feature-set state store, ``eventId`` de-duplication, the publish mode
  learned, the channel list shown to the application. Each transport still starts with an
  empty grant and runs the whole policy exchange again (MCPL §5.3), with the policy the
  application set last.
- Entering opens the transport, settles the protocol era (``Connection.handshake`` with the
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

from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from mcpl_host.client_features import ClientFeatureService
from mcpl_host.connection import DEFAULT, Connection, ProgressCallback, Timeout
from mcpl_host.handlers import HostHandlers
from mcpl_host.handshake import SERVED_MCPL_VERSIONS, ServerInfo
from mcpl_host.jsonrpc.errors import ConnectionClosed, ConnectionLost, MCPLHostError
from mcpl_host.limits import Limits
from mcpl_host.link import AnswerHook
from mcpl_host.logging import Redactor, ServerValue, get_logger
from mcpl_host.mcp_methods import (
    CallToolResult,
    CompleteResult,
    EraRequester,
    GetPromptResult,
    MCPClient,
    Prompt,
    PromptReference,
    ReadResourceResult,
    Resource,
    ResourceTemplate,
    ResourceTemplateReference,
    Tool,
)
from mcpl_host.mcpl.admission import may_send
from mcpl_host.mcpl.compat import CompatNote, Profile, ProfileChoice
from mcpl_host.mcpl.explain import LIBRARY_SWITCH, RefusalRecord, silence_sentence
from mcpl_host.mcpl.feature_sets import (
    Derivation,
    FeatureSetDeclarations,
    FeatureSetPolicy,
    declaration_notes,
)
from mcpl_host.mcpl.grants import Grant, GrantPolicy
from mcpl_host.mcpl.injections import BeforeInferenceResult
from mcpl_host.mcpl.manifest import manifest_limit_problem
from mcpl_host.mcpl.policy import PolicyOutcome
from mcpl_host.mcpl.policy_state import MCPLState, PolicyState
from mcpl_host.mcpl.server_shapes import ChannelRegistry
from mcpl_host.mcpl.state import StateStore
from mcpl_host.observe import Reporter
from mcpl_host.services.channel_calls import ChannelCalls, ChannelOpenResult, PublishMode, PublishResult
from mcpl_host.services.channels import ChannelService
from mcpl_host.services.dispatch import InboundDispatcher
from mcpl_host.services.hooks import HookCalls
from mcpl_host.services.inference import InferenceService
from mcpl_host.services.manifest_changes import ManifestWatcher
from mcpl_host.services.negotiation import PolicyChange, PolicyExchange
from mcpl_host.services.push import PushService
from mcpl_host.services.state_calls import RollbackResult, StateCalls
from mcpl_host.services.state_service import StateService
from mcpl_host.stall_watch import StallWatch
from mcpl_host.stateless import Era, EraProbe
from mcpl_host.transports.base import Transport

if TYPE_CHECKING:
    from mcpl_host.hosted import HostedServer

__all__ = ["ServerConnection"]

TransportFactory = Callable[[], AbstractAsyncContextManager[Transport]]


class ServerConnection:
    """One transport to one server (module rules). Build one with ``connect(config)``
    or ``HostedServer.open_connection()``; use it as an async context
    manager.

    Raises on entry: ``InitializeError`` (refused, unsupported version, exited or closed
    before answering, no answer within ``limits.handshake_timeout_seconds``, or the server
    refused the policy and asked to be closed, with ``on_refusal`` "follow" or "close").
    """

    def __init__(self, hosted: HostedServer, transport_factory: TransportFactory) -> None:
        self.hosted = hosted
        name, limits, redactor = hosted.name, hosted.limits, hosted.redactor
        self._log = get_logger("mcpl_host.connection", server=name)
        self._policy = PolicyState(on_refusal=hosted.on_refusal, compat=hosted.compat)
        self._reporter = Reporter(name, hosted.handlers, hosted.observer)
        self._shell = Connection(
            transport_factory,
            name=name,
            limits=limits,
            redactor=redactor,
            on_lost=self._reporter.connection_lost,
        )
        shell, state, log = self._shell, self._policy, self._log
        self._stalls = StallWatch(
            self,
            self._reporter,
            bound=limits.stall_seconds,
            profile=lambda: state.profile if state.choice is not None else None,
            log=log,
        )
        self._exchange = PolicyExchange(
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
            shell, state, self._exchange, hosted, self._reporter, log=log, redactor=redactor, limits=limits
        )
        self._channels = ChannelService(
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
        )
        self._features = ClientFeatureService(hosted.client_features(), self._reporter, log=log)
        self._requester = EraRequester(shell, hosted.client_info, self._features.features.capabilities)
        self.mcp = MCPClient(
            self._requester,
            limits,
            features=self._features,
            server=name,
            spawn=lambda job: shell.start_job(job, counted=False),
            stateless=lambda: self._requester.stateless,
            server_capabilities=lambda: shell.server_info.capabilities if shell.server_info else {},
            redactor=redactor,
        )
        self._unwatch_roots: Callable[[], None] | None = None
        self._dispatcher = InboundDispatcher(
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
            ),
            inference=InferenceService(hosted.handlers, self._reporter, shell.notify_nowait, log=log),
            channels=self._channels,
            state=StateService(hosted.state_store, log=log, redactor=redactor),
            manifest=manifest,
            log=log,
            redactor=redactor,
            limits=limits,
            wait_settled=self._exchange.settled.wait,
            notes=hosted.compat_notes,
            client_features=self._features,
            on_mcp_notification=self.mcp.on_notification,
        )
        shell.inbound = self._dispatcher
        self._hooks = HookCalls(
            shell,
            state,
            log=log,
            redactor=redactor,
            drops_logged=limits.dropped_injections_logged,
            default_timeout=limits.hook_timeout_seconds,
        )
        self._channel_calls = ChannelCalls(shell, state, hosted, log=log)
        self._state_calls = StateCalls(shell, state, hosted.state_store, log=log, redactor=redactor)

    def __repr__(self) -> str:
        return (
            f"<ServerConnection {self.name!r} {self._shell.phase} mcpl={self._policy.state.value}"
            f" pending={self._shell.pending_count}>"
        )

    # --- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> ServerConnection:
        await self._shell.__aenter__()
        mirror = getattr(self._shell.transport, "mirror_params", None)
        if callable(mirror):  # Streamable HTTP: tool parameters marked x-mcp-header (S10)
            mirror(self.mcp.param_headers)
            self.mcp.mirrors_param_headers = True
        try:
            hosted = self.hosted
            info = await self._shell.handshake(
                hosted.client_info,
                hosted.advertisement(),
                self._features.features.capabilities(),
                protocol=hosted.protocol,
                on_opened=self._begin_mcpl,
                skip_probe=hosted.skip_probe(),
            )
            self._shell.start_job(self._stalls.run, counted=False)  # the handshake's answer is in
            if self._policy.state is MCPLState.PENDING:
                # H7: the policy exchange is the last step under the handshake deadline.
                within = min(self.limits.request_timeout_seconds, self._shell.handshake_remaining())
                await self._exchange.initial(within=within)
        except BaseException:
            await self._shell.__aexit__(None, None, None)
            raise
        roots = self._features.features.roots
        if roots is not None and not info.is_stateless:
            self._unwatch_roots = roots.watch(self._on_roots_changed)
        hosted.attach(self)
        return self

    def _begin_mcpl(self, info: ServerInfo) -> None:
        """The server's manifest is known: check its bounds and begin the policy (pending
        until the receipt, MCPL §6.7). Called by the handshake before the server may send
        anything else (``Connection.handshake``'s ``on_opened``), so a privileged request
        sent right after ``notifications/initialized`` is refused "not yet in force" (held
        under the 0.4 profile), never judged as from a plain MCP server. The policy
        exchange follows when the policy is then pending."""
        if info.mcpl is None:
            return
        over = manifest_limit_problem(info.mcpl, self.limits)
        if over is not None:  # the work on it must stay bounded: MCPL is not served
            self._log.warning(
                "MCPL manifest over a bound; served as a plain MCP server", problem=over[0], limit=over[1]
            )
            return
        if info.mcpl_version not in SERVED_MCPL_VERSIONS:
            self._log.warning(
                "MCPL version not known; serving best-effort",
                version=ServerValue(info.mcpl.get("version"), self.redactor),
            )
        for problem in self._policy.begin(info.mcpl, tools="tools" in info.capabilities):
            self._log.info("feature set declaration problem", problem=ServerValue(problem, self.redactor))
        choice = self._policy.choice
        assert choice is not None
        self._log.info(
            "MCPL compatibility profile", profile=choice.profile, setting=choice.setting, why=choice.reason
        )
        if self._policy.lenient:
            self._dispatcher.note(tuple(declaration_notes(self._policy.feature_sets)))

    async def __aexit__(self, *exc_info: object) -> None:
        if self._unwatch_roots is not None:
            self._unwatch_roots()
            self._unwatch_roots = None
        try:
            await self._shell.__aexit__(*exc_info)
        finally:
            self.hosted.detach(self)

    async def aclose(self) -> None:
        """Close the connection (``Connection.aclose``): fail pending requests, write what is
        queued (bounded by ``close_grace_seconds``), close the transport (for stdio: stdin,
        grace, SIGTERM, SIGKILL, reap). Idempotent. Cancellation: shielded."""
        await self._shell.aclose()

    async def wait_closed(self) -> ConnectionLost | ConnectionClosed:
        """Wait until the transport has ended and return why (``ConnectionLost`` with exit
        status and stderr tail, or ``ConnectionClosed``)."""
        return await self._shell.wait_closed()

    # --- what it is --------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.hosted.name

    @property
    def handlers(self) -> HostHandlers:
        return self.hosted.handlers

    @property
    def limits(self) -> Limits:
        return self.hosted.limits

    @property
    def redactor(self) -> Redactor:
        return self.hosted.redactor

    @property
    def policy(self) -> GrantPolicy:
        """The policy in force for the server (its ``HostedServer``'s)."""
        return self.hosted.policy

    @property
    def feature_set_policy(self) -> FeatureSetPolicy:
        return self.hosted.feature_set_policy

    @property
    def server_info(self) -> ServerInfo | None:
        """What the server said in its ``initialize`` result (None before it)."""
        return self._shell.server_info

    @property
    def era(self) -> Era | None:
        """``"handshake"`` or ``"stateless"`` (MCP 2026-07-28) once the handshake settled it;
        None before."""
        info = self._shell.server_info
        return info.era if info is not None else None

    @property
    def era_probe(self) -> EraProbe | None:
        """What settled the era (``stateless.EraProbe``: the probe sent, what happened, the
        fallback), once the handshake has run; None before."""
        return self._shell.era_probe

    @property
    def is_open(self) -> bool:
        """True from the opening of the transport until it ends or we close."""
        return self._shell.is_open

    @property
    def transport(self) -> Transport | None:
        """The transport, once opened (``describe()``; a ``StdioTransport`` has ``pid``)."""
        return self._shell.transport

    @property
    def pending_count(self) -> int:
        """Host requests awaiting their answer."""
        return self._shell.pending_count

    @property
    def inbound_waiting(self) -> int:
        """Admitted server requests waiting for their turn (``Connection.inbound_waiting``)."""
        return self._shell.inbound_waiting

    @property
    def stderr_tail(self) -> list[str]:
        """The server's last stderr lines, escaped and redacted."""
        return self._shell.stderr_tail

    @property
    def mcpl_state(self) -> MCPLState:
        return self._policy.state

    @property
    def profile(self) -> Profile:
        """The compatibility profile of this connection (``mcpl.compat``)."""
        return self._policy.profile

    @property
    def profile_choice(self) -> ProfileChoice | None:
        """How the profile was chosen (None for a plain MCP server, or before the handshake)."""
        return self._policy.choice

    @property
    def compat_notes(self) -> list[CompatNote]:
        """The compatibility notes of the server so far (0.4 profile; each once)."""
        return list(self.hosted.compat_notes.notes)

    @property
    def last_refusal(self) -> RefusalRecord | None:
        """The last server request refused on this connection (``mcpl.explain``)."""
        return self._dispatcher.last_refusal

    @property
    def held_total(self) -> int:
        """Server requests and notifications held until the policy was settled (0.4)."""
        return self._dispatcher.held_total

    def waiting(self) -> list[tuple[str, float]]:
        """``(method, sent_at)`` of each host request waiting for its answer
        (``Connection.waiting``; ``anyio.current_time()`` seconds)."""
        return self._shell.waiting()

    @property
    def last_received(self) -> float | None:
        """When the server last sent anything (``anyio.current_time()``), or None."""
        return self._shell.last_received

    @property
    def stall_explanation(self) -> str | None:
        """The sentence of the last stall found on this connection (``stall_watch``), or None."""
        return self._stalls.explanation

    def _silence_hint(self) -> str | None:
        """After a refusal: the sentence explaining an unanswered initial policy request."""
        refusal = self._dispatcher.last_refusal
        if refusal is None:
            return None
        seconds = self.limits.request_timeout_seconds
        return silence_sentence(
            None,
            refusal,
            self._policy.profile,
            switch=LIBRARY_SWITCH,
            waited_for=f"featureSets/update within {seconds:g} s",
        )

    @property
    def is_mcpl_ready(self) -> bool:
        return self._policy.is_ready

    @property
    def policy_state(self) -> PolicyState:
        """The MCPL state of this transport (read-only use; ``update_policy`` changes it)."""
        return self._policy

    @property
    def grant(self) -> Grant | None:
        """The grant in force; None before the receipt, after a refusal, or for plain MCP."""
        return self._policy.grant

    @property
    def derivation(self) -> Derivation | None:
        return self._policy.derivation

    @property
    def feature_sets(self) -> FeatureSetDeclarations:
        return self._policy.feature_sets

    @property
    def advertised(self) -> frozenset[str]:
        return self._policy.advertised

    @property
    def proposed_grant(self) -> Grant | None:
        proposal = self._policy.proposed
        return proposal.grant if proposal is not None else None

    @property
    def policy_outcome(self) -> PolicyOutcome | None:
        """The last receipt read (None before one)."""
        return self._policy.outcome

    @property
    def manifest(self) -> dict[str, Any] | None:
        """The manifest in force (MCPL §17.1), or None for plain MCP."""
        return self._policy.manifest

    @property
    def manifest_revision(self) -> str | None:
        return self._policy.revision

    @property
    def state_store(self) -> StateStore:
        """The held state per feature set (the ``HostedServer``'s, kept across transports)."""
        return self.hosted.state_store

    feature_set_state = state_store

    @property
    def channel_registry(self) -> ChannelRegistry:
        """The channels the server registered on this transport."""
        return self._channels.registry

    @property
    def hooks_in_flight(self) -> int:
        """``context/beforeInference`` requests awaiting an answer (loop prevention, §10.7)."""
        return self._hooks.in_flight

    @property
    def before_inference_eligible(self) -> bool:
        """MCPL-ready and granted ``observe`` or an ``inject.*`` leaf (§10.1)."""
        return self._hooks.eligible

    def may_send(self, method: str) -> bool:
        """Whether the host may send the MCPL method ``method`` now (MCPL §5.4)."""
        return may_send(method, self._policy) is None

    def may_send_model(self) -> bool:
        """Whether ``modelInfo`` is granted (a ``model`` may go in lifecycle params)."""
        grant = self._policy.grant
        return grant is not None and grant.allows("modelInfo")

    # --- JSON-RPC ----------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: Any = None,
        *,
        timeout: Timeout = DEFAULT,
        progress: ProgressCallback | None = None,
        on_answer: AnswerHook | None = None,
    ) -> Any:
        """``Connection.request``: send a request and return its ``result``.

        Raises: ``RemoteError``, ``RequestTimeout`` (``notifications/cancelled`` was sent),
        ``ConnectionLost`` / ``ConnectionClosed``, ``LocalProtocolError``.
        Cancellation: ``notifications/cancelled`` is sent; a late answer is an orphan.
        On a stateless connection ``params`` (an object or None) get the per-request
        ``_meta`` (``EraRequester``)."""
        return await self._requester.request(
            method, params, timeout=timeout, progress=progress, on_answer=on_answer
        )

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification. Raises ``ConnectionLost`` / ``ConnectionClosed``."""
        self._shell.notify_nowait(method, params)

    def notify_nowait(self, method: str, params: Any = None) -> None:
        """Queue a notification without waiting. Raises as ``notify``."""
        self._shell.notify_nowait(method, params)

    async def ping(self, *, timeout: Timeout = DEFAULT) -> None:
        """MCP ``ping`` (on a stateless connection ``server/discover``: MCP 2026-07-28 has no
        ping); returns when the server answers. Raises as ``request()``."""
        await self.mcp.ping(timeout=timeout)

    # --- MCP ---------------------------------------------------------------------------------

    async def list_tools(self, *, refresh: bool = False) -> list[Tool]:
        """``tools/list``, every page (``MCPClient``; in the stateless era served from the
        cache while fresh, unless ``refresh``)."""
        return await self.mcp.list_tools(refresh=refresh)

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        timeout: Timeout = DEFAULT,
        progress: ProgressCallback | None = None,
    ) -> CallToolResult:
        """``tools/call`` (a tool failure is a result with ``is_error``)."""
        return await self.mcp.call_tool(name, arguments, timeout=timeout, progress=progress)

    async def list_resources(self, *, refresh: bool = False) -> list[Resource]:
        return await self.mcp.list_resources(refresh=refresh)

    async def list_resource_templates(self) -> list[ResourceTemplate]:
        return await self.mcp.list_resource_templates()

    async def read_resource(self, uri: str, *, timeout: Timeout = DEFAULT) -> ReadResourceResult:
        return await self.mcp.read_resource(uri, timeout=timeout)

    async def list_prompts(self, *, refresh: bool = False) -> list[Prompt]:
        return await self.mcp.list_prompts(refresh=refresh)

    async def lists_settled(self) -> None:
        """Return once no background refresh of a list (after ``notifications/*/list_changed``)
        is in flight or pending: ``cached_tools`` and the others then hold the newest lists."""
        await self.mcp.lists_settled()

    async def get_prompt(
        self, name: str, arguments: dict[str, str] | None = None, *, timeout: Timeout = DEFAULT
    ) -> GetPromptResult:
        return await self.mcp.get_prompt(name, arguments, timeout=timeout)

    async def complete(
        self,
        ref: PromptReference | ResourceTemplateReference,
        argument: str,
        value: str,
        *,
        context: Mapping[str, str] | None = None,
        timeout: Timeout = DEFAULT,
    ) -> CompleteResult:
        """``completion/complete`` (``MCPClient.complete``)."""
        return await self.mcp.complete(ref, argument, value, context=context, timeout=timeout)

    async def set_log_level(self, level: str, *, timeout: Timeout = DEFAULT) -> None:
        """``logging/setLevel``, or the ``_meta`` log level on a stateless connection
        (``MCPClient.set_log_level``)."""
        await self.mcp.set_log_level(level, timeout=timeout)

    async def subscribe_resource(self, uri: str, *, timeout: Timeout = DEFAULT) -> None:
        """``resources/subscribe`` (``MCPClient.subscribe_resource``)."""
        await self.mcp.subscribe_resource(uri, timeout=timeout)

    async def unsubscribe_resource(self, uri: str, *, timeout: Timeout = DEFAULT) -> None:
        """``resources/unsubscribe`` (``MCPClient.unsubscribe_resource``)."""
        await self.mcp.unsubscribe_resource(uri, timeout=timeout)

    def roots_changed(self) -> bool:
        """Send ``notifications/roots/list_changed`` (MCP 2025-11-25 "Roots"): the server may
        then ask ``roots/list`` again. Called by itself when a watched ``Roots`` changes.
        Returns False, sending nothing, when the host does not serve roots, on a stateless
        connection (the notification is removed in 2026-07-28), or when the transport has
        gone."""
        if self._features.features.roots is None or self.era != "handshake":
            return False
        try:
            self._shell.notify_nowait("notifications/roots/list_changed")
        except MCPLHostError:
            return False
        return True

    def _on_roots_changed(self) -> None:
        self.roots_changed()

    @property
    def cached_tools(self) -> list[Tool] | None:
        """The last ``tools/list`` (refreshed on ``list_changed``); None before one."""
        return self.mcp.cached_tools

    @property
    def cached_resources(self) -> list[Resource] | None:
        return self.mcp.cached_resources

    @property
    def cached_prompts(self) -> list[Prompt] | None:
        return self.mcp.cached_prompts

    # --- MCPL, host -> server ------------------------------------------------------------------

    async def update_policy(
        self, policy: GrantPolicy | None = None, feature_set_policy: FeatureSetPolicy | None = None
    ) -> PolicyChange:
        """Change the grant at run time (MCPL §6.7), for this transport and every later one:
        the reduction at once, the expansion on the receipt (``PolicyExchange.update``).

        Raises: ``LocalProtocolError`` (not MCPL-ready), ``ConnectionLost`` /
        ``ConnectionClosed``. Cancellation: the reduction stays in force."""
        return await self._exchange.update(policy, feature_set_policy)

    async def before_inference(
        self,
        *,
        inference_id: str,
        conversation_id: str,
        turn_index: int,
        user_message: str | None,
        model: Mapping[str, Any],
        channels: Mapping[str, Any] | None = None,
        timeout: Timeout = DEFAULT,
    ) -> BeforeInferenceResult | None:
        """``context/beforeInference`` (``HookCalls.before_inference``); None when not
        eligible (nothing was sent)."""
        return await self._hooks.before_inference(
            inference_id=inference_id,
            conversation_id=conversation_id,
            turn_index=turn_index,
            user_message=user_message,
            model=model,
            channels=channels,
            timeout=timeout,
        )

    async def call_tool_with_state(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        feature_set: str,
        timeout: Timeout = DEFAULT,
        progress: ProgressCallback | None = None,
    ) -> CallToolResult:
        """``tools/call`` with the state held for ``feature_set`` (``StateCalls``)."""
        return await self._state_calls.call_tool_with_state(
            name, arguments, feature_set=feature_set, timeout=timeout, progress=progress
        )

    async def state_rollback(
        self, feature_set: str, checkpoint: str, *, timeout: Timeout = DEFAULT
    ) -> RollbackResult:
        """``state/rollback`` (``StateCalls.rollback``)."""
        return await self._state_calls.rollback(feature_set, checkpoint, timeout=timeout)

    async def channels_open(
        self,
        *,
        type: str | None = None,
        address: Any = None,
        metadata: Mapping[str, Any] | None = None,
        channel_id: str | None = None,
        history: Any = None,
        timeout: Timeout = DEFAULT,
    ) -> ChannelOpenResult:
        """``channels/open`` (``ChannelCalls.open``)."""
        return await self._channel_calls.open(
            type=type,
            address=address,
            metadata=metadata,
            channel_id=channel_id,
            history=history,
            timeout=timeout,
        )

    async def channels_close(self, channel_id: str, *, timeout: Timeout = DEFAULT) -> bool:
        """``channels/close`` (``ChannelCalls.close``)."""
        return await self._channel_calls.close(channel_id, timeout=timeout)

    async def channels_publish(
        self,
        conversation_id: str,
        channel_id: str,
        content: str | list[Any],
        *,
        stream: bool = False,
        timeout: Timeout = DEFAULT,
    ) -> PublishResult:
        """``channels/publish`` (``ChannelCalls.publish``)."""
        return await self._channel_calls.publish(
            conversation_id, channel_id, content, stream=stream, timeout=timeout
        )

    @property
    def publish_mode(self) -> PublishMode:
        """How ``channels/publish`` goes out: ``"request"``, ``"notification"`` or ``"auto"``
        (kept by the ``HostedServer``)."""
        return self._channel_calls.publish_mode

    @publish_mode.setter
    def publish_mode(self, mode: PublishMode) -> None:
        self._channel_calls.publish_mode = mode

    @property
    def publishes_as_notification(self) -> bool:
        return self._channel_calls.publishes_as_notification

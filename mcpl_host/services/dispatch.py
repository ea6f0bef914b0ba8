"""What a server asks the host: the ``InboundPort`` of an MCPL-capable connection.

Rules:

- ``on_request`` runs in the read loop. It calls ``admission.admit`` (the one call site of
  inbound admission) and acts on its decision:

  - ``Refused``: answered at once, reported to ``HostHandlers.on_refused`` and the
    observer (with the gate's reason), logged with the reason (bounded,
    ``Limits.refusals_logged``); a declaration mismatch is logged too;
  - ``Admitted``: its compatibility notes are logged, each once per server (the server's
    ``NoteLedger``), and the job of the service that serves the method is returned:
    ``push/event`` (``PushService``; an ``inbound.EagerJob``, which the pool may answer at
    once: ``PushService.answer_now``), ``inference/request`` and ``model/info``
    (``InferenceService``), ``channels/*`` (``ChannelService``), ``state/*``
    (``StateService``), ``tools/observe`` (``ObserveFilters``, RFC-007 §6), ``roots/list``, ``sampling/createMessage`` and
    ``elicitation/create`` the ``ClientFeatureService`` when the application serves that
    feature (MCP 2025-11-25 "Client Features"), anything else ``HostHandlers.request``
    (default ``-32601``). Every answer is reported (``channels/*``, ``state/*`` and
    ``HostHandlers.request`` here, the client features by their service, as
    ``server_request``);
  - ``Held`` (0.4 profile, docs/protocol.md, "Compatibility profiles"): the request is held
    as a job that waits for the policy to be settled (at most
    ``Limits.held_request_seconds``) and then calls ``admit()`` again with
    ``may_hold=False``, so it is judged by the same rules against the grant then in force.
    At most ``Limits.max_held_requests`` are held at once, their params at most
    ``Limits.max_held_bytes`` of compact JSON; one more is admitted again at once with
    ``may_hold=False`` (refused: the policy is not yet in force). A hold is
    reported (``held``) and logged.

- ``on_notification`` routes ``mcpl/manifestChanged`` (ungated, never answered, MCPL §17.3)
  and the notification forms of ``channels/changed`` / ``channels/incoming`` (admitted here
  too, held the same way; a refusal is a diagnostic and a ``refused`` report); a
  ``featureSets/changed`` notification (removed in MCPL 0.5) is logged and ignored. Every
  notification is then reported, and handed to ``on_mcp_notification`` (the list caches of
  ``MCPClient``).
- ``last_refusal`` keeps the last refusal, to explain a silence after it (``mcpl.explain``).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

import anyio

from mcpl_host.client_features import CLIENT_FEATURE_METHODS, ClientFeatureService, reported_answer
from mcpl_host.handlers import HostHandlers, RequestContext
from mcpl_host.inbound import BackgroundJob, EagerJob, InboundJob
from mcpl_host.json_size import json_size
from mcpl_host.jsonrpc.envelope import Request, Response
from mcpl_host.jsonrpc.errors import ErrorCode, HandlerError
from mcpl_host.jsonrpc.values import is_object
from mcpl_host.limits import Limits
from mcpl_host.logging import LogBudget, Logger, Redactor, ServerValue
from mcpl_host.mcpl.admission import (
    DENIAL_TEXT,
    INBOUND_GATES,
    Admission,
    AdmissionView,
    Admitted,
    Held,
    PushAdmissions,
    Refused,
    admit,
)
from mcpl_host.mcpl.compat import CompatNote, NoteLedger
from mcpl_host.mcpl.explain import RefusalRecord
from mcpl_host.mcpl.input_methods import INPUT_METHODS, metadata_only, rejected
from mcpl_host.services.channels import ChannelService
from mcpl_host.services.inference import InferenceService
from mcpl_host.services.manifest_changes import ManifestWatcher
from mcpl_host.services.push import PushService
from mcpl_host.services.state_service import StateService
from mcpl_host.services.tool_lifecycle import ObserveFilters

if TYPE_CHECKING:
    from mcpl_host.observe import Reporter
    from mcpl_host.services.input_streams import InputStreamService
    from mcpl_host.telemetry import ConnectionTelemetry

__all__ = ["LIBRARY_SERVED", "InboundDispatcher"]

_CHANNEL_METHODS = frozenset({"channels/register", "channels/changed", "channels/list", "channels/incoming"})
_CHANNEL_NOTIFICATIONS = ("channels/changed", "channels/incoming")
#: The notifications ``on_notification`` acts on before reporting them (any other is only
#: reported, after one set look-up).
_ACTED_ON = INPUT_METHODS | {"mcpl/manifestChanged", "featureSets/changed", *_CHANNEL_NOTIFICATIONS}
_STATE_METHODS = frozenset({"state/update", "state/get"})
#: Server requests the library itself serves (no application delivery), each reported as a
#: ``server_request`` with its answer.
LIBRARY_SERVED = _CHANNEL_METHODS | _STATE_METHODS | {"inference/request", "model/info", "tools/observe"}


def _service_job(
    serve: Callable[[RequestContext, Any], Coroutine[Any, Any, Any]], name: str, transport: int
) -> InboundJob:
    """The one job of every request a service serves: ``serve(context, params)``, the
    ``RequestContext`` made when the request's turn comes (a waiting request holds no
    closure and no context)."""

    def job(request: Request) -> Coroutine[Any, Any, Any]:
        return serve(RequestContext(name, request.id, request.method, transport), request.params)

    return job


async def _settled_already() -> None:
    """The default wait: nothing to wait for (no policy exchange drives this dispatcher)."""


class InboundDispatcher:
    """Admits and routes one connection's server traffic (module rules). ``wait_settled``
    returns once the initial policy exchange is over; ``notes`` is the server's ledger;
    ``transport`` goes in each ``RequestContext`` (``ServerConnection.sequence``).
    ``last_refusal`` and ``held_total`` tell what admission did; ``channel_registry`` holds
    the channels the server registered on this transport."""

    def __init__(
        self,
        name: str,
        view: AdmissionView,
        handlers: HostHandlers,
        reporter: Reporter,
        *,
        push: PushService,
        inference: InferenceService,
        channels: ChannelService,
        state: StateService,
        manifest: ManifestWatcher,
        log: Logger,
        redactor: Redactor,
        limits: Limits | None = None,
        wait_settled: Callable[[], Awaitable[None]] | None = None,
        notes: NoteLedger | None = None,
        client_features: ClientFeatureService | None = None,
        on_mcp_notification: Callable[[str, Any], None] | None = None,
        transport: int,
        tool_observe: ObserveFilters | None = None,
    ) -> None:
        self._name = name
        self._transport = transport
        self._view = view
        self._push_admissions = PushAdmissions(view)  # ``admit`` for push/event, remembering
        self._handlers = handlers
        self._reporter = reporter
        self._push_job = EagerJob(push.answer_now, _service_job(push.serve, name, transport))
        self._inference_job = _service_job(inference.serve, name, transport)
        # The methods whose job depends on nothing but the method (``_route``'s first step;
        # ``on_request`` reads it without the call).
        self._fixed_routes: dict[str, InboundJob] = {
            "push/event": self._push_job,
            "model/info": self._inference_job,
        }
        self._channels = channels
        self._state = state
        self._manifest = manifest
        self._log = log
        self._redactor = redactor
        self._limits = limits or Limits()
        self._wait_settled = wait_settled or _settled_already
        self._notes = notes if notes is not None else NoteLedger(self._limits.compat_notes_logged)
        self._refusals_logged = LogBudget(self._limits.refusals_logged)
        self._held = 0
        self._held_bytes = 0
        #: Requests and notifications held so far on this connection (0.4 profile).
        self.held_total = 0
        #: The last refused server request (module rules).
        self.last_refusal: RefusalRecord | None = None
        #: The channels the server registered on this transport (``ChannelService.registry``).
        self.channel_registry = channels.registry
        #: RFC-009 (experimental): ``channels/input/*``, when ``ServerConfig.input_streams``.
        self.input_streams: InputStreamService | None = None
        self._client_features = client_features
        self._on_mcp_notification = on_mcp_notification
        self._tool_observe = tool_observe

    # --- requests ------------------------------------------------------------------------------

    #: OpenTelemetry (``mcpl_host.telemetry``): each served request gets a ``SERVER`` span,
    #: parented by the trace context in its ``params._meta``; None: off (set by the
    #: connection).
    telemetry: ConnectionTelemetry | None = None

    def on_request(self, request: Request) -> InboundJob | HandlerError:
        method = request.method
        outcome: InboundJob | HandlerError
        if method in INPUT_METHODS and self.input_streams is None:
            outcome = self._route(request)  # RFC-009 off: unknown methods, as before (IS2)
        else:
            decision = (
                self._push_admissions.admit(request.params)
                if method == "push/event"
                else admit(method, request.params, self._view)
            )
            if type(decision) is Admitted:  # the usual case, told first (no call more)
                if decision.notes:
                    self.note(decision.notes)
                outcome = self._fixed_routes.get(method) or self._route(request)
            else:
                outcome = self._not_admitted(request, decision)
        telemetry = self.telemetry
        if telemetry is None:
            return outcome
        return telemetry.served(method, request.id, request.params, outcome)

    def _not_admitted(self, request: Request, decision: Admission) -> InboundJob | HandlerError:
        """A request ``admit`` did not admit at once: held (as a job that waits) or refused."""
        method, params = request.method, request.params
        if isinstance(decision, Held):
            size = self._room_to_hold(params)
            if size is not None:
                self._hold(method, params, request.id, decision)
                return functools.partial(self._serve_held, size=size)
            decision = admit(method, params, self._view, may_hold=False)
        return self._decided(request, decision)

    def _room_to_hold(self, params: object) -> int | None:
        """The bytes ``params`` take if one more request may be held now (under both
        ``max_held_requests`` and ``max_held_bytes``), else None."""
        if self._held >= self._limits.max_held_requests:
            return None
        room = self._limits.max_held_bytes - self._held_bytes
        size = json_size(params, limit=room)
        if size > room:
            return None
        self._held_bytes += size
        return size

    def _hold(self, method: str, params: Any, request_id: Any, decision: Held) -> None:
        self._held += 1
        self.held_total += 1
        self._log.info(
            "holding a server request until the policy is settled (0.4 profile)",
            method=ServerValue(method, self._redactor),
            capability=decision.capability,
        )
        self._reporter.held(method, params, request_id, decision.capability)

    async def _until_settled(self, size: int) -> None:
        try:
            with anyio.move_on_after(self._limits.held_request_seconds):
                await self._wait_settled()
        finally:
            self._held -= 1
            self._held_bytes -= size

    async def _serve_held(self, request: Request, *, size: int) -> Any:
        await self._until_settled(size)
        outcome = self._decided(request, admit(request.method, request.params, self._view, may_hold=False))
        if isinstance(outcome, HandlerError):
            raise outcome
        return await outcome(request)

    def _decided(self, request: Request, decision: Admission) -> InboundJob | HandlerError:
        method, params = request.method, request.params
        if isinstance(decision, Refused):
            self._refused(method, params, decision, request.id)
            if method in INPUT_METHODS and decision.reason == "not_in_force":
                return rejected("not_ready")  # RFC-009 §11 words it so (IS4)
            return decision.error
        assert not isinstance(decision, Held)
        self.note(decision.notes)
        return self._route(request)

    def _refused(self, method: str, params: Any, refused: Refused, request_id: Any) -> None:
        error = refused.error
        if refused.diagnostic is not None:  # MCPL §6.4 rule 2: rejected at use
            self._log.warning(
                "declaration mismatch: a feature set used a capability it does not declare",
                feature_set=ServerValue(refused.diagnostic.feature_set, self._redactor),
                capability=refused.diagnostic.capability,
            )
        data = error.data
        capability = data.get("capability") if is_object(data) else None
        if method in INBOUND_GATES or refused.reason is not None:
            self.last_refusal = RefusalRecord(
                method, int(error.code), refused.reason, capability if isinstance(capability, str) else None
            )
        verdict = self._refusals_logged.take()
        if verdict == "log":
            fields: dict[str, Any] = {"method": ServerValue(method, self._redactor), "code": int(error.code)}
            if refused.reason is not None:
                fields.update(capability=capability, reason=refused.reason, why=DENIAL_TEXT[refused.reason])
            self._log.info("refused a server request", **fields)
        elif verdict == "last":
            self._log.info("refused a server request: more of these go unlogged on this connection")
        if method in INPUT_METHODS:
            params = metadata_only(params)  # RFC-009 §10: no text in an event (IS11)
        self._reporter.refused(method, params, error.to_error(), refused.reason, request_id=request_id)

    def note(self, notes: tuple[CompatNote, ...]) -> None:
        for note in notes:
            verdict = self._notes.take(note)
            if verdict == "log":
                self._log.info(
                    "compatibility note (0.4 profile)", note=ServerValue(note.sentence, self._redactor)
                )
            elif verdict == "last":
                self._log.info("compatibility notes: more go unlogged for this server")

    #: RFC-006 §5.3 (SPEC §10.7): True while a ``push/render`` to this server waits for its
    #: answer; an ``inference/request`` then is refused ``-32600`` (set by the connection).
    rendering: Callable[[], bool] | None = None

    def _route(self, request: Request) -> InboundJob:
        method, params = request.method, request.params
        fixed = self._fixed_routes.get(method)
        if fixed is not None:
            return fixed
        if method == "inference/request":
            if self.rendering is not None and self.rendering():
                return _refused_while_rendering
            return self._inference_job
        context = RequestContext(self._name, request.id, method, self._transport)
        if method in _CHANNEL_METHODS:
            return lambda _: self._reported(context, params, self._channels.serve(context, params))
        streams = self.input_streams
        if method in INPUT_METHODS and streams is not None:
            shown = metadata_only(params)  # RFC-009 §10: no text, no digest in an event (IS11)
            return lambda _: reported_answer(
                self._reporter, context, shown, streams.serve(context, params), shown=metadata_only
            )
        if method in _STATE_METHODS:
            return lambda _: self._reported(context, params, self._serve_state(method, params))
        observe = self._tool_observe
        if method == "tools/observe" and observe is not None:  # RFC-007 §6 (admitted: observe granted)
            return lambda _: self._reported(context, params, observe.serve(context, params))
        features = self._client_features
        if method in CLIENT_FEATURE_METHODS and features is not None and features.serves(method):
            return lambda _: features.serve(context, params)
        return lambda _: self._reported(context, params, self._handlers.request(context, params))

    async def _serve_state(self, method: str, params: Any) -> Any:
        return self._state.serve(method, params)

    async def _reported(self, context: RequestContext, params: Any, work: Coroutine[Any, Any, Any]) -> Any:
        return await reported_answer(self._reporter, context, params, work)

    # --- notifications -------------------------------------------------------------------------

    def on_notification(self, method: str, params: object) -> BackgroundJob | None:
        job: BackgroundJob | None = None
        if method not in _ACTED_ON:
            pass
        elif method in INPUT_METHODS and self.input_streams is not None:
            # RFC-009 §11: ignored, a metadata-only diagnostic, no state changed (IS11)
            self._log.info("ignored an input-stream method sent as a notification", method=method)
            return None
        elif method == "mcpl/manifestChanged":
            job = self._manifest.on_changed(params)
        elif method == "featureSets/changed":  # removed in MCPL 0.5 (§6.7); a request is -32601
            self._log.info(
                "ignored featureSets/changed: removed in MCPL 0.5, superseded by mcpl/manifestChanged"
            )
        elif method in _CHANNEL_NOTIFICATIONS:
            job, refused = self._channel_notification(method, params, may_hold=True)
            if refused is not None:  # reported with the notification: no answer is possible
                self._reporter.notification(method, params, refused.error.to_error(), refused.reason)
                return None
        self._reporter.notification(method, params)
        if self._on_mcp_notification is not None:
            self._on_mcp_notification(method, params)
        return job

    def _channel_notification(
        self, method: str, params: object, *, may_hold: bool
    ) -> tuple[BackgroundJob | None, Refused | None]:
        decision = admit(method, params, self._view, may_hold=may_hold)
        if isinstance(decision, Held):
            size = self._room_to_hold(params)
            if size is not None:
                self._hold(method, params, None, decision)

                async def later() -> None:
                    await self._until_settled(size)
                    job, refused = self._channel_notification(method, params, may_hold=False)
                    if refused is not None:
                        error = refused.error.to_error()
                        self._reporter.refused(method, params, error, refused.reason, notification=True)
                    elif job is not None:
                        await job()

                return later, None
            decision = admit(method, params, self._view, may_hold=False)
        if isinstance(decision, Refused):
            self._channels.refused_notification(method, decision.error)
            return None, decision
        assert not isinstance(decision, Held)
        self.note(decision.notes)
        return self._channels.on_notification(method, params), None

    def on_orphan_response(self, response: Response) -> None:
        self._reporter.orphan_response(response)


async def _refused_while_rendering(_: object) -> Any:
    """RFC-006 §5.3: a server handling ``push/render`` must not issue ``inference/request``."""
    raise HandlerError(ErrorCode.INVALID_REQUEST, "inference/request refused while push/render is pending")

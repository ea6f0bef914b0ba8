"""What a server asks the host: the ``InboundPort`` of an MCPL-capable connection.

Rules:

- ``on_request`` runs in the read loop. It calls ``admission.admit`` (the one call site of
  inbound admission), answers a refusal at once (reported to ``HostHandlers.on_refused`` and
  the observer; a declaration mismatch is logged), and otherwise returns the job of the
  service that serves the method: ``push/event`` (``PushService``), ``inference/request`` and
  ``model/info`` (``InferenceService``), ``channels/*`` (``ChannelService``), ``state/*``
  (``StateService``), ``roots/list``, ``sampling/createMessage`` and ``elicitation/create``
  the ``ClientFeatureService`` when the application serves that feature (MCP 2025-11-25
  "Client Features"), anything else ``HostHandlers.request`` (default ``-32601``).
- ``on_notification`` routes ``mcpl/manifestChanged`` (ungated, never answered, MCPL §17.3)
  and the notification forms of ``channels/changed`` / ``channels/incoming``; a
  ``featureSets/changed`` notification (removed in MCPL 0.5) is logged and ignored. Every
  notification is then reported, and handed to ``on_mcp_notification`` (the list caches of
  ``MCPClient``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mcpl_host.client_features import CLIENT_FEATURE_METHODS, ClientFeatureService
from mcpl_host.connection import BackgroundJob, InboundJob
from mcpl_host.handlers import HostHandlers, RequestContext
from mcpl_host.jsonrpc.envelope import Request, Response
from mcpl_host.jsonrpc.errors import ErrorCode, HandlerError
from mcpl_host.logging import Redactor, ServerValue
from mcpl_host.mcpl.admission import AdmissionView, admit
from mcpl_host.mcpl.channels import ChannelService
from mcpl_host.mcpl.inference import InferenceService
from mcpl_host.mcpl.manifest_changes import ManifestWatcher
from mcpl_host.mcpl.push import PushService
from mcpl_host.mcpl.state_service import StateService

if TYPE_CHECKING:
    from mcpl_host.observe import Reporter

__all__ = ["InboundDispatcher"]

_CHANNEL_METHODS = frozenset({"channels/register", "channels/changed", "channels/list", "channels/incoming"})


class InboundDispatcher:
    """Admits and routes one connection's server traffic (module rules)."""

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
        log: Any,
        redactor: Redactor,
        client_features: ClientFeatureService | None = None,
        on_mcp_notification: Callable[[str, Any], None] | None = None,
    ) -> None:
        self._name = name
        self._view = view
        self._handlers = handlers
        self._reporter = reporter
        self._push = push
        self._inference = inference
        self._channels = channels
        self._state = state
        self._manifest = manifest
        self._log = log
        self._redactor = redactor
        self._client_features = client_features
        self._on_mcp_notification = on_mcp_notification

    def on_request(self, request: Request) -> InboundJob | HandlerError:
        method, params = request.method, request.params
        refused = admit(method, params, self._view)
        if refused is not None:
            if refused.diagnostic is not None:  # MCPL §6.4 rule 2: rejected at use
                self._log.warning(
                    "declaration mismatch: a feature set used a capability it does not declare",
                    feature_set=ServerValue(refused.diagnostic.feature_set, self._redactor),
                    capability=refused.diagnostic.capability,
                )
            self._reporter.refused(method, params, refused.error.to_error())
            return refused.error
        context = RequestContext(self._name, request.id, method)
        if method == "push/event":
            return lambda: self._push.serve(context, params)
        if method in ("inference/request", "model/info"):
            return lambda: self._inference.serve(context, params)
        if method in _CHANNEL_METHODS:
            return lambda: self._channels.serve(context, params)
        if method in ("state/update", "state/get"):
            return lambda: self._serve_state(method, params)
        features = self._client_features
        if method in CLIENT_FEATURE_METHODS and features is not None and features.serves(method):
            return lambda: features.serve(context, params)
        return lambda: self._other(context, params)

    async def _serve_state(self, method: str, params: Any) -> Any:
        return self._state.serve(method, params)

    async def _other(self, context: RequestContext, params: Any) -> Any:
        data = {"id": context.id, "method": context.method, "params": params}
        try:
            answer = await self._handlers.request(context, params)
        except HandlerError as exc:
            self._reporter.handled("server_request", {**data, "error": exc.to_error()})
            raise
        except Exception:
            error = {"code": int(ErrorCode.INTERNAL_ERROR), "message": "Internal error"}
            self._reporter.handled("server_request", {**data, "error": error})
            raise
        self._reporter.handled("server_request", {**data, "answer": answer})
        return answer

    def on_notification(self, method: str, params: Any) -> BackgroundJob | None:
        job: BackgroundJob | None = None
        if method == "mcpl/manifestChanged":
            job = self._manifest.on_changed(params)
        elif method == "featureSets/changed":  # removed in MCPL 0.5 (§6.7); a request is -32601
            self._log.info(
                "ignored featureSets/changed: removed in MCPL 0.5, superseded by mcpl/manifestChanged"
            )
        elif method in ("channels/changed", "channels/incoming"):
            job = self._channels.on_notification(method, params)
        self._reporter.notification(method, params)
        if self._on_mcp_notification is not None:
            self._on_mcp_notification(method, params)
        return job

    def on_orphan_response(self, response: Response) -> None:
        self._reporter.orphan_response(response)

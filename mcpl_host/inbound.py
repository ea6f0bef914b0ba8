"""What a server sends us: routing of session events, admission, handler tasks.

Rules of this module (ENVELOPE.md C R1-R7, B A1-A4, E T1-T2):

- ``ping`` is answered in every state, inline in the read loop.
- Admission (``mcpl.admission.admit``) runs here, once, before any handler sees a request:
  a refusal is answered at once and reported to ``HostHandlers.on_refused``.
- Each admitted request runs in its own task in the connection's task group; at most
  ``limits.max_concurrent_inbound`` run at once and up to ``limits.max_queued_inbound`` wait
  for a turn; one more is answered ``-32603`` at once. The read loop never waits. A server's ``notifications/cancelled`` cancels the task and no
  answer is sent (MCP cancellation).
- An answer is written only to the link (transport epoch) the request was read on; if that
  link has closed, nothing is sent and a log line says so (T1, T2).
- The MCPL server -> host methods (``push/event``, ``inference/request``, ``model/info``,
  ``channels/*``, ``state/*``) are served by ``mcpl.server_methods.MCPLServerMethods``, mixed in
  here: its ``_precheck_server_request`` is admission's last step (params, ``state/*`` feature
  sets), and the notification forms of ``channels/changed`` / ``channels/incoming`` go to it
  before ``HostHandlers.on_notification``.
"""

from __future__ import annotations

from typing import Any

import anyio

from mcpl_host.connection_io import Link
from mcpl_host.handlers import HostHandlers, RequestContext
from mcpl_host.jsonrpc.envelope import Request, is_number
from mcpl_host.jsonrpc.errors import ErrorCode, HandlerError
from mcpl_host.jsonrpc.session import (
    DroppedLine,
    InvalidRequestReceived,
    NotificationReceived,
    OrphanResponse,
    RequestReceived,
    ResponseSettled,
    Session,
    UnmatchedError,
)
from mcpl_host.limits import Limits
from mcpl_host.logging import LogBudget, Redactor, ServerValue
from mcpl_host.mcpl.admission import admit
from mcpl_host.mcpl.feature_sets import (
    FEATURE_SET_METHODS,
    Derivation,
    FeatureSetDeclarations,
    admit_feature_set,
)
from mcpl_host.mcpl.grants import Grant
from mcpl_host.mcpl.server_methods import SERVER_METHODS, MCPLServerMethods

__all__ = ["InboundRouting"]

_MCP_LOG_LEVELS = {
    "debug": "debug",
    "info": "info",
    "notice": "info",
    "warning": "warning",
    "error": "error",
    "critical": "critical",
    "alert": "critical",
    "emergency": "critical",
}
_INTERNAL_ERROR = {"code": int(ErrorCode.INTERNAL_ERROR), "message": "Internal error"}


class InboundRouting(MCPLServerMethods):
    """Mixed into ``ServerConnection``: acts on the session's events for one line."""

    name: str
    handlers: HostHandlers
    limits: Limits
    redactor: Redactor
    grant: Grant | None
    derivation: Derivation | None
    feature_sets: FeatureSetDeclarations
    _session: Session
    _link: Link | None
    _tg: Any
    _log: Any
    _inbound: dict[tuple[int, Any], anyio.CancelScope]
    _inbound_running: int  # handler tasks started: running plus waiting for a turn
    _inbound_limiter: anyio.CapacityLimiter
    _progress: dict[str, Any]
    _dropped: LogBudget
    _unmatched: LogBudget
    _invalid: LogBudget
    _not_answered: LogBudget
    _on_manifest_changed: Any  # from ManifestChanges

    def _on_event(self, event: Any, link: Link) -> None:
        if isinstance(event, ResponseSettled):
            event.pending.slot.settle(event.response)  # runs its on_answer first (wire order)
        elif isinstance(event, RequestReceived):
            self._dispatch(event.request, link)
        elif isinstance(event, NotificationReceived):
            self._on_notification(event.notification.method, event.notification.params)
        elif isinstance(event, InvalidRequestReceived):
            if event.answer is not None:
                link.send(event.answer)  # A1: once, on the same transport
            self._log_budgeted(
                self._invalid,
                "invalid request from the server",
                method=ServerValue(event.invalid.method, self.redactor),
                problem=event.invalid.message,
            )
        elif isinstance(event, OrphanResponse):
            self._log.debug(
                "late answer to a forgotten request", id=ServerValue(event.response.id, self.redactor)
            )
            self.handlers.on_orphan_response(self.name, event.response)
        elif isinstance(event, UnmatchedError):
            self._log_budgeted(
                self._unmatched,
                "error response naming no request of ours",
                error=ServerValue(event.response.error, self.redactor),
            )
        elif isinstance(event, DroppedLine):
            self._log_dropped(event.kind, event.line)

    def _dispatch(self, request: Request, link: Link) -> None:
        if link.closed or link is not self._link:  # T2: read after its transport closed
            self._not_answering(request)
            return
        if request.method == "ping":  # answered in every state (checklist A 18)
            link.send(self._session.answer(request.id, result={}))
            return
        denial = admit(request.method, request.params, self.grant)
        if denial is None and request.method in FEATURE_SET_METHODS and self.derivation is not None:
            verdict = admit_feature_set(
                request.method, request.params, self.feature_sets, self.derivation, self.grant
            )
            denial = verdict.error
            if verdict.diagnostic is not None:  # MCPL §6.4 rule 2: rejected at use
                self._log.warning(
                    "declaration mismatch: a feature set used a capability it does not declare",
                    feature_set=ServerValue(verdict.diagnostic.feature_set, self.redactor),
                    capability=verdict.diagnostic.capability,
                )
        if denial is None:  # §3.6 step 5: params; state/* feature sets (mcpl.server_methods)
            denial = self._precheck_server_request(request.method, request.params)
        limits = self.limits
        if (
            denial is None
            and self._inbound_running >= limits.max_concurrent_inbound + limits.max_queued_inbound
        ):
            denial = HandlerError(ErrorCode.INTERNAL_ERROR, "Internal error: host busy")
        if denial is not None:
            error = denial.to_error()
            link.send(self._session.answer(request.id, error=error))
            self.handlers.on_refused(self.name, request.method, request.params, error)
            return
        self._inbound_running += 1
        self._tg.start_soon(self._serve, request, link)

    async def _serve(self, request: Request, link: Link) -> None:
        context = RequestContext(self.name, request.id, request.method, link.epoch)
        key = (link.epoch, request.id)
        scope = anyio.CancelScope()
        if request.id is not None:
            self._inbound[key] = scope
        answer: bytes | None = None
        try:
            with scope:
                try:
                    async with self._inbound_limiter:  # at most max_concurrent_inbound run
                        result = await self._call_handler(context, request, link)
                    answer = self._session.answer(request.id, result=result)
                except HandlerError as exc:
                    answer = self._session.answer(request.id, error=exc.to_error())
                except Exception:  # R3: -32603 with no exception text on the wire
                    self._log.exception("handler failed", method=ServerValue(request.method))
                    answer = self._session.answer(request.id, error=_INTERNAL_ERROR)
        finally:
            self._inbound_running -= 1
            if self._inbound.get(key) is scope:
                del self._inbound[key]
        if link.closed:  # T1: its transport has gone; never answered on another one
            self._not_answering(request)
            return
        if answer is None:
            return  # cancelled by the server (notifications/cancelled)
        link.send(answer)

    async def _call_handler(self, context: RequestContext, request: Request, link: Link) -> Any:
        if request.method in SERVER_METHODS:
            return await self._serve_server_method(context, request.params, link)
        return await self.handlers.request(context, request.params)

    def _not_answering(self, request: Request) -> None:
        self._log_budgeted(
            self._not_answered,
            "not answering request",
            id=ServerValue(request.id, self.redactor),
            method=ServerValue(request.method, self.redactor),
        )

    def _on_notification(self, method: str, params: Any) -> None:
        if method == "notifications/progress" and isinstance(params, dict):
            token = params.get("progressToken")
            callback = self._progress.get(token) if isinstance(token, str) else None
            if callback is not None:
                callback(params)
        elif method == "notifications/cancelled" and isinstance(params, dict):
            request_id, link = params.get("requestId"), self._link
            if link is not None and (isinstance(request_id, str) or is_number(request_id)):
                scope = self._inbound.get((link.epoch, request_id))
                if scope is not None:
                    scope.cancel()  # MCP: stop work and do not reply
        elif method == "notifications/message" and isinstance(params, dict):
            level = params.get("level")
            log_method = _MCP_LOG_LEVELS.get(level if isinstance(level, str) else "", "info")
            getattr(self._log, log_method)(
                "server log message",
                logger=ServerValue(params.get("logger"), self.redactor),
                data=ServerValue(params.get("data"), self.redactor),
            )
        elif method == "mcpl/manifestChanged":
            self._on_manifest_changed(params)  # ungated and never answered (MCPL §17.3)
        elif method == "featureSets/changed":  # removed in MCPL 0.5 (§6.7); a request is -32601
            self._log.info(
                "ignored featureSets/changed: removed in MCPL 0.5, superseded by mcpl/manifestChanged"
            )
        else:
            self._on_server_notification(method, params)  # channels/changed, channels/incoming
        self.handlers.on_notification(self.name, method, params)

    def _log_dropped(self, kind: str, line: bytes) -> None:
        self._log_budgeted(
            self._dropped, "dropped a line from the server", kind=kind, line=ServerValue(line, self.redactor)
        )

    def _log_budgeted(self, budget: LogBudget, message: str, **fields: Any) -> None:
        verdict = budget.take()
        if verdict == "log":
            self._log.warning(message, **fields)
        elif verdict == "last":
            self._log.warning(f"{message}: more of these go unlogged on this connection")

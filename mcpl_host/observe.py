"""Watching a server from outside: ``ConnectionObserver`` and ``Reporter``.

Rules of this module:

- An application's ``HostHandlers`` answer what a server asks and are used exactly as given;
  nothing wraps or subclasses them. Whoever else wants to see what happens (the ``Host``,
  ``mcpl-host probe``) passes a ``ConnectionObserver``: it gets one event
  (``mcpl_host.events``: ``PushEvent``, ``ServerRequest``, ``ServerNotification``, ``Refusal``,
  ``HeldMessage``, ``PolicyReceipt``, ``ManifestChange``, ``ChannelsChanged``, ``Stalled``) per
  thing that happened, after the handlers have had their say: the same values the ``Host``'s
  subscriptions carry.
- ``Reporter`` is the one place a connection reports through: each method calls the
  application's hook (``HostHandlers.on_*``) and then the observer, in that order. Both are
  called from the read loop or a request's task and must not block.
- Event values are JSON values as sent by the server (the observer shows them through the
  server's redactor).
- An event is built only for an observer or a recorder to see (``mcpl_host.events`` is
  imported then): a connection watched by neither never loads it.
- With a ``recording.Recorder``, each of the host's decisions (``DECISION_KINDS``: a refusal,
  a held message, a policy receipt, a manifest change, the channels registered, a stall, an
  input-stream fact) is also recorded as a ``"decision"`` entry: ``event`` its ``kind``,
  ``data`` its ``to_json()``, on the server's newest transport.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from mcpl_host.jsonrpc.envelope import RequestId, Response
from mcpl_host.jsonrpc.errors import ConnectionLost
from mcpl_host.mcpl.policy import PolicyOutcome

if TYPE_CHECKING:
    from mcpl_host.events import HostEvent
    from mcpl_host.handlers import HostHandlers, RequestContext
    from mcpl_host.mcpl.explain import Stall
    from mcpl_host.mcpl.grants import Grant
    from mcpl_host.mcpl.input_streams import InputStreamUpdate
    from mcpl_host.mcpl.manifest_diff import ChangeReceipt
    from mcpl_host.recording import Recorder

__all__ = ["DECISION_KINDS", "ConnectionObserver", "Reporter"]

#: The events a recording keeps as the host's decisions (``kind`` of ``mcpl_host.events``);
#: the others report messages, which the recording has as lines.
DECISION_KINDS = frozenset({
    "refused", "held", "policy_receipt", "manifest_change", "channels_changed", "stalled", "input_stream",
    "session_renewed",
})  # fmt: skip


class ConnectionObserver(Protocol):
    """Sees every event of a server's connections (``Host``, the probe; module rules)."""

    def observe(self, event: HostEvent) -> None:
        """Called from the read loop or a request's task; must not block."""
        ...


class Reporter:
    """Reports what happened on connections to server ``name``: the application's hook first,
    then the observer, then the recorder (module rules)."""

    __slots__ = ("handlers", "name", "observer", "recorder")

    def __init__(
        self,
        name: str,
        handlers: HostHandlers,
        observer: ConnectionObserver | None,
        recorder: Recorder | None = None,
    ) -> None:
        self.name = name
        self.handlers = handlers
        self.observer = observer
        self.recorder = recorder

    @property
    def watched(self) -> bool:
        """Whether an observer or a recorder sees this server's events (else none is built)."""
        return self.observer is not None or self.recorder is not None

    def _observe(self, event: HostEvent) -> None:
        if self.observer is not None:
            self.observer.observe(event)
        recorder = self.recorder
        if recorder is not None and event.kind in DECISION_KINDS:
            connection = recorder.current_connection(self.name)
            recorder.entry(self.name, connection, "decision", event=event.kind, data=event.to_json())

    def handled_push(
        self,
        context: RequestContext,
        params: dict[str, Any],
        *,
        answer: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        model_content: list[dict[str, Any]] | None = None,
    ) -> None:
        """A ``push/event`` was answered by the handlers with ``answer`` (the result) or
        ``error`` (the error object); ``model_content``: the model-visible form of its
        content (MCPL §19.5); only the observer sees it (built only for one)."""
        if self.observer is not None:
            from mcpl_host.events import PushEvent

            self.observer.observe(
                PushEvent(
                    server=self.name,
                    id=context.id,
                    feature_set=params["featureSet"],  # admitted: a string (MCPL §9.2)
                    event_id=params["eventId"],
                    params=params,
                    answer=answer,
                    error=error,
                    model_content=model_content,
                )
            )

    def handled_request(
        self,
        context: RequestContext,
        params: object,
        *,
        answer: object = None,
        error: dict[str, Any] | None = None,
        input_request: bool = False,
    ) -> None:
        """A server request was answered by the handlers or the library with ``answer`` or
        ``error``; only the observer sees it (built only for one)."""
        if self.observer is not None:
            from mcpl_host.events import ServerRequest

            self.observer.observe(
                ServerRequest(
                    server=self.name,
                    id=context.id,
                    method=context.method,
                    params=params,
                    input_request=input_request,
                    answered=error is None,
                    answer=answer,
                    error=error,
                )
            )

    def notification(
        self, method: str, params: object, error: dict[str, Any] | None = None, reason: str | None = None
    ) -> None:
        self.handlers.on_notification(self.name, method, params)
        if self.watched:
            from mcpl_host.events import ServerNotification

            self._observe(
                ServerNotification(server=self.name, method=method, params=params, error=error, reason=reason)
            )

    def refused(
        self,
        method: str,
        params: object,
        error: dict[str, Any],
        reason: str | None = None,
        *,
        request_id: RequestId = None,
        notification: bool = False,
    ) -> None:
        self.handlers.on_refused(self.name, method, params, error)
        if self.watched:
            from mcpl_host.events import Refusal

            self._observe(
                Refusal(
                    server=self.name,
                    id=request_id,
                    method=method,
                    params=params,
                    error=error,
                    reason=reason,
                    notification=notification,
                )
            )

    def held(self, method: str, params: object, request_id: RequestId, capability: str | None) -> None:
        if self.watched:
            from mcpl_host.events import HeldMessage

            self._observe(
                HeldMessage(
                    server=self.name, method=method, params=params, id=request_id, capability=capability
                )
            )

    def policy_receipt(self, outcome: PolicyOutcome) -> None:
        self.handlers.on_policy_receipt(self.name, outcome)
        if self.watched:
            from mcpl_host.events import PolicyReceipt

            self._observe(
                PolicyReceipt(
                    server=self.name,
                    accepted=outcome.accepted,
                    mode=outcome.mode,
                    fallback=outcome.fallback,
                    reason=outcome.reason,
                    unavailable_features=outcome.unavailable_features,
                    defects=outcome.defects,
                )
            )

    def grant_in_force(self, grant: Grant | None, settled_by: str) -> None:
        """The capability grant now in force on the connection (MCPL §5.3), and what settled
        it (``receipt``, ``notification``: the 0.4 profile's assumption). Only the recording
        keeps it, as a ``grant`` decision (``{"paths", "settledBy"}``): the application sees
        the grant on the connection itself."""
        recorder = self.recorder
        if recorder is not None:
            paths = sorted(grant.paths) if grant is not None else []
            data = {"paths": paths, "settledBy": settled_by}
            recorder.entry(
                self.name, recorder.current_connection(self.name), "decision", event="grant", data=data
            )

    def manifest_change(self, receipt: ChangeReceipt) -> None:
        self.handlers.on_manifest_change(self.name, receipt)
        if self.watched:
            from mcpl_host.events import ManifestChange

            self._observe(ManifestChange(server=self.name, domains=receipt.domains, impacts=receipt.impacts))

    def channels_changed(self, channels: list[dict[str, Any]]) -> None:
        self.handlers.on_channels_changed(self.name, channels)
        if self.watched:
            from mcpl_host.events import ChannelsChanged

            self._observe(ChannelsChanged(server=self.name, channels=channels))

    def input_stream(self, update: InputStreamUpdate) -> None:
        """A provisional input-stream fact (RFC-009, experimental; ``InputStream``)."""
        self.handlers.on_input_stream(self.name, update)
        if self.watched:
            from mcpl_host.events import InputStream

            self._observe(InputStream(server=self.name, update=update))

    def stalled(self, stall: Stall, explanation: str, refused: str | None, profile: str | None) -> None:
        """The server stopped answering (``stall_watch``; ``Stalled``); only the observer
        sees it. Seconds are rounded to milliseconds."""
        if self.watched:
            from mcpl_host.events import Stalled

            self._observe(
                Stalled(
                    server=self.name,
                    explanation=explanation,
                    silent_seconds=round(stall.silent_seconds, 3),
                    waiting=[{"method": w.method, "seconds": round(w.seconds, 3)} for w in stall.waiting],
                    refused=refused,
                    profile=profile,
                )
            )

    def session_renewed(self, renewals: int) -> None:
        """The transport started a new HTTP session after the server ended one
        (``SessionRenewed``)."""
        self.handlers.on_session_renewed(self.name, renewals)
        if self.watched:
            from mcpl_host.events import SessionRenewed

            self._observe(SessionRenewed(server=self.name, renewals=renewals))

    def connection_lost(self, error: ConnectionLost) -> None:
        self.handlers.on_connection_lost(self.name, error)

    def orphan_response(self, response: Response) -> None:
        self.handlers.on_orphan_response(self.name, response)

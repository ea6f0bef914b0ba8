"""Watching a server from outside: ``Observation``, ``ConnectionObserver`` and ``Reporter``.

Rules of this module:

- An application's ``HostHandlers`` answer what a server asks and are used exactly as given;
  nothing wraps or subclasses them. Whoever else wants to see what happens (the ``Host``,
  ``mcpl-host probe``) passes a ``ConnectionObserver``: it gets one ``Observation`` per thing
  that happened, after the handlers have had their say.
- ``Reporter`` is the one place a connection reports through: each method calls the
  application's hook (``HostHandlers.on_*``) and then the observer, in that order. Both are
  called from the read loop or a request's task and must not block.
- Observation data are JSON values as sent by the server (the observer shows them through
  the server's redactor).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from mcpl_host.jsonrpc.envelope import Response
from mcpl_host.jsonrpc.errors import ConnectionLost
from mcpl_host.mcpl.policy import PolicyOutcome

if TYPE_CHECKING:
    from mcpl_host.handlers import HostHandlers
    from mcpl_host.mcpl.manifest_diff import ChangeReceipt

__all__ = ["ConnectionObserver", "Observation", "ObservationKind", "Reporter"]

#: What an ``Observation`` reports.
ObservationKind = Literal[
    "push_event",
    "server_request",
    "notification",
    "refused",
    "held",
    "policy_receipt",
    "manifest_change",
    "channels_changed",
    "stalled",
]


@dataclass(frozen=True, slots=True)
class Observation:
    """One thing a server did and how it was answered. ``kind``, ``data`` (JSON values):

    - ``push_event``: ``id``, ``featureSet``, ``eventId``, ``params``, then ``answer`` (the
      result sent) or ``error`` (the error object sent);
    - ``server_request``: ``id``, ``method``, ``params``, then ``answer`` or ``error``;
    - ``notification``: ``method``, ``params``; for a ``channels/*`` notification admission
      refused, ``error`` and ``reason`` too (no answer is possible);
    - ``refused``: ``id``, ``method``, ``params``, ``error`` (admission or params; sent at
      once), ``reason`` (the capability gate's: ``not_in_force``, ``denied_by_policy``,
      ``not_advertised``, ``mcpl_off``; else None); ``notification: true`` for a held
      notification refused once the policy was settled (nothing was sent);
    - ``held``: ``method``, ``params``, ``id`` (None for a notification), ``capability``: a
      request held until the policy is settled (0.4 profile); its answer is reported later;
    - ``policy_receipt``: ``accepted``, ``mode``, ``fallback``, ``reason``,
      ``unavailableFeatures``, ``defects``;
    - ``manifest_change``: the change receipt (``domains``, ``impacts``);
    - ``channels_changed``: ``channels`` (every descriptor registered now);
    - ``stalled``: ``explanation``, ``silentSeconds``, ``waiting``, ``refused``, ``profile``
      (``events.StalledData``; ``stall_watch``).
    """

    kind: ObservationKind
    data: dict[str, Any] = field(default_factory=dict[str, Any])


class ConnectionObserver(Protocol):
    """Sees every ``Observation`` of a server's connections (``Host``, the probe)."""

    def observe(self, server: str, observation: Observation) -> None:
        """Called from the read loop or a request's task; must not block."""
        ...


class Reporter:
    """Reports what happened on connections to server ``name``: the application's hook first,
    then the observer (module rules)."""

    __slots__ = ("handlers", "name", "observer")

    def __init__(self, name: str, handlers: HostHandlers, observer: ConnectionObserver | None) -> None:
        self.name = name
        self.handlers = handlers
        self.observer = observer

    def _observe(self, kind: ObservationKind, **data: Any) -> None:
        if self.observer is not None:
            self.observer.observe(self.name, Observation(kind, data))

    @property
    def observing(self) -> bool:
        """Whether an observer sees ``handled`` (callers build its data only then)."""
        return self.observer is not None

    def handled(self, kind: Literal["push_event", "server_request"], data: dict[str, Any]) -> None:
        """A server request was answered by the handlers (``data`` has ``answer`` or
        ``error``); only the observer sees it (see ``observing``)."""
        self._observe(kind, **data)

    def notification(
        self, method: str, params: Any, error: dict[str, Any] | None = None, reason: str | None = None
    ) -> None:
        self.handlers.on_notification(self.name, method, params)
        if error is None:
            self._observe("notification", method=method, params=params)
        else:
            self._observe("notification", method=method, params=params, error=error, reason=reason)

    def refused(
        self,
        method: str,
        params: Any,
        error: dict[str, Any],
        reason: str | None = None,
        *,
        request_id: Any = None,
        notification: bool = False,
    ) -> None:
        self.handlers.on_refused(self.name, method, params, error)
        data: dict[str, Any] = {"id": request_id, "method": method, "params": params, "error": error}
        data["reason"] = reason
        if notification:
            data["notification"] = True
        self._observe("refused", **data)

    def held(self, method: str, params: Any, request_id: Any, capability: str | None) -> None:
        self._observe("held", method=method, params=params, id=request_id, capability=capability)

    def policy_receipt(self, outcome: PolicyOutcome) -> None:
        self.handlers.on_policy_receipt(self.name, outcome)
        self._observe(
            "policy_receipt",
            accepted=outcome.accepted,
            mode=outcome.mode,
            fallback=outcome.fallback,
            reason=outcome.reason,
            unavailableFeatures=outcome.unavailable_features,
            defects=outcome.defects,
        )

    def manifest_change(self, receipt: ChangeReceipt) -> None:
        self.handlers.on_manifest_change(self.name, receipt)
        self._observe("manifest_change", **receipt.to_json())

    def channels_changed(self, channels: list[dict[str, Any]]) -> None:
        self.handlers.on_channels_changed(self.name, channels)
        self._observe("channels_changed", channels=channels)

    def stalled(self, data: dict[str, Any]) -> None:
        """The server stopped answering (``stall_watch``); only the observer sees it."""
        self._observe("stalled", **data)

    def connection_lost(self, error: ConnectionLost) -> None:
        self.handlers.on_connection_lost(self.name, error)

    def orphan_response(self, response: Response) -> None:
        self.handlers.on_orphan_response(self.name, response)

"""What happens to hosted servers, as ``HostEvent``s, and the subscriptions that carry them.

Rules of this module:

- **One frozen value per kind** (``Connecting``, ``Ready``, ``Degraded``, ``Disconnected``,
  ``Reconnecting``, ``GaveUp``, ``PushEvent``, ``ServerNotification``, ``ServerRequest``,
  ``Refusal``, ``HeldMessage``, ``ManifestChange``, ``PolicyReceipt``, ``ChannelsChanged``,
  ``Stalled``, ``InputStream``); ``HostEvent`` is their union. Each has ``server`` and ``time`` and typed
  fields of its own; ``kind`` is a class constant (one of ``EVENT_KINDS``), so
  ``event.kind == "ready"``, ``isinstance(event, Ready)`` and ``match`` all select it.
  ``to_json()`` gives its data as JSON values (camelCase keys, in a fixed order), the
  ``data`` of ``mcpl-host run``'s lines (``event_json``). The same values reach a
  connection's observer (``observe.ConnectionObserver``) and the ``Host``'s subscriptions.

- Three classes of event, each with its own rule, so that nothing that matters is lost and
  no subscription holds back another. Emitting never waits for a consumer: a subscription
  that is not read (the default one nobody asked for, or one the application stopped
  reading) stays bounded, loses only what its own bounds say, counts it (``dropped``), and
  never delays what the other subscriptions receive.

  - **lifecycle** (``connecting``, ``ready``, ``degraded``, ``disconnected``,
    ``reconnecting``, ``gave_up``): never dropped to make room for anything else. Only a
    subscription holding ``max_queued_lifecycle`` unread lifecycle events (a consumer that
    stopped reading long ago) loses its oldest lifecycle event, counted.
  - **deliveries**: a ``push_event`` or ``server_request`` that the application itself must
    answer (the ``Host`` without application handlers). It is answered only once a consumer
    has taken it from a subscription (``Delivery.taken``); when nobody takes it in time it is
    withdrawn from every queue (never seen afterwards) and refused with a reason. Never
    "accepted" and then dropped. It is queued to each subscription that has room for it
    (``max_queued`` deliveries not yet taken); one without room misses it, counted. Once
    another consumer took it, a delivery still queued is an observation there (it may be
    dropped like one); a withdrawn one is removed. Only when no subscription has room does
    the emitter wait (``Host``: up to the delivery timeout, or refuse at once).
  - **Waiting for room, one turn per take** (``Subscription.wait_turn``): each event a
    consumer takes gives one waiting delivery its turn, the oldest first, so a take wakes
    one emitter, not every one waiting (with thousands waiting, waking all cost each take
    a pass over all of them). A delivery given its turn that finds the room gone (a new
    one took it first) queues again at the head; one that leaves without using its turn
    (cancelled, timed out) hands it on (``hand_on``); an ended or closed subscription
    gives every waiter its turn at once. Checking for room costs the same whatever is
    queued: a subscription passes over its queue only when a delivery in it was taken
    elsewhere or withdrawn since it last did (``Delivery.take``, ``withdrawn``).
  - **observations** (everything else: ``notification``, ``refused``, ``held``, ``policy_receipt``,
    ``manifest_change``, ``channels_changed``, ``stalled``, and reports of requests the
    application's own handlers answered): past ``max_queued`` in a subscription the oldest
    observation is dropped and counted (``dropped``); lifecycle events and deliveries are
    never dropped to make room. Emitting one never blocks (they come from read loops).

- A subscription receives, in order, the events emitted after it was made whose server and
  kind it asked for (``servers``/``kinds`` None: all).
- **Connecting comes first** (``ConnectingOrder``, pure): from a server's ``connecting``
  until the lifecycle event that ends it (``ready``, ``degraded``, ``disconnected``,
  ``gave_up``), that server's observations wait (at most ``max_held``; past it the oldest is
  dropped, counted) and are emitted right after that event, in order; a ``stalled``
  observation (news about the connecting itself) is never held. So ``ready`` reaches
  every subscriber before any event of the traffic that follows the handshake, however the
  read loop and the supervisor are scheduled.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal, Protocol, TypeAlias, get_args

import anyio

from mcpl_host.json_size import json_size
from mcpl_host.jsonrpc.envelope import RequestId
from mcpl_host.jsonrpc.values import JSONObject, JSONValue, is_array, is_mapping
from mcpl_host.mcpl.input_streams import InputStreamUpdate
from mcpl_host.mcpl.manifest_diff import ChangeReceipt, Impact
from mcpl_host.mcpl.publish_target import ReplyTarget, reply_target_of_message, reply_target_of_push

__all__ = [
    "DELIVERY_KINDS",
    "EVENT_KINDS",
    "LIFECYCLE_KINDS",
    "ENDS_CONNECTING",
    "ChannelsChanged",
    "InputStream",
    "Connecting",
    "ConnectingOrder",
    "Degraded",
    "Delivery",
    "DeliveryEvent",
    "Disconnected",
    "EventBus",
    "EventKind",
    "GaveUp",
    "HeldMessage",
    "HostEvent",
    "LifecycleEvent",
    "ManifestChange",
    "ServerNotification",
    "PolicyReceipt",
    "PushEvent",
    "Ready",
    "Reconnecting",
    "Refusal",
    "ServerRequest",
    "SessionRenewed",
    "Stalled",
    "Subscription",
    "event_json",
    "json_bytes",
]

EventKind = Literal[
    "connecting",
    "ready",
    "degraded",
    "disconnected",
    "reconnecting",
    "gave_up",
    "push_event",
    "notification",
    "server_request",
    "refused",
    "held",
    "manifest_change",
    "policy_receipt",
    "channels_changed",
    "stalled",
    "input_stream",
    "session_renewed",
]
#: Every ``HostEvent.kind``: the supervisor's state changes, then what servers send.
EVENT_KINDS: tuple[str, ...] = get_args(EventKind)
#: The kinds a supervisor emits; never dropped.
LIFECYCLE_KINDS: frozenset[str] = frozenset(
    {"connecting", "ready", "degraded", "disconnected", "reconnecting", "gave_up"}
)
#: The kinds that can be deliveries (the application answers them).
DELIVERY_KINDS: frozenset[str] = frozenset({"push_event", "server_request"})


class Responder(Protocol):
    """The answer slot of a ``server_request`` the application answers
    (``host.ServerRequestResponder``): ``respond(result)`` or ``reject(code, message, data)``
    once; each returns True if it answered, False if the request was already answered, timed
    out, or its transport ended."""

    @property
    def is_answered(self) -> bool: ...

    def respond(self, result: object) -> bool: ...

    def reject(self, code: int, message: str, data: object = None) -> bool: ...


class Delivery:
    """The hand-over of one event the application must answer: ``taken`` is set when a
    consumer receives it (``take()``); ``withdrawn`` when it was given up on (it is then
    skipped); ``holders``: how many subscriptions' queues hold it now. Taking or withdrawing
    it tells the other subscriptions holding it, so that they pass over their queue only
    then (module rules)."""

    __slots__ = ("_queues", "_withdrawn", "taken")

    def __init__(self) -> None:
        self.taken = anyio.Event()
        self._withdrawn = False
        self._queues: list[Subscription] = []  # the subscriptions holding it

    @property
    def holders(self) -> int:
        return len(self._queues)

    @property
    def withdrawn(self) -> bool:
        return self._withdrawn

    @withdrawn.setter
    def withdrawn(self, value: bool) -> None:
        if value and not self._withdrawn:
            for queue in self._queues:
                queue.settled_elsewhere()
        self._withdrawn = value

    def take(self, by: Subscription | None = None) -> None:
        """A consumer received it (from ``by``, which no longer holds it)."""
        self.taken.set()
        for queue in self._queues:
            if queue is not by:
                queue.settled_elsewhere()

    def held_by(self, queue: Subscription) -> None:
        self._queues.append(queue)

    def released_by(self, queue: Subscription) -> None:
        self._queues.remove(queue)


# --- the events ------------------------------------------------------------------------------
#
# One frozen value per kind (module rules). Each has ``server`` (the server's name, as in the
# config) and ``time`` (seconds since the epoch, wall clock, when it happened), ``kind`` (a
# class constant, one of ``EVENT_KINDS``) and ``to_json()``: its data as JSON values, the
# ``data`` of ``mcpl-host run``'s lines, with the keys in the order shown. Values that are a
# server's words (params, answers, errors, ids) are left out of ``repr``.


def _now() -> float:
    return time.time()


def _hidden() -> Any:
    return field(repr=False)


@dataclass(frozen=True, kw_only=True)
class Connecting:
    """``connecting``: ``attempt`` (connection attempts since the supervisor started, from 1).
    JSON: ``{"attempt"}``."""

    kind: ClassVar[Literal["connecting"]] = "connecting"
    server: str
    attempt: int
    time: float = field(default_factory=_now)

    def to_json(self) -> JSONObject:
        return {"attempt": self.attempt}


@dataclass(frozen=True, kw_only=True)
class Ready:
    """``ready``: the handshake (and, for an MCPL server, the policy exchange) finished.
    ``attempt``; ``server_name``, ``server_version`` (the server's ``serverInfo``, ``""``
    when absent), ``protocol_version`` (MCP revision agreed); ``mcpl`` (``MCPLState`` value);
    ``effective_capabilities`` (the grant in force, sorted); ``mode`` (the receipt's, when
    accepted). For an MCPL server (a compatibility profile was chosen) also ``profile``
    (``"strict"`` or ``"0.4"``) with ``profile_reason``, ``policy_form`` (``"request"``, or
    ``"notification"``: in force without a receipt, 0.4 profile) and ``grants_nothing`` (a
    grant is in force and holds no path); all four None otherwise. JSON: ``{"attempt",
    "serverName", "serverVersion", "protocolVersion", "mcpl", "effectiveCapabilities",
    "mode"}``, then ``"profile", "profileReason", "policyForm", "grantsNothing"`` when a
    profile was chosen."""

    kind: ClassVar[Literal["ready"]] = "ready"
    server: str
    attempt: int
    server_name: str
    server_version: str
    protocol_version: str
    mcpl: str
    effective_capabilities: list[str]
    mode: str | None = None
    profile: str | None = None
    profile_reason: str | None = None
    policy_form: str | None = None
    grants_nothing: bool | None = None
    time: float = field(default_factory=_now)

    def to_json(self) -> JSONObject:
        return _connected_json(self)


@dataclass(frozen=True, kw_only=True)
class Degraded:
    """``degraded``: connected as plain MCP (``mcpl`` ``"mcp-only"``): the fields of
    ``Ready`` and ``reason`` (one sentence: why MCPL is off). JSON: ``Ready``'s, then
    ``"reason"``."""

    kind: ClassVar[Literal["degraded"]] = "degraded"
    server: str
    attempt: int
    server_name: str
    server_version: str
    protocol_version: str
    mcpl: str
    effective_capabilities: list[str]
    mode: str | None = None
    profile: str | None = None
    profile_reason: str | None = None
    policy_form: str | None = None
    grants_nothing: bool | None = None
    reason: str
    time: float = field(default_factory=_now)

    def to_json(self) -> JSONObject:
        data = _connected_json(self)
        data["reason"] = self.reason
        return data


def _connected_json(event: Ready | Degraded) -> JSONObject:
    data: JSONObject = {
        "attempt": event.attempt,
        "serverName": event.server_name,
        "serverVersion": event.server_version,
        "protocolVersion": event.protocol_version,
        "mcpl": event.mcpl,
        "effectiveCapabilities": event.effective_capabilities,
        "mode": event.mode,
    }
    if event.profile is not None:
        data["profile"] = event.profile
        data["profileReason"] = event.profile_reason
        data["policyForm"] = event.policy_form
        data["grantsNothing"] = event.grants_nothing
    return data


@dataclass(frozen=True, kw_only=True)
class Disconnected:
    """``disconnected``: ``phase`` ``"start"`` (the connection never became ready) or
    ``"running"``; ``uptime_seconds`` (None for a start failure); ``reason`` (one sentence,
    escaped and redacted); ``exit_status`` (negative for a signal), ``close_code``
    (WebSocket), ``stderr_tail`` (the server's last stderr lines, redacted). JSON:
    ``{"attempt", "phase", "uptimeSeconds", "reason", "exitStatus", "closeCode",
    "stderrTail"}``."""

    kind: ClassVar[Literal["disconnected"]] = "disconnected"
    server: str
    attempt: int
    phase: Literal["start", "running"]
    uptime_seconds: float | None
    reason: str
    exit_status: int | None = None
    close_code: int | None = None
    stderr_tail: list[str] = field(default_factory=list[str], repr=False)
    time: float = field(default_factory=_now)

    def to_json(self) -> JSONObject:
        return {
            "attempt": self.attempt,
            "phase": self.phase,
            "uptimeSeconds": self.uptime_seconds,
            "reason": self.reason,
            "exitStatus": self.exit_status,
            "closeCode": self.close_code,
            "stderrTail": self.stderr_tail,
        }


@dataclass(frozen=True, kw_only=True)
class Reconnecting:
    """``reconnecting``: ``attempt`` (the restart's number since the backoff was last reset),
    ``delay_seconds`` (the wait before it). JSON: ``{"attempt", "delaySeconds"}``."""

    kind: ClassVar[Literal["reconnecting"]] = "reconnecting"
    server: str
    attempt: int
    delay_seconds: float
    time: float = field(default_factory=_now)

    def to_json(self) -> JSONObject:
        return {"attempt": self.attempt, "delaySeconds": self.delay_seconds}


@dataclass(frozen=True, kw_only=True)
class GaveUp:
    """``gave_up``: ``reason`` (one sentence), ``failures`` within ``window_seconds``.
    JSON: ``{"reason", "failures", "windowSeconds"}``."""

    kind: ClassVar[Literal["gave_up"]] = "gave_up"
    server: str
    reason: str
    failures: int
    window_seconds: float
    time: float = field(default_factory=_now)

    def to_json(self) -> JSONObject:
        return {"reason": self.reason, "failures": self.failures, "windowSeconds": self.window_seconds}


@dataclass(frozen=True, kw_only=True)
class PushEvent:
    """``push_event``: a ``push/event`` request (MCPL §9.2) that passed admission: ``id``
    (its JSON-RPC id), ``feature_set``, ``event_id``, ``params`` (as sent). Reported after
    the application's handlers answered it: ``answer`` (the result sent) or ``error`` (the
    JSON-RPC error object sent, JSON-RPC 2.0 §5.1); a delivery (``delivery`` set) has
    neither yet. JSON: ``{"id", "featureSet", "eventId", "params"}``, then ``"answer"`` or
    ``"error"`` when set; ``"modelContent"`` when ``model_content`` is set: the model-visible
    form of ``payload.content`` (MCPL §9.2, §19.5: references as host-made stubs), what a
    framework should build the wake from."""

    kind: ClassVar[Literal["push_event"]] = "push_event"
    server: str
    id: RequestId = _hidden()
    feature_set: str
    event_id: str = _hidden()
    params: dict[str, Any] = _hidden()
    answer: dict[str, Any] | None = field(default=None, repr=False)
    error: dict[str, Any] | None = field(default=None, repr=False)
    time: float = field(default_factory=_now)
    delivery: Delivery | None = field(default=None, compare=False, repr=False)
    model_content: list[dict[str, Any]] | None = field(default=None, repr=False)

    def to_json(self) -> JSONObject:
        data: JSONObject = {
            "id": self.id,
            "featureSet": self.feature_set,
            "eventId": self.event_id,
            "params": self.params,
        }
        if self.model_content is not None:
            data["modelContent"] = self.model_content
        return _outcome_json(data, self.answer, self.error)

    @property
    def reply_target(self) -> ReplyTarget | None:
        """Where a reply to this push goes: ``origin.mcplChannelId`` and ``origin.threadId``
        (RFC-011 §3), ready for ``channels.publish(..., thread_id=...)``; None when the push
        names no channel there."""
        return reply_target_of_push(self.params)


def _reply_targets(method: str, params: object) -> tuple[ReplyTarget | None, ...]:
    """One reply target per ``channels/incoming`` message (RFC-011 §3); () for other methods."""
    messages: object = (
        params.get("messages") if method == "channels/incoming" and is_mapping(params) else None
    )
    if not is_array(messages):
        return ()
    return tuple(reply_target_of_message(message) for message in messages)


@dataclass(frozen=True, kw_only=True)
class ServerRequest:
    """``server_request``: a request from the server other than ``push/event`` (``roots/list``,
    ``sampling/createMessage``, ``channels/*``, ``state/*``, ...): ``id``, ``method``,
    ``params``; ``input_request`` True for an input request of an ``InputRequiredResult``
    (MCP 2026-07-28; its ``id`` is its key). Reported with ``answer`` (the result sent) or
    ``error`` (the error object sent), or, waiting for the application's answer, with
    ``responder`` (``host.ServerRequestResponder``) and ``delivery``. JSON: ``{"id",
    "method", "params"}``, ``"inputRequest": true`` for an input request, then ``"answer"``
    or ``"error"`` once answered (``answered``: a ``null`` result is shown as ``null``)."""

    kind: ClassVar[Literal["server_request"]] = "server_request"
    server: str
    id: RequestId = _hidden()
    method: str
    params: Any = _hidden()
    input_request: bool = False
    answered: bool = False
    answer: Any = field(default=None, repr=False)
    error: dict[str, Any] | None = field(default=None, repr=False)
    time: float = field(default_factory=_now)
    responder: Responder | None = field(default=None, compare=False, repr=False)
    delivery: Delivery | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> JSONObject:
        data: JSONObject = {"id": self.id, "method": self.method, "params": self.params}
        if self.input_request:
            data["inputRequest"] = True
        if self.answered and self.error is None:
            data["answer"] = self.answer
            return data
        return _outcome_json(data, self.answer, self.error)

    @property
    def reply_targets(self) -> tuple[ReplyTarget | None, ...]:
        """For ``channels/incoming``: each message's reply target, ``channelId`` and
        ``threadId`` (RFC-011 §3), in message order; () for other methods."""
        return _reply_targets(self.method, self.params)


def _outcome_json(data: JSONObject, answer: JSONValue, error: dict[str, Any] | None) -> JSONObject:
    if answer is not None:
        data["answer"] = answer
    if error is not None:
        data["error"] = error
    return data


@dataclass(frozen=True, kw_only=True)
class ServerNotification:
    """``notification``: ``method``, ``params`` (as sent). A ``channels/*`` notification
    admission refused (MCPL §8) also has ``error`` (the error object no answer can carry)
    and ``reason`` (the capability gate's, or None). JSON: ``{"method", "params"}``, then
    ``"error", "reason"`` when refused."""

    kind: ClassVar[Literal["notification"]] = "notification"
    server: str
    method: str
    params: Any = _hidden()
    error: dict[str, Any] | None = field(default=None, repr=False)
    reason: str | None = None
    time: float = field(default_factory=_now)

    def to_json(self) -> JSONObject:
        data: JSONObject = {"method": self.method, "params": self.params}
        if self.error is not None:
            data["error"] = self.error
            data["reason"] = self.reason
        return data

    @property
    def reply_targets(self) -> tuple[ReplyTarget | None, ...]:
        """For a ``channels/incoming`` notification: each message's reply target (RFC-011
        §3); () for other methods."""
        return _reply_targets(self.method, self.params)


@dataclass(frozen=True, kw_only=True)
class Refusal:
    """``refused``: a request admission or its params refused, answered at once: ``id``,
    ``method``, ``params``, ``error`` (the error object sent), ``reason`` (the capability
    gate's: ``not_in_force``, ``denied_by_policy``, ``not_advertised``, ``mcpl_off``; else
    None); ``notification`` True for a held notification refused once the policy was
    settled (nothing was sent). JSON: ``{"id", "method", "params", "error", "reason"}``,
    then ``"notification": true`` for a notification."""

    kind: ClassVar[Literal["refused"]] = "refused"
    server: str
    id: RequestId = _hidden()
    method: str
    params: Any = _hidden()
    error: dict[str, Any] = _hidden()
    reason: str | None = None
    notification: bool = False
    time: float = field(default_factory=_now)

    def to_json(self) -> JSONObject:
        data: JSONObject = {
            "id": self.id,
            "method": self.method,
            "params": self.params,
            "error": self.error,
            "reason": self.reason,
        }
        if self.notification:
            data["notification"] = True
        return data


@dataclass(frozen=True, kw_only=True)
class HeldMessage:
    """``held``: a request or notification held until the policy is settled (0.4 profile,
    docs/protocol.md "Compatibility profiles"): ``method``, ``params``, ``id`` (None for a
    notification), ``capability`` (the one it waits for); its answer is reported later.
    JSON: ``{"method", "params", "id", "capability"}``."""

    kind: ClassVar[Literal["held"]] = "held"
    server: str
    method: str
    params: Any = _hidden()
    id: RequestId = _hidden()
    capability: str | None = None
    time: float = field(default_factory=_now)

    def to_json(self) -> JSONObject:
        return {"method": self.method, "params": self.params, "id": self.id, "capability": self.capability}


@dataclass(frozen=True, kw_only=True)
class PolicyReceipt:
    """``policy_receipt``: the server's answer to the host's policy (MCPL §5.3,
    ``mcpl.policy.PolicyOutcome``): ``accepted``, ``mode``, ``fallback``, ``reason``,
    ``unavailable_features`` (as sent), ``defects`` (sentences). JSON: ``{"accepted",
    "mode", "fallback", "reason", "unavailableFeatures", "defects"}``."""

    kind: ClassVar[Literal["policy_receipt"]] = "policy_receipt"
    server: str
    accepted: bool
    mode: str | None = None
    fallback: str | None = None
    reason: str | None = None
    unavailable_features: list[Any] = field(default_factory=list[Any], repr=False)
    defects: list[str] = field(default_factory=list[str])
    time: float = field(default_factory=_now)

    def to_json(self) -> JSONObject:
        return {
            "accepted": self.accepted,
            "mode": self.mode,
            "fallback": self.fallback,
            "reason": self.reason,
            "unavailableFeatures": self.unavailable_features,
            "defects": self.defects,
        }


@dataclass(frozen=True, kw_only=True)
class ManifestChange:
    """``manifest_change``: the change receipt of one ``mcpl/manifestChanged`` (MCPL §17.6,
    ``mcpl.manifest_diff.ChangeReceipt``): ``domains``, ``impacts``. JSON: its
    ``to_json()``, ``{"domains", "impacts"}``."""

    kind: ClassVar[Literal["manifest_change"]] = "manifest_change"
    server: str
    domains: tuple[str, ...]
    impacts: tuple[Impact, ...]
    time: float = field(default_factory=_now)

    def to_json(self) -> JSONObject:
        return ChangeReceipt(self.domains, self.impacts).to_json()


@dataclass(frozen=True, kw_only=True)
class ChannelsChanged:
    """``channels_changed``: ``channels``, every channel descriptor registered now (MCPL
    §8, as sent). JSON: ``{"channels"}``."""

    kind: ClassVar[Literal["channels_changed"]] = "channels_changed"
    server: str
    channels: list[dict[str, Any]] = _hidden()
    time: float = field(default_factory=_now)

    def to_json(self) -> JSONObject:
        return {"channels": self.channels}


@dataclass(frozen=True, kw_only=True)
class InputStream:
    """``input_stream`` (RFC-009, experimental): a provisional input-stream fact, never history
    and never a message (the completed final arrives as an ordinary channel message).
    ``status``: ``updated`` (``text``: the whole current snapshot, replacing the last; None
    in ``final-only`` mode), ``completed``, ``aborted`` or ``expired``; ``stream_id``,
    ``revision``, ``channel_id``, ``sender_id``, ``message_id``. JSON: the metadata only, never
    ``text`` (RFC-009 §10). ``update`` is the ``InputStreamUpdate`` as the service made it."""

    kind: ClassVar[Literal["input_stream"]] = "input_stream"
    server: str
    update: InputStreamUpdate = _hidden()
    time: float = field(default_factory=_now)

    def to_json(self) -> JSONObject:
        u = self.update
        return {
            "streamId": u.stream_id,
            "status": u.status,
            "revision": u.revision,
            "channelId": u.channel_id,
            "senderId": u.sender_id,
            "messageId": u.message_id,
        }


@dataclass(frozen=True, kw_only=True)
class Stalled:
    """``stalled``: the server sent nothing for ``silent_seconds`` while host requests waited
    (``waiting``: ``{"method", "seconds"}`` each, oldest first); ``explanation``: one
    sentence (``mcpl.explain.silence_sentence``, naming ``compat="0.4"`` after a strict
    refusal); ``refused``: the refusal before the silence (``"channels/register (-32002:
    ...)"``) or None; ``profile`` (``"strict"``, ``"0.4"``, or None for plain MCP). JSON:
    ``{"explanation", "silentSeconds", "waiting", "refused", "profile"}``."""

    kind: ClassVar[Literal["stalled"]] = "stalled"
    server: str
    explanation: str
    silent_seconds: float
    waiting: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    refused: str | None = None
    profile: str | None = None
    time: float = field(default_factory=_now)

    def to_json(self) -> JSONObject:
        return {
            "explanation": self.explanation,
            "silentSeconds": self.silent_seconds,
            "waiting": self.waiting,
            "refused": self.refused,
            "profile": self.profile,
        }


@dataclass(frozen=True, kw_only=True)
class SessionRenewed:
    """``session_renewed``: the server ended its Streamable HTTP session (HTTP 404 for its
    session id) and the transport started a new one on the same connection (MCP 2025-11-25
    "Transports", session management; docs/protocol.md HS1-HS5); ``renewals``: how many the
    connection has started. The lists it listed are read again, its resource subscriptions
    and log level sent again, the MCPL grant in force proposed again. JSON: ``{"renewals"}``."""

    kind: ClassVar[Literal["session_renewed"]] = "session_renewed"
    server: str
    renewals: int
    time: float = field(default_factory=_now)

    def to_json(self) -> JSONObject:
        return {"renewals": self.renewals}


#: Something that happened to one server: one of the event values above (module rules).
HostEvent: TypeAlias = (
    Connecting
    | Ready
    | Degraded
    | Disconnected
    | Reconnecting
    | GaveUp
    | PushEvent
    | ServerNotification
    | ServerRequest
    | Refusal
    | HeldMessage
    | ManifestChange
    | PolicyReceipt
    | ChannelsChanged
    | Stalled
    | InputStream
    | SessionRenewed
)
#: The events a supervisor emits (``LIFECYCLE_KINDS``).
LifecycleEvent: TypeAlias = Connecting | Ready | Degraded | Disconnected | Reconnecting | GaveUp
#: The events the application may have to answer (``DELIVERY_KINDS``).
DeliveryEvent: TypeAlias = PushEvent | ServerRequest


def is_lifecycle(event: HostEvent) -> bool:
    """Whether ``event`` is a lifecycle event (``LIFECYCLE_KINDS``)."""
    return event.kind in LIFECYCLE_KINDS


def delivery_of(event: HostEvent) -> Delivery | None:
    """The ``Delivery`` of an event the application must take, else None."""
    return event.delivery if isinstance(event, (PushEvent, ServerRequest)) else None


def event_json(event: HostEvent) -> JSONObject:
    """``{"server", "kind", "time", "data"}`` (``data``: ``event.to_json()``): what
    ``mcpl-host run --json`` prints, before redaction and with ``time`` in seconds."""
    return {"server": event.server, "kind": event.kind, "time": event.time, "data": event.to_json()}


_BYTES = "_json_bytes"  # the attribute json_bytes keeps its measure in


def json_bytes(event: HostEvent) -> int:
    """Bytes of ``event.to_json()`` as compact JSON (``json_size``), measured once and kept
    on the event: the measure of the subscriptions' byte bounds (module rules)."""
    size: int = getattr(event, _BYTES, -1)
    if size < 0:
        size = json_size(event.to_json())
        object.__setattr__(event, _BYTES, size)
    return size


class Subscription:
    """One consumer's queue of ``HostEvent``s (module rules). Iterate it (``async for``) or
    ``await receive()``; it ends (``StopAsyncIteration`` / ``anyio.EndOfStream``) once the
    host has closed and it is empty, or at once after ``aclose()``."""

    def __init__(
        self,
        *,
        servers: Collection[str] | None = None,
        kinds: Collection[str] | None = None,
        max_queued: int = 1024,
        max_queued_lifecycle: int = 4096,
        max_queued_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        unknown = sorted(set(kinds or ()) - set(EVENT_KINDS))
        if unknown:
            raise ValueError(f"unknown event kinds {unknown}; known: {', '.join(EVENT_KINDS)}")
        self.servers = frozenset(servers) if servers is not None else None
        self.kinds = frozenset(kinds) if kinds is not None else None
        self.max_queued = max_queued
        self.max_queued_lifecycle = max_queued_lifecycle
        self.max_queued_bytes = max_queued_bytes
        self.dropped = 0
        self.dropped_bytes = 0
        self._bytes = 0  # of the observations and deliveries queued (json_bytes)
        self._queue: deque[HostEvent] = deque()
        self._observations = 0
        self._lifecycle = 0
        self._deliveries = 0
        self._arrived = anyio.Event()
        self._turns: deque[anyio.Event] = deque()  # deliveries waiting for room, oldest first
        self._settled = 0  # deliveries queued here taken elsewhere or withdrawn, not compacted
        self._ended = False
        self._closed = False

    def __repr__(self) -> str:
        return f"<Subscription queued={len(self._queue)} dropped={self.dropped}>"

    @property
    def queued_bytes(self) -> int:
        """Bytes (``json_bytes``) of the observations and deliveries queued."""
        return self._bytes

    def wants(self, event: HostEvent) -> bool:
        if self._closed:
            return False
        return (self.servers is None or event.server in self.servers) and (
            self.kinds is None or event.kind in self.kinds
        )

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def closed(self) -> bool:
        """True once the consumer closed it (``aclose()``)."""
        return self._closed

    # --- producing ---------------------------------------------------------------------------

    def _append(self, event: HostEvent) -> None:
        self._queue.append(event)
        delivery = delivery_of(event)
        if is_lifecycle(event):
            self._lifecycle += 1
        elif delivery is not None:
            self._deliveries += 1
            delivery.held_by(self)
            self._bytes += json_bytes(event)
        else:
            self._observations += 1
            self._bytes += json_bytes(event)
        self._arrived.set()

    def settled_elsewhere(self) -> None:
        """A delivery queued here was taken from another subscription or withdrawn: the next
        check for room passes over the queue (``Delivery``)."""
        self._settled += 1

    def _drop_oldest(self, lifecycle: bool) -> bool:
        """Drop the oldest queued observation (or lifecycle event), counted; False when
        there is none."""
        for index, queued in enumerate(self._queue):
            if lifecycle == is_lifecycle(queued) and delivery_of(queued) is None:
                del self._queue[index]
                if lifecycle:
                    self._lifecycle -= 1
                else:
                    self._observations -= 1
                    self._bytes -= json_bytes(queued)
                    self.dropped_bytes += json_bytes(queued)
                self.dropped += 1
                return True
        return False

    def _within_bytes(self) -> None:
        """Drop the oldest observations while the queue holds more than ``max_queued_bytes``
        (deliveries are never dropped for room: module rules)."""
        while self._bytes > self.max_queued_bytes and self._drop_oldest(lifecycle=False):
            pass

    def put_observation(self, event: HostEvent) -> bool:
        """Queue an observation; returns False when older ones were dropped for it (the
        newest is kept, even alone over ``max_queued_bytes``)."""
        before = self.dropped
        if self._observations >= self.max_queued:
            self._drop_oldest(lifecycle=False)
        size = json_bytes(event)
        while self._bytes + size > self.max_queued_bytes and self._drop_oldest(lifecycle=False):
            pass  # the newest is never dropped for itself: one alone over the bound is kept
        self._append(event)
        return self.dropped == before

    def put_lifecycle(self, event: HostEvent) -> bool:
        """Queue a lifecycle event; returns False when this subscription's oldest lifecycle
        event was dropped for it (``max_queued_lifecycle`` unread: module rules)."""
        kept = self._lifecycle < self.max_queued_lifecycle
        if not kept:
            self._drop_oldest(lifecycle=True)
        self._append(event)
        return kept

    def _compact(self) -> None:
        """Deliveries no longer waiting for this consumer stop counting as deliveries: a
        withdrawn one is removed, one another consumer took becomes an observation (then the
        observation bound applies, oldest first). Nothing to do unless one of them settled
        since the last pass (``settled_elsewhere``)."""
        if not self._settled:
            return
        self._settled = 0
        kept: deque[HostEvent] = deque()
        for queued in self._queue:
            delivery = delivery_of(queued)
            if delivery is not None and delivery.withdrawn:
                self._deliveries -= 1
                delivery.released_by(self)
                self._bytes -= json_bytes(queued)
                continue
            if delivery is not None and delivery.taken.is_set():
                self._deliveries -= 1
                delivery.released_by(self)
                self._observations += 1
                measured = json_bytes(queued)
                assert isinstance(queued, (PushEvent, ServerRequest))  # it has a delivery
                queued = replace(queued, delivery=None)
                object.__setattr__(queued, _BYTES, measured)  # the same data: not measured again
            kept.append(queued)
        self._queue = kept
        while self._observations > self.max_queued:
            self._drop_oldest(lifecycle=False)
        self._within_bytes()

    def has_room_for_delivery(self, size: int = 0) -> bool:
        """Fewer than ``max_queued`` deliveries wait here for this consumer, and one of
        ``size`` bytes fits in ``max_queued_bytes`` once older observations are dropped for it
        (module rules)."""
        if self._closed:
            return False
        if self._deliveries >= self.max_queued or self._bytes + size > self.max_queued_bytes:
            self._compact()
        if self._deliveries >= self.max_queued:
            return False
        while self._bytes + size > self.max_queued_bytes:
            if not self._drop_oldest(lifecycle=False):
                return False
        return True

    def put_delivery(self, event: HostEvent) -> bool:
        """Queue a delivery if there is room for it; returns False, counting it in
        ``dropped``, when this subscription misses it (module rules)."""
        if not self.has_room_for_delivery(json_bytes(event)):
            if not self._closed:
                self.dropped += 1
                self.dropped_bytes += json_bytes(event)
            return False
        self._append(event)
        return True

    def wait_turn(self, turn: anyio.Event, *, first: bool = False) -> None:
        """Queue ``turn``, the waiting delivery's: it is set when a consumer takes an event
        and every turn queued before it was given (module rules), or at once when this
        subscription has ended or closed. ``first``: at the head (a delivery that was given
        its turn and found the room gone). Queue it right after finding no room, with no
        checkpoint between, so that no take is missed. A turn set by anyone else (another
        subscription, or its delivery giving up) is skipped."""
        if self._ended or self._closed:
            turn.set()
        elif first:
            self._turns.appendleft(turn)
        else:
            self._turns.append(turn)

    def hand_on(self) -> None:
        """Give the next waiting delivery its turn if there is room now: called by a
        delivery that was given its turn and leaves without using it (module rules)."""
        if self._turns and self.has_room_for_delivery():
            self._next_turn()

    def _next_turn(self) -> None:
        while self._turns:
            turn = self._turns.popleft()
            if not turn.is_set():
                turn.set()
                return

    def _every_turn(self) -> None:
        for turn in self._turns:
            turn.set()
        self._turns.clear()

    def end(self) -> None:
        """The host has closed: iteration ends once the queue is empty."""
        self._ended = True
        self._arrived.set()
        self._every_turn()

    # --- consuming ---------------------------------------------------------------------------

    def receive_nowait(self) -> HostEvent:
        """The next event. Raises ``anyio.WouldBlock`` (none queued) or ``anyio.EndOfStream``."""
        while self._queue:
            event = self._queue.popleft()
            delivery = delivery_of(event)
            if is_lifecycle(event):
                self._lifecycle -= 1
            elif delivery is not None:
                self._deliveries -= 1
                delivery.released_by(self)
                self._bytes -= json_bytes(event)
            else:
                self._observations -= 1
                self._bytes -= json_bytes(event)
            self._next_turn()
            if delivery is not None:
                if delivery.withdrawn:
                    continue
                delivery.take(by=self)
            return event
        if self._ended or self._closed:
            raise anyio.EndOfStream
        raise anyio.WouldBlock

    async def receive(self) -> HostEvent:
        """Wait for the next event. Raises ``anyio.EndOfStream`` at the end."""
        while True:
            try:
                return self.receive_nowait()
            except anyio.WouldBlock:
                if self._arrived.is_set():
                    self._arrived = anyio.Event()
                await self._arrived.wait()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> HostEvent:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        """Stop receiving: queued events are discarded (a delivery among them that no other
        subscription holds is withdrawn, so its request is refused), later ones are not
        queued."""
        self.close()

    def close(self) -> None:
        self._closed = True
        for event in self._queue:
            delivery = delivery_of(event)
            if delivery is not None:
                delivery.released_by(self)
                if delivery.holders == 0 and not delivery.taken.is_set():
                    delivery.withdrawn = True  # no other subscription holds it
        self._queue.clear()
        self._bytes = 0
        self._arrived.set()
        self._every_turn()


class EventBus:
    """Every subscription of one ``Host``; emits each event to those that want it.
    ``dropped``: the events every subscription, open or closed, lost to its bounds."""

    def __init__(self) -> None:
        self.subscriptions: list[Subscription] = []
        self._dropped_closed = 0

    @property
    def dropped(self) -> int:
        return self._dropped_closed + sum(s.dropped for s in self.subscriptions)

    def add(self, subscription: Subscription) -> Subscription:
        self.subscriptions.append(subscription)
        return subscription

    def matching(self, event: HostEvent) -> list[Subscription]:
        self._dropped_closed += sum(s.dropped for s in self.subscriptions if s.closed)
        self.subscriptions = [s for s in self.subscriptions if not s.closed]
        return [s for s in self.subscriptions if s.wants(event)]

    def _put(self, event: HostEvent, put: Callable[[Subscription], object]) -> int:
        lost = 0
        for subscription in self.matching(event):
            before = subscription.dropped
            put(subscription)
            lost += subscription.dropped - before
        return lost

    def observe(self, event: HostEvent) -> int:
        """Emit an observation; never blocks. Returns how many events were dropped for it."""
        return self._put(event, lambda s: s.put_observation(event))

    def emit_lifecycle(self, event: HostEvent) -> int:
        """Emit a lifecycle event; never blocks. Returns how many were dropped for it (the
        oldest lifecycle events of subscriptions unread for long: module rules)."""
        return self._put(event, lambda s: s.put_lifecycle(event))

    def offer(self, event: HostEvent, targets: Sequence[Subscription]) -> tuple[int, int]:
        """Queue a delivery to each of ``targets`` that has room; never blocks. Returns
        ``(queued, missed)``: how many took it into their queue, how many had no room."""
        queued = missed = 0
        for subscription in targets:
            if subscription.put_delivery(event):
                queued += 1
            elif not subscription.closed:
                missed += 1
        return queued, missed

    def end(self) -> None:
        for subscription in self.subscriptions:
            subscription.end()


#: The lifecycle events that end a server's connecting (``ConnectingOrder``).
ENDS_CONNECTING: frozenset[str] = frozenset({"ready", "degraded", "disconnected", "gave_up"})
#: Observations about the connecting itself: never held by ``ConnectingOrder``.
PASS_CONNECTING: frozenset[str] = frozenset({"stalled"})


class ConnectingOrder:
    """Orders each server's events (module rules, "Connecting comes first"); pure.
    ``lifecycle(event)`` returns the observations to emit right after ``event``;
    ``observation(event)`` returns True when ``event`` may be emitted now, False when it was
    held (or, past ``max_held``, the oldest held one was dropped for it: ``dropped``)."""

    def __init__(self, max_held: int, max_held_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_held = max_held
        self.max_held_bytes = max_held_bytes
        self.dropped = 0
        self._held: dict[str, deque[HostEvent]] = {}
        self._held_bytes: dict[str, int] = {}

    def connecting(self, server: str) -> bool:
        """True from ``server``'s ``connecting`` until the event that ends it."""
        return server in self._held

    def lifecycle(self, event: HostEvent) -> list[HostEvent]:
        if event.kind == "connecting":
            self._held.setdefault(event.server, deque())
            self._held_bytes.setdefault(event.server, 0)
            return []
        if event.kind in ENDS_CONNECTING:
            self._held_bytes.pop(event.server, None)
            return list(self._held.pop(event.server, ()))
        return []

    def observation(self, event: HostEvent) -> bool:
        held = self._held.get(event.server)
        if held is None or event.kind in PASS_CONNECTING:
            return True
        if len(held) >= self.max_held:
            self._held_bytes[event.server] -= json_bytes(held.popleft())
            self.dropped += 1
        while held and self._held_bytes[event.server] + json_bytes(event) > self.max_held_bytes:
            self._held_bytes[event.server] -= json_bytes(held.popleft())
            self.dropped += 1
        held.append(event)  # the newest is kept, even alone over the bound
        self._held_bytes[event.server] += json_bytes(event)
        return False

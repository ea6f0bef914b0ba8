"""What happens to hosted servers, as ``HostEvent``s, and the subscriptions that carry them.

Rules of this module:

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
from typing import Any, Literal, TypedDict, get_args

import anyio

from mcpl_host.json_size import json_size

__all__ = [
    "DELIVERY_KINDS",
    "EVENT_KINDS",
    "LIFECYCLE_KINDS",
    "ENDS_CONNECTING",
    "ConnectingData",
    "ConnectingOrder",
    "Delivery",
    "DisconnectedData",
    "EventBus",
    "EventKind",
    "GaveUpData",
    "HostEvent",
    "ReadyData",
    "ReconnectingData",
    "StalledData",
    "Subscription",
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
]
#: Every ``HostEvent.kind``: the supervisor's state changes, then what servers send.
EVENT_KINDS: tuple[str, ...] = get_args(EventKind)
#: The kinds a supervisor emits; never dropped.
LIFECYCLE_KINDS: frozenset[str] = frozenset(
    {"connecting", "ready", "degraded", "disconnected", "reconnecting", "gave_up"}
)
#: The kinds that can be deliveries (the application answers them).
DELIVERY_KINDS: frozenset[str] = frozenset({"push_event", "server_request"})


class ConnectingData(TypedDict):
    """``connecting``: ``attempt`` (connection attempts since the supervisor started, from 1)."""

    attempt: int


class ReadyData(TypedDict, total=False):
    """``ready`` / ``degraded`` (``mcpl`` ``"mcp-only"``, with ``reason``). For an MCPL
    server also ``profile`` (``"strict"`` or ``"0.4"``) with ``profileReason``,
    ``policyForm`` (``"request"``, or ``"notification"``: in force without a receipt, 0.4
    profile) and ``grantsNothing`` (a grant is in force and holds no path)."""

    attempt: int
    serverName: str
    serverVersion: str
    protocolVersion: str
    mcpl: str
    effectiveCapabilities: list[str]
    mode: str | None
    reason: str
    profile: str | None
    profileReason: str | None
    policyForm: str | None
    grantsNothing: bool


class DisconnectedData(TypedDict):
    """``disconnected``: ``phase`` ``"start"`` or ``"running"``; ``exitStatus`` (negative for a
    signal), ``closeCode`` (WebSocket), ``stderrTail`` (redacted), ``uptimeSeconds`` (None for
    a start failure)."""

    attempt: int
    phase: Literal["start", "running"]
    reason: str
    exitStatus: int | None
    closeCode: int | None
    stderrTail: list[str]
    uptimeSeconds: float | None


class ReconnectingData(TypedDict):
    """``reconnecting``: ``attempt`` (the restart's number since the backoff was last reset),
    ``delaySeconds``."""

    attempt: int
    delaySeconds: float


class GaveUpData(TypedDict):
    """``gave_up``: ``reason`` (one sentence), ``failures``, ``windowSeconds``."""

    reason: str
    failures: int
    windowSeconds: float


class StalledData(TypedDict):
    """``stalled``: the server sent nothing for ``silentSeconds`` while host requests waited
    (``waiting``: ``{"method", "seconds"}``, oldest first); ``explanation``: one sentence
    (``mcpl.explain.silence_sentence``, naming ``compat="0.4"`` after a strict refusal);
    ``refused``: the refusal before the silence (``"channels/register (-32002: ...)"``) or
    None; ``profile`` (``"strict"``, ``"0.4"``, or None for plain MCP)."""

    explanation: str
    silentSeconds: float
    waiting: list[dict[str, Any]]
    refused: str | None
    profile: str | None


class Delivery:
    """The hand-over of one event the application must answer: ``taken`` is set when a
    consumer receives it; ``withdrawn`` when it was given up on (it is then skipped);
    ``holders``: the subscriptions whose queue holds it now."""

    __slots__ = ("holders", "taken", "withdrawn")

    def __init__(self) -> None:
        self.taken = anyio.Event()
        self.withdrawn = False
        self.holders = 0


@dataclass(frozen=True, slots=True, eq=True, repr=False)
class HostEvent:
    """Something that happened to one server: ``server`` (its name), ``kind`` (one of
    ``EVENT_KINDS``), ``data`` (a dict of JSON values; the ``*Data`` TypedDicts give the
    lifecycle shapes, ``observe.Observation`` the others), ``time`` (seconds since the epoch,
    wall clock). ``responder`` is set only on a ``server_request`` event that waits for the
    application's answer (``ServerRequestResponder``); ``delivery`` on an event the
    application must take (module rules)."""

    server: str
    kind: EventKind
    data: dict[str, Any] = field(default_factory=dict[str, Any])
    time: float = field(default_factory=time.time)
    responder: Any = field(default=None, compare=False)
    delivery: Delivery | None = field(default=None, compare=False)
    _bytes: int = field(default=-1, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in EVENT_KINDS:
            raise ValueError(f"unknown event kind {self.kind!r}")

    def json_bytes(self) -> int:
        """Bytes of ``data`` as compact JSON (``json_size``), measured once: the measure of
        the subscriptions' byte bounds (module rules)."""
        if self._bytes < 0:
            object.__setattr__(self, "_bytes", json_size(self.data))
        return self._bytes

    def __repr__(self) -> str:  # the data are the server's words: only their keys are shown
        return f"<HostEvent {self.server!r} {self.kind} keys={sorted(self.data)}>"

    @property
    def is_lifecycle(self) -> bool:
        return self.kind in LIFECYCLE_KINDS

    def to_json(self) -> dict[str, Any]:
        """``{"server", "kind", "time", "data"}``: what ``mcpl-host run --json`` prints."""
        return {"server": self.server, "kind": self.kind, "time": self.time, "data": self.data}


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
        self._room = anyio.Event()
        self._ended = False
        self._closed = False

    def __repr__(self) -> str:
        return f"<Subscription queued={len(self._queue)} dropped={self.dropped}>"

    @property
    def queued_bytes(self) -> int:
        """Bytes (``HostEvent.json_bytes``) of the observations and deliveries queued."""
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
        if event.is_lifecycle:
            self._lifecycle += 1
        elif event.delivery is not None:
            self._deliveries += 1
            event.delivery.holders += 1
            self._bytes += event.json_bytes()
        else:
            self._observations += 1
            self._bytes += event.json_bytes()
        self._arrived.set()

    def _drop_oldest(self, lifecycle: bool) -> bool:
        """Drop the oldest queued observation (or lifecycle event), counted; False when
        there is none."""
        for index, queued in enumerate(self._queue):
            if lifecycle == queued.is_lifecycle and queued.delivery is None:
                del self._queue[index]
                if lifecycle:
                    self._lifecycle -= 1
                else:
                    self._observations -= 1
                    self._bytes -= queued.json_bytes()
                    self.dropped_bytes += queued.json_bytes()
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
        size = event.json_bytes()
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
        observation bound applies, oldest first)."""
        kept: deque[HostEvent] = deque()
        for queued in self._queue:
            delivery = queued.delivery
            if delivery is not None and delivery.withdrawn:
                self._deliveries -= 1
                delivery.holders -= 1
                self._bytes -= queued.json_bytes()
                continue
            if delivery is not None and delivery.taken.is_set():
                self._deliveries -= 1
                delivery.holders -= 1
                self._observations += 1
                measured = queued.json_bytes()
                queued = replace(queued, delivery=None)
                object.__setattr__(queued, "_bytes", measured)  # the same data: not measured again
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
        if not self.has_room_for_delivery(event.json_bytes()):
            if not self._closed:
                self.dropped += 1
                self.dropped_bytes += event.json_bytes()
            return False
        self._append(event)
        return True

    def room_signal(self) -> anyio.Event:
        """An event set the next time a consumer takes something from this subscription (or
        it closes or ends: then it is set already). Take it *before* checking for room, with
        no checkpoint between: a take after the check then sets it, however the waiter is
        scheduled."""
        if self._room.is_set() and not (self._ended or self._closed):
            self._room = anyio.Event()
        return self._room

    async def wait_room(self) -> None:
        """Wait until a consumer took something from this subscription (or it closed)."""
        await self.room_signal().wait()

    def end(self) -> None:
        """The host has closed: iteration ends once the queue is empty."""
        self._ended = True
        self._arrived.set()
        self._room.set()

    # --- consuming ---------------------------------------------------------------------------

    def receive_nowait(self) -> HostEvent:
        """The next event. Raises ``anyio.WouldBlock`` (none queued) or ``anyio.EndOfStream``."""
        while self._queue:
            event = self._queue.popleft()
            if event.is_lifecycle:
                self._lifecycle -= 1
            elif event.delivery is not None:
                self._deliveries -= 1
                event.delivery.holders -= 1
                self._bytes -= event.json_bytes()
            else:
                self._observations -= 1
                self._bytes -= event.json_bytes()
            self._room.set()
            if event.delivery is not None:
                if event.delivery.withdrawn:
                    continue
                event.delivery.taken.set()
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
            delivery = event.delivery
            if delivery is not None:
                delivery.holders -= 1
                if delivery.holders == 0 and not delivery.taken.is_set():
                    delivery.withdrawn = True  # no other subscription holds it
        self._queue.clear()
        self._bytes = 0
        self._arrived.set()
        self._room.set()


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
            self._held_bytes[event.server] -= held.popleft().json_bytes()
            self.dropped += 1
        while held and self._held_bytes[event.server] + event.json_bytes() > self.max_held_bytes:
            self._held_bytes[event.server] -= held.popleft().json_bytes()
            self.dropped += 1
        held.append(event)  # the newest is kept, even alone over the bound
        self._held_bytes[event.server] += event.json_bytes()
        return False

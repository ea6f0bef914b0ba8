"""``Host``: many servers from a config, each a ``HostedServer`` under a ``Supervisor``, each
reached through its ``ServerHandle``; calls across servers; events by subscription.

Rules of this module (docs/protocol.md T1-T3):

- **Ownership.** The ``Host`` owns one task group; each enabled server runs in its own
  supervisor task in it, started without waiting, so a server that hangs on start delays no
  other. ``aclose()`` closes every supervisor concurrently, each bounded by that server's
  grace periods. Cancelling the task that holds the ``Host`` closes it the same way
  (shielded): no process is left behind.
- **What outlives a transport** is each server's ``HostedServer``: the policy the
  application set last (``HostedServer.update_policy``), held feature-set state, ``eventId``
  de-duplication. A restarted server gets the grant the application decided.
- **One server's calls** are made on its connection, as on any ``ServerConnection``
  (``conn.mcp``, ``conn.hooks``, ``conn.channels``, ``conn.state``, ``conn.policy``):
  ``host.server(name)`` is its ``ServerHandle``, and ``await handle.connected()`` its
  current connection. During a restart that waits for the server to be ready again, up to
  its ``timeout`` (seconds; default the server's request timeout), then raises
  ``ServerNotConnected``; a server that gave up or a closed host raises at once. A call in
  flight when its transport ends fails with ``ConnectionLost`` and is never re-sent on the
  new transport. **Calls across servers** are the host's: ``before_inference``,
  ``inference_lifecycle``, ``roots_changed``, ``wait_ready``, ``snapshot``.
- **Events** (``mcpl_host.events``): ``events()`` is the default subscription (every server,
  every kind, made with the host; ``Host(subscribe_all=False)`` makes none); ``subscribe()``
  makes more, by server and kind. Emitting never waits for a consumer, so a subscription
  nobody reads (the default one included) never holds back one that is read: it stays
  bounded and what it loses is counted (``dropped_events``) and logged. Lifecycle events are
  never dropped to make room; observations may be (oldest first). A server's ``ready`` (or
  ``degraded``) reaches every subscriber before anything the server sent while connecting
  or after (``events.ConnectingOrder``; a push delivery waits for it too).
- **What servers ask.** The application's ``HostHandlers`` (``handlers_factory(name)``)
  answer everything, used as given; the host only observes (each answer is reported as a
  ``push_event`` / ``server_request`` event with its ``answer`` or ``error``). Without them:
  a ``push/event`` that passed admission is a *delivery* (``push_event`` event): answered
  ``accepted: true`` once the application has taken it from a subscription, or, per
  ``push_delivery``, refused ``accepted: false`` with a reason when nobody takes it within
  ``Limits.delivery_timeout_seconds`` (``"wait"``, the default: it waits for room only when
  no subscription has any) or at once when no subscription has room (``"refuse"``). Other server requests (``roots/list``, ``sampling/createMessage``...)
  are deliveries with a ``responder`` (``ServerRequestResponder``); unanswered after the
  server's ``Limits.request_timeout_seconds`` they are answered ``-32603``. ``inference/request``
  needs application handlers (it is not advertised otherwise).
- Event data hold server values as sent; show them through the server's
  ``host.server(name).hosted.redactor``.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio
import anyio.abc
from typing_extensions import Unpack

from mcpl_host._tasks import close_then_leave
from mcpl_host.config import ServerConfig
from mcpl_host.config_file import HostConfig
from mcpl_host.connection import ClientInfo
from mcpl_host.events import (
    ConnectingOrder,
    Delivery,
    DeliveryEvent,
    Disconnected,
    EventBus,
    EventKind,
    HostEvent,
    LifecycleEvent,
    PushEvent,
    ServerRequest,
    Stalled,
    Subscription,
    json_bytes,
)
from mcpl_host.handlers import HostHandlers, RequestContext
from mcpl_host.hosted import HostedServer
from mcpl_host.jsonrpc.errors import ErrorCode, HandlerError, LocalProtocolError, MCPLHostError
from mcpl_host.jsonrpc.values import JSONObject
from mcpl_host.logging import LogBudget, get_logger
from mcpl_host.mcpl.references import MODEL_CONTENT
from mcpl_host.mcpl.state import StateStore
from mcpl_host.mcpl.tool_lifecycle import CallFacts, ToolLifecyclePolicy, call_id_for
from mcpl_host.recording import Recorder
from mcpl_host.secrets import Redactor
from mcpl_host.server_connection import ServerConnection
from mcpl_host.services.coalescing import Conversation, EventInbox
from mcpl_host.services.dispatch import LIBRARY_SERVED
from mcpl_host.services.hooks import BeforeInferenceArgs
from mcpl_host.services.tool_lifecycle import LifecyclePeer, ReportedToolCall
from mcpl_host.services.turns import (
    FanoutResult,
    InferenceLifecycle,
    before_inference_fanout,
    inference_lifecycle,
)
from mcpl_host.supervisor import Supervisor, SupervisorState
from mcpl_host.tool_classes import known_classes

if TYPE_CHECKING:
    from mcpl_host.telemetry import Telemetry

__all__ = [
    "MAX_QUEUED_EVENTS",
    "MAX_QUEUED_EVENT_BYTES",
    "MAX_QUEUED_LIFECYCLE_EVENTS",
    "MAX_REMEMBERED_CALL_IDS",
    "Host",
    "HostCompanion",
    "PushDelivery",
    "ServerNotConnected",
    "ServerHandle",
    "ServerRequestResponder",
    "ServerSnapshot",
    "UnknownServer",
]

#: Host-wide, not per server (the application's subscriptions; ``Host`` parameters):
#: observations and deliveries buffered per subscription (``events.Subscription``).
MAX_QUEUED_EVENTS = 1024
#: Host-wide: lifecycle events buffered per subscription before supervisors wait.
MAX_QUEUED_LIFECYCLE_EVENTS = 4096
#: Host-wide: bytes (the events' data as compact JSON) of the observations and deliveries
#: buffered per subscription, and of a connecting server's held observations: past it the
#: oldest observations are dropped, counted, and a delivery that does not fit is not queued
#: there (``events.Subscription``). One server line may be up to ``Limits.max_line_bytes``.
MAX_QUEUED_EVENT_BYTES = 64 * 1024 * 1024
#: Host-wide: the provider ids ``Host.tool_call`` reused as ``toolCallId`` that it remembers,
#: to mint over a repeat (RFC-007 §3: "SHOULD also mint over any identifier it has already
#: reported recently"); older ones are forgotten (memory stays bounded).
MAX_REMEMBERED_CALL_IDS = 4096
#: Host-wide: log lines about dropped observations before one "more go unlogged" line.
DROPPED_EVENTS_LOGGED = 3
_NOT_ANSWERED = "Internal error: not answered by the host application"
#: What a push nobody can take gets: wait for a consumer, or refuse at once when full.
PushDelivery = Literal["wait", "refuse"]


class HostCompanion(Protocol):
    """What ``Host(inspector=...)`` runs beside its servers (``mcpl_host.inspector.Inspector``):
    ``serve(host, task_status=...)`` is started in the host's task group before any server,
    calls ``task_status.started(...)`` once it watches the host (its subscriptions made), and
    returns once the host has closed (its subscriptions ended)."""

    async def serve(self, host: Host, *, task_status: anyio.abc.TaskStatus[Any]) -> None: ...


class UnknownServer(MCPLHostError, LookupError):
    """No server of that name is in the host (or it is ``disabled``)."""

    def __init__(self, server: str) -> None:
        super().__init__(f"no server named {server!r} in this host")
        self.server = server


class ServerNotConnected(MCPLHostError):
    """The server has no ready connection; ``state`` says where it stands (``connecting``,
    ``reconnecting``, ``gave_up``, ``closed``...)."""

    def __init__(self, server: str, state: SupervisorState, detail: str = "") -> None:
        where = "it gave up" if state == "gave_up" else f"it is {state}"
        super().__init__(f"server {server!r} is not connected ({where})" + (f"; {detail}" if detail else ""))
        self.server = server
        self.state = state


class _Answer:
    """The host's side of one ``server_request``: settled once through its responder,
    awaited by the handler that delivered the request."""

    __slots__ = ("done", "error", "result")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.result: Any = None
        self.error: HandlerError | None = None

    async def wait(self, timeout: float) -> Any:
        """Wait (in the handler task) for the answer; raise ``HandlerError`` to send an error.

        Cancellation: the answer expires, so a late one is refused (False)."""
        try:
            with anyio.move_on_after(timeout):
                await self.done.wait()
        finally:
            if not self.done.is_set():
                self.error = HandlerError(ErrorCode.INTERNAL_ERROR, _NOT_ANSWERED)
                self.done.set()
        if self.error is not None:
            raise self.error
        return self.result


class ServerRequestResponder:
    """The answer slot of one ``server_request`` event: call ``respond(result)`` or
    ``reject(code, message, data)`` once. Each returns True if it answered, False if the
    request was already answered, timed out, or its transport ended (then nothing is sent).
    ``server``, ``method``, ``id`` and ``params`` name the request."""

    __slots__ = ("_answer", "id", "method", "params", "server")

    def __init__(self, server: str, method: str, request_id: object, params: object, answer: _Answer) -> None:
        self.server, self.method, self.id, self.params = server, method, request_id, params
        self._answer = answer

    def __repr__(self) -> str:
        return f"<ServerRequestResponder {self.server!r} {self.method!r} answered={self.is_answered}>"

    @property
    def is_answered(self) -> bool:
        """True once answered, expired or abandoned."""
        return self._answer.done.is_set()

    def respond(self, result: object) -> bool:
        """Answer with ``result`` (a JSON value)."""
        if self._answer.done.is_set():
            return False
        self._answer.result = result
        self._answer.done.set()
        return True

    def reject(self, code: int, message: str, data: object = None) -> bool:
        """Answer with a JSON-RPC error object."""
        if self._answer.done.is_set():
            return False
        self._answer.error = HandlerError(code, message, data)
        self._answer.done.set()
        return True


#: Hands an event to the application: None once taken, else why not (``Host._deliver``).
_Deliver = Callable[[DeliveryEvent, float], Awaitable[str | None]]


class _DeliveringHandlers(HostHandlers):
    """The host's own handlers for a server the application gave none: push events and
    server requests become deliveries (module rules). Not the application's handlers: those
    are never wrapped."""

    def __init__(
        self, deliver: _Deliver, server: str, limits_timeout: float, delivery_timeout: float
    ) -> None:
        super().__init__()
        self._deliver = deliver
        self._server = server
        self._request_timeout = limits_timeout
        self._delivery_timeout = delivery_timeout

    async def push_event(self, context: RequestContext, params: dict[str, Any]) -> JSONObject:
        params = dict(params)
        model_content = params.pop(MODEL_CONTENT, None)  # the host's, set by PushService
        event = PushEvent(
            server=self._server,
            id=context.id,
            feature_set=params["featureSet"],  # admitted: strings (MCPL §9.2)
            event_id=params["eventId"],
            params=params,
            model_content=model_content,
        )
        taken = await self._deliver(event, self._delivery_timeout)
        if taken is None:
            return {"accepted": True}
        return {"accepted": False, "reason": taken}

    async def request(self, context: RequestContext, params: object) -> Any:
        answer = _Answer()
        responder = ServerRequestResponder(self._server, context.method, context.id, params, answer)
        event = ServerRequest(
            server=self._server, id=context.id, method=context.method, params=params, responder=responder
        )
        refused = await self._deliver(event, self._request_timeout)
        if refused is not None:
            raise HandlerError(ErrorCode.INTERNAL_ERROR, f"Internal error: {refused}")
        return await answer.wait(self._request_timeout)


class _HostObserver:
    """Passes one server's events to the host's bus (``observe.ConnectionObserver``)."""

    def __init__(self, emit: Callable[[HostEvent], None], delivering: bool) -> None:
        self._emit = emit
        self._delivering = delivering  # push/server_request events are deliveries already

    def observe(self, event: HostEvent) -> None:
        if self._delivering and (
            isinstance(event, PushEvent)
            or (isinstance(event, ServerRequest) and event.method not in LIBRARY_SERVED)
        ):
            return
        self._emit(event)


@dataclass(frozen=True, slots=True)
class ServerSnapshot:
    """Where one server stands (``Host.snapshot()``): ``state`` (the supervisor's),
    ``attempts``, ``connections_opened``; for a connected server ``server_name``,
    ``server_version``, ``protocol_version``, ``era`` (``"handshake"`` or ``"stateless"``),
    ``mcpl`` (``MCPLState`` value), the grant in
    force (``effective_capabilities``) and ``enabled_feature_sets``; ``channels`` registered
    now; ``last_disconnect`` (the reason of the last ``disconnected``, or None);
    ``stall_explanation``: the sentence of the last stall of the server since its last
    ``connecting`` (the ``stalled`` event's ``explanation``, set at the same moment), or None."""

    name: str
    state: SupervisorState
    attempts: int
    connections_opened: int
    server_name: str | None = None
    server_version: str | None = None
    protocol_version: str | None = None
    mcpl: str | None = None
    era: str | None = None
    effective_capabilities: tuple[str, ...] = ()
    enabled_feature_sets: tuple[str, ...] = ()
    channels: tuple[str, ...] = ()
    last_disconnect: str | None = None
    stall_explanation: str | None = None


class ServerHandle:
    """One server of a ``Host`` (``Host.server(name)``), across its transports. Its calls are
    made on its connection, the same way as on any ``ServerConnection``::

        conn = await host.server("files").connected()
        result = await conn.mcp.call_tool("read", {"path": "a.txt"})

    - ``await connected(timeout=...)``: the ready connection, waiting through a restart up
      to ``timeout`` seconds (default: the server's ``Limits.request_timeout_seconds``),
      then ``ServerNotConnected``; a server that gave up or a closed host raises at once. A
      call in flight when its transport ends fails with ``ConnectionLost`` and is never
      re-sent on the new transport (module rules).
    - ``current``: the ready connection now, or None.
    - ``hosted``: what outlives a transport (``HostedServer``): ``update_policy()`` (stored
      for later transports when the server is between two), ``redactor``, ``limits``,
      ``state_store``, ``channels``...; ``supervisor``: the ``Supervisor`` keeping it
      connected; ``state``: where it stands (``SupervisorState``).
    - ``restart()``, ``snapshot()``.
    """

    __slots__ = ("_closing", "_default_timeout", "_snapshot", "hosted", "supervisor")

    def __init__(
        self,
        hosted: HostedServer,
        supervisor: Supervisor,
        *,
        default_timeout: float,
        closing: Callable[[], bool],
        snapshot: Callable[[], ServerSnapshot],
    ) -> None:
        self.hosted = hosted
        self.supervisor = supervisor
        self._default_timeout = default_timeout
        self._closing = closing
        self._snapshot = snapshot

    def __repr__(self) -> str:
        return f"<ServerHandle {self.name!r} {self.state}>"

    @property
    def name(self) -> str:
        return self.hosted.name

    @property
    def state(self) -> SupervisorState:
        """The supervisor's state (``connecting``, ``ready``, ``degraded``, ``reconnecting``,
        ``gave_up``, ``closed``...)."""
        return self.supervisor.state

    @property
    def current(self) -> ServerConnection | None:
        """The connection if the server is ready (or degraded) now, else None (also from
        ``restart()`` until the new connection is ready: the old one is being closed)."""
        conn, supervisor = self.hosted.current, self.supervisor
        ready = supervisor.state in ("ready", "degraded") and not supervisor.restarting
        return conn if conn is not None and ready else None

    async def connected(self, *, timeout: float | None = None) -> ServerConnection:
        """The connection once the server is ready (or degraded), waiting up to ``timeout``
        seconds (default: its ``Limits.request_timeout_seconds``). Raises
        ``ServerNotConnected`` (gave up, closed, the host closing, or not ready in time)."""
        supervisor = self.supervisor
        seconds = self._default_timeout if timeout is None else timeout
        with anyio.move_on_after(seconds):
            while True:
                conn = self.current
                if conn is not None:
                    return conn
                if supervisor.state in ("gave_up", "closed") or self._closing():
                    raise ServerNotConnected(self.name, supervisor.state)
                await supervisor.wait_changed()
        raise ServerNotConnected(self.name, supervisor.state, f"not ready within {seconds:g} seconds")

    def restart(self) -> None:
        """Close the server's current connection and connect again at once
        (``Supervisor.restart``): not a failure, so the restart policy's count and backoff
        are untouched; the policy set last (``update_policy``) applies to the new
        connection. Returns at once; the ``disconnected`` (reason ``RESTART_REASON``),
        ``connecting`` and ``ready`` events follow, and ``connected()`` waits for the new
        connection. Raises ``ServerNotConnected`` when the
        server gave up or the host is closing."""
        supervisor = self.supervisor
        if self._closing() or not supervisor.restart():
            raise ServerNotConnected(self.name, supervisor.state, "it cannot be restarted")

    def snapshot(self) -> ServerSnapshot:
        """Where the server stands now (``Host.snapshot()``'s entry for it)."""
        return self._snapshot()


class Host:
    """Hosts many servers (module rules): each enabled entry of ``configs`` (a ``HostConfig``
    or a mapping of name to ``ServerConfig``) runs under a ``Supervisor`` with its own restart
    policy.

    Args:
        handlers_factory: ``name -> HostHandlers``: the application's handlers for a server,
            used as given. None: the host's deliveries (module rules).
        client_info: the ``clientInfo`` sent in ``initialize``.
        state_store_factory: ``name -> StateStore`` (held feature-set state; default in memory).
        health_interval_seconds / health_timeout_seconds: the supervisors' health pings
            (timeout None: each server's ``Limits.health_timeout_seconds``).
        max_queued_events / max_queued_lifecycle_events / max_queued_event_bytes: each
            subscription's bounds (counts; bytes of the events' data as compact JSON).
        push_delivery: ``"wait"`` or ``"refuse"`` (module rules).
        subscribe_all: make the default subscription (``events()``).
        clock, rng: go to every supervisor.
        event_inbox: an ``EventInbox`` every server shares (RFC-006; ``inbox()``): the host
            advertises ``eventCoalescing`` and pushes and channel messages wait in it for the
            application's drain instead of reaching ``subscribe()`` / the handlers; None (the
            default): off, nothing changes.
        telemetry: OpenTelemetry spans and metrics of every server (``hosted.ServerRuntime``
            ``telemetry``; ``mcpl_host.telemetry``): None (the default) or True, the global
            providers when the OpenTelemetry API is installed; a ``Telemetry``; False: off.
        record: a ``recording.Recorder`` every server records to (``ServerRuntime.record``):
            each line, lifecycle and decision, each server's with its ``Redactor``; None
            (the default): nothing is recorded, no transport is wrapped. The application
            owns it (closes it after the host).
        inspector: a ``HostCompanion`` (``mcpl_host.inspector.Inspector``: the live web
            inspector) started with the host, before its servers, and ended with it.
    """

    def __init__(
        self,
        configs: HostConfig | Mapping[str, ServerConfig],
        *,
        handlers_factory: Callable[[str], HostHandlers] | None = None,
        client_info: ClientInfo | None = None,
        state_store_factory: Callable[[str], StateStore] | None = None,
        health_interval_seconds: float | None = None,
        health_timeout_seconds: float | None = None,
        max_queued_events: int = MAX_QUEUED_EVENTS,
        max_queued_lifecycle_events: int = MAX_QUEUED_LIFECYCLE_EVENTS,
        max_queued_event_bytes: int = MAX_QUEUED_EVENT_BYTES,
        push_delivery: PushDelivery = "wait",
        subscribe_all: bool = True,
        clock: Callable[[], float] = anyio.current_time,
        rng: Callable[[], float] = random.random,
        event_inbox: EventInbox | None = None,
        telemetry: Telemetry | bool | None = None,
        record: Recorder | None = None,
        inspector: HostCompanion | None = None,
    ) -> None:
        self._event_inbox = event_inbox
        self._inspector = inspector
        self._delivering: set[str] = set()  # servers without application handlers
        if push_delivery not in ("wait", "refuse"):
            raise ValueError(f"push_delivery must be 'wait' or 'refuse', not {push_delivery!r}")
        servers = configs.servers if isinstance(configs, HostConfig) else configs
        self._configs = {name: config for name, config in servers.items() if not config.disabled}
        self._max_queued = max_queued_events
        self._max_queued_lifecycle = max_queued_lifecycle_events
        self._max_queued_bytes = max_queued_event_bytes
        self._push_delivery: PushDelivery = push_delivery
        self._bus = EventBus()
        self._order = ConnectingOrder(max_queued_events, max_queued_event_bytes)
        self._connected: dict[str, anyio.Event] = {}  # set while the server is not connecting
        self._default = self.subscribe() if subscribe_all else None
        self._dropped_budget = LogBudget(DROPPED_EVENTS_LOGGED)
        self._log = get_logger("mcpl_host.host")
        self._hosted: dict[str, HostedServer] = {}
        self._supervisors: dict[str, Supervisor] = {}
        self._handles: dict[str, ServerHandle] = {}
        self._last_disconnect: dict[str, str] = {}
        self._stalls: dict[str, str] = {}  # the last stall's explanation, per server, this attempt
        for name, config in self._configs.items():
            app_handlers = handlers_factory(name) if handlers_factory is not None else None
            if app_handlers is None:
                self._delivering.add(name)
            handlers = app_handlers or _DeliveringHandlers(
                self._deliver,
                name,
                config.limits.request_timeout_seconds,
                config.limits.delivery_timeout_seconds,
            )
            hosted = HostedServer(
                config if config.name == name else dataclasses.replace(config, name=name),
                handlers=handlers,
                observer=_HostObserver(self._observe, delivering=app_handlers is None),
                client_info=client_info,
                state_store=state_store_factory(name) if state_store_factory is not None else None,
                event_inbox=event_inbox,
                telemetry=telemetry,
                record=record,
            )
            self._hosted[name] = hosted
            self._connected[name] = anyio.Event()
            supervisor = Supervisor(
                hosted,
                config.restart_policy,
                self._emit_lifecycle,
                health_interval_seconds=health_interval_seconds,
                health_timeout_seconds=health_timeout_seconds,
                clock=clock,
                rng=rng,
            )
            self._supervisors[name] = supervisor
            self._handles[name] = ServerHandle(
                hosted,
                supervisor,
                default_timeout=config.limits.request_timeout_seconds,
                closing=lambda: self._closing,
                snapshot=functools.partial(self._snapshot_of, name),
            )
        self._call_ids = itertools.count(1)
        #: The provider ids reused as ``toolCallId`` lately (RFC-007 §3: mint over a repeat).
        self._reused_call_ids: collections.deque[str] = collections.deque(maxlen=MAX_REMEMBERED_CALL_IDS)
        self._tg: anyio.abc.TaskGroup | None = None
        self._entered = False
        self._closing = False
        self._closed = anyio.Event()

    def __repr__(self) -> str:
        states = ", ".join(f"{name}={sup.state}" for name, sup in self._supervisors.items())
        return f"<Host {states} dropped_events={self.dropped_events}>"

    # --- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> Host:
        if self._entered:
            raise LocalProtocolError("a Host can be entered only once")
        self._entered = True
        tg = anyio.create_task_group()
        await tg.__aenter__()
        if self._inspector is not None:
            try:
                await tg.start(functools.partial(self._inspector.serve, self))
            except BaseException:
                tg.cancel_scope.cancel()  # nothing else runs in it yet: the error is the starter's
                await tg.__aexit__(None, None, None)
                raise
        self._tg = tg
        for name, supervisor in self._supervisors.items():
            tg.start_soon(supervisor.run, name=f"supervisor {name!r}")
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        tg, self._tg = self._tg, None
        await close_then_leave(self.aclose, tg, *exc_info)  # every supervisor has ended

    async def aclose(self) -> None:
        """Close every server concurrently and end every subscription (each ends once it is
        empty). Idempotent; a second caller waits for the first. Bounded by the slowest
        server's grace periods.

        **Cancellation:** shielded: every process is stopped and reaped before it returns.
        """
        if self._closing:
            with anyio.CancelScope(shield=True):
                await self._closed.wait()
            return
        self._closing = True
        try:
            with anyio.CancelScope(shield=True):
                async with anyio.create_task_group() as tg:
                    for supervisor in self._supervisors.values():
                        tg.start_soon(supervisor.aclose)
        finally:
            self._bus.end()
            self._closed.set()

    # --- events ------------------------------------------------------------------------------

    def events(self) -> Subscription:
        """The default subscription: every event of every server, from the host's creation
        (``async for event in host.events()``). Raises ``LocalProtocolError`` when the host
        was made with ``subscribe_all=False``."""
        if self._default is None:
            raise LocalProtocolError(
                "this Host has no default subscription (subscribe_all=False); use subscribe()"
            )
        return self._default

    def inbox(self, conversation: str = "main") -> Conversation:
        """The event inbox of ``conversation`` (RFC-006; the ``EventInbox`` given as
        ``event_inbox``): ``await host.inbox("c").drain()`` once per model request gives
        what that conversation's model sees next. Raises ``RuntimeError`` when the host was
        made without one."""
        if self._event_inbox is None:
            raise RuntimeError("this Host has no event inbox (Host(..., event_inbox=EventInbox()))")
        return self._event_inbox.conversation(conversation)

    def subscribe(
        self, *, servers: Iterable[str] | None = None, kinds: Iterable[EventKind] | None = None
    ) -> Subscription:
        """A new subscription to the events of ``servers`` (names; None: all) of ``kinds``
        (None: all), from now on. Raises ``UnknownServer`` or ``ValueError`` (unknown kind)."""
        names = list(servers) if servers is not None else None
        for name in names or ():
            if name not in self._configs:
                raise UnknownServer(name)
        return self._bus.add(
            Subscription(
                servers=names,
                kinds=list(kinds) if kinds is not None else None,
                max_queued=self._max_queued,
                max_queued_lifecycle=self._max_queued_lifecycle,
                max_queued_bytes=self._max_queued_bytes,
            )
        )

    @property
    def dropped_events(self) -> int:
        """Events the subscriptions lost to their bounds (``mcpl_host.events`` rules: the
        oldest observations of a full subscription, deliveries a full subscription missed
        while others took them, the oldest lifecycle events of one unread for long)."""
        return self._bus.dropped + self._order.dropped

    def _said_dropped(self, event: HostEvent, what: str) -> None:
        verdict = self._dropped_budget.take()
        if verdict != "quiet":
            self._log.warning(
                f"event subscription full: {what}" + ("; more go unlogged" if verdict == "last" else ""),
                server=event.server,
                kind=event.kind,
                dropped=self.dropped_events,
            )

    async def _emit_lifecycle(self, event: LifecycleEvent) -> None:
        """The supervisors' sink; never waits for a consumer (``mcpl_host.events`` rules)."""
        if isinstance(event, Disconnected):
            self._last_disconnect[event.server] = event.reason
        elif event.kind == "connecting":
            self._stalls.pop(event.server, None)
        if self._bus.emit_lifecycle(event):
            self._said_dropped(event, "dropped its oldest lifecycle event, unread")
        released = self._order.lifecycle(event)
        connected = self._connected.get(event.server)
        if connected is None:  # (each server's is made when the host starts it)
            connected = self._connected[event.server] = anyio.Event()
        if self._order.connecting(event.server):
            if connected.is_set():
                self._connected[event.server] = anyio.Event()
        else:
            connected.set()
        for held in released:  # what the server sent while connecting: after its ready
            self._emit_observation(held)

    def _observe(self, event: HostEvent) -> None:
        if isinstance(event, Stalled):
            self._stalls[event.server] = event.explanation
        dropped = self._order.dropped
        if self._order.observation(event):
            self._emit_observation(event)
        elif self._order.dropped > dropped:
            self._said_dropped(event, "dropped the oldest observation held until ready")

    def _emit_observation(self, event: HostEvent) -> None:
        if self._bus.observe(event):
            self._said_dropped(event, "dropped the oldest observation")

    async def _deliver(self, event: DeliveryEvent, timeout: float) -> str | None:
        """Hand ``event`` to the application (module rules): None once taken, else why not."""
        delivery = Delivery()
        event = replace(event, delivery=delivery)
        refuse_when_full = self._push_delivery == "refuse" and event.kind == "push_event"
        with anyio.move_on_after(timeout):
            if event.kind == "push_event" or self._supervisors[event.server].current is not None:
                await self._connected[event.server].wait()  # after the ready event (module rules)
            dropped = self._bus.dropped
            targets = await self._room_for(event, refuse_when_full)
            if targets is None:
                return "no subscriber takes these events"
            if not targets:
                return "the host application's event queue is full"
            if self._bus.offer(event, targets)[1]:
                self._said_dropped(event, "a delivery was not queued to it (another subscription has it)")
            elif self._bus.dropped > dropped:  # room was made: a taken delivery, now an observation
                self._said_dropped(event, "dropped the oldest observation")
            await delivery.taken.wait()
            return None
        delivery.withdrawn = True
        return f"not taken by the host application within {timeout:g} seconds"

    async def _room_for(self, event: DeliveryEvent, refuse_when_full: bool) -> list[Subscription] | None:
        """The subscriptions ``event`` goes to once one of them has room for it (waiting its
        turn, first come, first served: ``events`` module rules); None when no subscription
        takes it; ``[]`` when none has room and ``refuse_when_full``.

        **Cancellation:** a turn given and not used is handed on, so no waiting delivery
        waits for a take that already happened."""
        size = json_bytes(event)
        turn: anyio.Event | None = None  # set: this delivery was given its turn
        targets: list[Subscription] = []
        try:
            while True:
                targets = self._bus.matching(event)
                if not targets:
                    return None
                if any(target.has_room_for_delivery(size) for target in targets):
                    turn = None  # used
                    return targets
                if refuse_when_full:
                    return []
                first, turn = turn is not None, anyio.Event()
                for target in targets:  # no checkpoint since the check: no take is missed
                    target.wait_turn(turn, first=first)
                await turn.wait()
        finally:
            if turn is not None and turn.is_set():  # given a turn it did not use: hand it on
                for target in targets:
                    target.hand_on()
            elif turn is not None:
                turn.set()  # gave up waiting: skipped when its turn comes

    # --- servers -----------------------------------------------------------------------------

    @property
    def servers(self) -> list[str]:
        """The names of the servers hosted (enabled ones), in config order."""
        return list(self._supervisors)

    @property
    def delivering_servers(self) -> frozenset[str]:
        """The servers whose push events and requests are deliveries (no application
        handlers: module rules); a consumer that only watches must not take those kinds."""
        return frozenset(self._delivering)

    def states(self) -> dict[str, SupervisorState]:
        """Each server's ``Supervisor.state``."""
        return {name: supervisor.state for name, supervisor in self._supervisors.items()}

    def server(self, name: str) -> ServerHandle:
        """The handle of the server ``name`` (``ServerHandle``): its connection once ready,
        its ``HostedServer``, its state, restart and snapshot. Raises ``UnknownServer``."""
        try:
            return self._handles[name]
        except KeyError:
            raise UnknownServer(name) from None

    async def wait_ready(self, *servers: str, timeout: float) -> None:
        """Wait until each of ``servers`` (default: all) is ready or degraded, for at most
        ``timeout`` seconds in all. Raises ``UnknownServer``; ``ServerNotConnected`` for a
        server that gave up, or that is not ready in time."""
        handles = [self.server(name) for name in list(servers) or self.servers]
        deadline = anyio.current_time() + timeout
        for handle in handles:
            await handle.connected(timeout=max(0.0, deadline - anyio.current_time()))

    def snapshot(self) -> dict[str, ServerSnapshot]:
        """Where each server stands now (``ServerSnapshot``), by name."""
        return {name: self._snapshot_of(name) for name in self._supervisors}

    def _snapshot_of(self, name: str) -> ServerSnapshot:
        supervisor, hosted = self._supervisors[name], self._hosted[name]
        conn = hosted.current
        info = conn.server_info if conn is not None else None
        grant = conn.grant if conn is not None else None
        derivation = conn.policy.state.derivation if conn is not None else None
        return ServerSnapshot(
            name=name,
            state=supervisor.state,
            attempts=supervisor.attempts,
            connections_opened=hosted.connections_opened,
            server_name=info.name if info else None,
            server_version=info.version if info else None,
            protocol_version=info.protocol_version if info else None,
            era=info.era if info else None,
            mcpl=conn.mcpl_state.value if conn is not None else None,
            effective_capabilities=tuple(sorted(grant.paths)) if grant is not None else (),
            enabled_feature_sets=tuple(sorted(derivation.enabled)) if derivation is not None else (),
            channels=tuple(str(d.get("id")) for d in hosted.channels),
            last_disconnect=self._last_disconnect.get(name),
            stall_explanation=self._stalls.get(name),
        )

    def roots_changed(self, *servers: str) -> list[str]:
        """Send ``notifications/roots/list_changed`` to each connected server of ``servers``
        (default: all) whose handlers serve roots, in the handshake era
        (``MCPClient.roots_changed``); a ``Roots`` given to the handlers does this by
        itself on ``set()``. Returns the names notified. Raises ``UnknownServer``."""
        return [
            conn.name for conn in self._ready_connections(list(servers) or None) if conn.mcp.roots_changed()
        ]

    def _ready_connections(self, servers: Sequence[str] | None) -> list[ServerConnection]:
        names = list(servers) if servers is not None else self.servers
        out: list[ServerConnection] = []
        for name in names:
            conn = self.server(name).hosted.current
            if conn is not None:
                out.append(conn)
        return out

    async def before_inference(
        self, *, servers: Sequence[str] | None = None, **args: Unpack[BeforeInferenceArgs]
    ) -> FanoutResult:
        """``context/beforeInference`` (arguments: ``BeforeInferenceArgs``) to every connected
        server that is granted it (of ``servers``, default all), concurrently, each failing
        open (``before_inference_fanout``). A server between transports is skipped (its result
        is absent)."""
        return await before_inference_fanout(self._ready_connections(servers), **args)

    def inference_lifecycle(
        self,
        *,
        inference_id: str,
        conversation_id: str,
        turn_index: int,
        model: Mapping[str, Any] | None = None,
        servers: Sequence[str] | None = None,
    ) -> InferenceLifecycle:
        """``async with host.inference_lifecycle(...) as turn``: ``started`` to every connected
        server granted ``inferenceLifecycle`` now, exactly one terminal on exit
        (``InferenceLifecycle``; MCPL §10.5)."""
        return inference_lifecycle(
            self._ready_connections(servers),
            inference_id=inference_id,
            conversation_id=conversation_id,
            turn_index=turn_index,
            model=model,
        )

    # --- tool lifecycle (RFC-007) --------------------------------------------------------------

    def _lifecycle_peers(self) -> list[tuple[LifecyclePeer, ToolLifecyclePolicy, int]]:
        out: list[tuple[LifecyclePeer, ToolLifecyclePolicy, int]] = []
        for name, config in self._configs.items():
            conn = self._hosted[name].current
            if conn is not None and conn.is_open:
                out.append((conn, config.tool_lifecycle, config.limits.max_lifecycle_input_bytes))
        return out

    def tool_call(
        self,
        server: str | None,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        conversation_id: str,
        inference_id: str,
        model_name: str | None = None,
        classes: Sequence[str] = (),
        pending: bool = False,
        provider_call_id: str | None = None,
    ) -> ReportedToolCall:
        """Report one tool call the application executes to every server observing it
        (``tools/lifecycle``, RFC-007; docs/protocol.md TL8-TL11)::

            async with host.tool_call("fs", "write", args, conversation_id=c, inference_id=i) as call:
                result = await call.execute()

        ``server``: the server providing ``tool`` (its name as listed), or None for a tool the
        application implements itself (then ``classes`` are its classes, RFC-008 §5.1 source
        2, and the application reports the terminal: ``call.completed(is_error=...)``).
        ``model_name``: the name the model saw (``tool`` in the notification; default
        ``<server>--<tool>``, or ``tool`` for the application's own). ``pending=True``: the call
        waits on a gate the application controls; entering sends ``pending`` and
        ``call.start()`` (or ``execute()``) ``started``. A server tool's classes are its
        effective classes from the connection's listing (``tools/list`` is sent first when the
        connection has none; unclassed when the tool is not listed or the listing fails).
        ``provider_call_id``: the model's id for the call, to give **only** when the provider
        guarantees it unique (a random id of at least 64 bits, such as a ``toolu_…`` id;
        never a per-response counter such as ``call_0``): it becomes the ``toolCallId``
        unless this host used it lately; otherwise the host mints ``mcpl-host-<n>``
        (``tool_lifecycle.call_id_for``; RFC-007 §3). String arguments pass through the
        provider's ``Redactor`` before they reach an observer (its configured secrets and the
        well-known credential shapes: ``inputAltered``; docs/protocol.md TL6). Raises
        ``UnknownServer``."""
        args: dict[str, Any] = dict(arguments or {})
        call_id = call_id_for(provider_call_id, self._reused_call_ids, next(self._call_ids))
        if call_id == provider_call_id:
            self._reused_call_ids.append(call_id)
        if server is None:
            facts = CallFacts(
                model_name or tool,
                known_classes(classes),
                None,
                None,
                conversation_id,
                inference_id,
                args,
                Redactor().redact,  # the well-known credential shapes
            )
            return ReportedToolCall(facts, call_id, self._lifecycle_peers, pending=pending)
        handle = self.server(server)
        shown = model_name or f"{server}--{tool}"

        async def prepare() -> CallFacts:
            conn = handle.hosted.current
            listed = conn.mcp.cached_tools if conn is not None else None
            if conn is not None and listed is None:  # never listed: list once for the classes
                try:
                    listed = await conn.mcp.list_tools()
                except MCPLHostError:
                    listed = None  # unclassed: the most restrictive (RFC-008 §5.2)
            found = next((t for t in listed or () if t.name == tool), None)
            tool_classes = found.classes if found is not None else ()
            redact = handle.hosted.redactor.redact  # the provider's secrets and the shapes
            return CallFacts(shown, tool_classes, server, tool, conversation_id, inference_id, args, redact)

        async def execute(**kwargs: Any) -> Any:
            conn = await handle.connected()
            return await conn.mcp.call_tool(tool, args, **kwargs)

        return ReportedToolCall(prepare, call_id, self._lifecycle_peers, pending=pending, execute=execute)

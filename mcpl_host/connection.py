"""``Connection``: the I/O shell around ``Session`` for one transport to one server.

Rules of this module (docs/protocol.md, "Routing" and "Transports"; JSON-RPC 2.0 §4-§5):

- A ``Connection`` lives exactly as long as one transport, with one exception: when the
  ``server/discover`` era probe costs the server its transport, the opening
  (``mcpl_host.opening``) has it open one new transport from the factory, once
  (``reopen``; docs/protocol.md S3a). It owns one reader task and one writer task
  (``Link``) per transport. The reader feeds each line to the session and acts on its
  events synchronously, so ``ping`` answers and the ``notifications/initialized`` that
  follows the ``initialize`` answer go out in read order. The writer joins everything
  queued into one write; on an idle stdio link a message is written at once, in its
  sender's task (``Link.send``).
- A pending request is a small ``Slot`` (a waiter of the backend's own,
  ``link.slot_waiter_type``, plus the outcome) with a deadline; nothing is spawned and no
  cancel scope is entered per host request. One ``timer.Timer`` per connection (run by a task of its one task group)
  sleeps until the earliest deadline, then fails every request past its own
  (``RequestTimeout``, and ``notifications/cancelled`` is sent).
- It knows nothing of MCPL. What a server asks is handed to the ``InboundPort`` it was given:
  ``on_request()`` decides in the read loop (admitted: a job to run; refused: the error to
  answer), once. Admitted jobs go to the connection's ``inbound.InboundPool`` (their queue,
  the workers, and the back-pressure that pauses the read loop).
- A server's ``notifications/cancelled`` cancels the job it names, even one that has not
  started yet, and no answer is sent (MCP 2025-11-25, "Cancellation"); naming a long-lived
  request of ours, it ends that request. ``ping`` is answered in every phase, inline.
- Answers go only to the transport their request came on; once it has closed nothing is
  written anywhere and a budgeted log line says so (docs/protocol.md T1, T2). When it
  closes, every pending request fails at once (T3).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import anyio.abc
from typing_extensions import TypedDict

from mcpl_host._tasks import LazyEvent
from mcpl_host.handshake import Noise, ServerInfo, id_text
from mcpl_host.inbound import BackgroundJob, InboundJob, InboundPool, reader_pauses
from mcpl_host.jsonrpc.envelope import Request, Response, is_number
from mcpl_host.jsonrpc.errors import (
    ConnectionClosed,
    ConnectionLost,
    ErrorCode,
    HandlerError,
    InitializeError,
    LocalProtocolError,
    MessageTooLarge,
    RequestEnded,
    RequestTimeout,
    UnreadableAnswer,
)
from mcpl_host.jsonrpc.framing import LineTooLong, ReadItem
from mcpl_host.jsonrpc.session import (
    DroppedLine,
    InvalidRequestReceived,
    LookAlikeResponse,
    NotificationReceived,
    OrphanResponse,
    PendingRequest,
    Phase,
    RequestReceived,
    ResponseSettled,
    Session,
    SessionEvent,
    UnmatchedError,
    UnreadableResponse,
)
from mcpl_host.jsonrpc.values import is_object
from mcpl_host.limits import Limits
from mcpl_host.link import AnswerHook, Link, Slot, Waiter, native_event_type, slot_waiter_type
from mcpl_host.logging import LogBudget, Logger, Redactor, ServerValue, get_logger
from mcpl_host.timer import Timer, due, progress_deadline
from mcpl_host.transports.base import Transport, has_session, opens_in_group, starts_server

if TYPE_CHECKING:
    from mcpl_host.telemetry import ClientCall, ConnectionTelemetry

__all__ = [
    "DEFAULT",
    "ClientInfo",
    "Connection",
    "InboundPort",
    "ProgressCallback",
    "RequestOptions",
    "Timeout",
]

#: Called (from the read loop; must not block) with each ``notifications/progress`` params.
ProgressCallback = Callable[[dict[str, Any]], None]


def _nothing_now() -> ReadItem | None:
    """The ``receive_now`` of a transport that holds no lines already read (not
    ``ReceivesNow``): every line comes from ``receive()``."""
    return None


def _extending(slot: Slot, progress: ProgressCallback | None) -> ProgressCallback:
    """A progress callback that starts ``slot``'s timeout again at each progress (never past
    ``slot.sent + slot.total``), then calls ``progress``. The timer needs no telling: a later
    deadline is found when it wakes at the earlier one (timer module rules)."""

    def extend(params: dict[str, Any]) -> None:
        assert slot.total is not None
        if not slot.done:
            slot.deadline = progress_deadline(time.monotonic(), slot.seconds, slot.sent, slot.total)
        if progress is not None:
            progress(params)

    return extend


class _Default:
    """The type of ``DEFAULT``: "use ``limits.request_timeout_seconds``"."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "DEFAULT"


#: A ``timeout`` argument meaning the connection's ``limits.request_timeout_seconds``.
DEFAULT = _Default()
#: Seconds; None waits for ever; ``DEFAULT`` is the connection's request timeout.
Timeout = float | None | _Default


class RequestOptions(TypedDict, total=False):
    """The keywords of ``Connection.request`` after ``method`` and ``params``, each optional
    and meaning what that method says: ``timeout`` (seconds, ``DEFAULT`` or None),
    ``max_total_timeout`` (the same), ``progress``, ``on_answer``, ``long_lived`` and ``on_sent``. Whatever passes a request
    on (``mcp_methods.EraRequester``) takes and gives them as one ``**options``."""

    timeout: Timeout
    max_total_timeout: Timeout
    progress: ProgressCallback | None
    on_answer: AnswerHook | None
    long_lived: bool
    on_sent: Callable[[int], None] | None


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


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """What the host says about itself in ``initialize`` (MCP 2025-11-25, "Lifecycle"):
    ``clientInfo`` ``name`` and ``version``."""

    name: str = "mcpl-host"
    version: str = "0.1.0"


class InboundPort(Protocol):
    """What a ``Connection`` hands server traffic to (the MCPL layer implements it).

    Every method is called from the read loop and must not block.
    """

    def on_request(self, request: Request) -> InboundJob | HandlerError:
        """Admit ``request`` (never ``ping``): the job that serves it, or the error to answer
        with at once (the port reports its own refusals)."""
        ...

    def on_notification(self, method: str, params: object) -> BackgroundJob | None:
        """A notification other than progress and cancellation; may return work to run."""
        ...

    def on_orphan_response(self, response: Response) -> None:
        """A response naming no pending request (a late answer; docs/protocol.md R5)."""
        ...


class _NoInbound:
    """The port of a connection nobody wired: every request is ``-32601``."""

    def on_request(self, request: Request) -> InboundJob | HandlerError:
        return HandlerError(ErrorCode.METHOD_NOT_FOUND, f"Method not found: {request.method}")

    def on_notification(self, method: str, params: object) -> BackgroundJob | None:
        return None

    def on_orphan_response(self, response: Response) -> None:
        return None


class Connection:
    """One transport to one server: link, reader and writer, pending requests.

    Enter it (``async with``) to open the transport; then run its opening
    (``mcpl_host.opening.Opening``). Exiting (or ``aclose()``) closes everything.
    ``transport_factory`` returns an async context manager that yields a ``Transport``
    (``StdioTransport``, ``WebSocketTransport``).

    ``inbound`` is where server requests and notifications go (``InboundPort``); it may be
    set after construction, before entering. ``pool`` runs the jobs it admits
    (``InboundPool``). ``on_lost(error)`` is called once, from the read loop, when the
    server goes away on its own (not when we close). ``log`` is the logger it writes to
    (default: ``mcpl_host.connection`` bound to ``server=name``).
    """

    # Slots, for memory per connection: with more attributes than a shared-key dict holds
    # (30), each instance had a dict of its own (1.6 KiB).
    __slots__ = (
        "_closed",
        "_deadline",
        "_dropped",
        "_ended",
        "_held_loss",
        "_holding_loss",
        "_invalid",
        "_last_received",
        "_link",
        "_log",
        "_lost",
        "_new_event",
        "_new_waiter",
        "_noise",
        "_on_lost_hook",
        "_progress",
        "_progress_tokens",
        "_request_timeout",
        "_session",
        "_stack",
        "_tg",
        "_timer",
        "_transport_close",
        "_transport_factory",
        "_unmatched",
        "inbound",
        "limits",
        "name",
        "pool",
        "redactor",
        "server_info",
        "telemetry",
    )

    def __init__(
        self,
        transport_factory: Callable[[], AbstractAsyncContextManager[Transport]],
        *,
        name: str = "server",
        limits: Limits | None = None,
        redactor: Redactor | None = None,
        inbound: InboundPort | None = None,
        on_lost: Callable[[ConnectionLost], None] | None = None,
        log: Logger | None = None,
    ) -> None:
        self.name = name
        self.limits = limits or Limits()
        self.redactor = redactor or Redactor()
        self.inbound: InboundPort = inbound or _NoInbound()
        #: What the server said about itself, once the opening has read it (``opened``).
        self.server_info: ServerInfo | None = None
        self._request_timeout = self.limits.request_timeout_seconds
        self._on_lost_hook = on_lost
        self._transport_factory = transport_factory
        self._session = self._new_session()
        # (the owner's, when it logs as this connection too: one logger, not two alike)
        self._log = log if log is not None else get_logger("mcpl_host.connection", server=name)
        self._stack: AsyncExitStack | None = None
        # Closes the current transport (its context's exit, or its aclose() when it was
        # opened in the connection's task group).
        self._transport_close: Callable[[], Awaitable[None]] | None = None
        # The one handshake deadline (anyio.current_time()), from the moment of entering:
        # opening the transport, the probe, initialize, notifications/initialized and the
        # MCPL policy exchange that follows all sit under it (docs/protocol.md H7).
        self._deadline: float | None = None
        # While the era probe may restart the server, a lost transport is not reported
        # (``on_lost``) at once: it is held here (``loss_held``), and dropped when the
        # server is restarted (``reopen``).
        self._holding_loss = False
        self._held_loss: ConnectionLost | None = None
        # reader, writer, timer, workers, jobs; a transport's own tasks (``OpensInGroup``)
        self._tg: anyio.abc.TaskGroup | None = None
        self._ended: Waiter = LazyEvent()  # the transport has ended, for any reason
        self._link: Link | None = None
        self._lost: ConnectionLost | None = None
        self._closed = False
        # The running backend's own event type, and a slot's waiter type (found when the
        # connection opens: link module docstring).
        self._new_event: Callable[[], Waiter] = anyio.Event
        self._new_waiter: Callable[[], Waiter] = anyio.Event
        self._timer = Timer(self._expire)
        #: The admitted server requests: their queue, the workers, back-pressure.
        self.pool = InboundPool(
            self.limits, log=self._log, redactor=self.redactor, is_open=lambda: self.is_open
        )
        self._progress: dict[str, ProgressCallback] = {}
        self._last_received: float | None = None  # time.monotonic() of the last line read
        self._progress_tokens = itertools.count(1)
        self._dropped = LogBudget(self.limits.dropped_lines_logged)
        self._unmatched = LogBudget(self.limits.unmatched_errors_logged)
        self._invalid = LogBudget(self.limits.invalid_requests_logged)
        self._noise = Noise()  # what the server wrote that was not an answer (this transport)
        #: OpenTelemetry spans and metrics of this transport (``mcpl_host.telemetry``), or
        #: None when telemetry is off: then a request pays one ``is None`` check.
        self.telemetry: ConnectionTelemetry | None = None

    def _new_session(self) -> Session:
        return Session(
            max_pending=self.limits.max_pending_requests,
            max_json_depth=self.limits.max_json_depth,
            max_deep_json_bytes=self.limits.max_deep_json_bytes,
            line_head_bytes=self.limits.line_head_bytes,
        )

    def __repr__(self) -> str:
        return f"<Connection {self.name!r} {self._session.phase.name} pending={self._session.pending_count}>"

    # --- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> Connection:
        if self._stack is not None or self._closed:
            raise LocalProtocolError("a Connection can be opened only once")
        self._new_event = native_event_type()  # no backend look-up, no wrapper per event
        self._new_waiter = slot_waiter_type(self._new_event)
        self._deadline = anyio.current_time() + self.limits.handshake_timeout_seconds
        self._stack = AsyncExitStack()
        try:
            tg = await self._stack.enter_async_context(anyio.create_task_group())
            self._tg = tg
            self.pool.open(tg, self._new_event)
            tg.start_soon(self._run_timer)
            self._start_link(await self._open_transport())
        except BaseException:
            await self.aclose()
            await self._stack.aclose()
            raise
        return self

    async def _open_transport(self) -> Transport:
        """Open a new transport from the factory, in a context of its own (closed with the
        connection, or by ``reopen``): one that can (``OpensInGroup``: stdio) runs its tasks
        in the connection's task group, closed by its ``aclose()``; any other is entered.
        Raises ``InitializeError`` when it cannot open."""
        assert self._stack is not None and self._tg is not None
        try:
            opener = self._transport_factory()
            if opens_in_group(opener):
                transport = await opener.open_in(self._tg)
                close = transport.aclose
            else:
                stack = AsyncExitStack()
                transport = await stack.enter_async_context(opener)
                close = stack.aclose
        except ConnectionLost as exc:
            raise InitializeError(
                str(exc), exit_status=exc.exit_status, stderr_tail=exc.stderr_tail
            ) from None
        self._transport_close = close
        self._stack.push_async_callback(close)  # a second close does nothing
        return transport

    async def reopen(self) -> None:
        """The era probe cost the server its transport (docs/protocol.md S3a): close the
        lost one (for stdio: SIGTERM if it still runs, and reap, bounded by the grace
        limits), then open a new one from the factory, with a new session (its ids start
        again), as if the connection had just been entered. A loss held (``loss_held``) is
        dropped: the restarted server's loss is its own, reported as usual. Raises
        ``InitializeError`` when the new transport cannot open."""
        self._holding_loss = False
        close, link = self._transport_close, self._link
        if link is not None and starts_server(link.transport):
            link.transport.terminate_now()  # a server that closed its output gets no grace
        if close is not None:
            # Not under a scope of its own: an entered transport's task group must be the
            # current scope when it exits (its close is shielded and bounded by the grace
            # limits). A transport opened in the connection's group leaves its tasks to end
            # there.
            await close()
        self._session = self._new_session()
        self._lost = None
        self._held_loss = None
        self._ended = LazyEvent(self._new_event)
        self._noise = Noise()
        self._start_link(await self._open_transport())

    @contextmanager
    def loss_held(self, hold: bool) -> Generator[None]:
        """While the opening may restart the server (``hold``), a lost transport is not
        reported (``on_lost``) at once; on leaving, a loss that no ``reopen`` answered is
        reported (unless we closed)."""
        self._holding_loss = hold
        try:
            yield
        finally:
            self._holding_loss = False
            held, self._held_loss = self._held_loss, None
            if held is not None and not self._closed and self._on_lost_hook is not None:
                self._on_lost_hook(held)

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
        if self._stack is not None:
            # Everything in it is closed by now; a transport's second aclose() returns without
            # a checkpoint, so no pending cancellation is raised (and chained to itself) inside
            # AsyncExitStack. (It cannot be shielded: the task group's scope is in it.)
            await self._stack.aclose()

    async def aclose(self) -> None:
        """Close the connection: fail pending requests (``ConnectionClosed``), write what is
        queued (answers, ``notifications/cancelled``; at most ``close_grace_seconds``), close
        the transport (for stdio: stdin, grace, SIGTERM, SIGKILL, reap), and stop every task.
        Idempotent. May be called from any task; the ``async with`` exit then only leaves the
        contexts.

        Cancellation: shielded; the transport is always closed and the process reaped.
        """
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            for pending in self._session.close():
                pending.slot.fail(ConnectionClosed(f"connection to {self.name!r} was closed"))
            link = self._link
            if link is not None and not link.closed:
                # The writer is shielded: it writes what is queued even when the task group
                # around it is being cancelled, so the server sees end of input at once.
                link.finish()  # with nothing queued, the writer returns when it next runs
                if link.queued_bytes:
                    with anyio.move_on_after(self.limits.close_grace_seconds):
                        await link.stopped.wait()
                    link.stop_writer()
            if link is not None:
                # Before the tasks stop, so stderr written while exiting still reaches the tail.
                await link.transport.aclose()
                link.close()
            self._ended.set()  # (first: a task that waits for it ends before the timer)
            self._timer.stop()  # its task then ends the others (_run_timer)
            if self.telemetry is not None:
                self.telemetry.ended(None)

    async def _run_timer(self) -> None:
        """The connection's timer, in its one task group (with the reader, the writer and
        the pool's jobs); once ``aclose()`` stopped it, the pool's jobs are cancelled, and
        the reader and the writer end on their own (the transport is closed, the link
        finished): the group is left with no scope cancelled in the usual close (each
        cancel costs anyio a formatted repr of the current task)."""
        await self._timer.run(self._new_event)
        self.pool.close()

    def watch(self, look: Callable[[], float]) -> None:
        """Have the connection's timer call ``look()`` now, then again whenever the seconds
        it returns (``math.inf``: never again) have passed, until the connection closes
        (``timer.Timer.watch``; the stall watch). ``look`` must not block."""
        self._timer.watch(look)

    @property
    def is_open(self) -> bool:
        """True from the opening of the transport until it ends or we close."""
        link = self._link
        return not self._closed and link is not None and not link.closed

    def handshake_remaining(self) -> float:
        """Seconds left of the one handshake deadline (``limits.handshake_timeout_seconds``
        from entering; docs/protocol.md H7), never below 0; the whole timeout before
        entering."""
        if self._deadline is None:
            return self.limits.handshake_timeout_seconds
        return max(0.0, self._deadline - anyio.current_time())

    @property
    def is_closed_by_host(self) -> bool:
        """True once ``aclose()`` has been called."""
        return self._closed

    async def wait_closed(self) -> ConnectionLost | ConnectionClosed:
        """Wait until the transport has ended (the server went away, or we closed) and return
        why: a ``ConnectionLost`` (exit status, stderr tail) or a ``ConnectionClosed``."""
        await self._ended.wait()
        if self._lost is not None:
            return self._lost
        return ConnectionClosed(f"connection to {self.name!r} was closed")

    @property
    def transport(self) -> Transport | None:
        """The transport, once opened (None before)."""
        return self._link.transport if self._link is not None else None

    @property
    def pid(self) -> int | None:
        """The process id of the server this connection started (a stdio server; also its
        process group id), once its transport is open; None before, and for a server the
        host does not start (WebSocket, HTTP)."""
        pid = getattr(self.transport, "pid", None)
        return pid if isinstance(pid, int) else None

    @property
    def stderr_tail(self) -> list[str]:
        """The server's last stderr lines, escaped and redacted (docs/protocol.md H5)."""
        return list(self._link.transport.stderr_tail) if self._link else []

    @property
    def pending_count(self) -> int:
        """Host requests awaiting their answer."""
        return self._session.pending_count

    def waiting(self) -> list[tuple[str, float]]:
        """``(method, sent_at)`` of each host request still waiting for its answer, oldest
        first (``sent_at``: ``anyio.current_time()`` seconds); long-lived requests (a
        ``subscriptions/listen``, whose answer may never come) are not waiting."""
        shift = anyio.current_time() - time.monotonic()  # the hot path reads time.monotonic()
        sent = [
            (pending.method, pending.slot.sent + shift)
            for pending in self._session.pending()
            if not pending.slot.long_lived
        ]
        return sorted(sent, key=lambda item: item[1])

    @property
    def last_received(self) -> float | None:
        """When the server last sent a line (``anyio.current_time()`` seconds), None before any."""
        if self._last_received is None:
            return None
        return self._last_received + anyio.current_time() - time.monotonic()

    @property
    def lost(self) -> ConnectionLost | None:
        """Why the transport ended on its own (the server went away), None while it runs or
        when we closed it."""
        return self._lost

    @property
    def noise(self) -> Noise:
        """What the server wrote on this transport that was not an answer (lines dropped
        before the handshake completed, a look-alike answer id), for the opening's error."""
        return self._noise

    @property
    def phase(self) -> str:
        """The session's phase name: ``new``, ``initializing``, ``operating`` or ``closed``."""
        return self._session.phase.value

    # --- host -> server --------------------------------------------------------------------

    def request(
        self,
        method: str,
        params: Any = None,
        *,
        timeout: Timeout = DEFAULT,
        max_total_timeout: Timeout = DEFAULT,
        progress: ProgressCallback | None = None,
        on_answer: AnswerHook | None = None,
        long_lived: bool = False,
        on_sent: Callable[[int], None] | None = None,
    ) -> Coroutine[Any, Any, Any]:
        """Send a request and return its ``result`` (JSON-RPC 2.0 §4). Await it: it is the
        coroutine that does the work (no coroutine of its own around it, one frame less in
        every resumption of the waiting task); nothing is sent before it is awaited.

        Args:
            method, params: the request; ``params`` a dict, a list or None.
            timeout: seconds; ``DEFAULT`` is ``limits.request_timeout_seconds``; None waits
                for ever.
            max_total_timeout: seconds; when set, each ``notifications/progress`` for this
                request starts ``timeout`` again, up to this many seconds in all since it
                was sent (MCP 2025-11-25 "Lifecycle", Timeouts; docs/protocol.md R8);
                ``DEFAULT`` is ``limits.max_total_request_seconds``; None: progress does
                not extend ``timeout``. Adds ``_meta.progressToken`` when it applies.
            progress: called (from the read loop; must not block) with the params of each
                ``notifications/progress`` for this request; adds ``_meta.progressToken``.
            on_answer: runs in the read loop when the answer arrives, before the next line.
            long_lived: a request whose answer may never come (``subscriptions/listen``, MCP
                2026-07-28): ``timeout`` is ignored (it never times out), ``waiting()``
                leaves it out, and the server may end it with ``notifications/cancelled``
                (then ``RequestEnded``).
            on_sent: called with the request's id once it is queued to be sent.

        Raises:
            RemoteError: the server answered with an error object.
            RequestTimeout: no answer in time; ``notifications/cancelled`` was sent.
            RequestEnded: the server ended a long-lived request.
            ConnectionLost / ConnectionClosed: the transport went away / we closed.
            MessageTooLarge: the request is over ``limits.max_outbox_bytes``; not sent, and
                the connection stays up.
            LocalProtocolError: called before the handshake, or too many requests in flight.

        Cancellation: the pending entry is dropped, ``notifications/cancelled`` is sent (never
        for ``initialize``) and a late answer is treated as an orphan.

        With ``telemetry`` the request has a ``CLIENT`` span and carries its trace context in
        ``params._meta`` (``mcpl_host.telemetry``).
        """
        telemetry = self.telemetry
        if telemetry is None:
            return self._request(
                method, params, timeout, max_total_timeout, progress, on_answer, long_lived, on_sent, None
            )
        return self._traced_request(
            telemetry, method, params, timeout, max_total_timeout, progress, on_answer, long_lived, on_sent
        )

    async def _traced_request(
        self,
        telemetry: ConnectionTelemetry,
        method: str,
        params: Any,
        timeout: Timeout,
        max_total_timeout: Timeout,
        progress: ProgressCallback | None,
        on_answer: AnswerHook | None,
        long_lived: bool,
        on_sent: Callable[[int], None] | None,
    ) -> Any:
        """``request`` with ``telemetry``: its ``CLIENT`` span (``mcpl_host.telemetry``)."""
        call = telemetry.client_call(method, params)
        try:
            result = await self._request(
                method,
                call.params,
                timeout,
                max_total_timeout,
                progress,
                on_answer,
                long_lived,
                on_sent,
                call,
            )
        except BaseException as exc:
            call.failed(exc)
            raise
        call.succeeded(result)
        return result

    async def _request(
        self,
        method: str,
        params: Any,
        timeout: Timeout,
        max_total_timeout: Timeout,
        progress: ProgressCallback | None,
        on_answer: AnswerHook | None,
        long_lived: bool,
        on_sent: Callable[[int], None] | None,
        call: ClientCall | None,
    ) -> Any:
        """``request``'s work (its arguments, positional); ``call`` is told the id sent."""
        link = self._link
        if link is None or link.closed or self._closed:
            link = self._require_link()
        if long_lived:
            seconds = None
        else:
            seconds = self._request_timeout if isinstance(timeout, _Default) else timeout
        slot = Slot(on_answer, self.redactor, self._new_waiter())
        slot.long_lived = long_lived
        if seconds is not None and method != "initialize":  # the handshake has its own deadline
            total = (
                self.limits.max_total_request_seconds
                if isinstance(max_total_timeout, _Default)
                else max_total_timeout
            )
            if total is not None:
                slot.total = total
                progress = _extending(slot, progress)
        token = None
        if progress is not None:
            token = f"progress-{next(self._progress_tokens)}"
            params = dict(params or {})
            meta = params.get("_meta")
            params["_meta"] = {**(meta if is_object(meta) else {}), "progressToken": token}
            self._progress[token] = progress
        try:
            pending = self._send_request(link, method, params, slot)
        except BaseException:
            if token is not None:
                del self._progress[token]
            raise
        slot.sent = now = time.monotonic()
        if on_sent is not None:
            on_sent(pending.id)
        if call is not None:
            call.sent(pending.id)
        if seconds is not None:
            slot.deadline = deadline = now + (seconds if slot.total is None else min(seconds, slot.total))
            slot.seconds = seconds
            timer = self._timer
            if deadline < timer.at:  # (``arm`` only acts then: no call for the usual request)
                timer.arm(deadline)
        pool = self.pool
        in_job = pool.in_job()
        if in_job:
            pool.answer_awaited()  # this answer must be read, back-pressure or not
        try:
            await slot.event.wait()
        except BaseException:
            if not slot.done:
                self._abandon(pending, link, "cancelled")
            raise
        finally:
            if in_job:
                pool.answer_settled()
            if token is not None:
                self._progress.pop(token, None)
        return slot.outcome()

    def notify_nowait(self, method: str, params: object = None) -> None:
        """Queue a notification (no answer, no waiting). Raises ``ConnectionLost`` /
        ``ConnectionClosed`` when the transport is gone, ``MessageTooLarge`` when it is over
        ``limits.max_outbox_bytes`` (not sent; the connection stays up)."""
        self._require_link().send(self._session.notification(method, params), method)

    async def notify(self, method: str, params: object = None) -> None:
        """Send a notification (no answer). Raises as ``notify_nowait``."""
        self.notify_nowait(method, params)

    def _send_request(self, link: Link, method: str, params: Any, slot: Slot) -> PendingRequest:
        """Start the request ``method`` with ``params`` in the session (its id taken, ``slot``
        waiting for the answer) and queue it on ``link``. Raises as ``Session.start_request``
        and ``Link.send``; over ``limits.max_outbox_bytes`` the request is forgotten again and
        ``MessageTooLarge`` raised (nothing was sent)."""
        pending, data = self._session.start_request(method, params, slot=slot)
        try:
            link.send(data, method)
        except MessageTooLarge:
            self._session.forget(pending.id)
            raise
        return pending

    def _abandon(self, pending: PendingRequest, link: Link, reason: str) -> None:
        if self._session.forget(pending.id) is None:
            return
        if pending.method != "initialize" and not link.closed:  # MCP: never cancel initialize
            link.send(
                self._session.notification(
                    "notifications/cancelled", {"requestId": pending.id, "reason": reason}
                )
            )

    def _require_link(self) -> Link:
        if self._closed:
            raise ConnectionClosed(f"connection to {self.name!r} is closed")
        link = self._link
        if link is None or link.closed:
            lost = self._lost
            if lost is not None:
                raise ConnectionLost(str(lost), exit_status=lost.exit_status, stderr_tail=lost.stderr_tail)
            if self._stack is None:
                raise LocalProtocolError(
                    f"connection to {self.name!r} is not open: enter it with 'async with' first"
                )
            raise ConnectionLost(f"connection to {self.name!r} is not open")
        return link

    def live_transport(self) -> Transport:
        """The transport, open. Raises ``ConnectionLost`` / ``ConnectionClosed`` when it is
        gone, ``LocalProtocolError`` before entering (as ``request``)."""
        return self._require_link().transport

    async def request_within(self, method: str, params: object, *, window: float) -> Any:
        """Send a request and wait at most ``window`` seconds for its answer, never
        cancelling it: its ``result``, or None when no answer came in time (the request is
        then forgotten, a late answer is an orphan, and no ``notifications/cancelled`` is
        sent: the ``server/discover`` probe, docs/protocol.md S3). Raises as ``request``."""
        link = self._require_link()
        slot = Slot(None, self.redactor, self._new_waiter())
        pending = self._send_request(link, method, params, slot)
        slot.sent = time.monotonic()  # what waiting() counts from
        with anyio.move_on_after(window):
            await slot.event.wait()
        if not slot.done:
            self._session.forget(pending.id)
            return None
        return slot.outcome()

    def opened(self, info: ServerInfo) -> None:
        """The opening has read the server's ``info``: the session operates (its era's
        handshake is complete) and the transport is told the protocol version (an HTTP
        transport sends it in a header). Raises ``ConnectionLost`` / ``ConnectionClosed``
        when the transport is gone."""
        link = self._require_link()
        self.server_info = info
        if self.telemetry is not None:
            transport = link.transport
            session = transport.session_id if has_session(transport) else None
            self.telemetry.opened(info.protocol_version, session)
        if info.is_stateless:
            self._session.discover_completed()
        else:
            self._session.initialize_completed()
        link.transport.negotiated(info.protocol_version)

    async def written(self, *, within: float) -> bool:
        """Wait at most ``within`` seconds until everything queued so far is written (for an
        HTTP transport: the server accepted it): False when the link is still open with
        bytes queued (docs/protocol.md H7)."""
        link = self._link
        if link is None or link.closed or not link.queued_bytes:
            return True  # written already (stdio, usually): no scope to enter, no checkpoint
        with anyio.move_on_after(within):
            await link.wait_written()
        return link.closed or not link.queued_bytes

    # --- timeouts ----------------------------------------------------------------------------

    def _expire(self, now: float) -> float:
        """The timer's work at ``now``: fail every pending request past its deadline
        (``RequestTimeout``; ``notifications/cancelled`` goes out); the next deadline. With
        no open link there is nothing to fail."""
        link = self._link
        if link is None or link.closed:
            return math.inf
        expired, following = due(self._session.pending_requests(), now)
        for pending in expired:
            self._abandon(pending, link, "timeout")
            slot = pending.slot
            ended_in_all = slot.total is not None and slot.deadline >= slot.sent + slot.total
            slot.fail(
                RequestTimeout(pending.method, slot.seconds, total=slot.total if ended_in_all else None)
            )
        return following

    # --- transport tasks ---------------------------------------------------------------------

    def _start_link(self, transport: Transport) -> None:
        assert self._tg is not None

        def on_lost(exc: BaseException) -> None:
            self._lost_link(exc, link)

        link = Link(
            transport,
            max_outbox_bytes=self.limits.max_outbox_bytes,
            on_lost=on_lost,
            new_event=self._new_event,
        )
        self._link = link
        self._tg.start_soon(self._read_loop, link)
        self._tg.start_soon(link.write_loop)

    async def _read_loop(self, link: Link) -> None:
        session, on_event, on_request = self._session, self._on_event, self._on_request
        on_notification = self._on_notification
        receive = link.transport.receive
        # Lines already read (one read of a pipe gives many) are taken without a coroutine
        # each where the transport holds them (``ReceivesNow``: stdio).
        receive_now: Callable[[], ReadItem | None] = getattr(link.transport, "receive_now", _nothing_now)
        pool = self.pool
        pause_at = pool.pause_at
        try:
            while True:
                # (reading pauses only with pause_at jobs waiting: told first, without a call)
                if pool.waiting >= pause_at and reader_pauses(pool.waiting, pool.awaiting_answers, pause_at):
                    await pool.paused(link)
                item = receive_now()
                if item is None:
                    # Nothing of the last line is held while waiting: its bytes and what it
                    # parsed to (an answer its requester has dropped) are freed now.
                    event = notification = None
                    item = await receive()
                self._last_received = time.monotonic()
                try:
                    if type(item) is bytes:
                        event = session.receive(item)
                    else:
                        assert isinstance(item, LineTooLong)
                        event = session.receive_oversize(item)
                    if type(event) is RequestReceived:  # the usual line of a flood, told first
                        on_request(event.request, link)
                    elif type(event) is NotificationReceived:  # (as _on_event does, without its call)
                        notification = event.notification
                        on_notification(notification.method, notification.params)
                    elif event is not None:
                        on_event(event, link)
                except Exception:  # a bug here, or in a port's hook: never the connection
                    self._log.exception("failed to act on a line from the server")
        except (ConnectionLost, ConnectionClosed) as exc:
            self._lost_link(exc, link)

    def _lost_link(self, exc: BaseException, link: Link) -> None:
        """``link``'s transport ended (a link that is no longer the current one, after
        ``reopen``, is ignored; so is the end of our own close: ``aclose()`` does the rest)."""
        if link is not self._link or link.closed or self._closed:
            return
        link.close()
        lost = (
            exc
            if isinstance(exc, ConnectionLost)
            else ConnectionLost(str(exc) or f"connection to {self.name!r} ended")
        )
        if not self._closed:
            self._lost = lost
            self._log.info("transport closed", reason=ServerValue(str(exc), self.redactor))
        self._ended.set()
        if self.telemetry is not None:
            self.telemetry.ended(None if self._closed else lost)
        failure: BaseException = exc if isinstance(exc, (ConnectionLost, ConnectionClosed)) else lost
        for pending in self._session.close():  # T3: fail at once
            pending.slot.fail(failure)
        self.pool.cancel_all()
        self._timer.wake()
        if self._holding_loss:
            self._held_loss = lost
        elif not self._closed and self._on_lost_hook is not None:
            self._on_lost_hook(lost)

    # --- what the server sends -----------------------------------------------------------------

    def _on_event(self, event: SessionEvent, link: Link) -> None:
        if type(event) is ResponseSettled:
            link.answered()  # many answers at once: their requests' successors go out together
            event.pending.slot.settle(event.response)  # runs its on_answer first (wire order)
        elif type(event) is RequestReceived:
            self._on_request(event.request, link)
        elif isinstance(event, NotificationReceived):
            self._on_notification(event.notification.method, event.notification.params)
        elif isinstance(event, UnreadableResponse):  # unreadable: fail it at once, saying why
            self._log.warning("an answer could not be read", method=event.pending.method, reason=event.reason)
            event.pending.slot.fail(UnreadableAnswer(event.pending.method, event.reason))
        elif isinstance(event, InvalidRequestReceived):
            if event.answer is not None:
                link.send(event.answer)  # A1: once, on the same transport
            self._invalid.warn(
                self._log,
                "invalid request from the server",
                method=ServerValue(event.invalid.method, self.redactor),
                problem=event.invalid.message,
            )
        elif isinstance(event, OrphanResponse):
            self._on_orphan(event)
        elif isinstance(event, UnmatchedError):
            self._on_unmatched(event)
        elif isinstance(event, LookAlikeResponse):
            self._on_look_alike(event)
        elif isinstance(event, DroppedLine):
            if self._session.phase is not Phase.OPERATING:
                noise = self._noise
                noise.dropped += 1
                if noise.first_dropped is None:
                    noise.first_dropped = event
            self._log_dropped(event.kind, event.line)

    def _on_orphan(self, event: OrphanResponse) -> None:
        self._log.debug(
            "late answer to a forgotten request", id=ServerValue(event.response.id, self.redactor)
        )
        self.inbound.on_orphan_response(event.response)

    def _on_unmatched(self, event: UnmatchedError) -> None:
        self._unmatched.warn(
            self._log,
            "error response naming no request of ours",
            error=ServerValue(event.response.error, self.redactor),
        )

    def _on_look_alike(self, event: LookAlikeResponse) -> None:
        """D2: never matched; said once per connection, at warning level, so that the
        operator can see why a call times out. Then handled as what it otherwise is."""
        if self._noise.look_alike is None:
            self._noise.look_alike = event
            self._log.warning(
                "an answer's id only looks like the id of a pending request and is not taken as"
                " its answer (JSON-RPC 2.0 §5: the same value and type); the request will time"
                " out unless a real answer comes. Said once per connection",
                id=ServerValue(id_text(event.response.id), self.redactor),
                resembles=event.resembles.id,
                method=event.resembles.method,
            )
        if isinstance(event.then, OrphanResponse):
            self._on_orphan(event.then)
        elif isinstance(event.then, UnmatchedError):
            self._on_unmatched(event.then)

    def _on_request(self, request: Request, link: Link) -> None:
        if link.closed:  # T2: read after its transport closed
            self.pool.not_answering(request)
            return
        if request.method == "ping":  # answered in every phase
            link.send(self._session.answer(request.id, result={}))
            return
        decision = self.inbound.on_request(request)  # admission, once
        if isinstance(decision, HandlerError):
            link.send(self._session.answer(request.id, error=decision.to_error()))
            return
        self.pool.queue(request, decision, link)

    def _on_notification(self, method: str, params: object) -> None:
        if method == "notifications/progress" and is_object(params):
            token = params.get("progressToken")
            callback = self._progress.get(token) if isinstance(token, str) else None
            if callback is not None:
                callback(params)
        elif method == "notifications/cancelled" and is_object(params):
            request_id = params.get("requestId")
            ended = type(request_id) is int and self._end_long_lived(request_id)
            if not ended and (isinstance(request_id, str) or is_number(request_id)):
                self.pool.cancel(request_id)  # MCP: stop work and do not reply
        elif method == "notifications/message" and is_object(params):
            level = params.get("level")
            log_method = _MCP_LOG_LEVELS.get(level if isinstance(level, str) else "", "info")
            logger = params.get("logger")
            fields: dict[str, Any] = {"data": ServerValue(params.get("data"), self.redactor)}
            if logger is not None:
                fields["logger"] = ServerValue(logger, self.redactor)
            getattr(self._log, log_method)("server log message", **fields)
        job = self.inbound.on_notification(method, params)
        if job is not None:
            self.pool.start_job(job, counted=False)

    def _end_long_lived(self, request_id: int) -> bool:
        """A server's ``notifications/cancelled`` naming a long-lived request of ours ends it
        (``RequestEnded``; no cancellation is sent back): MCP 2026-07-28 "Cancellation",
        a server ends a ``subscriptions/listen`` stream so over stdio, and cancels nothing
        else. False when ``request_id`` names no such request."""
        for pending in self._session.pending():
            if pending.id == request_id and pending.slot.long_lived:
                self._session.forget(request_id)
                pending.slot.fail(RequestEnded(pending.method))
                return True
        return False

    def _log_dropped(self, kind: str, line: bytes) -> None:
        self._dropped.warn(
            self._log, "dropped a line from the server", kind=kind, line=ServerValue(line, self.redactor)
        )

"""``Connection``: the I/O shell around ``Session`` for one transport to one server.

Rules of this module (docs/protocol.md, "Routing" and "Transports"; JSON-RPC 2.0 §4-§5):

- A ``Connection`` lives exactly as long as one transport, with one exception: when the
  ``server/discover`` era probe costs the server its transport (it exits, or closes its
  output, before answering), the handshake opens one new transport from the factory, once,
  and goes on with ``initialize`` (docs/protocol.md S3a). It owns one reader task and one
  writer task (``Link``) per transport. The reader feeds each line to the session and acts on its events
  synchronously, so ``ping`` answers and the ``notifications/initialized`` that follows the
  ``initialize`` answer go out in read order. The writer joins everything queued into one
  write; on an idle stdio link a message is written at once, in its sender's task
  (``Link.send``).
- A pending request is a small ``Slot`` (an ``anyio.Event`` of the backend's own type plus
  the outcome) with a deadline; nothing is spawned and no cancel scope is entered per host
  request. One timer per connection (the task that holds its task group) sleeps until the
  earliest deadline, then fails every request past its own (``RequestTimeout``, and
  ``notifications/cancelled`` is sent).
- It knows nothing of MCPL. What a server asks is handed to the ``InboundPort`` it was given:
  ``on_request()`` decides in the read loop (admitted: a job to run; refused: the error to
  answer), once. Admitted jobs wait in one queue and are run by at most
  ``limits.max_concurrent_inbound`` worker tasks, each running job after job (no task, no
  limiter and no cancel scope per request).
- Back-pressure: while ``limits.max_queued_inbound`` jobs wait, the read loop stops reading,
  so the pipe or socket fills and the server waits. It goes on reading while an inbound job
  of this connection awaits an answer from this server (that answer must be read: a handler
  calling back into its server cannot deadlock the connection); the requests it reads
  meanwhile wait too, up to ``limits.max_inbound_backlog`` more, and only beyond that is one
  answered ``-32603`` "host busy" at once (the last resort). While reading is paused, the
  end of the transport is seen when reading resumes or when a write fails.
- A server's ``notifications/cancelled`` cancels the job it names, even one that has not
  started yet, and no answer is sent (MCP 2025-11-25, "Cancellation"). ``ping`` is answered
  in every phase, inline.
- Answers go only to this connection's transport; once it has closed nothing is written
  anywhere and a budgeted log line says so (docs/protocol.md T1, T2). When it closes, every
  pending request fails at once (T3).
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections import deque
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import anyio.abc
import anyio.lowlevel

from mcpl_host.handshake import ServerInfo, initialize_params, read_initialize_result
from mcpl_host.jsonrpc.envelope import Request, Response, is_number
from mcpl_host.jsonrpc.errors import (
    ConnectionClosed,
    ConnectionLost,
    ErrorCode,
    HandlerError,
    InitializeError,
    LocalProtocolError,
    MCPLHostError,
    MessageTooLarge,
    RemoteError,
    RemoteProtocolError,
    RequestEnded,
    RequestTimeout,
    UnreadableAnswer,
    describe_seconds,
)
from mcpl_host.jsonrpc.framing import LineTooLong
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
from mcpl_host.link import AnswerHook, Link, Slot
from mcpl_host.logging import LogBudget, Redactor, ServerValue, get_logger, log_value
from mcpl_host.stateless import (
    LATEST_STATELESS_VERSION,
    EraProbe,
    FallBack,
    ProtocolChoice,
    Retry,
    after_discover_error,
    after_discover_result,
    after_initialize_refusal,
    discover_params,
    may_carry_stateless,
    stateless_capabilities,
)
from mcpl_host.transports.base import StartsServer, Transport

__all__ = [
    "DEFAULT",
    "BackgroundJob",
    "ClientInfo",
    "Connection",
    "InboundJob",
    "InboundPort",
    "ProgressCallback",
    "Timeout",
]

#: Called (from the read loop; must not block) with each ``notifications/progress`` params.
ProgressCallback = Callable[[dict[str, Any]], None]
#: An admitted server request's job, called with the request when its turn comes (one job
#: may serve many requests: nothing need be made per request): returns the ``result`` or
#: raises ``HandlerError`` to answer with that error.
InboundJob = Callable[[Request], Coroutine[Any, Any, Any]]
#: Work a notification starts (a manifest fetch, a notification-form channel message).
BackgroundJob = Callable[[], Coroutine[Any, Any, None]]


class _Default:
    """The type of ``DEFAULT``: "use ``limits.request_timeout_seconds``"."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "DEFAULT"


#: A ``timeout`` argument meaning the connection's ``limits.request_timeout_seconds``.
DEFAULT = _Default()
#: Seconds; None waits for ever; ``DEFAULT`` is the connection's request timeout.
Timeout = float | None | _Default

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

    def on_notification(self, method: str, params: Any) -> BackgroundJob | None:
        """A notification other than progress and cancellation; may return work to run."""
        ...

    def on_orphan_response(self, response: Response) -> None:
        """A response naming no pending request (a late answer; docs/protocol.md R5)."""
        ...


class _NoInbound:
    """The port of a connection nobody wired: every request is ``-32601``."""

    def on_request(self, request: Request) -> InboundJob | HandlerError:
        return HandlerError(ErrorCode.METHOD_NOT_FOUND, f"Method not found: {request.method}")

    def on_notification(self, method: str, params: Any) -> BackgroundJob | None:
        return None

    def on_orphan_response(self, response: Response) -> None:
        return None


def _as_json_text(value: Any) -> Any:
    """An id as it reads in JSON where a string and a number differ (``"1"`` and ``1``)."""
    return json.dumps(value) if isinstance(value, str) else value


class _Inbound:
    """One admitted server request (``request`` and its ``job``), or a counted
    ``background`` job, waiting for a worker, or running. ``scope`` is the cancel scope of
    the worker running it (None while it waits); ``cancelled``: the server cancelled it
    before it started."""

    __slots__ = ("background", "cancelled", "job", "request", "scope")

    def __init__(
        self, request: Request | None, job: InboundJob | None, background: BackgroundJob | None = None
    ) -> None:
        self.request = request
        self.job = job
        self.background = background
        self.scope: anyio.CancelScope | None = None
        self.cancelled = False


#: The connection whose inbound job runs in this context (set in each worker task, and so
#: inherited by the tasks a handler starts): its requests to the same server are answers
#: the read loop must go on reading for (module rules, back-pressure).
_JOB_OF: ContextVar[Connection | None] = ContextVar("mcpl_host_job_of", default=None)


def _lost_phrase(lost: ConnectionLost) -> str:
    """How a transport ended, for the era line (no server text)."""
    if lost.exit_status is not None:
        return f"the server exited with status {lost.exit_status}"
    return "the server closed its output"


def _discover_refusal(exc: RemoteError) -> str:
    """What a refusal of ``server/discover`` was, for the era line (no server text)."""
    data = exc.data
    if is_object(data) and data.get("fromHost") is True:
        status = data.get("httpStatus")
        if isinstance(status, int) and not isinstance(status, bool):
            return f"HTTP {status} without a JSON-RPC answer"
        return "its HTTP answer ended without a JSON-RPC answer"
    return f"refused with error {exc.code}"


class Connection:
    """One transport to one server: link, reader and writer, pending requests, handshake.

    Enter it (``async with``) to open the transport; then ``await handshake()``. Exiting (or
    ``aclose()``) closes everything. ``transport_factory`` returns an async context manager
    that yields a ``Transport`` (``StdioTransport``, ``WebSocketTransport``).

    ``inbound`` is where server requests and notifications go (``InboundPort``); it may be
    set after construction, before entering. ``on_lost(error)`` is called once, from the
    read loop, when the server goes away on its own (not when we close).
    """

    def __init__(
        self,
        transport_factory: Callable[[], AbstractAsyncContextManager[Transport]],
        *,
        name: str = "server",
        limits: Limits | None = None,
        redactor: Redactor | None = None,
        inbound: InboundPort | None = None,
        on_lost: Callable[[ConnectionLost], None] | None = None,
    ) -> None:
        self.name = name
        self.limits = limits or Limits()
        self.redactor = redactor or Redactor()
        self.inbound: InboundPort = inbound or _NoInbound()
        self.server_info: ServerInfo | None = None
        self._request_timeout = self.limits.request_timeout_seconds
        # Jobs waiting at which reading pauses: at least one, so a bound of 0 still reads.
        self._pause_at = max(1, self.limits.max_queued_inbound)
        self._on_lost_hook = on_lost
        self._transport_factory = transport_factory
        self._session = self._new_session()
        #: What settled the era (``stateless.EraProbe``), once the handshake has run.
        self.era_probe: EraProbe | None = None
        self._log = get_logger("mcpl_host.connection", server=name)
        self._stack: AsyncExitStack | None = None
        self._transport_stack: AsyncExitStack | None = None  # the current transport's context
        # The one handshake deadline (anyio.current_time()), from the moment of entering:
        # opening the transport, the probe, initialize, notifications/initialized and the
        # MCPL policy exchange that follows all sit under it (docs/protocol.md H7).
        self._deadline: float | None = None
        # While the era probe may restart the server, a lost transport is not reported
        # (``on_lost``) at once: it is held here, and dropped when the server is restarted.
        self._holding_loss = False
        self._held_loss: ConnectionLost | None = None
        self._tg: anyio.abc.TaskGroup | None = None  # reader, writer, timer, workers, jobs
        self._task_scope = anyio.CancelScope()  # theirs alone, not the body of `async with`
        self._ended = anyio.Event()  # the transport has ended, for any reason
        self._link: Link | None = None
        self._lost: ConnectionLost | None = None
        self._closed = False
        # The running backend's own Event class (found when the connection opens).
        self._new_event: Callable[[], anyio.Event] = anyio.Event
        # Timeouts: the earliest deadline the timer task sleeps towards, and its scope.
        self._timer_at = math.inf
        self._timer_scope: anyio.CancelScope | None = None
        # Inbound: admitted jobs waiting (``_queued`` of them not cancelled), by request id.
        self._queue: deque[_Inbound] = deque()
        self._queued = 0
        self._jobs: dict[Any, _Inbound] = {}
        self._workers = 0  # worker tasks alive
        self._starting = 0  # of them, started and not yet running
        self._running = 0  # jobs running
        self._working: set[anyio.CancelScope] = set()  # the scopes of the workers
        self._awaiting_answers = 0  # requests to this server from its own inbound jobs
        self._resume: anyio.Event | None = None  # set to wake a paused read loop
        self._progress: dict[str, ProgressCallback] = {}
        self._last_received: float | None = None  # time.monotonic() of the last line read
        self._progress_tokens = itertools.count(1)
        self._dropped = LogBudget(self.limits.dropped_lines_logged)
        self._unmatched = LogBudget(self.limits.unmatched_errors_logged)
        self._invalid = LogBudget(self.limits.invalid_requests_logged)
        self._not_answered = LogBudget(self.limits.invalid_requests_logged)
        self._busy = LogBudget(self.limits.invalid_requests_logged)
        self._look_alike: LookAlikeResponse | None = None  # the first one (warned once)
        # Lines dropped before the handshake completed: how many, and the first one.
        self._early_noise = 0
        self._early_noise_sample: DroppedLine | None = None

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
        self._new_event = type(anyio.Event())  # skips the backend look-up of anyio.Event()
        self._deadline = anyio.current_time() + self.limits.handshake_timeout_seconds
        self._stack = AsyncExitStack()
        try:
            outer = await self._stack.enter_async_context(anyio.create_task_group())
            await outer.start(self._run_tasks)
            self._start_link(await self._open_transport())
        except BaseException:
            await self.aclose()
            await self._stack.aclose()
            raise
        return self

    async def _open_transport(self) -> Transport:
        """Enter a new transport from the factory, in a context of its own (closed with the
        connection, or by ``_reopen``). Raises ``InitializeError`` when it cannot open."""
        assert self._stack is not None
        stack = AsyncExitStack()
        try:
            transport = await stack.enter_async_context(self._transport_factory())
        except ConnectionLost as exc:
            raise InitializeError(
                str(exc), exit_status=exc.exit_status, stderr_tail=exc.stderr_tail
            ) from None
        self._transport_stack = stack
        self._stack.push_async_callback(stack.aclose)  # a second aclose() does nothing
        return transport

    async def _reopen(self) -> None:
        """The era probe cost the server its transport (docs/protocol.md S3a): close the
        lost one (for stdio: SIGTERM if it still runs, and reap, bounded by the grace
        limits), then open a new one from the factory, with a new session (its ids start
        again), as if the connection had just been entered. Raises ``InitializeError``
        when the new transport cannot open."""
        stack, link = self._transport_stack, self._link
        if link is not None and isinstance(link.transport, StartsServer):
            link.transport.terminate_now()  # a server that closed its output gets no grace
        if stack is not None:
            # Not under a scope of its own: the transport's task group must be the current
            # scope when it exits (its close is shielded and bounded by the grace limits).
            await stack.aclose()
        self._session = self._new_session()
        self._lost = None
        self._held_loss = None
        self._ended = self._new_event()
        self._early_noise = 0
        self._early_noise_sample = None
        self._look_alike = None
        self._start_link(await self._open_transport())

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
                link.finish()
                with anyio.move_on_after(self.limits.close_grace_seconds):
                    await link.stopped.wait()
                link.stop_writer()
            if link is not None:
                # Before the tasks stop, so stderr written while exiting still reaches the tail.
                await link.transport.aclose()
                link.close()
            self._task_scope.cancel()
            self._ended.set()

    async def _run_tasks(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        with self._task_scope:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                task_status.started()
                await self._timer_loop()  # the task that holds the group is the timer

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
    def inbound_waiting(self) -> int:
        """Admitted server requests waiting for a worker (not yet running)."""
        return self._queued

    @property
    def phase(self) -> str:
        """The session's phase name: ``new``, ``initializing``, ``operating`` or ``closed``."""
        return self._session.phase.value

    # --- host -> server --------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: Any = None,
        *,
        timeout: Timeout = DEFAULT,
        progress: ProgressCallback | None = None,
        on_answer: AnswerHook | None = None,
        long_lived: bool = False,
        on_sent: Callable[[int], None] | None = None,
    ) -> Any:
        """Send a request and return its ``result`` (JSON-RPC 2.0 §4).

        Args:
            method, params: the request; ``params`` a dict, a list or None.
            timeout: seconds; ``DEFAULT`` is ``limits.request_timeout_seconds``; None waits
                for ever.
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
        """
        link = self._link
        if link is None or link.closed or self._closed:
            link = self._require_link()
        token = None
        if progress is not None:
            token = f"progress-{next(self._progress_tokens)}"
            params = dict(params or {})
            meta = params.get("_meta")
            params["_meta"] = {**(meta if is_object(meta) else {}), "progressToken": token}
            self._progress[token] = progress
        slot = Slot(on_answer, self.redactor, self._new_event())
        slot.long_lived = long_lived
        try:
            pending, data = self._session.start_request(method, params, slot=slot)
            try:
                link.send(data, method)
            except MessageTooLarge:
                self._session.forget(pending.id)
                raise
        except BaseException:
            if token is not None:
                del self._progress[token]
            raise
        slot.sent = now = time.monotonic()
        if on_sent is not None:
            on_sent(pending.id)
        seconds = None if long_lived else self._request_timeout if timeout is DEFAULT else timeout
        if seconds is not None:
            assert not isinstance(seconds, _Default)
            slot.deadline = deadline = now + seconds
            slot.seconds = seconds
            if deadline < self._timer_at:
                self._timer_at = deadline
                if self._timer_scope is not None:
                    self._timer_scope.cancel()  # it sleeps towards a later deadline
        in_job = _JOB_OF.get() is self
        if in_job:
            self._awaiting_answers += 1
            self._wake_reader()  # this answer must be read, back-pressure or not
        try:
            await slot.event.wait()
        except BaseException:
            if not slot.done:
                self._abandon(pending, link, "cancelled")
            raise
        finally:
            if in_job:
                self._awaiting_answers -= 1
            if token is not None:
                self._progress.pop(token, None)
        return slot.outcome()

    def notify_nowait(self, method: str, params: Any = None) -> None:
        """Queue a notification (no answer, no waiting). Raises ``ConnectionLost`` /
        ``ConnectionClosed`` when the transport is gone, ``MessageTooLarge`` when it is over
        ``limits.max_outbox_bytes`` (not sent; the connection stays up)."""
        self._require_link().send(self._session.notification(method, params), method)

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification (no answer). Raises as ``notify_nowait``."""
        self.notify_nowait(method, params)

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

    # --- timeouts ----------------------------------------------------------------------------

    async def _timer_loop(self) -> None:
        """The one timer of the connection: sleeps until the earliest deadline, then fails
        each request past its own. Settled requests are never looked at again, so it wakes
        about once per timeout period when nothing times out. Runs until the connection's
        tasks are cancelled (``aclose()``); with no open link it has nothing to fail."""
        while True:
            now = time.monotonic()
            if now >= self._timer_at:
                link = self._link
                self._timer_at = self._expire(now, link) if link is not None and not link.closed else math.inf
                continue
            with anyio.CancelScope() as scope:
                self._timer_scope = scope
                if self._timer_at == math.inf:
                    await anyio.sleep_forever()
                else:
                    await anyio.sleep(self._timer_at - now)
            self._timer_scope = None

    def _expire(self, now: float, link: Link) -> float:
        """Fail every pending request whose deadline has passed; the next deadline."""
        following = math.inf
        for pending in self._session.pending_requests():
            slot: Slot = pending.slot
            if slot.deadline <= now:
                self._abandon(pending, link, "timeout")
                slot.fail(RequestTimeout(pending.method, slot.seconds))
            elif slot.deadline < following:
                following = slot.deadline
        return following

    # --- the handshake -----------------------------------------------------------------------

    async def handshake(
        self,
        client: ClientInfo,
        mcpl_advertisement: dict[str, Any] | None,
        features: dict[str, Any] | None = None,
        *,
        protocol: ProtocolChoice = "handshake",
        on_opened: Callable[[ServerInfo], None] | None = None,
        skip_probe: str | None = None,
    ) -> ServerInfo:
        """Settle the protocol era, then run its opening (``mcpl_host.stateless`` decides,
        this does the I/O). ``mcpl_advertisement``: the host's ``experimental.mcpl`` (MCPL
        §5.2), or None to offer no MCPL; ``features``: the client feature capabilities
        served (``ClientFeatures.capabilities()``). ``on_opened`` is called with the
        server's info as soon as it is known and before the server may send anything
        else: in the handshake era in the read loop, before ``notifications/initialized``
        goes out, so what the server sends after it meets the caller's state already set
        (the MCPL policy pending: MCPL §6.7). If it raises, the handshake fails at once
        (``InitializeError``) and ``notifications/initialized`` is not sent.

        - ``protocol="handshake"``: ``initialize``, then ``notifications/initialized``
          strictly next (MCP 2025-11-25, "Lifecycle"; docs/protocol.md H1-H6).
        - ``"auto"``: where the transport may carry MCP 2026-07-28, first a
          ``server/discover`` probe (waiting at most ``limits.discover_timeout_seconds``,
          never cancelled), falling back to ``initialize`` for a handshake-era server; an
          ``initialize`` refused with ``-32022`` naming a stateless version is probed again
          at it, once.
          When the probe costs a stdio server its transport (it exits, or closes its
          output, before ``initialize`` is answered; docs/protocol.md S3a), a new transport
          is opened from the factory (a ``transports.base.StartsServer``), once, and
          ``initialize`` goes there; ``on_lost`` is not
          called for the transport lost so. ``skip_probe``: why ``"auto"`` sends no probe
          this time (``stateless.probe_skipped``): ``initialize`` first, and a ``-32022``
          refusal of it naming a stateless version is probed at that version.
        - ``"stateless"``: only ``server/discover``.

        One deadline, ``limits.handshake_timeout_seconds``, covers everything; the probe
        waits at most ``limits.discover_timeout_seconds`` and half the deadline (S3).
        ``era_probe`` says afterwards what settled the era (``stateless.EraProbe``).

        Raises:
            InitializeError: refused (with ``code``, ``data``: a ``-32022`` keeps the
                server's ``supported`` list), no protocol version in common, the server went
                away (``exit_status``, ``stderr_tail``), or no answer before the deadline
                (saying what arrived instead: lines that were not JSON-RPC, with a sample; an
                answer whose id only looks like ours).
        """
        timeout = self.limits.handshake_timeout_seconds
        deadline = self._deadline if self._deadline is not None else anyio.current_time() + timeout
        features = features or {}
        identity = {"name": client.name, "version": client.version}
        probe_timed_out = False
        restarted = False

        def remaining() -> float:
            return max(0.0, deadline - anyio.current_time())

        def failure(message: str, **extra: Any) -> InitializeError:
            extra.setdefault("stderr_tail", self.stderr_tail)
            return InitializeError(message, **extra)

        async def discover(version: str, *, window: float) -> Any:
            """The discover result, or None when no answer came within ``window``; never
            cancelled (a late answer is an orphan). Raises what the answer raises."""
            link = self._require_link()
            slot = Slot(None, self.redactor)
            params = discover_params(version, identity, stateless_capabilities(features))
            pending, data = self._session.start_request("server/discover", params, slot=slot)
            link.send(data)
            with anyio.move_on_after(window):
                await slot.event.wait()
            if not slot.event.is_set():
                self._session.forget(pending.id)
                return None
            return slot.outcome()

        async def probe(version: str, *, retried: bool) -> ServerInfo | FallBack:
            nonlocal probe_timed_out
            # S3: a silent server costs at most the probe window, and initialize keeps at
            # least half of the deadline.
            window = (
                remaining()
                if protocol == "stateless"
                else min(self.limits.discover_timeout_seconds, timeout / 2, remaining())
            )
            try:
                result = await discover(version, window=window)
            except RemoteError as exc:
                refusal = after_discover_error(
                    exc.code, exc.message, exc.data, retried=retried, redactor=self.redactor
                )
                if isinstance(refusal, InitializeError):
                    raise failure(refusal.message, code=refusal.code, data=refusal.data) from None
                if isinstance(refusal, Retry):
                    return await probe(refusal.version, retried=True)
                if protocol == "stateless":
                    raise failure(
                        f"the server refused server/discover: {log_value(exc.message, self.redactor)}",
                        code=exc.code,
                        data=exc.data,
                    ) from None
                self.era_probe = EraProbe("server/discover", _discover_refusal(exc), "initialize")
                return refusal
            except (RemoteProtocolError, UnreadableAnswer) as exc:
                if protocol == "stateless":
                    raise failure(f"the server's answer to server/discover is malformed: {exc}") from None
                self.era_probe = EraProbe("server/discover", "its answer could not be read", "initialize")
                return FallBack(str(exc))
            except ConnectionLost as exc:
                if protocol == "stateless" or not restartable:
                    raise failure(
                        f"the server went away before answering server/discover ({exc})",
                        exit_status=exc.exit_status,
                        stderr_tail=exc.stderr_tail or self.stderr_tail,
                    ) from None
                # S3a: the probe cost the server its transport; the caller starts it again.
                self.era_probe = EraProbe("server/discover", f"{_lost_phrase(exc)} before answering")
                return FallBack(f"the server went away before answering server/discover ({exc})")
            if result is None:
                probe_timed_out = True
                if protocol == "stateless":
                    raise failure(
                        f"the server did not answer server/discover within {describe_seconds(timeout)}"
                    )
                self.era_probe = EraProbe(
                    "server/discover", f"no answer within {describe_seconds(window)}", "initialize"
                )
                return FallBack("no answer to server/discover within its window")
            verdict = after_discover_result(
                result, offers_mcpl=mcpl_advertisement is not None, redactor=self.redactor
            )
            if isinstance(verdict, FallBack):
                if protocol == "stateless":
                    raise failure(f"the server cannot be spoken to statelessly: {verdict.reason}")
                self.era_probe = EraProbe("server/discover", verdict.reason, "initialize")
            else:
                self.era_probe = EraProbe(
                    "server/discover", f"answered: stateless {verdict.protocol_version}"
                )
            return verdict

        async def restart(lost: ConnectionLost) -> None:
            """S3a: once, within the deadline, a new transport for ``initialize``."""
            nonlocal restarted
            restarted = True
            self._holding_loss = False  # the restarted server's loss is its own
            self._log.info(
                "the era probe cost the server its transport; starting it again for initialize",
                reason=ServerValue(str(lost), self.redactor),
            )
            await self._reopen()

        def release_loss() -> None:
            """A loss held during the probe that no restart answered: report it now."""
            held, self._held_loss = self._held_loss, None
            if held is not None and not self._closed and self._on_lost_hook is not None:
                self._on_lost_hook(held)

        def adopt(info: ServerInfo) -> ServerInfo:
            self.server_info = info
            self._session.discover_completed()
            self._require_link().transport.negotiated(info.protocol_version)
            if on_opened is not None:
                on_opened(info)
            return info

        def initialize_answered(response: Response) -> None:
            try:
                self._on_initialize_answer(response, on_opened)
            except MCPLHostError:
                raise
            except Exception as exc:  # a bug in on_opened: the handshake fails now, saying so
                raise failure(f"the host could not take up the server's initialize result ({exc!r})") from exc

        carries = may_carry_stateless(self._require_link().transport)
        # S3a: stdio only; the HTTP transports read an answer to the probe that is no
        # JSON-RPC answer as a refusal themselves, and what still loses them there would
        # hold for initialize too.
        restartable = protocol == "auto" and isinstance(self._require_link().transport, StartsServer)
        probing = protocol != "handshake" and carries
        if protocol == "stateless" and not probing:
            raise failure("this transport does not carry the stateless MCP revision (2026-07-28)")
        if protocol == "handshake":
            self.era_probe = EraProbe(None, "not sent: the protocol is set to handshake")
        elif not carries:
            self.era_probe = EraProbe(None, "not sent: this transport does not carry MCP 2026-07-28")
        elif skip_probe is not None and protocol == "auto":
            self.era_probe = EraProbe(None, skip_probe)
            probing = False
        # Until initialize is answered, a loss that a restart answers is not reported.
        self._holding_loss = probing and restartable
        try:
            if probing:
                verdict = await probe(LATEST_STATELESS_VERSION, retried=False)
                lost = self._lost
                if restartable and lost is not None:
                    # S3a: lost at the probe (before its answer, or right after it): never a
                    # reason to lose the server; start it again and speak initialize.
                    probe_record = self.era_probe
                    if probe_record is not None and probe_record.fallback is not None:  # answered, then lost
                        outcome = f"{probe_record.outcome}, then {_lost_phrase(lost)}"
                    else:
                        outcome = probe_record.outcome if probe_record is not None else _lost_phrase(lost)
                    self.era_probe = EraProbe("server/discover", outcome, "initialize on a restarted server")
                    await restart(lost)
                if isinstance(verdict, ServerInfo):
                    return adopt(verdict)
                self._log.debug("speaking the handshake era", reason=verdict.reason)
            while True:
                try:
                    await self.request(
                        "initialize",
                        initialize_params(client.name, client.version, mcpl_advertisement, features),
                        timeout=remaining(),
                        on_answer=initialize_answered,
                    )
                except RemoteError as exc:  # H2 included: an id-less error answers initialize
                    retry = after_initialize_refusal(
                        exc.code, exc.data, probed=probing and not probe_timed_out
                    )
                    if retry is not None and protocol != "handshake":
                        verdict = await probe(retry.version, retried=True)
                        if isinstance(verdict, ServerInfo):
                            return adopt(verdict)
                    supported = exc.data.get("supported") if is_object(exc.data) else None
                    named = (
                        f" (it supports: {log_value(supported, self.redactor)})"
                        if supported is not None
                        else ""
                    )
                    raise failure(
                        f"the server refused initialize: {log_value(exc.message, self.redactor)}{named}",
                        code=exc.code,
                        data=exc.data,
                    ) from None
                except (RemoteProtocolError, UnreadableAnswer) as exc:
                    raise failure(f"the server's answer to initialize is malformed: {exc}") from None
                except RequestTimeout:
                    nor = " (nor server/discover before it)" if probe_timed_out else ""
                    raise failure(
                        f"the server did not answer initialize within {describe_seconds(timeout)}{nor}"
                        + self._what_came_instead()
                    ) from None
                except ConnectionLost as exc:  # H5: at once, with exit status and stderr tail
                    if restartable and probing and not restarted:
                        # S3a: the probe cost the server its transport after all: it read the
                        # probe after its window, or answered it and then went away.
                        before = self.era_probe.outcome if self.era_probe is not None else "no answer"
                        self.era_probe = EraProbe(
                            "server/discover",
                            f"{before}, then {_lost_phrase(exc)}",
                            "initialize on a restarted server",
                        )
                        await restart(exc)
                        continue
                    raise failure(
                        f"the server went away before answering initialize ({exc})",
                        exit_status=exc.exit_status,
                        stderr_tail=exc.stderr_tail or self.stderr_tail,
                    ) from None
                break
        finally:
            self._holding_loss = False
            release_loss()
        # H7: notifications/initialized is a step of the handshake too. Over HTTP its POST
        # is written when the server accepts it; what follows is queued behind it.
        link = self._link
        if link is not None:
            with anyio.move_on_after(remaining()):
                await link.wait_written()
            if not link.closed and link.queued_bytes:
                raise failure(
                    f"the server did not take notifications/initialized within {describe_seconds(timeout)}"
                    " (the handshake deadline)"
                )
        info = self.server_info
        assert info is not None  # set by _on_initialize_answer before the waiter woke
        return info

    def _what_came_instead(self) -> str:
        """For a handshake timeout: what the server wrote that was not the answer."""
        parts: list[str] = []
        sample = self._early_noise_sample
        if sample is not None:
            count = self._early_noise
            lines = "line" if count == 1 else "lines"
            parts.append(
                f"{count} {lines} on its output could not be read as JSON-RPC; the first "
                f"({sample.kind}): {log_value(sample.line, self.redactor)}"
            )
        look_alike = self._look_alike
        if look_alike is not None and look_alike.resembles.method == "initialize":
            parts.append(
                "an answer arrived with the id "
                f"{log_value(_as_json_text(look_alike.response.id), self.redactor)}, which only looks like the "
                f"id {look_alike.resembles.id} of initialize (JSON-RPC 2.0 §5: the same value and type)"
            )
        return "".join(f"; {part}" for part in parts)

    def _on_initialize_answer(
        self, response: Response, on_opened: Callable[[ServerInfo], None] | None
    ) -> None:
        """Runs in the read loop, before the next line is read: H6's ordering lives here.
        Raises ``InitializeError`` for a result we cannot use (D4)."""
        if response.has_error:
            return
        self.server_info = read_initialize_result(response.result, self.redactor)
        self._session.initialize_completed()
        assert self._link is not None
        self._link.transport.negotiated(self.server_info.protocol_version)
        if on_opened is not None:
            on_opened(self.server_info)
        # Strictly the first message after the answer: real servers expect it (H6).
        self._link.send(self._session.notification("notifications/initialized"))

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
        session, on_event, receive = self._session, self._on_event, link.transport.receive
        max_queued = self._pause_at
        try:
            while True:
                if self._queued >= max_queued and not self._awaiting_answers:
                    await self._paused(link)
                item = await receive()
                self._last_received = time.monotonic()
                try:
                    if type(item) is bytes:
                        event = session.receive(item)
                    else:
                        assert isinstance(item, LineTooLong)
                        event = session.receive_oversize(item)
                    if event is not None:
                        on_event(event, link)
                except Exception:  # a bug here, or in a port's hook: never the connection
                    self._log.exception("failed to act on a line from the server")
        except (ConnectionLost, ConnectionClosed) as exc:
            self._lost_link(exc, link)

    async def _paused(self, link: Link) -> None:
        """Back-pressure: read nothing until a waiting job starts, or an inbound job of
        this connection awaits an answer from this server, or the link closes."""
        max_queued = self._pause_at
        while self._queued >= max_queued and not self._awaiting_answers and not link.closed:
            self._resume = resume = self._new_event()
            await resume.wait()
        self._resume = None

    def _wake_reader(self) -> None:
        resume = self._resume
        if resume is not None:
            resume.set()

    def _lost_link(self, exc: BaseException, link: Link) -> None:
        """``link``'s transport ended (a link that is no longer the current one, after
        ``_reopen``, is ignored)."""
        if link is not self._link or link.closed:
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
        failure: BaseException = exc if isinstance(exc, (ConnectionLost, ConnectionClosed)) else lost
        for pending in self._session.close():  # T3: fail at once
            pending.slot.fail(failure)
        for waiting in self._queue:  # never started: never answered (T1)
            waiting.cancelled = True
        self._queue.clear()
        self._queued = 0
        self._jobs.clear()
        for scope in self._working:
            scope.cancel()
        self._wake_reader()
        if self._timer_scope is not None:
            self._timer_scope.cancel()
        if self._holding_loss:
            self._held_loss = lost
        elif not self._closed and self._on_lost_hook is not None:
            self._on_lost_hook(lost)

    # --- what the server sends -----------------------------------------------------------------

    def _on_event(self, event: SessionEvent, link: Link) -> None:
        if type(event) is ResponseSettled:
            event.pending.slot.settle(event.response)  # runs its on_answer first (wire order)
        elif isinstance(event, RequestReceived):
            self._on_request(event.request, link)
        elif isinstance(event, NotificationReceived):
            self._on_notification(event.notification.method, event.notification.params)
        elif isinstance(event, UnreadableResponse):  # unreadable: fail it at once, saying why
            self._log.warning("an answer could not be read", method=event.pending.method, reason=event.reason)
            event.pending.slot.fail(UnreadableAnswer(event.pending.method, event.reason))
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
            self._on_orphan(event)
        elif isinstance(event, UnmatchedError):
            self._on_unmatched(event)
        elif isinstance(event, LookAlikeResponse):
            self._on_look_alike(event)
        elif isinstance(event, DroppedLine):
            if self._session.phase is not Phase.OPERATING:
                self._early_noise += 1
                if self._early_noise_sample is None:
                    self._early_noise_sample = event
            self._log_dropped(event.kind, event.line)

    def _on_orphan(self, event: OrphanResponse) -> None:
        self._log.debug(
            "late answer to a forgotten request", id=ServerValue(event.response.id, self.redactor)
        )
        self.inbound.on_orphan_response(event.response)

    def _on_unmatched(self, event: UnmatchedError) -> None:
        self._log_budgeted(
            self._unmatched,
            "error response naming no request of ours",
            error=ServerValue(event.response.error, self.redactor),
        )

    def _on_look_alike(self, event: LookAlikeResponse) -> None:
        """D2: never matched; said once per connection, at warning level, so that the
        operator can see why a call times out. Then handled as what it otherwise is."""
        if self._look_alike is None:
            self._look_alike = event
            self._log.warning(
                "an answer's id only looks like the id of a pending request and is not taken as"
                " its answer (JSON-RPC 2.0 §5: the same value and type); the request will time"
                " out unless a real answer comes. Said once per connection",
                id=ServerValue(_as_json_text(event.response.id), self.redactor),
                resembles=event.resembles.id,
                method=event.resembles.method,
            )
        if isinstance(event.then, OrphanResponse):
            self._on_orphan(event.then)
        elif isinstance(event.then, UnmatchedError):
            self._on_unmatched(event.then)

    def _on_request(self, request: Request, link: Link) -> None:
        if link.closed:  # T2: read after its transport closed
            self._not_answering(request)
            return
        if request.method == "ping":  # answered in every phase
            link.send(self._session.answer(request.id, result={}))
            return
        decision = self.inbound.on_request(request)  # admission, once
        if isinstance(decision, HandlerError):
            link.send(self._session.answer(request.id, error=decision.to_error()))
            return
        limits = self.limits
        if self._queued >= self._pause_at + limits.max_inbound_backlog:
            # The last resort (module rules): read on for an awaited answer, with the backlog full.
            self._log_budgeted(
                self._busy,
                "answered a server request 'host busy': the inbound queue and its backlog are full"
                " while a handler awaits an answer from this server (Limits.max_queued_inbound,"
                " Limits.max_inbound_backlog)",
                method=ServerValue(request.method, self.redactor),
            )
            link.send(
                self._session.answer(
                    request.id, error={**_INTERNAL_ERROR, "message": "Internal error: host busy"}
                )
            )
            return
        item = _Inbound(request, decision)
        if request.id is not None:
            # Registered before it starts: a cancellation read in the same chunk finds it.
            self._jobs[request.id] = item
        self._enqueue(item)

    def _enqueue(self, item: _Inbound) -> None:
        self._queue.append(item)
        self._queued += 1
        self._add_worker()

    def _add_worker(self) -> None:
        """Start one more worker while jobs wait, none is starting, and fewer than
        ``max_concurrent_inbound`` run. A worker about to run a job calls this too, so the
        workers grow one at a time, only while the running ones yield (a job that waits):
        jobs that never wait are run back to back by one worker, with no task started each."""
        if self._starting == 0 and self._queued > 0 and self._workers < self.limits.max_concurrent_inbound:
            assert self._tg is not None
            self._starting += 1
            self._workers += 1
            self._tg.start_soon(self._worker)

    async def _worker(self) -> None:
        """Runs waiting jobs one after another until none is left. One cancel scope serves
        many jobs: it is replaced only after a job it cancelled (``notifications/cancelled``).
        A request's job is awaited here, not in a coroutine of its own (``_answered`` then
        sends its answer)."""
        # Yield once first: the tasks woken by the lines read before this job (the waiter of
        # an answer, such as the policy exchange) run before it, as they would in wire order.
        _JOB_OF.set(self)
        queue, session = self._queue, self._session
        try:
            try:
                await anyio.lowlevel.checkpoint()
            finally:
                self._starting -= 1
            while queue:
                with anyio.CancelScope() as scope:
                    self._working.add(scope)
                    try:
                        while queue and not scope.cancel_called:
                            item = queue.popleft()
                            if item.cancelled:
                                continue
                            self._queued -= 1
                            if self._resume is not None and self._queued < self._pause_at:
                                self._resume.set()
                            item.scope = scope
                            self._add_worker()  # it starts if this job waits
                            request, job = item.request, item.job
                            if request is None or job is None:
                                await self._run_background(item)
                                continue
                            self._running += 1
                            answer: bytes | None = None
                            try:
                                try:
                                    result = await job(request)
                                    answer = session.answer(request.id, result=result)
                                except HandlerError as exc:
                                    answer = session.answer(request.id, error=exc.to_error())
                                except Exception:  # R3: -32603 with no exception text on the wire
                                    self._log.exception("handler failed", method=ServerValue(request.method))
                                    answer = session.answer(request.id, error=_INTERNAL_ERROR)
                            finally:  # a cancellation (the server's, or the connection's) sends no answer
                                self._answered(item, request, answer)
                    finally:
                        self._working.discard(scope)
        finally:
            self._workers -= 1

    async def _run_background(self, item: _Inbound) -> None:
        self._running += 1
        try:
            assert item.background is not None
            await item.background()
        except Exception:
            self._log.exception("background job failed")
        finally:
            self._running -= 1
            item.scope = None

    def _answered(self, item: _Inbound, request: Request, answer: bytes | None) -> None:
        """A request's job is over: send its ``answer`` (None: cancelled, nothing is sent)
        on its own transport, unless that has closed (T1)."""
        self._running -= 1
        item.scope = None
        if self._jobs.get(request.id) is item:
            del self._jobs[request.id]
        link = self._link
        assert link is not None
        if link.closed:  # T1: its transport has gone; never answered on another one
            self._not_answering(request)
            return
        if answer is None:
            return
        try:
            link.send(answer)
        except MessageTooLarge as exc:
            self._log.error(
                "an answer is too large to send; answering -32603 instead",
                method=ServerValue(request.method, self.redactor),
                size=exc.size,
                limit=exc.limit,
            )
            link.send(self._session.answer(request.id, error=_INTERNAL_ERROR))

    def start_job(self, job: BackgroundJob, *, counted: bool = True) -> bool:
        """Run ``job`` in this connection's task group (it ends with the connection). With
        ``counted``, it waits its turn like a server request (at most
        ``max_concurrent_inbound`` run) and is refused (False) while ``max_queued_inbound``
        wait."""
        if self._tg is None or not self.is_open:
            return False
        if counted:
            if self._queued >= self.limits.max_queued_inbound:
                return False
            self._enqueue(_Inbound(None, None, job))
        else:
            self._tg.start_soon(job)
        return True

    def _not_answering(self, request: Request) -> None:
        self._log_budgeted(
            self._not_answered,
            "not answering request",
            id=ServerValue(request.id, self.redactor),
            method=ServerValue(request.method, self.redactor),
        )

    def _on_notification(self, method: str, params: Any) -> None:
        if method == "notifications/progress" and is_object(params):
            token = params.get("progressToken")
            callback = self._progress.get(token) if isinstance(token, str) else None
            if callback is not None:
                callback(params)
        elif method == "notifications/cancelled" and is_object(params):
            request_id = params.get("requestId")
            ended = type(request_id) is int and self._end_long_lived(request_id)
            if not ended and (isinstance(request_id, str) or is_number(request_id)):
                item = self._jobs.pop(request_id, None)
                if item is not None:  # MCP: stop work and do not reply
                    if item.scope is not None:
                        item.scope.cancel()
                    elif not item.cancelled:
                        item.cancelled = True
                        self._queued -= 1
                        self._wake_reader()
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
            self.start_job(job, counted=False)

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

    def log_budgeted(self, budget: LogBudget, message: str, **fields: Any) -> None:
        """A warning line under ``budget``, then one "more go unlogged" line, then silence."""
        verdict = budget.take()
        if verdict == "log":
            self._log.warning(message, **fields)
        elif verdict == "last":
            self._log.warning(f"{message}: more of these go unlogged on this connection")

    _log_budgeted = log_budgeted

    def _log_dropped(self, kind: str, line: bytes) -> None:
        self._log_budgeted(
            self._dropped, "dropped a line from the server", kind=kind, line=ServerValue(line, self.redactor)
        )

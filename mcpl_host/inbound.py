"""``InboundPool``: the admitted server requests of one connection, their queue and the
worker tasks that serve them.

Rules of this module (docs/protocol.md, "Routing"; JSON-RPC 2.0 §4-§5; MCP 2025-11-25,
"Cancellation"):

- Admitted jobs wait in one queue and are run by at most ``limits.max_concurrent_inbound``
  worker tasks, each running job after job (no task, no limiter and no cancel scope per
  request). Workers start one at a time, only while the running ones wait
  (``starts_worker``): jobs that never wait are run back to back by one worker.
- Back-pressure: while ``limits.max_queued_inbound`` jobs wait, the connection's read loop
  stops reading (``reader_pauses``), so the pipe or socket fills and the server waits. It
  goes on reading while an inbound job of this connection awaits an answer from this server
  (that answer must be read: a handler calling back into its server cannot deadlock the
  connection); the requests it reads meanwhile wait too, up to
  ``limits.max_inbound_backlog`` more, and only beyond that is one answered ``-32603``
  "host busy" at once (``over_backlog``; the last resort).
- A server's ``notifications/cancelled`` cancels the job it names, even one that has not
  started yet, and no answer is sent. A handler's exception is answered ``-32603`` with no
  exception text on the wire (docs/protocol.md R3).
- An answer goes only to the transport its request came on; once that has closed nothing is
  written anywhere and a budgeted log line says so (docs/protocol.md T1, T2).
- An ``EagerJob`` (a job that can often answer without waiting) is answered at once, in the
  read loop, when no other admitted request waits for its turn (``queue``): handlers still
  start in wire order, and a request answered at once has nothing to cancel. When its
  ``now`` says ``LATER``, or others wait, it is queued like any job.

The decisions (``starts_worker``, ``reader_pauses``, ``over_backlog``) are pure; the pool
runs its workers in the connection's task group (``open``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from mcpl_host.jsonrpc.envelope import Request
from mcpl_host.jsonrpc.errors import ErrorCode, HandlerError, MessageTooLarge
from mcpl_host.jsonrpc.session import Session
from mcpl_host.limits import Limits
from mcpl_host.link import Link, Waiter
from mcpl_host.logging import LogBudget, Logger, Redactor, ServerValue

__all__ = [
    "LATER",
    "BackgroundJob",
    "EagerJob",
    "InboundJob",
    "InboundPool",
    "over_backlog",
    "reader_pauses",
    "starts_worker",
]

#: An admitted server request's job, called with the request when its turn comes (one job
#: may serve many requests: nothing need be made per request): returns the ``result`` or
#: raises ``HandlerError`` to answer with that error.
InboundJob = Callable[[Request], Coroutine[Any, Any, Any]]
#: Work a notification starts (a manifest fetch, a notification-form channel message).
BackgroundJob = Callable[[], Coroutine[Any, Any, None]]

#: What ``EagerJob.now`` returns when the request must wait for its turn as a job.
LATER: Any = object()


class EagerJob:
    """An inbound job that may answer at once (module rules): ``now(request)`` is called in
    the read loop and returns the ``result`` as compact JSON text (``framing.dumps_json``),
    or ``LATER``; it must never wait or raise. Called as a job (``InboundJob``), it runs
    ``later(request)``."""

    __slots__ = ("later", "now")

    def __init__(self, now: Callable[[Request], bytes], later: InboundJob) -> None:
        self.now = now
        self.later = later

    def __call__(self, request: Request) -> Coroutine[Any, Any, Any]:
        return self.later(request)


_INTERNAL_ERROR = {"code": int(ErrorCode.INTERNAL_ERROR), "message": "Internal error"}
_HOST_BUSY = {**_INTERNAL_ERROR, "message": "Internal error: host busy"}


def starts_worker(waiting: int, workers: int, starting: int, max_workers: int) -> bool:
    """Whether one more worker starts: jobs are ``waiting``, none of the ``workers`` alive is
    still ``starting``, and fewer than ``max_workers`` (``limits.max_concurrent_inbound``)
    are alive. Pure."""
    return starting == 0 and waiting > 0 and workers < max_workers


def reader_pauses(waiting: int, awaiting_answers: int, pause_at: int) -> bool:
    """Whether the read loop stops reading: ``pause_at`` jobs or more are ``waiting`` and no
    inbound job awaits an answer from the server (``awaiting_answers``). Pure."""
    return waiting >= pause_at and not awaiting_answers


def over_backlog(waiting: int, pause_at: int, backlog: int) -> bool:
    """Whether a request read on past the pause (for an awaited answer) finds the queue and
    its ``backlog`` (``limits.max_inbound_backlog``) full: it is answered "host busy".
    Pure."""
    return waiting >= pause_at + backlog


class _Inbound:
    """One admitted server request (``request``, its ``job`` and the ``link`` it came on),
    or a counted ``background`` job, waiting for a worker, or running. ``scope`` is the
    cancel scope of the worker running it (None while it waits); ``cancelled``: the server
    cancelled it before it started."""

    __slots__ = ("background", "cancelled", "job", "link", "request", "scope")

    def __init__(
        self,
        request: Request | None,
        job: InboundJob | None,
        link: Link | None,
        background: BackgroundJob | None = None,
    ) -> None:
        self.request = request
        self.job = job
        self.link = link
        self.background = background
        self.scope: anyio.CancelScope | None = None
        self.cancelled = False


#: The pool whose inbound job runs in this context (set in each worker task, and so
#: inherited by the tasks a handler starts): its requests to the same server are answers
#: the read loop must go on reading for (module rules, back-pressure).
_JOB_OF: ContextVar[InboundPool | None] = ContextVar("mcpl_host_job_of", default=None)


class InboundPool:
    """The queue and the workers of one connection's admitted server requests (module rules).

    ``open(task_group, new_event)`` when the connection's tasks start; ``is_open()`` says
    whether the connection still takes jobs (``start_job``). ``waiting`` counts the jobs
    queued and not cancelled; ``awaiting_answers`` the requests to the server made from
    this pool's jobs.
    """

    __slots__ = (
        "_background",
        "_busy",
        "_is_open",
        "_jobs",
        "_log",
        "_max_workers",
        "_new_event",
        "_not_answered",
        "_queue",
        "_redactor",
        "_resume",
        "_starting",
        "_tg",
        "_workers",
        "_working",
        "awaiting_answers",
        "backlog",
        "max_queued",
        "pause_at",
        "running",
        "waiting",
    )

    def __init__(
        self, limits: Limits, *, log: Logger, redactor: Redactor, is_open: Callable[[], bool]
    ) -> None:
        self._log = log
        self._redactor = redactor
        self._is_open = is_open
        self._max_workers = limits.max_concurrent_inbound
        self.max_queued = limits.max_queued_inbound
        # Jobs waiting at which reading pauses: at least one, so a bound of 0 still reads.
        self.pause_at = max(1, limits.max_queued_inbound)
        self.backlog = limits.max_inbound_backlog
        self._tg: anyio.abc.TaskGroup | None = None
        self._new_event: Callable[[], Waiter] = anyio.Event
        self._queue: deque[_Inbound] | None = None  # made by the first job (an idle connection has none)
        self.waiting = 0  # of the queue, not cancelled
        self._jobs: dict[Any, _Inbound] = {}  # by request id, waiting or running
        self._workers = 0  # worker tasks alive
        self._starting = 0  # of them, started and not yet running
        self.running = 0  # jobs running
        self._working: set[anyio.CancelScope] = set()  # the scopes of the workers
        self._background: set[anyio.CancelScope] = set()  # of the jobs not counted, running
        self.awaiting_answers = 0  # requests to the server from this pool's jobs
        self._resume: Waiter | None = None  # set to wake a paused read loop
        self._not_answered = LogBudget(limits.invalid_requests_logged)
        self._busy = LogBudget(limits.invalid_requests_logged)

    def open(self, task_group: anyio.abc.TaskGroup, new_event: Callable[[], Waiter]) -> None:
        """Run the workers in ``task_group`` (the connection's); ``new_event`` makes the
        running backend's own event (``link.native_event_type``)."""
        self._tg = task_group
        self._new_event = new_event

    # --- server requests -------------------------------------------------------------------

    def queue(self, request: Request, job: InboundJob, link: Link) -> None:
        """Queue an admitted ``request`` (read on ``link``) with its ``job``; answered
        "host busy" at once when the queue and its backlog are full; an ``EagerJob`` is
        answered at once while nothing waits (module rules)."""
        if isinstance(job, EagerJob):
            if not self.waiting:
                result = job.now(request)
                if result is not LATER:
                    self._send_answer(request, link, Session.answer_text(request.id, result))
                    return
            job = job.later
        if over_backlog(self.waiting, self.pause_at, self.backlog):
            self._busy.warn(
                self._log,
                "answered a server request 'host busy': the inbound queue and its backlog are full"
                " while a handler awaits an answer from this server (Limits.max_queued_inbound,"
                " Limits.max_inbound_backlog)",
                method=ServerValue(request.method, self._redactor),
            )
            link.send(Session.answer(request.id, error=_HOST_BUSY))
            return
        item = _Inbound(request, job, link)
        if request.id is not None:
            # Registered before it starts: a cancellation read in the same chunk finds it.
            self._jobs[request.id] = item
        self._enqueue(item)

    def start_job(self, job: BackgroundJob, *, counted: bool = True) -> bool:
        """Run ``job`` in the connection's task group (it ends with the connection). With
        ``counted``, it waits its turn like a server request (at most
        ``max_concurrent_inbound`` run) and is refused (False) while ``max_queued_inbound``
        wait; False too once the connection has closed."""
        if self._tg is None or not self._is_open():
            return False
        if counted:
            if self.waiting >= self.max_queued:
                return False
            self._enqueue(_Inbound(None, None, None, job))
        else:
            self._tg.start_soon(self._run_uncounted, job)
        return True

    async def _run_uncounted(self, job: BackgroundJob) -> None:
        with anyio.CancelScope() as scope:
            self._background.add(scope)
            try:
                await job()
            finally:
                self._background.discard(scope)

    def cancel(self, request_id: object) -> None:
        """The server's ``notifications/cancelled`` for ``request_id`` (a string or a
        number): its job stops (running) or never starts (waiting); no answer is sent."""
        item = self._jobs.pop(request_id, None)
        if item is None:
            return
        if item.scope is not None:
            item.scope.cancel()
        elif not item.cancelled:
            item.cancelled = True
            self.waiting -= 1
            self.wake_reader()

    def cancel_all(self) -> None:
        """The transport ended: jobs never started are never answered (T1); running ones
        are cancelled; a paused read loop wakes."""
        queue = self._queue
        if queue is not None:
            for waiting in queue:
                waiting.cancelled = True
            queue.clear()
        self.waiting = 0
        self._jobs.clear()
        for scope in self._working:
            scope.cancel()
        self.wake_reader()

    def close(self) -> None:
        """The connection closed: as ``cancel_all``, and the jobs not counted that still run
        are cancelled too (those that end with the connection on their own, such as the
        stall watch, cost no cancel). Every task of the pool then ends."""
        self.cancel_all()
        for scope in self._background:
            scope.cancel()

    def not_answering(self, request: Request) -> None:
        """Say (budgeted) that ``request`` is not answered: its transport has closed (T1, T2)."""
        self._not_answered.warn(
            self._log,
            "not answering request",
            id=ServerValue(request.id, self._redactor),
            method=ServerValue(request.method, self._redactor),
        )

    # --- back-pressure ---------------------------------------------------------------------

    async def paused(self, link: Link) -> None:
        """Back-pressure: return when a waiting job starts, or an inbound job of this pool
        awaits an answer from the server, or ``link`` closes."""
        while reader_pauses(self.waiting, self.awaiting_answers, self.pause_at) and not link.closed:
            self._resume = resume = self._new_event()
            await resume.wait()
        self._resume = None

    def wake_reader(self) -> None:
        resume = self._resume
        if resume is not None:
            resume.set()

    def in_job(self) -> bool:
        """Whether the calling task runs one of this pool's jobs (or was started by one)."""
        return _JOB_OF.get() is self

    def answer_awaited(self) -> None:
        """A job of this pool sent a request to the server: its answer must be read,
        back-pressure or not (module rules). ``answer_settled`` when it is over."""
        self.awaiting_answers += 1
        self.wake_reader()

    def answer_settled(self) -> None:
        self.awaiting_answers -= 1

    # --- workers ---------------------------------------------------------------------------

    def _enqueue(self, item: _Inbound) -> None:
        queue = self._queue
        if queue is None:
            queue = self._queue = deque()
        queue.append(item)
        self.waiting += 1
        self._add_worker()

    def _add_worker(self) -> None:
        """Start one more worker if ``starts_worker`` says so. A worker about to run a job
        calls this too, so the workers grow one at a time, only while the running ones
        yield (a job that waits)."""
        if starts_worker(self.waiting, self._workers, self._starting, self._max_workers):
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
        queue, answer = self._queue, Session.answer
        assert queue is not None  # a worker starts for a job queued
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
                            self.waiting -= 1
                            if self._resume is not None and self.waiting < self.pause_at:
                                self._resume.set()
                            item.scope = scope
                            self._add_worker()  # it starts if this job waits
                            request, job = item.request, item.job
                            # Dropped before any job: a background one runs holding no answer.
                            line: bytes | None = None
                            if request is None or job is None:
                                await self._run_background(item)
                                continue
                            self.running += 1
                            try:
                                try:
                                    # No local holds the result: the next job runs
                                    # with nothing of this one's answer kept.
                                    line = answer(request.id, result=await job(request))
                                except HandlerError as exc:
                                    line = answer(request.id, error=exc.to_error())
                                except Exception:  # R3: -32603 with no exception text on the wire
                                    self._log.exception("handler failed", method=ServerValue(request.method))
                                    line = answer(request.id, error=_INTERNAL_ERROR)
                            finally:  # a cancellation (the server's, or the connection's) sends no answer
                                self._answered(item, request, line)
                    finally:
                        self._working.discard(scope)
        finally:
            self._workers -= 1

    async def _run_background(self, item: _Inbound) -> None:
        self.running += 1
        try:
            assert item.background is not None
            await item.background()
        except Exception:
            self._log.exception("background job failed")
        finally:
            self.running -= 1
            item.scope = None

    def _answered(self, item: _Inbound, request: Request, line: bytes | None) -> None:
        """A request's job is over: send its answer ``line`` (None: cancelled, nothing is
        sent) on the transport it came on, unless that has closed (T1)."""
        self.running -= 1
        item.scope = None
        if self._jobs.get(request.id) is item:
            del self._jobs[request.id]
        link = item.link
        assert link is not None
        if link.closed:  # T1: its transport has gone; never answered on another one
            self.not_answering(request)
            return
        if line is None:
            return
        self._send_answer(request, link, line)

    def _send_answer(self, request: Request, link: Link, line: bytes) -> None:
        """Send ``line``, the answer to ``request``, on ``link``; one over the outbox bound
        is answered ``-32603`` instead (and logged)."""
        try:
            link.send(line)
        except MessageTooLarge as exc:
            self._log.error(
                "an answer is too large to send; answering -32603 instead",
                method=ServerValue(request.method, self._redactor),
                size=exc.size,
                limit=exc.limit,
            )
            link.send(Session.answer(request.id, error=_INTERNAL_ERROR))

"""Small I/O records of a connection: the ``Link`` to one transport and the pending ``Slot``.

A ``Link`` is one transport with its outbox: ``send()`` never waits. On an idle link whose
transport offers ``send_now()`` (the stdio pipe) it writes what the transport takes at once,
in the caller's task; everything else is queued, and one writer task joins everything queued
into a single write (docs/architecture.md, "Outgoing traffic"). A ``Slot`` is a pending
request's waiter: a ``Waiter`` (an event) plus the outcome.

The connection's events (the writer's, the pool's) are the running backend's own
(``native_event_type``): ``asyncio.Event`` or ``trio.Event``, which anyio's ``Event`` only
wraps (its wrapper costs a Python call more on each ``set`` and ``wait``, and two on making
one). A slot, made for every request and waited on by its requester alone, has a
``slot_waiter_type``: on asyncio a ``FutureWaiter`` (``_asyncio_waiter``), a bare future
(an ``asyncio.Event`` also takes a global lock at its first wait, and keeps a list of
waiters); on trio a ``TrioWaiter`` (``_trio_waiter``), its task parked and rescheduled (a
``trio.Event`` parks it in a parking lot of its own). Each is loaded only in a run of its
backend. All are cancelled by anyio's cancel scopes like any wait.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

import anyio

from mcpl_host._tasks import LazyEvent, Waiter  # (Waiter: named here for the link's users)
from mcpl_host.jsonrpc.envelope import Response
from mcpl_host.jsonrpc.errors import (
    ConnectionClosed,
    ConnectionLost,
    MCPLHostError,
    MessageTooLarge,
    RemoteError,
    RemoteProtocolError,
)
from mcpl_host.jsonrpc.values import is_object
from mcpl_host.logging import Redactor
from mcpl_host.transports.base import Transport

__all__ = [
    "AnswerHook",
    "Link",
    "Slot",
    "Waiter",
    "native_event_type",
    "response_outcome",
    "slot_waiter_type",
]

#: Runs in the read loop when a request's answer arrives, before the next line is read.
AnswerHook = Callable[[Response], None]


def native_event_type() -> Callable[[], Waiter]:
    """The running backend's own event type (module docstring): ``trio.Event`` in a trio
    run, ``asyncio.Event`` in an asyncio one, else ``anyio.Event``. Call it in a task."""
    trio: Any = sys.modules.get("trio")  # (neither is imported unless it runs)
    if trio is not None:
        try:
            trio.lowlevel.current_task()
        except RuntimeError:
            pass
        else:
            return trio.Event  # type: ignore[no-any-return]
    asyncio: Any = sys.modules.get("asyncio")
    if asyncio is not None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            return asyncio.Event  # type: ignore[no-any-return]
    return anyio.Event


def slot_waiter_type(event_type: Callable[[], Waiter]) -> Callable[[], Waiter]:
    """The waiter type of a ``Slot`` (module docstring), given ``native_event_type()``:
    ``FutureWaiter`` on asyncio, ``TrioWaiter`` on trio, else that event type."""
    asyncio: Any = sys.modules.get("asyncio")
    if asyncio is not None and event_type is asyncio.Event:
        from mcpl_host._asyncio_waiter import FutureWaiter

        return FutureWaiter
    trio: Any = sys.modules.get("trio")
    if trio is not None and event_type is trio.Event:
        from mcpl_host._trio_waiter import TrioWaiter

        return TrioWaiter
    return event_type


def response_outcome(response: Response, redactor: Redactor | None = None) -> Any:
    """The ``result`` of a response, or raise its error (JSON-RPC 2.0 §5).

    Raises:
        RemoteError: the response carries a well-formed error object.
        RemoteProtocolError: the error member is not an object with an integer ``code``.
    """
    if not response.has_error:
        return response.result
    error = response.error
    if is_object(error):
        code = error.get("code")
        if isinstance(code, int) and not isinstance(code, bool):
            message = error.get("message")
            return_message = message if isinstance(message, str) else ""
            raise RemoteError(code, return_message, error.get("data"), redactor=redactor)
    raise RemoteProtocolError("the server answered with a malformed error object")


class Slot:
    """The waiter of one pending request: settled once with a response, or failed.

    ``on_answer``, if given, runs in the read loop when the answer arrives, before the next
    line is read and before the waiter wakes: what must take effect in wire order (sending
    ``notifications/initialized``, putting a grant in force on its receipt) happens there. If
    it raises an ``MCPLHostError``, the request fails with it.

    ``event`` is the waiter's ``Waiter`` (the connection makes it with the event type of
    its backend, found once). ``deadline`` (``time.monotonic()`` seconds; ``math.inf``: none)
    and ``seconds`` (the timeout it came from) are the shell's, read by its timer; ``total``
    (seconds or None) is the cap when progress starts the timeout again; ``sent``
    (``time.monotonic()`` seconds) is when the request went out. ``long_lived``: a request
    whose answer may never come (``subscriptions/listen``): no deadline, not ``waiting``,
    and the server may end it with ``notifications/cancelled``.
    """

    __slots__ = (
        "_error",
        "_on_answer",
        "_redactor",
        "_response",
        "deadline",
        "done",
        "event",
        "long_lived",
        "seconds",
        "sent",
        "total",
    )

    def __init__(
        self,
        on_answer: AnswerHook | None = None,
        redactor: Redactor | None = None,
        event: Waiter | None = None,
    ) -> None:
        self.event: Waiter = anyio.Event() if event is None else event
        self.done = False
        self._on_answer = on_answer
        self._redactor = redactor
        self._response: Response | None = None
        self._error: BaseException | None = None
        self.deadline = math.inf
        self.seconds = 0.0
        self.sent = 0.0
        self.total: float | None = None
        self.long_lived = False

    def settle(self, response: Response) -> None:
        if self.done:
            return
        if self._on_answer is not None:
            try:
                self._on_answer(response)
            except MCPLHostError as exc:
                self.fail(exc)
                return
        self._response = response
        self.done = True
        self.event.set()

    def fail(self, error: BaseException) -> None:
        if not self.done:
            self._error = error
            self.done = True
            self.event.set()

    def outcome(self) -> Any:
        """The result; raises the failure or the server's error."""
        if self._error is not None:
            raise self._error
        response = self._response
        assert response is not None
        if not response.has_error:
            return response.result
        return response_outcome(response, self._redactor)


class Link:
    """One transport of a connection and its outbox, written by one writer task (and, on an
    idle link, by ``send()`` itself through the transport's ``send_now()``: see ``send()``).

    The outbox is bounded: one message larger than ``max_outbox_bytes`` is refused to its
    sender (``MessageTooLarge``) and the link stays up; past ``max_outbox_bytes`` queued in
    all (a server that stopped reading its input), the link is declared lost through
    ``on_lost`` instead of growing memory.

    The writer runs shielded from outer cancellation, so what is queued when the connection
    closes still goes out (a ``notifications/cancelled``, an answer), and the transport is
    closed only after it: ``finish()`` asks it to write what is queued and stop;
    ``stop_writer()`` stops it at once (after the close grace).
    """

    __slots__ = (
        "_drained",
        "_finishing",
        "_held",
        "_max_outbox",
        "_new_event",
        "_on_lost",
        "_outbox",
        "_ready",
        "_send_now",
        "_settled",
        "_told",
        "_writer_scope",
        "_writing",
        "closed",
        "stopped",
        "transport",
    )

    def __init__(
        self,
        transport: Transport,
        *,
        max_outbox_bytes: int,
        on_lost: Callable[[BaseException], None],
        new_event: Callable[[], Waiter] = anyio.Event,
    ) -> None:
        self.transport = transport
        self._send_now: Callable[[bytes], int] | None = getattr(transport, "send_now", None)
        self._new_event = new_event
        self.closed = False
        self._max_outbox = max_outbox_bytes
        self._on_lost = on_lost
        # One growing buffer, not a list of small bytes objects (orjson's output carries a
        # few KiB of spare capacity each, so a list would hold many times the counted bytes).
        self._outbox = bytearray()
        self._writing = 0  # bytes handed to the transport and not yet written
        self._held = False  # a message went out in its sender's task since the writer's turn
        self._settled = 0  # answers read since the writer's turn (``answered``)
        self._ready = new_event()
        self._told = False  # ``_ready`` was set by ``send()`` since the writer's turn
        self._finishing = False
        self._writer_scope = anyio.CancelScope(shield=True)
        self._drained: Waiter | None = None  # set when the outbox has been written
        #: Set when the writer task has returned (or never started).
        self.stopped = LazyEvent(new_event)  # waited on only by a close with bytes queued

    def send(self, data: bytes, method: str | None = None) -> None:
        """Queue whole lines for the writer; a closed link drops them (docs/protocol.md T1).
        When nothing is queued or being written and the transport offers ``send_now()``
        (``SendsNow``), what it takes at once is written here, in the caller's task.

        Raises:
            MessageTooLarge: ``data`` alone is over ``max_outbox_bytes`` (``method`` names it
                in the error); nothing was queued.
        """
        if self.closed or self._finishing:
            return
        size = len(data)
        if size > self._max_outbox:
            raise MessageTooLarge(size, self._max_outbox, method)
        if self._writing + len(self._outbox) + size > self._max_outbox:
            self._on_lost(
                ConnectionLost(
                    f"the server is not reading its input: more than {self._max_outbox} bytes"
                    " are waiting to be written"
                )
            )
            return
        if self._send_now is not None and not self._held and not self._writing and not self._outbox:
            # The writer is idle and was since its last turn: what the transport takes at
            # once goes out now, in this task. Whatever follows before the writer's next
            # turn is queued and goes out in one write (one write per turn, as before).
            self._held = True
            self._told = True
            self._ready.set()
            written = self._send_now(data)
            if written == size:
                return
            data = data[written:]
        self._outbox += data
        if not self._told:  # once per turn of the writer: many answers are queued per turn
            self._told = True
            self._ready.set()

    def answered(self) -> None:
        """An answer to one of our requests was read. From the second since the writer's
        last turn, messages are queued for the writer rather than written at once: the
        tasks those answers wake are about to send together, and one write takes them all
        (the sender of a lone answer's next request still writes at once)."""
        self._settled += 1
        if self._settled > 1:
            self._held = True

    @property
    def queued_bytes(self) -> int:
        """Bytes waiting for the writer, plus those it is writing now."""
        return self._writing + len(self._outbox)

    async def wait_written(self) -> None:
        """Wait until everything queued so far has been handed to the transport and written
        (for an HTTP transport: the server accepted it), or the link closed. The caller
        bounds the wait (a handshake step: docs/protocol.md H7)."""
        while (self._writing or self._outbox) and not self.closed:
            self._drained = drained = self._new_event()
            await drained.wait()

    def _tell_drained(self) -> None:
        drained = self._drained
        if drained is not None and (self.closed or not (self._writing or self._outbox)):
            self._drained = None
            drained.set()

    def close(self) -> None:
        """The transport is gone: drop what is queued and stop the writer."""
        self.closed = True
        self._outbox = bytearray()
        self._ready.set()
        self.stop_writer()
        self._tell_drained()

    def finish(self) -> None:
        """Write what is queued, then stop; later ``send()`` calls are dropped."""
        self._finishing = True
        self._ready.set()

    def stop_writer(self) -> None:
        """Stop the writer now, even in the middle of a write (nothing to do once it has
        stopped: a cancel costs anyio a formatted repr of the current task)."""
        if not self.stopped.is_set():
            self._writer_scope.cancel()

    async def write_loop(self) -> None:
        """The writer task: write everything queued in one call, repeat until closed or
        finished. Shielded from outer cancellation (see the class docstring)."""
        try:
            with self._writer_scope:
                while not self.closed:
                    await self._ready.wait()
                    self._ready = self._new_event()
                    self._told = False
                    self._held = False
                    self._settled = 0
                    if self._outbox:
                        data = bytes(self._outbox)
                        self._outbox = bytearray()
                        self._writing = len(data)
                        try:
                            await self.transport.send(data)
                        except (ConnectionLost, ConnectionClosed) as exc:
                            self._on_lost(exc)
                            return
                        self._writing = 0
                        del data  # nothing written is held while the writer waits for more
                        self._tell_drained()
                    if self._finishing and not self._outbox:
                        return
        finally:
            self.stopped.set()

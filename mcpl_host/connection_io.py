"""Small I/O records of a connection: the per-transport ``Link`` and the pending ``Slot``.

A ``Link`` is one transport with its epoch and its outbox: ``send()`` queues whole lines
without waiting, and one writer task joins everything queued into a single write (DESIGN.md
"the hot path"). A ``Slot`` is a pending request's waiter: an ``anyio.Event`` plus the outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from mcpl_host.jsonrpc.envelope import Response
from mcpl_host.jsonrpc.errors import (
    ConnectionClosed,
    ConnectionLost,
    MCPLHostError,
    RemoteError,
    RemoteProtocolError,
)
from mcpl_host.transports.base import Transport

__all__ = ["Link", "Slot", "response_outcome"]


def response_outcome(response: Response, redactor: Any = None) -> Any:
    """The ``result`` of a response, or raise its error (JSON-RPC 2.0 §5).

    Raises:
        RemoteError: the response carries a well-formed error object.
        RemoteProtocolError: the error member is not an object with an integer ``code``.
    """
    if not response.has_error:
        return response.result
    error = response.error
    if isinstance(error, dict):
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
    ``notifications/initialized``, activating a grant on its receipt) happens there. If it
    raises an ``MCPLHostError``, the request fails with it.
    """

    __slots__ = ("_error", "_on_answer", "_redactor", "_response", "event")

    def __init__(self, on_answer: Callable[[Response], None] | None = None, redactor: Any = None) -> None:
        self.event = anyio.Event()
        self._on_answer = on_answer
        self._redactor = redactor
        self._response: Response | None = None
        self._error: BaseException | None = None

    def settle(self, response: Response) -> None:
        if self.event.is_set():
            return
        if self._on_answer is not None:
            try:
                self._on_answer(response)
            except MCPLHostError as exc:
                self.fail(exc)
                return
        self._response = response
        self.event.set()

    def fail(self, error: BaseException) -> None:
        if not self.event.is_set():
            self._error = error
            self.event.set()

    def outcome(self) -> Any:
        """The result; raises the failure or the server's error."""
        if self._error is not None:
            raise self._error
        assert self._response is not None
        return response_outcome(self._response, self._redactor)


class Link:
    """One transport of a connection, with its epoch (ENVELOPE.md T1) and its outbox.

    The outbox is bounded: past ``max_outbox_bytes`` queued (a server that stopped reading
    its input), the link is declared lost through ``on_lost`` instead of growing memory.
    """

    __slots__ = (
        "_drained",
        "_max_outbox",
        "_on_lost",
        "_outbox",
        "_ready",
        "_writing",
        "closed",
        "epoch",
        "transport",
    )

    def __init__(
        self,
        transport: Transport,
        epoch: int,
        *,
        max_outbox_bytes: int,
        on_lost: Callable[[Link, BaseException], None],
    ) -> None:
        self.transport = transport
        self.epoch = epoch
        self.closed = False
        self._max_outbox = max_outbox_bytes
        self._on_lost = on_lost
        # One growing buffer, not a list of small bytes objects (orjson's output carries a
        # few KiB of spare capacity each, so a list would hold many times the counted bytes).
        self._outbox = bytearray()
        self._writing = 0  # bytes handed to the transport and not yet written
        self._ready = anyio.Event()
        self._drained = anyio.Event()
        self._drained.set()

    def send(self, data: bytes) -> None:
        """Queue whole lines for the writer; a closed link drops them (T1)."""
        if self.closed:
            return
        if self._writing + len(self._outbox) + len(data) > self._max_outbox:
            self._on_lost(
                self,
                ConnectionLost(
                    f"the server is not reading its input: more than {self._max_outbox} bytes"
                    " are waiting to be written"
                ),
            )
            return
        self._outbox += data
        if self._drained.is_set():
            self._drained = anyio.Event()
        self._ready.set()

    def close(self) -> None:
        self.closed = True
        self._outbox = bytearray()
        self._ready.set()
        self._drained.set()

    async def drained(self) -> None:
        """Wait until everything queued so far has been written (or the link closed)."""
        await self._drained.wait()

    async def write_loop(self) -> None:
        """The writer task: write everything queued in one call, repeat until closed."""
        while not self.closed:
            await self._ready.wait()
            self._ready = anyio.Event()
            if not self._outbox:
                continue
            data = bytes(self._outbox)
            self._outbox = bytearray()
            self._writing = len(data)
            try:
                await self.transport.send(data)
            except (ConnectionLost, ConnectionClosed) as exc:
                self._on_lost(self, exc)
                return
            self._writing = 0
            if not self._outbox:
                self._drained.set()

"""The sans-I/O core of one connection: lines in, events out; ids, pending, phase.

Rules of this module (docs/protocol.md, "Routing", "Handshake", "Transports"; JSON-RPC 2.0
§4-§5):

- No ``await``, no clock, no logging. The shell (``connection.py``) feeds each line with
  ``receive_line(line)`` and acts on the events returned; it turns host calls into
  bytes with ``start_request`` / ``notification`` / ``answer``.
- Every line goes through ``envelope.classify`` once. What happens next depends only on
  the phase and the class, in ``_route`` (one table; no scattered phase checks).
- Host request ids are integers from a per-connection counter, never reused (R5). A response
  settles a pending request only when its id is an ``int`` equal to ours (D2): the string
  ``"0"`` and the float ``0.0`` never settle request 0. Server request ids live in their
  own space: a request (it has ``method``) never settles anything.
- A session lives exactly as long as one transport (each transport is a new connection), so
  when the transport closes, ``close()`` hands back every pending request to be failed at once;
  no answer can cross to another transport (docs/protocol.md T1-T3).
- A line that cannot be read (over ``max_line_bytes``: ``receive_too_long``; JSON nested
  beyond the parser bounds: ``receive_line``) is not simply dropped when its first bytes
  show the answer to one of our requests (``framing.peek_envelope``: an integer ``id`` of
  ours, ``result`` or ``error``, neither ``method`` nor ``params``): that request is settled
  with ``UnreadableResponse``, to be failed at once with the reason. Otherwise it is a
  ``DroppedLine`` whose ``kind`` gives the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeAlias

from mcpl_host.jsonrpc.envelope import (
    NO_ID,
    Invalid,
    Notification,
    Request,
    Response,
    Unrelated,
    classify,
)
from mcpl_host.jsonrpc.errors import LocalProtocolError
from mcpl_host.jsonrpc.framing import JSONTooDeep, LineTooLong, dumps_message, loads_line, peek_envelope
from mcpl_host.limits import (
    DEFAULT_LINE_HEAD_BYTES,
    DEFAULT_MAX_DEEP_JSON_BYTES,
    DEFAULT_MAX_JSON_DEPTH,
    DEFAULT_MAX_PENDING_REQUESTS,
)

__all__ = [
    "DroppedLine",
    "InvalidRequestReceived",
    "NotificationReceived",
    "OrphanResponse",
    "PendingRequest",
    "Phase",
    "RequestReceived",
    "ResponseSettled",
    "Session",
    "SessionEvent",
    "UnmatchedError",
    "UnreadableResponse",
]


class Phase(Enum):
    """Where the connection is in its life (MCP 2025-11-25, "Lifecycle"; docs/protocol.md H1-H6)."""

    #: Nothing sent yet; only ``initialize`` (and the ``server/discover`` probe) may be started.
    NEW = "new"
    #: ``initialize`` is in flight: ping answered, other traffic ignored (H2-H4).
    INITIALIZING = "initializing"
    #: The answer arrived and ``notifications/initialized`` went out: normal traffic.
    OPERATING = "operating"
    #: Closed by the host; nothing more is sent.
    CLOSED = "closed"


@dataclass(eq=False, slots=True)
class PendingRequest:
    """One host request awaiting its answer. ``slot`` is the shell's opaque waiter."""

    id: int
    method: str
    slot: Any = None


# --- events returned by receive_line -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RequestReceived:
    """A server request to dispatch (or, while initializing, a ``ping`` to answer; H3)."""

    request: Request


@dataclass(frozen=True, slots=True)
class NotificationReceived:
    """A server notification, after the handshake (H3/H4: ignored before it)."""

    notification: Notification


@dataclass(frozen=True, slots=True)
class ResponseSettled:
    """The answer to one of our pending requests; the pending entry is removed."""

    pending: PendingRequest
    response: Response


@dataclass(frozen=True, slots=True)
class OrphanResponse:
    """A response whose string or number id names no pending request (R5, D2)."""

    response: Response


@dataclass(frozen=True, slots=True)
class UnmatchedError:
    """A JSON-RPC 2.0 error response that cannot name a request of ours (R5, H4); logged."""

    response: Response


@dataclass(frozen=True, slots=True)
class InvalidRequestReceived:
    """An invalid request (E5). ``answer`` is the ``-32600`` line to write, or None while
    initializing (H3: not echoed)."""

    invalid: Invalid
    answer: bytes | None


@dataclass(frozen=True, slots=True)
class DroppedLine:
    """A line that is not JSON, or JSON that is not JSON-RPC (R6), or a line that cannot be
    read and answers nothing of ours. ``kind``: why; ``line``: the line (for a line over
    ``max_line_bytes``, its first bytes)."""

    kind: str
    line: bytes


@dataclass(frozen=True, slots=True)
class UnreadableResponse:
    """The answer to one of our pending requests that cannot be read: a line over
    ``max_line_bytes``, or JSON beyond the parser bounds (``framing.JSONTooDeep``). The
    pending entry is removed; fail it at once (``UnreadableAnswer(pending.method, reason)``).
    ``reason`` names the size or depth and the bound; ``head``: the line's first bytes."""

    pending: PendingRequest
    reason: str
    head: bytes


SessionEvent: TypeAlias = (
    RequestReceived
    | NotificationReceived
    | ResponseSettled
    | OrphanResponse
    | UnmatchedError
    | InvalidRequestReceived
    | DroppedLine
    | UnreadableResponse
)


@dataclass(slots=True)
class Session:
    """JSON-RPC state of one connection to one server. See the module rules."""

    max_pending: int = DEFAULT_MAX_PENDING_REQUESTS
    #: Parser bounds (``Limits.max_json_depth``, ``max_deep_json_bytes``) and the bytes of an
    #: unreadable line read for its id (``Limits.line_head_bytes``).
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    max_deep_json_bytes: int = DEFAULT_MAX_DEEP_JSON_BYTES
    line_head_bytes: int = DEFAULT_LINE_HEAD_BYTES
    phase: Phase = Phase.NEW
    _next_id: int = 1
    _pending: dict[int, PendingRequest] = field(default_factory=dict[int, PendingRequest])
    _initialize_id: int | None = None

    # --- outgoing --------------------------------------------------------------------------

    def start_request(self, method: str, params: Any, *, slot: Any = None) -> tuple[PendingRequest, bytes]:
        """Allocate an id, register the pending request, return it and the line to write.

        Raises:
            LocalProtocolError: the connection is closed, the handshake has not completed
                (only ``initialize`` first, and ``ping``), or ``max_pending`` requests are
                already in flight.
        """
        if self.phase is Phase.CLOSED:
            raise LocalProtocolError(f"cannot send {method!r}: the connection is closed")
        if method == "initialize":
            if self.phase is not Phase.NEW:
                raise LocalProtocolError("initialize was already sent on this session")
            self.phase = Phase.INITIALIZING
        elif method == "server/discover":
            pass  # the era probe (MCP 2026-07-28 "Versioning and Compatibility"): any phase
        elif self.phase is not Phase.OPERATING and method != "ping":
            raise LocalProtocolError(f"cannot send {method!r} before the handshake completes")
        if len(self._pending) >= self.max_pending:
            raise LocalProtocolError(
                f"too many requests in flight ({self.max_pending}); raise max_pending_requests"
            )
        request_id = self._next_id
        self._next_id += 1
        pending = PendingRequest(id=request_id, method=method, slot=slot)
        self._pending[request_id] = pending
        if method == "initialize":
            self._initialize_id = request_id
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        return pending, dumps_message(message)

    def forget(self, request_id: int) -> PendingRequest | None:
        """Stop waiting for ``request_id`` (timeout or cancellation): a later answer is an
        orphan (R5). Returns the pending entry, or None if it was already settled."""
        return self._pending.pop(request_id, None)

    def initialize_completed(self) -> None:
        """Enter ``OPERATING``: the shell has queued ``notifications/initialized`` (H6)."""
        if self.phase is Phase.INITIALIZING:
            self.phase = Phase.OPERATING

    def discover_completed(self) -> None:
        """Enter ``OPERATING`` without ``initialize``: a ``server/discover`` result settled
        the stateless era (MCP 2026-07-28: there is no handshake)."""
        if self.phase in (Phase.NEW, Phase.INITIALIZING):
            self.phase = Phase.OPERATING

    def close(self) -> list[PendingRequest]:
        """Enter ``CLOSED``; return every pending request, to be failed."""
        self.phase = Phase.CLOSED
        pending = list(self._pending.values())
        self._pending.clear()
        return pending

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    @staticmethod
    def notification(method: str, params: Any = None) -> bytes:
        """The line for a notification (JSON-RPC 2.0 §4.1: no id)."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        return dumps_message(message)

    @staticmethod
    def answer(request_id: Any, *, result: Any = None, error: dict[str, Any] | None = None) -> bytes:
        """The line answering request ``request_id`` (echoed with its type; R1: null too)."""
        if error is not None:
            return dumps_message({"jsonrpc": "2.0", "id": request_id, "error": error})
        return dumps_message({"jsonrpc": "2.0", "id": request_id, "result": {} if result is None else result})

    # --- incoming --------------------------------------------------------------------------

    def receive_line(self, line: bytes) -> list[SessionEvent]:
        """Parse, classify and route one line read from the transport."""
        if not line.strip():
            return []
        try:
            value = loads_line(line, max_depth=self.max_json_depth, max_deep_bytes=self.max_deep_json_bytes)
        except JSONTooDeep as exc:
            return self._unreadable(line[: self.line_head_bytes], str(exc))
        except ValueError:
            return [DroppedLine(kind="not JSON", line=line)]
        return self._route(classify(value), line)

    def receive_too_long(self, item: LineTooLong) -> list[SessionEvent]:
        """Route a line the transport dropped for its length (``LineTooLong``, with its
        first bytes): ``UnreadableResponse`` if it answers a pending request of ours, else
        ``DroppedLine``."""
        reason = f"a line of {item.size} bytes is over Limits.max_line_bytes = {item.max_line_bytes} bytes"
        return self._unreadable(item.head, reason)

    def _unreadable(self, head: bytes, reason: str) -> list[SessionEvent]:
        peek = peek_envelope(head)
        # D2: only an int equal to one of ours names a request of ours.
        if peek.is_response and type(peek.id) is int:
            pending = self._pending.pop(peek.id, None)
            if pending is not None:
                return [UnreadableResponse(pending, reason, head)]
        return [DroppedLine(kind=reason, line=head)]

    def _route(self, message: Any, line: bytes) -> list[SessionEvent]:
        initializing = self.phase in (Phase.NEW, Phase.INITIALIZING)
        if isinstance(message, Response):
            return self._route_response(message, initializing)
        if isinstance(message, Request):
            # H3: while initializing only ping is answered; other requests are ignored.
            if initializing and message.method != "ping":
                return []
            return [RequestReceived(message)]
        if isinstance(message, Notification):
            # H3/H4: notifications before the answer are ignored and disturb nothing.
            return [] if initializing else [NotificationReceived(message)]
        if isinstance(message, Invalid):
            # A1: answered once with -32600, never dispatched; H3: not echoed while initializing.
            answer = None if initializing else self.answer(message.answer_id, error=message.error)
            return [InvalidRequestReceived(message, answer)]
        assert isinstance(message, Unrelated)
        # R6: ignored, counted as a dropped line.
        return [DroppedLine(kind=f"not a JSON-RPC message ({message.kind})", line=line)]

    def _route_response(self, response: Response, initializing: bool) -> list[SessionEvent]:
        response_id = response.id
        # D2: only an int equal to one of ours settles (bool and float never do).
        if type(response_id) is int:
            pending = self._pending.pop(response_id, None)
            if pending is not None:
                return [ResponseSettled(pending, response)]
        if response.has_usable_id:
            # R5: a string or number id naming nothing of ours: an orphan (late answer).
            # H4: while initializing, other unmatched responses are ignored.
            return [] if initializing else [OrphanResponse(response)]
        # The id is null, absent, or not a string or number: it cannot be ours.
        if initializing and response.is_jsonrpc_error and (response_id is None or response_id is NO_ID):
            # H2: an id-less (or id-null) JSON-RPC 2.0 error is initialize's answer.
            if self._initialize_id is not None:
                pending = self._pending.pop(self._initialize_id, None)
                if pending is not None:
                    return [ResponseSettled(pending, response)]
        # R5/H4: logged only when it is a JSON-RPC 2.0 error; otherwise silent.
        return [UnmatchedError(response)] if response.is_jsonrpc_error else []

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
  beyond the parser bounds, or a line that cannot be parsed at all (not UTF-8, not JSON
  after its id, an integer of more digits than the interpreter converts: the reason of
  ``framing.NotReadableJSON``): ``receive_line``) is not simply dropped when its bytes
  show the answer to one of our requests (``framing.peek_envelope``: an integer ``id`` of
  ours, ``result`` or ``error``, neither ``method`` nor ``params``): that request is settled
  with ``UnreadableResponse``, to be failed at once with the reason. Otherwise it is a
  ``DroppedLine`` whose ``kind`` gives the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple, TypeAlias

from mcpl_host.jsonrpc.envelope import (
    NO_ID,
    Invalid,
    Notification,
    Request,
    Response,
    Unrelated,
    classify,
    tuple_new,
)
from mcpl_host.jsonrpc.errors import LocalProtocolError
from mcpl_host.jsonrpc.framing import (
    JSONTooDeep,
    LineTooLong,
    dumps_json,
    dumps_message,
    loads_line,
    peek_envelope,
)
from mcpl_host.limits import (
    DEFAULT_LINE_HEAD_BYTES,
    DEFAULT_MAX_DEEP_JSON_BYTES,
    DEFAULT_MAX_JSON_DEPTH,
    DEFAULT_MAX_PENDING_REQUESTS,
)

__all__ = [
    "DroppedLine",
    "InvalidRequestReceived",
    "LookAlikeResponse",
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


_OPERATING = Phase.OPERATING
#: The pieces of an answer around its id and its result (``Session.answer_text``): what
#: ``dumps_message`` writes for ``{"jsonrpc": "2.0", "id": ..., "result": ...}``.
_ANSWER_HEAD = b'{"jsonrpc":"2.0","id":'
_RESULT_KEY = b',"result":'
#: The same answer for an id that is an exact ``int`` (the usual one), written by ``%``: ``%d``
#: writes an integer's digits as ``dumps_json`` does (exactly, at any size).
_INT_ANSWER = b'{"jsonrpc":"2.0","id":%d,"result":%b}\n'


@dataclass(eq=False, slots=True)
class PendingRequest:
    """One host request awaiting its answer. ``slot`` is the shell's opaque waiter."""

    id: int
    method: str
    slot: Any = None


# --- events returned by receive_line -------------------------------------------------------


class RequestReceived(NamedTuple):
    """A server request to dispatch (or, while initializing, a ``ping`` to answer; H3).
    (This and ``ResponseSettled``, made for nearly every line, are named tuples: immutable,
    and a third of the cost of a frozen dataclass.)"""

    request: Request


class NotificationReceived(NamedTuple):
    """A server notification, after the handshake (H3/H4: ignored before it). A named
    tuple, as ``RequestReceived``."""

    notification: Notification


class ResponseSettled(NamedTuple):
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
    ``max_line_bytes``, JSON beyond the parser bounds (``framing.JSONTooDeep``), or a line
    that cannot be parsed (``framing.NotReadableJSON``). The
    pending entry is removed; fail it at once (``UnreadableAnswer(pending.method, reason)``).
    ``reason`` names the size or depth and the bound; ``head``: the line's first bytes."""

    pending: PendingRequest
    reason: str
    head: bytes


@dataclass(frozen=True, slots=True)
class LookAlikeResponse:
    """A response whose id is not ours but looks like the id of a pending request of ours
    (``"1"``, ``1.0`` or ``true`` for request 1): it settles nothing (D2), and the shell says
    so once per connection, naming ``resembles``. ``then`` is what the response is
    otherwise (an ``OrphanResponse``, an ``UnmatchedError``, or None when it is ignored)."""

    response: Response
    resembles: PendingRequest
    then: OrphanResponse | UnmatchedError | None


SessionEvent: TypeAlias = (
    RequestReceived
    | NotificationReceived
    | ResponseSettled
    | OrphanResponse
    | UnmatchedError
    | InvalidRequestReceived
    | DroppedLine
    | UnreadableResponse
    | LookAlikeResponse
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

    def start_request(
        self, method: str, params: object, *, slot: object = None
    ) -> tuple[PendingRequest, bytes]:
        """Allocate an id, register the pending request, return it and the line to write.

        Raises:
            LocalProtocolError: the connection is closed, the handshake has not completed
                (only ``initialize`` first, and ``ping``), or ``max_pending`` requests are
                already in flight.
        """
        if self.phase is not Phase.OPERATING or method == "initialize":
            self._check_phase(method)
        if len(self._pending) >= self.max_pending:
            raise LocalProtocolError(
                f"too many requests in flight ({self.max_pending}); raise max_pending_requests"
            )
        request_id = self._next_id
        self._next_id = request_id + 1
        pending = PendingRequest(request_id, method, slot)
        self._pending[request_id] = pending
        if method == "initialize":
            self._initialize_id = request_id
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        return pending, dumps_message(message)

    def _check_phase(self, method: str) -> None:
        if self.phase is Phase.CLOSED:
            raise LocalProtocolError(f"cannot send {method!r}: the connection is closed")
        if method == "initialize":
            if self.phase is not Phase.NEW:
                raise LocalProtocolError("initialize was already sent on this session")
            self.phase = Phase.INITIALIZING
        elif method not in ("ping", "server/discover"):  # the era probe (MCP 2026-07-28,
            # "Versioning and Compatibility") goes out in any phase
            raise LocalProtocolError(f"cannot send {method!r} before the handshake completes")

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

    def pending(self) -> list[PendingRequest]:
        """Every pending request, in the order they were sent."""
        return list(self._pending.values())

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def pending_requests(self) -> list[PendingRequest]:
        """Every request awaiting its answer (a copy: the shell may forget some meanwhile)."""
        return list(self._pending.values())

    def is_pending(self, pending: PendingRequest) -> bool:
        """Whether ``pending`` still awaits its answer."""
        return self._pending.get(pending.id) is pending

    @staticmethod
    def notification(method: str, params: object = None) -> bytes:
        """The line for a notification (JSON-RPC 2.0 §4.1: no id)."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        return dumps_message(message)

    @staticmethod
    def answer(request_id: object, *, result: object = None, error: dict[str, Any] | None = None) -> bytes:
        """The line answering request ``request_id`` (echoed with its type; R1: null too)."""
        if error is not None:
            return dumps_message({"jsonrpc": "2.0", "id": request_id, "error": error})
        return dumps_message({"jsonrpc": "2.0", "id": request_id, "result": {} if result is None else result})

    @staticmethod
    def answer_text(request_id: object, result_text: bytes) -> bytes:
        """``answer(request_id, result=...)`` for a result given as its compact JSON text
        (``framing.dumps_json``, or kept as such), spliced in without parsing or serialising
        it again; the id goes through ``dumps_json`` (echoed with its type; R1), an exact
        ``int`` through ``%d`` (a ``bool`` is none: it is written ``true`` or ``false``)."""
        if type(request_id) is int:
            return _INT_ANSWER % (request_id, result_text)
        return b"".join((_ANSWER_HEAD, dumps_json(request_id), _RESULT_KEY, result_text, b"}\n"))

    # --- incoming --------------------------------------------------------------------------

    def receive_line(self, line: bytes) -> list[SessionEvent]:
        """Parse, classify and route one line read from the transport (``receive``, as a
        list of at most one event)."""
        event = self.receive(line)
        return [] if event is None else [event]

    def receive(self, line: bytes) -> SessionEvent | None:
        """Parse, classify and route one line read from the transport: its event, or None
        when it asks for nothing (a blank line, a message ignored in this phase).

        The common line costs one orjson parse and one ``classify``; the slower checks run
        only when the parse fails (``framing.loads_line``)."""
        try:
            value = loads_line(line, self.max_json_depth, self.max_deep_json_bytes)
        except JSONTooDeep as exc:
            return self._unreadable(line[: self.line_head_bytes], str(exc))
        except ValueError as exc:
            if not line.strip():
                return None
            return self._unparsable(line, str(exc))
        message = classify(value)
        if type(message) is Response:
            # D2: only an int equal to one of ours settles (bool and float never do).
            if type(message.id) is int:
                pending = self._pending.pop(message.id, None)
                if pending is not None:
                    return tuple_new(ResponseSettled, (pending, message))  # as RequestReceived
            return self._route_response(message, self.phase is not _OPERATING)
        if type(message) is Request and self.phase is _OPERATING:  # the usual server request
            return tuple_new(RequestReceived, (message,))  # a named tuple, without its Python __new__
        if type(message) is Notification and self.phase is _OPERATING:  # as _route says
            return tuple_new(NotificationReceived, (message,))
        return self._route(message, line)

    def receive_too_long(self, item: LineTooLong) -> list[SessionEvent]:
        """Route a line the transport dropped for its length (``LineTooLong``, with its
        first bytes): ``UnreadableResponse`` if it answers a pending request of ours, else
        ``DroppedLine``."""
        return [self.receive_oversize(item)]

    def receive_oversize(self, item: LineTooLong) -> SessionEvent:
        """``receive_too_long``, as the one event."""
        reason = f"a line of {item.size} bytes is over Limits.max_line_bytes = {item.max_line_bytes} bytes"
        return self._unreadable(item.head, reason)

    def _unreadable(self, head: bytes, reason: str) -> SessionEvent:
        peek = peek_envelope(head)
        # D2: only an int equal to one of ours names a request of ours.
        if peek.is_response and type(peek.id) is int:
            pending = self._pending.pop(peek.id, None)
            if pending is not None:
                return UnreadableResponse(pending, reason, head)
        return DroppedLine(kind=reason, line=head)

    def _unparsable(self, line: bytes, reason: str) -> SessionEvent:
        """A line that cannot be parsed (``framing.NotReadableJSON``: ``reason``): the
        pending request its id still names (read by ``peek_envelope`` from the whole line,
        which the transport has bounded) fails at once; any other is dropped, "not JSON"."""
        peek = peek_envelope(line)
        # D2: only an int equal to one of ours names a request of ours.
        if peek.is_response and type(peek.id) is int:
            pending = self._pending.pop(peek.id, None)
            if pending is not None:
                return UnreadableResponse(pending, reason, line[: self.line_head_bytes])
        return DroppedLine(kind="not JSON", line=line)

    def _route(self, message: object, line: bytes) -> SessionEvent | None:
        initializing = self.phase in (Phase.NEW, Phase.INITIALIZING)
        if isinstance(message, Response):
            return self._route_response(message, initializing)
        if isinstance(message, Request):
            # H3: while initializing only ping is answered; other requests are ignored.
            if initializing and message.method != "ping":
                return None
            return RequestReceived(message)
        if isinstance(message, Notification):
            # H3/H4: notifications before the answer are ignored and disturb nothing.
            return None if initializing else NotificationReceived(message)
        if isinstance(message, Invalid):
            # A1: answered once with -32600, never dispatched; H3: not echoed while initializing.
            answer = None if initializing else self.answer(message.answer_id, error=message.error)
            return InvalidRequestReceived(message, answer)
        assert isinstance(message, Unrelated)
        # R6: ignored, counted as a dropped line.
        return DroppedLine(kind=f"not a JSON-RPC message ({message.kind})", line=line)

    def _route_response(self, response: Response, initializing: bool) -> SessionEvent | None:
        response_id = response.id
        # D2: only an int equal to one of ours settles (bool and float never do).
        if type(response_id) is int:
            pending = self._pending.pop(response_id, None)
            if pending is not None:
                return ResponseSettled(pending, response)
        event = self._unmatched(response, initializing)
        if isinstance(event, ResponseSettled):
            return event
        resembles = self._resembled(response_id)
        return event if resembles is None else LookAlikeResponse(response, resembles, event)

    def _unmatched(
        self, response: Response, initializing: bool
    ) -> ResponseSettled | OrphanResponse | UnmatchedError | None:
        response_id = response.id
        if response.has_usable_id:
            # R5: a string or number id naming nothing of ours: an orphan (late answer).
            # H4: while initializing, other unmatched responses are ignored.
            return None if initializing else OrphanResponse(response)
        # The id is null, absent, or not a string or number: it cannot be ours.
        if initializing and response.is_jsonrpc_error and (response_id is None or response_id is NO_ID):
            # H2: an id-less (or id-null) JSON-RPC 2.0 error is initialize's answer.
            if self._initialize_id is not None:
                pending = self._pending.pop(self._initialize_id, None)
                if pending is not None:
                    return ResponseSettled(pending, response)
        # R5/H4: logged only when it is a JSON-RPC 2.0 error; otherwise silent.
        return UnmatchedError(response) if response.is_jsonrpc_error else None

    def _resembled(self, response_id: object) -> PendingRequest | None:
        """The pending request whose id ``response_id`` only looks like (D2: never matched):
        the string of its digits, an integral float, or ``true`` for 1."""
        if isinstance(response_id, bool):
            number: int | None = int(response_id)
        elif isinstance(response_id, float):
            number = int(response_id) if response_id.is_integer() else None
        elif isinstance(response_id, str) and 0 < len(response_id.strip()) <= 20:
            text = response_id.strip()
            number = int(text) if text.lstrip("-").isdigit() and text.isascii() else None
        else:
            number = None
        return None if number is None else self._pending.get(number)

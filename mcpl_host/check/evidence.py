"""What ``mcpl-host check`` saw: the wire transcript of each session and the outcomes of the
requests it made. Pure data; the runner fills it, the rules read it.

Rules of this module:

- A ``Transcript`` records every line of one session in both directions, in the order
  read or written, each as a ``WireMessage`` classified once by the package's envelope rule
  (``mcpl_host.jsonrpc.envelope.classify``, after ``framing.loads_line``). The order of the
  server's own lines is exact (one stream); a server line recorded *before* one of ours was
  written before the server could have read ours, which is what the timing checks rely on
  (a line recorded after ours may still have been written before it: those checks err on
  the lenient side, never the other).
- Memory is bounded: at most ``Limits.max_check_messages`` messages are kept per session
  (later ones are counted in ``not_kept``; the rules judge what was kept, except the time of
  the last line of each method, tracked for every line), and a message's parsed body only
  when its line is at most ``Limits.max_check_message_bytes`` long (else only its kind,
  method, id and head). ``head`` keeps the first ``HEAD_CHARS`` characters of each line for evidence.
- ``RequestOutcome`` is one request the check made: its answer (``result`` or ``error``),
  or why there is none (``failure``: a timeout, the connection lost, never sent).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from mcpl_host.jsonrpc.envelope import (
    NO_ID,
    Invalid,
    Notification,
    Request,
    Response,
    Unrelated,
    classify,
)
from mcpl_host.jsonrpc.framing import LineTooLong, ReadItem, loads_line, peek_envelope
from mcpl_host.jsonrpc.values import JSONObject
from mcpl_host.limits import Limits
from mcpl_host.mcpl.server_shapes import SERVER_METHODS
from mcpl_host.replay.against import Asked, RecordedRequest

__all__ = [
    "HEAD_CHARS",
    "id_key",
    "as_list",
    "as_object",
    "PRIVILEGED_METHODS",
    "AgainstEvidence",
    "CallEvidence",
    "Direction",
    "ListEvidence",
    "MainEvidence",
    "MessageKind",
    "RawEvidence",
    "RequestOutcome",
    "RunEvidence",
    "ShutdownEvidence",
    "Transcript",
    "WireMessage",
]

Direction = Literal["in", "out"]
#: ``request``, ``notification``, ``response`` (classify's kinds), ``invalid`` (an invalid
#: request), ``unrelated`` (JSON that is no JSON-RPC message: an array, an object without
#: method or id), ``not-json``, ``too-long`` (over ``Limits.max_line_bytes``).
MessageKind = Literal["request", "notification", "response", "invalid", "unrelated", "not-json", "too-long"]
#: Characters of a line kept for evidence.
HEAD_CHARS = 600
#: Distinct methods whose last line is tracked per transcript (``Transcript.last_seq``).
MAX_TRACKED_METHODS = 256
#: Server -> host methods that need a granted capability or an enabled feature set
#: ("privileged", MCPL §5.3; docs/protocol.md D3): what must wait for the policy.
PRIVILEGED_METHODS = SERVER_METHODS


def as_object(value: object) -> dict[str, Any] | None:
    """``value`` when it is a JSON object (a parsed message's members are ``Any``), else None."""
    return cast("dict[str, Any]", value) if isinstance(value, dict) else None


def as_list(value: object) -> list[Any] | None:
    """``value`` when it is a JSON array, else None."""
    return cast("list[Any]", value) if isinstance(value, list) else None  # type: ignore[redundant-cast]


@dataclass(frozen=True, slots=True)
class WireMessage:
    """One line of a session. ``seq`` counts lines of the session in both directions from 0;
    ``time`` is seconds since the session began; ``size`` the line's bytes (no newline);
    ``id`` the id as sent (``NO_ID`` when absent); ``message`` the parsed object when kept;
    ``jsonrpc_ok``: ``"jsonrpc": "2.0"`` is present; ``head``: the line's start, decoded."""

    seq: int
    direction: Direction
    time: float
    kind: MessageKind
    size: int
    method: str | None = None
    id: Any = NO_ID
    message: Any = None
    jsonrpc_ok: bool = False
    head: str = ""

    def _member(self, name: str) -> Any:
        message = as_object(self.message)
        return message.get(name) if message is not None else None

    @property
    def params(self) -> Any:
        return self._member("params")

    @property
    def result(self) -> Any:
        return self._member("result")

    @property
    def error(self) -> Any:
        return self._member("error")

    @property
    def has_error(self) -> bool:
        return self._member("error") is not None


def id_key(value: object) -> tuple[str, Any]:
    """A key under which two ids are equal exactly when they are the same JSON value, type
    included (``1`` is not ``"1"``, ``True`` is not ``1``). ``NO_ID`` has a key of its own."""
    if value is NO_ID:
        return ("absent", None)
    return (
        type(value).__name__,
        value if isinstance(value, (str, int, float, bool)) or value is None else repr(value),
    )


def classify_line(item: ReadItem, *, max_message_bytes: int) -> dict[str, Any]:
    """The ``WireMessage`` fields (but ``seq``, ``direction``, ``time``) of one line: pure,
    never raises."""
    if isinstance(item, LineTooLong):
        peek = peek_envelope(item.head)
        return {
            "kind": "too-long",
            "size": item.size,
            "id": peek.id if peek.id is not None else NO_ID,
            "head": item.head[:HEAD_CHARS].decode("utf-8", "replace"),
        }
    head = item[: HEAD_CHARS * 4].decode("utf-8", "replace")[:HEAD_CHARS]
    fields: JSONObject = {"size": len(item), "head": head}
    try:
        value = loads_line(item)
    except ValueError:
        return {**fields, "kind": "not-json"}
    keep = len(item) <= max_message_bytes
    members = as_object(value)
    jsonrpc_ok = members is not None and members.get("jsonrpc") == "2.0"
    envelope = classify(value)
    fields.update(jsonrpc_ok=jsonrpc_ok, message=value if keep else None)
    if isinstance(envelope, Request):
        return {**fields, "kind": "request", "method": envelope.method, "id": envelope.id}
    if isinstance(envelope, Notification):
        return {**fields, "kind": "notification", "method": envelope.method}
    if isinstance(envelope, Response):
        return {**fields, "kind": "response", "id": envelope.id}
    if isinstance(envelope, Invalid):
        return {**fields, "kind": "invalid", "method": envelope.method, "id": envelope.answer_id}
    assert isinstance(envelope, Unrelated)
    return {**fields, "kind": "unrelated"}


@dataclass
class Transcript:
    """Every line of one session (module rules). ``on_message`` (optional) is called with
    each new message, kept or not (the runner wakes its waiters with it)."""

    limits: Limits = field(default_factory=Limits)
    messages: list[WireMessage] = field(default_factory=list[WireMessage])
    not_kept: int = 0
    lines: int = 0
    on_message: Callable[[WireMessage], None] | None = None
    # Indexes of the kept messages, so that a lookup never scans the whole transcript (a
    # server may flood a listen window): responses and requests by (direction, id key), and
    # the seq of the last message of each method per direction.
    _responses: dict[tuple[str, tuple[str, Any]], list[WireMessage]] = field(
        default_factory=dict[tuple[str, tuple[str, Any]], list[WireMessage]], repr=False
    )
    _requests: dict[tuple[str, tuple[str, Any]], list[WireMessage]] = field(
        default_factory=dict[tuple[str, tuple[str, Any]], list[WireMessage]], repr=False
    )
    _last_seq: dict[tuple[str, str], int] = field(default_factory=dict[tuple[str, str], int], repr=False)

    def record(self, direction: Direction, item: ReadItem, time: float) -> WireMessage:
        """Classify and keep one line (``item``: bytes without the newline, or a marker)."""
        fields = classify_line(item, max_message_bytes=self.limits.max_check_message_bytes)
        message = WireMessage(seq=self.lines, direction=direction, time=time, **fields)
        self.lines += 1
        if len(self.messages) < self.limits.max_check_messages:
            self.messages.append(message)
            if message.kind == "response":
                self._responses.setdefault((direction, id_key(message.id)), []).append(message)
            elif message.kind in ("request", "invalid"):
                self._requests.setdefault((direction, id_key(message.id)), []).append(message)
        else:
            self.not_kept += 1
        # Tracked past the bound too (push timing must hold whatever was kept), for at most
        # MAX_TRACKED_METHODS distinct methods per transcript.
        key = (direction, message.method) if message.method is not None else None
        if key is not None and (key in self._last_seq or len(self._last_seq) < MAX_TRACKED_METHODS):
            self._last_seq[key] = message.seq
        if self.on_message is not None:
            self.on_message(message)
        return message

    def record_chunk(self, direction: Direction, data: bytes, time: float) -> None:
        """Record each line of ``data`` (whole lines, as a transport sends them)."""
        for line in data.split(b"\n"):
            line = line.removesuffix(b"\r")
            if line:
                self.record(direction, line, time)

    # --- reading ---------------------------------------------------------------------------

    def __iter__(self) -> Iterator[WireMessage]:
        return iter(self.messages)

    def incoming(self) -> list[WireMessage]:
        return [m for m in self.messages if m.direction == "in"]

    def sent(self, method: str) -> WireMessage | None:
        """Our first request or notification of ``method``."""
        return next((m for m in self.messages if m.direction == "out" and m.method == method), None)

    def sent_requests(self, method: str) -> list[WireMessage]:
        return [
            m for m in self.messages if m.direction == "out" and m.kind == "request" and m.method == method
        ]

    def answer_to(self, request: WireMessage) -> WireMessage | None:
        """The first response in the other direction naming ``request``'s id, after it."""
        other: Direction = "in" if request.direction == "out" else "out"
        return self.response(other, request.id, after=request.seq)

    def response(self, direction: Direction, request_id: object, *, after: int = -1) -> WireMessage | None:
        """The first response in ``direction`` naming ``request_id`` with a seq above ``after``."""
        found = self._responses.get((direction, id_key(request_id)), [])
        return next((m for m in found if m.seq > after), None)

    def request_named(self, direction: Direction, request_id: object, *, before: int) -> WireMessage | None:
        """The last request in ``direction`` with ``request_id`` and a seq below ``before``."""
        found = self._requests.get((direction, id_key(request_id)), [])
        return next((m for m in reversed(found) if m.seq < before), None)

    def last_seq(self, direction: Direction, method: str) -> int:
        """The seq of the last message of ``method`` in ``direction``, kept or not (-1: none
        or beyond ``MAX_TRACKED_METHODS``)."""
        return self._last_seq.get((direction, method), -1)

    def server_requests(self, methods: frozenset[str] | None = None) -> list[WireMessage]:
        """The server's requests (and invalid requests), optionally of ``methods`` only."""
        return [
            m
            for m in self.messages
            if m.direction == "in" and m.kind == "request" and (methods is None or m.method in methods)
        ]

    def server_messages_of(self, methods: frozenset[str]) -> list[WireMessage]:
        """The server's requests and notifications of ``methods`` (a request sent as a
        notification is still the method exercised)."""
        return [
            m
            for m in self.messages
            if m.direction == "in" and m.kind in ("request", "notification") and m.method in methods
        ]


@dataclass
class RequestOutcome:
    """One request the check made: ``result`` or ``error`` (the error object), else
    ``failure`` (one sentence: no answer in time, connection lost, not sent). ``seconds``:
    from sending to the answer (or the failure). A raw probe also keeps what it ``sent`` (the
    line's start, at most ``EXCHANGE_CHARS`` characters) and what was ``received`` while it
    waited (the starts of at most ``EXCHANGE_LINES`` lines), for the evidence of a failure."""

    method: str
    params: Any = None
    result: Any = None
    error: dict[str, Any] | None = None
    failure: str | None = None
    seconds: float = 0.0
    sent: str | None = None
    received: tuple[str, ...] = ()

    @property
    def answered(self) -> bool:
        return self.failure is None

    @property
    def error_code(self) -> int | None:
        code = self.error.get("code") if self.error is not None else None
        return code if isinstance(code, int) and not isinstance(code, bool) else None


#: Characters of a raw probe's line kept as ``RequestOutcome.sent``.
EXCHANGE_CHARS = 1000
#: Lines received while a raw probe waited, kept as ``RequestOutcome.received``.
EXCHANGE_LINES = 2


@dataclass
class ListEvidence:
    """One paginated listing (``tools/list`` ...): every page's outcome in order, and how it
    ended: ``ended`` ``"complete"`` (no ``nextCursor``), ``"cursor-repeated"`` (a cursor
    came back), ``"too-many-pages"`` (``Limits.max_list_pages`` reached), ``"failed"`` (a
    page got an error or no answer), ``"bad-cursor"`` (``nextCursor`` not a string)."""

    method: str
    key: str
    pages: list[RequestOutcome] = field(default_factory=list[RequestOutcome])
    ended: str = "complete"

    @property
    def items(self) -> list[Any]:
        """Every entry of every page that came back as an array member ``key``."""
        items: list[Any] = []
        for page in self.pages:
            result = as_object(page.result)
            entries = as_list(result.get(self.key)) if result is not None else None
            if entries is not None:
                items.extend(entries)
        return items


@dataclass
class CallEvidence:
    """The calls of step ``calls``: ``unknown_tool`` (a tool name that cannot exist),
    ``unknown_prompt``, ``resource_read`` (of the first listed resource, with ``resource_uri``),
    ``tool_calls`` (name -> outcome, for tools with an ``outputSchema``), and
    ``tool_calls_skipped`` (name -> why it was not called)."""

    unknown_tool: RequestOutcome | None = None
    unknown_tool_name: str = ""
    unknown_prompt: RequestOutcome | None = None
    resource_read: RequestOutcome | None = None
    resource_uri: str | None = None
    tool_calls: dict[str, RequestOutcome] = field(default_factory=dict[str, RequestOutcome])
    tool_calls_skipped: dict[str, str] = field(default_factory=dict[str, str])
    #: name -> problems found validating a structured result (computed off the event loop).
    output_problems: dict[str, list[str]] = field(default_factory=dict[str, list[str]])
    #: One ``context/beforeInference``, sent when the grant holds ``observe`` or an inject
    #: leaf (RFC-010: does the server still inject?); None when not sent.
    before_inference: RequestOutcome | None = None


@dataclass
class ShutdownEvidence:
    """How the server ended: ``signal`` (None: stdin closed; ``"SIGTERM"``), ``seconds`` from
    then to the end of its stdout (None: it had not ended within ``bound_seconds``),
    ``exit_status`` (negative: killed by that signal), ``already_gone`` (it had exited
    before), ``note`` (anything that kept the step from running)."""

    signal: str | None
    bound_seconds: float
    seconds: float | None = None
    exit_status: int | None = None
    already_gone: bool = False
    note: str | None = None


@dataclass
class AgainstEvidence:
    """``check --against FILE``: the recording's ``initialize`` answer (None: none recorded)
    and each recorded request asked again with the live answer (``replay.against``)."""

    initialize: RecordedRequest | None = None
    asked: list[Asked] = field(default_factory=list[Asked])


@dataclass
class MainEvidence:
    """The session driven through the library (``ServerConnection``)."""

    transcript: Transcript
    #: The handshake failed: one sentence (``InitializeError``), else None.
    init_error: str | None = None
    init_error_code: int | None = None
    init_seconds: float | None = None
    protocol_version: str | None = None
    #: The ``experimental.mcpl`` object as sent, or None for a plain MCP server.
    manifest: dict[str, Any] | None = None
    capabilities: dict[str, Any] = field(default_factory=dict[str, Any])
    #: After the initial exchange: ``none``, ``ready``, ``mcp-only`` (``MCPLState``).
    mcpl_state: str = "none"
    #: The feature sets the host read (name -> uses) and its derivation (enabled names).
    feature_sets: dict[str, tuple[str, ...]] = field(default_factory=dict[str, tuple[str, ...]])
    enabled_feature_sets: frozenset[str] = frozenset()
    #: Capability paths the server advertised (the host's reading) and the grant in force.
    advertised: frozenset[str] = frozenset()
    granted: frozenset[str] = frozenset()
    #: The server stopped answering: one sentence naming what went unanswered.
    dead: str | None = None
    #: Listen windows: (first seq, last seq) of each; None when not run.
    listen_window: tuple[int, int] | None = None
    listen_seconds: float = 0.0
    #: Why the reduction was not made (None when it was, or was not asked for).
    reduction_note: str | None = None
    reduction: RequestOutcome | None = None
    #: Seq of the reduction's receipt line and the last seq of the window after it.
    reduction_window: tuple[int, int] | None = None
    reduction_seconds: float = 0.0
    #: Liveness pings after the server's channels/register answers: request seq -> outcome.
    after_register: dict[int, RequestOutcome] = field(default_factory=dict[int, RequestOutcome])
    lists: dict[str, ListEvidence] = field(default_factory=dict[str, ListEvidence])
    #: Each listed tool's ``inputSchema`` / ``outputSchema`` against its metaschema, checked
    #: in a worker process (its cost grows with the server's schemas): (index of the tool in
    #: ``tools/list``'s items, key) -> problems; None when not checked.
    tool_schema_problems: dict[tuple[int, str], list[str]] | None = None
    calls: CallEvidence | None = None
    #: ``check --against``: None when no recording was given or the step did not run.
    against: AgainstEvidence | None = None
    shutdown: ShutdownEvidence | None = None


@dataclass
class RawEvidence:
    """The raw JSON-RPC session: its transcript, the probes (name -> outcome) and the
    SIGTERM shutdown. ``init_error``: the raw handshake failed (then nothing else ran)."""

    transcript: Transcript
    init_error: str | None = None
    initialized_seq: int | None = None
    probes: dict[str, RequestOutcome] = field(default_factory=dict[str, RequestOutcome])
    shutdown: ShutdownEvidence | None = None


@dataclass
class RunEvidence:
    """Everything a run saw. ``transport``: ``stdio``, ``websocket`` or ``http``;
    ``steps``: those that ran; ``big_message_bytes``: the size of the big-message probe."""

    transport: str
    steps: frozenset[str] = frozenset()
    main: MainEvidence | None = None
    raw: RawEvidence | None = None
    big_message_bytes: int = 0
    listen_seconds: float = 0.0
    reduction_listen_seconds: float = 0.0
    step_seconds: dict[str, float] = field(default_factory=dict[str, float])
    #: Seconds each ``registry.Step`` took (``main``: the handshake and initial policy;
    #: ``raw``: both raw sessions but for ``sigterm``), for each check's duration.
    phase_seconds: dict[str, float] = field(default_factory=dict[str, float])
    stderr_tail: list[str] = field(default_factory=list[str])

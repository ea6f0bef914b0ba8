"""A session recording: every line a host exchanges with its servers, its lifecycle and the
host's decisions, as JSON Lines (one object per line, UTF-8), versioned by its header and
described by ``recording.schema.json`` (JSON Schema 2020-12, shipped in this package).

Rules of this module:

- Line 1 of every file is the header (``header()``): ``{"format": "mcpl-host-recording",
  "version": 1, "started": <ISO 8601 UTC>, "host": {"name": "mcpl-host", "version": ...}}``.
  Every later line is an entry (``build_entry()``): ``seq`` (from 1, increasing across the
  files of one recording), ``t`` (seconds since the recorder started, ``time.monotonic()``
  based), ``server`` (its name), ``connection`` (1 for the server's first transport, +1 for
  each new one: ``Recorder.next_connection``), ``kind`` (``KINDS``) and the kind's fields:

  - ``"sent"`` (host to server) and ``"received"`` (server to host): ``transport``
    (``TRANSPORTS``) and ``message`` (the JSON-RPC message as parsed); a received line that
    is not JSON: ``text`` (the line, cut to ``Limits.max_recorded_message_bytes``); a message
    over ``max_recorded_message_bytes`` of compact JSON: no ``message``, ``omitted``
    (``{"bytes": N}``), with ``method`` and ``id`` when it has them (``message_fields``).
  - ``"lifecycle"``: ``event`` (``LIFECYCLE_EVENTS``) and its fields.
  - ``"decision"``: ``event`` (a host event's ``kind``, ``mcpl_host.events``) and ``data``
    (its ``to_json()``).

- Every string of an entry (keys included) goes through the server's ``Redactor``
  (``mcpl_host.secrets``; ``Recorder.set_redactor``) before the line is written; a
  server the recorder was not told of gets the well-known credential shapes masked. A
  ``text`` is redacted before it is cut, so a secret is never left half visible.
- Bounds (the ``Recorder``'s ``Limits``): one file is at most ``max_recording_bytes``;
  the entry that would pass it starts a new file (``FILE`` becomes ``FILE.1``, ``FILE.1``
  becomes ``FILE.2``..., ``recording_files_kept`` rotated files kept, the oldest deleted:
  ``rotation_moves``), which begins with a header too. An entry that does not fit in an
  empty file is written without its content (``shrunk``).
- ``Recorder.entry`` never blocks (one ``os.write`` of one line) and never raises on I/O: an
  ``OSError`` is logged once and the recording stops (``Recorder.failed``); live
  subscribers (``Recorder.subscribe``) still get every entry, and one that does not read
  loses entries (counted in ``dropped``), never stalls the recorder.
- ``RecordingTransport`` holds the transport it records (composition): each line ``send()``
  writes (one call may carry several) and each line ``receive()`` returns is an entry. Only
  a connection given a recorder is wrapped (``record=`` of ``connect``, ``HostedServer``,
  ``Host``): without one nothing is paid.

JSON-RPC 2.0 §4-§5 (the messages); JSON Lines (one JSON text, RFC 8259, per line).
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Any, Literal, Protocol

import anyio
import orjson

from mcpl_host.jsonrpc.errors import ConnectionLost
from mcpl_host.jsonrpc.framing import (
    LineTooLong,
    NotReadableJSON,
    ReadItem,
    dumps_message,
    loads_line,
    peek_id,
)
from mcpl_host.jsonrpc.values import is_list_or_tuple, is_object
from mcpl_host.limits import Limits
from mcpl_host.logging import LOG_VALUE_REDACTION_MARGIN_CHARS, get_logger
from mcpl_host.secrets import Redactor, redact_url

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "KINDS",
    "LIFECYCLE_EVENTS",
    "TRANSPORTS",
    "Kind",
    "MemoRedactor",
    "Recorder",
    "RecordingSubscription",
    "RecordingTransport",
    "build_entry",
    "encode",
    "header",
    "message_fields",
    "must_rotate",
    "RecordingError",
    "numbered_entries",
    "read_recording",
    "recording_factory",
    "redacted",
    "rotation_moves",
    "schema",
    "session_fingerprint",
    "shrunk",
    "text_fields",
    "too_long_fields",
]

#: The header's ``format`` and ``version``: a reader refuses another.
FORMAT = "mcpl-host-recording"
FORMAT_VERSION = 1
Kind = Literal["sent", "received", "lifecycle", "decision"]
KINDS: tuple[Kind, ...] = ("sent", "received", "lifecycle", "decision")
#: The ``transport`` of a sent or received entry.
TRANSPORTS = ("stdio", "websocket", "http", "sse")
#: The ``event`` of a lifecycle entry.
LIFECYCLE_EVENTS = ("spawn", "exit", "connect", "http-session", "ws-close", "closed", "restart")
#: The fields that hold what a server or the host said: left out of an entry that does not
#: fit in an empty file (``shrunk``).
CONTENT_FIELDS = ("message", "text", "data")


class Redacts(Protocol):
    """What hides secrets in an entry: ``secrets.Redactor``, or a ``MemoRedactor`` of one."""

    def redact(self, text: str) -> str: ...


#: Strings up to this many characters have their redaction remembered (``MemoRedactor``):
#: keys, names, types and enumerations repeat in every message.
MEMO_MAX_CHARS = 256
#: Strings remembered per server; the memory is emptied when it is full.
MEMO_ENTRIES = 4096


class MemoRedactor:
    """A ``Redactor`` with a bounded memory of its answers for short strings
    (``MEMO_MAX_CHARS``, ``MEMO_ENTRIES``): ``Redactor.redact`` is a function of its text, and
    an entry has hundreds of strings (a ``tools/list`` result), most of them seen before."""

    __slots__ = ("_redactor", "_seen")

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._seen: dict[str, str] = {}

    def redact(self, text: str) -> str:
        """``Redactor.redact(text)``, remembered for a short ``text``."""
        if len(text) > MEMO_MAX_CHARS:
            return self._redactor.redact(text)
        shown = self._seen.get(text)
        if shown is None:
            if len(self._seen) >= MEMO_ENTRIES:
                self._seen.clear()
            shown = self._seen[text] = self._redactor.redact(text)
        return shown


def _package_version() -> str:
    from importlib import metadata  # 14 ms with email and zipfile: a recording's first file only

    try:
        return metadata.version("mcpl-host")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a bare checkout
        return "unknown"


def header(started: datetime.datetime, version: str) -> dict[str, Any]:
    """The first line of every file of a recording: ``started`` (an aware datetime, written
    in UTC, ISO 8601) and the host's ``version``."""
    when = started.astimezone(datetime.timezone.utc).isoformat().replace("+00:00", "Z")
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "started": when,
        "host": {"name": "mcpl-host", "version": version},
    }


def _cut_utf8(data: bytes, max_bytes: int) -> str:
    """``data`` decoded (invalid bytes replaced), at most ``max_bytes`` of UTF-8."""
    return data[:max_bytes].decode("utf-8", errors="ignore" if len(data) > max_bytes else "replace")


def text_fields(line: bytes, max_bytes: int, redactor: Redacts) -> dict[str, Any]:
    """``{"text": ...}`` for a line that is not JSON: redacted first (its first
    ``max_bytes`` bytes and a margin of ``LOG_VALUE_REDACTION_MARGIN_CHARS``), then cut to
    ``max_bytes`` bytes of UTF-8, so a secret is never left half visible."""
    head = line[: max_bytes + LOG_VALUE_REDACTION_MARGIN_CHARS].decode("utf-8", errors="replace")
    shown = redactor.redact(head).encode("utf-8")
    return {"text": _cut_utf8(shown, max_bytes)}


def message_fields(line: bytes, max_bytes: int, redactor: Redacts) -> dict[str, Any]:
    """What a sent or received entry holds of one line (``line`` without its newline):
    ``{"message": <parsed>}``; ``{"omitted": {"bytes": N}, "method"?, "id"?}`` when its
    compact JSON is over ``max_bytes`` (``N``: that size); ``text_fields`` (redacted with
    ``redactor`` before the cut) when it is not JSON. The entry made of them
    (``build_entry``) redacts every string. Never raises."""
    try:
        message = loads_line(line)
    except ValueError:
        return text_fields(line, max_bytes, redactor)
    compact = len(dumps_message(message)) - 1
    if compact > max_bytes:
        fields: dict[str, Any] = {"omitted": {"bytes": compact}}
        if isinstance(message, dict):
            method = message.get("method")  # pyright: ignore[reportUnknownMemberType,reportUnknownVariableType]
            if isinstance(method, str):
                fields["method"] = method
            ident = message.get("id")  # pyright: ignore[reportUnknownMemberType,reportUnknownVariableType]
            if isinstance(ident, (int, str)) and not isinstance(ident, bool):
                fields["id"] = ident
        return fields
    return {"message": message}


def too_long_fields(item: LineTooLong) -> dict[str, Any]:
    """What a received entry holds of a line the transport dropped as over
    ``Limits.max_line_bytes``: ``{"omitted": {"bytes": size}}`` and its ``id`` when its
    head shows one (``framing.peek_id``)."""
    fields: dict[str, Any] = {"omitted": {"bytes": item.size}}
    ident = peek_id(item.head)
    if ident is not None:
        fields["id"] = ident
    return fields


def redacted(value: Any, redactor: Redacts) -> Any:
    """A copy of a JSON value with ``redactor`` applied to every string, object keys
    included (a key that became the same as another gets `` #2``, `` #3``...: the structure
    is kept). Iterative: any depth ``loads_line`` gives. Never raises."""
    if isinstance(value, str):
        return redactor.redact(value)
    if not isinstance(value, (dict, list, tuple)):
        return value
    root: list[Any] = [None]
    # Work items: (container to fill, key or index, value to copy).
    stack: list[tuple[Any, Any, Any]] = [(root, 0, value)]
    while stack:
        target, slot, item = stack.pop()
        if isinstance(item, str):
            target[slot] = redactor.redact(item)
        elif isinstance(item, dict):
            copy: dict[Any, Any] = {}
            target[slot] = copy
            members: dict[Any, Any] = item  # pyright: ignore[reportUnknownVariableType]
            for key, member in members.items():
                shown = key
                if isinstance(key, str):
                    shown = redactor.redact(key)
                    if shown != key:
                        base, number = shown, 2
                        while shown in copy or shown in members:
                            shown, number = f"{base} #{number}", number + 1
                copy[shown] = None
                stack.append((copy, shown, member))
        elif is_list_or_tuple(item):
            items: Sequence[Any] = item
            array: list[Any] = [None] * len(items)
            target[slot] = array
            stack.extend((array, index, member) for index, member in enumerate(items))
        else:
            target[slot] = item
    return root[0]


def build_entry(
    seq: int, t: float, server: str, connection: int, kind: str, fields: dict[str, Any], redactor: Redacts
) -> dict[str, Any]:
    """One entry (module rules): ``seq``, ``t`` (seconds, rounded to microseconds),
    ``server``, ``connection``, ``kind``, then ``fields`` with every string redacted.
    Pure."""
    entry: dict[str, Any] = {
        "seq": seq,
        "t": round(t, 6),
        "server": redactor.redact(server),
        "connection": connection,
        "kind": kind,
    }
    for name, value in redacted(fields, redactor).items():
        entry.setdefault(name, value)
    return entry


def encode(entry: dict[str, Any]) -> bytes:
    """One line of the file: compact JSON and a newline (``framing.dumps_message``)."""
    return dumps_message(entry)


def shrunk(entry: dict[str, Any]) -> dict[str, Any]:
    """``entry`` without its content (``CONTENT_FIELDS``): ``omitted`` says how many bytes
    of compact JSON they were (added to any already omitted)."""
    small = dict(entry)
    removed = sum(len(dumps_message(small.pop(name))) - 1 for name in CONTENT_FIELDS if name in small)
    before = small.get("omitted")
    already: object = before.get("bytes", 0) if is_object(before) else 0
    small["omitted"] = {"bytes": removed + (already if isinstance(already, int) else 0)}
    return small


def session_fingerprint(session_id: str) -> str:
    """What a recording shows of an ``Mcp-Session-Id``: ``"sha256:"`` and the first 16 hex
    digits of its SHA-256. The id lets whoever holds it act in the session (MCP 2025-11-25
    "Transports", session management; the host never shows it: ``session`` is a secret name),
    so the recording tells sessions apart without holding one (docs/protocol.md L2b)."""
    import hashlib  # OpenSSL's: an HTTP session's id only

    return "sha256:" + hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def must_rotate(file_bytes: int, entry_bytes: int, max_bytes: int, *, has_entries: bool) -> bool:
    """Whether an entry of ``entry_bytes`` goes to a new file: the current one holds
    ``file_bytes`` (its header included) and at least one entry, and the entry would take
    it past ``max_bytes``. Pure."""
    return has_entries and file_bytes + entry_bytes > max_bytes


def rotation_moves(path: str, kept: int) -> list[tuple[str, str | None]]:
    """The renames that rotate ``path``, in order: ``(source, target)``, a target of None a
    deletion: ``path.<kept>`` deleted, ``path.<n>`` -> ``path.<n+1>`` from the oldest down,
    ``path`` -> ``path.1``. Pure (a missing source is skipped by the caller)."""
    moves: list[tuple[str, str | None]] = [(f"{path}.{kept}", None)]
    moves += [(f"{path}.{index}", f"{path}.{index + 1}") for index in range(kept - 1, 0, -1)]
    moves.append((path, f"{path}.1"))
    return moves


def schema() -> dict[str, Any]:
    """The recording's JSON Schema (2020-12), ``recording.schema.json`` of this package:
    one line (header or entry) is valid against it."""
    from importlib import resources

    text = resources.files("mcpl_host").joinpath("recording.schema.json").read_bytes()
    loaded: dict[str, Any] = orjson.loads(text)
    return loaded


class RecordingError(ValueError):
    """A file is no recording of this format and version, or one of its lines is no entry;
    the message names the line (1 is the header)."""


def numbered_entries(lines: Iterable[bytes]) -> list[tuple[int, dict[str, Any]]]:
    """The entries of a recording's lines (its header first), each with its line number;
    blank lines are skipped. The one reader of the format (the replay reads through it).
    Raises ``RecordingError``: the first line is no header of ``FORMAT`` version
    ``FORMAT_VERSION``, or a later line is not JSON or not an entry (an object with
    ``server`` and ``kind``)."""
    entries: list[tuple[int, dict[str, Any]]] = []
    for number, line in enumerate(lines, start=1):
        if number > 1 and not line.strip():
            continue
        try:
            value: object = loads_line(line)
        except NotReadableJSON as exc:
            suffix = ": not an mcpl-host recording" if number == 1 else ""
            raise RecordingError(f"line {number} is not JSON ({exc}){suffix}") from None
        if number == 1:
            if not is_object(value) or value.get("format") != FORMAT:
                raise RecordingError(
                    f'line 1 is not the header {{"format": "{FORMAT}", ...}}: not an mcpl-host recording'
                )
            version = value.get("version")
            if version != FORMAT_VERSION:
                raise RecordingError(
                    f"line 1: recording format version {version!r}; this mcpl-host reads version {FORMAT_VERSION}"
                )
            continue
        if not is_object(value) or not isinstance(value.get("server"), str) or "kind" not in value:
            raise RecordingError(f"line {number} is not an entry (an object with server and kind)")
        entries.append((number, value))
    return entries


def read_recording(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and the entries of one file of a recording (JSON Lines). Raises
    ``RecordingError`` (a ``ValueError``) as ``numbered_entries``, also for an empty file;
    ``OSError`` as ``open``."""
    with open(path, "rb") as file:
        lines = file.read().split(b"\n")
    if not lines or not lines[0].strip():
        raise RecordingError("an empty file is no recording")
    entries = numbered_entries(lines)
    header: dict[str, Any] = loads_line(lines[0])
    return header, [entry for _, entry in entries]


_DEFAULT_LIMITS = Limits()


class RecordingSubscription:
    """The entries a recorder writes from now on, as JSON objects (dicts, shared: do not
    change them): ``async for entry in subscription``. At most ``max_buffered`` wait; an
    entry that finds it full is not delivered and counted in ``dropped``. Ends when the
    recorder closes or ``close()`` is called."""

    def __init__(self, recorder: Recorder, max_buffered: int) -> None:
        send, receive = anyio.create_memory_object_stream[dict[str, Any]](max_buffered)
        self._send = send
        self._receive = receive
        self._recorder = recorder
        self.dropped = 0

    def offer(self, entry: dict[str, Any]) -> None:
        """Deliver ``entry``, or count it in ``dropped`` when the buffer is full. Never
        blocks."""
        try:
            self._send.send_nowait(entry)
        except anyio.WouldBlock:
            self.dropped += 1
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass

    def close(self) -> None:
        """Stop: the entries already buffered are still read, then the iteration ends."""
        self._send.close()
        self._recorder.unsubscribe(self)

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self

    async def __anext__(self) -> dict[str, Any]:
        try:
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    def __enter__(self) -> RecordingSubscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        self._receive.close()


class Recorder:
    """Writes a recording to ``path`` (module rules; None: nothing is written, the entries
    only go to subscribers), bounded by ``limits`` (``max_recording_bytes``,
    ``recording_files_kept``, ``max_recorded_message_bytes``). One recorder serves any
    number of servers and connections. Opening ``path`` truncates it; raises ``OSError``
    when it cannot be opened. A context manager (``close()`` on exit).

    ``failed``: an I/O error stopped the writing (logged once); ``unwritten``: entries left
    out of the file because even without their content (``shrunk``) they do not fit in
    an empty one (a ``max_recording_bytes`` smaller than the host's own fields), or hold a
    value that is not JSON (a caller's bug; the first is logged); ``path``; ``limits``."""

    def __init__(self, path: str | os.PathLike[str] | None, *, limits: Limits = _DEFAULT_LIMITS) -> None:
        self.path = os.fspath(path) if path is not None else None
        self.limits = limits
        self.failed = False
        self.unwritten = 0
        self._log = get_logger("mcpl_host.recording")
        self._started = datetime.datetime.now(datetime.timezone.utc)
        self._t0 = time.monotonic()
        self._header = encode(header(self._started, _package_version()))
        self._seq = 0
        self._closed = False
        self._fd: int | None = None
        self._file_bytes = 0
        self._file_entries = 0
        self._redactors: dict[str, MemoRedactor] = {}
        self._connections: dict[str, int] = {}
        self._subscriptions: list[RecordingSubscription] = []
        self._shapes = MemoRedactor(Redactor())
        if self.path is not None:
            self._open()

    def __repr__(self) -> str:
        state = "failed" if self.failed else "closed" if self._closed else "open"
        return f"<Recorder {self.path!r} {state} entries={self._seq}>"

    def _open(self) -> None:
        assert self.path is not None
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        self._write(self._header)
        self._file_bytes = len(self._header)
        self._file_entries = 0

    def _write(self, data: bytes) -> None:
        assert self._fd is not None
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]

    def set_redactor(self, server: str, redactor: Redactor) -> None:
        """Redact every later entry of ``server`` with ``redactor`` (its
        ``HostedServer.redactor``; through a ``MemoRedactor``)."""
        self._redactors[server] = MemoRedactor(redactor)

    def redactor(self, server: str) -> MemoRedactor:
        """The redactor of ``server``'s entries (the shapes-only one when it was not set)."""
        return self._redactors.get(server, self._shapes)

    def next_connection(self, server: str) -> int:
        """The ``connection`` number of ``server``'s next transport: 1, 2, ..."""
        number = self._connections.get(server, 0) + 1
        self._connections[server] = number
        return number

    def current_connection(self, server: str) -> int:
        """The ``connection`` number of ``server``'s newest transport (1 before any)."""
        return self._connections.get(server, 1)

    @property
    def entries(self) -> int:
        """How many entries were made (``seq`` of the last one)."""
        return self._seq

    def entry(self, server: str, connection: int, kind: Kind, **fields: Any) -> None:
        """Record one entry (module rules): ``fields`` (JSON values; for ``sent`` and
        ``received`` usually ``message_fields``) redacted with ``server``'s redactor.
        Never blocks; never raises on I/O (``failed``). Does nothing once closed."""
        if self._closed:
            return
        self._seq += 1
        made = build_entry(
            self._seq, time.monotonic() - self._t0, server, connection, kind, fields, self.redactor(server)
        )
        try:
            line = encode(made)
        except TypeError:  # a value that is not JSON: a caller's bug, never the host's crash
            self.unwritten += 1
            if self.unwritten == 1:
                self._log.error("recording entry is not JSON", kind=kind)
            return
        if self._fd is not None:
            self._file(made, line)
        for subscription in list(self._subscriptions):
            subscription.offer(made)

    def _file(self, made: dict[str, Any], line: bytes) -> None:
        limit = self.limits.max_recording_bytes
        if len(self._header) + len(line) > limit:
            line = encode(shrunk(made))
            if len(self._header) + len(line) > limit:
                self.unwritten += 1  # only the host's own fields are left, and they do not fit
                return
        try:
            if must_rotate(self._file_bytes, len(line), limit, has_entries=self._file_entries > 0):
                self._rotate()
            self._write(line)
        except OSError as exc:
            self._fail(exc)
            return
        self._file_bytes += len(line)
        self._file_entries += 1

    def _rotate(self) -> None:
        assert self.path is not None and self._fd is not None
        os.close(self._fd)
        self._fd = None
        for source, target in rotation_moves(self.path, self.limits.recording_files_kept):
            try:
                if target is None:
                    os.unlink(source)
                else:
                    os.replace(source, target)
            except FileNotFoundError:
                continue
        self._open()

    def _fail(self, exc: OSError) -> None:
        self.failed = True
        self._log.error("recording stopped", path=self.path, error=exc.strerror or type(exc).__name__)
        self._close_file()

    def _close_file(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.close(fd)
            except OSError:
                pass

    def subscribe(self, max_buffered: int) -> RecordingSubscription:
        """A ``RecordingSubscription`` to every later entry, at most ``max_buffered``
        waiting (at least 1). Raises ``ValueError`` for a smaller bound."""
        if max_buffered < 1:
            raise ValueError("max_buffered must be 1 or more")
        subscription = RecordingSubscription(self, max_buffered)
        if self._closed:
            subscription.close()
        else:
            self._subscriptions.append(subscription)
        return subscription

    def unsubscribe(self, subscription: RecordingSubscription) -> None:
        """Stop delivering to ``subscription`` (its ``close()`` calls this)."""
        if subscription in self._subscriptions:
            self._subscriptions.remove(subscription)

    def close(self) -> None:
        """Close the file and end every subscription; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._close_file()
        for subscription in list(self._subscriptions):
            subscription.close()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class _Recorded(Protocol):
    """What ``RecordingTransport`` needs of the transport it holds (the ``Transport``
    Protocol of ``transports.base``, the layer above this one)."""

    async def send(self, data: bytes) -> None: ...
    async def receive(self) -> ReadItem: ...
    async def aclose(self) -> None: ...
    @property
    def stderr_tail(self) -> Sequence[str]: ...
    def describe(self) -> str: ...
    def negotiated(self, protocol_version: str) -> None: ...


def _lines(data: bytes) -> Iterable[bytes]:
    """The lines of ``data`` (whole lines, each ending in a newline), without newlines."""
    start = 0
    while True:
        end = data.find(b"\n", start)
        if end < 0:
            return
        yield data[start:end].rstrip(b"\r")
        start = end + 1


#: The capabilities of ``transports.base`` a ``RecordingTransport`` takes from the transport it
#: holds, as they are (``send_now`` is recorded: its own).
_FORWARDED = ("terminate_now", "carries_stateless")
#: Attributes of a ``RecordingTransport`` itself, never read from the held transport.
_OWN = frozenset(
    {"_inner", "_recorder", "_server", "_connection", "_transport", "_partial", "send_now", "receive_now"}
)


class RecordingTransport:
    """A transport (``transports.base.Transport``) that records each line it sends and
    receives on ``recorder`` as ``server``'s ``connection``, ``transport`` naming it
    (``TRANSPORTS``; an automatic HTTP transport says ``"sse"`` once its ``chosen`` is).
    Everything else is the held transport's: its other attributes (``pid``, ``send_now``,
    ``terminate_now``, ``carries_stateless``...) are read from it, ``send_now`` recorded
    too.

    Its lifecycle entries, read from what the held transport says of itself: ``"http-session"``
    when its ``session_id`` (Streamable HTTP) is new, after a send or a receive;
    ``"exit"`` (``status``) once, when a receive ends with ``ConnectionLost`` holding an exit
    status or, for a transport with an ``exit_status`` (stdio), when it is closed;
    ``"ws-close"`` (``code``, ``reason``) once, for a transport with a ``close_code``
    (WebSocket); ``"closed"`` when it is closed."""

    def __init__(
        self, inner: _Recorded, recorder: Recorder, server: str, connection: int, transport: str
    ) -> None:
        self._inner = inner
        self._recorder = recorder
        self._server = server
        self._connection = connection
        self._transport = transport
        self._partial = b""  # the start of a line send_now wrote only part of
        # The capabilities of transports.base (SendsNow, ReceivesNow, StartsServer, CarriesStateless) are
        # instance attributes, present exactly when the held transport has them: a
        # runtime_checkable Protocol's isinstance() reads them statically (Python 3.12+), so
        # __getattr__ alone would hide them. Each is a method or a constant of its class.
        if hasattr(inner, "send_now"):
            self.send_now = self._send_now
        if hasattr(inner, "receive_now"):  # ReceivesNow: each line it hands over is recorded too
            self.receive_now = self._receive_now
        for name in _FORWARDED:
            if hasattr(inner, name):
                setattr(self, name, getattr(inner, name))
        self._session: str | None = None
        self._exited = False
        self._ws_closed = False
        self._closed = False

    def _lifecycle(self, event: str, **fields: Any) -> None:
        self._recorder.entry(self._server, self._connection, "lifecycle", event=event, **fields)

    def _check_session(self) -> None:
        session = getattr(self._inner, "session_id", None)
        if isinstance(session, str) and session != self._session:
            self._session = session
            self._lifecycle("http-session", sessionId=session_fingerprint(session))

    def _check_ended(self, status: object = None, *, closing: bool = False) -> None:
        if not self._exited and (status is not None or (closing and hasattr(self._inner, "exit_status"))):
            self._exited = True
            if status is None:
                status = getattr(self._inner, "exit_status", None)
            self._lifecycle("exit", status=status if isinstance(status, int) else None)
        code = getattr(self._inner, "close_code", None)
        if not self._ws_closed and isinstance(code, int):
            self._ws_closed = True
            reason = getattr(self._inner, "close_reason", None)
            self._lifecycle("ws-close", code=code, reason=reason if isinstance(reason, str) else "")

    @property
    def inner(self) -> _Recorded:
        """The transport recorded."""
        return self._inner

    @property
    def connection(self) -> int:
        """This transport's ``connection`` number in the recording."""
        return self._connection

    def _label(self) -> str:
        chosen = getattr(self._inner, "chosen", None)
        return "sse" if chosen == "sse" else self._transport

    def _record_lines(self, lines: Iterable[bytes], kind: Kind) -> None:
        recorder, server = self._recorder, self._server
        max_bytes = recorder.limits.max_recorded_message_bytes
        redactor = recorder.redactor(server)
        label = self._label()
        for line in lines:
            fields = message_fields(line, max_bytes, redactor)
            recorder.entry(server, self._connection, kind, transport=label, **fields)

    def _record_sent(self, data: bytes) -> None:
        if self._partial:
            data, self._partial = self._partial + data, b""
        end = data.rfind(b"\n") + 1
        if end < len(data):
            self._partial = data[end:]
        self._record_lines(_lines(data[:end]), "sent")

    async def send(self, data: bytes) -> None:
        """Send ``data`` (whole lines) and record each line written."""
        await self._inner.send(data)
        self._record_sent(data)
        self._check_session()

    def _send_now(self, data: bytes) -> int:
        send_now: Callable[[bytes], int] = getattr(self._inner, "send_now")  # noqa: B009
        written = send_now(data)
        self._record_sent(data[:written])
        return written

    async def receive(self) -> ReadItem:
        """The next line read, recorded (a ``LineTooLong`` as its size and id)."""
        try:
            item = await self._inner.receive()
        except ConnectionLost as exc:
            self._check_ended(exc.exit_status)
            raise
        self._check_session()
        self._record_received(item)
        return item

    def _receive_now(self) -> ReadItem | None:
        receive_now: Callable[[], ReadItem | None] = getattr(self._inner, "receive_now")  # noqa: B009
        item = receive_now()
        if item is not None:
            self._record_received(item)
        return item

    def _record_received(self, item: ReadItem) -> None:
        if isinstance(item, LineTooLong):
            fields = too_long_fields(item)
            self._recorder.entry(
                self._server, self._connection, "received", transport=self._label(), **fields
            )
        else:
            self._record_lines((item,), "received")  # one item, one message (as the host reads it)

    async def aclose(self) -> None:
        """Close the held transport; record its end (once)."""
        try:
            await self._inner.aclose()
        finally:
            self.record_end()

    def record_end(self) -> None:
        """Record that the held transport is closed (its exit status, its close code), once:
        by ``aclose()``, or when the context it was opened in exits."""
        if not self._closed:
            self._closed = True
            self._check_ended(closing=True)
            self._lifecycle("closed")

    @property
    def stderr_tail(self) -> Sequence[str]:
        return self._inner.stderr_tail

    def describe(self) -> str:
        return self._inner.describe()

    def negotiated(self, protocol_version: str) -> None:
        self._inner.negotiated(protocol_version)

    def __getattr__(self, name: str) -> Any:
        # Called only for what neither this class nor the instance has: the held transport's
        # other attributes (pid, exit_status, chosen...), read when asked.
        if name.startswith("__") or name in _OWN:
            raise AttributeError(name)
        return getattr(self._inner, name)

    def __repr__(self) -> str:
        return f"<RecordingTransport {self._inner!r}>"


def recording_factory(
    factory: Callable[[], AbstractAsyncContextManager[Any]],
    recorder: Recorder,
    server: str,
    transport: str,
    *,
    url: str | None = None,
    command: str | None = None,
) -> Callable[[], AbstractAsyncContextManager[RecordingTransport]]:
    """``factory`` (opens one transport each call) with each transport it opens recorded:
    a new ``connection`` number per transport (``Recorder.next_connection``), a ``"spawn"``
    lifecycle entry when it started a process (its ``pid``; ``command``: argv[0]) and a
    ``"connect"`` one once it is open (``url`` through ``redact_url``: a remote server)."""

    @asynccontextmanager
    async def recorded() -> AsyncGenerator[RecordingTransport, None]:
        wrapped: RecordingTransport | None = None
        try:
            async with factory() as inner:
                connection = recorder.next_connection(server)
                wrapped = RecordingTransport(inner, recorder, server, connection, transport)
                pid = getattr(inner, "pid", None)
                if isinstance(pid, int):
                    recorder.entry(
                        server, connection, "lifecycle", event="spawn", pid=pid, command=command or ""
                    )
                fields: dict[str, Any] = {"event": "connect", "transport": transport}
                if url is not None:
                    fields["url"] = redact_url(url)
                recorder.entry(server, connection, "lifecycle", **fields)
                yield wrapped
        finally:
            if wrapped is not None:  # closed now (its process reaped), however it ended
                wrapped.record_end()

    return recorded

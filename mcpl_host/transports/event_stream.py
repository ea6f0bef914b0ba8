"""Server-Sent Events framing on bytes (WHATWG HTML §9.2.6 "Interpreting an event stream";
MCP 2025-11-25 "Transports" §Streamable HTTP and MCP 2024-11-05 §HTTP with SSE carry their
messages in it). Pure: no I/O; the HTTP transports feed it the decoded body.

Rules (docs/protocol.md SSE1):

- A line ends at CR, LF or CRLF (a CRLF split across two chunks, or by an empty chunk, is one
  line end); one UTF-8 byte order mark at the start of the stream is dropped.
- A blank line dispatches the event gathered since the last one; a line starting with ``:``
  is a comment; any other line is ``field:value`` (one space after the colon dropped; a line
  without a colon is a field with an empty value). ``data`` lines are joined with LF;
  ``event`` names the type (``message`` when none); ``id`` (not holding NUL) is the event's
  id; ``retry`` counts only when it is ASCII digits (milliseconds; more than 18 significant
  digits read as 10**18, beyond every delay); other fields are ignored.
  An event is dispatched when it set any of the four; one the stream ends before its blank
  line is dropped. An event of type ``message`` with neither ``id`` nor ``retry`` (what
  nearly every server sends) is handed over as its data alone (``bytes``), any other as a
  ``ServerSentEvent`` (``as_event`` makes one of either).
- Data and ids are UTF-8, decoding errors replaced (U+FFFD), as the standard decodes the
  stream: data that is all ASCII passes unchanged, with no decoding at all.
- Bounds: the bytes of the current event (every line since the last blank line, each line
  end counted as one byte, the unfinished line included) past ``max_event_bytes``
  (``Limits.max_sse_event_bytes``) raise at once, so no buffer here grows past it; an
  event's data over ``max_data_bytes`` (``Limits.max_line_bytes``, one JSON-RPC message)
  raises too, counted as handed over (after decoding errors are replaced: U+FFFD is three
  bytes). The error holds the events the same chunk completed before it, so none read
  is lost with the chunk.

The rules are those httpx-sse follows, but for the byte order mark (it keeps it) and
``retry`` (it takes whatever ``int()`` reads: signs, spaces, other digits); tests compare
the two on generated streams.
"""

from __future__ import annotations

import re
from typing import NamedTuple, TypeAlias

from mcpl_host.jsonrpc.envelope import tuple_new

__all__ = ["Event", "EventStreamParser", "EventTooLarge", "ServerSentEvent", "as_event"]

_BOM = b"\xef\xbb\xbf"
#: Significant digits of a ``retry`` read as they are; one with more is read as
#: ``10**_RETRY_DIGITS`` ms, beyond every bound of a delay (``int()`` refuses over 4,300).
_RETRY_DIGITS = 18
#: The two shapes of event nearly every server sends, one line of data each, from an
#: event's start to its blank line; with the bytes each adds to its data. A match begins
#: at a line's start (``^``, MULTILINE): one that may begin anywhere is tried again at each
#: ``data: `` inside a long line, each try reading the rest of the line (quadratic CPU).
_SHAPES = (
    (b"event: message\ndata: ", re.compile(rb"(?m)^event: message\ndata: ([^\n]*)\n\n"), 23),
    (b"data: ", re.compile(rb"(?m)^data: ([^\n]*)\n\n"), 8),
)


def _retry_ms(digits: bytes) -> int:
    """A ``retry`` field's ASCII digits as milliseconds (module rules), never raising."""
    significant = digits.lstrip(b"0")
    return int(significant or b"0") if len(significant) <= _RETRY_DIGITS else 10**_RETRY_DIGITS


class EventTooLarge(Exception):
    """An event or its data went past its bound; ``str()`` names the bound. ``events``: the
    events the same chunk completed before it, in order (to be handed over first)."""

    def __init__(self, message: str, events: list[Event]) -> None:
        super().__init__(message)
        self.events = events


class ServerSentEvent(NamedTuple):
    """One dispatched event: its type (``"message"`` when the stream named none), its data
    (the ``data`` lines joined with LF, UTF-8), its ``id`` (empty when it had none) and its
    ``retry`` (milliseconds, None when it had none)."""

    event: str
    data: bytes
    id: str
    retry: int | None


#: What ``feed`` hands over for one event: a ``message`` event with neither ``id`` nor
#: ``retry`` as its data alone, any other as a ``ServerSentEvent`` (module rules).
Event: TypeAlias = "ServerSentEvent | bytes"


def as_event(event: Event) -> ServerSentEvent:
    """``event`` as a ``ServerSentEvent`` (data alone is a ``message`` event without ``id``
    or ``retry``)."""
    return ServerSentEvent("message", event, "", None) if isinstance(event, bytes) else event


class EventStreamParser:
    """Splits an event stream into events as its bytes arrive (module rules).
    ``feed(chunk)`` returns the events the chunk completed, in order (``Event``)."""

    __slots__ = (
        "_cr",
        "_data",
        "_event",
        "_fields",
        "_head",
        "_id",
        "_max_data",
        "_max_event",
        "_partial",
        "_retry",
        "_size",
    )

    def __init__(self, max_event_bytes: int, max_data_bytes: int) -> None:
        self._max_event = max_event_bytes
        self._max_data = max_data_bytes
        self._partial = bytearray()  # the unfinished line
        self._size = 0  # bytes of the current event's finished lines, one per line end
        self._data: list[bytes] = []
        self._event = b""
        self._id = ""
        self._retry: int | None = None
        self._fields = False  # the current event set a field: a blank line dispatches it
        self._cr = False  # the last chunk ended in CR: an LF starting the next completes it
        self._head: bytes | None = b""  # the stream's first bytes while a BOM may be in them

    def feed(self, chunk: bytes) -> list[Event]:
        """The events ``chunk`` completes. Raises ``EventTooLarge`` (module rules: bounds),
        holding those the chunk completed before the bound was passed."""
        if not chunk:
            return []
        if self._head is not None:
            head = self._head + chunk
            if len(head) < len(_BOM) and _BOM.startswith(head):
                self._head = head
                return []
            self._head = None
            chunk = head[len(_BOM) :] if head.startswith(_BOM) else head
            if not chunk:
                return []
        if self._cr:
            self._cr = False
            if chunk[0] == 10:  # LF: the second half of a CRLF
                chunk = chunk[1:]
                if not chunk:
                    return []
        if b"\r" in chunk:
            self._cr = chunk[-1] == 13
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        events: list[Event] = []
        if b"\n" not in chunk:  # (at memchr's speed: a large event's reads end no line)
            self._read_lines(chunk, events)
            return events
        # Read in pieces, in order (the line rules read a stream cut anywhere as a whole):
        # the event already begun, to its blank line; then the whole events that follow,
        # which, when they are all of one common shape, are taken at once (_whole_events);
        # then the start of the next event.
        if self._size or self._partial:
            end = chunk.find(b"\n\n") + 2
            if end < 2:
                self._read_lines(chunk, events)
                return events
            self._read_lines(chunk[:end], events)
            chunk = chunk[end:]
        end = chunk.rfind(b"\n\n") + 2
        if end >= 2:
            found = self._whole_events(chunk[:end] if end < len(chunk) else chunk)
            if found is not None:
                events += found
                chunk = chunk[end:]
        self._read_lines(chunk, events)
        return events

    def _whole_events(self, whole: bytes) -> list[bytes] | None:
        """The data of each event of ``whole`` (whole events, from an event's start) when
        every one is of the same shape of ``_SHAPES`` (one ``data`` line, no CR nor LF in
        it), ASCII, and within the bounds: what the line rules make of them, each a
        ``message`` event without ``id`` or ``retry``. None otherwise (the line rules read
        them then, and raise for a bound passed)."""
        for prefix, pattern, added in _SHAPES:
            if not whole.startswith(prefix):
                continue
            found: list[bytes] = pattern.findall(whole)
            joined = b"".join(found)
            # Matches never overlap: when their bytes add up to all of ``whole``, they are all of it.
            if len(joined) + added * len(found) != len(whole) or not joined.isascii():
                return None
            longest = max(map(len, found))
            # An event's bytes: its lines, each line end counted as one (module rules: bounds).
            if longest + added - 1 > self._max_event or longest > self._max_data:
                return None
            return found
        return None

    def _read_lines(self, chunk: bytes, events: list[Event]) -> None:
        """Read ``chunk`` (line ends made LF) by the line rules, appending the events it
        completes to ``events``; raises ``EventTooLarge`` as ``feed`` says."""
        if not chunk:
            return
        lines = chunk.split(b"\n")
        rest = lines.pop()  # after the last line end: the start of an unfinished line
        partial = self._partial
        if not lines:
            partial += rest
            if self._size + len(partial) > self._max_event:
                raise self._too_large(events)
            return
        if partial:
            partial += lines[0]
            lines[0] = bytes(partial)
            partial.clear()
        size, limit, data, fields = self._size, self._max_event, self._data, self._fields
        event, event_id, retry = self._event, self._id, self._retry
        for line in lines:  # the common lines first: data, then a blank line
            if line.startswith(b"data:"):
                size += len(line) + 1
                if size > limit:
                    raise self._too_large(events)
                data.append(line[6:] if line[5:6] == b" " else line[5:])
                fields = True
            elif not line:
                size = 0
                if fields:
                    events.append(self._dispatch(event, data, event_id, retry, events))
                    data, event, event_id, retry, fields = [], b"", "", None, False
            else:
                size += len(line) + 1
                if size > limit:
                    raise self._too_large(events)
                if line == b"event: message":  # what most servers send before each message
                    event, fields = b"message", True
                    continue
                if line[0] == 58:  # ":": a comment
                    continue
                name, _, value = line.partition(b":")
                if value[:1] == b" ":
                    value = value[1:]
                if name == b"event":
                    event = value
                elif name == b"data":
                    data.append(value)
                elif name == b"id":
                    if b"\0" in value:
                        continue
                    event_id = value.decode("utf-8", "replace")
                elif name == b"retry":
                    if not value.isdigit():
                        continue
                    retry = _retry_ms(value)
                else:
                    continue
                fields = True
        self._size, self._data, self._fields = size, data, fields
        self._event, self._id, self._retry = event, event_id, retry
        if rest:
            partial += rest
            if size + len(partial) > limit:
                raise self._too_large(events)

    def _dispatch(
        self, event: bytes, data: list[bytes], event_id: str, retry: int | None, before: list[Event]
    ) -> Event:
        """The event gathered; raises ``EventTooLarge`` (holding ``before``: the chunk's events
        so far) when its data is over its bound."""
        joined = data[0] if len(data) == 1 else b"\n".join(data)
        if not joined.isascii():  # (bounded as handed over: each byte replaced grows to 3)
            joined = joined.decode("utf-8", "replace").encode("utf-8")
        if len(joined) > self._max_data:
            raise EventTooLarge(f"a message over {self._max_data} bytes (limits.max_line_bytes)", before)
        if event == b"message" or not event:
            if not event_id and retry is None:
                return joined
            return tuple_new(ServerSentEvent, ("message", joined, event_id, retry))
        return tuple_new(ServerSentEvent, (event.decode("utf-8", "replace"), joined, event_id, retry))

    def _too_large(self, before: list[Event]) -> EventTooLarge:
        return EventTooLarge(
            f"a Server-Sent Event over {self._max_event} bytes (limits.max_sse_event_bytes)", before
        )

"""Newline-delimited JSON framing (MCP stdio transport; PROTOCOL.md §1.1).

Rules of this module:

- ``LineReader`` turns a byte stream into lines. It never decodes (orjson takes bytes, so a
  UTF-8 character split across reads is harmless), strips one trailing ``\\r`` (CRLF), and
  scans each byte once: the search for ``\\n`` resumes where the last one stopped, so a line
  fed one byte at a time costs linear time.
- A line longer than ``max_line_bytes`` is dropped: the reader reports one ``LineTooLong``,
  discards bytes until the next newline without buffering them, and then goes on. Memory
  never grows past the bound, even for a stream with no newline at all.
- ``loads_line`` parses with orjson and falls back to the standard library for valid JSON
  orjson refuses (lone surrogates, nesting past 1024) or would change: orjson reads an
  integer beyond 64 bits as a float, so a line holding a run of 20 or more digits is parsed
  by the standard library, which keeps it exact. No valid line is lost to a parser limit
  (ENVELOPE.md D6). ``dumps_message`` does the same on the way out, so an answer
  echoes such an id with the same value.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, TypeAlias

import orjson

from mcpl_host.limits import DEFAULT_MAX_LINE_BYTES

__all__ = ["LineReader", "LineTooLong", "ReadItem", "dumps_message", "loads_line"]


@dataclass(frozen=True, slots=True)
class LineTooLong:
    """A line exceeded the bound and is being dropped. ``max_line_bytes``: the bound."""

    max_line_bytes: int


ReadItem: TypeAlias = "bytes | LineTooLong"


class LineReader:
    """Split a byte stream into lines of at most ``max_line_bytes`` bytes.

    ``feed(data)`` returns the complete lines (``bytes``, without ``\\n`` or a trailing
    ``\\r``) and ``LineTooLong`` markers, in stream order. ``finish()`` returns the last
    unterminated line at end of stream, if any. Neither raises.
    """

    __slots__ = ("_buffer", "_discarding", "_max", "_scanned")

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be at least 1")
        self._max = max_line_bytes
        self._buffer = bytearray()
        self._scanned = 0  # bytes of _buffer already searched for b"\n"
        self._discarding = False  # inside an over-long line: drop until the next newline

    @property
    def buffered_bytes(self) -> int:
        """Bytes held for an unfinished line (never more than ``max_line_bytes``)."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[ReadItem]:
        """Add bytes read from the stream; return what they complete."""
        out: list[ReadItem] = []
        if self._discarding:
            newline = data.find(b"\n")
            if newline < 0:
                return out
            self._discarding = False
            data = data[newline + 1 :]
        buffer = self._buffer
        buffer += data
        start = 0
        while True:
            newline = buffer.find(b"\n", max(start, self._scanned))
            if newline < 0:
                break
            end = newline - 1 if newline > start and buffer[newline - 1] == 0x0D else newline
            if end - start > self._max:
                out.append(LineTooLong(self._max))
            else:
                out.append(bytes(buffer[start:end]))
            start = newline + 1
        if start:
            del buffer[:start]
        self._scanned = len(buffer)
        # A trailing \r may be half of a CRLF whose \n has not arrived: it does not count.
        if len(buffer) - (buffer[-1:] == b"\r") > self._max:
            # No newline within the bound: drop what we hold and the rest of this line.
            out.append(LineTooLong(self._max))
            buffer.clear()
            self._scanned = 0
            self._discarding = True
        return out

    def finish(self) -> list[ReadItem]:
        """End of stream: return the unterminated last line, if any, and reset."""
        rest = bytes(self._buffer)
        self._buffer.clear()
        self._scanned = 0
        self._discarding = False
        if rest.endswith(b"\r"):
            rest = rest[:-1]
        return [rest] if rest.strip() else []


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# Integers orjson cannot hold exactly (outside [-2**63, 2**64 - 1]) have at least 20 digits,
# or 19 after a minus sign. A match may also be digits inside a string: then the standard
# library parses the line, equally correctly.
_LONG_DIGIT_RUN = re.compile(rb"-\d{19}|\d{20}")


def loads_line(line: bytes) -> Any:
    """Parse one line of JSON text (RFC 8259) into Python values.

    Raises:
        ValueError: the line is not JSON (``NaN``/``Infinity`` included, which the standard
            library would otherwise accept).
    """
    if _LONG_DIGIT_RUN.search(line) is None:
        try:
            return orjson.loads(line)
        except orjson.JSONDecodeError:
            pass
    # orjson refuses some valid JSON (lone surrogate escapes, nesting deeper than 1024) and
    # turns integers beyond 64 bits into floats: the standard library keeps those (D6).
    try:
        # Decoded first: JSON text is UTF-8 (RFC 8259 §8.1); json.loads would also guess
        # UTF-16 or UTF-32 from bytes.
        return json.loads(line.decode("utf-8"), parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise ValueError("not JSON") from exc


def dumps_message(message: Any) -> bytes:
    """Serialize one message as a compact JSON line ending in ``\\n`` (MCP stdio framing).

    Raises:
        TypeError: ``message`` holds a value that is not JSON (a bug in the caller).
    """
    try:
        return orjson.dumps(message, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:
        # Integers beyond 64 bits and lone surrogates (ids echoed from a server): the
        # standard library writes them, escaped to ASCII so the line is valid UTF-8.
        text = json.dumps(message, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
        return text.encode("ascii") + b"\n"

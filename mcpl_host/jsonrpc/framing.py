"""Newline-delimited JSON framing (MCP 2025-11-25, "Transports", stdio).

Rules of this module:

- ``LineReader`` turns a byte stream into lines. It never decodes (orjson takes bytes, so a
  UTF-8 character split across reads is harmless), strips one trailing ``\\r`` (CRLF), and
  scans each byte once: each chunk is searched for ``\\n`` as it arrives, so a line fed one
  byte at a time costs linear time. It copies each byte once: a line within one chunk is a
  slice of it, the pieces of a longer one are joined once, at its newline.
- A line longer than ``max_line_bytes`` is dropped: the reader keeps its first
  ``head_bytes`` bytes and counts the rest without buffering them, and reports one
  ``LineTooLong`` (bound, size, head) when the line ends; then it goes on. Memory never
  grows past the bound, even for a stream with no newline at all.
- ``peek_id`` / ``peek_envelope`` read the top-level ``id`` (and member names) from such a
  head without parsing the rest, so the request a dropped answer was for can be failed at
  once (JSON-RPC 2.0 §5: the id identifies the answer).
- ``loads_line`` parses with orjson and falls back to the standard library for valid JSON
  orjson refuses (lone surrogates) or would change: orjson reads an integer beyond 64 bits
  as a float, so a line holding a run of 20 or more digits (19 after a minus sign) is parsed
  again by the standard library, which keeps it exact. The check costs little: a short line
  is searched at C speed; of a long one, the parsed value is walked first (a float of
  magnitude 2**63 or more is what such an integer becomes), within a work bound past which
  the line is searched instead. JSON nested deeper than both handle (orjson: 1024 levels,
  the standard library: about 1,000) goes to ``loads_iterative``, which uses no recursion,
  up to ``Limits.max_json_depth`` levels in lines of up to ``Limits.max_deep_json_bytes``
  (it costs up to some 600 ns per byte, hundreds of times orjson's); beyond either bound it
  raises ``JSONTooDeep``, which names the depth or size and the bound. No valid line within the bounds is lost to a parser limit
  (docs/protocol.md D6) but one: an integer of more digits than the interpreter converts
  (4,300 by default). A line that cannot be read raises ``NotReadableJSON``, which says why
  (not UTF-8, not JSON at a character, that integer), so the request its id names can be
  failed with the reason. ``dumps_message`` does the same on the way out, so an answer echoes
  such an id with the same value.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, TypeAlias, cast

import orjson

from mcpl_host.jsonrpc.values import is_array, is_object
from mcpl_host.limits import (
    DEFAULT_LINE_HEAD_BYTES,
    DEFAULT_MAX_DEEP_JSON_BYTES,
    DEFAULT_MAX_JSON_DEPTH,
    DEFAULT_MAX_LINE_BYTES,
)

__all__ = [
    "ORJSON_MAX_DEPTH",
    "HeadPeek",
    "JSONTooDeep",
    "LineReader",
    "LineTooLong",
    "NotReadableJSON",
    "SMALL_PIECE_BYTES",
    "ReadItem",
    "dumps_json",
    "dumps_message",
    "gather",
    "joined",
    "loads_iterative",
    "loads_line",
    "peek_envelope",
    "peek_id",
]


@dataclass(frozen=True, slots=True)
class LineTooLong:
    """A line exceeded the bound and was dropped, reported once it ended (at its newline, or
    at the end of the stream).

    ``max_line_bytes``: the bound; ``size``: the line's length in bytes (without its newline
    and a ``\r`` before it); ``head``: its first bytes (at most the reader's
    ``head_bytes``), enough to read its ``id`` with ``peek_id``.
    """

    max_line_bytes: int
    size: int
    head: bytes = b""


ReadItem: TypeAlias = "bytes | LineTooLong"


#: Pieces shorter than this, of a line or message still arriving, are gathered into one
#: buffer rather than kept one object each (``gather``), in bytes.
SMALL_PIECE_BYTES = 4096


def gather(parts: list[bytes | bytearray], piece: bytes) -> None:
    """Append ``piece``, the next bytes of a line or message still arriving, to ``parts``:
    as it came, or, when shorter than ``SMALL_PIECE_BYTES``, into the buffer at the end of
    ``parts`` (one made for it if there is none). A server that sends its bytes two at a
    time (a read, a WebSocket fragment each) so costs the bytes it sent, not an object of
    some 40 bytes for each piece; large pieces are still copied once, when joined."""
    if len(piece) >= SMALL_PIECE_BYTES:
        parts.append(piece)
    elif parts and type(parts[-1]) is bytearray:
        parts[-1] += piece
    else:
        parts.append(bytearray(piece))


def joined(parts: list[bytes | bytearray]) -> bytes:
    """The bytes of ``parts`` (``gather``), as one ``bytes``."""
    if len(parts) == 1 and type(parts[0]) is bytes:
        return parts[0]
    return b"".join(parts)


class LineReader:
    """Split a byte stream into lines of at most ``max_line_bytes`` bytes.

    ``feed(data)`` returns the complete lines (``bytes``, without ``\n`` or a trailing
    ``\r``) and ``LineTooLong`` markers, in stream order. ``finish()`` returns the last
    unterminated line at end of stream, if any. Neither raises. Of a line over the bound,
    only its first ``head_bytes`` bytes (and a count) are kept.

    Each byte is copied once: a line inside one chunk is a slice of it; the pieces of a line
    that spans chunks are kept as they came (small ones gathered in a buffer: ``gather``)
    and joined once, when its newline arrives. A chunk no longer than the bound and without
    ``\r`` (the usual one) is cut into its lines by one ``bytes.split``.
    """

    __slots__ = (
        "_cr",
        "_discarding",
        "_head",
        "_head_max",
        "_max",
        "_partial",
        "_parts",
        "_size",
    )

    def __init__(
        self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, head_bytes: int = DEFAULT_LINE_HEAD_BYTES
    ) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be at least 1")
        if head_bytes < 0:
            raise ValueError("head_bytes must not be negative")
        self._max = max_line_bytes
        self._head_max = min(head_bytes, max_line_bytes)
        # The unfinished line: the pieces read so far (each searched for b"\n" once) and
        # their total length.
        self._parts: list[bytes | bytearray] = []
        self._partial = 0
        # Inside an over-long line: drop until the next newline, keeping its head and size.
        self._discarding = False
        self._head = b""
        self._size = 0
        self._cr = False  # the last byte dropped was \r

    @property
    def buffered_bytes(self) -> int:
        """Bytes held for an unfinished line (never more than ``max_line_bytes``, plus the
        head of a line being dropped)."""
        return self._partial + len(self._head)

    def _drop(self, data: bytes | bytearray, start: int, end: int) -> None:
        """Count ``data[start:end]`` as part of the line being dropped, keeping its head."""
        if end <= start:
            return
        room = self._head_max - len(self._head)
        if room > 0:
            self._head += bytes(data[start : min(end, start + room)])
        self._size += end - start
        self._cr = data[end - 1] == 0x0D

    def _dropped(self) -> LineTooLong:
        size = self._size - 1 if self._cr else self._size
        marker = LineTooLong(self._max, size, self._head[:size])
        self._discarding, self._head, self._size, self._cr = False, b"", 0, False
        return marker

    def _hold(self, data: bytes, start: int) -> None:
        """Keep ``data[start:]``, the start of a line whose newline has not arrived, or start
        dropping that line once it is over the bound."""
        size = self._partial + len(data) - start
        # A trailing \r may be half of a CRLF whose \n has not arrived: it does not count.
        if size - (data[-1] == 0x0D) <= self._max:
            gather(self._parts, data[start:] if start else data)
            self._partial = size
            return
        # No newline within the bound: keep the head, drop the rest of this line.
        self._discarding = True
        for part in self._parts:
            self._drop(part, 0, len(part))
        self._parts, self._partial = [], 0
        self._drop(data, start, len(data))

    def _complete(self, data: bytes, newline: int) -> ReadItem:
        """The line held in ``_parts``, ended by ``data[:newline]`` (its newline at
        ``newline``)."""
        parts, size = self._parts, self._partial
        if newline:
            end = newline - 1 if data[newline - 1] == 0x0D else newline
            gather(parts, data[:end])
            size += end
        elif parts[-1].endswith(b"\r"):  # the \r of a CRLF split between reads
            parts[-1] = parts[-1][:-1]
            size -= 1
        self._parts, self._partial = [], 0
        if size > self._max:
            head = b""
            for part in parts:
                if len(head) >= self._head_max:
                    break
                head += bytes(part[: self._head_max - len(head)])
            return LineTooLong(self._max, size, head)
        return joined(parts)

    def feed(self, data: bytes) -> list[ReadItem]:
        """Add bytes read from the stream; return what they complete."""
        if type(data) is not bytes:
            data = bytes(data)
        out: list[ReadItem] = []
        start = 0
        if self._discarding or self._parts:
            newline = data.find(b"\n")
            if newline < 0:
                if self._discarding:
                    self._drop(data, 0, len(data))
                elif data:
                    self._hold(data, 0)
                return out
            if self._discarding:
                self._drop(data, 0, newline)
                out.append(self._dropped())
            else:
                out.append(self._complete(data, newline))
            start = newline + 1
        find, limit = data.find, self._max
        if len(data) <= limit and b"\r" not in data:
            # The usual chunk: no line in it can be over the bound and none ends in \r, so
            # one split at C speed gives its lines (each byte still copied once).
            lines = data.split(b"\n")
            if start:
                del lines[0]  # it ended the line held before (above)
            rest = lines.pop()
            out += lines
            if rest:
                self._hold(rest, 0)
            return out
        while (newline := find(b"\n", start)) >= 0:
            end = newline - 1 if newline > start and data[newline - 1] == 0x0D else newline
            if end - start > limit:
                out.append(LineTooLong(limit, end - start, data[start : start + self._head_max]))
            else:
                out.append(data[start:end])
            start = newline + 1
        if start < len(data):
            self._hold(data, start)
        return out

    def finish(self) -> list[ReadItem]:
        """End of stream: return the unterminated last line (or the marker of a last line
        that was too long), if any, and reset."""
        if self._discarding:
            return [self._dropped()]
        rest = joined(self._parts)
        self._parts, self._partial = [], 0
        if rest.endswith(b"\r"):
            rest = rest[:-1]
        return [rest] if rest.strip() else []


class NotReadableJSON(ValueError):
    """A line ``loads_line`` cannot read: not UTF-8, not JSON, or holding an integer with
    more digits than the interpreter converts (``sys.get_int_max_str_digits()``: 4300 by
    default; valid JSON, past what the host reads). ``str()`` says which, with a position
    or a count, never the line's content."""


class _ConstantRefused(ValueError):
    pass


class _TooManyDigits(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _ConstantRefused(f"{name} is not JSON")


def _int_digits_limit() -> int:
    """The interpreter's bound on the digits of an integer it converts (0: none)."""
    limit: Callable[[], int] | None = getattr(sys, "get_int_max_str_digits", None)
    return limit() if limit is not None else 0


def _not_readable(exc: ValueError) -> NotReadableJSON:
    """The reason, as ``NotReadableJSON``, for what the standard library (or
    ``loads_iterative``) raised while parsing a line."""
    if isinstance(exc, json.JSONDecodeError):
        return NotReadableJSON(f"not JSON ({exc.msg} at character {exc.pos})")
    if isinstance(exc, _ConstantRefused):
        return NotReadableJSON(f"not JSON ({exc})")
    if isinstance(exc, _TooManyDigits) or "integer string conversion" in str(exc):
        return NotReadableJSON(
            f"an integer of more than {_int_digits_limit()} digits, the most the host converts"
            " (valid JSON, not readable here)"
        )
    return NotReadableJSON(f"not JSON ({exc})")


# Integers orjson cannot hold exactly (outside [-2**63, 2**64 - 1]) have at least 20 digits,
# or 19 after a minus sign. A match may also be digits inside a string: then the standard
# library parses the line, equally correctly.
_LONG_DIGIT_RUN = re.compile(rb"-\d{19}|\d{20}")
# The same search at C speed, as a first filter: every digit becomes "0", then a run of 19.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_NINETEEN_DIGITS = b"0" * 19
# orjson reads such an integer as a float of at least this magnitude.
_TWO_TO_63 = float(2**63)
# Lines up to this length are searched for a long digit run; longer ones have their parsed
# value walked first (a large result is mostly strings: a few containers to look at).
_SEARCHED_LINE_BYTES = 4096
# Work allowed for that walk, per byte of the line (units: values looked at, 32 per
# container); past it the line is searched instead, so no line costs more than both.
_WALK_BYTES_PER_UNIT = 32


def _has_long_digit_run(line: bytes) -> bool:
    return line.translate(_DIGITS_AS_ZERO).find(_NINETEEN_DIGITS) >= 0 and bool(_LONG_DIGIT_RUN.search(line))


def _walk_finds_large_float(value: object, budget: int) -> bool | None:
    """True when ``value`` (as orjson returns it) holds a float of magnitude 2**63 or more,
    False when it holds none, None when ``budget`` ran out first."""
    if type(value) is float:
        return abs(value) >= _TWO_TO_63
    stack: list[Any] = [value]
    while stack:
        node: Any = stack.pop()
        if type(node) is dict:
            items = cast("Collection[Any]", node.values())
        elif type(node) is list:
            items = cast("Collection[Any]", node)
        else:
            continue
        budget -= len(items) + 32
        if budget < 0:
            return None
        kinds = set(map(type, items))
        if float in kinds and any(type(item) is float and abs(item) >= _TWO_TO_63 for item in items):
            return True
        if dict in kinds or list in kinds:
            stack.extend([item for item in items if type(item) is dict or type(item) is list])
    return False


def _orjson_may_have_changed(value: object, line: bytes) -> bool:
    """Whether ``value``, orjson's reading of ``line``, may hold an integer it turned into a
    float (one beyond 64 bits): then the line is parsed again by the standard library."""
    if len(line) <= _SEARCHED_LINE_BYTES:
        return _has_long_digit_run(line)
    # A large float may also be one as written (1e19): the search tells.
    found = _walk_finds_large_float(value, len(line) // _WALK_BYTES_PER_UNIT)
    return found is not False and _has_long_digit_run(line)


#: Nesting orjson parses (it refuses deeper documents).
ORJSON_MAX_DEPTH = 1024


class JSONTooDeep(ValueError):
    """Valid-looking JSON nested deeper than the parsers here take: deeper than
    ``max_depth`` levels (``Limits.max_json_depth``), or deeper than orjson and the standard
    library handle in a line longer than ``max_size`` bytes (``Limits.max_deep_json_bytes``:
    the iterative parser costs far more time per byte, so its work is bounded).

    ``depth``: the level refused (the bound plus one), or None for a line over ``max_size``;
    ``offset``: the character offset where that level opens (None likewise); ``size``: the
    line's length in bytes.
    """

    def __init__(
        self,
        *,
        max_depth: int,
        size: int,
        max_size: int,
        depth: int | None = None,
        offset: int | None = None,
    ) -> None:
        self.depth, self.max_depth, self.offset = depth, max_depth, offset
        self.size, self.max_size = size, max_size
        if depth is not None:
            message = (
                f"JSON nested more than {max_depth} levels deep (level {depth} opens at "
                f"character {offset}); the bound is Limits.max_json_depth = {max_depth}"
            )
        else:
            message = (
                f"JSON nested more than {ORJSON_MAX_DEPTH} levels deep in a line of {size} bytes; "
                f"such lines are parsed up to Limits.max_deep_json_bytes = {max_size} bytes"
            )
        super().__init__(message)


def loads_line(
    line: bytes,
    max_depth: int = DEFAULT_MAX_JSON_DEPTH,
    max_deep_bytes: int = DEFAULT_MAX_DEEP_JSON_BYTES,
) -> Any:
    """Parse one line of JSON text (RFC 8259) into Python values.

    orjson first; the standard library for valid JSON orjson refuses or would change (lone
    surrogates, integers beyond 64 bits); and for nesting deeper than both of them handle
    (about 1,000 levels) ``loads_iterative``, up to ``max_depth`` levels, in a line of at
    most ``max_deep_bytes`` bytes (a depth bound below ``ORJSON_MAX_DEPTH`` does not refuse
    what orjson parses).

    Raises:
        JSONTooDeep: the line nests deeper than ``max_depth``, or deeper than orjson and the
            standard library take in a line over ``max_deep_bytes`` (a ``ValueError``).
        NotReadableJSON: the line is not UTF-8, not JSON (``NaN``/``Infinity``
            included, which the standard library would otherwise accept), or holds an
            integer of more digits than the interpreter converts; ``str()`` says which (a
            ``ValueError``).
    """
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        pass
    else:
        # The common short line: one search at C speed (_orjson_may_have_changed, inlined).
        if len(line) <= _SEARCHED_LINE_BYTES:
            if line.translate(_DIGITS_AS_ZERO).find(_NINETEEN_DIGITS) < 0 or not _LONG_DIGIT_RUN.search(line):
                return value
        elif not _orjson_may_have_changed(value, line):
            return value
    # orjson refuses some valid JSON (lone surrogate escapes, nesting deeper than 1024) and
    # turns integers beyond 64 bits into floats: the standard library keeps those (D6).
    try:
        # Decoded first: JSON text is UTF-8 (RFC 8259 §8.1); json.loads would also guess
        # UTF-16 or UTF-32 from bytes.
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotReadableJSON(f"not valid UTF-8 (at byte {exc.start}; RFC 8259 §8.1)") from None
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        pass  # nested deeper than the interpreter's recursion limit: parse without recursing
    except ValueError as exc:
        raise _not_readable(exc) from None
    if len(line) > max_deep_bytes:
        raise JSONTooDeep(max_depth=max_depth, size=len(line), max_size=max_deep_bytes)
    try:
        return loads_iterative(text, max_depth=max_depth)
    except JSONTooDeep as exc:
        raise JSONTooDeep(
            depth=exc.depth, offset=exc.offset, max_depth=max_depth, size=len(line), max_size=max_deep_bytes
        ) from None
    except ValueError as exc:
        raise _not_readable(exc) from None


_WS = re.compile(r"[ \t\n\r]*")


def _ws_end(text: str, pos: int) -> int:
    """The offset after the whitespace at ``pos`` (the pattern matches the empty string)."""
    match = _WS.match(text, pos)
    return match.end() if match is not None else pos


_NUMBER = re.compile(r"(-?(?:0|[1-9][0-9]*))(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_LITERALS = {"true": True, "false": False, "null": None}
#: The standard library's string scanner (C): ``(text, offset after the opening quote,
#: strict) -> (value, offset after the closing quote)``; raises ``JSONDecodeError``.
_scanstring: Callable[[str, int, bool], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]  # missing from the stub


def loads_iterative(text: str, *, max_depth: int = DEFAULT_MAX_JSON_DEPTH) -> Any:
    """Parse JSON text (RFC 8259) with an explicit stack instead of recursion, so that
    nesting costs memory, not the interpreter's stack. Same values as ``json.loads``
    (strings through its ``scanstring``, lone surrogates kept; exact integers; a repeated
    key keeps its last value), but ``NaN`` and ``Infinity`` are refused.

    Raises:
        JSONTooDeep: nesting deeper than ``max_depth`` arrays and objects.
        ValueError: not JSON.
    """
    ws = _ws_end
    scan = _scanstring
    containers: list[list[Any] | dict[str, Any]] = []  # open lists and dicts, outermost first
    keys: list[str] = []  # the pending key of each open dict (a placeholder for lists)
    end = len(text)
    pos = ws(text, 0)

    def key_at(pos: int) -> tuple[str, int]:
        if text[pos : pos + 1] != '"':
            raise ValueError(f"expected a member name at character {pos}")
        key, pos = scan(text, pos + 1, True)
        pos = ws(text, pos)
        if text[pos : pos + 1] != ":":
            raise ValueError(f"expected ':' at character {pos}")
        return key, ws(text, pos + 1)

    while True:
        char = text[pos : pos + 1]
        value: Any
        if char in ("{", "["):
            if len(containers) >= max_depth:
                raise JSONTooDeep(
                    depth=len(containers) + 1,
                    offset=pos,
                    max_depth=max_depth,
                    size=len(text),
                    max_size=len(text),
                )
            pos = ws(text, pos + 1)
            if char == "{":
                if text[pos : pos + 1] == "}":
                    value, pos = {}, pos + 1
                else:
                    key, pos = key_at(pos)
                    containers.append({})
                    keys.append(key)
                    continue
            elif text[pos : pos + 1] == "]":
                value, pos = [], pos + 1
            else:
                containers.append([])
                keys.append("")
                continue
        elif char == '"':
            value, pos = scan(text, pos + 1, True)
        elif (number := _NUMBER.match(text, pos)) is not None:
            whole, fraction, exponent = number.groups()
            if fraction or exponent:
                value = float(number.group())
            else:
                try:
                    value = int(whole)
                except ValueError:  # more digits than the interpreter converts
                    raise _TooManyDigits(f"an integer of {len(whole)} characters") from None
            pos = number.end()
        else:
            for word, literal in _LITERALS.items():
                if text.startswith(word, pos):
                    value, pos = literal, pos + len(word)
                    break
            else:
                raise ValueError(f"expected a value at character {pos}")
        # Place the value, closing every container it completes.
        while True:
            if not containers:
                if ws(text, pos) != end:
                    raise ValueError(f"extra data at character {pos}")
                return value
            top = containers[-1]
            if is_array(top):
                top.append(value)
            else:
                top[keys[-1]] = value
            pos = ws(text, pos)
            char = text[pos : pos + 1]
            if char == ",":
                pos = ws(text, pos + 1)
                if is_object(top):
                    keys[-1], pos = key_at(pos)
                break
            if char != ("]" if is_array(top) else "}"):
                raise ValueError(f"expected ',' or a closing bracket at character {pos}")
            value = containers.pop()
            keys.pop()
            pos += 1


# --- reading the id from the start of a line ---------------------------------------------------

_B_WS = re.compile(rb"[ \t\n\r]*")


def _b_ws_end(head: bytes, pos: int = 0) -> int:
    match = _B_WS.match(head, pos)
    return match.end() if match is not None else pos


_B_STRING = re.compile(rb'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"')
_B_INTEGER = re.compile(rb"-?(?:0|[1-9][0-9]*)(?![0-9.eE])")
_B_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_B_LITERAL = re.compile(rb"true|false|null")
# What matters while skipping an array or object: whole strings, a string cut by the end of
# the head (a lone quote), and brackets.
_B_SKIP = re.compile(rb'"(?:[^"\\]|\\.)*"|"|[\[\]{}]')


@dataclass(frozen=True, slots=True)
class HeadPeek:
    """What the first bytes of a JSON object show (``peek_envelope``).

    ``id``: the top-level ``id`` when it is an integer or a string read whole (None
    otherwise: absent, ``null``, another type, or cut by the end of the head); ``members``:
    the top-level member names read, in order; ``complete``: the whole object was read.
    """

    id: int | str | None
    members: tuple[str, ...]
    complete: bool

    @property
    def is_response(self) -> bool:
        """It has ``result`` or ``error`` and neither ``method`` nor ``params`` among the
        members read (JSON-RPC 2.0 §5): an answer, not a request."""
        names = set(self.members)
        return bool(names & {"result", "error"}) and not names & {"method", "params"}


def _skip_value(head: bytes, pos: int) -> int | None:
    """The offset after the JSON value at ``pos``, or None if it is cut or not JSON."""
    first = head[pos : pos + 1]
    if first == b'"':
        match = _B_STRING.match(head, pos)
        return match.end() if match else None
    if first in (b"{", b"["):
        depth = 0
        for token in _B_SKIP.finditer(head, pos):
            text = token.group()
            if text == b'"':
                return None  # a string the head cuts
            if text[0] in b"[{":
                depth += 1
            elif text[0] in b"]}":
                depth -= 1
                if depth == 0:
                    return token.end()
        return None
    match = _B_NUMBER.match(head, pos) or _B_LITERAL.match(head, pos)
    return match.end() if match else None


def peek_envelope(head: bytes) -> HeadPeek:
    """Read the top-level members of a JSON object from its first bytes (a line too long
    to keep, or too deep to parse), without parsing the rest.

    Members are read in order until the head ends or stops being JSON; each value is
    skipped (arrays and objects by bracket depth, strings whole), so an ``id`` nested in
    ``params`` or ``result`` is never taken for the message's. Limits: an ``id`` that comes
    after a value the head cuts (``{"result": <32 MiB>, "id": 7}``) is not seen; a number
    is taken only when what follows it is in the head (``"id":12`` cut from ``"id":123``
    is not read); with a repeated ``id``, the last one read wins, as in a full parse, but
    one beyond the head is not seen. Never raises.
    """
    members: list[str] = []
    found: int | str | None = None
    pos = _b_ws_end(head)
    if head[pos : pos + 1] != b"{":
        return HeadPeek(None, (), False)
    pos = _b_ws_end(head, pos + 1)
    if head[pos : pos + 1] == b"}":
        return HeadPeek(None, (), True)
    while True:
        key_match = _B_STRING.match(head, pos)
        if key_match is None:
            break
        try:
            key = json.loads(key_match.group().decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            break
        pos = _b_ws_end(head, key_match.end())
        if head[pos : pos + 1] != b":":
            break
        pos = _b_ws_end(head, pos + 1)
        after = _skip_value(head, pos)
        if after is None:
            members.append(key)  # its name was read; its value is cut
            break
        if key == "id":
            token = head[pos:after]
            if _B_INTEGER.fullmatch(token):
                try:
                    found = int(token)
                except ValueError:  # more digits than the interpreter converts: never ours
                    found = None
            elif token.startswith(b'"'):
                try:
                    found = json.loads(token.decode("utf-8"))
                except (UnicodeDecodeError, ValueError):
                    found = None
            else:
                found = None  # null, a float, true...: never one of ours
        members.append(key)
        pos = _b_ws_end(head, after)
        separator = head[pos : pos + 1]
        if separator == b"}":
            return HeadPeek(found, tuple(members), True)
        if separator != b",":
            if key == "id" and (separator or not isinstance(found, str)):
                found = None  # not JSON from here (``"id":01``), or a number the head may cut
            break
        pos = _b_ws_end(head, pos + 1)
    return HeadPeek(found, tuple(members), False)


def peek_id(head: bytes) -> int | str | None:
    """The top-level JSON-RPC ``id`` read from the first bytes of a line, if it is an
    integer or a string and it is within ``head`` (see ``peek_envelope`` for the limits)."""
    return peek_envelope(head).id


def dumps_message(message: object) -> bytes:
    """Serialize one message as a compact JSON line ending in ``\\n`` (MCP stdio framing).

    Raises:
        TypeError: ``message`` holds a value that is not JSON (a bug in the caller).
    """
    try:
        return orjson.dumps(message, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:
        return _dumps_beyond_orjson(message) + b"\n"


def dumps_json(value: object) -> bytes:
    """``value`` as compact JSON text, by the rule of ``dumps_message`` (no newline): the
    piece of a line that is spliced into a line (``Session.answer_text``).

    Raises:
        TypeError: ``value`` holds a value that is not JSON (a bug in the caller).
    """
    try:
        return orjson.dumps(value)
    except TypeError:
        return _dumps_beyond_orjson(value)


def _dumps_beyond_orjson(value: object) -> bytes:
    """Integers beyond 64 bits and lone surrogates (ids echoed from a server): the standard
    library writes them, escaped to ASCII so the text is valid UTF-8."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode("ascii")

"""Log safety: ``escape_text()`` (the one escaper), ``log_value()`` (escape and cut),
``ServerValue``, ``LogBudget``; the ``Redactor`` itself lives in ``mcpl_host.secrets``.

Rules of this module (docs/protocol.md L1-L3):

- Every value from a server that reaches a log line goes through ``log_value()``: it is
  rendered as text, redacted, cut at ``DEFAULT_LOG_VALUE_MAX_UNITS`` UTF-16 code units (with
  a marker) and escaped, so it holds no raw newline, quote, backslash, control or invisible
  character and cannot pose as another field or line.
- ``escape_text()`` is the only escaper of server text: log lines use it through
  ``log_value()``, the probe report and ``run`` lines through ``mcpl_host.report.safe_text``.
  Both show an unsafe character the same way (``\\u202e``); log lines also escape quotes
  and backslashes, the report keeps them.
- Lines about a configured server pass through that server's ``Redactor`` (which secrets:
  ``mcpl_host.secrets``); any other server value through one that masks the well-known
  credential shapes. Redaction runs before the cut, so a secret is never left half visible.
- Server values travel in log events as ``ServerValue``, whose ``str``/``repr``/
  ``__structlog__`` are already safe: an embedding application's own structlog or stdlib
  logging setup cannot print raw server text.
- A server's own text meant to be read as text (its stderr lines) is logged and kept with
  ``quotes=False``: only control and invisible characters are escaped, so ``"`` stays ``"``
  in the log line, the stderr tail, the report and the JSON document.
- Diagnostics the host writes about a server's protocol output are bounded by ``LogBudget``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
import sys
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any, Literal, Protocol, TextIO

import orjson

from mcpl_host.jsonrpc.values import is_list_or_tuple, is_mapping
from mcpl_host.secrets import MIN_SECRET_CHARS, REDACTED, Redactor

if TYPE_CHECKING:
    import structlog.dev

# structlog is imported when the first logger is made, not with this module: importing it
# loads its console renderer, and with it rich and pygments (some 75 ms), which an
# application that never logs through the library need not pay for.

__all__ = [
    "CUT_MARKER",
    "DEFAULT_LOG_VALUE_MAX_UNITS",
    "LOG_VALUE_REDACTION_MARGIN_CHARS",
    "MIN_SECRET_CHARS",
    "REDACTED",
    "LogBudget",
    "Logger",
    "Redactor",
    "ServerValue",
    "configure_logging",
    "escape_text",
    "strip_unsafe",
    "get_logger",
    "json_safe",
    "log_value",
    "xml_text",
]

#: Host-wide (the host's log format, not per server; not a ``Limits`` field): characters
#: (UTF-16 code units) of one server value in a log line (docs/protocol.md L1).
DEFAULT_LOG_VALUE_MAX_UNITS = 256
#: Host-wide: characters past that cut that are redacted with the shown part, so a secret
#: straddling the cut is still found; the rest of a longer value is neither redacted nor
#: shown (it bounds the redaction work per log value).
LOG_VALUE_REDACTION_MARGIN_CHARS = 8192

#: Appended to a value cut at the bound.
CUT_MARKER = "…[cut]"

#: Characters never shown raw, in log lines and the report alike: C0 and C1 controls and DEL;
#: every Unicode format character (category Cf, Unicode 15: the soft hyphen, Arabic number
#: signs, bidirectional marks, embeddings, overrides and isolates (U+200E, U+200F,
#: U+202A-U+202E, U+2066-U+2069), zero-width characters (U+200B-U+200D), the word joiner and
#: invisible operators (U+2060-U+2064), U+FEFF, interlinear annotation, tag characters);
#: the line and paragraph separators (U+2028, U+2029); lone surrogates.
UNSAFE_CHARACTERS = (
    "\x00-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e"
    "\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f\ud800-\udfff"
)
_SHORT_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
# (escape quotes and backslashes, keep newlines) -> pattern
_ESCAPE = {
    (True, False): re.compile(f'[{UNSAFE_CHARACTERS}"\\\\]'),
    (True, True): re.compile(f'(?!\n)[{UNSAFE_CHARACTERS}"\\\\]'),
    (False, False): re.compile(f"[{UNSAFE_CHARACTERS}]"),
    (False, True): re.compile(f"(?!\n)[{UNSAFE_CHARACTERS}]"),
}
_DEFAULT_REDACTOR = Redactor()


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    short = _SHORT_ESCAPES.get(char)
    if short is not None:
        return short
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def escape_text(text: str, *, quotes: bool = True, newlines: bool = False) -> str:
    """``text`` with every unsafe character (``UNSAFE_CHARACTERS``) shown as an escape:
    ``\\n``, ``\\r``, ``\\t``, else ``\\uXXXX`` (``\\UXXXXXXXX`` beyond U+FFFF).

    Args:
        text: any ``str`` (lone surrogates included).
        quotes: also escape ``"`` and ``\\`` (log lines: a value cannot end its field);
            the report shows them as they are.
        newlines: keep ``\\n`` raw (a multi-line report cell).

    Returns:
        text that is safe to print on a terminal and encodable as UTF-8. Never raises.
    """
    return _ESCAPE[quotes, newlines].sub(_escape_char, text)


_UNSAFE = _ESCAPE[False, False]


def strip_unsafe(text: str) -> str:
    """``text`` without the characters ``escape_text`` would escape (``UNSAFE_CHARACTERS``:
    controls, bidi and other format characters, separators, lone surrogates), for a display
    label that must hold none of them, escaped or not (MCPL §19.7.1). Never raises."""
    return _UNSAFE.sub("", text)


#: Characters outside XML 1.0's ``Char`` production (XML 1.0 §2.2): most C0 controls,
#: surrogates, U+FFFE and U+FFFF. No XML document can hold them, escaped or not.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
#: A surrogate in a ``str`` is a lone one (a pair is one code point): strict JSON cannot
#: carry it (RFC 8259 §8.2; strict parsers refuse ``"\ud800"``), nor can UTF-8.
_SURROGATE = re.compile("[\ud800-\udfff]")


def xml_text(text: str) -> str:
    """``text`` with every character XML 1.0 cannot hold shown as the escaper's
    ``\\uXXXX`` escape; everything else as it is (the XML writer escapes ``<``, ``&``...).
    Never raises."""
    return _NOT_XML.sub(_escape_char, text)


def json_safe(value: object) -> Any:
    """A copy of a JSON value whose strings and keys hold no lone surrogate (each shown as
    the escaper's ``\\uXXXX`` escape) and whose numbers are finite (an infinity, as a
    server's ``1e400`` reads, is null), so that it encodes as strict JSON and UTF-8. Other
    values are kept as they are. Never raises (but ``RecursionError`` past Python's
    recursion limit: callers bound the depth first)."""
    if isinstance(value, str):
        return _SURROGATE.sub(_escape_char, value)
    if isinstance(value, float) and not math.isfinite(value):
        return None  # 1e400 reads as infinity; JSON has no such number (written as orjson does)
    if is_list_or_tuple(value):
        return [json_safe(item) for item in value]
    if is_mapping(value):
        return {json_safe(key): json_safe(item) for key, item in value.items()}
    return value


def _as_text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    try:
        return orjson.dumps(value, default=repr).decode()
    except TypeError:
        pass  # an integer beyond 64 bits, a lone surrogate, or nesting past orjson's limit
    try:
        return json.dumps(value, default=repr, ensure_ascii=True)
    except (ValueError, TypeError, RecursionError):
        return f"<{type(value).__name__} that cannot be rendered>"


def _cut_utf16(text: str, max_units: int) -> tuple[str, bool]:
    # Fast path: a str of n code points has at least n UTF-16 units.
    if len(text) <= max_units // 2:
        return text, False
    units = 0
    for index, char in enumerate(text):
        units += 2 if ord(char) > 0xFFFF else 1
        if units > max_units:
            return text[:index], True
    return text, False


def log_value(
    value: object,
    redactor: Redactor | None = None,
    *,
    max_units: int = DEFAULT_LOG_VALUE_MAX_UNITS,
    quotes: bool = True,
) -> str:
    """Render a server value for a log line (docs/protocol.md L1, L2).

    Args:
        value: any value (a ``str`` is used as is, bytes are decoded as UTF-8 with
            replacement, anything else is rendered as JSON).
        redactor: the server's redactor, applied before the cut (to the first
            ``LOG_VALUE_REDACTION_MARGIN_CHARS`` characters past it, so the work is bounded);
            None: one that masks only the well-known credential shapes
            (``mcpl_host.secrets``).
        max_units: the cut, in UTF-16 code units of the unescaped text.
        quotes: escape ``"`` and ``\\`` too (default); False for text shown as text (stderr).

    Returns:
        one line of text with no raw newline, control or invisible character (nor quote or
        backslash, with ``quotes``: ``escape_text``); if it was cut, it ends with
        ``CUT_MARKER``. Never raises.
    """
    text = _as_text(value)
    window = max_units + LOG_VALUE_REDACTION_MARGIN_CHARS  # a char is 1 or 2 units: still cut
    text = (redactor or _DEFAULT_REDACTOR).redact(text[:window] if len(text) > window else text)
    text, was_cut = _cut_utf16(text, max_units)
    text = escape_text(text, quotes=quotes)
    return text + CUT_MARKER if was_cut else text


class ServerValue:
    """A value a server sent, on its way into a log event.

    ``str()``, ``repr()`` and structlog's ``__structlog__`` all give ``log_value(value,
    redactor, quotes=quotes)``, computed once.
    """

    __slots__ = ("_quotes", "_redactor", "_text", "_value")

    def __init__(self, value: object, redactor: Redactor | None = None, *, quotes: bool = True) -> None:
        self._value = value
        self._redactor = redactor
        self._quotes = quotes
        self._text: str | None = None

    def __str__(self) -> str:
        if self._text is None:
            self._text = log_value(self._value, self._redactor, quotes=self._quotes)
        return self._text

    __repr__ = __str__

    def __structlog__(self) -> str:
        return str(self)


class Logger(Protocol):
    """What the library calls on a logger (``get_logger``: a structlog bound logger, or the
    deferred one standing in for it until structlog is imported): one method per level,
    each called with the event's text and its fields as keywords (``ServerValue`` for
    anything a server sent)."""

    def debug(self, event: str, *args: object, **fields: object) -> object: ...

    def info(self, event: str, *args: object, **fields: object) -> object: ...

    def warning(self, event: str, *args: object, **fields: object) -> object: ...

    def error(self, event: str, *args: object, **fields: object) -> object: ...

    def exception(self, event: str, *args: object, **fields: object) -> object: ...


class LogBudget:
    """Bounds how many diagnostic lines of one kind a connection writes (docs/protocol.md R6, L3).

    ``take()`` returns ``"log"`` for the first ``limit`` calls, ``"last"`` once (write one
    line saying that more go unlogged), then ``"quiet"``. ``count`` counts every call.
    """

    __slots__ = ("count", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0

    def take(self) -> Literal["log", "last", "quiet"]:
        self.count += 1
        if self.count <= self.limit:
            return "log"
        if self.count == self.limit + 1:
            return "last"
        return "quiet"

    def warn(self, log: Logger, message: str, **fields: Any) -> None:
        """``message`` as a warning on ``log`` under this budget (``take()``): with its
        ``fields`` while it lasts, then once saying that more go unlogged, then nothing."""
        verdict = self.take()
        if verdict == "log":
            log.warning(message, **fields)
        elif verdict == "last":
            log.warning(f"{message}: more of these go unlogged on this connection")


class _SafeText(str):
    """The text of a ``ServerValue`` in an event dict, already escaped by ``log_value()``:
    the console renderer shows it as it is (in double quotes when it holds a space), never
    through ``repr()``, which would escape its backslashes a second time."""

    __slots__ = ()


# A safe text that needs quotes to stay one field of a console line.
_NEEDS_QUOTES = re.compile(r"[ =\"']")


def _render_server_values(
    _logger: object, _name: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    for key, value in event.items():
        if type(value) is ServerValue:
            event[key] = _SafeText(str(value))
    return event


def _console_renderer(colors: bool) -> structlog.dev.ConsoleRenderer:
    """structlog's console renderer, with ``_SafeText`` values shown as escaped once, so a
    character shows in a log line exactly as in the report (``\\u202e``), and tracebacks
    shown plain: structlog's default (rich, or better-exceptions) prints each frame's
    locals, which hold what a server sent, unredacted and unescaped (docs/protocol.md
    L1, L2)."""
    import structlog

    renderer = structlog.dev.ConsoleRenderer(colors=colors, exception_formatter=structlog.dev.plain_traceback)
    columns: list[structlog.dev.Column] = []
    for column in renderer.columns:
        formatter = column.formatter
        if column.key == "" and isinstance(formatter, structlog.dev.KeyValueColumnFormatter):
            fallback = formatter.value_repr

            def value_repr(value: object, fallback: Any = fallback) -> str:
                if type(value) is _SafeText:
                    return f'"{value}"' if not value or _NEEDS_QUOTES.search(value) else str(value)
                return str(fallback(value))

            column = structlog.dev.Column("", dataclasses.replace(formatter, value_repr=value_repr))
        columns.append(column)
    renderer.columns = columns
    return renderer


def _dropped(*_args: Any, **_fields: Any) -> None:
    """A debug or info line nobody can see (see ``_Deferred``)."""


#: The levels the fallback drops (it writes warnings and errors only).
_BELOW_WARNING = frozenset({"debug", "info"})


class _Deferred:
    """A logger made on its first use: what ``get_logger`` returns while structlog has not
    been imported yet (a module that makes its logger at import then costs nothing). A
    debug or info line while structlog is still not imported is dropped without loading it:
    nobody can have configured structlog yet, and the fallback drops those levels."""

    __slots__ = ("_initial", "_logger", "_name")

    def __init__(self, name: str, initial: dict[str, object]) -> None:
        self._name = name
        self._initial = initial
        self._logger: Logger | None = None

    def __getattr__(self, attribute: str) -> Any:
        logger = self._logger
        if logger is None:
            if attribute in _BELOW_WARNING and "structlog" not in sys.modules:
                return _dropped
            logger = self._logger = _make_logger(self._name, self._initial)
        return getattr(logger, attribute)

    # The levels of ``Logger``, each looked up as above on its call.
    def debug(self, event: str, *args: object, **fields: object) -> object:
        return self.__getattr__("debug")(event, *args, **fields)

    def info(self, event: str, *args: object, **fields: object) -> object:
        return self.__getattr__("info")(event, *args, **fields)

    def warning(self, event: str, *args: object, **fields: object) -> object:
        return self.__getattr__("warning")(event, *args, **fields)

    def error(self, event: str, *args: object, **fields: object) -> object:
        return self.__getattr__("error")(event, *args, **fields)

    def exception(self, event: str, *args: object, **fields: object) -> object:
        return self.__getattr__("exception")(event, *args, **fields)


def get_logger(name: str = "mcpl_host", **initial: object) -> Logger:
    """The library's structlog logger, optionally bound to ``initial`` values.

    When the application has not configured structlog, the library does not fall back on
    structlog's default (every level, to standard output): it writes warnings and errors to
    standard error, with server values rendered safely. Until structlog is imported (by the
    application, or by a first log line), the logger is made on its first use.
    """
    if "structlog" not in sys.modules:
        return _Deferred(name, initial)
    return _make_logger(name, initial)


def _make_logger(name: str, initial: dict[str, Any]) -> Logger:
    import structlog

    if structlog.is_configured():
        configured: Logger = structlog.get_logger(name, **initial)
        return configured
    global _fallback
    if _fallback is None:  # made once: a renderer per connection would cost memory and time
        _fallback = (
            [
                structlog.processors.add_log_level,
                _render_server_values,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                _console_renderer(colors=False),
            ],
            structlog.make_filtering_bound_logger(logging.WARNING),
        )
    processors, wrapper_class = _fallback
    fallback: Logger = structlog.wrap_logger(
        structlog.PrintLogger(sys.stderr), processors=processors, wrapper_class=wrapper_class, **initial
    )
    return fallback


# The standard library's level names (logging.getLevelName's str -> int use is deprecated).
_LEVELS: dict[str, int] = {
    name: getattr(logging, name)
    for name in ("CRITICAL", "FATAL", "ERROR", "WARN", "WARNING", "INFO", "DEBUG", "NOTSET")
}


def _json_line(value: object, **_: Any) -> str:
    """One log line as strict JSON: a lone surrogate in a field is shown as its escape
    (``json_safe``) rather than failing the line."""
    try:
        return orjson.dumps(value, default=str).decode()
    except orjson.JSONEncodeError:
        return json.dumps(json_safe(value), default=str, allow_nan=False)


#: The processors and wrapper class of the library's loggers while structlog is not configured.
_fallback: tuple[list[Any], Any] | None = None


def configure_logging(
    level: str = "warning",
    *,
    json_lines: bool = False,
    stream: TextIO | None = None,
) -> None:
    """Configure structlog for the CLI (the library itself never configures logging).

    Args:
        level: ``debug``, ``info``, ``warning``, ``error`` or ``critical``.
        json_lines: one JSON object per line instead of a readable console line.
        stream: where lines go; standard error by default.

    Raises:
        ValueError: an unknown level name.
    """
    import structlog

    number = _LEVELS.get(level.upper())
    if number is None:
        raise ValueError(f"unknown log level {level!r}")
    out: TextIO = stream if stream is not None else sys.stderr
    renderer: Any
    if json_lines:
        renderer = structlog.processors.JSONRenderer(serializer=_json_line)
    else:
        renderer = _console_renderer(colors=out.isatty())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            _render_server_values,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(number),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )

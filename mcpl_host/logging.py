"""Log safety: ``log_value()`` (escape and cut), the per-server ``Redactor``, ``LogBudget``.

Rules of this module (ENVELOPE.md F, L1-L3):

- Every value from a server that reaches a log line goes through ``log_value()``: it is
  rendered as text, cut at ``DEFAULT_LOG_VALUE_MAX_UNITS`` UTF-16 code units (with a marker)
  and escaped, so it holds no raw newline, quote, backslash or control character and cannot
  pose as another field or line.
- Lines about a configured server also pass through that server's ``Redactor``, built once per
  connection from its configuration: every secret (env value, header value, token) of 4 or
  more characters becomes ``[redacted]``. Redaction runs before the cut, so a secret is never
  left half visible.
- Server values travel in log events as ``ServerValue``, whose ``str``/``repr``/
  ``__structlog__`` are already safe: an embedding application's own structlog or stdlib
  logging setup cannot print raw server text.
- Diagnostics the host writes about a server's protocol output are bounded by ``LogBudget``.

This module is the only place that escapes or redacts; every caller uses it.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterable
from typing import Any, Literal, TextIO

import orjson
import structlog

from mcpl_host.limits import DEFAULT_LOG_VALUE_MAX_UNITS

__all__ = [
    "CUT_MARKER",
    "REDACTED",
    "LogBudget",
    "Redactor",
    "ServerValue",
    "configure_logging",
    "get_logger",
    "log_value",
]

#: What a secret becomes in a log line.
REDACTED = "[redacted]"
#: Appended to a value cut at the bound.
CUT_MARKER = "…[cut]"
#: Secrets shorter than this are not redacted (too likely to match ordinary text).
MIN_SECRET_CHARS = 4

_ESCAPES = {
    "\\": "\\\\",
    '"': '\\"',
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
# C0 and C1 controls, DEL, the line/paragraph separators, quote and backslash.
_NEEDS_ESCAPE = re.compile(r'[\x00-\x1f\x7f-\x9f\u2028\u2029"\\]')


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    return _ESCAPES.get(char) or f"\\u{ord(char):04x}"


def _as_text(value: Any) -> str:
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
    value: Any,
    redactor: Redactor | None = None,
    *,
    max_units: int = DEFAULT_LOG_VALUE_MAX_UNITS,
) -> str:
    """Render a server value for a log line (ENVELOPE.md L1, L2).

    Args:
        value: any value (a ``str`` is used as is, bytes are decoded as UTF-8 with
            replacement, anything else is rendered as JSON).
        redactor: the server's redactor, applied before the cut.
        max_units: the cut, in UTF-16 code units of the unescaped text.

    Returns:
        one line of text with no raw newline, quote, backslash or control character; if it
        was cut, it ends with ``CUT_MARKER``. Never raises.
    """
    text = _as_text(value)
    if redactor is not None:
        text = redactor.redact(text)
    text, was_cut = _cut_utf16(text, max_units)
    text = _NEEDS_ESCAPE.sub(_escape_char, text)
    # A lone surrogate (from a JSON \ud800 escape) cannot be written as UTF-8: escape it.
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text + CUT_MARKER if was_cut else text


class Redactor:
    """Replaces a server's configured secrets with ``[redacted]`` (ENVELOPE.md L2).

    Built once per connection from the secrets (env values, header values, tokens); secrets
    shorter than ``MIN_SECRET_CHARS`` characters are ignored. The JSON-escaped form of each
    secret is redacted too, so a secret inside a rendered JSON value is caught.
    """

    __slots__ = ("_pattern",)

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        forms: set[str] = set()
        for secret in secrets:
            if not isinstance(secret, str) or len(secret) < MIN_SECRET_CHARS:
                continue
            forms.add(secret)
            forms.add(json.dumps(secret)[1:-1])
            forms.add(json.dumps(secret, ensure_ascii=False)[1:-1])
        ordered = sorted(forms, key=len, reverse=True)  # longest first: no partial leaks
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def redact(self, text: str) -> str:
        """Return ``text`` with every secret replaced by ``[redacted]``."""
        if self._pattern is None:
            return text
        return self._pattern.sub(REDACTED, text)


class ServerValue:
    """A value a server sent, on its way into a log event.

    ``str()``, ``repr()`` and structlog's ``__structlog__`` all give ``log_value(value,
    redactor)``, computed once.
    """

    __slots__ = ("_redactor", "_text", "_value")

    def __init__(self, value: Any, redactor: Redactor | None = None) -> None:
        self._value = value
        self._redactor = redactor
        self._text: str | None = None

    def __str__(self) -> str:
        if self._text is None:
            self._text = log_value(self._value, self._redactor)
        return self._text

    __repr__ = __str__

    def __structlog__(self) -> str:
        return str(self)


class LogBudget:
    """Bounds how many diagnostic lines of one kind a connection writes (ENVELOPE.md R6, L3).

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


def _render_server_values(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
    for key, value in event.items():
        if type(value) is ServerValue:
            event[key] = str(value)
    return event


def get_logger(name: str = "mcpl_host", **initial: Any) -> Any:
    """The library's structlog logger, optionally bound to ``initial`` values.

    When the application has not configured structlog, the library does not fall back on
    structlog's default (every level, to standard output): it writes warnings and errors to
    standard error, with server values rendered safely.
    """
    if structlog.is_configured():
        return structlog.get_logger(name, **initial)
    return structlog.wrap_logger(
        structlog.PrintLogger(sys.stderr),
        processors=[
            structlog.processors.add_log_level,
            _render_server_values,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        **initial,
    )


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
    number = logging.getLevelName(level.upper())
    if not isinstance(number, int):
        raise ValueError(f"unknown log level {level!r}")
    stream = stream or sys.stderr
    renderer: Any
    if json_lines:
        renderer = structlog.processors.JSONRenderer(
            serializer=lambda v, **_: orjson.dumps(v, default=str).decode()
        )
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=stream.isatty())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            _render_server_values,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(number),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )

"""Which step of an HTTP exchange failed, and how an HTTP error body is shown (pure: no I/O,
no clock, no logging). Every HTTP transport (Streamable HTTP, HTTP+SSE) and so every command
(``probe``, ``call``, ``check``...) says its failures through these functions.

Rules of this module:

- ``classify_unreachable(exc)``: an exception raised below HTTP (httpx, an OS error) names
  its step: ``connect`` (the TCP connection: ``refused``, ``dns``, ``timeout``, ``other``),
  ``tls`` (the handshake or the certificate), or ``exchange`` (the connection was made, then
  failed: reset, closed mid-answer, not HTTP). ``unreachable_sentence`` says it in one
  sentence naming the URL and what was being sent.
- An HTTP status is step ``http``; ``body_text`` is what the sentence shows of the body: HTML
  or XML markup stripped (tags, comments, scripts and styles, with their text), character
  references decoded, whitespace collapsed, cut at ``max_chars`` with ``…``. The body is shown
  once: ``fallback_sentence`` leaves it out of the second refusal of a fallback when the first
  showed the same text.
- Server text is escaped for a terminal by the caller (``logging.log_value`` with
  ``quotes=False``): JSON in a body is shown as sent, never escaped again.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from typing import Literal, cast

__all__ = [
    "BODY_SAID",
    "ConnectStep",
    "Unreached",
    "body_text",
    "classify_unreachable",
    "fallback_sentence",
    "unreachable_sentence",
]

#: The step that failed below HTTP.
ConnectStep = Literal["connect", "tls", "exchange"]
#: What comes before the body's text in a refusal sentence.
BODY_SAID = "; it said: "

#: Elements whose text is no text of the page.
_HIDDEN_ELEMENTS = ("script", "style")
_SPACE = re.compile(r"\s+")
_MARKUP_TYPES = ("text/html", "application/xhtml+xml", "text/xml", "application/xml")


@dataclass(frozen=True, slots=True)
class Unreached:
    """What failed below HTTP: ``step`` (``ConnectStep``), ``kind`` (for ``connect``:
    ``refused``, ``dns``, ``timeout`` or ``other``; else ``tls`` / ``exchange``) and
    ``reason`` (the innermost OS or library message; not yet redacted)."""

    step: ConnectStep
    kind: str
    reason: str


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc``, its causes and contexts, and the members of exception groups among them (trio
    raises one ``OSError`` over a group of attempts), outermost first; at most 32 (a cycle
    or a deep chain stays bounded)."""
    found: list[BaseException] = []
    queue: list[BaseException] = [exc]
    while queue and len(found) < 32:
        item = queue.pop(0)
        if any(item is seen for seen in found):
            continue
        found.append(item)
        members: object = getattr(item, "exceptions", None)  # an exception group (3.11+ or the backport)
        if isinstance(members, tuple):
            queue.extend(
                member for member in cast("tuple[object, ...]", members) if isinstance(member, BaseException)
            )
        following = item.__cause__ or item.__context__
        if following is not None:
            queue.append(following)
    return found


def _innermost_reason(causes: list[BaseException]) -> str:
    for cause in reversed(causes):
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror
    for cause in reversed(causes):
        if str(cause):
            return str(cause)
    return type(causes[0]).__name__


def classify_unreachable(exc: BaseException) -> Unreached:
    """The step of an exception raised during an HTTP exchange below HTTP (module rules)."""
    # Imported here: http_params (which a stdio connection loads) imports this module, and
    # only an HTTP transport, which has loaded them already, calls this.
    import ssl

    import httpx

    causes = _causes(exc)
    reason = _innermost_reason(causes)
    if any(isinstance(c, (ssl.SSLError, ssl.CertificateError)) for c in causes):
        return Unreached("tls", "tls", reason)
    connecting = isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout))
    if isinstance(exc, httpx.ConnectTimeout) or (
        connecting and any(isinstance(c, TimeoutError) for c in causes)
    ):
        return Unreached("connect", "timeout", reason)
    if any(isinstance(c, socket.gaierror) for c in causes):
        return Unreached("connect", "dns", reason)
    if any(isinstance(c, ConnectionRefusedError) for c in causes) or (
        connecting and "refused" in reason.lower()
    ):
        return Unreached("connect", "refused", reason)
    if connecting:
        return Unreached("connect", "other", reason)
    return Unreached("exchange", "exchange", reason)


def unreachable_sentence(found: Unreached, *, shown_url: str, what: str, reason: str) -> str:
    """The sentence for ``found`` (``reason``: its reason already redacted and escaped):
    which step failed, at ``shown_url``, for ``what`` (``the POST of initialize``)."""
    if found.kind == "refused":
        return f"could not connect to {shown_url} for {what}: connection refused (is the server running on that port?)"
    if found.kind == "dns":
        return f"could not connect to {shown_url} for {what}: the host name did not resolve (DNS: {reason})"
    if found.kind == "timeout":
        return f"could not connect to {shown_url} for {what}: timed out connecting"
    if found.step == "connect":
        return f"could not connect to {shown_url} for {what} ({reason})"
    if found.step == "tls":
        return f"the TLS handshake with {shown_url} failed for {what} ({reason})"
    return f"the connection to {shown_url} failed during {what} ({reason})"


def _strip_markup(text: str) -> str:
    """``text`` with every tag, comment, and script or style element (with its content)
    replaced by a space; an unclosed one runs to the end. One pass: each search starts where
    the last ended (a hostile body costs time linear in its length)."""
    lower = text.lower()
    out: list[str] = []
    at, end = 0, len(text)
    while at < end:
        start = text.find("<", at)
        if start < 0:
            out.append(text[at:])
            break
        out.append(text[at:start])
        out.append(" ")
        if text.startswith("<!--", start):
            close = text.find("-->", start + 4)
            at = end if close < 0 else close + 3
            continue
        hidden = next(
            (
                name
                for name in _HIDDEN_ELEMENTS
                if lower.startswith(name, start + 1)
                and lower[start + 1 + len(name) : start + 2 + len(name)] in (">", " ", "\t", "\n", "\r", "/")
            ),
            None,
        )
        if hidden is not None:
            close = lower.find(f"</{hidden}", start + 1)
            start = end if close < 0 else close
        close = text.find(">", start + 1)
        at = end if close < 0 else close + 1
    return "".join(out)


def body_text(body: str, content_type: str | None, *, max_chars: int) -> str:
    """What a refusal sentence shows of an HTTP error ``body`` (module rules); the empty
    string when nothing is left. ``content_type``: the media type, lower case (None: none)."""
    text = body
    if content_type in _MARKUP_TYPES or text.lstrip()[:1] == "<":
        import html  # (its entity table, about 0.3 MiB, only for a body shown as text)

        text = html.unescape(_strip_markup(text))
    text = _SPACE.sub(" ", text).strip()
    if len(text) > max_chars:
        text = text[:max_chars].rstrip() + "…"
    return text


def fallback_sentence(first: str, second: str) -> str:
    """``first`` (the Streamable HTTP refusal) and ``second`` (the HTTP+SSE one) as one
    sentence, the body shown once when both carry the same one (module rules)."""
    head, said, body = first.partition(BODY_SAID)
    other_head, other_said, other_body = second.partition(BODY_SAID)
    if said and other_said and body == other_body:
        return f"{head}{BODY_SAID}{body}; the older HTTP+SSE transport failed too: {other_head}"
    return f"{first}; the older HTTP+SSE transport failed too: {second}"

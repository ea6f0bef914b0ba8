"""What the two HTTP transports share: the inbox of received lines, bounded reading of
bodies and Server-Sent Events, the httpx client, and the one translation of httpx errors.

Rules (MCP 2025-11-25 "Transports" §Streamable HTTP; MCP 2024-11-05 §HTTP with SSE):

- Server-Sent Events are split on bytes by ``event_stream.EventStreamParser`` (WHATWG
  HTML §9.2.6; docs/protocol.md SSE1), which counts the bytes of the current event (every
  line since the last blank line, the unfinished one included) as they arrive: past
  ``limits.max_sse_event_bytes`` the stream is refused (``BodyTooLarge``), so no buffer of
  it grows past the bound. An event's data (one JSON-RPC message) is bounded by
  ``limits.max_line_bytes``, as a JSON body is.
- The ``Inbox`` holds the received lines ``receive()`` has not taken, up to
  ``limits.max_http_inbox_bytes`` (one line larger than that alone): a reader with a line
  that would pass the bound waits (its HTTP stream is not read meanwhile), and so does
  every reader after it, until every line held is taken; so memory stays bounded, and the
  lines of one read (many small events) pass to the connection together, not one task
  switch each. Lines are taken in the order they were received. Lines already received
  are returned before a loss is reported.
- Bodies are read raw and decoded here (``content_coding.BodyDecoder``), never by httpx:
  every decoding layer counts against the bound of what is read (a JSON body:
  ``limits.max_line_bytes``; an event stream: ``limits.max_sse_event_bytes`` per event, and
  per decoding layer from one message to the next (comments and events without data,
  which cost a compressed stream nothing, never restart the count); an
  error body: ``limits.max_line_bytes``, of which ``limits.max_http_error_body_bytes`` are
  kept), as it decodes, so stacked codings cannot inflate past it. A coding that cannot be
  decoded, more codings than ``limits.max_content_codings``, or a bound passed, is
  ``UnreadableBody`` (``BadContentEncoding``, ``BodyTooLarge``).
- httpx errors become one sentence naming the URL as shown (``unreachable``), here only.
"""

from __future__ import annotations

import contextlib
import math
from collections import deque
from collections.abc import AsyncIterator, Generator
from typing import Any

import anyio
import anyio.lowlevel
import httpx

from mcpl_host._tasks import Lifetime
from mcpl_host.jsonrpc.envelope import NO_ID, Notification, Request, Response, classify
from mcpl_host.jsonrpc.errors import ConnectionClosed, ConnectionLost
from mcpl_host.jsonrpc.framing import ReadItem, dumps_message, loads_line, peek_envelope
from mcpl_host.limits import (
    DEFAULT_MAX_CONTENT_CODINGS,
    DEFAULT_MAX_HTTP_INBOX_BYTES,
    DEFAULT_READ_CHUNK_BYTES,
    Limits,
)
from mcpl_host.logging import Logger, Redactor, log_value
from mcpl_host.transports.content_coding import (
    ACCEPT_ENCODING,
    BadCoding,
    BodyDecoder,
    LayerTooLarge,
    codings_of,
)
from mcpl_host.transports.event_stream import Event, EventStreamParser, EventTooLarge
from mcpl_host.transports.http_failure import classify_unreachable, unreachable_sentence
from mcpl_host.transports.http_params import (
    HTTPAuthorizer,
    HTTPParameters,
    media_type,
    refusal_message,
    sends_cleartext_credential,
)

__all__ = [
    "USER_AGENT",
    "BadContentEncoding",
    "BodyTooLarge",
    "Inbox",
    "Unreachable",
    "UnreadableBody",
    "build_client",
    "close_response",
    "decoded_body",
    "error_excerpt",
    "may_answer",
    "peek",
    "read_body",
    "reconnect_delay",
    "sse_events",
    "unreachable",
]

USER_AGENT = "mcpl-host"
_BLANKS = b" \t\r\n"


class UnreadableBody(Exception):
    """A body or an event the host does not read on; ``str()`` says why."""


class BodyTooLarge(UnreadableBody):
    """A body or an event went past its bound (decoded, or in one decoding layer);
    ``str()`` says which bound."""


class BadContentEncoding(UnreadableBody):
    """A body in a ``Content-Encoding`` the host does not decode, or not valid in it."""


class Unreachable(Exception):
    """An HTTP exchange failed below HTTP (connect, TLS, reset, protocol); ``str()`` is the
    sentence for ``ConnectionLost``. ``connecting``: it failed before a connection was
    made (refused, timed out, TLS): nothing of the server answered at all."""

    def __init__(self, message: str, *, connecting: bool = False, step: str = "exchange") -> None:
        super().__init__(message)
        self.connecting = connecting
        #: ``http_failure.ConnectStep``: connect, tls or exchange.
        self.step = step


def build_client(params: HTTPParameters, limits: Limits) -> httpx.AsyncClient:
    """The httpx client of one transport: the configured headers and token on every request
    (or ``params.auth``'s OAuth),
    redirects never followed, ``Accept-Encoding`` only what ``content_coding`` decodes (not
    the optional decoders httpx could load), connect and write timeouts from ``limits`` (reads wait: an
    event stream may be idle for long, and a request's answer is bounded by its own
    timeout), at most ``limits.max_http_connections`` connections."""
    return httpx.AsyncClient(
        headers={"User-Agent": USER_AGENT, "Accept-Encoding": ACCEPT_ENCODING, **params.request_headers()},
        timeout=httpx.Timeout(
            connect=limits.http_connect_timeout_seconds,
            read=None,
            write=limits.http_reply_timeout_seconds,
            pool=None,
        ),
        follow_redirects=False,
        limits=httpx.Limits(
            max_connections=limits.max_http_connections,
            max_keepalive_connections=min(limits.max_http_connections, 16),
        ),
        verify=params.ssl_context if params.ssl_context is not None else True,
        auth=params.auth.httpx_auth() if params.auth is not None else None,
    )


async def close_response(response: httpx.Response) -> None:
    """Close ``response`` (its connection goes back to the pool, or is closed when its body
    was not read to the end), shielded from cancellation; nothing when it is closed already
    (a body read to its end closes it), so the reader's own close and its callers' cost no
    cancel scope each."""
    if not response.is_closed:
        with anyio.CancelScope(shield=True):
            await response.aclose()


def open_client(params: HTTPParameters, limits: Limits, logger: Logger, shown_url: str) -> httpx.AsyncClient:
    """The client of an HTTP transport being entered (``build_client``), after a warning in
    the log when a credential would travel over cleartext ``http://`` to a host that is not
    loopback (``sends_cleartext_credential``)."""
    if sends_cleartext_credential(params):
        logger.warning("credential sent over cleartext http:// to a host that is not loopback", url=shown_url)
    return build_client(params, limits)


def refusal_of(
    response: httpx.Response,
    what: str,
    body: str,
    *,
    shown_url: str,
    had_session: bool,
    redactor: Redactor,
    auth: HTTPAuthorizer | None = None,
) -> str:
    """``refusal_message`` for an HTTP ``response`` that is not 2xx: its status, its
    ``WWW-Authenticate`` and ``Location`` headers, ``body`` (the start of it) and, with
    ``auth``, why OAuth could not heal it."""
    return refusal_message(
        response.status_code,
        what=what,
        shown_url=shown_url,
        www_authenticate=response.headers.get("www-authenticate"),
        location=response.headers.get("location"),
        excerpt=body,
        content_type=media_type(response.headers.get("content-type")),
        had_session=had_session,
        redactor=redactor,
        auth_failure=auth.refusal_for(response) if auth is not None else None,
    )


def transport_state(life: Lifetime, inbox: Inbox) -> str:
    """The state an HTTP transport's ``repr`` shows: closed, lost, open or new."""
    if life.closing:
        return "closed"
    if inbox.lost:
        return "lost"
    return "open" if life.entered else "new"


def _reason(exc: BaseException) -> str:
    cause: BaseException | None = exc
    while cause is not None:  # the innermost OS error says most ("Connection refused")
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror
        cause = cause.__cause__ or cause.__context__
    return str(exc) or type(exc).__name__


@contextlib.contextmanager
def unreachable(what: str, shown_url: str, redactor: Redactor) -> Generator[None]:
    """Turn what httpx raises during ``what`` (e.g. ``"the POST of initialize"``) into
    ``Unreachable`` with a sentence naming ``shown_url`` and the reason (redacted)."""
    try:
        yield
    except httpx.TimeoutException as exc:
        found = classify_unreachable(exc)
        if found.step == "exchange":
            message = f"could not reach {shown_url} for {what}: timed out writing"
        else:
            message = unreachable_sentence(found, shown_url=shown_url, what=what, reason="")
        raise Unreachable(
            message, connecting=isinstance(exc, httpx.ConnectTimeout), step=found.step
        ) from None
    except (httpx.HTTPError, httpx.StreamError, OSError, anyio.BrokenResourceError) as exc:
        found = classify_unreachable(exc)
        reason = log_value(redactor.redact(_reason(exc)), redactor, max_units=200, quotes=False)
        raise Unreachable(
            unreachable_sentence(found, shown_url=shown_url, what=what, reason=reason),
            connecting=isinstance(exc, httpx.ConnectError),
            step=found.step,
        ) from None


def body_decoder(
    response: httpx.Response, max_layer_bytes: int, step_bytes: int, max_codings: int
) -> BodyDecoder:
    """The decoder of ``response``'s ``Content-Encoding`` (module rules), each layer
    bounded by ``max_layer_bytes`` and inflating ``step_bytes`` at a time, at most
    ``max_codings`` layers (``limits.max_content_codings``).

    Raises:
        BadContentEncoding: a coding the host does not decode, or more than ``max_codings``.
    """
    try:
        codings = codings_of(response.headers.get_list("content-encoding"))
        return BodyDecoder(codings, max_layer_bytes, step_bytes, max_codings)
    except BadCoding as exc:
        raise BadContentEncoding(str(exc)) from None


async def decoded_body(response: httpx.Response, decoder: BodyDecoder, bound: str) -> AsyncIterator[bytes]:
    """The body of ``response`` (a streamed answer), read raw and decoded by ``decoder``,
    as it arrives, with a checkpoint between the pieces one chunk inflates to; ``bound`` names the bound of its layers for the error (``"limits.max_line_bytes"``).

    Raises:
        BadContentEncoding: data not valid in its coding.
        BodyTooLarge: a decoding layer over its bound.
        httpx errors: as ``aiter_raw`` raises them (for ``unreachable``).
    """
    try:
        async for raw in response.aiter_raw():
            first = True
            for piece in decoder.feed(raw):
                if not first:  # one chunk may inflate to many pieces: others run between them
                    await anyio.lowlevel.checkpoint()
                first = False
                yield piece
            raw = piece = b""  # nothing of this chunk is held while the next one is read
        for piece in decoder.finish():
            await anyio.lowlevel.checkpoint()
            yield piece
    except LayerTooLarge as exc:
        raise BodyTooLarge(f"{exc} ({bound})") from None
    except BadCoding as exc:
        raise BadContentEncoding(str(exc)) from None


async def read_body(
    response: httpx.Response,
    max_bytes: int,
    step_bytes: int = DEFAULT_READ_CHUNK_BYTES,
    max_codings: int = DEFAULT_MAX_CONTENT_CODINGS,
) -> bytes:
    """The whole decoded body, read and decoded as it arrives; every decoding layer is
    bounded by ``max_bytes`` too (``limits.max_line_bytes``, as the errors say), and there
    are at most ``max_codings`` layers (``limits.max_content_codings``).

    Raises:
        BodyTooLarge: more than ``max_bytes`` (decoded, or in a layer); reading stops there.
        BadContentEncoding: a coding the host does not decode, too many codings, or data
            not valid in its coding.
        httpx errors: as ``aiter_raw`` raises them (for ``unreachable``).
    """
    # One buffer, not a list of the pieces: a body in chunks of 2 bytes is a piece each.
    body = bytearray()
    decoder = body_decoder(response, max_bytes, step_bytes, max_codings)
    async for chunk in decoded_body(response, decoder, "limits.max_line_bytes"):
        if len(body) + len(chunk) > max_bytes:
            raise BodyTooLarge(f"a body over {max_bytes} bytes (limits.max_line_bytes)")
        body += chunk
    return bytes(body)


async def error_excerpt(response: httpx.Response, limits: Limits) -> str:
    """The start of an error answer's body as text (at most
    ``limits.max_http_error_body_bytes`` read and decoded, each decoding layer bounded by
    ``limits.max_line_bytes``; the rest is not read). Never raises (empty text when the
    body cannot be read)."""
    data = b""
    with contextlib.suppress(
        httpx.HTTPError, httpx.StreamError, OSError, anyio.BrokenResourceError, UnreadableBody
    ):
        decoder = body_decoder(
            response, limits.max_line_bytes, limits.read_chunk_bytes, limits.max_content_codings
        )
        async for chunk in decoded_body(response, decoder, "limits.max_line_bytes"):
            data += chunk
            if len(data) >= limits.max_http_error_body_bytes:
                data = data[: limits.max_http_error_body_bytes]
                break
    return data.decode("utf-8", errors="replace").strip()


async def sse_events(response: httpx.Response, limits: Limits) -> AsyncIterator[list[Event]]:
    """The events of an event stream (``text/event-stream``), split by
    ``event_stream.EventStreamParser`` as each decoded chunk arrives: the events one chunk
    completes come together, in order (``event_stream.Event``: a plain ``message`` event
    is its data alone). Each event is bounded as the module rules say.

    Raises:
        BodyTooLarge: an event over ``limits.max_sse_event_bytes`` (decoded, or in one
            decoding layer), or an event's data over ``limits.max_line_bytes``; the events
            its chunk completed before it are yielded first.
        BadContentEncoding: a coding the host does not decode, or data not valid in it.
        httpx errors: as reading the body raises them (for ``unreachable``).
    """
    bound = limits.max_sse_event_bytes
    decoder = body_decoder(response, bound, limits.read_chunk_bytes, limits.max_content_codings)
    parser = EventStreamParser(bound, limits.max_line_bytes)
    async for chunk in decoded_body(response, decoder, "limits.max_sse_event_bytes"):
        refused: str | None = None
        try:
            events = parser.feed(chunk)
        except EventTooLarge as exc:  # the events before it in the chunk still go first
            events, refused = exc.events, str(exc)
        if events:
            for event in events:
                data = event if isinstance(event, bytes) else event.data
                if data:  # each decoding layer's count starts again
                    decoder.restart_count()
                    break
            yield events
        if refused is not None:
            raise BodyTooLarge(refused)
        chunk = data = b""  # nothing of this chunk is held while the next one is read
        events, event = [], b""


def reconnect_delay(limits: Limits, *, failures: int, empty: int, retry_ms: int | None) -> float:
    """Seconds to wait before reopening an event stream (MCP 2025-11-25 "Streamable HTTP",
    resumability; the ``retry`` field: WHATWG HTML §9.2.6, milliseconds). Pure.

    ``failures``: attempts to reopen it that failed in a row (0 after one that opened);
    ``empty``: streams in a row that ended having delivered no message; ``retry_ms``: the
    server's last ``retry`` field, any integer (None: none given).

    After a failure the delay doubles from ``limits.sse_reconnect_delay_seconds``; else it
    is the server's ``retry`` (or that first delay). Streams that deliver nothing double it
    too, whatever the ``retry``: a server that ends each stream at once cannot make the host
    reconnect at its pace. The result is kept within ``limits.sse_min_reconnect_delay_seconds``
    and ``sse_max_reconnect_delay_seconds``; the ``retry`` is compared as an integer, so no
    value of it overflows.
    """
    low, high = limits.sse_min_reconnect_delay_seconds, limits.sse_max_reconnect_delay_seconds
    base = limits.sse_reconnect_delay_seconds
    if failures:
        delay = base * 2.0 ** min(failures - 1, 64)
    elif retry_ms is not None:
        delay = min(max(retry_ms, 0), math.ceil(high * 1000)) / 1000
    else:
        delay = base
    if empty:
        delay = max(delay, base * 2.0 ** min(empty - 1, 64))
    return min(max(delay, low), high)


def peek(line: bytes) -> tuple[str, Any, str | None, dict[str, Any] | None]:
    """``(kind, id, method, message)`` of one JSON-RPC message, parsed by
    ``framing.loads_line`` and classified by ``envelope.classify`` (the one parser and the
    one rule): kind ``"request"``, ``"notification"``, ``"response"`` or ``"other"`` (not a
    JSON object, not JSON-RPC, or an invalid request); the ``id`` (None when absent); the
    ``method`` (None unless a request or notification); the parsed object (None for
    "other"). A line that cannot be parsed but whose start shows an answer with an id
    (``framing.peek_envelope``) is ``("response", id, None, None)``: it is the answer its
    request gets (the session fails that request, saying why). Never raises. Only the
    transports' routing uses it."""
    try:
        decoded: Any = loads_line(line)
    except ValueError:
        head = peek_envelope(line)
        if head.is_response and head.id is not None:
            return "response", head.id, None, None
        return "other", None, None, None
    envelope = classify(decoded)
    if isinstance(envelope, Request):
        return "request", envelope.id, envelope.method, decoded
    if isinstance(envelope, Notification):
        return "notification", None, envelope.method, decoded
    if isinstance(envelope, Response) and envelope.id is not NO_ID:
        return "response", envelope.id, None, decoded
    return "other", None, None, None


def may_answer(line: bytes) -> bool:
    """Whether ``line`` may be a JSON-RPC answer with an id (what ``peek`` reads as
    ``"response"``). False only when no ``"id"`` member name can be in it: JSON writes that
    name as ``"id"`` or with ``\\u`` escapes, so a line holding neither is no answer, and
    its parse can be skipped (a notification among a request's events; docs/protocol.md
    SSE1). Pure."""
    return b'"id"' in line or b"\\u" in line


def id_key(request_id: object) -> bytes:
    """A dictionary key for a JSON-RPC id that keeps ``1`` and ``"1"`` apart (an integer
    beyond 64 bits included)."""
    return dumps_message(request_id)


def trim(data: bytes) -> bytes:
    """A body or event data without surrounding blanks."""
    return data.strip(_BLANKS)


class Inbox:
    """Received lines in arrival order, and why the transport ended (see the module rules).

    ``put`` waits while the lines held and its own would pass ``max_bytes`` (bytes of the
    lines; a ``LineTooLong`` counts none), and from then on every ``put`` waits until every
    line held is taken (the readers of the streams take turns, none overtaking); ``get``
    returns lines until they run out, then raises the loss (``ConnectionLost``) or
    ``ConnectionClosed``.
    """

    __slots__ = (
        "_bytes",
        "_changed",
        "_draining",
        "_items",
        "_max_bytes",
        "_waiting",
        "closed",
        "lost",
        "lost_step",
    )

    def __init__(self, max_bytes: int = DEFAULT_MAX_HTTP_INBOX_BYTES) -> None:
        self._items: deque[ReadItem] = deque()
        self._max_bytes = max_bytes
        self._bytes = 0  # of the lines held
        self._draining = False  # a put waited: none goes in until every line held is taken
        self._changed = anyio.Event()
        self._waiting = 0  # tasks that began waiting on _changed since it was last set
        self.lost: str | None = None
        #: The ``ConnectionLost.step`` of ``lost``.
        self.lost_step: str | None = None
        self.closed = False

    def _wake(self) -> None:
        """Wake every task waiting for a change (none: nothing to do)."""
        if self._waiting:
            self._waiting = 0
            self._changed.set()
            self._changed = anyio.Event()

    async def _wait(self) -> None:
        self._waiting += 1
        await self._changed.wait()

    async def put(self, item: ReadItem) -> None:
        """Queue one line (or ``LineTooLong``), waiting as the class says. Raises
        ``ConnectionClosed`` or ``ConnectionLost`` once the transport has ended (the line is
        dropped)."""
        size = len(item) if isinstance(item, bytes) else 0
        while not self._fits(size) and self.lost is None and not self.closed:
            self._draining = True
            await self._wait()
        self._check()
        self._items.append(item)
        self._bytes += size
        self._wake()

    async def put_all(self, lines: list[bytes]) -> None:
        """``put`` each of ``lines`` in order, with the same waits, but with no call per line
        while they fit (the events of one read); a waiting reader is woken before any wait
        here and once at the end. Raises as ``put``."""
        items = self._items
        for line in lines:
            size = len(line)
            if not self._fits(size) or self.closed or self.lost is not None:
                self._wake()  # what is held must be taken for this line to go in
                await self.put(line)
            else:
                items.append(line)
                self._bytes += size
        self._wake()

    def _fits(self, size: int) -> bool:
        """Whether a line of ``size`` bytes may go in now: the inbox is empty, or it is not
        draining and the line keeps it within ``max_bytes``."""
        return not self._items or (not self._draining and self._bytes + size <= self._max_bytes)

    def _check(self) -> None:
        if self.closed:
            raise ConnectionClosed("the HTTP transport was closed")
        if self.lost is not None:
            raise ConnectionLost(self.lost, step=self.lost_step)

    def get_now(self) -> ReadItem | None:
        """The next line held, taken without waiting (the transports' ``receive_now``,
        ``transports.base.ReceivesNow``); None when none is held (closing drops them: ``get``
        then waits or raises). Never raises."""
        items = self._items
        if not items:
            return None
        item = items.popleft()
        if isinstance(item, bytes):
            self._bytes -= len(item)
        if not items:
            self._draining = False
            self._wake()
        return item

    async def get(self) -> ReadItem:
        """The next line. Raises ``ConnectionClosed`` (closed, lines not taken are dropped)
        or, once every line is taken, ``ConnectionLost``."""
        while True:
            item = self.get_now()
            if item is not None:
                return item
            self._check()
            await self._wait()

    def lose(self, message: str, step: str | None = None) -> ConnectionLost | ConnectionClosed:
        """Record why the server went away (the first reason is kept; ``step``: what failed,
        ``ConnectionLost.step``) and return the exception to raise."""
        if self.closed:
            return ConnectionClosed("the HTTP transport was closed")
        if self.lost is None:
            self.lost, self.lost_step = message, step
            self._wake()
        return ConnectionLost(self.lost, step=self.lost_step)

    def close(self) -> None:
        self.closed = True
        self._items.clear()
        self._bytes = 0
        self._wake()

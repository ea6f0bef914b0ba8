"""The older HTTP+SSE transport (MCP 2024-11-05 "Transports" §HTTP with SSE), and the
choice between it and Streamable HTTP (MCP 2025-11-25 §Backwards Compatibility).

Rules of this module:

- ``SSETransport``: entering GETs the URL (``Accept: text/event-stream``); the server's
  first ``endpoint`` event names the URL to POST to (resolved against the stream's URL; it
  must be on the same origin, or our credentials would go elsewhere), within
  ``limits.http_reply_timeout_seconds`` and the handshake deadline
  (``limits.handshake_timeout_seconds``: the wait is a step of the handshake,
  docs/protocol.md H7). Each line given to ``send()`` is then one POST to
  it, awaited until accepted (any 2xx), in order. Every ``message`` event of the stream is a
  line for ``receive()``. The stream ending, breaking, or an event over its bound loses the
  transport (2024-11-05 has no resumption).
- ``AutoHTTPTransport``: Streamable HTTP first; when the ``initialize`` POST is answered 400,
  404 or 405 (and not with the server's own JSON-RPC answer), the HTTP+SSE transport is
  opened at the same URL and the ``initialize`` line is sent there. If that fails too, the
  error names both answers.
- Errors, credentials and the URL shown follow ``http_params`` and ``http``: a refused POST
  of a request loses the transport; a refused notification or response is logged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import httpx
from typing_extensions import Unpack

from mcpl_host._tasks import Lifetime, leave_task_group
from mcpl_host.jsonrpc.errors import ConnectionClosed, ConnectionLost, describe_seconds
from mcpl_host.jsonrpc.framing import ReadItem
from mcpl_host.logging import LogBudget, log_value
from mcpl_host.stateless import is_stateless_request
from mcpl_host.transports.base import TransportArgs, transport_options
from mcpl_host.transports.event_stream import Event, as_event
from mcpl_host.transports.http import FallBack, StreamableHTTPTransport
from mcpl_host.transports.http_common import (
    Inbox,
    Unreachable,
    UnreadableBody,
    error_excerpt,
    open_client,
    peek,
    refusal_of,
    sse_events,
    transport_state,
    trim,
    unreachable,
)
from mcpl_host.transports.http_failure import fallback_sentence
from mcpl_host.transports.http_params import (
    ACCEPT_SSE,
    HTTPParameters,
    join_endpoint,
    media_type,
    shown_http_url,
)

__all__ = ["AutoHTTPTransport", "SSETransport"]


class SSETransport:
    """One MCP session over the HTTP+SSE transport as a line transport (``Transport``).

    Use it as ``async with SSETransport(params) as transport:``; entering opens the event
    stream and waits for the ``endpoint`` event; leaving calls ``aclose()``. Enter and leave
    it in the same task. One task may ``receive()`` and one may ``send()`` at a time;
    ``aclose()`` may be called from any task.
    """

    def __init__(self, params: HTTPParameters, **options: Unpack[TransportArgs]) -> None:
        self._params = params
        self._limits, self._redactor, self._logger = transport_options(params, options, "mcpl_host.http")
        self._shown = shown_http_url(params.url, self._redactor)
        self._client: httpx.AsyncClient | None = None
        self._reader_scope = anyio.CancelScope()
        self._reader_done = anyio.Event()
        self._reader_started = False
        self._inbox = Inbox(self._limits.max_http_inbox_bytes)
        self._endpoint: str | None = None
        self._endpoint_known = anyio.Event()
        self._send_scope: anyio.CancelScope | None = None
        self._refusals = LogBudget(self._limits.invalid_requests_logged)
        self._life = Lifetime("an SSETransport")

    @property
    def stderr_tail(self) -> list[str]:
        """Always empty: an HTTP server has no stderr channel."""
        return []

    def describe(self) -> str:
        """The URL without credentials (``shown_http_url``)."""
        return self._shown

    def __repr__(self) -> str:
        return f"<SSETransport {self._shown} {transport_state(self._life, self._inbox)}>"

    def negotiated(self, protocol_version: str) -> None:
        """Accepted for symmetry with ``StreamableHTTPTransport``; HTTP+SSE sends no
        protocol version header."""

    async def __aenter__(self) -> SSETransport:
        """Open the event stream and wait for the ``endpoint`` event.

        Raises:
            ConnectionLost: unreachable, refused (a redirect included: not followed), not an
                event stream, no usable ``endpoint`` event within
                ``limits.http_reply_timeout_seconds`` (and ``handshake_timeout_seconds``),
                or the stream ended first.
            RuntimeError: the transport was already entered or closed.
        """
        self._life.enter()
        self._client = open_client(self._params, self._limits, self._logger, self._shown)
        await self._life.start(self._await_endpoint, self.aclose)
        return self

    async def _await_endpoint(self, task_group: anyio.abc.TaskGroup) -> None:
        # The endpoint wait is a step of the handshake: under its deadline too (H7).
        timeout = min(self._limits.http_reply_timeout_seconds, self._limits.handshake_timeout_seconds)
        with anyio.move_on_after(timeout):
            response = await self._open_stream()
            await task_group.start(self._read_stream, response)
            await self._endpoint_known.wait()
        if self._endpoint is None:
            raise self._inbox.lose(
                self._inbox.lost
                or f"the server at {self._shown} sent no endpoint event within {describe_seconds(timeout)}"
            )

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Close (``aclose()``) and leave the task group. The close is shielded."""
        await self._life.leave(self.aclose, exc_type, exc, tb)

    async def aclose(self) -> None:
        """Stop reading the stream and close the client. Idempotent; a second caller waits
        for the first; never raises. **Cancellation:** shielded."""
        if not await self._life.first_close():
            return
        self._inbox.close()
        with anyio.CancelScope(shield=True):
            try:
                if self._send_scope is not None:
                    self._send_scope.cancel()
                self._reader_scope.cancel()
                if self._reader_started:
                    await self._reader_done.wait()
                if self._client is not None:
                    await self._client.aclose()
            finally:
                self._endpoint_known.set()
                self._life.closed.set()

    async def _open_stream(self) -> httpx.Response:
        assert self._client is not None
        what = "the GET of its event stream"
        request = self._client.build_request("GET", self._params.url, headers={"Accept": ACCEPT_SSE})
        try:
            with unreachable(what, self._shown, self._redactor):
                response = await self._client.send(request, stream=True)
        except Unreachable as exc:
            raise self._inbox.lose(str(exc), exc.step) from None
        status, kind = response.status_code, media_type(response.headers.get("content-type"))
        if status == 200 and kind == "text/event-stream":
            return response
        try:
            body = await error_excerpt(response, self._limits) if status != 200 else ""
        finally:
            await response.aclose()
        if status == 200:
            shown = log_value(kind or "none", self._redactor, max_units=80)
            raise self._inbox.lose(
                f"the server at {self._shown} answered {what} with Content-Type {shown}; expected text/event-stream"
            )
        raise self._inbox.lose(self._refusal(response, what, body), "http")

    def _refusal(self, response: httpx.Response, what: str, body: str) -> str:
        had_session = self._endpoint is not None
        return refusal_of(
            response,
            what,
            body,
            shown_url=self._shown,
            had_session=had_session,
            redactor=self._redactor,
            auth=self._params.auth,
        )

    async def _read_stream(
        self, response: httpx.Response, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """The reader task: the endpoint event, then every message event, until the end."""
        self._reader_started = True
        ended = f"the server at {self._shown} closed its event stream"
        try:
            with self._reader_scope:
                task_status.started()
                with contextlib.suppress(ConnectionLost, ConnectionClosed):
                    try:
                        with unreachable("its event stream", self._shown, self._redactor):
                            async for events in sse_events(response, self._limits):
                                await self._on_events(events)
                                del events  # nothing of this read is held while the next is awaited
                    except Unreachable as exc:
                        ended = str(exc)
                    except UnreadableBody as exc:
                        ended = f"the server at {self._shown} sent {exc}; the transport was closed"
                    self._inbox.lose(ended)
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()
            self._endpoint_known.set()
            self._reader_done.set()

    async def _on_events(self, events: list[Event]) -> None:
        for event in map(as_event, events):
            await self._on_event(event.event, event.data)

    async def _on_event(self, kind: str, data: bytes) -> None:
        if kind == "endpoint" and self._endpoint is None:
            try:
                self._endpoint = join_endpoint(self._params.url, data.decode("utf-8"))
            except ValueError as exc:
                raise self._inbox.lose(f"the server at {self._shown}: {exc}") from None
            self._endpoint_known.set()
        elif kind == "message" and self._endpoint is not None:
            line = trim(data)
            if line:
                await self._inbox.put(line)

    def receive_now(self) -> ReadItem | None:
        """The next line already read, as ``receive()`` would return it at once
        (``ReceivesNow``); None when none is held or the transport is closed."""
        return self._inbox.get_now()

    async def receive(self) -> ReadItem:
        """The next message of the event stream. Raises ``ConnectionLost`` (once every line
        received is taken) or ``ConnectionClosed``."""
        return await self._inbox.get()

    async def send(self, data: bytes) -> None:
        """POST each non-empty line of ``data`` to the endpoint, in order, each awaited
        until accepted (within ``limits.http_reply_timeout_seconds``).

        Raises:
            ConnectionLost: unreachable, no answer in time, a refused request (or a refusal
                of the credentials, a redirect, 404 for the session), or lost before.
            ConnectionClosed: ``aclose()`` was called (before or during this call).
        """
        for line in data.split(b"\n"):
            line = line.strip()
            if not line:
                continue
            if self._life.closing:
                raise ConnectionClosed("the HTTP transport was closed")
            if self._inbox.lost is not None:
                raise ConnectionLost(self._inbox.lost, step=self._inbox.lost_step)
            with anyio.CancelScope() as scope:
                self._send_scope = scope
                await self._post(line)
            self._send_scope = None
            if scope.cancelled_caught:
                raise ConnectionClosed("the HTTP transport was closed")

    async def _post(self, line: bytes) -> None:
        assert self._client is not None and self._endpoint is not None
        kind, _, method, _ = peek(line)
        what = f"the POST of {method}" if method else "the POST of a response"
        timeout = self._limits.http_reply_timeout_seconds
        request = self._client.build_request(
            "POST", self._endpoint, headers={"Content-Type": "application/json"}, content=line
        )
        try:
            with anyio.fail_after(timeout), unreachable(what, self._shown, self._redactor):
                response = await self._client.send(request, stream=True)
                try:
                    status = response.status_code
                    body = await error_excerpt(response, self._limits) if not 200 <= status < 300 else ""
                finally:
                    await response.aclose()
        except TimeoutError:
            raise self._inbox.lose(
                f"the server at {self._shown} did not answer {what} within {describe_seconds(timeout)}"
            ) from None
        except Unreachable as exc:
            raise self._inbox.lose(str(exc), exc.step) from None
        if 200 <= status < 300:
            return
        message = self._refusal(response, what, body)
        if kind == "request" or status in (401, 403, 404) or 300 <= status < 400:
            raise self._inbox.lose(message, "http")
        verdict = self._refusals.take()
        if verdict != "quiet":
            suffix = "; further refusals go unlogged" if verdict == "last" else ""
            self._logger.warning(f"the server refused a message{suffix}", reason=message)


def _only_stateless(data: bytes) -> bool:
    """Every message in ``data`` is a stateless request or a notification (no ``initialize``:
    nothing that makes the transport choice)."""
    found = False
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        kind, _, _, message = peek(line)
        if kind == "request" and not is_stateless_request(message):
            return False
        if kind not in ("request", "notification"):
            return False
        found = found or kind == "request"
    return found


class AutoHTTPTransport:
    """Streamable HTTP, or HTTP+SSE when the server refuses the ``initialize`` POST as the
    module rules say (``Transport``). Stateless requests (MCP 2026-07-28: the era probe,
    and every request of a stateless connection) go over Streamable HTTP without making
    the choice, and their answers are read from it until a choice is made. Use it as ``async with`` (enter and leave in the same
    task); one task may ``receive()`` and one may ``send()`` at a time. ``chosen`` is
    ``"streamable-http"`` or ``"sse"`` once the first line has been sent (None before).

    The HTTP+SSE transport, opened from ``send()``, is entered and left in a task of this
    transport's own task group (an anyio task group is left in the task that entered it).
    """

    def __init__(self, params: HTTPParameters, **options: Unpack[TransportArgs]) -> None:
        self._params = params
        self._limits, self._redactor, self._logger = transport_options(params, options, "mcpl_host.http")
        self._streamable = StreamableHTTPTransport(
            params, limits=self._limits, redactor=self._redactor, logger=self._logger, fall_back=True
        )
        self._task_group: anyio.abc.TaskGroup | None = None
        self._inner: StreamableHTTPTransport | SSETransport | None = None
        self._chosen_or_closed = anyio.Event()
        self._release = anyio.Event()  # lets the task holding the HTTP+SSE transport leave it
        self._lost: str | None = None
        self._closing = False
        self._falling_back = False
        self.chosen: str | None = None

    @property
    def stderr_tail(self) -> list[str]:
        """Always empty: an HTTP server has no stderr channel."""
        return []

    #: MCP 2026-07-28 may go over it: stateless requests take Streamable HTTP without making
    #: the choice (``CarriesStateless``).
    carries_stateless = True

    def describe(self) -> str:
        """The URL without credentials."""
        return self._streamable.describe()

    def __repr__(self) -> str:
        return f"<AutoHTTPTransport {self.describe()} chosen={self.chosen}>"

    @property
    def session_id(self) -> str | None:
        """The Streamable HTTP session id, when that transport was chosen (``HasSession``)."""
        return self._streamable.session_id if self._inner is self._streamable else None

    def mirror_params(self, source: Callable[[Mapping[str, Any]], dict[str, str]]) -> None:
        """Passed on to Streamable HTTP (``StreamableHTTPTransport.mirror_params``): only
        stateless requests carry them, and those never go over HTTP+SSE."""
        self._streamable.mirror_params(source)

    def watch_session(self, on_renewed: Callable[[], None]) -> None:
        """Passed on to Streamable HTTP (``StreamableHTTPTransport.watch_session``): the
        HTTP+SSE transport has no session to renew."""
        self._streamable.watch_session(on_renewed)

    @property
    def renewals(self) -> int:
        """New sessions Streamable HTTP started (``StreamableHTTPTransport.renewals``)."""
        return self._streamable.renewals

    def negotiated(self, protocol_version: str) -> None:
        """Passed on to the transport in use (see ``StreamableHTTPTransport.negotiated``)."""
        if self._inner is not None:
            self._inner.negotiated(protocol_version)

    async def __aenter__(self) -> AutoHTTPTransport:
        """Enter the Streamable HTTP transport (no network I/O yet)."""
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        try:
            await self._streamable.__aenter__()
        except BaseException as exc:
            self._task_group = None
            await leave_task_group(task_group, type(exc), exc, exc.__traceback__)
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Close both transports and leave the task group. The close is shielded."""
        try:
            await self.aclose()
            await self._streamable.__aexit__(exc_type, exc, tb)
        finally:
            task_group, self._task_group = self._task_group, None
            await leave_task_group(task_group, exc_type, exc, tb)

    async def aclose(self) -> None:
        """Close whichever transports were opened. Idempotent; never raises.
        **Cancellation:** shielded."""
        self._closing = True
        self._chosen_or_closed.set()
        with anyio.CancelScope(shield=True):
            await self._streamable.aclose()
            if isinstance(self._inner, SSETransport):
                await self._inner.aclose()
        self._release.set()

    async def _hold(self, sse: SSETransport, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with sse:
            task_status.started()
            await self._release.wait()

    async def send(self, data: bytes) -> None:
        """Send through the transport in use; the first call chooses it. Raises as
        ``StreamableHTTPTransport.send`` and ``SSETransport.send``."""
        if self._inner is not None:
            await self._inner.send(data)
            return
        if self._closing:
            raise ConnectionClosed("the HTTP transport was closed")
        if _only_stateless(data):
            await self._streamable.send(data)
            return
        try:
            await self._streamable.send(data)
        except FallBack as refusal:
            self._falling_back = True
            await self._streamable.aclose()
            self._logger.info("trying the older HTTP+SSE transport", url=self.describe(), reason=str(refusal))
            sse = SSETransport(
                self._params, limits=self._limits, redactor=self._redactor, logger=self._logger
            )
            assert self._task_group is not None
            try:
                await self._task_group.start(self._hold, sse)
            except ConnectionLost as exc:
                self._lost = fallback_sentence(str(refusal), str(exc))
                self._chosen_or_closed.set()
                raise ConnectionLost(self._lost, step="http") from None
            self._choose(sse, "sse")
            await sse.send(data)
        except BaseException:
            self._choose(self._streamable, "streamable-http")  # receive() reports the loss
            raise
        else:
            self._choose(self._streamable, "streamable-http")

    def _choose(self, inner: StreamableHTTPTransport | SSETransport, name: str) -> None:
        if self._inner is None:
            self._inner, self.chosen = inner, name
        self._chosen_or_closed.set()

    def receive_now(self) -> ReadItem | None:
        """The next line the transport in use already holds (``ReceivesNow``); None before a
        choice, after a loss or close (``receive()`` then waits or says why), or when it
        holds none."""
        inner = self._inner
        if inner is None or self._closing or self._lost is not None:
            return None
        return inner.receive_now()

    async def receive(self) -> ReadItem:
        """The next line of the transport in use; before a choice, of Streamable HTTP (the
        answers of stateless requests), until a fallback to HTTP+SSE closes it."""
        while self._inner is None and not self._closing and self._lost is None:
            try:
                return await self._streamable.receive()
            except (ConnectionClosed, ConnectionLost):
                if not self._falling_back:
                    raise
                await self._chosen_or_closed.wait()
        if self._inner is None:
            await self._chosen_or_closed.wait()
        if self._lost is not None:
            raise ConnectionLost(self._lost, step="http")
        if self._inner is None or self._closing:
            raise ConnectionClosed("the HTTP transport was closed")
        return await self._inner.receive()

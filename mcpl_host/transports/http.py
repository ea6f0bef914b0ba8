"""The Streamable HTTP transport (MCP 2025-11-25 "Transports" §Streamable HTTP; also the
2025-06-18 and 2025-03-26 revisions of it).

Rules of this module:

- Out: each line given to ``send()`` is one POST to the endpoint (``Content-Type:
  application/json``, ``Accept: application/json, text/event-stream``). Ordering and
  concurrency: ``initialize`` is sent and its answer's head awaited inside ``send()`` (the
  session id comes with it, and every later POST carries it); any other request is posted
  from a task of its own (a server may hold a POST until its result is ready, and pings,
  cancellations and other requests must not wait behind it); a notification or a response
  is posted inside ``send()`` until the server accepts it (202), within
  ``limits.http_reply_timeout_seconds``, so what follows it is sent after it.
- In: the answer to a request is a JSON body (one line for ``receive()``) or an event
  stream, whose ``message`` events (requests, notifications, then the response) are lines
  in order; events without data (a resumption primer) are skipped. After the
  ``notifications/initialized`` POST is accepted, a GET opens the stream of messages the
  server sends unasked (405: the server offers none).
- Resumption: an event stream that ends or breaks is reconnected by a GET with
  ``Last-Event-ID`` when the server gave event ids (the stream of a POST until its response
  has arrived; the GET stream always, without the header when there were no ids), after the
  server's ``retry`` or a doubling delay, doubled too while reopened streams deliver nothing
  (``http_common.reconnect_delay``, within ``limits.sse_*``); after
  ``limits.sse_max_reconnect_attempts`` failures in a row the stream is given up with a
  warning (the connection stays; a request whose answer is lost times out).
- Headers: ``Mcp-Session-Id`` from the initialize answer on every later request;
  ``MCP-Protocol-Version`` from the handshake on: given by ``negotiated()`` (the connection
  calls it) or else read from the initialize result that passes through.
- A session the server ended (404 to a request, a notification, a response or a GET that
  carried its id) is renewed on the same transport: a new ``initialize`` and
  ``notifications/initialized`` (the first ones, under a renewal id), then what was in flight
  is sent again or failed with an error answer made here, and ``watch_session``'s callback
  is called (``transports.http_session``; docs/protocol.md HS1-HS5).
- ``aclose()`` sends DELETE with the session id (bounded by ``limits.close_grace_seconds``).
- Stateless requests (MCP 2026-07-28 "Streamable HTTP"; their ``_meta`` names the protocol
  version: ``stateless.is_stateless_request``) are posted like any request, with the
  request metadata headers of their body (``stateless.http_request_headers``), for a
  ``tools/call`` the ``Mcp-Param-*`` headers of its tool's ``x-mcp-header`` parameters (from
  the source given to ``mirror_params``: ``MCPClient.param_headers``), and no session. A refusal (400, 404, 405) without the server's JSON-RPC answer to it is passed
  on as an error answer (``stateless.http_refusal_answer``): a handshake-era server refusing
  the era probe does not lose the transport. Such a request is cancelled by closing its
  stream; its ``notifications/cancelled`` is not posted (the revision defines no
  client-to-server notification over HTTP). Its stream ending without its answer (and
  not resumed) is passed on as an error answer made here
  (``stateless.stream_lost_answer``): the request fails then, a long-lived one
  (``subscriptions/listen``) included, instead of waiting for ever. The era probe
  (``server/discover``) never loses the transport: any answer to it that is not a JSON-RPC
  answer (any error status but 401, 403 and a redirect, a content type that is neither JSON nor an event stream, a
  connection closed before or while answering) is passed on as an error answer made here
  (docs/protocol.md S3a), and the connection falls back to ``initialize``.
- Errors (``refusal_message``): a redirect is never followed; 401/403, 404 for a request
  carrying the session id when no new session can be started, a wrong content type, a body or event over
  its bound, or an unreachable server lose the transport (``ConnectionLost``) with one clear
  sentence. Any other refusal of a request loses it too (its answer cannot come), unless the
  body is the server's JSON-RPC answer to it; a refused notification or response is logged
  (``LogBudget``) and the transport goes on.
- Credentials and the URL shown follow ``http_params``; nothing here logs a secret or the
  session id.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import httpx
import orjson
from typing_extensions import Unpack

from mcpl_host._tasks import Lifetime
from mcpl_host.jsonrpc.errors import ConnectionClosed, ConnectionLost, describe_seconds
from mcpl_host.jsonrpc.framing import ReadItem
from mcpl_host.jsonrpc.values import is_object
from mcpl_host.logging import LogBudget, log_value
from mcpl_host.stateless import (
    http_refusal_answer,
    http_request_headers,
    is_stateless_request,
    stream_lost_answer,
)
from mcpl_host.transports.base import TransportArgs, transport_options
from mcpl_host.transports.event_stream import as_event
from mcpl_host.transports.http_common import (
    Inbox,
    Unreachable,
    UnreadableBody,
    close_response,
    error_excerpt,
    id_key,
    may_answer,
    open_client,
    peek,
    read_body,
    reconnect_delay,
    refusal_of,
    sse_events,
    transport_state,
    trim,
    unreachable,
)
from mcpl_host.transports.http_params import (
    ACCEPT_POST,
    ACCEPT_SSE,
    FALLBACK_STATUSES,
    HTTPParameters,
    media_type,
    shown_http_url,
)
from mcpl_host.transports.http_session import (
    after_session_ended,
    manifest_of,
    renewal_initialize,
    renewal_problem,
    renewal_refused,
    says_session_ended,
    session_ended_answer,
)

__all__ = ["FallBack", "StreamableHTTPTransport"]

_VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+\Z")
_VERSION = re.compile(r"[0-9A-Za-z._-]{1,64}\Z")


class _SessionEnded(Exception):
    """The server answered 404 to a request that carried session id ``session`` (module
    rules: the session ended)."""

    def __init__(self, session: str | None) -> None:
        super().__init__("the HTTP session ended")
        self.session = session


class FallBack(Exception):
    """The ``initialize`` POST got a status in ``FALLBACK_STATUSES`` and the transport was
    built with ``fall_back=True``: the caller may try the older HTTP+SSE transport.
    ``str()`` is the refusal sentence."""


@dataclass
class _Stream:
    """One logical event stream: the answer of a POST (``key`` its request id) or the GET."""

    key: bytes | None
    last_id: str = ""
    retry_ms: int | None = None  # the server's last ``retry`` field, as it sent it
    answered: bool = False


class StreamableHTTPTransport:
    """One MCP session over Streamable HTTP as a line transport (``Transport``).

    Use it as ``async with StreamableHTTPTransport(params) as transport:``; entering only
    builds the HTTP client and the transport's task group (nothing is sent until the first
    line); leaving calls ``aclose()``. Enter and leave it in the same task. One task may
    ``receive()`` and one may ``send()`` at a time; ``aclose()`` may be called from any task.

    ``fall_back=True``: an ``initialize`` refused with 400, 404 or 405 raises ``FallBack``
    from ``send()`` instead of losing the transport (see ``AutoHTTPTransport``).
    """

    def __init__(
        self,
        params: HTTPParameters,
        *,
        fall_back: bool = False,
        **options: Unpack[TransportArgs],
    ) -> None:
        self._params = params
        self._limits, self._redactor, self._logger = transport_options(params, options, "mcpl_host.http")
        self._shown = shown_http_url(params.url, self._redactor)
        self._fall_back = fall_back
        self._client: httpx.AsyncClient | None = None
        self._url: httpx.URL | None = None  # params.url parsed once (_open), not per request
        self._tasks: anyio.abc.TaskGroup | None = None  # the runner's: every stream task
        self._tasks_scope = anyio.CancelScope()
        self._tasks_done = anyio.Event()
        self._inbox = Inbox(self._limits.max_http_inbox_bytes)
        self._session_id: str | None = None
        self._protocol_version: str | None = None
        self._told_version = False  # negotiated() was called: the initialize answer is not read
        self._initialize_key: bytes | None = None
        self._streams: dict[bytes, anyio.CancelScope] = {}
        self._stateless: set[bytes] = set()  # keys of stateless requests in flight
        self._send_scopes: set[anyio.CancelScope] = set()
        self._get_started = False
        self._refusals = LogBudget(self._limits.invalid_requests_logged)
        self._life = Lifetime("a StreamableHTTPTransport")
        self._param_source: Callable[[Mapping[str, Any]], dict[str, str]] | None = None
        # The session's renewal (module rules, transports.http_session).
        self._initialize_line: bytes | None = None
        self._initialized_line: bytes | None = None
        self._manifest: bytes | None = None
        self._renew_lock = anyio.Lock()
        self._renewing: anyio.Event | None = None  # set while a new session is being opened
        self._session_changed = anyio.Event()  # set (and made anew) when one was started
        self._renewed_at: list[float] = []  # when the recent renewals were (renewal_refused)
        self._renewals = 0
        self._on_renewed: Callable[[], None] | None = None

    def watch_session(self, on_renewed: Callable[[], None]) -> None:
        """From now on ``on_renewed()`` is called (in the task that opened it) each time the
        transport started a new session after the server ended one (module rules): the
        session's state on the server (subscriptions, log level, the MCPL grant) is gone
        and the caller sets it again. It must not block."""
        self._on_renewed = on_renewed

    @property
    def renewals(self) -> int:
        """How many new sessions this transport started after the server ended one."""
        return self._renewals

    def mirror_params(self, source: Callable[[Mapping[str, Any]], dict[str, str]]) -> None:
        """From now on each stateless ``tools/call`` also carries ``source(message)`` (its
        ``Mcp-Param-*`` headers: header tokens and encoded values; module rules)."""
        self._param_source = source

    #: MCP 2026-07-28 may go over Streamable HTTP (``CarriesStateless``).
    carries_stateless = True

    @property
    def stderr_tail(self) -> list[str]:
        """Always empty: an HTTP server has no stderr channel."""
        return []

    def describe(self) -> str:
        """The URL without credentials (``shown_http_url``)."""
        return self._shown

    def __repr__(self) -> str:
        state = transport_state(self._life, self._inbox)
        return f"<StreamableHTTPTransport {self._shown} {state} session={self._session_id is not None}>"

    @property
    def session_id(self) -> str | None:
        """The ``Mcp-Session-Id`` the server gave in its ``initialize`` answer (MCP 2025-11-25
        "Transports", session management), None without one (``HasSession``)."""
        return self._session_id

    @property
    def protocol_version(self) -> str | None:
        """The ``MCP-Protocol-Version`` sent from now on (None before the handshake)."""
        return self._protocol_version

    def negotiated(self, protocol_version: str) -> None:
        """Called by the connection with the protocol version the handshake agreed, before it
        sends anything else: every later request carries it as ``MCP-Protocol-Version``.
        Without this call the version is read from the initialize result."""
        self._told_version = True
        self._protocol_version = protocol_version if _VERSION.match(protocol_version) else None

    # --- opening and closing -----------------------------------------------------------

    async def __aenter__(self) -> StreamableHTTPTransport:
        """Build the client and the task group (no network I/O).

        Raises:
            RuntimeError: the transport was already entered or closed.
        """
        self._life.enter()
        self._client = open_client(self._params, self._limits, self._logger, self._shown)
        await self._life.start(lambda task_group: task_group.start(self._run_tasks), self.aclose)
        return self

    async def _run_tasks(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        try:
            with self._tasks_scope:
                async with anyio.create_task_group() as tasks:
                    self._tasks = tasks
                    task_status.started()
                    await anyio.sleep_forever()
        finally:
            self._tasks_done.set()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Close (``aclose()``) and leave the task group. The close is shielded."""
        await self._life.leave(self.aclose, exc_type, exc, tb)

    async def aclose(self) -> None:
        """Stop every stream, send DELETE for the session (at most
        ``limits.close_grace_seconds``; any answer, 405 included, is fine), close the client.
        Idempotent; a second caller waits for the first. Never raises (beyond cancellation
        of a second caller). **Cancellation:** shielded. A task blocked in ``send()`` or
        ``receive()`` gets ``ConnectionClosed``."""
        if not await self._life.first_close():
            return
        self._inbox.close()
        with anyio.CancelScope(shield=True):
            try:
                for scope in self._send_scopes:
                    scope.cancel()
                self._tasks_scope.cancel()
                if self._tasks is not None:
                    await self._tasks_done.wait()  # prompt: every task stops at its next checkpoint
                if self._session_id is not None and self._client is not None:
                    with anyio.move_on_after(self._limits.close_grace_seconds):
                        await self._delete_session(self._client)
                if self._client is not None:
                    await self._client.aclose()
            finally:
                self._life.closed.set()

    async def _delete_session(self, client: httpx.AsyncClient) -> None:
        with contextlib.suppress(httpx.HTTPError, httpx.StreamError, OSError):
            # Streamed, and the body never read: whatever the server answers costs nothing.
            request = client.build_request("DELETE", self._params.url, headers=self._headers(ACCEPT_POST))
            response = await client.send(request, stream=True)
            await response.aclose()
            self._logger.debug("session ended with DELETE", url=self._shown, status=response.status_code)

    # --- helpers ----------------------------------------------------------------------

    def _headers(self, accept: str, *, json_body: bool = False) -> dict[str, str]:
        headers = {"Accept": accept}
        if json_body:
            headers["Content-Type"] = "application/json"
        if self._session_id is not None:
            headers["Mcp-Session-Id"] = self._session_id
        if self._protocol_version is not None:
            headers["MCP-Protocol-Version"] = self._protocol_version
        return headers

    def _lose(self, message: str, step: str | None = None) -> ConnectionLost | ConnectionClosed:
        return self._inbox.lose(message, step)

    def _spawn(self, function: Callable[..., Any], *args: Any) -> None:
        """Run ``function(*args)`` in a task of the runner; ``aclose()`` stops it."""
        assert self._tasks is not None

        async def run() -> None:
            with contextlib.suppress(ConnectionLost, ConnectionClosed):  # recorded in the inbox
                await function(*args)

        self._tasks.start_soon(run)

    @contextlib.contextmanager
    def _sending(self) -> Generator[None]:
        """The scope of one ``send()``: ``aclose()`` cancels it (then ``ConnectionClosed``)."""
        if self._life.closing:
            raise ConnectionClosed("the HTTP transport was closed")
        if self._inbox.lost is not None:
            raise ConnectionLost(self._inbox.lost, step=self._inbox.lost_step)
        with anyio.CancelScope() as scope:
            self._send_scopes.add(scope)
            try:
                yield
            finally:
                self._send_scopes.discard(scope)
        if scope.cancelled_caught:
            raise ConnectionClosed("the HTTP transport was closed")

    async def _open(
        self, method: str, what: str, headers: dict[str, str] | httpx.Headers, content: bytes | None = None
    ) -> httpx.Response:
        """Send one HTTP request and return its answer's head (the body still to read).
        Raises ``Unreachable`` when the server cannot be reached."""
        assert self._client is not None
        if self._url is None:
            self._url = httpx.URL(self._params.url)
        request = self._client.build_request(method, self._url, headers=headers, content=content)
        with unreachable(what, self._shown, self._redactor):
            return await self._client.send(request, stream=True)

    async def _open_or_lose(
        self, method: str, what: str, headers: dict[str, str], content: bytes | None = None
    ) -> httpx.Response:
        """``_open``, the transport lost (``ConnectionLost``) when the server is unreachable."""
        try:
            return await self._open(method, what, headers, content)
        except Unreachable as exc:
            raise self._lose(str(exc), exc.step) from None

    def _refusal(self, response: httpx.Response, what: str, body: str, *, had_session: bool) -> str:
        return refusal_of(
            response,
            what,
            body,
            shown_url=self._shown,
            had_session=had_session,
            redactor=self._redactor,
            auth=self._params.auth,
        )

    # --- sending -------------------------------------------------------------------------

    async def send(self, data: bytes) -> None:
        """POST each non-empty line of ``data`` (see the module rules for what is awaited).

        Raises:
            ConnectionLost: the server is unreachable, refused the message (as the module
                rules say), or the transport was lost before.
            ConnectionClosed: ``aclose()`` was called (before or during this call).
            FallBack: only with ``fall_back=True``, for the ``initialize`` POST.
        """
        for line in data.split(b"\n"):
            line = line.strip()
            if line:
                with self._sending():
                    await self._send_line(line)

    async def _send_line(self, line: bytes) -> None:
        kind, request_id, method, message = peek(line)
        if kind == "request" and method == "initialize":
            await self._post_initialize(line, id_key(request_id), request_id)
        elif kind == "request" and is_stateless_request(message):
            assert message is not None
            headers = http_request_headers(message)
            if method == "tools/call" and self._param_source is not None:
                headers.update(self._param_source(message))
            self._spawn(
                self._post_request, line, id_key(request_id), f"the POST of {method}", headers, request_id
            )
        elif kind == "request":
            self._spawn(
                self._post_request,
                line,
                id_key(request_id),
                f"the POST of {method}",
                None,
                request_id,
                method,
            )
        elif method == "notifications/cancelled" and self._cancels_stateless(message):
            return  # its stream was closed: that is the cancellation (module rules)
        else:
            what = f"the POST of {method}" if method else "the POST of a response"
            if method == "notifications/initialized":
                self._initialized_line = line
            await self._post_message(line, what, kind, method)
            if method == "notifications/initialized" and not self._get_started:
                self._get_started = True
                self._spawn(self._run_stream, None, _Stream(key=None))
            elif method == "notifications/cancelled":
                params: Any = message.get("params") if message is not None else None
                if is_object(params) and "requestId" in params:
                    scope = self._streams.get(id_key(params["requestId"]))
                    if scope is not None:
                        scope.cancel()  # the answer is no longer wanted: stop reading it

    async def _post_initialize(self, line: bytes, key: bytes, request_id: object) -> None:
        self._initialize_key = key
        self._initialize_line = line
        self._session_id = None
        headers = self._headers(ACCEPT_POST, json_body=True)
        response = await self._open_or_lose("POST", "the POST of initialize", headers, line)
        try:
            readable = await self._check_answer(
                response, "the POST of initialize", key, had_session=False, fall_back=self._fall_back
            )
            session = response.headers.get("mcp-session-id")
            if session is not None:
                if not _VISIBLE_ASCII.match(session):
                    raise self._lose(
                        f"the server at {self._shown} sent an Mcp-Session-Id that is not visible ASCII"
                    )
                self._session_id = session
        except BaseException:
            with anyio.CancelScope(shield=True):
                await response.aclose()
            raise
        if readable:
            self._spawn(self._read_answer, response, key, request_id, "the POST of initialize")
        else:
            await response.aclose()

    # --- a new session after the server ended one (module rules) ---------------------------

    def _ends_session(self, session: str | None, status: int, body: str) -> bool:
        """Whether an answer (``status``, the start of ``body``) to a message that carried
        ``session`` (None: none) ends it and starts a new one (``says_session_ended``;
        never with ``limits.max_session_renewals`` 0)."""
        return (
            session is not None and self._limits.max_session_renewals > 0 and says_session_ended(status, body)
        )

    async def _session_ready(self) -> None:
        """Wait while a new session is being opened. Raises ``ConnectionLost`` when opening
        it failed (the transport is lost)."""
        renewing = self._renewing
        if renewing is not None:
            await renewing.wait()
        if self._inbox.lost is not None:
            raise ConnectionLost(self._inbox.lost, step=self._inbox.lost_step)

    async def _until_session_ends(self, session: str) -> None:
        """Return once ``session`` is no longer the session in force (a new one was started,
        or is being started). Cancelled with the request's task (its timeout, the
        transport's close)."""
        while self._session_id == session:
            await self._session_changed.wait()

    async def _renew(self, ended: str | None) -> None:
        """Start a new session after the server ended session ``ended`` (a 404 to it; MCP
        2025-11-25 "Transports", session management): the first ``initialize`` again,
        under an id of its own, then ``notifications/initialized``; nothing when another
        task has already done it. At most ``limits.max_session_renewals`` within
        ``limits.session_renewal_window_seconds`` (``renewal_refused``), each within
        ``limits.handshake_timeout_seconds``.
        Raises ``ConnectionLost`` (the transport lost, with the reason) when a new session
        cannot be started."""
        async with self._renew_lock:
            if self._session_id != ended:
                return  # a new session is in force already
            limits = self._limits
            lead = f"the server at {self._shown} ended the HTTP session (404 for its session id)"
            if self._initialize_line is None:
                raise self._lose(f"{lead} before the handshake", "http")
            now = anyio.current_time()
            refused = renewal_refused(self._renewed_at, now, limits)
            if refused is not None:
                raise self._lose(f"the server at {self._shown} ended the HTTP session {refused}", "http")
            self._renewed_at.append(now)
            self._renewals += 1
            done = self._renewing = anyio.Event()
            try:
                problem: str | None = None
                with anyio.move_on_after(limits.handshake_timeout_seconds) as deadline:
                    problem = await self._open_session(self._initialize_line, self._renewals)
                if deadline.cancelled_caught:
                    problem = f"it did not answer within {describe_seconds(limits.handshake_timeout_seconds)}"
                if problem is not None:
                    raise self._lose(f"{lead}, and a new session could not be started: {problem}", "http")
            finally:
                self._renewing = None
                done.set()
                self._session_changed.set()
                self._session_changed = anyio.Event()
        self._logger.warning("the server ended the HTTP session; a new session was started", url=self._shown)
        if self._on_renewed is not None:
            self._on_renewed()

    async def _open_session(self, first: bytes, number: int) -> str | None:
        """Open renewal ``number``'s session: ``initialize`` (``first`` under its own id),
        its answer checked (``renewal_problem``), then ``notifications/initialized``.
        Returns why it failed (a phrase), None when the new session is in force. Other
        messages on the initialize's event stream are passed on."""
        line, request_id = renewal_initialize(first, number)
        self._session_id = None
        what = "the POST of initialize"
        try:
            response = await self._open("POST", what, self._headers(ACCEPT_POST, json_body=True), line)
        except Unreachable as exc:
            return str(exc)
        try:
            status = response.status_code
            if not 200 <= status < 300:
                body = await error_excerpt(response, self._limits)
                return self._refusal(response, what, body, had_session=False)
            session = response.headers.get("mcp-session-id")
            if session is not None and not _VISIBLE_ASCII.match(session):
                return "it sent an Mcp-Session-Id that is not visible ASCII"
            answer = await self._renewal_answer(response, request_id)
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()
        if answer is None:
            return "it sent no answer to initialize"
        problem = renewal_problem(answer, protocol_version=self._protocol_version, manifest=self._manifest)
        if problem is not None:
            return problem
        self._session_id = session
        if self._initialized_line is not None:
            what = "the POST of notifications/initialized"
            refused, refusal, _ = await self._post_message_once(self._initialized_line, what)
            if refused is not None:
                return refusal
        return None

    async def _renewal_answer(self, response: httpx.Response, request_id: str) -> object:
        """The answer to a renewal's ``initialize`` (``request_id``), parsed, from a JSON body
        or an event stream (other messages on it are passed on); None when none came."""
        limits = self._limits
        key = id_key(request_id)
        with (
            contextlib.suppress(Unreachable, UnreadableBody),
            unreachable("the answer to initialize", self._shown, self._redactor),
        ):
            if media_type(response.headers.get("content-type")) == "application/json":
                body = await read_body(
                    response, limits.max_line_bytes, limits.read_chunk_bytes, limits.max_content_codings
                )
                kind, answer_id, _, message = peek(trim(body))
                return message if kind == "response" and id_key(answer_id) == key else None
            async for events in sse_events(response, limits):
                for event in map(as_event, events):
                    data = trim(event.data)
                    if event.event != "message" or not data:
                        continue
                    kind, answer_id, _, message = peek(data)
                    if kind == "response" and id_key(answer_id) == key:
                        return message
                    await self._deliver(data, None)
        return None

    def _cancels_stateless(self, message: dict[str, Any] | None) -> bool:
        """A ``notifications/cancelled`` of a stateless request: close its stream (True)."""
        params: Any = message.get("params") if message is not None else None
        if not is_object(params) or "requestId" not in params:
            return False
        key = id_key(params["requestId"])
        if key not in self._stateless:
            return False
        scope = self._streams.get(key)
        if scope is not None:
            scope.cancel()
        return True

    async def _post_request(
        self,
        line: bytes,
        key: bytes,
        what: str,
        stateless_headers: dict[str, str] | None = None,
        request_id: object = None,
        method: str | None = None,
    ) -> None:
        with anyio.CancelScope() as scope:
            self._streams[key] = scope
            if stateless_headers is not None:
                self._stateless.add(key)
            try:
                while True:
                    await self._session_ready()
                    session = self._session_id if stateless_headers is None else None
                    try:
                        lost = await self._post_request_once(line, key, what, stateless_headers, request_id)
                        if not lost or session is None:
                            return
                        # Its stream ended unanswered, not to be resumed: the answer is lost,
                        # unless the session ended (then HS2 applies, once a request meets it).
                        await self._until_session_ends(session)
                    except _SessionEnded as ended:
                        session = ended.session
                    # The server ended the session (module rules): a new one, then the
                    # request again or its error answer.
                    await self._renew(session)
                    if after_session_ended("request", method) != "resend":
                        answer = session_ended_answer(request_id, method or "the request", self._shown)
                        await self._inbox.put(orjson.dumps(answer))
                        return
            finally:
                self._streams.pop(key, None)
                self._stateless.discard(key)

    async def _post_request_once(
        self,
        line: bytes,
        key: bytes,
        what: str,
        stateless_headers: dict[str, str] | None,
        request_id: object,
    ) -> bool:
        """POST one request and read its answer. Returns True when its event stream ended
        without the answer and cannot be resumed (a stateless request's error answer is
        then made here). Raises ``_SessionEnded`` when the server answers 404 to the session
        id it carried (on the POST or a resumption)."""
        had_session = self._session_id is not None
        headers = self._headers(ACCEPT_POST, json_body=True)
        if stateless_headers is not None:
            headers.pop("Mcp-Session-Id", None)
            headers.update(stateless_headers)
        probe = stateless_headers is not None and stateless_headers.get("Mcp-Method") == "server/discover"
        if probe:
            try:
                response = await self._open("POST", what, headers, line)
            except Unreachable as exc:  # S3a: a connection closed unanswered refuses it
                if exc.connecting:  # no server there: initialize would not reach it either
                    raise self._lose(str(exc), exc.step) from None
                await self._inbox.put(orjson.dumps(stream_lost_answer(request_id, what)))
                return False
        else:
            response = await self._open_or_lose("POST", what, headers, line)
        try:
            answer_refusal = request_id if stateless_headers is not None else None
            if await self._check_answer(
                response,
                what,
                key,
                had_session=had_session,
                answer_refusal=answer_refusal,
                probe=probe,
                session=headers.get("Mcp-Session-Id"),
            ):
                answered = await self._read_answer(response, key, request_id, what, probe=probe)
                if not answered and stateless_headers is not None and not self._life.closing:
                    # Nothing can resume it: the request fails now, not at its timeout.
                    await self._inbox.put(orjson.dumps(stream_lost_answer(request_id, what)))
                return not answered
            return False
        finally:
            await close_response(response)

    async def _check_answer(
        self,
        response: httpx.Response,
        what: str,
        key: bytes,
        *,
        had_session: bool,
        fall_back: bool = False,
        answer_refusal: object = None,
        probe: bool = False,
        session: str | None = None,
    ) -> bool:
        """Check the head of a request's answer: True to read it, False when there is
        nothing to read (202: the answer comes on another stream). Raises ``ConnectionLost``
        for a refusal, or ``FallBack`` (``fall_back`` and a status in ``FALLBACK_STATUSES``);
        a refusal whose body is the JSON-RPC answer to the request is passed on as a line
        instead (then False), and so is the error answer made here for a stateless request
        (``answer_refusal``: its id) refused with a status in ``FALLBACK_STATUSES`` or, for
        the era probe (``probe``), with any status but 401, 403 and a redirect, or any
        content type (module rules). Raises ``_SessionEnded`` for a 404 to a request that
        carried ``session`` (its session id)."""
        status = response.status_code
        if status == 202:
            self._logger.debug("request accepted without an answer on its POST", url=self._shown)
            return False
        if not 200 <= status < 300:
            body = await error_excerpt(response, self._limits)
            kind, answer_id, _, _ = peek(body.encode("utf-8"))
            if kind == "response" and id_key(answer_id) == key and not (status == 404 and had_session):
                await self._inbox.put(body.encode("utf-8"))
                return False
            if self._ends_session(session, status, body):
                raise _SessionEnded(session)
            message = self._refusal(response, what, body, had_session=had_session)
            if fall_back and status in FALLBACK_STATUSES:
                raise FallBack(message)
            # The probe: any status but a credential refusal or a redirect (they would hold
            # for initialize too, and the sentence says what to do).
            probe_refused = probe and status not in (401, 403) and not 300 <= status < 400
            if answer_refusal is not None and (probe_refused or status in FALLBACK_STATUSES):
                await self._inbox.put(orjson.dumps(http_refusal_answer(answer_refusal, status, message)))
                return False
            raise self._lose(message, "http")
        kind = media_type(response.headers.get("content-type"))
        if kind not in ("application/json", "text/event-stream"):
            shown = log_value(kind or "none", self._redactor, max_units=80)
            message = (
                f"the server at {self._shown} answered {what} with Content-Type {shown}; "
                "expected application/json or text/event-stream"
            )
            if probe:
                await self._inbox.put(orjson.dumps(http_refusal_answer(answer_refusal, status, message)))
                return False
            raise self._lose(message)
        return True

    async def _post_message(
        self, line: bytes, what: str, kind: str | None = None, method: str | None = None
    ) -> None:
        """POST a notification or response (``kind``, ``method``: what ``peek`` read of it);
        wait for the server to accept it. After a 404 to its session id: a new session, then
        the message again or not at all (``after_session_ended``, module rules)."""
        await self._session_ready()
        while True:
            session = self._session_id
            status, message, body = await self._post_message_once(line, what)
            if status is None:
                return
            if self._ends_session(session, status, body):
                await self._renew(session)
                if after_session_ended(kind, method) == "resend":
                    continue
                self._logger.info("not sent: the session it belonged to had ended", what=what)
                return
            if status in (401, 403) or 300 <= status < 400 or (status == 404 and session is not None):
                raise self._lose(message, "http")
            verdict = self._refusals.take()
            if verdict != "quiet":
                suffix = "; further refusals go unlogged" if verdict == "last" else ""
                self._logger.warning(f"the server refused a message{suffix}", reason=message)
            return

    async def _post_message_once(self, line: bytes, what: str) -> tuple[int | None, str, str]:
        """POST one notification or response: (None, "", "") when the server accepted it,
        else its status, the refusal sentence and the start of its body. Raises ``ConnectionLost`` when the server
        cannot be reached or does not answer within ``limits.http_reply_timeout_seconds``."""
        had_session = self._session_id is not None
        timeout = self._limits.http_reply_timeout_seconds
        try:
            with anyio.fail_after(timeout):
                headers = self._headers(ACCEPT_POST, json_body=True)
                response = await self._open_or_lose("POST", what, headers, line)
                try:
                    status = response.status_code
                    if 200 <= status < 300:
                        return None, "", ""
                    body = await error_excerpt(response, self._limits)
                    return status, self._refusal(response, what, body, had_session=had_session), body
                finally:
                    await close_response(response)
        except TimeoutError:
            raise self._lose(
                f"the server at {self._shown} did not answer {what} within {describe_seconds(timeout)}"
            ) from None

    # --- receiving -------------------------------------------------------------------------

    def receive_now(self) -> ReadItem | None:
        """The next message already received, as ``receive()`` would return it at once
        (``ReceivesNow``: the events of one read wait in the inbox); None when none is
        held or the transport is closed."""
        return self._inbox.get_now()

    async def receive(self) -> ReadItem:
        """The next message from the server (``bytes``, one JSON-RPC message), in arrival
        order across the streams. Raises ``ConnectionLost`` (once every line received is
        taken) or ``ConnectionClosed``."""
        return await self._inbox.get()

    async def _read_answer(
        self, response: httpx.Response, key: bytes, request_id: object, what: str, *, probe: bool = False
    ) -> bool:
        """Read the answer of a request POST (head already checked) to its end; True when
        the answer to ``key`` came (or was made here). A JSON body must be the request's
        answer (MCP 2025-11-25 "Streamable HTTP", sending messages): an empty one, or one
        that answers something else, is passed on as an error answer made here
        (``stateless.http_refusal_answer``), so the caller learns at once. For the era
        probe (``probe``) a body cut off is such an answer too (module rules)."""
        try:
            if media_type(response.headers.get("content-type")) == "application/json":
                what = f"the answer to a request from {self._shown}"
                try:
                    with unreachable(what, self._shown, self._redactor):
                        limits = self._limits
                        body = trim(
                            await read_body(
                                response,
                                limits.max_line_bytes,
                                limits.read_chunk_bytes,
                                limits.max_content_codings,
                            )
                        )
                except UnreadableBody as exc:
                    raise self._lose(
                        f"the server at {self._shown} sent {exc}; the transport was closed"
                    ) from None
                except Unreachable as exc:
                    if probe:
                        await self._inbox.put(orjson.dumps(stream_lost_answer(request_id, what)))
                        return True
                    raise self._lose(str(exc)) from None
                if not (body and await self._deliver(body, key)):
                    said = "an empty body" if not body else "a body that is not its answer"
                    sentence = f"the server at {self._shown} answered {what} with {said} (no JSON-RPC answer)"
                    refusal = http_refusal_answer(request_id, response.status_code, sentence)
                    await self._inbox.put(orjson.dumps(refusal))
                return True
            stream = _Stream(key=key)
            await self._run_stream(response, stream)
            return stream.answered
        finally:
            await close_response(response)

    async def _deliver(self, line: bytes, key: bytes | None) -> bool:
        """Pass one message on; True when it is the answer to request ``key``
        (``_answers``)."""
        answered = self._answers(line, key)
        await self._inbox.put(line)
        return answered

    def _answers(self, line: bytes, key: bytes | None) -> bool:
        """Whether ``line`` is the answer to request ``key`` (for ``initialize``'s, its
        manifest and protocol version are read here). A message of the GET stream (``key``
        None) answers no request of it, and one that cannot be an answer (``may_answer``)
        answers none: either is not parsed."""
        if key is None or not may_answer(line):
            return False
        kind, answer_id, _, message = peek(line)
        answered = kind == "response" and id_key(answer_id) == key
        if answered and key == self._initialize_key:
            result: Any = message.get("result") if message is not None else None
            self._manifest = manifest_of(result)
            version: Any = result.get("protocolVersion") if is_object(result) else None
            if not self._told_version and isinstance(version, str) and _VERSION.match(version):
                self._protocol_version = version
        return answered

    async def _run_stream(self, response: httpx.Response | None, stream: _Stream) -> None:
        """Read one logical event stream to its end, reconnecting as the module rules say.
        ``response`` is the open answer of a POST, or None to open the GET stream.
        Raises ``ConnectionLost`` when the GET stream cannot be reopened (the session's
        server messages would be lost) or the session is over."""
        failures = 0
        empty = 0  # streams in a row that ended without delivering a message
        last_failure = ""
        limits = self._limits
        while True:
            if response is not None:
                opened_at = anyio.current_time()
                delivered = await self._read_events(response, stream)
                if stream.answered:
                    return
                failures = 0
                # One that stayed open long was closed for idleness, not in a loop.
                lasted = anyio.current_time() - opened_at
                empty = 0 if delivered or lasted >= limits.sse_max_reconnect_delay_seconds else empty + 1
            if stream.key is not None and not stream.last_id:
                if stream.key not in self._stateless:  # a stateless request fails at once instead
                    self._logger.warning(
                        "the server closed the stream of a request's answer before answering, "
                        "without event ids to resume it; the request will time out unless the "
                        "session ended",
                        url=self._shown,
                    )
                return
            if response is not None or failures:
                await anyio.sleep(
                    reconnect_delay(limits, failures=failures, empty=empty, retry_ms=stream.retry_ms)
                )
            try:
                opened = await self._open_get(stream)
            except _SessionEnded as ended:
                if stream.key is not None:
                    raise  # the request's own task decides (module rules)
                await self._renew(ended.session)
                stream.last_id = ""  # its event ids belonged to the ended session
                failures, response = 0, None
                continue
            if isinstance(opened, str):
                failures, last_failure, response = failures + 1, opened, None
                if failures >= limits.sse_max_reconnect_attempts:
                    message = f"{last_failure} ({failures} attempts in a row)"
                    if stream.key is None:
                        raise self._lose(message)
                    self._logger.warning("gave up resuming the stream of a request's answer", reason=message)
                    return
            elif opened is None:
                return
            else:
                response = opened

    async def _open_get(self, stream: _Stream) -> httpx.Response | str | None:
        """Open (or resume, with ``Last-Event-ID``) an event stream with a GET. Returns the
        response (200 with an event stream), a sentence for a failure worth retrying, or
        None when the server offers no stream (405, or a refusal retrying cannot change: a
        4xx other than 408 and 429, logged). Raises ``ConnectionLost`` when the session is
        over, the credentials are refused, or the server redirects; ``_SessionEnded`` for a
        404 to its session id."""
        await self._session_ready()
        headers: dict[str, str] | httpx.Headers = self._headers(ACCEPT_SSE)
        session = headers.get("Mcp-Session-Id")
        if stream.last_id:
            # An event id is any text (SSE1): its UTF-8 bytes, which httpx sends as given.
            headers = httpx.Headers(headers, encoding="utf-8")
            headers["Last-Event-ID"] = stream.last_id
        what = "the GET of its event stream"
        timeout = self._limits.http_reply_timeout_seconds
        try:
            with anyio.fail_after(timeout):
                response = await self._open("GET", what, headers)
        except TimeoutError:
            return f"the server at {self._shown} did not answer {what} within {describe_seconds(timeout)}"
        except Unreachable as exc:
            return str(exc)
        status = response.status_code
        kind = media_type(response.headers.get("content-type"))
        if status == 200 and kind == "text/event-stream":
            return response
        try:
            body = await error_excerpt(response, self._limits) if status != 200 else ""
        finally:
            await response.aclose()
        if status == 405:
            self._logger.debug("the server offers no event stream (GET answered 405)", url=self._shown)
            return None
        if status == 200:
            shown = log_value(kind or "none", self._redactor, max_units=80)
            return f"the server at {self._shown} answered {what} with Content-Type {shown}"
        if self._ends_session(session, status, body):
            raise _SessionEnded(session)
        message = self._refusal(response, what, body, had_session=session is not None)
        if (status == 404 and session is not None) or status in (401, 403) or 300 <= status < 400:
            raise self._lose(message, "http")
        if 400 <= status < 500 and status not in (408, 429):
            self._logger.warning(
                "event stream refused; messages the server sends unasked will not arrive", reason=message
            )
            return None
        return message

    async def _read_events(self, response: httpx.Response, stream: _Stream) -> int:
        """Pass on every message event of ``response`` until it ends or breaks (then
        closed); record the last event id, the server's ``retry`` (milliseconds, as sent),
        and whether the answer to ``stream.key`` came. Returns the messages passed on.
        Raises ``ConnectionLost`` for an event over its bound (decoded, or in a decoding
        layer) or a body in a coding the host does not decode."""
        delivered = 0
        try:
            with (
                contextlib.suppress(Unreachable),
                unreachable("its event stream", self._shown, self._redactor),
            ):
                key = stream.key
                async for events in sse_events(response, self._limits):
                    lines: list[bytes] = []  # the messages of one read go in together
                    for event in events:
                        if type(event) is not bytes:  # an event with an id or a retry, or no message
                            kind, event, event_id, retry = as_event(event)
                            if event_id:
                                stream.last_id = event_id
                            if retry is not None:
                                stream.retry_ms = retry
                            if kind != "message":
                                continue
                        data = trim(event)
                        if data:
                            lines.append(data)
                    # A line of the read may answer only where the whole read may (may_answer:
                    # no "id" member name spans the LF between two lines).
                    if key is not None and lines and may_answer(b"\n".join(lines)):
                        for line in lines:
                            if self._answers(line, key):
                                stream.answered = True
                    if lines:
                        delivered += len(lines)
                        await self._inbox.put_all(lines)
                    # Nothing of this read is held while the next one is awaited.
                    events, lines, event, data = [], [], b"", b""
        except UnreadableBody as exc:
            raise self._lose(f"the server at {self._shown} sent {exc}; the transport was closed") from None
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()
        return delivered

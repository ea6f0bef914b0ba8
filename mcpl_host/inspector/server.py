"""The live inspector: a page on loopback that shows a ``Host`` as it runs and acts on it.
Starlette (the ASGI application) served by hypercorn (on asyncio or trio, the backend the
host runs on); both are the optional extra ``mcpl-host[inspect]`` and are imported when an
inspector starts, never by ``import mcpl_host``.

Rules of this module:

- **Where.** ``127.0.0.1`` only, on ``port`` (0: a free port the system picks). The URL
  (``Inspector.url``) carries a token made by ``secrets.token_urlsafe(32)`` (or the one
  given); every request without it, in the query or in the cookie the page sets from it
  (``view.token_allows``), is answered 403 and nothing else. The page is one static file
  (``page.html``: HTML, CSS and script, no build step, nothing fetched from elsewhere),
  served with a Content-Security-Policy that allows its own inline script and style (by
  hash) and connections to its own origin only.
- **What it shows** (JSON from ``/api/...``; the page puts every server value in the DOM as
  text, never as markup): each server's ``ServerSnapshot``, its policy and the grant table
  (``view.grant_rows``), its tools with their forms (``view.form_fields``), the held
  requests, and a live stream (server-sent events, ``/api/live``) of the host's events
  (``Host.subscribe``; for a server whose pushes and requests are deliveries, only the
  kinds that are not: the inspector watches, it never takes a delivery) and of the
  recording's entries (``traffic``; with a recorder). Every server value is redacted by the
  server's ``Redactor`` before it leaves the host (``report.redact_json``).
- **What it does**: answers a held request (``/api/answer``: the requests held by the
  handlers ``Inspector.handlers`` makes: ``inference/request``, ``sampling/createMessage``,
  ``elicitation/create``, ``shell.held``), calls a tool from its form (``/api/call``:
  ``view.form_arguments``, then ``coerce.schema_problems``, then ``MCPClient.call_tool``),
  grants and denies a capability pattern at run time (``/api/policy``:
  ``shell.commands.changed_policy``, then ``HostedServer.update_policy``, as the shell's
  ``grant`` and ``deny``), and gives the recording file (``/api/recording``).
- **Bounds**: each live item (``MAX_ITEM_BYTES`` of JSON; a larger one goes without the
  server's data, its size said), the live history a new page gets (``max_history`` items),
  each open page's queue (``max_page_queue`` items; past it the oldest are dropped and the
  page is told how many), the body of a request (``MAX_BODY_BYTES``), the pages open at
  once (``max_pages``; past it 503).
- **Life**: ``serve(host)`` (a ``host.HostCompanion``: ``Host(inspector=...)`` starts it
  before its servers) listens, then calls ``task_status.started(url)``; it returns once the
  host has closed (its event subscription ended), open pages told and closed.
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import hashlib
import json
import logging
import re
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from importlib import resources
from secrets import token_urlsafe
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.abc
import orjson

from mcpl_host.events import DELIVERY_KINDS, EVENT_KINDS, Subscription, event_json
from mcpl_host.handlers import HostHandlers
from mcpl_host.inspector.view import TOKEN_COOKIE, form_arguments, form_fields, grant_rows, token_allows
from mcpl_host.jsonrpc.errors import MCPLHostError
from mcpl_host.limits import DEFAULT_HELD_REQUEST_TIMEOUT_SECONDS
from mcpl_host.logging import get_logger, json_safe
from mcpl_host.recording import Recorder, RecordingSubscription
from mcpl_host.report import redact_json, run_event
from mcpl_host.secrets import Redactor
from mcpl_host.shell.commands import CommandError, changed_policy, still_denied
from mcpl_host.shell.held import (
    HeldRequest,
    HeldRequests,
    ShellHandlers,
    answer_hint,
    asked,
    elicitation_mode,
)

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from mcpl_host.client_features import RootsProvider
    from mcpl_host.host import Host

__all__ = [
    "DEFAULT_MAX_HISTORY",
    "DEFAULT_MAX_PAGES",
    "DEFAULT_MAX_PAGE_QUEUE",
    "MAX_BODY_BYTES",
    "Inspector",
    "item_line",
]

#: Live items (events, traffic, held requests) a page gets when it opens.
DEFAULT_MAX_HISTORY = 500
#: Items queued for one open page that has not read them; past it the oldest are dropped.
DEFAULT_MAX_PAGE_QUEUE = 1000
#: Pages (live streams) open at once.
DEFAULT_MAX_PAGES = 4
#: Bytes of one live item as JSON: a larger one is sent without its data (its size said), so
#: the history and each page's queue hold at most this many bytes per item.
MAX_ITEM_BYTES = 16 * 1024
#: Bytes of one request body (an answer, a form, a policy change).
MAX_BODY_BYTES = 1024 * 1024
#: Seconds hypercorn waits for open connections when the inspector stops.
GRACEFUL_SECONDS = 2.0


def _dumps(value: object) -> bytes:
    """``value`` as strict JSON whatever a server put in it (``logging.json_safe``)."""
    try:
        return orjson.dumps(value, default=repr)
    except orjson.JSONEncodeError:  # a lone surrogate, an integer beyond 64 bits
        return json.dumps(json_safe(value), default=repr, allow_nan=False).encode()


def item_line(item: Mapping[str, Any]) -> bytes:
    """One live item as the JSON the stream sends: at most ``MAX_ITEM_BYTES`` (module rules;
    a larger one goes as ``_without_data`` makes it)."""
    line = _dumps(item)
    return line if len(line) <= MAX_ITEM_BYTES else _dumps(_without_data(item, len(line)))


def _without_data(item: Mapping[str, Any], size: int) -> dict[str, Any]:
    """``item`` without the server's data that made it larger than ``MAX_ITEM_BYTES``:
    its kind, server, method and id kept, ``{"omitted": {"bytes": size}}`` instead."""
    omitted = {"omitted": {"bytes": size}}
    shown = dict(item)
    if item.get("type") == "event":
        event = dict(cast("Mapping[str, Any]", item["event"]))
        data: Any = event.get("data")
        kept: dict[Any, Any] = {
            key: data[key] for key in ("method", "id", "featureSet") if isinstance(data, dict) and key in data
        }
        event["data"] = {**_short(kept), **omitted}
        shown["event"] = event
    elif item.get("type") == "traffic":
        entry = cast("Mapping[str, Any]", item["entry"])
        message: Any = entry.get("message")
        kept = {key: message[key] for key in ("method", "id") if isinstance(message, dict) and key in message}
        small = {
            key: entry[key]
            for key in ("seq", "t", "server", "connection", "kind", "event", "transport")
            if key in entry
        }
        shown["entry"] = {**small, **_short(kept), **omitted}
    elif item.get("type") == "held":
        held = dict(cast("Mapping[str, Any]", item["held"]))
        held["params"] = omitted
        held["asked"] = str(held.get("asked", ""))[:1000]
        shown["held"] = held
    return shown


def _short(values: dict[Any, Any]) -> dict[str, Any]:
    """Values kept in a summary: strings cut to 200 characters, ids and numbers as they are."""
    return {
        str(key): (value[:200] if isinstance(value, str) else value)
        for key, value in values.items()
        if isinstance(value, (str, int, float)) or value is None
    }


class _Page:
    """One open live stream: its queue and what it lost."""

    __slots__ = ("arrived", "dropped", "queue")

    def __init__(self, history: collections.deque[bytes], max_queue: int) -> None:
        self.queue: collections.deque[bytes] = collections.deque(history, maxlen=max_queue)
        self.dropped = 0
        self.arrived = anyio.Event()
        self.arrived.set()


def _page_file() -> str:
    return resources.files("mcpl_host.inspector").joinpath("page.html").read_text(encoding="utf-8")


def _csp(page: str) -> str:
    """The page's Content-Security-Policy: its inline script and style by hash, fetches to
    its own origin, nothing else."""

    def hashes(tag: str) -> str:
        found = re.findall(rf"<{tag}>(.*?)</{tag}>", page, flags=re.DOTALL)
        return " ".join(
            f"'sha256-{base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()}'" for body in found
        )

    return (
        f"default-src 'none'; script-src {hashes('script')}; style-src {hashes('style')}; "
        "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )


class Inspector:
    """The live inspector of one ``Host`` (module rules)::

        inspector = Inspector()
        async with Host(configs, handlers_factory=inspector.handlers, inspector=inspector) as host:
            print(inspector.url)  # open it in a browser

    Args:
        port: the loopback port (0: a free one).
        token: the URL's token (default ``secrets.token_urlsafe(32)``).
        recorder: the ``recording.Recorder`` given to the host (``Host(record=...)``): its
            entries are the live traffic and its file (when it has one) the download; None:
            the live view shows the host's events only.
        max_history / max_page_queue / max_pages: the bounds (module rules).
    """

    def __init__(
        self,
        *,
        port: int = 0,
        token: str | None = None,
        recorder: Recorder | None = None,
        max_history: int = DEFAULT_MAX_HISTORY,
        max_page_queue: int = DEFAULT_MAX_PAGE_QUEUE,
        max_pages: int = DEFAULT_MAX_PAGES,
    ) -> None:
        if not 0 <= port <= 65535:
            raise ValueError(f"port must be 0 to 65535, not {port}")
        self.port = port
        self.token = token if token is not None else token_urlsafe(32)
        self.recorder = recorder
        self.url: str | None = None
        self.held = HeldRequests(on_held=self._on_held, on_expired=self._on_expired)
        self._max_page_queue = max_page_queue
        self._max_pages = max_pages
        self._history: collections.deque[bytes] = collections.deque(maxlen=max_history)
        self._pages: set[_Page] = set()
        self._host: Host | None = None
        self._closed = False
        self._log = get_logger("mcpl_host.inspector")

    def __repr__(self) -> str:  # never the token
        return f"<Inspector port={self.port} pages={len(self._pages)}>"

    def handlers(
        self,
        name: str,
        *,
        timeout: float = DEFAULT_HELD_REQUEST_TIMEOUT_SECONDS,
        roots: RootsProvider | None = None,
    ) -> HostHandlers:
        """Handlers for the server ``name`` that hold ``inference/request``,
        ``sampling/createMessage`` and ``elicitation/create`` until answered from the page,
        for up to ``timeout`` seconds (then ``-32603``); push events are accepted. A
        ``handlers_factory`` for ``Host``."""
        return ShellHandlers(name, self.held, timeout=timeout, roots=roots)

    # --- the live stream -----------------------------------------------------------------

    def _publish(self, item: Mapping[str, Any]) -> None:
        line = item_line(item)
        self._history.append(line)
        for page in self._pages:
            if len(page.queue) == page.queue.maxlen:
                page.dropped += 1
            page.queue.append(line)
            page.arrived.set()

    def _redactor(self, server: str) -> Redactor:
        host = self._host
        try:
            return host.server(server).hosted.redactor if host is not None else Redactor()
        except MCPLHostError:
            return Redactor()

    def _held_json(self, held: HeldRequest) -> dict[str, Any]:
        redactor = self._redactor(held.server)
        mode = elicitation_mode(held) if held.method == "elicitation/create" else None
        return {
            "id": held.id,
            "server": held.server,
            "method": held.method,
            "mode": mode,
            "asked": redactor.redact(asked(held.method, held.params)),
            "params": redact_json(held.params, redactor),
            "hint": answer_hint(held).replace(f"answer {held.id} ", ""),
        }

    def _on_held(self, held: HeldRequest) -> None:
        self._publish({"type": "held", "held": self._held_json(held)})

    def _on_expired(self, held: HeldRequest) -> None:
        self._publish({"type": "settled", "id": held.id, "how": "expired"})

    @staticmethod
    def _subscriptions(host: Host) -> list[Subscription]:
        delivering = host.delivering_servers
        watched = [name for name in host.servers if name not in delivering]
        subscriptions: list[Subscription] = []
        if watched:
            subscriptions.append(host.subscribe(servers=watched))
        if delivering:  # never take a delivery (module rules)
            kinds = [k for k in EVENT_KINDS if k not in DELIVERY_KINDS]
            subscriptions.append(host.subscribe(servers=sorted(delivering), kinds=cast("Any", kinds)))
        return subscriptions

    async def _pump_events(self, subscription: Subscription) -> None:
        async for event in subscription:
            shown = run_event(event_json(event), self._redactor(event.server))
            self._publish({"type": "event", "event": shown})
            del event, shown  # nothing of it is held while the next one is awaited

    async def _pump_traffic(self, entries: RecordingSubscription) -> None:
        told = 0
        with entries:  # closed (unsubscribed) when the host has closed
            async for entry in entries:
                if entries.dropped > told:  # entries the recorder could not hand over
                    told = entries.dropped
                    self._publish({"type": "traffic-lost", "count": told})
                self._publish({"type": "traffic", "entry": entry})

    async def _live(self, page: _Page) -> AsyncIterator[bytes]:
        try:
            yield b": live\n\n"
            while not self._closed:
                while page.queue:
                    line = page.queue.popleft()
                    if page.dropped:
                        yield b'data: {"type":"dropped","count":%d}\n\n' % page.dropped
                        page.dropped = 0
                    yield b"data: " + line + b"\n\n"
                page.arrived = anyio.Event()
                if self._closed:
                    break
                await page.arrived.wait()
        finally:
            self._pages.discard(page)

    # --- the HTTP side ----------------------------------------------------------------------

    def _app(self, host: Host) -> Callable[..., Any]:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import FileResponse, PlainTextResponse, Response, StreamingResponse
        from starlette.routing import Route

        page = _page_file()
        page_headers = {
            "Content-Security-Policy": _csp(page),
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
            "Cache-Control": "no-store",
            "X-Frame-Options": "DENY",
        }

        def reply(value: object, status: int = 200) -> Response:
            return Response(
                _dumps(value),
                status_code=status,
                media_type="application/json",
                headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"},
            )

        async def index(request: Request) -> Response:
            response = Response(page, media_type="text/html; charset=utf-8", headers=page_headers)
            if request.query_params.get("token") is not None:
                response.set_cookie(TOKEN_COOKIE, self.token, httponly=True, samesite="strict", path="/")
            return response

        async def state(request: Request) -> Response:
            return reply(
                {
                    "servers": [self._server_json(host, name) for name in host.servers],
                    "held": [self._held_json(held) for held in self.held.list()],
                    "recording": self._recording_path() is not None,
                    "traffic": self.recorder is not None,
                }
            )

        async def live(request: Request) -> Response:
            if len(self._pages) >= self._max_pages:
                return PlainTextResponse("too many pages open", status_code=503)
            opened = _Page(self._history, self._max_page_queue)
            self._pages.add(opened)
            return StreamingResponse(
                self._live(opened),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
            )

        async def tools(request: Request) -> Response:
            name = request.query_params.get("server", "")
            conn = host.server(name).current if name in host.servers else None
            if conn is None:
                return reply({"error": f"server {name!r} is not connected"}, 409)
            try:
                listed = await conn.mcp.list_tools()
            except MCPLHostError as exc:
                return reply({"error": self._redactor(name).redact(str(exc))}, 502)
            shown: list[dict[str, Any]] = []
            for tool in listed:
                fields, omitted = form_fields(tool.input_schema)
                shown.append(
                    {
                        "name": tool.name,
                        "title": tool.title,
                        "description": tool.description,
                        "fields": [f.to_json() for f in fields],
                        "omitted": omitted,
                    }
                )
            return reply({"tools": redact_json(shown, self._redactor(name))})

        async def call(request: Request) -> Response:
            body = await self._body(request)
            if body is None:
                return reply({"error": "the body must be a JSON object"}, 400)
            name, tool_name, values = body.get("server"), body.get("tool"), body.get("values", {})
            if not (isinstance(name, str) and isinstance(tool_name, str) and isinstance(values, dict)):
                return reply({"error": "server, tool (strings) and values (an object) are needed"}, 400)
            if name not in host.servers:
                return reply({"error": f"no server named {name!r}"}, 404)
            redactor = self._redactor(name)
            try:
                conn = await host.server(name).connected()
                listed = await conn.mcp.list_tools()
                tool = next((t for t in listed if t.name == tool_name), None)
                if tool is None:
                    return reply({"error": f"{name} has no tool named {tool_name!r}"}, 404)
                try:
                    arguments = form_arguments(cast("Mapping[str, object]", values), tool.input_schema)
                except ValueError as exc:
                    return reply({"error": str(exc)}, 400)
                problems = self._problems(arguments, tool.input_schema)
                if problems:
                    return reply({"error": "; ".join(problems)}, 400)
                result = await conn.mcp.call_tool(tool_name, arguments)
            except MCPLHostError as exc:
                return reply({"error": redactor.redact(str(exc))}, 502)
            return reply({"result": redact_json(result.raw, redactor), "isError": result.is_error})

        async def policy(request: Request) -> Response:
            body = await self._body(request)
            if body is None:
                return reply({"error": "the body must be a JSON object"}, 400)
            name, verb, pattern = body.get("server"), body.get("verb"), body.get("pattern")
            if not (isinstance(name, str) and verb in ("grant", "deny") and isinstance(pattern, str)):
                return reply({"error": "server, verb (grant or deny) and pattern are needed"}, 400)
            if name not in host.servers:
                return reply({"error": f"no server named {name!r}"}, 404)
            hosted = host.server(name).hosted
            try:
                changed = changed_policy(hosted.policy, cast("str", verb), pattern)
            except CommandError as exc:
                return reply({"error": str(exc)}, 400)
            change = await hosted.update_policy(changed)
            in_force = sorted(change.in_force.paths) if change.in_force is not None else []
            outcome = change.outcome
            return reply(
                {
                    "deferred": change.deferred,
                    "error": self._redactor(name).redact(change.error) if change.error else None,
                    "inForce": in_force,
                    "stillDeniedBy": still_denied(changed, pattern) if verb == "grant" else None,
                    "refused": outcome is not None and not outcome.accepted,
                }
            )

        async def answer(request: Request) -> Response:
            body = await self._body(request)
            if body is None:
                return reply({"error": "the body must be a JSON object"}, 400)
            held_id, text = body.get("id"), body.get("text")
            if not (isinstance(held_id, str) and isinstance(text, str)):
                return reply({"error": "id and text (strings) are needed"}, 400)
            waiting = next((h for h in self.held.list() if h.id == held_id), None)
            if waiting is None:
                return reply({"error": f"no held request {held_id!r}"}, 404)
            if waiting.method == "elicitation/create":
                from mcpl_host.probe_features import elicitation_reply

                try:
                    elicitation_reply(text, elicitation_mode(waiting))
                except ValueError as exc:  # still held: the person may answer again
                    return reply({"error": str(exc)}, 400)
            if not self.held.answer(held_id, text):
                return reply({"error": f"no held request {held_id!r}"}, 404)
            self._publish({"type": "settled", "id": held_id, "how": "answered"})
            return reply({"answered": held_id})

        async def recording(request: Request) -> Response:
            path = self._recording_path()
            if path is None:
                return reply({"error": "this host keeps no recording"}, 404)
            return FileResponse(
                path,
                media_type="application/x-ndjson",
                filename="recording.jsonl",
                headers={"Cache-Control": "no-store"},
            )

        app = Starlette(
            routes=[
                Route("/", index),
                Route("/api/state", state),
                Route("/api/live", live),
                Route("/api/tools", tools),
                Route("/api/call", call, methods=["POST"]),
                Route("/api/policy", policy, methods=["POST"]),
                Route("/api/answer", answer, methods=["POST"]),
                Route("/api/recording", recording),
            ]
        )

        async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                request = Request(scope)
                if not token_allows(
                    self.token, request.query_params.get("token"), request.cookies.get(TOKEN_COOKIE)
                ):
                    await PlainTextResponse("403 Forbidden: this page needs its token", status_code=403)(
                        scope, receive, send
                    )
                    return
            elif scope["type"] != "lifespan":
                return  # no WebSocket here
            await app(scope, receive, send)

        return guarded

    @staticmethod
    def _problems(arguments: dict[str, Any], schema: Mapping[str, Any]) -> list[str]:
        from mcpl_host.coerce import UnusableSchema, schema_problems

        try:
            return schema_problems(arguments, schema)
        except UnusableSchema:
            return []  # the command line's rule: sent unchecked

    @staticmethod
    async def _body(request: Request) -> dict[str, Any] | None:
        """The request's JSON object, or None (not one, or over ``MAX_BODY_BYTES``)."""
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                return None
            chunks.append(chunk)
        try:
            body: object = json.loads(b"".join(chunks))
        except ValueError:
            return None
        return cast("dict[str, Any]", body) if isinstance(body, dict) else None

    def _recording_path(self) -> str | None:
        path = self.recorder.path if self.recorder is not None else None
        if path is None:
            return None
        import os

        return path if os.path.exists(path) else None

    def _server_json(self, host: Host, name: str) -> dict[str, Any]:
        handle = host.server(name)
        hosted = handle.hosted
        snapshot = dataclasses.asdict(handle.snapshot())
        conn = hosted.current
        grant = conn.grant if conn is not None else None
        policy = hosted.policy
        snapshot["policy"] = {
            "grant": list(policy.grant),
            "deny": list(policy.deny),
            "grantAllAdvertised": policy.grant_all_advertised,
        }
        snapshot["grant"] = grant_rows(
            policy,
            grant.advertised if grant is not None else frozenset(),
            grant.paths if grant is not None else None,
        )
        return cast("dict[str, Any]", redact_json(snapshot, hosted.redactor))

    # --- serving -------------------------------------------------------------------------

    async def serve(
        self, host: Host, *, task_status: anyio.abc.TaskStatus[Any] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve the page for ``host`` until the host closes (module rules). Calls
        ``task_status.started(url)`` once listening. Raises ``OSError`` when the port cannot
        be bound, ``ImportError`` (naming the extra) without ``mcpl-host[inspect]``."""
        try:
            import hypercorn
            import starlette

            del hypercorn, starlette
        except ImportError as exc:
            raise ImportError(
                f"the inspector needs the extra mcpl-host[inspect] (starlette, hypercorn): {exc}"
            ) from None
        from hypercorn.config import Config

        if self._host is not None:
            raise RuntimeError("an Inspector serves one host, once")
        self._host = host
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", self.port))
            sock.listen(64)
            sock.setblocking(False)
            port = sock.getsockname()[1]
        except BaseException:
            sock.close()
            raise
        config = Config()
        config.bind = [f"fd://{sock.detach()}"]  # hypercorn owns the socket from here
        config.accesslog = None
        config.errorlog = logging.getLogger("mcpl_host.inspector.http")
        config.graceful_timeout = GRACEFUL_SECONDS
        config.include_server_header = False
        app = self._app(host)
        stopped = anyio.Event()
        self.url = f"http://127.0.0.1:{port}/?token={self.token}"

        # Made now, before any server starts (Host starts servers after task_status.started).
        subscriptions = self._subscriptions(host)
        traffic = self.recorder.subscribe(self._max_page_queue) if self.recorder is not None else None

        async def watch() -> None:
            try:
                async with anyio.create_task_group() as pumps:
                    if traffic is not None:
                        pumps.start_soon(self._pump_traffic, traffic)
                    async with anyio.create_task_group() as events:
                        for subscription in subscriptions:
                            events.start_soon(self._pump_events, subscription)
                    pumps.cancel_scope.cancel()  # the host has closed
            finally:
                self._closed = True
                for page in self._pages:
                    page.arrived.set()
                stopped.set()

        import sniffio

        backend_serve: Callable[..., Awaitable[None]]
        if sniffio.current_async_library() == "trio":
            from hypercorn.trio import serve as trio_serve  # pyright: ignore[reportUnknownVariableType]

            backend_serve = cast("Callable[..., Awaitable[None]]", trio_serve)
        else:
            from hypercorn.asyncio import serve as asyncio_serve  # pyright: ignore[reportUnknownVariableType]

            backend_serve = cast("Callable[..., Awaitable[None]]", asyncio_serve)

        async def run_server() -> None:
            # Shielded: hypercorn stops by its shutdown trigger only (gracefully, within
            # GRACEFUL_SECONDS), never by a cancellation in the middle of its own tasks.
            with anyio.CancelScope(shield=True):
                await backend_serve(app, config, shutdown_trigger=stopped.wait)

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)  # when cancelled, it sets stopped: the server then stops
            tg.start_soon(run_server)
            task_status.started(self.url)

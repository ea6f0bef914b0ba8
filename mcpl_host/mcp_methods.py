"""Plain MCP methods a client sends, with typed results (MCP 2025-11-25 "Server Features" and
"Utilities"; MCP 2026-07-28 where a connection is in the stateless era).

Rules of this module:

- ``MCPClient`` holds a requester (``EraRequester`` over a connection) and its ``Limits``.
  Every MCP method a client sends has one typed call here: listing (every page, within
  ``limits.max_list_pages``, ``max_list_items`` and ``max_list_bytes``; ``LimitExceeded``
  past any of them), ``tools/call``, ``resources/read``, ``resources/subscribe`` /
  ``unsubscribe``, ``prompts/get``, ``completion/complete``, ``logging/setLevel``, ``ping``,
  ``notifications/roots/list_changed``; and the raw ``request`` / ``notify`` for any other
  method (the one place an application sends one on a ``ServerConnection``: ``conn.mcp``).
  Results are the frozen records of ``mcp_records`` (every field of the schema revision;
  the object as sent in ``raw``). A result of the wrong shape raises
  ``RemoteProtocolError`` with one clear sentence.
- ``EraRequester`` adds, on a stateless connection, the per-request ``_meta`` (protocol
  version, client capabilities and identity, log level) to every request
  (``stateless.request_meta``). What the stateless revision removed is never sent: ``ping``
  becomes ``server/discover`` (the one request every such server answers),
  ``logging/setLevel`` becomes the ``_meta`` log level of later requests, and
  ``resources/subscribe`` / ``unsubscribe`` become the filter of ``subscriptions/listen``.
- ``subscriptions/listen`` (MCP 2026-07-28 "Subscriptions"; rules in ``mcpl_host.listen``,
  docs/protocol.md S9): on a stateless connection one listen runs (in a task of the
  connection) while there is something to listen for: the change of each list the
  application listed whose capability says ``listChanged``, and the resources it subscribed
  to. A change of the filter cancels the listen (``notifications/cancelled`` over stdio; the
  HTTP transport closes the stream instead) and sends a new one. The listen never times
  out and is not a ``waiting`` request; it ends with the connection. Its notifications reach
  the application and the list caches like those of the handshake era (they come through
  ``on_notification``); its acknowledgment settles ``subscribe_resource()``.
- Multi round-trip requests (MCP 2026-07-28 "Multi Round-Trip Requests"): a ``tools/call``,
  ``prompts/get`` or ``resources/read`` answered ``resultType: "input_required"`` has its
  input requests answered by the same ``ClientFeatureService`` that serves server requests
  in the handshake era, concurrently, then is retried with ``inputResponses`` and the exact
  ``requestState``, at most ``limits.max_input_rounds`` times.
- List caches: each successful listing is kept (``cached_tools`` ...). On
  ``notifications/tools/list_changed`` (or resources, prompts) a list that was listed
  before is listed again in the background, coalesced (``mcpl_host.coalesce``: one refresh
  in flight and one pending per list, however many changes are announced meanwhile; the
  last starts after the last change); ``lists_settled()`` waits for them. A refresh that
  fails is a warning, unless the host closed the connection (``ConnectionClosed``: nothing
  is left to refresh). In the stateless era a list is served from
  its cache without a request while its ``ttlMs`` / ``cacheScope`` hints say it is fresh
  (``caching``; ``clock``, monotonic seconds), and listed again once stale, when said
  changed, or when asked with ``refresh=True``; ``cache_freshness`` holds each list's.
- ``Mcp-Param-*`` headers (MCP 2026-07-28 "Streamable HTTP", custom headers from tool
  parameters): once ``mirrors_param_headers`` is set (the connection's transport is
  Streamable HTTP and mirrors them), a stateless ``tools/list`` leaves out every tool whose
  ``x-mcp-header`` annotations break the revision's rules (a warning names the tool and
  why), and ``param_headers(message)`` gives the transport the headers of a ``tools/call``
  (``param_headers``) from the tool as listed. A call whose headers are over
  ``limits.max_param_header_bytes`` raises ``LimitExceeded`` before it is sent; a call
  refused with ``-32020`` (HeaderMismatch) lists the tools once and is sent again, once.
- Tool classes (RFC-008; ``mcpl_host.tool_classes``): every listing, the first and each
  refresh after ``notifications/tools/list_changed``, gives each ``Tool`` its effective
  classes and their source under the server's ``tool_classes`` tables (override, host, then
  the server's ``_meta["mcpl/class"]``). What the slot held that was ignored (an unknown
  class, a slot that is not an array, an undefined ``mcpl/`` key) is logged once per tool,
  finding and value, at most ``limits.tool_class_findings_logged`` per connection.
- ``call_tool`` checks ``structuredContent`` against the tool's ``outputSchema`` when the
  tool is in the tools cache (``output_schema.check_structured_content``; ``jsonschema``):
  a mismatch raises ``OutputSchemaError`` naming the failing path. A tool error result
  (``isError``) is not checked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import math
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import anyio
from typing_extensions import Unpack

from mcpl_host.client_features import RequestContext
from mcpl_host.coalesce import Coalesce
from mcpl_host.connection import DEFAULT, ClientInfo, ProgressCallback, RequestOptions, Timeout
from mcpl_host.inbound import BackgroundJob
from mcpl_host.json_size import json_size
from mcpl_host.jsonrpc.errors import (
    ConnectionClosed,
    ConnectionLost,
    HandlerError,
    LocalProtocolError,
    MCPLHostError,
    RemoteError,
    RemoteProtocolError,
    RequestEnded,
    RequestTimeout,
)
from mcpl_host.jsonrpc.values import JSONObject, is_array, is_object
from mcpl_host.limits import LimitExceeded, Limits
from mcpl_host.listen import (
    ACKNOWLEDGED,
    FILTER_KEYS,
    LISTEN,
    TASK_IDS,
    Ending,
    acknowledged_filter,
    after_end,
    ending_of_error,
    honors_uri,
    may_subscribe,
    subscription_id,
    wanted_filter,
)
from mcpl_host.logging import LogBudget, Logger, Redactor, get_logger, log_value
from mcpl_host.mcp_tasks import NOTIFICATION as TASK_NOTIFICATION
from mcpl_host.mcp_tasks import Task, TaskCancelled, TaskFailed, declaration, final_result
from mcpl_host.stateless import (
    HEADER_MISMATCH,
    LOG_LEVELS,
    Era,
    input_required,
    request_meta,
    result_type,
    retry_params,
    stamped,
    stateless_capabilities,
    with_extensions,
)
from mcpl_host.task_polling import TaskPolling
from mcpl_host.tool_classes import ToolClassTables, slot_findings

if TYPE_CHECKING:
    from mcpl_host.caching import CacheHint, Freshness
    from mcpl_host.client_features import ClientFeatureService
    from mcpl_host.connection import Connection
    from mcpl_host.handshake import ServerInfo
    from mcpl_host.mcp_records import (
        Annotations,
        CallToolResult,
        CompleteResult,
        GetPromptResult,
        Icon,
        Prompt,
        PromptArgument,
        PromptMessage,
        ReadResourceResult,
        Resource,
        ResourceContents,
        ResourceTemplate,
        Tool,
        ToolAnnotations,
        call_tool_result,
    )
    from mcpl_host.output_schema import OutputSchemaError
    from mcpl_host.param_headers import ParamHeader

__all__ = [
    "Annotations",
    "CallToolResult",
    "CompleteResult",
    "EraRequester",
    "GetPromptResult",
    "Icon",
    "InputRefused",
    "MCPClient",
    "OutputSchemaError",
    "Prompt",
    "PromptArgument",
    "PromptMessage",
    "PromptReference",
    "ReadResourceResult",
    "Resource",
    "ResourceContents",
    "ResourceTemplate",
    "ResourceTemplateReference",
    "SubscriptionRefused",
    "Task",
    "TaskCancelled",
    "TaskFailed",
    "Tool",
    "ToolAnnotations",
    "call_tool_result",
]

#: The names this module re-exports, each imported from its module on first use (PEP 562):
#: a connection that lists, reads, gets or calls nothing never loads the MCP records
#: (``mcp_records``), nor one whose tools declare no output schema ``output_schema``.
_RECORDS = frozenset(
    {
        "Annotations",
        "CallToolResult",
        "CompleteResult",
        "GetPromptResult",
        "Icon",
        "Prompt",
        "PromptArgument",
        "PromptMessage",
        "ReadResourceResult",
        "Resource",
        "ResourceContents",
        "ResourceTemplate",
        "Tool",
        "ToolAnnotations",
        "call_tool_result",
    }
)


def __getattr__(name: str) -> Any:
    if name != "OutputSchemaError" and name not in _RECORDS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    source = "output_schema" if name == "OutputSchemaError" else "mcp_records"
    value = getattr(importlib.import_module(f"mcpl_host.{source}"), name)
    globals()[name] = value
    return value


#: An entry of a kept list (a ``Tool``, ``Resource`` or ``Prompt``).
_Listed = TypeVar("_Listed")

#: The notifications that say a list changed, and the list each one names.
LIST_CHANGED: dict[str, str] = {
    "notifications/tools/list_changed": "tools",
    "notifications/resources/list_changed": "resources",
    "notifications/prompts/list_changed": "prompts",
}
#: The notifications ``_Listening`` and ``TaskPolling`` look at (each by its own method):
#: a listen's acknowledgment (``listen.ACKNOWLEDGED``) and a task's status
#: (``mcp_tasks.NOTIFICATION``); ``on_notification`` passes no other to them.
_LOOKED_AT = frozenset({ACKNOWLEDGED, TASK_NOTIFICATION})


def _object(result: object, method: str) -> JSONObject:
    if not is_object(result):
        raise RemoteProtocolError(f"the server's {method} result is not a JSON object")
    return result


class InputRefused(MCPLHostError):
    """An input request of a multi round-trip request was refused by its handler (the
    original request is not retried). ``method``: the input request's method, ``key``: its
    key, ``error``: the JSON-RPC error object the handler raised."""

    def __init__(
        self,
        request: str,
        key: str,
        method: str,
        error: Mapping[str, object],
        redactor: Redactor | None = None,
    ) -> None:
        super().__init__(
            f"the input request {log_value(key, redactor, max_units=40)} ({method}) of {request} was refused:"
            f" {log_value(error.get('message'), redactor, max_units=120)}"
        )
        self.key = key
        self.method = method
        self.error = error


def _no_capabilities() -> Mapping[str, Any]:
    return {}


class SubscriptionRefused(MCPLHostError):
    """A stateless server did not take a resource subscription (``subscribe_resource()``):
    it does not advertise ``resources.subscribe``, its acknowledgment of the listen left
    the URI out, or the listen ended before it was acknowledged. ``uri``: the resource."""

    def __init__(self, uri: str, reason: str, redactor: Redactor | None = None) -> None:
        super().__init__(f"the server did not take the subscription to {log_value(uri, redactor)}: {reason}")
        self.uri = uri


class _Attempt:
    """One ``subscriptions/listen`` sent: its ``filter``, its id once sent, the filter the
    server ``honored`` (its acknowledgment), and how it ended (``ending``, ``error``)."""

    __slots__ = ("ending", "error", "filter", "honored", "id", "refetch")

    def __init__(self, wanted: Mapping[str, object], *, refetch: bool = False) -> None:
        self.filter = wanted
        self.refetch = refetch  # it follows a lost stream: list again once acknowledged
        self.id: int | None = None
        self.honored: dict[str, Any] | None = None
        self.ending: Ending | None = None
        self.error: MCPLHostError | None = None

    def set_id(self, request_id: int) -> None:
        self.id = request_id

    def uris(self) -> list[str]:
        uris = self.filter.get("resourceSubscriptions")
        return [uri for uri in uris if isinstance(uri, str)] if is_array(uris) else []


class _Listening:
    """The one ``subscriptions/listen`` of a stateless connection (module rules; the
    decisions are ``mcpl_host.listen``'s). ``refresh()`` after the filter's inputs change
    (a list listed, a resource subscribed to); ``on_notification`` with each notification;
    ``until_honored`` waits for the acknowledgment of a resource subscription."""

    def __init__(
        self,
        requester: _Requester,
        limits: Limits,
        *,
        spawn: Callable[[BackgroundJob], bool] | None,
        capabilities: Callable[[], Mapping[str, Any]],
        listed: Callable[[], set[str]],
        tasks: Callable[[], list[str]],
        refetch: Callable[[], None],
        log: Logger,
        redactor: Redactor | None,
    ) -> None:
        self._requester = requester
        self._refetch = refetch
        self._limits = limits
        self._spawn = spawn
        self._capabilities = capabilities
        self._listed = listed
        self._tasks = tasks
        self._log = log
        self._redactor = redactor
        self.uris: set[str] = set()
        self._running = False
        self._attempt: _Attempt | None = None
        self._scope: anyio.CancelScope | None = None  # around the listen in flight
        self._wake: anyio.Event | None = None  # set to wake the idle loop
        self._changed: anyio.Event | None = None  # set when an attempt starts, is acked or ends
        self._stopped: dict[str, Any] | None = None  # the filter whose listening stopped

    def wanted(self) -> dict[str, Any] | None:
        return wanted_filter(self._capabilities(), self._listed(), self.uris, self._tasks())

    def refresh(self) -> None:
        """The filter's inputs changed: start the loop, wake it, or cancel the listen in
        flight when it listens with another filter. Does not block."""
        if self._spawn is None:
            return
        if not self._running:
            if self.wanted() is not None and self._spawn(self._run):
                self._running = True
            return
        attempt = self._attempt
        if self._scope is not None and attempt is not None and attempt.filter != self.wanted():
            self._scope.cancel()
        elif self._wake is not None:
            self._wake.set()

    def _note_change(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    async def _run(self) -> None:
        restarts = 0
        lost = False  # the last stream was lost: what changed meanwhile was not announced
        try:
            while True:
                wanted = self.wanted()
                if wanted is None or wanted == self._stopped:
                    self._wake = wake = anyio.Event()
                    await wake.wait()
                    self._wake = None
                    continue
                self._stopped = None
                attempt = _Attempt(wanted, refetch=lost)
                ending = await self._listen(attempt)
                lost = ending == "lost" or (lost and attempt.honored is None)
                if ending is None:  # cancelled: the filter changed
                    continue
                if attempt.honored is not None:
                    restarts = 0
                verdict = after_end(ending, restarts=restarts, max_restarts=self._limits.max_listen_restarts)
                error = str(attempt.error) if attempt.error is not None else None
                if verdict == "listen":
                    restarts += 1
                    self._log.info("listening again: the listen stream was lost", error=error)
                    await anyio.sleep(self._limits.listen_restart_delay_seconds)
                    continue
                self._stopped = wanted
                if ending in ("graceful", "cancelled"):
                    self._log.info(
                        "the server ended the listen stream; listening again when the filter changes",
                        ending=ending,
                    )
                else:
                    self._log.warning(
                        "no list changes or resource updates arrive until the filter changes: the"
                        " listen stream ended"
                        + (
                            f" {restarts} times in a row (Limits.max_listen_restarts)"
                            if ending == "lost"
                            else ""
                        ),
                        error=error,
                    )
        except (ConnectionClosed, ConnectionLost):
            pass  # the connection ended: so does the listen
        finally:
            self._running = False
            self._attempt = None
            self._note_change()

    async def _listen(self, attempt: _Attempt) -> Ending | None:
        """Send one listen and wait for its end: how it ended, or None when it was cancelled
        because the filter changed. Raises ``ConnectionClosed`` / ``ConnectionLost``."""
        self._attempt = attempt
        self._note_change()
        ending: Ending = "graceful"
        with anyio.CancelScope() as scope:
            self._scope = scope
            try:
                await self._requester.request(
                    LISTEN,
                    {"notifications": attempt.filter},
                    timeout=None,
                    long_lived=True,
                    on_sent=attempt.set_id,
                    extensions=declaration() if TASK_IDS in attempt.filter else None,
                )
            except RequestEnded:
                ending = "cancelled"
            except RemoteError as exc:
                ending, attempt.error = ending_of_error(exc.data), exc
            except (ConnectionClosed, ConnectionLost):
                raise
            except MCPLHostError as exc:  # a malformed answer, too many requests in flight
                ending, attempt.error = "refused", exc
            finally:
                self._scope = None
        if scope.cancelled_caught:
            return None
        attempt.ending = ending
        self._note_change()
        return ending

    def on_notification(self, method: str, params: object) -> None:
        """The acknowledgment of the listen in flight records the filter honored (what it
        leaves out is logged once). Does not block."""
        attempt = self._attempt
        if method != ACKNOWLEDGED or attempt is None or attempt.id is None:
            return
        if subscription_id(params) != attempt.id or attempt.honored is not None:
            return
        attempt.honored = honored = acknowledged_filter(params)
        if attempt.refetch:
            self._refetch()
        left_out = [
            key for key in FILTER_KEYS.values() if key in attempt.filter and honored.get(key) is not True
        ]
        left_out += [uri for uri in attempt.uris() if not honors_uri(honored, uri)]
        if left_out:
            self._log.info(
                "the server does not honor all of the listen filter",
                left_out=log_value(", ".join(left_out), self._redactor),
            )
        self._note_change()

    async def until_honored(self, uri: str, seconds: float | None) -> None:
        """Wait until a listen whose filter holds ``uri`` is acknowledged (at most
        ``seconds``; None: no bound). A refusal takes ``uri`` out of the filter again.

        Raises:
            SubscriptionRefused: the acknowledgment left ``uri`` out, or the listen ended
                before it was acknowledged (a host-made error: the stream was lost).
            RemoteError: the server answered the listen with an error.
            RequestTimeout: no acknowledgment within ``seconds``.
        """
        refusal: MCPLHostError | None = None
        with anyio.move_on_after(math.inf if seconds is None else seconds):
            while True:
                attempt = self._attempt
                if attempt is not None and uri in attempt.uris():
                    if attempt.honored is not None:
                        if honors_uri(attempt.honored, uri):
                            return
                        refusal = SubscriptionRefused(
                            uri, "the server's acknowledgment leaves it out", self._redactor
                        )
                        break
                    if attempt.ending is not None:
                        error = attempt.error
                        if isinstance(error, RemoteError) and ending_of_error(error.data) == "refused":
                            refusal = error
                        else:
                            reason = str(error) if error is not None else f"it ended ({attempt.ending})"
                            refusal = SubscriptionRefused(
                                uri, f"the listen ended before the server acknowledged it: {reason}"
                            )
                        break
                elif not self._running:
                    refusal = ConnectionClosed("the listen of this connection has ended")
                    break
                self._changed = changed = self._changed or anyio.Event()
                await changed.wait()
        self.uris.discard(uri)
        self.refresh()
        raise refusal if refusal is not None else RequestTimeout(LISTEN, seconds or 0.0)


@dataclass(frozen=True, slots=True)
class PromptReference:
    """``ref/prompt`` of ``completion/complete``: the prompt's ``name``."""

    name: str

    def to_json(self) -> JSONObject:
        return {"type": "ref/prompt", "name": self.name}


@dataclass(frozen=True, slots=True)
class ResourceTemplateReference:
    """``ref/resource`` of ``completion/complete``: a resource template's ``uri``."""

    uri: str

    def to_json(self) -> JSONObject:
        return {"type": "ref/resource", "uri": self.uri}


class _Requester(Protocol):
    """What ``MCPClient`` sends through: ``request`` taking ``Connection.request``'s options
    (an ``EraRequester``)."""

    def request(
        self,
        method: str,
        params: Any = None,
        *,
        extensions: Mapping[str, Any] | None = None,
        **options: Unpack[RequestOptions],
    ) -> Awaitable[Any]: ...


class EraRequester:
    """Sends requests through ``shell`` (a ``Connection``), adding the stateless revision's
    per-request ``_meta`` once the handshake settled that era (module rules).
    ``capabilities()``: the handshake-era client capabilities (stripped for the stateless
    era by ``stateless_capabilities``). ``log_level``: the ``_meta`` log level of every
    later stateless request (None: the server emits no log messages for them)."""

    def __init__(
        self, shell: Connection, client: ClientInfo, capabilities: Callable[[], dict[str, Any]]
    ) -> None:
        self._shell = shell
        self._client = {"name": client.name, "version": client.version}
        self._capabilities = capabilities
        self.log_level: str | None = None

    @property
    def stateless(self) -> bool:
        """True once the handshake settled the stateless era."""
        info = self._shell.server_info
        return info is not None and info.is_stateless

    def stamp(self, params: object, extensions: Mapping[str, Any] | None = None) -> Any:
        """``params`` with the stateless ``_meta`` on a stateless connection, else as given.
        ``extensions``: extensions this one request declares in its client capabilities
        (identifier -> settings; ``stateless.with_extensions``), such as the tasks extension
        (docs/protocol.md TK1)."""
        info = self._shell.server_info
        if info is None or not info.is_stateless:
            return params
        return self._stamped(info, params, extensions)

    def _stamped(self, info: ServerInfo, params: object, extensions: Mapping[str, Any] | None) -> Any:
        caps = stateless_capabilities(self._capabilities())
        if extensions:
            caps = with_extensions(caps, extensions)
        return stamped(params, request_meta(info.protocol_version, self._client, caps, self.log_level))

    def request(
        self,
        method: str,
        params: Any = None,
        *,
        extensions: Mapping[str, Any] | None = None,
        **options: Unpack[RequestOptions],
    ) -> Coroutine[Any, Any, Any]:
        """``Connection.request`` with ``params`` stamped (``stamp``, with ``extensions``), the
        ``options`` passed on: its coroutine, to await (as ``Connection.request``). Raises as
        it does."""
        info = self._shell.server_info
        if info is not None and info.is_stateless:  # (``stamp``, without its call otherwise)
            params = self._stamped(info, params, extensions)
        return self._shell.request(method, params, **options)


class MCPClient:
    """Every MCP method a client sends (module rules), over ``requester``.

    Args:
        requester: an ``EraRequester`` (or anything with its ``request``).
        limits: the connection's bounds.
        features: answers the input requests of multi round-trip requests; None refuses
            them (``RemoteProtocolError``: the host advertised nothing).
        server: the server's name (in ``RequestContext`` and logs).
        spawn: runs a background job (the refresh of a list cache); None: no refreshes.
        stateless: tells whether the connection is in the stateless era.
        server_capabilities: the server's capabilities (what ``subscriptions/listen`` may
            ask for); None: none.
        redactor: hides the server's secrets in error messages.
        notify: queues a notification on the connection (``Connection.notify_nowait``);
            None: ``notify()`` raises ``LocalProtocolError``.
        era: the connection's era once settled (``"handshake"`` or ``"stateless"``), else
            None; ``roots_changed()`` sends only in the handshake era.
        transport: the connection's ``sequence`` (``RequestContext.transport`` of the input
            requests it answers).

    Each call raises what ``request()`` raises, plus ``RemoteProtocolError`` for a result of
    the wrong shape. Cancellation: as ``request()``.
    """

    # Slots, for memory per connection: with more attributes than a shared-key dict holds
    # (30), each instance had a dict of its own (1.6 KiB).
    __slots__ = (
        "_class_budget",
        "_class_findings",
        "_content_view",
        "_era",
        "_features",
        "_held",
        "_in_flight",
        "_limits",
        "_listening",
        "_log",
        "_log_level",
        "_notify",
        "_param_headers",
        "_redactor",
        "_refreshes",
        "_requester",
        "_server",
        "_server_capabilities",
        "_settled",
        "_spawn",
        "_stateless",
        "_subscribed",
        "_tasks",
        "_tool_classes",
        "_tools_by_name",
        "_transport",
        "cache_freshness",
        "cached_prompts",
        "cached_resources",
        "cached_tools",
        "clock",
        "mirrors_param_headers",
        "on_list_refreshed",
    )

    def __init__(
        self,
        requester: _Requester,
        limits: Limits,
        *,
        features: ClientFeatureService | None = None,
        server: str = "server",
        spawn: Callable[[BackgroundJob], bool] | None = None,
        stateless: Callable[[], bool] | None = None,
        server_capabilities: Callable[[], Mapping[str, Any]] | None = None,
        redactor: Redactor | None = None,
        notify: Callable[[str, Any], None] | None = None,
        era: Callable[[], Era | None] | None = None,
        transport: int = 0,
        content_view: Callable[[object, str], list[dict[str, Any]]] | None = None,
        tool_classes: ToolClassTables | None = None,
    ) -> None:
        self._content_view = content_view
        self._requester = requester
        self._tool_classes = tool_classes
        self._class_findings: set[tuple[str, str, str]] = set()
        self._class_budget = LogBudget(limits.tool_class_findings_logged)
        self._notify = notify
        self._era = era or (lambda: None)
        self._transport = transport
        self._limits = limits
        self._features = features
        self._server = server
        self._spawn = spawn
        self._stateless = stateless or (lambda: False)
        self._redactor = redactor
        self._log = get_logger("mcpl_host.mcp", server=server)
        self.cached_tools: list[Tool] | None = None
        self.cached_resources: list[Resource] | None = None
        self.cached_prompts: list[Prompt] | None = None
        self._tools_by_name: dict[str, Tool] = {}
        #: Per list: its refreshes, one in flight and one pending (``mcpl_host.coalesce``).
        self._refreshes: dict[str, Coalesce] = {name: Coalesce() for name in LIST_CHANGED.values()}
        self._in_flight: dict[str, int] = {}
        #: Lists said changed while only a listing the application asked for was in flight:
        #: their refresh follows its end.
        self._held: set[str] = set()
        self._settled: anyio.Event | None = None
        #: Called (it must not block) with a list's name after a background refresh.
        self.on_list_refreshed: Callable[[str], None] | None = None
        #: What a handshake-era session holds on the server and a new session must be told
        #: again (``session_renewed``): the log level set, the resources subscribed.
        self._log_level: str | None = None
        self._subscribed: set[str] = set()
        #: Monotonic seconds, for the freshness of cached lists (tests may replace it).
        self.clock: Callable[[], float] = time.monotonic
        #: List name -> how long its cache is fresh (stateless era only; module rules).
        self.cache_freshness: dict[str, Freshness] = {}
        #: Set when the transport mirrors ``x-mcp-header`` parameters (module rules).
        self.mirrors_param_headers = False
        self._param_headers: dict[str, tuple[ParamHeader, ...]] = {}
        self._server_capabilities: Callable[[], Mapping[str, Any]] = server_capabilities or _no_capabilities
        # The listen of the stateless era and the tasks calls are made on first use: a
        # connection that never uses them (every handshake-era one) holds neither.
        self._listening: _Listening | None = None
        self._tasks: TaskPolling | None = None

    def _listed(self) -> set[str]:
        return {name for name in FILTER_KEYS if getattr(self, f"cached_{name}") is not None}

    def _refetch_listed(self) -> None:
        """List again, in the background, every list listed (a lost listen stream may have
        missed its changes: MCP 2026-07-28 "Subscriptions" has no replay)."""
        for method, name in LIST_CHANGED.items():
            if getattr(self, f"cached_{name}") is not None:
                self.on_notification(method, None)

    def _listener(self) -> _Listening:
        """The listen of the stateless era (``_Listening``), made on first use."""
        listening = self._listening
        if listening is None:
            listening = self._listening = _Listening(
                self._requester,
                self._limits,
                spawn=self._spawn,
                capabilities=self._server_capabilities,
                listed=self._listed,
                tasks=self._watched_tasks,
                refetch=self._refetch_listed,
                log=self._log,
                redactor=self._redactor,
            )
        return listening

    def _task_polling(self) -> TaskPolling:
        """The tasks calls (``TaskPolling``), made on first use."""
        tasks = self._tasks
        if tasks is None:
            tasks = self._tasks = TaskPolling(
                self._requester,
                self._limits,
                answer_inputs=self._answer_inputs,
                stateless=self._stateless,
                listen_changed=self._listen_changed,
                log=self._log,
                redactor=self._redactor,
            )
        return tasks

    def _watched_tasks(self) -> list[str]:
        """The ids of the tasks being waited on (none before the tasks calls are made)."""
        tasks = self._tasks
        return tasks.watched() if tasks is not None else []

    def _listen_changed(self) -> None:
        if self.stateless:
            self._listener().refresh()

    @property
    def stateless(self) -> bool:
        return self._stateless()

    async def _list_all(
        self, method: str, key: str, hints: list[tuple[float, CacheHint]] | None = None
    ) -> list[dict[str, Any]]:
        """Every entry of a paginated list (MCP 2025-11-25 "Pagination"): pages are followed
        by ``nextCursor`` until one has none (or repeats the cursor just sent), within
        ``limits.max_list_pages`` pages, ``max_list_items`` entries and ``max_list_bytes``
        JSON bytes of entries in all (``json_size``, measured page by page). ``hints``, when
        given, gets each page's ``(received_at, CacheHint)``.

        Raises:
            LimitExceeded: a bound was reached before the last page (the message names it;
                no partial list is returned). RemoteProtocolError: a page of the wrong shape,
                or whose ``resultType`` is not ``complete`` (``stateless.result_type``).
        """
        limits = self._limits
        items: list[dict[str, Any]] = []
        size, cursor = 0, None
        for page_number in range(1, limits.max_list_pages + 1):
            params = {"cursor": cursor} if cursor is not None else None
            result = _object(await self._requester.request(method, params), method)
            result_type(result, method)  # a list is complete: anything else is an error (MCP 2026-07-28)
            if hints is not None:
                from mcpl_host.caching import cache_hint  # noqa: PLC0415 (the stateless era's lists)

                hints.append((self.clock(), cache_hint(result, max_ttl_seconds=limits.max_cache_ttl_seconds)))
            page = result.get(key, [])
            if not is_array(page):
                raise RemoteProtocolError(f"the server's {method} result has no {key} array")
            entries = [item for item in page if is_object(item)]
            if len(items) + len(entries) > limits.max_list_items:
                raise LimitExceeded(
                    "max_list_items",
                    limits.max_list_items,
                    f"{method} page {page_number} has too many entries",
                )
            size += json_size(entries, limit=limits.max_list_bytes - size)
            if size > limits.max_list_bytes:
                raise LimitExceeded(
                    "max_list_bytes", limits.max_list_bytes, f"{method} page {page_number} has too many bytes"
                )
            items.extend(entries)
            next_cursor = result.get("nextCursor")
            if not isinstance(next_cursor, str) or not next_cursor or next_cursor == cursor:
                return items
            cursor = next_cursor
        raise LimitExceeded(
            "max_list_pages",
            limits.max_list_pages,
            f"{method} has a next page after page {limits.max_list_pages}",
        )

    # --- listing ---------------------------------------------------------------------------

    async def list_tools(self, *, refresh: bool = False) -> list[Tool]:
        """``tools/list``, every page; kept as ``cached_tools`` (the output schemas
        ``call_tool`` checks against). In the stateless era served from the cache while
        fresh, unless ``refresh`` (module rules); tools with invalid ``x-mcp-header``
        annotations are left out where the transport mirrors them."""
        from mcpl_host.mcp_records import read_tool  # noqa: PLC0415 (on first use)

        if not refresh and self.cached_tools is not None and self._fresh("tools"):
            return list(self.cached_tools)
        return await self._list_kept("tools", read_tool, self._keep_tools)

    async def list_resources(self, *, refresh: bool = False) -> list[Resource]:
        """``resources/list``, every page; kept as ``cached_resources`` (served from it as
        ``list_tools`` says)."""
        from mcpl_host.mcp_records import read_resource  # noqa: PLC0415 (on first use)

        if not refresh and self.cached_resources is not None and self._fresh("resources"):
            return list(self.cached_resources)
        return await self._list_kept("resources", read_resource, self._keep_resources)

    async def list_resource_templates(self) -> list[ResourceTemplate]:
        """``resources/templates/list``, every page."""
        from mcpl_host.mcp_records import read_resource_template  # noqa: PLC0415 (on first use)

        return [
            t
            for item in await self._list_all("resources/templates/list", "resourceTemplates")
            if (t := read_resource_template(item)) is not None
        ]

    async def list_prompts(self, *, refresh: bool = False) -> list[Prompt]:
        """``prompts/list``, every page; kept as ``cached_prompts`` (served from it as
        ``list_tools`` says)."""
        from mcpl_host.mcp_records import read_prompt  # noqa: PLC0415 (on first use)

        if not refresh and self.cached_prompts is not None and self._fresh("prompts"):
            return list(self.cached_prompts)
        return await self._list_kept("prompts", read_prompt, self._keep_prompts)

    async def _list_kept(
        self,
        name: str,
        read: Callable[[dict[str, Any]], _Listed | None],
        keep: Callable[[list[_Listed]], list[_Listed]],
    ) -> list[_Listed]:
        """``{name}/list``, every page (``_list_all``), each entry read by ``read`` (None: left
        out), then handed to ``keep`` (which caches what it returns), with the freshness noted,
        all while ``_listing(name)``; then the listen refreshed. Returns a copy of what was
        kept. Raises as ``_list_all``."""
        with self._listing(name):
            hints: list[tuple[float, CacheHint]] = []
            items = await self._list_all(f"{name}/list", name, hints)
            kept = keep([x for item in items if (x := read(item)) is not None])
            self._note_freshness(name, hints)
        self._listen_changed()
        return list(kept)

    def _keep_tools(self, tools: list[Tool]) -> list[Tool]:
        from mcpl_host.mcp_records import classified  # noqa: PLC0415 (on first use)

        tools = [classified(tool, self._tool_classes) for tool in self._screened(tools)]
        self._log_class_findings(tools)
        self.cached_tools = tools
        self._tools_by_name = {tool.name: tool for tool in tools}
        return tools

    def _log_class_findings(self, tools: list[Tool]) -> None:
        """Log what each tool's ``_meta`` held that the classes ignore (module rules): each
        (tool, finding, value) once per connection, within ``tool_class_findings_logged``."""
        limit = self._limits.tool_class_findings_logged
        for tool in tools:
            if tool.meta is None or self._class_budget.count > limit:
                continue
            for finding in slot_findings(tool.meta, limit=limit):
                key = (tool.name, finding.kind, finding.value)
                if key in self._class_findings:
                    continue
                if len(self._class_findings) < limit:
                    self._class_findings.add(key)
                self._class_budget.warn(
                    self._log,
                    "tool class: " + finding.sentence,
                    tool=log_value(tool.name, self._redactor, max_units=80),
                    value=log_value(finding.value, self._redactor, max_units=80),
                    section=finding.section,
                )

    def _keep_resources(self, resources: list[Resource]) -> list[Resource]:
        self.cached_resources = resources
        return resources

    def _keep_prompts(self, prompts: list[Prompt]) -> list[Prompt]:
        self.cached_prompts = prompts
        return prompts

    def _fresh(self, name: str) -> bool:
        if not self.stateless:
            return False
        from mcpl_host.caching import is_fresh  # noqa: PLC0415 (the stateless era's lists)

        return is_fresh(self.cache_freshness.get(name), self.clock())

    def _note_freshness(self, name: str, hints: list[tuple[float, CacheHint]]) -> None:
        """After a listing: its freshness, in the stateless era, unless the list was said
        changed while it was in flight (its answer may predate the change)."""
        if self.stateless and not self._refreshes[name].pending:
            from mcpl_host.caching import list_freshness  # noqa: PLC0415 (the stateless era's lists)

            self.cache_freshness[name] = list_freshness(hints)
        else:
            self.cache_freshness.pop(name, None)

    def _screened(self, tools: list[Tool]) -> list[Tool]:
        """``tools`` without those whose ``x-mcp-header`` annotations are rejected, where the
        transport mirrors them in the stateless era (module rules); their headers kept."""
        self._param_headers = {}
        if not (self.stateless and self.mirrors_param_headers):
            return tools
        from mcpl_host.param_headers import Rejected, declared_headers  # noqa: PLC0415 (mirrored)

        kept: list[Tool] = []
        for tool in tools:
            declared = declared_headers(tool.input_schema, max_headers=self._limits.max_param_headers)
            if isinstance(declared, Rejected):
                self._log.warning(
                    "tool left out of tools/list: its x-mcp-header annotations break MCP 2026-07-28",
                    tool=log_value(tool.name, self._redactor, max_units=80),
                    reason=declared.reason,
                )
                continue
            if declared:
                self._param_headers[tool.name] = declared
            kept.append(tool)
        return kept

    def param_headers(self, message: Mapping[str, object]) -> dict[str, str]:
        """The ``Mcp-Param-*`` headers of one outgoing JSON-RPC message (the transport asks;
        module rules): those of a ``tools/call`` of a listed tool that declares some, else
        none. Never raises (a call over the bound was refused before it was sent)."""
        params = message.get("params")
        if message.get("method") != "tools/call" or not is_object(params):
            return {}
        name, arguments = params.get("name"), params.get("arguments")
        declared = self._param_headers.get(name) if isinstance(name, str) else None
        if not declared or not isinstance(name, str) or not is_object(arguments):
            return {}
        from mcpl_host.param_headers import param_headers  # noqa: PLC0415 (loaded: declared)

        try:
            return param_headers(
                declared, arguments, tool=name, max_bytes=self._limits.max_param_header_bytes
            )
        except LimitExceeded:
            return {}

    @contextlib.contextmanager
    def _listing(self, name: str) -> Generator[None]:
        """Around one listing of ``name``: a change announced while it is in flight (its
        answer may predate the change) starts a refresh once it has ended."""
        self._in_flight[name] = self._in_flight.get(name, 0) + 1
        try:
            yield
        finally:
            self._in_flight[name] -= 1
            if name in self._held and not self._in_flight[name]:
                self._held.discard(name)
                if self._refreshes[name].done():
                    self._start_refresh(name)
                else:
                    self._note_idle()

    def on_notification(self, method: str, params: object) -> None:
        """A server notification (from the read loop; does not block): a
        ``notifications/*/list_changed`` of a list listed before (or being listed) starts
        its refresh, coalesced (``mcpl_host.coalesce``: one in flight, one pending); the
        acknowledgment of a ``subscriptions/listen`` is recorded; a task's status goes to
        the task polling. Any other is looked at no further (one set look-up)."""
        if method in _LOOKED_AT:
            # (neither made yet: no listen in flight, no task waited on; nothing to do)
            listening, tasks = self._listening, self._tasks
            if listening is not None:
                listening.on_notification(method, params)
            if tasks is not None:
                tasks.on_notification(method, params)
        name = LIST_CHANGED.get(method)
        if name is None:
            return
        self.cache_freshness.pop(name, None)  # stale at once (module rules)
        if self._spawn is None:
            return
        state = self._refreshes[name]
        if state.running:
            state.ask()  # pending: refreshed once the listing in progress ends
        elif self._in_flight.get(name):
            state.hold()
            self._held.add(name)
        elif getattr(self, f"cached_{name}") is not None and state.ask():
            self._start_refresh(name)

    async def session_renewed(self) -> None:
        """The transport started a new session after the server ended one (MCP 2025-11-25
        "Transports", session management; docs/protocol.md HS3): each list listed is read
        again in the background (as after its ``list_changed``; ``lists_settled()`` waits
        for it), and in the handshake era the log level set and the resources subscribed
        are sent again, in that order, before this returns. Never raises: a failure is
        logged (``ConnectionClosed`` ends it quietly)."""
        for method in LIST_CHANGED:
            self.on_notification(method, None)
        if self.stateless:
            return
        try:
            if self._log_level is not None:
                await self._requester.request("logging/setLevel", {"level": self._log_level})
            for uri in sorted(self._subscribed):
                await self._requester.request("resources/subscribe", {"uri": uri})
        except ConnectionClosed:
            return
        except MCPLHostError as exc:
            self._log.warning("could not restore the session's state on the new session", error=str(exc))

    async def lists_settled(self) -> None:
        """Return once no refresh of a list is in flight or pending (after a burst of
        ``list_changed``, the caches then hold the lists read after the last one)."""
        while not all(state.idle for state in self._refreshes.values()):
            if self._settled is None:
                self._settled = anyio.Event()
            await self._settled.wait()

    def _note_idle(self) -> None:
        if self._settled is not None and all(state.idle for state in self._refreshes.values()):
            self._settled.set()
            self._settled = None

    def _start_refresh(self, name: str) -> None:
        assert self._spawn is not None
        if not self._spawn(lambda: self._refresh(name)):
            self._refreshes[name] = Coalesce()
            self._note_idle()

    async def _refresh(self, name: str) -> None:
        state = self._refreshes[name]
        try:
            while True:
                try:
                    await getattr(self, f"list_{name}")(refresh=True)
                except ConnectionClosed:  # this host closed the connection: nothing to refresh
                    break
                except MCPLHostError as exc:
                    self._log.warning(
                        "could not refresh a list the server said changed", list=name, error=str(exc)
                    )
                    break
                if self.on_list_refreshed is not None:
                    self.on_list_refreshed(name)
                if not state.done():
                    return
        finally:
            state.running = state.pending = False
            self._note_idle()

    # --- calls that may need input (MRTR) ------------------------------------------------------

    async def _call(
        self,
        method: str,
        params: Mapping[str, object],
        *,
        timeout: Timeout,
        max_total_timeout: Timeout = DEFAULT,
        progress: ProgressCallback | None = None,
        task: bool = False,
    ) -> JSONObject:
        """One request, and on a stateless connection its retries while the server answers
        ``input_required`` (module rules). ``task``: the request declares the tasks extension
        (stateless era only; docs/protocol.md TK1), and a ``resultType: "task"`` answer is
        returned as it came (TK2). Raises ``RemoteProtocolError`` past
        ``limits.max_input_rounds`` rounds or for a malformed ``InputRequiredResult``,
        ``InputRefused`` when a handler refuses an input request."""
        rounds = self._limits.max_input_rounds
        declared = task and self.stateless
        for round_number in range(rounds + 1):
            result = _object(
                await self._requester.request(
                    method,
                    params,
                    timeout=timeout,
                    max_total_timeout=max_total_timeout,
                    progress=progress,
                    extensions=declaration() if declared else None,
                ),
                method,
            )
            if not self.stateless or result_type(result, method, task_declared=declared) != "input_required":
                return result
            if round_number == rounds:
                break
            wanted = input_required(
                result, method, max_requests=self._limits.max_input_requests, redactor=self._redactor
            )
            del result  # only what was read of it is held while the inputs are answered
            responses = await self._answer_inputs(method, wanted.requests)
            params = retry_params(params, responses, wanted.request_state)
            del wanted  # the retry carries what it needs (params): nothing else is held while it waits
        raise RemoteProtocolError(
            f"the server still asked for input after {rounds} retries of {method} (Limits.max_input_rounds)"
        )

    async def _answer_inputs(self, method: str, requests: Mapping[str, tuple[str, Any]]) -> JSONObject:
        responses: JSONObject = {}
        for key, (wanted, _params) in requests.items():
            if self._features is None or not self._features.serves(wanted):
                raise RemoteProtocolError(
                    f"the server asked {wanted} ({log_value(key, self._redactor, max_units=40)}) for {method},"
                    " a capability this host did not declare"
                )
        failures: list[InputRefused] = []

        async def answer(key: str, wanted: str, params: object, scope: anyio.CancelScope) -> None:
            assert self._features is not None
            context = RequestContext(self._server, key, wanted, self._transport)
            try:
                responses[key] = await self._features.serve(context, params, input_request=True)
            except HandlerError as exc:
                failures.append(InputRefused(method, key, wanted, exc.to_error(), self._redactor))
                scope.cancel()  # the original request is not retried: stop the others

        async with anyio.create_task_group() as tg:
            for key, (wanted, params) in requests.items():
                tg.start_soon(answer, key, wanted, params, tg.cancel_scope)
        if failures:
            raise failures[0]
        return responses

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        timeout: Timeout = DEFAULT,
        max_total_timeout: Timeout = DEFAULT,
        progress: ProgressCallback | None = None,
        task: bool = False,
        on_task: Callable[[Task], None] | None = None,
    ) -> CallToolResult:
        """``tools/call`` (MCP 2025-11-25 "Tools"). A tool failure is a result with
        ``is_error`` True, not an exception. ``timeout``, ``max_total_timeout`` and
        ``progress`` mean what they mean for ``request``. Raises ``OutputSchemaError`` when the tool is
        in the tools cache with an ``outputSchema`` that a successful result does not
        satisfy (module rules), ``LimitExceeded`` (``max_param_header_bytes``) before
        sending when its ``Mcp-Param-*`` headers would be too long, and what ``_call``
        raises (a ``RemoteError`` ``-32020`` only when the call sent again after listing the
        tools is refused too).

        ``task``: on a stateless connection the call declares the tasks extension
        (``io.modelcontextprotocol/tasks``), and when the server answers with a task it is
        waited for (``wait_task``: polled, its input requests answered) and its final result
        returned (docs/protocol.md TK1-TK7); ``on_task`` is called with each state of it
        (it must not block). A handshake-era connection makes a plain call. Raises also
        ``TaskFailed`` (the task failed: its JSON-RPC error) and ``TaskCancelled``."""
        answer = await self._tool_call(
            name,
            arguments,
            timeout=timeout,
            max_total_timeout=max_total_timeout,
            progress=progress,
            task=task,
        )
        if isinstance(answer, Task):
            answer = final_result(await self.wait_task(answer, on_task=on_task), redactor=self._redactor)
        return await self._tool_result(name, answer)

    async def start_tool_task(
        self, name: str, arguments: dict[str, Any] | None = None, *, timeout: Timeout = DEFAULT
    ) -> Task | CallToolResult:
        """``tools/call`` declaring the tasks extension, without waiting for a task: the
        ``Task`` the server made (its id is what ``get_task``, ``wait_task``,
        ``cancel_task`` take), or the ``CallToolResult`` when the server answered at once
        (the server decides: docs/protocol.md TK2). Raises ``LocalProtocolError`` on a
        handshake-era connection (TK1), and what ``call_tool`` raises."""
        self._task_polling().checked_era("tools/call with a task")
        answer = await self._tool_call(name, arguments, timeout=timeout, task=True)
        return answer if isinstance(answer, Task) else await self._tool_result(name, answer)

    async def get_task(self, task_id: str, *, timeout: Timeout = DEFAULT) -> Task:
        """``tasks/get`` (the tasks extension, "Task Polling"): the task's state now.
        Raises ``RemoteError`` (``-32602``: the server does not know the task, or no longer
        keeps it), ``RemoteProtocolError`` (a malformed task), ``LocalProtocolError`` (a
        handshake-era connection: docs/protocol.md TK1), and what ``request`` raises."""
        return await self._task_polling().get(task_id, timeout=timeout)

    async def update_task(
        self, task_id: str, input_responses: Mapping[str, Any], *, timeout: Timeout = DEFAULT
    ) -> None:
        """``tasks/update`` ("Task Update Requests"): the responses (key -> the result of the
        input request, as MRTR's ``inputResponses``) to a task's input requests. ``wait_task``
        sends it by itself. Raises as ``get_task``."""
        await self._task_polling().update(task_id, input_responses, timeout=timeout)

    async def cancel_task(self, task_id: str, *, timeout: Timeout = DEFAULT) -> None:
        """``tasks/cancel`` ("Task Cancellation"; never ``notifications/cancelled``): the
        server acknowledges; cancellation is cooperative, so the task may still end otherwise
        (docs/protocol.md TK7). Raises as ``get_task``."""
        await self._task_polling().cancel(task_id, timeout=timeout)

    async def wait_task(
        self,
        task: Task | str,
        *,
        on_task: Callable[[Task], None] | None = None,
        timeout: Timeout = DEFAULT,
    ) -> Task:
        """Wait until ``task`` (a ``Task``, or its id: then ``tasks/get`` first) is terminal
        and return that state: polled at its ``pollIntervalMs`` within
        ``Limits.task_poll_min_seconds`` and ``task_poll_max_seconds``, woken by its status
        notifications where the server sends them, its input requests answered by the
        connection's handlers (docs/protocol.md TK3-TK6). ``on_task``: called with each
        state seen (it must not block); ``timeout``: of each request. No deadline of its
        own: cancel the caller to stop waiting (the task goes on at the server).

        Raises: ``InputRefused`` (a handler refused an input request; the task was
        cancelled), ``RemoteProtocolError``, and what ``get_task`` raises."""
        if isinstance(task, str):
            task = await self.get_task(task, timeout=timeout)
        return await self._task_polling().wait(task, on_task=on_task, timeout=timeout)

    async def task_tool_result(self, task: Task, tool: str | None = None) -> CallToolResult:
        """The ``CallToolResult`` of a terminal ``tools/call`` task, read and checked as
        ``call_tool`` reads its result (``tool``: the tool's name, for its ``outputSchema``;
        None: not checked). Raises ``TaskFailed``, ``TaskCancelled``, ``ValueError`` (the task
        is not terminal), and what ``call_tool`` raises for a result."""
        return await self._tool_result(tool, final_result(task, redactor=self._redactor))

    async def _tool_call(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        *,
        timeout: Timeout,
        max_total_timeout: Timeout = DEFAULT,
        progress: ProgressCallback | None = None,
        task: bool,
    ) -> JSONObject | Task:
        """The ``tools/call`` request (``call_tool``'s rules): its answer, or the ``Task``
        the server made instead."""
        params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
        declared = self._param_headers.get(name)
        if declared and self.stateless and self.mirrors_param_headers:
            from mcpl_host.param_headers import param_headers  # noqa: PLC0415 (loaded: declared)

            # Over the bound: refused here, with the reason (the transport would send none).
            param_headers(
                declared, params["arguments"], tool=name, max_bytes=self._limits.max_param_header_bytes
            )
        try:
            answer = await self._call(
                "tools/call",
                params,
                timeout=timeout,
                max_total_timeout=max_total_timeout,
                progress=progress,
                task=task,
            )
        except RemoteError as exc:
            if exc.code != HEADER_MISMATCH or not (self.stateless and self.mirrors_param_headers):
                raise
            # The tool's inputSchema may have changed: list the tools and send it again, once
            # (MCP 2026-07-28 "Streamable HTTP", client behavior).
            await self.list_tools(refresh=True)
            answer = await self._call(
                "tools/call",
                params,
                timeout=timeout,
                max_total_timeout=max_total_timeout,
                progress=progress,
                task=task,
            )
        if answer.get("resultType") == "task" and task and self.stateless:
            return self._task_polling().read(answer, "the tools/call result")
        return answer

    async def _tool_result(self, name: str | None, answer: JSONObject) -> CallToolResult:
        """A ``tools/call`` answer as a ``CallToolResult`` (``call_tool``'s rules: the
        content view, the ``outputSchema`` check when the tool is known)."""
        from mcpl_host.mcp_records import call_tool_result  # noqa: PLC0415 (on first use)

        result = call_tool_result(answer)
        if self._content_view is not None:  # MCPL §19.4: a tool result is a reference lane
            result = dataclasses.replace(
                result, model_content=self._content_view(result.content, f"tool {name or '(a task)'}")
            )
        tool = self._tools_by_name.get(name) if name is not None else None
        if tool is not None and tool.output_schema is not None and not result.is_error:
            from mcpl_host.output_schema import check_structured_content  # noqa: PLC0415 (a schema)

            await check_structured_content(
                name or "",
                tool.output_schema,
                result.structured_content,
                max_schema_bytes=self._limits.max_output_schema_bytes,
                max_seconds=self._limits.max_schema_check_seconds,
                max_inline_work=self._limits.max_inline_schema_work,
                redactor=self._redactor,
            )
        return result

    async def read_resource(self, uri: str, *, timeout: Timeout = DEFAULT) -> ReadResourceResult:
        """``resources/read``. Note: MCP's ``-32002`` here means "Resource not found" (MCP
        2026-07-28 uses ``-32602``)."""
        from mcpl_host.mcp_records import read_resource_result  # noqa: PLC0415 (on first use)

        return read_resource_result(await self._call("resources/read", {"uri": uri}, timeout=timeout))

    async def get_prompt(
        self, name: str, arguments: dict[str, str] | None = None, *, timeout: Timeout = DEFAULT
    ) -> GetPromptResult:
        """``prompts/get``; ``arguments`` is sent whenever given, ``{}`` included."""
        from mcpl_host.mcp_records import get_prompt_result  # noqa: PLC0415 (on first use)

        params: JSONObject = {"name": name}
        if arguments is not None:
            params["arguments"] = arguments
        return get_prompt_result(await self._call("prompts/get", params, timeout=timeout))

    # --- utilities -------------------------------------------------------------------------

    async def complete(
        self,
        ref: PromptReference | ResourceTemplateReference,
        argument: str,
        value: str,
        *,
        context: Mapping[str, str] | None = None,
        timeout: Timeout = DEFAULT,
    ) -> CompleteResult:
        """``completion/complete`` (MCP 2025-11-25 "Utilities: Completion"): values for
        ``argument`` of a prompt or resource template, given its partial ``value`` and the
        ``context`` arguments already chosen."""
        from mcpl_host.mcp_records import complete_result  # noqa: PLC0415 (on first use)

        params: JSONObject = {"ref": ref.to_json(), "argument": {"name": argument, "value": value}}
        if context is not None:
            params["context"] = {"arguments": dict(context)}
        result = _object(
            await self._requester.request("completion/complete", params, timeout=timeout),
            "completion/complete",
        )
        return complete_result(result)

    async def set_log_level(self, level: str, *, timeout: Timeout = DEFAULT) -> None:
        """The least severity of the server's log messages (MCP 2025-11-25 "Utilities:
        Logging", ``logging/setLevel``); on a stateless connection no request is sent: the
        level goes in the ``_meta`` of every later request (MCP 2026-07-28 changelog, major
        change 5). Raises ``ValueError`` for a level not in ``stateless.LOG_LEVELS``."""
        if level not in LOG_LEVELS:
            raise ValueError(f"unknown log level {level!r}; one of {', '.join(LOG_LEVELS)}")
        if self.stateless:
            if isinstance(self._requester, EraRequester):
                self._requester.log_level = level
            return
        await self._requester.request("logging/setLevel", {"level": level}, timeout=timeout)
        self._log_level = level

    @property
    def resource_subscriptions(self) -> frozenset[str]:
        """The URIs subscribed to on a stateless connection (the listen's
        ``resourceSubscriptions``); empty in the handshake era (the server keeps them)."""
        listening = self._listening
        return frozenset(listening.uris) if listening is not None else frozenset()

    async def subscribe_resource(self, uri: str, *, timeout: Timeout = DEFAULT) -> None:
        """``resources/subscribe`` (MCP 2025-11-25 "Resources", subscriptions): the server
        then sends ``notifications/resources/updated`` (to ``HostHandlers.on_notification``).
        On a stateless connection the URI joins the filter of ``subscriptions/listen``
        (module rules) and this returns once the server acknowledged a listen with it
        (within ``timeout``).

        Raises (stateless era): ``SubscriptionRefused`` (the server does not advertise
        ``resources.subscribe``, or did not take the URI), ``LimitExceeded``
        (``Limits.max_resource_subscriptions``), ``RemoteError`` (the server refused the
        listen), ``RequestTimeout``; in the handshake era what ``request()`` raises."""
        if not self.stateless:
            await self._requester.request("resources/subscribe", {"uri": uri}, timeout=timeout)
            self._subscribed.add(uri)
            return
        if not may_subscribe(self._server_capabilities()):
            raise SubscriptionRefused(uri, "it does not advertise resources.subscribe", self._redactor)
        uris = self._listener().uris
        if uri not in uris and len(uris) >= self._limits.max_resource_subscriptions:
            raise LimitExceeded(
                "max_resource_subscriptions",
                self._limits.max_resource_subscriptions,
                "subscribing to one more resource",
            )
        uris.add(uri)
        self._listener().refresh()
        seconds = (
            self._limits.request_timeout_seconds if timeout is DEFAULT else cast("float | None", timeout)
        )
        await self._listener().until_honored(uri, seconds)

    async def unsubscribe_resource(self, uri: str, *, timeout: Timeout = DEFAULT) -> None:
        """``resources/unsubscribe``; on a stateless connection the URI leaves the listen's
        filter (the listen is sent again without it, or ends; this does not wait). Raises
        (handshake era) what ``request()`` raises."""
        if not self.stateless:
            await self._requester.request("resources/unsubscribe", {"uri": uri}, timeout=timeout)
            self._subscribed.discard(uri)
            return
        self._listener().uris.discard(uri)
        self._listener().refresh()

    # --- any request ---------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: object = None,
        *,
        timeout: Timeout = DEFAULT,
        max_total_timeout: Timeout = DEFAULT,
        progress: ProgressCallback | None = None,
    ) -> Any:
        """Send any request (JSON-RPC 2.0 §4) and return its ``result``, unread: the call for a
        method with no typed call here. On a stateless connection ``params`` (an object or
        None) get the per-request ``_meta`` (``EraRequester``; MCP 2026-07-28).
        ``timeout``: seconds (default ``Limits.request_timeout_seconds``; None waits for
        ever); ``max_total_timeout``: seconds (default
        ``Limits.max_total_request_seconds``; None: progress does not extend ``timeout``):
        each ``notifications/progress`` of it starts ``timeout`` again, up to this many
        seconds in all (MCP 2025-11-25 "Lifecycle", Timeouts; docs/protocol.md R8);
        ``progress``: called with each ``notifications/progress`` of it (MCP 2025-11-25
        "Utilities: Progress").

        Raises: ``RemoteError`` (an error answer), ``RequestTimeout``
        (``notifications/cancelled`` was sent), ``ConnectionLost`` / ``ConnectionClosed``,
        ``LocalProtocolError``, ``MessageTooLarge``.
        Cancellation: ``notifications/cancelled`` is sent; a late answer is an orphan."""
        return await self._requester.request(
            method, params, timeout=timeout, max_total_timeout=max_total_timeout, progress=progress
        )

    def notify_nowait(self, method: str, params: object = None) -> None:
        """Queue a notification (JSON-RPC 2.0 §4.1) without waiting. Raises
        ``ConnectionLost`` / ``ConnectionClosed`` when the transport is gone,
        ``MessageTooLarge`` over ``Limits.max_outbox_bytes`` (not sent),
        ``LocalProtocolError`` when this client was made without ``notify``."""
        if self._notify is None:
            raise LocalProtocolError("this MCPClient sends no notifications (made without notify)")
        self._notify(method, params)

    async def notify(self, method: str, params: object = None) -> None:
        """Send a notification (no answer). Raises as ``notify_nowait``."""
        self.notify_nowait(method, params)

    def roots_changed(self) -> bool:
        """Send ``notifications/roots/list_changed`` (MCP 2025-11-25 "Roots"): the server may
        then ask ``roots/list`` again. The connection calls it by itself when a watched
        ``Roots`` changes. Returns False, sending nothing, when the host does not serve
        roots, before the handshake, on a stateless connection (the notification is removed
        in 2026-07-28), or when the transport has gone."""
        features = self._features
        if features is None or features.features.roots is None or self._era() != "handshake":
            return False
        try:
            self.notify_nowait("notifications/roots/list_changed")
        except MCPLHostError:
            return False
        return True

    async def ping(self, *, timeout: Timeout = DEFAULT) -> None:
        """MCP ``ping``; on a stateless connection ``server/discover`` instead (module
        rules). Returns when the server answers."""
        if self._stateless():  # (``stateless``, without its property's call)
            await self._requester.request("server/discover", {}, timeout=timeout)
        else:
            await self._requester.request("ping", timeout=timeout)

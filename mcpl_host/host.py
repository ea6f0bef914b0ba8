"""``Host``: many servers from a config, each under a ``Supervisor``, one stream of events.

Rules of this module (STYLE.md §2 item 8; ENVELOPE.md T1-T3):

- **Ownership.** The ``Host`` owns one task group; each enabled server runs in its own
  supervisor task in it, started without waiting, so a server that hangs on start (or never
  answers ``initialize``) delays no other: each one's ``ready`` arrives on its own.
  ``aclose()`` closes every supervisor concurrently; each close is bounded by that server's
  grace periods (``Limits.close_grace_seconds``, ``terminate_grace_seconds``), so the whole
  close takes as long as the slowest server, not their sum. Cancelling the task that holds
  the ``Host`` closes it the same way (shielded): no process is left behind.
- **One event stream.** ``events()`` is an anyio memory object stream of ``HostEvent``s from
  every server, bounded by ``MAX_QUEUED_EVENTS``. **Decision:** when it is full the oldest
  event is dropped (and counted in ``dropped_events``, and logged), never the newest, and
  emitting never blocks: events are emitted from connections' read loops, which must never
  wait for a slow consumer. A dropped ``server_request`` is answered ``-32603`` at once.
  The stream ends (``async for`` stops) when the host closes.
- **What servers send unasked** (handlers). **Decision:** without ``handlers_factory``,
  ``push/event`` requests that passed admission are accepted and reported as ``push_event``
  events; ``inference/request`` is refused ``-32601`` (no model is configured; serve it with
  ``handlers_factory``) and reported as ``server_request``; every other server request
  (``roots/list``, ``sampling/createMessage``...) is delivered as a ``server_request`` event
  whose ``responder`` (``ServerRequestResponder``) the application answers; unanswered
  after that server's ``limits.request_timeout_seconds``, it is answered ``-32603`` "not
  answered". With ``handlers_factory(name)``, that ``HostHandlers`` answers everything and
  the host only reports (``push_event`` / ``server_request`` events with the ``answer`` or
  ``error`` sent). Either way, notifications, refusals (admission), policy receipts and
  manifest changes are reported as ``notification``, ``refused``, ``policy_receipt`` and
  ``manifest_change`` events.
- **Calls by server name** go to the connection that is ready right now, never queued for
  the next one: an unknown name raises ``UnknownServer``, a server between connections
  raises ``ServerNotConnected``, and a call in flight when its transport ends fails with
  ``ConnectionLost`` (it is never re-sent on the new transport: T1-T3).
- Event data holds server values as sent (the application may need them); show them through
  ``redactor(name)`` (``mcpl-host run`` does).

Event data of the handler kinds (all carry ``attempt``, the connection attempt they came on):
``push_event``: ``id``, ``featureSet``, ``eventId``, ``params``, then ``answer`` or ``error``;
``server_request``: ``id``, ``method``, ``params``, then ``answer`` or ``error`` when the
host's handlers answered (absent while a ``responder`` waits); ``notification``: ``method``,
``params``; ``refused``: ``method``, ``params``, ``error`` (as sent); ``policy_receipt``:
``accepted``, ``mode``, ``fallback``, ``reason``, ``unavailableFeatures``, ``defects``;
``manifest_change``: the change receipt (``ChangeReceipt.to_json()``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream

from mcpl_host._tasks import leave_task_group
from mcpl_host.config import HostConfig, ServerConfig
from mcpl_host.connect import connect_http, connect_stdio, connect_websocket
from mcpl_host.connection import ServerConnection
from mcpl_host.handlers import HostHandlers, InferenceStream, RequestContext
from mcpl_host.jsonrpc.envelope import Response
from mcpl_host.jsonrpc.errors import (
    ConnectionLost,
    ErrorCode,
    HandlerError,
    LocalProtocolError,
    MCPLHostError,
)
from mcpl_host.logging import LogBudget, Redactor, get_logger
from mcpl_host.mcp_methods import CallToolResult, GetPromptResult, Prompt, ReadResourceResult, Resource, Tool
from mcpl_host.mcpl.policy import PolicyOutcome
from mcpl_host.supervisor import DEFAULT_HEALTH_TIMEOUT_SECONDS, HostEvent, Supervisor, SupervisorState

__all__ = [
    "MAX_QUEUED_EVENTS",
    "Host",
    "ServerNotConnected",
    "ServerRequestResponder",
    "UnknownServer",
    "connect_from_config",
]

#: Events buffered for ``Host.events()``; past it the oldest is dropped (see the rules).
MAX_QUEUED_EVENTS = 1024
#: Log lines about dropped events before one "more go unlogged" line.
DROPPED_EVENTS_LOGGED = 3
_NOT_ANSWERED = "Internal error: not answered by the host application"


class UnknownServer(MCPLHostError, LookupError):
    """No server of that name is in the host (or it is ``disabled``)."""

    def __init__(self, server: str) -> None:
        super().__init__(f"no server named {server!r} in this host")
        self.server = server


class ServerNotConnected(MCPLHostError):
    """The server has no ready connection right now; ``state`` says where it stands
    (``connecting``, ``reconnecting``, ``gave_up``, ``closed``...)."""

    def __init__(self, server: str, state: SupervisorState) -> None:
        super().__init__(f"server {server!r} is not connected right now (it is {state.replace('_', ' ')})")
        self.server = server
        self.state = state


def connect_from_config(
    config: ServerConfig, *, name: str | None = None, handlers: HostHandlers | None = None
) -> ServerConnection:
    """A new, unopened ``ServerConnection`` for one config entry: ``connect_stdio``,
    ``connect_websocket`` or ``connect_http`` (``"http"``: transport "auto") with its grant
    and feature-set policy, limits and secrets.

    Raises:
        ValueError: an unusable WebSocket or HTTP URL, token or header (no secret in the
            message).
    """
    common: dict[str, Any] = {
        "name": name or config.name,
        "handlers": handlers,
        "policy": config.grant_policy,
        "feature_set_policy": config.feature_set_policy,
        "limits": config.limits,
        "secrets": config.secrets,
    }
    if config.transport in ("http", "streamable-http", "sse"):
        assert config.url is not None
        kind = "auto" if config.transport == "http" else config.transport
        return connect_http(config.url, token=config.token, headers=config.headers, transport=kind, **common)
    if config.transport == "websocket":
        assert config.url is not None
        return connect_websocket(
            config.url, token=config.token, token_in=config.token_in, headers=config.headers, **common
        )
    assert config.command is not None
    return connect_stdio(
        config.command,
        config.args,
        env=config.env or None,
        cwd=config.cwd,
        inherit_env=config.inherit_env,
        **common,
    )


class ServerRequestResponder:
    """The answer slot of one ``server_request`` event: call ``respond(result)`` or
    ``reject(code, message, data)`` once. Each returns True if it answered, False if the
    request was already answered, timed out, or its transport ended (then nothing is sent).
    ``server``, ``method``, ``id`` and ``params`` name the request."""

    __slots__ = ("_done", "_error", "_result", "id", "method", "params", "server")

    def __init__(self, server: str, method: str, request_id: Any, params: Any) -> None:
        self.server, self.method, self.id, self.params = server, method, request_id, params
        self._done = anyio.Event()
        self._result: Any = None
        self._error: HandlerError | None = None

    def __repr__(self) -> str:
        return f"<ServerRequestResponder {self.server!r} {self.method!r} answered={self.is_answered}>"

    @property
    def is_answered(self) -> bool:
        """True once answered, expired or abandoned."""
        return self._done.is_set()

    def respond(self, result: Any) -> bool:
        """Answer with ``result`` (a JSON value)."""
        if self._done.is_set():
            return False
        self._result = result
        self._done.set()
        return True

    def reject(self, code: int, message: str, data: Any = None) -> bool:
        """Answer with a JSON-RPC error object."""
        if self._done.is_set():
            return False
        self._error = HandlerError(code, message, data)
        self._done.set()
        return True

    async def _answer(self, timeout: float) -> Any:
        """Wait (in the handler task) for the answer; raise ``HandlerError`` to send an error.

        Cancellation: the responder expires, so a late answer is refused (False)."""
        try:
            with anyio.move_on_after(timeout):
                await self._done.wait()
        finally:
            if not self._done.is_set():
                self._error = HandlerError(ErrorCode.INTERNAL_ERROR, _NOT_ANSWERED)
                self._done.set()
        if self._error is not None:
            raise self._error
        return self._result


class _ReportingHandlers(HostHandlers):
    """One connection attempt's handlers: report each hook as a ``HostEvent``, answering
    with ``inner`` (the application's) or the host's defaults (see the module rules)."""

    def __init__(
        self,
        server: str,
        attempt: int,
        emit: Callable[[HostEvent], None],
        inner: HostHandlers | None,
        answer_timeout: float,
    ) -> None:
        self._server, self._attempt, self._emit_event = server, attempt, emit
        self._inner, self._answer_timeout = inner, answer_timeout

    def _emit(self, kind: str, responder: ServerRequestResponder | None = None, **data: Any) -> None:
        self._emit_event(
            HostEvent(
                self._server,
                kind,
                {"attempt": self._attempt, **data},  # type: ignore[arg-type]
                responder=responder,
            )
        )

    async def _answered(self, kind: str, call: Any, data: dict[str, Any]) -> Any:
        try:
            answer = await call
        except HandlerError as exc:
            self._emit(kind, **data, error=exc.to_error())
            raise
        except Exception:
            self._emit(
                kind, **data, error={"code": int(ErrorCode.INTERNAL_ERROR), "message": "Internal error"}
            )
            raise
        self._emit(kind, **data, answer=answer)
        return answer

    async def push_event(self, context: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        data = {
            "id": context.id,
            "featureSet": params.get("featureSet"),
            "eventId": params.get("eventId"),
            "params": params,
        }
        if self._inner is None:
            answer = {"accepted": True}
            self._emit("push_event", **data, answer=answer)
            return answer
        return await self._answered("push_event", self._inner.push_event(context, params), data)

    async def inference_request(
        self, context: RequestContext, params: dict[str, Any], stream: InferenceStream | None
    ) -> dict[str, Any]:
        data = {"id": context.id, "method": context.method, "params": params}
        inner = self._inner if self._inner is not None else HostHandlers()
        return await self._answered("server_request", inner.inference_request(context, params, stream), data)

    async def request(self, context: RequestContext, params: Any) -> Any:
        data = {"id": context.id, "method": context.method, "params": params}
        if self._inner is not None:
            return await self._answered("server_request", self._inner.request(context, params), data)
        responder = ServerRequestResponder(self._server, context.method, context.id, params)
        self._emit("server_request", responder, **data)
        return await responder._answer(self._answer_timeout)

    def on_notification(self, server: str, method: str, params: Any) -> None:
        self._emit("notification", method=method, params=params)
        if self._inner is not None:
            self._inner.on_notification(server, method, params)

    def on_refused(self, server: str, method: str, params: Any, error: dict[str, Any]) -> None:
        self._emit("refused", method=method, params=params, error=error)
        if self._inner is not None:
            self._inner.on_refused(server, method, params, error)

    def on_policy_receipt(self, server: str, outcome: PolicyOutcome) -> None:
        self._emit(
            "policy_receipt",
            accepted=outcome.accepted,
            mode=outcome.mode,
            fallback=outcome.fallback,
            reason=outcome.reason,
            unavailableFeatures=outcome.unavailable_features,
            defects=outcome.defects,
        )
        if self._inner is not None:
            self._inner.on_policy_receipt(server, outcome)

    def on_manifest_change(self, server: str, receipt: Any) -> None:
        to_json = getattr(receipt, "to_json", None)
        self._emit("manifest_change", **(to_json() if callable(to_json) else {"receipt": repr(receipt)}))
        hook = getattr(self._inner, "on_manifest_change", None)
        if hook is not None:
            hook(server, receipt)

    def on_connection_lost(self, server: str, error: ConnectionLost) -> None:
        if self._inner is not None:  # the supervisor reports it as "disconnected"
            self._inner.on_connection_lost(server, error)

    def on_orphan_response(self, server: str, response: Response) -> None:
        if self._inner is not None:
            self._inner.on_orphan_response(server, response)


class Host:
    """Hosts many servers: each enabled entry of ``configs`` (a ``HostConfig`` or a mapping
    of name to ``ServerConfig``) runs under a ``Supervisor`` with its own restart policy.

    Use as an async context manager; iterate ``events()`` for what happens; call servers by
    name (``call_tool``, ``read_resource``, ``request``...). ``handlers_factory(name)``, if
    given, returns the ``HostHandlers`` that answer that server's requests (see the module
    rules). ``health_interval_seconds`` / ``health_timeout_seconds``: the supervisors' health
    pings (None: none). ``max_queued_events``: the bound of the event stream. ``clock`` and
    ``rng`` go to every supervisor.
    """

    def __init__(
        self,
        configs: HostConfig | Mapping[str, ServerConfig],
        *,
        handlers_factory: Callable[[str], HostHandlers] | None = None,
        health_interval_seconds: float | None = None,
        health_timeout_seconds: float = DEFAULT_HEALTH_TIMEOUT_SECONDS,
        max_queued_events: int = MAX_QUEUED_EVENTS,
        clock: Callable[[], float] = anyio.current_time,
        rng: Callable[[], float] = random.random,
    ) -> None:
        servers = configs.servers if isinstance(configs, HostConfig) else configs
        self._configs = {name: config for name, config in servers.items() if not config.disabled}
        self._inner = {name: handlers_factory(name) for name in self._configs} if handlers_factory else {}
        self._redactors = {
            name: Redactor(config.secrets_for_redaction) for name, config in self._configs.items()
        }
        self._supervisors = {
            name: Supervisor(
                name,
                lambda name=name: self._open(name),
                config.restart_policy,
                self._emit,
                health_interval_seconds=health_interval_seconds,
                health_timeout_seconds=health_timeout_seconds,
                clock=clock,
                rng=rng,
            )
            for name, config in self._configs.items()
        }
        self._send, self._receive = anyio.create_memory_object_stream[HostEvent](max_queued_events)
        self.dropped_events = 0
        self._dropped_budget = LogBudget(DROPPED_EVENTS_LOGGED)
        self._tg: anyio.abc.TaskGroup | None = None
        self._entered = False
        self._closing = False
        self._closed = anyio.Event()
        self._log = get_logger("mcpl_host.host")

    def __repr__(self) -> str:
        states = ", ".join(f"{name}={sup.state}" for name, sup in self._supervisors.items())
        return f"<Host {states} dropped_events={self.dropped_events}>"

    # --- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> Host:
        if self._entered:
            raise LocalProtocolError("a Host can be entered only once")
        self._entered = True
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        for name, supervisor in self._supervisors.items():
            tg.start_soon(supervisor.run, name=f"supervisor {name!r}")
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        try:
            await self.aclose()
        finally:
            tg, self._tg = self._tg, None
            await leave_task_group(tg, *exc_info)  # every supervisor has ended
            self._receive.close()

    async def aclose(self) -> None:
        """Close every server concurrently and end the event stream. Idempotent; a second
        caller waits for the first. Bounded by the slowest server's grace periods
        (``close_grace_seconds`` twice plus ``terminate_grace_seconds``).

        **Cancellation:** shielded: every process is stopped and reaped before it returns.
        """
        if self._closing:
            with anyio.CancelScope(shield=True):
                await self._closed.wait()
            return
        self._closing = True
        try:
            with anyio.CancelScope(shield=True):
                async with anyio.create_task_group() as tg:
                    for supervisor in self._supervisors.values():
                        tg.start_soon(supervisor.aclose)
        finally:
            self._send.close()
            self._closed.set()

    # --- events ------------------------------------------------------------------------------

    def events(self) -> MemoryObjectReceiveStream[HostEvent]:
        """The one stream of ``HostEvent``s from every server, for one consumer; iterate it
        inside the ``async with`` block (``async for event in host.events()``). It ends when
        the host closes; it is closed when the ``async with`` block is left."""
        return self._receive

    def _emit(self, event: HostEvent) -> None:
        try:
            self._send.send_nowait(event)
            return
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return  # closed: nobody is listening any more
        except anyio.WouldBlock:
            pass
        try:
            oldest = self._receive.receive_nowait()
        except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
            return
        self.dropped_events += 1
        if oldest.responder is not None:
            oldest.responder.reject(ErrorCode.INTERNAL_ERROR, "Internal error: host event queue full")
        verdict = self._dropped_budget.take()
        if verdict != "quiet":
            self._log.warning(
                "event stream full: dropped the oldest event"
                + ("; more go unlogged" if verdict == "last" else ""),
                server=oldest.server,
                kind=oldest.kind,
                dropped=self.dropped_events,
            )
        self._send.send_nowait(event)

    # --- servers -----------------------------------------------------------------------------

    @property
    def servers(self) -> list[str]:
        """The names of the servers hosted (enabled ones), in config order."""
        return list(self._supervisors)

    def states(self) -> dict[str, SupervisorState]:
        """Each server's ``Supervisor.state``."""
        return {name: supervisor.state for name, supervisor in self._supervisors.items()}

    def supervisor(self, server: str) -> Supervisor:
        """The supervisor of ``server``. Raises ``UnknownServer``."""
        try:
            return self._supervisors[server]
        except KeyError:
            raise UnknownServer(server) from None

    def redactor(self, server: str) -> Redactor:
        """What hides ``server``'s secrets (env and header values, token, ``secrets``)."""
        self.supervisor(server)
        return self._redactors[server]

    def connection(self, server: str) -> ServerConnection:
        """The ready connection of ``server`` right now. Raises ``UnknownServer`` or
        ``ServerNotConnected``."""
        supervisor = self.supervisor(server)
        conn = supervisor.current
        if conn is None:
            raise ServerNotConnected(server, supervisor.state)
        return conn

    def _open(self, name: str) -> ServerConnection:
        config = self._configs[name]
        attempt = self._supervisors[name].attempts
        handlers = _ReportingHandlers(
            name, attempt, self._emit, self._inner.get(name), config.limits.request_timeout_seconds
        )
        conn = connect_from_config(config, name=name, handlers=handlers)
        self._redactors[name] = conn.redactor
        return conn

    # --- calls by server name ----------------------------------------------------------------
    # Each raises UnknownServer or ServerNotConnected, then what the connection's method raises
    # (RemoteError, RequestTimeout, ConnectionLost...). Cancellation: as ServerConnection.request.

    async def request(self, server: str, method: str, params: Any = None, **kwargs: Any) -> Any:
        """``ServerConnection.request`` on ``server``'s current connection."""
        return await self.connection(server).request(method, params, **kwargs)

    async def notify(self, server: str, method: str, params: Any = None) -> None:
        """``ServerConnection.notify`` on ``server``'s current connection."""
        await self.connection(server).notify(method, params)

    async def ping(self, server: str, **kwargs: Any) -> None:
        """MCP ``ping`` to ``server``."""
        await self.connection(server).ping(**kwargs)

    async def call_tool(
        self, server: str, name: str, arguments: dict[str, Any] | None = None, **kwargs: Any
    ) -> CallToolResult:
        """``tools/call`` on ``server`` (``kwargs``: ``timeout``, ``progress``)."""
        return await self.connection(server).call_tool(name, arguments, **kwargs)

    async def list_tools(self, server: str) -> list[Tool]:
        """``tools/list`` on ``server``, every page."""
        return await self.connection(server).list_tools()

    async def list_resources(self, server: str) -> list[Resource]:
        """``resources/list`` on ``server``, every page."""
        return await self.connection(server).list_resources()

    async def read_resource(self, server: str, uri: str) -> ReadResourceResult:
        """``resources/read`` on ``server``."""
        return await self.connection(server).read_resource(uri)

    async def list_prompts(self, server: str) -> list[Prompt]:
        """``prompts/list`` on ``server``, every page."""
        return await self.connection(server).list_prompts()

    async def get_prompt(
        self, server: str, name: str, arguments: dict[str, str] | None = None
    ) -> GetPromptResult:
        """``prompts/get`` on ``server``."""
        return await self.connection(server).get_prompt(name, arguments)

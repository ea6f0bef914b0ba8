"""``ServerConnection``: the I/O shell around ``Session`` for one server.

Rules of this module (DESIGN.md "the one path every byte takes"; ENVELOPE.md C-E):

- One reader task and one writer task per transport. The reader feeds each line to the
  session and acts on its events synchronously, so ``ping`` answers and the
  ``notifications/initialized`` that follows the ``initialize`` answer go out in read order.
  The writer joins everything queued into a single write.
- A pending request is a small ``_Slot`` (an ``anyio.Event`` plus the outcome); the caller
  waits on it under its own timeout. Nothing is spawned per host request.
- Each inbound request runs in its own task in the connection's task group, at most
  ``limits.max_concurrent_inbound`` at once (more are answered ``-32603`` at once, so the read
  loop never waits). Its answer goes only to the transport (epoch) it was read on (T1).
- Admission of gated inbound methods happens in one place, ``_dispatch`` via ``admit()``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Any

import anyio

from mcpl_host.connection_io import Link, Slot
from mcpl_host.handlers import HostHandlers
from mcpl_host.handshake import (
    ServerInfo,
    initialize_params,
    read_initialize_result,
)
from mcpl_host.inbound import InboundRouting
from mcpl_host.jsonrpc.errors import (
    ConnectionClosed,
    ConnectionLost,
    InitializeError,
    LocalProtocolError,
    RemoteError,
    RemoteProtocolError,
    RequestTimeout,
    describe_seconds,
)
from mcpl_host.jsonrpc.framing import LineTooLong
from mcpl_host.jsonrpc.session import (
    PendingRequest,
    Session,
)
from mcpl_host.limits import Limits
from mcpl_host.logging import LogBudget, Redactor, ServerValue, get_logger, log_value
from mcpl_host.mcp_methods import MCPMethods
from mcpl_host.mcpl.feature_sets import FeatureSetPolicy
from mcpl_host.mcpl.grants import GrantPolicy
from mcpl_host.mcpl.host_calls import MCPLHostCalls
from mcpl_host.mcpl.manifest_changes import ManifestChanges
from mcpl_host.mcpl.negotiation import MCPLNegotiation, MCPLState, RefusalAction
from mcpl_host.transports.base import Transport

__all__ = ["MCPLState", "ProgressCallback", "ServerConnection"]

CLIENT_NAME = "mcpl-host"
ProgressCallback = Callable[[dict[str, Any]], None]
_USE_DEFAULT: Any = object()
_MCP_LOG_LEVELS = {
    "debug": "debug",
    "info": "info",
    "notice": "info",
    "warning": "warning",
    "error": "error",
    "critical": "critical",
    "alert": "critical",
    "emergency": "critical",
}


class ServerConnection(InboundRouting, MCPLNegotiation, ManifestChanges, MCPMethods, MCPLHostCalls):
    """A connection to one server: handshake, routing, pending requests, grant.

    Use as an async context manager: entering opens the transport, runs the handshake
    (``initialize``, ``notifications/initialized``) and, for an MCPL server, the initial
    ``featureSets/update`` exchange; exiting closes everything. Build one with
    ``mcpl_host.connect_stdio()`` or pass a ``transport_factory`` (a callable returning an
    async context manager that yields a ``Transport``).

    Raises on entry: ``InitializeError`` (refused, unsupported version, exited or closed
    before answering, no answer within ``limits.handshake_timeout_seconds``, or the server
    refused the policy and asked to be closed, with ``on_refusal`` "follow" or "close").

    ``policy`` (capability grant) and ``feature_set_policy`` default to granting nothing
    (MCPL §5.4); ``on_refusal`` is what a refused policy does (``mcpl.negotiation``).
    """

    def __init__(
        self,
        transport_factory: Callable[[], AbstractAsyncContextManager[Transport]],
        *,
        name: str = "server",
        handlers: HostHandlers | None = None,
        policy: GrantPolicy | None = None,
        feature_set_policy: FeatureSetPolicy | None = None,
        on_refusal: RefusalAction = "follow",
        limits: Limits | None = None,
        redactor: Redactor | None = None,
        client_version: str = "0.1.0",
    ) -> None:
        self.name = name
        self.handlers = handlers or HostHandlers()
        self.policy = policy or GrantPolicy()
        self.feature_set_policy = feature_set_policy or FeatureSetPolicy()
        self.on_refusal = on_refusal
        self.limits = limits or Limits()
        self.redactor = redactor or Redactor()
        self._transport_factory = transport_factory
        self._client_version = client_version
        self._session = Session(max_pending=self.limits.max_pending_requests)
        self._log = get_logger("mcpl_host.connection", server=name)
        self._stack: AsyncExitStack | None = None
        self._tg: anyio.abc.TaskGroup | None = None  # reader, writer, handler tasks
        self._task_scope = anyio.CancelScope()  # theirs alone, not the body of `async with`
        self._ended = anyio.Event()  # set when the transport has ended, for any reason
        self._link: Link | None = None
        self._epochs = itertools.count(1)
        self._lost: BaseException | None = None
        self._closed = False
        self._inbound: dict[tuple[int, Any], anyio.CancelScope] = {}
        self._inbound_running = 0
        self._inbound_limiter = anyio.CapacityLimiter(self.limits.max_concurrent_inbound)
        self._progress: dict[str, ProgressCallback] = {}
        self._progress_tokens = itertools.count(1)
        self._dropped = LogBudget(self.limits.dropped_lines_logged)
        self._unmatched = LogBudget(self.limits.unmatched_errors_logged)
        self._invalid = LogBudget(self.limits.invalid_requests_logged)
        self._not_answered = LogBudget(self.limits.invalid_requests_logged)
        self.server_info: ServerInfo | None = None
        self._init_negotiation()
        self._init_manifest_changes()
        self._init_host_calls()
        self._init_server_methods(state_store=self.state_store)  # one store, both directions

    def __repr__(self) -> str:
        epoch = self._link.epoch if self._link else 0
        return (
            f"<ServerConnection {self.name!r} {self._session.phase.name} "
            f"mcpl={self.mcpl_state.value} epoch={epoch} pending={self._session.pending_count}>"
        )

    # --- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> ServerConnection:
        if self._stack is not None or self._closed:
            raise LocalProtocolError("a ServerConnection can be opened only once")
        self._stack = AsyncExitStack()
        try:
            outer = await self._stack.enter_async_context(anyio.create_task_group())
            await outer.start(self._run_tasks)
            try:
                transport = await self._stack.enter_async_context(self._transport_factory())
            except ConnectionLost as exc:
                raise InitializeError(
                    str(exc), exit_status=exc.exit_status, stderr_tail=exc.stderr_tail
                ) from None
            self._start_link(transport)
            await self._handshake()
        except BaseException:
            await self.aclose()
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
        if self._stack is not None:
            # Everything in it is closed by now; the transports' second aclose() returns
            # without a checkpoint, so no pending cancellation is raised (and chained to itself)
            # inside AsyncExitStack. (It cannot be shielded: the task group's scope is in it.)
            await self._stack.aclose()  # leaves the task group and the transport's context

    async def aclose(self) -> None:
        """Close the connection: fail pending requests (``ConnectionClosed``), let queued
        answers go out (at most ``close_grace_seconds``, and only while something is queued),
        close the transport (for stdio: stdin, grace, SIGTERM, SIGKILL, reap), and stop every
        task. Idempotent. Bounded: at most ``close_grace_seconds`` for queued output, then the
        transport's ``close_grace_seconds`` + ``terminate_grace_seconds``.
        May be called from any task; the ``async with`` exit then only leaves the contexts.

        Cancellation: shielded; the transport is always closed and the process reaped.
        """
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            for pending in self._session.close():
                pending.slot.fail(ConnectionClosed(f"connection to {self.name!r} was closed"))
            link = self._link
            if link is not None and not link.closed:
                with anyio.move_on_after(self.limits.close_grace_seconds):
                    await link.drained()
            if link is not None:
                # Before the tasks stop, so stderr written while exiting still reaches the tail.
                await link.transport.aclose()
            self._task_scope.cancel()
            self._ended.set()

    async def _run_tasks(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        with self._task_scope:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                task_status.started()
                await anyio.sleep_forever()

    @property
    def is_open(self) -> bool:
        """True from the end of the handshake until the transport ends or we close."""
        link = self._link
        return not self._closed and link is not None and not link.closed

    async def wait_closed(self) -> BaseException:
        """Wait until the transport has ended (the server went away, or we closed) and return
        why: a ``ConnectionLost`` (exit status, stderr tail) or a ``ConnectionClosed``."""
        await self._ended.wait()
        if self._lost is not None and not self._closed:
            return self._lost
        return (
            self._lost
            if isinstance(self._lost, ConnectionLost)
            else ConnectionClosed(f"connection to {self.name!r} was closed")
        )

    # --- host -> server --------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: Any = None,
        *,
        timeout: float | None = _USE_DEFAULT,
        progress: ProgressCallback | None = None,
        _on_answer: Callable[[Any], None] | None = None,
    ) -> Any:
        """Send a request and return its ``result`` (JSON-RPC 2.0 §4).

        Args:
            method, params: the request; ``params`` a dict, a list or None.
            timeout: seconds; default ``limits.request_timeout_seconds``; None waits forever.
            progress: called (from the read loop; must not block) with the params of each
                ``notifications/progress`` for this request; adds ``_meta.progressToken``.

        Raises:
            RemoteError: the server answered with an error object.
            RequestTimeout: no answer in time; ``notifications/cancelled`` was sent.
            ConnectionLost / ConnectionClosed: the transport went away / we closed.
            LocalProtocolError: called before the handshake, or too many requests in flight.

        Cancellation: the pending entry is dropped, ``notifications/cancelled`` is sent (never
        for ``initialize``) and a late answer is treated as an orphan.
        """
        link = self._require_link()
        if timeout is _USE_DEFAULT:
            timeout = self.limits.request_timeout_seconds
        token = None
        if progress is not None:
            token = f"progress-{next(self._progress_tokens)}"
            params = dict(params or {})
            meta = params.get("_meta")
            params["_meta"] = {**(meta if isinstance(meta, dict) else {}), "progressToken": token}
            self._progress[token] = progress
        slot = Slot(_on_answer, self.redactor)
        pending, data = self._session.start_request(method, params, epoch=link.epoch, slot=slot)
        link.send(data)
        try:
            with anyio.fail_after(math.inf if timeout is None else timeout):
                await slot.event.wait()
        except TimeoutError:
            if not slot.event.is_set():
                self._abandon(pending, link, "timeout")
                raise RequestTimeout(method, timeout) from None
        except BaseException:
            if not slot.event.is_set():
                self._abandon(pending, link, "cancelled")
            raise
        finally:
            if token is not None:
                self._progress.pop(token, None)
        return slot.outcome()

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification (no answer). Raises ``ConnectionLost``/``ConnectionClosed``."""
        self._require_link().send(self._session.notification(method, params))

    async def ping(self, *, timeout: float | None = _USE_DEFAULT) -> None:
        """MCP ``ping``; returns when the server answers. Raises as ``request()``."""
        await self.request("ping", timeout=timeout)

    def _abandon(self, pending: PendingRequest, link: Link, reason: str) -> None:
        if self._session.forget(pending.id) is None:
            return
        if pending.method != "initialize" and not link.closed:  # MCP: never cancel initialize
            link.send(
                self._session.notification(
                    "notifications/cancelled", {"requestId": pending.id, "reason": reason}
                )
            )

    def _require_link(self) -> Link:
        if self._closed:
            raise ConnectionClosed(f"connection to {self.name!r} is closed")
        link = self._link
        if link is None or link.closed:
            lost = self._lost
            if isinstance(lost, ConnectionLost):
                raise ConnectionLost(str(lost), exit_status=lost.exit_status, stderr_tail=lost.stderr_tail)
            if self._stack is None:
                raise LocalProtocolError(
                    f"connection to {self.name!r} is not open: enter it with 'async with' first"
                )
            raise ConnectionLost(f"connection to {self.name!r} is not open")
        return link

    # --- handshake and policy ----------------------------------------------------------------

    async def _handshake(self) -> None:
        timeout = self.limits.handshake_timeout_seconds
        try:
            await self.request(
                "initialize",
                initialize_params(CLIENT_NAME, self._client_version),
                timeout=timeout,
                _on_answer=self._on_initialize_answer,
            )
        except RemoteError as exc:  # H2 included: an id-less error answers initialize
            raise InitializeError(
                f"the server refused initialize: {log_value(exc.message, self.redactor)}",
                code=exc.code,
                data=exc.data,
                stderr_tail=self.stderr_tail,
            ) from None
        except RemoteProtocolError as exc:
            raise InitializeError(
                f"the server's answer to initialize is malformed: {exc}", stderr_tail=self.stderr_tail
            ) from None
        except RequestTimeout:
            raise InitializeError(
                f"the server did not answer initialize within {describe_seconds(timeout)}",
                stderr_tail=self.stderr_tail,
            ) from None
        except ConnectionLost as exc:  # H5: at once, with exit status and stderr tail
            raise InitializeError(
                f"the server went away before answering initialize ({exc})",
                exit_status=exc.exit_status,
                stderr_tail=exc.stderr_tail or self.stderr_tail,
            ) from None
        info = self.server_info
        assert info is not None  # set by _on_initialize_answer before the waiter woke
        if info.mcpl is not None:
            await self._initial_policy()

    def _on_initialize_answer(self, response: Any) -> None:
        """Runs in the read loop, before the next line is read: H6's ordering lives here.
        Raises ``InitializeError`` for a result we cannot use (D4)."""
        if response.has_error:
            return
        self.server_info = read_initialize_result(response.result, self.redactor)
        self._session.initialize_completed()
        # Strictly the first message after the answer: real servers expect it (H6).
        assert self._link is not None
        self._link.send(self._session.notification("notifications/initialized"))

    # --- transport tasks ---------------------------------------------------------------------

    def _start_link(self, transport: Transport) -> None:
        assert self._tg is not None
        link = Link(
            transport,
            next(self._epochs),
            max_outbox_bytes=self.limits.max_outbox_bytes,
            on_lost=self._link_lost,
        )
        self._link = link
        self._tg.start_soon(self._read_loop, link)
        self._tg.start_soon(link.write_loop)

    @property
    def stderr_tail(self) -> list[str]:
        """The server's last stderr lines, escaped and redacted (ENVELOPE.md H5)."""
        return list(self._link.transport.stderr_tail) if self._link else []

    async def _read_loop(self, link: Link) -> None:
        session, epoch = self._session, link.epoch
        try:
            while True:
                item = await link.transport.receive()
                if isinstance(item, LineTooLong):
                    self._log_dropped(f"line over {item.max_line_bytes} bytes", b"")
                    continue
                try:
                    for event in session.receive_line(item, epoch):
                        self._on_event(event, link)
                except Exception:  # a bug here, or in a handler's hook: never the connection
                    self._log.exception("failed to act on a line from the server")
        except (ConnectionLost, ConnectionClosed) as exc:
            self._link_lost(link, exc)

    def _link_lost(self, link: Link, exc: BaseException) -> None:
        if link.closed:
            return
        link.close()
        self._lost = exc
        self._ended.set()
        if not self._closed:
            self._log.info("transport closed", reason=ServerValue(str(exc), self.redactor))
            if isinstance(exc, ConnectionLost):
                self.handlers.on_connection_lost(self.name, exc)
        failure = exc if isinstance(exc, (ConnectionLost, ConnectionClosed)) else ConnectionLost(str(exc))
        for pending in self._session.transport_closed(link.epoch):  # T3: fail at once
            pending.slot.fail(failure)
        for (epoch, _id), scope in list(self._inbound.items()):
            if epoch == link.epoch:
                scope.cancel()

"""The I/O of the MCP tasks extension (``io.modelcontextprotocol/tasks``, MCP 2026-07-28) on
one connection: ``tasks/get``, ``tasks/update``, ``tasks/cancel``, and waiting for a task to
end, by polling and by the task status notifications of ``subscriptions/listen``.

The decisions are ``mcp_tasks``'s (pure); the project's reading is docs/protocol.md TK1-TK9.
The application reaches these calls through ``mcp_methods.MCPClient`` (``conn.mcp``), which
owns the object made here.

Rules of this module:

- Every request declares the extension in its per-request client capabilities (the
  specification: a server refuses ``tasks/*`` from a client that does not, ``-32021``), and
  is sent only on a stateless connection (TK1): elsewhere ``LocalProtocolError``, nothing
  sent.
- ``wait`` polls ``tasks/get`` at the interval ``mcp_tasks.poll_seconds`` chooses from the
  latest state (TK3); while it waits the task's id is in the filter of the connection's one
  ``subscriptions/listen`` when the server advertises the extension, and a
  ``notifications/tasks`` for it is taken as a poll's answer would be (TK6). A terminal
  state ends the wait (TK4).
- Input requests of an ``input_required`` task are answered by the connection's handlers
  (the same ``ClientFeatureService`` as server requests and MRTR: same trust model), each key
  once per wait, then sent with ``tasks/update``; at most ``Limits.max_input_rounds`` updates
  per wait. A handler's refusal cancels the task (``tasks/cancel``) and raises
  ``InputRefused`` (TK5).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import anyio
from typing_extensions import Unpack

from mcpl_host.connection import DEFAULT, RequestOptions, Timeout
from mcpl_host.jsonrpc.errors import LocalProtocolError, MCPLHostError, RemoteProtocolError
from mcpl_host.jsonrpc.values import JSONObject, is_object
from mcpl_host.limits import Limits
from mcpl_host.logging import Logger, Redactor, log_value
from mcpl_host.mcp_tasks import (
    NOTIFICATION,
    Task,
    declaration,
    later_state,
    new_input_requests,
    poll_seconds,
    read_task,
    task_id_of,
)
from mcpl_host.stateless import result_type

__all__ = ["TaskPolling"]


class _Requester(Protocol):
    def request(
        self,
        method: str,
        params: Any = None,
        *,
        extensions: Mapping[str, Any] | None = None,
        **options: Unpack[RequestOptions],
    ) -> Awaitable[Any]: ...


#: Answers input requests (key -> ``(method, params)``) for ``what``; returns the responses
#: by key. Raises ``InputRefused`` when a handler refuses one.
AnswerInputs = Callable[[str, Mapping[str, tuple[str, Any]]], Awaitable[JSONObject]]


class _Watch:
    """A task being waited on: the latest state a notification brought, and an event set
    when one arrives."""

    __slots__ = ("arrived", "latest")

    def __init__(self) -> None:
        self.latest: Task | None = None
        self.arrived = anyio.Event()

    async def next(self, seconds: float) -> Task | None:
        """The state a notification brings within ``seconds``, or None."""
        with anyio.move_on_after(seconds):
            await self.arrived.wait()
        latest, self.latest = self.latest, None
        if self.arrived.is_set():
            self.arrived = anyio.Event()
        return latest


class TaskPolling:
    """The tasks calls of one connection (module rules).

    Args:
        requester: sends a request with the extensions it declares (``EraRequester``).
        limits: the connection's bounds (``task_poll_*_seconds``, ``max_input_requests``,
            ``max_input_rounds``).
        answer_inputs: the connection's answerer of input requests.
        stateless: tells whether the connection is in the stateless era.
        listen_changed: called when the set of watched tasks changed (the listen's filter).
        log, redactor: the connection's.
    """

    def __init__(
        self,
        requester: _Requester,
        limits: Limits,
        *,
        answer_inputs: AnswerInputs,
        stateless: Callable[[], bool],
        listen_changed: Callable[[], None],
        log: Logger,
        redactor: Redactor | None,
    ) -> None:
        self._requester = requester
        self._limits = limits
        self._answer_inputs = answer_inputs
        self._stateless = stateless
        self._listen_changed = listen_changed
        self._log = log
        self._redactor = redactor
        self._watches: dict[str, list[_Watch]] = {}

    def watched(self) -> list[str]:
        """The ids of the tasks being waited on (the listen's ``taskIds``)."""
        return list(self._watches)

    def checked_era(self, method: str) -> None:
        """Raises ``LocalProtocolError`` unless the connection is stateless (TK1)."""
        if not self._stateless():
            raise LocalProtocolError(
                f"{method} belongs to the tasks extension of MCP 2026-07-28; this connection speaks the"
                " handshake era (docs/protocol.md TK1)"
            )

    async def _send(self, method: str, params: JSONObject, timeout: Timeout) -> JSONObject:
        self.checked_era(method)
        result = await self._requester.request(method, params, extensions=declaration(), timeout=timeout)
        if not is_object(result):
            raise RemoteProtocolError(f"the server's {method} result is not a JSON object")
        result_type(result, method)  # "complete" on every tasks/* answer
        return result

    def read(self, value: object, where: str, expected_id: str | None = None) -> Task:
        """A task object read by ``mcp_tasks.read_task`` with this connection's bounds."""
        return read_task(
            value,
            where,
            expected_id=expected_id,
            max_input_requests=self._limits.max_input_requests,
            redactor=self._redactor,
        )

    async def get(self, task_id: str, *, timeout: Timeout = DEFAULT) -> Task:
        """``tasks/get``: the task's current state. Raises ``RemoteError`` (``-32602``: the
        server does not know the task, or no longer keeps it), ``RemoteProtocolError`` (a
        malformed task), ``LocalProtocolError`` (not a stateless connection), and what a
        request raises."""
        result = await self._send("tasks/get", {"taskId": task_id}, timeout)
        return self.read(result, "tasks/get", task_id)

    async def update(self, task_id: str, responses: Mapping[str, Any], *, timeout: Timeout = DEFAULT) -> None:
        """``tasks/update`` with ``responses`` as its ``inputResponses`` (key -> the result of
        the input request). Raises as ``get``."""
        await self._send("tasks/update", {"taskId": task_id, "inputResponses": dict(responses)}, timeout)

    async def cancel(self, task_id: str, *, timeout: Timeout = DEFAULT) -> None:
        """``tasks/cancel`` (cooperative: the server acknowledges; the task may still end
        otherwise). Raises as ``get``."""
        await self._send("tasks/cancel", {"taskId": task_id}, timeout)

    def on_notification(self, method: str, params: object) -> None:
        """A ``notifications/tasks`` for a task being waited on wakes its wait with the state
        it carries; a malformed one is logged and dropped. Does not block."""
        if method != NOTIFICATION:
            return
        watches = self._watches.get(task_id_of(params) or "")
        if not watches:
            return
        try:
            task = self.read(params, NOTIFICATION)
        except RemoteProtocolError as exc:
            self._log.warning("dropped a task status notification", error=str(exc))
            return
        for watch in watches:
            watch.latest = task
            watch.arrived.set()

    async def wait(
        self,
        task: Task,
        *,
        on_task: Callable[[Task], None] | None = None,
        timeout: Timeout = DEFAULT,
    ) -> Task:
        """Poll ``task`` until it is terminal, answering its input requests (module rules),
        and return the terminal state. ``on_task``: called with each state seen, the first
        included (it must not block); ``timeout``: of each ``tasks/get`` and
        ``tasks/update``.

        Raises: ``InputRefused`` (the task was cancelled), ``RemoteProtocolError`` (a
        malformed task or input request, an input request for a capability the host did not
        declare, more than ``Limits.max_input_rounds`` updates), and what ``get`` raises.
        Cancellation: the wait ends; the task goes on at the server (``cancel`` stops it)."""
        self.checked_era("tasks/get")
        task_id, limits = task.task_id, self._limits
        watch = _Watch()
        self._watches.setdefault(task_id, []).append(watch)
        self._listen_changed()
        answered: set[str] = set()
        rounds = 0
        try:
            state = task
            while True:
                if on_task is not None:
                    on_task(state)
                if state.terminal:
                    return state
                wanted = new_input_requests(state, answered) if state.status == "input_required" else {}
                if wanted:
                    rounds += 1
                    if rounds > limits.max_input_rounds:
                        raise RemoteProtocolError(
                            f"the task {log_value(task_id, self._redactor, max_units=60)} still asked for input"
                            f" after {limits.max_input_rounds} updates (Limits.max_input_rounds)"
                        )
                    # No local holds the responses: once sent, nothing of them is kept
                    # while the wait polls on.
                    await self.update(task_id, await self._answered(task_id, wanted), timeout=timeout)
                    answered.update(wanted)
                seconds = poll_seconds(
                    state,
                    least=limits.task_poll_min_seconds,
                    most=limits.task_poll_max_seconds,
                    default=limits.task_poll_default_seconds,
                )
                new = await watch.next(seconds)
                if new is None:
                    new = await self.get(task_id, timeout=timeout)
                state = later_state(state, new)
        finally:
            watches = self._watches.get(task_id, [])
            if watch in watches:
                watches.remove(watch)
            if not watches:
                self._watches.pop(task_id, None)
            self._listen_changed()

    async def _answered(self, task_id: str, wanted: Mapping[str, tuple[str, Any]]) -> JSONObject:
        """The responses to ``wanted``; a refusal cancels the task first (TK5)."""
        try:
            return await self._answer_inputs("tools/call (a task)", wanted)
        except MCPLHostError:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self._limits.request_timeout_seconds):
                try:
                    await self.cancel(task_id)
                except MCPLHostError as exc:
                    self._log.info("could not cancel the task after a refused input request", error=str(exc))
            raise

"""The MCP tasks extension (``io.modelcontextprotocol/tasks``, for MCP 2026-07-28) as pure
rules: the ``Task`` a server sends, the status state machine, the poll interval, the input
requests still to answer, and the final result a task carries.

Source: the extension's specification, "Tasks" 2026-07-28 (modelcontextprotocol/ext-tasks,
``specification/2026-07-28/tasks.md``): Capability Negotiation, Polymorphic Results, Tasks,
Task Status, Task Polling, Task Update Requests, Task Cancellation, Task Status
Notifications, Error Handling. The project's reading: docs/protocol.md, "MCP tasks" (TK1-TK9).
The I/O lives in ``task_polling.TaskPolling``, reached through ``mcp_methods.MCPClient``.

Rules of this module:

- The extension belongs to the stateless era (its client capability travels in the
  per-request ``_meta``; the server's in the ``server/discover`` result): ``TASKS_EXTENSION``
  under ``extensions`` (``declaration``). Only ``tools/call`` may be answered with a task
  (``TASK_METHODS``), and only when the request declared the extension (TK2).
- A ``Task`` is read whole or refused (``read_task``): ``taskId`` and a known ``status``
  are required; ``input_required`` needs its ``inputRequests`` (checked as MRTR input
  requests are, ``stateless.input_required``), ``completed`` its ``result`` object,
  ``failed`` its ``error`` object with an integer ``code``. Optional fields of the wrong
  type are read as absent.
- ``working`` and ``input_required`` move to any status; a terminal status (``completed``,
  ``failed``, ``cancelled``) is final: a later state of the same task is not taken
  (``later_state``, TK4).
- The poll interval is the server's ``pollIntervalMs`` within the host's bounds
  (``poll_seconds``, TK3).
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from mcpl_host.jsonrpc.errors import MCPLHostError, RemoteError, RemoteProtocolError
from mcpl_host.jsonrpc.values import JSONObject, is_object
from mcpl_host.logging import Redactor, log_value
from mcpl_host.stateless import input_required

__all__ = [
    "NOTIFICATION",
    "STATUSES",
    "TASKS_EXTENSION",
    "TASK_METHODS",
    "TERMINAL",
    "Task",
    "TaskCancelled",
    "TaskFailed",
    "TaskStatus",
    "declaration",
    "final_result",
    "later_state",
    "new_input_requests",
    "poll_seconds",
    "read_task",
    "task_id_of",
]

#: The extension's identifier (its "Extension Identifier" section).
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
#: The requests that may be answered with a task ("Supported Methods").
TASK_METHODS = frozenset({"tools/call"})
#: The task status notification ("Task Status Notifications").
NOTIFICATION = "notifications/tasks"

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
STATUSES: tuple[TaskStatus, ...] = ("working", "input_required", "completed", "failed", "cancelled")
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})


def declaration() -> JSONObject:
    """The ``extensions`` entry a request carries in its client capabilities to declare the
    extension ("Capability Negotiation": an empty object)."""
    return {TASKS_EXTENSION: {}}


@dataclass(frozen=True, slots=True)
class Task:
    """One state of a task as the server sent it (``CreateTaskResult``, ``tasks/get``'s
    ``DetailedTask`` or a ``notifications/tasks``).

    ``task_id``; ``status``; ``status_message`` (may be shown: escape it); ``created_at``,
    ``last_updated_at`` (ISO 8601 strings as sent, "" when absent); ``ttl_ms`` (None:
    unlimited or not said); ``poll_interval_ms`` (None: not said); ``input_requests`` (key
    -> ``(method, params)``, ``input_required`` only); ``result`` (``completed``: the
    ``CallToolResult`` object); ``error`` (``failed``: the JSON-RPC error object); ``raw``:
    the object as sent."""

    task_id: str
    status: TaskStatus
    status_message: str | None = None
    created_at: str = ""
    last_updated_at: str = ""
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None
    input_requests: dict[str, tuple[str, Any]] = field(default_factory=dict[str, tuple[str, Any]])
    result: JSONObject | None = None
    error: JSONObject | None = None
    raw: JSONObject = field(default_factory=dict[str, Any])

    @property
    def terminal(self) -> bool:
        """Whether the status is final (``completed``, ``failed``, ``cancelled``)."""
        return self.status in TERMINAL

    def to_json(self) -> JSONObject:
        """The task as JSON with camelCase keys, the fields the specification defines (the
        ``resultType`` of the answer it came in left out)."""
        out: JSONObject = {"taskId": self.task_id, "status": self.status}
        if self.status_message is not None:
            out["statusMessage"] = self.status_message
        out["createdAt"] = self.created_at
        out["lastUpdatedAt"] = self.last_updated_at
        out["ttlMs"] = self.ttl_ms
        if self.poll_interval_ms is not None:
            out["pollIntervalMs"] = self.poll_interval_ms
        if self.status == "input_required":
            out["inputRequests"] = {
                key: {"method": method, "params": params}
                for key, (method, params) in self.input_requests.items()
            }
        if self.result is not None:
            out["result"] = self.result
        if self.error is not None:
            out["error"] = self.error
        return out


def _whole_ms(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if value != value or value in (float("inf"), float("-inf")) or value < 0:
        return None
    return int(value)


def task_id_of(value: object) -> str | None:
    """The ``taskId`` string of a task object, or None."""
    task_id = value.get("taskId") if is_object(value) else None
    return task_id if isinstance(task_id, str) and task_id else None


def read_task(
    value: object,
    where: str,
    *,
    expected_id: str | None = None,
    max_input_requests: int,
    redactor: Redactor | None = None,
) -> Task:
    """Read a task object (module rules). ``where``: what it came in, for the message
    (``"the tools/call result"``, ``"tasks/get"``); ``expected_id``: the task asked about
    (None: any); ``max_input_requests``: ``Limits.max_input_requests``.

    Raises:
        RemoteProtocolError: not an object, no ``taskId`` string, another task than
            ``expected_id``, an unknown ``status``, or a status without the field it
            requires (``inputRequests``, ``result``, ``error``), or input requests that
            ``stateless.input_required`` refuses.
    """
    if not is_object(value):
        raise RemoteProtocolError(f"the server's task in {where} is not a JSON object")
    task_id = task_id_of(value)
    if task_id is None:
        raise RemoteProtocolError(f"the server's task in {where} has no taskId string")
    if expected_id is not None and task_id != expected_id:
        raise RemoteProtocolError(
            f"the server answered {where} for task {log_value(expected_id, redactor, max_units=60)} with"
            f" task {log_value(task_id, redactor, max_units=60)}"
        )
    status = value.get("status")
    if status not in STATUSES:
        raise RemoteProtocolError(
            f"the server's task {log_value(task_id, redactor, max_units=60)} in {where} has an unknown"
            f" status {log_value(status, redactor, max_units=40)}"
        )
    requests: dict[str, tuple[str, Any]] = {}
    result = error = None
    if status == "input_required":
        if not is_object(value.get("inputRequests")):
            raise RemoteProtocolError(
                f"the server's task {log_value(task_id, redactor, max_units=60)} in {where} is input_required"
                " without inputRequests"
            )
        requests = input_required(value, where, max_requests=max_input_requests, redactor=redactor).requests
    elif status == "completed":
        result = value.get("result")
        if not is_object(result):
            raise RemoteProtocolError(
                f"the server's task {log_value(task_id, redactor, max_units=60)} in {where} is completed"
                " without a result object"
            )
    elif status == "failed":
        error = value.get("error")
        if (
            not is_object(error)
            or isinstance(error.get("code"), bool)
            or not isinstance(error.get("code"), int)
        ):
            raise RemoteProtocolError(
                f"the server's task {log_value(task_id, redactor, max_units=60)} in {where} failed without"
                " a JSON-RPC error object"
            )
    message = value.get("statusMessage")
    created, updated = value.get("createdAt"), value.get("lastUpdatedAt")
    return Task(
        task_id=task_id,
        status=status,
        status_message=message if isinstance(message, str) else None,
        created_at=created if isinstance(created, str) else "",
        last_updated_at=updated if isinstance(updated, str) else "",
        ttl_ms=_whole_ms(value.get("ttlMs")),
        poll_interval_ms=_whole_ms(value.get("pollIntervalMs")),
        input_requests=requests,
        result=result,
        error=error,
        raw=value,
    )


def later_state(current: Task, new: Task) -> Task:
    """The state to hold after ``new`` arrives for the task in state ``current`` (module
    rules, TK4): a terminal state is final (``current`` is kept), else ``new``."""
    return current if current.terminal else new


def poll_seconds(task: Task, *, least: float, most: float, default: float) -> float:
    """Seconds until the next ``tasks/get`` of ``task`` (TK3): its ``pollIntervalMs`` as
    seconds, or ``default`` when it sent none, within ``[least, most]``
    (``Limits.task_poll_min_seconds``, ``task_poll_max_seconds``,
    ``task_poll_default_seconds``)."""
    seconds = default if task.poll_interval_ms is None else task.poll_interval_ms / 1000
    return min(max(seconds, least), most)


def new_input_requests(task: Task, answered: Set[str]) -> dict[str, tuple[str, Any]]:
    """The input requests of ``task`` not answered yet (the specification: keys are unique
    over a task's lifetime, and the client deduplicates them across polls)."""
    return {key: request for key, request in task.input_requests.items() if key not in answered}


class TaskFailed(RemoteError):
    """A task ended ``failed``: the JSON-RPC error of its request (``code``, ``message``,
    ``data`` as the server sent them), ``task_id``; ``str()`` is escaped and redacted."""

    def __init__(self, task_id: str, error: Mapping[str, Any], *, redactor: Redactor | None = None) -> None:
        message = error.get("message")
        super().__init__(
            cast("int", error.get("code")),
            message if isinstance(message, str) else "",
            error.get("data"),
            redactor=redactor,
        )
        self.task_id = task_id


class TaskCancelled(MCPLHostError):
    """A task ended ``cancelled`` (by ``tasks/cancel`` or by the server). ``task_id``;
    ``status_message``: the server's reason, if it sent one."""

    def __init__(self, task_id: str, status_message: str | None, *, redactor: Redactor | None = None) -> None:
        reason = f": {log_value(status_message, redactor, max_units=120)}" if status_message else ""
        super().__init__(f"the task {log_value(task_id, redactor, max_units=60)} was cancelled{reason}")
        self.task_id = task_id
        self.status_message = status_message


def final_result(task: Task, *, redactor: Redactor | None = None) -> JSONObject:
    """The result of the request a terminal task stood for (the specification: ``tasks/get``
    returns what the request would have returned): a ``completed`` task's ``result`` (a
    ``CallToolResult`` object, ``isError`` included).

    Raises:
        TaskFailed: the task ``failed`` (its JSON-RPC error).
        TaskCancelled: the task was ``cancelled``.
        ValueError: the task is not terminal (a caller's mistake).
    """
    if task.status == "completed" and task.result is not None:
        return task.result
    if task.status == "failed" and task.error is not None:
        raise TaskFailed(task.task_id, task.error, redactor=redactor)
    if task.status == "cancelled":
        raise TaskCancelled(task.task_id, task.status_message, redactor=redactor)
    raise ValueError(f"the task is {task.status}, not terminal")

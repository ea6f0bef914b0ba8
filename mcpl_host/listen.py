"""``subscriptions/listen`` of MCP 2026-07-28, as pure rules: what the host listens for, how
it reads the stream's frames, and what follows the end of a stream.

Sources: MCP 2026-07-28 "Subscriptions" (opening a stream, the notification filter,
acknowledgment, receiving notifications, multiple concurrent subscriptions, cancellation)
and "Cancellation" (transport-specific cancellation; a server ends a stream over stdio with
``notifications/cancelled``). The project's reading: docs/protocol.md S9. The I/O lives in
``mcp_methods.MCPClient``.

Rules of this module:

- One listen per connection, when there is something to listen for (``wanted_filter``):
  ``toolsListChanged`` / ``resourcesListChanged`` / ``promptsListChanged`` for each list the
  application has listed whose capability says ``listChanged``, and ``resourceSubscriptions``
  for the URIs it subscribed to (``subscribe_resource``; sorted, so the same set gives the
  same filter), and ``taskIds`` for the tasks being waited on when the server advertises
  the tasks extension (the listen then declares it). A change of the filter re-issues the
  listen; the old one is cancelled.
- A resource subscription needs the server's ``resources.subscribe`` (``may_subscribe``);
  one the server's acknowledgment leaves out is refused (``honors_uri``).
- Frames carry the listen's id in ``_meta`` (``subscription_id``); the acknowledgment's
  ``notifications`` is the filter honored (``acknowledged_filter``).
- The end of a stream (``after_end``): the server's result (graceful close), its
  ``notifications/cancelled``, or an error it sent ends the listening until the filter next
  changes; a stream the transport lost (an error answer made by the host, ``fromHost``) is
  listened to again, after ``Limits.listen_restart_delay_seconds``, at most
  ``Limits.max_listen_restarts`` times in a row without an acknowledgment between them;
  once such a listen is acknowledged, the lists listed are listed again (there is no
  replay: a change made meanwhile was not announced).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Literal

from mcpl_host.jsonrpc.values import JSONObject, is_object
from mcpl_host.mcp_tasks import TASKS_EXTENSION

__all__ = [
    "ACKNOWLEDGED",
    "FILTER_KEYS",
    "LISTEN",
    "SUBSCRIPTION_ID_KEY",
    "TASK_IDS",
    "Ending",
    "acknowledged_filter",
    "after_end",
    "ending_of_error",
    "honors_uri",
    "may_subscribe",
    "subscription_id",
    "wanted_filter",
]

LISTEN = "subscriptions/listen"
#: The filter field of the task status notifications (the tasks extension).
TASK_IDS = "taskIds"
ACKNOWLEDGED = "notifications/subscriptions/acknowledged"
#: The ``_meta`` key of every frame of a listen stream; its value is the listen's JSON-RPC id.
SUBSCRIPTION_ID_KEY = "io.modelcontextprotocol/subscriptionId"
#: The filter field of each list whose changes a listen may ask for.
FILTER_KEYS: dict[str, str] = {
    "tools": "toolsListChanged",
    "resources": "resourcesListChanged",
    "prompts": "promptsListChanged",
}

#: How a listen stream ended: ``graceful`` (the server's result), ``cancelled`` (the
#: server's ``notifications/cancelled``), ``refused`` (an error the server sent), ``lost``
#: (the transport lost the stream: an error answer made by the host).
Ending = Literal["graceful", "cancelled", "refused", "lost"]


def _capability(capabilities: Mapping[str, object], name: str) -> Mapping[str, Any]:
    value = capabilities.get(name)
    return value if is_object(value) else {}


def wanted_filter(
    capabilities: Mapping[str, object],
    listed: Collection[str],
    resources: Collection[str],
    tasks: Collection[str] = (),
) -> dict[str, Any] | None:
    """The ``SubscriptionFilter`` the host listens with (module rules), or None when there is
    nothing to listen for. ``capabilities``: the server's (its discover result);
    ``listed``: the lists the application listed (``"tools"``, ``"resources"``,
    ``"prompts"``); ``resources``: the URIs it subscribed to; ``tasks``: the ids of the
    tasks being waited on, asked for as ``taskIds`` (sorted) when the server advertises the
    tasks extension (its "Task Status Notifications"; docs/protocol.md TK6)."""
    wanted: JSONObject = {}
    for name, key in FILTER_KEYS.items():
        if name in listed and _capability(capabilities, name).get("listChanged") is True:
            wanted[key] = True
    if resources:
        wanted["resourceSubscriptions"] = sorted(resources)
    if tasks and TASKS_EXTENSION in _capability(capabilities, "extensions"):
        wanted[TASK_IDS] = sorted(tasks)
    return wanted or None


def may_subscribe(capabilities: Mapping[str, object]) -> bool:
    """Whether the server advertises ``resources.subscribe`` (MCP 2025-11-25 "Resources",
    capabilities; in 2026-07-28 served through ``resourceSubscriptions``)."""
    return _capability(capabilities, "resources").get("subscribe") is True


def subscription_id(params: object) -> Any:
    """The ``_meta`` subscription id of a notification's params (None when absent)."""
    meta = params.get("_meta") if is_object(params) else None
    return meta.get(SUBSCRIPTION_ID_KEY) if is_object(meta) else None


def acknowledged_filter(params: object) -> JSONObject:
    """The filter an acknowledgment says the server honors (``{}`` when it sent none)."""
    honored = params.get("notifications") if is_object(params) else None
    return dict(honored) if is_object(honored) else {}


def honors_uri(honored: Mapping[str, object], uri: str) -> bool:
    """Whether an acknowledged filter keeps the resource subscription ``uri``."""
    uris = honored.get("resourceSubscriptions")
    return isinstance(uris, list) and uri in uris


def ending_of_error(data: object) -> Ending:
    """How a listen that failed with an error answer ended: ``lost`` when the host made the
    answer (``data.fromHost``: the transport lost the stream), else ``refused``."""
    return "lost" if is_object(data) and data.get("fromHost") is True else "refused"


def after_end(ending: Ending, *, restarts: int, max_restarts: int) -> Literal["listen", "stop"]:
    """What follows the end of a listen stream (module rules): ``listen`` again (a lost
    stream, fewer than ``max_restarts`` restarts in a row), or ``stop`` until the filter
    changes. ``restarts``: restarts since the last acknowledgment."""
    if ending == "lost" and restarts < max_restarts:
        return "listen"
    return "stop"

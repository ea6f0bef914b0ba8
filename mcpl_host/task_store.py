"""The tasks the command line has seen (the MCP tasks extension, "Task Polling": clients
SHOULD persist task ids so that polling can resume after a restart), in one small JSON file:
``$XDG_STATE_HOME/mcpl-host/tasks.json`` (``~/.local/state`` when ``XDG_STATE_HOME`` is
unset, empty or relative). docs/protocol.md TK9.

Rules of this module:

- An entry per task id: ``{"taskId", "server", "tool", "status", "createdAt", "ttlMs",
  "seenAt"}``; ``server`` is the server's name in logs (``HostedServer.name``: the config
  entry's name, or one made from the command or URL, with no secret); ``seenAt`` the host's UTC time
  of the last state seen. A newer state of a task replaces its entry; the newest
  ``MAX_TASKS`` entries are kept (``recorded``, pure).
- The file is written whole and atomically (a temporary file in the same directory,
  flushed to disk, then renamed over it), owner-only (a server MAY use task ids as bearer
  tokens: the specification's "Security Considerations"), under an exclusive lock of
  ``tasks.json.lock`` so that two commands never lose each other's entries. A file that
  cannot be read (missing, not JSON, not the shape) is an empty store; an entry of the
  wrong shape is dropped.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Generator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeGuard

from mcpl_host.jsonrpc.values import is_array, is_object
from mcpl_host.mcp_tasks import Task

__all__ = ["MAX_TASKS", "STORE_FILE", "TaskStore", "default_store_path", "entry", "recorded"]

#: Entries kept, newest first (a host-wide bound of the command line, not per server).
MAX_TASKS = 1000
STORE_FILE = Path("mcpl-host", "tasks.json")
_KEYS = ("taskId", "server", "tool", "status", "createdAt", "ttlMs", "seenAt")


def default_store_path(environ: Mapping[str, str], home: Path) -> Path:
    """``$XDG_STATE_HOME/mcpl-host/tasks.json``, or under ``~/.local/state`` (module rules)."""
    state = environ.get("XDG_STATE_HOME", "")
    base = Path(state) if state and Path(state).is_absolute() else home / ".local" / "state"
    return base / STORE_FILE


def entry(task: Task, *, server: str, tool: str | None, seen_at: str) -> dict[str, Any]:
    """The entry of one state of a task (module rules)."""
    return {
        "taskId": task.task_id,
        "server": server,
        "tool": tool,
        "status": task.status,
        "createdAt": task.created_at,
        "ttlMs": task.ttl_ms,
        "seenAt": seen_at,
    }


def _valid(value: object) -> TypeGuard[dict[str, Any]]:
    return is_object(value) and set(value) == set(_KEYS) and isinstance(value.get("taskId"), str)


def recorded(
    entries: Sequence[Mapping[str, Any]], new: Mapping[str, Any], *, keep: int = MAX_TASKS
) -> list[dict[str, Any]]:
    """``entries`` (newest first) with ``new`` first in place of the entry of its task, at
    most ``keep`` of them. A ``tool`` the new state does not know (None) is the old
    entry's."""
    old = next((e for e in entries if e.get("taskId") == new["taskId"]), None)
    merged = dict(new)
    if merged.get("tool") is None and old is not None:
        merged["tool"] = old.get("tool")
    rest = [dict(e) for e in entries if e.get("taskId") != new["taskId"]]
    return [merged, *rest][:keep]


class TaskStore:
    """The store file at ``path`` (module rules)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def entries(self) -> list[dict[str, Any]]:
        """The entries, newest first (``[]`` when the file is missing or unreadable)."""
        try:
            value = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        items = value.get("tasks") if is_object(value) else None
        return [dict(item) for item in items if _valid(item)] if is_array(items) else []

    def find(self, task_id: str) -> dict[str, Any] | None:
        """The entry of ``task_id``, or None."""
        return next((e for e in self.entries() if e["taskId"] == task_id), None)

    def record(self, task: Task, *, server: str, tool: str | None = None) -> None:
        """Keep the state ``task`` (module rules). Raises ``OSError`` when the file cannot be
        written."""
        seen_at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        with self._locked():
            self._write(recorded(self.entries(), entry(task, server=server, tool=tool, seen_at=seen_at)))

    def forget(self, task_id: str) -> bool:
        """Drop the entry of ``task_id`` (the server no longer keeps it); whether there was one.
        Raises ``OSError`` when the file cannot be written."""
        with self._locked():
            entries = self.entries()
            kept = [e for e in entries if e["taskId"] != task_id]
            if len(kept) != len(entries):
                self._write(kept)
            return len(kept) != len(entries)

    @contextlib.contextmanager
    def _locked(self) -> Generator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _write(self, entries: list[dict[str, Any]]) -> None:
        temporary = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"tasks": entries}, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, self.path)

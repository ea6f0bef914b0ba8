"""``mcpl-host task get | cancel | list``: the tasks of the MCP tasks extension
(``io.modelcontextprotocol/tasks``, MCP 2026-07-28) from the command line; ``call --async``
(``mcpl_host.cli_call``) makes one. docs/protocol.md TK1-TK9.

Rules of this module:

- ``get ID`` and ``cancel ID`` take the server options of ``call`` (``cli_target``: a command
  after ``--``, ``--url``, ``--config``...) and its client feature options (``--elicit-reply``,
  ``--sampling-reply``, ``--root``, ``--ask``: what answers a task's input requests while
  ``get --wait`` waits). A new process finds a task by its id alone: the server keeps it.
- ``get ID`` prints the task (``tasks/get``) as one JSON document; ``--wait`` polls it until
  it is terminal, answering its input requests (``MCPClient.wait_task``). With ``--text``:
  a completed task's text content, else its status (and status message). ``cancel ID``
  sends ``tasks/cancel`` and prints the task as the server then tells it.
- Every state seen is kept in the task store (``task_store``); a task the server no longer
  knows (``-32602``) is dropped from it. ``list`` prints the store (no server is asked).
- **Exit status** as ``call``'s: 0 done (any status, ``cancelled`` included); 1 the task
  ``failed`` or completed with ``isError``, the server answered an error (an unknown task),
  or failed; 2 usage error (a handshake-era server: the extension needs MCP 2026-07-28);
  130 interrupted.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from mcpl_host import report
from mcpl_host.cli_call import (
    Outcome,
    UsageProblem,
    finish,
    keep_task,
    server_command,
    text_option,
)
from mcpl_host.cli_target import EXIT_OK, EXIT_SERVER_FAILED, server_options
from mcpl_host.jsonrpc.errors import LocalProtocolError, RemoteError
from mcpl_host.jsonrpc.values import is_array, is_object
from mcpl_host.mcp_tasks import Task
from mcpl_host.probe_features import client_feature_options
from mcpl_host.server_connection import ServerConnection
from mcpl_host.task_store import TaskStore, default_store_path

__all__ = ["task"]

#: ``-32602`` Invalid params: the server does not know the task (the specification, "Error
#: Handling").
UNKNOWN_TASK = -32602


def _store() -> TaskStore:
    return TaskStore(default_store_path(os.environ, Path.home()))


def _texts(task: Task) -> list[str]:
    if task.status == "completed" and task.result is not None:
        content = task.result.get("content")
        blocks = [b for b in content if is_object(b)] if is_array(content) else []
        return [text for b in blocks if isinstance(text := b.get("text"), str)]
    return [task.status + (f": {task.status_message}" if task.status_message else "")]


def _outcome(task: Task) -> Outcome:
    """The task as ``get`` and ``cancel`` print it (module rules)."""
    document = task.to_json()
    if task.status == "failed" and task.error is not None:
        message = task.error.get("message")
        shown = message if isinstance(message, str) else ""
        return Outcome(document, _texts(task), EXIT_SERVER_FAILED, f"the task failed: {shown}")
    if task.status == "completed" and task.result is not None and task.result.get("isError") is True:
        return Outcome(document, _texts(task), EXIT_SERVER_FAILED, "the tool answered isError")
    return Outcome(document, _texts(task), EXIT_OK)


async def _current(conn: ServerConnection, task_id: str) -> Task:
    """``tasks/get``, the store kept in step (module rules)."""
    try:
        return await conn.mcp.get_task(task_id)
    except LocalProtocolError as exc:
        raise UsageProblem(str(exc)) from None
    except RemoteError as exc:
        if exc.code == UNKNOWN_TASK:
            try:
                if _store().forget(task_id):
                    click.echo("note: the server no longer keeps this task; it left the task store", err=True)
            except OSError:
                pass
        raise


async def _get(conn: ServerConnection, task_id: str, wait: bool) -> Outcome:
    known = _store().find(task_id)
    tool = known["tool"] if known is not None else None
    state = await _current(conn, task_id)
    keep_task(conn, state, tool)
    if wait and not state.terminal:
        statuses = [state.status]

        def seen(task: Task) -> None:
            if task.status != statuses[-1]:
                statuses.append(task.status)
                keep_task(conn, task, tool)

        state = await conn.mcp.wait_task(state, on_task=seen)
    return _outcome(state)


async def _cancel(conn: ServerConnection, task_id: str) -> Outcome:
    try:
        await conn.mcp.cancel_task(task_id)
    except LocalProtocolError as exc:
        raise UsageProblem(str(exc)) from None
    state = await _current(conn, task_id)
    keep_task(conn, state, None)
    return _outcome(state)


@click.group(name="task", context_settings={"max_content_width": 100})
def task() -> None:
    """Follow and cancel MCP tasks (the io.modelcontextprotocol/tasks extension).

    'mcpl-host call --async TOOL ...' starts one and prints it; the task's id is kept in
    $XDG_STATE_HOME/mcpl-host/tasks.json.
    """


@server_command(
    """\b
Examples:
  mcpl-host task get 786512e2 -- python fixtures/tasks_server.py --state tasks-state.json
  mcpl-host task get --wait --text 786512e2 --url http://127.0.0.1:8000/mcp"""
)
@click.argument("task_id", metavar="ID")
@click.option("--wait", is_flag=True, help="Poll until the task ends, answering its input requests.")
@text_option
@client_feature_options
@server_options(verb="ask")
@click.pass_context
def get(ctx: click.Context, /, task_id: str, wait: bool, as_text: bool, **options: Any) -> None:
    """Print the task ID of a server (tasks/get) as JSON.

    \b
    Exit status:
      0    done (the task is working, input_required, completed or cancelled)
      1    the task failed or its result has isError, the server does not know it, or failed
      2    usage error, a server without the stateless era (MCP 2026-07-28)
      130  interrupted by Ctrl-C (or SIGTERM, SIGHUP)
    """
    finish(ctx, options, lambda conn: _get(conn, task_id, wait), as_text=as_text)


@server_command(
    """\b
Examples:
  mcpl-host task cancel 786512e2 --url http://127.0.0.1:8000/mcp"""
)
@click.argument("task_id", metavar="ID")
@client_feature_options
@server_options(verb="ask")
@click.pass_context
def cancel(ctx: click.Context, /, task_id: str, **options: Any) -> None:
    """Cancel the task ID of a server (tasks/cancel) and print it as the server then tells it.

    Cancellation is cooperative: the server may still finish the task.

    \b
    Exit status:
      0    cancel sent (the task's status is printed)
      1    the server does not know the task, or failed
      2    usage error, a server without the stateless era (MCP 2026-07-28)
      130  interrupted by Ctrl-C (or SIGTERM, SIGHUP)
    """
    finish(ctx, options, lambda conn: _cancel(conn, task_id), as_text=False)


@click.command(name="list")
@click.option("--json", "as_json", is_flag=True, help='One JSON document: {"tasks": [...]}.')
def list_tasks(as_json: bool) -> None:
    """Print the tasks kept in the task store, newest first (no server is asked)."""
    entries = _store().entries()
    if as_json or not sys.stdout.isatty():
        report.print_json({"tasks": entries})
        return
    for item in entries:
        click.echo(
            "  ".join(
                report.safe_text(str(item[key]), max_chars=80)
                for key in ("taskId", "status", "tool", "server", "seenAt")
            )
        )


task.add_command(get)
task.add_command(cancel)
task.add_command(list_tasks)

"""``mcpl-host call``, ``read``, ``prompt`` and ``send``: one request to one server, for people
and for scripts (``mcpl-host call add a=1 b=2 | jq .structuredContent``).

Rules of this module:

- **The server** is selected as for ``probe`` (``mcpl_host.cli_target``: a command after
  ``--``, by default the bundled demo server; ``--ws URL``; ``--url URL``; ``--config FILE
  --server NAME``), with the same environment, timeout, policy (default: grant everything
  advertised) and logging options. The server command comes last: every word after the
  first ``--`` is the command, the words before it are the request's
  (``call add a=1 b=2 -- python server.py``).
- **Arguments** (``call``, ``prompt``): one JSON object, or ``key=value`` words coerced by
  the tool's ``inputSchema`` and checked against it before anything is sent
  (``mcpl_host.coerce``); the tool or prompt must be in the server's list. A schema the
  validator cannot use is named in a warning on stderr and the arguments go unchecked.
  A name the tool or prompt does not declare is refused first, naming the closest declared
  one (``coerce.unknown_arguments``, docs/protocol.md CL1; ``call --allow-unknown`` sends
  it). ``send METHOD [PARAMS]`` sends PARAMS (a JSON object or array) as they are.
- **Client features.** Every command takes probe's ``--root``, ``--sampling-reply``,
  ``--elicit-reply`` and ``--ask`` (``probe_features.client_feature_options``): a server
  that asks for roots, sampling or elicitation during the request is answered, and one
  that offers a tool only to a host advertising sampling offers it.
- **Output.** stdout carries exactly one JSON document (indent 2): the result as the
  server sent it (``call``: ``content``, ``structuredContent``, ``isError``...; ``read``:
  ``contents``; ``prompt``: ``messages``; ``send``: whatever the result is), or
  ``{"error": {"code", "message", "data"}}`` when the server answered an error. With
  ``--text``, the text alone instead (``call``: the text blocks; ``read``: the text
  contents; ``prompt``: the text of each message), one after another on their own lines,
  escaped (``report.safe_text``, newlines kept) when stdout is a terminal, as sent
  otherwise; what has no text form (an image, audio, a resource, a blob) is named in one
  line on stderr (``cli_text.not_shown``). Every value is redacted with the server's
  ``Redactor`` first. Nothing else goes
  to stdout: errors are one sentence on stderr (with the server's stderr tail when it
  failed), logs go to stderr.
- **Exit status:** 0 done; 1 the result has ``isError``, the server answered an error, or
  the server failed (did not start, exited, timed out); 2 usage error, unknown tool or
  prompt, arguments that do not fit (nothing sent); 130 interrupted.
- **Progress.** When stderr is a terminal, a line says what is awaited while the command
  runs (``mcpl_host.progress``; erased before the output), and each
  ``notifications/progress`` of the call (MCP 2025-11-25 "Progress") is one line on stderr:
  ``progress 2/5: step 2``.
- Ctrl-C, SIGTERM and SIGHUP cancel the request (the server is sent
  ``notifications/cancelled``), close the server and exit 130.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

import anyio
import click

from mcpl_host import report
from mcpl_host.cli_target import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_SERVER_FAILED,
    EXIT_USAGE,
    Selection,
    allow_unknown_option,
    end_children,
    own_children,
    select_servers,
    server_options,
)
from mcpl_host.cli_text import not_shown
from mcpl_host.coerce import (
    ArgumentError,
    UnusableSchema,
    checked_schema_problems,
    parse_arguments,
    parse_json,
    prompt_arguments,
    unknown_arguments,
)
from mcpl_host.handlers import HostHandlers
from mcpl_host.jsonrpc.errors import LocalProtocolError, MCPLHostError, RemoteError
from mcpl_host.jsonrpc.values import JSONObject
from mcpl_host.logging import configure_logging, escape_text
from mcpl_host.mcp_tasks import Task
from mcpl_host.probe_features import client_feature_options, exit_now_if_abandoned, feature_handlers
from mcpl_host.progress import progress
from mcpl_host.server_connection import ServerConnection
from mcpl_host.signals import StopRouter
from mcpl_host.task_store import TaskStore, default_store_path

__all__ = [
    "Outcome",
    "ServerCommandLast",
    "UsageProblem",
    "call",
    "finish",
    "keep_task",
    "prompt",
    "read",
    "send",
    "server_command",
    "text_option",
]

#: ``ctx.meta`` key of the words after ``--``.
SERVER_COMMAND = "mcpl_host.server_command"
#: Names listed in "it has: ..." when a tool or prompt is unknown.
MAX_NAMES_LISTED = 30


class ServerCommandLast(click.Command):
    """A command whose words after the first ``--`` are the server command, so that its own
    arguments may come before it (``call TOOL ARGS... -- COMMAND...``)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            at = args.index("--")
            ctx.meta[SERVER_COMMAND] = tuple(args[at + 1 :])
            args = args[:at]
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return [*super().collect_usage_pieces(ctx), "[-- COMMAND [ARG...]]"]


class UsageProblem(Exception):
    """The request cannot be made as asked (exit 2); ``str()`` is one or more lines."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one request gave: ``document`` (the JSON value for stdout), ``text`` (for
    ``--text``; None: no text form), ``status`` (exit status), ``message`` (a sentence for
    stderr, or None)."""

    document: Any
    text: list[str] | None = None
    status: int = EXIT_OK
    message: str | None = None
    #: What the text form leaves out (content blocks, resource contents), for ``--text``.
    hidden: list[Any] = field(default_factory=list[Any])


Action = Callable[[ServerConnection], Awaitable[Outcome]]


def _names(items: Sequence[str]) -> str:
    shown = ", ".join(report.safe_text(name, max_chars=80) for name in items[:MAX_NAMES_LISTED])
    more = f", and {len(items) - MAX_NAMES_LISTED} more" if len(items) > MAX_NAMES_LISTED else ""
    return (shown + more) or "none"


def _objects(value: object) -> list[dict[str, Any]]:
    """The JSON objects of ``value`` (a list of them, or one)."""
    items = cast("list[object]", value) if isinstance(value, list) else [value]
    return [cast("dict[str, Any]", item) for item in items if isinstance(item, dict)]


def _texts(blocks: object) -> list[str]:
    """The ``text`` of each text content block (a block, or a list of them)."""
    return [text for block in _objects(blocks) if isinstance(text := block.get("text"), str)]


def _capabilities(conn: ServerConnection) -> JSONObject:
    info = conn.server_info
    return info.capabilities if info is not None else {}


def _progress_line(params: Mapping[str, object]) -> None:
    progress, total, message = params.get("progress"), params.get("total"), params.get("message")
    line = f"progress {report.safe_text(progress, max_chars=40)}"
    if total is not None:
        line += f"/{report.safe_text(total, max_chars=40)}"
    if message is not None:
        line += f": {report.safe_text(message)}"
    click.echo(line, err=True)


def progress_callback() -> Callable[[dict[str, Any]], None] | None:
    """A progress callback printing on stderr when stderr is a terminal, else None."""
    return _progress_line if sys.stderr.isatty() else None


class _Named(Protocol):
    @property
    def name(self) -> str: ...


_Offer = TypeVar("_Offer", bound=_Named)


def _require(conn: ServerConnection, capability: str) -> None:
    """Raises UsageProblem: the server does not advertise ``capability`` ("tools", "prompts")."""
    if capability not in _capabilities(conn):
        raise UsageProblem(f"the server offers no {capability} (no '{capability}' capability)")


def _named(offers: Sequence[_Offer], name: str, kind: str) -> _Offer:
    """The offer called ``name`` (a ``kind``: "tool", "prompt").

    Raises:
        UsageProblem: there is none; the message lists the names there are.
    """
    found = next((offer for offer in offers if offer.name == name), None)
    if found is None:
        raise UsageProblem(
            f"the server has no {kind} {report.safe_text(name)!r} (it has: {_names([o.name for o in offers])})"
        )
    return found


def keep_task(conn: ServerConnection, task: Task, tool: str | None) -> None:
    """Keep a state of ``task`` in the task store (``task_store``; docs/protocol.md TK9); a
    store that cannot be written is one warning line on stderr."""
    try:
        TaskStore(default_store_path(os.environ, Path.home())).record(
            task, server=conn.hosted.name, tool=tool
        )
    except OSError as exc:
        click.echo(f"warning: the task was not kept in the task store: {exc.strerror or exc}", err=True)


async def _call_tool(
    conn: ServerConnection,
    tool: str,
    words: Sequence[str],
    allow_unknown: bool = False,
    run_async: bool = False,
) -> Outcome:
    _require(conn, "tools")
    found = _named(await conn.mcp.list_tools(), tool, "tool")
    try:
        arguments = parse_arguments(words, found.input_schema)
        if not allow_unknown:  # docs/protocol.md CL1
            unknown_arguments(list(arguments), found.input_schema, tool=tool)
    except ArgumentError as exc:
        raise UsageProblem(f"{exc}; nothing was sent") from None
    try:
        problems = await checked_schema_problems(
            arguments,
            found.input_schema,
            seconds=conn.hosted.limits.max_schema_check_seconds,
            inline_work=conn.hosted.limits.max_inline_schema_work,
        )
    except UnusableSchema as exc:
        click.echo(
            f"warning: the inputSchema of {report.safe_text(tool)!r} cannot be checked: {exc}; "
            "sending the arguments unchecked",
            err=True,
        )
        problems = []
    if problems:
        lines = "\n  ".join(report.safe_text(p, max_chars=500) for p in problems)
        raise UsageProblem(
            f"the arguments do not fit the inputSchema of {tool!r}; nothing was sent:\n  {lines}"
        )
    if run_async:  # docs/protocol.md TK9: the task is made, its id printed and kept
        try:
            started = await conn.mcp.start_tool_task(tool, arguments)
        except LocalProtocolError as exc:
            raise UsageProblem(f"--async: {exc}; nothing was sent") from None
        if isinstance(started, Task):
            keep_task(conn, started, tool)
            return Outcome(started.to_json(), [started.task_id])
        click.echo("note: the server answered at once; no task was made", err=True)
        result = started
    else:
        result = await conn.mcp.call_tool(tool, arguments, progress=progress_callback())
    hidden = _objects(result.raw.get("content"))
    if result.is_error:
        return Outcome(
            result.raw, _texts(result.content), EXIT_SERVER_FAILED, "the tool answered isError", hidden
        )
    return Outcome(result.raw, _texts(result.content), hidden=hidden)


async def _read(conn: ServerConnection, uri: str) -> Outcome:
    result = await conn.mcp.read_resource(uri)
    texts = [c.text for c in result.contents if c.text is not None]
    return Outcome(result.raw, texts, hidden=_objects(result.raw.get("contents")))


async def _prompt(conn: ServerConnection, name: str, words: Sequence[str]) -> Outcome:
    _require(conn, "prompts")
    found = _named(await conn.mcp.list_prompts(), name, "prompt")
    try:
        arguments = prompt_arguments(words, _objects(found.raw.get("arguments")), prompt=name)
    except ArgumentError as exc:
        raise UsageProblem(f"{exc}; nothing was sent") from None
    result = await conn.mcp.get_prompt(name, arguments)
    hidden = [
        block
        for message in _objects(result.raw.get("messages"))
        for block in _objects(message.get("content"))
    ]
    texts = [text for message in result.messages for text in _texts(message.content)]
    return Outcome(result.raw, texts, hidden=hidden)


async def _send(conn: ServerConnection, method: str, params: Any) -> Outcome:
    return Outcome(await conn.mcp.request(method, params))


@dataclass(frozen=True, slots=True)
class _Done:
    outcome: Outcome
    redactor: Any
    failure: dict[str, Any] | None = None  # report.error_object of a server that failed


async def _run(selection: Selection, action: Action, handlers: HostHandlers | None = None) -> _Done:
    """Connect (``handlers``: those of the client feature options, else the defaults), run
    ``action``, close (module rules)."""
    conn = selection.hosted(handlers=handlers or HostHandlers()).open_connection()
    interrupts = StopRouter()
    outcome = Outcome(None, status=EXIT_INTERRUPTED, message="interrupted")
    async with anyio.create_task_group() as tg:
        await tg.start(interrupts.watch)
        try:
            with interrupts.phase() as scope:
                async with conn:
                    outcome = await action(conn)
                    interrupts.armed = False  # closing is bounded: never interrupted
            if scope.cancelled_caught:
                outcome = Outcome(
                    None, status=EXIT_INTERRUPTED, message=f"interrupted by {interrupts.reason}"
                )
        except UsageProblem as exc:
            outcome = Outcome(None, status=EXIT_USAGE, message=str(exc))
        except RemoteError as exc:
            error = {"code": exc.code, "message": exc.message, "data": exc.data}
            outcome = Outcome({"error": error}, status=EXIT_SERVER_FAILED, message=str(exc))
        except (MCPLHostError, OSError) as exc:
            failure = report.error_object(exc, conn.connection.stderr_tail)
            return _Done(Outcome(None, status=EXIT_SERVER_FAILED), conn.hosted.redactor, failure)
        finally:
            tg.cancel_scope.cancel()
    return _Done(outcome, conn.hosted.redactor)


def finish(
    ctx: click.Context,
    options: dict[str, Any],
    action: Action,
    *,
    as_text: bool,
    show: Callable[[Any], None] | None = None,
) -> None:
    """Select the server from the command's ``options`` (``select_servers``), run ``action``
    against it, print the outcome, exit (module rules). ``show``: prints the outcome's
    document (redacted) instead of the JSON (``tools``, ``resources``, ``prompts``'s tables,
    ``mcpl_host.cli_list``)."""
    selection = select_servers(ctx, options, tuple(ctx.meta.get(SERVER_COMMAND, ())))
    handlers = feature_handlers(
        options["roots"], options["sampling_reply"], options["elicit_reply"], options["ask"]
    )
    configure_logging(options["log_level"])
    owned = own_children(not options["no_subreaper"])
    server = selection.only.name or selection.only.describe
    try:
        # On a terminal, a line while the server is awaited (cleared before any output; not
        # with --ask, whose questions have the terminal).
        waiting = f"waiting for {report.safe_text(server, max_chars=60)}… (Ctrl-C stops)"
        with progress(waiting, enabled=not options["ask"]):
            done = anyio.run(_run, selection, action, handlers, backend="asyncio")
    except KeyboardInterrupt:  # Ctrl-C before the signal receiver was in place
        end_children(owned)
        exit_now_if_abandoned(EXIT_INTERRUPTED)
        ctx.exit(EXIT_INTERRUPTED)
    end_children(owned)
    outcome, redactor = done.outcome, done.redactor
    if done.failure is not None:  # the server failed: the sentence and its stderr tail
        shown = report.redact_json(done.failure, redactor)
        report.render_failure(report.ReportConsole(stderr=True, highlight=False), shown)
        ctx.exit(EXIT_SERVER_FAILED)
    if outcome.document is not None:
        if show is not None:
            show(report.redact_json(outcome.document, redactor))
        elif as_text and outcome.text is not None:  # an error answer has no text form
            terminal = sys.stdout.isatty()
            for text in report.redact_json(outcome.text, redactor):
                shown = report.safe_text(text, max_chars=len(text), newlines=True) if terminal else text
                click.echo(shown, nl=not shown.endswith("\n"))
            left_out = not_shown(report.redact_json(outcome.hidden, redactor))
            if left_out is not None:  # never dropped without a word
                click.echo(left_out, err=True)
        else:
            report.print_json(report.redact_json(outcome.document, redactor))
    if outcome.message is not None:
        click.echo(f"Error: {escape_text(outcome.message, quotes=False, newlines=True)}", err=True)
    exit_now_if_abandoned(outcome.status)  # a question left on the terminal (--ask)
    ctx.exit(outcome.status)


def server_command(epilog: str) -> Callable[[Callable[..., Any]], click.Command]:
    """The ``click.command`` of a command that acts on one server (``ServerCommandLast``)."""
    return click.command(cls=ServerCommandLast, context_settings={"max_content_width": 100}, epilog=epilog)


text_option = click.option(
    "--text", "as_text", is_flag=True, help="Print the text content alone, not the JSON document."
)


@server_command(
    """\b
Examples:
  mcpl-host call add a=2 b=3                          # the bundled demo server
  mcpl-host call add '{"a": 2, "b": 3}' | jq .structuredContent.sum
  mcpl-host call --text echo text=hello
  mcpl-host call --env DEMO_EXTRAS=1 --sampling-reply forty-two sample question=why
  mcpl-host call get_current_time timezone=Europe/Paris -- python -m mcp_server_time
  mcpl-host call --config servers.json --server demo now
  mcpl-host call --async --text count polls=3 -- python fixtures/tasks_server.py"""
)
@click.argument("tool")
@click.argument("arguments", nargs=-1, metavar="[KEY=VALUE...|JSON]")
@text_option
@click.option(
    "--async",
    "run_async",
    is_flag=True,
    help="Ask for a task (MCP tasks, 2026-07-28): print the task the server made (with --text, "
    "its id alone), keep its id, and exit without waiting; 'mcpl-host task get ID --wait' waits.",
)
@allow_unknown_option
@client_feature_options
@server_options(verb="call")
@click.pass_context
def call(
    ctx: click.Context,
    /,
    tool: str,
    arguments: tuple[str, ...],
    as_text: bool,
    run_async: bool,
    allow_unknown: bool,
    **options: Any,
) -> None:
    """Call the tool TOOL of a server and print its result as JSON.

    The arguments are one JSON object, or KEY=VALUE words read by the tool's inputSchema
    (a number, true/false, null, a JSON array or object where the schema says so; text
    otherwise), and are checked against the schema before the call. The result, as the
    server sent it (content, structuredContent, isError), is one JSON document on stdout.
    With --async the call asks for a task and prints the task instead (see 'mcpl-host task').

    \b
    Exit status:
      0    done
      1    the result has isError, the server answered an error, or it failed
      2    usage error, unknown tool, arguments that do not fit its schema: nothing sent
      130  interrupted by Ctrl-C (or SIGTERM, SIGHUP)
    """
    finish(
        ctx,
        options,
        lambda conn: _call_tool(conn, tool, arguments, allow_unknown, run_async),
        as_text=as_text,
    )


@server_command(
    """\b
Examples:
  mcpl-host read demo://readme
  mcpl-host read --text demo://readme"""
)
@click.argument("uri")
@text_option
@client_feature_options
@server_options(verb="read from")
@click.pass_context
def read(ctx: click.Context, /, uri: str, as_text: bool, **options: Any) -> None:
    """Read the resource URI of a server (resources/read) and print it as JSON.

    \b
    Exit status:
      0    done
      1    the server answered an error (an unknown URI), or it failed
      2    usage error
      130  interrupted by Ctrl-C (or SIGTERM, SIGHUP)
    """
    finish(ctx, options, lambda conn: _read(conn, uri), as_text=as_text)


@server_command(
    """\b
Examples:
  mcpl-host prompt greet name=Ada
  mcpl-host prompt --text greet '{"name": "Ada"}'"""
)
@click.argument("name")
@click.argument("arguments", nargs=-1, metavar="[KEY=VALUE...|JSON]")
@text_option
@client_feature_options
@server_options(verb="use")
@click.pass_context
def prompt(
    ctx: click.Context, /, name: str, arguments: tuple[str, ...], as_text: bool, **options: Any
) -> None:
    """Get the prompt NAME of a server (prompts/get) and print it as JSON.

    The arguments (strings) are one JSON object or KEY=VALUE words, checked against the
    arguments the prompt declares.

    \b
    Exit status:
      0    done
      1    the server answered an error, or it failed
      2    usage error, unknown prompt, an argument missing or unknown: nothing sent
      130  interrupted by Ctrl-C (or SIGTERM, SIGHUP)
    """
    finish(ctx, options, lambda conn: _prompt(conn, name, arguments), as_text=as_text)


@server_command(
    """\b
Examples:
  mcpl-host send ping
  mcpl-host send resources/list '{}'
  mcpl-host send logging/setLevel '{"level": "debug"}'"""
)
@click.argument("method")
@click.argument("params", required=False, metavar="[PARAMS]")
@client_feature_options
@server_options(verb="send to")
@click.pass_context
def send(ctx: click.Context, /, method: str, params: str | None, **options: Any) -> None:
    """Send the request METHOD with PARAMS (a JSON object or array) and print its result.

    A raw JSON-RPC request, after the usual handshake: nothing is checked but the JSON.

    \b
    Exit status:
      0    done
      1    the server answered an error, or it failed
      2    usage error
      130  interrupted by Ctrl-C (or SIGTERM, SIGHUP)
    """
    value: Any = None
    if params is not None:
        try:
            value = parse_json(params)
        except ValueError as exc:
            raise click.UsageError(f"PARAMS is not JSON: {exc}") from None
        if not isinstance(value, (dict, list)):
            raise click.UsageError("PARAMS must be a JSON object or array (JSON-RPC 2.0 §4.2)")
    finish(ctx, options, lambda conn: _send(conn, method, value), as_text=False)

"""The ``mcpl-host shell`` command: select the servers (``cli_target``), host them in a
``Host`` with the shell's handlers, and run the interactive or piped loop
(``shell.terminal``).

Rules of this module:

- The servers: a command after ``--`` (default: the bundled demo server), ``--ws URL``,
  ``--url URL``, ``--config FILE --server NAME``, or ``--config FILE`` alone for every enabled
  server of the file; the options are ``probe``'s (``cli_target.server_options``), with the
  same default policy (grant everything advertised; a config entry keeps its own unless
  ``--grant``/``--deny`` are given). Each server restarts per its restart policy.
- The shell serves ``inference/request``, ``sampling/createMessage`` and
  ``elicitation/create`` (both modes): each one is held until answered by hand
  (``shell.held``); ``--auto-answer TEXT`` answers inference and sampling with TEXT at once,
  ``--elicit-reply JSON|ACTION`` every elicitation.
  ``--root PATH`` serves ``roots/list`` (``client_features.Roots``); without it the host
  does not advertise roots.
- ``--allow-unknown``: ``call`` sends argument names the tool does not declare
  (docs/protocol.md CL1; refused otherwise, as by ``mcpl-host call``).
- History (interactive only): kept, redacted, in ``shell.terminal.default_history_file``
  unless ``--history FILE`` names another or ``--no-history`` keeps it in memory.
- Exit status: 0 when the session ended (interactive), or every piped command succeeded;
  1 when a piped command failed; 2 usage or configuration error; 130 interrupted before
  the session began.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import click

from mcpl_host.cli_target import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_SERVER_FAILED,
    allow_unknown_option,
    end_children,
    own_children,
    root_option,
    select_servers,
    server_options,
)
from mcpl_host.client_features import Roots
from mcpl_host.logging import configure_logging
from mcpl_host.probe_features import elicit_reply_option, elicitation_reply

if TYPE_CHECKING:
    from mcpl_host.handlers import HostHandlers
    from mcpl_host.recording import Recorder
    from mcpl_host.shell.session import Printer

# The session and the terminal (prompt_toolkit, some 90 ms to import; rich) load when a
# shell starts: `mcpl-host --help` imports this module to list the command.

__all__ = ["shell"]


async def _session(
    servers: dict[str, Any],
    auto_answer: str | None,
    auto_elicit: str | None,
    roots: Roots | None,
    history: str | None,
    log_level: str,
    allow_unknown: bool = False,
    recorder: Recorder | None = None,
) -> int:
    from mcpl_host.host import Host
    from mcpl_host.shell.held import HeldRequests, ShellHandlers
    from mcpl_host.shell.session import Session
    from mcpl_host.shell.terminal import PipePrinter, TerminalPrinter, interactive, is_interactive, piped

    held = HeldRequests()

    def handlers(name: str) -> HostHandlers:
        timeout = servers[name].limits.held_request_timeout_seconds
        return ShellHandlers(
            name, held, auto_answer=auto_answer, auto_elicit=auto_elicit, timeout=timeout, roots=roots
        )

    terminal = is_interactive()
    if terminal:
        from prompt_toolkit.patch_stdout import patch_stdout

        with patch_stdout(raw=True):
            configure_logging(log_level, stream=sys.stderr)  # above the prompt too
            async with Host(servers, handlers_factory=handlers, record=recorder) as host:
                session = Session(host, held, TerminalPrinter(), current=host.servers[0])
                session.allow_unknown = allow_unknown
                await interactive(session, history=history)
        return EXIT_OK
    configure_logging(log_level)
    printer: Printer = PipePrinter()
    async with Host(servers, handlers_factory=handlers, record=recorder) as host:
        session = Session(host, held, printer, current=host.servers[0])
        session.allow_unknown = allow_unknown
        await piped(session)
    return EXIT_SERVER_FAILED if session.failures else EXIT_OK


@click.command(
    context_settings={"max_content_width": 100},
    epilog="""\b
Examples:
  mcpl-host shell                                   # the bundled demo MCPL server
  mcpl-host shell --env DEMO_EXTRAS=1               # ... with ask, sample and form (held for you)
  mcpl-host shell -- python -m mcp_server_time
  mcpl-host shell --config servers.json             # every server of the file
  printf 'tools\\ncall add a=1 b=2\\n' | mcpl-host shell""",
)
@server_options(verb="use", stderr_level=False, many=True)
@click.option(
    "--auto-answer",
    metavar="TEXT",
    help="Answer every inference/request and sampling/createMessage with TEXT (default: hold "
    "each one until you answer it: pending, answer ID TEXT; elicitations are always held).",
)
@elicit_reply_option
@root_option
@allow_unknown_option
@click.option(
    "--history",
    "history",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Keep the command history in FILE (lines redacted); default: "
    "$XDG_STATE_HOME/mcpl-host/shell_history (~/.local/state when unset).",
)
@click.option(
    "--no-history",
    "no_history",
    is_flag=True,
    help="Keep the command history for this session only (nothing written).",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- COMMAND [ARG...]]")
@click.pass_context
def shell(
    ctx: click.Context,
    /,
    auto_answer: str | None,
    elicit_reply: str | None,
    roots: tuple[str, ...],
    allow_unknown: bool,
    history: str | None,
    no_history: bool,
    command: tuple[str, ...],
    **options: Any,
) -> None:
    """Talk to MCPL and MCP servers interactively: call tools, read resources, get prompts,
    change the grant, restart, answer inference, sampling and elicitation requests by hand,
    and watch what the servers send as it arrives.

    Starts COMMAND (or dials --ws URL or --url URL, or starts --server NAME or every server
    of --config FILE; with none of these, the bundled demo MCPL server). Type help for the
    commands; Tab completes commands, server, tool, resource and prompt names and argument
    names. With stdin not a terminal, reads one command per line and exits at its end.

    \b
    Exit status:
      0    the session ended (piped: every command succeeded)
      1    piped: a command failed
      2    usage or configuration error
      130  interrupted before the session began
    """
    selection = select_servers(ctx, options, command, many=True)
    if no_history and history is not None:
        raise click.UsageError("--history FILE and --no-history exclude each other")
    if not no_history and history is None:
        from mcpl_host.shell.terminal import default_history_file

        history = str(default_history_file(os.environ, Path.home()))
    try:
        served = Roots(list(roots)) if roots else None
    except ValueError as exc:
        raise click.UsageError(f"--root: {exc}") from None
    if elicit_reply is not None:
        try:
            elicitation_reply(elicit_reply)
        except ValueError:  # never repeats the reply
            raise click.UsageError(
                "--elicit-reply must be a JSON object, accept, decline or cancel"
            ) from None
    owned = own_children(not options["no_subreaper"])
    try:
        status = anyio.run(
            _session,
            selection.servers,
            auto_answer,
            elicit_reply,
            served,
            history,
            options["log_level"],
            allow_unknown,
            selection.recorder,
            backend="asyncio",
        )
    except KeyboardInterrupt:
        status = EXIT_INTERRUPTED
    end_children(owned)
    ctx.exit(status)

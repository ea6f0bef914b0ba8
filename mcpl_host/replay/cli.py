"""``mcpl-host replay FILE``: a recording (``mcpl_host/recording.py``'s format) served as the
server it recorded, over stdio (default), WebSocket (``--ws HOST:PORT``) or Streamable HTTP
(``--http HOST:PORT``).

Rules of this module:

- The recording holds one server, or ``--server NAME`` picks one of several; which is
  read and turned into a ``Script`` (``script.read_script``) before anything is served: a
  file that is not a recording, a version this reader does not know or a server it lacks
  is a usage error (exit 2), as is an unusable ``HOST:PORT``.
- Over stdio the replay is one session on stdin/stdout (stdout carries nothing else); it
  ends when stdin ends (exit 0) or when the recording shows the server went away there
  (docs/protocol.md RP7; exit 0). ``--ws`` and ``--http`` print the URL to connect to as
  the first line on stdout once listening (port 0: a free one) and serve until a request
  differs or the process is stopped (SIGTERM, SIGINT).
- The first request that differs from the recording (RP6) is answered with a JSON-RPC
  error and ends the replay: exit 1, with the sentence naming it on stderr (escaped,
  ``logging.escape_text``).
- ``--keep-timing`` keeps the recorded gaps, each at most ``Limits.replay_max_gap_seconds``
  (``--max-gap SECONDS`` overrides it).
"""

from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING

import anyio
import click

from mcpl_host.cli_target import EXIT_OK, EXIT_SERVER_FAILED, EXIT_USAGE, LEVELS
from mcpl_host.limits import Limits, limit_problem
from mcpl_host.logging import configure_logging, escape_text
from mcpl_host.replay.load import load_script
from mcpl_host.replay.script import RecordingError, Script

if TYPE_CHECKING:
    from mcpl_host.replay.serve import Outcome, ReplayOptions

# The serving module (h11 and wsproto) loads when a replay starts: `mcpl-host --help` imports
# this module to list the command.

__all__ = ["parse_address", "replay"]


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` as (host, port); raises ``ValueError`` with a sentence. A bracketed IPv6
    host (``[::1]:8000``) loses its brackets."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r} is not HOST:PORT (e.g. 127.0.0.1:0, port 0 for a free one)")
    return host.removeprefix("[").removesuffix("]"), int(port)


def _say(url: str) -> None:
    click.echo(url)
    sys.stdout.flush()


async def _run(script: Script, options: ReplayOptions, ws: str | None, http: str | None) -> Outcome:
    from mcpl_host.replay.serve import Outcome, serve_http, serve_stdio, serve_websocket

    outcome = Outcome()
    if ws is not None:
        host, port = parse_address(ws)
        await serve_websocket(script, options, outcome, host, port, _say)
    elif http is not None:
        host, port = parse_address(http)
        await serve_http(script, options, outcome, host, port, _say)
    else:
        await serve_stdio(script, options, outcome)
    return outcome


@click.command(
    epilog="""\b
Exit status:
  0  the host went away (stdin ended) or the recording ended the connection
  1  a request differed from the recording (named on stderr)
  2  usage error: not a recording, no such server, a bad HOST:PORT""",
)
@click.argument("file", type=click.Path(dir_okay=False))
@click.option(
    "--server",
    "server",
    metavar="NAME",
    help="The recorded server to replay (needed when the recording holds several).",
)
@click.option(
    "--ws",
    "ws",
    metavar="HOST:PORT",
    help="Serve WebSocket on HOST:PORT (port 0: a free one); the URL is printed first.",
)
@click.option(
    "--http",
    "http",
    metavar="HOST:PORT",
    help="Serve Streamable HTTP on HOST:PORT (port 0: a free one); the URL is printed first.",
)
@click.option(
    "--keep-timing",
    is_flag=True,
    help="Wait the recorded gaps between a request and each line that followed it.",
)
@click.option(
    "--max-gap",
    type=float,
    default=None,
    metavar="SECONDS",
    help="With --keep-timing: the longest wait kept (default: Limits.replay_max_gap_seconds).",
)
@click.option(
    "--log-level", type=click.Choice(LEVELS), default="warning", show_default=True, help="Logs go to stderr."
)
@click.pass_context
def replay(
    ctx: click.Context,
    file: str,
    server: str | None,
    ws: str | None,
    http: str | None,
    keep_timing: bool,
    max_gap: float | None,
    log_level: str,
) -> None:
    """Serve a recording (made with --record) as the server it recorded: each request is
    answered as recorded (matched by method and params, ids remapped), what the server
    pushed is pushed again, and the first request that differs ends the replay (exit 1)."""
    configure_logging(log_level)
    if ws is not None and http is not None:
        raise click.UsageError("--ws and --http: choose one transport")
    limits = Limits()
    if max_gap is not None:
        problem = limit_problem("replay_max_gap_seconds", max_gap)
        if problem is not None:
            raise click.UsageError(f"--max-gap {problem}")
        limits = Limits(replay_max_gap_seconds=max_gap)
    try:
        for address in (ws, http):
            if address is not None:
                parse_address(address)
        script = load_script(file, server)
    except (RecordingError, ValueError) as exc:
        click.echo(f"mcpl-host replay: {exc}", err=True)
        ctx.exit(EXIT_USAGE)
    from mcpl_host.replay.serve import ReplayOptions

    options = ReplayOptions(keep_timing=keep_timing, limits=limits)
    try:
        outcome = anyio.run(functools.partial(_run, script, options, ws, http))
    except OSError as exc:  # the address cannot be bound, stdin or stdout cannot be used
        what = "cannot listen" if ws is not None or http is not None else "cannot serve on stdin and stdout"
        click.echo(f"mcpl-host replay: {what}: {exc.strerror or exc}", err=True)
        ctx.exit(EXIT_USAGE)
    except KeyboardInterrupt:
        ctx.exit(EXIT_OK)
    if outcome.mismatch is not None:
        click.echo(f"mcpl-host replay: {escape_text(outcome.mismatch.sentence, quotes=False)}", err=True)
        ctx.exit(EXIT_SERVER_FAILED)
    ctx.exit(EXIT_OK)

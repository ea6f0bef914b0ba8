"""The ``mcpl-host inspect`` command: select the servers (``cli_target``, as the shell
does), host them in a ``Host`` with the inspector's handlers and an ``Inspector``, print the
page's URL, and run until Ctrl-C (or SIGTERM, SIGHUP).

Rules of this module:

- The servers: a command after ``--`` (default: the bundled demo server), ``--ws URL``,
  ``--url URL``, ``--config FILE --server NAME``, or ``--config FILE`` alone for every enabled
  server of the file; the options are the shell's (``cli_target.server_options``), with the
  same default policy (grant everything advertised unless ``--grant``/``--deny``).
- ``inference/request``, ``sampling/createMessage`` and ``elicitation/create`` are held
  until answered from the page, for ``Limits.held_request_timeout_seconds``
  (``Inspector.handlers``); push events are accepted.
- The live traffic is the recorder's (``--record FILE``, which the page also offers for
  download; without it a recorder with no file feeds the page only).
- The URL (with its token) is the one line on stdout; ``--port`` picks the port (default: a
  free one). Nothing is opened: the token is for whoever runs the command.
- Exit status: 0 when stopped by a signal; 1 when the inspector could not start (the port
  is taken, the extra ``mcpl-host[inspect]`` is missing); 2 usage or configuration error;
  130 interrupted before the servers were started.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
import click

from mcpl_host.cli_target import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_SERVER_FAILED,
    end_children,
    own_children,
    select_servers,
    server_options,
)
from mcpl_host.handlers import HostHandlers
from mcpl_host.host import Host
from mcpl_host.inspector.server import Inspector
from mcpl_host.logging import configure_logging
from mcpl_host.recording import Recorder
from mcpl_host.signals import StopRouter

__all__ = ["inspect"]


async def _inspect(servers: dict[str, Any], port: int, recorder: Recorder) -> int:
    inspector = Inspector(port=port, recorder=recorder)

    def handlers(name: str) -> HostHandlers:
        return inspector.handlers(name, timeout=servers[name].limits.held_request_timeout_seconds)

    async with anyio.create_task_group() as tg:
        stops = StopRouter()
        await tg.start(stops.watch)
        with stops.phase():
            try:
                host = Host(
                    servers,
                    handlers_factory=handlers,
                    inspector=inspector,
                    subscribe_all=False,
                    record=recorder,
                )
                async with host:
                    click.echo(inspector.url)
                    sys.stdout.flush()
                    await anyio.sleep_forever()
            except (OSError, ImportError) as exc:
                click.echo(f"mcpl-host inspect: the inspector could not start: {exc}", err=True)
                tg.cancel_scope.cancel()
                return EXIT_SERVER_FAILED
        tg.cancel_scope.cancel()
    return EXIT_OK


@click.command(
    context_settings={"max_content_width": 100},
    epilog="""\b
Examples:
  mcpl-host inspect                                 # the bundled demo MCPL server
  mcpl-host inspect --env DEMO_EXTRAS=1             # ... with ask, sample and form (held for you)
  mcpl-host inspect --config servers.json --port 8765
  mcpl-host inspect -- python -m mcp_server_time""",
)
@server_options(verb="inspect", stderr_level=False, many=True)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="The loopback port of the page (0: a free one).",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- COMMAND [ARG...]]")
@click.pass_context
def inspect(ctx: click.Context, /, port: int, command: tuple[str, ...], **options: Any) -> None:
    """Host servers and watch them in a web page: their state, the grant and each
    capability's source, live traffic and events, requests held for you (inference,
    sampling, elicitation) answered from the page, a form to call each tool, grant and deny
    at run time, and the recording to download.

    Prints the page's URL (127.0.0.1, with a token: any request without it is refused) and
    runs until Ctrl-C. Needs the extra mcpl-host[inspect].

    \b
    Exit status:
      0    stopped by Ctrl-C, SIGTERM or SIGHUP
      1    the inspector could not start (port taken, extra missing)
      2    usage or configuration error
      130  interrupted before the servers were started
    """
    selection = select_servers(ctx, options, command, many=True)
    configure_logging(options["log_level"])
    # Without --record the traffic is still shown: a recorder with no file feeds the page.
    recorder = selection.recorder or Recorder(None)
    owned = own_children(not options["no_subreaper"])
    try:
        status = anyio.run(_inspect, selection.servers, port, recorder, backend="asyncio")
    except KeyboardInterrupt:
        status = EXIT_INTERRUPTED
    finally:
        recorder.close()
    end_children(owned)
    ctx.exit(status)

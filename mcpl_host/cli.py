"""The ``mcpl-host`` command line: ``mcpl-host probe``.

Rules of this module:

- Everything the probe learns goes into one document (a dict): ``--json`` prints it,
  redacted, as the only thing on stdout; on a terminal ``mcpl_host.report`` renders it.
  Logs go to stderr (``configure_logging``).
- Exit statuses: 0 the probe succeeded; 1 the server failed (an ``MCPLHostError`` or an
  OS error); 2 a usage or configuration error (click's own, or ours raised as click
  errors, before anything is spawned); 130 Ctrl-C before the listing was done.
- Ctrl-C is routed to the phase in progress (``_Interrupts``): during ``--listen`` it ends
  listening only; before, it cancels the probe. Closing the server is never interrupted (it
  is bounded by the grace periods in ``Limits``).
"""

from __future__ import annotations

import datetime
import functools
import math
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import anyio
import anyio.abc
import click

import mcpl_host
from mcpl_host import report
from mcpl_host.connect import connect_stdio
from mcpl_host.handlers import HostHandlers, RequestContext
from mcpl_host.jsonrpc.errors import HandlerError, MCPLHostError, MethodNotFound, RemoteError
from mcpl_host.limits import DEFAULT_HANDSHAKE_TIMEOUT_SECONDS, DEFAULT_REQUEST_TIMEOUT_SECONDS, Limits
from mcpl_host.logging import configure_logging
from mcpl_host.mcpl.grants import GrantPolicy

__all__ = ["ProbeHandlers", "main"]

#: Events kept for the report; later ones are only counted (``eventsNotKept``).
MAX_KEPT_EVENTS = 1000
#: Exit statuses (see the module docstring).
EXIT_OK, EXIT_SERVER_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
_LEVELS = ["debug", "info", "warning", "error"]
# (document key, capability that must be advertised, ServerConnection method)
_LISTS = (("tools", "tools", "list_tools"), ("resources", "resources", "list_resources"),
          ("resourceTemplates", "resources", "list_resource_templates"),
          ("prompts", "prompts", "list_prompts"))


def demo_server_path() -> Path:
    """The bundled demo server: in the wheel (``_fixtures``) or in a source checkout.
    Raises ``click.UsageError`` (exit 2) when neither exists."""
    package = Path(mcpl_host.__file__).parent
    for path in (package / "_fixtures" / "demo_server.py", package.parent / "fixtures" / "demo_server.py"):
        if path.is_file():
            return path
    raise click.UsageError("the bundled demo server is missing from this installation; "
                           "give a server command after '--'")


class ProbeHandlers(HostHandlers):
    """Records what a server sends unasked as event dicts: ``kind`` (``"push/event"``,
    ``"notification"`` or ``"request"``), ``method``, ``params``, ``answer`` (the result we
    sent) or ``error`` (the error object we sent), ``time`` (ISO 8601 UTC). Accepts every
    admitted ``push/event``; answers other requests (``inference/request`` too) ``-32601``.
    ``on_event`` is called with each new event (from the read loop or a handler task; it
    must not block)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.not_kept = 0
        self.on_event: Any = None

    def _record(self, kind: str, method: str, params: Any, **outcome: Any) -> None:
        now = datetime.datetime.now(datetime.timezone.utc)
        event = {"kind": kind, "method": method, "params": params, **outcome,
                 "time": now.isoformat(timespec="milliseconds").replace("+00:00", "Z")}
        if len(self.events) < MAX_KEPT_EVENTS:
            self.events.append(event)
        else:
            self.not_kept += 1
        if self.on_event is not None:
            self.on_event(event)

    async def push_event(self, context: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        answer = {"accepted": True}
        self._record("push/event", context.method, params, answer=answer)
        return answer

    async def request(self, context: RequestContext, params: Any) -> Any:
        return self._refuse(context, params, MethodNotFound(context.method))

    async def inference_request(self, context: RequestContext, params: dict[str, Any], stream: Any) -> Any:
        return self._refuse(context, params, MethodNotFound(context.method))

    def _refuse(self, context: RequestContext, params: Any, refusal: HandlerError) -> NoReturn:
        self._record("request", context.method, params, error=refusal.to_error())
        raise refusal

    def on_notification(self, server: str, method: str, params: Any) -> None:
        self._record("notification", method, params)

    def on_refused(self, server: str, method: str, params: Any, error: dict[str, Any]) -> None:
        self._record("push/event" if method == "push/event" else "request", method, params, error=error)


class _Interrupts:
    """Routes SIGINT to the innermost phase's cancel scope (see the module rules)."""

    def __init__(self) -> None:
        self._scopes: list[anyio.CancelScope] = []
        self.armed = True

    @contextmanager
    def phase(self) -> Iterator[anyio.CancelScope]:
        with anyio.CancelScope() as scope:
            self._scopes.append(scope)
            try:
                yield scope
            finally:
                self._scopes.pop()

    async def watch(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        with anyio.open_signal_receiver(signal.SIGINT) as signals:
            task_status.started()
            async for _ in signals:
                if self.armed and self._scopes:
                    self._scopes[-1].cancel()


async def _list_offers(doc: dict[str, Any], conn: Any) -> None:
    for key, capability, method in _LISTS:
        if capability not in doc["capabilities"]:
            doc["skipped"].append(key)
            continue
        try:
            doc[key] = [item.raw for item in await getattr(conn, method)()]
        except RemoteError as exc:  # e.g. -32601: reported as unavailable, not a failure
            doc["unavailable"][key] = {"code": exc.code, "message": exc.message, "data": exc.data}


async def _probe(
    command: list[str], listen: float, out: report.ReportConsole | None, **connect: Any
) -> tuple[dict[str, Any], int]:
    """Run one probe (``connect``: ``connect_stdio`` keywords); returns the redacted
    document and the exit status."""
    handlers = ProbeHandlers()
    conn = connect_stdio(command[0], command[1:], handlers=handlers, **connect)
    doc, status, phase = report.new_document(command), EXIT_OK, "the handshake"

    def shown(value: Any) -> Any:
        return report.redact_json(value, conn.redactor)

    interrupts = _Interrupts()
    async with anyio.create_task_group() as tg:
        await tg.start(interrupts.watch)
        try:
            with interrupts.phase() as probe_scope:
                async with conn:
                    phase = "the listing"
                    report.read_connection(doc, conn)
                    await _list_offers(doc, conn)
                    if out is not None:
                        report.render_report(out, shown(doc))
                        if listen > 0:
                            report.render_listen_start(out, listen, [shown(e) for e in handlers.events])
                            handlers.on_event = lambda event: report.render_event(out, shown(event))
                        else:
                            report.render_events(out, [shown(e) for e in handlers.events])
                    if listen > 0:
                        started = anyio.current_time()
                        with interrupts.phase() as listen_scope, anyio.move_on_after(listen):
                            raise await conn.wait_closed()  # the server went away: a failure
                        doc["listenedSeconds"] = round(anyio.current_time() - started, 3)
                        doc["listenInterrupted"] = listen_scope.cancelled_caught
                    interrupts.armed = False  # closing is bounded: never interrupted
            if probe_scope.cancelled_caught:
                doc["error"] = {"type": "Interrupted", "message": f"interrupted during {phase}",
                                "code": None, "stderr_tail": conn.stderr_tail}
                status = EXIT_INTERRUPTED
        except (MCPLHostError, OSError) as exc:
            doc["error"], status = report.error_object(exc, conn.stderr_tail), EXIT_SERVER_FAILED
        finally:
            tg.cancel_scope.cancel()
    handlers.on_event = None
    doc.update(ok=status == EXIT_OK, events=handlers.events, eventsNotKept=handlers.not_kept)
    return shown(doc), status


# --- parsing ----------------------------------------------------------------------------------


class Seconds(click.ParamType):
    """A number of seconds: a non-negative decimal (``inf`` allowed); zero only if allowed."""

    name = "SECONDS"

    def __init__(self, *, allow_zero: bool) -> None:
        self.allow_zero = allow_zero

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if math.isnan(number) or number < 0 or (number == 0 and not self.allow_zero):
            self.fail(f"{value!r} must be {'zero or more' if self.allow_zero else 'more than zero'} seconds",
                      param, ctx)
        return number


class EnvPair(click.ParamType):
    """``KEY=VALUE``; the value is a secret, so an error message never repeats it."""

    name = "KEY=VALUE"

    def convert(self, value: Any, param: Any, ctx: Any) -> tuple[str, str]:
        if isinstance(value, tuple):
            return value
        key, sep, val = str(value).partition("=")
        if not sep or not key or "\0" in value:
            self.fail("expected KEY=VALUE with a non-empty KEY (the value is not shown)", param, ctx)
        return key, val


@click.group(name="mcpl-host", context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(mcpl_host.__version__, prog_name="mcpl-host")
def main() -> None:
    """Host MCPL (MCP Live) and plain MCP servers over stdio."""


@main.command(context_settings={"max_content_width": 100}, epilog="""\b
Examples:
  mcpl-host probe                                   # the bundled demo MCPL server
  mcpl-host probe --listen 5                        # ...and show its push events
  mcpl-host probe --json -- python -m mcp_server_time
  mcpl-host probe --env API_TOKEN=... -- npx -y @modelcontextprotocol/server-everything stdio""")
@click.option("--env", "env", type=EnvPair(), multiple=True, metavar="KEY=VALUE",
              help="Set a variable in the server's environment (repeatable). Values are secrets: "
                   "they are redacted from all output.")
@click.option("--inherit-env", is_flag=True,
              help="Pass this shell's whole environment to the server (default: PATH, HOME, locale "
                   "and proxy variables only).")
@click.option("--cwd", type=click.Path(exists=True, file_okay=False), help="Working directory of the server.")
@click.option("--timeout", type=Seconds(allow_zero=False), default=DEFAULT_HANDSHAKE_TIMEOUT_SECONDS,
              show_default=True, help="Seconds to wait for the server's answer to initialize.")
@click.option("--request-timeout", type=Seconds(allow_zero=False), default=DEFAULT_REQUEST_TIMEOUT_SECONDS,
              show_default=True,
              help="Seconds to wait for each later answer (featureSets/update, list calls).")
@click.option("--listen", type=Seconds(allow_zero=True), default=0, show_default=True,
              help="Seconds to listen for push events, notifications and server requests after "
                   "listing ('inf': until Ctrl-C).")
@click.option("--grant", "grants", multiple=True, metavar="PATTERN",
              help="Grant only the advertised MCPL capabilities matching PATTERN (repeatable; '*' "
                   "matches one segment, e.g. 'channels.*'). Default: grant all advertised.")
@click.option("--deny", "denies", multiple=True, metavar="PATTERN",
              help="Never grant capabilities matching PATTERN (repeatable; wins over --grant).")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON document on stdout instead of the report; logs become JSON lines.")
@click.option("--log-level", type=click.Choice(_LEVELS), default="warning", show_default=True,
              help="Least level of log lines written to stderr.")
@click.option("--stderr-level", type=click.Choice(_LEVELS), default="debug", show_default=True,
              help="Level at which the server's stderr lines are logged.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- COMMAND [ARG...]]")
@click.pass_context
def probe(ctx: click.Context, env: tuple[tuple[str, str], ...], inherit_env: bool, cwd: str | None,
          timeout: float, request_timeout: float, listen: float, grants: tuple[str, ...],
          denies: tuple[str, ...], as_json: bool, log_level: str, stderr_level: str,
          command: tuple[str, ...]) -> None:
    """Start a server, run the handshake, and list what it offers.

    Spawns COMMAND (or, without one, the bundled demo MCPL server), runs initialize and,
    for an MCPL server, the initial featureSets/update; shows the server's name, version,
    protocol version, capabilities, MCPL manifest, the grant in force, its tools,
    resources, resource templates and prompts; optionally listens (--listen) and shows
    what the server sends unasked; then shuts the server down.

    \b
    Exit status:
      0    the probe succeeded
      1    the server failed (refused or broke the handshake, exited, timed out)
      2    usage or configuration error
      130  interrupted by Ctrl-C before the listing was done
    """
    name = None
    if not command:
        command, name = (sys.executable, str(demo_server_path())), "mcpl-demo"
    policy = GrantPolicy(grant=grants, deny=denies) if grants else \
        GrantPolicy(grant_all_advertised=True, deny=denies)
    configure_logging(log_level, json_lines=as_json)
    limits = Limits(handshake_timeout_seconds=timeout, request_timeout_seconds=request_timeout)
    out = None if as_json else report.ReportConsole(highlight=False)
    run = functools.partial(_probe, list(command), listen, out, name=name, env=dict(env), cwd=cwd,
                            inherit_env=inherit_env, policy=policy, limits=limits,
                            stderr_log_level=stderr_level)
    try:
        doc, status = anyio.run(run, backend="asyncio")
    except KeyboardInterrupt:  # Ctrl-C outside the probe's own handling
        ctx.exit(EXIT_INTERRUPTED)
    if as_json:
        report.print_json(doc)
    if doc["error"] is not None:
        if as_json:
            click.echo(report.failure_sentence(doc["error"]), err=True)
        else:
            report.render_failure(report.ReportConsole(stderr=True, highlight=False), doc["error"])
    elif out is not None and listen > 0:
        report.render_listen_end(out, doc)
    ctx.exit(status)


if __name__ == "__main__":
    main(prog_name="mcpl-host")

"""The ``mcpl-host`` command line: ``mcpl-host probe`` and ``mcpl-host run`` here; ``call``,
``read``, ``prompt`` and ``send`` (``mcpl_host.cli_call``), ``tools``, ``resources`` and
``prompts`` (``mcpl_host.cli_list``, through this module's ``list_offers``) and ``shell``
(``mcpl_host.shell.cli``) are registered on the same group.

Rules of this module:

- Everything the probe learns goes into one document (a dict): ``--json`` prints it,
  redacted, as the only thing on stdout; on a terminal ``mcpl_host.report`` renders it.
  Logs go to stderr (``configure_logging``).
- Exit statuses: 0 the probe succeeded; 1 the server failed (an ``MCPLHostError`` or an
  OS error); 2 a usage or configuration error (click's own, or ours raised as click
  errors, before anything is spawned); 130 Ctrl-C before the listing was done.
- Ctrl-C, SIGTERM and SIGHUP are one and the same stop (``mcpl_host.signals``), routed to
  the phase in progress: during ``--listen`` it ends listening only; before, it cancels the
  probe. Closing the server is never interrupted (it is bounded by the grace periods in
  ``Limits``).
- ``probe`` targets one of: a command (default: the bundled demo server), ``--ws URL``,
  ``--url URL`` (HTTP), or ``--config FILE --server NAME``: the options and their rules
  are ``mcpl_host.cli_target``'s, shared with ``call``, ``read``, ``prompt``, ``send``
  (``mcpl_host.cli_call``) and ``shell`` (``mcpl_host.shell``).
- Secrets (which values: ``mcpl_host.secrets``) never reach an output: the command shown
  goes through ``redact_command``, the URL through ``shown_url``, the document and every
  event through ``report.redact_json`` with the server's ``Redactor``. ``--secret KEY=VALUE``
  adds an explicit secret (and, for a probed command, the variable to its environment).
- On Linux both commands make the process a child subreaper (unless ``--no-subreaper``): a
  server's descendants that leave its process group stay below ``mcpl-host``, are reaped by
  it, and whatever is left when every server is closed is killed (``own_children``).
- ``run`` prints one line (terminal) or one JSON object (``--json``: ``{"time", "server",
  "kind", "data"}``, redacted) per ``HostEvent``. Ctrl-C, SIGTERM or SIGHUP, or the reader
  of a pipe on stdout going away (``run --json | head -1``), closes every server (bounded by
  their graces; further signals are ignored) and exits 0; 1 if every server gave up first.
- On a stop, ``probe`` and ``run`` (terminal output) say at once that they are closing N
  servers (``StopRouter.on_stop``), before the close, which may take the grace periods.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import importlib
import sys
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any

import anyio
import click

import mcpl_host
from mcpl_host import report
from mcpl_host.cli_target import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_SERVER_FAILED,
    LEVELS,
    EnvPair,
    Seconds,
    end_children,
    load_config_or_exit,
    open_recorder,
    own_children,
    reap_strays,
    record_option,
    select_servers,
    server_options,
)
from mcpl_host.config_file import HostConfig
from mcpl_host.events import (
    Degraded,
    HeldMessage,
    HostEvent,
    PushEvent,
    Ready,
    Refusal,
    ServerNotification,
    ServerRequest,
    event_json,
)
from mcpl_host.handlers import HostHandlers
from mcpl_host.host import Host
from mcpl_host.jsonrpc.errors import MCPLHostError, RemoteError
from mcpl_host.jsonrpc.values import JSONObject, is_array, is_object
from mcpl_host.limits import (
    DEFAULT_HEALTH_TIMEOUT_SECONDS,
    DEFAULT_PROCESS_TREE_SCAN_SECONDS,
    DEFAULT_STALL_SECONDS,
    Limits,
)
from mcpl_host.logging import configure_logging, get_logger
from mcpl_host.mcp_methods import MCPClient, Prompt, Resource, ResourceTemplate, Tool
from mcpl_host.mcpl.compat import COMPAT_SETTINGS, CompatSetting
from mcpl_host.probe_features import client_feature_options, exit_now_if_abandoned, feature_handlers
from mcpl_host.probing import ProbeWatch
from mcpl_host.record import EventRecord
from mcpl_host.recording import Recorder
from mcpl_host.report import tool_class_json
from mcpl_host.server_connection import ServerConnection
from mcpl_host.services.coalescing import EventInbox
from mcpl_host.signals import StopRouter, watch_stdout_reader

__all__ = ["ProbeRecorder", "list_offers", "main"]

#: Host-wide (the probe report, not a server bound): events kept for the report; later ones
#: are only counted (``eventsNotKept``).
MAX_KEPT_EVENTS = 1000
# The longest request id (its repr) whose hold time the probe measures; ids are a server's.
_MAX_HELD_ID_CHARS = 256
# (document key, capability that must be advertised, ServerConnection method)
#: One entry of a listing (each keeps the object as sent in ``raw``).
Listed = Tool | Resource | ResourceTemplate | Prompt
#: What the probe lists: the document's key, the capability that offers it, the listing.
_LISTS: tuple[tuple[str, str, Callable[[MCPClient], Awaitable[Sequence[Listed]]]], ...] = (
    ("tools", "tools", lambda mcp: mcp.list_tools()),
    ("resources", "resources", lambda mcp: mcp.list_resources()),
    ("resourceTemplates", "resources", lambda mcp: mcp.list_resource_templates()),
    ("prompts", "prompts", lambda mcp: mcp.list_prompts()),
)


class ProbeRecorder:
    """Records what a server sends unasked, as seen by the connection's observer, as event
    dicts: ``kind`` (``"push/event"``, ``"notification"``, ``"request"`` or ``"held"``: a
    request held until the policy was settled, 0.4 profile), ``method``, ``params``,
    ``answer`` (the result we sent) or ``error`` (the error object we sent; for a refused
    notification, what was refused), ``reason`` (a refusal's), ``heldSeconds`` (for the
    answer of a request that was held), ``time`` (ISO 8601 UTC). Every server request is
    recorded with its answer: ``channels/*`` and ``state/*`` included. The probe's handlers
    are the defaults (``HostHandlers``): every admitted ``push/event`` is accepted, other
    requests are ``-32601``; with ``--inference-reply``, ``--root``, ``--sampling-reply``,
    ``--elicit-reply`` or ``--ask`` those features are served (``probe_features.probe_handlers``).
    ``on_event`` is called
    with each new event (from the read loop or a handler task; it must not block)."""

    def __init__(self, limits: Limits | None = None) -> None:
        limits = limits or Limits()
        self.record = EventRecord(MAX_KEPT_EVENTS, limits.max_recorded_event_bytes, limits.max_recorded_bytes)
        self.on_event: Callable[[dict[str, Any]], None] | None = None
        self._held: dict[tuple[str, str], float] = {}  # (method, id) -> monotonic time held

    @property
    def events(self) -> list[dict[str, Any]]:
        """The events kept (``record``: bounded in count and bytes)."""
        return self.record.events

    def observe(self, event: HostEvent) -> None:
        if isinstance(event, HeldMessage):
            key = (event.method, repr(event.id))
            self._held.pop(key, None)
            if (
                event.id is not None
                and len(self._held) < MAX_KEPT_EVENTS
                and len(key[1]) <= _MAX_HELD_ID_CHARS
            ):
                self._held[key] = time.monotonic()
            self._record("held", event.method, event.params)
            return
        if not isinstance(event, (PushEvent, ServerRequest, ServerNotification, Refusal)):
            return
        method = "push/event" if isinstance(event, PushEvent) else event.method
        outcome: JSONObject = {}
        if isinstance(event, (PushEvent, ServerRequest)) and event.answer is not None:
            outcome["answer"] = event.answer
        if event.error is not None:
            outcome["error"] = event.error
        if isinstance(event, (ServerNotification, Refusal)) and event.reason is not None:
            outcome["reason"] = event.reason
        if not isinstance(event, ServerNotification):
            held = self._held.pop((method, repr(event.id)), None)
            if held is not None:
                outcome["heldSeconds"] = round(time.monotonic() - held, 3)
        if isinstance(event, PushEvent):
            if event.model_content is not None:  # MCPL §19.5: what a model would see
                outcome["modelContent"] = event.model_content
            self._record("push/event", method, event.params, **outcome)
        elif isinstance(event, ServerRequest):
            self._record("request", method, event.params, **outcome)
        elif isinstance(event, ServerNotification):
            self._record("notification", method, event.params, **outcome)
        else:
            shown = "push/event" if method == "push/event" else "request"
            self._record("notification" if event.notification else shown, method, event.params, **outcome)

    def _record(self, kind: str, method: str, params: object, **outcome: Any) -> None:
        now = datetime.datetime.now(datetime.timezone.utc)
        event = {
            "kind": kind,
            "method": method,
            "params": params,
            **outcome,
            "time": now.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        }
        shown = self.record.add(event)
        if self.on_event is not None:
            self.on_event(shown)


async def list_offers(
    doc: dict[str, Any], conn: ServerConnection, keys: Collection[str] = report.LIST_KEYS
) -> None:
    """List what the server offers into the probe document ``doc`` (its ``capabilities``
    read first): each of ``keys`` (``tools``, ``resources``, ``resourceTemplates``,
    ``prompts``) as the objects sent, every page followed (``MCPClient``, within the
    ``Limits``), ``toolClasses`` with the tools; a list whose capability is not advertised
    goes into ``skipped`` unasked, one answered with an error into ``unavailable``.

    Raises:
        MCPLHostError: the server failed, or a list went past a bound (``LimitExceeded``).
    """
    for key, capability, listing in _LISTS:
        if key not in keys:
            continue
        if capability not in doc["capabilities"]:
            doc["skipped"].append(key)
            continue
        try:
            listed = await listing(conn.mcp)
            doc[key] = [item.raw for item in listed]
            if key == "tools":  # the effective class and its source (RFC-008 §6)
                doc["toolClasses"] = [tool_class_json(tool) for tool in listed if isinstance(tool, Tool)]
        except RemoteError as exc:  # e.g. -32601: reported as unavailable, not a failure
            doc["unavailable"][key] = {"code": exc.code, "message": exc.message, "data": exc.data}


async def _probe(
    target: dict[str, Any],
    listen: float,
    out: report.ReportConsole | None,
    connect: Callable[[ProbeRecorder], ServerConnection],
    *,
    stall_seconds: float = DEFAULT_STALL_SECONDS,
    require_mcpl: bool = False,
    limits: Limits | None = None,
    inbox: EventInbox | None = None,
) -> tuple[dict[str, Any], int]:
    """Run one probe of the connection ``connect(recorder)`` builds; ``target`` (``command``,
    and ``url`` or ``config``) goes into the document. A server silent for ``stall_seconds``
    while a request waits fails the probe with the explanation (``probing.ProbeWatch``);
    ``require_mcpl``: fail when MCPL is not ready; ``limits``: the server's (what the record
    of events keeps); ``inbox``: the connection's event inbox (``--coalesce``), drained once
    after listening into ``doc["inbox"]``. Returns the redacted document and the exit status."""
    recorder = ProbeRecorder(limits)
    conn = connect(recorder)
    doc, status, phase = report.new_document(target.get("command", [])), EXIT_OK, "the handshake"
    doc.update(target)
    progress = report.ProgressLine(sys.stderr) if out is not None else None
    watch = ProbeWatch(conn, stall_seconds=stall_seconds, progress=progress)
    failure: BaseException | None = None

    def shown(value: object) -> Any:
        return report.redact_json(value, conn.hosted.redactor)

    def live(event: Mapping[str, object]) -> None:
        assert out is not None
        watch.clear()
        report.render_event(out, shown(event))

    interrupts = StopRouter()
    if out is not None:
        console = out
        interrupts.on_stop = lambda reason: report.render_stopping(console, 1)
    async with anyio.create_task_group() as tg:
        await tg.start(interrupts.watch)
        try:
            with interrupts.phase() as probe_scope:
                tg.start_soon(watch.run, probe_scope)
                async with conn:
                    phase = "the listing"
                    report.read_connection(doc, conn)
                    await list_offers(doc, conn)
                    report.read_connection(doc, conn)  # after the listing: held requests decided
                    notes_shown = len(_notes(doc))
                    watch.clear()
                    if out is not None:
                        report.render_report(out, shown(doc))
                        if listen > 0:
                            report.render_listen_start(out, listen, [shown(e) for e in recorder.events])
                            recorder.on_event = live
                        else:
                            report.render_events(out, [shown(e) for e in recorder.events])
                            report.render_omitted(out, recorder.record.omitted())
                    if listen > 0:
                        started = anyio.current_time()
                        with interrupts.phase() as listen_scope, anyio.move_on_after(listen):
                            raise await conn.wait_closed()  # the server went away: a failure
                        doc["listenedSeconds"] = round(anyio.current_time() - started, 3)
                        doc["listenInterrupted"] = listen_scope.cancelled_caught
                        if listen_scope.cancelled_caught:
                            doc["listenStoppedBy"] = interrupts.reason
                    report.read_connection(doc, conn)  # notes, channels and holds since
                    if out is not None and listen > 0:
                        report.render_notes(out, shown(_notes(doc)[notes_shown:]))
                    if inbox is not None:  # RFC-006: each push/render bounded by the Limits
                        drained = await inbox.drain()
                        doc["inbox"] = [
                            {
                                "eventId": item.event_id,
                                "text": report.content_text(item.event.get("modelContent")),
                            }
                            for item in drained.items
                        ]
                        if out is not None:
                            report.render_inbox(out, shown(doc["inbox"]))
                    interrupts.armed = False  # closing is bounded: never interrupted
            if conn.server_info is not None and doc["server"] is None:
                report.read_connection(doc, conn)  # what the handshake learned, for the report
            explanation = watch.explanation()
            if explanation is not None:
                doc["error"] = {
                    "type": "ServerStalled",
                    "message": explanation,
                    "code": None,
                    "stderrTail": conn.connection.stderr_tail,
                }
                status = EXIT_SERVER_FAILED
            elif probe_scope.cancelled_caught:
                doc["error"] = {
                    "type": "Interrupted",
                    "message": f"interrupted by {interrupts.reason} during {phase}",
                    "code": None,
                    "stderrTail": conn.connection.stderr_tail,
                }
                status = EXIT_INTERRUPTED
            elif require_mcpl and doc["mcplState"]["state"] != "ready":
                doc["error"] = {
                    "type": "MCPLNotReady",
                    "message": f"MCPL did not become ready (--require-mcpl): {doc['mcplState']['line']}",
                    "code": None,
                    "stderrTail": conn.connection.stderr_tail,
                }
                status = EXIT_SERVER_FAILED
        except (MCPLHostError, OSError) as exc:
            failure = exc
            doc["error"], status = report.error_object(exc, conn.connection.stderr_tail), EXIT_SERVER_FAILED
            if conn.server_info is not None:
                report.read_connection(doc, conn)
        finally:
            tg.cancel_scope.cancel()
    recorder.on_event = None
    doc.update(
        ok=status == EXIT_OK,
        events=recorder.events,
        eventsNotKept=recorder.record.not_kept,
        eventsOmitted=recorder.record.omitted(),
    )
    if doc["error"] is not None and doc["error"]["type"] != "Interrupted":
        doc["error"]["chain"] = report.error_chain(doc, failure)
    return shown(doc), status


def _notes(doc: Mapping[str, object]) -> list[Any]:
    compat = doc.get("compat")
    notes = compat.get("notes") if is_object(compat) else None
    return list(notes) if is_array(notes) else []


class _LazyCommands(click.Group):
    """The command group, with the commands of other modules imported when one is run
    (``call``, ``shell``, ``check``...): ``mcpl-host probe`` does not load the shell's line
    editor nor the checker. This is click's documented extension point for lazy loading
    ("Advanced patterns: lazily loading subcommands")."""

    def __init__(self, *args: Any, lazy: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self._lazy])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = self._lazy.get(cmd_name)
        if where is None:
            return super().get_command(ctx, cmd_name)
        module_name, _, attribute = where.partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        assert isinstance(command, click.Command)
        return command


#: The commands written in other modules: name -> ``module:attribute``.
_LAZY_COMMANDS = {
    "call": "mcpl_host.cli_call:call",
    "read": "mcpl_host.cli_call:read",
    "prompt": "mcpl_host.cli_call:prompt",
    "send": "mcpl_host.cli_call:send",
    "tools": "mcpl_host.cli_list:tools",
    "resources": "mcpl_host.cli_list:resources",
    "prompts": "mcpl_host.cli_list:prompts",
    "shell": "mcpl_host.shell.cli:shell",
    "inspect": "mcpl_host.inspector.cli:inspect",
    # `mcpl-host check` lives in its own package; it imports nothing from this module.
    "check": "mcpl_host.check.cli:check",
    "config": "mcpl_host.cli_config:config",
    "task": "mcpl_host.cli_task:task",
    "replay": "mcpl_host.replay.cli:replay",
    "login": "mcpl_host.cli_auth:login",
    "logout": "mcpl_host.cli_auth:logout",
    "auth": "mcpl_host.cli_auth:auth",
}


@click.group(
    name="mcpl-host",
    cls=_LazyCommands,
    lazy=_LAZY_COMMANDS,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="""\b
Shell completion (bash, zsh, fish), through click:
  eval "$(_MCPL_HOST_COMPLETE=bash_source mcpl-host)"     # in ~/.bashrc
  eval "$(_MCPL_HOST_COMPLETE=zsh_source mcpl-host)"      # in ~/.zshrc
  _MCPL_HOST_COMPLETE=fish_source mcpl-host | source      # in ~/.config/fish/completions/mcpl-host.fish""",
)
@click.version_option(mcpl_host.__version__, prog_name="mcpl-host")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Host MCPL (MCP Live) and plain MCP servers over stdio, WebSocket and HTTP.

    Run a command with --help for its options; with no command, this help (exit 0).
    """
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())
        ctx.exit(EXIT_OK)


@main.command(
    context_settings={"max_content_width": 100},
    epilog="""\b
Examples:
  mcpl-host probe                                   # the bundled demo MCPL server
  mcpl-host probe --listen 5                        # ...and show its push events
  mcpl-host probe --json -- python -m mcp_server_time
  mcpl-host probe --env API_TOKEN=... -- npx -y @modelcontextprotocol/server-everything stdio
  mcpl-host probe --ws wss://mcpl.example.com/v1 --token-in query   # token from $MCPL_HOST_TOKEN
  mcpl-host probe --url https://mcp.example.com/mcp --header X-Api-Key=...
  mcpl-host probe --config servers.json --server time""",
)
@server_options(verb="probe")
@click.option(
    "--listen",
    type=Seconds(allow_zero=True),
    default=0,
    show_default=True,
    help="Seconds to listen for push events, notifications and server requests after "
    "listing ('inf': until Ctrl-C).",
)
@client_feature_options
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON document on stdout instead of the report; logs become JSON lines.",
)
@click.option(
    "--require-mcpl",
    is_flag=True,
    help="Exit 1 unless MCPL becomes ready (a CI smoke test of an MCPL server).",
)
@click.option(
    "--inference-reply",
    metavar="TEXT",
    help="Answer every inference/request with TEXT (streamed in chunks when asked); without it "
    "inferenceRequest is not advertised.",
)
@click.option(
    "--stall-timeout",
    type=Seconds(allow_zero=True),
    default=DEFAULT_STALL_SECONDS,
    show_default=True,
    help="After the handshake, fail when the server sends nothing for this long while a request "
    "waits, naming what is pending (0 or 'inf': never).",
)
@click.option(
    "--coalesce",
    is_flag=True,
    help="Keep an event inbox (RFC-006): advertise eventCoalescing, and after listening drain it "
    "once (push/render for deferred notices) and show what a model would read.",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- COMMAND [ARG...]]")
@click.pass_context
def probe(
    ctx: click.Context,
    /,
    listen: float,
    roots: tuple[str, ...],
    sampling_reply: str | None,
    elicit_reply: str | None,
    ask: bool,
    as_json: bool,
    require_mcpl: bool,
    inference_reply: str | None,
    stall_timeout: float,
    coalesce: bool,
    command: tuple[str, ...],
    **options: Any,
) -> None:
    """Start a server, run the handshake, and list what it offers.

    Spawns COMMAND (or dials --ws URL or --url URL, or starts --server NAME of --config FILE; with none
    of these, the bundled demo MCPL server), runs initialize and,
    for an MCPL server, the initial featureSets/update; shows the server's name, version,
    protocol version, capabilities, MCPL manifest, the grant in force, its tools,
    resources, resource templates and prompts; optionally listens (--listen) and shows
    what the server sends unasked; then shuts the server down.

    \b
    Exit status:
      0    the probe succeeded
      1    the server failed (refused or broke the handshake, exited, timed out, stopped
           answering), or MCPL did not become ready with --require-mcpl
      2    usage or configuration error
      130  interrupted by Ctrl-C (or SIGTERM, SIGHUP) before the listing was done
    """
    selection = select_servers(ctx, options, command)
    handlers = feature_handlers(roots, sampling_reply, elicit_reply, ask, inference_reply=inference_reply)
    no_grant = [
        name
        for name, server in selection.servers.items()
        if options["config_file"] is not None and server.grant_policy.grants_nothing
    ]

    inbox = EventInbox() if coalesce else None

    def connect(recorder: ProbeRecorder) -> ServerConnection:
        return selection.hosted(handlers=handlers, observer=recorder, event_inbox=inbox).open_connection()

    configure_logging(options["log_level"], json_lines=as_json)
    out = None if as_json else report.ReportConsole(highlight=False)
    run = functools.partial(
        _probe,
        selection.target,
        listen,
        out,
        connect,
        stall_seconds=stall_timeout,
        require_mcpl=require_mcpl,
        limits=next(iter(selection.servers.values())).limits,
        inbox=inbox,
    )
    owned = own_children(not options["no_subreaper"])
    try:
        doc, status = anyio.run(run, backend="asyncio")
    except KeyboardInterrupt:  # Ctrl-C outside the probe's own handling
        end_children(owned)
        exit_now_if_abandoned(EXIT_INTERRUPTED)
        ctx.exit(EXIT_INTERRUPTED)
    end_children(owned)
    state = doc.get("mcplState")
    if is_object(state) and state.get("state") == "ready" and state.get("grantsNothing"):
        _warn_no_grant(no_grant, as_json)
    if as_json:
        report.print_json(doc)
    if doc["error"] is not None:
        if as_json:
            click.echo(report.failure_sentence(doc["error"]), err=True)
        else:
            report.render_failure(report.ReportConsole(stderr=True, highlight=False), doc["error"])
            if out is not None:
                report.render_omitted(out, doc["eventsOmitted"])
    elif out is not None and listen > 0:
        report.render_listen_end(out, doc)
    exit_now_if_abandoned(status)  # a question left on the terminal (--ask) must not hold the exit
    ctx.exit(status)


def _warn_no_grant(names: list[str], as_json: bool) -> None:
    """The notice for servers that speak MCPL while their config entry gives no grant, so
    MCPL is granted nothing (docs/protocol.md CF2): on stderr, one line per server, never
    wrapped (a JSON log line with ``--json``). A plain MCP server needs no grant: callers
    tell only servers whose MCPL became ready."""
    for name in names:
        if as_json:
            get_logger("mcpl_host.cli").warning(
                "the config entry gives no grant: MCPL is granted nothing", server=name
            )
        else:
            click.echo(report.no_grant_warning(name), err=True)


# --- run ------------------------------------------------------------------------------------


async def _host(
    config: HostConfig,
    out: report.ReportConsole | None,
    health: float | None,
    owned: bool = False,
    recorder: Recorder | None = None,
) -> int:
    """Host every enabled server of ``config`` and print each event until a stop (SIGINT,
    SIGTERM, SIGHUP or stdout's reader going away: EXIT_OK) or until every server has
    given up (EXIT_SERVER_FAILED)."""
    status, gave_up = EXIT_OK, set[str]()
    async with anyio.create_task_group() as tg:
        stops = StopRouter()
        await tg.start(stops.watch)
        with stops.phase():
            tg.start_soon(watch_stdout_reader, stops)
            if owned:
                tg.start_soon(reap_strays, DEFAULT_PROCESS_TREE_SCAN_SECONDS)
            # Servers' requests are answered -32601 (push events accepted) and reported.
            async with Host(
                config,
                handlers_factory=lambda name: HostHandlers(),
                health_interval_seconds=health,
                record=recorder,
            ) as host:
                no_grant = {
                    name
                    for name, server in config.enabled_servers.items()
                    if server.grant_policy.grants_nothing
                }
                if out is not None:
                    report.render_run_start(out, config.source, host.servers)
                    console, count = out, len(host.servers)
                    stops.on_stop = lambda reason: report.render_stopping(console, count)
                async for event in host.events():  # a refusal never before its ready line
                    if (
                        isinstance(event, (Ready, Degraded))
                        and event.grants_nothing
                        and event.server in no_grant
                    ):
                        no_grant.discard(event.server)  # told once per server, not at each restart
                        _warn_no_grant([event.server], as_json=out is None)
                    shown = report.run_event(event_json(event), host.server(event.server).hosted.redactor)
                    if out is None:
                        written = report.print_json_line(shown)
                    else:
                        report.render_run_event(out, shown)
                        written = not out.quiet
                    if not written:  # the reader of stdout went away: stop as on Ctrl-C
                        stops.stop("stdout closed")
                    if event.kind == "gave_up":
                        gave_up.add(event.server)
                    if gave_up == set(host.servers):
                        status = EXIT_SERVER_FAILED
                        break
                    del event, shown  # nothing of it is held while the next one is awaited
        tg.cancel_scope.cancel()  # signals during the close were ignored: the close is bounded
    if out is not None:
        report.render_run_end(out, status == EXIT_OK)
    return status


@main.command(
    context_settings={"max_content_width": 100},
    epilog="""\b
Examples:
  mcpl-host run servers.json
  mcpl-host run auto                                # the first editor config found
  mcpl-host run --json servers.json | jq 'select(.kind == "push_event")'""",
)
@click.argument("config_file", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON object per event on stdout; logs become JSON lines on stderr.",
)
@click.option(
    "--log-level",
    type=click.Choice(LEVELS),
    default="warning",
    show_default=True,
    help="Least level of log lines written to stderr.",
)
@click.option(
    "--secret",
    "secrets",
    type=EnvPair(),
    multiple=True,
    metavar="KEY=VALUE",
    help="A secret to redact from every server's output, whatever KEY says (repeatable; it is "
    "not added to any server's environment: the config file sets those).",
)
@click.option(
    "--health-interval",
    type=Seconds(allow_zero=False),
    default=None,
    metavar="SECONDS",
    help=f"Ping every server this often; one that does not answer within "
    f"{DEFAULT_HEALTH_TIMEOUT_SECONDS:g} s (its healthTimeoutSeconds limit) is restarted per its restart policy (default: "
    f"no pings).",
)
@click.option(
    "--no-subreaper",
    "no_subreaper",
    is_flag=True,
    help="Linux: do not make mcpl-host a child subreaper. A server's descendant that leaves its "
    "process group is then still stopped when found by its marks, but not one that loses them all.",
)
@click.option(
    "--compat",
    type=click.Choice(COMPAT_SETTINGS),
    default=None,
    help='Compatibility profile of every server, instead of each entry\'s "compat" (default '
    "'auto': strict for a server that says MCPL 0.5, else 0.4).",
)
@record_option
@click.pass_context
def run(
    ctx: click.Context,
    config_file: str,
    as_json: bool,
    log_level: str,
    secrets: tuple[tuple[str, str], ...],
    health_interval: float | None,
    no_subreaper: bool,
    compat: CompatSetting | None,
    record: str | None,
) -> None:
    """Host the servers in CONFIG and print what happens until Ctrl-C (or SIGTERM, SIGHUP).

    CONFIG is the usual {"mcpServers": {...}} JSON (also "mcplServers"), with our keys for
    grants, feature sets, timeouts, restart policy and secrets; or an editor's MCP config as
    it is (Claude Desktop, Claude Code, Cursor, VS Code, Windsurf); 'auto': the first of those
    found (mcpl-host config list shows them). Every problem in it is listed
    before anything starts. Each enabled server is started at once and kept running: one that
    exits or drops its socket is restarted with backoff, until it crashes too often. Each event
    (connecting, ready, degraded, disconnected, reconnecting, gave_up, push_event, notification,
    server_request, refused, policy_receipt, manifest_change) is printed as it happens. Push
    events are accepted; other server requests are answered "method not found".

    \b
    Exit status:
      0    stopped by Ctrl-C, SIGTERM, SIGHUP or the reader of stdout going away
           (every server closed cleanly)
      1    every server gave up
      2    usage or configuration error (nothing was started)
      130  interrupted before the servers were started
    """
    config = load_config_or_exit(ctx, config_file)
    if not config.enabled_servers:
        raise click.UsageError(f"{config_file} has no enabled server")
    extra = tuple(value for _, value in secrets if value)
    if compat is not None:
        config = dataclasses.replace(
            config,
            servers={name: dataclasses.replace(s, compat=compat) for name, s in config.servers.items()},
        )
    if extra:
        config = dataclasses.replace(
            config,
            servers={
                name: dataclasses.replace(server, secrets=(*server.secrets, *extra))
                for name, server in config.servers.items()
            },
        )
    recorder = open_recorder(ctx, record)
    configure_logging(log_level, json_lines=as_json)
    out = None if as_json else report.ReportConsole(highlight=False)
    owned = own_children(not no_subreaper)
    try:
        status = anyio.run(_host, config, out, health_interval, owned, recorder, backend="asyncio")
    except KeyboardInterrupt:  # Ctrl-C before the signal receiver was in place
        status = EXIT_INTERRUPTED
    end_children(owned)
    ctx.exit(status)


if __name__ == "__main__":
    main(prog_name="mcpl-host")

"""The ``mcpl-host`` command line: ``mcpl-host probe`` and ``mcpl-host run``.

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
  ``--url URL`` (HTTP), or ``--config FILE --server NAME``; giving two is a usage error, as
  is an option that does not apply to the target (``--token`` without ``--ws`` or ``--url``,
  ``--header`` without ``--url``, ``--env`` without a command).
- Secrets (which values: ``mcpl_host.secrets``) never reach an output: the command shown
  goes through ``redact_command``, the URL through ``shown_url``, the document and every
  event through ``report.redact_json`` with the server's ``Redactor``. ``--secret KEY=VALUE``
  adds an explicit secret (and, for a probed command, the variable to its environment).
- On Linux both commands make the process a child subreaper (unless ``--no-subreaper``): a
  server's descendants that leave its process group stay below ``mcpl-host``, are reaped by
  it, and whatever is left when every server is closed is killed (``_own_children``).
- ``run`` prints one line (terminal) or one JSON object (``--json``: ``{"time", "server",
  "kind", "data"}``, redacted) per ``HostEvent``. Ctrl-C, SIGTERM or SIGHUP, or the reader
  of a pipe on stdout going away (``run --json | head -1``), closes every server (bounded by
  their graces; further signals are ignored) and exits 0; 1 if every server gave up first.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.abc
import click

import mcpl_host
from mcpl_host import report
from mcpl_host.config import ConfigError, HostConfig, ServerConfig, load_config
from mcpl_host.connect import connect_http, connect_stdio, connect_websocket
from mcpl_host.handlers import HostHandlers
from mcpl_host.host import Host, connect_from_config
from mcpl_host.jsonrpc.errors import MCPLHostError, RemoteError
from mcpl_host.limits import (
    DEFAULT_HANDSHAKE_TIMEOUT_SECONDS,
    DEFAULT_PROCESS_TREE_SCAN_SECONDS,
    DEFAULT_REQUEST_TIMEOUT_SECONDS,
    Limits,
)
from mcpl_host.logging import configure_logging
from mcpl_host.mcpl.grants import GrantPolicy, pattern_problem
from mcpl_host.observe import Observation
from mcpl_host.probe_features import probe_handlers
from mcpl_host.secrets import Redactor, redact_command, server_secrets
from mcpl_host.server_connection import ServerConnection
from mcpl_host.signals import StopRouter, watch_stdout_reader
from mcpl_host.stateless import ProtocolChoice
from mcpl_host.supervisor import DEFAULT_HEALTH_TIMEOUT_SECONDS
from mcpl_host.transports import process_tree
from mcpl_host.transports.http_params import shown_http_url
from mcpl_host.transports.websocket import shown_url

__all__ = ["ProbeRecorder", "main"]

#: Events kept for the report; later ones are only counted (``eventsNotKept``).
MAX_KEPT_EVENTS = 1000
#: Exit statuses (see the module docstring).
EXIT_OK, EXIT_SERVER_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
_LEVELS = ["debug", "info", "warning", "error"]
# (document key, capability that must be advertised, ServerConnection method)
_LISTS = (
    ("tools", "tools", "list_tools"),
    ("resources", "resources", "list_resources"),
    ("resourceTemplates", "resources", "list_resource_templates"),
    ("prompts", "prompts", "list_prompts"),
)


def _own_children(enabled: bool) -> bool:
    """Make this process a child subreaper (Linux; ``enabled``: not ``--no-subreaper``)."""
    return enabled and process_tree.supported() and process_tree.become_child_subreaper()


def _end_children(owned: bool) -> None:
    """Every server is closed: kill and reap whatever descendant is left (a daemon that lost
    every mark its server's tree is found by), saying so on stderr."""
    if owned:
        left = process_tree.end_descendants()
        if left:
            click.echo(f"mcpl-host: killed {left} process(es) the servers left behind", err=True)


async def _reap_strays(interval: float) -> None:
    """Reap orphans reparented to this process (it owns all its children), every ``interval``."""
    while True:
        await anyio.sleep(interval)
        process_tree.reap_strays()


def demo_server_path() -> Path:
    """The bundled demo server: in the wheel (``_fixtures``) or in a source checkout.
    Raises ``click.UsageError`` (exit 2) when neither exists."""
    package = Path(mcpl_host.__file__).parent
    for path in (package / "_fixtures" / "demo_server.py", package.parent / "fixtures" / "demo_server.py"):
        if path.is_file():
            return path
    raise click.UsageError(
        "the bundled demo server is missing from this installation; give a server command after '--'"
    )


class ProbeRecorder:
    """Records what a server sends unasked, as seen by the connection's observer, as event
    dicts: ``kind`` (``"push/event"``, ``"notification"`` or ``"request"``), ``method``,
    ``params``, ``answer`` (the result we sent) or ``error`` (the error object we sent),
    ``time`` (ISO 8601 UTC). The probe's handlers are the defaults (``HostHandlers``): every
    admitted ``push/event`` is accepted, other requests are ``-32601``; with ``--root``,
    ``--sampling-reply``, ``--elicit-reply`` or ``--ask`` those client features are served
    (``probe_features.probe_handlers``). ``on_event`` is called
    with each new event (from the read loop or a handler task; it must not block)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.not_kept = 0
        self.on_event: Any = None

    def observe(self, server: str, observation: Observation) -> None:
        data = observation.data
        outcome = {key: data[key] for key in ("answer", "error") if key in data}
        if observation.kind == "push_event":
            self._record("push/event", "push/event", data.get("params"), **outcome)
        elif observation.kind == "server_request":
            self._record("request", str(data.get("method")), data.get("params"), **outcome)
        elif observation.kind == "notification":
            self._record("notification", str(data.get("method")), data.get("params"))
        elif observation.kind == "refused":
            method = str(data.get("method"))
            kind = "push/event" if method == "push/event" else "request"
            self._record(kind, method, data.get("params"), **outcome)

    def _record(self, kind: str, method: str, params: Any, **outcome: Any) -> None:
        now = datetime.datetime.now(datetime.timezone.utc)
        event = {
            "kind": kind,
            "method": method,
            "params": params,
            **outcome,
            "time": now.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        }
        if len(self.events) < MAX_KEPT_EVENTS:
            self.events.append(event)
        else:
            self.not_kept += 1
        if self.on_event is not None:
            self.on_event(event)


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
    target: dict[str, Any],
    listen: float,
    out: report.ReportConsole | None,
    connect: Callable[[ProbeRecorder], ServerConnection],
) -> tuple[dict[str, Any], int]:
    """Run one probe of the connection ``connect(recorder)`` builds; ``target`` (``command``,
    and ``url`` or ``config``) goes into the document. Returns the redacted document and the
    exit status."""
    handlers = ProbeRecorder()
    conn = connect(handlers)
    doc, status, phase = report.new_document(target.get("command", [])), EXIT_OK, "the handshake"
    doc.update(target)

    def shown(value: Any) -> Any:
        return report.redact_json(value, conn.redactor)

    interrupts = StopRouter()
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
                        if listen_scope.cancelled_caught:
                            doc["listenStoppedBy"] = interrupts.reason
                    interrupts.armed = False  # closing is bounded: never interrupted
            if probe_scope.cancelled_caught:
                doc["error"] = {
                    "type": "Interrupted",
                    "message": f"interrupted by {interrupts.reason} during {phase}",
                    "code": None,
                    "stderr_tail": conn.stderr_tail,
                }
                status = EXIT_INTERRUPTED
        except (MCPLHostError, OSError) as exc:
            doc["error"], status = report.error_object(exc, conn.stderr_tail), EXIT_SERVER_FAILED
        finally:
            tg.cancel_scope.cancel()
    handlers.on_event = None
    doc.update(ok=status == EXIT_OK, events=handlers.events, eventsNotKept=handlers.not_kept)
    return shown(doc), status


def _connect_command(command: list[str], recorder: ProbeRecorder, **kwargs: Any) -> ServerConnection:
    return connect_stdio(command[0], command[1:], observer=recorder, **kwargs)


def _connect_ws(url: str, recorder: ProbeRecorder, **kwargs: Any) -> ServerConnection:
    try:
        return connect_websocket(url, observer=recorder, **kwargs)
    except ValueError as exc:  # never holds the token
        raise click.UsageError(f"--ws: {exc}") from None


def _connect_http(url: str, recorder: ProbeRecorder, **kwargs: Any) -> ServerConnection:
    try:
        return connect_http(url, observer=recorder, **kwargs)
    except ValueError as exc:  # never holds the token or a header value
        raise click.UsageError(f"--url: {exc}") from None


def _connect_config(
    server: ServerConfig,
    recorder: ProbeRecorder,
    *,
    handlers: HostHandlers | None = None,
    protocol: ProtocolChoice = "auto",
) -> ServerConnection:
    try:
        conn = connect_from_config(server, observer=recorder, handlers=handlers)
    except ValueError as exc:
        raise click.UsageError(f"--config: {exc}") from None
    conn.hosted.protocol = protocol
    return conn


def _load_config(ctx: click.Context, path: str) -> HostConfig:
    """The config at ``path``; on problems, print every one to stderr and exit 2."""
    try:
        return load_config(path)
    except ConfigError as exc:
        count = len(exc.problems)
        click.echo(
            f"Error: {path} has {count} problem{'s' if count != 1 else ''}; nothing was started:", err=True
        )
        for problem in exc.problems:
            click.echo(f"  {report.safe_text(str(problem), max_chars=1000)}", err=True)
        ctx.exit(EXIT_USAGE)


def _config_server(ctx: click.Context, path: str, name: str) -> ServerConfig:
    servers = _load_config(ctx, path).servers
    if name not in servers:
        known = ", ".join(servers) or "none"
        raise click.UsageError(f"--server: no server named {name!r} in {path} (it has: {known})")
    return servers[name]


# --- parsing ----------------------------------------------------------------------------------


class Seconds(click.ParamType[float]):
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
            self.fail(
                f"{value!r} must be {'zero or more' if self.allow_zero else 'more than zero'} seconds",
                param,
                ctx,
            )
        return number


def _check_patterns(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """Refuse a ``--grant``/``--deny`` pattern that matches no capability path (exit 2)."""
    for pattern in value:
        problem = pattern_problem(pattern)
        if problem is not None:
            raise click.BadParameter(problem, ctx=ctx, param=param)
    return value


class EnvPair(click.ParamType[tuple[str, str]]):
    """``KEY=VALUE``; the value may be a secret, so an error message never repeats it."""

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
    """Host MCPL (MCP Live) and plain MCP servers over stdio, WebSocket and HTTP."""


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
@click.option(
    "--ws",
    "ws_url",
    metavar="URL",
    help="Probe the WebSocket server at URL (ws:// or wss://) instead of starting a command.",
)
@click.option(
    "--url",
    "http_url",
    metavar="URL",
    help="Probe the MCP server at URL over HTTP (http:// or https://): Streamable HTTP, or the "
    "older HTTP+SSE transport when the server refuses it (see --transport).",
)
@click.option(
    "--transport",
    "http_transport",
    type=click.Choice(["auto", "streamable-http", "sse"]),
    default="auto",
    show_default=True,
    help="With --url: the HTTP transport; 'auto' tries Streamable HTTP, then HTTP+SSE.",
)
@click.option(
    "--header",
    "http_headers",
    type=EnvPair(),
    multiple=True,
    metavar="NAME=VALUE",
    help="With --url: a header sent on every request (repeatable). Values are secrets: "
    "they are redacted from all output.",
)
@click.option(
    "--token",
    envvar="MCPL_HOST_TOKEN",
    metavar="TOKEN",
    help="With --ws or --url: the credential to send (default: $MCPL_HOST_TOKEN); over "
    "HTTP always as 'Authorization: Bearer'. Redacted from all output.",
)
@click.option(
    "--token-in",
    type=click.Choice(["header", "query"]),
    default="header",
    show_default=True,
    help="With --ws: send the token as 'Authorization: Bearer' or as the query parameter token.",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Probe a server of this config file (with --server), with its settings: command or "
    "URL, env, grant and feature-set policy, timeouts. --grant/--deny and an explicit "
    "--timeout/--request-timeout override the file.",
)
@click.option("--server", "server_name", metavar="NAME", help="With --config: the server to probe.")
@click.option(
    "--env",
    "env",
    type=EnvPair(),
    multiple=True,
    metavar="KEY=VALUE",
    help="Set a variable in the server's environment (repeatable). Values of secret names "
    "(TOKEN, KEY, SECRET, PASSWORD, AUTH...) are redacted from all output; others are plain "
    "settings.",
)
@click.option(
    "--secret",
    "secrets",
    type=EnvPair(),
    multiple=True,
    metavar="KEY=VALUE",
    help="A secret: VALUE is redacted from all output, whatever KEY says (repeatable). With a "
    "command, KEY=VALUE is also set in its environment.",
)
@click.option(
    "--inherit-env",
    is_flag=True,
    help="Pass this shell's whole environment to the server (default: PATH, HOME, locale "
    "and proxy variables only).",
)
@click.option("--cwd", type=click.Path(exists=True, file_okay=False), help="Working directory of the server.")
@click.option(
    "--timeout",
    type=Seconds(allow_zero=False),
    default=DEFAULT_HANDSHAKE_TIMEOUT_SECONDS,
    show_default=True,
    help="Seconds to wait for the server's answer to initialize (with --ws: also for the "
    "WebSocket opening handshake).",
)
@click.option(
    "--request-timeout",
    type=Seconds(allow_zero=False),
    default=DEFAULT_REQUEST_TIMEOUT_SECONDS,
    show_default=True,
    help="Seconds to wait for each later answer (featureSets/update, list calls).",
)
@click.option(
    "--listen",
    type=Seconds(allow_zero=True),
    default=0,
    show_default=True,
    help="Seconds to listen for push events, notifications and server requests after "
    "listing ('inf': until Ctrl-C).",
)
@click.option(
    "--grant",
    "grants",
    multiple=True,
    metavar="PATTERN",
    callback=_check_patterns,
    help="Grant only the advertised MCPL capabilities matching PATTERN (repeatable; '*' "
    "matches one segment, e.g. 'channels.*'). Default: grant all advertised.",
)
@click.option(
    "--deny",
    "denies",
    multiple=True,
    metavar="PATTERN",
    callback=_check_patterns,
    help="Never grant capabilities matching PATTERN (repeatable; wins over --grant).",
)
@click.option(
    "--protocol",
    type=click.Choice(["auto", "handshake", "stateless"]),
    default="auto",
    show_default=True,
    help="The MCP era: 'auto' asks server/discover (MCP 2026-07-28) over stdio and Streamable "
    "HTTP and falls back to initialize; 'handshake' only initialize; 'stateless' only "
    "server/discover.",
)
@click.option(
    "--root",
    "roots",
    multiple=True,
    metavar="PATH",
    help="Serve roots/list with this directory (or file:// URI; repeatable): the host then advertises roots.",
)
@click.option(
    "--sampling-reply",
    metavar="TEXT",
    help="Serve sampling/createMessage with this canned answer: the host then advertises sampling.",
)
@click.option(
    "--elicit-reply",
    metavar="JSON|ACTION",
    help="Serve elicitation/create (form and URL modes): a JSON object accepts a form with it "
    "(and accepts a URL); accept, decline or cancel answers every elicitation so.",
)
@click.option(
    "--ask",
    is_flag=True,
    help="Serve sampling and elicitation by asking on this terminal (what no canned reply "
    "answers); needs a terminal on stdin.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON document on stdout instead of the report; logs become JSON lines.",
)
@click.option(
    "--log-level",
    type=click.Choice(_LEVELS),
    default="warning",
    show_default=True,
    help="Least level of log lines written to stderr.",
)
@click.option(
    "--stderr-level",
    type=click.Choice(_LEVELS),
    default="debug",
    show_default=True,
    help="Level at which the server's stderr lines are logged.",
)
@click.option(
    "--no-subreaper",
    "no_subreaper",
    is_flag=True,
    help="Linux: do not make mcpl-host a child subreaper. A server's descendant that leaves its "
    "process group is then still stopped when found by its marks, but not one that loses them all.",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- COMMAND [ARG...]]")
@click.pass_context
def probe(
    ctx: click.Context,
    ws_url: str | None,
    http_url: str | None,
    http_transport: Literal["auto", "streamable-http", "sse"],
    http_headers: tuple[tuple[str, str], ...],
    token: str | None,
    token_in: Literal["header", "query"],
    config_file: str | None,
    server_name: str | None,
    env: tuple[tuple[str, str], ...],
    secrets: tuple[tuple[str, str], ...],
    inherit_env: bool,
    cwd: str | None,
    timeout: float,
    request_timeout: float,
    listen: float,
    grants: tuple[str, ...],
    denies: tuple[str, ...],
    protocol: ProtocolChoice,
    roots: tuple[str, ...],
    sampling_reply: str | None,
    elicit_reply: str | None,
    ask: bool,
    as_json: bool,
    log_level: str,
    stderr_level: str,
    no_subreaper: bool,
    command: tuple[str, ...],
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
      1    the server failed (refused or broke the handshake, exited, timed out)
      2    usage or configuration error
      130  interrupted by Ctrl-C (or SIGTERM, SIGHUP) before the listing was done
    """
    explicit = {
        name
        for name in ctx.params
        if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE
    }
    targets = [
        what
        for what, given in (
            ("a command", command),
            ("--ws", ws_url),
            ("--url", http_url),
            ("--config", config_file),
        )
        if given
    ]
    if len(targets) > 1:
        raise click.UsageError(
            f"give a command, --ws URL, --url URL or --config FILE, not {' and '.join(targets)}"
        )
    if (config_file is None) != (server_name is None):
        raise click.UsageError("--config FILE and --server NAME go together")
    if ws_url is None and http_url is None and "token" in explicit:
        raise click.UsageError("--token applies only with --ws or --url")
    if ws_url is None and "token_in" in explicit:
        raise click.UsageError("--token-in applies only with --ws")
    if http_url is None and explicit & {"http_headers", "http_transport"}:
        raise click.UsageError("--header and --transport apply only with --url")
    if (ws_url or http_url or config_file) and explicit & {"env", "cwd", "inherit_env"}:
        raise click.UsageError("--env, --cwd and --inherit-env apply only to a command")
    if ask and not sys.stdin.isatty():
        raise click.UsageError("--ask needs a terminal on stdin")
    try:
        features = probe_handlers(roots, sampling_reply, elicit_reply, ask)
    except ValueError as exc:  # never repeats the reply
        raise click.UsageError(str(exc)) from None
    served: dict[str, Any] = {"handlers": features, "protocol": protocol}
    policy = (
        GrantPolicy(grant=grants, deny=denies)
        if grants
        else GrantPolicy(grant_all_advertised=True, deny=denies)
    )
    limits = Limits(handshake_timeout_seconds=timeout, request_timeout_seconds=request_timeout)
    explicit_secrets = tuple(value for _, value in secrets if value)
    connect: Callable[[ProbeRecorder], ServerConnection]
    if config_file is not None:
        assert server_name is not None
        server = _config_server(ctx, config_file, server_name)
        overrides: dict[str, Any] = {
            field: value
            for option, field, value in (
                ("timeout", "handshake_timeout_seconds", timeout),
                ("request_timeout", "request_timeout_seconds", request_timeout),
            )
            if option in explicit
        }
        server = dataclasses.replace(server, limits=dataclasses.replace(server.limits, **overrides))
        if explicit & {"grants", "denies"}:
            server = dataclasses.replace(server, grant_policy=policy)
        server = dataclasses.replace(server, secrets=(*server.secrets, *explicit_secrets))
        target: dict[str, Any] = {
            "command": redact_command([server.command, *server.args]) if server.command else [],
            "config": {"file": config_file, "server": server_name},
        }
        connect = functools.partial(_connect_config, server, **served)
    elif http_url is not None:
        headers = dict(http_headers)
        shown_secrets = [secret for secret in (token, *headers.values()) if secret]
        target = {"command": [], "url": shown_http_url(http_url, Redactor(shown_secrets))}
        connect = functools.partial(
            _connect_http,
            http_url,
            token=token,
            headers=headers,
            transport=http_transport,
            policy=policy,
            limits=limits,
            **served,
        )
    elif ws_url is not None:
        redactor = Redactor(server_secrets(url=ws_url, token=token, explicit=explicit_secrets))
        target = {"command": [], "url": shown_url(ws_url, redactor)}
        connect = functools.partial(
            _connect_ws,
            ws_url,
            token=token,
            token_in=token_in,
            policy=policy,
            limits=limits,
            secrets=explicit_secrets,
            open_timeout_seconds=timeout,
            **served,
        )
    else:
        name = None
        if not command:
            command, name = (sys.executable, str(demo_server_path())), "mcpl-demo"
        target = {"command": redact_command(command)}
        connect = functools.partial(
            _connect_command,
            list(command),
            name=name,
            env={**dict(env), **dict(secrets)},
            secrets=explicit_secrets,
            cwd=cwd,
            inherit_env=inherit_env,
            policy=policy,
            limits=limits,
            stderr_log_level=stderr_level,
            **served,
        )
    configure_logging(log_level, json_lines=as_json)
    out = None if as_json else report.ReportConsole(highlight=False)
    run = functools.partial(_probe, target, listen, out, connect)
    owned = _own_children(not no_subreaper)
    try:
        doc, status = anyio.run(run, backend="asyncio")
    except KeyboardInterrupt:  # Ctrl-C outside the probe's own handling
        _end_children(owned)
        ctx.exit(EXIT_INTERRUPTED)
    _end_children(owned)
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


# --- run ------------------------------------------------------------------------------------


async def _host(
    config: HostConfig, out: report.ReportConsole | None, health: float | None, owned: bool = False
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
                tg.start_soon(_reap_strays, DEFAULT_PROCESS_TREE_SCAN_SECONDS)
            # Servers' requests are answered -32601 (push events accepted) and reported.
            async with Host(
                config, handlers_factory=lambda name: HostHandlers(), health_interval_seconds=health
            ) as host:
                if out is not None:
                    report.render_run_start(out, config.source, host.servers)
                async for event in host.events():
                    shown = report.run_event(event.to_json(), host.redactor(event.server))
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
                if out is not None:
                    report.render_run_stopping(out)
        tg.cancel_scope.cancel()  # signals during the close were ignored: the close is bounded
    if out is not None:
        report.render_run_end(out, status == EXIT_OK)
    return status


@main.command(
    context_settings={"max_content_width": 100},
    epilog="""\b
Examples:
  mcpl-host run servers.json
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
    type=click.Choice(_LEVELS),
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
    f"{DEFAULT_HEALTH_TIMEOUT_SECONDS:g} s is restarted per its restart policy (default: "
    f"no pings).",
)
@click.option(
    "--no-subreaper",
    "no_subreaper",
    is_flag=True,
    help="Linux: do not make mcpl-host a child subreaper. A server's descendant that leaves its "
    "process group is then still stopped when found by its marks, but not one that loses them all.",
)
@click.pass_context
def run(
    ctx: click.Context,
    config_file: str,
    as_json: bool,
    log_level: str,
    secrets: tuple[tuple[str, str], ...],
    health_interval: float | None,
    no_subreaper: bool,
) -> None:
    """Host the servers in CONFIG and print what happens until Ctrl-C (or SIGTERM, SIGHUP).

    CONFIG is the usual {"mcpServers": {...}} JSON (also "mcplServers"), with our keys for
    grants, feature sets, timeouts, restart policy and secrets. Every problem in it is listed
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
    config = _load_config(ctx, config_file)
    if not config.enabled_servers:
        raise click.UsageError(f"{config_file} has no enabled server")
    extra = tuple(value for _, value in secrets if value)
    if extra:
        config = dataclasses.replace(
            config,
            servers={
                name: dataclasses.replace(server, secrets=(*server.secrets, *extra))
                for name, server in config.servers.items()
            },
        )
    configure_logging(log_level, json_lines=as_json)
    out = None if as_json else report.ReportConsole(highlight=False)
    owned = _own_children(not no_subreaper)
    try:
        status = anyio.run(_host, config, out, health_interval, owned, backend="asyncio")
    except KeyboardInterrupt:  # Ctrl-C before the signal receiver was in place
        status = EXIT_INTERRUPTED
    _end_children(owned)
    ctx.exit(status)


if __name__ == "__main__":
    main(prog_name="mcpl-host")

"""Which server a command talks to: the options ``probe``, ``call``, ``read``, ``prompt``,
``send`` and ``shell`` share, and the ``ServerConfig`` entries they select.

Rules of this module:

- A target is exactly one of: a command (after ``--``; none at all: the bundled demo
  server), ``--ws URL``, ``--url URL`` (HTTP), or ``--config FILE --server NAME``
  (``--server`` may be left out when the file has one enabled server; otherwise the error
  lists the names, at most ``editor_configs.MAX_NAMES_SHOWN``; ``shell`` also takes
  ``--config FILE`` alone: every enabled server of the file). FILE is read in any shape of
  ``editor_configs`` (Claude Desktop, Claude Code, Cursor, VS Code, Windsurf, ours), and
  ``auto`` is the first well-known one found. Giving
  two is a usage error (exit 2), as is an option that does not apply to the target
  (``--token`` without ``--ws`` or ``--url``, ``--token-in`` without ``--ws``, ``--header``
  and ``--transport`` without ``--url``, ``--env``, ``--cwd`` and ``--inherit-env`` without a
  command) and an empty ``--token`` (an unset ``"$TOKEN"`` expands to nothing).
- Every target becomes ``ServerConfig`` entries, the shape a config file gives, so every
  command builds its servers one way: ``HostedServer(config, ...)`` (the shell: a ``Host``).
  The name of a target that is not a config entry is the one ``ServerConfig`` gives it
  (``default_server_name`` of a command, the URL shown); the bundled demo is ``mcpl-demo``.
- Policy: the default is to grant everything the server advertises; ``--grant`` patterns
  replace it, ``--deny`` patterns are never granted. For a config entry, the file's policy
  holds unless ``--grant``/``--deny`` are given, and its timeouts unless ``--timeout`` /
  ``--request-timeout`` are.
- ``--secret KEY=VALUE``: VALUE is a secret of every selected server; for a command,
  ``KEY=VALUE`` is also set in its environment. The command shown goes through
  ``redact_command``, a URL through ``shown_url`` / ``shown_http_url``.
- ``--record FILE`` (``record_option``, one definition: every command that connects, ``check``
  and ``run`` included) records the session there (``mcpl_host.recording``): ``open_recorder``
  opens it once the options are checked, and it is closed when the command ends.
- The environment passed to a command is described once, from
  ``transports.stdio.ENV_ALLOWLIST`` (``passed_environment()``), for ``--help``.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import anyio
import click

import mcpl_host
from mcpl_host import editor_configs, report
from mcpl_host.config import HTTP_TRANSPORTS, ConfigError, ServerConfig
from mcpl_host.config_file import HostConfig
from mcpl_host.handlers import HostHandlers
from mcpl_host.hosted import HostedServer
from mcpl_host.limits import DEFAULT_HANDSHAKE_TIMEOUT_SECONDS, DEFAULT_REQUEST_TIMEOUT_SECONDS, Limits
from mcpl_host.mcpl.compat import COMPAT_SETTINGS
from mcpl_host.mcpl.endpoint_uri import is_mcpl_uri
from mcpl_host.mcpl.grants import GrantPolicy, pattern_problem
from mcpl_host.observe import ConnectionObserver
from mcpl_host.recording import Recorder
from mcpl_host.secrets import redact_command
from mcpl_host.services.coalescing import EventInbox
from mcpl_host.stateless import PROTOCOL_CHOICES
from mcpl_host.transports import process_tree
from mcpl_host.transports.stdio import ENV_ALLOWLIST, ENV_ALLOWLIST_PREFIXES
from mcpl_host.transports.ws_params import shown_url

__all__ = [
    "AUTO",
    "DEMO_NAME",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_SERVER_FAILED",
    "EXIT_USAGE",
    "LEVELS",
    "EnvPair",
    "Seconds",
    "Selection",
    "built_config",
    "demo_server_path",
    "end_children",
    "load_config_or_exit",
    "open_recorder",
    "record_option",
    "own_children",
    "passed_environment",
    "check_target",
    "config_server",
    "reap_strays",
    "root_option",
    "allow_unknown_option",
    "select_servers",
    "server_names",
    "server_options",
]

#: Exit statuses shared by every command: 0 done; 1 the server failed (or, for ``call``,
#: answered an error or ``isError``); 2 usage or configuration error; 130 interrupted.
EXIT_OK, EXIT_SERVER_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: Log levels of ``--log-level`` and ``--stderr-level``.
LEVELS = ["debug", "info", "warning", "error"]
#: The name of the bundled demo server when it is the target.
DEMO_NAME = "mcpl-demo"
#: ``--config auto``: the first well-known config found (``editor_configs.look_around``).
AUTO = "auto"

F = TypeVar("F", bound=Callable[..., Any])

if TYPE_CHECKING:  # click 8.2+ types are generic; 8.1's are not subscriptable at run time
    _SecondsType = click.ParamType[float]
    _PairType = click.ParamType[tuple[str, str]]
else:
    _SecondsType = _PairType = click.ParamType


def passed_environment() -> str:
    """The variables a command gets from this environment by default, as one phrase:
    ``ENV_ALLOWLIST`` sorted, then the prefixes (``LC_*``)."""
    names = sorted(ENV_ALLOWLIST, key=lambda name: (name.lower(), name))
    return ", ".join([*names, *(f"{prefix}*" for prefix in ENV_ALLOWLIST_PREFIXES)])


# --- the process tree -------------------------------------------------------------------------


def own_children(enabled: bool) -> bool:
    """Make this process a child subreaper (Linux; ``enabled``: not ``--no-subreaper``)."""
    return enabled and process_tree.supported() and process_tree.become_child_subreaper()


def end_children(owned: bool) -> None:
    """Every server is closed: kill and reap whatever descendant is left (a daemon that lost
    every mark its server's tree is found by), saying so on stderr."""
    if owned:
        left = process_tree.end_descendants()
        if left:
            click.echo(f"mcpl-host: killed {left} process(es) the servers left behind", err=True)


async def reap_strays(interval: float) -> None:
    """Reap orphans reparented to this process (it owns all its children), every ``interval``
    seconds, until cancelled."""
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


# --- parameter types --------------------------------------------------------------------------


class Seconds(_SecondsType):
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


class EnvPair(_PairType):
    """``KEY=VALUE``; the value may be a secret, so an error message never repeats it."""

    name = "KEY=VALUE"

    def convert(self, value: Any, param: Any, ctx: Any) -> tuple[str, str]:
        if isinstance(value, tuple):
            return cast("tuple[str, str]", value)
        key, sep, val = str(value).partition("=")
        if not sep or not key or "\0" in value:
            self.fail("expected KEY=VALUE with a non-empty KEY (the value is not shown)", param, ctx)
        return key, val


class HeaderPair(_PairType):
    """``Name: Value`` (as curl and the MCP Inspector take it) or ``Name=Value``; the value
    may be a secret, so an error message never repeats it."""

    name = "'NAME: VALUE'"

    def convert(self, value: Any, param: Any, ctx: Any) -> tuple[str, str]:
        if isinstance(value, tuple):
            return cast("tuple[str, str]", value)
        text = str(value)
        colon, equals = text.find(":"), text.find("=")
        cut = min(i for i in (colon, equals, len(text)) if i >= 0)
        key, val = text[:cut].strip(), text[cut + 1 :]
        if cut == len(text) or not key or "\0" in text:
            self.fail(
                "expected 'NAME: VALUE' or NAME=VALUE with a non-empty NAME (the value is not shown)",
                param,
                ctx,
            )
        return key, val.strip() if cut == colon else val


def _check_patterns(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """Refuse a ``--grant``/``--deny`` pattern that matches no capability path (exit 2)."""
    for pattern in value:
        problem = pattern_problem(pattern)
        if problem is not None:
            raise click.BadParameter(problem, ctx=ctx, param=param)
    return value


# --- the options --------------------------------------------------------------------------------


def server_options(*, verb: str = "probe", stderr_level: bool = True, many: bool = False) -> Callable[[F], F]:
    """The target, environment, timeout, policy and logging options (module rules), for a
    command whose help says ``verb`` ("probe", "call"...). ``stderr_level``: offer
    ``--stderr-level``; ``many``: ``--config FILE`` without ``--server`` selects every
    server."""
    server_help = (
        "With --config: the server to use (default: every enabled server of the file)."
        if many
        else f"With --config: the server to {verb} (not needed when the file has one)."
    )
    options = [
        click.option(
            "--ws",
            "ws_url",
            metavar="URL",
            help=f"{verb.capitalize()} the WebSocket server at URL (ws://, wss://, or mcpl://: dialled at "
            "wss://, MCPL §18) instead of starting a command.",
        ),
        click.option(
            "--url",
            "http_url",
            metavar="URL",
            help=f"{verb.capitalize()} the MCP server at URL over HTTP (http:// or https://): Streamable "
            "HTTP, or the older HTTP+SSE transport when the server refuses it (see --transport). "
            "An mcpl:// URL is an MCPL server over WebSocket, as with --ws.",
        ),
        click.option(
            "--mcp-only-fallback",
            is_flag=True,
            default=False,
            help="With an mcpl:// URL: a server that does not advertise MCPL is hosted as plain MCP "
            "instead of failing (MCPL §18.5); the report says so.",
        ),
        click.option(
            "--transport",
            "http_transport",
            type=click.Choice(["auto", "streamable-http", "sse"]),
            default="auto",
            show_default=True,
            help="With --url: the HTTP transport; 'auto' tries Streamable HTTP, then HTTP+SSE.",
        ),
        click.option(
            "--header",
            "http_headers",
            type=HeaderPair(),
            multiple=True,
            metavar="'NAME: VALUE'",
            help="With --url: a header sent on every request (repeatable; 'Name: Value' as curl "
            "takes it, or Name=Value). Values are secrets: they are redacted from all output.",
        ),
        click.option(
            "--stored-auth-only",
            is_flag=True,
            help="HTTP servers behind OAuth: use only stored logins (mcpl-host login), their refresh "
            "and client credentials; never open a browser nor wait for a person. For CI.",
        ),
        click.option(
            "--client-id",
            "oauth_client_id",
            metavar="ID",
            help="With --url: the OAuth client id registered with the server's authorization server.",
        ),
        click.option(
            "--client-secret",
            "oauth_client_secret",
            envvar="MCPL_HOST_CLIENT_SECRET",
            metavar="SECRET",
            help="With --client-id: its secret, for the client credentials grant (default: "
            "$MCPL_HOST_CLIENT_SECRET). Redacted from all output.",
        ),
        click.option(
            "--private-key-jwt",
            "oauth_private_key",
            type=click.Path(dir_okay=False, exists=True),
            metavar="FILE",
            help="With --client-id: a PEM private key; the client authenticates with private_key_jwt "
            "(RFC 7523) for the client credentials grant.",
        ),
        click.option(
            "--scope",
            "oauth_scope",
            metavar="SCOPES",
            help="With --url: the OAuth scopes to ask for (space-separated; default: what the server asks).",
        ),
        click.option(
            "--token",
            envvar="MCPL_HOST_TOKEN",
            metavar="TOKEN",
            help="With --ws or --url: the credential to send (default: $MCPL_HOST_TOKEN); over "
            "HTTP always as 'Authorization: Bearer'. Redacted from all output.",
        ),
        click.option(
            "--token-in",
            type=click.Choice(["header", "query"]),
            default="header",
            show_default=True,
            help="With --ws: send the token as 'Authorization: Bearer' or as the query parameter token.",
        ),
        click.option(
            "--config",
            "config_file",
            type=click.Path(dir_okay=False),
            metavar="FILE",
            help="Use a server of this config file, with its settings: command or URL, env, grant "
            "and feature-set policy, timeouts. The file may be ours or Claude Desktop's, Claude "
            "Code's, Cursor's, VS Code's or Windsurf's; 'auto': the first of those found (see "
            "mcpl-host config list). --grant/--deny and an explicit --timeout/--request-timeout "
            "override the file.",
        ),
        click.option("--server", "server_name", metavar="NAME", help=server_help),
        click.option(
            "--compat",
            type=click.Choice(COMPAT_SETTINGS),
            default="auto",
            show_default=True,
            help="Compatibility profile (docs/protocol.md, \"Compatibility profiles\"): 'strict' is "
            "MCPL 0.5 as written; '0.4' hosts servers written for MCPL 0.4 hosts (the policy as a "
            "notification when the request fails, early requests held); 'auto' is strict for a "
            "server that says 0.5, else 0.4. With --config, only when given.",
        ),
        click.option(
            "--protocol",
            type=click.Choice(PROTOCOL_CHOICES),
            default="auto",
            show_default=True,
            help="The MCP era: 'auto' asks server/discover (MCP 2026-07-28) over stdio and "
            "Streamable HTTP and falls back to initialize; 'handshake' only initialize; "
            "'stateless' only server/discover. With --config, only when given.",
        ),
        click.option(
            "--env",
            "env",
            type=EnvPair(),
            multiple=True,
            metavar="KEY=VALUE",
            help="Set a variable in the server's environment (repeatable). Values of secret names "
            "(TOKEN, KEY, SECRET, PASSWORD, AUTH...) are redacted from all output; others are plain "
            "settings.",
        ),
        click.option(
            "--secret",
            "secrets",
            type=EnvPair(),
            multiple=True,
            metavar="KEY=VALUE",
            help="A secret: VALUE is redacted from all output, whatever KEY says (repeatable). With a "
            "command, KEY=VALUE is also set in its environment.",
        ),
        click.option(
            "--inherit-env",
            is_flag=True,
            help=f"Pass this shell's whole environment to the server (default: only {passed_environment()}).",
        ),
        click.option(
            "--cwd", type=click.Path(exists=True, file_okay=False), help="Working directory of the server."
        ),
        click.option(
            "--timeout",
            type=Seconds(allow_zero=False),
            default=DEFAULT_HANDSHAKE_TIMEOUT_SECONDS,
            show_default=True,
            help="Seconds the whole handshake may take: opening the transport (the WebSocket "
            "opening handshake, the HTTP+SSE endpoint), the era probe, initialize, "
            "notifications/initialized and the initial MCPL policy exchange.",
        ),
        click.option(
            "--request-timeout",
            type=Seconds(allow_zero=False),
            default=DEFAULT_REQUEST_TIMEOUT_SECONDS,
            show_default=True,
            help="Seconds to wait for each later answer.",
        ),
        click.option(
            "--max-total-timeout",
            type=Seconds(allow_zero=False),
            default=None,
            help="Let progress notifications extend --request-timeout, up to this many seconds "
            "in all for one request (a long tool that reports progress; default: progress "
            "does not extend it).",
        ),
        click.option(
            "--grant",
            "grants",
            multiple=True,
            metavar="PATTERN",
            callback=_check_patterns,
            help="Grant only the advertised MCPL capabilities matching PATTERN (repeatable; '*' "
            "matches one segment, e.g. 'channels.*'). Default: grant all advertised but the "
            "deprecated injection paths (RFC-010), granted only by a PATTERN naming them "
            "('contextHooks.beforeInference.inject.*').",
        ),
        click.option(
            "--ignore-injections",
            "ignore_injections",
            is_flag=True,
            default=False,
            help="Apply the MCPL 0.6 rule now (RFC-010 §4.2): never grant an injection path and "
            "never apply a server's contextInjections.",
        ),
        click.option(
            "--deny",
            "denies",
            multiple=True,
            metavar="PATTERN",
            callback=_check_patterns,
            help="Never grant capabilities matching PATTERN (repeatable; wins over --grant).",
        ),
        click.option(
            "--log-level",
            type=click.Choice(LEVELS),
            default="warning",
            show_default=True,
            help="Least level of log lines written to stderr.",
        ),
    ]
    if stderr_level:
        options.append(
            click.option(
                "--stderr-level",
                type=click.Choice(LEVELS),
                default="debug",
                show_default=True,
                help="Level at which the server's stderr lines are logged.",
            )
        )
    options.append(record_option)
    options.append(
        click.option(
            "--no-subreaper",
            "no_subreaper",
            is_flag=True,
            help="Linux: do not make mcpl-host a child subreaper. A server's descendant that leaves "
            "its process group is then still stopped when found by its marks, but not one that "
            "loses them all.",
        )
    )

    def decorate(function: F) -> F:
        for option in reversed(options):
            function = option(function)
        return function

    return decorate


#: ``--record FILE`` of every command that connects (module rules; defined once, here).
record_option = click.option(
    "--record",
    "record",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Record the session to FILE as JSON Lines (every line both ways, the lifecycle, the host's "
    "decisions; secrets redacted; rotated at maxRecordingBytes to FILE.1...). Format: docs/cli.md, "
    '"Recording".',
)


def open_recorder(ctx: click.Context, path: str | None) -> Recorder | None:
    """A ``Recorder`` writing to ``path`` (``--record``), closed when the command ends
    (``ctx.call_on_close``); None without a path. ``click.UsageError`` (exit 2) when the
    file cannot be written."""
    if path is None:
        return None
    try:
        recorder = Recorder(path)
    except OSError as exc:
        raise click.UsageError(f"--record: cannot write {path}: {exc.strerror or exc}") from None
    ctx.call_on_close(recorder.close)
    return recorder


#: ``--root PATH`` (repeatable) of the commands that serve ``roots/list`` (probe, shell).
root_option = click.option(
    "--root",
    "roots",
    multiple=True,
    metavar="PATH",
    help="Serve roots/list with this directory (or file:// URI; repeatable): the host then advertises roots.",
)


#: ``--allow-unknown`` of the commands that call tools (call, shell): send argument names the
#: tool's inputSchema does not declare (docs/protocol.md CL1).
allow_unknown_option = click.option(
    "--allow-unknown",
    is_flag=True,
    help="Send argument names a tool's inputSchema does not declare (by default refused, naming "
    "the closest, when its properties say which names there are and additionalProperties does "
    "not allow more).",
)


# --- the selection ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Selection:
    """What the options selected: ``servers`` (name -> ``ServerConfig``; one entry, except
    ``shell --config FILE`` without ``--server``) and ``target`` (for the probe document:
    ``command`` shown redacted, and ``url`` or ``config``), ``recorder`` (``--record``, or
    None)."""

    servers: dict[str, ServerConfig]
    target: dict[str, Any]
    recorder: Recorder | None = None

    @property
    def only(self) -> ServerConfig:
        """The one server selected."""
        (server,) = self.servers.values()
        return server

    def hosted(
        self,
        *,
        handlers: HostHandlers | None = None,
        observer: ConnectionObserver | None = None,
        event_inbox: EventInbox | None = None,
    ) -> HostedServer:
        """A ``HostedServer`` of the one server selected (``event_inbox``: RFC-006, see
        ``HostedServer``). Its configuration was checked by ``select_servers``, so this does
        not raise."""
        return HostedServer(
            self.only, handlers=handlers, observer=observer, event_inbox=event_inbox, record=self.recorder
        )


def load_config_or_exit(ctx: click.Context, path: str) -> HostConfig:
    """The config at ``path``, in any shape ``editor_configs`` reads (``auto``: the first
    well-known one found, said on stderr; its ``source`` is the path); on problems, print
    every one to stderr and exit 2. ``click.UsageError`` when ``auto`` finds none."""
    place = editor_configs.Place.here()
    if path == AUTO:
        looked = editor_configs.look_around(place, sys.platform, first_only=True)
        chosen = looked[-1] if looked and looked[-1].usable else None
        if chosen is None:
            raise click.UsageError(
                "--config auto: no MCP config found (looked at "
                + ", ".join(report.safe_text(str(found.path), max_chars=300) for found in looked)
                + "); see mcpl-host config list"
            )
        click.echo(
            f"mcpl-host: --config auto: using {report.safe_text(str(chosen.path), max_chars=1000)} "
            f"({chosen.client})",
            err=True,
        )
        path = str(chosen.path)
    try:
        config, _ = editor_configs.load_any_config(path, place)
    except ConfigError as exc:
        count = len(exc.problems)
        click.echo(
            f"Error: {report.safe_text(path, max_chars=1000)} has {count} problem{'s' if count != 1 else ''}; "
            "nothing was started:",
            err=True,
        )
        for problem in exc.problems:
            click.echo(f"  {report.safe_text(str(problem), max_chars=1000)}", err=True)
        ctx.exit(EXIT_USAGE)
    return config


def server_names(servers: Mapping[str, object]) -> str:
    """The names of ``servers`` for a message: safe to print, at most
    ``editor_configs.MAX_NAMES_SHOWN`` of them, then how many more."""
    return editor_configs.names_phrase([report.safe_text(name, max_chars=100) for name in servers]) or "none"


def config_server(
    ctx: click.Context, path: str, name: str, servers: Mapping[str, ServerConfig] | None = None
) -> ServerConfig:
    """The server ``name`` of the config at ``path`` (``servers``: the file's, when already
    loaded). Exits 2 on config problems; ``click.UsageError`` for a name the file lacks."""
    found = load_config_or_exit(ctx, path).servers if servers is None else servers
    if name not in found:
        raise click.UsageError(
            f"--server: no server named {report.safe_text(name, max_chars=100)!r} in "
            f"{report.safe_text(path, max_chars=1000)} (it has: {server_names(found)})"
        )
    return found[name]


def _explicit(ctx: click.Context) -> set[str]:
    return {
        name
        for name in ctx.params
        if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE
    }


def check_target(
    ctx: click.Context, options: Mapping[str, object], command: tuple[str, ...], many: bool
) -> None:
    """Refuse (``click.UsageError``, exit 2) a target given twice, ``--config`` without
    ``--server`` (unless ``many``), and an option of another target (``--token`` without
    ``--ws``/``--url``...). ``options``: the target options by their parameter names."""
    explicit = _explicit(ctx)
    ws_url, http_url, config_file = options["ws_url"], options["http_url"], options["config_file"]
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
    if options["server_name"] is not None and config_file is None:
        raise click.UsageError("--server NAME goes with --config FILE")
    mcpl_target = any(isinstance(url, str) and is_mcpl_uri(url) for url in (ws_url, http_url))
    if options.get("mcp_only_fallback") and not (mcpl_target or config_file):
        raise click.UsageError("--mcp-only-fallback applies only with an mcpl:// URL (or --config)")
    if ws_url is None and http_url is None and "token" in explicit:
        raise click.UsageError("--token applies only with --ws or --url")
    if ws_url is None and "token_in" in explicit:
        raise click.UsageError("--token-in applies only with --ws")
    if http_url is None and explicit & {"http_headers", "http_transport"}:
        raise click.UsageError("--header and --transport apply only with --url")
    oauth_given = explicit & {"oauth_client_id", "oauth_client_secret", "oauth_private_key", "oauth_scope"}
    if http_url is None and config_file is None and oauth_given:
        raise click.UsageError(
            "--client-id, --client-secret, --private-key-jwt and --scope apply only with --url or --config"
        )
    if isinstance(http_url, str) and is_mcpl_uri(http_url) and "http_transport" in explicit:
        raise click.UsageError("--transport applies only to an http:// or https:// URL, not mcpl://")
    if (ws_url or http_url or config_file) and explicit & {"env", "cwd", "inherit_env"}:
        raise click.UsageError("--env, --cwd and --inherit-env apply only to a command")
    if (ws_url or http_url) and options["token"] is not None and not options["token"]:
        raise click.UsageError(
            "--token is empty: give the credential itself (an unset variable, as in --token "
            '"$TOKEN", expands to nothing), or leave --token out'
        )


def endpoint_target(server: ServerConfig) -> dict[str, Any]:
    """``{"endpoint": {"configuredUri", "canonicalUri", "resolvedTransport"}}`` for an
    ``mcpl://`` server (MCPL §18.4: the three values, each shown as its URL is, with
    credentials redacted: ``shown_url``), else ``{}``."""
    if server.endpoint is None:
        return {}
    redactor = server.redactor()
    return {"endpoint": {key: shown_url(value, redactor) for key, value in server.endpoint.to_json().items()}}


def built_config(prefix: str, **settings: Any) -> ServerConfig:
    """``ServerConfig(**settings)``; ``prefix`` names the option in the usage error for
    settings the library refuses (the message never holds a secret)."""
    try:
        return ServerConfig(**settings)
    except ValueError as exc:  # a bad URL, token or header: the message holds none of them
        raise click.UsageError(f"{prefix}: {exc}") from None


def config_servers(
    ctx: click.Context, path: str, name: str | None, *, many: bool = False
) -> tuple[dict[str, ServerConfig], str, str | None]:
    """The servers of the config at ``path`` a command runs: ``name``'s, or with none every
    enabled one (``many``) or the only enabled one. Returns them by name, the file's source
    path and the server's name (None for ``many`` without ``name``). Exits 2 on config
    problems; ``click.UsageError`` for a name the file lacks, a file with no enabled server,
    or several when one is wanted (the error lists their names, bounded)."""
    loaded = load_config_or_exit(ctx, path)
    servers, source = loaded.servers, loaded.source
    if name is not None:
        return {name: config_server(ctx, source, name, servers)}, source, name
    chosen = {key: server for key, server in servers.items() if not server.disabled}
    shown = report.safe_text(source, max_chars=1000)
    if not chosen:
        raise click.UsageError(f"{shown} has no enabled server")
    if many:
        return chosen, source, None
    if len(chosen) > 1:
        raise click.UsageError(
            f"{shown} has {len(chosen)} servers: give --server NAME, one of {server_names(chosen)}"
        )
    return chosen, source, next(iter(chosen))


def select_servers(
    ctx: click.Context, options: dict[str, Any], command: tuple[str, ...], *, many: bool = False
) -> Selection:
    """The servers ``options`` (the ``server_options`` values) and ``command`` (the words
    after ``--``) select (module rules). Raises ``click.UsageError`` (exit 2) and exits 2
    on config problems, before anything is started."""
    check_target(ctx, options, command, many)
    explicit = _explicit(ctx)
    grants, denies = options["grants"], options["denies"]
    ignore = bool(options.get("ignore_injections"))
    policy = (
        GrantPolicy(grant=grants, deny=denies, ignore_injections=ignore)
        if grants
        else GrantPolicy(grant_all_advertised=True, deny=denies, ignore_injections=ignore)
    )
    timeout, request_timeout = options["timeout"], options["request_timeout"]
    explicit_secrets = tuple(value for _, value in options["secrets"] if value)
    stderr_log_level = options.get("stderr_level") or "debug"
    max_total = options["max_total_timeout"]
    limits_fields = {
        "handshake_timeout_seconds": timeout,
        "request_timeout_seconds": request_timeout,
        "max_total_request_seconds": max_total,
    }

    config_file, server_name = options["config_file"], options["server_name"]
    if config_file is not None:
        chosen, config_file, server_name = config_servers(ctx, config_file, server_name, many=many)
        overridden = {
            field: value
            for option, field, value in (
                ("timeout", "handshake_timeout_seconds", timeout),
                ("request_timeout", "request_timeout_seconds", request_timeout),
                ("max_total_timeout", "max_total_request_seconds", max_total),
            )
            if option in explicit
        }
        for name, server in chosen.items():
            changes: dict[str, Any] = {
                "limits": dataclasses.replace(server.limits, **overridden),
                "secrets": (*server.secrets, *explicit_secrets),
                "stderr_log_level": stderr_log_level,
            }
            if explicit & {"grants", "denies", "ignore_injections"}:
                changes["grant_policy"] = policy
            if "compat" in explicit:
                changes["compat"] = options["compat"]
            if "protocol" in explicit:
                changes["protocol"] = options["protocol"]
            if options.get("mcp_only_fallback") and server.endpoint is not None:
                changes["mcp_only_fallback"] = True
            chosen[name] = dataclasses.replace(server, **changes)
        first = next(iter(chosen.values()))
        target: dict[str, Any] = {
            "command": redact_command([first.command, *first.args]) if first.command else [],
            "config": {"file": config_file, "server": server_name},
            **endpoint_target(first),
        }
        return Selection(_with_oauth(chosen, options), target, open_recorder(ctx, options.get("record")))

    common: dict[str, Any] = {
        "grant_policy": policy,
        "secrets": explicit_secrets,
        "compat": options.get("compat", "auto"),
        "protocol": options.get("protocol", "auto"),
        "limits": dataclasses.replace(Limits(), **limits_fields),
    }
    if options["http_url"] is not None and is_mcpl_uri(options["http_url"]):
        server = built_config(
            "--url",
            url=options["http_url"],
            token=options["token"],
            headers=dict(options["http_headers"]),
            mcp_only_fallback=bool(options.get("mcp_only_fallback")),
            **common,
        )
        target = {"command": [], "url": server.describe, **endpoint_target(server)}
    elif options["http_url"] is not None:
        url, kind = options["http_url"], options["http_transport"]
        server = built_config(
            "--url",
            transport="http" if kind == "auto" else kind,
            url=url,
            token=options["token"],
            headers=dict(options["http_headers"]),
            **common,
        )
        target = {"command": [], "url": server.describe}
    elif options["ws_url"] is not None:
        server = built_config(
            "--ws",
            transport="websocket",
            url=options["ws_url"],
            token=options["token"],
            token_in=options["token_in"],
            mcp_only_fallback=bool(options.get("mcp_only_fallback")),
            **common,
        )
        target = {"command": [], "url": server.describe, **endpoint_target(server)}
    else:
        words = list(command) or [sys.executable, str(demo_server_path())]
        server = built_config(
            "command",
            name="" if command else DEMO_NAME,
            command=words[0],
            args=tuple(words[1:]),
            env={**dict(options["env"]), **dict(options["secrets"])},
            cwd=options["cwd"],
            inherit_env=options["inherit_env"],
            stderr_log_level=stderr_log_level,
            **common,
        )
        target = {"command": redact_command(words)}
    return Selection(
        _with_oauth({server.name: server}, options), target, open_recorder(ctx, options.get("record"))
    )


def _with_oauth(servers: dict[str, ServerConfig], options: dict[str, Any]) -> dict[str, ServerConfig]:
    """Each HTTP server of ``servers`` with the OAuth options applied (``--client-id``,
    ``--client-secret``, ``--private-key-jwt``, ``--scope``) and the person to ask: the
    terminal's browser (``cli_auth.terminal_browser``) unless ``--stored-auth-only`` or no
    terminal."""
    from mcpl_host.cli_auth import oauth_settings

    return {
        name: dataclasses.replace(server, oauth=oauth_settings(server.oauth, options))
        if server.transport in HTTP_TRANSPORTS
        else server
        for name, server in servers.items()
    }

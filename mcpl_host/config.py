"""What a server is (``ServerConfig``, the one options object every builder takes, made by
hand or from a config) and the host's config: the common ``mcpServers`` JSON plus MCPL
keys, read from a file (``load_config``) or from an object held in memory
(``parse_config``). Pure, except that ``load_config`` reads the file.

- **Shape.** ``{"mcpServers": {name: server}}`` as MCP clients write it; also accepted under
  ``"mcplServers"``. Both may be present: merged, ``mcpServers`` first; a name in both is a
  problem. Other top-level keys are ignored (the file may hold another application's
  settings) unless one is a near miss of either name.
- **Every problem at once.** All is checked before anything is returned. A problem is a
  ``ConfigProblem(location, message)``, located like ``mcpServers.time.args[1]`` (or
  ``mcpServers["my server"]``); ``ConfigError`` lists them one per line after the file name.
  Invalid JSON is one problem at its line and column, and so is nesting deeper than
  ``limits.CONFIG_MAX_DEPTH`` (checked before parsing, so a hostile file is an error, never a
  ``RecursionError``). A key repeated in one object (the last would silently win) is a
  problem. ``disabled`` servers are checked too.
- **Server keys** are camelCase; an unknown key is a problem with a "did you mean" hint.
  stdio: ``command`` (required), ``args``, ``env`` (strings), ``cwd``, ``inheritEnv``.
  WebSocket: ``url`` (required; ``ws://``, ``wss://`` or ``mcpl://``, MCPL §18: resolved by
  ``mcpl.endpoint_uri``), ``mcpOnlyFallback`` (an ``mcpl://`` server that does not speak MCPL
  is hosted as plain MCP instead of failing, MCPL §18.5), ``token``, ``tokenIn`` (``"header"``
  (default: ``Authorization: Bearer``) or ``"query"``), ``headers``. HTTP: ``url`` (required;
  ``http://`` or ``https://``), ``token`` (always ``Authorization: Bearer``), ``headers``
  (the shape Claude Code, Cursor and VS Code write). Host keys: ``grant``,
  ``deny`` (capability patterns, each matching some vocabulary path: a typo must not grant
  nothing or deny nothing unnoticed; ``grants.pattern_problem`` names the closest path), ``grantAllAdvertised`` (never the
  deprecated injection paths: RFC-010), ``ignoreInjections`` (MCPL 0.6's rule now), ``featureSets`` {``enabled``:
  names or null, ``disabled``}, ``timeouts`` {``handshake``, ``request``: seconds > 0;
  ``closeGrace``, ``terminateGrace``: seconds >= 0}, ``maxLineBytes``, ``limits`` (any
  ``Limits`` field by its camelCase name, ``limits.CONFIG_KEYS``: ``{"maxStateBytes":
  1048576, "hookTimeoutSeconds": 2}``; each value checked by ``limits.limit_problem``; a
  field also set by ``timeouts`` or ``maxLineBytes`` is a problem), ``restart``
  {``enabled``, ``baseDelay``, ``maxDelay``, ``jitter``, ``healthyAfter``, ``maxFailures``,
  ``failureWindow``} (rules: ``supervisor_policy``), ``secrets`` (extra strings to redact, at
  least ``MIN_SECRET_CHARS`` long), ``compat`` (``"strict"``, ``"0.4"`` or ``"auto"``, the
  default: the compatibility profile, ``mcpl_host.mcpl.compat``), ``toolClasses``
  (``{tool name: [classes]}``, the operator's tool classes: RFC-008 §5.1), ``toolLifecycle``
  (``{"observe": narrowing, "inputs": narrowing}``, RFC-007 §4.3: ``ServerConfig.tool_lifecycle``), ``protocol``
  (``"auto"``, the default, ``"handshake"`` or ``"stateless"``: the MCP era to speak,
  ``mcpl_host.stateless``), ``disabled``. Values that may be secret (``env``,
  ``args``, ``headers``, ``token``, ``url``) never appear in a message nor in a repr; which
  of them are secrets is decided by ``mcpl_host.secrets.server_secrets``.
- **Transport.** ``transport`` (or ``type``, as some clients write it): ``"stdio"``,
  ``"websocket"``, ``"http"`` (Streamable HTTP, falling back to HTTP+SSE as MCP 2025-11-25
  §Backwards Compatibility says), ``"streamable-http"`` (no fallback) or ``"sse"`` (the
  HTTP+SSE transport of MCP 2024-11-05). Omitted, ``command`` means stdio, and ``url``
  WebSocket (``ws``, ``wss``, ``mcpl``) or ``"http"`` by its scheme; both is a problem. A key of another transport is a
  problem if the transport was inferred; if ``transport`` is given, it is checked and then
  ignored (one entry may keep both set-ups), except ``tokenIn``, which an HTTP server
  refuses (its token is always a header).
- **Relative paths** join the config file's folder (``base_dir``; for ``load_config``, the
  folder of the path as given, symlinks not followed), without touching the file system.
  ``cwd``: any relative path. **Decision:** ``command`` and each of ``args`` only when the
  value is ``.`` or ``..`` or starts with ``./`` or ``../``. Anything else (``-m``,
  ``server.py``, ``--dir=./x``, a package name) is passed as written, so the meaning of a
  config never depends on which files happen to exist. Neither ``~`` nor ``${VAR}`` is
  expanded here; a ``cwd`` starting with ``~`` is a problem. (The CLI reads files through
  ``mcpl_host.editor_configs``, which expands ``${VAR}`` first: docs/protocol.md CF1.)
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import urlsplit

from mcpl_host.auth.settings import OAuthSettings
from mcpl_host.jsonrpc.errors import MCPLHostError
from mcpl_host.jsonrpc.values import (
    JSONObject,
    finite_number,
    is_array,
    is_list_or_tuple,
    is_mapping,
    is_object,
)
from mcpl_host.limits import (
    CONFIG_KEYS,
    CONFIG_MAX_BYTES,
    CONFIG_MAX_DEPTH,
    Limits,
    limit_problem,
    limits_with,
)
from mcpl_host.mcpl.compat import COMPAT_SETTINGS, CompatSetting, checked_compat
from mcpl_host.mcpl.endpoint_uri import EndpointURI, EndpointURIError, is_mcpl_uri, resolve_endpoint_uri
from mcpl_host.mcpl.feature_sets import FeatureSetPolicy
from mcpl_host.mcpl.grants import GrantPolicy, pattern_problem
from mcpl_host.mcpl.policy_state import REFUSAL_ACTIONS, RefusalAction
from mcpl_host.mcpl.tool_lifecycle import DEFAULT_INPUTS_CLASSES, Narrowing, ToolLifecyclePolicy
from mcpl_host.secrets import (
    MIN_SECRET_CHARS,
    REDACTED,
    Redactor,
    redact_command,
    redact_url,
    server_secrets,
    shown_env,
)
from mcpl_host.stateless import PROTOCOL_CHOICES, ProtocolChoice, checked_protocol
from mcpl_host.suggest import closest
from mcpl_host.supervisor_policy import RestartPolicy, restart_policy_problems
from mcpl_host.tool_classes import TOOL_CLASSES
from mcpl_host.transports.stdio import STDERR_LOG_LEVELS, StdioParameters

if TYPE_CHECKING:
    import ssl

    from mcpl_host.transports.http_params import HTTPParameters
    from mcpl_host.transports.ws_params import WebSocketParameters

# The WebSocket and HTTP parameters (their URL checks, ipaddress, the HTTP failure texts) are
# imported by the first server of their transport: a stdio server never loads them.

__all__ = [
    "SECTIONS",
    "ConfigError",
    "ConfigProblem",
    "HostConfig",
    "ServerConfig",
    "default_server_name",
    "key_location",
    "load_config",
    "parse_config",
    "read_config_json",
]

#: Top-level keys holding servers, in merge order.
SECTIONS = ("mcpServers", "mcplServers")
Transport = Literal["stdio", "websocket", "http", "streamable-http", "sse"]
TRANSPORTS: tuple[Transport, ...] = ("stdio", "websocket", "http", "streamable-http", "sse")
#: The HTTP transports (``url`` with ``http://`` or ``https://``).
HTTP_TRANSPORTS = frozenset({"http", "streamable-http", "sse"})
#: Key group -> the transports whose keys they are.
_GROUPS = {
    "stdio": frozenset({"stdio"}),
    "remote": frozenset({"websocket", *HTTP_TRANSPORTS}),
    "websocket": frozenset({"websocket"}),
    "http": HTTP_TRANSPORTS,
}
#: Server key -> (``ServerConfig`` field, ``_Problems`` reader, its group in ``_GROUPS``).
#: An empty field or reader: read by its own code in ``_server``.
_KEYS = {
    "command": ("command", "string", "stdio"),
    "args": ("args", "strings", "stdio"),
    "env": ("env", "string_map", "stdio"),
    "cwd": ("cwd", "string", "stdio"),
    "inheritEnv": ("inherit_env", "boolean", "stdio"),
    "url": ("url", "string", "remote"),
    "token": ("token", "string", "remote"),
    "tokenIn": ("token_in", "", "websocket"),
    "mcpOnlyFallback": ("mcp_only_fallback", "boolean", "websocket"),
    "headers": ("headers", "string_map", "remote"),
    "oauth": ("oauth", "", "http"),
    "secrets": ("secrets", "strings", ""),
    "disabled": ("disabled", "boolean", ""),
    "grantAllAdvertised": ("grant_all_advertised", "boolean", ""),
    "ignoreInjections": ("ignore_injections", "boolean", ""),
    "inputStreams": ("input_streams", "boolean", ""),
    **dict.fromkeys(
        (
            "transport",
            "type",
            "grant",
            "deny",
            "featureSets",
            "timeouts",
            "maxLineBytes",
            "limits",
            "restart",
            "compat",
            "protocol",
            "toolClasses",
            "toolLifecycle",
        ),
        ("", "", ""),
    ),
}
#: ``timeouts`` key -> (``Limits`` field, whether 0 is allowed).
_TIMEOUTS = {
    "handshake": ("handshake_timeout_seconds", False),
    "request": ("request_timeout_seconds", False),
    "closeGrace": ("close_grace_seconds", True),
    "terminateGrace": ("terminate_grace_seconds", True),
}
#: ``restart`` key -> ``RestartPolicy`` field.
_RESTART = {
    "enabled": "enabled",
    "baseDelay": "base_delay_seconds",
    "maxDelay": "max_delay_seconds",
    "jitter": "jitter",
    "healthyAfter": "healthy_after_seconds",
    "maxFailures": "max_failures",
    "failureWindow": "failure_window_seconds",
}
#: Interpreters whose first argument that is not an option is the script that is the server.
_INTERPRETERS = ("python", "node", "nodejs", "deno", "bun", "ruby", "perl", "php", "tsx", "ts-node")
#: Subcommands an interpreter or runner takes before the script (``deno run main.ts``).
_SUBCOMMANDS = frozenset({"run", "exec", "x"})
#: Runners whose first argument that is not an option is a package.
_RUNNERS = frozenset({"npx", "uvx", "pipx", "bunx", "pnpx"})
#: Script names that say nothing about the server: its folder names it instead.
_GENERIC_SCRIPTS = frozenset({"index", "main", "server", "cli", "app", "run", "start", "__main__", "mod"})
#: Folders that say nothing about the server either (``dist/index.js``).
_GENERIC_FOLDERS = frozenset({"dist", "build", "lib", "src", "bin", "out", "build-output", "esm", "cjs", ""})


def _script_name(path: str) -> str:
    """``/x/server-everything/dist/index.js`` -> ``server-everything``; ``tools/weather.py`` ->
    ``weather``."""
    parts = path.replace("\\", "/").split("/")
    stem = os.path.splitext(parts[-1])[0]
    if stem not in _GENERIC_SCRIPTS:
        return stem
    for folder in reversed(parts[:-1]):
        if folder not in _GENERIC_FOLDERS and folder not in (".", ".."):
            return folder
    return stem


def default_server_name(command: str, args: Sequence[str] = ()) -> str:
    """A readable name for logs, by the script or package that is the server:
    ``python -m mcp_server_time`` → ``mcp_server_time``, ``python demo_server.py`` →
    ``demo_server``, ``node /x/server-everything/dist/index.js`` → ``server-everything``,
    ``npx -y pkg`` → ``pkg``, ``deno run -A main.ts`` → its folder; else the command.
    (After the handshake, reports name a server by its ``serverInfo.name``.)"""
    base = os.path.basename(command)
    rest = [arg for arg in args if not arg.startswith("-")]
    if base.startswith(_INTERPRETERS) and args:
        if base.startswith("python") and args[0] == "-m" and len(args) > 1:
            return args[1]
        if rest and rest[0] in _SUBCOMMANDS and base.startswith(("deno", "bun")):
            rest = rest[1:]
        if rest:
            return _script_name(rest[0])
    if base in _RUNNERS and rest:
        return rest[0]
    if base in ("uv", "poetry", "pipenv") and len(rest) > 1 and rest[0] == "run":
        return _script_name(rest[1])
    return base


_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
# An optional key that is not there (JSON null is a value, and a wrong one).
_ABSENT: Any = object()


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One mistake: ``location`` (a path such as ``mcpServers.time.args[1]``, or
    ``line 3, column 7`` for invalid JSON, or ``""`` for the whole file) and ``message``."""

    location: str
    message: str

    def __str__(self) -> str:
        return f"{self.location}: {self.message}" if self.location else self.message


class ConfigError(MCPLHostError):
    """The config has problems; ``problems`` lists every one, ``source`` names the file. The
    message has one line per problem: ``servers.json: mcpServers.time.cwd: must be a string``."""

    def __init__(self, problems: Sequence[ConfigProblem], source: str = "") -> None:
        self.problems = list(problems)
        self.source = source
        prefix = f"{source}: " if source else ""
        super().__init__("\n".join(f"{prefix}{problem}" for problem in self.problems))


@dataclass(frozen=True, slots=True, repr=False, kw_only=True)
class ServerConfig:
    """What a server is: how to reach it and the settings the host applies to it. Made by
    the config-file parser (``load_config``, ``parse_config``) or by hand, and given to the
    one builder (``HostedServer(config, ...)``, or ``connect(config, ...)`` for one
    connection); the runtime objects (handlers, observer, state store, client info) are not
    configuration and go to the builder.

    Only the keys of ``transport`` are used: stdio uses ``command``, ``args``, ``env``,
    ``cwd``, ``inherit_env``, ``keep_tree``, ``stderr_log_level``; WebSocket uses ``url``,
    ``token``, ``token_in``, ``headers``, ``ssl_context``, ``mcp_only_fallback``; the HTTP transports (``"http"``,
    ``"streamable-http"``, ``"sse"``) ``url``, ``token``, ``headers``, ``ssl_context``.

    - ``transport`` (None, the default: inferred): ``command`` means ``"stdio"``, a ``ws://``
      or ``wss://`` ``url`` ``"websocket"`` (RFC 6455; docs/protocol.md, "WebSocket"), and an
      ``mcpl://`` one too (MCPL §18: dialled at its resolved ``wss://`` URL), an
      ``http://`` or ``https://`` one ``"http"`` (Streamable HTTP, falling back to HTTP+SSE:
      MCP 2025-11-25 "Transports", Backwards Compatibility); ``"streamable-http"`` has no
      fallback, ``"sse"`` is the HTTP+SSE transport of MCP 2024-11-05.
    - ``name`` (``""``, the default: derived): a stdio server is named by the script or
      package that is the server (``default_server_name``), a remote one by its URL as shown
      (``shown_url``, ``shown_http_url``); every secret redacted either way.
    - ``token``: sent as ``Authorization: Bearer`` (``token_in="header"``, the default) or
      as the query parameter ``token`` (``token_in="query"``, WebSocket only).
    - ``limits`` holds every bound (from a file: the defaults, changed by the entry's
      ``timeouts`` in seconds, ``maxLineBytes`` and ``limits``). A WebSocket's opening is
      bounded by ``limits.websocket_open_timeout_seconds`` and, being a step of the
      handshake, by ``limits.handshake_timeout_seconds`` (docs/protocol.md H7); its pings by
      ``limits.websocket_keepalive_*``.
    - ``grant_policy`` defaults to granting nothing (MCPL §5.4); ``on_refusal``: what a
      refused policy does (``RefusalAction``); ``compat``: the compatibility setting
      (``mcpl_host.mcpl.compat``); ``protocol``: the MCP era to speak
      (``mcpl_host.stateless``).
    - ``env`` is added to a minimal environment (``inherit_env``: to the whole one);
      ``keep_tree`` (Linux): on close, stop every descendant of the server, not only its
      process group (``transports.process_tree``); ``stderr_log_level``: the level of the
      server's stderr lines in the log.
    - ``ssl_context`` verifies a ``wss://`` or ``https://`` server (default: the system's
      CAs); not compared, not shown.
    - ``url`` as ``mcpl://`` (MCPL §18): ``endpoint`` (not a parameter) holds its three
      values (``EndpointURI``: ``url`` as written, the canonical ``mcpl://`` form, the
      ``wss://`` URL dialled); None for any other URL. Such a server must advertise
      ``experimental.mcpl`` in its ``initialize`` result or the connection fails
      (``MCPLRequired``), unless ``mcp_only_fallback``: then it is hosted as plain MCP and
      the connection says so (MCPL §18.5).
    - ``secrets``: more strings to redact; every secret (``secrets_for_redaction``) is
      hidden from every log line, error and repr about this server (docs/protocol.md L2).
    - ``restart_policy`` is a ``Host``'s; ``disabled`` servers are checked but not started.

    Raises:
        TypeError: a value of the wrong type (``_check_types``; a list is taken for a tuple,
            a ``str`` for ``args`` or ``secrets`` is refused).
        ValueError: a server with neither ``command`` nor ``url`` (or both, and no
            ``transport``), an empty ``command``, an unknown ``transport``, ``token_in``,
            ``compat``, ``protocol``, ``on_refusal`` or ``stderr_log_level``, or an unusable
            URL, token or header (an ``mcpl://`` URL refused by MCPL §18.1.1 raises
            ``EndpointURIError``, a ``ValueError`` naming the rule). The message holds no
            secret.
    """

    name: str = ""
    transport: Transport | None = None
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict[str, str])
    cwd: str | None = None
    inherit_env: bool = False
    keep_tree: bool = True
    stderr_log_level: str = "debug"
    url: str | None = None
    token: str | None = None
    token_in: Literal["header", "query"] = "header"
    headers: dict[str, str] = field(default_factory=dict[str, str])
    ssl_context: ssl.SSLContext | None = field(default=None, compare=False)
    #: OAuth for an HTTP server (config key ``oauth``; ``mcpl_host.auth``): on unless a
    #: ``token`` or an ``Authorization`` header is configured or ``enabled`` is False.
    oauth: OAuthSettings = OAuthSettings()
    grant_policy: GrantPolicy = GrantPolicy()
    feature_set_policy: FeatureSetPolicy = FeatureSetPolicy()
    on_refusal: RefusalAction = "follow"
    limits: Limits = Limits()
    restart_policy: RestartPolicy = RestartPolicy()
    secrets: tuple[str, ...] = ()
    disabled: bool = False
    #: The compatibility setting (config key ``compat``).
    compat: CompatSetting = "auto"
    #: The MCP era to speak (config key ``protocol``; ``mcpl_host.stateless``).
    protocol: ProtocolChoice = "auto"
    #: An ``mcpl://`` server that does not advertise MCPL is hosted as plain MCP instead of
    #: failing (MCPL §18.5; config key ``mcpOnlyFallback``).
    mcp_only_fallback: bool = False
    #: The three values of an ``mcpl://`` ``url`` (MCPL §18.4), or None; set from ``url``.
    endpoint: EndpointURI | None = field(default=None, init=False, compare=False)
    #: Tool classes (RFC-008 §5.1; ``mcpl_host.tool_classes``): the operator's override (config
    #: key ``toolClasses``: ``{tool name as listed: [classes]}``), and the embedding
    #: application's own knowledge of tools it implements (no config key). Each class must be
    #: of the vocabulary (``ValueError``).
    tool_classes: Mapping[str, tuple[str, ...]] = field(default_factory=dict[str, tuple[str, ...]])
    host_tool_classes: Mapping[str, tuple[str, ...]] = field(default_factory=dict[str, tuple[str, ...]])
    #: The operator's tool lifecycle narrowings (RFC-007 §4.3; ``mcpl.tool_lifecycle``): which
    #: calls this server is told of under ``toolLifecycle.observe`` (None: every call) and
    #: which may carry arguments under ``toolLifecycle.inputs`` (None: none). Config key
    #: ``toolLifecycle``: ``{"observe": narrowing, "inputs": narrowing}``, a narrowing being
    #: ``{"tools": [patterns], "classes": [classes] or "default", "conversations": [patterns]}``.
    #: The leaves themselves are granted only when named in ``grant`` (docs/protocol.md TL1).
    tool_lifecycle: ToolLifecyclePolicy = ToolLifecyclePolicy()
    #: Input streams (RFC-009, experimental; config key ``inputStreams``), off by default:
    #: with it off nothing of RFC-009 is advertised or granted and ``channels/input/*`` are
    #: ``-32601``. ``input_stream_mode`` is the treatment offered on each lease (RFC-009 §9:
    #: ``final-only`` keeps no provisional text; ``volatile`` shows it to the application;
    #: no config key). Bounds: ``Limits.input_stream_*``, ``max_input_streams``.
    input_streams: bool = False
    input_stream_mode: str = "volatile"

    def __post_init__(self) -> None:
        _check_types(self)
        if self.input_stream_mode not in ("final-only", "volatile", "prepare", "incremental"):
            raise ValueError('input_stream_mode must be "final-only", "volatile", "prepare" or "incremental"')
        if self.url is not None and is_mcpl_uri(self.url):
            # Before anything parses the URL: MCPL §18.1.1's checks come first.
            object.__setattr__(self, "endpoint", resolve_endpoint_uri(self.url))
        object.__setattr__(self, "transport", _inferred_transport(self))
        checked_compat(self.compat)
        checked_protocol(self.protocol)
        for what in ("tool_classes", "host_tool_classes"):
            object.__setattr__(self, what, checked_tool_classes(getattr(self, what), what))
        self.parameters()  # an unusable URL, token or header raises here
        if not self.name:
            name = (
                self.redactor().redact(default_server_name(self.command or "", self.args))
                if self.transport == "stdio"
                else self.describe
            )
            object.__setattr__(self, "name", name)

    def parameters(self) -> StdioParameters | WebSocketParameters | HTTPParameters:
        """The transport's settings: ``StdioParameters``, ``WebSocketParameters`` (its
        opening bounded by the handshake too: the lesser of
        ``limits.websocket_open_timeout_seconds`` and ``limits.handshake_timeout_seconds``)
        or ``HTTPParameters``. Raises ``ValueError`` as the class does."""
        if self.transport == "websocket":
            from mcpl_host.transports.ws_params import WebSocketParameters  # noqa: PLC0415

            assert self.url is not None
            limits = self.limits
            return WebSocketParameters(
                url=self.endpoint.resolved_transport if self.endpoint is not None else self.url,
                token=self.token,
                token_in=self.token_in,
                headers=self.headers,
                open_timeout_seconds=min(
                    limits.websocket_open_timeout_seconds, limits.handshake_timeout_seconds
                ),
                keepalive_interval_seconds=limits.websocket_keepalive_interval_seconds,
                keepalive_timeout_seconds=limits.websocket_keepalive_timeout_seconds,
                ssl_context=self.ssl_context,
            )
        if self.transport in HTTP_TRANSPORTS:
            from mcpl_host.transports.http_params import HTTPParameters  # noqa: PLC0415

            assert self.url is not None
            return HTTPParameters(
                url=self.url, token=self.token, headers=self.headers, ssl_context=self.ssl_context
            )
        assert self.command is not None
        return StdioParameters(
            command=self.command,
            args=self.args,
            env=self.env or None,
            cwd=self.cwd,
            inherit_env=self.inherit_env,
            keep_tree=self.keep_tree,
        )

    @property
    def secrets_for_redaction(self) -> tuple[str, ...]:
        """Strings to redact from everything shown about this server, without repeats: the
        decision of ``mcpl_host.secrets.server_secrets`` (``env`` values of secret names,
        credentials in ``command``, ``args`` and ``url``, header values, the token,
        ``secrets``)."""
        return server_secrets(
            env=self.env,
            args=(self.command, *self.args) if self.command is not None else self.args,
            url=self.url,
            token=self.token,
            headers=self.headers,
            explicit=(*self.secrets, *self.oauth.secrets()),
        )

    def redactor(self) -> Redactor:
        """The ``Redactor`` of everything about this server: ``secrets_for_redaction`` and
        what the transport's parameters count as secret (an HTTP URL's query values)."""
        return Redactor([*self.secrets_for_redaction, *self.parameters().secrets()])

    @property
    def describe(self) -> str:
        """Where the server is, with no secret (for reports): the command line
        (``redact_command``), or the URL as shown (``shown_url``, ``shown_http_url``)."""
        redactor = self.redactor()
        if self.transport == "websocket":
            from mcpl_host.transports.ws_params import shown_url  # noqa: PLC0415

            return shown_url(self.url or "", redactor)
        if self.transport in HTTP_TRANSPORTS:
            from mcpl_host.transports.http_params import shown_http_url  # noqa: PLC0415

            return shown_http_url(self.url or "", redactor)
        return " ".join(redact_command([self.command or "", *self.args], redactor))

    def __repr__(self) -> str:
        """The settings with every secret hidden (``mcpl_host.secrets``)."""
        redactor = self.redactor()
        fields = [f"name={self.name!r}", f"transport={self.transport!r}"]
        if self.transport == "stdio" or self.command is not None:
            fields.append(f"command={redact_command([self.command or ''], redactor)[0]!r}")
            fields.append(f"args={tuple(redact_command(self.args, redactor))!r}")
            fields.append(f"env={shown_env(self.env)!r}")
            fields.append(f"cwd={self.cwd!r}, inherit_env={self.inherit_env!r}")
            fields.append(f"keep_tree={self.keep_tree!r}, stderr_log_level={self.stderr_log_level!r}")
        if self.transport == "websocket" or self.url is not None:
            fields.append(f"url={redactor.redact(redact_url(self.url)) if self.url else None!r}")
            fields.append(f"token={REDACTED if self.token else None!r}, token_in={self.token_in!r}")
            fields.append(f"headers={dict.fromkeys(self.headers, REDACTED)!r}")
        fields.append(f"secrets=<{len(self.secrets)} hidden>")
        fields.append(f"grant_policy={self.grant_policy!r}, feature_set_policy={self.feature_set_policy!r}")
        fields.append(f"on_refusal={self.on_refusal!r}")
        fields.append(f"limits={self.limits!r}, restart_policy={self.restart_policy!r}")
        fields.append(f"compat={self.compat!r}, protocol={self.protocol!r}")
        if self.endpoint is not None:
            fields.append(f"mcp_only_fallback={self.mcp_only_fallback!r}")
        fields.append(f"tool_classes={dict(self.tool_classes)!r}")
        fields.append(f"host_tool_classes={dict(self.host_tool_classes)!r}")
        fields.append(f"disabled={self.disabled!r}")
        return f"ServerConfig({', '.join(fields)})"


#: ``ServerConfig`` fields that hold a string or None, and those that hold one object of a type.
_OPTIONAL_STRINGS = ("command", "cwd", "url", "token")
_OBJECTS = (
    ("grant_policy", GrantPolicy),
    ("feature_set_policy", FeatureSetPolicy),
    ("limits", Limits),
    ("restart_policy", RestartPolicy),
    ("tool_lifecycle", ToolLifecyclePolicy),
    ("oauth", OAuthSettings),
)


def _check_types(config: ServerConfig) -> None:
    """Check the values a ``ServerConfig`` made by hand was given (a config file's are
    checked by ``parse_config`` first); a list for ``args`` or ``secrets`` becomes a tuple.
    Never shows a value: any may be a secret.

    Raises:
        TypeError: a value of the wrong type. A ``str`` for ``args`` or ``secrets`` is one:
            taken as a sequence of characters it would run the wrong command, or redact
            one-character strings instead of the secret.
        ValueError: an empty ``command``, an unknown ``on_refusal`` or ``stderr_log_level``.
    """
    name: Any = config.name  # typed str, but made by hand: anything
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, not {type(name).__name__}")
    for what in _OPTIONAL_STRINGS:
        value = getattr(config, what)
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{what} must be a string, not {type(value).__name__}")
    for what in ("args", "secrets"):
        value = getattr(config, what)
        if (
            isinstance(value, (str, bytes))
            or not is_list_or_tuple(value)
            or not all(isinstance(item, str) for item in value)
        ):
            raise TypeError(
                f"{what} must be a sequence of strings (a tuple or a list), not {type(value).__name__}"
            )
        object.__setattr__(config, what, tuple(value))
    for what in ("env", "headers"):
        value = getattr(config, what)
        if not is_mapping(value) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise TypeError(f"{what} must map strings to strings")
    for what, kind in _OBJECTS:
        value = getattr(config, what)
        if not isinstance(value, kind):
            raise TypeError(f"{what} must be a {kind.__name__}, not {type(value).__name__}")
    fallback: Any = config.mcp_only_fallback  # typed bool, but made by hand: anything
    if not isinstance(fallback, bool):
        raise TypeError(f"mcp_only_fallback must be a bool, not {type(fallback).__name__}")
    if config.command == "":
        raise ValueError("a stdio server needs a command, and an empty one names no program")
    for what, value, choices in (
        ("on_refusal", config.on_refusal, REFUSAL_ACTIONS),
        ("stderr_log_level", config.stderr_log_level, tuple(sorted(STDERR_LOG_LEVELS))),
    ):
        if value not in choices:
            raise ValueError(f"{what} must be one of {', '.join(choices)}, not {value!r}")


def _inferred_transport(config: ServerConfig) -> Transport:
    """``config.transport``, checked, or the one its ``command`` or ``url`` implies
    (``ServerConfig``). Raises ``ValueError`` (never showing the URL: it may hold a token)."""
    if config.transport is not None:
        if config.transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, not {config.transport!r}")
        if config.transport == "stdio" and config.command is None:
            raise ValueError("a stdio server needs a command")
        if config.transport != "stdio" and config.url is None:
            raise ValueError(f"a {config.transport} server needs a url")
        if config.endpoint is not None and config.transport != "websocket":
            raise ValueError("an mcpl:// url is reached over WebSocket (MCPL §18.2): use transport websocket")
        return config.transport
    if config.command is not None and config.url is not None:
        raise ValueError("a server with both a command and a url needs a transport")
    if config.command is not None:
        return "stdio"
    if config.url is None:
        raise ValueError("a server needs a command (stdio) or a url (websocket or HTTP)")
    scheme = urlsplit(config.url).scheme.lower()
    if scheme in ("http", "https"):
        return "http"
    if scheme in ("ws", "wss", "mcpl"):
        return "websocket"
    why = f"its scheme is {scheme!r}" if scheme else "it has no scheme"
    raise ValueError(f"the url must be a ws://, wss://, mcpl://, http:// or https:// URL; {why}")


@dataclass(frozen=True, slots=True)
class HostConfig:
    """Every server in a config, by name (``mcpServers`` first, then ``mcplServers``, each in
    file order), and ``source`` (the file it came from)."""

    servers: dict[str, ServerConfig]
    source: str = ""

    @property
    def enabled_servers(self) -> dict[str, ServerConfig]:
        """The servers to start: those not ``disabled``, in order."""
        return {name: server for name, server in self.servers.items() if not server.disabled}


class _JSONObject(dict[str, Any]):
    """A JSON object that remembers keys it saw twice (``json`` keeps the last silently)."""

    repeated: tuple[str, ...] = ()

    @classmethod
    def from_pairs(cls, pairs: list[tuple[str, Any]]) -> _JSONObject:
        obj = cls(pairs)
        if len(obj) < len(pairs):
            obj.repeated = tuple(k for k, n in Counter(k for k, _ in pairs).items() if n > 1)
        return obj


def load_config(path: str | os.PathLike[str]) -> HostConfig:
    """Read and check the config file at ``path`` (UTF-8 JSON, a BOM allowed; at most
    ``limits.CONFIG_MAX_BYTES``). Relative paths in it resolve against its folder. Raises
    ``ConfigError`` listing every problem (an unreadable file or invalid JSON is one
    problem)."""
    data = read_config_json(path)
    return parse_config(data, base_dir=Path(path).absolute().parent, source=str(path))


def read_config_json(
    path: str | os.PathLike[str],
    *,
    max_bytes: int = CONFIG_MAX_BYTES,
    prepare: Callable[[str], str] | None = None,
) -> object:
    """The decoded JSON of the file at ``path``: UTF-8 (a BOM allowed), at most ``max_bytes``
    bytes (never more is read), nested at most ``limits.CONFIG_MAX_DEPTH`` levels, no key
    repeated in one object (``ConfigError`` from ``parse_config`` names it). ``prepare``
    changes the text before it is parsed, keeping lines and columns (e.g. removing JSONC
    comments). Raises ``ConfigError`` with one problem, located at a byte, or a line and
    column, never quoting the file."""
    path = Path(path)
    source = str(path)
    try:
        with path.open("rb") as file:
            raw = file.read(max_bytes + 1)
    except OSError as exc:
        raise ConfigError(
            [ConfigProblem("", f"cannot read the file: {exc.strerror or exc}")], source
        ) from exc
    if len(raw) > max_bytes:
        raise ConfigError([ConfigProblem("", f"the file is larger than {max_bytes} bytes")], source)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError([ConfigProblem(f"byte {exc.start}", "the file is not UTF-8 text")], source) from exc
    if prepare is not None:
        text = prepare(text)
    too_deep = nesting_beyond(text, CONFIG_MAX_DEPTH)
    if too_deep is not None:
        line, column = too_deep
        problem = ConfigProblem(
            f"line {line}, column {column}",
            f"nested more than {CONFIG_MAX_DEPTH} levels deep (a config needs a handful)",
        )
        raise ConfigError([problem], source)
    try:
        return json.loads(text, object_pairs_hook=_JSONObject.from_pairs)
    except json.JSONDecodeError as exc:
        problem = ConfigProblem(f"line {exc.lineno}, column {exc.colno}", f"invalid JSON: {exc.msg}")
        raise ConfigError([problem], source) from exc
    except RecursionError:  # not reached within CONFIG_MAX_DEPTH; never a traceback all the same
        raise ConfigError([ConfigProblem("", "nested too deeply to read")], source) from None


# Strings (whose brackets do not count) and brackets, in JSON text.
_NESTING_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]')


def nesting_beyond(text: str, max_depth: int) -> tuple[int, int] | None:
    """Where JSON ``text`` first opens an array or object deeper than ``max_depth`` levels:
    ``(line, column)``, both from 1; None if it never does. Brackets inside strings do not
    count; the text need not be valid JSON (the parser judges that afterwards)."""
    depth = 0
    for token in _NESTING_TOKENS.finditer(text):
        char = token.group()[0]
        if char in "[{":
            depth += 1
            if depth > max_depth:
                offset = token.start()
                line = text.count("\n", 0, offset) + 1
                return line, offset - (text.rfind("\n", 0, offset) + 1) + 1
        elif char in "]}":
            depth -= 1
    return None


def parse_config(
    data: object, *, base_dir: str | os.PathLike[str] | None = None, source: str = ""
) -> HostConfig:
    """Check a config held in memory, the decoded JSON of a file (``{"mcpServers": {name:
    {...}}}``, a ``dict``), and build a ``HostConfig``, with the checks and errors of
    ``load_config`` (module rules). Relative paths resolve against ``base_dir`` (default:
    the current directory, as it is now); ``source`` names where the config came from in
    messages. Raises ``ConfigError`` listing every problem."""
    base_dir = Path(base_dir) if base_dir is not None else Path.cwd()
    p = _Problems()
    servers: dict[str, ServerConfig] = {}
    if not is_object(data):
        p.add("", f"the top level must be an object, not {_kind(data)}")
    else:
        p.obj(data, "")  # repeated keys
        for key in data:
            close = _close_matches(key, SECTIONS, cutoff=0.8)
            if key not in SECTIONS and close:
                p.add(key_location("", key), f'unknown key; did you mean "{close[0]}"?')
        if not any(section in data for section in SECTIONS):
            p.add("", 'no "mcpServers" object: the servers go in {"mcpServers": {name: {...}}}')
        where: dict[str, str] = {}
        for section in SECTIONS:
            block = p.obj(data.get(section, _ABSENT), section, "an object keyed by server name")
            named: dict[Any, Any] = block or {}  # JSON keys are strings; in memory, anything
            for name, entry in named.items():
                if not isinstance(name, str):
                    p.add(section, f"a server name must be a string, not {_kind(name)}")
                    continue
                loc = key_location(section, name)
                if not name:
                    p.add(loc, "a server name must not be empty")
                if name in where:
                    p.add(loc, f"the name {name!r} is already used in {where[name]}")
                server = _server(name, entry, loc, base_dir, p)
                if name not in where:
                    where[name] = section
                    if server is not None:
                        servers[name] = server
    if p.problems:
        raise ConfigError(p.problems, source)
    return HostConfig(servers=servers, source=source)


def _close_matches(word: str, candidates: Sequence[str], cutoff: float = 0.6) -> list[str]:
    """The closest of ``candidates`` to ``word`` (at most one), for a "did you mean" hint
    (``suggest.closest``, the one matcher)."""
    found = closest(word, candidates, cutoff=cutoff)
    return [found] if found is not None else []


def key_location(loc: str, key: str | int) -> str:
    """Where ``key`` of the value at ``loc`` is: ``loc.key``, ``loc[0]`` or ``loc["odd key"]``
    (how every config problem is located)."""
    if isinstance(key, int):
        return f"{loc}[{key}]"
    if _PLAIN_KEY.fullmatch(key):
        return f"{loc}.{key}" if loc else key
    return f"{loc}[{json.dumps(key, ensure_ascii=False)}]"


def _kind(value: object, *, show: bool = False) -> str:
    """``a string``, ``an array``...; with ``show``, a scalar's value too (``the number -1``)."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    for types, name in (((int, float), "number"), (str, "string"), (list, "array"), (dict, "object")):
        if isinstance(value, types):
            if show and isinstance(value, (int, float, str)):
                return f"the {name} {json.dumps(value, ensure_ascii=False)[:60]}"
            return f"{'an' if name[0] in 'ao' else 'a'} {name}"
    return type(value).__name__


def _is_number(value: Any) -> bool:
    return finite_number(value) is not None


def _seconds_ok(value: Any, *, zero_ok: bool) -> bool:
    """A number of seconds above 0 (or 0 itself, when ``zero_ok``)."""
    return _is_number(value) and (value > 0 or (zero_ok and value == 0))


def _relative(value: str) -> bool:
    return value in (".", "..") or value.startswith(("./", "../"))


class _Problems:
    """Collects problems; each reader returns the value, or None after adding a problem."""

    def __init__(self) -> None:
        self.problems: list[ConfigProblem] = []

    def add(self, loc: str, message: str) -> None:
        self.problems.append(ConfigProblem(loc, message))

    def typed(
        self, value: object, loc: str, ok: Callable[[Any], bool], expected: str, *, show: bool = False
    ) -> Any:
        """``value`` if ``ok(value)``, else None and a problem. The value itself is shown only
        with ``show``: the values of keys such as ``env`` or ``args`` may be secrets."""
        if ok(value):
            return value
        self.add(loc, f"must be {expected}, not {_kind(value, show=show)}")
        return None

    def obj(
        self, value: Any, loc: str, expected: str = "an object", *, known: Collection[str] | None = None
    ) -> dict[str, Any] | None:
        if value is _ABSENT or self.typed(value, loc, lambda v: is_object(v), expected) is None:
            return None
        for key in getattr(value, "repeated", ()):
            self.add(key_location(loc, key), "this key appears more than once in the same object")
        if known is not None:
            for key in value:
                if key not in known:
                    close = _close_matches(key, sorted(known))
                    self.add(
                        key_location(loc, key),
                        "unknown key" + (f'; did you mean "{close[0]}"?' if close else ""),
                    )
        return cast("dict[str, Any]", value)

    def string(self, value: object, loc: str) -> str | None:
        typed = self.typed(value, loc, lambda v: isinstance(v, str) and v != "", "a non-empty string")
        return typed if isinstance(typed, str) else None

    def boolean(self, value: object, loc: str) -> bool | None:
        typed = self.typed(value, loc, lambda v: isinstance(v, bool), "true or false")
        return typed if isinstance(typed, bool) else None

    def strings(self, value: Any, loc: str) -> tuple[str, ...] | None:
        if self.typed(value, loc, lambda v: is_array(v), "an array of strings") is None:
            return None
        good = [
            self.typed(v, key_location(loc, i), lambda v: isinstance(v, str), "a string")
            for i, v in enumerate(value)
        ]
        return tuple(good) if None not in good else None

    def string_map(self, value: Any, loc: str) -> dict[str, str] | None:
        if self.obj(value, loc, "an object of strings") is None:
            return None
        good = {
            k: self.typed(v, key_location(loc, k), lambda v: isinstance(v, str), "a string")
            for k, v in value.items()
        }
        return good if None not in good.values() else None

    def patterns(self, value: Any, loc: str) -> tuple[str, ...]:
        if value is _ABSENT or self.typed(value, loc, lambda v: is_array(v), "an array") is None:
            return ()
        for i, pattern in enumerate(value):
            if self.string(pattern, key_location(loc, i)):
                problem = pattern_problem(pattern)
                if problem is not None:
                    self.add(key_location(loc, i), problem)
        return tuple(value)


def _server(name: str, entry: object, loc: str, base_dir: Path, p: _Problems) -> ServerConfig | None:
    entry = p.obj(entry, loc, known=_KEYS)
    if entry is None:
        return None
    before = len(p.problems)
    transport = _transport(entry, loc, p)
    inactive_groups = {g for g, members in _GROUPS.items() if transport not in members}
    explicit = "transport" in entry or "type" in entry
    if transport is not None:
        for key in [key for key in entry if key in _KEYS and _KEYS[key][2] in inactive_groups]:
            if not explicit or (key == "tokenIn" and transport in HTTP_TRANSPORTS):
                p.add(
                    key_location(loc, key),
                    f"applies only to {_group_name(_KEYS[key][2])} servers, and this one is {transport}",
                )
    required = "command" if transport == "stdio" else "url"
    if transport is not None and required not in entry:
        p.add(loc, f'a {transport} server needs "{required}"')
    kw: dict[str, Any] = {"name": name, "transport": transport}
    for key, (attr, reader, _) in _KEYS.items():
        if reader and key in entry:
            kw[attr] = getattr(p, reader)(entry[key], key_location(loc, key))
    if kw.get("command"):
        kw["command"] = str(base_dir / kw["command"]) if _relative(kw["command"]) else kw["command"]
    if kw.get("args"):
        kw["args"] = tuple(str(base_dir / arg) if _relative(arg) else arg for arg in kw["args"])
    if kw.get("cwd"):
        if kw["cwd"].startswith("~"):
            p.add(key_location(loc, "cwd"), '"~" is not expanded; write the path in full')
        kw["cwd"] = str(base_dir / kw["cwd"])
    schemes = ("http", "https") if transport in HTTP_TRANSPORTS else ("ws", "wss", "mcpl")
    url: str | None = kw.get("url")  # read by _Parse.string
    scheme, host = urlsplit(url)[:2] if url and transport != "stdio" else (schemes[0], "-")
    wanted = "an http:// or https:// URL" if schemes[0] == "http" else "a ws://, wss:// or mcpl:// URL"
    if transport is None:
        pass  # an unusable URL was reported while inferring the transport
    elif url is not None and is_mcpl_uri(url) and transport == "websocket":
        pass  # resolved by ServerConfig: MCPL §18.1.1's rules, each named
    elif scheme not in schemes:  # the URL itself is never shown: it may hold a token
        why = f'its scheme is "{scheme}"' if scheme else "it has no scheme"
        p.add(key_location(loc, "url"), f"must be {wanted}; {why}")
    elif not host:
        p.add(key_location(loc, "url"), f"must be {wanted}; it has no host")
    if "tokenIn" in entry:
        kw["token_in"] = p.typed(
            entry["tokenIn"],
            key_location(loc, "tokenIn"),
            lambda v: v in ("header", "query"),
            '"header" or "query"',
            show=True,
        )
        if "token" not in entry:
            p.add(key_location(loc, "tokenIn"), 'has no effect without "token"')
    if "mcpOnlyFallback" in entry and not (url is not None and is_mcpl_uri(url)):
        p.add(key_location(loc, "mcpOnlyFallback"), 'applies only to an "mcpl://" url (MCPL §18.5)')
    for i, secret in enumerate(kw.get("secrets") or ()):
        if len(secret) < MIN_SECRET_CHARS:
            p.add(
                key_location(key_location(loc, "secrets"), i),
                f"is shorter than {MIN_SECRET_CHARS} characters, so it would not be redacted",
            )
    kw["grant_policy"] = GrantPolicy(
        p.patterns(entry.get("grant", _ABSENT), key_location(loc, "grant")),
        p.patterns(entry.get("deny", _ABSENT), key_location(loc, "deny")),
        bool(kw.pop("grant_all_advertised", False)),
        bool(kw.pop("ignore_injections", False)),
    )
    choices: tuple[str, ...]
    for key, choices in (("compat", COMPAT_SETTINGS), ("protocol", PROTOCOL_CHOICES)):
        if key in entry:
            wanted = " or ".join(", ".join(f'"{c}"' for c in choices).rsplit(", ", 1))
            value = p.typed(entry[key], key_location(loc, key), choices.__contains__, wanted, show=True)
            if value is not None:
                kw[key] = value
    if "oauth" in entry:
        kw["oauth"] = _oauth(entry["oauth"], key_location(loc, "oauth"), p)
    if "toolClasses" in entry:
        kw["tool_classes"] = _tool_classes(entry["toolClasses"], key_location(loc, "toolClasses"), p)
    if "toolLifecycle" in entry:
        kw["tool_lifecycle"] = _tool_lifecycle(entry["toolLifecycle"], key_location(loc, "toolLifecycle"), p)
    kw["feature_set_policy"] = _feature_sets(
        entry.get("featureSets", _ABSENT), key_location(loc, "featureSets"), p
    )
    kw["limits"] = _limits(entry, loc, p)
    kw["restart_policy"] = _restart(entry.get("restart", _ABSENT), key_location(loc, "restart"), p)
    if len(p.problems) > before or transport is None:
        return None
    inactive = {attr for attr, _, group in _KEYS.values() if group in inactive_groups}
    try:
        return ServerConfig(**{k: v for k, v in kw.items() if k not in inactive})
    except ValueError as exc:  # an unusable token or header: the message holds none of them
        p.add(key_location(loc, "url") if isinstance(exc, EndpointURIError) else loc, str(exc))
        return None


#: ``oauth`` key -> ``OAuthSettings`` field, reader.
_OAUTH_KEYS = {
    "enabled": ("enabled", "boolean"),
    "clientId": ("client_id", "string"),
    "clientSecret": ("client_secret", "string"),
    "privateKeyFile": ("private_key_file", "string"),
    "privateKeyAlg": ("private_key_alg", "string"),
    "scope": ("scope", ""),
    "clientMetadataUrl": ("client_metadata_url", "string"),
    "clientCredentials": ("client_credentials", "boolean"),
    "callbackPort": ("callback_port", ""),
}


def _oauth(value: object, loc: str, p: _Problems) -> OAuthSettings:
    """The ``oauth`` object of an HTTP server (``OAuthSettings``): ``false`` turns OAuth
    off; ``scope`` is a string or an array of strings. Never shows a value."""
    if value is False:
        return OAuthSettings(enabled=False)
    entry = p.obj(value, loc, known=_OAUTH_KEYS)
    if entry is None:
        return OAuthSettings()
    kw: dict[str, Any] = {}
    for key, (attr, reader) in _OAUTH_KEYS.items():
        if key in entry and reader:
            kw[attr] = getattr(p, reader)(entry[key], key_location(loc, key))
    if "scope" in entry:
        scope = entry["scope"]
        if isinstance(scope, str):
            kw["scope"] = scope
        else:
            scopes = p.strings(scope, key_location(loc, "scope"))
            kw["scope"] = " ".join(scopes) if scopes else None
    if "callbackPort" in entry:
        kw["callback_port"] = p.typed(
            entry["callbackPort"],
            key_location(loc, "callbackPort"),
            lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 < v < 65536,
            "a port number (1 to 65535)",
            show=True,
        )
    if "privateKeyFile" in entry and isinstance(kw.get("private_key_file"), str):
        if kw["private_key_file"].startswith("~"):
            kw["private_key_file"] = str(Path(kw["private_key_file"]).expanduser())
    kw = {k: v for k, v in kw.items() if v is not None}
    try:
        return OAuthSettings(**kw)
    except ValueError as exc:
        p.add(loc, str(exc))
        return OAuthSettings()


def _transport(entry: Mapping[str, object], loc: str, p: _Problems) -> Transport | None:
    if "transport" in entry and "type" in entry:
        p.add(key_location(loc, "type"), 'give "transport" or "type", not both')
        return None
    key = "transport" if "transport" in entry else "type"
    if key in entry:
        named = p.typed(
            entry[key],
            key_location(loc, key),
            lambda v: v in TRANSPORTS,
            '"stdio", "websocket", "http", "streamable-http" or "sse"',
            show=True,
        )
        return cast("Transport | None", named)
    if "command" in entry and "url" in entry:
        p.add(loc, 'has both "command" and "url"; set "transport" to "stdio", "websocket" or "http"')
        return None
    if "command" in entry:
        return "stdio"
    if "url" in entry:
        url = entry["url"]
        scheme = urlsplit(url).scheme.lower() if isinstance(url, str) else ""
        if scheme in ("http", "https"):
            return "http"
        if scheme not in ("ws", "wss", "mcpl"):
            why = f'its scheme is "{scheme}"' if scheme else "it has no scheme"
            p.add(
                key_location(loc, "url"), f"must be a ws://, wss://, mcpl://, http:// or https:// URL; {why}"
            )
            return None
        return "websocket"
    p.add(loc, 'needs "command" (a stdio server) or "url" (a websocket or HTTP server)')
    return None


def _group_name(group: str) -> str:
    return {"stdio": "stdio", "websocket": "websocket", "remote": "websocket and HTTP", "http": "HTTP"}[group]


def checked_tool_classes(table: object, what: str = "tool_classes") -> dict[str, tuple[str, ...]]:
    """A tool-classes table (tool name -> classes; RFC-008 §5.1) as a dict of tuples. Raises
    ``TypeError`` for a value of the wrong type, ``ValueError`` for a class outside the
    vocabulary (an operator's typo must not leave a tool unclassed unnoticed)."""
    if not is_mapping(table):
        raise TypeError(f"{what} must be a mapping of tool names to classes")
    checked: dict[str, tuple[str, ...]] = {}
    for name, classes in table.items():
        if not isinstance(name, str) or isinstance(classes, (str, bytes)) or not is_list_or_tuple(classes):
            raise TypeError(f"{what} maps tool names (strings) to lists of classes")
        for value in classes:
            if value not in TOOL_CLASSES:
                raise ValueError(
                    f"{what}[{name!r}]: {value!r} is not a tool class ({', '.join(TOOL_CLASSES)})"
                )
        checked[name] = tuple(classes)
    return checked


def _tool_classes(value: object, loc: str, p: _Problems) -> dict[str, tuple[str, ...]]:
    """The ``toolClasses`` key: ``{tool name: [classes]}`` (RFC-008 §5.1), each class of the
    vocabulary."""
    block = p.obj(value, loc, "an object of tool names to arrays of classes") or {}
    table: dict[str, tuple[str, ...]] = {}
    for name, classes in block.items():
        where = key_location(loc, name)
        listed = p.strings(classes, where)
        if listed is None:
            continue
        for i, item in enumerate(listed):
            if item not in TOOL_CLASSES:
                close = _close_matches(item, list(TOOL_CLASSES))
                p.add(
                    key_location(where, i),
                    "not a tool class" + (f'; did you mean "{close[0]}"?' if close else ""),
                )
        table[name] = listed
    return table


def _narrowing(value: object, loc: str, p: _Problems) -> Narrowing | None:
    """One ``toolLifecycle`` leaf's narrowing (RFC-007 §4.3): ``tools`` and ``conversations``
    (RFC-007 §6.2 patterns), ``classes`` (tool classes, or ``"default"``: the named default
    policy, ``DEFAULT_INPUTS_CLASSES``)."""
    block = p.obj(
        value,
        loc,
        "an object with tools, classes, conversations",
        known=("tools", "classes", "conversations"),
    )
    if block is None:
        return None
    tools = p.strings(block["tools"], key_location(loc, "tools")) if "tools" in block else None
    conversations = (
        p.strings(block["conversations"], key_location(loc, "conversations"))
        if "conversations" in block
        else None
    )
    classes: tuple[str, ...] | None = None
    if block.get("classes") == "default":
        classes = DEFAULT_INPUTS_CLASSES
    elif "classes" in block:
        classes = p.strings(block["classes"], key_location(loc, "classes"))
        for i, item in enumerate(classes or ()):
            if item not in TOOL_CLASSES:
                p.add(
                    key_location(key_location(loc, "classes"), i),
                    'not a tool class (or "default" for the whole list)',
                )
    return Narrowing(tools=tools, classes=classes, conversations=conversations)


def _tool_lifecycle(value: object, loc: str, p: _Problems) -> ToolLifecyclePolicy:
    """The ``toolLifecycle`` key: ``{"observe": narrowing, "inputs": narrowing}``."""
    block = p.obj(value, loc, "an object with observe and inputs", known=("observe", "inputs")) or {}
    observe = _narrowing(block["observe"], key_location(loc, "observe"), p) if "observe" in block else None
    inputs = _narrowing(block["inputs"], key_location(loc, "inputs"), p) if "inputs" in block else None
    return ToolLifecyclePolicy(observe=observe, inputs=inputs)


def _feature_sets(value: object, loc: str, p: _Problems) -> FeatureSetPolicy:
    block = p.obj(value, loc, known=("enabled", "disabled")) or {}
    enabled = block.get("enabled")
    enabled = p.strings(enabled, key_location(loc, "enabled")) if enabled is not None else None
    disabled = p.strings(block["disabled"], key_location(loc, "disabled")) if "disabled" in block else ()
    return FeatureSetPolicy(enabled=enabled, disabled=disabled or ())


def _limits(entry: Mapping[str, object], loc: str, p: _Problems) -> Limits:
    """The entry's ``Limits``: the defaults, changed by ``timeouts``, ``maxLineBytes`` and
    ``limits`` (each field given once; values per ``limits.limit_problem``)."""
    changes: JSONObject = {}
    given_at: dict[str, str] = {}  # field -> where the entry sets it
    block = p.obj(entry.get("timeouts", _ABSENT), key_location(loc, "timeouts"), known=_TIMEOUTS) or {}
    for key in (key for key in block if key in _TIMEOUTS):
        attr, zero_ok = _TIMEOUTS[key]
        given_at[attr] = key_location(key_location(loc, "timeouts"), key)
        changes[attr] = p.typed(
            block[key],
            given_at[attr],
            functools.partial(_seconds_ok, zero_ok=zero_ok),
            "a number of seconds, 0 or more" if zero_ok else "a positive number of seconds",
            show=True,
        )
    if "maxLineBytes" in entry:
        given_at["max_line_bytes"] = key_location(loc, "maxLineBytes")
        changes["max_line_bytes"] = p.typed(
            entry["maxLineBytes"],
            given_at["max_line_bytes"],
            lambda v: _is_number(v) and v > 0 and v == int(v),
            "a positive whole number of bytes",
            show=True,
        )
    where = key_location(loc, "limits")
    block = p.obj(entry.get("limits", _ABSENT), where, "an object of Limits fields", known=CONFIG_KEYS) or {}
    for key in (key for key in block if key in CONFIG_KEYS):
        attr, value = CONFIG_KEYS[key], block[key]
        if attr in given_at:
            p.add(key_location(where, key), f"is also given as {given_at[attr]}; give it once")
            continue
        problem = limit_problem(attr, value)
        if problem is not None:
            p.add(key_location(where, key), f"{problem}, not {_kind(value, show=True)}")
            continue
        changes[attr] = value
    valid = {attr: value for attr, value in changes.items() if limit_problem(attr, value) is None}
    return limits_with(Limits(), valid)


def _restart(value: object, loc: str, p: _Problems) -> RestartPolicy:
    block = p.obj(value, loc, known=_RESTART) or {}
    values = {_RESTART[key]: v for key, v in block.items() if key in _RESTART}
    problems = restart_policy_problems(values)
    for key, attr in _RESTART.items():
        if attr in problems and key in block:
            p.add(key_location(loc, key), f"{problems[attr]}, not {_kind(block[key], show=True)}")
        elif attr in problems:  # a rule between keys, broken by this key's default
            default = RestartPolicy.__dataclass_fields__[attr].default
            p.add(key_location(loc, key), f"{problems[attr]}; it is {default:g} by default")
    return RestartPolicy(**values) if not problems else RestartPolicy()

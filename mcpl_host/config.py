"""What a server is: ``ServerConfig``, the one options object every builder takes, made by
hand or by the config-file reader (``mcpl_host.config_file``: ``load_config``,
``parse_config``, whose docstring gives every key of a config file and how it maps to the
fields here). Pure.

``ServerConfig`` checks what it is given as it is made (``TypeError`` or ``ValueError``,
never showing a value that may be secret: ``mcpl_host.secrets``). ``ConfigProblem`` and
``ConfigError`` are the reader's problems, here so that code catching a config error need
not load the reader. The reader's names (``HostConfig``, ``load_config``, ``parse_config``,
``read_config_json``, ``nesting_beyond``, ``key_location``) are also given by this module,
imported on first use: a connection made from a ``ServerConfig`` never loads the reader.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from mcpl_host.auth.settings import OAuthSettings
from mcpl_host.jsonrpc.errors import MCPLHostError
from mcpl_host.jsonrpc.values import is_list_or_tuple, is_mapping
from mcpl_host.limits import Limits
from mcpl_host.mcpl.compat import CompatSetting, checked_compat
from mcpl_host.mcpl.endpoint_uri import EndpointURI, is_mcpl_uri, resolve_endpoint_uri
from mcpl_host.mcpl.feature_sets import FeatureSetPolicy
from mcpl_host.mcpl.grants import GrantPolicy
from mcpl_host.mcpl.policy_state import REFUSAL_ACTIONS, RefusalAction
from mcpl_host.mcpl.tool_lifecycle import ToolLifecyclePolicy
from mcpl_host.secrets import (
    REDACTED,
    Redactor,
    redact_command,
    redact_url,
    server_secrets,
    shown_env,
)
from mcpl_host.stateless import ProtocolChoice, checked_protocol
from mcpl_host.supervisor_policy import RestartPolicy
from mcpl_host.tool_classes import TOOL_CLASSES
from mcpl_host.transports.stdio import STDERR_LOG_LEVELS, StdioParameters

if TYPE_CHECKING:
    import ssl

    from mcpl_host.config_file import (
        HostConfig,
        key_location,
        load_config,
        nesting_beyond,
        parse_config,
        read_config_json,
    )
    from mcpl_host.transports.http_params import HTTPParameters
    from mcpl_host.transports.ws_params import WebSocketParameters

# The WebSocket and HTTP parameters (their URL checks, ipaddress, the HTTP failure texts) are
# imported by the first server of their transport: a stdio server never loads them.

__all__ = [
    "ConfigError",
    "ConfigProblem",
    "HTTP_TRANSPORTS",
    "HostConfig",
    "SECTIONS",
    "ServerConfig",
    "TRANSPORTS",
    "Transport",
    "checked_tool_classes",
    "default_server_name",
    "key_location",
    "load_config",
    "nesting_beyond",
    "parse_config",
    "read_config_json",
]

#: Top-level keys holding servers, in merge order.
SECTIONS = ("mcpServers", "mcplServers")
Transport = Literal["stdio", "websocket", "http", "streamable-http", "sse"]
TRANSPORTS: tuple[Transport, ...] = ("stdio", "websocket", "http", "streamable-http", "sse")
#: The HTTP transports (``url`` with ``http://`` or ``https://``).
HTTP_TRANSPORTS = frozenset({"http", "streamable-http", "sse"})
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
        return self.described(self.redactor())

    def described(self, redactor: Redactor) -> str:
        """``describe`` with ``redactor``, this server's own (``redactor()``), made once by
        the caller that holds it: a ``HostedServer`` scans the settings for secrets once."""
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


#: The reader's names this module gives, imported on first use (module docstring).
_READER_NAMES = frozenset(
    {"HostConfig", "key_location", "load_config", "nesting_beyond", "parse_config", "read_config_json"}
)


def __getattr__(name: str) -> Any:
    """The reader's name ``name`` (``mcpl_host.config_file``), imported on first use; raises
    ``AttributeError`` for any other name."""
    if name not in _READER_NAMES:
        raise AttributeError(f"module 'mcpl_host.config' has no attribute {name!r}")
    import importlib  # noqa: PLC0415

    return getattr(importlib.import_module("mcpl_host.config_file"), name)

"""The host's config, the reader of what ``ServerConfig`` values (``mcpl_host.config``) are
made from: the common ``mcpServers`` JSON plus MCPL keys, read from a file
(``load_config``) or from an object held in memory (``parse_config``). Pure, except that
``load_config`` reads the file. A connection made from a ``ServerConfig`` by hand never
loads this module.

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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from mcpl_host.auth.settings import OAuthSettings
from mcpl_host.config import (
    HTTP_TRANSPORTS,
    SECTIONS,
    TRANSPORTS,
    ConfigError,
    ConfigProblem,
    ServerConfig,
    Transport,
)
from mcpl_host.jsonrpc.values import (
    JSONObject,
    finite_number,
    is_array,
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
from mcpl_host.mcpl.compat import COMPAT_SETTINGS
from mcpl_host.mcpl.endpoint_uri import EndpointURIError, is_mcpl_uri
from mcpl_host.mcpl.feature_sets import FeatureSetPolicy
from mcpl_host.mcpl.grants import GrantPolicy, pattern_problem
from mcpl_host.mcpl.tool_lifecycle import DEFAULT_INPUTS_CLASSES, Narrowing, ToolLifecyclePolicy
from mcpl_host.secrets import (
    MIN_SECRET_CHARS,
)
from mcpl_host.stateless import PROTOCOL_CHOICES
from mcpl_host.suggest import closest
from mcpl_host.supervisor_policy import RestartPolicy, restart_policy_problems
from mcpl_host.tool_classes import TOOL_CLASSES

if TYPE_CHECKING:
    pass

# The WebSocket and HTTP parameters (their URL checks, ipaddress, the HTTP failure texts) are
# imported by the first server of their transport: a stdio server never loads them.

__all__ = [
    "HostConfig",
    "key_location",
    "load_config",
    "nesting_beyond",
    "parse_config",
    "read_config_json",
]

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
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
# An optional key that is not there (JSON null is a value, and a wrong one).
_ABSENT: Any = object()


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

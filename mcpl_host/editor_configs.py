"""The MCP configs people already have: the shapes of the common editors' files, read as the
host's own config (``mcpl_host.config``), and where those files are (``--config auto``).
Pure, except ``load_any_config`` and ``look_around``, which read files.

- **Shapes** (``detect_shape``):
  ``"mcp"``: ``{"mcpServers": {...}}`` (also ``"mcplServers"``): ours, Claude Desktop,
  Cursor, Windsurf, Claude Code's project ``.mcp.json``;
  ``"vscode"``: ``{"servers": {...}, "inputs": [...]}`` (VS Code's ``mcp.json``) or VS
  Code's user ``settings.json`` with the same under ``"mcp"``;
  ``"claude-code"``: Claude Code's ``~/.claude.json`` (a ``"projects"`` object): the servers
  of the current directory's project (``projects[<cwd>].mcpServers``, the directory exactly
  as Claude Code writes it, absolute), then the top-level ``mcpServers``; a name in both is
  the project's (Claude Code's own precedence: local scope over user scope), and
  ``shadowed`` says so.
- **Entries** become the host's (``to_host_shape``): ``serverUrl`` (Windsurf) is ``url``;
  VS Code's ``type`` (``"stdio"``, ``"http"``, ``"sse"``) is the host's ``type``; the
  editors' own tool-approval and UI keys (``EDITOR_ONLY_KEYS``) are left out, as the editor
  applies them and the host has no such setting; ``envFile`` is a problem (not read: put
  the variables in ``env``). Every other key is the host's (``grant``... may be written in
  any shape) and is checked as usual, unknown keys with a "did you mean" hint.
- **Variables** (``expand``; docs/protocol.md CF1): in ``command``, ``args``, ``env``
  values, ``url``/``serverUrl``, ``headers`` values and ``cwd`` of every shape:
  ``${VAR}`` and ``${env:VAR}`` (the environment), ``${VAR:-default}`` (the default when
  VAR is unset or empty), ``${workspaceFolder}`` (the current directory),
  ``${workspaceFolderBasename}``, ``${userHome}`` (HOME), ``${pathSeparator}``. An unset
  variable is a problem naming it; ``${input:ID}`` (a VS Code prompt) is a problem naming
  the input (nothing here can ask it); any other ``${...}`` is a problem. A value taken
  from the environment is added to the entry's ``secrets`` (when at least
  ``MIN_SECRET_CHARS`` long), so it is redacted wherever it would be shown; no message
  holds a value.
- **Problems** keep the location of the file's own shape (``servers.time.env.KEY``,
  ``projects["/p"].mcpServers.x.url``), and every problem is listed at once, as
  ``parse_config`` does.
- **Well-known paths** (``well_known_paths``), in the order ``--config auto`` tries them:
  the current directory's ``.mcp.json`` (Claude Code), ``.cursor/mcp.json``,
  ``.vscode/mcp.json``; then ``~/.claude.json``, Claude Desktop's file (Linux:
  ``$XDG_CONFIG_HOME/Claude/claude_desktop_config.json``; macOS: ``~/Library/Application
  Support/Claude/claude_desktop_config.json``), ``~/.cursor/mcp.json``,
  ``~/.codeium/windsurf/mcp_config.json``, VS Code's user ``mcp.json`` and ``settings.json``
  (Linux: ``$XDG_CONFIG_HOME/Code/User/``; macOS: ``~/Library/Application
  Support/Code/User/``). ``auto`` takes the first file that exists and has a server or a
  problem (a file with no server, such as a ``settings.json`` without ``mcp``, is passed
  over).
- Files may hold JSONC (``//`` and ``/* */`` comments, trailing commas), as VS Code's do;
  each is bounded by ``limits.CONFIG_MAX_BYTES`` and ``CONFIG_MAX_DEPTH``.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mcpl_host.config import ConfigError, ConfigProblem, ServerConfig
from mcpl_host.config_file import HostConfig, key_location, parse_config, read_config_json
from mcpl_host.jsonrpc.values import is_array, is_object
from mcpl_host.limits import CONFIG_MAX_BYTES
from mcpl_host.secrets import MIN_SECRET_CHARS

__all__ = [
    "EDITOR_ONLY_KEYS",
    "MAX_NAMES_SHOWN",
    "Converted",
    "Found",
    "Place",
    "Shape",
    "detect_shape",
    "expand",
    "load_any_config",
    "look_around",
    "look_at",
    "names_phrase",
    "parse_any_config",
    "server_row",
    "strip_jsonc",
    "to_host_shape",
    "well_known_paths",
]

Shape = Literal["mcp", "vscode", "claude-code"]
#: Keys of the editors' entries that only the editor applies (tool approval, its UI, VS
#: Code's development mode and gallery): left out.
EDITOR_ONLY_KEYS = frozenset({"autoApprove", "alwaysAllow", "disabledTools", "dev", "gallery", "version"})
#: Server names listed in one message at most; more are counted.
MAX_NAMES_SHOWN = 20
#: Keys whose string values (or whose arrays' and objects' string values) are expanded.
_EXPANDED = ("command", "args", "env", "url", "serverUrl", "headers", "cwd")
_REFERENCE = re.compile(r"\$\{([^{}]*)\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: The variables that are not the environment's, and their values.
_PLACES: dict[str, Callable[[Place], str]] = {
    "workspaceFolder": lambda place: place.cwd,
    "workspaceFolderBasename": lambda place: os.path.basename(place.cwd.rstrip("/")) or place.cwd,
    "userHome": lambda place: place.home,
    "pathSeparator": lambda place: "/",
}


@dataclass(frozen=True, slots=True)
class Place:
    """Where variables come from: ``environ`` (the environment), ``cwd`` (the current
    directory, absolute: ``${workspaceFolder}``, Claude Code's project key) and ``home``."""

    environ: Mapping[str, str]
    cwd: str
    home: str

    @classmethod
    def here(cls) -> Place:
        """This process's environment, directory and HOME."""
        return cls(dict(os.environ), os.getcwd(), os.environ.get("HOME") or str(Path.home()))


@dataclass(frozen=True, slots=True)
class Converted:
    """A file in the host's shape: ``data`` (``{"mcpServers": ...}``; a file of no known
    shape as it is, for ``parse_config`` to say what is wrong), ``shape`` (None: no known one),
    ``locations`` (server name -> where the entry is in the file, ``servers.time``) and
    ``shadowed`` (names whose top-level entry in ``~/.claude.json`` the project's replaces)."""

    data: object
    shape: Shape | None
    locations: dict[str, str] = field(default_factory=dict[str, str])
    shadowed: tuple[str, ...] = ()
    #: Problems found while converting (located in the file's shape); ``parse_any_config``
    #: lists them with ``parse_config``'s.
    problems: tuple[ConfigProblem, ...] = ()


def names_phrase(names: list[str], limit: int = MAX_NAMES_SHOWN) -> str:
    """``a, b, c`` (each ``repr``-free, as given), at most ``limit`` then ``and N more``."""
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


# --- JSONC --------------------------------------------------------------------------------------

_COMMENTS = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*|/\*.*?(?:\*/|\Z)', re.S)
_TRAILING_COMMA = re.compile(r'"(?:[^"\\\n]|\\.)*"|,(?=\s*[}\]])')


def _blank(match: re.Match[str]) -> str:
    text = match.group()
    if text.startswith('"'):
        return text
    return re.sub(r"[^\n]", " ", text)


def strip_jsonc(text: str) -> str:
    """JSONC ``text`` as JSON: ``//`` and ``/* */`` comments and trailing commas become
    spaces (lines and columns kept, strings untouched). Linear in the text."""
    return _TRAILING_COMMA.sub(_blank, _COMMENTS.sub(_blank, text))


# --- variables ----------------------------------------------------------------------------------


def expand(value: str, place: Place, loc: str, problems: list[ConfigProblem], secrets: list[str]) -> str:
    """``value`` with its ``${...}`` references replaced (module rules); each unusable one
    adds a problem at ``loc`` naming the reference (never a value) and is left as written;
    each value taken from
    the environment is appended to ``secrets``."""

    def one(match: re.Match[str]) -> str:
        inner = match.group(1)
        if inner in _PLACES:
            return _PLACES[inner](place)
        if inner.startswith("input:"):
            problems.append(
                ConfigProblem(
                    loc,
                    f"${{{inner}}} asks VS Code's input {inner[6:]!r}, which mcpl-host cannot ask: "
                    "put the value in an environment variable and write ${env:NAME}",
                )
            )
            return match.group()
        default: str | None = None
        if inner.startswith("env:"):
            name = inner[4:]
        else:
            name, sep, rest = inner.partition(":-")
            default = rest if sep else None
        if not _NAME.fullmatch(name):
            shown = inner if len(inner) <= 60 else inner[:60] + "…"
            problems.append(ConfigProblem(loc, f"${{{shown}}} is not a variable mcpl-host expands"))
            return match.group()
        got = place.environ.get(name)
        if default is not None and not got:
            return default
        if got is None:
            problems.append(ConfigProblem(loc, f"${{{inner}}}: the environment variable {name} is not set"))
            return match.group()
        secrets.append(got)
        return got

    return _REFERENCE.sub(one, value)


def _expanded_entry(
    entry: dict[str, Any], place: Place, loc: str, problems: list[ConfigProblem]
) -> dict[str, Any]:
    """A copy of ``entry`` with variables expanded in ``_EXPANDED`` keys; values from the
    environment added to its ``secrets`` (when it is an array or absent)."""
    found: list[str] = []
    out = dict(entry)
    for key in _EXPANDED:
        value = out.get(key)
        where = key_location(loc, key)
        if isinstance(value, str):
            out[key] = expand(value, place, where, problems, found)
        elif is_array(value):
            out[key] = [
                expand(v, place, key_location(where, i), problems, found) if isinstance(v, str) else v
                for i, v in enumerate(value)
            ]
        elif is_object(value):
            copied = copy.copy(value)  # keeps the repeated keys parse_config reports
            for k, v in value.items():
                if isinstance(v, str):
                    copied[k] = expand(v, place, key_location(where, k), problems, found)
            out[key] = copied
    kept = [value for value in dict.fromkeys(found) if len(value) >= MIN_SECRET_CHARS]
    if kept:
        given = out.get("secrets", [])
        if is_array(given):
            out["secrets"] = [*given, *kept]
    return out


# --- shapes -------------------------------------------------------------------------------------


def detect_shape(data: object) -> Shape | None:
    """The shape of a decoded file (module rules), or None when it holds no servers in any
    shape known here (no ``mcpServers``, ``mcplServers``, ``servers``, ``mcp.servers`` nor
    ``projects``). The host's own keys win: a file with ``mcpServers`` and ``projects`` is
    Claude Code's only when ``projects`` is an object."""
    if not is_object(data):
        return None
    if is_object(data.get("projects")):
        return "claude-code"
    if "mcpServers" in data or "mcplServers" in data:
        return "mcp"
    if "servers" in data:
        return "vscode"
    mcp = data.get("mcp")
    if is_object(mcp) and "servers" in mcp:
        return "vscode"
    return None


def _entry(entry: object, loc: str, place: Place, problems: list[ConfigProblem]) -> object:
    """One editor entry as the host's (module rules), or ``entry`` unchanged when it is not an
    object (``parse_config`` says what it must be)."""
    if not is_object(entry):
        return entry
    out: dict[str, Any] = {k: v for k, v in entry.items() if k not in EDITOR_ONLY_KEYS}
    problems.extend(
        ConfigProblem(key_location(loc, key), "this key appears more than once in the same object")
        for key in getattr(entry, "repeated", ())
    )
    if "serverUrl" in out:
        if "url" in out:
            problems.append(
                ConfigProblem(key_location(loc, "serverUrl"), 'give "url" or "serverUrl", not both')
            )
        out["url"] = out.pop("serverUrl")
    if "envFile" in out:
        del out["envFile"]
        problems.append(
            ConfigProblem(
                key_location(loc, "envFile"), 'is not read by mcpl-host: put the variables in "env"'
            )
        )
    return _expanded_entry(out, place, loc, problems)


def to_host_shape(data: object, place: Place) -> Converted:
    """The decoded file ``data`` in the host's shape (module rules), with the problems found
    while converting (``Converted.problems``); the entries' own keys are checked afterwards
    by ``parse_config``. Never raises."""
    shape = detect_shape(data)
    if shape is None or not is_object(data):  # parse_config says what is wrong, near misses too
        return Converted(data, None)
    problems: list[ConfigProblem] = [
        ConfigProblem(key_location("", key), "this key appears more than once in the same object")
        for key in getattr(data, "repeated", ())
    ]
    sections: list[tuple[str, object]] = []
    if shape == "mcp":
        sections = [(key, data[key]) for key in ("mcpServers", "mcplServers") if key in data]
    elif shape == "vscode":
        prefix = "servers" if "servers" in data else "mcp.servers"
        holder = data if prefix == "servers" else data["mcp"]
        sections = [(prefix, holder["servers"])]
    else:
        projects: dict[str, Any] = data["projects"]
        key = place.cwd.rstrip("/") or "/"
        if key in projects and is_object(projects[key]) and "mcpServers" in projects[key]:
            sections.append(
                (key_location(key_location("projects", key), "mcpServers"), projects[key]["mcpServers"])
            )
        if "mcpServers" in data:
            sections.append(("mcpServers", data["mcpServers"]))
    servers: dict[str, Any] = {}
    ours: dict[str, Any] = {}
    locations: dict[str, str] = {}
    shadowed: list[str] = []
    for prefix, block in sections:
        if not is_object(block):
            problems.append(ConfigProblem(prefix, "must be an object keyed by server name"))
            continue
        for key in getattr(block, "repeated", ()):
            problems.append(
                ConfigProblem(key_location(prefix, key), "this key appears more than once in the same object")
            )
        target = ours if prefix == "mcplServers" else servers
        for name, entry in block.items():
            if name in locations:
                if shape == "claude-code":
                    shadowed.append(name)
                    continue
                if prefix == "mcplServers":  # parse_config names the clash
                    target[name] = entry
                    continue
            locations[name] = key_location(prefix, name)
            target[name] = _entry(entry, key_location(prefix, name), place, problems)
    converted: dict[str, Any] = {}
    if shape == "mcp":  # other keys: parse_config's near-miss hints ("mcpServer")
        converted.update((k, v) for k, v in data.items() if k not in ("mcpServers", "mcplServers"))
    converted["mcpServers"] = servers
    if ours:
        converted["mcplServers"] = ours
    return Converted(converted, shape, locations, tuple(shadowed), tuple(problems))


def _relocated(problem: ConfigProblem, locations: Mapping[str, str]) -> ConfigProblem:
    """``problem`` located in the file's own shape (``mcpServers.x...`` -> ``servers.x...``)."""
    for name, where in locations.items():
        ours = key_location("mcpServers", name)
        if problem.location == ours or problem.location.startswith((ours + ".", ours + "[")):
            return ConfigProblem(where + problem.location[len(ours) :], problem.message)
    return problem


def parse_any_config(
    data: object, place: Place, *, base_dir: Path, source: str
) -> tuple[HostConfig, Converted]:
    """``to_host_shape`` then ``parse_config``, every problem located in the file's shape.
    Raises ``ConfigError`` naming ``source``."""
    converted = to_host_shape(data, place)
    found = list(converted.problems)
    config: HostConfig | None = None
    try:
        config = parse_config(converted.data, base_dir=base_dir, source=source)
    except ConfigError as exc:
        found += [_relocated(p, converted.locations) for p in exc.problems]
    if found or config is None:
        raise ConfigError(found, source)
    return config, converted


def load_any_config(
    path: str | os.PathLike[str], place: Place | None = None, *, max_bytes: int = CONFIG_MAX_BYTES
) -> tuple[HostConfig, Converted]:
    """Read the file at ``path`` in any shape of this module (JSONC allowed; at most
    ``max_bytes``) and check it as the host's config; relative paths resolve against its
    folder. Raises ``ConfigError`` listing every problem."""
    data = read_config_json(path, max_bytes=max_bytes, prepare=strip_jsonc)
    return parse_any_config(
        data, place or Place.here(), base_dir=Path(path).absolute().parent, source=str(path)
    )


# --- where the files are ------------------------------------------------------------------------


def well_known_paths(place: Place, platform: str) -> list[tuple[str, Path]]:
    """``(client, path)`` for each well-known config of ``platform`` (``sys.platform``), in
    the order ``--config auto`` tries them (module rules). Paths from ``place`` only (HOME,
    ``XDG_CONFIG_HOME`` from its environment, its cwd): nothing is read."""
    home, cwd = Path(place.home), Path(place.cwd)
    if platform == "darwin":
        support = home / "Library" / "Application Support"
        desktop, code_user = support / "Claude", support / "Code" / "User"
    else:
        xdg = place.environ.get("XDG_CONFIG_HOME") or ""
        config_home = Path(xdg) if xdg and os.path.isabs(xdg) else home / ".config"
        desktop, code_user = config_home / "Claude", config_home / "Code" / "User"
    return [
        ("Claude Code (project)", cwd / ".mcp.json"),
        ("Cursor (project)", cwd / ".cursor" / "mcp.json"),
        ("VS Code (workspace)", cwd / ".vscode" / "mcp.json"),
        ("Claude Code", home / ".claude.json"),
        ("Claude Desktop", desktop / "claude_desktop_config.json"),
        ("Cursor", home / ".cursor" / "mcp.json"),
        ("Windsurf", home / ".codeium" / "windsurf" / "mcp_config.json"),
        ("VS Code (user)", code_user / "mcp.json"),
        ("VS Code (user settings)", code_user / "settings.json"),
    ]


@dataclass(frozen=True, slots=True)
class Found:
    """One well-known path looked at: ``client``, ``path``, whether it ``exists``, and either
    its ``config`` and ``converted`` or its ``error`` (``ConfigError``); a file in no shape
    of this module (``settings.json`` without ``mcp``) has neither."""

    client: str
    path: Path
    exists: bool
    config: HostConfig | None = None
    converted: Converted | None = None
    error: ConfigError | None = None

    @property
    def usable(self) -> bool:
        """What ``--config auto`` takes: a file with a server, or with a problem to show."""
        return self.error is not None or (self.config is not None and bool(self.config.servers))


def look_at(client: str, path: Path, place: Place, *, max_bytes: int = CONFIG_MAX_BYTES) -> Found:
    """Read one well-known path (``Found``)."""
    if not path.is_file():
        return Found(client, path, path.exists())
    try:
        data = read_config_json(path, max_bytes=max_bytes, prepare=strip_jsonc)
        if detect_shape(data) is None:
            return Found(client, path, True)
        config, converted = parse_any_config(data, place, base_dir=path.absolute().parent, source=str(path))
    except ConfigError as exc:
        return Found(client, path, True, error=exc)
    return Found(client, path, True, config, converted)


def look_around(
    place: Place, platform: str, *, first_only: bool = False, max_bytes: int = CONFIG_MAX_BYTES
) -> list[Found]:
    """Each well-known path (``well_known_paths``) looked at; with ``first_only``, stop at the
    first usable one (``--config auto``)."""
    found: list[Found] = []
    for client, path in well_known_paths(place, platform):
        found.append(look_at(client, path, place, max_bytes=max_bytes))
        if first_only and found[-1].usable:
            break
    return found


def server_row(name: str, server: ServerConfig) -> dict[str, Any]:
    """``{"name", "transport", "target", "disabled"}`` for ``config list``: ``target`` the
    command line or URL with every secret redacted (``ServerConfig.describe``)."""
    return {
        "name": name,
        "transport": server.transport,
        "target": server.describe,
        "disabled": server.disabled,
    }

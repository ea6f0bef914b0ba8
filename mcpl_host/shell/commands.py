"""The shell's command language: parsing one line into a ``Command``, the help text, and the
policy change of ``grant`` / ``deny``. Pure: no I/O, no server.

Rules of this module:

- A line is split like a POSIX shell line (``shlex``: quotes group words, ``#`` starts a
  comment); a blank or comment line is no command. A first word ``@NAME`` sends that one
  line to server NAME instead of the current one (``@time call get_current_time``).
- The first word is the command (``COMMANDS``); ``channels`` takes a sub-command (``open``,
  ``close``, ``publish``; none lists the channels). An unknown command, a word count out of
  the command's range and an unclosed quote are ``CommandError``s, each one sentence (an
  unknown command names the closest one).
- ``tools``, ``resources``, ``prompts``, ``restart`` and ``servers``' optional word is a
  server name (like ``@NAME``).
- ``grant PATTERN`` and ``deny PATTERN`` change a ``GrantPolicy`` (``changed_policy``):
  ``grant`` takes PATTERN out of the deny list and, unless everything advertised is granted
  already, adds it to the grant list; ``deny`` adds it to the deny list and takes it out of
  the grant list. A deny pattern still wins over any grant (MCPL §5.4): granting a path that
  a wider deny pattern covers changes nothing, and ``still_denied`` says which pattern.
  PATTERN must match some capability path (``grants.pattern_problem``).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace

from mcpl_host.mcpl.grants import INJECT_PREFIX, GrantPolicy, matches, pattern_problem
from mcpl_host.suggest import closest

__all__ = [
    "COMMANDS",
    "LOG_LEVELS",
    "Command",
    "CommandError",
    "CommandSpec",
    "changed_policy",
    "help_text",
    "parse_line",
    "still_denied",
]

#: MCP 2025-11-25 "Logging": the levels of ``logging/setLevel`` (RFC 5424 severities).
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """One command: ``usage`` (after the name), ``summary`` (one line), the range of words
    after it (``max_words`` None: no limit) and what each word is, for completion:
    ``slots`` names the kind of word at each position (the last one repeats when it ends
    with ``...``): ``server``, ``tool``, ``tool-argument...``, ``resource``, ``prompt``,
    ``prompt-argument...``, ``pattern``, ``level``, ``held``, ``command``, ``feature-set``,
    ``channel``, ``channel-argument...``, ``text...``."""

    usage: str
    summary: str
    min_words: int = 0
    max_words: int | None = 0
    slots: tuple[str, ...] = ()


COMMANDS: dict[str, CommandSpec] = {
    "tools": CommandSpec("[SERVER]", "list the tools, with their arguments (* required)", 0, 1, ("server",)),
    "call": CommandSpec(
        "TOOL [KEY=VALUE...|JSON]",
        "call a tool; values are read by its inputSchema and checked before sending",
        1,
        None,
        ("tool", "tool-argument..."),
    ),
    "resources": CommandSpec("[SERVER]", "list the resources", 0, 1, ("server",)),
    "read": CommandSpec("URI", "read a resource", 1, 1, ("resource",)),
    "prompts": CommandSpec("[SERVER]", "list the prompts", 0, 1, ("server",)),
    "prompt": CommandSpec(
        "NAME [KEY=VALUE...|JSON]", "get a prompt", 1, None, ("prompt", "prompt-argument...")
    ),
    "channels": CommandSpec(
        "[open|close|publish ...]",
        "list the registered channels; channels open type=TYPE address=JSON "
        "[metadata=JSON] (or id=ID [history=JSON]), channels close ID, channels publish "
        "[--thread=ID|--root] CONVERSATION CHANNEL TEXT...",
        0,
        None,
        ("channel-command", "channel-argument..."),
    ),
    "rollback": CommandSpec(
        "FEATURE_SET CHECKPOINT", "roll a feature set's state back to a checkpoint", 2, 2, ("feature-set",)
    ),
    "grant": CommandSpec(
        "PATTERN", "grant the capabilities matching PATTERN (runs at once)", 1, 1, ("pattern",)
    ),
    "deny": CommandSpec(
        "PATTERN", "deny the capabilities matching PATTERN (runs at once)", 1, 1, ("pattern",)
    ),
    "restart": CommandSpec("[SERVER]", "close the server and start it again at once", 0, 1, ("server",)),
    "loglevel": CommandSpec("LEVEL", "ask the server to send log messages from LEVEL up", 1, 1, ("level",)),
    "pending": CommandSpec(
        "", "list the held requests (inference, sampling and elicitation requests waiting for you)"
    ),
    "answer": CommandSpec(
        "ID TEXT...",
        "answer a held request: TEXT, or for an elicitation accept, decline, cancel or a quoted JSON form",
        2,
        None,
        ("held", "text..."),
    ),
    "use": CommandSpec("SERVER", "send the following commands to SERVER", 1, 1, ("server",)),
    "servers": CommandSpec("", "list the servers and where each stands"),
    "help": CommandSpec("[COMMAND]", "show the commands, or one command", 0, 1, ("command",)),
    "quit": CommandSpec("", "close every server and leave (also: exit, Ctrl-D)"),
    "exit": CommandSpec("", "close every server and leave"),
}
#: The sub-commands of ``channels``.
CHANNEL_COMMANDS = ("open", "close", "publish")
#: Commands whose optional word is a server name.
_SERVER_WORD = frozenset({"tools", "resources", "prompts", "restart"})


class CommandError(ValueError):
    """A line that is not a command; ``str()`` is one sentence."""


@dataclass(frozen=True, slots=True)
class Command:
    """One parsed line: ``name`` (a key of ``COMMANDS``), ``server`` (from ``@NAME`` or a
    server word; None: the current server), ``words`` (the rest, as split), ``sub`` (the
    ``channels`` sub-command, or None)."""

    name: str
    server: str | None = None
    words: tuple[str, ...] = ()
    sub: str | None = None


def _closest(word: str, choices: list[str]) -> str:
    found = closest(word, choices)
    return f"; did you mean {found!r}?" if found is not None else "; type help for the commands"


def parse_line(line: str) -> Command | None:
    """The command on ``line`` (module rules), or None for a blank or comment line.
    Raises ``CommandError``."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError as exc:  # "No closing quotation", "No escaped character"
        raise CommandError(f"cannot read the line: {str(exc).lower()}") from None
    if not words:
        return None
    server = None
    if words[0].startswith("@"):
        server = words[0][1:]
        if not server:
            raise CommandError("'@' must be followed by a server name")
        words = words[1:]
        if not words:
            raise CommandError(f"no command after @{server}")
    name, rest = words[0], tuple(words[1:])
    spec = COMMANDS.get(name)
    if spec is None:
        raise CommandError(f"unknown command {name!r}{_closest(name, list(COMMANDS))}")
    sub = None
    if name == "channels" and rest:
        sub, rest = rest[0], rest[1:]
        if sub not in CHANNEL_COMMANDS:
            raise CommandError(f"unknown channels command {sub!r}{_closest(sub, list(CHANNEL_COMMANDS))}")
        needed = {"open": 1, "close": 1, "publish": 3}[sub]
        if len(rest) < needed or (sub == "close" and len(rest) > 1):
            usage = {
                "open": "KEY=VALUE...",
                "close": "ID",
                "publish": "[--thread=ID|--root] CONVERSATION CHANNEL TEXT...",
            }[sub]
            raise CommandError(f"usage: channels {sub} {usage}")
    elif len(rest) < spec.min_words or (spec.max_words is not None and len(rest) > spec.max_words):
        raise CommandError(f"usage: {name} {spec.usage}".rstrip())
    if name == "use":
        server = words[1]  # its one word (checked above)
    elif name in _SERVER_WORD and rest:
        if server is not None and server != rest[0]:
            raise CommandError(f"two servers named: @{server} and {rest[0]!r}")
        return Command(name, rest[0], (), sub)
    return Command(name, server, rest, sub)


def help_text(name: str | None = None) -> list[str]:
    """Lines of help: every command with its usage and summary, or one command's. Raises
    ``CommandError`` for an unknown command."""
    if name is not None:
        spec = COMMANDS.get(name)
        if spec is None:
            raise CommandError(f"unknown command {name!r}{_closest(name, list(COMMANDS))}")
        return [f"{name} {spec.usage}".rstrip(), f"  {spec.summary}"]
    lines = [f"{f'{n} {s.usage}'.rstrip():<34} {s.summary}" for n, s in COMMANDS.items() if n != "exit"]
    lines.append("@SERVER COMMAND...                 send one command to another server")
    return lines


def changed_policy(policy: GrantPolicy, verb: str, pattern: str) -> GrantPolicy:
    """``policy`` after ``grant PATTERN`` or ``deny PATTERN`` (module rules). Raises
    ``CommandError`` for a pattern that matches no capability path, or another verb."""
    problem = pattern_problem(pattern)
    if problem is not None:
        raise CommandError(problem)
    if verb == "grant":
        deny = tuple(p for p in policy.deny if p != pattern)
        grant = policy.grant
        # Under grant-all an injection path still needs its pattern (RFC-010 §4.1).
        if (not policy.grant_all_advertised or pattern.startswith(INJECT_PREFIX)) and pattern not in grant:
            grant = (*grant, pattern)
        return replace(policy, grant=grant, deny=deny)
    if verb == "deny":
        deny = policy.deny if pattern in policy.deny else (*policy.deny, pattern)
        grant = tuple(p for p in policy.grant if p != pattern)
        return replace(policy, grant=grant, deny=deny)
    raise CommandError(f"not a policy verb: {verb!r}")


def still_denied(policy: GrantPolicy, path: str) -> str | None:
    """The deny pattern of ``policy`` that covers the capability ``path``, or None."""
    return next((p for p in policy.deny if matches(p, path)), None)

"""What the shell can complete, from what the servers told it: a ``Catalog`` and
``complete()``. Pure: the terminal adapter (``shell.terminal``) asks, a session keeps the
catalog up to date.

Rules of this module:

- The word being typed is the text after the last blank (none: a new, empty word).
  ``complete(line, catalog)`` returns the ``Suggestion``s that start with it, in the
  catalog's order (commands in ``COMMANDS`` order), each replacing that word and ending
  with a blank (the next word follows), except ``name=`` (its value follows).
- What a word may be comes from the command's ``CommandSpec.slots``: the first word is a
  command (or ``@SERVER``), then ``server`` (names), ``tool`` / ``prompt`` / ``resource``
  (the names and URIs the target server listed), ``tool-argument`` (``name=`` for each
  property of the tool's ``inputSchema`` not given yet; after the ``=``, its ``enum`` or
  ``true``/``false`` values), ``prompt-argument`` (``name=``), ``pattern`` (capability
  paths and ``parent.*`` patterns), ``level`` (MCP log levels), ``held`` (ids of held
  requests), ``command`` (for ``help``), ``feature-set``, ``channel-command``,
  ``channel-argument`` (``open``: its ``key=`` words; ``close`` and ``publish``: channel
  ids). ``text`` completes nothing.
- The target server is the one of ``@NAME`` (or ``use``), else the current one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from mcpl_host.coerce import allowed_types, argument_names
from mcpl_host.mcpl.grants import PATTERN_HINTS
from mcpl_host.shell.commands import CHANNEL_COMMANDS, COMMANDS, LOG_LEVELS

__all__ = ["Catalog", "Suggestion", "ToolInfo", "complete", "tool_info"]

#: The ``key=`` words of ``channels open``.
CHANNEL_OPEN_KEYS = ("type=", "address=", "metadata=", "id=", "history=")
#: Values suggested after ``name=`` for one argument, at most.
MAX_VALUES = 50


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """A tool as completion sees it: its argument names, in schema order, and the values
    worth suggesting for some of them (``enum`` members, ``true``/``false``)."""

    arguments: tuple[str, ...] = ()
    values: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: {})


def _word(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _member(value: object, key: str) -> Any:
    """``value[key]`` when ``value`` is a JSON object, else None."""
    return cast("Mapping[str, Any]", value).get(key) if isinstance(value, Mapping) else None


def tool_info(schema: Mapping[str, Any] | None) -> ToolInfo:
    """The ``ToolInfo`` of a tool's ``inputSchema`` (never raises)."""
    names = argument_names(schema)
    props = _member(schema, "properties")
    values: dict[str, tuple[str, ...]] = {}
    for name in names:
        prop = _member(props, name)
        enum = _member(prop, "enum")
        if isinstance(enum, list):
            values[name] = tuple(_word(item) for item in cast("list[object]", enum)[:MAX_VALUES])
        elif allowed_types(prop, schema) == {"boolean"}:
            values[name] = ("true", "false")
    return ToolInfo(tuple(names), values)


@dataclass(slots=True)
class Catalog:
    """What the servers listed, by server name; ``current`` is where commands go."""

    servers: list[str] = field(default_factory=lambda: [])
    current: str = ""
    tools: dict[str, dict[str, ToolInfo]] = field(default_factory=lambda: {})
    resources: dict[str, list[str]] = field(default_factory=lambda: {})
    prompts: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=lambda: {})
    feature_sets: dict[str, list[str]] = field(default_factory=lambda: {})
    channels: dict[str, list[str]] = field(default_factory=lambda: {})
    held: list[str] = field(default_factory=lambda: [])


@dataclass(frozen=True, slots=True)
class Suggestion:
    """Replace the word being typed (``len(word)`` characters before the cursor) by ``text``;
    ``meta`` is a short description shown beside it."""

    text: str
    replaces: int
    meta: str = ""


def _slot(slots: tuple[str, ...], index: int) -> str | None:
    if index < len(slots):
        return slots[index].removesuffix("...")
    if slots and slots[-1].endswith("..."):
        return slots[-1].removesuffix("...")
    return None


def _argument_words(
    typed: str, given: list[str], names: tuple[str, ...], values: Mapping[str, tuple[str, ...]]
) -> list[tuple[str, str]]:
    key, sep, _value = typed.partition("=")
    if sep:
        return [(f"{key}={value}", "") for value in values.get(key, ())]
    taken = {word.partition("=")[0] for word in given}
    return [(f"{name}=", "argument") for name in names if name not in taken]


def _candidates(
    slot: str, words: list[str], typed: str, server: str, catalog: Catalog
) -> list[tuple[str, str]]:
    tools = catalog.tools.get(server, {})
    if slot == "server":
        return [(name, "server") for name in catalog.servers]
    if slot == "tool":
        return [(name, "tool") for name in tools]
    if slot == "tool-argument":
        info = tools.get(words[1]) if len(words) > 1 else None
        return _argument_words(typed, words[2:], info.arguments, info.values) if info else []
    if slot == "resource":
        return [(uri, "resource") for uri in catalog.resources.get(server, [])]
    if slot == "prompt":
        return [(name, "prompt") for name in catalog.prompts.get(server, {})]
    if slot == "prompt-argument":
        names = catalog.prompts.get(server, {}).get(words[1], ()) if len(words) > 1 else ()
        return _argument_words(typed, words[2:], names, {})
    if slot == "pattern":
        return [(pattern, "capability") for pattern in ("*", *PATTERN_HINTS)]
    if slot == "level":
        return [(level, "log level") for level in LOG_LEVELS]
    if slot == "held":
        return [(held, "held request") for held in catalog.held]
    if slot == "command":
        return [(name, "command") for name in COMMANDS]
    if slot == "feature-set":
        return [(name, "feature set") for name in catalog.feature_sets.get(server, [])]
    if slot == "channel-command":
        return [(name, "channels") for name in CHANNEL_COMMANDS]
    if slot == "channel-argument":
        sub = words[1] if len(words) > 1 else ""
        if sub == "open":
            taken = {word.partition("=")[0] + "=" for word in words[2:]}
            return [(key, "channels/open") for key in CHANNEL_OPEN_KEYS if key not in taken]
        if (sub == "close" and len(words) == 2) or (sub == "publish" and len(words) == 3):
            return [(channel, "channel") for channel in catalog.channels.get(server, [])]
    return []


def complete(line: str, catalog: Catalog) -> list[Suggestion]:
    """The suggestions for the word being typed at the end of ``line`` (module rules)."""
    words = line.split()
    typed = "" if not line or line[-1].isspace() else words.pop()
    server = catalog.current
    if words and words[0].startswith("@"):
        server = words.pop(0)[1:]
    elif not words and typed.startswith("@"):
        found = [(f"@{name} ", "server") for name in catalog.servers]
        return [Suggestion(text, len(typed), meta) for text, meta in found if text.startswith(typed)]
    if not words:
        found = [(f"{name} ", spec.summary) for name, spec in COMMANDS.items()]
    else:
        spec = COMMANDS.get(words[0])
        slot = _slot(spec.slots, len(words) - 1) if spec is not None else None
        if words[0] == "use":
            slot = "server" if len(words) == 1 else None
        found = _candidates(slot, words, typed, server, catalog) if slot is not None else []
        found = [(text if text.endswith("=") else f"{text} ", meta) for text, meta in found]
    return [Suggestion(text, len(typed), meta) for text, meta in found if text.startswith(typed)]

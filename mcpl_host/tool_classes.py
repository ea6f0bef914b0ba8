"""Tool classes (MCPL RFC-008 rev 2): what a tool does, as a hint the host keys policy on. Pure.

Rules of this module (docs/protocol.md, "Tool classes (RFC-008)"):

- **The slot** (RFC-008 §3): ``_meta["mcpl/class"]``, an array of ``ToolClass`` strings from
  the closed vocabulary ``TOOL_CLASSES`` (RFC-008 §4). ``declared_classes`` reads it: the
  known strings, each once, in vocabulary order. An unknown string is ignored (a
  ``ClassFinding`` ``unknown_class``); a slot that is not an array makes the tool unclassed
  (``malformed_slot``); any other ``mcpl/`` key of ``_meta`` is ignored for every purpose
  (``undefined_key``). The slot is MCP-level: a plain MCP server may carry it too.
- **The effective classes** (RFC-008 §5.1) come from the first source that has any, whole,
  never merged: the operator's override (``ToolClassTables.overrides``), then the host's own
  knowledge of tools it implements (``ToolClassTables.host``), then the server's declaration.
  A table entry naming no known class is no entry. The tables are keyed by the tool's name as
  the server lists it (per server: this host has no model-facing name of its own).
  ``ClassSource`` says which: ``override``, ``host``, ``server``, or ``none`` (unclassed).
- **Unclassed is the most restrictive** (RFC-008 §5.2), and **several classes are the union of
  their restrictions** (§5.3): ``inputs_admitted`` (RFC-007 §4.3's argument rule, the one
  class question this host asks) answers no for an unclassed tool and for any tool one of
  whose classes is ``comms``, whatever the narrowing.
- Nothing here changes a tool's description or schema (RFC-008 §7): the classes ride beside
  the tool definition, never in it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from mcpl_host.jsonrpc.values import is_array, is_mapping

__all__ = [
    "CLASS_KEY",
    "MCPL_META_PREFIX",
    "TOOL_CLASSES",
    "ClassFinding",
    "ClassSource",
    "InputsNarrowing",
    "ToolClassTables",
    "declared_classes",
    "effective_classes",
    "inputs_admitted",
    "known_classes",
    "slot_findings",
    "tool_pattern_matches",
]

#: RFC-008 §4 / MCPL Appendix B.4: the closed vocabulary, in the RFC's order.
TOOL_CLASSES: tuple[str, ...] = (
    "comms",
    "memory",
    "notes",
    "files",
    "shell",
    "web",
    "computer",
    "media",
    "body",
    "control",
)
_ORDER = {name: index for index, name in enumerate(TOOL_CLASSES)}
#: RFC-008 §3: the ``_meta`` key of the slot, and the prefix reserved for keys MCPL defines.
CLASS_KEY = "mcpl/class"
MCPL_META_PREFIX = "mcpl/"
#: The ``mcpl/`` keys of a tool's ``_meta`` that MCPL defines (RFC-008 §3).
_DEFINED_KEYS = frozenset({CLASS_KEY})

ClassSource = Literal["override", "host", "server", "none"]
FindingKind = Literal["unknown_class", "malformed_slot", "undefined_key"]
#: The RFC-008 section each finding reads.
_SECTIONS: dict[str, str] = {
    "unknown_class": "RFC-008 §3, §5.2",
    "malformed_slot": "RFC-008 §3, §10 case 10",
    "undefined_key": "RFC-008 §3",
}


def known_classes(values: Iterable[object]) -> tuple[str, ...]:
    """The known class strings among ``values``, each once, in vocabulary order."""
    return tuple(sorted({v for v in values if isinstance(v, str) and v in _ORDER}, key=_ORDER.__getitem__))


def declared_classes(meta: object) -> tuple[str, ...]:
    """The server's declaration (RFC-008 §3): the known classes of ``_meta["mcpl/class"]``
    (``meta`` being the tool's ``_meta``, any JSON value); ``()`` when there is no slot, when
    it is not an array, or when it names no known class. Never raises."""
    if not is_mapping(meta):
        return ()
    slot = meta.get(CLASS_KEY)
    return known_classes(slot) if is_array(slot) else ()


@dataclass(frozen=True, slots=True)
class ClassFinding:
    """Something in a tool's ``_meta`` the host ignored (RFC-008 §3): ``kind``
    ``unknown_class`` (``value``: the string), ``malformed_slot`` (``value``: the JSON kind of
    the slot, e.g. ``"string"``) or ``undefined_key`` (``value``: the key). ``value`` is
    server text: show it through the escaper."""

    kind: FindingKind
    value: str

    @property
    def section(self) -> str:
        return _SECTIONS[self.kind]

    @property
    def sentence(self) -> str:
        if self.kind == "unknown_class":
            return f"{CLASS_KEY} names an unknown class, ignored"
        if self.kind == "malformed_slot":
            return f"{CLASS_KEY} is not an array (a {self.value}): the tool is unclassed"
        return "an mcpl/ _meta key MCPL does not define, ignored for every purpose"


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object" if is_mapping(value) else "value"


def slot_findings(meta: object, *, limit: int) -> tuple[ClassFinding, ...]:
    """What ``declared_classes`` ignored in ``meta`` (the tool's ``_meta``), at most ``limit``
    findings (a hostile ``_meta`` may hold thousands of keys): unknown class strings (each
    once; a non-string entry shows as its JSON kind), a slot that is not an array, ``mcpl/``
    keys MCPL does not define. Pure; never raises."""
    if not is_mapping(meta) or limit <= 0:
        return ()
    found: list[ClassFinding] = []
    seen: set[tuple[str, str]] = set()

    def add(kind: FindingKind, value: str) -> bool:
        if (kind, value) not in seen:
            seen.add((kind, value))
            found.append(ClassFinding(kind, value))
        return len(found) >= limit

    if CLASS_KEY in meta:
        slot = meta[CLASS_KEY]
        if not is_array(slot):
            add("malformed_slot", _json_kind(slot))
        else:
            for value in slot:
                if not (isinstance(value, str) and value in _ORDER):
                    if add("unknown_class", value if isinstance(value, str) else _json_kind(value)):
                        return tuple(found)
    for key in meta:
        if isinstance(key, str) and key.startswith(MCPL_META_PREFIX) and key not in _DEFINED_KEYS:
            if add("undefined_key", key):
                break
    return tuple(found)


@dataclass(frozen=True, slots=True)
class ToolClassTables:
    """The host's two sources before the server's (RFC-008 §5.1), for one server: ``overrides``
    (the operator's: config key ``toolClasses``, ``ServerConfig.tool_classes``) and ``host``
    (the embedding application's knowledge of tools it implements itself:
    ``ServerConfig.host_tool_classes``), each a tool name as listed -> classes."""

    overrides: Mapping[str, tuple[str, ...]] = field(default_factory=dict[str, tuple[str, ...]])
    host: Mapping[str, tuple[str, ...]] = field(default_factory=dict[str, tuple[str, ...]])


def effective_classes(
    name: str, declared: tuple[str, ...], tables: ToolClassTables | None = None
) -> tuple[tuple[str, ...], ClassSource]:
    """The effective classes of tool ``name`` and their source (RFC-008 §5.1): the first of
    override, host, server that yields a known class wins whole. ``((), "none")``: unclassed."""
    if tables is not None:
        overridden = known_classes(tables.overrides.get(name, ()))
        if overridden:
            return overridden, "override"
        built_in = known_classes(tables.host.get(name, ()))
        if built_in:
            return built_in, "host"
    return (declared, "server") if declared else ((), "none")


def tool_pattern_matches(pattern: str, name: str) -> bool:
    """RFC-007 §6.2's grammar: ``*`` matches any run of characters (none included), every
    other character itself; the whole name, case-sensitive."""
    parts = pattern.split("*")
    if len(parts) == 1:
        return pattern == name
    first, *middle, last = parts
    if not name.startswith(first) or not name.endswith(last) or len(name) < len(first) + len(last):
        return False
    at, end = len(first), len(name) - len(last)
    for part in middle:
        found = name.find(part, at, end)
        if found < 0:
            return False
        at = found + len(part)
    return True


@dataclass(frozen=True, slots=True)
class InputsNarrowing:
    """A ``toolLifecycle.inputs`` narrowing (RFC-007 §4.3): ``tools`` (RFC-007 §6.2 patterns
    over the tool name) and ``classes`` (the effective classes must intersect them); a key
    left None is not stated. A call is inside when it satisfies every key stated."""

    tools: tuple[str, ...] | None = None
    classes: tuple[str, ...] | None = None


def inputs_admitted(name: str, classes: tuple[str, ...], narrowing: InputsNarrowing | None) -> bool:
    """Whether a call of tool ``name`` with effective ``classes`` may carry its arguments
    under an ``inputs`` narrowing (RFC-007 §4.3, RFC-008 §5.2, §5.3). No: with no narrowing (an
    unnarrowed grant is narrowed to no tools), for an unclassed tool (the most restrictive
    answer), for any tool one of whose classes is ``comms`` (the union of restrictions), or
    outside a key the narrowing states. Pure."""
    if narrowing is None or not classes or "comms" in classes:
        return False
    if narrowing.tools is None and narrowing.classes is None:
        return False
    if narrowing.tools is not None and not any(tool_pattern_matches(p, name) for p in narrowing.tools):
        return False
    return narrowing.classes is None or bool(set(narrowing.classes) & set(classes))

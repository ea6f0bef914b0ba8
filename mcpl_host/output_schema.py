"""Checking a tool's ``structuredContent`` against its ``outputSchema`` (MCP 2025-11-25
"Tools", output schema: "Clients SHOULD validate structured results against this schema";
MCP 2026-07-28 "Overview", JSON Schema usage).

Rules of this module:

- The validator is the ``jsonschema`` library, never our own. A schema without
  ``$schema`` is JSON Schema 2020-12; one naming another dialect the library knows is
  checked in that dialect; an unknown dialect is refused.
- ``$ref`` is resolved only within the schema itself and the dialects' own metaschemas:
  nothing is ever fetched (MCP 2026-07-28 "Overview", ``$ref`` resolution: no network URI
  is dereferenced by default), and a ``$ref`` that cannot be resolved is an error, not a
  pass.
- A schema over ``Limits.max_output_schema_bytes`` (as compact JSON) is refused rather than
  validated: validation is CPU work a server controls (same section, composition-keyword
  resource use).
- **Where a check runs.** Only a check whose cost is known small runs in the event loop
  (``inline_check``): the schema's size with every local ``$ref`` expanded (``allOf`` of
  ``$ref`` to ``allOf``... doubles it at each level) times the number of JSON values of the
  instance is at most ``Limits.max_inline_schema_work``, and it holds no keyword whose cost
  is not bounded by those sizes (``pattern``, ``patternProperties``; ``uniqueItems``,
  quadratic over objects in the library), no cycle of references (its cost follows the
  instance), no ``$dynamicRef`` / ``$recursiveRef``, no ``$ref`` but a JSON pointer into the
  schema, and no nested ``$id``. Every other check runs in a worker process that is stopped
  after ``Limits.max_schema_check_seconds`` (``validate_bounded``): the event loop keeps
  running meanwhile, a cancellation (Ctrl-C, SIGTERM) stops the worker, and a check that did
  not end in time is an error naming that bound. The same rule serves the input schemas the
  command line and the shell check (``coerce``). The worker costs about 0.7 s to start (once
  per process) and 2.5 ms a check after that; a check in the loop at most about 20 ms
  (docs/protocol.md, K1).
- Every failure is an ``OutputSchemaError`` naming the tool and the failing path of the
  instance (a JSON path such as ``$.result``), with values escaped and cut.
- ``jsonschema`` (about 4 MiB of memory once imported) lives in ``schema_check``, loaded by
  the first check, not by ``import mcpl_host``: a host whose servers declare no output
  schema never loads it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import unquote

import anyio

from mcpl_host.json_size import json_size
from mcpl_host.jsonrpc.errors import RemoteProtocolError
from mcpl_host.jsonrpc.values import is_array, is_mapping
from mcpl_host.logging import Redactor, get_logger, log_value

__all__ = [
    "OutputSchemaError",
    "SchemaCheckTimeout",
    "check_structured_content",
    "inline_check",
    "validate_bounded",
]

T = TypeVar("T")
#: Keywords whose work is not bounded by the sizes of schema and instance (module rules).
UNBOUNDED_KEYWORDS = frozenset({"pattern", "patternProperties", "uniqueItems"})
#: References whose target depends on the path of the evaluation (JSON Schema 2020-12 §8.2.3.2;
#: 2019-09 ``$recursiveRef``): their cost is not read from the schema alone.
_DYNAMIC_REFS = frozenset({"$dynamicRef", "$recursiveRef"})
#: Keywords whose values are instances, not schemas: not counted.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
#: Keywords whose values map names (a property's, a definition's) to schemas: a name is no
#: keyword (a property called ``pattern`` is no regular expression).
_NAMED_SCHEMAS = frozenset({"properties", "$defs", "definitions", "dependentSchemas", "dependencies"})

_log = get_logger("mcpl_host.schema")

_MESSAGE_UNITS = 240


class OutputSchemaError(RemoteProtocolError):
    """A tool's result does not satisfy its ``outputSchema`` (or the schema cannot be used).

    ``tool``: the tool's name; ``path``: the JSON path of the failing value (``$`` for the
    whole content, None when the schema itself is at fault); ``reason``: the validator's
    sentence, escaped and cut."""

    def __init__(self, tool: str, path: str | None, reason: str) -> None:
        where = f" at {path}" if path is not None else ""
        super().__init__(
            f"the structuredContent of tool {tool!r} does not match its outputSchema{where}: {reason}"
        )
        self.tool = tool
        self.path = path
        self.reason = reason


class SchemaCheckTimeout(Exception):
    """A validation in a worker process did not end within its bound (``seconds``)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"checking it took longer than Limits.max_schema_check_seconds = {seconds:g} s")
        self.seconds = seconds


class _Unbounded(Exception):
    """The schema's cost is not read from its size (module rules)."""


def _pointer(root: object, ref: str) -> Any:
    """The value ``ref`` (``#`` or ``#/a/b``: RFC 6901 in a URI fragment, RFC 3986 §2.1
    percent-encoding) names in ``root``. Raises ``_Unbounded`` for another reference or a
    pointer that names nothing."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        raise _Unbounded
    node = root
    for raw in ref[2:].split("/"):
        step = unquote(raw).replace("~1", "/").replace("~0", "~")
        if is_mapping(node) and step in node:
            node = node[step]
        elif is_array(node) and step.isdigit() and int(step) < len(node):
            node = node[int(step)]
        else:
            raise _Unbounded
    return node


def _expanded_size(schema: object, cap: int) -> int:
    """The number of schema objects of ``schema`` with every ``$ref`` replaced by its
    target, counted up to ``cap + 1``. Raises ``_Unbounded`` (module rules) and
    ``RecursionError`` (nested deeper than Python recurses)."""
    sizes: dict[int, int] = {}
    expanding: set[int] = {id(schema)}

    def size(node: object, top: bool) -> int:
        if is_array(node):
            total = 0
            for item in node:
                total = min(cap + 1, total + size(item, False))
            return total
        if not is_mapping(node):
            return 0
        if not UNBOUNDED_KEYWORDS.isdisjoint(node) or not _DYNAMIC_REFS.isdisjoint(node):
            raise _Unbounded
        if not top and isinstance(node.get("$id"), str):
            raise _Unbounded  # a new base URI: its references resolve elsewhere
        total = 1
        for key, value in node.items():
            if key in _DATA_KEYWORDS:
                continue
            if key == "$ref" and isinstance(value, str):
                total += target_size(_pointer(schema, value))
            elif key in _NAMED_SCHEMAS and is_mapping(value):
                total += 1 + size(list(value.values()), False)
            else:
                total += size(value, False)
            if total > cap:
                return cap + 1
        return total

    def target_size(target: object) -> int:
        key = id(target)
        if key in expanding:
            raise _Unbounded  # a cycle of references
        if key not in sizes:
            expanding.add(key)
            try:
                sizes[key] = size(target, False)
            finally:
                expanding.discard(key)
        return sizes[key]

    return size(schema, True)


def _value_count(instance: object, cap: int) -> int:
    """The number of JSON values in ``instance`` (itself, its members, theirs...), counted
    up to ``cap + 1``: an iterative walk."""
    count, stack = 0, [instance]
    while stack and count <= cap:
        node = stack.pop()
        count += 1
        if is_mapping(node):
            stack.extend(node.values())
        elif is_array(node):
            stack.extend(node)
    return count


def inline_check(schema: object, instance: object, *, budget: int) -> bool:
    """Whether checking ``instance`` against ``schema`` (parsed JSON values) may run in the
    event loop (module rules): its expanded size times the instance's count of values is
    at most ``budget`` (``Limits.max_inline_schema_work``), and nothing in it makes its cost
    unbounded. Pure; linear in the size of ``schema`` and ``instance`` (each walk stops at
    ``budget``)."""
    try:
        expanded = _expanded_size(schema, budget)
    except (_Unbounded, RecursionError):
        return False
    if expanded > budget:
        return False
    return expanded * _value_count(instance, budget // max(expanded, 1)) <= budget


async def validate_bounded(function: Callable[..., T], *args: Any, isolate: bool, seconds: float) -> T:
    """``function(*args)`` here, or with ``isolate`` in a worker process
    (``anyio.to_process``) that is stopped after ``seconds``; ``function`` and ``args``
    must then be picklable. What ``function`` raises is raised.

    Raises:
        SchemaCheckTimeout: the worker did not finish within ``seconds``.
    """
    if not isolate:
        return function(*args)
    from anyio import to_process  # with the first bounded check (import time and memory)

    with anyio.CancelScope(shield=True):
        # A worker is started, or taken from the pool, out of reach of cancellation: anyio
        # neither stops nor reaps a worker cancelled while it starts (about 0.7 s, once).
        await to_process.run_sync(_ready)
    _log.debug("schema check in a worker process", bound_seconds=seconds)
    with anyio.move_on_after(seconds):
        return await to_process.run_sync(function, *args, cancellable=True)
    raise SchemaCheckTimeout(seconds)


def _ready() -> None:
    """Run in a worker process to have one started (``validate_bounded``)."""


async def check_structured_content(
    tool: str,
    schema: Mapping[str, object],
    structured_content: object,
    *,
    max_schema_bytes: int,
    max_seconds: float,
    max_inline_work: int,
    redactor: Redactor | None = None,
) -> None:
    """Check ``structured_content`` (None: the result carried none) against ``schema``: in
    the event loop when ``inline_check`` with ``max_inline_work`` allows it, else in a worker
    process stopped after ``max_seconds`` (module rules).

    Raises:
        OutputSchemaError: no ``structuredContent`` although the tool declares an output
            schema; the content fails the schema (the most relevant error, by its path); the
            schema is over ``max_schema_bytes``, invalid in its dialect, names an unknown
            dialect, has a ``$ref`` that cannot be resolved locally, or its check did not
            end within ``max_seconds``.
    """
    if structured_content is None:
        raise OutputSchemaError(
            tool, None, "the tool declares an outputSchema but returned no structuredContent"
        )
    size = json_size(schema, limit=max_schema_bytes)
    if size > max_schema_bytes:
        raise OutputSchemaError(
            tool,
            None,
            f"its outputSchema is over Limits.max_output_schema_bytes = {max_schema_bytes} bytes",
        )
    dialect = schema.get("$schema")
    if "$schema" in schema and not isinstance(dialect, str):
        raise OutputSchemaError(tool, None, "its outputSchema's $schema is not a string (a dialect's URI)")
    from mcpl_host import schema_check  # jsonschema, loaded by the first check (module rules)

    cls_name = schema_check.validator_name(schema)
    if cls_name is None:
        assert isinstance(dialect, str)
        raise OutputSchemaError(
            tool,
            None,
            f"its outputSchema names a dialect this host does not support: {log_value(dialect, redactor, max_units=80)}",
        )
    try:
        verdict = await validate_bounded(
            schema_check.judge,
            schema,
            cls_name,
            structured_content,
            isolate=not inline_check(schema, structured_content, budget=max_inline_work),
            seconds=max_seconds,
        )
    except SchemaCheckTimeout as exc:
        raise OutputSchemaError(tool, None, str(exc)) from None
    if verdict is None:
        return
    kind, path, message = verdict
    shown = log_value(message, redactor, max_units=_MESSAGE_UNITS)
    if kind == "fail":
        raise OutputSchemaError(tool, path, shown)
    if kind == "invalid":
        raise OutputSchemaError(tool, None, f"its outputSchema is invalid: {shown}")
    if kind == "unusable":
        raise OutputSchemaError(tool, None, f"its outputSchema cannot be used: {shown}")
    raise OutputSchemaError(tool, None, "its outputSchema nests too deeply to be checked")

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
  resource use). A schema whose cost is not bounded by the sizes of schema and instance (a
  regular expression: ``pattern``, ``patternProperties``; ``uniqueItems``, quadratic over
  objects in the library) is validated in a worker process that is stopped after
  ``Limits.max_schema_check_seconds`` (``validate_bounded``); a check that did not end in
  time is an error naming that bound. The same rule serves the input schemas the command
  line checks (``coerce``).
- Every failure is an ``OutputSchemaError`` naming the tool and the failing path of the
  instance (a JSON path such as ``$.result``), with values escaped and cut.
- ``jsonschema`` (about 4 MiB of memory once imported) lives in ``schema_check``, loaded by
  the first check, not by ``import mcpl_host``: a host whose servers declare no output
  schema never loads it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import anyio

from mcpl_host.json_size import json_size
from mcpl_host.jsonrpc.errors import RemoteProtocolError
from mcpl_host.jsonrpc.values import is_array, is_mapping
from mcpl_host.logging import Redactor, log_value

__all__ = [
    "OutputSchemaError",
    "SchemaCheckTimeout",
    "check_structured_content",
    "unbounded_cost",
    "validate_bounded",
]

T = TypeVar("T")
#: Keywords whose work is not bounded by the sizes of schema and instance (module rules).
UNBOUNDED_KEYWORDS = frozenset({"pattern", "patternProperties", "uniqueItems"})

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


def unbounded_cost(schema: Any) -> bool:
    """Whether ``schema`` (a parsed JSON value) holds a keyword of ``UNBOUNDED_KEYWORDS``
    anywhere: an iterative walk, linear in its size. Pure."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if is_mapping(node):
            if not UNBOUNDED_KEYWORDS.isdisjoint(node):
                return True
            stack.extend(node.values())
        elif is_array(node):
            stack.extend(node)
    return False


async def validate_bounded(function: Callable[..., T], *args: Any, isolate: bool, seconds: float) -> T:
    """``function(*args)`` here, or with ``isolate`` in a worker process
    (``anyio.to_process``) that is stopped after ``seconds``; ``function`` and ``args``
    must then be picklable. What ``function`` raises is raised.

    Raises:
        SchemaCheckTimeout: the worker did not finish within ``seconds``.
    """
    if not isolate:
        return function(*args)
    with anyio.move_on_after(seconds):
        from anyio import to_process  # with the first bounded check (import time and memory)

        return await to_process.run_sync(function, *args, cancellable=True)
    raise SchemaCheckTimeout(seconds)


async def check_structured_content(
    tool: str,
    schema: dict[str, Any],
    structured_content: Any,
    *,
    max_schema_bytes: int,
    max_seconds: float,
    redactor: Redactor | None = None,
) -> None:
    """Check ``structured_content`` (None: the result carried none) against ``schema``;
    ``max_seconds`` bounds a check of unbounded cost (module rules).

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
            isolate=unbounded_cost(schema),
            seconds=max_seconds,
        )
    except SchemaCheckTimeout as exc:
        raise OutputSchemaError(tool, None, f"{exc} (a pattern or uniqueItems the server chose)") from None
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

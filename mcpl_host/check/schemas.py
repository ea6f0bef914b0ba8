"""JSON Schema validation for ``mcpl-host check``, with the ``jsonschema`` library.

- ``mcp.schema.json`` (shipped in this package) is the part of the MCP schema the checks
  validate results against (MCP 2025-11-25 "Schema Reference"; see its ``description``).
  ``problems(name, value)`` validates a value against one of its ``$defs``.
- ``schema_problems(schema)`` checks that a tool's ``inputSchema`` / ``outputSchema`` is a
  valid JSON Schema against its own meta-schema (the dialect its ``$schema`` names, 2020-12
  by default: MCP 2025-11-25 "Basic", JSON Schema Usage). Meta-schemas ship with
  ``jsonschema``; nothing is fetched, and a ``$ref`` is never resolved over the network. Its
  cost grows with the server's schemas (about 10 s a megabyte), so the runner calls it in a
  worker process under ``Limits.check_validation_timeout_seconds`` too.
- ``output_problems(schema, instance)`` validates a structured tool result against the
  tool's ``outputSchema``. A server's schema may hold a regular expression that takes for
  ever on its own output, so the runner calls it in a worker process under
  ``Limits.check_validation_timeout_seconds``; here it only reports, never raises.
- Each problem is one sentence: the JSON path and the validator's message, cut to
  ``MAX_PROBLEM_CHARS`` (it may quote server values; the report redacts and escapes it).
  At most ``MAX_PROBLEMS`` are returned per value.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import TYPE_CHECKING, Any, cast

from mcpl_host.jsonrpc.values import JSONObject

if TYPE_CHECKING:
    import jsonschema.exceptions
    import jsonschema.protocols

# jsonschema (some 40 ms to import) loads with the first validation, in the process that
# validates: `mcpl-host --help` imports the check command's modules to list it.

__all__ = [
    "MAX_PROBLEMS",
    "MAX_PROBLEM_CHARS",
    "mcp_schema",
    "output_problems",
    "problems",
    "report_schema",
    "schema_problems",
]

MAX_PROBLEMS = 5
MAX_PROBLEM_CHARS = 300


@functools.cache
def _load(name: str) -> JSONObject:
    text = resources.files("mcpl_host.check").joinpath(name).read_text(encoding="utf-8")
    return cast("dict[str, Any]", json.loads(text))


def mcp_schema() -> dict[str, Any]:
    """The shipped MCP schema subset (``mcp.schema.json``)."""
    return _load("mcp.schema.json")


def report_schema() -> JSONObject:
    """The JSON Schema of ``mcpl-host check --json`` (``report.schema.json``)."""
    return _load("report.schema.json")


@functools.cache
def _validator(name: str) -> jsonschema.protocols.Validator:
    schema = mcp_schema()
    if name not in schema["$defs"]:
        raise KeyError(f"{name!r} is not defined in mcp.schema.json")
    root = {**schema, "$ref": f"#/$defs/{name}"}
    import jsonschema

    return cast("jsonschema.protocols.Validator", jsonschema.Draft202012Validator(root))


def _sentence(error: jsonschema.exceptions.ValidationError) -> str:
    where = error.json_path
    message = error.message
    if len(message) > MAX_PROBLEM_CHARS:
        message = message[:MAX_PROBLEM_CHARS] + "…"
    return f"{where}: {message}"


def _collect(errors: Any) -> list[str]:
    found: list[str] = []
    try:
        for error in errors:
            found.append(_sentence(error))
            if len(found) >= MAX_PROBLEMS:
                break
    except RecursionError:
        found.append("$: nested too deeply to validate")
    return found


def problems(name: str, value: Any) -> list[str]:
    """Problems of ``value`` against ``$defs/<name>`` of ``mcp.schema.json`` (empty: valid).
    Raises ``KeyError`` for an unknown ``name`` (a bug)."""
    errors = sorted(_validator(name).iter_errors(value), key=lambda e: list(e.absolute_path))
    return _collect(errors)


def schema_problems(schema: object) -> list[str]:
    """Problems of a tool's ``inputSchema`` / ``outputSchema`` against its meta-schema (its
    ``$schema`` dialect, 2020-12 when absent or unknown). Empty when it is a valid schema."""
    if not isinstance(schema, dict):
        return ["$: the schema is not a JSON object"]
    document = cast("dict[str, Any]", schema)
    import jsonschema.validators

    try:
        cls = jsonschema.validators.validator_for(document, default=jsonschema.Draft202012Validator)
        meta = cls(cls.META_SCHEMA)
        return _collect(meta.iter_errors(document))
    except RecursionError:
        return ["$: nested too deeply to validate"]
    except Exception as exc:  # an unusable dialect or meta-schema: say so, never crash
        return [f"$: cannot be checked ({type(exc).__name__})"]


def output_problems(schema: Any, instance: Any) -> list[str]:
    """Problems of ``instance`` (a ``structuredContent``) against ``schema`` (an
    ``outputSchema``): empty when it conforms. Never raises: an unusable schema or an
    unresolvable ``$ref`` is a problem too."""
    if not isinstance(schema, dict):
        return ["the outputSchema is not a JSON object"]
    document = cast("dict[str, Any]", schema)
    import jsonschema.validators

    try:
        cls = jsonschema.validators.validator_for(document, default=jsonschema.Draft202012Validator)
        validator = cls(document)
        return _collect(validator.iter_errors(instance))
    except RecursionError:
        return ["$: nested too deeply to validate"]
    except Exception as exc:  # e.g. referencing.exceptions.Unresolvable for a remote $ref
        return [f"the outputSchema cannot be applied ({type(exc).__name__})"]

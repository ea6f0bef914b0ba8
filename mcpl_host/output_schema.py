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
  resource use). Regular expressions (``pattern``) are still run by the library; that
  cost is not bounded here.
- Every failure is an ``OutputSchemaError`` naming the tool and the failing path of the
  instance (a JSON path such as ``$.result``), with values escaped and cut.
- ``jsonschema`` (about 4 MiB of memory once imported) is loaded by the first check, not
  by ``import mcpl_host``: a host whose servers declare no output schema never loads it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import orjson

from mcpl_host.jsonrpc.errors import RemoteProtocolError
from mcpl_host.logging import Redactor, log_value

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError

__all__ = ["OutputSchemaError", "check_structured_content"]

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


def _most_relevant(errors: Iterable[ValidationError]) -> ValidationError | None:
    """The error ``jsonschema`` ranks most relevant (its stubs leave the result untyped)."""
    import jsonschema.exceptions

    best: Any = jsonschema.exceptions.best_match  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    found: ValidationError | None = best(errors)
    return found


def check_structured_content(
    tool: str,
    schema: dict[str, Any],
    structured_content: Any,
    *,
    max_schema_bytes: int,
    redactor: Redactor | None = None,
) -> None:
    """Check ``structured_content`` (None: the result carried none) against ``schema``.

    Raises:
        OutputSchemaError: no ``structuredContent`` although the tool declares an output
            schema; the content fails the schema (the most relevant error, by its path); the
            schema is over ``max_schema_bytes``, invalid in its dialect, names an unknown
            dialect, or has a ``$ref`` that cannot be resolved locally.
    """
    if structured_content is None:
        raise OutputSchemaError(
            tool, None, "the tool declares an outputSchema but returned no structuredContent"
        )
    try:
        size = len(orjson.dumps(schema))
    except (orjson.JSONEncodeError, TypeError):
        raise OutputSchemaError(tool, None, "its outputSchema is not JSON") from None
    if size > max_schema_bytes:
        raise OutputSchemaError(
            tool,
            None,
            f"its outputSchema is {size} bytes, over Limits.max_output_schema_bytes = {max_schema_bytes}",
        )
    # Loaded here, on the first check (module rules).
    import jsonschema
    import jsonschema.exceptions
    import jsonschema.validators
    import referencing.exceptions

    # The dialects' own metaschemas, local: the only resources a ``$ref`` may name outside
    # the schema (no retrieval function: anything else is unresolvable, never fetched).
    from jsonschema_specifications import REGISTRY as METASCHEMAS  # type: ignore[import-untyped]

    dialect = schema.get("$schema")
    cls: Any = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    if isinstance(dialect, str) and cls is jsonschema.Draft202012Validator and "2020-12" not in dialect:
        # validator_for falls back to the default for a dialect it does not know.
        raise OutputSchemaError(
            tool,
            None,
            f"its outputSchema names a dialect this host does not support: {log_value(dialect, redactor, max_units=80)}",
        )
    try:
        cls.check_schema(schema)
        validator: Any = cls(schema, registry=METASCHEMAS)
        error = _most_relevant(validator.iter_errors(structured_content))
    except jsonschema.exceptions.SchemaError as exc:
        raise OutputSchemaError(
            tool,
            None,
            f"its outputSchema is invalid: {log_value(exc.message, redactor, max_units=_MESSAGE_UNITS)}",
        ) from None
    except (referencing.exceptions.Unresolvable, jsonschema.exceptions.UnknownType) as exc:
        raise OutputSchemaError(
            tool,
            None,
            f"its outputSchema cannot be used: {log_value(str(exc), redactor, max_units=_MESSAGE_UNITS)}",
        ) from None
    except RecursionError:
        raise OutputSchemaError(tool, None, "its outputSchema nests too deeply to be checked") from None
    if error is not None:
        raise OutputSchemaError(
            tool, error.json_path, log_value(error.message, redactor, max_units=_MESSAGE_UNITS)
        )

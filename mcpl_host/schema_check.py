"""The ``jsonschema`` side of schema checks (docs in ``output_schema``): the validator class
for a schema's dialect, one validation as plain data (``judge``, picklable, so that
``output_schema.validate_bounded`` may run it in a worker process), and the local metaschema
registry. Imported by the first check, never by ``import mcpl_host`` (``jsonschema`` costs
about 4 MiB).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators
import referencing.exceptions
from jsonschema.exceptions import ValidationError
from jsonschema_specifications import REGISTRY  # type: ignore[import-untyped]
from referencing import Registry

__all__ = ["METASCHEMAS", "judge", "most_relevant", "validator_name"]

#: The dialects' own metaschemas, local: the only resources a ``$ref`` may name outside the
#: schema (no retrieval function: anything else is unresolvable, never fetched).
METASCHEMAS: Registry[Any] = REGISTRY


def validator_name(schema: Mapping[str, object]) -> str | None:
    """The name of the ``jsonschema`` validator class for ``schema``'s ``$schema`` (a string
    or absent: 2020-12), or None for a dialect the library does not know (``validator_for``
    would fall back to its default)."""
    dialect = schema.get("$schema")
    cls: Any = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    if isinstance(dialect, str) and cls is jsonschema.Draft202012Validator and "2020-12" not in dialect:
        return None
    return str(cls.__name__)


def most_relevant(errors: Iterable[ValidationError]) -> ValidationError | None:
    """The error ``jsonschema`` ranks most relevant (its stubs leave the result untyped)."""
    best: Any = jsonschema.exceptions.best_match  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    found: ValidationError | None = best(errors)
    return found


def judge(
    schema: Mapping[str, object], cls_name: str, instance: object
) -> tuple[str, str | None, str] | None:
    """Validate ``instance`` against ``schema`` with the validator class named ``cls_name``:
    None when it conforms, else (kind, path, message): ``"fail"`` with the failing path, or
    ``"invalid"`` / ``"unusable"`` / ``"deep"`` for a schema at fault. Top-level and
    picklable (it runs in a worker process)."""
    cls: Any = getattr(jsonschema, cls_name)
    try:
        cls.check_schema(schema)
        validator: Any = cls(schema, registry=METASCHEMAS)
        error = most_relevant(validator.iter_errors(instance))
    except jsonschema.exceptions.SchemaError as exc:
        return ("invalid", None, exc.message)
    except (referencing.exceptions.Unresolvable, jsonschema.exceptions.UnknownType) as exc:
        return ("unusable", None, str(exc))
    except RecursionError:
        return ("deep", None, "")
    if error is None:
        return None
    return ("fail", error.json_path, error.message)

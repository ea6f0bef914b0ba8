"""Arguments from a command line for ``tools/call`` and ``prompts/get``: one JSON object, or
``key=value`` words coerced by the tool's ``inputSchema``, then checked against it. Pure.

Rules of this module:

- **Words.** The arguments are either one word that is a JSON object (it starts with ``{``)
  or ``key=value`` words, split at the first ``=``. A word without ``=``, an empty key, a key
  given twice and a JSON word that is not an object are errors (``ArgumentError``), each
  naming the argument.
- **Coercion** (``key=value``): a value is read by the JSON types its property schema allows:
  ``type``, else the types of its ``const`` / ``enum`` values, else those of its ``anyOf`` /
  ``oneOf`` branches (a local ``$ref`` is followed; ``allOf``: its first branch that names
  types), looked at ``MAX_SCHEMA_WALK`` levels deep and ``MAX_SCHEMA_VISITS`` schemas at
  most (past either, no type is known).

  - ``string`` only: the value as written (``text=123`` is the string ``"123"``).
  - Other types: the value read as JSON, when it is JSON of an allowed type (a number,
    ``true``/``false``, ``null``, an array, an object); otherwise, when ``string`` is
    allowed, the value as written; otherwise an error naming the argument and the types.
    A whole number written for ``integer`` (``2.0``) is sent as an integer.
  - No type known (no property schema, or one that names no type): JSON when the value
    reads as JSON, else the value as written.
- **Checking** (``schema_problems``): the whole object against the schema, by the dialect
  its ``$schema`` names, JSON Schema 2020-12 otherwise (MCP 2025-11-25 "Tools": the default
  dialect of ``inputSchema``). Each problem is one line naming the argument; at most
  ``MAX_PROBLEMS`` are listed. Only local references resolve (nothing is fetched). A schema
  the validator cannot use (invalid, nested too deep, an unresolvable ``$ref``) raises
  ``UnusableSchema``: the caller decides (the command line warns and sends unchecked).
- **Names** (``unknown_arguments``, before anything is sent; docs/protocol.md CL1): a name
  the tool's ``inputSchema`` does not declare is refused, naming the closest declared one
  (``suggest.closest``), when the schema says which names there are: ``properties`` is an
  object, ``additionalProperties`` is absent or ``false``, and no ``patternProperties``,
  ``$ref``, ``allOf``/``anyOf``/``oneOf``, ``if``, ``dependentSchemas`` or
  ``unevaluatedProperties`` at its top level could declare more. The caller may skip it
  (``--allow-unknown`` of ``call`` and ``shell``).
- **Prompts** (``prompt_arguments``): values are strings, as MCP 2025-11-25 "Prompts" has
  them; a required argument left out and a name the prompt does not declare are errors
  (the latter naming the closest declared one).
- JSON is read by the standard library, without ``NaN`` or ``Infinity``; a value nested
  too deep for it is an error naming the argument, never a crash.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from mcpl_host.jsonrpc.values import JSONObject, JSONValue
from mcpl_host.output_schema import SchemaCheckTimeout, inline_check, validate_bounded
from mcpl_host.suggest import closest

if TYPE_CHECKING:
    import jsonschema.exceptions

# jsonschema and referencing (some 40 ms to import) load with the first check or local $ref
# followed, not with the commands that import this module (`mcpl-host --help` lists them).

__all__ = [
    "JSON_TYPES",
    "MAX_PROBLEMS",
    "MAX_SCHEMA_VISITS",
    "MAX_SCHEMA_WALK",
    "ArgumentError",
    "UnusableSchema",
    "checked_schema_problems",
    "allowed_types",
    "argument_names",
    "coerce_value",
    "parse_arguments",
    "parse_json",
    "prompt_arguments",
    "schema_problems",
    "unknown_arguments",
]

#: The JSON Schema type names.
JSON_TYPES = ("string", "number", "integer", "boolean", "null", "array", "object")
#: Schema levels looked through for the types of one property (``anyOf`` in ``anyOf``...).
MAX_SCHEMA_WALK = 8
#: Schemas looked at for the types of one property, in all (``allowed_types``).
MAX_SCHEMA_VISITS = 256
#: Problems listed by ``schema_problems``; further ones are counted in one last line.
MAX_PROBLEMS = 10
#: Declared names listed in "(it has: ...)" when a name is unknown; characters of each.
MAX_NAMES_LISTED, MAX_NAME_CHARS = 30, 80
#: Top-level keywords of an ``inputSchema`` that can declare names ``properties`` does not.
OPEN_KEYWORDS = (
    "patternProperties",
    "$ref",
    "$dynamicRef",
    "allOf",
    "anyOf",
    "oneOf",
    "if",
    "dependentSchemas",
    "unevaluatedProperties",
)


class ArgumentError(ValueError):
    """Arguments that cannot be sent: ``argument`` names the one at fault (None: all of
    them), ``str()`` is one sentence."""

    def __init__(self, message: str, argument: str | None = None) -> None:
        super().__init__(message)
        self.argument = argument


class UnusableSchema(ValueError):
    """The schema cannot check anything (not a valid schema, too deep, an unresolvable
    ``$ref``); ``str()`` says why."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    """A JSON number with a fraction or exponent, refused when a double cannot hold it
    (``1e999`` reads as infinity, which the wire would carry as ``null``: RFC 8259 §6)."""
    number = float(text)
    if math.isinf(number):
        raise ValueError(f"the number {text[:40]} is too large for JSON to carry")
    return number


def parse_json(text: str) -> JSONValue:
    """``text`` as JSON (RFC 8259): no ``NaN``/``Infinity``, no number too large for a
    double. Raises ``ValueError`` (not JSON, or nested deeper than the parser recurses)."""
    try:
        value: JSONValue = json.loads(text, parse_constant=_reject_constant, parse_float=_finite)
    except RecursionError:
        raise ValueError("nested too deep") from None
    return value


def json_types(value: object) -> set[str]:
    """The JSON Schema types ``value`` (a parsed JSON value) is an instance of."""
    if value is None:
        return {"null"}
    if isinstance(value, bool):
        return {"boolean"}
    if isinstance(value, int):
        return {"integer", "number"}
    if isinstance(value, float):
        return {"number", "integer"} if value.is_integer() else {"number"}
    if isinstance(value, str):
        return {"string"}
    if isinstance(value, list):
        return {"array"}
    return {"object"}


def _resolve(schema: Mapping[str, object], root: Mapping[str, object]) -> Any:
    ref = schema.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#"):
        return schema
    import referencing
    import referencing.exceptions
    import referencing.jsonschema

    try:
        resource: referencing.Resource[Any] = referencing.jsonschema.DRAFT202012.create_resource(root)
        registry: referencing.Registry[Any] = referencing.Registry()
        contents: Any = registry.with_resource("", resource).resolver().lookup(ref).contents
        return contents
    except (referencing.exceptions.Unresolvable, referencing.exceptions.Unretrievable, TypeError):
        return schema


def _items(value: Any) -> list[Any]:
    """``value`` if it is a JSON array, else an empty list."""
    return cast("list[object]", value) if isinstance(value, list) else []


def allowed_types(schema: object, root: Mapping[str, Any] | None = None) -> set[str] | None:
    """The JSON types a property schema allows (module rules), or None when it names none.
    ``root``: the whole schema, for local ``$ref``. At most ``MAX_SCHEMA_VISITS`` schemas
    are looked at (an ``anyOf`` of references to ``anyOf``... of references multiplies
    them): past that, None. Never raises."""
    try:
        return _walk_types(schema, root, 0, [MAX_SCHEMA_VISITS])
    except _Exhausted:
        return None


class _Exhausted(Exception):
    """``MAX_SCHEMA_VISITS`` schemas were looked at."""


def _walk_types(
    schema: object, root: Mapping[str, Any] | None, depth: int, budget: list[int]
) -> set[str] | None:
    if not isinstance(schema, Mapping) or depth > MAX_SCHEMA_WALK:
        return None
    budget[0] -= 1
    if budget[0] < 0:
        raise _Exhausted
    schema = cast("Mapping[str, Any]", schema)
    if root is not None and "$ref" in schema:
        resolved = _resolve(schema, root)
        if resolved is not schema:
            return _walk_types(resolved, root, depth + 1, budget)
    declared = schema.get("type")
    if isinstance(declared, str) and declared in JSON_TYPES:
        return {declared}
    if isinstance(declared, list):
        names = {t for t in _items(declared) if isinstance(t, str) and t in JSON_TYPES}
        if names:
            return names
    if "const" in schema:
        return json_types(schema["const"])
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        found: set[str] = set()
        for item in _items(enum):
            found |= json_types(item)
        return found
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches:
            union: set[str] = set()
            for branch in _items(branches):
                types = _walk_types(branch, root, depth + 1, budget)
                if types is None:
                    return None  # a branch that allows anything: anything goes
                union |= types
            return union
    branches = schema.get("allOf")
    if isinstance(branches, list):
        for branch in _items(branches):
            types = _walk_types(branch, root, depth + 1, budget)
            if types is not None:
                return types
    return None


def coerce_value(name: str, text: str, types: set[str] | None) -> JSONValue:
    """The value of ``name=text`` for a property allowing ``types`` (None: unknown; module
    rules). Raises ``ArgumentError`` naming ``name``."""
    if types == {"string"}:
        return text
    try:
        value = parse_json(text)
    except ValueError:
        value, parsed = None, False
    else:
        parsed = True
    if types is None:
        return value if parsed else text
    if parsed and json_types(value) & types:
        if isinstance(value, float) and "integer" in types and "number" not in types:
            return int(value)
        return value
    if "string" in types:
        return text
    shown = text if len(text) <= 40 else text[:40] + "…"
    raise ArgumentError(f"argument {name!r} must be {_article(types)}, not {shown!r}", name)


#: How an error names what a type allows.
_TYPE_WORDS = {
    "string": "a string",
    "number": "a number",
    "integer": "an integer",
    "boolean": "true or false",
    "null": "null",
    "array": "a JSON array",
    "object": "a JSON object",
}


def _article(types: set[str]) -> str:
    shown = types - {"integer"} if "number" in types else types  # an integer is a number
    words = [_TYPE_WORDS[name] for name in sorted(shown, key=JSON_TYPES.index)]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def _properties(schema: Mapping[str, Any] | None) -> Mapping[str, Any]:
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    return cast("Mapping[str, Any]", props) if isinstance(props, Mapping) else {}


def argument_names(schema: Mapping[str, Any] | None) -> list[str]:
    """The property names of a tool's ``inputSchema``, in its order (for completion)."""
    return [str(name) for name in _properties(schema)]


def _shown_name(name: str) -> str:
    return repr(name if len(name) <= MAX_NAME_CHARS else name[:MAX_NAME_CHARS] + "…")


def _unknown_name(what: str, key: str, declared: Sequence[str]) -> str:
    """``the tool 'echo' has no argument 'txet'; did you mean 'text'? (it has: text)``."""
    hint = closest(key, declared)
    listed = ", ".join(_shown_name(name)[1:-1] for name in declared[:MAX_NAMES_LISTED])
    more = f", and {len(declared) - MAX_NAMES_LISTED} more" if len(declared) > MAX_NAMES_LISTED else ""
    suggestion = f"; did you mean {_shown_name(hint)}?" if hint is not None else ""
    return f"{what} has no argument {_shown_name(key)}{suggestion} (it has: {listed + more or 'none'})"


def unknown_arguments(names: Sequence[str], schema: Mapping[str, Any] | None, *, tool: str) -> None:
    """Refuse the argument ``names`` the tool ``tool``'s ``inputSchema`` does not declare,
    when it says which it declares (module rules, docs/protocol.md CL1); otherwise return.

    Raises:
        ArgumentError: naming the first unknown name and the closest declared one.
    """
    if not isinstance(schema, Mapping) or not isinstance(schema.get("properties"), Mapping):
        return
    if schema.get("additionalProperties", False) is not False or any(k in schema for k in OPEN_KEYWORDS):
        return
    declared = argument_names(schema)
    unknown = [name for name in names if name not in declared]
    if unknown:
        message = _unknown_name(f"the tool {_shown_name(tool)}", unknown[0], declared)
        if len(unknown) > 1:
            message += f", nor {', '.join(_shown_name(name) for name in unknown[1:MAX_NAMES_LISTED])}"
        raise ArgumentError(message, unknown[0])


def _words(words: Sequence[str]) -> dict[str, str] | JSONObject:
    """``key=value`` words as a dict of texts, or the one JSON object word as a dict."""
    if len(words) == 1 and words[0].lstrip().startswith("{"):
        try:
            value = parse_json(words[0])
        except ValueError as exc:
            raise ArgumentError(f"the arguments are not a JSON object: {exc}") from None
        if not isinstance(value, dict):
            raise ArgumentError("the arguments are not a JSON object")
        return value
    texts: dict[str, str] = {}
    for word in words:
        key, sep, text = word.partition("=")
        if not sep:
            raise ArgumentError(f"{word!r} is not KEY=VALUE (or give one JSON object)", word)
        if not key:
            raise ArgumentError(f"{word!r} has no argument name before '='")
        if key in texts:
            raise ArgumentError(f"argument {key!r} is given twice", key)
        texts[key] = text
    return texts


def parse_arguments(words: Sequence[str], schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``arguments`` object of ``tools/call`` from the command line ``words`` (module
    rules), coerced by ``schema`` (the tool's ``inputSchema``; None: no types known). Not
    yet checked against the schema (``schema_problems``). Raises ``ArgumentError``."""
    if len(words) == 1 and words[0].lstrip().startswith("{"):
        return _words(words)
    texts = cast("dict[str, str]", _words(words))
    props = _properties(schema)
    root = schema if isinstance(schema, Mapping) else None
    return {key: coerce_value(key, text, allowed_types(props.get(key), root)) for key, text in texts.items()}


def _problem(error: jsonschema.exceptions.ValidationError) -> str:
    path = list(error.absolute_path)
    if path:
        where = f"argument {path[0]!r}" + "".join(f"[{step!r}]" for step in path[1:])
        return f"{where}: {error.message}"
    required: Any = error.validator_value
    instance: Any = error.instance
    if error.validator == "required" and isinstance(required, list) and isinstance(instance, dict):
        missing = [name for name in _items(required) if name not in instance]
        if missing:
            return f"argument {missing[0]!r} is required"
    return f"arguments: {error.message}"


def schema_problems(arguments: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """Each way ``arguments`` breaks ``schema`` (module rules), one line each, sorted by
    argument; empty when they conform. Raises ``UnusableSchema``."""
    import jsonschema
    import jsonschema.exceptions
    import jsonschema.validators

    from mcpl_host.schema_check import METASCHEMAS

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an unknown $schema: the 2020-12 default
            cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(dict(schema))
        validator = cls(dict(schema), registry=METASCHEMAS)  # nothing fetched (output_schema rules)
        errors = sorted(validator.iter_errors(dict(arguments)), key=lambda e: [str(p) for p in e.path])
    except jsonschema.exceptions.SchemaError as exc:
        raise UnusableSchema(f"it is not a valid JSON Schema ({exc.message})") from None
    except RecursionError:
        raise UnusableSchema("it is nested too deep to check") from None
    except Exception as exc:  # an unresolvable $ref, or another failure inside the validator
        raise UnusableSchema(f"the validator could not use it ({type(exc).__name__})") from None
    problems = [_problem(error) for error in errors[:MAX_PROBLEMS]]
    if len(errors) > MAX_PROBLEMS:
        problems.append(f"... and {len(errors) - MAX_PROBLEMS} more")
    return problems


async def checked_schema_problems(
    arguments: Mapping[str, object], schema: Mapping[str, object], *, seconds: float, inline_work: int
) -> list[str]:
    """``schema_problems``, run in a worker process stopped after ``seconds`` unless
    ``output_schema.inline_check`` with ``inline_work`` lets it run here (its cost is known
    small: no ``pattern``, ``uniqueItems``, reference cycle or doubling ``allOf``). Raises
    ``UnusableSchema``, also when the check did not end in time (naming
    ``Limits.max_schema_check_seconds``)."""
    isolate = not inline_check(schema, dict(arguments), budget=inline_work)
    try:
        return await validate_bounded(
            schema_problems, dict(arguments), dict(schema), isolate=isolate, seconds=seconds
        )
    except SchemaCheckTimeout as exc:
        raise UnusableSchema(str(exc)) from None


def prompt_arguments(
    words: Sequence[str], declared: Sequence[Any], *, prompt: str | None = None
) -> dict[str, str]:
    """The ``arguments`` of ``prompts/get`` from the command line ``words``: strings only;
    ``declared`` is the prompt's ``arguments`` list (``{name, required?}`` objects, as
    sent); ``prompt`` its name, for the message. Raises ``ArgumentError`` for a value that
    is not a string, a name the prompt does not declare (naming the closest declared one),
    or a required argument left out."""
    given = _words(words)
    for key, value in given.items():
        if not isinstance(value, str):
            raise ArgumentError(f"argument {key!r} must be a string (prompt arguments are strings)", key)
    entries = [cast("dict[str, Any]", d) for d in declared if isinstance(d, dict)]
    names = [d.get("name") for d in entries if isinstance(d.get("name"), str)]
    for key in given:
        if key not in names:
            what = "the prompt" if prompt is None else f"the prompt {_shown_name(prompt)}"
            raise ArgumentError(_unknown_name(what, key, cast("list[str]", names)), key)
    for entry in entries:
        if entry.get("required") is True and entry.get("name") not in given:
            raise ArgumentError(f"argument {entry.get('name')!r} is required", str(entry.get("name")))
    return cast("dict[str, str]", given)

"""The inspector's decisions, pure (no I/O, no clock): who may see the page, the grant as a
table of capabilities with the source of each verdict, and the tool call form built from a
tool's ``inputSchema``.

Rules of this module:

- **Token** (``token_allows``): a request is served only when it carries the inspector's
  token, in the query (``?token=``) or in the cookie the page sets from it
  (``TOKEN_COOKIE``); compared with ``secrets.compare_digest`` (constant time). Anything
  else is 403 (``mcpl_host.inspector.server``).
- **Grant rows** (``grant_rows``): one row per capability path of the vocabulary (MCPL
  §6.2, Appendix B.2) that the server advertised, the policy names, or the grant in force
  holds: ``advertised``, ``inForce`` (the grant the connection holds now: MCPL §5.4),
  ``policy`` (``GrantPolicy.allows``: what the host would grant) and ``source``, the
  sentence naming what decided it: the deny pattern that matched, the grant pattern that
  matched (named, for the paths granted only when named: RFC-010 §4.1, RFC-007 §4.1),
  ``grant all advertised``, or that no pattern grants it. The verdict is always
  ``GrantPolicy.allows``'s; the source only explains it (``grants.matches`` and
  ``grants.names_path``, the one matcher).
- **Form** (``form_fields``): one field per property of the schema's ``properties`` object,
  in order, with the JSON types the property allows (``coerce.allowed_types``): ``enum``
  (its values, when all are strings, numbers or booleans), ``boolean``, ``integer``,
  ``number``, ``string``, else ``json`` (an object, an array, several types, or none
  known: typed as JSON). ``required`` from the schema's ``required`` list. At most
  ``MAX_FORM_FIELDS`` fields (a hostile schema may declare thousands); the form says how
  many were left out. ``form_arguments`` turns what the page sends (``{name: text}``, an
  empty text left out) into ``tools/call`` arguments by ``coerce.coerce_value``, the
  command line's coercion (one rule, one place); the caller checks them against the schema
  (``coerce.schema_problems``).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from mcpl_host.coerce import allowed_types, coerce_value
from mcpl_host.mcpl.grants import NAMED_ONLY_PREFIXES, VOCABULARY, GrantPolicy, matches, names_path

__all__ = [
    "MAX_FORM_FIELDS",
    "TOKEN_COOKIE",
    "FormField",
    "form_arguments",
    "form_fields",
    "grant_rows",
    "token_allows",
]

#: The cookie the page's first load sets from the token in its URL (HttpOnly, SameSite=Strict).
TOKEN_COOKIE = "mcpl_inspector"
#: Fields of one tool's form; the rest of a larger schema is left out (and said to be).
MAX_FORM_FIELDS = 64
#: Values of an ``enum`` shown as choices; a longer enum is a text field.
MAX_ENUM_CHOICES = 256


def token_allows(expected: str, query_token: str | None, cookie_token: str | None) -> bool:
    """Whether a request carrying ``query_token`` (``?token=``) or ``cookie_token`` (the
    ``TOKEN_COOKIE`` cookie) may be served (module rules). Constant time in the token."""
    wanted = expected.encode()
    return any(
        given is not None and hmac.compare_digest(given.encode(), wanted)
        for given in (query_token, cookie_token)
    )


def _source(policy: GrantPolicy, path: str, allowed: bool) -> str:
    """The sentence naming what decided ``policy.allows(path)`` (module rules)."""
    named_only = path.startswith(NAMED_ONLY_PREFIXES)
    if not allowed:
        deny = next((p for p in policy.deny if matches(p, path)), None)
        if deny is not None:
            return f"denied by the pattern {deny}"
        if named_only:
            return "granted only by a grant pattern that names it; none does"
        return "no grant pattern matches"
    if named_only:
        named = next((p for p in policy.grant if names_path(p, path)), None)
        return f"granted by the pattern {named}"
    pattern = next((p for p in policy.grant if matches(p, path)), None)
    if pattern is not None:
        return f"granted by the pattern {pattern}"
    return "grant all advertised"


def grant_rows(
    policy: GrantPolicy, advertised: frozenset[str], in_force: frozenset[str] | None
) -> list[dict[str, Any]]:
    """The grant table (module rules): ``[{"path", "advertised", "inForce", "policy",
    "source"}]``, sorted by path. ``in_force`` None: no connection holds a grant now (every
    ``inForce`` is False)."""
    held = in_force or frozenset[str]()
    named = {
        path
        for path in VOCABULARY
        if any(matches(p, path) for p in (*policy.grant, *policy.deny))
        or (policy.grant_all_advertised and path in advertised)
    }
    rows: list[dict[str, Any]] = []
    for path in sorted((advertised | held | named) & VOCABULARY):
        allowed = policy.allows(path)
        rows.append(
            {
                "path": path,
                "advertised": path in advertised,
                "inForce": path in held,
                "policy": allowed,
                "source": _source(policy, path, allowed),
            }
        )
    return rows


@dataclass(frozen=True, slots=True)
class FormField:
    """One field of a tool call form: ``name``, ``kind`` (``"string"``, ``"number"``,
    ``"integer"``, ``"boolean"``, ``"enum"`` or ``"json"``), ``required``, ``description``
    (as the server wrote it, or None), ``choices`` (the enum's values)."""

    name: str
    kind: str
    required: bool = False
    description: str | None = None
    choices: tuple[object, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "required": self.required,
            "description": self.description,
            "choices": list(self.choices),
        }


def _kind(schema: object, root: Mapping[str, Any]) -> tuple[str, tuple[object, ...]]:
    whole = schema  # before isinstance narrows it
    if isinstance(schema, Mapping):
        enum = cast("Mapping[str, Any]", schema).get("enum")
        if (
            isinstance(enum, list)
            and 0 < len(cast("list[object]", enum)) <= MAX_ENUM_CHOICES
            and all(isinstance(v, (str, int, float, bool)) for v in cast("list[object]", enum))
        ):
            return "enum", tuple(cast("list[object]", enum))
    types = allowed_types(whole, root)
    if types is not None and len(types) == 1:
        (only,) = types
        if only in ("string", "number", "integer", "boolean"):
            return only, ()
    if types == {"number", "integer"}:
        return "number", ()
    return "json", ()


def form_fields(schema: object) -> tuple[list[FormField], int]:
    """The form of a tool whose ``inputSchema`` is ``schema`` (module rules): its fields and
    how many properties were left out past ``MAX_FORM_FIELDS``. Never raises."""
    if not isinstance(schema, Mapping):
        return [], 0
    root = cast("Mapping[str, Any]", schema)
    properties = root.get("properties")
    if not isinstance(properties, Mapping):
        return [], 0
    required_list = root.get("required")
    required = (
        {r for r in cast("list[object]", required_list) if isinstance(r, str)}
        if isinstance(required_list, list)
        else set[str]()
    )
    fields: list[FormField] = []
    names = [name for name in cast("Mapping[object, Any]", properties) if isinstance(name, str)]
    for name in names[:MAX_FORM_FIELDS]:
        prop = cast("Mapping[str, Any]", properties)[name]
        kind, choices = _kind(prop, root)
        description: object = (
            cast("Mapping[str, Any]", prop).get("description") if isinstance(prop, Mapping) else None
        )
        fields.append(
            FormField(
                name,
                kind,
                name in required,
                description if isinstance(description, str) else None,
                choices,
            )
        )
    return fields, max(0, len(names) - MAX_FORM_FIELDS)


def form_arguments(values: Mapping[str, object], schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``tools/call`` arguments from a submitted form: ``values`` maps a field name to the
    text typed (a string; an empty one is left out). Each coerced as the command line's
    ``key=value`` words are (``coerce.coerce_value`` by ``coerce.allowed_types``). Raises ``coerce.ArgumentError``
    (naming the argument) or ``ValueError`` (a value that is not a string)."""
    root = schema if isinstance(schema, Mapping) else None
    properties = root.get("properties") if root is not None else None
    props: Mapping[str, Any] = (
        cast("Mapping[str, Any]", properties) if isinstance(properties, Mapping) else {}
    )
    arguments: dict[str, Any] = {}
    for name, text in values.items():
        if not isinstance(text, str):
            raise ValueError(f"the value of {name!r} is not text")
        if text != "":
            arguments[name] = coerce_value(name, text, allowed_types(props.get(name), root))
    return arguments

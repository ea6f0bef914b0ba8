"""Tool parameters mirrored into ``Mcp-Param-*`` HTTP headers, as pure rules (MCP 2026-07-28
"Streamable HTTP", custom headers from tool parameters: schema extension, value encoding,
client behavior). The project's reading: docs/protocol.md S10.

Rules of this module:

- ``declared_headers(input_schema)`` reads a tool's ``inputSchema`` as listed (untrusted):
  every ``x-mcp-header`` annotation, each on a property reached from the root by
  ``properties`` keys alone, naming an HTTP token (RFC 9110 §5.6.2 ``1*tchar``: no space,
  colon, CR, LF or other control character, nothing outside ASCII), on a property whose
  ``type`` is ``"string"``, ``"integer"`` or ``"boolean"``, case-insensitively unique, and
  at most ``max_headers`` of them (``Limits.max_param_headers``). Anything else is
  ``Rejected`` with one bounded sentence: the revision says such a tool is left out of
  ``tools/list``. The walk enters only JSON Schema applicators (never ``$ref``, ``const``,
  ``default``, ``enum`` or ``examples``: data is not schema) and is iterative.
- ``param_headers(declared, arguments)`` are the headers of one ``tools/call``: for each
  declared parameter, the value at its exact property path in ``arguments``; absent or
  ``null``: no header. A string as is, a boolean ``true``/``false``, an integer (a JSON
  number with no fraction) in decimal; any other value (an object, an array, a number with
  a fraction) has no header form and gets none (the server judges the argument). Values go
  through ``stateless.header_value`` (the Base64 sentinel for what is not plain visible
  ASCII, as for ``Mcp-Name``), so no header carries CR or LF. Over
  ``max_bytes`` (``Limits.max_param_header_bytes``) of names and values: ``LimitExceeded``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcpl_host.jsonrpc.values import is_array, is_object
from mcpl_host.limits import LimitExceeded
from mcpl_host.logging import log_value
from mcpl_host.stateless import header_value

__all__ = [
    "PARAM_HEADER_PREFIX",
    "X_MCP_HEADER",
    "ParamHeader",
    "Rejected",
    "declared_headers",
    "param_headers",
]

#: The schema extension and the prefix of the header it names.
X_MCP_HEADER = "x-mcp-header"
PARAM_HEADER_PREFIX = "Mcp-Param-"

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_TYPES = frozenset({"string", "integer", "boolean"})
#: JSON Schema 2020-12 applicators (and draft-07's ``definitions``) other than
#: ``properties``: a subschema under one of them is not statically reachable.
_ONE = frozenset(
    {
        "items",
        "contains",
        "additionalProperties",
        "propertyNames",
        "unevaluatedItems",
        "unevaluatedProperties",
        "not",
        "if",
        "then",
        "else",
        "contentSchema",
        "additionalItems",
    }
)
_MANY = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_BY_NAME = frozenset({"patternProperties", "dependentSchemas", "$defs", "definitions"})
#: Integers beyond JavaScript's safe range (the revision bounds header integers by it).
_SAFE_INTEGER = 2**53 - 1


@dataclass(frozen=True, slots=True)
class ParamHeader:
    """One declared header: ``path`` (the ``properties`` keys from the root to the
    parameter) and ``name`` (``Mcp-Param-<x-mcp-header>``, the token as the server spelled
    it)."""

    path: tuple[str, ...]
    name: str


@dataclass(frozen=True, slots=True)
class Rejected:
    """A tool definition whose ``x-mcp-header`` annotations break the revision's rules:
    ``reason`` is one sentence, server values shown bounded and escaped."""

    reason: str


def _shown(value: object) -> str:
    return log_value(value, max_units=40)


def _where(path: tuple[str, ...]) -> str:
    return "the property " + _shown(".".join(path))


def _children(
    schema: Mapping[str, object], path: tuple[str, ...] | None
) -> list[tuple[tuple[str, ...] | None, Any]]:
    out: list[tuple[tuple[str, ...] | None, Any]] = []
    for keyword, value in schema.items():
        if keyword == "properties" and is_object(value):
            for name, sub in value.items():
                out.append(((*path, name) if path is not None else None, sub))
        elif keyword in _ONE:
            out.append((None, value))
        elif keyword in _MANY and is_array(value):
            out.extend((None, sub) for sub in value)
        elif keyword in _BY_NAME and is_object(value):
            out.extend((None, sub) for sub in value.values())
    return out


def declared_headers(input_schema: object, *, max_headers: int) -> tuple[ParamHeader, ...] | Rejected:
    """The ``Mcp-Param-*`` headers a tool's ``inputSchema`` declares, in schema order, or
    ``Rejected`` (module rules). A schema that is not an object declares none."""
    declared: list[ParamHeader] = []
    seen: dict[str, tuple[str, ...]] = {}
    stack: list[tuple[tuple[str, ...] | None, Any]] = [((), input_schema)]
    while stack:
        path, node = stack.pop()
        if not is_object(node):
            continue
        if X_MCP_HEADER in node:
            token = node[X_MCP_HEADER]
            if not path:
                return Rejected(
                    f"an {X_MCP_HEADER} annotation is on a schema that is not a property reached"
                    " through properties alone"
                )
            if not isinstance(token, str):
                return Rejected(f"the {X_MCP_HEADER} of {_where(path)} is not a string")
            if not _TOKEN.match(token):
                return Rejected(
                    f"the {X_MCP_HEADER} {_shown(token)} of {_where(path)} is not an HTTP header token"
                )
            kind = node.get("type")
            if not isinstance(kind, str) or kind not in _TYPES:
                return Rejected(
                    f"{_where(path)} has an {X_MCP_HEADER} but its type is not string, integer or boolean"
                )
            folded = token.lower()
            if folded in seen:
                return Rejected(
                    f"the {X_MCP_HEADER} {_shown(token)} of {_where(path)} repeats that of {_where(seen[folded])}"
                )
            if len(declared) == max_headers:
                return Rejected(
                    f"the tool marks more than {max_headers} parameters {X_MCP_HEADER}"
                    " (Limits.max_param_headers)"
                )
            seen[folded] = path
            declared.append(ParamHeader(path, PARAM_HEADER_PREFIX + token))
        # Reversed: the stack then pops the first child first (schema order).
        stack.extend(reversed(_children(node, path)))
    return tuple(declared)


def _rendered(value: object) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer() and abs(value) <= _SAFE_INTEGER:
        return str(int(value))
    if isinstance(value, int):
        if abs(value) > _SAFE_INTEGER:
            return None
        return str(value)
    return None


def _value_at(arguments: Mapping[str, object], path: tuple[str, ...]) -> Any:
    node: Any = arguments
    for key in path:
        if not is_object(node):
            return None
        node = node.get(key)
    return node


def param_headers(
    declared: tuple[ParamHeader, ...], arguments: Mapping[str, object], *, tool: str, max_bytes: int
) -> dict[str, str]:
    """The ``Mcp-Param-*`` headers of a ``tools/call`` of ``tool`` with ``arguments``
    (module rules), name -> value, in declaration order.

    Raises:
        LimitExceeded: the headers' names and values come to more than ``max_bytes``
            (``Limits.max_param_header_bytes``).
    """
    headers: dict[str, str] = {}
    size = 0
    for header in declared:
        rendered = _rendered(_value_at(arguments, header.path))
        if rendered is None:
            continue
        # An encoded value is never shorter than the text: measure before encoding.
        value = header_value(rendered) if size + len(header.name) + len(rendered) <= max_bytes else None
        if value is None or size + len(header.name) + len(value) > max_bytes:
            raise LimitExceeded(
                "max_param_header_bytes",
                max_bytes,
                f"the Mcp-Param headers of a tools/call of {_shown(tool)} are too long",
            )
        size += len(header.name) + len(value)
        headers[header.name] = value
    return headers

"""Narrowing JSON values from a server: what a parsed value is, as typed code sees it.

Every value a server sends is ``Any`` until checked. These predicates are the one way the
package checks a value's JSON kind, and they narrow the type for the checkers (``TypeIs``),
so a checked object is a ``dict[str, Any]`` rather than a dict of unknowns (JSON object
members are strings, RFC 8259 §4).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

from typing_extensions import TypeIs

__all__ = [
    "JSONObject",
    "JSONValue",
    "finite_number",
    "is_array",
    "is_list_or_tuple",
    "is_mapping",
    "is_object",
]

#: A JSON value as this library builds it (RFC 8259 §3): a string, a number, ``true`` /
#: ``false``, ``null``, an array (any sequence: a ``list[str]`` is one) or an object (any
#: mapping with string keys, RFC 8259 §4). What a server sent is ``Any`` until checked.
JSONValue: TypeAlias = str | int | float | bool | None | Sequence["JSONValue"] | Mapping[str, "JSONValue"]
#: A JSON object this library builds and may still add members to (RFC 8259 §4).
JSONObject: TypeAlias = dict[str, JSONValue]


def is_object(value: object) -> TypeIs[dict[str, Any]]:
    """A JSON object as parsed (a ``dict``)."""
    return isinstance(value, dict)


def is_mapping(value: object) -> TypeIs[Mapping[Any, Any]]:
    """A JSON object, or any mapping given by the application. (A parsed object is an exact
    ``dict``: that case is told first, without the ABC's ``isinstance`` look-up.)"""
    return type(value) is dict or isinstance(value, Mapping)


def is_array(value: object) -> TypeIs[list[Any]]:
    """A JSON array as parsed (a ``list``)."""
    return isinstance(value, list)


def is_list_or_tuple(value: object) -> TypeIs[list[Any] | tuple[Any, ...]]:
    """A JSON array as parsed, or a tuple given by the application (never a string)."""
    return isinstance(value, (list, tuple))


def finite_number(value: object) -> float | None:
    """A JSON number as a finite float, or None: not a number (a ``bool`` is none), or past
    a double (``1e400`` is parsed as an infinity; an integer of 400 digits is exact but
    converts to no float). The one reading of a server's number as a quantity."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None

"""How large a JSON value is, in bytes, and how deep: the measure of every ``*_bytes`` bound
on parsed values (``Limits.max_state_bytes``, ``max_list_bytes``, ``max_manifest_bytes``...).

The size of a value is the length of its compact JSON text as orjson writes it (UTF-8, no
spaces). orjson measures at C speed; for a value it cannot write (nesting deeper than its
limit, an integer beyond 64 bits, both only reachable through the iterative parser of
docs/protocol.md D6 and ``Limits.max_json_depth``), an iterative walk counts the same bytes
and stops as soon as the count passes ``limit``. Pure; never raises on a JSON value.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from mcpl_host.jsonrpc.values import is_array, is_mapping

__all__ = ["json_depth_beyond", "json_size"]


def json_size(value: object, *, limit: int | None = None) -> int:
    """Bytes of ``value`` as compact JSON. With ``limit``, the result is exact up to
    ``limit``; above it, any number above ``limit`` may be returned (the walk stops early).
    A value that is no JSON (a set, bytes) counts as its ``repr``."""
    try:
        return len(orjson.dumps(value))
    except (TypeError, orjson.JSONEncodeError):
        return _walk_size(value, limit)


def _scalar_size(value: object) -> int:
    try:
        return len(orjson.dumps(value))
    except (TypeError, orjson.JSONEncodeError):  # an integer beyond 64 bits, or no JSON
        return len(str(value)) if isinstance(value, int) else len(repr(value))


def _walk_size(value: object, limit: int | None) -> int:
    total = 0
    stack: list[Any] = [value]
    while stack:
        item: Any = stack.pop()
        if is_mapping(item):
            total += 2 + max(len(item) - 1, 0)  # braces and commas
            for key, child in item.items():
                total += _scalar_size(key) + 1  # "key":
                stack.append(child)
        elif is_array(item):
            total += 2 + max(len(item) - 1, 0)
            stack.extend(item)
        else:
            total += _scalar_size(item)
        if limit is not None and total > limit:
            return total
    return total


def json_depth_beyond(value: object, max_depth: int) -> bool:
    """Whether ``value`` nests arrays and objects more than ``max_depth`` levels deep (a
    scalar is depth 0, ``[]`` depth 1). Iterative; stops at the first level too deep."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children: Iterable[Any]
        if is_mapping(item):
            children = item.values()
        elif is_array(item):
            children = item
        else:
            continue
        if depth + 1 > max_depth:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False

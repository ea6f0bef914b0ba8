"""The first difference between two JSON values, named by its place. Pure.

``first_difference(recorded, live)`` walks both values in the same order (object members in
the recorded value's order, then members only the live value has; array items by index)
and returns the first place where they differ as a ``Difference``: ``path`` is a JSON
Pointer (RFC 6901: ``/params/arguments/message``; ``""`` is the whole value), ``recorded``
and ``live`` the values there (``MISSING`` where one side has no such member or item).
Numbers compare by value across int and float (``1 == 1.0``), never a bool with a number
(JSON's ``true`` is not ``1``). Used by the replay (docs/protocol.md RP6) and by
``check --against`` (RP8).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from mcpl_host.jsonrpc.values import is_array, is_object

__all__ = ["MISSING", "Difference", "first_difference", "pointer", "shown"]


class _Missing:
    """The value on the side that has no such member or item."""

    def __repr__(self) -> str:
        return "(absent)"


MISSING: Any = _Missing()
#: Characters of a value shown in a sentence (``shown``).
SHOWN_CHARS = 200


@dataclass(frozen=True, slots=True)
class Difference:
    """Where two JSON values first differ: ``path`` (a JSON Pointer), the ``recorded`` and
    ``live`` values there (``MISSING`` when absent on that side)."""

    path: str
    recorded: Any
    live: Any

    def sentence(self) -> str:
        """``at /path: recorded X, live Y`` with both values cut to ``SHOWN_CHARS``."""
        return (
            f"at {self.path or '(the whole value)'}: recorded {shown(self.recorded)}, live {shown(self.live)}"
        )


def pointer(parts: tuple[str | int, ...]) -> str:
    """The JSON Pointer of ``parts`` (RFC 6901 §3: ``~`` as ``~0``, ``/`` as ``~1``)."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in parts)


def shown(value: Any) -> str:
    """``value`` as compact JSON cut to ``SHOWN_CHARS`` characters (``(absent)`` for MISSING).
    The caller escapes it for a terminal or log line as it does any server value."""
    if value is MISSING:
        return "(absent)"
    try:
        text = orjson.dumps(value).decode()
    except TypeError:
        text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "..."


def _same_scalar(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def first_difference(recorded: Any, live: Any) -> Difference | None:
    """The first place where ``recorded`` and ``live`` differ, None when they are equal.
    Iterative (a deep value cannot exhaust the stack)."""
    stack: list[tuple[tuple[str | int, ...], Any, Any]] = [((), recorded, live)]
    while stack:
        parts, a, b = stack.pop()
        if is_object(a) and is_object(b):
            keys = [*a, *(key for key in b if key not in a)]
            stack.extend(((*parts, key), a.get(key, MISSING), b.get(key, MISSING)) for key in reversed(keys))
        elif is_array(a) and is_array(b):
            stack.extend(
                ((*parts, i), a[i] if i < len(a) else MISSING, b[i] if i < len(b) else MISSING)
                for i in reversed(range(max(len(a), len(b))))
            )
        elif not _same_scalar(a, b):
            return Difference(pointer(parts), a, b)
    return None

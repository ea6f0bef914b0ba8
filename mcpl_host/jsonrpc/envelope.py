"""The envelope rule: the one place that decides what a parsed JSON value is.

``classify(value)`` is a pure function (no I/O, no state, no logging) implementing
docs/protocol.md E1-E8 and building the answer to an invalid request (A1-A3). Every line
read from any transport passes through it exactly once; nothing else in the package looks at
``method`` / ``id`` / ``error`` to decide a message's kind.

Rules, in the order they are applied (each early return cites its rule):

- E1. Not a JSON object (a batch array included) -> ``Unrelated``.
- E2. ``id`` and no ``method`` -> ``Response``, whatever the id's value.
- E3. No ``id``, no ``method``, ``"jsonrpc": "2.0"`` and an ``error`` member -> ``Response``
  (an error naming no request, which MCP allows); without ``"2.0"`` -> ``Unrelated``.
- E4. Any other object without ``method`` -> ``Unrelated``.
- E5. ``method`` not a string, or an ``id`` that is not a string, a number or null -> ``Invalid``.
- E6. ``method`` and an ``id`` member -> ``Request`` (``"id": null`` included); no ``id`` member
  -> ``Notification``.
- E7. ``method`` with ``result`` or ``error`` is still decided by E5/E6: method wins.
- E8. ``jsonrpc`` is not otherwise checked; ``params`` is left to each handler.

Python trap: ``bool`` is a subclass of ``int``, so ``True`` is not a number id here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, Protocol, TypeAlias, TypeVar, cast

from mcpl_host.jsonrpc.errors import ErrorCode
from mcpl_host.jsonrpc.values import JSONObject, is_array, is_object

__all__ = [
    "NO_ID",
    "Envelope",
    "Invalid",
    "Notification",
    "Request",
    "Response",
    "Unrelated",
    "classify",
    "is_number",
    "json_kind",
]


class _NoId:
    """Sentinel for "the message has no ``id`` member" (distinct from ``"id": null``)."""

    _instance: _NoId | None = None

    def __new__(cls) -> _NoId:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NO_ID"

    def __reduce__(self) -> str:
        return "NO_ID"


#: The ``id`` of a response that had no ``id`` member at all (docs/protocol.md E3).
NO_ID: Final = _NoId()

RequestId: TypeAlias = "str | int | float | None"


def is_number(value: object) -> bool:
    """True for a JSON number (int or float), False for ``bool`` (JSON-RPC 2.0 §4)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def json_kind(value: object) -> str:
    """The JSON kind of ``value`` as docs/protocol.md A3 names it, e.g. ``"an object"``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if is_array(value):
        return "an array"
    return "an object"


class Request(NamedTuple):
    """A request (E6). ``id`` is a string, a number or None (``"id": null``, R1).

    Immutable (a named tuple: every line read makes one, and a tuple costs a third of a
    frozen dataclass to build)."""

    id: str | int | float | None
    method: str
    params: Any


class Notification(NamedTuple):
    """A notification (E6): a ``method`` and no ``id`` member; never answered. A named
    tuple, as ``Request`` (a stream of notifications makes one per line)."""

    method: str
    params: Any


class Response(NamedTuple):
    """A response (E2, E3); immutable, a named tuple like ``Request``.

    ``id`` is the id's value as sent (any JSON value) or ``NO_ID`` when there was no ``id``
    member. ``error`` is the raw ``error`` member (or None); ``result`` the raw ``result``.
    ``is_jsonrpc_error`` is True when the message has ``"jsonrpc": "2.0"`` and an ``error``
    member: the only unmatched responses worth a log line (R5, H4).
    """

    id: Any
    result: Any
    error: Any
    has_error: bool
    is_jsonrpc_error: bool

    @property
    def has_usable_id(self) -> bool:
        """True when the id is a string or a number: it could name a request (R5)."""
        return isinstance(self.id, str) or is_number(self.id)


@dataclass(frozen=True, slots=True)
class Invalid:
    """An invalid request (E5), with its ready-made ``-32600`` answer (A1-A3).

    ``answer_id`` is the id to answer with (A2); ``method`` the method when it is a string
    (for the log line, A4), else None; ``message`` the error message (A3).
    """

    answer_id: str | int | float | None
    method: str | None
    message: str

    @property
    def error(self) -> JSONObject:
        """The JSON-RPC error object of the answer (JSON-RPC 2.0 §5.1)."""
        return {"code": int(ErrorCode.INVALID_REQUEST), "message": self.message}


@dataclass(frozen=True, slots=True)
class Unrelated:
    """Anything that is not JSON-RPC (E1, E3 without ``"2.0"``, E4); ignored (R6)."""

    kind: str


Envelope: TypeAlias = "Request | Notification | Response | Invalid | Unrelated"

_T = TypeVar("_T", bound=tuple[Any, ...])


class _TupleNew(Protocol):
    def __call__(self, cls: type[_T], items: tuple[Any, ...], /) -> _T: ...


#: ``tuple.__new__``: builds a named tuple without its constructor, a Python function that
#: costs twice as much (``Request`` and ``RequestReceived`` are made for nearly every line).
tuple_new = cast("_TupleNew", tuple.__new__)  # pyright: ignore[reportUnknownMemberType]


def classify(value: object) -> Envelope:
    """Classify one parsed JSON value (docs/protocol.md E1-E8). Pure; never raises.

    Args:
        value: any value ``json.loads`` / ``orjson.loads`` can return.

    Returns:
        exactly one of ``Request``, ``Notification``, ``Response``, ``Invalid``,
        ``Unrelated``.
    """
    if type(value) is dict:
        # E6's usual case told first, the same rule's outcome: a parsed object whose method
        # is a string and whose id is an int (a bool is none) is a request.
        parsed: dict[str, Any] = value  # pyright: ignore[reportUnknownVariableType] (a parsed object)
        method = parsed.get("method")
        if type(method) is str:
            request_id = parsed.get("id")
            if type(request_id) is int:
                return tuple_new(Request, (request_id, method, parsed.get("params")))
    # E1: only an object can be a message; a batch (array) is unrelated too (D1).
    elif not is_object(value):
        return Unrelated(kind=json_kind(value))
    else:
        parsed = value

    if "method" not in parsed:
        # E2: an id and no method is a response, whatever the id's value.
        if "id" in parsed:
            if "error" not in parsed:  # the common answer, built at once (_response otherwise)
                return tuple_new(Response, (parsed["id"], parsed.get("result"), None, False, False))
            return _response(parsed, parsed["id"])
        # E3: an error naming no request, only with "jsonrpc": "2.0".
        if "error" in parsed and parsed.get("jsonrpc") == "2.0":
            return _response(parsed, NO_ID)
        # E4: any other object without a method.
        return Unrelated(kind="an object")

    # E7: from here on the method wins over any result/error member.
    method = parsed["method"]
    method_ok = isinstance(method, str)
    has_id = "id" in parsed
    id_value = parsed.get("id")
    id_ok = (
        (not has_id)
        or type(id_value) is int  # the usual id, told first (a bool is no int here)
        or id_value is None
        or isinstance(id_value, str)
        or is_number(id_value)
    )

    # E5: invalid request; A2-A3 build its answer.
    if not (method_ok and id_ok):
        faults: list[str] = []
        if not method_ok:
            faults.append(f"the method must be a string, not {json_kind(method)}")
        if not id_ok:
            faults.append(f"the id must be a string, a number or null, not {json_kind(id_value)}")
        answer_id = id_value if (isinstance(id_value, str) or is_number(id_value)) else None
        return Invalid(
            answer_id=answer_id,
            method=method if method_ok else None,
            message="Invalid Request: " + "; ".join(faults),
        )

    # E6 (and E8: jsonrpc is not checked, params left to the handler). Built as a tuple: a
    # named tuple's own constructor is a Python function, twice the cost.
    if has_id:
        return tuple_new(Request, (id_value, method, parsed.get("params")))
    return tuple_new(Notification, (method, parsed.get("params")))


def _response(value: Mapping[str, object], id_value: object) -> Response:
    # "error": null beside a result is read as no error (sloppy servers send both members).
    has_error = "error" in value and not (value["error"] is None and "result" in value)
    return Response(
        id_value,
        value.get("result"),
        value.get("error"),
        has_error,
        has_error and value.get("jsonrpc") == "2.0",
    )

"""Host-held state per feature set (MCPL §8; docs/protocol.md, "State").

One store per server (its ``HostedServer``'s, so it outlives transports) serves both
directions: tool results and ``state/rollback`` on the host -> server side, ``state/update``
and ``state/get`` on the server -> host side. A result's ``state`` ``{checkpoint, parent,
data? | patch?}``: ``data`` replaces (and wins over ``patch``); ``patch`` is RFC 6902, applied
with the ``jsonpatch`` library to the parent's data; neither means the checkpoint is an
opaque reference the server manages.

Bounds (``Limits``; docs/protocol.md, "State"), so that no state object from a server costs
the host more than a bounded amount of memory or of the event loop's time:

- A document (a checkpoint's data) is held as compact JSON bytes (orjson), so memory is its
  size, and every reader gets a fresh copy. It is at most ``max_state_bytes`` bytes and
  ``STATE_MAX_DEPTH`` levels deep (what orjson writes); a ``data`` beyond is refused
  before it is copied.
- A patch has at most ``max_patch_operations`` operations of RFC 6902 §4 (``add``,
  ``remove``, ``replace``, ``move``, ``copy``, ``test``; any other is refused). They are
  applied one at a time to a copy of the parent's data, with the document's size followed
  as it goes (each value added, replaced, removed or copied is measured first), so an
  operation that would take the document past ``max_state_bytes`` is refused *before* it is
  applied: a patch that copies the document into itself stops after doubling it once. The
  patch is also refused once it has taken more than ``max_patch_seconds`` (checked after each
  operation). A JSON Pointer (RFC 6901) with more segments than a document can be deep is
  refused unread.
- At most ``max_state_checkpoints`` checkpoints per feature set, and ``max_total_state_bytes``
  bytes held for the server in all (checkpoint ids counted): the oldest checkpoints that are
  not current go first; an update that would not fit even then is refused.
- A refusal leaves the held state as it was, or (a tool result, whose server has moved on)
  keeps the new checkpoint as an opaque reference. ``StateProblem`` says why: ``reason``
  ``limit_exceeded`` with the ``Limits`` field, or ``not_applied``.

Pure: no I/O, no logging; the clock is passed in.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import orjson

from mcpl_host.json_size import json_size
from mcpl_host.jsonrpc.values import JSONObject, is_array, is_mapping
from mcpl_host.limits import Limits, config_key

__all__ = [
    "PATCH_OPERATIONS",
    "STATE_MAX_DEPTH",
    "FeatureSetStateStore",
    "StateEntry",
    "StateProblem",
    "StateStore",
]

#: RFC 6902 §4: the operations a patch may hold (the library knows others; they are refused).
PATCH_OPERATIONS = frozenset({"add", "remove", "replace", "move", "copy", "test"})
#: Deepest nesting of a held document: what orjson writes (its own limit, not a setting).
STATE_MAX_DEPTH = 254
# A pointer to a member of the deepest document has this many segments (RFC 6901 §3).
_MAX_POINTER_SEGMENTS = STATE_MAX_DEPTH + 1
_MISSING: Any = object()


@dataclass(frozen=True, slots=True)
class StateEntry:
    """One checkpoint (§8.2): ``parent`` (None for a root) and, unless it is an opaque
    reference (§8.3), its data as compact JSON bytes (``encoded``). ``data`` is a fresh
    copy at each reading (None for a reference)."""

    checkpoint: str
    parent: str | None = None
    encoded: bytes | None = None

    @property
    def has_data(self) -> bool:
        return self.encoded is not None

    @property
    def data(self) -> Any:
        return orjson.loads(self.encoded) if self.encoded is not None else None

    @property
    def size_bytes(self) -> int:
        """What holding it costs, in bytes: the data's JSON and the ids."""
        ids = len(self.checkpoint.encode("utf-8", "surrogatepass"))
        if self.parent is not None:
            ids += len(self.parent.encode("utf-8", "surrogatepass"))
        return ids + (len(self.encoded) if self.encoded is not None else 0)


@dataclass(frozen=True, slots=True)
class StateProblem:
    """Why a state object was not (fully) applied. ``detail``: a sentence for logs (it names
    keys and bounds, never a server value). ``limit``: the ``Limits`` field that refused it,
    or None (the object could not be applied: a missing parent, a failing operation).
    ``str()`` is ``detail``."""

    detail: str
    limit: str | None = None

    @property
    def reason(self) -> Literal["limit_exceeded", "not_applied"]:
        """The wire reason (docs/protocol.md, "State")."""
        return "limit_exceeded" if self.limit is not None else "not_applied"

    def __str__(self) -> str:
        return self.detail


class StateStore(Protocol):
    """Host-held state per feature set (MCPL §8), as a ``HostedServer`` keeps it across
    transports. ``FeatureSetStateStore`` is the in-memory one; a framework that persists
    state passes its own (``HostedServer(state_store=...)``, ``Host(state_store_factory=...)``)."""

    def current(self, feature_set: str) -> StateEntry | None:
        """The checkpoint the next ``tools/call`` of this feature set builds on."""
        ...

    def get(self, feature_set: str, checkpoint: str) -> StateEntry | None:
        """A recent checkpoint of the feature set, if held."""
        ...

    def request_params(self, feature_set: str) -> dict[str, Any]:
        """``{"state": data}``, ``{"checkpoint": id}`` or ``{}`` for a ``tools/call`` (§8.4)."""
        ...

    def apply(
        self, feature_set: str, state: object, *, keep_reference_on_problem: bool = True
    ) -> StateProblem | str | None:
        """Apply a ``state`` object; None, or what was not applied (a ``StateProblem``, or a
        sentence)."""
        ...

    def rolled_back(self, feature_set: str, checkpoint: str) -> None:
        """The server rolled back to ``checkpoint``."""
        ...


def _too_large(what: str, limit: str, bound: int) -> StateProblem:
    return StateProblem(f"{what} is over Limits.{limit} = {bound} bytes ({config_key(limit)})", limit)


def _encode(data: object, max_bytes: int) -> bytes | StateProblem:
    """``data`` as compact JSON, or why it cannot be held."""
    try:
        encoded = orjson.dumps(data)
    except (TypeError, orjson.JSONEncodeError):
        if json_size(data, limit=max_bytes) > max_bytes:
            return _too_large("the state document", "max_state_bytes", max_bytes)
        return StateProblem(
            f"the state document is nested deeper than {STATE_MAX_DEPTH} levels, or holds an "
            "integer beyond 64 bits"
        )
    if len(encoded) > max_bytes:
        return _too_large("the state document", "max_state_bytes", max_bytes)
    return encoded


def _pointer_problem(op: Mapping[str, object], index: int) -> StateProblem | None:
    for key in ("path", "from"):
        pointer = op.get(key)
        if isinstance(pointer, str) and pointer.count("/") > _MAX_POINTER_SEGMENTS:
            return StateProblem(
                f"patch operation {index}: {key} has more segments than a state document has levels"
            )
    return None


def _member(doc: object, path: object) -> Any:
    """The value at ``path`` in ``doc`` (RFC 6901), or ``_MISSING`` (never raises)."""
    if not isinstance(path, str):
        return _MISSING
    import jsonpointer  # noqa: PLC0415 (the first state patch that reads a member)

    try:
        return jsonpointer.resolve_pointer(doc, path, _MISSING)
    except (jsonpointer.JsonPointerException, TypeError, ValueError, KeyError, IndexError):
        return _MISSING


def _replaced(doc: object, path: object) -> Any:
    """What an ``add`` or ``copy`` to ``path`` replaces: an object's member or the root (an
    array element is inserted before, not replaced; RFC 6902 §4.1)."""
    if path == "":
        return doc
    if not isinstance(path, str) or "/" not in path:
        return _MISSING
    parent = _member(doc, path.rsplit("/", 1)[0])
    return _member(doc, path) if is_mapping(parent) else _MISSING


def _growth(doc: object, op: Mapping[str, object], max_bytes: int) -> int:
    """How many bytes ``op`` adds to ``doc``'s JSON (negative: removes), closely enough to
    stop a patch before it grows the document past the bound; each value is measured once,
    at most ``max_bytes`` + 1 of it. A pointer that does not resolve counts nothing: the
    library refuses the operation then."""

    def size(value: object) -> int:
        return 0 if value is _MISSING else json_size(value, limit=max_bytes)

    name, path = op.get("op"), op.get("path")
    member_bytes = len(path) + 4 if isinstance(path, str) else 0  # "name":, and a comma
    if name == "add":
        return member_bytes + size(op.get("value", _MISSING)) - size(_replaced(doc, path))
    if name == "copy":
        return member_bytes + size(_member(doc, op.get("from"))) - size(_replaced(doc, path))
    if name == "replace":
        return size(op.get("value", _MISSING)) - size(_member(doc, path))
    if name == "remove":
        return -size(_member(doc, path))
    if name == "move":
        return member_bytes
    return 0  # test


class FeatureSetStateStore:
    """Host-held state per feature set (MCPL §8; docs/protocol.md, "State") within the
    bounds of ``limits`` (module rules): the current checkpoint and the most recent ones
    before it, so a patch may name any recent parent. ``clock``: seconds, for
    ``max_patch_seconds`` (default ``time.perf_counter``). Pure: no I/O, no logging."""

    def __init__(
        self, limits: Limits | None = None, *, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.limits = limits or Limits()
        self._clock = clock
        self._current: dict[str, StateEntry] = {}
        self._history: dict[str, OrderedDict[str, StateEntry]] = {}
        # Every held entry, oldest first: the order in which room is made.
        self._age: OrderedDict[tuple[str, str], StateEntry] = OrderedDict()
        self._total = 0

    def __repr__(self) -> str:
        return (
            f"<FeatureSetStateStore feature_sets={len(self._current)} checkpoints={len(self._age)}"
            f" bytes={self._total}>"
        )

    @property
    def total_bytes(self) -> int:
        """Bytes held for the server (``StateEntry.size_bytes`` of every checkpoint)."""
        return self._total

    def current(self, feature_set: str) -> StateEntry | None:
        """The checkpoint the next ``tools/call`` of this feature set builds on."""
        return self._current.get(feature_set)

    def get(self, feature_set: str, checkpoint: str) -> StateEntry | None:
        history = self._history.get(feature_set)
        return history.get(checkpoint) if history is not None else None

    def request_params(self, feature_set: str) -> JSONObject:
        """``{"state": data}`` if data is held, ``{"checkpoint": id}`` for a reference, else
        ``{}`` (§8.4)."""
        entry = self._current.get(feature_set)
        if entry is None:
            return {}
        return {"state": entry.data} if entry.has_data else {"checkpoint": entry.checkpoint}

    def apply(
        self, feature_set: str, state: object, *, keep_reference_on_problem: bool = True
    ) -> StateProblem | None:
        """Apply a tool result's ``state`` ``{checkpoint, parent, data? | patch?}`` (§8.2-§8.3;
        ``data`` wins over ``patch``) within the bounds (module rules). Returns None, or a
        ``StateProblem``; then, with ``keep_reference_on_problem`` (tool results: the server
        has moved on), the new checkpoint is kept as a reference, else (a refused
        ``state/update``) the held state is left as it was. Never raises on any JSON value."""
        if not is_mapping(state) or not isinstance(state.get("checkpoint"), str):
            return StateProblem("state has no string checkpoint; the held state is unchanged")
        checkpoint = state["checkpoint"]
        parent = state.get("parent") if isinstance(state.get("parent"), str) else None
        reference = StateEntry(checkpoint, parent)  # no data: opaque (§8.3)
        encoded: bytes | StateProblem | None = None
        if "data" in state:
            encoded = _encode(state["data"], self.limits.max_state_bytes)
        elif "patch" in state:
            base = self.get(feature_set, parent) if parent is not None else None
            if base is None or base.encoded is None:
                encoded = StateProblem("patch against a parent whose data is not held")
            elif not is_array(state["patch"]):
                encoded = StateProblem("patch is not an array (RFC 6902)")
            else:
                encoded = self._patched(base.encoded, state["patch"])
        problem = encoded if isinstance(encoded, StateProblem) else None
        entry = StateEntry(checkpoint, parent, encoded) if isinstance(encoded, bytes) else reference
        if problem is None or keep_reference_on_problem:
            room = self._room_problem(feature_set, entry)
            if room is not None:
                return room  # not even a reference fits: nothing changes
            self._remember(feature_set, entry)
        return problem

    def rolled_back(self, feature_set: str, checkpoint: str) -> None:
        """The server rolled back to ``checkpoint``: it becomes current (with its data if
        held, else as a reference)."""
        entry = self.get(feature_set, checkpoint) or StateEntry(checkpoint)
        if self._room_problem(feature_set, entry) is None:
            self._remember(feature_set, entry)

    def forget(self, feature_set: str) -> None:
        for checkpoint in list(self._history.pop(feature_set, {})):
            self._drop(feature_set, checkpoint)
        self._current.pop(feature_set, None)

    # --- the bounds ------------------------------------------------------------------------

    def _patched(self, base: bytes, patch: Sequence[object]) -> bytes | StateProblem:
        """The parent's data with ``patch`` applied, operation by operation (module rules)."""
        limits = self.limits
        max_bytes = limits.max_state_bytes
        if len(patch) > limits.max_patch_operations:
            limit = "max_patch_operations"
            return StateProblem(
                f"the patch has {len(patch)} operations, over Limits.{limit} ="
                f" {limits.max_patch_operations} ({config_key(limit)})",
                limit,
            )
        import jsonpatch  # on the first patch: no stdio connection needs it before (memory)

        deadline = self._clock() + limits.max_patch_seconds
        doc = orjson.loads(base)  # a copy: the parent's data is kept as it was
        size = len(base)
        for index, op in enumerate(patch):
            if not is_mapping(op) or op.get("op") not in PATCH_OPERATIONS:
                return StateProblem(f"patch operation {index} is not an RFC 6902 operation")
            problem = _pointer_problem(op, index)
            if problem is not None:
                return problem
            size += _growth(doc, op, max_bytes)
            if size > max_bytes:
                return _too_large(f"the document after patch operation {index}", "max_state_bytes", max_bytes)
            try:
                doc = jsonpatch.JsonPatch([op]).apply(doc, in_place=True)
            except Exception as exc:  # untrusted input: any failure means "not applied"
                return StateProblem(f"patch operation {index} could not be applied ({type(exc).__name__})")
            if self._clock() > deadline:
                limit = "max_patch_seconds"
                return StateProblem(
                    f"the patch took longer than Limits.{limit} = {limits.max_patch_seconds:g} s"
                    f" ({config_key(limit)}) by operation {index}",
                    limit,
                )
        return _encode(doc, max_bytes)

    def _room_problem(self, feature_set: str, entry: StateEntry) -> StateProblem | None:
        """Whether ``entry`` can become current within ``max_total_state_bytes``, once every
        checkpoint that is not current has gone."""
        limit, bound = "max_total_state_bytes", self.limits.max_total_state_bytes
        ids = entry.size_bytes - (len(entry.encoded) if entry.encoded is not None else 0)
        if ids > self.limits.max_state_bytes:
            return _too_large("the checkpoint ids", "max_state_bytes", self.limits.max_state_bytes)
        others = sum(e.size_bytes for name, e in self._current.items() if name != feature_set)
        if others + entry.size_bytes > bound:
            return _too_large("the state held for this server", limit, bound)
        return None

    def _remember(self, feature_set: str, entry: StateEntry) -> None:
        self._current[feature_set] = entry
        history = self._history.setdefault(feature_set, OrderedDict())
        held = history.get(entry.checkpoint)
        if held is not entry:
            if held is not None:
                self._drop(feature_set, entry.checkpoint)
            history[entry.checkpoint] = entry
            self._age[(feature_set, entry.checkpoint)] = entry
            self._total += entry.size_bytes
        history.move_to_end(entry.checkpoint)
        self._age.move_to_end((feature_set, entry.checkpoint))
        while len(history) > self.limits.max_state_checkpoints:
            self._drop(feature_set, next(iter(history)))
        if self._total > self.limits.max_total_state_bytes:
            for key, old in list(self._age.items()):
                if self._total <= self.limits.max_total_state_bytes:
                    break
                if self._current.get(key[0]) is not old:
                    self._drop(*key)

    def _drop(self, feature_set: str, checkpoint: str) -> None:
        entry = self._age.pop((feature_set, checkpoint), None)
        if entry is not None:
            self._total -= entry.size_bytes
        history = self._history.get(feature_set)
        if history is not None:
            history.pop(checkpoint, None)

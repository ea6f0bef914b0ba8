"""Host-held state per feature set (MCPL §8; docs/protocol.md, "State").

One store per server (its ``HostedServer``'s, so it outlives transports) serves both
directions: tool results and ``state/rollback`` on the host -> server side, ``state/update``
and ``state/get`` on the server -> host side. A result's ``state`` ``{checkpoint, parent,
data? | patch?}``: ``data`` replaces (and wins over ``patch``); ``patch`` is RFC 6902, applied
with the ``jsonpatch`` library to the parent's data; neither means the checkpoint is an
opaque reference the server manages. Pure: no I/O, no logging.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol

import jsonpatch

from mcpl_host.jsonrpc.values import is_array, is_mapping

__all__ = ["FeatureSetStateStore", "StateEntry", "StateStore"]


@dataclass(frozen=True, slots=True)
class StateEntry:
    """One checkpoint (§8.2): ``parent`` (None for a root), ``data`` when ``has_data``."""

    checkpoint: str
    parent: str | None = None
    data: Any = None
    has_data: bool = False


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

    def apply(self, feature_set: str, state: Any, *, keep_reference_on_problem: bool = True) -> str | None:
        """Apply a ``state`` object; None, or a sentence saying what was not applied."""
        ...

    def rolled_back(self, feature_set: str, checkpoint: str) -> None:
        """The server rolled back to ``checkpoint``."""
        ...


class FeatureSetStateStore:
    """Host-held state per feature set (MCPL §8; docs/protocol.md, "State"): the current checkpoint
    and at most ``max_checkpoints`` recent ones (oldest dropped first), so a patch may name
    any recent parent. Pure: no I/O, no logging."""

    def __init__(self, max_checkpoints: int = 64) -> None:
        self.max_checkpoints = max(1, max_checkpoints)
        self._current: dict[str, StateEntry] = {}
        self._history: dict[str, OrderedDict[str, StateEntry]] = {}

    def current(self, feature_set: str) -> StateEntry | None:
        """The checkpoint the next ``tools/call`` of this feature set builds on."""
        return self._current.get(feature_set)

    def get(self, feature_set: str, checkpoint: str) -> StateEntry | None:
        history = self._history.get(feature_set)
        return history.get(checkpoint) if history is not None else None

    def request_params(self, feature_set: str) -> dict[str, Any]:
        """``{"state": data}`` if data is held, ``{"checkpoint": id}`` for a reference, else
        ``{}`` (§8.4)."""
        entry = self._current.get(feature_set)
        if entry is None:
            return {}
        return {"state": copy.deepcopy(entry.data)} if entry.has_data else {"checkpoint": entry.checkpoint}

    def apply(self, feature_set: str, state: Any, *, keep_reference_on_problem: bool = True) -> str | None:
        """Apply a tool result's ``state`` ``{checkpoint, parent, data? | patch?}`` (§8.2-§8.3;
        ``data`` wins over ``patch``). Returns None, or a sentence saying what was not
        applied; then, with ``keep_reference_on_problem`` (tool results: the server has moved
        on), the new checkpoint is kept as a reference, else (a refused ``state/update``) the
        held state is left as it was. Never raises on any JSON value."""
        if not is_mapping(state) or not isinstance(state.get("checkpoint"), str):
            return "state has no string checkpoint; the held state is unchanged"
        checkpoint = state["checkpoint"]
        parent = state.get("parent") if isinstance(state.get("parent"), str) else None
        entry, problem = StateEntry(checkpoint, parent), None  # no data: opaque (§8.3)
        if "data" in state:
            entry = StateEntry(checkpoint, parent, copy.deepcopy(state["data"]), True)
        elif "patch" in state:
            base = self.get(feature_set, parent) if parent is not None else None
            if base is None or not base.has_data:
                problem = "patch against a parent whose data is not held"
            elif not is_array(state["patch"]):
                problem = "patch is not an array (RFC 6902)"
            else:
                try:  # a new object: the parent's data is kept as it was
                    entry = StateEntry(
                        checkpoint, parent, jsonpatch.apply_patch(base.data, state["patch"]), True
                    )
                except Exception as exc:  # untrusted input: any failure means "not applied"
                    problem = f"patch could not be applied ({type(exc).__name__})"
        if problem is None or keep_reference_on_problem:
            self._remember(feature_set, entry)
        return problem

    def rolled_back(self, feature_set: str, checkpoint: str) -> None:
        """The server rolled back to ``checkpoint``: it becomes current (with its data if
        held, else as a reference)."""
        self._remember(feature_set, self.get(feature_set, checkpoint) or StateEntry(checkpoint))

    def forget(self, feature_set: str) -> None:
        self._current.pop(feature_set, None)
        self._history.pop(feature_set, None)

    def _remember(self, feature_set: str, entry: StateEntry) -> None:
        self._current[feature_set] = entry
        history = self._history.setdefault(feature_set, OrderedDict())
        history[entry.checkpoint] = entry
        history.move_to_end(entry.checkpoint)
        while len(history) > self.max_checkpoints:
            history.popitem(last=False)

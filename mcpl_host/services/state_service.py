"""``state/update`` and ``state/get`` (docs/protocol.md, "State"), after admission.

There is no spec basis for either method beyond the MCPL libraries; the project reads them
so: ``state/update {featureSet, checkpoint, parent?, data | state | patch}`` ->
``{accepted: true}``, or ``{accepted: false, reason}`` and a log line when the store did not
apply it: ``reason`` ``"limit_exceeded"`` with ``limit`` (the bound's config key, such as
``maxStateBytes``) when one of the store's ``Limits`` refused it (``mcpl.state``), else
``"not_applied"`` (a patch whose parent's data is not held, for one). ``state`` is an
alias of ``data``. ``state/get {featureSet}`` -> ``{checkpoint, data}`` (nulls when nothing
is held; plus ``state`` when the server named it so). The store is the ``HostedServer``'s, so
host-held state outlives transports (MCPL §8).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcpl_host.jsonrpc.values import JSONObject
from mcpl_host.limits import config_key
from mcpl_host.logging import Logger, Redactor, ServerValue
from mcpl_host.mcpl.state import StateProblem, StateStore

__all__ = ["StateService"]


class StateService:
    """Serves admitted ``state/*`` requests against a server's ``StateStore``."""

    def __init__(self, store: StateStore, *, log: Logger, redactor: Redactor) -> None:
        self._store = store
        self._log = log
        self._redactor = redactor
        self._state_alias: set[str] = set()  # feature sets whose server says "state", not "data"

    def serve(self, method: str, params: Mapping[str, Any]) -> JSONObject:
        store, name = self._store, params["featureSet"]
        if method == "state/get":
            held = store.current(name)
            data = held.data if held is not None and held.has_data else None
            result = {"checkpoint": held.checkpoint if held is not None else None, "data": data}
            return {**result, "state": data} if name in self._state_alias else result
        update = dict(params)
        if "data" not in params and "state" in params:  # an alias seen in servers
            update["data"] = update.pop("state")
            self._state_alias.add(name)
        elif "data" in params:
            self._state_alias.discard(name)
        problem = store.apply(name, update, keep_reference_on_problem=False)
        if problem is None:
            return {"accepted": True}
        limit = problem.limit if isinstance(problem, StateProblem) else None
        if limit is not None:
            self._log.warning(
                "state/update refused: over a bound",
                feature_set=ServerValue(name, self._redactor),
                problem=str(problem),
                limit=limit,
            )
            return {"accepted": False, "reason": "limit_exceeded", "limit": config_key(limit)}
        self._log.info(
            "state/update not applied", feature_set=ServerValue(name, self._redactor), problem=str(problem)
        )
        return {"accepted": False, "reason": "not_applied"}

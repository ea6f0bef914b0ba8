"""Host -> server state calls on one connection: stateful ``tools/call`` and ``state/rollback``
(MCPL §8.2-§8.7).

Rules:

- The state store is the ``HostedServer``'s (``StateStore``), so held state outlives
  transports. ``data`` replaces; ``patch`` is RFC 6902 applied to the *parent* checkpoint's
  data; neither, or a patch that cannot be applied or is over a bound of the store
  (``Limits.max_state_bytes``, ``max_patch_operations``, ``max_patch_seconds``...; see
  ``mcpl.state``), keeps only the opaque reference, with a warning line.
  ``tools/call`` then carries ``state`` (held data) or ``checkpoint`` (reference);
  ``feature_set`` is the host's key and never sent.
- ``state/rollback`` goes out only for a declared, enabled feature set with ``rollback: true``
  (there is no capability path for it; docs/protocol.md, "State"); ``{success: false,
  reason}`` and ``-32005`` are results, not errors.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from mcpl_host.connection import DEFAULT, ProgressCallback, Timeout
from mcpl_host.jsonrpc.errors import LocalProtocolError, RemoteError, RemoteProtocolError
from mcpl_host.jsonrpc.values import JSONObject, is_object
from mcpl_host.logging import Logger, Redactor, ServerValue
from mcpl_host.mcp_methods import CallToolResult, call_tool_result
from mcpl_host.mcpl.admission import AdmissionView
from mcpl_host.mcpl.references import ContentView
from mcpl_host.mcpl.state import StateProblem, StateStore
from mcpl_host.services.negotiation import Requester

__all__ = ["CHECKPOINT_NOT_FOUND", "RollbackResult", "StateCalls"]

#: MCPL Appendix A: ``state/rollback`` aimed at a pruned or unknown checkpoint.
CHECKPOINT_NOT_FOUND = -32005


@dataclass(frozen=True, slots=True)
class RollbackResult:
    """``state/rollback`` (§8.5-§8.7). ``outcome``: ``"rolled_back"`` (success true),
    ``"refused"`` (``success: false``, ``reason`` as sent) or ``"not_found"`` (error -32005;
    ``checkpoint`` from its ``data`` when given, ``reason`` its message)."""

    feature_set: str
    checkpoint: str
    outcome: Literal["rolled_back", "refused", "not_found"]
    reason: str | None = None

    @property
    def success(self) -> bool:
        return self.outcome == "rolled_back"


class StateCalls:
    """Stateful tool calls and rollback on one connection (module rules)."""

    def __init__(
        self,
        requester: Requester,
        view: AdmissionView,
        store: StateStore,
        *,
        log: Logger,
        redactor: Redactor,
        content_view: ContentView | None = None,
    ) -> None:
        self._content_view = content_view
        self._requester = requester
        self._view = view
        self.store = store
        self._log = log
        self._redactor = redactor

    async def call_tool_with_state(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        feature_set: str,
        timeout: Timeout = DEFAULT,
        progress: ProgressCallback | None = None,
    ) -> CallToolResult:
        """``tools/call`` carrying the state held for ``feature_set`` (§8.4), then applying the
        result's ``state`` to the store (a problem is logged, never raised). Raises as
        ``call_tool()``.

        Cancellation: as ``request()``; the held state is unchanged.
        """
        params: JSONObject = {"name": name, "arguments": arguments or {}}
        params.update(self.store.request_params(feature_set))
        result = await self._requester.request("tools/call", params, timeout=timeout, progress=progress)
        if not is_object(result):
            raise RemoteProtocolError("the server's tools/call result is not a JSON object")
        problem = self.store.apply(feature_set, result["state"]) if "state" in result else None
        if problem is not None:
            self._log.warning(
                "tool result state not fully applied",
                feature_set=feature_set,
                problem=str(problem),
                limit=problem.limit if isinstance(problem, StateProblem) else None,
            )
        read = call_tool_result(result)
        if self._content_view is not None:  # MCPL §19.4: a tool result is a reference lane
            read = replace(read, model_content=self._content_view.model_content(read.content, f"tool {name}"))
        return read

    async def rollback(
        self, feature_set: str, checkpoint: str, *, timeout: Timeout = DEFAULT
    ) -> RollbackResult:
        """``state/rollback {featureSet, checkpoint}`` (MCPL §8.5-§8.7).

        Returns a ``RollbackResult`` for a success, a ``{success: false, reason}`` refusal,
        and error -32005; on success the store's current checkpoint becomes ``checkpoint``.

        Raises:
            LocalProtocolError: not MCPL-ready, or ``feature_set`` is not declared with
                ``rollback: true``, or not enabled (nothing is sent).
            RemoteError: any other error answer. RemoteProtocolError: no boolean ``success``.
            RequestTimeout, ConnectionLost, ConnectionClosed: as ``request()``.

        Cancellation: as ``request()``; the store is unchanged.
        """
        view, name = self._view, self._requester.name
        if view.grant is None:
            raise LocalProtocolError(f"'state/rollback' not sent: {name!r} is not MCPL-ready")
        declared = view.feature_sets.sets.get(feature_set)
        if declared is None or not declared.rollback:
            raise LocalProtocolError(
                f"'state/rollback' not sent: feature set {feature_set!r} does not declare rollback: true"
            )
        if view.derivation is None or feature_set not in view.derivation.enabled:
            raise LocalProtocolError(f"'state/rollback' not sent: feature set {feature_set!r} is not enabled")
        params = {"featureSet": feature_set, "checkpoint": checkpoint}
        try:
            result = await self._requester.request("state/rollback", params, timeout=timeout)
        except RemoteError as exc:
            if exc.code != CHECKPOINT_NOT_FOUND:
                raise
            data = exc.data if is_object(exc.data) else {}
            named = data.get("checkpoint")
            self._log.info(
                "state/rollback: checkpoint not found",
                feature_set=feature_set,
                checkpoint=ServerValue(named if named is not None else checkpoint, self._redactor),
            )
            return RollbackResult(
                feature_set, named if isinstance(named, str) else checkpoint, "not_found", exc.message
            )
        if not is_object(result) or not isinstance(result.get("success"), bool):
            raise RemoteProtocolError("the server's state/rollback result has no boolean success")
        reason = result.get("reason") if isinstance(result.get("reason"), str) else None
        if not result["success"]:
            self._log.info(
                "state/rollback refused", feature_set=feature_set, reason=ServerValue(reason, self._redactor)
            )
            return RollbackResult(feature_set, checkpoint, "refused", reason)
        self.store.rolled_back(feature_set, checkpoint)
        return RollbackResult(feature_set, checkpoint, "rolled_back", reason)

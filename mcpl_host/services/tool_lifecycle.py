"""Tool lifecycle (MCPL RFC-007 revision 3, Draft): the I/O around ``mcpl.tool_lifecycle``.

Rules (docs/protocol.md, "Tool lifecycle (RFC-007)"):

- **The filter of one connection** (``ObserveFilters``, RFC-007 §6.5): ``tools/observe``
  (admitted only with ``toolLifecycle.observe`` in force, ``-32002`` otherwise: admission) is
  parsed (``parse_observe``); a well-formed request replaces the filter whole and is answered
  ``{}``; a malformed one is answered ``-32602`` and the filter in force stays (logged within
  ``Limits.refusals_logged`` lines per connection). The filter
  lives as long as the transport (a new connection starts with none) and is discarded when
  ``toolLifecycle.observe`` leaves the grant in force (``PolicyState.lifecycle_revocations``),
  so a later grant starts with none (RFC-007 §4.5, §6.5).
- **One call's notifications** (``ReportedToolCall``): at the call's first opening phase the
  recipients are fixed: every MCPL-ready connection the pure ``decide`` says yes to (never the
  providing server itself). ``started`` carries what ``decide`` chose for each; a terminal goes
  only to a recipient whose transport is the same and still open and whose grant still
  observes the call (``still_observes``; RFC-007 §4.5), whatever its filter says now (§6.5).
  Exactly one terminal is attempted; ``durationMs`` is measured from ``started``.
  Notifications are queued without waiting (best effort, like ``inference/lifecycle``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from mcpl_host.jsonrpc.errors import HandlerError, LocalProtocolError, MCPLHostError
from mcpl_host.jsonrpc.values import JSONObject
from mcpl_host.logging import LogBudget, Logger, ServerValue, get_logger
from mcpl_host.mcpl.policy_state import PolicyState
from mcpl_host.mcpl.tool_lifecycle import (
    CallFacts,
    CallPhases,
    Delivery,
    ObserveFilter,
    ToolLifecyclePolicy,
    decide,
    lifecycle_params,
    parse_observe,
    still_observes,
)
from mcpl_host.secrets import Redactor

if TYPE_CHECKING:
    from mcpl_host.handlers import RequestContext
    from mcpl_host.mcp_methods import MCPClient
    from mcpl_host.mcp_records import CallToolResult
    from mcpl_host.services.negotiation import PolicyExchange

__all__ = ["LifecyclePeer", "ObserveFilters", "ReportedToolCall"]

_log = get_logger("mcpl_host.tool_lifecycle")
_UNKNOWN = CallFacts("", (), None, None, "", "", {})


class ObserveFilters:
    """The ``tools/observe`` filter of one connection (module rules). ``serve`` is the
    request's job; ``current`` the filter in force (None: no filter, metadata only)."""

    def __init__(
        self,
        state: PolicyState,
        *,
        max_rules: int,
        max_paths: int,
        log: Logger,
        redactor: Redactor | None = None,
        refusals_logged: int = 10,
    ) -> None:
        self._state = state
        self._redactor = redactor
        self._refusals = LogBudget(refusals_logged)
        self._max_rules = max_rules
        self._max_paths = max_paths
        self._log = log
        self._filter: ObserveFilter | None = None
        self._epoch = state.lifecycle_revocations

    @property
    def current(self) -> ObserveFilter | None:
        if self._state.lifecycle_revocations != self._epoch:  # observe was revoked since
            self._filter = None
            self._epoch = self._state.lifecycle_revocations
        return self._filter

    async def serve(self, context: RequestContext, params: Any) -> JSONObject:
        """Answer one ``tools/observe`` (RFC-007 §6): ``{}``, or raise the ``-32602``
        ``HandlerError`` (the filter in force stays)."""
        parsed = parse_observe(params, max_rules=self._max_rules, max_paths=self._max_paths)
        if isinstance(parsed, HandlerError):
            verdict = self._refusals.take()
            if verdict == "log":
                self._log.info(
                    "refused a tools/observe filter; the one in force stays", why=ServerValue(parsed.message)
                )
            elif verdict == "last":
                self._log.info("refused tools/observe filters: more go unlogged on this connection")
            raise parsed
        _ = self.current  # settles a revocation first
        self._filter = parsed.filter
        return {}


class LifecyclePeer(Protocol):
    """What a call's notifications need of one connection (``ServerConnection`` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def is_open(self) -> bool: ...

    @property
    def tool_observe(self) -> ObserveFilters: ...

    @property
    def policy(self) -> PolicyExchange: ...

    @property
    def mcp(self) -> MCPClient: ...


def _granted(peer: LifecyclePeer) -> frozenset[str] | None:
    """The paths of the grant in force (None: not MCPL-ready)."""
    grant = peer.policy.state.grant
    return grant.paths if grant is not None else None


def _notify(peer: LifecyclePeer, params: JSONObject) -> bool:
    """Best effort, never waiting (like ``inference/lifecycle``): False when not written."""
    try:
        peer.mcp.notify_nowait("tools/lifecycle", params)
    except MCPLHostError as exc:
        _log.debug("tools/lifecycle not sent", server=peer.name, error=ServerValue(str(exc)))
        return False
    return True


class ReportedToolCall:
    """The ``tools/lifecycle`` notifications of one call (RFC-007 §3, §7; module rules).

    Made by ``Host.tool_call``. ``async with`` it: entering sends ``pending`` (when made with
    ``pending=True``: the call waits on a gate the application controls) or ``started``.
    Then ``start()`` (after ``pending``), ``execute()`` (start if needed, call the tool on its
    server, report the terminal from the result), or the terminal by hand: ``completed(
    is_error=...)``, ``failed()``, ``aborted()``. Leaving without a terminal sends one:
    ``aborted`` on cancellation or when the call never started (refused at the gate),
    ``failed`` on another exception, else ``completed``. ``call_id`` is the ``toolCallId``;
    ``recipients`` the servers told. A phase out of order raises ``LocalProtocolError``.
    """

    def __init__(
        self,
        facts: CallFacts | Callable[[], Awaitable[CallFacts]],
        call_id: str,
        peers: Callable[[], Iterable[tuple[LifecyclePeer, ToolLifecyclePolicy, int]]],
        *,
        pending: bool = False,
        execute: Callable[[], Any] | None = None,
    ) -> None:
        self._prepare = None if isinstance(facts, CallFacts) else facts
        self.facts = facts if isinstance(facts, CallFacts) else _UNKNOWN
        self.call_id = call_id
        self._peers = peers
        self._pending = pending
        self._execute = execute
        self._phases = CallPhases()
        self._recipients: list[tuple[LifecyclePeer, ToolLifecyclePolicy, int]] = []
        self._started_at: float | None = None
        self.result: CallToolResult | None = None

    @property
    def recipients(self) -> tuple[str, ...]:
        return tuple(peer.name for peer, _, _ in self._recipients)

    @property
    def phases(self) -> tuple[str, ...]:
        """The phases reported so far, in order."""
        return tuple(self._phases.history)

    def _send(self, peer: LifecyclePeer, phase: str, delivery: Delivery | None = None, **extra: Any) -> None:
        _notify(peer, lifecycle_params(self.facts, self.call_id, phase, delivery, **extra))

    def _open(self, phase: str) -> None:
        self._phases.advance(phase)
        if len(self._phases.history) == 1:  # the first opening fixes the recipients
            for peer, policy, max_bytes in self._peers():
                delivery = decide(
                    self.facts,
                    granted=_granted(peer),
                    policy=policy,
                    observe_filter=peer.tool_observe.current,
                    own=peer.name == self.facts.server_id,
                    max_input_bytes=max_bytes,
                )
                if delivery is not None:
                    self._recipients.append((peer, policy, max_bytes))
                    if phase == "started":
                        self._send(peer, phase, delivery)
                    else:
                        self._send(peer, phase)
            return
        # started after pending: the recipients of pending, still observing.
        for peer, policy, max_bytes in self._recipients:
            if self._still(peer, policy):
                delivery = decide(
                    self.facts,
                    granted=_granted(peer),
                    policy=policy,
                    observe_filter=peer.tool_observe.current,
                    own=False,
                    max_input_bytes=max_bytes,
                )
                self._send(peer, "started", delivery)

    def _still(self, peer: LifecyclePeer, policy: ToolLifecyclePolicy) -> bool:
        return peer.is_open and still_observes(self.facts, granted=_granted(peer), policy=policy)

    def start(self) -> None:
        """Send ``started`` (RFC-007 §3): the host begins executing the call."""
        self._open("started")
        self._started_at = anyio.current_time()

    def _end(self, phase: str, *, is_error: bool | None = None) -> None:
        self._phases.advance(phase)
        duration = None
        if self._started_at is not None:
            duration = round((anyio.current_time() - self._started_at) * 1000)
        for peer, policy, _ in self._recipients:
            if not self._still(peer, policy):
                _log.info(
                    "tools/lifecycle terminal not sent: the grant or the transport changed",
                    server=peer.name,
                    phase=phase,
                )
                continue
            self._send(peer, phase, is_error=is_error, duration_ms=duration)

    def completed(self, *, is_error: bool = False) -> None:
        """The tool produced a result (``is_error``: marked as an error; RFC-007 §3)."""
        self._end("completed", is_error=is_error)

    def failed(self) -> None:
        """The host could not obtain a result (RFC-007 §3)."""
        self._end("failed")

    def aborted(self) -> None:
        """The call was cancelled before a result, or refused after ``pending`` (RFC-007 §3)."""
        self._end("aborted")

    async def execute(self, **kwargs: Any) -> CallToolResult:
        """Start (if not started), call the tool on its server (``MCPClient.call_tool``;
        ``kwargs`` go to it) and report ``completed`` with ``isError`` from the result, or
        ``failed`` when no result came (the connection closed, the request timed out or was
        refused: the error propagates). Cancellation propagates (leaving reports
        ``aborted``). Raises ``LocalProtocolError`` for a tool the host implements."""
        if self._execute is None:
            raise LocalProtocolError("a tool the host implements is executed by the application")
        if "started" not in self._phases.history:
            self.start()
        try:
            result: CallToolResult = await self._execute(**kwargs)
        except MCPLHostError:
            self.failed()
            raise
        self.result = result
        self.completed(is_error=result.is_error)
        return result

    async def __aenter__(self) -> ReportedToolCall:
        if self._phases.opened:
            raise LocalProtocolError("a ReportedToolCall is entered only once")
        if self._prepare is not None:
            self.facts = await self._prepare()
        if self._pending:
            self._open("pending")
        else:
            self.start()
        return self

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if self._phases.ended:
            return
        if exc is not None:
            cancelled = isinstance(exc, (anyio.get_cancelled_exc_class(), KeyboardInterrupt))
            self._end("aborted" if cancelled else "failed")
        elif "started" not in self._phases.history:
            self._end("aborted")
        else:
            self._end("completed")

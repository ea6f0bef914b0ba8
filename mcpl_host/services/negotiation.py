"""The MCPL policy exchange of one connection: the I/O around ``PolicyState`` (MCPL §5.3,
§5.4, §6.7).

Rules:

- The initial ``featureSets/update`` is a **request**, sent after
  ``notifications/initialized`` even when nothing is granted; it carries the policy the
  application set last for this server (kept across transports by the ``HostedServer``), so a
  restarted server gets the grant the application decided, never the configured one again.
- The receipt takes effect in the read loop, before the next line (``on_answer``), so a
  server that pushes right after its receipt is admitted. A receipt never widens what was
  proposed. A refusal without ``fallback`` and an ``unavailableFeatures`` entry without
  ``effect`` are logged as server defects.
- An initial request that errors or times out leaves the connection MCP-only (§6.7).
- A runtime change (``update()``) stores the new policy on the ``HostedServer`` first, then
  puts the reduction in force and sends the request; the expansion takes effect only when its
  receipt arrives (never, if it does not). Changes are serialized by a lock.
- **The 0.4 profile** (docs/protocol.md, "Compatibility profiles"): the initial request waits
  at most ``fallback_seconds``; when it gets an error or no answer in that time, or the
  server is known to read only notifications (``PolicySource.policy_as_notification``,
  learned from an earlier such answer and kept across transports), the same policy goes out
  as a ``featureSets/update`` notification and is put in force without a receipt
  (``PolicyState.assume``). Every later change to such a server is a notification too.
- ``settled`` is set once the initial exchange is over, however it ended (in the read loop
  when a receipt arrives): held requests wait on it (``services.dispatch``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from mcpl_host._tasks import LazyEvent
from mcpl_host.connection import DEFAULT, ProgressCallback, Timeout
from mcpl_host.jsonrpc.envelope import Response
from mcpl_host.jsonrpc.errors import (
    ConnectionLost,
    InitializeError,
    LocalProtocolError,
    RemoteError,
    RemoteProtocolError,
    RequestTimeout,
    describe_seconds,
)
from mcpl_host.link import AnswerHook
from mcpl_host.logging import Logger, Redactor, ServerValue, log_value
from mcpl_host.mcpl.feature_sets import FeatureSetPolicy
from mcpl_host.mcpl.grants import Grant, GrantPolicy
from mcpl_host.mcpl.policy import PolicyOutcome
from mcpl_host.mcpl.policy_state import PolicyState, Proposal, ReceiptVerdict

if TYPE_CHECKING:
    from mcpl_host.observe import Reporter

__all__ = ["PolicyChange", "PolicyExchange", "PolicySource", "Requester"]


class Requester(Protocol):
    """What a service needs of a connection: a request with an answer hook, a notification."""

    @property
    def name(self) -> str: ...

    def request(
        self,
        method: str,
        params: object = None,
        *,
        timeout: Timeout = ...,
        progress: ProgressCallback | None = None,
        on_answer: AnswerHook | None = None,
    ) -> Awaitable[Any]: ...

    def notify_nowait(self, method: str, params: object = None) -> None: ...


class PolicySource(Protocol):
    """Where the policy in force for a server is stored, once (a ``HostedServer``): read at
    each exchange, changed only through its methods."""

    @property
    def policy(self) -> GrantPolicy: ...

    @property
    def feature_set_policy(self) -> FeatureSetPolicy: ...

    @property
    def policy_as_notification(self) -> bool:
        """The server reads only the notification form of ``featureSets/update`` (0.4 profile)."""
        ...

    def set_policy(self, policy: GrantPolicy | None, feature_set_policy: FeatureSetPolicy | None) -> None:
        """Keep the policy (None: that part unchanged) for this and every later transport."""
        ...

    def learn_policy_as_notification(self) -> None:
        """The server is known to read only the notification form (0.4 profile)."""
        ...


@dataclass(frozen=True, slots=True)
class PolicyChange:
    """The outcome of one policy exchange: what was ``proposed``, what is ``in_force`` now,
    the receipt ``outcome`` (None if the request failed), and ``error`` (a sentence) if it
    failed. ``deferred``: the server was not connected; the policy was stored and goes out
    with the next handshake."""

    proposed: Grant | None
    in_force: Grant | None
    outcome: PolicyOutcome | None
    error: str | None = None
    deferred: bool = False
    #: The server refused and the host follows its request to be closed.
    closes: bool = False


class PolicyExchange:
    """Drives ``PolicyState`` over a connection (module rules). ``close`` is awaited when a
    runtime refusal asks to be closed.

    ``update()`` changes the policy at run time; ``state`` is the ``PolicyState`` it drives,
    for reading only: ``state.state`` (``MCPLState``), ``grant``, ``derivation``,
    ``feature_sets``, ``advertised``, ``manifest`` and ``revision`` (MCPL §17), ``outcome``
    (the last receipt), ``profile`` and ``choice`` (the compatibility profile),
    ``off_reason``, and ``settled_by``: how the grant in force was settled, ``"receipt"``
    (the ``featureSets/update`` went out as a request and its receipt put it in force, MCPL
    §5.3) or ``"notification"`` (0.4 profile: it went out as a notification and was put in
    force without a receipt; ``notification_reason`` says why), None before either.
    """

    def __init__(
        self,
        requester: Requester,
        state: PolicyState,
        source: PolicySource,
        reporter: Reporter,
        *,
        close: Callable[[], Awaitable[None]],
        log: Logger,
        redactor: Redactor,
        fallback_seconds: float = 3.0,
        silence_hint: Callable[[], str | None] = lambda: None,
    ) -> None:
        self._fallback_seconds = fallback_seconds
        self._silence_hint = silence_hint
        #: Set once the initial exchange is over (module rules).
        self.settled = LazyEvent()
        self._requester = requester
        self._state = state
        self._source = source
        self._reporter = reporter
        self._close = close
        self._log = log
        self._redactor = redactor
        # Free, it is taken without a checkpoint (a cancellation is still seen): the initial
        # exchange of every connection takes it, and waits at once for its receipt anyway.
        self._lock = anyio.Lock(fast_acquire=True)
        #: Called when a runtime proposal put a reduction in force, before its request goes
        #: out, and when an exchange ended (MCPL §6.7; RFC-009 §8: input-stream leases end at
        #: that boundary, docs/protocol.md IS5). None: nothing to tell.
        self.on_grant_changed: Callable[[], None] | None = None

    @property
    def state(self) -> PolicyState:
        """The MCPL state of the connection (class docstring), for reading: change it only
        through ``update()``."""
        return self._state

    async def initial(self, *, within: float | None = None) -> None:
        """The initial exchange (MCPL §5.3). ``within``: seconds it may wait for the receipt
        at most (the rest of the handshake deadline, docs/protocol.md H7; None: the request
        timeout). Raises ``InitializeError`` when the server went away during it, or
        refused it asking to be closed (and the host follows)."""
        source = self._source
        proposal = self._state.propose(source.policy, source.feature_set_policy, initial=True)
        try:
            change = await self._exchange(proposal, within)
        except ConnectionLost as exc:
            raise InitializeError(
                f"the server went away during the initial policy exchange ({exc})",
                exit_status=exc.exit_status,
                stderr_tail=exc.stderr_tail,
            ) from None
        finally:
            self.settled.set()
        if change.closes:
            raise InitializeError(
                'the server refused the host\'s policy and asked to be closed (fallback "close")'
            )

    async def update(
        self, policy: GrantPolicy | None = None, feature_set_policy: FeatureSetPolicy | None = None
    ) -> PolicyChange:
        """A runtime change (MCPL §6.7): store it, the reduction at once, the expansion on the
        receipt. Raises ``LocalProtocolError`` when the connection is not MCPL-ready;
        ``ConnectionLost`` / ``ConnectionClosed`` as ``request()``.

        Cancellation: the reduction stays in force; a late receipt activates nothing."""
        if not self._state.is_ready or self._state.grant is None:
            raise LocalProtocolError(f"{self._requester.name!r} is not MCPL-ready; no policy to update")
        source = self._source
        source.set_policy(policy, feature_set_policy)
        return await self.exchange_grant(source.policy.compute(self._state.bound))

    async def exchange_grant(self, grant: Grant) -> PolicyChange:
        """Propose ``grant`` at run time (after a manifest change, or from ``update()``)."""
        async with self._lock:
            proposal = self._state.propose_grant(grant, self._source.feature_set_policy, initial=False)
            told = self.on_grant_changed
            if told is not None:
                told()
            try:
                return await self._exchange_locked(proposal)
            finally:
                if told is not None:
                    told()

    async def _exchange(self, proposal: Proposal, within: float | None = None) -> PolicyChange:
        async with self._lock:
            return await self._exchange_locked(proposal, within)

    def _as_notification(self, proposal: Proposal, why: str) -> PolicyChange:
        """0.4 profile: send ``proposal`` as a notification and put it in force (module rules)."""
        self._requester.notify_nowait("featureSets/update", proposal.params)
        self._state.assume(proposal, why)
        self._reporter.grant_in_force(self._state.grant, "notification")
        return PolicyChange(proposal.grant, self._state.grant, None)

    async def _exchange_locked(self, proposal: Proposal, within: float | None = None) -> PolicyChange:
        state = self._state
        lenient = state.lenient
        if lenient and self._source.policy_as_notification:
            return self._as_notification(
                proposal, "the server is known to read only the notification form of featureSets/update"
            )
        verdicts: list[ReceiptVerdict] = []

        def on_receipt(response: Response) -> None:
            # In the read loop: in force before the server's next line is read.
            if not response.has_error:
                verdicts.append(state.receipt(proposal, response.result))
            if proposal.initial and state.is_settled:
                self.settled.set()

        timeout: Timeout = DEFAULT
        if lenient and proposal.initial:
            timeout = self._fallback_seconds
        if within is not None:
            timeout = min(timeout, within) if isinstance(timeout, (int, float)) else within
        try:
            await self._requester.request(
                "featureSets/update", proposal.params, timeout=timeout, on_answer=on_receipt
            )
        except (RemoteError, RemoteProtocolError, RequestTimeout) as exc:
            if lenient:
                why = (
                    f"the server did not answer the featureSets/update request within "
                    f"{describe_seconds(exc.timeout)}"
                    if isinstance(exc, RequestTimeout)
                    else "the server answered the featureSets/update request with an error"
                )
                self._source.learn_policy_as_notification()
                self._log.info(
                    "sent the policy as a notification and put it in force without a receipt (0.4 profile)",
                    why=why,
                    error=ServerValue(str(exc), self._redactor),
                )
                return self._as_notification(proposal, why)
            hint = self._silence_hint() if isinstance(exc, RequestTimeout) else None
            why = hint or f"the policy request failed: {log_value(str(exc), self._redactor)}"
            state.request_failed(proposal, why)
            self._log.warning(
                "policy request failed; nothing new activated"
                + ("; the connection is MCP-only" if proposal.initial else ""),
                error=ServerValue(str(exc), self._redactor),
                **({"explanation": hint} if hint else {}),
            )
            return PolicyChange(proposal.grant, state.grant, None, str(exc))
        verdict = verdicts[0]
        self._report(verdict.outcome)
        self._reporter.grant_in_force(state.grant, "receipt")
        if verdict.retell is not None:
            # The manifest shrank while the request was out: tell the server what is in force.
            retold = state.propose_grant(verdict.retell, proposal.feature_set_policy, initial=False)
            return await self._exchange_locked(retold)
        if not proposal.initial and verdict.closes:
            self._log.warning("the server refused the policy and asked to be closed; closing")
            await self._close()
        return PolicyChange(proposal.grant, state.grant, verdict.outcome, closes=verdict.closes)

    def _report(self, outcome: PolicyOutcome) -> None:
        for defect in outcome.defects:
            self._log.warning("policy receipt defect", defect=defect)
        if not outcome.accepted:
            self._log.warning(
                "server refused the policy; MCPL is off for this connection",
                fallback=ServerValue(outcome.fallback, self._redactor),
                reason=ServerValue(outcome.reason, self._redactor),
            )
        elif outcome.mode is not None:
            self._log.info(
                "server accepted the policy, degraded",
                mode=ServerValue(outcome.mode, self._redactor),
                unavailable=ServerValue(outcome.unavailable_features, self._redactor),
            )
        self._reporter.policy_receipt(outcome)

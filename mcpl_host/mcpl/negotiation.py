"""The MCPL policy exchange of one connection: initial grant, runtime changes, receipts.

Rules (MCPL §5.3, §5.4, §6.4, §6.7; PROTOCOL.md §2.1 steps 7-9, §2.4, §2.5; checklist C
35-40, D 49-57):

- The initial ``featureSets/update`` is a **request**, sent after ``notifications/initialized``
  even when nothing is granted; it always carries ``effectiveCapabilities`` and the derived
  ``enabled``/``disabled`` feature sets. Until its receipt the grant in force is None and every
  privileged inbound method is refused (``admission.admit``).
- A receipt takes effect in the read loop, before the next line (``Slot.on_answer``), so a
  server that pushes right after its receipt is admitted. A receipt never widens what was
  proposed. ``accepted: false`` turns MCPL off (MCP-only); its ``fallback`` (``mcp-only`` or
  ``close``) is followed or overridden by ``on_refusal``. A refusal without ``fallback`` and an
  ``unavailableFeatures`` entry without ``effect`` are logged as server defects.
- An initial request that errors or times out leaves the connection MCP-only (§6.7, RFC-002 §12).
- Runtime change (``update_policy``): the reduction (paths no longer granted, sets no longer
  enabled) takes effect at once, before the request goes out; the expansion only when its
  receipt arrives (never, if it does not). Changes are serialized.
- A ``featureSets/update`` *notification* never makes a connection ready (we never send one).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal

import anyio

from mcpl_host.jsonrpc.errors import (
    ConnectionLost,
    InitializeError,
    RemoteError,
    RemoteProtocolError,
    RequestTimeout,
)
from mcpl_host.logging import ServerValue
from mcpl_host.mcpl.feature_sets import (
    Derivation,
    FeatureSetDeclarations,
    FeatureSetPolicy,
    derive,
    read_feature_sets,
)
from mcpl_host.mcpl.grants import Grant, GrantPolicy, expand_advertisement
from mcpl_host.mcpl.policy import PolicyOutcome, read_receipt

__all__ = ["MCPLNegotiation", "MCPLState", "PolicyChange", "RefusalAction"]

#: What the host does when a server refuses its policy: follow the server's ``fallback``
#: (``close`` closes, anything else stays MCP-only), or always stay MCP-only, or always close.
RefusalAction = Literal["follow", "mcp-only", "close"]


class MCPLState(Enum):
    """Where the MCPL layer of a connection stands (MCPL §5.3, §6.7)."""

    #: Plain MCP server (no ``experimental.mcpl``): no MCPL traffic at all (MCPL §3.3).
    NONE = "none"
    #: ``featureSets/update`` sent, receipt not yet in: privileged methods refused (D3).
    PENDING = "pending"
    #: Receipt in: the grant is in force.
    READY = "ready"
    #: The policy exchange failed or was refused: tools, resources, prompts only (§6.7).
    MCP_ONLY = "mcp-only"


@dataclass(frozen=True, slots=True)
class PolicyChange:
    """The outcome of one policy exchange: what was proposed, what is in force now, the
    receipt (None if the request failed) and ``error`` (a sentence) if it failed."""

    proposed: Grant
    in_force: Grant | None
    outcome: PolicyOutcome | None
    error: str | None = None


class MCPLNegotiation:
    """Mixed into ``ServerConnection``: the grant in force and the exchanges that set it."""

    name: str
    redactor: Any
    handlers: Any
    policy: GrantPolicy
    feature_set_policy: FeatureSetPolicy
    on_refusal: RefusalAction
    server_info: Any
    _log: Any
    _manifest_in_force: Any  # from ManifestChanges

    async def request(self, method: str, params: Any = None, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError

    def _init_negotiation(self) -> None:
        self.mcpl_state = MCPLState.NONE
        self.advertised: frozenset[str] = frozenset()
        self.feature_sets = FeatureSetDeclarations(sets={})
        self.proposed_grant: Grant | None = None
        self.grant: Grant | None = None  # in force; None until the receipt (D3)
        self.derivation: Derivation | None = None  # in force, with the grant
        self.policy_outcome: PolicyOutcome | None = None
        self._policy_lock = anyio.Lock()

    @property
    def is_mcpl_ready(self) -> bool:
        """True once a receipt accepted the policy: MCPL traffic may flow (§6.7)."""
        return self.mcpl_state is MCPLState.READY

    def _reset_negotiation(self) -> None:
        """A new transport: nothing is in force until the exchange runs again (T1-T3)."""
        self.grant = None
        self.derivation = None
        self.proposed_grant = None
        self.mcpl_state = MCPLState.NONE

    async def _initial_policy(self) -> None:
        info = self.server_info
        assert info is not None and info.mcpl is not None
        if info.mcpl_version not in ("0.4", "0.5"):
            self._log.warning(
                "MCPL version not known; serving best-effort",
                version=ServerValue(info.mcpl.get("version"), self.redactor),
            )
        self._manifest_in_force(info.mcpl)  # kept verbatim (MCPL §17.1; checklist C 34)
        self.advertised = expand_advertisement(info.mcpl, tools="tools" in info.capabilities)
        self.feature_sets = read_feature_sets(info.mcpl)
        for problem in self.feature_sets.problems:
            self._log.info("feature set declaration problem", problem=ServerValue(problem, self.redactor))
        self.mcpl_state = MCPLState.PENDING
        try:
            change = await self._exchange(self.policy.compute(self.advertised), initial=True)
        except ConnectionLost as exc:
            raise InitializeError(
                f"the server went away during the initial policy exchange ({exc})",
                exit_status=exc.exit_status,
                stderr_tail=exc.stderr_tail,
            ) from None
        if change.outcome is not None and not change.outcome.accepted:
            if self._refusal_closes(change.outcome):
                raise InitializeError(
                    'the server refused the host\'s policy and asked to be closed (fallback "close")'
                )

    def _refusal_closes(self, outcome: PolicyOutcome) -> bool:
        if self.on_refusal == "close":
            return True
        return self.on_refusal == "follow" and outcome.fallback == "close"

    async def update_policy(
        self, policy: GrantPolicy | None = None, feature_set_policy: FeatureSetPolicy | None = None
    ) -> PolicyChange:
        """Change the grant at run time (MCPL §6.7): the reduction at once, the expansion on
        the receipt. Returns the ``PolicyChange``; a refused or failed exchange leaves the
        reduction in force and the expansion inactive.

        Raises:
            LocalProtocolError: the connection is not MCPL-ready.
            ConnectionLost / ConnectionClosed: as ``request()``.

        Cancellation: the reduction stays in force; a late receipt activates nothing.
        """
        from mcpl_host.jsonrpc.errors import LocalProtocolError

        if not self.is_mcpl_ready or self.grant is None:
            raise LocalProtocolError(f"{self.name!r} is not MCPL-ready; no policy to update")
        if policy is not None:
            self.policy = policy
        if feature_set_policy is not None:
            self.feature_set_policy = feature_set_policy
        return await self._exchange(self.policy.compute(self.advertised), initial=False)

    async def _exchange(self, proposed: Grant, *, initial: bool) -> PolicyChange:
        async with self._policy_lock:
            # Never propose what the manifest in force no longer advertises (it may have
            # changed while this waited for the lock).
            proposed = Grant(paths=proposed.paths & self.advertised, advertised=self.advertised)
            derivation = derive(self.feature_sets, proposed, self.feature_set_policy)
            if not initial and self.grant is not None:
                # Reduction first (§6.7): what both the old and new grants allow, at once.
                kept = Grant(paths=self.grant.paths & proposed.paths, advertised=self.advertised)
                self._set_in_force(kept, derive(self.feature_sets, kept, self.feature_set_policy))
            self.proposed_grant = proposed

            def on_receipt(response: Any) -> None:
                # In the read loop: activation happens before the server's next line is read.
                if response.has_error:
                    return
                outcome = read_receipt(response.result)
                self.policy_outcome = outcome
                if outcome.accepted:
                    # Never wider than proposed, nor than what is advertised now (a manifest
                    # change may have arrived while this request was out).
                    in_force = Grant(paths=proposed.paths & self.advertised, advertised=self.advertised)
                    self._set_in_force(in_force, derive(self.feature_sets, in_force, self.feature_set_policy))
                    self.mcpl_state = MCPLState.READY
                else:  # a refusal turns MCPL off, at any time (§6.7)
                    self.grant = None
                    self.derivation = None
                    self.mcpl_state = MCPLState.MCP_ONLY

            try:
                await self.request(
                    "featureSets/update", derivation.policy_params(proposed), _on_answer=on_receipt
                )
            except (RemoteError, RemoteProtocolError, RequestTimeout) as exc:
                # PROTOCOL.md §2.1 step 9: no receipt, no activation.
                if initial:
                    self.mcpl_state = MCPLState.MCP_ONLY
                self._log.warning(
                    "policy request failed; nothing new activated"
                    + ("; the connection is MCP-only" if initial else ""),
                    error=ServerValue(str(exc), self.redactor),
                )
                return PolicyChange(proposed, self.grant, None, str(exc))
            outcome = self.policy_outcome
            assert outcome is not None
            self._report_receipt(outcome)
            told = self.grant
        if told is not None and told.paths != proposed.paths:
            # The manifest shrank while the request was out: tell the server what is in force.
            return await self._exchange(told, initial=False)
        if not initial and not outcome.accepted and self._refusal_closes(outcome):
            self._log.warning("the server refused the policy and asked to be closed; closing")
            await self.aclose()
        return PolicyChange(proposed, self.grant, outcome)

    def _set_in_force(self, grant: Grant, derivation: Derivation) -> None:
        self.grant = grant
        self.derivation = derivation

    def _report_receipt(self, outcome: PolicyOutcome) -> None:
        for defect in outcome.defects:
            self._log.warning("policy receipt defect", defect=defect)
        if not outcome.accepted:
            self._log.warning(
                "server refused the policy; MCPL is off for this connection",
                fallback=ServerValue(outcome.fallback, self.redactor),
                reason=ServerValue(outcome.reason, self.redactor),
            )
        elif outcome.mode is not None:
            self._log.info(
                "server accepted the policy, degraded",
                mode=ServerValue(outcome.mode, self.redactor),
                unavailable=ServerValue(outcome.unavailable_features, self.redactor),
            )
        self.handlers.on_policy_receipt(self.name, outcome)

"""The MCPL state of one connection, as a pure object: advertisement, grant, receipts,
manifest (MCPL §5.3-§5.4, §6.4, §6.7, §17).

Rules (the policy exchange as a state machine; the I/O shell is ``services.negotiation``):

- ``MCPLState``: ``NONE`` (plain MCP server) -> ``begin()`` -> ``PENDING`` (the initial
  ``featureSets/update`` request is out; privileged methods refused, docs/protocol.md D3) ->
  ``READY`` (a receipt accepted it) or ``MCP_ONLY`` (refused, or the request failed: tools,
  resources and prompts only, §6.7). A refusal at any later time turns MCPL off too.
- ``propose()`` computes what to ask for: the policy's grant over what is advertised *now*,
  and its derivation. For a runtime change the **reduction** (what both the grant in force
  and the proposal allow) is put in force at once, before the request goes out (§6.7).
- ``receipt()`` runs in the read loop when the answer arrives, before the next line: an
  acceptance puts the proposal in force, never wider than proposed nor than what is
  advertised at that moment (a manifest change may have arrived meanwhile); the verdict says
  when the server must then be told the narrower grant (``retell``).
- ``apply_manifest()`` puts a fetched manifest in force (§17.5): removals are revoked at once
  (the grant becomes what both the grant in force and the new advertisement allow), additions
  are never granted by themselves; it says whether the server must be told.
- **Profiles** (``mcpl.compat``; docs/protocol.md, "Compatibility profiles"). ``begin()``
  chooses the connection's profile from ``compat`` and the advertisement. Under ``0.4`` the
  grant's ``bound`` is ``compat.widen(advertised)`` (the top-level capabilities), the
  derivation reads ``uses`` leniently, and ``assume()`` puts a proposal in force without a
  receipt (the policy went out as a notification). Under ``strict`` the bound is what is
  advertised. Either way the grant is the bound intersected with the host's policy.
- ``off_reason``: why MCPL is off (a refusal, a failed request), a sentence; None otherwise.
- Nothing here does I/O, reads a clock or logs; problems come back as values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Literal, get_args

from mcpl_host.jsonrpc.values import JSONObject
from mcpl_host.mcpl.compat import CompatSetting, Profile, ProfileChoice, choose_profile, widen
from mcpl_host.mcpl.feature_sets import (
    Derivation,
    FeatureSetDeclarations,
    FeatureSetPolicy,
    derive,
    read_feature_sets,
)
from mcpl_host.mcpl.grants import Grant, GrantPolicy, expand_advertisement
from mcpl_host.mcpl.policy import PolicyOutcome, read_receipt

if TYPE_CHECKING:
    from mcpl_host.mcpl.manifest_diff import ChangeReceipt, ManifestDiff

# The manifest diff (MCPL §17.5, §17.6) is imported by the first manifest change.

#: RFC-007 §4.5: the path whose revocation discards a ``tools/observe`` filter.
LIFECYCLE_OBSERVE = "toolLifecycle.observe"

__all__ = [
    "ManifestStep",
    "MCPLState",
    "PolicyState",
    "Proposal",
    "REFUSAL_ACTIONS",
    "ReceiptVerdict",
    "RefusalAction",
]

#: What the host does when a server refuses its policy: follow the server's ``fallback``
#: (``close`` closes, anything else stays MCP-only), or always stay MCP-only, or always close.
RefusalAction = Literal["follow", "mcp-only", "close"]
#: Every ``RefusalAction``, in the order of the type.
REFUSAL_ACTIONS: tuple[RefusalAction, ...] = get_args(RefusalAction)


class MCPLState(Enum):
    """Where the MCPL layer of a connection stands (MCPL §5.3, §6.7); ``str()`` is its value."""

    #: Plain MCP server (no ``experimental.mcpl``): no MCPL traffic at all.
    NONE = "none"
    #: ``featureSets/update`` sent, receipt not yet in: privileged methods refused (D3), or
    #: held under the 0.4 profile.
    PENDING = "pending"
    #: Receipt in (or, under the 0.4 profile, the policy sent as a notification): the grant
    #: is in force.
    READY = "ready"
    #: The policy exchange failed or was refused: tools, resources, prompts only (§6.7).
    MCP_ONLY = "mcp-only"

    def __str__(self) -> str:
        """The value (``"ready"``), as printed and in f-strings; ``repr`` stays the member's."""
        return self.value


@dataclass(frozen=True, slots=True)
class Proposal:
    """One ``featureSets/update`` request to make: the ``grant`` and ``derivation`` proposed,
    the ``feature_set_policy`` they were derived with, ``initial`` (the first one of the
    connection), and the request's ``params`` (§5.3)."""

    grant: Grant
    derivation: Derivation
    feature_set_policy: FeatureSetPolicy
    initial: bool

    @property
    def params(self) -> JSONObject:
        return self.derivation.policy_params(self.grant)


@dataclass(frozen=True, slots=True)
class ReceiptVerdict:
    """What a receipt did: its ``outcome``; ``closes`` (a refusal the host follows by closing);
    ``retell``: a grant narrower than proposed is in force (the manifest shrank while the
    request was out) and the server must be told it, else None."""

    outcome: PolicyOutcome
    closes: bool = False
    retell: Grant | None = None


@dataclass(frozen=True, slots=True)
class ManifestStep:
    """A fetched manifest put in force: the ``diff``, the grant and enabled sets before, the
    grant ``kept`` (removals revoked), and ``tell`` (the server must get a
    ``featureSets/update`` with ``kept``)."""

    diff: ManifestDiff
    old_grant: Grant
    enabled_before: frozenset[str]
    kept: Grant
    tell: bool


@dataclass
class PolicyState:
    """The MCPL state of one connection (module rules). Read by admission (``grant``,
    ``derivation``, ``feature_sets``) and by outbound calls."""

    on_refusal: RefusalAction = "follow"
    #: The server's compatibility setting; the profile is chosen by ``begin()``.
    compat: CompatSetting = "strict"
    choice: ProfileChoice | None = None
    state: MCPLState = MCPLState.NONE
    #: The manifest in force (``experimental.mcpl`` as sent, or as last fetched; §17.1).
    manifest: dict[str, Any] | None = None
    #: The server's outer MCP capabilities have ``tools`` (the ``tools`` path, MCPL §5.1).
    tools: bool = False
    advertised: frozenset[str] = frozenset()
    #: Paths the host does not advertise on this connection, so never granted (RFC-009 §2.2:
    #: ``channels.incoming.streaming`` unless ``ServerConfig.input_streams``).
    withheld: frozenset[str] = frozenset()
    #: What a grant may hold: ``advertised`` (strict), or its top-level widening (0.4).
    bound: frozenset[str] = frozenset()
    feature_sets: FeatureSetDeclarations = field(default_factory=FeatureSetDeclarations)
    #: The grant in force; None until a receipt accepted one, and after a refusal (D3).
    grant: Grant | None = None
    #: The derivation in force with ``grant``.
    derivation: Derivation | None = None
    #: The last proposal sent, and the last receipt read.
    proposed: Proposal | None = None
    outcome: PolicyOutcome | None = None
    #: How the grant in force was settled: by a ``receipt``, or a ``notification`` (0.4).
    settled_by: Literal["receipt", "notification"] | None = None
    #: Why the policy went out as a notification (0.4), a sentence.
    notification_reason: str | None = None
    #: Why MCPL is off (MCP_ONLY), a sentence; None otherwise.
    off_reason: str | None = None
    #: How often ``toolLifecycle.observe`` left the grant in force (RFC-007 §4.5, §6.5: a
    #: revocation discards the connection's ``tools/observe`` filter).
    lifecycle_revocations: int = 0

    def _set_grant(self, grant: Grant | None) -> None:
        if (
            self.grant is not None
            and self.grant.allows(LIFECYCLE_OBSERVE)
            and not (grant is not None and grant.allows(LIFECYCLE_OBSERVE))
        ):
            self.lifecycle_revocations += 1
        self.grant = grant

    @property
    def profile(self) -> Profile:
        """The connection's profile (``strict`` until ``begin()`` chose, unless set to 0.4)."""
        if self.choice is not None:
            return self.choice.profile
        return "0.4" if self.compat == "0.4" else "strict"

    @property
    def lenient(self) -> bool:
        """The 0.4 profile's readings apply."""
        return self.profile == "0.4"

    @property
    def is_settled(self) -> bool:
        """The initial exchange is over (or there is none): admission can decide."""
        return self.state is not MCPLState.PENDING

    @property
    def is_ready(self) -> bool:
        """True once a receipt accepted the policy: MCPL traffic may flow (§6.7)."""
        return self.state is MCPLState.READY

    @property
    def revision(self) -> str | None:
        """The ``revision`` of the manifest in force, if it is a string."""
        revision = self.manifest.get("revision") if self.manifest is not None else None
        return revision if isinstance(revision, str) else None

    def begin(self, manifest: dict[str, Any], *, tools: bool) -> list[str]:
        """An MCPL server answered ``initialize``: read its manifest (kept verbatim, §17.1);
        the state becomes ``PENDING``. Returns the declaration problems (sentences)."""
        self.manifest = manifest
        self.tools = tools
        self.choice = choose_profile(self.compat, manifest)
        self._advertise(manifest)
        self.state = MCPLState.PENDING
        return list(self.feature_sets.problems)

    def _advertise(self, manifest: Mapping[str, object]) -> None:
        self.advertised = expand_advertisement(manifest, tools=self.tools)
        self.bound = (widen(self.advertised) if self.lenient else self.advertised) - self.withheld
        self.feature_sets = read_feature_sets(manifest)

    def _bounded(self, grant: Grant) -> Grant:
        return Grant(paths=grant.paths & self.bound, advertised=self.bound)

    def _derive(self, grant: Grant, feature_set_policy: FeatureSetPolicy) -> Derivation:
        return derive(self.feature_sets, grant, feature_set_policy, lenient=self.lenient)

    def propose(
        self, policy: GrantPolicy, feature_set_policy: FeatureSetPolicy, *, initial: bool
    ) -> Proposal:
        """The proposal for ``policy`` over the bound now (module rules)."""
        return self.propose_grant(policy.compute(self.bound), feature_set_policy, initial=initial)

    def propose_grant(self, grant: Grant, feature_set_policy: FeatureSetPolicy, *, initial: bool) -> Proposal:
        """The proposal of ``grant`` (bounded by what is advertised now); for a runtime change
        the reduction is put in force at once."""
        proposed = self._bounded(grant)
        derivation = self._derive(proposed, feature_set_policy)
        if not initial and self.grant is not None:
            kept = Grant(paths=self.grant.paths & proposed.paths, advertised=self.bound)
            self._in_force(kept, feature_set_policy)
        proposal = Proposal(proposed, derivation, feature_set_policy, initial)
        self.proposed = proposal
        return proposal

    def _in_force(self, grant: Grant, feature_set_policy: FeatureSetPolicy) -> None:
        self._set_grant(grant)
        self.derivation = self._derive(grant, feature_set_policy)

    def receipt(self, proposal: Proposal, result: object) -> ReceiptVerdict:
        """The receipt of ``proposal`` arrived (in the read loop; module rules)."""
        outcome = read_receipt(result)
        self.outcome = outcome
        if not outcome.accepted:  # a refusal turns MCPL off, at any time (§6.7)
            self._set_grant(None)
            self.derivation = None
            self.state = MCPLState.MCP_ONLY
            self.off_reason = f"the server refused the host's policy (fallback {outcome.fallback or 'none'})"
            closes = self.on_refusal == "close" or (
                self.on_refusal == "follow" and outcome.fallback == "close"
            )
            return ReceiptVerdict(outcome, closes=closes)
        in_force = self._bounded(proposal.grant)
        self._in_force(in_force, proposal.feature_set_policy)
        self.state = MCPLState.READY
        self.settled_by = "receipt"
        retell = in_force if in_force.paths != proposal.grant.paths else None
        return ReceiptVerdict(outcome, retell=retell)

    def assume(self, proposal: Proposal, why: str) -> None:
        """0.4 profile: ``proposal`` went out as a ``featureSets/update`` notification, so no
        receipt will come; it is in force now, bounded as a receipt would be (``why``: a
        sentence, kept in ``notification_reason``)."""
        self._in_force(self._bounded(proposal.grant), proposal.feature_set_policy)
        self.state = MCPLState.READY
        self.settled_by = "notification"
        self.notification_reason = why

    def request_failed(self, proposal: Proposal, why: str = "the policy request failed") -> None:
        """The request of ``proposal`` got an error or no answer (``why``, a sentence): nothing
        new is in force; an initial request leaves the connection MCP-only (§6.7)."""
        if proposal.initial:
            self.state = MCPLState.MCP_ONLY
            self.off_reason = why

    def apply_manifest(self, new: dict[str, Any], feature_set_policy: FeatureSetPolicy) -> ManifestStep:
        """Put a fetched manifest in force (module rules; MCPL §17.5)."""
        from mcpl_host.mcpl.manifest_diff import diff_manifests  # noqa: PLC0415 (a manifest change)

        old = self.manifest or {}
        diff = diff_manifests(old, new, tools=self.tools)
        old_grant = self.grant or Grant(advertised=self.bound)
        enabled_before = derive(
            read_feature_sets(old), old_grant, feature_set_policy, lenient=self.lenient
        ).enabled
        self.manifest = new
        self._advertise(new)
        kept = Grant(paths=old_grant.paths & self.bound, advertised=self.bound)
        tell = self.grant is not None and (
            kept.paths != old_grant.paths
            or bool(diff.feature_sets_removed or diff.feature_sets_changed or diff.feature_sets_added)
        )
        if self.grant is not None:
            self._in_force(kept, feature_set_policy)
        return ManifestStep(diff, old_grant, enabled_before, kept, tell)

    def change_receipt(self, step: ManifestStep, feature_set_policy: FeatureSetPolicy) -> ChangeReceipt:
        """The one receipt of the change ``step`` (§17.6), against the grant in force now."""
        from mcpl_host.mcpl.manifest_diff import change_receipt  # noqa: PLC0415 (loaded: a step)

        new_grant = self.grant or step.kept
        enabled_after = self._derive(new_grant, feature_set_policy).enabled
        return change_receipt(
            step.diff,
            old_grant=step.old_grant,
            new_grant=new_grant,
            feature_sets_before=step.enabled_before,
            feature_sets_after=enabled_after,
        )

"""Diff of two manifests, and the one change receipt per manifest change.

Rules (MCPL §17.1, §17.3, §17.5, §17.6, App. B.4):

- Domains partition the manifest: ``capabilities`` is every member except ``version``,
  ``revision`` and ``featureSets``; ``featureSets`` is that member without any ``tagOntology``;
  ``tagOntology`` is every feature set's ``tagOntology``. An absent member and an empty one
  differ, so appearance or disappearance is a change to the domain (§17.3). ``version`` alone
  is no domain. Values compare as JSON (``1`` equals ``1.0``, ``true`` never equals ``1``), with
  the digest's set semantics applied, so reordering a set array is no change.
- The diff is total on any JSON object: a partly invalid manifest still yields every removal
  (§17.5: removals apply even when additions are invalid). The revision takes no part.
- The receipt's vocabulary is closed and host-derived (7 impacts, 3 dispositions), never
  server-authored: removals are revoked host-first (``applied``); newly advertised capabilities
  never auto-grant (``decision-needed``); a changed ``tagOntology`` invalidates an earlier
  acceptance (``applied``); a consumer rule's tag the server stopped declaring is
  ``informational`` (§17.6).

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from mcpl_host.jsonrpc.errors import LocalProtocolError
from mcpl_host.jsonrpc.values import JSONObject, is_list_or_tuple, is_mapping
from mcpl_host.mcpl.grants import Grant, expand_advertisement
from mcpl_host.mcpl.manifest import normalized_for_diff

__all__ = [
    "CHANGE_DOMAINS",
    "DEFAULT_DISPOSITIONS",
    "DISPOSITIONS",
    "IMPACTS",
    "ChangeReceipt",
    "Impact",
    "ManifestDiff",
    "change_receipt",
    "diff_manifests",
]

#: §17.1 / App. B.3 ``ChangeDomain``, in the order the receipt lists them.
CHANGE_DOMAINS: tuple[str, ...] = ("capabilities", "featureSets", "tagOntology")
#: §17.6 / App. B.4: the closed set of impacts, in the order the receipt lists them.
IMPACTS: tuple[str, ...] = (
    "capability-revoked",  # a capability in force is no longer granted
    "capability-expansion-pending",  # newly advertised; awaiting a policy decision
    "feature-degraded",  # a feature set was disabled by derivation
    "feature-restored",  # a previously unavailable set is available again
    "ontology-acceptance-invalidated",  # an accepted ontology no longer applies
    "ontology-reference-undeclared",  # a consumer rule names a tag no longer declared
    "surface-changed",  # tools, resources, prompts or channels changed
)
#: §17.6: what the host did, or what it needs.
DISPOSITIONS: tuple[str, ...] = ("applied", "decision-needed", "informational")
#: The disposition ``change_receipt`` gives each impact.
DEFAULT_DISPOSITIONS: Mapping[str, str] = {
    "capability-revoked": "applied",
    "capability-expansion-pending": "decision-needed",
    "feature-degraded": "applied",
    "feature-restored": "applied",
    "ontology-acceptance-invalidated": "applied",
    "ontology-reference-undeclared": "informational",
    "surface-changed": "informational",
}

_ABSENT = ("absent",)


def _key(value: object) -> Any:
    """A hashable, type-strict JSON comparison key (Python has ``True == 1``)."""
    if value is None or isinstance(value, (bool, str)):
        return (type(value).__name__, value)
    if isinstance(value, (int, float)):
        return ("nan",) if value != value else ("number", value)  # 1 and 1.0 are one number
    if is_mapping(value):
        return ("object", frozenset((k, _key(v)) for k, v in value.items()))
    if is_list_or_tuple(value):
        return ("array", tuple(_key(v) for v in value))
    return ("other", repr(value))


def _present(mapping: object, name: str) -> Any:
    """``_ABSENT`` or ``("present", key)``: presence is never confused with ``null``."""
    if is_mapping(mapping) and name in mapping:
        return ("present", _key(mapping[name]))
    return _ABSENT


def _feature_sets(manifest: Mapping[str, object]) -> Mapping[Any, Any]:  # names as given
    fs = manifest.get("featureSets")
    return fs if is_mapping(fs) else {}


def _domain_keys(manifest: Mapping[str, object]) -> tuple[Any, Any, Any]:
    capabilities = _key({k: v for k, v in manifest.items() if k not in ("version", "featureSets")})
    if "featureSets" not in manifest:
        return capabilities, _ABSENT, _ABSENT
    fs = manifest["featureSets"]
    if not is_mapping(fs):
        # A non-object featureSets carries no ontology; its presence is still tracked.
        return capabilities, ("present", _key(fs)), ("present", None)
    declarations = {
        name: {k: v for k, v in decl.items() if k != "tagOntology"} if is_mapping(decl) else decl
        for name, decl in fs.items()
    }
    ontologies = {
        name: decl["tagOntology"] for name, decl in fs.items() if is_mapping(decl) and "tagOntology" in decl
    }
    return capabilities, ("present", _key(declarations)), ("present", _key(ontologies))


def _declared_tags(manifest: Mapping[str, object]) -> frozenset[str]:
    """Tag identifiers the manifest's ontologies declare (``tagOntology.tags`` member names)."""
    out: set[str] = set()
    for decl in _feature_sets(manifest).values():
        ontology = decl.get("tagOntology") if is_mapping(decl) else None
        tags = ontology.get("tags") if is_mapping(ontology) else None
        if is_mapping(tags):
            out.update(tag for tag in tags if isinstance(tag, str))
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class ManifestDiff:
    """What changed between the manifest in force and a fetched one (MCPL §17.1, §17.5).

    ``domains``: the changed domains, in ``CHANGE_DOMAINS`` order (empty: nothing but
    ``version`` or ``revision`` moved). ``capabilities_removed`` / ``capabilities_added``:
    vocabulary paths from ``grants.expand_advertisement``. ``feature_sets_removed`` /
    ``_added``: declared names. ``feature_sets_changed``: names in both whose ``uses`` differ
    (as sets; appearing or disappearing counts). ``ontologies_changed``: names whose
    ``tagOntology`` differs, appeared or disappeared (a removed set's ontology included).
    ``tags_undeclared``: tags the old ontologies declared and the new ones do not.
    """

    domains: tuple[str, ...] = ()
    capabilities_removed: frozenset[str] = field(default_factory=frozenset[str])
    capabilities_added: frozenset[str] = field(default_factory=frozenset[str])
    feature_sets_removed: frozenset[str] = field(default_factory=frozenset[str])
    feature_sets_added: frozenset[str] = field(default_factory=frozenset[str])
    feature_sets_changed: frozenset[str] = field(default_factory=frozenset[str])
    ontologies_changed: frozenset[str] = field(default_factory=frozenset[str])
    tags_undeclared: frozenset[str] = field(default_factory=frozenset[str])

    @property
    def changed(self) -> bool:
        """Whether any domain changed (§17.3: the diff, not the revision, decides)."""
        return bool(self.domains)


def diff_manifests(
    old: Mapping[str, object], new: Mapping[str, object], *, tools: bool = False
) -> ManifestDiff:
    """Diff the manifest in force (``old``) against a fetched one (``new``) (MCPL §17.5).

    Args:
        old, new: ``experimental.mcpl`` objects as received; ``revision`` is ignored.
        tools: the outer MCP ``capabilities.tools`` flag, fixed at ``initialize``; passed to
            ``expand_advertisement`` for both sides.

    Raises:
        DigestError: ``manifest_not_object`` when either is not an object (§17.5: an
            unparseable fetch teaches nothing; keep the manifest in force), ``not_json`` for a
            value no JSON parser produces. Identifier and number problems never raise here.
    """
    before, after = normalized_for_diff(old), normalized_for_diff(new)
    domains = tuple(
        domain for domain, a, b in zip(CHANGE_DOMAINS, _domain_keys(before), _domain_keys(after)) if a != b
    )
    advertised_before = expand_advertisement(old, tools=tools)
    advertised_after = expand_advertisement(new, tools=tools)
    sets_before, sets_after = _feature_sets(before), _feature_sets(after)
    names_before = frozenset(n for n in sets_before if isinstance(n, str))
    names_after = frozenset(n for n in sets_after if isinstance(n, str))
    return ManifestDiff(
        domains=domains,
        capabilities_removed=advertised_before - advertised_after,
        capabilities_added=advertised_after - advertised_before,
        feature_sets_removed=names_before - names_after,
        feature_sets_added=names_after - names_before,
        feature_sets_changed=frozenset(
            name
            for name in names_before & names_after
            if _present(sets_before[name], "uses") != _present(sets_after[name], "uses")
        ),
        ontologies_changed=frozenset(
            name
            for name in names_before | names_after
            if _present(sets_before.get(name), "tagOntology") != _present(sets_after.get(name), "tagOntology")
        ),
        tags_undeclared=_declared_tags(before) - _declared_tags(after),
    )


@dataclass(frozen=True, slots=True)
class Impact:
    """One receipt entry (§17.6): ``impact`` in ``IMPACTS``, ``disposition`` in
    ``DISPOSITIONS``, ``detail`` the capability path, feature-set name, tag or surface concerned.

    Raises:
        LocalProtocolError: an impact or disposition outside the closed sets.
    """

    impact: str
    disposition: str
    detail: str

    def __post_init__(self) -> None:
        if self.impact not in IMPACTS:
            raise LocalProtocolError(f"impact {self.impact!r} is not in the closed set (§17.6)")
        if self.disposition not in DISPOSITIONS:
            raise LocalProtocolError(f"disposition {self.disposition!r} is not one of {DISPOSITIONS}")

    def to_json(self) -> dict[str, str]:
        return {"impact": self.impact, "disposition": self.disposition, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class ChangeReceipt:
    """The single, privacy-minimal receipt for one manifest change (§17.6).

    ``domains``: as ``ManifestDiff.domains``. ``impacts``: ordered by ``IMPACTS``, then detail.
    """

    domains: tuple[str, ...]
    impacts: tuple[Impact, ...]

    @property
    def needs_decision(self) -> bool:
        """Whether any impact waits on a policy decision (resident or operator)."""
        return any(i.disposition == "decision-needed" for i in self.impacts)

    def to_json(self) -> JSONObject:
        return {"domains": list(self.domains), "impacts": [i.to_json() for i in self.impacts]}


def change_receipt(
    diff: ManifestDiff,
    *,
    old_grant: Grant,
    new_grant: Grant,
    feature_sets_before: Collection[str],
    feature_sets_after: Collection[str],
    accepted_ontologies: Collection[str] | None = None,
    rule_tag_references: Collection[str] = (),
    surface_changes: Collection[str] = (),
) -> ChangeReceipt:
    """Derive the receipt for one manifest change (MCPL §17.5 step 3, §17.6).

    Args:
        diff: from ``diff_manifests``.
        old_grant, new_grant: the grant before, and the grant after removals were applied.
        feature_sets_before, feature_sets_after: the sets available (enabled by §6.4
            derivation) before and after.
        accepted_ontologies: sets whose ontology the host had accepted; None (unknown) treats
            every changed ontology as accepted, the fail-closed reading.
        rule_tag_references: tags the host's consumer rules name.
        surface_changes: surfaces the caller saw change (``tools``, ``resources``, ...).

    Impacts: ``capability-revoked`` (applied) for each path in the old grant that the new
    grant lacks or the server stopped advertising; ``capability-expansion-pending``
    (decision-needed) for each newly advertised path, and each path the new grant adds (an
    addition never auto-grants); ``feature-degraded`` / ``feature-restored`` (applied) for sets
    that stopped / started being available; ``ontology-acceptance-invalidated`` (applied);
    ``ontology-reference-undeclared`` and ``surface-changed`` (informational).
    Never raises on well-typed input.
    """
    old_paths, new_paths = old_grant.paths, new_grant.paths
    before, after = frozenset(feature_sets_before), frozenset(feature_sets_after)
    invalidated = diff.ontologies_changed
    if accepted_ontologies is not None:
        invalidated &= frozenset(accepted_ontologies)
    found: dict[str, Collection[str]] = {
        "capability-revoked": (old_paths - new_paths) | (old_paths & diff.capabilities_removed),
        "capability-expansion-pending": (diff.capabilities_added | new_paths) - old_paths,
        "feature-degraded": before - after,
        "feature-restored": after - before,
        "ontology-acceptance-invalidated": invalidated,
        "ontology-reference-undeclared": diff.tags_undeclared & frozenset(rule_tag_references),
        "surface-changed": frozenset(surface_changes),
    }
    impacts = tuple(
        Impact(impact, DEFAULT_DISPOSITIONS[impact], detail)
        for impact in IMPACTS
        for detail in sorted(found[impact])
    )
    return ChangeReceipt(domains=diff.domains, impacts=impacts)

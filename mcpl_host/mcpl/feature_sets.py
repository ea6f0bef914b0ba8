"""Feature sets: reading declarations, deriving enabled/disabled, admitting by feature set.

Rules (MCPL §5.3, §6.1-§6.7; docs/protocol.md, "Feature-set declarations", "Feature-set name
patterns", "Policy requests"):

- **Declarations** live in the manifest's ``featureSets``. The spec shape is an object keyed by
  name, each value ``{description, uses, rollback?, tagOntology?}``. ``read_feature_sets``
  also reads the array-of-``{name, ...}`` shape real servers send (non-conforming per MCPL RFC-001;
  a note is recorded). The name is always a declared string: a map key (which wins over a
  differing ``name`` in its value), or an array entry's ``name``. **An array index never
  becomes a name**: entries without a non-empty string ``name`` are skipped. Empty or
  non-string names are skipped; for a repeated name the first declaration wins. Every such
  case adds a sentence to ``problems``. A map value that is not an object is kept as a
  declared set with invalid ``uses`` (it is declared, so it is disabled, not unknown).
- **Name patterns** (``FeatureSetPolicy``; docs/protocol.md, "Feature-set name patterns"),
  the reading of §6.3's ``memory.*``: a pattern ending in ``.*`` matches every name that
  starts with the text before the ``*`` (the prefix ``memory.``), at any depth, so
  ``memory.*`` matches ``memory.retrieval`` and ``memory.a.b`` but not ``memory`` itself nor
  ``memoryx``. A bare ``*`` matches every name. Any other pattern, including one with an
  inner ``*``, matches only the identical name. This differs on purpose from the one-segment
  capability ``*`` (``grants.matches``): the two vocabularies never mix (MCPL RFC-002 §4.1).
- **Derivation fails closed** (§6.4). Each declared set is checked in this order and the
  first failing check names its reason: ``invalid_uses`` (``uses`` absent, empty, not an
  array, or holding any value outside ``grants.VOCABULARY``, wildcards and typos
  included), ``capability_denied`` (a path in ``uses`` is not granted; the missing ones are
  listed), ``not_selected`` (``policy.enabled`` is set and names it nowhere),
  ``disabled_by_policy`` (``policy.disabled`` names it). Naming a set never widens anything.
- **Update params** (§5.3; docs/protocol.md, "Policy requests"). ``Derivation.policy_params``
  always sends ``effectiveCapabilities`` (sorted), ``deniedCapabilities`` when non-empty
  (never overlapping), and **always** both
  ``enabled`` and ``disabled`` (sorted names). **Decision:** ``enabled`` goes out even when the
  host policy sets no allowlist. It is exactly the host's derivation, so the server and the
  host's admission agree set by set, and any set the host could not read (skipped array
  entries, an unreadable ``featureSets``) is off on both sides: fail closed.
- **Admission by feature set** is ``admission.admit``'s (step 2); ``DeclarationMismatch`` is
  the diagnostic it returns when an enabled set exercises a capability its ``uses`` omits.
- **The 0.4 profile** (``derive(..., lenient=True)``; docs/protocol.md, "Compatibility
  profiles"): ``uses`` is informational. A set is never disabled for ``invalid_uses``; values
  outside the vocabulary are ignored; the known values still disable it when not granted
  (``capability_denied``), and the policy's selections apply as in MCPL 0.5.
  ``declaration_notes`` names what MCPL 0.5 would have disabled, one ``CompatNote`` per set.

Everything here is pure: no I/O, no clock, no logging; problems come back as sentences.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from mcpl_host.jsonrpc.values import JSONObject, is_array, is_mapping
from mcpl_host.mcpl.compat import CompatNote
from mcpl_host.mcpl.grants import VOCABULARY, Grant
from mcpl_host.mcpl.policy import PolicyOutcome
from mcpl_host.mcpl.server_shapes import is_name

__all__ = [
    "FEATURE_SET_METHODS",
    "DeclarationMismatch",
    "Derivation",
    "DisabledReason",
    "FeatureSet",
    "FeatureSetDeclarations",
    "FeatureSetPolicy",
    "declaration_notes",
    "derive",
    "name_matches",
    "read_feature_sets",
    "unavailable_feature_names",
]

#: Inbound methods that carry a ``featureSet`` and are admitted by it (MCPL §6.5).
FEATURE_SET_METHODS: frozenset[str] = frozenset({"push/event", "inference/request"})

Reason = Literal["invalid_uses", "capability_denied", "not_selected", "disabled_by_policy"]
Shape = Literal["object", "array", "absent", "invalid"]


@dataclass(frozen=True, slots=True)
class FeatureSet:
    """One declared feature set (MCPL §6.1).

    ``uses``: the string entries of the declared ``uses`` array, in order. ``uses_problem``:
    why the declared ``uses`` cannot be read as a list of strings (absent, not an array, a
    non-string entry), else None; such a set always derives ``invalid_uses``. ``rollback``:
    ``rollback is true`` (§8.1). ``tag_ontology``: the ``tagOntology`` value as sent (§16.4).
    ``raw``: the declaration as sent.
    """

    name: str
    description: str = ""
    uses: tuple[str, ...] = ()
    rollback: bool = False
    tag_ontology: Any = None
    raw: Any = None
    uses_problem: str | None = None


@dataclass(frozen=True, slots=True)
class FeatureSetDeclarations:
    """What ``read_feature_sets`` found: ``sets`` by name (declaration order), the ``shape``
    of ``featureSets`` (``object``, ``array``, ``absent`` or ``invalid``) and ``problems``."""

    sets: dict[str, FeatureSet] = field(default_factory=dict[str, FeatureSet])
    shape: Shape = "absent"
    problems: list[str] = field(default_factory=list[str])


def _read_one(name: str, value: object, where: str, problems: list[str]) -> FeatureSet:
    if not is_mapping(value):
        problems.append(f"{where}: the declaration is not an object; it is disabled (invalid_uses)")
        return FeatureSet(name=name, raw=value, uses_problem="the declaration is not an object")
    description = value.get("description")
    if not isinstance(description, str):
        problems.append(f"{where}: description is missing or not a string (MCPL §6.1)")
        description = ""
    uses_value = value.get("uses")
    uses_problem: str | None = None
    uses: tuple[str, ...] = ()
    if uses_value is None:
        uses_problem = "uses is absent"
    elif not is_array(uses_value):
        uses_problem = "uses is not an array"
    else:
        uses = tuple(item for item in uses_value if isinstance(item, str))
        if len(uses) != len(uses_value):
            uses_problem = "uses holds a non-string entry"
    return FeatureSet(
        name=name,
        description=description,
        uses=uses,
        rollback=value.get("rollback") is True,
        tag_ontology=value.get("tagOntology"),
        raw=value,
        uses_problem=uses_problem,
    )


def read_feature_sets(mcpl_manifest: object) -> FeatureSetDeclarations:
    """Read ``featureSets`` from an ``experimental.mcpl`` manifest (any JSON value; never raises).

    A missing manifest or member, or ``featureSets: null``, is shape ``absent`` with no problem.
    """
    if mcpl_manifest is None:
        return FeatureSetDeclarations()
    if not is_mapping(mcpl_manifest):
        return FeatureSetDeclarations(shape="invalid", problems=["the MCPL manifest is not an object"])
    declared = mcpl_manifest.get("featureSets")
    if declared is None:
        return FeatureSetDeclarations()
    sets: dict[str, FeatureSet] = {}
    problems: list[str] = []
    if is_mapping(declared):
        for key, value in declared.items():
            if not is_name(key):
                problems.append(f"featureSets key {key!r} is not a non-empty string; skipped")
                continue
            if is_mapping(value) and "name" in value and value.get("name") != key:
                problems.append(f"featureSets[{key!r}] has name {value.get('name')!r}; the key wins")
            sets[key] = _read_one(key, value, f"featureSets[{key!r}]", problems)
        return FeatureSetDeclarations(sets=sets, shape="object", problems=problems)
    if is_array(declared):
        problems.append(
            "featureSets is an array; the spec shape is an object keyed by name "
            "(RFC-001). Read by each entry's name"
        )
        for index, value in enumerate(declared):
            name = value.get("name") if is_mapping(value) else None
            if not is_name(name):
                # Never fall back to the index: "0" is not a name the server declared.
                problems.append(f"featureSets[{index}] has no non-empty string name; skipped")
                continue
            if name in sets:
                problems.append(f"featureSets[{index}] repeats the name {name!r}; the first wins")
                continue
            sets[name] = _read_one(name, value, f"featureSets[{index}] ({name!r})", problems)
        return FeatureSetDeclarations(sets=sets, shape="array", problems=problems)
    return FeatureSetDeclarations(
        shape="invalid", problems=["featureSets is neither an object nor an array; nothing is declared"]
    )


def name_matches(pattern: str, name: str) -> bool:
    """True when feature-set name pattern ``pattern`` covers ``name`` (MCPL §6.3;
    docs/protocol.md, "Feature-set name patterns").

    ``*`` matches every name; ``memory.*`` matches names starting with ``memory.`` at any
    depth; anything else matches only the identical name.
    """
    if pattern == "*":
        return True
    if pattern.endswith(".*") and "*" not in pattern[:-1]:
        return name.startswith(pattern[:-1])
    return pattern == name


@dataclass(frozen=True, slots=True)
class FeatureSetPolicy:
    """Host policy over feature-set names (MCPL §5.3; patterns per ``name_matches``).

    ``enabled``: None means no constraint; a tuple is an allowlist (unnamed sets derive
    ``not_selected``). ``disabled``: always subtracts. Neither can enable a set its grant does
    not cover.
    """

    enabled: tuple[str, ...] | None = None
    disabled: tuple[str, ...] = ()

    def selects(self, name: str) -> bool:
        return self.enabled is None or any(name_matches(p, name) for p in self.enabled)

    def disables(self, name: str) -> bool:
        return any(name_matches(p, name) for p in self.disabled)


@dataclass(frozen=True, slots=True)
class DisabledReason:
    """Why a set is disabled: ``reason`` (a §6.4 literal or ``disabled_by_policy``),
    ``missing_capabilities`` (for ``capability_denied``, in ``uses`` order), ``detail``
    (for ``invalid_uses``: what is wrong, for logs)."""

    reason: Reason
    missing_capabilities: tuple[str, ...] = ()
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Derivation:
    """The host's derivation: ``enabled`` names and ``disabled`` names with reasons."""

    enabled: frozenset[str] = frozenset()
    disabled: dict[str, DisabledReason] = field(default_factory=dict[str, DisabledReason])

    def policy_params(self, grant: Grant) -> JSONObject:
        """The full ``featureSets/update`` params (MCPL §5.3, §6.7; docs/protocol.md,
        "Policy requests"):
        ``effectiveCapabilities`` (sorted, always), ``deniedCapabilities`` (when non-empty),
        ``enabled`` and ``disabled`` (sorted names, always; see the module docstring)."""
        params = grant.policy_params()
        params["enabled"] = sorted(self.enabled)
        params["disabled"] = sorted(self.disabled)
        return params


def _invalid_uses(feature_set: FeatureSet) -> str | None:
    if feature_set.uses_problem is not None:
        return feature_set.uses_problem
    if not feature_set.uses:
        return "uses is empty"
    outside = [path for path in feature_set.uses if path not in VOCABULARY]
    if outside:
        return f"uses holds paths outside the vocabulary: {outside!r}"
    return None


def _judge(
    feature_set: FeatureSet, grant: Grant, policy: FeatureSetPolicy, lenient: bool
) -> DisabledReason | None:
    if not lenient:
        problem = _invalid_uses(feature_set)
        if problem is not None:
            return DisabledReason("invalid_uses", detail=problem)
    known = (p for p in feature_set.uses if p in VOCABULARY)
    missing = tuple(dict.fromkeys(p for p in known if not grant.allows(p)))
    if missing:
        return DisabledReason("capability_denied", missing_capabilities=missing)
    if not policy.selects(feature_set.name):
        return DisabledReason("not_selected")
    if policy.disables(feature_set.name):
        return DisabledReason("disabled_by_policy")
    return None


def derive(
    declarations: FeatureSetDeclarations, grant: Grant, policy: FeatureSetPolicy, *, lenient: bool = False
) -> Derivation:
    """Derive each declared set's state (MCPL §5.3, §6.4); ``lenient``: the 0.4 profile's
    reading, ``uses`` informational (module rules). Pure."""
    enabled: set[str] = set()
    disabled: dict[str, DisabledReason] = {}
    for name, feature_set in declarations.sets.items():
        verdict = _judge(feature_set, grant, policy, lenient)
        if verdict is None:
            enabled.add(name)
        else:
            disabled[name] = verdict
    return Derivation(enabled=frozenset(enabled), disabled=disabled)


def declaration_notes(declarations: FeatureSetDeclarations) -> list[CompatNote]:
    """What MCPL 0.5 would disable for ``invalid_uses`` and the 0.4 profile reads leniently:
    one note per set, ``unknown_uses`` (values outside the vocabulary) or
    ``unreadable_uses`` (absent, empty, not an array, a non-string entry)."""
    notes: list[CompatNote] = []
    for name, feature_set in declarations.sets.items():
        outside = tuple(dict.fromkeys(p for p in feature_set.uses if p not in VOCABULARY))
        if feature_set.uses_problem is not None:
            notes.append(CompatNote("unreadable_uses", feature_set=name, detail=feature_set.uses_problem))
        elif outside:
            notes.append(CompatNote("unknown_uses", feature_set=name, values=outside))
        elif not feature_set.uses:
            notes.append(CompatNote("unreadable_uses", feature_set=name, detail="uses is empty"))
    return notes


@dataclass(frozen=True, slots=True)
class DeclarationMismatch:
    """Diagnostic (MCPL §6.4 rule 2): ``feature_set`` is enabled, but its ``uses`` does not
    list ``capability``, which ``method`` exercises. The request was refused with ``-32002``."""

    method: str
    feature_set: str
    capability: str


def unavailable_feature_names(outcome: PolicyOutcome) -> tuple[str, ...]:
    """The ``featureSet`` names a receipt reports unavailable (MCPL §6.7), deduplicated in order.

    Testimony for logs and comparison with the derivation only: it never widens anything.
    """
    names = (e.get("featureSet") for e in outcome.unavailable_features if is_mapping(e))
    return tuple(dict.fromkeys(name for name in names if is_name(name)))

"""Manifest digest, diff, change receipt, shape check and fetch limiter (MCPL §17).

The digest tests read the MCPL conformance vectors, ``tests/vectors/manifest-digest-vectors.json``
(a copy of the specification's published file; provenance in ``tests/vectors/README.md``), or
the file named by ``MCPL_VECTORS``, as it is at test time: expected values are never copied
into this file.

Unpinned divergences (docs/protocol.md, "Manifest digest"): the reference implementations
disagree and no vector decides, so no test here asserts either side. They are:
``suggestedTreatment`` matchers with a non-identifier in the list form; member names of
objects inside arrays under a capability member; a non-string ``facet``.
``test_unpinned_divergences_stay_total`` only checks that each gives a digest or a
``DigestError``; the decisions are recorded in ``manifest._Normalizer``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpl_host.jsonrpc.errors import LocalProtocolError, MCPLHostError
from mcpl_host.mcpl.grants import Grant
from mcpl_host.mcpl.manifest import (
    IDENTIFIER_CHARSET,
    MANIFEST_NOT_OBJECT,
    NON_FINITE_NUMBER,
    NOT_JSON,
    REVISION_PATTERN,
    DigestError,
    ManifestFetchLimiter,
    canonical_manifest_bytes,
    manifest_digest,
    set_sort_key,
    sorted_set,
    validate_manifest,
)
from mcpl_host.mcpl.manifest_diff import (
    CHANGE_DOMAINS,
    DEFAULT_DISPOSITIONS,
    DISPOSITIONS,
    IMPACTS,
    ChangeReceipt,
    Impact,
    ManifestDiff,
    change_receipt,
    diff_manifests,
)

# --------------------------------------------------------------------------- vector file


def _vector_path() -> Path:
    """The vector file: ``MCPL_VECTORS`` when set, else the copy shipped in ``tests/vectors/``."""
    env = os.environ.get("MCPL_VECTORS")
    return Path(env) if env else Path(__file__).resolve().parent / "vectors" / "manifest-digest-vectors.json"


VECTOR_PATH = _vector_path()
FILE: dict[str, Any] = orjson.loads(VECTOR_PATH.read_bytes())
VECTORS: dict[str, dict[str, Any]] = {v["name"]: v for v in FILE["vectors"]}


def _params(items: list[dict[str, Any]]) -> list[Any]:
    return [pytest.param(item, id=item["name"]) for item in items]


POSITIVE = [v for v in VECTORS.values() if "digest" in v]
NEGATIVE = [v for v in VECTORS.values() if "expectError" in v]
CROSS = [v for v in VECTORS.values() if "sameDigestAs" in v or "differentDigestFrom" in v]


def test_vector_file_is_well_formed() -> None:
    names = [v["name"] for v in FILE["vectors"]]
    assert len(names) == len(set(names))
    for vector in FILE["vectors"]:
        assert ("digest" in vector) != ("expectError" in vector), vector["name"]
    # Every code the file names is one this module raises under the same name.
    assert set(FILE["errorCodes"]) <= {IDENTIFIER_CHARSET, MANIFEST_NOT_OBJECT}
    assert {v["expectError"] for v in NEGATIVE} <= set(FILE["errorCodes"])
    # The set paths the module hard-codes are exactly the file's.
    assert set(FILE["setValuedArrayPaths"]) == {
        "featureSets.*.uses",
        "featureSets.*.tagOntology.coreTags",
        "featureSets.*.tagOntology.tags.*.implies",
    }


@pytest.mark.parametrize("vector", _params(POSITIVE))
def test_digest_positive_vector(vector: dict[str, Any]) -> None:
    # canonicalJson, then sha256Hex, then digest: a failure says which step broke.
    canonical = canonical_manifest_bytes(vector["input"])
    # The file holds canonicalJson as a JSON string; loading the file parsed it.
    assert canonical == vector["canonicalJson"].encode("utf-8")
    assert hashlib.sha256(canonical).hexdigest() == vector["sha256Hex"]
    assert manifest_digest(vector["input"]) == vector["digest"]
    assert REVISION_PATTERN.fullmatch(vector["digest"])


@pytest.mark.parametrize("vector", _params(NEGATIVE))
def test_digest_negative_vector(vector: dict[str, Any]) -> None:
    with pytest.raises(DigestError) as caught:
        manifest_digest(vector["input"])
    assert caught.value.code == vector["expectError"]
    with pytest.raises(DigestError):
        canonical_manifest_bytes(vector["input"])


@pytest.mark.parametrize("vector", _params(CROSS))
def test_digest_cross_assertions(vector: dict[str, Any]) -> None:
    digest = manifest_digest(vector["input"])
    if "sameDigestAs" in vector:
        assert digest == manifest_digest(VECTORS[vector["sameDigestAs"]]["input"])
    if "differentDigestFrom" in vector:
        assert digest != manifest_digest(VECTORS[vector["differentDigestFrom"]]["input"])


@pytest.mark.parametrize("vector", _params(FILE["sortVectors"]))
def test_digest_sort_vector(vector: dict[str, Any]) -> None:
    assert sorted_set(vector["input"]) == vector["sorted"]
    assert sorted(set(vector["input"]), key=set_sort_key) == vector["sorted"]
    assert sorted_set(reversed(vector["input"])) == vector["sorted"]


# --------------------------------------------------------------------------- digest rules


@pytest.mark.parametrize("value", [[], "x", None, 1, 1.5, True, [{"version": "0.5"}]])
def test_non_object_manifest_is_refused(value: Any) -> None:
    with pytest.raises(DigestError) as caught:
        manifest_digest(value)
    assert caught.value.code == MANIFEST_NOT_OBJECT


def test_digest_error_is_a_host_error() -> None:
    assert issubclass(DigestError, MCPLHostError)


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf"), 10**400, -(10**400)])
def test_non_finite_numbers_are_refused(number: Any) -> None:
    with pytest.raises(DigestError) as caught:
        manifest_digest({"version": "0.5", "vendorX": {"limit": number}})
    assert caught.value.code == NON_FINITE_NUMBER


def test_integers_beyond_2_53_are_serialized_as_doubles() -> None:
    # RFC 8785 §3.2.2.3: 9007199254740993 -> 9007199254740992. rfc8785 alone refuses
    # any int past 2^53 - 1, so the module converts first.
    assert canonical_manifest_bytes({"n": 2**53 + 1}) == canonical_manifest_bytes({"n": float(2**53)})
    assert canonical_manifest_bytes({"n": 2**53}) == b'{"n":9007199254740992}'
    assert canonical_manifest_bytes({"n": 10**21}) == b'{"n":1e+21}'
    assert canonical_manifest_bytes({"n": -(2**53 - 1)}) == b'{"n":-9007199254740991}'


def test_booleans_are_not_numbers() -> None:
    assert canonical_manifest_bytes({"a": True, "b": 1, "c": 1.0}) == b'{"a":true,"b":1,"c":1}'


def test_member_names_sort_by_utf16_code_units() -> None:
    # RFC 8785 §3.2.3: U+1F642 (surrogates D83D DE42) sorts before U+FFFD in UTF-16; vendor
    # content, so no identifier check applies under "version".
    canonical = canonical_manifest_bytes({"version": {"\ufffd": 1, "\U0001f642": 2}})
    assert canonical == '{"version":{"\U0001f642":2,"\ufffd":1}}'.encode()


@pytest.mark.parametrize(
    "manifest",
    [
        {"vendorX": {"ok": 1, "bad\n": 1}},
        {"featureSets": {"f": {"uses": ["tools\n"]}}},  # fullmatch: "$" would accept "\n"
        {"featureSets": {"f": {"tagOntology": {"keyed": {"k": {"values": ["a b"]}}}}}},
        {"featureSets": {"f": {"tagOntology": {"tags": {"t:a": {"facet": "x y"}}}}}},
        {"featureSets": {"f": {"tagOntology": {"tags": {"t:a": {"implies": ["ok", ""]}}}}}},
        {"featureSets": {"f": {"tagOntology": {"coreTags": ["chat:dm", "chat dm"]}}}},
        {"bad name": True},
    ],
)
def test_identifier_positions_are_checked(manifest: dict[str, Any]) -> None:
    with pytest.raises(DigestError) as caught:
        manifest_digest(manifest)
    assert caught.value.code == IDENTIFIER_CHARSET


@pytest.mark.parametrize(
    "manifest",
    [
        {"version": "any text at all"},
        {"featureSets": {"f": {"description": "free text, with spaces", "uses": ["tools"]}}},
        {"featureSets": {"f": {"tagOntology": {"tags": {"t:a": {"desc": "free text"}}}}}},
        {"featureSets": {"f": {"uses": ["a b", 1]}}},  # non-string member: verbatim, unchecked
        {"vendorX": {"key": "values are not member names"}},
        {"featureSets": [{"name": "array form is verbatim", "uses": ["a b"]}]},
    ],
)
def test_non_identifier_positions_are_not_checked(manifest: dict[str, Any]) -> None:
    assert REVISION_PATTERN.fullmatch(manifest_digest(manifest))


def test_lone_surrogate_is_not_json() -> None:
    with pytest.raises(DigestError) as caught:
        manifest_digest({"version": "\ud800"})
    assert caught.value.code == NOT_JSON


@pytest.mark.parametrize(
    "manifest", [{1: "x"}, {"version": {1, 2}}, {"version": b"x"}, {"version": {2: 1}}, {"v": object()}]
)
def test_values_no_json_parser_produces_are_not_json(manifest: Any) -> None:
    with pytest.raises(DigestError) as caught:
        manifest_digest(manifest)
    assert caught.value.code == NOT_JSON


@pytest.mark.parametrize(
    "manifest",
    [
        {"featureSets": {"f": {"tagOntology": {"suggestedTreatment": [{"tagsAny": ["bad tag"]}]}}}},
        {"vendorX": [{"some key": 1}]},
        {"featureSets": {"f": {"tagOntology": {"tags": {"t:a": {"facet": 1}}}}}},
    ],
)
def test_unpinned_divergences_stay_total(manifest: dict[str, Any]) -> None:
    # No side asserted (docs/protocol.md, "Manifest digest"): only that the answer is a digest or a refusal.
    try:
        assert REVISION_PATTERN.fullmatch(manifest_digest(manifest))
    except DigestError as exc:
        assert exc.code == IDENTIFIER_CHARSET


# --------------------------------------------------------------------------- properties

IDENT = st.text(alphabet="abcXYZ019._:*-", min_size=1, max_size=6)
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6)
JSON = st.recursive(
    SCALARS,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=6), c, max_size=4),
    max_leaves=20,
)
FINITE = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
CAPABILITY = st.recursive(
    FINITE | st.text(max_size=4), lambda c: st.dictionaries(IDENT, c, max_size=3), max_leaves=8
)
ONTOLOGY = st.fixed_dictionaries(
    {},
    optional={
        "coreTags": st.lists(IDENT, max_size=4),
        "tags": st.dictionaries(
            IDENT,
            st.fixed_dictionaries(
                {}, optional={"implies": st.lists(IDENT, max_size=4), "desc": st.text(max_size=6)}
            ),
            max_size=3,
        ),
        "suggestedTreatment": st.lists(
            st.fixed_dictionaries({"tagsAny": st.lists(IDENT, max_size=3)}), max_size=2
        ),
    },
)
FEATURE_SET = st.fixed_dictionaries(
    {"description": st.text(max_size=6), "uses": st.lists(IDENT, max_size=5)},
    optional={"tagOntology": ONTOLOGY, "rollback": st.booleans()},
)
MANIFEST = st.fixed_dictionaries(
    {"version": st.just("0.5")},
    optional={
        "featureSets": st.dictionaries(IDENT, FEATURE_SET, max_size=3),
        "revision": st.text(max_size=8),
    },
).flatmap(
    lambda m: st.dictionaries(
        IDENT.filter(lambda k: k not in m and k != "featureSets"), CAPABILITY, max_size=3
    ).map(lambda caps: {**caps, **m})
)


def _scramble(value: Any, path: tuple[str, ...] = ()) -> Any:
    """Reverse every object's member order; reverse and duplicate inside set arrays only."""
    set_path = (
        (len(path) == 3 and path[0] == "featureSets" and path[2] == "uses")
        or (len(path) == 4 and path[0] == "featureSets" and path[2:] == ("tagOntology", "coreTags"))
        or (
            len(path) == 6
            and path[0] == "featureSets"
            and path[2:4] == ("tagOntology", "tags")
            and path[5] == "implies"
        )
    )
    if isinstance(value, dict):
        return {k: _scramble(value[k], (*path, k)) for k in reversed(list(value))}
    if isinstance(value, list):
        items = [_scramble(v, (*path, "[]")) for v in value]
        return list(reversed(items)) + items[:1] if set_path else items
    return value


@given(JSON)
def test_digest_raises_nothing_but_digest_error(value: Any) -> None:
    try:
        digest = manifest_digest(value)
    except DigestError as exc:
        assert exc.code in {IDENTIFIER_CHARSET, MANIFEST_NOT_OBJECT, NON_FINITE_NUMBER, NOT_JSON}
    else:
        assert REVISION_PATTERN.fullmatch(digest)


@given(MANIFEST)
def test_digest_is_invariant_under_member_and_set_order(manifest: dict[str, Any]) -> None:
    digest = manifest_digest(manifest)
    assert manifest_digest(_scramble(manifest)) == digest
    # Idempotent: the canonical form, parsed back, has the same digest.
    assert manifest_digest(orjson.loads(canonical_manifest_bytes(manifest))) == digest
    assert diff_manifests(manifest, _scramble(manifest)) == ManifestDiff()


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_canonical_numbers_round_trip(number: float) -> None:
    # Integer-valued doubles come back as JSON integers ("42729806833882570"): compare as doubles.
    assert float(orjson.loads(canonical_manifest_bytes({"n": number}))["n"]) == number


# --------------------------------------------------------------------------- diff

BASE = {
    "version": "0.5",
    "pushEvents": True,
    "channels": {"publish": True, "incoming": True},
    "featureSets": {
        "chat": {
            "description": "Chat",
            "uses": ["channels.publish", "channels.incoming"],
            "tagOntology": {"tags": {"chat:x": {"desc": "x"}, "demo:y": {"desc": "y"}}},
        },
        "push": {"description": "Push", "uses": ["pushEvents"]},
    },
}


def _with(**members: Any) -> dict[str, Any]:
    return {**json.loads(json.dumps(BASE)), **members}


def _sets(**sets: Any) -> dict[str, Any]:
    return _with(featureSets={**json.loads(json.dumps(BASE["featureSets"])), **sets})


@pytest.mark.parametrize(
    ("new", "expected"),
    [
        pytest.param(_with(revision="sha256:" + "A" * 43), ManifestDiff(), id="revision-is-no-change"),
        pytest.param(_with(version="0.6"), ManifestDiff(), id="version-is-no-domain"),
        pytest.param(
            _sets(push={"uses": ["pushEvents", "pushEvents"], "description": "Push"}),
            ManifestDiff(),
            id="set-order-and-duplicates-are-no-change",
        ),
        pytest.param(
            _with(pushEvents=False),
            ManifestDiff(domains=("capabilities",), capabilities_removed=frozenset({"pushEvents"})),
            id="capability-removed",
        ),
        pytest.param(
            _with(modelInfo=True),
            ManifestDiff(domains=("capabilities",), capabilities_added=frozenset({"modelInfo"})),
            id="capability-added",
        ),
        pytest.param(
            _with(pushEvents=1),
            ManifestDiff(domains=("capabilities",), capabilities_removed=frozenset({"pushEvents"})),
            id="true-is-not-1",
        ),
        pytest.param(_with(vendorX={}), ManifestDiff(domains=("capabilities",)), id="empty-member-appears"),
        pytest.param(
            _sets(push={"description": "Pushing", "uses": ["pushEvents"]}),
            ManifestDiff(domains=("featureSets",)),
            id="description-only",
        ),
        pytest.param(
            _sets(push={"description": "Push", "uses": ["pushEvents", "tools"]}),
            ManifestDiff(domains=("featureSets",), feature_sets_changed=frozenset({"push"})),
            id="uses-changed",
        ),
        pytest.param(
            _sets(more={"description": "M", "uses": ["tools"]}),
            ManifestDiff(domains=("featureSets",), feature_sets_added=frozenset({"more"})),
            id="feature-set-added",
        ),
        pytest.param(
            _with(featureSets={"push": BASE["featureSets"]["push"]}),
            ManifestDiff(
                domains=("featureSets", "tagOntology"),
                feature_sets_removed=frozenset({"chat"}),
                ontologies_changed=frozenset({"chat"}),
                tags_undeclared=frozenset({"chat:x", "demo:y"}),
            ),
            id="feature-set-with-ontology-removed",
        ),
        pytest.param(
            _sets(chat={**BASE["featureSets"]["chat"], "tagOntology": {"tags": {"chat:x": {"desc": "x"}}}}),
            ManifestDiff(
                domains=("tagOntology",),
                ontologies_changed=frozenset({"chat"}),
                tags_undeclared=frozenset({"demo:y"}),
            ),
            id="ontology-narrowed",
        ),
    ],
)
def test_manifest_diff(new: dict[str, Any], expected: ManifestDiff) -> None:
    assert diff_manifests(BASE, new) == expected
    assert diff_manifests(BASE, new).changed == bool(expected.domains)


@pytest.mark.parametrize(
    ("old", "new", "domains"),
    [
        ({"version": "0.5"}, {"version": "0.5", "featureSets": {}}, ("featureSets", "tagOntology")),
        ({"version": "0.5", "featureSets": {}}, {"version": "0.5"}, ("featureSets", "tagOntology")),
        (
            {"version": "0.5", "featureSets": {"f": {"uses": []}}},
            {"version": "0.5", "featureSets": {"f": {"uses": [], "tagOntology": {}}}},
            ("tagOntology",),
        ),
        ({"version": "0.5", "featureSets": None}, {"version": "0.5"}, ("featureSets", "tagOntology")),
        ({"version": "0.5", "x": 1}, {"version": "0.5", "x": 1.0}, ()),
        ({"version": "0.5"}, {"version": "0.5", "x": None}, ("capabilities",)),
    ],
)
def test_absent_and_empty_members_differ(
    old: dict[str, Any], new: dict[str, Any], domains: tuple[str, ...]
) -> None:
    assert diff_manifests(old, new).domains == domains


def test_removals_are_found_in_a_partly_invalid_manifest() -> None:
    new = {
        "version": 5,
        "bad key": True,
        "channels": {"publish": True},
        "featureSets": {"bad/name": {"uses": "tools"}, "push": {"uses": [1]}},
    }
    diff = diff_manifests(BASE, new)
    assert diff.capabilities_removed == {"pushEvents", "channels.incoming"}
    assert diff.feature_sets_removed == {"chat"}
    assert diff.feature_sets_changed == {"push"}


def test_tools_flag_is_passed_through() -> None:
    assert diff_manifests({"version": "0.5"}, {"version": "0.5"}, tools=True) == ManifestDiff()
    assert diff_manifests({}, {"tools": True}).capabilities_added == frozenset({"tools"})
    assert diff_manifests({}, {"tools": True}, tools=True).capabilities_added == frozenset()


@pytest.mark.parametrize("bad", [None, [], "x"])
def test_unparseable_fetch_is_refused(bad: Any) -> None:
    with pytest.raises(DigestError) as caught:
        diff_manifests(BASE, bad)
    assert caught.value.code == MANIFEST_NOT_OBJECT


# --------------------------------------------------------------------------- receipt

GRANT = Grant(
    paths=frozenset({"pushEvents", "channels.publish"}),
    advertised=frozenset({"pushEvents", "channels.publish", "channels.incoming"}),
)


def _receipt(
    diff: ManifestDiff,
    new_grant: Grant = GRANT,
    before: set[str] | None = None,
    after: set[str] | None = None,
    **extra: Any,
) -> list[tuple[str, str, str]]:
    receipt = change_receipt(
        diff,
        old_grant=GRANT,
        new_grant=new_grant,
        feature_sets_before=before or {"chat"},
        feature_sets_after=after or {"chat"},
        **extra,
    )
    return [(i.impact, i.disposition, i.detail) for i in receipt.impacts]


@pytest.mark.parametrize(
    ("diff", "new_grant", "kwargs", "expected"),
    [
        pytest.param(ManifestDiff(), GRANT, {}, [], id="no-change-no-impacts"),
        pytest.param(
            ManifestDiff(capabilities_removed=frozenset({"pushEvents"})),
            Grant(paths=frozenset({"channels.publish"})),
            {},
            [("capability-revoked", "applied", "pushEvents")],
            id="revoked",
        ),
        pytest.param(
            ManifestDiff(capabilities_removed=frozenset({"pushEvents"})),
            GRANT,
            {},
            [("capability-revoked", "applied", "pushEvents")],
            id="revoked-even-if-grant-kept-it",
        ),
        pytest.param(
            ManifestDiff(capabilities_added=frozenset({"modelInfo"})),
            GRANT,
            {},
            [("capability-expansion-pending", "decision-needed", "modelInfo")],
            id="addition-pending",
        ),
        pytest.param(
            ManifestDiff(capabilities_added=frozenset({"modelInfo"})),
            Grant(paths=GRANT.paths | {"modelInfo"}),
            {},
            [("capability-expansion-pending", "decision-needed", "modelInfo")],
            id="addition-never-auto-grants",
        ),
        pytest.param(
            ManifestDiff(),
            GRANT,
            {"before": {"chat", "push"}, "after": {"chat"}},
            [("feature-degraded", "applied", "push")],
            id="degraded",
        ),
        pytest.param(
            ManifestDiff(),
            GRANT,
            {"before": {"chat"}, "after": {"chat", "push"}},
            [("feature-restored", "applied", "push")],
            id="restored",
        ),
        pytest.param(
            ManifestDiff(ontologies_changed=frozenset({"chat", "other"})),
            GRANT,
            {},
            [
                ("ontology-acceptance-invalidated", "applied", "chat"),
                ("ontology-acceptance-invalidated", "applied", "other"),
            ],
            id="ontology-unknown-acceptance",
        ),
        pytest.param(
            ManifestDiff(ontologies_changed=frozenset({"chat", "other"})),
            GRANT,
            {"accepted_ontologies": {"chat"}},
            [("ontology-acceptance-invalidated", "applied", "chat")],
            id="ontology-accepted-only",
        ),
        pytest.param(
            ManifestDiff(tags_undeclared=frozenset({"demo:y", "demo:z"})),
            GRANT,
            {"rule_tag_references": {"demo:y"}},
            [("ontology-reference-undeclared", "informational", "demo:y")],
            id="undeclared",
        ),
        pytest.param(
            ManifestDiff(),
            GRANT,
            {"surface_changes": {"tools"}},
            [("surface-changed", "informational", "tools")],
            id="surface",
        ),
    ],
)
def test_change_receipt(
    diff: ManifestDiff, new_grant: Grant, kwargs: dict[str, Any], expected: list[tuple[str, str, str]]
) -> None:
    assert _receipt(diff, new_grant, **kwargs) == expected


def test_one_receipt_orders_impacts_by_the_closed_set() -> None:
    old = BASE
    new = _with(
        pushEvents=False,
        modelInfo=True,
        featureSets={"chat": {**BASE["featureSets"]["chat"], "tagOntology": {}}},
    )
    diff = diff_manifests(old, new)
    receipt = change_receipt(
        diff,
        old_grant=GRANT,
        new_grant=Grant(paths=frozenset({"channels.publish"})),
        feature_sets_before={"chat", "push"},
        feature_sets_after={"chat"},
        rule_tag_references={"demo:y"},
    )
    assert isinstance(receipt, ChangeReceipt)
    assert receipt.domains == ("capabilities", "featureSets", "tagOntology")
    assert [i.impact for i in receipt.impacts] == [
        "capability-revoked",
        "capability-expansion-pending",
        "feature-degraded",
        "ontology-acceptance-invalidated",
        "ontology-reference-undeclared",
    ]
    assert receipt.needs_decision
    assert receipt.to_json()["impacts"][0] == {
        "impact": "capability-revoked",
        "disposition": "applied",
        "detail": "pushEvents",
    }


def test_receipt_vocabulary_is_closed() -> None:
    assert len(IMPACTS) == 7 and len(set(IMPACTS)) == 7
    assert set(DEFAULT_DISPOSITIONS) == set(IMPACTS)
    assert set(DEFAULT_DISPOSITIONS.values()) <= set(DISPOSITIONS)
    assert CHANGE_DOMAINS == ("capabilities", "featureSets", "tagOntology")
    with pytest.raises(LocalProtocolError):
        Impact("requires-review", "applied", "x")
    with pytest.raises(LocalProtocolError):
        Impact("surface-changed", "ignored", "x")


# --------------------------------------------------------------------------- validation, limiter


@pytest.mark.parametrize(
    ("value", "problems"),
    [
        ({"version": "0.5"}, 0),
        ({"version": "0.5", "revision": "sha256:" + "a" * 43}, 0),
        ({"version": "0.5", "revision": "sha256:" + "-_" * 21 + "Z"}, 0),
        ([], 1),
        (None, 1),
        ({}, 1),
        ({"version": 5}, 1),
        ({"version": "0.5", "revision": "sha256:" + "a" * 42}, 1),
        ({"version": "0.5", "revision": "sha256:" + "a" * 43 + "\n"}, 1),
        ({"version": "0.5", "revision": "sha1:" + "a" * 43}, 1),
        ({"version": "0.5", "revision": "sha256:" + "a" * 42 + "="}, 1),
        ({"version": "0.5", "revision": None}, 1),
        ({"revision": 7}, 2),
    ],
)
def test_validate_manifest(value: Any, problems: int) -> None:
    assert len(validate_manifest(value)) == problems


def test_validate_never_parses_revision_beyond_its_shape() -> None:
    assert validate_manifest({"version": "0.5", "revision": manifest_digest({"x": 1})}) == []


@pytest.mark.parametrize(
    ("max_fetches", "per_seconds", "times", "expected"),
    [
        (2, 10.0, [0, 1, 2], [True, True, False]),
        (2, 10.0, [0, 1, 10, 11, 11.5], [True, True, True, True, False]),
        (1, 5.0, [0, 4.999, 5.0, 5.0], [True, False, True, False]),
        (3, 1.0, [0, 0, 0, 0, 2], [True, True, True, False, True]),
    ],
)
def test_fetch_limiter(
    max_fetches: int, per_seconds: float, times: list[float], expected: list[bool]
) -> None:
    limiter = ManifestFetchLimiter(max_fetches, per_seconds)
    assert [limiter.allow(t) for t in times] == expected


def test_fetch_limiter_defaults_and_arguments() -> None:
    limiter = ManifestFetchLimiter()
    assert limiter.max_fetches >= 1 and limiter.per_seconds > 0
    assert "ManifestFetchLimiter" in repr(limiter)
    with pytest.raises(ValueError):
        ManifestFetchLimiter(0, 1.0)
    with pytest.raises(ValueError):
        ManifestFetchLimiter(1, 0.0)

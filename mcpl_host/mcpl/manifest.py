"""The server manifest: canonical digest, shape check, and the re-fetch rate limit.

Rules (MCPL §17.1-§17.8; docs/protocol.md, "Manifest digest" and "Manifest changes"):

- The manifest is the whole ``experimental.mcpl`` object, as sent (§17.1). Its ``revision`` is
  server-authored and untrusted: compare for equality only, never parse or order it, never
  take it as proof that nothing changed. The host's diff (``manifest_diff``) decides.
- Digest (§17.2)::

      "sha256:" + base64url_unpadded(SHA-256(JCS(normalize(manifest minus root "revision"))))

  1. Input must be an object, else ``DigestError("manifest_not_object")``.
  2. Only the root ``revision`` is stripped; ``version``, ``false``, ``null``, empty objects and
     vendor extensions are content. Boolean shorthand is never expanded.
  3. Set semantics (dedupe, sort by UTF-8 bytes) apply only at ``featureSets.*.uses``,
     ``featureSets.*.tagOntology.coreTags`` and ``featureSets.*.tagOntology.tags.*.implies``,
     only when ``featureSets`` is an object and the value is an all-string array. Anything else
     there (a string, an array with a non-string member, the array-form ``featureSets``) is
     hashed verbatim. Every other array is a list and keeps its order.
  4. Identifier check, the only refusal besides 1 and non-finite numbers: an identifier must be
     a non-empty run of ``[A-Za-z0-9._:*-]``, else ``DigestError("identifier_charset")``. The
     positions are the vector file's ``identifierPositions`` plus capability member names at
     every depth (see ``_Normalizer``). Free text (``description``, ``desc``) is never checked.
  5. JCS is RFC 8785, done by the ``rfc8785`` library; numbers are pre-normalized for it.
  6. The digest never gates acceptance: a mismatch with the server's ``revision`` is a
     conformance defect to log, and the manifest is still used (§17.2).
- A host bounds manifest fetches per connection; notifications over the bound are dropped,
  never fetched (§17.8): ``ManifestFetchLimiter`` (``Limits.max_manifest_fetches`` within
  ``manifest_fetch_window_seconds``).
- The work on one manifest is bounded before anything reads it (``manifest_limit_problem``):
  its JSON bytes, its nesting, the feature sets it declares, the entries of each set array
  and the tags of each ontology (``Limits.max_manifest_*``, ``max_feature_sets``,
  ``max_ontology_tags``). Digest, diff and derivation then walk at most that much; a
  manifest beyond a bound is not used (docs/protocol.md, "Manifest changes").

Everything here is pure: no I/O, no clock (``now`` is passed in), no logging.
"""

from __future__ import annotations

import base64
import math
import re
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import rfc8785

from mcpl_host.json_size import json_depth_beyond, json_size
from mcpl_host.jsonrpc.errors import MCPLHostError
from mcpl_host.jsonrpc.values import JSONObject, is_array, is_list_or_tuple, is_mapping
from mcpl_host.limits import DEFAULT_MANIFEST_FETCH_WINDOW_SECONDS, DEFAULT_MAX_MANIFEST_FETCHES, Limits

__all__ = [
    "DEFAULT_MANIFEST_FETCHES",
    "DEFAULT_MANIFEST_FETCH_WINDOW_SECONDS",
    "IDENTIFIER_CHARSET",
    "MANIFEST_NOT_OBJECT",
    "NON_FINITE_NUMBER",
    "NOT_JSON",
    "REVISION_PATTERN",
    "DigestError",
    "ManifestFetchLimiter",
    "canonical_manifest_bytes",
    "manifest_digest",
    "manifest_limit_problem",
    "set_sort_key",
    "sorted_set",
    "validate_manifest",
]

#: DigestError codes. The first two are the vector file's ``errorCodes``; the third is the
#: name the specification's reference generator gives a NaN or infinity, which RFC 8785
#: §3.2.2.3 refuses.
IDENTIFIER_CHARSET = "identifier_charset"
MANIFEST_NOT_OBJECT = "manifest_not_object"
NON_FINITE_NUMBER = "non_finite_number"
#: Project code: a value that is no JSON value at all (a non-string member name, a set, bytes,
#: or a string with a lone surrogate, which RFC 8785 / I-JSON forbid). orjson never produces
#: one from the wire, so only a caller's hand-built value can raise it.
NOT_JSON = "not_json"

#: App. B.3: the shape of a ``revision`` value.
REVISION_PATTERN = re.compile(r"sha256:[A-Za-z0-9_-]{43}")
#: §17.2: an identifier. Used with ``fullmatch``: ``re.match`` with ``$`` would accept a
#: trailing newline.
_IDENTIFIER = re.compile(r"[A-Za-z0-9._:*-]+")
# Root members that are not capabilities (§17.1).
_ROOT_NOT_CAPABILITIES = frozenset({"version", "revision", "featureSets"})
_MATCHERS = ("tagsAny", "tagsAll", "tagsNone")
# RFC 8785 serializes numbers as IEEE doubles; rfc8785 refuses ints beyond +-(2^53 - 1).
_MAX_EXACT_INT = 2**53 - 1

#: §17.8: default bound on ``mcpl/manifest`` fetches per connection: this many per window
#: (``Limits.max_manifest_fetches``, ``manifest_fetch_window_seconds``).
DEFAULT_MANIFEST_FETCHES = DEFAULT_MAX_MANIFEST_FETCHES


class DigestError(MCPLHostError):
    """The canonical digest cannot be computed (MCPL §17.2).

    ``code``: ``identifier_charset``, ``manifest_not_object``, ``non_finite_number`` or
    ``not_json``. ``where``: the position, for diagnostics only (it holds server text: log it
    through ``log_value``). The digest never gates acceptance of a manifest.
    """

    def __init__(self, code: str, where: str = "") -> None:
        super().__init__(f"{code}: {where}" if where else code)
        self.code = code
        self.where = where


def set_sort_key(value: str) -> bytes:
    """The §17.2 set comparator: UTF-8 bytes (code-point order); total (``surrogatepass``)."""
    return value.encode("utf-8", "surrogatepass")


def sorted_set(values: Iterable[str]) -> list[str]:
    """Set semantics of §17.2: duplicates removed, then ascending by ``set_sort_key``."""
    return sorted(set(values), key=set_sort_key)


def _is_identifier(value: object) -> bool:
    return isinstance(value, str) and _IDENTIFIER.fullmatch(value) is not None


class _Normalizer:
    """One walk: copies the manifest, applies set semantics, checks identifiers (when
    ``check``), and prepares numbers for rfc8785.

    Identifier positions, against the vector file's ``identifierPositions`` (``#key``: member
    names, ``[]``: elements) and the identifier positions of §17.2:

    - every root member name except ``version``/``revision``/``featureSets``, and every member
      name beneath one (vendor extensions included);
    - ``featureSets.#key``; ``uses[]``, ``coreTags[]``, ``tags.*.implies[]`` (only when the
      array is all strings, else verbatim); ``tags.#key``; ``keyed.#key``;
      ``keyed.*.values[]``; the ``suggestedTreatment`` matchers ``tagsAny``/``tagsAll``/
      ``tagsNone``; ``tags.*.facet`` (in the vector file's list, not in SPEC's).

    Unpinned divergences (docs/protocol.md, "Manifest digest"; no vector decides them, so
    the tests assert neither side). Decisions:

    - Matchers in the *list* form of ``suggestedTreatment`` (the form the vectors use): checked
      (refused), as SPEC's text and the TS library do; the Python reference never reaches them.
      The object form (``suggestedTreatment.<rule>.tagsAny``) is checked too.
    - Member names of objects inside arrays under a capability member
      (``{"vendorX": [{"some key": 1}]}``): checked (refused), as the Python reference does and
      as "every depth ... everything beneath it" reads; the TS library does not descend arrays.
    - A non-string ``facet``: hashed verbatim, as the Python reference does (TS refuses). The
      check applies to identifier *strings*, like the struck ``set_member_not_string`` rule:
      refusal exists to keep the UTF-8/UTF-16 sort divergence unreachable, and a non-string
      cannot reach a sort. For the same reason a non-string element of a list position
      (``keyed.*.values``, the matchers) is hashed and not checked (the TS library's rule).
    """

    __slots__ = ("check",)

    def __init__(self, check: bool) -> None:
        self.check = check

    def ident(self, value: object, where: str) -> None:
        if self.check and not _is_identifier(value):
            # Only member names reach here as non-strings, and JSON has none of those.
            code = IDENTIFIER_CHARSET if isinstance(value, str) else NOT_JSON
            raise DigestError(code, where)

    def manifest(self, manifest: Mapping[str, object]) -> JSONObject:
        out: JSONObject = {}
        for key, value in manifest.items():
            if key == "revision":
                continue  # Root only: a nested "revision" is content.
            if key == "featureSets":
                out[key] = self.feature_sets(value)
            elif key == "version":
                out[key] = self.plain(value)
            else:
                self.ident(key, str(key))
                out[key] = self.capability(value, str(key))
        return out

    def capability(self, value: object, where: str) -> Any:
        if is_mapping(value):
            out: dict[Any, Any] = {}
            for key, child in value.items():
                self.ident(key, f"{where}.{key}")
                out[key] = self.capability(child, f"{where}.{key}")
            return out
        if is_list_or_tuple(value):
            return [self.capability(child, f"{where}[]") for child in value]
        return self.plain(value)

    def feature_sets(self, value: object) -> Any:
        if not is_mapping(value):
            return self.plain(value)  # The array form is non-conforming: hashed verbatim.
        out: dict[Any, Any] = {}
        for name, decl in value.items():
            where = f"featureSets.{name}"
            self.ident(name, where)
            if is_mapping(decl):
                out[name] = {
                    key: self.set_array(child, f"{where}.uses")
                    if key == "uses"
                    else self.ontology(child, f"{where}.tagOntology")
                    if key == "tagOntology"
                    else self.plain(child)
                    for key, child in decl.items()
                }
            else:
                out[name] = self.plain(decl)
        return out

    def ontology(self, value: object, where: str) -> Any:
        if not is_mapping(value):
            return self.plain(value)
        out: dict[Any, Any] = {}
        for key, child in value.items():
            if key == "coreTags":
                out[key] = self.set_array(child, f"{where}.coreTags")
            elif key == "tags" and is_mapping(child):
                out[key] = {
                    tag: self.tag(descriptor, f"{where}.tags.{tag}", tag) for tag, descriptor in child.items()
                }
            elif key == "keyed" and is_mapping(child):
                out[key] = {
                    name: self.keyed(descriptor, f"{where}.keyed.{name}", name)
                    for name, descriptor in child.items()
                }
            elif key == "suggestedTreatment" and is_mapping(child):
                out[key] = {k: self.rule(rule, f"{where}.suggestedTreatment") for k, rule in child.items()}
            elif key == "suggestedTreatment" and is_list_or_tuple(child):
                out[key] = [self.rule(rule, f"{where}.suggestedTreatment") for rule in child]
            else:
                out[key] = self.plain(child)
        return out

    def tag(self, descriptor: object, where: str, tag: object) -> Any:
        self.ident(tag, where)
        if not is_mapping(descriptor):
            return self.plain(descriptor)
        out: dict[Any, Any] = {}
        for key, child in descriptor.items():
            if key == "implies":
                out[key] = self.set_array(child, f"{where}.implies")
            else:
                if key == "facet" and isinstance(child, str):
                    self.ident(child, f"{where}.facet")
                out[key] = self.plain(child)
        return out

    def keyed(self, descriptor: object, where: str, name: object) -> Any:
        self.ident(name, where)
        if not is_mapping(descriptor):
            return self.plain(descriptor)
        return {
            key: self.identifier_list(child, f"{where}.values") if key == "values" else self.plain(child)
            for key, child in descriptor.items()
        }

    def rule(self, rule: object, where: str) -> Any:
        if not is_mapping(rule):
            return self.plain(rule)
        return {
            key: self.identifier_list(child, f"{where}.{key}") if key in _MATCHERS else self.plain(child)
            for key, child in rule.items()
        }

    def identifier_list(self, value: object, where: str) -> Any:
        """A list position whose string elements are identifiers; order is kept."""
        if is_list_or_tuple(value):
            for item in value:
                if isinstance(item, str):
                    self.ident(item, f"{where}[]")
        return self.plain(value)

    def set_array(self, value: object, where: str) -> Any:
        """A set position: all-string arrays are checked, deduped and sorted; else verbatim."""
        if is_list_or_tuple(value) and all(isinstance(item, str) for item in value):
            for item in value:
                self.ident(item, f"{where}[]")
            return sorted_set(value)
        return self.plain(value)

    def plain(self, value: object) -> Any:
        """Content hashed as it is; only numbers are prepared for rfc8785."""
        if value is None or isinstance(value, (bool, str)):
            return value  # bool before int: True is an int in Python.
        if isinstance(value, int):
            if -_MAX_EXACT_INT <= value <= _MAX_EXACT_INT:
                return int(value)
            # rfc8785 raises IntegerDomainError beyond 2^53 - 1, even for 2^53 itself, which a
            # double holds exactly. RFC 8785 (§3.2.2.3) serializes every number as an
            # IEEE double (9007199254740993 -> 9007199254740992), so convert first; rfc8785
            # then writes the ES6 form of the double. Past the double range JSON.parse gives
            # Infinity, which JCS refuses.
            try:
                return float(value)
            except OverflowError:
                if self.check:
                    raise DigestError(NON_FINITE_NUMBER, repr(value)[:40]) from None
                return value
        if isinstance(value, float):
            if self.check and not math.isfinite(value):
                raise DigestError(NON_FINITE_NUMBER, repr(value))
            return float(value)
        if is_mapping(value):
            for key in value:
                if not isinstance(key, str):
                    raise DigestError(NOT_JSON, f"member name {type(key).__name__}")
            return {key: self.plain(child) for key, child in value.items()}
        if is_list_or_tuple(value):
            return [self.plain(child) for child in value]
        raise DigestError(NOT_JSON, type(value).__name__)


def _normalized(manifest: object, *, check: bool) -> JSONObject:
    if not is_mapping(manifest):
        raise DigestError(MANIFEST_NOT_OBJECT, type(manifest).__name__)
    for key in manifest:
        if not isinstance(key, str):
            raise DigestError(NOT_JSON, f"member name {type(key).__name__}")
    return _Normalizer(check).manifest(manifest)


def canonical_manifest_bytes(manifest: object) -> bytes:
    """The exact bytes the digest hashes: JCS (RFC 8785) of the normalized manifest (§17.2).

    Args:
        manifest: the ``experimental.mcpl`` object as received (a parsed JSON value).

    Raises:
        DigestError: ``manifest_not_object``, ``identifier_charset``, ``non_finite_number``
            or ``not_json`` (§17.2, RFC 8785). Never anything else on a JSON value.
    """
    normalized = _normalized(manifest, check=True)
    try:
        return rfc8785.dumps(normalized)
    except rfc8785.CanonicalizationError as exc:
        # Pre-normalization leaves rfc8785 one refusal: a lone surrogate (I-JSON).
        raise DigestError(NOT_JSON, type(exc).__name__) from None


def manifest_digest(manifest: object) -> str:
    """The canonical revision of ``manifest``: ``"sha256:" + base64url_unpadded(SHA-256(
    canonical_manifest_bytes(manifest)))`` (MCPL §17.2). 50 ASCII characters.

    Raises:
        DigestError: as ``canonical_manifest_bytes``.
    """
    import hashlib  # OpenSSL's: the first manifest only

    digest = hashlib.sha256(canonical_manifest_bytes(manifest)).digest()
    return "sha256:" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def normalized_for_diff(manifest: Mapping[str, object]) -> JSONObject:
    """The digest's normalization without its refusals, for comparing manifests (§17.5):
    set arrays sorted, root ``revision`` removed, no identifier or number check. Raises
    ``DigestError`` only for a non-object or a non-JSON value."""
    return _normalized(manifest, check=False)


def validate_manifest(value: object) -> list[str]:
    """Shape problems of a fetched manifest (MCPL §17.1, App. B.3). Never raises.

    Returns a list of plain-English problems (empty when none): not an object; ``version``
    missing or not a string; ``revision`` present but not ``sha256:`` + 43 base64url
    characters. ``uses`` and the grant are judged elsewhere (§6.4 derivation).
    """
    if not is_mapping(value):
        return ["manifest is not an object"]
    problems: list[str] = []
    if "version" not in value:
        problems.append("`version` is missing")
    elif not isinstance(value["version"], str):
        problems.append("`version` is not a string")
    revision = value.get("revision")
    if "revision" in value and not (isinstance(revision, str) and REVISION_PATTERN.fullmatch(revision)):
        problems.append("`revision` does not match ^sha256:[A-Za-z0-9_-]{43}$")
    return problems


def manifest_limit_problem(manifest: object, limits: Limits) -> tuple[str, str] | None:
    """``(sentence, Limits field)`` for the first bound ``manifest`` (an ``experimental.mcpl``
    value) is over, or None (module rules). Checked in this order, each before the next
    walks further: ``max_manifest_bytes`` (``json_size``), ``max_manifest_depth``,
    ``max_feature_sets`` (members of ``featureSets``, object or array form), then per
    declaration ``max_manifest_set_entries`` (``uses``, ``coreTags``, ``tags.*.implies``,
    ``keyed.*.values``) and ``max_ontology_tags`` (``tags``, ``keyed``). The sentence names
    keys and bounds, never a server value. Never raises on a JSON value."""

    def over(limit: str, what: str) -> tuple[str, str]:
        return f"the manifest {what}, over Limits.{limit} = {getattr(limits, limit)}", limit

    if json_size(manifest, limit=limits.max_manifest_bytes) > limits.max_manifest_bytes:
        return over("max_manifest_bytes", "has too many JSON bytes")
    if json_depth_beyond(manifest, limits.max_manifest_depth):
        return over("max_manifest_depth", "is nested too deeply")
    declared = manifest.get("featureSets") if is_mapping(manifest) else None
    if not (is_mapping(declared) or is_array(declared)):
        return None
    if len(declared) > limits.max_feature_sets:
        return over("max_feature_sets", "declares too many feature sets")
    decls: list[Any] = list(declared.values()) if is_mapping(declared) else declared
    for decl in decls:
        if not is_mapping(decl):
            continue
        found: Any = decl.get("tagOntology")
        ontology: Mapping[str, Any] = found if is_mapping(found) else {}
        sets: list[Any] = [decl.get("uses"), ontology.get("coreTags")]
        for group in (ontology.get("tags"), ontology.get("keyed")):
            if is_mapping(group):
                if len(group) > limits.max_ontology_tags:
                    return over("max_ontology_tags", "declares too many tags in one ontology")
                for member in group.values():
                    if is_mapping(member):
                        sets += [member.get("implies"), member.get("values")]
        if any(is_array(entries) and len(entries) > limits.max_manifest_set_entries for entries in sets):
            return over("max_manifest_set_entries", "has a set array with too many entries")
    return None


class ManifestFetchLimiter:
    """Per-connection bound on ``mcpl/manifest`` fetches (MCPL §17.8).

    A sliding window: at most ``max_fetches`` allowed within any ``per_seconds``. A
    notification refused here is dropped (never fetched) and should be surfaced as a
    conformance defect by the caller. ``now`` is a monotonic time in seconds, passed in.

    Raises:
        ValueError: ``max_fetches`` below 1 or ``per_seconds`` not positive.
    """

    __slots__ = ("_allowed", "max_fetches", "per_seconds")

    def __init__(
        self,
        max_fetches: int = DEFAULT_MAX_MANIFEST_FETCHES,
        per_seconds: float = DEFAULT_MANIFEST_FETCH_WINDOW_SECONDS,
    ) -> None:
        if max_fetches < 1:
            raise ValueError("max_fetches must be at least 1")
        if not per_seconds > 0:
            raise ValueError("per_seconds must be positive")
        self.max_fetches = max_fetches
        self.per_seconds = per_seconds
        self._allowed: deque[float] | None = None  # made by the first fetch (most make none)

    def allow(self, now: float) -> bool:
        """True (and the fetch is counted) when a fetch at ``now`` stays within the bound."""
        allowed = self._allowed
        if allowed is None:
            allowed = self._allowed = deque()
        while allowed and allowed[0] <= now - self.per_seconds:
            allowed.popleft()
        if len(allowed) >= self.max_fetches:
            return False
        allowed.append(now)
        return True

    def __repr__(self) -> str:
        count = len(self._allowed) if self._allowed is not None else 0
        return f"<ManifestFetchLimiter {count}/{self.max_fetches} per {self.per_seconds:g}s>"

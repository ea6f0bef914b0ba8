"""Capability paths, the one-segment wildcard matcher, and the effective grant.

Rules (MCPL §5.1, §5.4, §6.2, Appendix B.2; docs/protocol.md, "Capability advertisement"):

- The vocabulary is closed: 20 dotted paths (``VOCABULARY``; one experimental, RFC-009). Members outside it mint no
  capability.
- A server's advertisement (``experimental.mcpl``) is expanded by a generic recursive walk:
  ``true`` at a node means every vocabulary leaf at or beneath it; ``false`` or absence means
  none; an object means descend. An object at a node that is itself a vocabulary path
  (``"inferenceRequest": {"streaming": true}``) advertises that node too (docs/protocol.md,
  "Capability advertisement"). ``tools`` comes from MCP's outer ``capabilities.tools``.
- A pattern matches a path when both have the same number of segments and each pattern
  segment is ``*`` or equal to the path's segment. So ``channels.*`` does not match
  ``channels.publish.x``, ``contextHooks.*`` matches no inject leaf, a bare ``*`` matches only
  one-segment paths, and a bare parent (``channels``) grants none of its leaves.
- The effective grant is advertised ∩ host policy: a path never advertised is never
  granted. The advertisement is input, never authority.

``matches()`` is the only matcher in the package; every caller uses it. A pattern that
matches no vocabulary path at all (a typo such as ``pushEvnts``) would grant nothing, or deny
nothing, silently: ``pattern_problem()`` says so, naming the closest valid path, and the
command line and the config file refuse such a pattern.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from mcpl_host.jsonrpc.values import JSONObject, is_mapping
from mcpl_host.mcpl.input_methods import advertises_input_streaming

__all__ = [
    "PATTERN_HINTS",
    "VOCABULARY",
    "Grant",
    "GrantPolicy",
    "INJECT_PREFIX",
    "LIFECYCLE_PREFIX",
    "NAMED_ONLY_PREFIXES",
    "names_path",
    "closest_pattern",
    "expand_advertisement",
    "matches",
    "pattern_problem",
]

#: MCPL §6.2 / App. B.2: every capability path a grant can hold.
VOCABULARY: frozenset[str] = frozenset(
    {
        "pushEvents",
        "tools",
        "modelInfo",
        "inferenceRequest",
        "inferenceRequest.streaming",
        "inferenceLifecycle",
        "contextHooks.beforeInference.observe",
        "contextHooks.beforeInference.inject.system",
        "contextHooks.beforeInference.inject.beforeUser",
        "contextHooks.beforeInference.inject.afterUser",
        "channels.register",
        "channels.lifecycle",
        "channels.publish",
        "channels.incoming",
        "channels.streaming",
        "channels.acknowledge",
        "channels.typing",
        # RFC-007 §4.1 (tool lifecycle; Draft r3): granted only when named (``names_path``).
        "toolLifecycle.observe",
        "toolLifecycle.inputs",
        "channels.incoming.streaming",  # RFC-009 §2.2 (experimental): EXPLICIT_ONLY
    }
)
#: Paths no ancestor ``true`` or object advertises: only their own explicit member does
#: (RFC-009 §2.1: ``channels.inputStreaming: true`` is ``channels.incoming.streaming``;
#: docs/protocol.md IS1).
EXPLICIT_ONLY: frozenset[str] = frozenset({"channels.incoming.streaming"})

# Members of experimental.mcpl that are not capability advertisements (MCPL §17.1).
_NOT_CAPABILITIES = frozenset({"version", "revision", "featureSets"})


def matches(pattern: str, path: str) -> bool:
    """True when ``pattern`` matches capability ``path`` (MCPL §5.4).

    ``*`` matches exactly one segment, and the segment counts must be equal.
    """
    if pattern == path:
        return True
    pattern_segments = pattern.split(".")
    path_segments = path.split(".")
    if len(pattern_segments) != len(path_segments):
        return False
    return all(p == "*" or p == s for p, s in zip(pattern_segments, path_segments))


#: What a pattern matching nothing is compared with: every path, and ``parent.*`` for each
#: parent of a path.
PATTERN_HINTS: tuple[str, ...] = tuple(
    sorted(VOCABULARY | {path.rsplit(".", 1)[0] + ".*" for path in VOCABULARY if "." in path})
)
_HINTS_BY_LOWER = {hint.lower(): hint for hint in PATTERN_HINTS}


def closest_pattern(pattern: str) -> str:
    """The entry of ``PATTERN_HINTS`` closest to ``pattern`` (difflib's ratio, ignoring case)."""
    import difflib  # for a refused pattern only (import time and memory)

    (best,) = difflib.get_close_matches(pattern.lower(), list(_HINTS_BY_LOWER), n=1, cutoff=0.0) or [
        "pushevents"
    ]
    return _HINTS_BY_LOWER[best]


def pattern_problem(pattern: str) -> str | None:
    """None if ``pattern`` matches at least one vocabulary path (MCPL §5.4); otherwise one
    line saying it matches none, naming the closest valid path or pattern, e.g.
    ``'pushEvnts' matches no capability path; did you mean "pushEvents"?``. The pattern is
    shown with ``repr`` (control and bidirectional characters escaped)."""
    if any(matches(pattern, path) for path in VOCABULARY):
        return None
    return f'{pattern!r} matches no capability path; did you mean "{closest_pattern(pattern)}"?'


def _leaves_at_or_below(prefix: str) -> set[str]:
    below = prefix + "."
    return {path for path in VOCABULARY - EXPLICIT_ONLY if path == prefix or path.startswith(below)}


#: Segments in the deepest vocabulary path; the walk never descends further (a deeper
#: node can mint nothing, and a hostile advertisement may nest a thousand levels).
MAX_PATH_SEGMENTS = max(path.count(".") + 1 for path in VOCABULARY)


def _walk(node: object, prefix: str, depth: int, out: set[str]) -> None:
    if node is True:
        out |= _leaves_at_or_below(prefix)
    elif is_mapping(node):
        if prefix in VOCABULARY and prefix not in EXPLICIT_ONLY:
            out.add(prefix)  # an object at a path node advertises the node (module rules)
        if depth >= MAX_PATH_SEGMENTS:
            return
        for key, child in node.items():
            if isinstance(key, str) and key:
                _walk(child, f"{prefix}.{key}", depth + 1, out)
    # false, null, numbers, strings, arrays: nothing (MCPL §5.1).


def expand_advertisement(mcpl: object, *, tools: bool = False) -> frozenset[str]:
    """The capability paths a server advertises (MCPL §5.1, §5.4).

    Args:
        mcpl: the server's ``capabilities.experimental.mcpl`` object (or None).
        tools: whether the server's outer MCP ``capabilities`` has ``tools``
            (docs/protocol.md, "Capability advertisement").

    Returns:
        a frozenset of vocabulary paths; never raises on any JSON value.
    """
    out: set[str] = set()
    if is_mapping(mcpl):
        for key, child in mcpl.items():
            if isinstance(key, str) and key and key not in _NOT_CAPABILITIES:
                _walk(child, key, 1, out)
    out -= EXPLICIT_ONLY
    if advertises_input_streaming(mcpl):  # RFC-009 §2.1
        out.add("channels.incoming.streaming")
    if tools:
        out.add("tools")
    return frozenset(out)


#: The deprecated injection paths (RFC-010 §4.1): ``contextHooks.beforeInference.inject.*``.
INJECT_PREFIX = "contextHooks.beforeInference.inject."
#: The tool lifecycle paths (RFC-007 §4.1): ``toolLifecycle.observe``, ``toolLifecycle.inputs``.
LIFECYCLE_PREFIX = "toolLifecycle."
#: Paths granted only by a pattern that names them (``names_path``): denied by default.
NAMED_ONLY_PREFIXES = (INJECT_PREFIX, LIFECYCLE_PREFIX)


def names_path(pattern: str, path: str) -> bool:
    """Whether grant ``pattern`` names ``path`` under one of ``NAMED_ONLY_PREFIXES``: it matches
    it and writes that prefix out, so no wildcard of the upper segments (``*.observe``) and no
    grant-all reaches it (RFC-010 §4.1 for the injection paths; RFC-007 §4.1 for the tool
    lifecycle paths: docs/protocol.md TL1). ``toolLifecycle.*`` names both lifecycle leaves."""
    return any(pattern.startswith(prefix) and path.startswith(prefix) for prefix in NAMED_ONLY_PREFIXES) and (
        matches(pattern, path)
    )


@dataclass(frozen=True, slots=True)
class GrantPolicy:
    """Host policy for one server's capability grant (MCPL §5.4).

    ``grant``: patterns of paths the host is willing to grant. ``deny``: patterns never
    granted (they win over ``grant``). ``grant_all_advertised``: grant every advertised path
    (``mcpl-host probe``'s default), still minus ``deny``. The default policy grants nothing.

    The deprecated injection paths (``contextHooks.beforeInference.inject.*``, RFC-010 §4.1)
    are granted only by a ``grant`` pattern that names them (``names_path``): never by
    ``grant_all_advertised``, nor by a wildcard of their upper segments, so neither the
    default nor a widening (a manifest change, the 0.4 profile's bound) adds one. The tool
    lifecycle paths (``toolLifecycle.observe``, ``toolLifecycle.inputs``, RFC-007 §4.1) are
    granted the same way, only when named (``names_path``; docs/protocol.md TL1).
    ``ignore_injections``: the MCPL 0.6 rule now (RFC-010 §4.2): the injection paths are never
    granted, whatever ``grant`` names, and a ``contextInjections`` answer is never applied.
    """

    grant: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    grant_all_advertised: bool = False
    ignore_injections: bool = False

    @property
    def grants_nothing(self) -> bool:
        """True when no advertisement can get anything granted: no ``grant`` pattern and not
        ``grant_all_advertised`` (the default policy, and a config entry without a grant)."""
        return not self.grant_all_advertised and not self.grant

    def allows(self, path: str) -> bool:
        """Whether this policy would grant ``path`` if the server advertised it."""
        if any(matches(pattern, path) for pattern in self.deny):
            return False
        if path.startswith(NAMED_ONLY_PREFIXES):  # RFC-010 §4.1, RFC-007 §4.1: never by grant-all
            if self.ignore_injections and path.startswith(INJECT_PREFIX):
                return False
            return any(names_path(pattern, path) for pattern in self.grant)
        return self.grant_all_advertised or any(matches(pattern, path) for pattern in self.grant)

    def compute(self, advertised: Iterable[str]) -> Grant:
        """The effective grant: advertised ∩ policy (MCPL §5.4)."""
        advertised = frozenset(advertised)
        granted = frozenset(path for path in advertised if self.allows(path))
        return Grant(paths=granted, advertised=advertised)


@dataclass(frozen=True, slots=True)
class Grant:
    """An effective capability grant: concrete vocabulary paths (MCPL §5.4).

    ``paths``: granted; ``advertised``: what the server advertised. ``denied`` is the
    diagnostic complement (never used for authorization; MCPL §5.4).
    """

    paths: frozenset[str] = field(default_factory=frozenset[str])
    advertised: frozenset[str] = field(default_factory=frozenset[str])

    def allows(self, path: str) -> bool:
        """Whether ``path`` is granted (exact path: the grant holds concrete leaves)."""
        return path in self.paths

    @property
    def denied(self) -> frozenset[str]:
        return self.advertised - self.paths

    def policy_params(self) -> JSONObject:
        """``featureSets/update`` params for this grant (MCPL §5.3): ``effectiveCapabilities``
        always (empty list when nothing is granted), ``deniedCapabilities`` when non-empty.
        No path is ever in both (MCPL §5.4)."""
        params: JSONObject = {"effectiveCapabilities": sorted(self.paths)}
        if self.denied:
            params["deniedCapabilities"] = sorted(self.denied)
        return params


#: The empty grant: what a connection holds before the initial receipt (docs/protocol.md D3).
NO_GRANT = Grant()

"""Reading a ``context/beforeInference`` answer (MCPL §10.2-§10.4, §10.8): pure.

Rules: each element of ``contextInjections`` is judged on its own. Not an object, ``position``
missing or outside ``system|beforeUser|afterUser``, ``namespace`` not a non-empty string, or
``content`` neither a string nor an array of content blocks (objects with a string ``type``;
a ``text`` block needs a string ``text``) -> dropped, reason ``invalid``. A position whose
``contextHooks.beforeInference.inject.<position>`` is not in the grant given (the grant in
force when the answer arrives) -> dropped, reason ``not_granted``. A string ``content``
becomes one text block. The response's ``featureSet`` is kept as testimony only (§6.5).
``contextInjections`` absent or null means none; a result that is not an object, or a
``contextInjections`` that is not an array, is a failure. ``returned`` counts the elements
sent (RFC-010 §4.1: a non-empty ``contextInjections`` is a deprecated injection, diagnosed).
With ``ignore`` (the MCPL 0.6 rule, RFC-010 §4.2) none is judged nor kept: the member is
ignored, only counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from mcpl_host.jsonrpc.values import is_array, is_object
from mcpl_host.limits import DEFAULT_HOOK_TIMEOUT_SECONDS as LIMITS_HOOK_TIMEOUT_SECONDS
from mcpl_host.mcpl.grants import Grant

__all__ = [
    "DEFAULT_HOOK_TIMEOUT_SECONDS",
    "INJECT",
    "OBSERVE",
    "POSITIONS",
    "BeforeInferenceResult",
    "DroppedInjection",
    "HookReading",
    "Injection",
    "Position",
    "read_injections",
]

#: MCPL §10.6: the recommended beforeInference timeout, in seconds (the default of
#: ``Limits.hook_timeout_seconds``).
DEFAULT_HOOK_TIMEOUT_SECONDS = LIMITS_HOOK_TIMEOUT_SECONDS
Position = Literal["system", "beforeUser", "afterUser"]
#: MCPL §10.4: where an injection goes.
POSITIONS: tuple[Position, ...] = ("system", "beforeUser", "afterUser")
OBSERVE = "contextHooks.beforeInference.observe"
#: The grant leaf each position needs (§5.4, §10.8).
INJECT: dict[str, str] = {p: f"contextHooks.beforeInference.inject.{p}" for p in POSITIONS}


@dataclass(frozen=True, slots=True)
class Injection:
    """An authorized injection: ``server`` (connection name), ``namespace``, ``position``,
    ``content`` (content blocks), ``metadata`` (object or None), ``index`` in its response;
    ``model_content``: the model-visible form of ``content`` (MCPL §19.5: references as
    stubs; ``mcpl.references.ContentView``), set by the connection that read it, else None."""

    server: str
    namespace: str
    position: Position
    content: tuple[Any, ...]
    metadata: dict[str, Any] | None = None
    index: int = 0
    model_content: tuple[dict[str, Any], ...] | None = None


@dataclass(frozen=True, slots=True)
class DroppedInjection:
    """An injection not kept: ``reason`` ``invalid`` or ``not_granted``, ``detail`` a sentence,
    ``position`` as sent (any JSON value)."""

    index: int
    reason: Literal["invalid", "not_granted"]
    detail: str
    position: Any = None


@dataclass(frozen=True, slots=True)
class HookReading:
    """What ``read_injections`` found; ``problem`` set when the whole answer is unusable."""

    injections: tuple[Injection, ...] = ()
    dropped: tuple[DroppedInjection, ...] = ()
    feature_set: Any = None
    problem: str | None = None
    returned: int = 0


@dataclass(frozen=True, slots=True)
class BeforeInferenceResult:
    """One server's part of a beforeInference (§10.2). ``outcome``: ``ok``, or ``timeout`` /
    ``failure`` (fail-open: no injections, ``error`` says why). ``feature_set``: the claimed
    ``featureSet`` as sent, testimony only (§6.5). ``returned``: the elements of
    ``contextInjections`` the server sent (more than 0: it injects, deprecated by RFC-010;
    ``ignored`` when the MCPL 0.6 rule, ``GrantPolicy.ignore_injections``, left them all
    unapplied)."""

    server: str
    outcome: Literal["ok", "timeout", "failure"]
    injections: tuple[Injection, ...] = ()
    dropped: tuple[DroppedInjection, ...] = ()
    feature_set: Any = None
    error: str | None = None
    returned: int = 0
    ignored: bool = False


def _content_problem(content: object) -> str | None:
    if isinstance(content, str):
        return None
    if not is_array(content):
        return "content is neither a string nor an array"
    for block in content:
        if not is_object(block) or not isinstance(block.get("type"), str):
            return "a content block is not an object with a string type"
        if block["type"] == "text" and not isinstance(block.get("text"), str):
            return "a text block has no string text"
    return None


def read_injections(result: object, grant: Grant, server: str = "", *, ignore: bool = False) -> HookReading:
    """Judge a ``context/beforeInference`` result against ``grant`` (the grant in force at
    receipt), element by element (module docstring); with ``ignore``, only count them
    (RFC-010 §4.2). Pure; never raises on any JSON value."""
    if not is_object(result):
        return HookReading(problem="the result is not an object")
    items: Any = result.get("contextInjections")
    if items is None:
        items = []
    if not is_array(items):
        return HookReading(feature_set=result.get("featureSet"), problem="contextInjections is not an array")
    if ignore:
        return HookReading(feature_set=result.get("featureSet"), returned=len(items))
    kept: list[Injection] = []
    dropped: list[DroppedInjection] = []
    for index, item in enumerate(items):
        if not is_object(item):
            dropped.append(DroppedInjection(index, "invalid", "not an object"))
            continue
        position = item.get("position")
        if position not in POSITIONS:
            dropped.append(DroppedInjection(index, "invalid", "position missing or unknown", position))
            continue
        if not grant.allows(INJECT[position]):
            dropped.append(
                DroppedInjection(index, "not_granted", f"{INJECT[position]} is not granted", position)
            )
            continue
        namespace, content = item.get("namespace"), item.get("content")
        if not isinstance(namespace, str) or not namespace:
            dropped.append(DroppedInjection(index, "invalid", "namespace missing or not a string", position))
            continue
        problem = _content_problem(content)
        if problem is not None:
            dropped.append(DroppedInjection(index, "invalid", problem, position))
            continue
        blocks = ({"type": "text", "text": content},) if isinstance(content, str) else tuple(content or ())
        metadata = item.get("metadata")
        kept.append(
            Injection(server, namespace, position, blocks, metadata if is_object(metadata) else None, index)
        )
    return HookReading(tuple(kept), tuple(dropped), result.get("featureSet"), returned=len(items))

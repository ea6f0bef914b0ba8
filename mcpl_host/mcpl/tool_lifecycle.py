"""Tool lifecycle (MCPL RFC-007 revision 3, Draft): the decisions, pure.

Rules of this module (docs/protocol.md, "Tool lifecycle (RFC-007)", TL1-TL12):

- **The filter** (``parse_observe``, RFC-007 §6.1, §6.6, §13): ``tools/observe`` params are
  parsed strictly, exactly as RFC-007 §13's ``ToolsObserveParams`` schema says (string bounds
  in code points), plus the host's limits (``Limits.max_observe_rules``,
  ``Limits.max_observe_paths``: ``-32602`` with ``data.limit``). Anything else is ``-32602``
  with ``data.problems`` (sentences naming keys, never values). ``rules`` null or absent
  clears (``ObserveRequest.filter`` None); ``[]`` pauses. ``params`` that is no object
  (null included, and so an omitted one: TL3) is refused.
- **Matching** (``rule_matches``, ``first_match``, RFC-007 §6.1, §6.2): the first rule whose
  every stated member matches decides; patterns are RFC-007 §6.2's (``*`` any run, all else
  literal, whole string, case-sensitive: ``tool_classes.tool_pattern_matches``, the one
  matcher); ``serverTool``/``serverId`` never match a host-implemented tool, ``class`` never
  an unclassed one.
- **Narrowing** (``Narrowing``, RFC-007 §4.3): the operator's, per server and leaf, over tool
  names, classes and conversations; a call is inside when it satisfies every key stated. An
  ``observe`` leaf with no narrowing covers every call; an ``inputs`` leaf with none covers
  no call (RFC-007 §4.3: never unconditional), and the class exclusions (``comms``,
  unclassed) are ``tool_classes.inputs_admitted``'s, the one rule.
- **The decision** (``decide``, RFC-007 §6.4's five steps, §5.1, §7.1): None (not reported
  to that server) or a ``Delivery``: ``input`` (field-selected, then bounded), or
  ``input_withheld`` when the rule asked and the grant did not allow, never either without
  ``inputs`` granted and a rule that asked.
- **Fields, credentials and bound** (``select_fields``, ``bound_input``, RFC-007 §5.2, §6.3):
  after field selection every string goes through the call's ``redact`` (the credentials the
  host knows of, replaced by a placeholder: ``inputAltered``); then the bound, which is
  bytes of compact JSON (UTF-8); over it, the members that fit whole are kept (in order),
  then the others are cut (strings to a prefix, objects and arrays member by member) into
  what is left, or dropped; the order of members is kept (``altered``).
- **One call's phases** (``CallPhases``, RFC-007 §3, §7.3): at most one ``pending`` then
  ``started``, in that order, and exactly one terminal; anything else raises
  ``LocalProtocolError`` (the application's bug, never sent).

Nothing here does I/O; ``mcpl_host.services.tool_lifecycle`` applies it.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from mcpl_host.json_size import json_size
from mcpl_host.jsonrpc.envelope import json_kind
from mcpl_host.jsonrpc.errors import ErrorCode, HandlerError, LocalProtocolError
from mcpl_host.jsonrpc.values import JSONObject, is_array, is_mapping
from mcpl_host.tool_classes import TOOL_CLASSES, InputsNarrowing, inputs_admitted, tool_pattern_matches

__all__ = [
    "DEFAULT_INPUTS_CLASSES",
    "MAX_PATTERN_CHARS",
    "OPENING_PHASES",
    "PHASES",
    "TERMINAL_PHASES",
    "CallFacts",
    "CallPhases",
    "Delivery",
    "Narrowing",
    "ObserveFilter",
    "ObserveRequest",
    "Rule",
    "ToolLifecyclePolicy",
    "MINTED_PREFIX",
    "bound_input",
    "call_id_for",
    "decide",
    "first_match",
    "lifecycle_params",
    "parse_observe",
    "policy_diagnostics",
    "rule_matches",
    "select_fields",
    "still_observes",
]

#: RFC-007 §3 / App. B.4 ``ToolPhase``.
Phase = Literal["pending", "started", "completed", "failed", "aborted"]
PHASES: tuple[Phase, ...] = ("pending", "started", "completed", "failed", "aborted")
OPENING_PHASES: frozenset[str] = frozenset({"pending", "started"})
TERMINAL_PHASES: frozenset[str] = frozenset({"completed", "failed", "aborted"})
#: RFC-007 §13: ``maxLength`` of every pattern and field path, in code points.
MAX_PATTERN_CHARS = 256
#: RFC-007 §4.3: the named default ``inputs`` policy (``classes: "default"``), selected by the
#: operator, never applied by omission (docs/protocol.md TL5).
DEFAULT_INPUTS_CLASSES: tuple[str, ...] = ("files", "shell", "web", "computer", "media", "body")

_MATCH_KEYS = ("tool", "serverTool", "serverId", "conversationId")
_RULE_KEYS = frozenset({"match", "report", "input"})


# --- the filter: tools/observe --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule of a filter (RFC-007 §6.1): the stated ``match`` members (None: not stated),
    ``report``, and ``input``: False (no arguments), True (all), or a tuple of field paths."""

    tool: str | None = None
    server_tool: str | None = None
    server_id: str | None = None
    conversation_id: str | None = None
    tool_class: str | None = None
    report: bool = True
    input: bool | tuple[str, ...] = False

    @property
    def requests_input(self) -> bool:
        """Whether the rule asks for arguments (``true`` or an array, even an empty one)."""
        return self.input is not False


@dataclass(frozen=True, slots=True)
class ObserveFilter:
    """A server's filter in force (RFC-007 §6): its ``rules`` in order (``()``: pause)."""

    rules: tuple[Rule, ...]


@dataclass(frozen=True, slots=True)
class ObserveRequest:
    """A well-formed ``tools/observe``: the ``filter`` it sets, or None (clear, RFC-007 §6.1)."""

    filter: ObserveFilter | None


def _invalid(problems: list[str]) -> HandlerError:
    return HandlerError(
        ErrorCode.INVALID_PARAMS, "Invalid params: " + "; ".join(problems[:3]), {"problems": problems}
    )


def _over_limit(which: str, limit: int) -> HandlerError:
    return HandlerError(
        ErrorCode.INVALID_PARAMS,
        f"Invalid params: more {which} than this host accepts ({limit})",
        {"limit": which},
    )


def _names(keys: list[Any]) -> str:
    """Up to five member names, each cut to 40 characters (a server chooses them)."""
    listed = sorted(str(k) for k in keys)
    return ", ".join(repr(k[:40]) for k in listed[:5]) + (", ..." if len(listed) > 5 else "")


def _pattern_problem(value: object, where: str) -> str | None:
    if not isinstance(value, str):
        return f"{where} must be a string, not {json_kind(value)}"
    if len(value) > MAX_PATTERN_CHARS:
        return f"{where} is longer than {MAX_PATTERN_CHARS} characters"
    return None


def _parse_rule(index: int, value: object, max_paths: int) -> Rule | list[str] | HandlerError:
    at = f"rules[{index}]"
    if not is_mapping(value):
        return [f"{at} must be an object, not {json_kind(value)}"]
    problems: list[str] = []
    unknown = [k for k in value if k not in _RULE_KEYS]
    if unknown:
        problems.append(f"{at} has members RFC-007 §6.1 does not define: {_names(unknown)}")
    if "match" not in value:
        problems.append(f"{at} has no match")
    fields: dict[str, Any] = {}
    match = value.get("match")
    if "match" in value:
        if not is_mapping(match):
            problems.append(f"{at}.match must be an object, not {json_kind(match)}")
        else:
            bad = [k for k in match if k not in (*_MATCH_KEYS, "class")]
            if bad:
                problems.append(f"{at}.match has members RFC-007 §6.1 does not define: {_names(bad)}")
            for key, attr in zip(_MATCH_KEYS, ("tool", "server_tool", "server_id", "conversation_id")):
                if key in match:
                    problem = _pattern_problem(match[key], f"{at}.match.{key}")
                    if problem is not None:
                        problems.append(problem)
                    else:
                        fields[attr] = match[key]
            if "class" in match:
                tool_class = match["class"]
                if not (isinstance(tool_class, str) and tool_class in TOOL_CLASSES):
                    problems.append(f"{at}.match.class must be a ToolClass (RFC-008 §4)")
                else:
                    fields["tool_class"] = tool_class
    if "report" in value:
        if not isinstance(value["report"], bool):
            problems.append(f"{at}.report must be a boolean, not {json_kind(value['report'])}")
        else:
            fields["report"] = value["report"]
    if "input" in value:
        wanted = value["input"]
        if isinstance(wanted, bool):
            fields["input"] = wanted
        elif is_array(wanted):
            if len(wanted) > max_paths:
                return _over_limit("paths", max_paths)
            paths: list[str] = []
            for i, path in enumerate(wanted):
                if not isinstance(path, str) or not path:
                    problems.append(f"{at}.input[{i}] must be a non-empty string")
                elif len(path) > MAX_PATTERN_CHARS:
                    problems.append(f"{at}.input[{i}] is longer than {MAX_PATTERN_CHARS} characters")
                else:
                    paths.append(path)
            fields["input"] = tuple(paths)
        else:
            problems.append(
                f"{at}.input must be a boolean or an array of field paths, not {json_kind(wanted)}"
            )
    return problems if problems else Rule(**fields)


def parse_observe(params: object, *, max_rules: int, max_paths: int) -> ObserveRequest | HandlerError:
    """``tools/observe`` params (RFC-007 §6.1, §6.6, §13; module rules) -> the request, or the
    ``-32602`` error to answer with (``data.limit``: ``"rules"`` or ``"paths"`` for a host
    limit; ``data.problems`` otherwise). ``params`` is the JSON value as received (None for
    null or omitted: refused, docs/protocol.md TL3). Pure; never raises."""
    if not is_mapping(params):
        return _invalid([f"params must be an object, not {json_kind(params)}"])
    problems: list[str] = []
    unknown = [k for k in params if k not in ("rules", "_meta")]
    if unknown:
        problems.append(f"params has members RFC-007 §6.1 does not define: {_names(unknown)}")
    if "_meta" in params and not is_mapping(params["_meta"]):
        problems.append(f"_meta must be an object, not {json_kind(params['_meta'])}")
    rules = params.get("rules")
    parsed: list[Rule] = []
    if rules is not None:
        if not is_array(rules):
            problems.append(f"rules must be an array or null, not {json_kind(rules)}")
        elif len(rules) > max_rules:
            return _over_limit("rules", max_rules)
        else:
            for index, value in enumerate(rules):
                rule = _parse_rule(index, value, max_paths)
                if isinstance(rule, HandlerError):
                    return rule
                if isinstance(rule, list):
                    problems.extend(rule)
                else:
                    parsed.append(rule)
    if problems:
        return _invalid(problems)
    return ObserveRequest(None if rules is None else ObserveFilter(tuple(parsed)))


# --- a call, matching, narrowing ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallFacts:
    """What the host knows of one call (RFC-007 §3): ``tool`` (the model-facing name),
    ``classes`` (effective, RFC-008 §5; ``()`` unclassed), ``server_id`` and ``server_tool``
    (None for a tool the host implements), ``conversation_id``, ``inference_id``, the
    ``arguments`` as the host will pass them to the tool, and ``redact``."""

    tool: str
    classes: tuple[str, ...]
    server_id: str | None
    server_tool: str | None
    conversation_id: str
    inference_id: str
    arguments: Mapping[str, Any]
    #: Hides the credentials the host knows of in a string (RFC-007 §5.2, §10: the providing
    #: server's ``Redactor.redact``); None: nothing hidden.
    redact: Callable[[str], str] | None = field(default=None, compare=False)


def rule_matches(rule: Rule, call: CallFacts) -> bool:
    """Whether every member ``rule.match`` states matches ``call`` (RFC-007 §6.1, §6.2)."""
    for pattern, value in (
        (rule.tool, call.tool),
        (rule.server_tool, call.server_tool),
        (rule.server_id, call.server_id),
        (rule.conversation_id, call.conversation_id),
    ):
        if pattern is not None and (value is None or not tool_pattern_matches(pattern, value)):
            return False
    return rule.tool_class is None or rule.tool_class in call.classes


def first_match(observe_filter: ObserveFilter, call: CallFacts) -> Rule | None:
    """The first rule of the filter matching ``call``, or None (not reported; RFC-007 §6.1)."""
    return next((rule for rule in observe_filter.rules if rule_matches(rule, call)), None)


@dataclass(frozen=True, slots=True)
class Narrowing:
    """The operator's narrowing of one leaf (RFC-007 §4.3): ``tools`` and ``conversations``
    (RFC-007 §6.2 patterns) and ``classes`` (the effective classes must intersect them); a
    key left None is not stated."""

    tools: tuple[str, ...] | None = None
    classes: tuple[str, ...] | None = None
    conversations: tuple[str, ...] | None = None

    def contains(self, call: CallFacts) -> bool:
        """Whether ``call`` satisfies every key stated."""
        if self.tools is not None and not any(tool_pattern_matches(p, call.tool) for p in self.tools):
            return False
        if self.classes is not None and not set(self.classes) & set(call.classes):
            return False
        return self.conversations is None or any(
            tool_pattern_matches(p, call.conversation_id) for p in self.conversations
        )


@dataclass(frozen=True, slots=True)
class ToolLifecyclePolicy:
    """The operator's narrowings for one server (RFC-007 §4.3; config key ``toolLifecycle``,
    ``ServerConfig.tool_lifecycle``): ``observe`` (None: every call) and ``inputs`` (None: no
    call: an unnarrowed ``inputs`` grant sends no arguments). The grant itself (which leaves)
    is the ``GrantPolicy``'s."""

    observe: Narrowing | None = None
    inputs: Narrowing | None = None

    def inputs_allow(self, call: CallFacts) -> bool:
        """Whether ``call`` may carry arguments under ``inputs`` (RFC-007 §4.3): inside its
        narrowing, and not excluded by class (``tool_classes.inputs_admitted``: never
        unnarrowed, never unclassed, never ``comms``)."""
        n = self.inputs
        if n is None:
            return False
        tools = n.tools
        if n.conversations is not None:
            if not any(tool_pattern_matches(p, call.conversation_id) for p in n.conversations):
                return False
            if tools is None and n.classes is None:  # narrowed by conversation alone
                tools = ("*",)
        return inputs_admitted(call.tool, call.classes, InputsNarrowing(tools, n.classes))


def policy_diagnostics(granted: frozenset[str], policy: ToolLifecyclePolicy) -> tuple[str, ...]:
    """The RFC-007 §4.1, §4.3 diagnostics of a grant (``granted``: its paths): ``inputs``
    without ``observe`` (delivers nothing), ``inputs`` without a narrowing (narrowed to no
    tools). Sentences; ``()`` when neither applies."""
    out: list[str] = []
    if "toolLifecycle.inputs" in granted:
        if "toolLifecycle.observe" not in granted:
            out.append("toolLifecycle.inputs granted without toolLifecycle.observe: it delivers nothing")
        if policy.inputs is None:
            out.append(
                "toolLifecycle.inputs granted without a narrowing: narrowed to NO tools (RFC-007 §4.3)"
            )
    return tuple(out)


# --- fields and the bound -------------------------------------------------------------------

_WHOLE: dict[str, Any] = {}


def _trie(paths: tuple[str, ...]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for path in paths:
        node = root
        segments = path.split(".")
        for i, segment in enumerate(segments):
            if node.get(segment) is _WHOLE:
                break
            if i == len(segments) - 1:
                node[segment] = _WHOLE
            else:
                node = node.setdefault(segment, {})
    return root


def _pick(value: Mapping[str, Any], trie: dict[str, Any]) -> tuple[JSONObject, bool]:
    out: JSONObject = {}
    found = False
    for key, member in value.items():
        sub = trie.get(key)
        if sub is None:
            continue
        if sub is _WHOLE:
            out[key] = member
            found = True
        elif is_mapping(member):
            picked, any_found = _pick(member, sub)
            if any_found:
                out[key] = picked
                found = True
    return out, found


def select_fields(arguments: Mapping[str, Any], wanted: bool | tuple[str, ...]) -> JSONObject:
    """The requested fields of ``arguments`` (RFC-007 §6.3): all for ``True``; for paths, each
    member named (``.`` descends into objects), kept in its place; a path through a non-object
    or to a missing member selects nothing; none present gives ``{}``."""
    if wanted is True:
        return dict(arguments)
    if wanted is False:
        return {}
    return _pick(arguments, _trie(wanted))[0]


def _fit(value: Any, budget: int) -> tuple[bool, Any]:
    """(fits, value within ``budget`` bytes of compact JSON); strings cut, members dropped."""
    size = json_size(value, limit=budget)
    if size <= budget:
        return True, value
    if isinstance(value, str):
        if budget < 2:
            return False, None
        low, high = 0, len(value)
        while low < high:  # the longest prefix that fits
            mid = (low + high + 1) // 2
            if json_size(value[:mid]) <= budget:
                low = mid
            else:
                high = mid - 1
        return True, value[:low]
    if is_mapping(value):
        if budget < 2:
            return False, None
        # Members that fit whole first (in order), then the rest cut into what is left, so
        # one long string does not push out every small member after it.
        kept_members: dict[str, Any] = {}
        used = 2
        for whole in (True, False):
            for key, member in value.items():
                if key in kept_members:
                    continue
                cost = json_size(key) + 1 + (1 if kept_members else 0)
                room = budget - used - cost
                if whole and json_size(member, limit=room) > room:
                    continue
                fits, kept = _fit(member, room)
                if fits:
                    kept_members[key] = kept
                    used += cost + json_size(kept)
        return True, {key: kept_members[key] for key in value if key in kept_members}
    if is_array(value):
        if budget < 2:
            return False, None
        items: list[Any] = []
        used = 2
        for member in value:
            cost = 1 if items else 0
            fits, kept = _fit(member, budget - used - cost)
            if fits:
                items.append(kept)
                used += cost + json_size(kept)
        return True, items
    return False, None


def bound_input(value: JSONObject, max_bytes: int) -> tuple[JSONObject, bool] | None:
    """``value`` within ``max_bytes`` bytes of compact JSON (RFC-007 §5.2): ``(value, False)``
    when it fits, ``(cut, True)`` when strings were cut or members dropped, None when not even
    ``{}`` fits, or for nesting too deep to walk (withheld)."""
    try:
        fits, kept = _fit(value, max_bytes)
    except RecursionError:  # nesting deeper than Python recurses: no meaningful bound
        return None
    if not fits:
        return None
    return kept, kept is not value


# --- the decision ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Delivery:
    """What one server gets for one call's ``started`` (RFC-007 §5.1): ``input`` or None;
    ``input_altered``; ``input_withheld``. Other phases carry none of them."""

    input: JSONObject | None = None
    input_altered: bool = False
    input_withheld: bool = False


METADATA_ONLY = Delivery()


def decide(
    call: CallFacts,
    *,
    granted: frozenset[str] | None,
    policy: ToolLifecyclePolicy,
    observe_filter: ObserveFilter | None,
    own: bool,
    max_input_bytes: int,
) -> Delivery | None:
    """Whether one server is told of ``call``, and what its ``started`` carries (RFC-007 §6.4,
    §5.1, §7.1; module rules). ``granted``: the paths of its grant in force (None: not
    MCPL-ready); ``own``: the call is to one of its own tools (never reported back). None: not
    reported."""
    if own or granted is None or "toolLifecycle.observe" not in granted:  # step 1
        return None
    if policy.observe is not None and not policy.observe.contains(call):
        return None
    if observe_filter is None:  # step 2 and 3: no filter, every call, metadata only
        return METADATA_ONLY
    rule = first_match(observe_filter, call)
    if rule is None or not rule.report:
        return None
    if not rule.requests_input or "toolLifecycle.inputs" not in granted:  # step 3, TL7
        return METADATA_ONLY
    if not policy.inputs_allow(call):  # step 4
        return Delivery(input_withheld=True)
    selected = select_fields(call.arguments, rule.input)  # step 5
    masked = _masked(selected, call.redact) if call.redact is not None else selected
    bounded = bound_input(masked, max_input_bytes) if masked is not None else None
    if bounded is None:
        return Delivery(input_withheld=True)
    value, altered = bounded
    return Delivery(input=value, input_altered=altered or masked is not selected)


def _mask(value: Any, redact: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        hidden = redact(value)
        return value if hidden == value else hidden
    if is_mapping(value):
        members = {key: _mask(member, redact) for key, member in value.items()}
        return value if all(members[k] is value[k] for k in members) else members
    if is_array(value):
        items = [_mask(item, redact) for item in value]
        return value if all(a is b for a, b in zip(items, value)) else items
    return value


def _masked(value: JSONObject, redact: Callable[[str], str]) -> JSONObject | None:
    """``value`` with each string passed through ``redact`` (the same object when nothing
    changed; RFC-007 §5.2: a credential replaced by a placeholder alters the input); None for
    nesting too deep to walk (withheld)."""
    try:
        masked: JSONObject = _mask(value, redact)
    except RecursionError:
        return None
    return masked


def still_observes(call: CallFacts, *, granted: frozenset[str] | None, policy: ToolLifecyclePolicy) -> bool:
    """Whether a terminal may still go to a server that got the call's opening (RFC-007 §4.5):
    ``observe`` still granted and the call still inside its narrowing. The filter is not asked
    (RFC-007 §6.5: a terminal of an opened call goes whatever the new filter says)."""
    if granted is None or "toolLifecycle.observe" not in granted:
        return False
    return policy.observe is None or policy.observe.contains(call)


def lifecycle_params(
    call: CallFacts,
    call_id: str,
    phase: str,
    delivery: Delivery | None = None,
    *,
    is_error: bool | None = None,
    duration_ms: int | None = None,
) -> JSONObject:
    """The ``tools/lifecycle`` params (RFC-007 §3, §13): the identity fields on every phase;
    ``input``/``inputAltered``/``inputWithheld`` on ``started`` only, from ``delivery``;
    ``isError`` on ``completed`` only; ``durationMs`` on terminals only. Never a result."""
    params: JSONObject = {
        "toolCallId": call_id,
        "inferenceId": call.inference_id,
        "conversationId": call.conversation_id,
        "tool": call.tool,
        "class": list(call.classes),
    }
    if call.server_id is not None and call.server_tool is not None:
        params["serverId"] = call.server_id
        params["serverTool"] = call.server_tool
    params["phase"] = phase
    if phase == "started" and delivery is not None:
        if delivery.input is not None:
            params["input"] = delivery.input
            if delivery.input_altered:
                params["inputAltered"] = True
        elif delivery.input_withheld:
            params["inputWithheld"] = True
    if phase == "completed" and is_error is not None:
        params["isError"] = is_error
    if phase in TERMINAL_PHASES and duration_ms is not None:
        params["durationMs"] = max(0, int(duration_ms))
    return params


# --- call identity -------------------------------------------------------------------------

#: The prefix of the ``toolCallId`` the host mints (RFC-007 §3): ``mcpl-host-<n>``.
MINTED_PREFIX = "mcpl-host-"


def call_id_for(provider_id: str | None, used: Container[str], minted: int) -> str:
    """The ``toolCallId`` of a call (RFC-007 §3; docs/protocol.md TL9): ``provider_id`` (the
    model's id, given only when the provider guarantees it unique) when it is a non-empty
    string not yet ``used`` on this host and not of the minted form, else the minted
    ``mcpl-host-<minted>`` (``minted``: a counter the caller never repeats)."""
    if provider_id and provider_id not in used and not provider_id.startswith(MINTED_PREFIX):
        return provider_id
    return f"{MINTED_PREFIX}{minted}"


# --- one call's phases ----------------------------------------------------------------------


class CallPhases:
    """The phases of one call (RFC-007 §3, §7.3): ``pending`` (optional), then ``started``,
    then exactly one terminal. ``advance(phase)`` raises ``LocalProtocolError`` for any other
    order (a second terminal, ``started`` after a terminal, ``pending`` after ``started``, a
    terminal with no opening). Pure."""

    def __init__(self) -> None:
        self.history: list[str] = []

    @property
    def ended(self) -> bool:
        return bool(self.history) and self.history[-1] in TERMINAL_PHASES

    @property
    def opened(self) -> bool:
        return bool(self.history)

    def advance(self, phase: str) -> None:
        if phase not in PHASES:
            raise LocalProtocolError(f"{phase!r} is not a tool phase")
        if self.ended:
            raise LocalProtocolError(f"the call already ended ({self.history[-1]}); {phase!r} is not sent")
        if phase == "pending" and self.history:
            raise LocalProtocolError("pending comes first, once")
        if phase == "started" and "started" in self.history:
            raise LocalProtocolError("the call is already started")
        if phase in TERMINAL_PHASES and not self.history:
            raise LocalProtocolError("a terminal needs an opening phase first")
        self.history.append(phase)

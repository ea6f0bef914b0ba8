"""Admission: the one place that decides, against the grant in force, what may pass (MCPL
§5.4, §6.4-§6.6).

Rules:

- **Inbound requests**, and the notification forms of ``channels/changed`` and
  ``channels/incoming``, go through ``admit()``, called from exactly one place (the MCPL
  inbound dispatcher; for ``push/event`` through its ``PushAdmissions``, which runs step 4
  alone for a feature set that passed steps 1-3 under the very objects still in force), in
  the read loop, before any handler sees them. It returns
  ``Admitted`` (with the compatibility notes of what it let through), ``Refused`` (the
  error to answer with) or ``Held`` (0.4 profile: the policy is not settled yet; the
  dispatcher holds the request and calls ``admit()`` again, with ``may_hold=False``, once it
  is). The steps, in order (MCPL §6.6):

  1. the capability gate (``INBOUND_GATES``; ``inference/request`` with ``stream: true``
     needs ``inferenceRequest.streaming`` too): with no grant in force or a path not granted,
     ``-32002`` ``{capability}`` (docs/protocol.md D3), its message naming the reason
     (``denial_reason``): ``not_in_force`` (the initial receipt is not in yet),
     ``denied_by_policy`` (advertised, not granted), ``not_advertised`` (a plain MCP server,
     or a path outside the bound), ``mcpl_off`` (the policy was refused or its request
     failed). Under the 0.4 profile a request the gate would refuse ``not_in_force`` is
     ``Held`` instead, and a granted path the server did not advertise itself (its top-level
     capability is advertised: ``compat.widen``) gives an ``unadvertised_leaf`` note;
  2. the feature set, for ``push/event`` and ``inference/request``: ``featureSet`` missing or
     not a non-empty string ``-32602``; undeclared ``-32003`` ``{featureSet}``; declared but
     not enabled ``-32001`` ``{featureSet}``; enabled but its ``uses`` lacks a capability
     being exercised ``-32002`` ``{capability, featureSet}`` with a ``DeclarationMismatch``
     for the caller to log (§6.4 rule 2); under the 0.4 profile that last case is admitted
     with a ``uses_lacks`` note;
  3. ``state/*`` are admitted by feature set only (there is no state capability path;
     docs/protocol.md, "State"): the same ``-32602`` / ``-32003`` / ``-32001`` (held under
     the 0.4 profile while the policy is not settled);
  4. params: an object where the method needs one, and its shape (``-32602`` with
     ``data.problems``, sentences that name keys, never values).

  The RFC-009 input methods (``channels/input/*``, experimental) need both
  ``channels.incoming`` and ``channels.incoming.streaming`` at step 1; the dispatcher sends
  them here only when input streams are on (docs/protocol.md IS2, IS4).

  Ungated methods (``ping``, MCP methods, ``mcpl/manifestChanged``) pass unchanged. No
  profile grants anything: every path admitted is in the grant in force, which never holds a
  path the host's policy denies.
- **Each channel message** of ``channels/incoming`` is judged by ``admit_channel_message()``
  when its turn comes (MCPL §14.3, §14.5): the grant in force then (a registration keeps no
  authority once its grant is gone), the connection's own registrations, the direction and
  the host's channel-id patterns.
- **Outbound calls** are judged by ``may_send()`` (MCPL §5.4: nothing ungranted goes out).
- Everything here is pure and reads the grant only through ``Grant.allows``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from mcpl_host.jsonrpc.errors import ErrorCode, HandlerError
from mcpl_host.jsonrpc.values import JSONObject, is_mapping, is_object
from mcpl_host.mcpl.compat import CompatNote, Profile
from mcpl_host.mcpl.feature_sets import (
    FEATURE_SET_METHODS,
    DeclarationMismatch,
    Derivation,
    FeatureSet,
    FeatureSetDeclarations,
)
from mcpl_host.mcpl.grants import Grant
from mcpl_host.mcpl.input_methods import INPUT_METHODS, INPUT_STREAM_PATHS
from mcpl_host.mcpl.policy_state import MCPLState
from mcpl_host.mcpl.server_shapes import (
    OBJECT_PARAMS_METHODS,
    STATE_METHODS,
    ChannelRegistry,
    channel_allowed,
    channel_params_problems,
    incoming_message_problem,
    inference_params_problems,
    is_name,
    state_params_problems,
)
from mcpl_host.mcpl.tags import push_event_problems

__all__ = [
    "DENIAL_TEXT",
    "INBOUND_GATES",
    "OUTBOUND_GATES",
    "Admission",
    "AdmissionView",
    "Admitted",
    "DenialReason",
    "Held",
    "PushAdmissions",
    "Refused",
    "admit",
    "admit_channel_message",
    "before_inference_eligible",
    "denial_reason",
    "may_send",
    "required_capabilities",
]

#: Server -> host methods and the capability path each needs (MCPL §5.4, §14.1).
INBOUND_GATES: dict[str, str] = {
    "push/event": "pushEvents",
    "inference/request": "inferenceRequest",
    "model/info": "modelInfo",
    "channels/register": "channels.register",
    "channels/changed": "channels.register",
    "channels/list": "channels.register",
    "channels/incoming": "channels.incoming",
    "tools/observe": "toolLifecycle.observe",  # RFC-007 §4.1, §6
}
#: Host -> server methods and the capability path each needs (MCPL §5.4, §10, §14.3).
#: ``context/beforeInference`` needs ``observe`` or an ``inject`` leaf
#: (``before_inference_eligible``).
OUTBOUND_GATES: dict[str, str] = {
    "inference/lifecycle": "inferenceLifecycle",
    "channels/open": "channels.lifecycle",
    "channels/close": "channels.lifecycle",
    "channels/publish": "channels.publish",
    "channels/outgoing/chunk": "channels.streaming",
    "channels/outgoing/complete": "channels.streaming",
    "tools/lifecycle": "toolLifecycle.observe",  # RFC-007 §3, §4.1
}
OBSERVE = "contextHooks.beforeInference.observe"
INJECT_LEAVES = tuple(
    f"contextHooks.beforeInference.inject.{position}" for position in ("system", "beforeUser", "afterUser")
)


class AdmissionView(Protocol):
    """What admission reads: the grant in force (None before the initial receipt, and on a
    plain MCP or MCP-only connection), the derivation in force with it, the declarations,
    the MCPL ``state``, what is ``advertised`` and the connection's ``profile``."""

    @property
    def grant(self) -> Grant | None: ...

    @property
    def derivation(self) -> Derivation | None: ...

    @property
    def feature_sets(self) -> FeatureSetDeclarations: ...

    @property
    def state(self) -> MCPLState: ...

    @property
    def advertised(self) -> frozenset[str]: ...

    @property
    def profile(self) -> Profile: ...


#: Why a capability gate refused (module rules, step 1).
DenialReason = Literal["not_in_force", "denied_by_policy", "not_advertised", "mcpl_off"]
#: The phrase of each reason, as the error message, log lines and reports give it.
DENIAL_TEXT: dict[DenialReason, str] = {
    "not_in_force": "the policy is not yet in force",
    "denied_by_policy": "the host's policy denies it",
    "not_advertised": "the server did not advertise it",
    "mcpl_off": "MCPL is off for this connection",
}


@dataclass(frozen=True, slots=True)
class Admitted:
    """Admitted; ``notes``: what the 0.4 profile let through that MCPL 0.5 refuses."""

    notes: tuple[CompatNote, ...] = ()


@dataclass(frozen=True, slots=True)
class Held:
    """0.4 profile: the policy is not settled; hold the request, then ``admit()`` it again
    with ``may_hold=False`` once it is (``capability``: the path it waits for, or None for
    a ``state/*`` request)."""

    capability: str | None = None


@dataclass(frozen=True, slots=True)
class Refused:
    """A refusal: ``error`` to answer with; ``diagnostic`` a declaration mismatch to log;
    ``reason`` the gate's reason (step 1), else None."""

    error: HandlerError
    diagnostic: DeclarationMismatch | None = None
    reason: DenialReason | None = None


#: What ``admit()`` decides.
Admission = Admitted | Held | Refused
_ADMITTED = Admitted()


#: Each gated method's paths, as ``required_capabilities`` gives them (made once).
_GATE_PATHS: dict[str, tuple[str, ...]] = {method: (gate,) for method, gate in INBOUND_GATES.items()}
_STREAMING_PATHS = (INBOUND_GATES["inference/request"], "inferenceRequest.streaming")


def required_capabilities(method: str, params: object) -> tuple[str, ...]:
    """The capability paths ``method`` needs with these ``params`` (empty: ungated)."""
    if method in INPUT_METHODS:  # RFC-009 §2.2: both, neither grants the other
        return INPUT_STREAM_PATHS
    if method == "inference/request" and is_object(params) and params.get("stream") is True:
        return _STREAMING_PATHS
    return _GATE_PATHS.get(method, ())


def denial_reason(path: str, view: AdmissionView) -> DenialReason:
    """Why the gate refuses ``path`` on ``view`` (module rules, step 1)."""
    grant = view.grant
    if grant is None:
        if view.state is MCPLState.PENDING:
            return "not_in_force"
        return "mcpl_off" if view.state is MCPLState.MCP_ONLY else "not_advertised"
    return "denied_by_policy" if path in grant.advertised or path in view.advertised else "not_advertised"


def _denied(path: str, feature_set: str | None = None, reason: DenialReason | None = None) -> HandlerError:
    data: JSONObject = {"capability": path}
    if feature_set is not None:
        data["featureSet"] = feature_set
    message = "Capability denied" if reason is None else f"Capability denied: {DENIAL_TEXT[reason]}"
    return HandlerError(ErrorCode.CAPABILITY_DENIED, message, data)


def _invalid(problems: list[str]) -> HandlerError:
    return HandlerError(ErrorCode.INVALID_PARAMS, "Invalid params", {"problems": problems})


def _feature_set_named(params: Mapping[str, object], view: AdmissionView) -> HandlerError | FeatureSet:
    """Steps 2-3 up to "enabled": the enabled feature set's declaration, or the refusal."""
    name = params.get("featureSet")
    if not is_name(name):
        return HandlerError(ErrorCode.INVALID_PARAMS, "Invalid params: featureSet must be a non-empty string")
    declared = view.feature_sets.sets.get(name)
    if declared is None:
        return HandlerError(ErrorCode.UNKNOWN_FEATURE_SET, "Unknown feature set", {"featureSet": name})
    derivation = view.derivation
    if derivation is None or name not in derivation.enabled:  # disabled, or nothing in force
        return HandlerError(
            ErrorCode.FEATURE_SET_NOT_ENABLED, "Feature set not enabled", {"featureSet": name}
        )
    return declared


def admit(method: str, params: object, view: AdmissionView, *, may_hold: bool = True) -> Admission:
    """Whether the request (or channel notification) may be served (module rules): the
    ``Admitted``, ``Held`` or ``Refused`` decision. ``may_hold=False``: the second call for a
    held request, which refuses what it would hold again.

    The profile is read only where a step differs under it (holding, the two notes): the
    usual request, granted, advertised and declared, never reads it."""
    grant = view.grant
    required = required_capabilities(method, params)
    if (
        may_hold
        and (required or method in STATE_METHODS)
        and view.state is MCPLState.PENDING
        and view.profile == "0.4"
    ):
        return Held(required[0] if required else None)
    notes: list[CompatNote] | None = None  # made for the first note only
    for path in required:  # step 1
        if grant is None or not grant.allows(path):
            reason = denial_reason(path, view)
            return Refused(_denied(path, reason=reason), reason=reason)
        if path not in view.advertised and view.profile == "0.4":
            notes = notes or []
            notes.append(CompatNote("unadvertised_leaf", method=method, capability=path))
    if method not in OBJECT_PARAMS_METHODS:
        return Admitted(tuple(notes)) if notes else _ADMITTED
    if not is_mapping(params):
        return Refused(HandlerError(ErrorCode.INVALID_PARAMS, "Invalid params: expected an object"))
    state_method = method in STATE_METHODS
    if state_method or method in FEATURE_SET_METHODS:  # steps 2-3
        declared = _feature_set_named(params, view)
        if isinstance(declared, HandlerError):
            return Refused(declared)
        for path in required:
            if path in declared.uses:
                continue
            if view.profile != "0.4":
                return Refused(_denied(path, declared.name), DeclarationMismatch(method, declared.name, path))
            notes = notes or []
            notes.append(CompatNote("uses_lacks", method=method, feature_set=declared.name, capability=path))
    if method == "push/event":  # step 4, the usual method first
        problems = push_event_problems(params)
    elif state_method:
        problems = state_params_problems(method, params)
    elif method == "inference/request":
        problems = inference_params_problems(params)
    else:
        problems = channel_params_problems(method, params)
    if problems:
        return Refused(_invalid(problems))
    return Admitted(tuple(notes)) if notes else _ADMITTED


_PUSH_PATH = INBOUND_GATES["push/event"]


class PushAdmissions:
    """One connection's ``admit("push/event", params, view)``, remembering which feature
    sets passed steps 1-3 (MCPL §6.6) with no note, so that their next push runs step 4
    (its params' shape) alone.

    Steps 1-3 of a push read only the view's ``grant``, ``derivation``, ``feature_sets``,
    ``advertised`` and ``state``, and its profile only to hold (in ``PENDING``) or to note
    (a path not advertised by the server itself, or not in the set's ``uses``, which the
    strict profile refuses): a push admitted with no note, outside ``PENDING``, its path
    advertised, would be admitted so under either profile. Each of the five is an immutable
    value (frozen dataclasses of frozensets and tuples, an enum; the declarations' dict is
    never changed in place) that the policy state replaces when a receipt, a manifest
    change or a refusal changes it: while all five are the very objects they were when a
    feature set passed, it passes again. Any other push
    (another feature set, a view changed since, params not a ``dict``) runs ``admit``
    itself, and a push it admits with no note, outside ``PENDING``, its path advertised, is
    remembered."""

    __slots__ = ("_advertised", "_derivation", "_feature_sets", "_grant", "_passed", "_state", "_view")

    def __init__(self, view: AdmissionView) -> None:
        self._view = view
        self._passed: set[str] = set()  # feature set names; at most the declared ones
        self._grant: Grant | None = None
        self._derivation: Derivation | None = None
        self._feature_sets: FeatureSetDeclarations | None = None
        self._advertised: frozenset[str] | None = None
        self._state: MCPLState | None = None

    def admit(self, params: Any) -> Admission:
        """``admit("push/event", params, view)``'s decision (the class's rules)."""
        view = self._view
        in_force = (
            view.grant is self._grant
            and view.derivation is self._derivation
            and view.feature_sets is self._feature_sets
            and view.advertised is self._advertised
            and view.state is self._state
        )
        if in_force and type(params) is dict:
            fields: dict[str, Any] = params  # pyright: ignore[reportUnknownVariableType] (parsed)
            name = fields.get("featureSet")  # (a list or an object is no key of a set: admit refuses it)
            if type(name) is str and name in self._passed:
                problems = push_event_problems(fields)  # step 4, as ``admit`` takes it
                return Refused(_invalid(problems)) if problems else _ADMITTED
        return self._admit(params, in_force)

    def _admit(self, params: Any, in_force: bool) -> Admission:
        """``admit`` itself, its decision remembered when it admits with no note outside
        ``PENDING``, the path advertised by the server itself (the class's rules).
        ``in_force``: the five values remembered are the view's (``admit`` is pure: it
        changes none of them)."""
        view = self._view
        decision = admit("push/event", params, view)
        if decision is _ADMITTED and view.state is not MCPLState.PENDING and _PUSH_PATH in view.advertised:
            name: str = params["featureSet"]  # (admitted: an object naming a feature set)
            if not in_force:
                self._passed = set()
                self._grant, self._derivation, self._feature_sets = (
                    view.grant,
                    view.derivation,
                    view.feature_sets,
                )
                self._advertised, self._state = view.advertised, view.state
            self._passed.add(name)
        return decision


def admit_channel_message(
    message: Any,
    view: AdmissionView,
    registry: ChannelRegistry,
    patterns: tuple[str, ...] | None,
) -> str | None:
    """None when one ``channels/incoming`` message may be delivered now, else the refusal
    reason (MCPL §14.3, §14.5): ``invalid_message``, ``capability_denied`` (the grant in force
    lacks ``channels.incoming`` or ``channels.register``, or ``patterns`` refuse the id),
    ``unknown_channel`` (not registered on this connection), ``not_permitted`` (an outbound
    channel). The message's own ``channelId`` confers nothing."""
    if incoming_message_problem(message) is not None:
        return "invalid_message"
    grant = view.grant
    if grant is None or not (grant.allows("channels.incoming") and grant.allows("channels.register")):
        return "capability_denied"
    channel_id = message["channelId"]
    descriptor = registry.get(channel_id)
    if descriptor is None:
        return "unknown_channel"
    if descriptor.get("direction") not in ("inbound", "bidirectional"):
        return "not_permitted"
    if not channel_allowed(channel_id, patterns):
        return "capability_denied"
    return None


def may_send(method: str, view: AdmissionView) -> str | None:
    """None when the host may send ``method`` now (MCPL §5.4), else why not (a phrase)."""
    grant = view.grant
    if grant is None:
        return "the connection is not MCPL-ready"
    path = OUTBOUND_GATES.get(method)
    if path is not None and not grant.allows(path):
        return f"{path!r} is not granted"
    if method == "context/beforeInference" and not before_inference_eligible(view):
        return f"neither {OBSERVE!r} nor an injection position is granted"
    return None


def before_inference_eligible(view: AdmissionView) -> bool:
    """Granted ``observe`` or any ``inject.*`` leaf (MCPL §10.1)."""
    grant = view.grant
    return grant is not None and any(grant.allows(path) for path in (OBSERVE, *INJECT_LEAVES))

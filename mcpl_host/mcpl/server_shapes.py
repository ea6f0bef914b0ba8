"""Shapes of the server -> host MCPL methods: pure checks, the channel registry, held state.

Rules (MCPL §8, §9.3, §11.2-§11.3, §12, §14.2-§14.5; docs/protocol.md, "Channels" and "State").
Everything here is pure: no I/O, no grant, no logging, no clock; each check returns problem
sentences (empty or None when fine) that name keys, never values.

- ``inference/request`` params: ``messages`` a non-empty array of ``{role: str, content}``
  (content a string or an array of content blocks, objects with a string ``type``);
  ``stream`` a boolean, ``preferences`` an object, ``conversationId`` a string, when present
  and not null. Its result: ``{content: str, model: str, finishReason: end_turn|max_tokens|
  stop_sequence, usage: {inputTokens, outputTokens}}`` (non-negative integers).
- ``push/event`` result: ``{accepted: bool, inferenceId?: str, reason?: str}``.
- ``ModelInfo``: ``{id: str, vendor: str, contextWindow: positive int, capabilities: [str]}``.
- ``ChannelDescriptor``: ``id`` a non-empty string, ``type`` a string, ``direction`` one of
  outbound|inbound|bidirectional, ``label`` a string when present (deployed servers
  omit it; docs/protocol.md, "Channels"); other members are kept as sent.
- ``ChannelRegistry.change`` judges each item on its own (§14.5) with a reason from a closed
  set: ``invalid_descriptor``, ``duplicate_id`` (twice in one message), ``unknown_channel``
  (removing or updating an id never registered), ``capability_denied`` (the spec's literal:
  the host's channel-id globs, matched by ``fnmatch.fnmatchcase``, refuse the id),
  ``limit_exceeded`` (a new id beyond ``max_channels`` registered at once, or a descriptor
  of more than ``max_descriptor_bytes`` JSON bytes; the item's ``limit`` names the bound's
  config key). It applies removed, then added, then updated; registering an id already
  registered replaces its descriptor (docs/protocol.md, "Channels").
- ``state/update`` params (the MCPL libraries' shape; no spec basis; docs/protocol.md,
  "State"): ``checkpoint`` a non-empty
  string, ``parent`` a string or null; ``data`` (alias ``state``) and ``patch`` exclusive,
  ``patch`` an array; with none of them the checkpoint is an opaque reference.
  The state itself is kept in the server's ``StateStore`` (``mcpl.state``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, TypeGuard

from mcpl_host.json_size import json_size
from mcpl_host.jsonrpc.values import JSONObject, is_array, is_mapping
from mcpl_host.limits import DEFAULT_MAX_CHANNEL_DESCRIPTOR_BYTES, DEFAULT_MAX_CHANNELS, config_key

__all__ = [
    "DIRECTIONS",
    "FINISH_REASONS",
    "GENERIC_REFUSAL",
    "OBJECT_PARAMS_METHODS",
    "SERVER_METHODS",
    "STATE_METHODS",
    "ChannelRegistry",
    "ItemResult",
    "channel_allowed",
    "channel_params_problems",
    "descriptor_problem",
    "incoming_message_problem",
    "inference_params_problems",
    "inference_result_problems",
    "is_name",
    "model_info_problems",
    "push_result_problems",
    "state_params_problems",
]

SERVER_METHODS = frozenset(
    {
        "push/event",
        "inference/request",
        "model/info",
        "channels/register",
        "channels/changed",
        "channels/list",
        "channels/incoming",
        "state/update",
        "state/get",
    }
)
#: Methods whose params must be an object (JSON-RPC 2.0 §4.2); others may omit them.
OBJECT_PARAMS_METHODS = SERVER_METHODS - {"model/info", "channels/list"}
STATE_METHODS = frozenset({"state/update", "state/get"})
FINISH_REASONS = ("end_turn", "max_tokens", "stop_sequence")
DIRECTIONS = ("outbound", "inbound", "bidirectional")
#: The reason given for ``accepted: false`` when the push/event handler gave none (§9.3).
GENERIC_REFUSAL = "not_accepted"


def is_name(value: object) -> TypeGuard[str]:
    """A non-empty string (names, ids, checkpoints)."""
    return isinstance(value, str) and value != ""


def _is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _blocks_problem(content: object, where: str) -> str | None:
    if not is_array(content):
        return f"{where} is not an array"
    if not all(is_mapping(b) and isinstance(b.get("type"), str) for b in content):
        return f"{where} holds an entry that is not an object with a string type"
    return None


def inference_params_problems(params: Mapping[str, object]) -> list[str]:
    """Problems with ``inference/request`` params beyond ``featureSet`` (MCPL §11.2)."""
    problems: list[str] = []
    messages = params.get("messages")
    if not is_array(messages) or not messages:
        problems.append("messages is missing or not a non-empty array")
    else:
        for index, message in enumerate(messages):
            if not is_mapping(message) or not is_name(message.get("role")):
                problems.append(f"messages[{index}] is not an object with a non-empty string role")
            elif not isinstance(message.get("content"), str):
                problem = _blocks_problem(message.get("content"), f"messages[{index}].content")
                if problem is not None:
                    problems.append(problem + " (nor a string)")
    checks: tuple[tuple[str, str, Callable[[Any], bool]], ...] = (
        ("stream", "a boolean", lambda v: isinstance(v, bool)),
        ("preferences", "an object", lambda v: is_mapping(v)),
        ("conversationId", "a string", lambda v: isinstance(v, str)),
    )
    for key, kind, ok in checks:
        if key in params and params[key] is not None and not ok(params[key]):
            problems.append(f"{key} is not {kind}")
    return problems


def push_result_problems(result: object) -> list[str]:
    """Problems with a push/event handler's result ``{accepted, inferenceId?, reason?}`` (§9.3)."""
    if not is_mapping(result):
        return ["the result is not an object"]
    problems = [] if isinstance(result.get("accepted"), bool) else ["accepted is not a boolean"]
    for key in ("inferenceId", "reason"):
        if key in result and not isinstance(result[key], str):
            problems.append(f"{key} is not a string")
    return problems


def inference_result_problems(result: object) -> list[str]:
    """Problems with an ``inference/request`` result (MCPL §11.3)."""
    if not is_mapping(result):
        return ["the result is not an object"]
    problems = [
        f"{key} is not a string" for key in ("content", "model") if not isinstance(result.get(key), str)
    ]
    if not any(result.get("finishReason") == reason for reason in FINISH_REASONS):
        problems.append(f"finishReason is not one of {', '.join(FINISH_REASONS)}")
    usage = result.get("usage")
    if not (
        is_mapping(usage) and _is_count(usage.get("inputTokens")) and _is_count(usage.get("outputTokens"))
    ):
        problems.append("usage does not hold inputTokens and outputTokens as non-negative integers")
    return problems


def model_info_problems(result: object) -> list[str]:
    """Problems with a ``ModelInfo`` ``{id, vendor, contextWindow, capabilities}`` (MCPL §12)."""
    if not is_mapping(result):
        return ["the model information is not an object"]
    problems = [
        f"{key} is not a non-empty string" for key in ("id", "vendor") if not is_name(result.get(key))
    ]
    window = result.get("contextWindow")
    if not (_is_count(window) and window > 0):
        problems.append("contextWindow is not a positive integer")
    capabilities = result.get("capabilities")
    if not (is_array(capabilities) and all(isinstance(c, str) for c in capabilities)):
        problems.append("capabilities is not an array of strings")
    return problems


def descriptor_problem(descriptor: object) -> str | None:
    """Why a ChannelDescriptor (MCPL §14.2) cannot be registered, else None."""
    if not is_mapping(descriptor):
        return "the descriptor is not an object"
    if not is_name(descriptor.get("id")):
        return "id is not a non-empty string"
    if not isinstance(descriptor.get("type"), str):
        return "type is not a string"
    if not any(descriptor.get("direction") == d for d in DIRECTIONS):
        return "direction is not one of outbound, inbound, bidirectional"
    if "label" in descriptor and not isinstance(descriptor["label"], str):
        return "label is not a string"
    return None


def incoming_message_problem(message: object) -> str | None:
    """Why a ``channels/incoming`` message (MCPL §14.3) cannot be taken, else None. Only what
    routing needs is required: ``messageId``, ``channelId`` and ``content`` blocks."""
    if not is_mapping(message):
        return "the message is not an object"
    for key in ("messageId", "channelId"):
        if not is_name(message.get(key)):
            return f"{key} is not a non-empty string"
    return _blocks_problem(message.get("content"), "content")


def channel_allowed(channel_id: str, patterns: tuple[str, ...] | None) -> bool:
    """Per-channel narrowing (MCPL §14.5): None allows every id, else a glob must match."""
    return patterns is None or any(fnmatchcase(channel_id, pattern) for pattern in patterns)


@dataclass(frozen=True, slots=True)
class ItemResult:
    """One item of an itemized channel answer; ``detail`` is for logs, never sent;
    ``limit``: the ``Limits`` field behind a ``limit_exceeded`` refusal (sent as its config
    key)."""

    id: str | None
    accepted: bool
    reason: str | None = None
    detail: str | None = None
    limit: str | None = None

    def to_wire(self) -> JSONObject:
        item: JSONObject = {"id": self.id, "accepted": self.accepted}
        if self.reason is not None:
            item["reason"] = self.reason
        if self.limit is not None:
            item["limit"] = config_key(self.limit)
        return item


class ChannelRegistry:
    """The channels one connection registered (MCPL §14.2-§14.5):
    id -> descriptor as sent (a copy). ``change()`` applies a register/changed message item by
    item and returns one ``ItemResult`` per item, within ``max_channels`` channels and
    ``max_descriptor_bytes`` bytes per descriptor (``Limits.max_channels``,
    ``max_channel_descriptor_bytes``). Pure: no I/O, no grant (admission's job)."""

    __slots__ = ("_channels", "_generations", "_last_generation", "max_channels", "max_descriptor_bytes")

    def __init__(
        self,
        *,
        max_channels: int = DEFAULT_MAX_CHANNELS,
        max_descriptor_bytes: int = DEFAULT_MAX_CHANNEL_DESCRIPTOR_BYTES,
    ) -> None:
        self._channels: dict[str, dict[str, Any]] = {}
        #: id -> the registration generation (RFC-009 §4.1): new at each accepted register or
        #: update of the id, never reused on this connection.
        self._generations: dict[str, int] = {}
        self._last_generation = 0
        self.max_channels = max_channels
        self.max_descriptor_bytes = max_descriptor_bytes

    def get(self, channel_id: object) -> dict[str, Any] | None:
        return self._channels.get(channel_id) if isinstance(channel_id, str) else None

    def descriptors(self) -> list[dict[str, Any]]:
        return [dict(d) for d in self._channels.values()]

    def generation(self, channel_id: str) -> int:
        """The registration generation of a registered ``channel_id`` (RFC-009 §4.1), 0 if none."""
        return self._generations.get(channel_id, 0)

    def ids(self) -> list[str]:
        return list(self._channels)

    def __len__(self) -> int:
        return len(self._channels)

    def __repr__(self) -> str:
        return f"<ChannelRegistry channels={len(self._channels)}>"

    def change(
        self,
        *,
        added: Sequence[Any] = (),
        removed: Sequence[Any] = (),
        updated: Sequence[Any] = (),
        patterns: tuple[str, ...] | None = None,
    ) -> list[ItemResult]:
        """Remove, then add, then update (docs/protocol.md, "Channels"); each item judged on its own."""
        results: list[ItemResult] = []
        for channel_id in removed:
            if isinstance(channel_id, str) and self._channels.pop(channel_id, None) is not None:
                self._generations.pop(channel_id, None)
                results.append(ItemResult(channel_id, True))
            else:
                results.append(
                    ItemResult(
                        channel_id if isinstance(channel_id, str) else None,
                        False,
                        "unknown_channel",
                        "not a registered channel id",
                    )
                )
        seen: set[str] = set()
        results += [self._put(d, patterns, seen, update=False) for d in added]
        results += [self._put(d, patterns, seen, update=True) for d in updated]
        return results

    def _put(
        self, descriptor: Any, patterns: tuple[str, ...] | None, seen: set[str], *, update: bool
    ) -> ItemResult:
        problem = descriptor_problem(descriptor)
        raw_id = descriptor.get("id") if is_mapping(descriptor) else None
        channel_id = raw_id if isinstance(raw_id, str) else None
        if problem is not None or channel_id is None:
            return ItemResult(channel_id, False, "invalid_descriptor", problem)
        if channel_id in seen:
            return ItemResult(channel_id, False, "duplicate_id", "the id appears twice in one message")
        seen.add(channel_id)
        if update and channel_id not in self._channels:
            return ItemResult(channel_id, False, "unknown_channel", "updated but never registered")
        if not channel_allowed(channel_id, patterns):
            return ItemResult(channel_id, False, "capability_denied", "the host's channel patterns refuse it")
        if json_size(descriptor, limit=self.max_descriptor_bytes) > self.max_descriptor_bytes:
            limit, bound = "max_channel_descriptor_bytes", self.max_descriptor_bytes
            return ItemResult(
                channel_id, False, "limit_exceeded", f"the descriptor is over Limits.{limit} = {bound}", limit
            )
        if channel_id not in self._channels and len(self._channels) >= self.max_channels:
            limit = "max_channels"
            detail = f"{self.max_channels} channels are registered: Limits.{limit}"
            return ItemResult(channel_id, False, "limit_exceeded", detail, limit)
        self._channels[channel_id] = dict(descriptor)
        self._last_generation += 1
        self._generations[channel_id] = self._last_generation
        return ItemResult(channel_id, True)


def state_params_problems(method: str, params: Mapping[str, object]) -> list[str]:
    """Problems with ``state/update`` params (the libraries' shape; ``state/get`` needs only the
    ``featureSet`` admission checks; docs/protocol.md, "State"): ``checkpoint`` a non-empty
    string (required: the store is keyed by it), ``parent`` a string or null, ``data`` (alias
    ``state``) and ``patch`` exclusive, ``patch`` an array."""
    if method == "state/get":
        return []
    problems = (
        [] if is_name(params.get("checkpoint")) else ["checkpoint is missing or not a non-empty string"]
    )
    if params.get("parent") is not None and not isinstance(params["parent"], str):
        problems.append("parent is not a string")
    if "patch" in params and ("data" in params or "state" in params):
        problems.append("data and patch are mutually exclusive")
    elif "patch" in params and not is_array(params["patch"]):
        problems.append("patch is not an array")
    return problems


def channel_params_problems(method: str, params: Mapping[str, object]) -> list[str]:
    keys: tuple[str, ...]
    if method == "channels/register":
        keys, required = ("channels",), True
    elif method == "channels/changed":
        keys, required = ("added", "removed", "updated"), False
    else:
        keys, required = ("messages",), True
    return [
        f"{key} is {'missing or ' if required else ''}not an array"
        for key in keys
        if (required or params.get(key) is not None) and not is_array(params.get(key))
    ]

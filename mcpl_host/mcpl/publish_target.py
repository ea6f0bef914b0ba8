"""Targeted publish (MCPL RFC-011 rev 3): the declaration, the thread target, the outcome and
the reply target. Pure: no I/O, no grant, no logging; problem sentences name keys, never values.

Rules:

- **Declaration** (RFC-011 §3, amending MCPL §14.2): a channel descriptor's
  ``capabilities.publish.target`` is ``"exact"`` or ``"root"`` (``publish_target``). Any other
  value, or a ``capabilities``/``publish`` member that is not an object, declares nothing: the
  channel is treated as one with no declaration (no ``threadId`` is ever sent to it), and the
  descriptor is registered with its other members intact (``publish_target_problem`` says
  why, for a diagnostic; docs/protocol.md, "Targeted publish", P1).
- **Thread target** (RFC-011 §4): ``ABSENT`` (the default: no ``threadId`` member, the legacy
  placement), ``None`` (``threadId: null``, the channel root) or a non-empty string (that
  thread). The value domain is closed: anything else is the caller's mistake
  (``thread_target_problem``), never sent.
- **Outcome** (RFC-011 §5, ``targeted_outcome``) of a publish that carried ``threadId``:
  ``delivered: true`` with an echoed ``threadId`` equal to the request -> ``"delivered"``;
  ``delivered: true`` with the echo missing or different -> ``"unconfirmed"``;
  ``delivered: false`` with no ``messageId`` -> ``"failed"`` (a refusal, nothing posted);
  ``delivered: false`` with a ``messageId`` -> ``"unconfirmed"``; a result that is not an
  object or whose ``delivered`` is not a boolean -> ``"unconfirmed"`` (P3). Error answers,
  timeouts and a lost connection are ``"unconfirmed"`` too (the I/O shell's part).
- **Reply target** (RFC-011 §3): a ``channels/incoming`` message names its channel as
  ``channelId`` and its thread as ``threadId``; a channel-bearing ``push/event`` names them as
  ``origin.mcplChannelId`` and ``origin.threadId``. A thread id that is present but not a
  non-empty string gives no reply target at all (answering at the root instead would be the
  substitution RFC-011 §8 rules out; P4).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeGuard

from mcpl_host.jsonrpc.values import is_mapping

__all__ = [
    "ABSENT",
    "PUBLISH_OUTCOMES",
    "PUBLISH_TARGETS",
    "Absent",
    "PublishOutcome",
    "PublishTarget",
    "ReplyTarget",
    "ThreadTarget",
    "incoming_thread_problem",
    "publish_target",
    "publish_target_problem",
    "reply_target_of_message",
    "reply_target_of_push",
    "targeted_outcome",
    "thread_target_problem",
]

PublishTarget = Literal["exact", "root"]
PUBLISH_TARGETS: tuple[PublishTarget, ...] = ("exact", "root")
PublishOutcome = Literal["delivered", "unconfirmed", "failed"]
PUBLISH_OUTCOMES: tuple[PublishOutcome, ...] = ("delivered", "unconfirmed", "failed")


class Absent(enum.Enum):
    """The type of ``ABSENT``: no ``threadId`` member at all (RFC-011 §4, "absent")."""

    ABSENT = "absent"

    def __repr__(self) -> str:
        return "ABSENT"


#: No ``threadId`` member: the legacy placement (RFC-011 §4). Distinct from ``None`` (root).
ABSENT: Final = Absent.ABSENT

#: Where a publish is asked to land: ``ABSENT`` (server's choice), ``None`` (root), a thread id.
ThreadTarget = str | None | Absent


def _is_thread_id(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and value != ""


def publish_target(descriptor: Mapping[str, Any] | None) -> PublishTarget | None:
    """The descriptor's declared ``capabilities.publish.target`` (RFC-011 §3), or None when it
    declares none (absent, or not one of ``PUBLISH_TARGETS``)."""
    if descriptor is None:
        return None
    capabilities = descriptor.get("capabilities")
    publish = capabilities.get("publish") if is_mapping(capabilities) else None
    target = publish.get("target") if is_mapping(publish) else None
    for known in PUBLISH_TARGETS:
        if target == known:
            return known
    return None


def publish_target_problem(descriptor: Mapping[str, Any]) -> str | None:
    """Why a descriptor's ``capabilities.publish`` declares nothing although it is present
    (RFC-011 §3), else None. Absent members are no problem (no declaration)."""
    if "capabilities" not in descriptor:
        return None
    capabilities = descriptor["capabilities"]
    if not is_mapping(capabilities):
        return "capabilities is not an object" if capabilities is not None else None
    if "publish" not in capabilities:
        return None
    publish = capabilities["publish"]
    if not is_mapping(publish):
        return "capabilities.publish is not an object"
    if "target" not in publish:
        return "capabilities.publish has no target"
    if publish_target(descriptor) is None:
        return "capabilities.publish.target is not one of exact, root"
    return None


def thread_target_problem(thread_id: object) -> str | None:
    """Why ``thread_id`` may not be sent as ``threadId`` (RFC-011 §4: a non-empty string or
    null; ``ABSENT`` sends nothing), else None."""
    if thread_id is ABSENT or thread_id is None or _is_thread_id(thread_id):
        return None
    if isinstance(thread_id, str):
        return "thread_id is an empty string (RFC-011 §4: a non-empty string, None for the root)"
    return "thread_id is not a string, None or ABSENT (RFC-011 §4)"


def targeted_outcome(result: object, thread_id: str | None) -> tuple[PublishOutcome, str]:
    """The outcome of a ``channels/publish`` result for a request that carried ``threadId``
    equal to ``thread_id`` (RFC-011 §5), and a sentence saying why (names no value)."""
    if not is_mapping(result) or not isinstance(result.get("delivered"), bool):
        return "unconfirmed", "the result has no boolean delivered"
    if result["delivered"] is False:
        if "messageId" in result and result["messageId"] is not None:
            return "unconfirmed", "delivered is false but a messageId was answered (contradictory)"
        return "failed", "refused: delivered is false with no messageId, nothing posted"
    if "threadId" not in result:
        return "unconfirmed", "delivered, but the result does not echo threadId"
    echo = result["threadId"]
    if echo is None and thread_id is None:
        return "delivered", "delivered at the channel root, echoed"
    if _is_thread_id(echo) and echo == thread_id:
        return "delivered", "delivered in the thread asked for, echoed"
    return "unconfirmed", "delivered, but the echoed threadId differs from the one sent"


@dataclass(frozen=True, slots=True)
class ReplyTarget:
    """Where a reply to a message goes (RFC-011 §3): ``channel_id`` (a registered channel id,
    as the server named it) and ``thread_id`` (the thread, or None for the channel root).
    Pass both to ``channels.publish(..., thread_id=target.thread_id)``."""

    channel_id: str
    thread_id: str | None

    def to_json(self) -> dict[str, str | None]:
        return {"channelId": self.channel_id, "threadId": self.thread_id}


def _target(channel_id: object, holder: Mapping[str, Any], key: str) -> ReplyTarget | None:
    if not _is_thread_id(channel_id):
        return None
    if key not in holder or holder[key] is None:
        return ReplyTarget(channel_id, None)
    thread_id = holder[key]
    return ReplyTarget(channel_id, thread_id) if _is_thread_id(thread_id) else None


def reply_target_of_message(message: object) -> ReplyTarget | None:
    """The reply target of a ``channels/incoming`` message: ``channelId`` and ``threadId``
    (RFC-011 §3), or None (no channel id, or a thread id that is not a non-empty string)."""
    if not is_mapping(message):
        return None
    return _target(message.get("channelId"), message, "threadId")


def reply_target_of_push(params: object) -> ReplyTarget | None:
    """The reply target of a ``push/event``: ``origin.mcplChannelId`` and ``origin.threadId``
    (RFC-011 §3, amending MCPL §9.2), or None when the push names no channel there (or a
    thread id that is not a non-empty string)."""
    origin = params.get("origin") if is_mapping(params) else None
    if not is_mapping(origin):
        return None
    return _target(origin.get("mcplChannelId"), origin, "threadId")


def incoming_thread_problem(message: Mapping[str, Any], target: PublishTarget | None) -> str | None:
    """Why a ``channels/incoming`` message breaks its channel's declaration (RFC-011 §3: on a
    ``root`` channel no message carries ``threadId``; a carried one is a non-empty string),
    else None."""
    if "threadId" not in message or message["threadId"] is None:
        return None
    if not _is_thread_id(message["threadId"]):
        return "threadId is not a non-empty string"
    if target == "root":
        return "threadId on a message of a channel declaring publish.target root"
    return None

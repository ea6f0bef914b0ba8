"""The input-stream vocabulary the rest of MCPL reads (RFC-009, experimental): the four
methods, the capability paths they need, whether a server advertises input streaming, what an
event may show of their params, and their refusal. The lease state machine is
``mcpl.input_streams``: a server given no input streams never loads it."""

from __future__ import annotations

from typing import Any

from mcpl_host.jsonrpc.errors import HandlerError
from mcpl_host.jsonrpc.values import is_mapping

__all__ = [
    "INPUT_METHODS",
    "INPUT_STREAM_PATHS",
    "INPUT_STREAM_REJECTED",
    "advertises_input_streaming",
    "metadata_only",
    "rejected",
]

#: The four Server -> Host requests (RFC-009 §3).
INPUT_METHODS = frozenset(
    {"channels/input/open", "channels/input/update", "channels/input/complete", "channels/input/abort"}
)
#: The capability paths every input method needs, in the order checked (RFC-009 §2.2).
INPUT_STREAM_PATHS = ("channels.incoming", "channels.incoming.streaming")
INPUT_STREAM_REJECTED = -32025  # RFC-009 §11 (proposed)


def advertises_input_streaming(mcpl: object) -> bool:
    """Whether an ``experimental.mcpl`` object advertises ``channels.incoming.streaming``
    (RFC-009 §2.1): ``channels`` an object whose own ``inputStreaming`` is ``true``; no
    ancestor boolean, nested ``incoming.streaming`` or dotted member counts."""
    channels = mcpl.get("channels") if is_mapping(mcpl) else None
    return is_mapping(channels) and channels.get("inputStreaming") is True


def metadata_only(params: object) -> object:
    """An input method's params or result as events and logs may show them (RFC-009 §10;
    IS11): no ``text`` (its length in scalar values as ``textChars``), no ``contentDigest``,
    the sender by id only."""
    if not is_mapping(params):
        return params
    hidden = ("text", "sender", "contentDigest")
    shown: dict[str, Any] = {k: v for k, v in params.items() if k not in hidden}
    text, sender = params.get("text"), params.get("sender")
    if isinstance(text, str):
        shown["textChars"] = len(text)
    if is_mapping(sender):
        shown["sender"] = {"id": sender.get("id")}
    return shown


def rejected(reason: str) -> HandlerError:
    """The ``-32025`` error with ``data.reason`` (RFC-009 §11)."""
    return HandlerError(INPUT_STREAM_REJECTED, "Input stream rejected", {"reason": reason})

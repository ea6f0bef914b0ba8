"""What a host keeps of the events a server sent, bounded in count and in bytes. Pure.

A server chooses how large each event is (a ``channels/register`` of 20,000 channels is
1.2 MB of JSON, 20 MB as Python objects), so a record bounded by count alone is bounded by
nothing. ``EventRecord`` keeps an event whole while it is at most ``max_event_bytes`` of
compact JSON (``json_size``); a larger one is kept without its ``params``, ``answer`` and
``error``, with ``omitted`` saying which and how many bytes they were. Once the kept events
reach ``max_total_bytes``, or ``max_events`` of them, a later event is not kept: it is
counted, with its bytes. ``omitted()`` is what the report says it left out
(docs/protocol.md, "What a host keeps").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mcpl_host.json_size import json_size
from mcpl_host.jsonrpc.values import JSONObject

__all__ = ["CUT_FIELDS", "EventRecord"]

#: The fields of an event that hold what the server sent or what was answered to it, left
#: out (in this order, until the event fits) of an event over the bound.
CUT_FIELDS = ("params", "answer", "error")


@dataclass(slots=True)
class EventRecord:
    """Events kept in arrival order. ``max_events``: count; ``max_event_bytes``: one event's
    compact JSON, in bytes, kept whole; ``max_total_bytes``: all kept events, in bytes
    (``Limits.max_recorded_event_bytes``, ``Limits.max_recorded_bytes``)."""

    max_events: int
    max_event_bytes: int
    max_total_bytes: int
    events: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    kept_bytes: int = 0
    not_kept: int = 0
    not_kept_bytes: int = 0
    cut: int = 0
    cut_bytes: int = 0

    def add(self, event: dict[str, Any]) -> JSONObject:
        """Keep ``event`` (a JSON object) if it fits, shortened if it is over
        ``max_event_bytes``; count it otherwise. Returns the form kept (the one to show),
        whether it was kept or not."""
        size = original = json_size(event)
        shown = event
        if size > self.max_event_bytes:
            shown = self._shortened(event)
            size = json_size(shown, limit=self.max_event_bytes)
        if len(self.events) >= self.max_events or self.kept_bytes + size > self.max_total_bytes:
            self.not_kept += 1
            self.not_kept_bytes += original
            return shown
        if shown is not event:
            self.cut += 1
            self.cut_bytes += shown["omitted"]["bytes"]
        self.events.append(shown)
        self.kept_bytes += size
        return shown

    def _shortened(self, event: Mapping[str, object]) -> dict[str, Any]:
        """``event`` without the fields of ``CUT_FIELDS`` it needs to lose to fit, and
        ``omitted``: ``{"fields": [...], "bytes": N}`` (N: their
        compact JSON). Bounded even when every other field is large: those fields are the
        host's own (kind, method, time, a refusal's reason)."""
        shown = dict(event)
        fields: list[str] = []
        removed = 0
        for name in CUT_FIELDS:
            if shown.get(name) is None:
                continue
            removed += json_size(shown.pop(name))
            fields.append(name)
            if json_size(shown, limit=self.max_event_bytes) <= self.max_event_bytes:
                break
        shown["omitted"] = {"fields": fields, "bytes": removed}
        return shown

    def omitted(self) -> dict[str, int]:
        """What was left out: ``notKept`` events and their ``notKeptBytes``, ``cut`` events
        kept without some fields and the ``cutBytes`` of those fields."""
        return {
            "notKept": self.not_kept,
            "notKeptBytes": self.not_kept_bytes,
            "cut": self.cut,
            "cutBytes": self.cut_bytes,
        }

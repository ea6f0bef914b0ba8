"""The inbox's wake (MCPL RFC-006 rev 8 §4.2; docs/protocol.md EC13, EC15): through the real
``Host`` over real pipes to ``fixtures/current_spec/server.py`` (its ``coalescing`` part) in
real, short time, on asyncio and trio, asserting order and behaviour only (never a
duration); and the service's own arguments and recovery by direct calls on a virtual clock.

- A sole cause retracted unread produces no wake: the first wake is a later event's.
- A subject replaced without pause still wakes (the finite bound), with its current content.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpl_host import EventInbox, Host, WakePolicy
from mcpl_host.server_connection import ServerConnection

from .test_event_inbox import TIMEOUT, _config  # pyright: ignore[reportPrivateUsage]


async def _send(conn: ServerConnection, params: dict[str, Any]) -> Any:
    result = await conn.mcp.call_tool("co_send", {"method": "push/event", "params": params}, timeout=20)
    assert not result.is_error, result.text
    reply = json.loads(result.text)
    assert reply["result"]["accepted"] is True, reply
    return reply["result"]


def _push(event_id: str, text: str, **coalesce: Any) -> dict[str, Any]:
    """A ``push/event``'s params; with ``coalesce`` members, of the subject ``K``."""
    params: dict[str, Any] = {
        "featureSet": "doc",
        "eventId": event_id,
        "timestamp": "2026-01-01T00:00:00Z",
        "payload": {"content": [{"type": "text", "text": text}] if text else []},
    }
    if coalesce:
        params["coalesce"] = {"key": "K", **coalesce}
    return params


def _texts(drained: Any) -> list[str]:
    return [block["text"] for item in drained.items for block in item.event["modelContent"]]


@pytest.mark.anyio
async def test_a_retracted_sole_cause_produces_no_wake() -> None:
    """RFC-006 §4.2, §6: the subject's cause goes with its retraction, so the first wake is
    the later ordinary event's, and it reads that event alone."""
    inbox = EventInbox(["main"], wake=WakePolicy(quiet_seconds=0.05, max_postpone_seconds=0.5))
    with anyio.fail_after(TIMEOUT):
        async with Host({"editor": _config()}, event_inbox=inbox) as host:
            conn = await host.server("editor").connected()
            chat = host.inbox("main")
            await _send(conn, _push("a", "DRAFT", initial=True))
            retracted = await _send(conn, _push("z", "", retract=True))
            assert retracted["coalesce"]["outcome"] == "retracted"
            await _send(conn, _push("o", "LATER"))
            await chat.wait()
            assert [cause.subject for cause in chat.due()] == [None]  # the ordinary event's cause
            assert _texts(await chat.drain()) == ["LATER"]
            assert chat.next_wake() is None


@pytest.mark.anyio
async def test_a_subject_replaced_without_pause_still_wakes() -> None:
    """RFC-006 §4.2 no starvation: replacements keep coming while ``wait()`` waits; it returns
    anyway (one cause, the subject's), and the drain reads the subject's current content
    only."""
    inbox = EventInbox(["main"], wake=WakePolicy(quiet_seconds=0.2, max_postpone_seconds=0.4))
    stop = anyio.Event()
    admitted: list[str] = []
    with anyio.fail_after(TIMEOUT):
        async with Host({"editor": _config()}, event_inbox=inbox) as host:
            conn = await host.server("editor").connected()
            chat = host.inbox("main")

            async def replace_without_pause() -> None:
                index = 0
                while not stop.is_set():
                    await _send(conn, _push(f"r{index}", f"R{index}", initial=index == 0))
                    admitted.append(f"R{index}")
                    index += 1

            async with anyio.create_task_group() as group:
                group.start_soon(replace_without_pause)
                await chat.wait()
                causes = chat.due()
                texts = _texts(await chat.drain())
                at_drain = list(admitted)
                stop.set()
            assert [cause.subject is not None for cause in causes] == [True]
            # One text, the current content: the newest acknowledged replacement or the one
            # admitted while its acknowledgement was on the way; nothing superseded.
            assert len(texts) == 1 and int(texts[0][1:]) >= len(at_drain) - 1, (texts, at_drain[-1:])


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_without_a_wake_policy_due_and_next_wake_say_so() -> None:
    inbox = EventInbox(["main"])
    with pytest.raises(RuntimeError, match="no wake policy"):
        inbox.due("main")
    with pytest.raises(RuntimeError, match="no wake policy"):
        inbox.next_wake("main")


def test_recovered_work_wakes_after_a_restart(tmp_path: Path) -> None:
    """EC15: what a store brings back unread is a cause, due a quiet period after the new
    inbox starts."""
    store = tmp_path / "inbox.json"
    first = EventInbox(["main"], store=store)
    first.ordinary("push", "e1", _push("e1", "KEPT"))
    first.save()
    clock = Clock()
    again = EventInbox(
        ["main"], store=store, wake=WakePolicy(quiet_seconds=1.0, max_postpone_seconds=2.0), monotonic=clock
    )
    assert again.due("main") == [] and again.next_wake("main") == 101.0
    clock.now = 101.0
    assert len(again.due("main")) == 1


def test_an_ordinary_event_that_does_not_qualify_is_delivered_without_a_wake() -> None:
    """``qualifies`` decides the wake, never the delivery (RFC-006 §4.2, §16.6)."""
    clock = Clock()
    inbox = EventInbox(
        ["main"],
        wake=WakePolicy(quiet_seconds=0.0, max_postpone_seconds=1.0, qualifies=lambda e: "tags" in e),
        monotonic=clock,
    )
    inbox.ordinary("push", "quiet", _push("quiet", "QUIET"))
    assert inbox.due("main") == [] and [i.event_id for i in inbox.pending("main")] == ["quiet"]
    loud = _push("loud", "LOUD")
    loud["tags"] = ["urgent"]
    inbox.ordinary("push", "loud", loud)
    assert len(inbox.due("main")) == 1

"""The event inbox end to end (MCPL RFC-006 rev 8; docs/protocol.md EC1-EC14): through the real
``Host`` and ``connect()`` over real pipes to ``fixtures/current_spec/server.py`` (its
``coalescing`` part), on asyncio and trio.

- Off by default: no ``eventCoalescing`` advertised, a push carrying ``coalesce`` reaches
  ``subscribe()`` as a ``PushEvent`` as before, and its answer has no ``coalesce``.
- On: replacement before a drain, ``push/render`` at the drain, a retraction after it.
- ``push/render`` answered slowly, wrongly, with an error and not at all: the fallback, within
  ``Limits.push_render_timeout_seconds`` (small here).
- A restart of the server, then of the ``Host``, in the middle of a batch: exactly one
  materialization, and the retry of an admitted occurrence gets its first answer.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpl_host import EventInbox, GrantPolicy, Host, Limits, ServerConfig, connect
from mcpl_host.events import PushEvent
from mcpl_host.server_connection import ServerConnection

from .conftest import FIXTURES
from .wire import FAST

pytestmark = pytest.mark.anyio
SERVER = str(FIXTURES / "current_spec" / "server.py")
TIMEOUT = 30


def _config(limits: Limits = FAST) -> ServerConfig:
    return ServerConfig(
        name="editor",
        command=sys.executable,
        args=(SERVER,),
        grant_policy=GrantPolicy(grant_all_advertised=True),
        limits=limits,
    )


async def _tool(conn: ServerConnection, name: str, **arguments: Any) -> Any:
    tool = name if name in ("seen", "notify") else f"co_{name}"  # the part's tools: co_<name>
    result = await conn.mcp.call_tool(tool, arguments, timeout=20)
    assert not result.is_error, result.text
    return json.loads(result.text)


def _push(event_id: str, text: str, **coalesce: Any) -> dict[str, Any]:
    """A ``push/event``'s params carrying ``coalesce`` (key ``K`` and ``coalesce``)."""
    return {
        "featureSet": "doc",
        "eventId": event_id,
        "timestamp": "2026-01-01T00:00:00Z",
        "payload": {"content": [{"type": "text", "text": text}] if text else []},
        "coalesce": {"key": "K", **coalesce},
    }


def _notice(event_id: str, fallback: str) -> dict[str, Any]:
    """A deferred notice of the subject ``doc``."""
    params = _push(event_id, fallback, deferred=True)
    params["coalesce"]["key"] = "doc"
    return params


async def _send(conn: ServerConnection, params: dict[str, Any]) -> Any:
    return await _tool(conn, "send", method="push/event", params=params)


def _texts(drained: Any) -> list[str]:
    return [block["text"] for item in drained.items for block in item.event["modelContent"]]


async def test_without_an_inbox_nothing_changes() -> None:
    host = Host({"editor": _config()})
    with anyio.fail_after(TIMEOUT):
        async with host:
            pushes = host.subscribe(kinds=("push_event",))
            conn = await host.server("editor").connected()
            initialize = (await _tool(conn, "seen"))["initialize"][0]
            assert "eventCoalescing" not in initialize["capabilities"]["experimental"]["mcpl"]
            replies: list[Any] = []

            async def send() -> None:
                replies.append(await _send(conn, _push("a", "PLAIN", initial=True)))

            async with anyio.create_task_group() as group:
                group.start_soon(send)
                event = await pushes.receive()  # the application takes it as before
            assert isinstance(event, PushEvent) and event.event_id == "a"
            assert event.params["coalesce"] == {"key": "K", "initial": True}
            assert replies[0]["result"]["accepted"] is True and "coalesce" not in replies[0]["result"]
            with pytest.raises(RuntimeError, match="no event inbox"):
                host.inbox("main")


async def test_an_inbox_replaces_renders_and_notes(tmp_path: Path) -> None:
    inbox = EventInbox(["main"], store=tmp_path / "inbox.json")
    host = Host({"editor": _config()}, event_inbox=inbox)
    with anyio.fail_after(TIMEOUT):
        async with host:
            conn = await host.server("editor").connected()
            initialize = (await _tool(conn, "seen"))["initialize"][0]
            advertised = initialize["capabilities"]["experimental"]["mcpl"]["eventCoalescing"]
            assert advertised["retryWindowMs"] == 3_600_000 and advertised["deferred"] is True
            await _send(conn, _push("a", "CAT", initial=True))
            reply = await _send(conn, _push("b", "CATERPILLAR"))
            assert reply["result"]["coalesce"] == {"outcome": "replaced", "priorEventId": "a"}
            assert [i.event_id for i in host.inbox("main").pending()] == ["b"]
            await _tool(conn, "render_plan", plan={"mode": "immediate", "text": "DOC EDITED"})
            notice = _push("n1", "doc changed", deferred=True, data={"para": 3})
            notice["coalesce"]["key"] = "doc"
            await _send(conn, notice)
            drained = await host.inbox("main").drain()
            assert _texts(drained) == ["CATERPILLAR", "DOC EDITED"]
            (render,) = await _tool(conn, "renders")
            assert render["params"]["notices"] == [
                {"eventId": "n1", "timestamp": "2026-01-01T00:00:00Z", "data": {"para": 3}}
            ]
            reply = await _send(conn, _push("z", "DELETED", retract=True))
            assert reply["result"]["coalesce"]["outcome"] == "noted"
            assert _texts(await host.inbox("main").drain()) == ["DELETED"]
            malformed = await _send(conn, _push("bad", "X", deferred=True, retract=True))
            assert malformed["error"]["code"] == -32602
            assert malformed["error"]["data"] == {
                "field": "coalesce.retract",
                "reason": "is exclusive with deferred",
            }


@pytest.mark.parametrize("mode", ["slow", "wrong", "error", "held"])
async def test_a_render_that_fails_shows_the_fallback_once(mode: str, logs: list[dict[str, Any]]) -> None:
    limits = replace(FAST, push_render_timeout_seconds=0.3)
    inbox = EventInbox()
    with anyio.fail_after(TIMEOUT):
        async with connect(_config(limits), event_inbox=inbox) as conn:
            await _tool(conn, "render_plan", plan={"mode": mode, "seconds": 3, "text": "LATE"})
            await _send(conn, _push("n1", "FALLBACK", deferred=True))
            drained = await inbox.drain("main")
            assert _texts(drained) == ["FALLBACK"] and drained.model_needed
            assert await inbox.drain("main") == replace(drained, items=(), rendered=0)
            await _tool(conn, "release", text="LATE")  # a late answer changes nothing
            assert inbox.pending("main") == []
    (line,) = [entry for entry in logs if entry.get("event") == "push/render not usable"]
    assert line["server"] == "editor" and "the fallback is shown" in line["why"]


async def _drain_while_rendering(
    inbox: EventInbox, conn: ServerConnection, group: Any, drained: list[Any]
) -> anyio.Event:
    """Start a drain (its result goes to ``drained``) whose render the fixture holds; return
    once the server has the request."""
    done = anyio.Event()

    async def drain() -> None:
        try:
            drained.append(await inbox.drain("main"))
        finally:
            done.set()

    await _tool(conn, "render_plan", plan={"mode": "held"})
    group.start_soon(drain)
    assert (await _tool(conn, "wait_render", count=1))["renders"] == 1
    return done


async def test_a_server_restart_in_the_middle_of_a_batch(tmp_path: Path) -> None:
    inbox = EventInbox(store=tmp_path / "inbox.json")
    host = Host({"editor": _config()}, event_inbox=inbox)
    with anyio.fail_after(TIMEOUT):
        async with host, anyio.create_task_group() as group:
            handle = host.server("editor")
            conn = await handle.connected()
            first = await _send(conn, _push("n1", "FALLBACK", deferred=True))
            drained: list[Any] = []
            done = await _drain_while_rendering(inbox, conn, group, drained)
            handle.restart()
            await done.wait()  # the transport closed under the render: the fallback
            assert _texts(drained[0]) == ["FALLBACK"]
            conn = await handle.connected()
            assert conn.sequence == 2
            retry = await _send(conn, _push("n1", "FALLBACK", deferred=True))
            assert retry == first  # the receipt outlived the server's process (RFC-006 §3.1)
            assert host.inbox().pending() == []  # no second occurrence


async def test_a_host_restart_in_the_middle_of_a_batch(tmp_path: Path) -> None:
    store = tmp_path / "inbox.json"
    inbox = EventInbox(store=store)
    with anyio.fail_after(TIMEOUT):
        async with Host({"editor": _config()}, event_inbox=inbox) as host:
            async with anyio.create_task_group() as group:
                conn = await host.server("editor").connected()
                await _send(conn, _push("a", "PLAIN", initial=True))
                first = await _send(conn, _notice("n1", "INTERRUPTED"))
                await _drain_while_rendering(inbox, conn, group, [])
                inbox.close()  # the host dies here: nothing more is written
                group.cancel_scope.cancel()
        again = EventInbox(store=store)
        async with Host({"editor": _config()}, event_inbox=again) as host:
            conn = await host.server("editor").connected()
            retry = await _send(conn, _notice("n1", "INTERRUPTED"))
            assert retry == first
            edit = await _send(conn, _push("b", "EDIT"))
            assert edit["result"]["coalesce"]["outcome"] == "appended"  # recovery sealed PLAIN
            drained = await host.inbox().drain()
            assert _texts(drained) == ["PLAIN", "INTERRUPTED", "EDIT"]  # one fallback, no render
            assert await _tool(conn, "renders") == []


async def test_a_lane_not_advertised_ignores_coalesce_on_channel_messages() -> None:
    inbox = EventInbox(channels_incoming=False)
    with anyio.fail_after(TIMEOUT):
        async with connect(_config(), event_inbox=inbox) as conn:
            initialize = (await _tool(conn, "seen"))["initialize"][0]
            advertised = initialize["capabilities"]["experimental"]["mcpl"]["eventCoalescing"]
            assert advertised["channelsIncoming"] is False
            await _tool(conn, "register", channel="chat")
            message = {
                "channelId": "chat",
                "messageId": "M",
                "content": [{"type": "text", "text": "HELLO"}],
                "coalesce": {"key": "K", "deferred": True},  # malformed, but not for this host
            }
            reply = await _tool(conn, "send", method="channels/incoming", params={"messages": [message]})
            assert reply["result"]["results"] == [{"messageId": "M", "accepted": True}]
            assert [i.event["content"][0]["text"] for i in inbox.pending("main")] == ["HELLO"]


async def test_an_undrained_inbox_is_bounded_and_refuses_rather_than_drops() -> None:
    inbox = EventInbox(max_unread=2)
    with anyio.fail_after(TIMEOUT):
        async with connect(_config(), event_inbox=inbox) as conn:
            first = await _send(conn, _push("a", "ONE", initial=True))
            ordinary = {**_push("b", "TWO")}
            del ordinary["coalesce"]
            assert (await _send(conn, ordinary))["result"] == {"accepted": True}
            other = _push("c", "THREE", initial=True)
            other["coalesce"]["key"] = "other"
            assert (await _send(conn, other))["result"] == {"accepted": False, "reason": "inbox_full"}
            replacing = await _send(conn, _push("d", "ONE AGAIN"))  # would replace: refused alike
            assert replacing["result"]["reason"] == "inbox_full"
            assert (await _send(conn, _push("a", "ONE", initial=True))) == first  # a retry is answered
            assert _texts(await inbox.drain("main")) == ["ONE", "TWO"]
            assert (await _send(conn, other))["result"]["coalesce"]["outcome"] == "first"


async def test_a_store_that_cannot_be_written_is_a_bounded_warning_not_a_lost_event(
    tmp_path: Path, logs: list[dict[str, Any]]
) -> None:
    inbox = EventInbox(store=tmp_path / "missing" / "inbox.json")
    with anyio.fail_after(TIMEOUT):
        async with connect(_config(), event_inbox=inbox) as conn:
            for n in range(12):
                reply = await _send(conn, _push(f"e{n}", f"E{n}", initial=n == 0))
                assert reply["result"]["accepted"] is True
            assert _texts(await inbox.drain("main")) == ["E11"]
    warnings = [entry["event"] for entry in logs if entry["event"].startswith("event inbox store")]
    assert warnings[:10] == ["event inbox store not written"] * 10 and len(warnings) == 11


async def test_an_unreadable_store_starts_empty_with_a_warning(
    tmp_path: Path, logs: list[dict[str, Any]]
) -> None:
    store = tmp_path / "inbox.json"
    store.write_text('{"conversations": ["main"], "items": "not a list"}', encoding="utf-8")
    inbox = EventInbox(store=store)
    assert inbox.pending() == [] and len(inbox.state) == 0
    assert [e["event"] for e in logs] == ["event inbox store unreadable; starting empty"]


async def test_prepare_renders_without_consuming() -> None:
    inbox = EventInbox()
    with anyio.fail_after(TIMEOUT):
        async with connect(_config(), event_inbox=inbox) as conn:
            await _tool(conn, "render_plan", plan={"mode": "immediate", "text": "RENDERED"})
            await _send(conn, _push("n1", "FALLBACK", deferred=True, initial=True))
            assert await inbox.prepare("main") == 1
            assert [_texts_of(item) for item in inbox.pending("main")] == [["RENDERED"]]
            retract = await _send(conn, _push("z", "DELETED", retract=True))
            assert retract["result"]["coalesce"]["outcome"] == "retracted"  # still unread: removed
            await _tool(conn, "render_plan", plan={"mode": "empty"})
            notice = _push("n2", "FALLBACK", deferred=True)
            await _send(conn, notice)
            assert await inbox.prepare("main") == 1
            drained = await inbox.drain("main")
            assert drained.items == () and drained.model_needed is False  # counted from prepare()


def _texts_of(item: Any) -> list[str]:
    return [block["text"] for block in item.event["modelContent"]]

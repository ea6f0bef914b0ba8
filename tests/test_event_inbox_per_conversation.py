"""Per-conversation consumption end to end (MCPL RFC-006 rev 8 §3.3, vector 46;
docs/protocol.md EC4): a ``Host`` with an ``EventInbox`` of two conversations, ``a`` and ``b``,
over real pipes to ``fixtures/current_spec/server.py`` (its ``coalescing`` part sends the
``push/event`` and ``channels/incoming`` requests named here), on asyncio and trio.

- The same timeline in both modes: E1 reaches ``a`` and ``b``; ``a`` drains it; an edit E2 is
  answered ``appended`` (priorEventId E1). With ``consumption="per-conversation"`` ``b`` then
  holds E2 only, and a retraction's notice reaches ``a`` alone (``b`` never read the subject);
  with the default ``"shared"`` ``b`` holds E1 then E2 and gets the notice too, as before.
- The per-conversation history survives a restart of the ``Host`` on the inbox's store: a
  second retraction after the restart again reaches ``a`` alone.
- A channel message edited after one conversation read it: replaced in the other.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpl_host import EventInbox, Host
from mcpl_host.mcpl.coalescing import Consumption
from mcpl_host.server_connection import ServerConnection

from .test_event_inbox import TIMEOUT, _config  # pyright: ignore[reportPrivateUsage]

pytestmark = pytest.mark.anyio


async def _send(conn: ServerConnection, method: str, params: dict[str, Any]) -> Any:
    """The fixture sends ``method`` with ``params`` to the host; the reply it got."""
    result = await conn.mcp.call_tool("co_send", {"method": method, "params": params}, timeout=20)
    assert not result.is_error, result.text
    return json.loads(result.text)


async def _push(conn: ServerConnection, event_id: str, text: str, **coalesce: Any) -> Any:
    """A ``push/event`` of subject ``K``; its result's ``coalesce`` member."""
    params = {
        "featureSet": "doc",
        "eventId": event_id,
        "timestamp": "2026-01-01T00:00:00Z",
        "payload": {"content": [{"type": "text", "text": text}]},
        "coalesce": {"key": "K", **coalesce},
    }
    reply = await _send(conn, "push/event", params)
    return reply["result"]["coalesce"]


def _pending(host: Host, conversation: str) -> list[str]:
    return [item.event_id for item in host.inbox(conversation).pending()]


@pytest.mark.parametrize("consumption", ["per-conversation", "shared"])
async def test_an_edit_replaces_only_where_unread_and_a_notice_reaches_only_readers(
    consumption: Consumption, tmp_path: Path
) -> None:
    per = consumption == "per-conversation"
    store = tmp_path / "inbox.json"
    with anyio.fail_after(TIMEOUT):
        async with Host(
            {"editor": _config()}, event_inbox=EventInbox(["a", "b"], consumption=consumption, store=store)
        ) as host:
            conn = await host.server("editor").connected()
            assert await _push(conn, "e1", "FIRST", initial=True) == {"outcome": "first"}
            assert [item.event_id for item in (await host.inbox("a").drain()).items] == ["e1"]
            # vector 46: A holds E1 then E2; B holds E2 only (per conversation) or both (shared)
            assert await _push(conn, "e2", "EDIT") == {"outcome": "appended", "priorEventId": "e1"}
            assert _pending(host, "a") == ["e2"]
            assert _pending(host, "b") == (["e2"] if per else ["e1", "e2"])
            noted = await _push(conn, "z1", "GONE", retract=True)
            assert noted == {"outcome": "noted", "priorEventId": "e2"}
            assert _pending(host, "a") == ["z1"]
            assert _pending(host, "b") == ([] if per else ["e1", "z1"])  # B read nothing of K
        again = EventInbox(["a", "b"], consumption=consumption, store=store)
        async with Host({"editor": _config()}, event_inbox=again) as host:
            conn = await host.server("editor").connected()
            assert (await _push(conn, "z2", "GONE AGAIN", retract=True))["outcome"] == "noted"
            assert _pending(host, "a") == ["z1", "z2"]
            assert _pending(host, "b") == ([] if per else ["e1", "z1", "z2"])  # the store kept it


async def test_a_channel_message_edited_after_one_conversation_read_it() -> None:
    inbox = EventInbox(["a", "b"], consumption="per-conversation")
    with anyio.fail_after(TIMEOUT):
        async with Host({"editor": _config()}, event_inbox=inbox) as host:
            conn = await host.server("editor").connected()
            await conn.mcp.call_tool("co_register", {"channel": "chat"}, timeout=20)

            async def message(event_id: str, text: str, **coalesce: Any) -> Any:
                sent = {
                    "channelId": "chat",
                    "messageId": "M",
                    "eventId": event_id,
                    "content": [{"type": "text", "text": text}],
                    "coalesce": {"key": "message:M", **coalesce},
                }
                reply = await _send(conn, "channels/incoming", {"messages": [sent]})
                (result,) = reply["result"]["results"]
                return result["coalesce"]

            assert await message("m1", "HELLO", initial=True) == {"outcome": "first"}
            await host.inbox("a").drain()
            assert await message("m2", "HELLO, EDITED") == {"outcome": "appended", "priorEventId": "m1"}
            assert _pending(host, "a") == _pending(host, "b") == ["m2"]
            drained = await host.inbox("b").drain()
            assert [item.event["content"][0]["text"] for item in drained.items] == ["HELLO, EDITED"]

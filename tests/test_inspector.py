"""The inspector without a browser: its pure decisions (the token check, the grant table and
the source of each verdict, the tool call form from an input schema) by plain calls, and
``Host(inspector=Inspector())`` on asyncio and trio against the demo server, through HTTP
(httpx): the token, the state, a tool call, a held inference request answered through the
API and seen on the live stream, the end with the host; what the event pump keeps once an
event is shown. The page in a real browser is tests/test_inspector_browser.py."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

import anyio
import httpx
import pytest

from mcpl_host.coerce import ArgumentError
from mcpl_host.config import ServerConfig
from mcpl_host.host import Host
from mcpl_host.inspector import Inspector
from mcpl_host.inspector.server import MAX_ITEM_BYTES, item_line
from mcpl_host.inspector.view import (
    MAX_FORM_FIELDS,
    form_arguments,
    form_fields,
    grant_rows,
    token_allows,
)
from mcpl_host.limits import Limits
from mcpl_host.mcpl.grants import GrantPolicy
from mcpl_host.recording import Recorder

from .conftest import FIXTURES

# --- the token ---------------------------------------------------------------------------------


def test_the_token_is_taken_from_the_query_or_the_cookie_and_nothing_else() -> None:
    token = "a" * 43
    assert token_allows(token, token, None)
    assert token_allows(token, None, token)
    assert token_allows(token, "wrong", token)  # the cookie still carries it
    assert not token_allows(token, None, None)
    assert not token_allows(token, "", "")
    assert not token_allows(token, token[:-1], token + "a")


def test_each_inspector_has_its_own_unguessable_token_never_in_its_repr() -> None:
    first, second = Inspector(), Inspector()
    assert first.token != second.token
    assert len(first.token) >= 43  # secrets.token_urlsafe(32): 32 random bytes
    assert first.token not in repr(first)


# --- the grant table ---------------------------------------------------------------------------


def _row(rows: list[dict[str, Any]], path: str) -> dict[str, Any]:
    return next(row for row in rows if row["path"] == path)


def test_each_capability_names_the_source_of_its_verdict() -> None:
    policy = GrantPolicy(grant=("channels.*", "pushEvents"), deny=("channels.typing",))
    advertised = frozenset({"pushEvents", "channels.publish", "channels.typing", "inferenceRequest"})
    rows = grant_rows(policy, advertised, frozenset({"pushEvents", "channels.publish"}))
    assert _row(rows, "pushEvents") == {
        "path": "pushEvents",
        "advertised": True,
        "inForce": True,
        "policy": True,
        "source": "granted by the pattern pushEvents",
    }
    assert _row(rows, "channels.publish")["source"] == "granted by the pattern channels.*"
    assert _row(rows, "channels.typing")["source"] == "denied by the pattern channels.typing"
    assert not _row(rows, "channels.typing")["policy"]
    assert _row(rows, "inferenceRequest")["source"] == "no grant pattern matches"
    # A path the policy names but the server never advertised is shown, never in force.
    assert _row(rows, "channels.incoming") == {
        "path": "channels.incoming",
        "advertised": False,
        "inForce": False,
        "policy": True,
        "source": "granted by the pattern channels.*",
    }


def test_grant_all_is_the_source_and_named_only_paths_say_what_they_need() -> None:
    policy = GrantPolicy(grant_all_advertised=True)
    advertised = frozenset({"tools", "toolLifecycle.observe"})
    rows = grant_rows(policy, advertised, None)
    assert _row(rows, "tools")["source"] == "grant all advertised"
    assert not _row(rows, "tools")["inForce"]  # no connection: nothing in force
    lifecycle = _row(rows, "toolLifecycle.observe")
    assert not lifecycle["policy"]
    assert lifecycle["source"] == "granted only by a grant pattern that names it; none does"
    named = grant_rows(GrantPolicy(grant=("toolLifecycle.*",)), advertised, None)
    assert _row(named, "toolLifecycle.observe")["source"] == "granted by the pattern toolLifecycle.*"


# --- the form ----------------------------------------------------------------------------------


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "description": "what to say"},
        "count": {"type": "integer"},
        "ratio": {"type": "number"},
        "loud": {"type": "boolean"},
        "mood": {"enum": ["calm", "angry"]},
        "options": {"type": "object"},
        "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        "anything": {},
    },
    "required": ["text", "mood"],
}


def test_the_form_has_one_field_per_property_typed_by_the_schema() -> None:
    fields, omitted = form_fields(SCHEMA)
    assert omitted == 0
    assert [(f.name, f.kind, f.required) for f in fields] == [
        ("text", "string", True),
        ("count", "integer", False),
        ("ratio", "number", False),
        ("loud", "boolean", False),
        ("mood", "enum", True),
        ("options", "json", False),
        ("either", "json", False),
        ("anything", "json", False),
    ]
    assert fields[0].description == "what to say"
    assert fields[4].choices == ("calm", "angry")


def test_a_schema_with_too_many_properties_or_none_gives_a_bounded_form() -> None:
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(MAX_FORM_FIELDS + 5)}}
    fields, omitted = form_fields(wide)
    assert (len(fields), omitted) == (MAX_FORM_FIELDS, 5)
    assert form_fields({"type": "object"}) == ([], 0)
    assert form_fields("not a schema") == ([], 0)
    assert form_fields({"properties": ["a"]}) == ([], 0)


def test_submitted_values_are_coerced_as_the_command_line_does() -> None:
    values = {
        "text": "123",
        "count": "4",
        "ratio": "0.5",
        "loud": "true",
        "mood": "calm",
        "options": '{"a": 1}',
    }
    assert form_arguments({**values, "either": ""}, SCHEMA) == {
        "text": "123",  # a string stays a string
        "count": 4,
        "ratio": 0.5,
        "loud": True,
        "mood": "calm",
        "options": {"a": 1},
    }  # an empty field is left out
    assert form_arguments({"a=b": "x"}, None) == {"a=b": "x"}  # a name is never split
    with pytest.raises(ArgumentError, match="'count'"):
        form_arguments({"count": "many"}, SCHEMA)
    with pytest.raises(ValueError, match="not text"):
        form_arguments({"count": 3}, SCHEMA)


def test_a_live_item_too_large_goes_without_the_servers_data() -> None:
    big = "x" * (2 * MAX_ITEM_BYTES)
    small = {"type": "event", "event": {"server": "s", "kind": "notification", "data": {"method": "m"}}}
    assert json.loads(item_line(small)) == small
    event = {
        "type": "event",
        "event": {"server": "s", "kind": "push_event", "data": {"id": 7, "params": big}},
    }
    line = item_line(event)
    assert len(line) <= MAX_ITEM_BYTES
    assert json.loads(line)["event"] == {
        "server": "s",
        "kind": "push_event",
        "data": {"id": 7, "omitted": {"bytes": len(json.dumps(event, separators=(",", ":")))}},
    }
    entry = {
        "seq": 3,
        "server": "s",
        "kind": "received",
        "message": {"id": 1, "method": big[:300], "params": big},
    }
    shown = json.loads(item_line({"type": "traffic", "entry": entry}))["entry"]
    assert shown["seq"] == 3 and len(shown["method"]) == 200 and "params" not in shown
    held = {"type": "held", "held": {"id": "1", "asked": big, "params": {"p": big}}}
    assert len(item_line(held)) <= MAX_ITEM_BYTES


# --- Host(inspector=...) on both backends --------------------------------------------------------


def _demo() -> dict[str, ServerConfig]:
    return {
        "demo": ServerConfig(
            command=sys.executable,
            args=(str(FIXTURES / "demo_server.py"),),
            env={"DEMO_EXTRAS": "1", "DEMO_PUSH_COUNT": "1"},
            grant_policy=GrantPolicy(grant_all_advertised=True),
            limits=Limits(request_timeout_seconds=20),
        )
    }


async def _live_items(client: httpx.AsyncClient) -> AsyncIterator[dict[str, Any]]:
    async with client.stream("GET", "/api/live") as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                yield json.loads(line[6:])


async def _first(client: httpx.AsyncClient, wanted: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The first item of the live stream (its history first) that is ``wanted``."""
    async with aclosing(_live_items(client)) as items:
        async for item in items:
            if wanted(item):
                return item
    raise AssertionError("the live stream ended")


@pytest.mark.anyio
async def test_an_embedded_host_serves_its_inspector_and_answers_held_requests_from_it() -> None:
    recorder = Recorder(None)  # the traffic, for subscribers only: no file
    inspector = Inspector(recorder=recorder)
    configs = _demo()
    async with Host(
        configs,
        handlers_factory=inspector.handlers,
        inspector=inspector,
        subscribe_all=False,
        record=recorder,
    ) as host:
        url = inspector.url
        assert url is not None and url.startswith("http://127.0.0.1:")
        base = url.split("/?", 1)[0]
        async with httpx.AsyncClient(base_url=base) as anonymous:
            assert (await anonymous.get("/api/state")).status_code == 403
            assert (await anonymous.get("/", params={"token": "nope"})).status_code == 403
        await host.wait_ready(timeout=20)
        async with httpx.AsyncClient(base_url=base, params={"token": inspector.token}) as client:
            page = await client.get("/")
            assert page.status_code == 200 and "mcpl-host inspector" in page.text
            assert "script-src 'sha256-" in page.headers["content-security-policy"]
            assert page.cookies.get("mcpl_inspector") == inspector.token
            state = (await client.get("/api/state")).json()
            (server,) = state["servers"]
            assert server["name"] == "demo" and server["state"] == "ready"
            assert {row["path"] for row in server["grant"] if row["inForce"]} >= {"inferenceRequest", "tools"}
            added = await client.post(
                "/api/call", json={"server": "demo", "tool": "add", "values": {"a": "2", "b": "3"}}
            )
            assert added.json()["result"]["structuredContent"] == {"sum": 5}
            bad = await client.post("/api/call", json={"server": "demo", "tool": "add", "values": {"a": "x"}})
            assert bad.status_code == 400 and "'a'" in bad.json()["error"]

            answered: list[str] = []

            async def ask() -> None:
                done = await client.post(
                    "/api/call",
                    json={"server": "demo", "tool": "ask", "values": {"question": "six times seven?"}},
                )
                answered.append(done.json()["result"]["content"][0]["text"])

            with anyio.fail_after(20):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(ask)
                    item = await _first(client, lambda item: item["type"] == "held")
                    held = item["held"]
                    assert (held["server"], held["method"]) == ("demo", "inference/request")
                    assert held["asked"] == "six times seven?"
                    reply = await client.post("/api/answer", json={"id": held["id"], "text": "42"})
                    assert reply.status_code == 200
            assert answered == ["42"]  # what the server received

            async def form() -> None:
                done = await client.post("/api/call", json={"server": "demo", "tool": "form", "values": {}})
                answered.append(done.json()["result"]["content"][0]["text"])

            with anyio.fail_after(20):  # an elicitation: an action or the form's content as JSON
                async with anyio.create_task_group() as tg:
                    tg.start_soon(form)
                    item = await _first(
                        client,
                        lambda item: (
                            item["type"] == "held" and item["held"]["method"] == "elicitation/create"
                        ),
                    )
                    form_id = item["held"]["id"]
                    assert item["held"]["mode"] == "form"
                    wrong = await client.post("/api/answer", json={"id": form_id, "text": "maybe"})
                    assert wrong.status_code == 400  # still held: answered again below
                    reply = await client.post("/api/answer", json={"id": form_id, "text": '{"name": "Ada"}'})
                    assert reply.status_code == 200
            assert answered[-1] == "accept: Ada"
            again = await client.post("/api/answer", json={"id": held["id"], "text": "43"})
            assert again.status_code == 404
            # The traffic is the recorder's: the request the server sent is in it.
            with anyio.fail_after(20):
                item = await _first(
                    client,
                    lambda item: (
                        item["type"] == "traffic"
                        and item["entry"]["kind"] == "received"
                        and item["entry"]["message"].get("method") == "inference/request"
                    ),
                )
            assert item["entry"]["server"] == "demo" and item["entry"]["transport"] == "stdio"
            assert (await client.get("/api/recording")).status_code == 404  # no file to give
    # The host has closed: so has its inspector.
    async with httpx.AsyncClient() as after:
        with pytest.raises(httpx.ConnectError):
            await after.get(url)


@pytest.mark.anyio
async def test_an_inspector_that_cannot_listen_fails_the_host_before_any_server_starts() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        inspector = Inspector(port=taken.getsockname()[1])
        host = Host(_demo(), inspector=inspector)
        with pytest.raises(OSError):
            async with host:
                pass
        assert host.server("demo").hosted.connections_opened == 0  # never started


@pytest.mark.anyio
async def test_the_event_pump_keeps_nothing_of_the_last_event_while_it_waits() -> None:
    # The pump shows each event on the live stream (cut to MAX_ITEM_BYTES) and waits for the
    # next holding nothing of it: an 8 MiB notification and its redacted copy are freed
    # while the server stays silent, not kept until its next event.
    from mcpl_host.events import ServerNotification, Subscription

    from .memory import kept_bytes

    big = 8 * 2**20
    inspector, subscription = Inspector(), Subscription()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(inspector._pump_events, subscription)  # pyright: ignore[reportPrivateUsage]
            await anyio.wait_all_tasks_blocked()
            with kept_bytes() as kept:
                note = ServerNotification(
                    server="s", method="notifications/message", params={"blob": "x" * big}
                )
                assert subscription.put_observation(note)
                del note
                await anyio.wait_all_tasks_blocked()  # shown, and the pump waiting again
            subscription.end()
    assert kept.bytes < 2**20, f"{kept.bytes} bytes kept after the event was shown"

"""An answer that cannot be parsed fails the request its id names at once, on every
transport, saying why (JSON-RPC 2.0 §5: the id identifies the answer; docs/protocol.md D6).

The server is ``fixtures/scripted_server.py`` over stdio, behind ``fixtures/ws_bridge.py``
(WebSocket), and behind ``fixtures/http_bridge.py`` (Streamable HTTP with event-stream and
JSON answers, and HTTP+SSE; the bridge carries text, so bytes that are not UTF-8 come from
``fixtures/hostile_http_server.py`` as a JSON body). It answers ``tools/list`` with a line whose id can be read and
whose JSON cannot: a ``ttlMs`` of 5001 digits (valid JSON, past the interpreter's
4,300-digit conversion limit), bad JSON after the id, bytes that are not UTF-8. Before, such
a line was dropped as "not JSON" and the request waited for its timeout. Every test runs on
asyncio and trio; each connection then answers a ``ping``, so the transport is still there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcpl_host import ServerConfig, ServerConnection, connect
from mcpl_host.jsonrpc.errors import UnreadableAnswer
from mcpl_host.jsonrpc.framing import NotReadableJSON, loads_line
from mcpl_host.jsonrpc.session import DroppedLine, Session, UnreadableResponse
from mcpl_host.transports.http_common import id_key, may_answer, peek

from .conftest import FIXTURES
from .wire import FAST, MCP_HANDSHAKE, SCRIPTED, Script, port_server

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("logs")]

TIMEOUT = 60
#: The request timeout is long: the test fails (``fail_after``) before it could be what
#: ends the request.
LIMITS = dataclasses.replace(FAST, request_timeout_seconds=120.0, handshake_timeout_seconds=30.0)

DIGITS = '{"jsonrpc":"2.0","id":$ID,"result":{"tools":[],"ttlMs":1' + "0" * 5000 + "}}"
BAD_AFTER_ID = '{"jsonrpc":"2.0","id":$ID,"result":{"tools":[}}'
NOT_UTF8 = '{"jsonrpc":"2.0","id":$ID,"result":{"tools":[],"note":"\udcff\udcfe"}}'

ANSWERS = {
    "digits": (DIGITS, "an integer of more than 4300 digits, the most the host converts"),
    "bad-json": (BAD_AFTER_ID, "not JSON (Expecting value at character"),
    "not-utf8": (NOT_UTF8, "not valid UTF-8 (at byte"),
}


def steps(answer: str) -> list[dict[str, object]]:
    return [
        *MCP_HANDSHAKE,
        {"expect": {"method": "tools/list"}},
        {"raw_answer": answer},
        {"expect": {"method": "ping"}},
        {"reply": {}},
    ]


async def fails_at_once(conn: ServerConnection, reason: str) -> None:
    with anyio.fail_after(TIMEOUT):
        async with conn:
            with pytest.raises(UnreadableAnswer) as info:
                await conn.mcp.list_tools()
            await conn.mcp.ping()
    assert str(info.value).startswith("the answer to 'tools/list' could not be read: ")
    assert reason in str(info.value)
    assert "10000" not in str(info.value)  # never the line's content


# -- the session: plain calls -----------------------------------------------------------------


@pytest.mark.parametrize("name", list(ANSWERS))
def test_the_session_fails_the_request_an_unparsable_answer_names(name: str) -> None:
    answer, reason = ANSWERS[name]
    session = Session()
    pending, _ = session.start_request("initialize", {})
    line = answer.replace("$ID", str(pending.id)).encode("utf-8", "surrogateescape")
    with pytest.raises(NotReadableJSON, match=reason.split("(")[0].strip()):
        loads_line(line)
    event = session.receive(line)
    assert isinstance(event, UnreadableResponse) and event.pending is pending
    assert reason in event.reason
    # An id that is not ours, or no answer: dropped as before.
    assert isinstance(session.receive(line), DroppedLine)
    assert isinstance(session.receive(b'{"jsonrpc":"2.0","method":"x","params":[}'), DroppedLine)


# -- each transport ---------------------------------------------------------------------------


def scripted(script: Script) -> list[str]:
    return [sys.executable, str(SCRIPTED), str(script.path), str(script.record_path)]


@contextlib.asynccontextmanager
async def bridge_port(bridge: Path, *options: str, command: list[str]) -> AsyncIterator[int]:
    async with port_server([sys.executable, str(bridge), *options, "--", *command], seconds=TIMEOUT) as (
        _,
        port,
    ):
        yield port


@pytest.mark.parametrize("name", list(ANSWERS))
async def test_stdio(tmp_path: Path, name: str) -> None:
    answer, reason = ANSWERS[name]
    await fails_at_once(Script(tmp_path, steps(answer)).connect(limits=LIMITS), reason)


@pytest.mark.parametrize("name", ["digits", "bad-json"])  # a text frame is UTF-8 (RFC 6455 §5.6)
async def test_websocket(tmp_path: Path, name: str) -> None:
    answer, reason = ANSWERS[name]
    script = Script(tmp_path, steps(answer))
    async with bridge_port(FIXTURES / "ws_bridge.py", command=scripted(script)) as port:
        await fails_at_once(connect(ServerConfig(url=f"ws://127.0.0.1:{port}/mcp", limits=LIMITS)), reason)


HTTP_CASES: dict[str, tuple[list[str], str]] = {
    "streamable-event-stream": ([], "streamable-http"),
    "streamable-json": (["--json"], "streamable-http"),
    "http-sse": (["--legacy"], "sse"),
}


# The bridge passes a line on as text (U+FFFD for bytes that are not UTF-8; an event stream
# is UTF-8 by definition): that case is test_http_json_body_that_is_not_utf8.
@pytest.mark.parametrize("name", ["digits", "bad-json"])
@pytest.mark.parametrize("case", list(HTTP_CASES))
async def test_http(tmp_path: Path, case: str, name: str) -> None:
    options, transport = HTTP_CASES[case]
    answer, reason = ANSWERS[name]
    script = Script(tmp_path, steps(answer))
    async with bridge_port(FIXTURES / "http_bridge.py", *options, command=scripted(script)) as port:
        conn = connect(ServerConfig(url=f"http://127.0.0.1:{port}/mcp", limits=LIMITS, transport=transport))
        await fails_at_once(conn, reason)


@pytest.mark.parametrize("name", list(ANSWERS))
def test_http_routing_takes_an_unparsable_answer_for_the_answer_its_id_names(name: str) -> None:
    """The HTTP transports route by ``http_common.peek`` (the one parser and classifier):
    an answer that cannot be parsed still ends its request's stream."""
    answer, _ = ANSWERS[name]
    line = answer.replace("$ID", "7").encode("utf-8", "surrogateescape")
    assert peek(line) == ("response", 7, None, None)
    assert may_answer(line)  # so a request's event stream parses it
    assert id_key(10**30) != id_key(str(10**30))  # ids beyond 64 bits are keys too


def test_only_a_line_that_cannot_name_an_id_skips_the_routing_parse() -> None:
    """``http_common.may_answer``: a notification without ``"id"`` in it goes on unparsed;
    an answer is always parsed, its ``id`` written with escapes or not."""
    assert not may_answer(
        b'{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"x"}}'
    )
    assert not may_answer(b'{"jsonrpc":"2.0","method":"x","params":{"ids":[1],"idle":"did"}}')
    for line in (
        b'{"jsonrpc":"2.0","id":7,"result":{}}',
        b'{"jsonrpc":"2.0","\\u0069d":7,"result":{}}',
        b'{"jsonrpc":"2.0","i\\u0064":7,"result":{}}',
        b'{"jsonrpc":"2.0","method":"x","params":{"id":1}}',  # a mention is enough to be parsed
    ):
        assert may_answer(line)
    escaped = b'{"jsonrpc":"2.0","\\u0069d":7,"result":{}}'
    assert peek(escaped)[:2] == ("response", 7)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["jsonrpc", "id", "method", "result", "error", "params", "idx"]),
        st.one_of(
            st.integers(), st.text(max_size=4), st.none(), st.dictionaries(st.text(max_size=3), st.integers())
        ),
    ),
    st.booleans(),
)
def test_every_line_peek_reads_as_an_answer_may_be_one(message: dict[str, object], ascii_only: bool) -> None:
    line = json.dumps(message, ensure_ascii=ascii_only).encode()
    if ascii_only:  # every name escaped, as a server may write it
        line = line.replace(b'"id"', b'"\\u0069\\u0064"')
    if peek(line)[0] == "response":
        assert may_answer(line)


async def test_http_json_body_that_is_not_utf8() -> None:
    """The bridge cannot carry bytes that are not UTF-8; the hostile HTTP server answers
    ``tools/list`` with them as a JSON body."""
    answer, reason = ANSWERS["not-utf8"]
    argv = [sys.executable, str(FIXTURES / "hostile_http_server.py"), "answer", "--answer", answer]
    async with port_server(argv, env={"PYTHONUTF8": "1"}, seconds=TIMEOUT) as (_, port):
        conn = connect(
            ServerConfig(url=f"http://127.0.0.1:{port}/mcp", limits=LIMITS, transport="streamable-http")
        )
        await fails_at_once(conn, reason)


# -- an id the host cannot convert ------------------------------------------------------------

#: An answer whose id is an integer of 5001 digits (valid JSON, past the interpreter's
#: conversion limit) and whose JSON cannot be parsed: no request of ours has that id.
HUGE_ID = '{"jsonrpc":"2.0","id":1' + "0" * 5000 + ',"result":{"tools":[}}'


def test_an_unparsable_line_with_an_id_past_the_conversion_limit_is_dropped() -> None:
    """Reading the id of such a line raised the interpreter's ValueError out of the session
    and of the HTTP routing (both said they never raise)."""
    session = Session()
    session.start_request("initialize", {})
    line = HUGE_ID.encode()
    assert isinstance(session.receive(line), DroppedLine)
    assert peek(line) == ("other", None, None, None)


@pytest.mark.parametrize("transport", ["stdio", "websocket", "streamable-http"])
async def test_an_id_past_the_conversion_limit_costs_no_connection(
    tmp_path: Path, transport: str, logs: list[dict[str, object]]
) -> None:
    """The line is dropped; the request it does not name is answered, the connection stays.
    Before, stdio and WebSocket logged the ValueError as a bug ("failed to act on a line"),
    and Streamable HTTP lost its event stream to it."""
    script = Script(
        tmp_path,
        [
            *MCP_HANDSHAKE,
            {"expect": {"method": "tools/list"}},
            {"raw": HUGE_ID},
            {"reply": {"tools": []}},
            {"expect": {"method": "ping"}},
            {"reply": {}},
        ],
    )

    async def check(conn: ServerConnection) -> None:
        with anyio.fail_after(TIMEOUT):
            async with conn:
                assert await conn.mcp.list_tools() == []
                await conn.mcp.ping()
        assert not [e for e in logs if e.get("exc_info") or "failed to act" in str(e.get("event"))]

    if transport == "stdio":
        await check(script.connect(limits=LIMITS))
        return
    bridge = "ws_bridge.py" if transport == "websocket" else "http_bridge.py"
    async with bridge_port(FIXTURES / bridge, command=scripted(script)) as port:
        if transport == "websocket":
            await check(connect(ServerConfig(url=f"ws://127.0.0.1:{port}/mcp", limits=LIMITS)))
        else:
            await check(
                connect(ServerConfig(url=f"http://127.0.0.1:{port}/mcp", limits=LIMITS, transport=transport))
            )

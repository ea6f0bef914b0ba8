"""The sans-I/O Session: ids, pending, phases (docs/protocol.md R1-R6, H1-H4, T3, D2),
driven with plain calls."""

from __future__ import annotations

import json

import pytest

from mcpl_host.jsonrpc.envelope import NO_ID
from mcpl_host.jsonrpc.errors import LocalProtocolError
from mcpl_host.jsonrpc.framing import LineReader, LineTooLong, dumps_json
from mcpl_host.jsonrpc.session import (
    DroppedLine,
    InvalidRequestReceived,
    LookAlikeResponse,
    NotificationReceived,
    OrphanResponse,
    Phase,
    RequestReceived,
    ResponseSettled,
    Session,
    UnmatchedError,
    UnreadableResponse,
)


def line(obj: object) -> bytes:
    return json.dumps(obj).encode()


def operating_session() -> Session:
    session = Session()
    pending, _ = session.start_request("initialize", {})
    (settled,) = session.receive_line(line({"jsonrpc": "2.0", "id": pending.id, "result": {}}))
    assert isinstance(settled, ResponseSettled)
    session.initialize_completed()
    return session


def test_h1_initialize_takes_the_first_id() -> None:
    session = Session()
    pending, data = session.start_request("initialize", {"x": 1})
    assert pending.id == 1
    assert json.loads(data) == {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"x": 1}}
    assert session.phase is Phase.INITIALIZING


def test_r5_ids_are_integers_from_a_counter_never_reused() -> None:
    session = operating_session()
    ids = []
    for _ in range(5):
        pending, _ = session.start_request("tools/list", None)
        ids.append(pending.id)
        session.forget(pending.id)
    assert ids == [2, 3, 4, 5, 6]


def test_requests_before_the_handshake_are_refused_except_ping() -> None:
    session = Session()
    with pytest.raises(LocalProtocolError):
        session.start_request("tools/list", None)
    session.start_request("ping", None)


def test_max_pending_is_a_bound() -> None:
    session = operating_session()
    session.max_pending = 2
    session.start_request("a", None)
    session.start_request("b", None)
    with pytest.raises(LocalProtocolError, match="too many requests"):
        session.start_request("c", None)


def test_h2_idless_jsonrpc_error_answers_initialize() -> None:
    session = Session()
    pending, _ = session.start_request("initialize", {})
    events = session.receive_line(line({"jsonrpc": "2.0", "error": {"code": -32700, "message": "bad"}}))
    assert events == [ResponseSettled(pending, events[0].response)]
    assert events[0].response.id is NO_ID


def test_h2_null_id_jsonrpc_error_answers_initialize() -> None:
    session = Session()
    pending, _ = session.start_request("initialize", {})
    (event,) = session.receive_line(
        line({"jsonrpc": "2.0", "id": None, "error": {"code": 1, "message": "x"}})
    )
    assert isinstance(event, ResponseSettled) and event.pending is pending


def test_h2_needs_jsonrpc_2_but_initialize_own_id_answers_whatever_jsonrpc() -> None:
    session = Session()
    pending, _ = session.start_request("initialize", {})
    # No "jsonrpc": "2.0": an id-null error is not initialize's answer.
    assert session.receive_line(line({"id": None, "error": {"code": 1, "message": "x"}})) == []
    (event,) = session.receive_line(line({"id": 1, "result": {"protocolVersion": "2025-06-18"}}))
    assert isinstance(event, ResponseSettled) and event.pending is pending


def test_h3_while_initializing_ping_is_dispatched_other_requests_and_invalid_ignored() -> None:
    session = Session()
    session.start_request("initialize", {})
    (ping,) = session.receive_line(line({"jsonrpc": "2.0", "id": None, "method": "ping"}))
    assert isinstance(ping, RequestReceived) and ping.request.id is None
    assert session.receive_line(line({"jsonrpc": "2.0", "id": 5, "method": "roots/list"})) == []
    (invalid,) = session.receive_line(line({"jsonrpc": "2.0", "id": 5, "method": 7}))
    assert isinstance(invalid, InvalidRequestReceived) and invalid.answer is None


def test_h4_notification_before_the_answer_disturbs_nothing() -> None:
    session = Session()
    pending, _ = session.start_request("initialize", {})
    assert session.receive_line(line({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})) == []
    (event,) = session.receive_line(line({"jsonrpc": "2.0", "id": 1, "result": {}}))
    assert event.pending is pending


def test_h4_error_with_unusable_id_is_logged_other_unmatched_ignored() -> None:
    session = Session()
    session.start_request("initialize", {})
    (event,) = session.receive_line(
        line({"jsonrpc": "2.0", "id": {"x": 1}, "error": {"code": 1, "message": "m"}})
    )
    assert isinstance(event, UnmatchedError)
    assert session.receive_line(line({"jsonrpc": "2.0", "id": 99, "result": {}})) == []


def test_d2_string_id_never_settles_an_integer_request() -> None:
    session = operating_session()
    pending, _ = session.start_request("tools/list", None)
    (event,) = session.receive_line(line({"jsonrpc": "2.0", "id": str(pending.id), "result": {}}))
    assert isinstance(event, LookAlikeResponse) and isinstance(event.then, OrphanResponse)
    (event,) = session.receive_line(line({"jsonrpc": "2.0", "id": float(pending.id), "result": {}}))
    assert isinstance(event, LookAlikeResponse) and isinstance(event.then, OrphanResponse)
    (event,) = session.receive_line(line({"jsonrpc": "2.0", "id": pending.id, "result": {}}))
    assert isinstance(event, ResponseSettled)


@pytest.mark.parametrize("look_alike", ["1", " 1", 1.0, True])
def test_d2_an_id_that_only_looks_like_a_pending_one_settles_nothing_and_names_it(look_alike: object) -> None:
    session = Session()
    pending, _ = session.start_request("initialize", {})
    assert pending.id == 1
    (event,) = session.receive_line(line({"jsonrpc": "2.0", "id": look_alike, "result": {}}))
    # H4: while initializing it is otherwise ignored; it still names what it resembles.
    assert isinstance(event, LookAlikeResponse) and event.resembles is pending and event.then is None
    assert session.pending_count == 1


@pytest.mark.parametrize("other", ["3", 3.0, False, "2.0", "0x2", "\u0662", 2.5, None, [2]])
def test_d2_an_id_resembling_no_pending_request_is_not_a_look_alike(other: object) -> None:
    session = operating_session()
    pending, _ = session.start_request("tools/list", None)
    assert pending.id == 2
    events = session.receive_line(line({"jsonrpc": "2.0", "id": other, "result": {}}))
    assert not any(isinstance(event, LookAlikeResponse) for event in events)
    assert session.pending_count == 1


def test_server_request_with_our_id_settles_nothing() -> None:
    session = operating_session()
    pending, _ = session.start_request("tools/list", None)
    (event,) = session.receive_line(line({"jsonrpc": "2.0", "id": pending.id, "method": "ping"}))
    assert isinstance(event, RequestReceived)
    assert session.pending_count == 1


def test_r5_late_answer_after_forget_is_an_orphan() -> None:
    session = operating_session()
    pending, _ = session.start_request("tools/call", None)
    session.forget(pending.id)
    (event,) = session.receive_line(line({"jsonrpc": "2.0", "id": pending.id, "result": {}}))
    assert isinstance(event, OrphanResponse)


def test_r5_unusable_id_response_settles_nothing_and_is_silent_unless_jsonrpc_error() -> None:
    session = operating_session()
    pending, _ = session.start_request("tools/list", None)
    for _ in range(50):
        assert session.receive_line(line({"id": None, "level": "info", "msg": "log line"})) == []
    (event,) = session.receive_line(
        line({"jsonrpc": "2.0", "id": None, "error": {"code": -1, "message": "m"}})
    )
    assert isinstance(event, UnmatchedError)
    assert session.pending_count == 1 and pending.id == 2


def test_r6_non_json_and_non_objects_are_dropped_lines() -> None:
    session = operating_session()
    assert isinstance(session.receive_line(b"Server started on stdio")[0], DroppedLine)
    assert isinstance(session.receive_line(b"[1, 2]")[0], DroppedLine)
    assert session.receive_line(b"   ") == []


def test_a1_invalid_request_answered_with_32600_and_null_id() -> None:
    session = operating_session()
    (event,) = session.receive_line(line({"jsonrpc": "2.0", "method": 1, "params": "bar"}))
    assert isinstance(event, InvalidRequestReceived)
    answer = json.loads(event.answer)
    assert answer["id"] is None and answer["error"]["code"] == -32600


def test_notifications_are_routed_once_operating() -> None:
    session = operating_session()
    (event,) = session.receive_line(line({"jsonrpc": "2.0", "method": "notifications/message", "params": {}}))
    assert isinstance(event, NotificationReceived)


def test_t3_close_returns_every_pending_request_and_ends_the_session() -> None:
    session = operating_session()
    first, _ = session.start_request("a", None)
    second, _ = session.start_request("b", None)
    assert session.close() == [first, second]
    assert session.pending_count == 0
    with pytest.raises(LocalProtocolError):
        session.start_request("c", None)


def test_r1_answer_echoes_id_with_its_type_including_null() -> None:
    assert json.loads(Session.answer("7", result={}))["id"] == "7"
    assert json.loads(Session.answer(7, result={}))["id"] == 7
    assert json.loads(Session.answer(None, result={}))["id"] is None


@pytest.mark.parametrize(
    "request_id",
    [
        7,
        0,
        -7,
        2**63,
        -(2**70),
        True,
        False,
        "7",
        None,
        1.5,
        -0.0,
        2**70,
        'q"\\\n\u2028\x00é',
        "\ud800",
        "x" * 300,
    ],
)
@pytest.mark.parametrize("result", [{"accepted": True}, {"accepted": False, "reason": "no ✓"}, {}])
def test_an_answer_with_its_result_as_text_is_the_same_answer(request_id: object, result: object) -> None:
    line = Session.answer_text(request_id, dumps_json(result))
    expected = Session.answer(request_id, result=result)
    assert line.endswith(b"}\n") and line.count(b"\n") == 1  # one line, valid UTF-8 (RFC 8259 §8.1)
    assert json.loads(line.decode("utf-8")) == json.loads(expected.decode("utf-8"))
    # (beyond 64 bits or a lone surrogate, the id's fallback escapes all of ``answer``'s line)
    if not (request_id in (2**70, -(2**70)) or request_id == "\ud800"):
        assert line == expected


# -- lines that cannot be read: fail the request they answer at once -----------------------------


def deep_answer(request_id: object, levels: int = 10_001, member: str = "result") -> bytes:
    head = json.dumps({"jsonrpc": "2.0", "id": request_id})[:-1].encode()
    return head + b',"' + member.encode() + b'":' + b"[" * levels + b"]" * levels + b"}"


def test_an_answer_nested_beyond_the_bound_settles_its_request_as_unreadable() -> None:
    session = operating_session()
    pending, _ = session.start_request("tools/call", {})
    (event,) = session.receive_line(deep_answer(pending.id))
    assert isinstance(event, UnreadableResponse) and event.pending is pending
    assert event.reason.startswith("JSON nested more than 10000 levels deep")
    assert "Limits.max_json_depth = 10000" in event.reason
    assert session.pending_count == 0
    assert session.forget(pending.id) is None  # settled: a late answer would be an orphan


def test_an_answer_nested_deeper_than_orjson_but_within_the_bound_is_settled_normally() -> None:
    session = operating_session()
    pending, _ = session.start_request("tools/call", {})
    (event,) = session.receive_line(deep_answer(pending.id, levels=1100))
    assert isinstance(event, ResponseSettled) and event.pending is pending


def test_the_depth_bound_comes_from_the_session() -> None:
    session = operating_session()
    session.max_json_depth = 1050
    pending, _ = session.start_request("tools/call", {})
    (event,) = session.receive_line(deep_answer(pending.id, levels=1100))
    assert isinstance(event, UnreadableResponse) and "Limits.max_json_depth = 1050" in event.reason


def test_an_over_long_answer_settles_its_request_naming_the_size_and_the_bound() -> None:
    session = operating_session()
    pending, _ = session.start_request("tools/call", {})
    line = (
        b'{"jsonrpc":"2.0","id":' + str(pending.id).encode() + b',"result":{"content":"' + b"x" * 100 + b'"}}'
    )
    (item,) = LineReader(max_line_bytes=64, head_bytes=48).feed(line + b"\n")
    assert isinstance(item, LineTooLong)
    (event,) = session.receive_too_long(item)
    assert isinstance(event, UnreadableResponse) and event.pending is pending
    assert event.reason == f"a line of {len(line)} bytes is over Limits.max_line_bytes = 64 bytes"
    assert session.pending_count == 0


@pytest.mark.parametrize(
    "line",
    [
        deep_answer('"2"'),  # D2: a string id never names a request of ours
        deep_answer(99),  # no such request
        deep_answer(2, member="params"),  # a request from the server, not an answer
        b'{"jsonrpc":"2.0","method":"x","id":2,"params":' + b"[" * 10_001 + b"]" * 10_001 + b"}",
        b'{"result":' + b"[" * 10_001 + b"]" * 10_001 + b',"id":2}',  # the id comes too late
    ],
)
def test_an_unreadable_line_that_answers_nothing_of_ours_is_dropped_with_its_reason(line: bytes) -> None:
    session = operating_session()
    pending, _ = session.start_request("tools/call", {})
    assert pending.id == 2
    (event,) = session.receive_line(line)
    assert isinstance(event, DroppedLine) and event.kind.startswith("JSON nested more than")
    assert len(event.line) <= session.line_head_bytes
    assert session.pending_count == 1


def test_an_unreadable_answer_to_initialize_settles_it() -> None:
    session = Session()
    pending, _ = session.start_request("initialize", {})
    (event,) = session.receive_too_long(LineTooLong(10, 50, b'{"jsonrpc":"2.0","id":1,"result":{"pro'))
    assert isinstance(event, UnreadableResponse) and event.pending is pending


@pytest.mark.parametrize("phase", ["initializing", "operating"])
def test_initialize_cannot_be_sent_twice(phase: str) -> None:
    session = operating_session() if phase == "operating" else Session()
    if phase == "initializing":
        session.start_request("initialize", {})
    with pytest.raises(LocalProtocolError, match="initialize was already sent"):
        session.start_request("initialize", {})


def test_only_initialize_and_ping_go_before_the_handshake() -> None:
    session = Session()
    with pytest.raises(LocalProtocolError, match="before the handshake"):
        session.start_request("tools/list", None)
    session.start_request("ping", None)
    session.start_request("initialize", {})
    with pytest.raises(LocalProtocolError, match="before the handshake"):
        session.start_request("tools/list", None)

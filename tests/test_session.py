"""The sans-I/O Session: ids, pending, phases (ENVELOPE.md C, D, E), driven with plain calls."""

from __future__ import annotations

import json

import pytest

from mcpl_host.jsonrpc.envelope import NO_ID
from mcpl_host.jsonrpc.errors import LocalProtocolError
from mcpl_host.jsonrpc.session import (
    DroppedLine,
    InvalidRequestReceived,
    NotificationReceived,
    OrphanResponse,
    Phase,
    RequestReceived,
    ResponseSettled,
    Session,
    UnmatchedError,
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
    assert isinstance(event, OrphanResponse)
    (event,) = session.receive_line(line({"jsonrpc": "2.0", "id": float(pending.id), "result": {}}))
    assert isinstance(event, OrphanResponse)
    (event,) = session.receive_line(line({"jsonrpc": "2.0", "id": pending.id, "result": {}}))
    assert isinstance(event, ResponseSettled)


def test_a7_server_request_with_our_id_settles_nothing() -> None:
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

"""envelope.classify(): one test per rule of docs/protocol.md E1-E8 and A1-A3."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpl_host.jsonrpc.envelope import (
    NO_ID,
    Invalid,
    Notification,
    Request,
    Response,
    Unrelated,
    classify,
)

CLASSES = (Request, Notification, Response, Invalid, Unrelated)


@pytest.mark.parametrize(
    "value", [1, 1.5, "x", None, True, [], [{"jsonrpc": "2.0", "method": "ping", "id": 1}]]
)
def test_e1_non_objects_and_batches_are_unrelated(value: object) -> None:
    assert isinstance(classify(value), Unrelated)


@pytest.mark.parametrize("id_value", [1, "a", None, {"x": 1}, [1], True, 1.5])
def test_e2_id_without_method_is_a_response_whatever_the_id(id_value: object) -> None:
    message = classify({"jsonrpc": "2.0", "id": id_value, "result": {}})
    assert isinstance(message, Response)
    assert message.id == id_value


def test_e3_idless_jsonrpc_error_is_a_response() -> None:
    message = classify({"jsonrpc": "2.0", "error": {"code": -32700, "message": "Parse error"}})
    assert isinstance(message, Response)
    assert message.id is NO_ID
    assert message.has_error and message.is_jsonrpc_error


@pytest.mark.parametrize("jsonrpc", [None, "1.0", 2.0])
def test_e3_idless_error_without_jsonrpc_2_is_unrelated(jsonrpc: object) -> None:
    value = {"error": "disk full", "level": "error"}
    if jsonrpc is not None:
        value["jsonrpc"] = jsonrpc
    assert isinstance(classify(value), Unrelated)


@pytest.mark.parametrize(
    "value", [{}, {"jsonrpc": "2.0"}, {"jsonrpc": "2.0", "result": 1}, {"level": "info", "msg": "hi"}]
)
def test_e4_other_objects_without_method_are_unrelated(value: dict) -> None:
    assert isinstance(classify(value), Unrelated)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            {"jsonrpc": "2.0", "method": 1, "params": "bar"},
            "Invalid Request: the method must be a string, not a number",
        ),
        (
            {"jsonrpc": "2.0", "method": "x", "id": {"a": 1}},
            "Invalid Request: the id must be a string, a number or null, not an object",
        ),
        (
            {"jsonrpc": "2.0", "method": "x", "id": True},
            "Invalid Request: the id must be a string, a number or null, not a boolean",
        ),
        (
            {"jsonrpc": "2.0", "method": "x", "id": [1]},
            "Invalid Request: the id must be a string, a number or null, not an array",
        ),
        (
            {"jsonrpc": "2.0", "method": None, "id": 3},
            "Invalid Request: the method must be a string, not null",
        ),
    ],
)
def test_e5_bad_method_or_id_is_invalid_a3_names_the_kind(value: dict, message: str) -> None:
    result = classify(value)
    assert isinstance(result, Invalid)
    assert result.message == message


def test_a3_both_faults_are_named_and_the_value_is_never_repeated() -> None:
    result = classify({"method": ["secret-method"], "id": {"secret": "value"}})
    assert isinstance(result, Invalid)
    assert "the method must be a string, not an array" in result.message
    assert "the id must be a string, a number or null, not an object" in result.message
    assert "secret" not in result.message


@pytest.mark.parametrize(
    ("value", "answer_id"),
    [
        ({"jsonrpc": "2.0", "method": 1, "params": "bar"}, None),  # JSON-RPC's own example
        ({"jsonrpc": "2.0", "method": 1, "id": 7}, 7),
        ({"jsonrpc": "2.0", "method": 1, "id": "seven"}, "seven"),
        ({"jsonrpc": "2.0", "method": "x", "id": {"a": 1}}, None),
        ({"jsonrpc": "2.0", "method": "x", "id": False}, None),
    ],
)
def test_a2_answer_id_is_the_request_id_when_string_or_number_else_null(
    value: dict, answer_id: object
) -> None:
    result = classify(value)
    assert isinstance(result, Invalid)
    assert result.answer_id == answer_id
    assert type(result.answer_id) is type(answer_id)


def test_a1_invalid_carries_a_32600_error() -> None:
    result = classify({"method": 1})
    assert isinstance(result, Invalid)
    assert result.error["code"] == -32600


@pytest.mark.parametrize("id_value", [1, "1", None, 0, -5, 1.5, 2**70])
def test_e6_method_with_id_member_is_a_request_including_null(id_value: object) -> None:
    result = classify({"jsonrpc": "2.0", "method": "ping", "id": id_value})
    assert result == Request(id=id_value, method="ping", params=None)


def test_e6_method_without_id_member_is_a_notification() -> None:
    result = classify({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"p": 1}})
    assert result == Notification(method="notifications/progress", params={"p": 1})


def test_e7_method_wins_over_result_and_error() -> None:
    assert isinstance(classify({"jsonrpc": "2.0", "method": "m", "id": 1, "result": 1}), Request)
    assert isinstance(classify({"jsonrpc": "2.0", "method": "m", "error": {}}), Notification)


def test_e8_jsonrpc_member_and_params_are_not_checked() -> None:
    assert isinstance(classify({"method": "m", "id": 1}), Request)
    assert isinstance(classify({"jsonrpc": "1.0", "method": "m", "id": 1, "params": 5}), Request)
    assert classify({"jsonrpc": 7, "method": "m", "params": "x"}) == Notification("m", "x")


def test_bool_is_not_a_number_id() -> None:
    """The Python trap of docs/protocol.md, "Envelope classification": True must not pass as
    the number 1."""
    assert isinstance(classify({"method": "m", "id": True}), Invalid)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=20,
)
envelope_keys = st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error"])
envelope_like = st.dictionaries(envelope_keys, json_values, max_size=6)


@given(st.one_of(json_values, envelope_like))
def test_property_classify_never_raises_and_lands_in_exactly_one_class(value: object) -> None:
    result = classify(value)
    assert sum(isinstance(result, cls) for cls in CLASSES) == 1
    # Round trip through JSON text gives the same class (the classifier sees parsed JSON).
    assert type(classify(json.loads(json.dumps(value)))) is type(result)

"""Tool parameters mirrored into ``Mcp-Param-*`` headers, as pure rules (MCP 2026-07-28
"Streamable HTTP", custom headers from tool parameters; docs/protocol.md S10): which
schema properties, header names, value encoding, absent and non-string values, and hostile
schemas (a bad token, CR/LF, hundreds of headers, deep nesting) with a bounded outcome."""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpl_host.limits import LimitExceeded, Limits
from mcpl_host.param_headers import ParamHeader, Rejected, declared_headers, param_headers

MAX = Limits().max_param_headers
BYTES = Limits().max_param_header_bytes
_FIELD_VALUE = re.compile(r"[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?\Z|\Z")


def prop(kind: str, header: Any = None, **extra: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": kind, **extra}
    if header is not None:
        schema["x-mcp-header"] = header
    return schema


def obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def declared(schema: Any, max_headers: int = MAX) -> tuple[ParamHeader, ...]:
    out = declared_headers(schema, max_headers=max_headers)
    assert not isinstance(out, Rejected), out
    return out


def rejected(schema: Any, max_headers: int = MAX) -> str:
    out = declared_headers(schema, max_headers=max_headers)
    assert isinstance(out, Rejected), out
    return out.reason


def headers(schema: Any, arguments: dict[str, Any], max_bytes: int = BYTES) -> dict[str, str]:
    return param_headers(declared(schema), arguments, tool="t", max_bytes=max_bytes)


# -- which properties ---------------------------------------------------------------------------


def test_marked_properties_at_any_depth_of_properties_are_declared_in_schema_order() -> None:
    schema = obj(
        region=prop("string", "Region"),
        query=prop("string"),
        target=obj(shard=prop("integer", "Shard"), dry=prop("boolean", "Dry-Run")),
    )
    assert declared(schema) == (
        ParamHeader(("region",), "Mcp-Param-Region"),
        ParamHeader(("target", "shard"), "Mcp-Param-Shard"),
        ParamHeader(("target", "dry"), "Mcp-Param-Dry-Run"),
    )


@pytest.mark.parametrize("schema", [None, [], "x", {}, obj(), obj(a=prop("string"))])
def test_a_schema_without_annotations_declares_none(schema: Any) -> None:
    assert declared(schema) == ()


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "items": prop("string", "A")},
        obj(a={"type": "array", "items": prop("string", "A")}),
        {"anyOf": [obj(a=prop("string", "A"))]},
        {"allOf": [prop("string", "A")]},
        {"oneOf": [prop("string", "A")]},
        {"not": prop("string", "A")},
        {"if": prop("string", "A"), "then": {}, "else": {}},
        {"$defs": {"x": prop("string", "A")}},
        {"definitions": {"x": prop("string", "A")}},
        {"additionalProperties": prop("string", "A")},
        {"patternProperties": {"^a": prop("string", "A")}},
        {"x-mcp-header": "A", "type": "string"},  # the root itself
    ],
)
def test_an_annotation_not_reached_through_properties_alone_rejects_the_tool(schema: Any) -> None:
    assert "reached through properties alone" in rejected(schema)


def test_data_keywords_and_refs_are_not_walked() -> None:
    schema = obj(
        a={"type": "string", "default": {"x-mcp-header": "X"}, "examples": [{"x-mcp-header": "Y"}]},
        b={"$ref": "#/$defs/b"},
        c={"type": "object", "const": {"properties": {"d": prop("string", "Z")}}},
    )
    assert declared(schema) == ()


# -- header names ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "token",
    [
        "",
        "Two Words",
        "Colon:",
        "CR\r",
        "LF\n",
        "A\r\nX-Injected: yes",
        "Tab\t",
        "Ünïcode",
        "a/b",
        "(x)",
        "@",
    ],
)
def test_a_name_that_is_not_an_http_token_rejects_the_tool(token: str) -> None:
    reason = rejected(obj(a=prop("string", token)))
    assert "is not an HTTP header token" in reason
    assert "\r" not in reason and "\n" not in reason


@pytest.mark.parametrize("token", [7, None, True, ["A"], {"A": 1}])
def test_a_name_that_is_not_a_string_rejects_the_tool(token: Any) -> None:
    schema = obj(a={"type": "string", "x-mcp-header": token})
    assert "is not a string" in rejected(schema)


def test_every_tchar_is_accepted() -> None:
    token = "!#$%&'*+-.^_`|~09AZaz"
    assert declared(obj(a=prop("string", token))) == (ParamHeader(("a",), "Mcp-Param-" + token),)


def test_names_are_unique_ignoring_case() -> None:
    reason = rejected(obj(a=prop("string", "Region"), b=obj(c=prop("string", "REGION"))))
    assert "repeats that of the property a" in reason


@pytest.mark.parametrize("kind", ["number", "object", "array", "null", ["string", "null"], None])
def test_only_string_integer_and_boolean_properties_may_be_marked(kind: Any) -> None:
    schema = obj(a={"type": kind, "x-mcp-header": "A"} if kind is not None else {"x-mcp-header": "A"})
    assert "type is not string, integer or boolean" in rejected(schema)


def test_a_schema_asking_for_hundreds_of_headers_is_rejected_at_the_bound() -> None:
    many = obj(**{f"p{i}": prop("string", f"P{i}") for i in range(300)})
    assert rejected(many) == (
        f"the tool marks more than {MAX} parameters x-mcp-header (Limits.max_param_headers)"
    )
    exactly = obj(**{f"p{i}": prop("string", f"P{i}") for i in range(MAX)})
    assert len(declared(exactly)) == MAX


def test_a_deeply_nested_schema_is_walked_without_recursion() -> None:
    schema: dict[str, Any] = prop("string", "Deep")
    for _ in range(5000):
        schema = obj(n=schema)
    (header,) = declared(schema)
    assert header.name == "Mcp-Param-Deep" and len(header.path) == 5000


def test_a_long_server_value_in_a_reason_is_bounded_and_escaped() -> None:
    reason = rejected(obj(**{"k\n" * 500: prop("string", "bad token " * 1000)}))
    assert len(reason) < 400 and "\n" not in reason


# -- values ---------------------------------------------------------------------------------

SCHEMA = obj(
    region=prop("string", "Region"),
    shard=prop("integer", "Shard"),
    dry=prop("boolean", "Dry"),
    nested=obj(tenant=prop("string", "Tenant")),
)


def test_values_convert_as_the_revision_says() -> None:
    arguments = {"region": "us-west1", "shard": -7, "dry": False, "nested": {"tenant": "acme"}, "q": "x"}
    assert headers(SCHEMA, arguments) == {
        "Mcp-Param-Region": "us-west1",
        "Mcp-Param-Shard": "-7",
        "Mcp-Param-Dry": "false",
        "Mcp-Param-Tenant": "acme",
    }
    assert headers(SCHEMA, {"dry": True, "shard": 42.0}) == {"Mcp-Param-Shard": "42", "Mcp-Param-Dry": "true"}


@pytest.mark.parametrize(
    ("value", "encoded"),
    [  # the revision's encoding examples
        ("Hello, 世界", "=?base64?SGVsbG8sIOS4lueVjA==?="),
        (" padded ", "=?base64?IHBhZGRlZCA=?="),
        ("line1\nline2", "=?base64?bGluZTEKbGluZTI=?="),
        ("=?base64?literal?=", "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="),
    ],
)
def test_a_value_that_is_not_plain_visible_ascii_takes_the_base64_sentinel(value: str, encoded: str) -> None:
    assert headers(SCHEMA, {"region": value}) == {"Mcp-Param-Region": encoded}


def test_absent_and_null_arguments_send_no_header() -> None:
    assert headers(SCHEMA, {}) == {}
    assert headers(SCHEMA, {"region": None, "nested": None}) == {}
    assert headers(SCHEMA, {"nested": "not an object"}) == {}


@pytest.mark.parametrize(
    "value",
    [{"a": 1}, [1], 4.5, float("inf"), 2**53, -(2**60), 10**5000],
    ids=["object", "array", "fraction", "inf", "2^53", "-2^60", "10^5000"],
)
def test_a_value_with_no_header_form_sends_no_header(value: Any) -> None:
    assert headers(SCHEMA, {"shard": value}) == {}


def test_headers_over_the_byte_bound_fail_the_call_naming_the_bound() -> None:
    with pytest.raises(LimitExceeded) as caught:
        headers(SCHEMA, {"region": "x" * 100, "nested": {"tenant": "y" * 100}}, max_bytes=150)
    assert caught.value.limit == "max_param_header_bytes"
    assert "the Mcp-Param headers of a tools/call of t are too long" in str(caught.value)
    with pytest.raises(LimitExceeded):  # measured before encoding: a huge value costs nothing
        headers(SCHEMA, {"region": "é" * 10_000_000}, max_bytes=BYTES)
    assert headers(SCHEMA, {"region": "x" * 100}, max_bytes=len("Mcp-Param-Region") + 100)


@given(
    token=st.text(st.characters(codec="ascii"), min_size=1, max_size=20),
    value=st.one_of(st.text(max_size=50), st.integers(), st.booleans(), st.floats(allow_nan=False)),
)
def test_no_header_ever_carries_anything_but_a_token_and_a_field_value(token: str, value: Any) -> None:
    out = declared_headers(obj(a=prop("string", token)), max_headers=MAX)
    if isinstance(out, Rejected):
        assert "\r" not in out.reason and "\n" not in out.reason
        return
    for name, field_value in param_headers(out, {"a": value}, tool="t", max_bytes=BYTES).items():
        assert re.fullmatch(r"Mcp-Param-[!#$%&'*+\-.^_`|~0-9A-Za-z]+", name)
        assert _FIELD_VALUE.match(field_value) and "\r" not in field_value and "\n" not in field_value
        if field_value.startswith("=?base64?"):
            assert base64.b64decode(field_value[9:-2]).decode() == value

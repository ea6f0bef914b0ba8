"""``mcpl_host.coerce``: command-line words to ``tools/call`` and ``prompts/get`` arguments,
coerced by the tool's ``inputSchema`` and checked against it. Plain calls (the module is pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpl_host.coerce import (
    ArgumentError,
    UnusableSchema,
    allowed_types,
    argument_names,
    parse_arguments,
    prompt_arguments,
    schema_problems,
    unknown_arguments,
)

ADD = {
    "type": "object",
    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
    "required": ["a", "b"],
}
MIXED = {
    "type": "object",
    "properties": {
        "text": {"type": "string"},
        "count": {"type": "integer"},
        "ratio": {"type": "number"},
        "flag": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "options": {"type": "object"},
        "maybe": {"type": ["string", "null"]},
        "mode": {"enum": ["fast", "slow"]},
        "level": {"enum": [1, 2, 3]},
        "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        "ref": {"$ref": "#/$defs/Size"},
        "anything": {},
    },
    "$defs": {"Size": {"type": "integer", "minimum": 0}},
    "additionalProperties": False,
}


def test_key_value_words_are_coerced_by_the_schema() -> None:
    words = [
        "text=123",
        "count=7",
        "ratio=0.5",
        "flag=true",
        'tags=["a","b"]',
        'options={"deep": {"x": 1}}',
        "maybe=null",
        "mode=fast",
        "level=2",
        "either=3",
        "ref=4",
        "anything=[1]",
    ]
    assert parse_arguments(words, MIXED) == {
        "text": "123",  # a string property keeps the digits as written
        "count": 7,
        "ratio": 0.5,
        "flag": True,
        "tags": ["a", "b"],
        "options": {"deep": {"x": 1}},
        "maybe": None,
        "mode": "fast",
        "level": 2,
        "either": 3,
        "ref": 4,
        "anything": [1],
    }


def test_a_union_with_string_falls_back_to_the_text_and_unknown_properties_to_json_or_text() -> None:
    assert parse_arguments(["either=three", "maybe=hello"], MIXED) == {"either": "three", "maybe": "hello"}
    assert parse_arguments(["x=1", "y=not json", "z=", "w=a=b"], None) == {
        "x": 1,
        "y": "not json",
        "z": "",
        "w": "a=b",
    }


def test_a_whole_number_for_an_integer_is_sent_as_an_integer() -> None:
    value = parse_arguments(["count=2.0"], MIXED)["count"]
    assert value == 2 and isinstance(value, int)


@pytest.mark.parametrize(
    ("word", "message"),
    [
        ("count=seven", "argument 'count' must be an integer, not 'seven'"),
        ("count=1.5", "argument 'count' must be an integer, not '1.5'"),
        ("ratio=", "argument 'ratio' must be a number, not ''"),
        ("ratio=NaN", "argument 'ratio' must be a number, not 'NaN'"),
        ("flag=yes", "argument 'flag' must be true or false, not 'yes'"),
        ("tags=a,b", "argument 'tags' must be a JSON array, not 'a,b'"),
        ("options=[1]", "argument 'options' must be a JSON object, not '[1]'"),
        ("level=" + "[" * 5000, "argument 'level' must be a number, not '[[["),
    ],
)
def test_a_value_of_the_wrong_type_is_an_error_naming_the_argument(word: str, message: str) -> None:
    with pytest.raises(ArgumentError) as caught:
        parse_arguments([word], MIXED)
    assert str(caught.value).startswith(message)
    assert caught.value.argument == word.partition("=")[0]


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["a"], "'a' is not KEY=VALUE (or give one JSON object)"),
        (["=1"], "'=1' has no argument name before '='"),
        (["a=1", "a=2"], "argument 'a' is given twice"),
        (["{not json"], "the arguments are not a JSON object"),
        (["[1, 2]"], "'[1, 2]' is not KEY=VALUE"),
    ],
)
def test_malformed_words_are_errors(words: list[str], message: str) -> None:
    with pytest.raises(
        ArgumentError, match="^" + message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
    ):
        parse_arguments(words, ADD)


def test_one_json_object_word_is_the_arguments_as_they_are() -> None:
    assert parse_arguments(['{"a": 1, "b": "2"}'], ADD) == {"a": 1, "b": "2"}  # checked later
    with pytest.raises(ArgumentError, match="not a JSON object"):
        parse_arguments(['{"a": 1} extra'], ADD)


def test_schema_problems_name_the_argument() -> None:
    assert schema_problems({"a": 1, "b": 2}, ADD) == []
    assert schema_problems({"a": 1}, ADD) == ["argument 'b' is required"]
    assert schema_problems({"a": "1", "b": 2}, ADD) == ["argument 'a': '1' is not of type 'number'"]
    assert schema_problems({"ref": -1}, MIXED) == ["argument 'ref': -1 is less than the minimum of 0"]
    assert schema_problems({"tags": ["a", 2]}, MIXED) == ["argument 'tags'[1]: 2 is not of type 'string'"]
    (extra,) = schema_problems({"nope": 1}, MIXED)
    assert extra.startswith("arguments: Additional properties are not allowed ('nope' was unexpected)")


def test_many_problems_are_listed_up_to_a_bound() -> None:
    schema = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(30)}}
    problems = schema_problems({f"p{i}": "x" for i in range(30)}, schema)
    assert len(problems) == 11 and problems[-1] == "... and 20 more"


def test_the_dialect_named_by_the_schema_is_used() -> None:
    draft7 = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "dependencies": {"a": ["b"]},
    }
    assert schema_problems({"a": 1}, draft7) == ["arguments: 'b' is a dependency of 'a'"]


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        ({"type": "objekt"}, "not a valid JSON Schema"),
        (
            {"type": "object", "properties": {"a": {"$ref": "https://example.invalid/s.json"}}},
            "could not use it",
        ),
        ({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}, "could not use it"),
    ],
)
def test_a_schema_that_cannot_check_anything_is_unusable(schema: dict[str, Any], why: str) -> None:
    with pytest.raises(UnusableSchema, match=why):
        schema_problems({"a": 1}, schema)


def test_a_schema_nested_past_the_recursion_limit_is_unusable_not_a_crash() -> None:
    deep: dict[str, Any] = {"type": "object"}
    for _ in range(3000):
        deep = {"type": "object", "properties": {"a": deep}}
    with pytest.raises(UnusableSchema):
        schema_problems({"a": {"a": 1}}, deep)
    assert allowed_types({"anyOf": [deep]}) == {"object"}  # looked at a bounded depth


def test_allowed_types_reads_type_enum_const_and_branches() -> None:
    assert allowed_types({"type": "string"}) == {"string"}
    assert allowed_types({"const": True}) == {"boolean"}
    assert allowed_types({"enum": ["a", None]}) == {"string", "null"}
    assert allowed_types({"oneOf": [{"type": "number"}, {"type": "array"}]}) == {"number", "array"}
    assert allowed_types({"anyOf": [{"type": "number"}, {}]}) is None  # a branch allowing anything
    assert allowed_types({"allOf": [{"minimum": 1}, {"type": "integer"}]}) == {"integer"}
    assert allowed_types(True) is None and allowed_types({"type": "bogus"}) is None
    assert argument_names(MIXED)[:3] == ["text", "count", "ratio"] and argument_names(None) == []


@given(st.text())
def test_a_string_property_takes_any_text_as_written(text: str) -> None:
    assert parse_arguments([f"text={text}"], MIXED) == {"text": text}


@given(st.one_of(st.integers(), st.floats(allow_nan=False, allow_infinity=False)))
def test_a_number_property_takes_any_json_number(number: float) -> None:
    assert parse_arguments([f"ratio={json.dumps(number)}"], MIXED) == {"ratio": number}


def test_prompt_arguments_are_strings_checked_against_the_declaration() -> None:
    declared = [{"name": "name", "required": True}, {"name": "tone"}]
    assert prompt_arguments(["name=Ada", "tone=7"], declared) == {"name": "Ada", "tone": "7"}
    assert prompt_arguments(['{"name": "Ada"}'], declared) == {"name": "Ada"}
    with pytest.raises(ArgumentError, match="argument 'name' is required"):
        prompt_arguments(["tone=dry"], declared)
    with pytest.raises(
        ArgumentError, match=r"the prompt has no argument 'nme'; did you mean 'name'\? \(it has: name, tone\)"
    ):
        prompt_arguments(["nme=Ada"], declared)
    with pytest.raises(ArgumentError, match="argument 'name' must be a string"):
        prompt_arguments(['{"name": 1}'], declared)


@pytest.mark.parametrize(
    ("schema", "refused"),
    [
        (ADD, True),  # properties given, additionalProperties absent: the names are these
        ({**ADD, "additionalProperties": False}, True),
        ({**ADD, "additionalProperties": True}, False),  # the tool takes any name
        ({**ADD, "additionalProperties": {"type": "string"}}, False),  # ... of this schema
        ({**ADD, "patternProperties": {"^x-": {}}}, False),  # names declared elsewhere too
        ({**ADD, "allOf": [{"properties": {"bb": {}}}]}, False),
        ({**ADD, "$ref": "#/$defs/more"}, False),
        ({"type": "object"}, False),  # no properties: nothing says which names there are
        (None, False),
    ],
)
def test_unknown_arguments_are_refused_where_the_schema_says_which_names_there_are(
    schema: dict[str, Any] | None, refused: bool
) -> None:
    if not refused:
        unknown_arguments(["a", "bb"], schema, tool="get-sum")
        return
    with pytest.raises(ArgumentError) as caught:
        unknown_arguments(["a", "bb"], schema, tool="get-sum")
    assert str(caught.value) == "the tool 'get-sum' has no argument 'bb'; did you mean 'b'? (it has: a, b)"
    assert caught.value.argument == "bb"


def test_an_unknown_argument_far_from_every_name_gets_no_hint_and_each_one_is_named() -> None:
    with pytest.raises(ArgumentError) as caught:
        unknown_arguments(["zzzz", "a", "qqqq"], ADD, tool="get-sum")
    assert str(caught.value) == "the tool 'get-sum' has no argument 'zzzz' (it has: a, b), nor 'qqqq'"
    unknown_arguments(["a", "b"], ADD, tool="get-sum")  # all declared: nothing to say

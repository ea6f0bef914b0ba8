"""An operator's arguments that JSON cannot carry (mcpl_host/coerce.py ``parse_json``,
``parse_arguments``): ``1e999`` is read by the standard library as infinity, passes the
``inputSchema`` check as a number, and is then sent as ``null`` (orjson writes a non-finite
float as null), so the server gets a value the operator never gave. It must be refused
before anything is sent, as ``NaN`` is.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from mcpl_host.coerce import ArgumentError, parse_arguments

SCHEMA: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "number"}}}


def test_what_the_wire_makes_of_infinity() -> None:
    # The premise: the encoder turns infinity into null, silently.
    assert orjson.dumps({"a": float("inf")}) == b'{"a":null}'


@pytest.mark.parametrize("words", [["a=1e999"], ["a=-1e999"], ['{"a": 1e999}']])
def test_a_number_too_large_for_json_is_refused_before_sending(words: list[str]) -> None:
    with pytest.raises(ArgumentError):
        parse_arguments(words, SCHEMA)

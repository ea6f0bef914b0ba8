"""Numbers a server chooses, read by plain calls: every one is a finite number within its
bound, or refused (the value is left out, or the request refused with a reason), never an
``OverflowError`` or an infinity carried on. A JSON number past a double (``1e400``) reads
as an infinity (orjson and the standard library both); an integer of 400 digits is exact
but does not convert to a float. (The SSE ``retry`` field: tests/test_http_hostile.py; an
integer past the interpreter's 4,300-digit limit: tests/test_unreadable_answers.py.)"""

from __future__ import annotations

import math
from typing import Any

import pytest

from mcpl_host.caching import cache_hint
from mcpl_host.client_features import read_sampling_request
from mcpl_host.jsonrpc import values
from mcpl_host.jsonrpc.errors import HandlerError
from mcpl_host.jsonrpc.framing import loads_line
from mcpl_host.mcp_records import read_resource

HUGE_INT = 10**400
INF = loads_line(b"1e400")


def test_a_number_past_a_double_reads_as_an_infinity() -> None:
    assert INF == math.inf


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0.5, 0.5), (1, 1.0), (HUGE_INT, None), (INF, None), (-INF, None), (True, None), ("1", None)],
)
def test_finite_number(value: Any, expected: float | None) -> None:
    assert values.finite_number(value) == expected


@pytest.mark.parametrize("priority", [HUGE_INT, INF, 1.5, -0.1])
def test_an_annotation_priority_outside_0_to_1_is_left_out(priority: Any) -> None:
    resource = read_resource({"uri": "file:///a", "name": "a", "annotations": {"priority": priority}})
    assert resource is not None and resource.annotations is not None
    assert resource.annotations.priority is None
    kept = read_resource({"uri": "file:///a", "name": "a", "annotations": {"priority": 0.25}})
    assert kept is not None and kept.annotations is not None and kept.annotations.priority == 0.25


def _sampling(**params: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], **params}


@pytest.mark.parametrize("max_tokens", [INF, HUGE_INT])
def test_sampling_max_tokens_past_a_double_is_refused(max_tokens: Any) -> None:
    with pytest.raises(HandlerError, match="maxTokens must be a positive number"):
        read_sampling_request(_sampling(maxTokens=max_tokens), tools_allowed=False)


@pytest.mark.parametrize("temperature", [INF, HUGE_INT])
def test_sampling_temperature_past_a_double_is_left_out(temperature: Any) -> None:
    request = read_sampling_request(_sampling(maxTokens=10, temperature=temperature), tools_allowed=False)
    assert request.temperature is None and request.max_tokens == 10


@pytest.mark.parametrize("ttl", [INF, HUGE_INT, 10**4000])
def test_a_ttl_past_a_double_is_cut_to_the_bound(ttl: Any) -> None:
    hint = cache_hint({"ttlMs": ttl}, max_ttl_seconds=60.0)
    assert hint.ttl_seconds == (60.0 if ttl != INF else 0.0)

"""RFC-007 §13 ``tools/observe`` parser vectors (``tests/vectors/mcpl-spec/
tools-observe-parser-vectors.json``, with the schema it freezes, ``tools-observe.schema.json``;
byte-for-byte copies, tests/vectors/README.md).

Each of the 72 cases runs three ways, and all must agree with the case's ``valid``:

- the schema, through the maintained validator the project uses (``jsonschema``, via
  ``mcpl_host.schema_check.judge``);
- the pure parser (``mcpl.tool_lifecycle.parse_observe``), a plain call, with the RFC's floor
  limits (64 rules, 64 paths: the defaults of ``Limits``);
- the real host: the fixture server (fixtures/current_spec/server.py, its ``lifecycle`` part),
  granted ``toolLifecycle.observe`` by name, sends the case's params as ``tools/observe`` over
  real pipes, after a sentinel filter. A valid case is answered ``{}`` and the filter in force
  is the one the params give (None for a clear); an invalid one is answered ``-32602`` and the
  sentinel stays in force (RFC-007 §6.6). One connection per backend, asyncio and trio.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpl_host import ServerConfig, connect
from mcpl_host.jsonrpc.errors import HandlerError
from mcpl_host.mcpl.grants import GrantPolicy
from mcpl_host.mcpl.tool_lifecycle import ObserveFilter, Rule, parse_observe
from mcpl_host.schema_check import judge, validator_name
from mcpl_host.server_connection import ServerConnection

from .conftest import FIXTURES, record_vector
from .wire import FAST

FILE_NAME = "tools-observe-parser-vectors.json"
HERE = Path(__file__).parent / "vectors" / "mcpl-spec"
FILE = json.loads((HERE / FILE_NAME).read_text(encoding="utf-8"))
SCHEMA = json.loads((HERE / "tools-observe.schema.json").read_text(encoding="utf-8"))
CASES: list[dict[str, Any]] = FILE["cases"]
SERVER = str(FIXTURES / "current_spec" / "server.py")
SENTINEL = {"rules": [{"match": {"tool": "sentinel--*"}, "input": ["kept"]}]}
SENTINEL_FILTER = ObserveFilter((Rule(tool="sentinel--*", input=("kept",)),))
TIMEOUT = 20


def _ids() -> list[str]:
    return [f"{i:02d}" for i in range(len(CASES))]


def test_file_is_the_one_described() -> None:
    """72 cases (41 valid, 31 invalid), profile ``rfc-007-section-13``; ids unique."""
    assert FILE["profile"] == "rfc-007-section-13"
    assert len(CASES) == 72
    assert sum(1 for c in CASES if c["valid"]) == 41
    assert len({c["id"] for c in CASES}) == 72


@pytest.fixture(scope="module", params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
async def observer(anyio_backend: str) -> AsyncIterator[ServerConnection]:
    config = ServerConfig(
        name="obs",
        command=sys.executable,
        args=(SERVER,),
        limits=FAST,
        grant_policy=GrantPolicy(grant=("toolLifecycle.observe",)),
    )
    async with connect(config) as conn:
        yield conn


async def _observe(conn: ServerConnection, params: Any, *, omit: bool = False) -> dict[str, Any]:
    args: dict[str, Any] = {"omit": True} if omit else {"params": params}
    result = await conn.mcp.call_tool("lifecycle_observe", args)
    answer: dict[str, Any] = json.loads(result.text)
    return answer


@pytest.mark.parametrize("index", range(len(CASES)), ids=_ids())
def test_case_schema_and_pure_parser(index: int, request: pytest.FixtureRequest) -> None:
    """The schema (jsonschema) and the pure parser both say what the case says."""
    case = CASES[index]
    schema_verdict = judge(SCHEMA, validator_name(SCHEMA) or "", case["params"])
    assert (schema_verdict is None) == case["valid"], schema_verdict
    parsed = parse_observe(case["params"], max_rules=64, max_paths=64)
    assert isinstance(parsed, HandlerError) != case["valid"], parsed
    if isinstance(parsed, HandlerError):
        assert parsed.code == -32602


@pytest.mark.anyio
@pytest.mark.parametrize("index", range(len(CASES)), ids=_ids())
async def test_case_through_the_host(
    index: int, observer: ServerConnection, request: pytest.FixtureRequest
) -> None:
    case = CASES[index]
    record_vector(request, FILE_NAME, case["id"])  # first: a failure below counts as failed
    with anyio.fail_after(TIMEOUT):
        assert await _observe(observer, SENTINEL) == {"result": {}}
        assert observer.tool_observe.current == SENTINEL_FILTER
        answer = await _observe(observer, case["params"])
    if case["valid"]:
        assert answer == {"result": {}}
        expected = parse_observe(case["params"], max_rules=64, max_paths=64)
        assert not isinstance(expected, HandlerError)
        assert observer.tool_observe.current == expected.filter
        if case["params"].get("rules") is None:
            assert observer.tool_observe.current is None  # cleared
    else:
        assert answer["error"]["code"] == -32602, answer
        assert observer.tool_observe.current == SENTINEL_FILTER  # the previous filter stays


@pytest.mark.anyio
async def test_omitted_params_are_refused_and_the_filter_stays(observer: ServerConnection) -> None:
    """docs/protocol.md TL3: a request without ``params`` reads as ``null`` here (JSON-RPC
    2.0 §4.2 leaves params to the method; the envelope does not keep the difference), and is
    refused, so nothing clears a filter but ``{}`` or ``{"rules": null}``."""
    with anyio.fail_after(TIMEOUT):
        assert await _observe(observer, SENTINEL) == {"result": {}}
        answer = await _observe(observer, None, omit=True)
    assert answer["error"]["code"] == -32602
    assert observer.tool_observe.current == SENTINEL_FILTER


@pytest.mark.anyio
async def test_over_the_rule_limit_names_the_limit(observer: ServerConnection) -> None:
    """RFC-007 §6.6: over the host's rule limit, ``-32602`` with ``data.limit``."""
    params = {"rules": [{"match": {}}] * 65}
    with anyio.fail_after(TIMEOUT):
        answer = await _observe(observer, params)
    assert answer["error"]["code"] == -32602
    assert answer["error"]["data"] == {"limit": "rules"}

"""RFC-008 rev 2 conformance vectors (``tests/vectors/mcpl-spec/tool-class-vectors.json``,
a byte-for-byte copy; tests/vectors/README.md) run against the real host.

Each vector gets a fresh host: a ``ServerConnection`` (``connect``) over real pipes to
``fixtures/current_spec/server.py``, whose ``tool_classes`` part serves the vector's tool
definitions stage by stage (``classes_stage``: the listing replaced, then
``notifications/tools/list_changed``). The vector's ``overrides`` become the server's
``tool_classes`` (the operator's table) and ``hostClasses`` its ``host_tool_classes`` (the
embedding application's own tools), keyed by the tool name as listed: the vector's model-facing
name is ``<server>--<tool>`` and the server is named after its prefix (docs/protocol.md,
"Tool classes (RFC-008)", TC1). Each stage checks, on the ``Tool`` the host's listing gives
the application after the re-list: the effective classes (as a set, each of the vocabulary)
and their source; the description and the input schema byte-identical to the definition sent
(serialized the same way, key order and Unicode forms kept); the argument treatment through
``tool_classes.inputs_admitted`` with the vector's ``inputsPolicy`` as the narrowing (TC4:
the decision is asserted here; its delivery in ``tools/lifecycle`` is the tool lifecycle
vectors', tests/test_vectors_tool_lifecycle.py); and
the ``diagnosticHint`` (a SHOULD) among the connection's log lines. asyncio and trio.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpl_host import ServerConfig, connect
from mcpl_host.mcp_records import Tool
from mcpl_host.tool_classes import TOOL_CLASSES, InputsNarrowing, inputs_admitted

from .conftest import FIXTURES, record_vector
from .wire import FAST

FILE_NAME = "tool-class-vectors.json"
FILE = json.loads((Path(__file__).parent / "vectors" / "mcpl-spec" / FILE_NAME).read_text(encoding="utf-8"))
VECTORS: list[dict[str, Any]] = FILE["vectors"]
SERVER = str(FIXTURES / "current_spec" / "server.py")
TIMEOUT = 20


def test_file_is_the_one_described() -> None:
    """The coverage the file promises (RFC-008 §10): eleven cases, 24 stages, the ten classes."""
    assert FILE["profile"] == "rfc-008-revision-2"
    assert tuple(FILE["vocabulary"]) == TOOL_CLASSES
    assert sorted(v["rfcVector"] for v in VECTORS) == list(range(1, 12))
    assert sum(len(v["stages"]) for v in VECTORS) == 24


def _split(model_name: str) -> tuple[str, str]:
    server, _, tool = model_name.partition("--")
    assert tool, f"{model_name!r} is not <server>--<tool>"
    return server, tool


def _table(vector: dict[str, Any], key: str, server: str) -> dict[str, tuple[str, ...]]:
    table: dict[str, tuple[str, ...]] = {}
    for model_name, classes in (vector.get(key) or {}).items():
        owner, tool = _split(model_name)
        assert owner == server
        table[tool] = tuple(classes)
    return table


def _narrowing(policy: dict[str, Any]) -> InputsNarrowing:
    tools, classes = policy.get("tools"), policy.get("classes")
    return InputsNarrowing(
        tools=tuple(tools) if tools is not None else None,
        classes=tuple(classes) if classes is not None else None,
    )


def _serialized(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _logged(logs: list[dict[str, Any]]) -> str:
    return "\n".join(" ".join(str(v) for v in entry.values()) for entry in logs)


@pytest.mark.anyio
@pytest.mark.parametrize("vector", VECTORS, ids=[v["id"] for v in VECTORS])
async def test_vector(
    vector: dict[str, Any], anyio_backend: str, logs: list[dict[str, Any]], request: pytest.FixtureRequest
) -> None:
    record_vector(request, FILE_NAME, vector["id"])  # first: a failure below counts as failed
    server, _ = _split(vector["stages"][0]["modelName"])
    assert (vector["origin"] == "host") == (server == "host")
    config = ServerConfig(
        name=server,
        command=sys.executable,
        args=(SERVER,),
        limits=FAST,
        tool_classes=_table(vector, "overrides", server),
        host_tool_classes=_table(vector, "hostClasses", server),
    )
    narrowing = _narrowing(vector["inputsPolicy"])
    with anyio.fail_after(TIMEOUT):
        async with connect(config) as conn:
            # The fixture's other parts keep their tools; only the staged ones are replaced.
            base = {tool.name for tool in await conn.mcp.list_tools()}
            base -= {"send_file", "quantum", "malformed"}  # the fixture's staged samples
            for stage in vector["stages"]:
                sent, expect = stage["tool"], stage["expect"]
                owner, name = _split(stage["modelName"])
                assert owner == server and name == sent["name"]
                await conn.mcp.call_tool("classes_stage", {"tools": [sent]})
                await conn.mcp.lists_settled()
                listed = {tool.name: tool for tool in conn.mcp.cached_tools or []}
                staged = [n for n in listed if n not in base]
                assert staged == [name]  # the re-list replaced the listing
                tool: Tool = listed[name]
                assert set(tool.classes) <= set(TOOL_CLASSES)
                assert set(tool.classes) == set(expect["classes"]), stage
                assert tool.class_source == expect["source"], stage
                # What reaches the application (and so the model): as the server wrote it.
                assert tool.description == sent["description"]
                assert _serialized(tool.input_schema) == _serialized(sent["inputSchema"])
                assert _serialized(tool.raw) == _serialized(sent)
                admitted = inputs_admitted(stage["modelName"], tool.classes, narrowing)
                assert admitted == (expect["input"] == "sent"), stage
                hint = stage.get("diagnosticHint")
                if hint is not None:
                    assert hint in _logged(logs), f"no diagnostic naming {hint!r}"

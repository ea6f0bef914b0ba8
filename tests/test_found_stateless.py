"""A hostile stateless (MCP 2026-07-28) server against the multi round-trip loop
(mcpl_host/mcp_methods.py ``MCPClient._call``, mcpl_host/stateless.py ``input_required``):
the keys of ``inputRequests`` are server text, so a configured secret in them must be
redacted in every error that names them (docs/cli.md "Secrets": errors are an output).

Over real pipes to ``fixtures/scripted_server.py`` (``"discover": "steps"``: the script
answers the era probe itself).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpl_host import HandlerError, HostHandlers, MCPLHostError, RequestContext
from mcpl_host.client_features import ElicitationMode, ElicitationRequest, ElicitationResult
from mcpl_host.jsonrpc.errors import RemoteProtocolError

from .wire import Script

pytestmark = pytest.mark.anyio

SECRET = "hunter2-configured-secret-value"
DISCOVER_RESULT = {
    "resultType": "complete",
    "supportedVersions": ["2026-07-28"],
    "capabilities": {"tools": {}},
    "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "modern", "version": "1"}},
}
ELICIT = {
    "method": "elicitation/create",
    "params": {"mode": "form", "message": "name?", "requestedSchema": {"type": "object", "properties": {}}},
}


def asks(input_requests: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"options": {"discover": "steps"}},
        {"expect": {"method": "server/discover"}},
        {"reply": DISCOVER_RESULT},
        {"expect": {"method": "tools/call"}},
        {"reply": {"resultType": "input_required", "inputRequests": input_requests}},
    ]


class Refusing:
    """An elicitation handler that refuses every request."""

    modes: tuple[ElicitationMode, ...] = ("form",)

    async def elicit(self, context: RequestContext, request: ElicitationRequest) -> ElicitationResult:
        raise HandlerError(-32000, "declined by policy")


async def call_error(tmp_path: Path, steps: list[dict[str, Any]]) -> MCPLHostError:
    script = Script(tmp_path, steps)
    with anyio.fail_after(20):
        async with script.connect(handlers=HostHandlers(elicitation=Refusing()), secrets=[SECRET]) as conn:
            assert conn.era == "stateless"
            with pytest.raises(MCPLHostError) as caught:
                await conn.mcp.call_tool("t", {})
    return caught.value


async def test_a_secret_in_the_key_of_a_malformed_input_request_is_redacted(tmp_path: Path) -> None:
    error = await call_error(tmp_path, asks({SECRET: {"method": "evil/method"}}))
    assert "is not one of" in str(error)
    assert SECRET not in str(error)


async def test_a_secret_in_the_key_of_a_refused_input_request_is_redacted(tmp_path: Path) -> None:
    error = await call_error(tmp_path, asks({SECRET: ELICIT}))
    assert "was refused" in str(error)
    assert SECRET not in str(error)


async def test_a_list_answered_input_required_is_not_an_empty_list(tmp_path: Path) -> None:
    steps: list[dict[str, Any]] = [
        {"options": {"discover": "steps"}},
        {"expect": {"method": "server/discover"}},
        {"reply": DISCOVER_RESULT},
        {"expect": {"method": "tools/list"}},
        {"reply": {"resultType": "input_required", "inputRequests": {"r": {"method": "roots/list"}}}},
    ]
    script = Script(tmp_path, steps)
    with anyio.fail_after(20):
        async with script.connect(handlers=HostHandlers(roots=[str(tmp_path)])) as conn:
            assert conn.era == "stateless"
            # The server did not list its tools (MCP 2026-07-28 "Multi Round-Trip Requests"
            # are not for list methods): a clear error, as call_tool gives for an unexpected
            # resultType, not "no tools".
            with pytest.raises(RemoteProtocolError):
                await conn.mcp.list_tools()

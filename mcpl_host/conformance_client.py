"""The client the official MCP conformance suite (``@modelcontextprotocol/conformance``) drives:
``python -m mcpl_host.conformance_client URL``, one process per scenario (or ``run_request``,
one task per scenario, in a process that serves many: ``scripts/conformance.py``).

The suite starts a test server for a client scenario, runs this module with the server's
URL as its last argument and the scenario named in ``MCP_CONFORMANCE_SCENARIO``, and judges
what arrived on the wire. The revision to speak is ``MCP_CONFORMANCE_PROTOCOL_VERSION`` (a
dated revision through 2025-11-25: the handshake era, ``initialize``; 2026-07-28: the
stateless era, ``server/discover`` and ``_meta`` on each request); scenario data (client
credentials, the tool calls to make) is ``MCP_CONFORMANCE_CONTEXT``, a JSON object.

Rules of this module:

- It uses the host's public API only (``connect``, ``ServerConfig(url=...)``, the
  ``MCPClient`` calls, ``HostHandlers`` with the client features), so what the suite
  measures is the library as an application gets it. What each scenario does is one
  function in ``SCENARIOS``; a scenario not named there lists the tools (what every
  scenario's server answers).
- Authorization: the host's OAuth (``mcpl_host.auth``), set in ``server_config``, the one
  place a scenario's ``ServerConfig`` is built. The client credentials of the context are
  read into ``ContextCredentials`` (``context_credentials``; its repr hides the secrets):
  ``client_id`` (pre-registered) with ``client_secret`` or ``private_key_pem`` (written to a
  file of the scenario's folder for ``private_key_jwt``). The client ID metadata document
  URL is ``CLIENT_METADATA_URL`` (the one the suite's CIMD scenario expects). Each scenario
  has its own token store in its own temporary folder, so no grant passes from one scenario
  to the next. A person's login is played by ``approve_in_browser``: the suite's
  authorization server approves at once, so requesting the authorization URL and following
  its redirect to the loopback listener is the whole login. ``auth/client-credentials-*``
  scenarios use the client credentials grant (a machine: no login).
- Exit status: 0 when the scenario's steps ran, 1 with one line on stderr when a step
  failed (the suite judges the wire; a scenario run alone also fails on a status other than
  0, unless it expects the client to give up); 2 for a usage error. Nothing secret is
  printed: errors are the host's, which redact.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx

from mcpl_host.auth import OAuthSettings, TokenStore
from mcpl_host.client_features import Roots
from mcpl_host.config import ServerConfig
from mcpl_host.connection import ClientInfo
from mcpl_host.handlers import HostHandlers
from mcpl_host.hosted import connect
from mcpl_host.jsonrpc.values import is_array, is_object
from mcpl_host.limits import Limits
from mcpl_host.mcp_methods import Tool
from mcpl_host.probe_features import CannedElicitation, CannedSampling
from mcpl_host.server_connection import ServerConnection
from mcpl_host.stateless import STATELESS_PROTOCOL_VERSIONS, ProtocolChoice

__all__ = [
    "CLIENT_METADATA_URL",
    "SCENARIOS",
    "approve_in_browser",
    "ContextCredentials",
    "context_credentials",
    "main",
    "protocol_for",
    "run_request",
    "run_scenario",
    "server_config",
]

SCENARIO_ENV = "MCP_CONFORMANCE_SCENARIO"
CONTEXT_ENV = "MCP_CONFORMANCE_CONTEXT"
PROTOCOL_VERSION_ENV = "MCP_CONFORMANCE_PROTOCOL_VERSION"
CLIENT_INFO = ClientInfo(name="mcpl-host-conformance", version="1.0.0")
#: This client's ID metadata document URL (the suite's ``auth/basic-cimd`` expects it).
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"
#: The redirects the login's "browser" follows from the authorization URL.
MAX_BROWSER_REDIRECTS = 5


@dataclass(frozen=True)
class ContextCredentials:
    """The client credentials a scenario's context gives (``client_id``, ``client_secret``,
    ``private_key_pem`` with ``signing_algorithm``); empty when it gives none. The repr
    hides the secret and the key."""

    client_id: str | None = None
    client_secret: str | None = None
    private_key_pem: str | None = None
    signing_algorithm: str | None = None

    def __repr__(self) -> str:
        secret = "<hidden>" if self.client_secret else None
        key = "<hidden>" if self.private_key_pem else None
        return (
            f"ContextCredentials(client_id={self.client_id!r}, client_secret={secret}, "
            f"private_key_pem={key}, signing_algorithm={self.signing_algorithm!r})"
        )

    @property
    def secrets(self) -> tuple[str, ...]:
        """The values to redact wherever the host writes (``ServerConfig.secrets``)."""
        return tuple(value for value in (self.client_secret, self.private_key_pem) if value)


def _text(context: Mapping[str, Any], key: str) -> str | None:
    value = context.get(key)
    return value if isinstance(value, str) and value else None


def context_credentials(context: Mapping[str, Any]) -> ContextCredentials:
    """The client credentials in a scenario's ``MCP_CONFORMANCE_CONTEXT`` object."""
    return ContextCredentials(
        client_id=_text(context, "client_id"),
        client_secret=_text(context, "client_secret"),
        private_key_pem=_text(context, "private_key_pem"),
        signing_algorithm=_text(context, "signing_algorithm"),
    )


def protocol_for(version: str | None) -> ProtocolChoice:
    """The host's era setting for the revision the suite asks for: ``stateless`` for a
    stateless revision (MCP 2026-07-28), ``handshake`` for a dated one before it, ``auto``
    when the suite names none."""
    if not version:
        return "auto"
    return "stateless" if version in STATELESS_PROTOCOL_VERSIONS else "handshake"


def approve_in_browser(timeout_seconds: float) -> Callable[[str], Awaitable[None]]:
    """The person of a login, as the suite's authorization server needs one: a browser
    (``OAuthSettings.browser``) that requests the authorization URL (GET) and follows its
    redirects (at most ``MAX_BROWSER_REDIRECTS``) to the loopback redirect listener, which
    takes the code; each request within ``timeout_seconds``. It raises
    ``httpx.HTTPError`` when a request fails (the flow then fails at ``login``)."""

    async def browser(url: str) -> None:
        async with httpx.AsyncClient(
            follow_redirects=True, max_redirects=MAX_BROWSER_REDIRECTS, timeout=timeout_seconds
        ) as client:
            response = await client.get(url)
            await response.aclose()

    return browser


def server_config(
    url: str,
    *,
    protocol: ProtocolChoice,
    credentials: ContextCredentials,
    folder: Path,
    client_credentials: bool = False,
    limits: Limits | None = None,
) -> ServerConfig:
    """The ``ServerConfig`` of one scenario's server (``limits``: the host's bounds, by
    default ``Limits()``), with the host's OAuth (module rules): the context's client
    credentials, the private key written to ``folder`` (the scenario's own temporary
    folder, which also holds its token store, ``tokens.json``, secrets in the file: never
    the system keyring), ``CLIENT_METADATA_URL``, logins by ``approve_in_browser`` (each
    request within ``limits.http_reply_timeout_seconds``);
    ``client_credentials``: the client credentials grant rather than a login. The
    credentials' secrets are redacted from every output."""
    limits = limits or Limits()
    client_id = credentials.client_id
    key_file: str | None = None
    if client_id is not None and credentials.private_key_pem is not None:
        key_file = str(folder / "private-key.pem")
        with os.fdopen(os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as file:
            file.write(credentials.private_key_pem)
    oauth = OAuthSettings(
        client_id=client_id,
        client_secret=credentials.client_secret if client_id is not None and key_file is None else None,
        private_key_file=key_file,
        private_key_alg=credentials.signing_algorithm or "RS256",
        client_metadata_url=CLIENT_METADATA_URL,
        client_credentials=client_credentials,
        browser=approve_in_browser(limits.http_reply_timeout_seconds),
        store=TokenStore(folder / "tokens.json", use_keyring=False),
    )
    return ServerConfig(
        name="conformance",
        url=url,
        protocol=protocol,
        secrets=credentials.secrets,
        limits=limits,
        oauth=oauth,
    )


Scenario = Callable[[ServerConnection, Mapping[str, Any]], Awaitable[None]]


def _placeholder(schema: object) -> Any:
    """A value of a property's ``type`` (a string, a number...), for a call whose
    arguments only need to be well formed."""
    kind = schema.get("type") if is_object(schema) else None
    values: dict[str, Any] = {
        "string": "x",
        "number": 1,
        "integer": 1,
        "boolean": True,
        "array": [],
        "object": {},
    }
    return values.get(kind if isinstance(kind, str) else "", "x")


def _placeholder_arguments(tool: Tool) -> dict[str, Any]:
    """Arguments for ``tool``'s required properties, each a placeholder of its type."""
    schema = tool.input_schema
    properties = schema.get("properties") if is_object(schema) else None
    required = schema.get("required") if is_object(schema) else None
    if not is_object(properties) or not is_array(required):
        return {}
    return {name: _placeholder(properties.get(name)) for name in required if isinstance(name, str)}


async def list_tools_only(conn: ServerConnection, context: Mapping[str, Any]) -> None:
    """List the tools (``initialize``, ``request-metadata``, ``json-schema-ref-no-deref``:
    the scenario judges the opening and the listing; nothing is fetched for a ``$ref``)."""
    await conn.mcp.list_tools()


async def call_first_tool(conn: ServerConnection, context: Mapping[str, Any]) -> None:
    """List the tools and call the first with two numbers (``tools_call``: ``add_numbers``)."""
    tools = await conn.mcp.list_tools()
    if tools:
        await conn.mcp.call_tool(tools[0].name, {"a": 5, "b": 3})


def _named(tool_name: str) -> Scenario:
    async def scenario(conn: ServerConnection, context: Mapping[str, Any]) -> None:
        await conn.mcp.list_tools()
        await conn.mcp.call_tool(tool_name, {})

    scenario.__doc__ = f"List the tools and call ``{tool_name}`` without arguments."
    return scenario


async def request_state(conn: ServerConnection, context: Mapping[str, Any]) -> None:
    """``sep-2322-client-request-state`` (MCP 2026-07-28 multi round-trip requests): each
    tool answers with input requests the host serves (the elicitation handler accepts) and
    retries with; ``test_mrtr_unrelated`` is called between, carrying nothing of them."""
    await conn.mcp.list_tools()
    no_arguments: dict[str, Any] = {}
    async with anyio.create_task_group() as group:
        group.start_soon(conn.mcp.call_tool, "test_mrtr_echo_state", no_arguments)
        group.start_soon(conn.mcp.call_tool, "test_mrtr_unrelated", no_arguments)
    await conn.mcp.call_tool("test_mrtr_no_state", {})
    await conn.mcp.call_tool("test_mrtr_no_result_type", {})


async def standard_headers(conn: ServerConnection, context: Mapping[str, Any]) -> None:
    """``http-standard-headers``: one request of each method whose headers are judged
    (``tools/call``, ``resources/read``, ``prompts/get`` name their target in ``Mcp-Name``)."""
    tools = await conn.mcp.list_tools()
    for tool in tools:
        await conn.mcp.call_tool(tool.name, _placeholder_arguments(tool))
    for resource in await conn.mcp.list_resources():
        await conn.mcp.read_resource(resource.uri)
    for prompt in await conn.mcp.list_prompts():
        await conn.mcp.get_prompt(prompt.name, {})


async def custom_headers(conn: ServerConnection, context: Mapping[str, Any]) -> None:
    """``http-custom-headers``: the calls the context names (``toolCalls``: name and
    arguments), whose ``x-mcp-header`` parameters the host mirrors into headers."""
    await conn.mcp.list_tools()
    calls = context.get("toolCalls")
    for call in calls if is_array(calls) else []:
        if is_object(call) and isinstance(call.get("name"), str):
            arguments = call.get("arguments")
            await conn.mcp.call_tool(call["name"], dict(arguments) if is_object(arguments) else {})


async def every_listed_tool(conn: ServerConnection, context: Mapping[str, Any]) -> None:
    """``http-invalid-tool-headers``: call every tool the host kept (it leaves out a tool
    whose ``x-mcp-header`` annotations break the revision's rules, with a warning)."""
    for tool in await conn.mcp.list_tools():
        await conn.mcp.call_tool(tool.name, _placeholder_arguments(tool))


async def schema_echo(conn: ServerConnection, context: Mapping[str, Any]) -> None:
    """``json-schema-2020-12-preservation``: send the listed ``inputSchema`` of
    ``json_schema_2020_12_tool`` back through ``json_schema_echo``, as the host kept it."""
    tools = {tool.name: tool for tool in await conn.mcp.list_tools()}
    focal = tools.get("json_schema_2020_12_tool")
    if focal is None:
        raise LookupError("the server lists no json_schema_2020_12_tool")
    await conn.mcp.call_tool("json_schema_echo", {"schema": focal.input_schema})


async def auth_flow(conn: ServerConnection, context: Mapping[str, Any]) -> None:
    """An ``auth/*`` scenario: list the tools and call ``test-tool`` once connected."""
    await conn.mcp.list_tools()
    await conn.mcp.call_tool("test-tool", {})


#: What each scenario does once connected; any other lists the tools (``list_tools_only``).
SCENARIOS: dict[str, Scenario] = {
    "initialize": list_tools_only,
    "tools_call": call_first_tool,
    "elicitation-sep1034-client-defaults": _named("test_client_elicitation_defaults"),
    "sse-retry": _named("test_reconnection"),
    "request-metadata": list_tools_only,
    "sep-2322-client-request-state": request_state,
    "http-standard-headers": standard_headers,
    "http-custom-headers": custom_headers,
    "http-invalid-tool-headers": every_listed_tool,
    "json-schema-ref-no-deref": list_tools_only,
    "json-schema-2020-12-preservation": schema_echo,
}


def handlers_for(scenario: str) -> HostHandlers:
    """The client features served: roots (the current directory), sampling (a canned
    text) and elicitation (accept, the form's defaults filled in: SEP-1034; the request
    state scenario's forms ask for a confirmation)."""
    content = {"confirmed": True} if scenario == "sep-2322-client-request-state" else {}
    return HostHandlers(
        roots=Roots(["."]),
        sampling=CannedSampling("conformance"),
        elicitation=CannedElicitation("accept", content),
    )


async def run_scenario(
    scenario: str,
    url: str,
    *,
    context: Mapping[str, Any],
    protocol_version: str | None,
    limits: Limits | None = None,
) -> None:
    """Connect to ``url`` as ``scenario`` asks, run its steps, close. Raises what the host
    raises (``InitializeError``, ``RemoteError``, ``ConnectionLost``...)."""
    steps = SCENARIOS.get(scenario, auth_flow if scenario.startswith("auth/") else list_tools_only)
    credentials = context_credentials(context)
    with tempfile.TemporaryDirectory(prefix="mcpl-conformance-") as folder:
        config = server_config(
            url,
            protocol=protocol_for(protocol_version),
            credentials=credentials,
            folder=Path(folder),
            client_credentials=scenario.startswith("auth/client-credentials-"),
            limits=limits,
        )
        async with connect(config, handlers=handlers_for(scenario), client_info=CLIENT_INFO) as conn:
            await steps(conn, context)


def _context(raw: str | None) -> dict[str, Any]:
    if not raw:
        return {}
    value = json.loads(raw)
    if not is_object(value):
        raise ValueError(f"{CONTEXT_ENV} is not a JSON object")
    return dict(value)


async def run_request(
    args: Sequence[str], environ: Mapping[str, str], *, limits: Limits | None = None
) -> tuple[int, str | None]:
    """One scenario as the suite asks for it: ``args`` end with the server's URL and
    ``environ`` holds the ``MCP_CONFORMANCE_*`` variables (``limits``: as ``server_config``).
    The exit status (module rules) and the line to print on stderr, if any."""
    scenario = environ.get(SCENARIO_ENV, "")
    if not args or not scenario:
        return 2, f"usage: {SCENARIO_ENV}=<scenario> python -m mcpl_host.conformance_client URL"
    try:
        context = _context(environ.get(CONTEXT_ENV))
    except ValueError as error:
        return 2, f"conformance client: {error}"
    version = environ.get(PROTOCOL_VERSION_ENV) or None
    try:
        await run_scenario(scenario, args[-1], context=context, protocol_version=version, limits=limits)
    except Exception as error:  # one line for the suite's stderr.txt, whatever the host raised
        return 1, f"conformance client: {scenario}: {type(error).__name__}: {error}"
    return 0, None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mcpl_host.conformance_client URL``: ``run_request`` with this process's
    arguments and environment; the exit status."""
    args = sys.argv[1:] if argv is None else argv
    status, line = anyio.run(run_request, args, dict(os.environ))
    if line is not None:
        print(line, file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())

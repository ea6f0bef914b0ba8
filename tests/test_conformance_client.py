"""The client the official MCP conformance suite drives (``mcpl_host.conformance_client``):
what it reads of the suite's contract (``MCP_CONFORMANCE_SCENARIO``, ``_CONTEXT``,
``_PROTOCOL_VERSION``, the URL last), the era it speaks for a revision, its exit statuses,
and a scenario run against a real server in each era.

Server: ``fixtures/sdk_features_server.py`` (MCP Python SDK 2.x) over Streamable HTTP, its
stateful mode (MCP 2025-11-25, ``initialize``) and its stateless one (2026-07-28). The suite
itself runs in CI (``scripts/conformance.py``, docs/conformance.md).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator

import anyio
import pytest

from mcpl_host.conformance_client import (
    ContextCredentials,
    context_credentials,
    protocol_for,
    run_request,
    server_config,
)

from .test_client_features_real import TIMEOUT, sdk_over_http_for_module

SCENARIO = "MCP_CONFORMANCE_SCENARIO"
VERSION = "MCP_CONFORMANCE_PROTOCOL_VERSION"


@pytest.fixture(scope="module")
def stateful_port() -> Iterator[int]:
    with sdk_over_http_for_module() as port:
        yield port


@pytest.fixture(scope="module")
def stateless_port() -> Iterator[int]:
    with sdk_over_http_for_module("--stateless") as port:
        yield port


def test_the_revision_the_suite_names_chooses_the_era() -> None:
    assert protocol_for("2026-07-28") == "stateless"
    assert protocol_for("2025-11-25") == "handshake"
    assert protocol_for("2025-03-26") == "handshake"
    assert protocol_for(None) == "auto"


def test_context_credentials_are_read_and_hidden() -> None:
    context = {
        "client_id": "conformance-client",
        "client_secret": "s3cret-value",
        "private_key_pem": "PEM-KEY",
    }
    credentials = context_credentials(context)
    assert credentials.client_id == "conformance-client"
    assert credentials.secrets == ("s3cret-value", "PEM-KEY")
    assert "s3cret-value" not in repr(credentials) and "PEM-KEY" not in repr(credentials)
    config = server_config("http://127.0.0.1:1/mcp", protocol="handshake", credentials=credentials)
    assert "s3cret-value" in config.secrets  # redacted wherever the host writes
    assert context_credentials({}) == ContextCredentials()


@pytest.mark.anyio
async def test_without_a_scenario_or_a_url_the_status_is_2() -> None:
    assert (await run_request([], {SCENARIO: "initialize"}))[0] == 2
    assert (await run_request(["http://127.0.0.1:1/mcp"], {}))[0] == 2
    status, line = await run_request(
        ["http://127.0.0.1:1/mcp"], {SCENARIO: "initialize", "MCP_CONFORMANCE_CONTEXT": "[1]"}
    )
    assert status == 2 and line is not None and "not a JSON object" in line


@pytest.mark.anyio
async def test_a_step_that_fails_gives_status_1_and_one_line_naming_the_scenario() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with anyio.fail_after(TIMEOUT):
        status, line = await run_request([f"http://127.0.0.1:{port}/mcp"], {SCENARIO: "tools_call"})
    assert status == 1
    assert line is not None and line.startswith("conformance client: tools_call: ") and "\n" not in line


@pytest.mark.anyio
@pytest.mark.parametrize("revision", ["2025-11-25", "2026-07-28"])
async def test_tools_call_runs_against_a_real_server_in_each_era(
    revision: str, stateful_port: int, stateless_port: int
) -> None:
    port = stateless_port if revision == "2026-07-28" else stateful_port
    with anyio.fail_after(TIMEOUT):
        status, line = await run_request(
            ["--ignored", f"http://127.0.0.1:{port}/mcp"], {SCENARIO: "tools_call", VERSION: revision}
        )
    assert (status, line) == (0, None)


def test_the_module_runs_as_a_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mcpl_host.conformance_client"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2 and "usage:" in done.stderr

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
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from mcpl_host import connect
from mcpl_host.conformance_client import (
    CLIENT_METADATA_URL,
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


def test_context_credentials_are_read_and_hidden(tmp_path: Path) -> None:
    context = {
        "client_id": "conformance-client",
        "client_secret": "s3cret-value",
        "private_key_pem": "PEM-KEY",
    }
    credentials = context_credentials(context)
    assert credentials.client_id == "conformance-client"
    assert credentials.secrets == ("s3cret-value", "PEM-KEY")
    assert "s3cret-value" not in repr(credentials) and "PEM-KEY" not in repr(credentials)
    config = server_config(
        "http://127.0.0.1:1/mcp", protocol="handshake", credentials=credentials, folder=tmp_path
    )
    assert "s3cret-value" in config.secrets  # redacted wherever the host writes
    assert context_credentials({}) == ContextCredentials()


def test_the_oauth_settings_hold_the_contexts_credentials_and_a_store_of_the_scenarios_own(
    tmp_path: Path,
) -> None:
    url = "http://127.0.0.1:1/mcp"
    with_secret = server_config(
        url,
        protocol="handshake",
        credentials=context_credentials({"client_id": "pre", "client_secret": "s3cret-value"}),
        folder=tmp_path / "a",
    )
    oauth = with_secret.oauth
    assert (oauth.client_id, oauth.client_secret, oauth.private_key_file) == ("pre", "s3cret-value", None)
    assert oauth.client_metadata_url == CLIENT_METADATA_URL and oauth.browser is not None
    assert oauth.store is not None and oauth.store.path == tmp_path / "a" / "tokens.json"
    assert not oauth.store.uses_keyring and not oauth.client_credentials

    (tmp_path / "b").mkdir()
    context = {"client_id": "signer", "private_key_pem": "PEM-KEY", "signing_algorithm": "ES256"}
    with_key = server_config(
        url,
        protocol="stateless",
        credentials=context_credentials(context),
        folder=tmp_path / "b",
        client_credentials=True,
    ).oauth
    assert with_key.private_key_file is not None and with_key.client_secret is None
    key_file = Path(with_key.private_key_file)
    assert key_file.read_text() == "PEM-KEY" and stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert (with_key.private_key_alg, with_key.client_credentials) == ("ES256", True)

    (tmp_path / "c").mkdir()
    anonymous = server_config(url, protocol="auto", credentials=ContextCredentials(), folder=tmp_path / "c")
    assert anonymous.oauth.client_id is None and list((tmp_path / "c").iterdir()) == []


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


@pytest.fixture(scope="module")
def oauth_server_url() -> Iterator[str]:
    """``fixtures/oauth_server.py``: a loopback authorization server (Authlib) in front of an
    MCP endpoint, approving every authorization request at once."""
    fixture = Path(__file__).resolve().parent.parent / "fixtures" / "oauth_server.py"
    process = subprocess.Popen(
        [sys.executable, str(fixture)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdin is not None
    line = process.stdout.readline()
    assert line.startswith("PORT "), line
    yield f"http://127.0.0.1:{int(line.split()[1])}/mcp"
    process.stdin.close()
    process.wait(TIMEOUT)


@pytest.mark.anyio
async def test_a_scenarios_config_logs_in_through_its_browser_and_keeps_the_grant_in_its_folder(
    oauth_server_url: str, tmp_path: Path
) -> None:
    """``approve_in_browser`` follows the authorization redirect to the loopback listener
    (dynamic registration, PKCE); the grant lands in the scenario's own ``tokens.json``."""
    config = server_config(
        oauth_server_url, protocol="auto", credentials=ContextCredentials(), folder=tmp_path
    )
    with anyio.fail_after(TIMEOUT):
        async with connect(config) as conn:
            result = await conn.mcp.call_tool("whoami", {})
    assert result.content[0]["text"] == "whoami: mcp"
    assert config.oauth.store is not None
    grant = config.oauth.store.find(oauth_server_url)
    assert grant is not None and grant.grant_type == "authorization_code"
    assert (tmp_path / "tokens.json").exists()

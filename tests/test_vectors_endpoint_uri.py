"""MCPL §18 endpoint URIs: the 20 vectors of §18.7 (``tests/vectors/mcpl-spec/
endpoint-uri-vectors.json``, transcribed from SPEC.md; tests/vectors/README.md) through the
host's real entry points, and ``mcpl://`` end to end over a real ``wss://`` loopback server.

Each vector goes through ``resolve_endpoint_uri``, ``ServerConfig(url=...)``, a config
document (``parse_config``), the command line (``mcpl-host probe --ws`` and ``--url``, in
process) and ``connect()`` on asyncio and trio, with the WebSocket dialler replaced by a
recorder that refuses every dial: a resolution must dial exactly the host and port of its
``resolvedTransport`` over TLS and give the expected ``canonicalUri``; a rejection must fail
naming its rule before anything is dialled.

End to end: ``fixtures/ws_bridge.py`` serves ``wss://`` on 127.0.0.1 (certificate from a
``trustme`` CA the host is given as its ``ssl_context``, or ``SSL_CERT_FILE`` for the
command line) in front of ``fixtures/current_spec/server.py`` (MCPL), of a scripted plain
MCP server, and answering every upgrade with a redirect to another origin.
"""

from __future__ import annotations

import json
import os
import select
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import trustme
from click.testing import CliRunner

from mcpl_host import GrantPolicy, Host, InitializeError, ServerConfig, connect
from mcpl_host.cli import main as cli_main
from mcpl_host.config import ConfigError, parse_config
from mcpl_host.jsonrpc.errors import MCPLRequired
from mcpl_host.mcpl.endpoint_uri import EndpointURIError, resolve_endpoint_uri
from mcpl_host.mcpl.policy_state import MCPLState
from mcpl_host.supervisor_policy import RestartPolicy
from mcpl_host.transports import websocket

from . import forkserver
from .conftest import FIXTURES, record_vector
from .wire import FAST, MCP_HANDSHAKE, SCRIPTED

FILE_NAME = "endpoint-uri-vectors.json"
FILE = json.loads((Path(__file__).parent / "vectors" / "mcpl-spec" / FILE_NAME).read_text(encoding="utf-8"))
RESOLUTIONS: list[dict[str, Any]] = FILE["resolution"]
REJECTIONS: list[dict[str, Any]] = FILE["rejection"]
#: §18.7.2's reasons, as the rules ``EndpointURIError.rule`` names.
RULES = {
    "empty authority": "empty-authority",
    "userinfo": "userinfo",
    "fragment": "fragment",
    "dot segment": "dot-segment",
    "port out of range": "port",
}
pytestmark = pytest.mark.anyio
BRIDGE = FIXTURES / "ws_bridge.py"
SPEC_SERVER = FIXTURES / "current_spec" / "server.py"
TIMEOUT = 20
ENDPOINT_LABELS = ("Configured URI", "Canonical URI", "Dialled")


def rule_of(vector: dict[str, Any]) -> str:
    return next(rule for reason, rule in RULES.items() if vector["rejectedBecause"].startswith(reason))


def vector_id(vector: dict[str, Any]) -> str:
    return f"{vector['number']:02d}"


class Dials:
    """Stands in for the WebSocket transport's dialler: records each dial, refuses it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, bool, str | None]] = []

    async def __call__(self, host: str, port: int, **kwargs: Any) -> Any:
        self.calls.append((host, port, "ssl_context" in kwargs, kwargs.get("tls_hostname")))
        raise OSError("refused by the test")


@pytest.fixture
def dials(monkeypatch: pytest.MonkeyPatch) -> Dials:
    recorder = Dials()
    monkeypatch.setattr(websocket, "_connect_tcp", recorder)
    return recorder


def expected_dial(vector: dict[str, Any]) -> tuple[str, int, bool, str]:
    """Host and port of the vector's ``resolvedTransport`` (ada-independent reading)."""
    authority = vector["resolvedTransport"].removeprefix("wss://").partition("/")[0].partition("?")[0]
    if authority.startswith("["):
        host, _, rest = authority[1:].partition("]")
        port = int(rest[1:]) if rest else 443
    else:
        host, _, port_text = authority.partition(":")
        port = int(port_text) if port_text else 443
    return host, port, True, host


def cli(*args: str, env: dict[str, str] | None = None) -> Any:
    """The command line, run in this process (a ``probe`` with ``--no-subreaper``: it must
    not adopt nor end the test process's children)."""
    return CliRunner().invoke(cli_main, list(args), catch_exceptions=False, env=env)


# -- the vectors ------------------------------------------------------------------------------


@pytest.mark.parametrize("vector", RESOLUTIONS, ids=vector_id)
def test_resolution_vector_in_config_and_command_line(
    vector: dict[str, Any], dials: Dials, request: pytest.FixtureRequest
) -> None:
    record_vector(request, FILE_NAME, vector_id(vector))
    uri, canonical, resolved = vector["input"], vector["canonicalUri"], vector["resolvedTransport"]
    endpoint = resolve_endpoint_uri(uri)
    assert (endpoint.configured_uri, endpoint.canonical_uri, endpoint.resolved_transport) == (
        uri,
        canonical,
        resolved,
    )
    config = ServerConfig(url=uri)
    assert config.transport == "websocket"
    assert config.url == uri  # the configured value is kept as written (§18.4)
    assert config.endpoint == endpoint
    assert config.parameters().url == resolved
    parsed = parse_config({"mcpServers": {"s": {"url": uri}}}).servers["s"]
    assert parsed.endpoint == endpoint and parsed.url == uri
    doc = json.loads(cli("probe", "--no-subreaper", "--ws", uri, "--json", "--timeout", "5").stdout)
    assert doc["endpoint"] == endpoint.to_json()
    assert "could not connect to" in doc["error"]["message"]
    assert dials.calls == [expected_dial(vector)]


@pytest.mark.parametrize("vector", RESOLUTIONS, ids=vector_id)
async def test_resolution_vector_dials_the_resolved_transport(
    vector: dict[str, Any], dials: Dials, request: pytest.FixtureRequest
) -> None:
    record_vector(request, FILE_NAME, vector_id(vector))
    with anyio.fail_after(TIMEOUT), pytest.raises(InitializeError) as info:
        async with connect(ServerConfig(url=vector["input"], limits=FAST)):
            pass
    assert dials.calls == [expected_dial(vector)]
    assert str(info.value).startswith(f"could not connect to {vector['resolvedTransport']} (")


@pytest.mark.parametrize("vector", REJECTIONS, ids=vector_id)
def test_rejection_vector_fails_before_any_dial(
    vector: dict[str, Any], dials: Dials, request: pytest.FixtureRequest
) -> None:
    record_vector(request, FILE_NAME, vector_id(vector))
    uri, rule = vector["input"], rule_of(vector)
    with pytest.raises(EndpointURIError) as pure:
        resolve_endpoint_uri(uri)
    assert pure.value.rule == rule
    with pytest.raises(EndpointURIError) as made:
        ServerConfig(url=uri)
    assert made.value.rule == rule and str(made.value) == str(pure.value)
    with pytest.raises(ConfigError) as from_file:
        parse_config({"mcpServers": {"s": {"url": uri}}})
    assert [str(p) for p in from_file.value.problems] == [f"mcpServers.s.url: {pure.value}"]
    for option in ("--ws", "--url"):
        result = CliRunner().invoke(cli_main, ["probe", "--no-subreaper", option, uri, "--json"])
        assert result.exit_code == 2, result.output
        assert str(pure.value) in result.output
    for command in (["call", "--ws", uri, "t"], ["check", "--ws", uri]):
        assert CliRunner().invoke(cli_main, command).exit_code == 2
    assert "MCPL §18" in str(pure.value) or rule == "port"
    assert "p@" not in str(pure.value)  # a rule named, the URI (and its user-info) never shown
    assert dials.calls == []


def test_string_checks_come_before_the_parser() -> None:
    """What a WHATWG parser would repair silently is refused as written (docs/protocol.md U1, U2)."""
    for uri, rule in [
        ("mcpl://h/a/%2E/b", "dot-segment"),
        ("mcpl://h/a/.%2e/b", "dot-segment"),
        ("mcpl://h/a\\..\\b", "dot-segment"),
        ("mcpl://h/a/..", "dot-segment"),
        ("mcpl://h/a/.%2e?x=..", "dot-segment"),
        ("mcpl://h/a/.\t./b", "characters"),
        ("mcpl:x", "form"),
        ("mcpl:/x", "form"),
        ("mcpl://h/x#", "fragment"),
        ("mcpl://@h/x", "userinfo"),
        ("mcpl://?q", "empty-authority"),
    ]:
        with pytest.raises(EndpointURIError) as info:
            resolve_endpoint_uri(uri)
        assert info.value.rule == rule, uri
    for uri in ("mcpl://h/a%2fb", "mcpl://h/...", "mcpl://h/a.b/.x", "mcpl://h/p?x=../y"):
        assert resolve_endpoint_uri(uri).resolved_transport.startswith("wss://h/"), uri
    # ws:// and wss:// keep working unchanged (§18.1.2): no endpoint values for them.
    assert ServerConfig(url="ws://127.0.0.1:1/x").endpoint is None
    assert ServerConfig(url="wss://h/x").parameters().url == "wss://h/x"
    with pytest.raises(ValueError, match="reached over WebSocket"):
        ServerConfig(url="mcpl://h/x", transport="http")


def test_the_fallback_setting_in_a_config_file() -> None:
    servers = parse_config({"mcpServers": {"m": {"url": "mcpl://h/x", "mcpOnlyFallback": True}}}).servers
    assert servers["m"].mcp_only_fallback and servers["m"].endpoint is not None
    with pytest.raises(ConfigError) as info:
        parse_config(
            {
                "mcpServers": {
                    "w": {"url": "wss://h/x", "mcpOnlyFallback": True},
                    "t": {"url": "mcpl://h/x", "transport": "http"},
                    "b": {"url": "mcpl://h/x", "mcpOnlyFallback": "yes"},
                }
            }
        )
    assert [str(p) for p in info.value.problems] == [
        'mcpServers.w.mcpOnlyFallback: applies only to an "mcpl://" url (MCPL §18.5)',
        'mcpServers.t.url: must be an http:// or https:// URL; its scheme is "mcpl"',
        "mcpServers.b.mcpOnlyFallback: must be true or false, not a string",
    ]
    with pytest.raises(TypeError, match="mcp_only_fallback must be a bool"):
        ServerConfig(url="mcpl://h/x", mcp_only_fallback="yes")  # type: ignore[arg-type]


# -- end to end over wss:// -------------------------------------------------------------------


class Certificates:
    def __init__(self, folder: Path) -> None:
        ca = trustme.CA()
        server = ca.issue_cert("127.0.0.1", "localhost")
        self.ca_file = folder / "ca.pem"
        self.cert_file = folder / "cert.pem"
        self.key_file = folder / "key.pem"
        ca.cert_pem.write_to_path(str(self.ca_file))
        server.private_key_pem.write_to_path(str(self.key_file))
        with self.cert_file.open("wb") as out:
            for blob in server.cert_chain_pems:
                out.write(blob.bytes())

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))


def start_bridge(
    certificates: Certificates, *options: str, command: list[str]
) -> tuple[subprocess.Popen[bytes], int]:
    argv = [sys.executable, str(BRIDGE), "--tls", str(certificates.cert_file), str(certificates.key_file)]
    process = subprocess.Popen(
        [*argv, *options, "--", *command],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert process.stdout is not None
    deadline, line = time.monotonic() + TIMEOUT, b""
    while not line.endswith(b"\n"):
        ready, _, _ = select.select([process.stdout], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, "the bridge did not print its port"
        chunk = os.read(process.stdout.fileno(), 64)
        assert chunk, "the bridge exited"
        line += chunk
    word, port = line.split()[:2]
    assert word == b"PORT"
    return process, int(port)


def stop_bridge(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(TIMEOUT)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


class Servers:
    """The module's three ``wss://`` bridges: MCPL, plain MCP, a redirect elsewhere."""

    def __init__(self, folder: Path) -> None:
        self.certificates = Certificates(folder)
        self.headers_log = folder / "headers.jsonl"
        script = folder / "plain.json"
        script.write_text(json.dumps(MCP_HANDSHAKE))
        plain = [sys.executable, str(SCRIPTED), str(script), str(folder / "plain.record.jsonl")]
        spec = [sys.executable, str(SPEC_SERVER)]
        self.processes: list[subprocess.Popen[bytes]] = []
        self.mcpl_port = self._start("--log-headers", str(self.headers_log), command=spec)
        self.plain_port = self._start(command=plain)
        self.redirect_port = self._start("--redirect-to", "wss://127.0.0.2:4443/elsewhere", command=spec)

    def _start(self, *options: str, command: list[str]) -> int:
        process, port = start_bridge(self.certificates, *options, command=command)
        self.processes.append(process)
        return port

    def stop(self) -> None:
        for process in self.processes:
            stop_bridge(process)

    def paths(self) -> list[str]:
        lines = self.headers_log.read_text().splitlines() if self.headers_log.exists() else []
        return [json.loads(line)["path"] for line in lines]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    started = Servers(tmp_path_factory.mktemp("wss"))
    try:
        yield started
    finally:
        started.stop()


async def test_mcpl_uri_through_host_over_wss(servers: Servers) -> None:
    uri = f"mcpl://127.0.0.1:{servers.mcpl_port}/path?b=2&a=1"
    config = ServerConfig(
        name="spec",
        url=uri,
        ssl_context=servers.certificates.context(),
        grant_policy=GrantPolicy(grant_all_advertised=True),
        limits=FAST,
        restart_policy=RestartPolicy(enabled=False),
    )
    with anyio.fail_after(TIMEOUT):
        async with Host({"spec": config}) as host:
            conn = await host.server("spec").connected(timeout=TIMEOUT)
            assert conn.mcpl_state is MCPLState.READY
            assert not conn.mcp_only_fallback_taken
            endpoint = conn.hosted.endpoint
            assert endpoint is not None
            assert endpoint.to_json() == {
                "configuredUri": uri,
                "canonicalUri": uri,
                "resolvedTransport": f"wss://127.0.0.1:{servers.mcpl_port}/path?b=2&a=1",
            }
            assert await conn.mcp.list_tools()
    assert "/path?b=2&a=1" in servers.paths()  # the query arrives as written, order kept


async def test_the_uri_grants_nothing(servers: Servers) -> None:
    """MCPL §18.6: the same server, dialled as mcpl:// and as wss://, under the same policy,
    is granted the same; with the default policy, nothing either way."""
    grants: dict[tuple[str, bool], frozenset[str]] = {}
    for scheme in ("mcpl", "wss"):
        for all_advertised in (False, True):
            config = ServerConfig(
                url=f"{scheme}://127.0.0.1:{servers.mcpl_port}/p",
                ssl_context=servers.certificates.context(),
                grant_policy=GrantPolicy(grant_all_advertised=all_advertised),
                limits=FAST,
            )
            with anyio.fail_after(TIMEOUT):
                async with connect(config) as conn:
                    assert conn.grant is not None
                    grants[scheme, all_advertised] = frozenset(conn.grant.paths)
    assert grants["mcpl", False] == grants["wss", False] == frozenset()
    assert grants["mcpl", True] == grants["wss", True] != frozenset()


async def test_plain_mcp_behind_mcpl_fails_unless_the_fallback_is_set(servers: Servers) -> None:
    uri = f"mcpl://127.0.0.1:{servers.plain_port}/"
    context = servers.certificates.context()
    with anyio.fail_after(TIMEOUT), pytest.raises(MCPLRequired) as info:
        async with connect(ServerConfig(url=uri, ssl_context=context, limits=FAST)):
            pass
    assert "did not advertise experimental.mcpl" in str(info.value)
    assert "MCPL §18.5" in str(info.value) and "mcp_only_fallback" in str(info.value)
    with anyio.fail_after(TIMEOUT):
        config = ServerConfig(url=uri, ssl_context=context, limits=FAST, mcp_only_fallback=True)
        async with connect(config) as conn:
            assert conn.mcp_only_fallback_taken
            assert conn.mcpl_state is MCPLState.NONE
            assert conn.grant is None
    # The same plain server dialled by wss:// is plain MCP, with no fallback to take.
    with anyio.fail_after(TIMEOUT):
        async with connect(
            ServerConfig(url=f"wss://127.0.0.1:{servers.plain_port}/", ssl_context=context)
        ) as conn:
            assert not conn.mcp_only_fallback_taken and conn.mcpl_state is MCPLState.NONE


async def test_redirect_to_another_origin_is_refused(servers: Servers) -> None:
    uri = f"mcpl://127.0.0.1:{servers.redirect_port}/x?token=secret-query-token"
    config = ServerConfig(url=uri, ssl_context=servers.certificates.context(), limits=FAST)
    with anyio.fail_after(TIMEOUT), pytest.raises(InitializeError) as info:
        async with connect(config):
            pass
    message = str(info.value)
    assert (
        f"a redirect from wss://127.0.0.1:{servers.redirect_port} to another origin, wss://127.0.0.2:4443"
        in message
    )
    assert "not followed" in message and "MCPL §18.6" in message
    assert "secret-query-token" not in message


def test_probe_shows_the_three_values(servers: Servers) -> None:
    """The command line, trusting the test CA through ``SSL_CERT_FILE`` (the default TLS
    context reads it when it is made)."""
    uri = f"mcpl://127.0.0.1:{servers.mcpl_port}/path?b=2&a=1&token=secret-query-token"
    env = {"SSL_CERT_FILE": str(servers.certificates.ca_file)}
    base = ["probe", "--no-subreaper", "--ws", uri, "--timeout", "10"]
    done = cli(*base, "--json", env=env)
    doc = json.loads(done.stdout)
    assert doc["ok"], doc["error"]
    shown = f"127.0.0.1:{servers.mcpl_port}/path?b=2&a=1&token=[redacted]"
    assert doc["endpoint"] == {
        "configuredUri": f"mcpl://{shown}",
        "canonicalUri": f"mcpl://{shown}",
        "resolvedTransport": f"wss://{shown}",
    }
    assert doc["mcpOnlyFallback"] is False
    text = cli(*base, env=env)
    assert text.exit_code == 0, text.stderr
    rows = {label: line for line in text.stdout.splitlines() for label in ENDPOINT_LABELS if label in line}
    assert set(rows) == set(ENDPOINT_LABELS)
    assert f"mcpl://127.0.0.1:{servers.mcpl_port}/path" in rows["Configured URI"]
    assert f"wss://127.0.0.1:{servers.mcpl_port}/path" in rows["Dialled"]
    assert "secret-query-token" not in text.stdout + text.stderr + done.stdout + done.stderr


def test_check_takes_an_mcpl_target(servers: Servers) -> None:
    uri = f"mcpl://127.0.0.1:{servers.mcpl_port}/p"
    # In a process of its own: check ends every descendant of its process when done.
    env = {**os.environ, "SSL_CERT_FILE": str(servers.certificates.ca_file)}
    argv = [*forkserver.CLI, "check", "--url", uri, "--only", "init.answers", "--json"]
    done = forkserver.run(argv, env=env, capture_output=True, timeout=60, text=False)
    doc = json.loads(done.stdout)
    assert done.returncode == 0, done.stderr.decode()
    assert doc["target"] == {"shown": uri, "transport": "websocket"}
    assert doc["summary"]["passed"] == 1

"""OAuth for HTTP servers (``mcpl_host.auth``; docs/protocol.md OA1-OA14): the decisions by
plain calls, then the whole flows against a real authorization server on loopback
(``fixtures/oauth_server.py``, Authlib's server side): login with PKCE and dynamic
registration, step-up, the issuer checks, PKCE refused, client credentials (secret and
``private_key_jwt``), MCP 2025-03-26's discovery of a server without protected resource
metadata (its origin's metadata, then the default endpoints), and through the command line
a login, a refresh after the host process restarted, ``--stored-auth-only`` failing in one
sentence, and no token printed anywhere.

One authorization server per variant, shared by the module (started on first use)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mcpl_host import ServerConfig, connect
from mcpl_host.auth.discovery import (
    AuthorizationFailed,
    Challenge,
    ServerMetadata,
    authorization_base_url,
    authorization_server_urls,
    bearer_challenge,
    callback_code,
    choose_registration,
    choose_scopes,
    default_endpoint_missing,
    default_endpoints,
    is_stale,
    jwk_key_type,
    login_refused,
    protected_resource_urls,
    read_resource_metadata,
    read_server_metadata,
    require_no_resource_metadata,
    require_pkce,
    step_up_scopes,
    token_auth_method,
)
from mcpl_host.auth.provider import OAuth
from mcpl_host.auth.settings import OAuthSettings
from mcpl_host.auth.store import StoredGrant, TokenStore
from mcpl_host.jsonrpc.errors import InitializeError, MCPLHostError
from mcpl_host.limits import Limits
from mcpl_host.secrets import Redactor

from . import forkserver

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "oauth_server.py"
TIMEOUT = 60
FAST = Limits(handshake_timeout_seconds=30.0, close_grace_seconds=1.0)


# --- the decisions, by plain calls -------------------------------------------------------


def test_a_bearer_challenge_is_read_with_its_quoted_params() -> None:
    value = 'Basic realm="x", Bearer error="insufficient_scope", scope="a b", resource_metadata="https://h/.well-known/oauth-protected-resource/mcp"'
    found = bearer_challenge(value)
    assert found is not None
    assert (found.error, found.scope, found.resource_metadata) == (
        "insufficient_scope",
        "a b",
        "https://h/.well-known/oauth-protected-resource/mcp",
    )


def test_protected_resource_metadata_urls_come_in_the_specifications_order() -> None:
    assert protected_resource_urls("https://h/api/mcp", None) == [
        "https://h/.well-known/oauth-protected-resource/api/mcp",
        "https://h/.well-known/oauth-protected-resource",
    ]
    header = Challenge("bearer", {"resource_metadata": "https://h/prm"})
    assert protected_resource_urls("https://h/api/mcp", header) == ["https://h/prm"]


def test_authorization_server_metadata_urls_come_in_the_specifications_order() -> None:
    assert authorization_server_urls("https://a/tenant") == [
        "https://a/.well-known/oauth-authorization-server/tenant",
        "https://a/.well-known/openid-configuration/tenant",
        "https://a/tenant/.well-known/openid-configuration",
    ]
    assert authorization_server_urls("https://a") == [
        "https://a/.well-known/oauth-authorization-server",
        "https://a/.well-known/openid-configuration",
    ]


def _metadata(**changes: Any) -> ServerMetadata:
    base = ServerMetadata(
        issuer="https://a/t",
        authorization_endpoint="https://a/t/authorize",
        token_endpoint="https://a/t/token",
        code_challenge_methods_supported=("S256",),
    )
    return dataclasses.replace(base, **changes)


def test_metadata_for_another_issuer_or_resource_is_refused() -> None:
    with pytest.raises(AuthorizationFailed) as caught:
        read_server_metadata(
            {"issuer": "https://evil/t", "token_endpoint": "https://a/t/token"}, "https://a/t"
        )
    assert caught.value.step == "issuer"
    with pytest.raises(AuthorizationFailed) as caught:
        read_resource_metadata(
            {"resource": "https://other/mcp", "authorization_servers": ["https://a"]}, "https://h/mcp"
        )
    assert caught.value.step == "issuer"
    found = read_resource_metadata(
        {"resource": "https://h", "authorization_servers": ["https://a"]}, "https://h/mcp"
    )
    assert found.authorization_servers == ("https://a",)


def test_a_server_without_s256_is_refused() -> None:
    require_pkce(_metadata())
    for methods in ((), ("plain",)):
        with pytest.raises(AuthorizationFailed) as caught:
            require_pkce(_metadata(code_challenge_methods_supported=methods))
        assert caught.value.step == "pkce"


def test_the_authorization_base_url_is_the_canonical_origin() -> None:
    """MCP 2025-03-26 Authorization §2.3.2: the path (and query) discarded."""
    assert authorization_base_url("HTTPS://Example.COM:443/v1/mcp?key=1") == "https://example.com"
    assert authorization_base_url("http://127.0.0.1:8080/mcp") == "http://127.0.0.1:8080"
    assert authorization_base_url("http://[::1]:80/") == "http://[::1]"


def test_2025_03_26_discovery_needs_every_resource_metadata_url_to_answer_404() -> None:
    """docs/protocol.md OA14: only a server that says it has no protected resource metadata
    (every well-known URL 404, no ``resource_metadata`` in its challenge) is discovered as
    MCP 2025-03-26 did; metadata that exists but could not be read is refused."""
    require_no_resource_metadata(None, [404, 404])
    require_no_resource_metadata(Challenge("bearer", {"scope": "mcp"}), [404])
    for challenge, statuses, words in (
        (None, [404, 500], "could not be read (HTTP 404, HTTP 500)"),
        (None, [None, 404], "(unreachable, HTTP 404)"),
        (None, [200, 404], "(HTTP 200 with no JSON, HTTP 404)"),
        (None, [404, 401], "HTTP 401"),
        (None, [], "nothing asked"),
        (Challenge("bearer", {"resource_metadata": "https://h/prm"}), [404], "challenge names"),
    ):
        with pytest.raises(AuthorizationFailed) as caught:
            require_no_resource_metadata(challenge, statuses)
        assert caught.value.step == "metadata" and words in str(caught.value), statuses


def test_without_any_metadata_the_default_endpoints_are_at_the_origin_and_take_s256() -> None:
    """MCP 2025-03-26 Authorization §2.3.3: ``/authorize``, ``/token``, ``/register`` at the
    authorization base URL, its issuer; PKCE S256 though nothing advertises it (OA14)."""
    found = default_endpoints("https://h:8443/v1/mcp", [404, 404])
    assert (
        found.issuer,
        found.authorization_endpoint,
        found.token_endpoint,
        found.registration_endpoint,
    ) == (
        "https://h:8443",
        "https://h:8443/authorize",
        "https://h:8443/token",
        "https://h:8443/register",
    )
    assert not found.published
    require_pkce(found)
    assert choose_registration(found, client_id=None, metadata_document_url="https://c/m.json") == "dynamic"
    assert token_auth_method(found, has_secret=True, has_key=False) == "client_secret_basic"
    with pytest.raises(AuthorizationFailed) as caught:
        default_endpoints("https://h/mcp", [404, 503])
    assert caught.value.step == "metadata" and "at its origin could not be read (HTTP 404, HTTP 503)" in str(
        caught.value
    )


def test_the_origins_metadata_is_checked_as_any_issuers() -> None:
    """OA14 with OA3 and OA5: the origin is the issuer the metadata must name, and metadata
    without S256 is refused, as for any authorization server."""
    base = authorization_base_url("https://h/v1/mcp")
    document = {
        "issuer": "https://h/",
        "authorization_endpoint": "https://h/a",
        "token_endpoint": "https://h/t",
    }
    found = read_server_metadata(document, base)
    assert found.published and found.issuer == "https://h/"
    with pytest.raises(AuthorizationFailed) as caught:
        require_pkce(found)
    assert caught.value.step == "pkce"
    with pytest.raises(AuthorizationFailed) as caught:
        read_server_metadata({**document, "issuer": "https://h/v1"}, base)
    assert caught.value.step == "issuer"


def test_the_iss_of_a_response_from_the_default_endpoints_must_be_the_origin() -> None:
    found = default_endpoints("https://h/mcp", [404, 404])
    assert callback_code("code=c1&state=s", state="s", metadata=found) == "c1"
    assert callback_code("code=c1&state=s&iss=https%3A%2F%2Fh", state="s", metadata=found) == "c1"
    with pytest.raises(AuthorizationFailed) as caught:
        callback_code("code=c1&state=s&iss=https%3A%2F%2Fevil", state="s", metadata=found)
    assert caught.value.step == "issuer"


def test_a_missing_default_endpoint_says_that_the_server_has_no_oauth() -> None:
    """OA14: a 404 from a default endpoint is told as ``metadata`` (no OAuth found), naming
    the path only; any other answer, or a published endpoint, keeps its own sentence."""
    found = default_endpoints("https://h/mcp?key=secret-in-query", [404, 404])
    refusal = default_endpoint_missing(found, "https://h/register", 404)
    assert refusal is not None and refusal.step == "metadata"
    assert "no /register either" in str(refusal) and "--token" in str(refusal)
    assert "https://h" not in str(refusal) and "secret-in-query" not in str(refusal)
    assert default_endpoint_missing(found, "https://h/register", 400) is None
    assert default_endpoint_missing(_metadata(), "https://a/t/token", 404) is None


def test_a_login_refused_without_a_person_says_when_the_server_publishes_no_metadata() -> None:
    plain = login_refused("https://h/mcp", _metadata())
    assert plain.step == "login" and "run `mcpl-host login https://h/mcp` first" in str(plain)
    assert "2025-03-26" not in str(plain)
    bare = login_refused("https://h/mcp", default_endpoints("https://h/mcp", [404, 404]))
    assert bare.step == "login" and "publishes no OAuth metadata" in str(bare) and "--token" in str(bare)


def test_a_private_key_jwt_algorithm_names_its_key_type() -> None:
    assert [jwk_key_type(alg) for alg in ("RS256", "PS384", "ES256", "EdDSA")] == ["RSA", "RSA", "EC", "OKP"]
    for alg in ("HS256", "none", "es256"):
        with pytest.raises(AuthorizationFailed) as caught:
            jwk_key_type(alg)
        assert caught.value.step == "token"


def test_registration_follows_the_specifications_order() -> None:
    both = _metadata(registration_endpoint="https://a/reg", client_id_metadata_document_supported=True)
    assert (
        choose_registration(both, client_id="pre", metadata_document_url="https://c/m.json")
        == "pre-registered"
    )
    assert (
        choose_registration(both, client_id=None, metadata_document_url="https://c/m.json")
        == "metadata-document"
    )
    assert choose_registration(both, client_id=None, metadata_document_url=None) == "dynamic"
    with pytest.raises(AuthorizationFailed) as caught:
        choose_registration(_metadata(), client_id=None, metadata_document_url="https://c/m.json")
    assert caught.value.step == "registration"


def test_scopes_come_from_the_challenge_then_scopes_supported_and_step_up_unites_them() -> None:
    prm = read_resource_metadata(
        {"resource": "https://h/mcp", "authorization_servers": ["https://a"], "scopes_supported": ["x", "y"]},
        "https://h/mcp",
    )
    assert choose_scopes(Challenge("bearer", {"scope": "z"}), prm) == "z"
    assert choose_scopes(None, prm) == "x y"
    wanted = Challenge("bearer", {"error": "insufficient_scope", "scope": "x admin"})
    assert step_up_scopes("x y", wanted, step_ups=0, max_step_ups=2) == "x y admin"
    with pytest.raises(AuthorizationFailed) as caught:
        step_up_scopes("x y", wanted, step_ups=2, max_step_ups=2)
    assert caught.value.step == "scope"


def test_the_authorization_response_is_checked_for_state_and_iss() -> None:
    meta = _metadata(authorization_response_iss_parameter_supported=True)
    assert callback_code("code=c1&state=s&iss=https%3A%2F%2Fa%2Ft", state="s", metadata=meta) == "c1"
    for query, step in (
        ("code=c1&state=s&iss=https%3A%2F%2Fevil", "issuer"),
        ("code=c1&state=s", "issuer"),
        ("code=c1&state=other&iss=https%3A%2F%2Fa%2Ft", "callback"),
        ("error=access_denied&state=s&iss=https%3A%2F%2Fa%2Ft", "callback"),
    ):
        with pytest.raises(AuthorizationFailed) as caught:
            callback_code(query, state="s", metadata=meta)
        assert caught.value.step == step, query


def test_the_iss_of_an_authorization_response_is_compared_without_normalization() -> None:
    """docs/protocol.md OA3: a trailing slash, case or a default port make another issuer."""
    meta = _metadata(issuer="https://a", authorization_response_iss_parameter_supported=True)
    assert callback_code("code=c1&state=s&iss=https%3A%2F%2Fa", state="s", metadata=meta) == "c1"
    for iss in ("https%3A%2F%2Fa%2F", "HTTPS%3A%2F%2FA", "https%3A%2F%2Fa%3A443"):
        with pytest.raises(AuthorizationFailed) as caught:
            callback_code(f"code=c1&state=s&iss={iss}", state="s", metadata=meta)
        assert caught.value.step == "issuer", iss


def test_a_token_is_stale_shortly_before_its_absolute_expiry() -> None:
    assert not is_stale(None, 1e9)
    assert not is_stale(1000.0, 900.0)
    assert is_stale(1000.0, 990.0)


def test_a_credential_added_to_the_redactor_is_hidden_from_then_on() -> None:
    redactor = Redactor(["configured-secret-1"])
    redactor.add("rt-obtained-later-42", "ab")
    assert redactor.redact("configured-secret-1 rt-obtained-later-42 ab") == "[redacted] [redacted] ab"
    assert redactor.redact('{"t": "rt-obtained\\u002dlater-42"}') == '{"t": "[redacted]"}'


def test_with_a_keyring_the_file_holds_no_secret(tmp_path: Path) -> None:
    import keyring
    from keyring.backend import KeyringBackend

    class Memory(KeyringBackend):
        priority = 1  # type: ignore[assignment]
        kept: dict[tuple[str, str], str] = {}

        def get_password(self, service: str, username: str) -> str | None:
            return self.kept.get((service, username))

        def set_password(self, service: str, username: str, password: str) -> None:
            self.kept[(service, username)] = password

        def delete_password(self, service: str, username: str) -> None:
            self.kept.pop((service, username), None)

    before = keyring.get_keyring()
    keyring.set_keyring(Memory())
    try:
        store = TokenStore(tmp_path / "tokens.json")
        assert store.uses_keyring
        grant = StoredGrant(
            "https://h/mcp",
            "https://h/mcp",
            "https://a",
            "https://a/token",
            "c",
            "at-0123456789",
            "rt-0123456789",
        )
        store.save(grant)
        text = store.path.read_text()
        assert (
            "at-0123456789" not in text and "rt-0123456789" not in text and '"secrets_in": "keyring"' in text
        )
        assert store.find("https://h/mcp") == grant
        assert store.remove("https://h/mcp") == 1 and Memory.kept == {}
    finally:
        keyring.set_keyring(before)


# --- against a real authorization server ---------------------------------------------------


class Servers:
    """The fixture server variants of the module, started on first use."""

    def __init__(self, keys: Path) -> None:
        self._running: dict[tuple[str, ...], tuple[subprocess.Popen[str], int]] = {}
        self.keys = keys

    def url(self, *args: str) -> str:
        if args not in self._running:
            process = subprocess.Popen(
                [sys.executable, str(FIXTURE), *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("PORT "), line
            self._running[args] = (process, int(line.split()[1]))
        return f"http://127.0.0.1:{self._running[args][1]}/mcp"

    def log(self, url: str) -> dict[str, list[Any]]:
        return httpx.get(url.replace("/mcp", "/control/log"), timeout=TIMEOUT).json()

    def log_since(self, url: str, before: dict[str, list[Any]]) -> dict[str, list[Any]]:
        """What the server saw since ``before`` (an earlier ``log``): a variant serves
        every test of the module, on both backends."""
        return {k: v[len(before.get(k, [])) :] for k, v in self.log(url).items()}

    def close(self) -> None:
        for process, _ in self._running.values():
            assert process.stdin is not None
            process.stdin.close()
            process.wait(TIMEOUT)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    keys = tmp_path_factory.mktemp("keys")
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (keys / "private.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    (keys / "public.pem").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    ec_key = ec.generate_private_key(ec.SECP256R1())
    (keys / "ec-private.pem").write_bytes(
        ec_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    (keys / "ec-public.pem").write_bytes(
        ec_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    found = Servers(keys)
    yield found
    found.close()


MAIN = ("--client", "machine:machine-secret-0123456789")


def _jwt_args(servers: Servers) -> tuple[str, ...]:
    return (
        "--jwt-client",
        f"signer:{servers.keys / 'public.pem'}",
        "--jwt-client",
        f"ec-signer:{servers.keys / 'ec-public.pem'}",
    )


async def play_browser(url: str) -> None:
    """The person's browser: the authorization server approves at once; its redirect is
    followed to the loopback listener."""
    async with httpx.AsyncClient(timeout=TIMEOUT) as client:
        answer = await client.get(url)
        assert answer.status_code == 302, answer.text
        await client.get(answer.headers["location"])


def _config(url: str, store: TokenStore | None, **settings: Any) -> ServerConfig:
    oauth = OAuthSettings(browser=play_browser, store=store, keep_tokens=store is not None, **settings)
    return ServerConfig(
        url=url, transport="streamable-http", oauth=oauth, limits=settings.pop("limits", FAST)
    )


def _store(tmp_path: Path) -> TokenStore:
    return TokenStore(tmp_path / "tokens.json", use_keyring=False)


@pytest.mark.anyio
async def test_login_with_pkce_and_dynamic_registration_stores_a_grant_the_next_connection_uses(
    servers: Servers, tmp_path: Path, logs: list[dict[str, Any]]
) -> None:
    url = servers.url(*MAIN)
    store = _store(tmp_path)
    redactor = Redactor()
    oauth = OAuth(url, OAuthSettings(), limits=FAST, redactor=redactor, store=store, browser=play_browser)
    grant = await oauth.login()
    assert grant.scope == "mcp" and grant.expires_at is not None
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    seen = servers.log(url)
    assert "native" in seen["application_type"]
    assert url in seen["authorize_resource"] and url in seen["authorization_code_resource"]
    assert redactor.redact(f"x {grant.access_token} y") == "x [redacted] y"
    # A later connection, with no browser, uses the stored grant.
    config = ServerConfig(url=url, transport="streamable-http", oauth=OAuthSettings(store=store), limits=FAST)
    async with connect(config) as conn:
        result = await conn.mcp.call_tool("whoami", {})
    assert result.content[0]["text"] == "whoami: mcp"
    assert grant.access_token not in repr(logs) and grant.access_token not in repr(conn)


@pytest.mark.anyio
async def test_a_client_id_metadata_document_url_comes_before_dynamic_registration(
    servers: Servers, tmp_path: Path
) -> None:
    url = servers.url("--cimd")
    document = "https://client.example/mcpl-host.json"
    settings = OAuthSettings(client_metadata_url=document)
    oauth = OAuth(
        url, settings, limits=FAST, redactor=Redactor(), store=_store(tmp_path), browser=play_browser
    )
    grant = await oauth.login()
    assert grant.client_id == document
    seen = servers.log(url)
    assert document in seen["authorize_client_id"] and "application_type" not in seen


@pytest.mark.anyio
async def test_a_token_near_its_absolute_expiry_is_refreshed_before_it_is_sent(
    servers: Servers, tmp_path: Path
) -> None:
    url = servers.url(*MAIN)
    now = [1_000_000_000.0]
    oauth = OAuth(
        url,
        OAuthSettings(),
        limits=FAST,
        redactor=Redactor(),
        store=_store(tmp_path),
        browser=play_browser,
        clock=lambda: now[0],
    )
    first = await oauth.login()
    assert first.expires_at == now[0] + 3600
    now[0] += 3600  # the token's expiry: it is not sent again
    body = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    async with httpx.AsyncClient(auth=oauth.httpx_auth(), timeout=TIMEOUT) as client:
        answer = await client.post(url, content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 200
    assert oauth.grant is not None and oauth.grant.access_token != first.access_token
    assert oauth.grant.expires_at == now[0] + 3600
    assert _store(tmp_path).find(url) == oauth.grant


@pytest.mark.anyio
async def test_a_403_insufficient_scope_asks_again_with_the_union_of_scopes(
    servers: Servers, tmp_path: Path
) -> None:
    url = servers.url(*MAIN)
    async with connect(_config(url, _store(tmp_path))) as conn:
        assert (await conn.mcp.call_tool("whoami", {})).content[0]["text"] == "whoami: mcp"
        result = await conn.mcp.call_tool("admin", {})
    assert result.content[0]["text"] == "admin: mcp admin"


@pytest.mark.anyio
async def test_step_ups_stop_at_the_limit_with_one_sentence(servers: Servers, tmp_path: Path) -> None:
    url = servers.url(*MAIN)
    limits = dataclasses.replace(FAST, max_oauth_step_ups=0)
    config = dataclasses.replace(_config(url, _store(tmp_path)), limits=limits)
    async with connect(config) as conn:
        with pytest.raises(MCPLHostError) as caught:
            await conn.mcp.call_tool("admin", {})
    assert "OAuth failed at scope" in str(caught.value) and "Limits.max_oauth_step_ups" in str(caught.value)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("variant", "step", "words"),
    [
        ("--wrong-issuer", "issuer", "names another issuer"),
        ("--no-pkce", "pkce", "S256"),
        ("--bad-iss", "issuer", "another issuer (iss, RFC 9207)"),
        ("--no-prm", "metadata", "that the server's challenge names could not be read (HTTP 404)"),
        ("--legacy metadata --no-pkce", "pkce", "S256"),
        ("--legacy metadata --wrong-issuer", "issuer", "names another issuer"),
        ("--legacy none", "metadata", "no /register either (the MCP 2025-03-26 default endpoint: HTTP 404)"),
        ("--refuse-registration", "registration", "refused the dynamic registration (HTTP 400)"),
    ],
)
async def test_a_server_failing_a_check_is_refused_naming_the_step(
    servers: Servers, tmp_path: Path, variant: str, step: str, words: str
) -> None:
    url = servers.url(*variant.split())
    with pytest.raises(InitializeError) as caught:
        async with connect(_config(url, _store(tmp_path))):
            pass
    assert f"OAuth failed at {step}" in str(caught.value) and words in str(caught.value)


#: The well-known URLs a server without protected resource metadata is asked, in order
#: (docs/protocol.md OA14): RFC 9728's two, then its origin's as an issuer's (OA4).
LEGACY_WELL_KNOWN = [
    "/.well-known/oauth-protected-resource/mcp",
    "/.well-known/oauth-protected-resource",
    "/.well-known/oauth-authorization-server",
]


@pytest.mark.anyio
async def test_a_server_without_resource_metadata_is_logged_in_through_its_origins_metadata(
    servers: Servers, tmp_path: Path, logs: list[dict[str, Any]]
) -> None:
    """MCP 2025-03-26 §2.3 (OA14): the origin's RFC 8414 metadata, its issuer the origin; the
    endpoints are the document's (under ``/as/``); the grant is keyed by the origin and the
    server's canonical URL, and a later connection uses it."""
    url = servers.url("--legacy", "metadata")
    origin = url.removesuffix("/mcp")
    store = _store(tmp_path)
    redactor = Redactor()
    oauth = OAuth(url, OAuthSettings(), limits=FAST, redactor=redactor, store=store, browser=play_browser)
    before = servers.log(url)
    grant = await oauth.login()
    assert (grant.issuer, grant.resource, grant.token_endpoint) == (origin, url, f"{origin}/as/token")
    assert json.loads(store.path.read_text())["grants"].keys() == {f"{origin} {url}"}
    seen = servers.log_since(url, before)
    assert seen["well_known"] == LEGACY_WELL_KNOWN
    assert seen["code_challenge_method"] == ["S256"] and seen["authorization_code_resource"] == [url]
    config = ServerConfig(url=url, transport="streamable-http", oauth=OAuthSettings(store=store), limits=FAST)
    async with connect(config) as conn:
        result = await conn.mcp.call_tool("whoami", {})
    assert result.content[0]["text"] == "whoami: mcp"
    assert redactor.redact(f"x {grant.access_token} y") == "x [redacted] y"
    assert grant.access_token not in repr(logs) and grant.access_token not in repr(conn)


@pytest.mark.anyio
async def test_a_server_without_any_metadata_is_logged_in_at_the_default_endpoints_and_refreshed(
    servers: Servers, tmp_path: Path, logs: list[dict[str, Any]]
) -> None:
    """MCP 2025-03-26 §2.3.3 (OA14): ``/register``, ``/authorize`` and ``/token`` at the
    origin, PKCE S256 sent though nothing advertises it (the fixture's Authlib server
    requires and checks it); the refresh goes to the default token endpoint too."""
    url = servers.url("--legacy", "defaults")
    origin = url.removesuffix("/mcp")
    now = [1_000_000_000.0]
    store = _store(tmp_path)
    oauth = OAuth(
        url,
        OAuthSettings(),
        limits=FAST,
        redactor=Redactor(),
        store=store,
        browser=play_browser,
        clock=lambda: now[0],
    )
    before = servers.log(url)
    async with connect(_config(url, store)) as conn:  # the 401 heals through the same discovery
        assert (await conn.mcp.call_tool("whoami", {})).content[0]["text"] == "whoami: mcp"
    first = await oauth.login()
    assert (first.issuer, first.resource, first.token_endpoint) == (origin, url, f"{origin}/token")
    seen = servers.log_since(url, before)
    assert seen["well_known"] == 2 * [*LEGACY_WELL_KNOWN, "/.well-known/openid-configuration"]
    assert seen["code_challenge_method"] == ["S256", "S256"] and seen["application_type"] == ["native"] * 2
    before = servers.log(url)
    now[0] += 3600  # the token's expiry: it is refreshed at the default token endpoint
    body = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    async with httpx.AsyncClient(auth=oauth.httpx_auth(), timeout=TIMEOUT) as client:
        answer = await client.post(url, content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 200
    assert oauth.grant is not None and oauth.grant.access_token != first.access_token
    assert servers.log_since(url, before)["refresh_token_resource"] == [url]
    for token in (first.access_token, oauth.grant.access_token):
        assert token not in repr(logs)


@pytest.mark.anyio
async def test_without_a_person_a_server_publishing_no_metadata_is_refused_saying_so(
    servers: Servers, tmp_path: Path
) -> None:
    url = servers.url("--legacy", "none")
    config = ServerConfig(
        url=url, transport="streamable-http", oauth=OAuthSettings(store=_store(tmp_path)), limits=FAST
    )
    with pytest.raises(InitializeError) as caught:
        async with connect(config):
            pass
    text = str(caught.value)
    assert "OAuth failed at login" in text and "publishes no OAuth metadata" in text and "--token" in text
    # A machine client: its client credentials grant finds no default token endpoint either.
    machine = OAuthSettings(keep_tokens=False, client_id="machine", client_secret="machine-secret-0123456789")
    with pytest.raises(InitializeError) as caught:
        async with connect(dataclasses.replace(config, oauth=machine)):
            pass
    text = str(caught.value)
    assert "OAuth failed at metadata" in text and "no /token either" in text and "machine-secret" not in text


@pytest.mark.anyio
@pytest.mark.parametrize("how", ["secret", "private_key_jwt", "private_key_jwt_es256"])
async def test_client_credentials_for_machines(servers: Servers, how: str) -> None:
    """A client secret, an RSA key (RS256) or an EC key (ES256): the fixture takes an
    assertion whose audience is its issuer only (RFC 9126 §2)."""
    url = servers.url(*MAIN, *_jwt_args(servers))
    settings: dict[str, Any] = {
        "secret": {"client_id": "machine", "client_secret": "machine-secret-0123456789"},
        "private_key_jwt": {"client_id": "signer", "private_key_file": str(servers.keys / "private.pem")},
        "private_key_jwt_es256": {
            "client_id": "ec-signer",
            "private_key_file": str(servers.keys / "ec-private.pem"),
            "private_key_alg": "ES256",
        },
    }[how]
    config = ServerConfig(
        url=url, transport="streamable-http", oauth=OAuthSettings(keep_tokens=False, **settings), limits=FAST
    )
    async with connect(config) as conn:
        result = await conn.mcp.call_tool("whoami", {})
    assert result.content[0]["text"] == "whoami: mcp"
    assert url in servers.log(url)["client_credentials_resource"]


@pytest.mark.anyio
async def test_a_private_key_of_another_type_than_its_algorithm_fails_at_token_in_one_sentence(
    servers: Servers,
) -> None:
    """An EC key with the default ``RS256``: refused before any token request, naming the
    step and the key type wanted, never the key."""
    url = servers.url(*MAIN, *_jwt_args(servers))
    key_file = servers.keys / "ec-private.pem"
    oauth = OAuthSettings(keep_tokens=False, client_id="ec-signer", private_key_file=str(key_file))
    config = ServerConfig(url=url, transport="streamable-http", oauth=oauth, limits=FAST)
    with pytest.raises(InitializeError) as caught:
        async with connect(config):
            pass
    text = str(caught.value)
    assert "OAuth failed at token" in text and "holds no RSA private key (for RS256)" in text
    assert "PRIVATE KEY" not in text and "\n" not in text


@pytest.mark.anyio
async def test_an_unusable_private_key_fails_at_token_in_one_sentence(
    servers: Servers, tmp_path: Path
) -> None:
    url = servers.url(*MAIN, *_jwt_args(servers))
    key = tmp_path / "not-a-key.pem"
    key.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    settings = OAuthSettings(keep_tokens=False, client_id="signer", private_key_file=str(key))
    with pytest.raises(InitializeError) as caught:
        async with connect(ServerConfig(url=url, transport="streamable-http", oauth=settings, limits=FAST)):
            pass
    assert "OAuth failed at token: the client could not authenticate itself" in str(caught.value)


# --- the command line, in processes of its own ---------------------------------------------


def _env(state: Path) -> dict[str, str]:
    """The environment of a command-line run: its own state folder, and no keyring (the
    grants in the file, whatever this machine has)."""
    return {
        **os.environ,
        "XDG_STATE_HOME": str(state),
        "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring",
    }


def _run(state: Path, *args: str, outputs: list[str]) -> subprocess.CompletedProcess[str]:
    done = forkserver.run([*forkserver.CLI, *args], env=_env(state), timeout=TIMEOUT, text=True, input="")
    outputs.extend([done.stdout, done.stderr])
    return done


def _login(state: Path, url: str, outputs: list[str]) -> None:
    """``mcpl-host login URL --no-browser``, its printed URL opened as a browser would."""
    process = forkserver.Forked([*forkserver.CLI, "login", url, "--no-browser"], _env(state))
    lines: list[str] = []
    for line in process.stderr:
        lines.append(line)
        if line.startswith("http"):
            break
    answer = httpx.get(lines[-1].strip(), timeout=TIMEOUT)
    httpx.get(answer.headers["location"], timeout=TIMEOUT)
    rest, out = process.stderr.read(), process.stdout.read()
    assert process.wait(TIMEOUT) == 0, rest
    outputs.extend([*lines, rest, out])


def test_a_login_on_the_command_line_is_refreshed_by_a_new_process_and_no_token_is_printed(
    servers: Servers, tmp_path: Path
) -> None:
    url = servers.url(*MAIN)
    outputs: list[str] = []
    _login(tmp_path, url, outputs)
    tokens_file = tmp_path / "mcpl-host" / "tokens.json"
    first = json.loads(tokens_file.read_text())["grants"]
    (entry,) = first.values()
    assert stat.S_IMODE(tokens_file.stat().st_mode) == 0o600 and entry["expires_at"] > 0
    httpx.post(
        url.replace("/mcp", "/control/revoke"), timeout=TIMEOUT
    )  # the stored access token stops working
    done = _run(tmp_path, "call", "--url", url, "--stored-auth-only", "--text", "whoami", outputs=outputs)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "whoami: mcp"
    (after,) = json.loads(tokens_file.read_text())["grants"].values()
    assert after["access_token"] != entry["access_token"] and after["expires_at"] >= entry["expires_at"]
    assert url in servers.log(url)["refresh_token_resource"]
    report = _run(
        tmp_path,
        "probe",
        "--url",
        url,
        "--stored-auth-only",
        "--json",
        "--log-level",
        "debug",
        outputs=outputs,
    )
    assert report.returncode == 0, report.stderr
    status = _run(tmp_path, "auth", "status", "--json", outputs=outputs)
    (row,) = json.loads(status.stdout)["logins"]
    assert (row["server"], row["issuer"], row["scope"]) == (url, url.replace("/mcp", "/as"), "mcp")
    secrets = [entry["access_token"], entry["refresh_token"], after["access_token"], after["refresh_token"]]
    for text in outputs:
        assert FIXTURE_TOKEN.search(text) is None
        for secret in secrets:
            assert secret not in text
    assert _run(tmp_path, "logout", url, outputs=outputs).returncode == 0
    assert json.loads(tokens_file.read_text())["grants"] == {}


def test_a_login_at_the_default_endpoints_on_the_command_line_prints_no_token(
    servers: Servers, tmp_path: Path
) -> None:
    """OA14 through the command line: ``login`` of a server that publishes no metadata, then
    a call with the stored grant; no token the fixture issued appears in any output."""
    url = servers.url("--legacy", "defaults")
    outputs: list[str] = []
    _login(tmp_path, url, outputs)
    (entry,) = json.loads((tmp_path / "mcpl-host" / "tokens.json").read_text())["grants"].values()
    origin = url.removesuffix("/mcp")
    assert (entry["issuer"], entry["token_endpoint"]) == (origin, f"{origin}/token")
    done = _run(
        tmp_path,
        "call",
        "--url",
        url,
        "--stored-auth-only",
        "--log-level",
        "debug",
        "--text",
        "whoami",
        outputs=outputs,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "whoami: mcp"
    for text in outputs:
        assert FIXTURE_TOKEN.search(text) is None and entry["access_token"] not in text


def test_stored_auth_only_without_a_login_fails_in_one_sentence(servers: Servers, tmp_path: Path) -> None:
    url = servers.url(*MAIN)
    done = _run(tmp_path, "call", "--url", url, "--stored-auth-only", "whoami", outputs=[])
    assert done.returncode == 1
    (line,) = [line for line in done.stderr.splitlines() if "OAuth" in line]
    assert "OAuth failed at login" in line and f"mcpl-host login {url}" in line


def test_client_credentials_on_the_command_line(servers: Servers, tmp_path: Path) -> None:
    url = servers.url(*MAIN)
    outputs: list[str] = []
    secret = "machine-secret-0123456789"
    done = _run(
        tmp_path,
        "call", "--url", url, "--stored-auth-only", "--client-id", "machine", "--client-secret", secret,
        "--log-level", "debug", "--text", "whoami",
        outputs=outputs,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "whoami: mcp"
    assert not (tmp_path / "mcpl-host" / "tokens.json").exists()  # a machine's token is not stored
    assert all(secret not in text for text in outputs)


#: Every token the fixture issues (``at-`` and ``rt-`` and 32 characters).
FIXTURE_TOKEN = re.compile(r"\b[ar]t-[A-Za-z0-9_-]{32}")


def test_check_with_client_credentials_writes_no_credential_to_its_junit(
    servers: Servers, tmp_path: Path
) -> None:
    url = servers.url(*MAIN)
    outputs: list[str] = []
    junit = tmp_path / "junit.xml"
    secret = "machine-secret-0123456789"
    done = _run(
        tmp_path,
        "check", "--url", url, "--stored-auth-only", "--client-id", "machine", "--client-secret", secret,
        "--only", "lifecycle", "--junit", str(junit), "--log-level", "debug",
        outputs=outputs,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    outputs.append(junit.read_text())
    assert "init.initialized" in outputs[-1]
    for text in outputs:
        assert secret not in text and FIXTURE_TOKEN.search(text) is None


def test_a_header_is_taken_as_curl_writes_it(servers: Servers, tmp_path: Path) -> None:
    url = servers.url(*MAIN)
    done = _run(
        tmp_path,
        "call",
        "--url",
        url,
        "--header",
        "Authorization: Bearer not-a-valid-token-123",
        "whoami",
        outputs=[],
    )
    assert done.returncode == 1
    assert "OAuth is off for it" in done.stderr and "not-a-valid-token-123" not in done.stderr

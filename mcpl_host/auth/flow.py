"""The I/O of OAuth for one MCP server: metadata discovery, client registration, the
authorization code flow with PKCE through a loopback redirect, the client credentials
grant, refresh. It applies the decisions of ``discovery`` (pure) and leaves OAuth itself
to Authlib: the authorization URL with its S256 code challenge
(``AsyncOAuth2Client.create_authorization_url``), token requests and refreshes
(``fetch_token``, ``refresh_token``) and the ``private_key_jwt`` client assertion
(``authlib.oauth2.rfc7523.PrivateKeyJWT``, signed by joserfc). Authlib is imported when a
flow first runs (``import mcpl_host`` does not load it).

Every token, refresh token, client secret and code verifier is given to the connection's
``Redactor`` (``Redactor.add``) the moment it is obtained or made, before anything could
log it. Every document read is bounded by ``Limits.max_oauth_document_bytes``.
Specifications: see ``discovery``; docs/protocol.md OA1-OA14.
"""

from __future__ import annotations

import json
import secrets as _secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import httpx

from mcpl_host.auth.discovery import (
    AuthorizationFailed,
    Challenge,
    ResourceMetadata,
    ServerMetadata,
    Step,
    authorization_base_url,
    authorization_server_urls,
    bearer_challenge,
    callback_code,
    canonical_resource,
    choose_registration,
    choose_scopes,
    default_endpoint_missing,
    default_endpoints,
    expires_at,
    jwk_key_type,
    login_refused,
    protected_resource_urls,
    read_registration,
    read_resource_metadata,
    read_server_metadata,
    registration_request,
    require_no_resource_metadata,
    require_pkce,
    token_auth_method,
)
from mcpl_host.auth.loopback import LoopbackListener
from mcpl_host.auth.settings import OAuthSettings
from mcpl_host.auth.store import StoredGrant

if TYPE_CHECKING:
    import ssl

    from mcpl_host.limits import Limits
    from mcpl_host.logging import Redactor

__all__ = ["Browser", "Discovery", "OAuthFlow"]

#: What shows the authorization URL to the person logging in: opens a browser, or prints
#: it. It returns once shown; the login then waits for the loopback redirect.
Browser = Callable[[str], Awaitable[None]]
_PROBE = b'{"jsonrpc":"2.0","id":0,"method":"ping"}'


@dataclass(frozen=True, slots=True)
class Discovery:
    """What discovery found: the protected resource's metadata (None when it has none),
    the authorization server's, the ``resource`` to send (RFC 8707) and the ``scope`` to
    ask for (None: leave it out)."""

    resource_metadata: ResourceMetadata | None
    server: ServerMetadata
    resource: str
    scope: str | None


def _authlib() -> Any:
    """Authlib's OAuth message builders, loaded on first use (Authlib ships no type
    information; each is used as documented): ``prepare_grant_uri`` and
    ``prepare_token_request`` (RFC 6749 §4.1.1, §4.1.3), ``create_s256_code_challenge``
    (RFC 7636 §4.2), ``ClientAuth`` (RFC 6749 §2.3) and ``PrivateKeyJWT`` (RFC 7523 §2.2), with
    joserfc's ``import_key`` for its signing key (RFC 7517)."""
    import importlib
    import types

    parameters: Any = importlib.import_module("authlib.oauth2.rfc6749.parameters")
    pkce: Any = importlib.import_module("authlib.oauth2.rfc7636")
    auth: Any = importlib.import_module("authlib.oauth2.auth")
    jwt: Any = importlib.import_module("authlib.oauth2.rfc7523")
    jwk: Any = importlib.import_module("joserfc.jwk")
    return types.SimpleNamespace(
        prepare_grant_uri=parameters.prepare_grant_uri,
        prepare_token_request=parameters.prepare_token_request,
        create_s256_code_challenge=pkce.create_s256_code_challenge,
        client_auth=auth.ClientAuth,
        private_key_jwt=jwt.PrivateKeyJWT,
        import_key=jwk.import_key,
    )


class OAuthFlow:
    """OAuth for the MCP server at ``server_url``. ``settings``: the operator's
    (``OAuthSettings``). ``browser``: None when no person may be asked (then only stored
    grants, refresh and client credentials are used). ``limits``, ``redactor``,
    ``ssl_context``: the server's."""

    def __init__(
        self,
        server_url: str,
        settings: OAuthSettings,
        *,
        limits: Limits,
        redactor: Redactor,
        ssl_context: ssl.SSLContext | None = None,
        browser: Browser | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.server_url = canonical_resource(server_url)
        self._url = server_url
        self.settings = settings
        self._limits = limits
        self._redactor = redactor
        self._ssl = ssl_context
        self.browser = browser
        self._clock = clock
        redactor.add(*settings.secrets())

    def __repr__(self) -> str:
        return f"<OAuthFlow {self.server_url}>"

    def _client(self) -> httpx.AsyncClient:
        """A client for one exchange with the authorization server: redirects never
        followed, the transport's timeouts, one SSL context per flow (building one per
        client costs tenths of a second)."""
        if self._ssl is None:
            self._ssl = httpx.create_ssl_context()
        return httpx.AsyncClient(
            follow_redirects=False,
            timeout=httpx.Timeout(
                self._limits.http_connect_timeout_seconds, read=self._limits.http_reply_timeout_seconds
            ),
            verify=self._ssl,
        )

    # --- discovery ---------------------------------------------------------------------

    async def _fetch(self, client: httpx.AsyncClient, url: str) -> tuple[int | None, object | None]:
        """The status of the answer to a GET of ``url`` (None: unreachable) and its JSON
        document (None unless a 200 whose body is JSON); past
        ``max_oauth_document_bytes``, ``metadata``."""
        try:
            async with client.stream("GET", url, headers={"Accept": "application/json"}) as response:
                status = response.status_code
                if status != 200:
                    return status, None
                body = await self._bounded(response)
        except httpx.HTTPError:
            return None, None
        try:
            document: object = json.loads(body)
        except ValueError:
            return status, None
        return status, document

    async def _bounded(self, response: httpx.Response) -> bytes:
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > self._limits.max_oauth_document_bytes:
                raise AuthorizationFailed(
                    "metadata", "an OAuth document is longer than Limits.max_oauth_document_bytes"
                )
        return bytes(body)

    async def challenge(self) -> Challenge | None:
        """The ``Bearer`` challenge of the server's 401 to a request without a token (the
        first step of MCP 2025-11-25 Authorization, Authorization Flow Steps), or None."""
        async with self._client() as client:
            try:
                response = await client.post(
                    self._url,
                    content=_PROBE,
                    headers={
                        "Content-Type": "application/json",
                        "Accept": "application/json, text/event-stream",
                    },
                )
            except httpx.HTTPError:
                return None
            await response.aclose()
            if response.status_code not in (401, 403):
                return None
            return bearer_challenge(response.headers.get("www-authenticate"))

    async def discover(self, challenge: Challenge | None) -> Discovery:
        """Protected resource metadata (``protected_resource_urls``), then the first
        authorization server's metadata (``authorization_server_urls``), both checked. A
        server that publishes no protected resource metadata (``require_no_resource_metadata``)
        is discovered as MCP 2025-03-26 did (docs/protocol.md OA14): its authorization base
        URL is the issuer, its metadata looked for as any issuer's, and with none there the
        default endpoints (``default_endpoints``); the ``resource`` sent is then the
        server's canonical URL.

        Raises:
            AuthorizationFailed: ``metadata`` (none found), ``issuer`` (a mismatch).
        """
        async with self._client() as client:
            resource_metadata: ResourceMetadata | None = None
            statuses: list[int | None] = []
            for url in protected_resource_urls(self._url, challenge):
                status, document = await self._fetch(client, url)
                statuses.append(status)
                if document is not None:
                    resource_metadata = read_resource_metadata(document, self._url)
                    break
            if resource_metadata is None:
                require_no_resource_metadata(challenge, statuses)
                issuer = authorization_base_url(self._url)
            else:
                issuer = resource_metadata.authorization_servers[0]
            server: ServerMetadata | None = None
            statuses = []
            for url in authorization_server_urls(issuer):
                status, document = await self._fetch(client, url)
                statuses.append(status)
                if document is not None:
                    server = read_server_metadata(document, issuer)
                    break
        if server is None and resource_metadata is None:
            server = default_endpoints(self._url, statuses)
        if server is None:
            raise AuthorizationFailed(
                "metadata",
                "the authorization server publishes no metadata (RFC 8414 nor OpenID Connect Discovery)",
            )
        resource = resource_metadata.resource if resource_metadata is not None else self.server_url
        scope = self.settings.scope or choose_scopes(challenge, resource_metadata)
        return Discovery(resource_metadata, server, resource, scope)

    # --- registration --------------------------------------------------------------------

    async def _register(self, found: Discovery, redirect_uri: str) -> tuple[str, str | None]:
        how = choose_registration(
            found.server,
            client_id=self.settings.client_id,
            metadata_document_url=self.settings.client_metadata_url,
        )
        if how == "pre-registered":
            assert self.settings.client_id is not None
            return self.settings.client_id, self.settings.client_secret
        if how == "metadata-document":
            assert self.settings.client_metadata_url is not None
            return self.settings.client_metadata_url, None
        assert found.server.registration_endpoint is not None
        async with self._client() as client:
            try:
                async with client.stream(
                    "POST",
                    found.server.registration_endpoint,
                    json=registration_request(redirect_uri, found.scope),
                    headers={"Accept": "application/json"},
                ) as response:
                    body = await self._bounded(response)
                    status = response.status_code
            except httpx.HTTPError:
                raise AuthorizationFailed(
                    "registration", "the registration endpoint could not be reached"
                ) from None
        missing = default_endpoint_missing(found.server, found.server.registration_endpoint, status)
        if missing is not None:
            raise missing
        if status not in (200, 201):
            raise AuthorizationFailed(
                "registration", f"the authorization server refused the dynamic registration (HTTP {status})"
            )
        try:
            document = json.loads(body)
        except ValueError:
            document = None
        client_id, secret = read_registration(document)
        self._redactor.add(secret)
        return client_id, secret

    # --- tokens --------------------------------------------------------------------------

    def _grant(
        self,
        found: Discovery | StoredGrant,
        token: Any,
        *,
        client_id: str,
        secret: str | None,
        method: str,
        asked: str | None,
        old: StoredGrant | None = None,
        grant_type: str = "authorization_code",
    ) -> StoredGrant:
        now = self._clock()
        access = token.get("access_token")
        kind = str(token.get("token_type") or "bearer").lower()
        if not isinstance(access, str) or not access or kind != "bearer":
            raise AuthorizationFailed("token", "the token endpoint's answer holds no bearer access token")
        refresh = token.get("refresh_token")
        refresh = refresh if isinstance(refresh, str) and refresh else (old.refresh_token if old else None)
        self._redactor.add(access, refresh)
        scope = token.get("scope")
        issuer = found.server.issuer if isinstance(found, Discovery) else found.issuer
        endpoint = found.server.token_endpoint if isinstance(found, Discovery) else found.token_endpoint
        return StoredGrant(
            server_url=self.server_url,
            resource=found.resource,
            issuer=issuer,
            token_endpoint=endpoint,
            client_id=client_id,
            access_token=access,
            refresh_token=refresh,
            client_secret=secret,
            token_endpoint_auth_method=method,
            scope=scope if isinstance(scope, str) and scope else asked,
            expires_at=expires_at(token.get("expires_in"), now),
            grant_type=grant_type,
        )

    async def _token_request(
        self,
        endpoint: str,
        grant_type: str,
        *,
        client_id: str,
        secret: str | None,
        method: str,
        what: str,
        issuer: str,
        server: ServerMetadata | None = None,
        **params: Any,
    ) -> dict[str, Any]:
        """POST a token request (RFC 6749 §4.1.3, §4.4.2, §6): the body and the client's
        authentication built by Authlib (``prepare_token_request``; ``ClientAuth`` with
        ``none``, ``client_secret_basic``, ``client_secret_post`` or ``PrivateKeyJWT``),
        the answer read within ``max_oauth_document_bytes``. ``issuer``: the authorization
        server's, the audience of a ``private_key_jwt`` assertion (RFC 9126 §2), signed with
        ``OAuthSettings.private_key_alg`` by a key of its type (``discovery.jwk_key_type``).
        ``server``: the metadata the endpoint came from, when discovery just found it.

        Raises:
            AuthorizationFailed: ``token`` (``scope`` for ``invalid_scope``; a private key
                that cannot be read or cannot sign); ``metadata`` for a 404 from a default
                endpoint (``discovery.default_endpoint_missing``).
        """
        lib = _authlib()
        body = lib.prepare_token_request(grant_type, **{k: v for k, v in params.items() if v})
        auth_method: Any = method
        credential: Any = secret
        if method == "private_key_jwt":
            assert self.settings.private_key_file is not None
            try:
                credential = Path(self.settings.private_key_file).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                raise AuthorizationFailed(
                    "token", "the private key file for private_key_jwt could not be read"
                ) from None
            self._redactor.add(credential)
            alg = self.settings.private_key_alg
            kind = jwk_key_type(alg)
            try:  # the key of the algorithm's type: Authlib would read any PEM as RSA
                credential = lib.import_key(credential, kind)
            except Exception:  # joserfc and cryptography raise several kinds for a bad PEM
                raise AuthorizationFailed(
                    "token",
                    "the client could not authenticate itself: the private key file for private_key_jwt "
                    f"holds no {kind} private key (for {alg})",
                ) from None
            # docs/protocol.md OA13: the audience is the issuer identifier, which RFC 9126 §2
            # says to use and every authorization server to accept (RFC 7523 §3 left it open),
            # not Authlib's default, the token endpoint, which some refuse.
            auth_method = lib.private_key_jwt(endpoint, alg=alg, claims={"aud": issuer})
        headers = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"}
        try:
            _, headers, body = lib.client_auth(client_id, credential, auth_method).prepare(
                "POST", endpoint, headers, body
            )
        except Exception:  # a key joserfc cannot use (wrong PEM, wrong algorithm) raises its own errors
            raise AuthorizationFailed(
                "token", "the client could not authenticate itself (its key or method is unusable)"
            ) from None
        async with self._client() as client:
            try:
                async with client.stream(
                    "POST", endpoint, content=str(body).encode(), headers=headers
                ) as response:
                    raw = await self._bounded(response)
                    status = response.status_code
            except httpx.HTTPError:
                raise AuthorizationFailed(
                    "token", f"the token endpoint could not be reached for {what}"
                ) from None
        missing = None if server is None else default_endpoint_missing(server, endpoint, status)
        if missing is not None:
            raise missing
        try:
            answer: object = json.loads(raw)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise AuthorizationFailed(
                "token", f"the token endpoint answered {what} with no JSON object (HTTP {status})"
            )
        document: dict[str, Any] = answer  # pyright: ignore[reportUnknownVariableType]
        if status != 200 or "error" in document:
            error = document.get("error")
            shown = (
                error
                if isinstance(error, str) and error.replace("_", "").isalpha() and len(error) <= 64
                else "an error"
            )
            step: Step = "scope" if shown == "invalid_scope" else "token"
            raise AuthorizationFailed(step, f"the token endpoint refused {what} ({shown}, HTTP {status})")
        return document

    async def authorize(self, challenge: Challenge | None, *, scope: str | None = None) -> StoredGrant:
        """A new grant: the client credentials grant for a machine client
        (``OAuthSettings.machine``, when no person may be asked or ``client_credentials``
        is set), else the authorization code flow with PKCE S256 through the browser.
        ``scope`` replaces the chosen scopes (a step-up's union).

        Raises:
            AuthorizationFailed: the step that failed; ``login`` when a person would be
                needed and ``browser`` is None.
        """
        found = await self.discover(challenge)
        if scope is not None:
            found = replace(found, scope=scope)
        if self.settings.machine and (self.browser is None or self.settings.client_credentials):
            return await self._client_credentials(found)
        if self.browser is None:
            raise login_refused(self.server_url, found.server)
        require_pkce(found.server)
        return await self._authorization_code(found, self.browser)

    async def _client_credentials(self, found: Discovery) -> StoredGrant:
        assert self.settings.client_id is not None
        method = token_auth_method(
            found.server,
            has_secret=self.settings.client_secret is not None,
            has_key=self.settings.private_key_file is not None,
        )
        token = await self._token_request(
            found.server.token_endpoint,
            "client_credentials",
            client_id=self.settings.client_id,
            secret=self.settings.client_secret,
            method=method,
            what="the client credentials",
            issuer=found.server.issuer,
            server=found.server,
            scope=found.scope,
            resource=found.resource,
        )
        return self._grant(
            found,
            token,
            client_id=self.settings.client_id,
            secret=self.settings.client_secret,
            method=method,
            asked=found.scope,
            grant_type="client_credentials",
        )

    async def _authorization_code(self, found: Discovery, browser: Browser) -> StoredGrant:
        assert found.server.authorization_endpoint is not None
        lib = _authlib()
        listening = LoopbackListener(
            max_bytes=self._limits.max_oauth_document_bytes,
            head_seconds=self._limits.http_reply_timeout_seconds,
            port=self.settings.callback_port or 0,
        )
        async with listening as listener:
            client_id, secret = await self._register(found, listener.redirect_uri)
            method = token_auth_method(found.server, has_secret=secret is not None, has_key=False)
            verifier = _secrets.token_urlsafe(64)  # RFC 7636 §4.1: 86 characters
            state = _secrets.token_urlsafe(24)
            self._redactor.add(verifier)
            url = lib.prepare_grant_uri(
                found.server.authorization_endpoint,
                client_id,
                "code",
                redirect_uri=listener.redirect_uri,
                scope=found.scope,
                state=state,
                code_challenge=lib.create_s256_code_challenge(verifier),
                code_challenge_method="S256",
                resource=found.resource,
            )
            query = await self._wait_for_redirect(listener, browser, str(url))
            code = callback_code(query, state=state, metadata=found.server)
            self._redactor.add(code)
            token = await self._token_request(
                found.server.token_endpoint,
                "authorization_code",
                client_id=client_id,
                secret=secret,
                method=method,
                what="the authorization code",
                issuer=found.server.issuer,
                server=found.server,
                redirect_uri=listener.redirect_uri,
                code=code,
                code_verifier=verifier,
                resource=found.resource,
            )
        return self._grant(found, token, client_id=client_id, secret=secret, method=method, asked=found.scope)

    async def _wait_for_redirect(self, listener: LoopbackListener, browser: Browser, url: str) -> str:
        """Show ``url`` (``browser``) while the listener waits for the redirect, at most
        ``Limits.oauth_login_timeout_seconds``.

        Raises:
            AuthorizationFailed: ``login`` when the browser could not be shown the URL or
                nothing came back in time.
        """
        found: list[str] = []

        async def serve() -> None:
            found.append(await listener.wait())

        try:
            with anyio.fail_after(self._limits.oauth_login_timeout_seconds):
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(serve)
                    try:
                        await browser(url)
                    except Exception:  # whatever showing the URL raised, the login is over
                        tasks.cancel_scope.cancel()
                        raise AuthorizationFailed(
                            "login", "the authorization URL could not be shown"
                        ) from None
        except TimeoutError:
            raise AuthorizationFailed(
                "login",
                "the browser did not come back to the loopback redirect in time (Limits.oauth_login_timeout_seconds)",
            ) from None
        return found[0]

    async def refresh(self, grant: StoredGrant) -> StoredGrant:
        """``grant`` refreshed with its refresh token (RFC 6749 §6), ``resource`` sent (RFC
        8707 §2.2), the new absolute expiry set.

        Raises:
            AuthorizationFailed: ``token`` (no refresh token, or refused).
        """
        if not grant.refresh_token:
            raise AuthorizationFailed("token", "the stored token has expired and has no refresh token")
        token = await self._token_request(
            grant.token_endpoint,
            "refresh_token",
            client_id=grant.client_id,
            secret=grant.client_secret,
            method=grant.token_endpoint_auth_method,
            what="the refresh token",
            issuer=grant.issuer,
            refresh_token=grant.refresh_token,
            resource=grant.resource,
        )
        return self._grant(
            grant,
            token,
            client_id=grant.client_id,
            secret=grant.client_secret,
            method=grant.token_endpoint_auth_method,
            asked=grant.scope,
            old=grant,
            grant_type=grant.grant_type,
        )

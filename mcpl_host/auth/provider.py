"""``OAuth``: what an HTTP transport's client is given to authorize its requests (an
``httpx.Auth``; the transports hold it by composition, through ``HTTPParameters.auth``).

docs/protocol.md OA1 and OA8-OA11:

- The first request reads the store (``TokenStore.find``: the server's grant, by its
  canonical URL). A request goes with the grant in hand (``Authorization: Bearer``),
  refreshed first when it is at most ``discovery.STALE_MARGIN_SECONDS`` from its absolute
  expiry; with none, without ``Authorization``.
- A 401: a refresh of the grant just refused; else a new authorization
  (``OAuthFlow.authorize``: discovery, registration, PKCE, interactive only with a
  ``browser``, or client credentials). The request is then sent once more; a second 401 is
  the server's answer.
- A 403 with ``error="insufficient_scope"``: a new authorization with the union of the
  granted scopes and the challenge's (``discovery.step_up_scopes``), at most
  ``Limits.max_oauth_step_ups`` times per ``OAuth``; then the request once more.
- A grant obtained by the authorization code flow (or refreshed from one) is stored
  (``TokenStore.save``); a client credentials grant lives in memory only.
- When healing fails, the answer (401 or 403) is returned as it came and ``refusal_for``
  gives the sentence of the step that failed; the transport shows it.
- One heal at a time (a lock): concurrent 401s wait and reuse the first heal's grant.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncGenerator, Callable, Generator
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import httpx

from mcpl_host.auth.discovery import (
    AuthorizationFailed,
    Challenge,
    bearer_challenge,
    is_stale,
    step_up_scopes,
)
from mcpl_host.auth.flow import Browser, OAuthFlow
from mcpl_host.auth.settings import OAuthSettings
from mcpl_host.auth.store import StoredGrant, TokenStore

if TYPE_CHECKING:
    import ssl

    from mcpl_host.limits import Limits
    from mcpl_host.logging import Logger, Redactor

__all__ = ["OAuth"]


class OAuth(httpx.Auth):
    """OAuth for the MCP server at ``server_url`` (module rules). ``store``: where grants
    live (None: none are read or kept). ``browser``: how a person is shown the
    authorization URL; None: no person is asked (``--stored-auth-only``, or no terminal).
    One ``OAuth`` serves every transport of a server, so a grant outlives a reconnect."""

    requires_request_body = True

    def __init__(
        self,
        server_url: str,
        settings: OAuthSettings,
        *,
        limits: Limits,
        redactor: Redactor,
        logger: Logger | None = None,
        store: TokenStore | None = None,
        browser: Browser | None = None,
        ssl_context: ssl.SSLContext | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        extra: dict[str, Any] = {} if clock is None else {"clock": clock}
        self.flow = OAuthFlow(
            server_url,
            settings,
            limits=limits,
            redactor=redactor,
            ssl_context=ssl_context,
            browser=browser,
            **extra,
        )
        self._clock = self.flow._clock  # pyright: ignore[reportPrivateUsage]
        self._limits = limits
        self._redactor = redactor
        self._logger = logger
        self._store = store
        self._grant: StoredGrant | None = None
        self._looked_up = False
        self._lock = anyio.Lock()
        self._step_ups = 0
        self._failures: weakref.WeakKeyDictionary[httpx.Response, str] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"<OAuth {self.flow.server_url} grant={'yes' if self._grant is not None else 'no'}>"

    @property
    def grant(self) -> StoredGrant | None:
        """The grant in hand (its repr shows no secret)."""
        return self._grant

    def httpx_auth(self) -> httpx.Auth:
        """Itself (``HTTPAuthorizer``)."""
        return self

    def refusal_for(self, response: httpx.Response) -> str | None:
        """The sentence of the step that failed when ``response`` (a 401 or 403) could not
        be healed, or None."""
        return self._failures.get(response)

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        """Not supported: the transports are async."""
        raise RuntimeError("mcpl_host.auth.OAuth works with httpx.AsyncClient only")
        yield request  # pragma: no cover

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        """Module rules: send, heal a 401 or an ``insufficient_scope`` 403 once, send again."""
        if self._grant is None and not self._looked_up:
            async with self._lock:
                stored = await self._stored()
                if stored is not None and self._grant is None:
                    self._grant = stored
        sent = await self._fresh(self._grant)
        self._authorize(request, sent)
        response = yield request
        status = response.status_code
        challenge = bearer_challenge(response.headers.get("www-authenticate"))
        if status == 401 or (
            status == 403 and challenge is not None and challenge.error == "insufficient_scope"
        ):
            try:
                grant = await self._heal(status, sent, challenge)
            except AuthorizationFailed as exc:
                self._failures[response] = f"OAuth failed at {exc.step}: {exc}"
                return
            self._authorize(request, grant)
            response = yield request
            if response.status_code in (401, 403):
                self._failures[response] = (
                    f"OAuth failed at token: the server refused the new token too (HTTP {response.status_code})"
                )

    def _authorize(self, request: httpx.Request, grant: StoredGrant | None) -> None:
        if grant is not None:
            request.headers["Authorization"] = f"Bearer {grant.access_token}"

    async def _fresh(self, grant: StoredGrant | None) -> StoredGrant | None:
        """``grant``, refreshed first when stale (a failed refresh keeps it: the server's
        401 then decides)."""
        if grant is None or not is_stale(grant.expires_at, self._clock()) or not grant.refresh_token:
            return grant
        async with self._lock:
            if self._grant is not grant:
                return self._grant
            return await self._refreshed(grant) or grant

    async def _keep(self, grant: StoredGrant) -> StoredGrant:
        """Hold ``grant``; store it when a person's login obtained it (module rules)."""
        self._grant = grant
        if self._store is not None and grant.grant_type == "authorization_code":
            try:
                await anyio.to_thread.run_sync(self._store.save, grant)
            except Exception as exc:  # a keyring backend may raise anything; the grant stays in memory
                if self._logger is not None:
                    self._logger.warning(
                        "the OAuth grant could not be stored; it is kept for this process only",
                        store=repr(self._store),
                        error=type(exc).__name__,
                    )
        return grant

    async def _stored(self) -> StoredGrant | None:
        if self._looked_up or self._store is None:
            return None
        self._looked_up = True
        grant = await anyio.to_thread.run_sync(self._store.find, self.flow.server_url)
        if grant is not None:
            self._redactor.add(*grant.secrets())
        return grant

    async def _refreshed(self, grant: StoredGrant | None) -> StoredGrant | None:
        """``grant`` refreshed and kept, or None when it has no refresh token or the refresh
        was refused."""
        if grant is None or not grant.refresh_token:
            return None
        try:
            return await self._keep(await self.flow.refresh(grant))
        except AuthorizationFailed:
            return None

    async def _heal(self, status: int, sent: StoredGrant | None, challenge: Challenge | None) -> StoredGrant:
        async with self._lock:
            if self._grant is not None and self._grant is not sent:
                return self._grant  # another request healed meanwhile
            if status == 403:
                assert challenge is not None
                scope = step_up_scopes(
                    sent.scope if sent is not None else None,
                    challenge,
                    step_ups=self._step_ups,
                    max_step_ups=self._limits.max_oauth_step_ups,
                )
                self._step_ups += 1
                return await self._keep(await self.flow.authorize(challenge, scope=scope))
            stored = await self._stored()
            if stored is not None and (sent is None or stored.access_token != sent.access_token):
                if not is_stale(stored.expires_at, self._clock()):
                    self._grant = stored
                    return stored
                refreshed = await self._refreshed(stored)
                if refreshed is not None:
                    return refreshed
            refreshed = await self._refreshed(sent)
            if refreshed is not None:
                return refreshed
            return await self._keep(await self.flow.authorize(challenge))

    async def login(self) -> StoredGrant:
        """An interactive login now (``mcpl-host login``): the server's challenge, then
        ``OAuthFlow.authorize``; the grant is stored.

        Raises:
            AuthorizationFailed: the step that failed.
        """
        async with self._lock:
            return await self._keep(await self.flow.authorize(await self.flow.challenge()))

"""``mcpl-host login URL``, ``logout URL`` and ``auth status``: OAuth for HTTP servers
(``mcpl_host.auth``; docs/cli.md "OAuth"), and what the other commands' OAuth options
(``--stored-auth-only``, ``--client-id``, ``--client-secret``, ``--private-key-jwt``,
``--scope``) become (``oauth_settings``).

Rules: a token is never printed (``auth status`` shows issuer, resource, scopes, expiry
and where the secrets are kept); the authorization URL is printed on stderr (it holds no
secret: the PKCE challenge, not the verifier); a failure is one sentence on stderr, exit 1.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import sys
import webbrowser
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.to_thread
import click

from mcpl_host.auth.settings import OAuthSettings

__all__ = ["auth", "login", "logout", "oauth_settings", "terminal_browser"]


def terminal_browser(*, open_browser: bool = True) -> Callable[[str], Awaitable[None]]:
    """What shows a person the authorization URL: printed on stderr, and opened with the
    standard library's ``webbrowser`` unless ``open_browser`` is False (``--no-browser``)."""

    async def show(url: str) -> None:
        click.echo(f"Open this URL to log in (waiting for the browser to come back):\n{url}", err=True)
        if open_browser:
            await anyio.to_thread.run_sync(webbrowser.open, url)

    return show


def _on_terminal() -> bool:
    return sys.stdin.isatty() and sys.stderr.isatty()


def oauth_settings(base: OAuthSettings, options: dict[str, Any]) -> OAuthSettings:
    """``base`` with the command's OAuth options applied; the browser is the terminal's
    unless ``--stored-auth-only`` or no terminal (then a login is refused in one sentence).

    Raises:
        click.UsageError: a client secret and a private key both given, or either without
            a client id.
    """
    changes: dict[str, Any] = {}
    for option, field in (
        ("oauth_client_id", "client_id"),
        ("oauth_client_secret", "client_secret"),
        ("oauth_private_key", "private_key_file"),
        ("oauth_scope", "scope"),
    ):
        if options.get(option):
            changes[field] = options[option]
    if "client_secret" in changes and not (changes.get("client_id") or base.client_id):
        del changes["client_secret"]  # $MCPL_HOST_CLIENT_SECRET goes with a client id only
    stored_only = bool(options.get("stored_auth_only"))
    changes["browser"] = None if stored_only or not _on_terminal() else terminal_browser()
    try:
        return dataclasses.replace(base, **changes)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def _fail(message: str) -> None:
    click.echo(f"mcpl-host: {message}", err=True)
    sys.exit(1)


def _oauth(url: str, settings: OAuthSettings) -> Any:
    """The ``OAuth`` of ``url`` with the default store, a fresh redactor and default limits.

    Raises:
        click.UsageError: an unusable URL.
    """
    from mcpl_host.auth.provider import OAuth
    from mcpl_host.auth.store import TokenStore
    from mcpl_host.limits import Limits
    from mcpl_host.secrets import Redactor

    try:
        return OAuth(
            url, settings, limits=Limits(), redactor=Redactor(), store=TokenStore(), browser=settings.browser
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


_CLIENT_OPTIONS = [
    click.option("--client-id", "oauth_client_id", metavar="ID", help="A pre-registered OAuth client id."),
    click.option(
        "--client-secret",
        "oauth_client_secret",
        envvar="MCPL_HOST_CLIENT_SECRET",
        metavar="SECRET",
        help="Its secret (default: $MCPL_HOST_CLIENT_SECRET). Never printed.",
    ),
    click.option(
        "--private-key-jwt",
        "oauth_private_key",
        type=click.Path(dir_okay=False, exists=True),
        metavar="FILE",
        help="A PEM private key: the client authenticates with private_key_jwt (RFC 7523).",
    ),
    click.option("--scope", "oauth_scope", metavar="SCOPES", help="The scopes to ask for (space-separated)."),
]


@click.command(context_settings={"max_content_width": 100})
@click.argument("url")
@click.option(
    "--no-browser", is_flag=True, help="Print the authorization URL only (a machine without a browser)."
)
@click.option(
    "--client-credentials",
    is_flag=True,
    help="With --client-id and a secret or key: get a token with the client credentials grant (checks them).",
)
def login(url: str, no_browser: bool, client_credentials: bool, **options: Any) -> None:
    """Log in to the MCP server at URL (OAuth 2.1 as MCP's authorization specification
    defines it) and store the grant for later runs: discovery, registration, PKCE, a
    loopback redirect on 127.0.0.1, the browser opened (or the URL printed)."""
    from mcpl_host.auth.discovery import AuthorizationFailed

    settings = oauth_settings(OAuthSettings(client_credentials=client_credentials), options)
    settings = dataclasses.replace(settings, browser=terminal_browser(open_browser=not no_browser))
    oauth = _oauth(url, settings)

    async def run() -> Any:
        return await oauth.login()

    try:
        grant = anyio.run(run)
    except AuthorizationFailed as exc:
        _fail(f"login to {oauth.flow.server_url} failed at {exc.step}: {exc}")
        return
    click.echo(
        f"Logged in to {grant.resource} (issuer {grant.issuer}; scopes: {grant.scope or '-'}; "
        f"expires: {_when(grant.expires_at)})",
        err=True,
    )


for _option in _CLIENT_OPTIONS:
    login = _option(login)


@click.command(context_settings={"max_content_width": 100})
@click.argument("url")
def logout(url: str) -> None:
    """Forget what is stored for the MCP server at URL (tokens, client registration)."""
    from mcpl_host.auth.discovery import canonical_resource
    from mcpl_host.auth.store import TokenStore

    try:
        server_url = canonical_resource(url)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    removed = TokenStore().remove(server_url)
    click.echo(f"{'Logged out of' if removed else 'Nothing stored for'} {server_url}", err=True)


def _when(expiry: object) -> str:
    if not isinstance(expiry, (int, float)):
        return "unknown"
    return datetime.datetime.fromtimestamp(expiry, tz=datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@click.group(context_settings={"max_content_width": 100})
def auth() -> None:
    """What is stored for HTTP servers behind OAuth."""


@auth.command("status")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def status(as_json: bool) -> None:
    """Each stored login: server, issuer, resource, scopes, expiry, where its secrets are kept
    (the system keyring or the file). Never a token."""
    from mcpl_host.auth.store import TokenStore

    store = TokenStore()
    rows = [
        {
            "server": row.get("server_url"),
            "issuer": row.get("issuer"),
            "resource": row.get("resource"),
            "scope": row.get("scope"),
            "expiresAt": _when(row.get("expires_at")),
            "secretsIn": row.get("secrets_in"),
        }
        for row in store.entries()
    ]
    if as_json:
        click.echo(json.dumps({"store": str(store.path), "logins": rows}, indent=2))
        return
    if not rows:
        click.echo(f"No stored logins ({store.path}).")
        return
    for row in rows:
        click.echo(
            f"{row['server']}\n  issuer {row['issuer']}\n  resource {row['resource']}\n"
            f"  scopes {row['scope'] or '-'}\n  expires {row['expiresAt']}\n  secrets in {row['secretsIn']}"
        )

"""OAuth 2.1 for HTTP servers as MCP's authorization specification defines it (MCP
2025-11-25 and 2026-07-28 "Authorization", and 2025-03-26's discovery for a server
without protected resource metadata; docs/protocol.md OA1-OA14).

- ``discovery``: the decisions, pure (which metadata URLs, the issuer and PKCE checks,
  scopes, registration, the authorization response, expiry).
- ``flow``: their I/O (httpx; Authlib for PKCE, token requests and ``private_key_jwt``).
- ``provider``: ``OAuth``, the ``httpx.Auth`` an HTTP transport's client is given.
- ``store``: where grants live (the system keyring, else a file readable only by its owner).
- ``loopback``: the loopback redirect listener of an interactive login.
- ``settings``: ``OAuthSettings``, the operator's settings (config key ``oauth``).

Importing this package loads only ``settings``; the rest (httpx, Authlib, keyring) loads
on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcpl_host.auth.settings import OAuthSettings

if TYPE_CHECKING:
    from mcpl_host.auth.discovery import AuthorizationFailed
    from mcpl_host.auth.provider import OAuth
    from mcpl_host.auth.store import StoredGrant, TokenStore

__all__ = ["AuthorizationFailed", "OAuth", "OAuthSettings", "StoredGrant", "TokenStore"]

_LAZY = {
    "AuthorizationFailed": "mcpl_host.auth.discovery",
    "OAuth": "mcpl_host.auth.provider",
    "StoredGrant": "mcpl_host.auth.store",
    "TokenStore": "mcpl_host.auth.store",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mcpl_host.auth' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)

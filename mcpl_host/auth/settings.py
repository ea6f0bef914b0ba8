"""What an operator says about a server's OAuth (config key ``oauth``; the CLI's
``--client-id``, ``--client-secret``, ``--private-key-jwt``, ``--scope``,
``--stored-auth-only``). Pure."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcpl_host.auth.store import TokenStore

__all__ = ["OAuthSettings"]


@dataclass(frozen=True, slots=True)
class OAuthSettings:
    """A server's OAuth settings (MCP 2025-11-25 Authorization).

    ``enabled``: False turns OAuth off for the server (a 401 then ends the connection).
    ``client_id``: a pre-registered client id (used before any other registration).
    ``client_secret``: its secret; with it (or ``private_key_file``) and no person to log
    in, the client credentials grant (RFC 6749 §4.4) is used. ``private_key_file``: a PEM
    private key for ``private_key_jwt`` (RFC 7523 §2.2), signed with ``private_key_alg``.
    ``scope``: the scopes to ask for (default: the server's challenge, then its
    ``scopes_supported``). ``client_metadata_url``: the ``https://`` URL of this client's
    metadata document (used when the server advertises
    ``client_id_metadata_document_supported``). ``client_credentials``: use the client
    credentials grant even when a person could log in. ``callback_port``: the loopback
    redirect's port (config key ``callbackPort``, as Claude Code writes it; default: a free
    port the system picks), for a pre-registered client whose redirect URI names one.

    Not from a config file: ``browser`` shows the authorization URL to a person (None: no
    person may be asked; a login is then refused in one sentence); ``store``: where grants
    live (None: ``TokenStore()``, the keyring or ``tokens.json``); ``keep_tokens`` False:
    no grant is read from nor written to a store.

    Raises:
        ValueError: ``private_key_file`` and ``client_secret`` both given, or either
            without ``client_id``.
    """

    enabled: bool = True
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    private_key_file: str | None = None
    private_key_alg: str = "RS256"
    scope: str | None = None
    client_metadata_url: str | None = None
    client_credentials: bool = False
    callback_port: int | None = None
    browser: Callable[[str], Awaitable[None]] | None = field(default=None, compare=False, repr=False)
    store: TokenStore | None = field(default=None, compare=False, repr=False)
    keep_tokens: bool = True

    def __post_init__(self) -> None:
        if self.callback_port is not None and not 0 < self.callback_port < 65536:
            raise ValueError("the callback port must be 1 to 65535")
        if self.client_secret is not None and self.private_key_file is not None:
            raise ValueError("give a client secret or a private key for private_key_jwt, not both")
        if (self.client_secret is not None or self.private_key_file is not None) and not self.client_id:
            raise ValueError("a client secret or a private key needs a client id")

    @property
    def machine(self) -> bool:
        """Whether this client can authenticate itself (a secret or a key)."""
        return self.client_secret is not None or self.private_key_file is not None

    def secrets(self) -> list[str]:
        """Values to redact."""
        return [self.client_secret] if self.client_secret else []

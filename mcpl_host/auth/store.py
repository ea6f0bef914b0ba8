"""Where OAuth grants live between runs (docs/protocol.md OA10).

A ``StoredGrant`` is what one login obtained for one MCP server: keyed by its issuer and
resource (MCP 2025-11-25 Authorization: credentials are per authorization server), found by
the server's URL. Its plain part (server URL, resource, issuer, token endpoint, client id,
scopes, absolute expiry) is kept in ``tokens.json`` under ``$XDG_STATE_HOME/mcpl-host/``
(``~/.local/state/mcpl-host/``); its secrets (access token, refresh token, client secret)
are kept in the system keyring (the ``keyring`` library) when a usable backend is there
(not keyring's ``fail`` nor ``null`` backend), else in the same file. The file is created
readable and writable by its owner only (mode 0600, its folder 0700) and replaced whole on
each write (a temporary file, then ``os.replace``).

The calls block (a keyring backend may talk to D-Bus): the async callers run them in a
worker thread. Nothing here logs; no repr shows a secret.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

__all__ = ["KEYRING_SERVICE", "StoredGrant", "TokenStore", "default_store_path", "keyring_usable"]

#: The keyring service name of every secret the store keeps.
KEYRING_SERVICE = "mcpl-host oauth"
_FILE_NAME = "tokens.json"
_SECRET_FIELDS = ("access_token", "refresh_token", "client_secret")


@dataclass(frozen=True, slots=True)
class StoredGrant:
    """One login's result. ``expires_at``: seconds since the epoch, or None (unknown).
    ``scope``: space-separated, as granted (or as asked when the answer named none)."""

    server_url: str
    resource: str
    issuer: str
    token_endpoint: str
    client_id: str
    access_token: str = field(repr=False)
    refresh_token: str | None = field(default=None, repr=False)
    client_secret: str | None = field(default=None, repr=False)
    token_endpoint_auth_method: str = "none"
    scope: str | None = None
    expires_at: float | None = None
    #: ``authorization_code`` (a person's login: stored) or ``client_credentials``.
    grant_type: str = "authorization_code"

    @property
    def key(self) -> str:
        """The store's key: issuer and resource."""
        return f"{self.issuer} {self.resource}"

    def secrets(self) -> list[str]:
        """The secret values it holds (for the redactor)."""
        return [v for v in (self.access_token, self.refresh_token, self.client_secret) if v]

    def plain(self) -> dict[str, Any]:
        """Its fields without the secrets (what ``auth status`` shows)."""
        return {k: v for k, v in asdict(self).items() if k not in _SECRET_FIELDS}


def default_store_path(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_STATE_HOME/mcpl-host/tokens.json``, else ``~/.local/state/mcpl-host/tokens.json``."""
    env = os.environ if env is None else env
    base = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "mcpl-host" / _FILE_NAME


def keyring_usable() -> bool:
    """Whether the keyring library has a backend that stores (not ``fail``, not ``null``,
    not a chainer of none). False when the library cannot be loaded."""
    try:
        import keyring
        from keyring.backends import chainer, fail, null
    except Exception:  # an unusable keyring install is "no keyring"
        return False
    backend = keyring.get_keyring()
    if isinstance(backend, (fail.Keyring, null.Keyring)):
        return False
    return not (isinstance(backend, chainer.ChainerBackend) and not backend.backends)


class TokenStore:
    """The grants of ``path`` (``default_store_path()``), secrets in the keyring when
    ``use_keyring`` (default: ``keyring_usable()``). Blocking calls; not thread-safe across
    processes beyond the atomic replace of the file."""

    def __init__(self, path: Path | None = None, *, use_keyring: bool | None = None) -> None:
        self.path = path if path is not None else default_store_path()
        self._use_keyring = use_keyring

    def __repr__(self) -> str:
        return f"<TokenStore {self.path}>"

    @property
    def uses_keyring(self) -> bool:
        """Whether secrets go to the system keyring (decided on first use)."""
        if self._use_keyring is None:
            self._use_keyring = keyring_usable()
        return self._use_keyring

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            with self.path.open("rb") as file:
                data: object = json.loads(file.read(16 * 1024 * 1024))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        table: dict[object, object] = data  # pyright: ignore[reportUnknownVariableType]
        grants = table.get("grants")
        if not isinstance(grants, dict):
            return {}
        entries: dict[object, object] = grants  # pyright: ignore[reportUnknownVariableType]
        return {
            k: cast("dict[str, Any]", v)
            for k, v in entries.items()
            if isinstance(k, str) and isinstance(v, dict)
        }

    def _write(self, grants: Mapping[str, Mapping[str, Any]]) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            json.dump({"version": 1, "grants": grants}, file, indent=1, sort_keys=True)
        os.replace(temporary, self.path)

    def _grant(self, entry: Mapping[str, Any]) -> StoredGrant | None:
        fields: dict[str, Any] = {k: entry.get(k) for k in StoredGrant.__dataclass_fields__}
        if entry.get("secrets_in") == "keyring":
            secrets = self._keyring_get(f"{entry.get('issuer')} {entry.get('resource')}")
            if secrets is None:
                return None
            fields.update({k: secrets.get(k) for k in _SECRET_FIELDS})
        try:
            grant = StoredGrant(**fields)
        except TypeError:
            return None
        names = ("server_url", "resource", "issuer", "token_endpoint", "client_id", "access_token")
        if not all(isinstance(fields.get(n), str) and fields.get(n) for n in names):
            return None
        return grant

    def _keyring_get(self, key: str) -> dict[str, Any] | None:
        import keyring

        try:
            text = keyring.get_password(KEYRING_SERVICE, key)
            value = json.loads(text) if text else None
        except Exception:  # a keyring backend may raise anything; the grant is then absent
            return None
        return value if isinstance(value, dict) else None  # pyright: ignore[reportUnknownVariableType]

    def find(self, server_url: str) -> StoredGrant | None:
        """The grant stored for the MCP server at ``server_url`` (its canonical form), or None."""
        for entry in self._read().values():
            if entry.get("server_url") == server_url:
                grant = self._grant(entry)
                if grant is not None:
                    return grant
        return None

    def entries(self) -> list[dict[str, Any]]:
        """Every stored grant's plain fields (no secret), sorted by server URL."""
        rows = [{k: v for k, v in e.items() if k not in _SECRET_FIELDS} for e in self._read().values()]
        return sorted(rows, key=lambda row: str(row.get("server_url")))

    def save(self, grant: StoredGrant) -> None:
        """Store ``grant`` under its key (replacing what was there for its server URL)."""
        grants = {k: v for k, v in self._read().items() if v.get("server_url") != grant.server_url}
        entry: dict[str, Any] = grant.plain()
        if self.uses_keyring:
            import keyring

            secrets = {k: getattr(grant, k) for k in _SECRET_FIELDS}
            keyring.set_password(KEYRING_SERVICE, grant.key, json.dumps(secrets))
            entry["secrets_in"] = "keyring"
        else:
            entry.update({k: getattr(grant, k) for k in _SECRET_FIELDS})
            entry["secrets_in"] = "file"
        grants[grant.key] = entry
        self._write(grants)

    def remove(self, server_url: str) -> int:
        """Forget every grant of ``server_url``; the number removed."""
        grants = self._read()
        gone = {k: v for k, v in grants.items() if v.get("server_url") == server_url}
        for key, entry in gone.items():
            if entry.get("secrets_in") == "keyring":
                import keyring

                with contextlib.suppress(Exception):  # already gone, or the backend refuses
                    keyring.delete_password(KEYRING_SERVICE, key)
        if gone:
            self._write({k: v for k, v in grants.items() if k not in gone})
        return len(gone)

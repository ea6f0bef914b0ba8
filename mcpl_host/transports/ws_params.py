"""WebSocket connection parameters and URL handling (docs/protocol.md, "WebSocket";
MCPL RFC-004 §4: credentials are the host's to handle and redact).

Rules: the token (query ``token=`` or ``Authorization: Bearer``), every header value and every
credential already in the URL (a query parameter with a secret name: ``token``,
``access_token``, ``api_key``...) are secrets (``WebSocketParameters.secrets()``, decided by
``mcpl_host.secrets.server_secrets``); the URL shown in logs, errors, reports and reprs has
them redacted (``shown_url``). A credential over cleartext ``ws://`` to a host that is not
loopback is worth a warning (``sends_cleartext_credential``). Settings are checked when the
parameters are built; no error message repeats a secret.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal
from urllib.parse import SplitResult, unquote_plus, urljoin, urlsplit

from mcpl_host.limits import (
    DEFAULT_READ_CHUNK_BYTES,
    DEFAULT_WEBSOCKET_KEEPALIVE_INTERVAL_SECONDS,
    DEFAULT_WEBSOCKET_KEEPALIVE_TIMEOUT_SECONDS,
    DEFAULT_WEBSOCKET_OPEN_TIMEOUT_SECONDS,
)
from mcpl_host.secrets import REDACTED, Redactor, redact_url, server_secrets, url_secrets
from mcpl_host.transports.url_checks import check_headers, check_token, split_url

if TYPE_CHECKING:
    import ssl

__all__ = [
    "DEFAULT_KEEPALIVE_INTERVAL_SECONDS",
    "DEFAULT_KEEPALIVE_TIMEOUT_SECONDS",
    "DEFAULT_OPEN_TIMEOUT_SECONDS",
    "READ_CHUNK_BYTES",
    "TOKEN_QUERY_PARAMETER",
    "WebSocketParameters",
    "is_loopback_host",
    "redirect_origins",
    "sends_cleartext_credential",
    "shown_url",
]

#: The defaults of ``Limits.websocket_open_timeout_seconds`` (dialling and the upgrade
#: handshake), ``websocket_keepalive_interval_seconds`` (None disables pings) and
#: ``websocket_keepalive_timeout_seconds``, and of ``read_chunk_bytes`` (one read).
DEFAULT_OPEN_TIMEOUT_SECONDS = DEFAULT_WEBSOCKET_OPEN_TIMEOUT_SECONDS
DEFAULT_KEEPALIVE_INTERVAL_SECONDS = DEFAULT_WEBSOCKET_KEEPALIVE_INTERVAL_SECONDS
DEFAULT_KEEPALIVE_TIMEOUT_SECONDS = DEFAULT_WEBSOCKET_KEEPALIVE_TIMEOUT_SECONDS
READ_CHUNK_BYTES = DEFAULT_READ_CHUNK_BYTES
#: The query parameter that carries a token (``token_in="query"``).
TOKEN_QUERY_PARAMETER = "token"

# Set by the handshake or fixed by HTTP framing: a configured value would clash.
_RESERVED_HEADERS = frozenset({
    "host", "upgrade", "connection", "sec-websocket-key", "sec-websocket-version",
    "sec-websocket-extensions", "sec-websocket-protocol", "content-length", "transfer-encoding",
})  # fmt: skip


@dataclass(frozen=True, slots=True, repr=False)
class WebSocketParameters:
    """How to reach a server over WebSocket.

    ``url``: ``ws://`` or ``wss://`` (no user-info, no fragment). ``token``: a credential
    sent as the query parameter ``token`` (``token_in="query"``) or as ``Authorization:
    Bearer <token>`` (``token_in="header"``). ``headers``: extra request headers (their
    values are treated as secrets). ``open_timeout_seconds``: dial plus upgrade handshake.
    ``keepalive_interval_seconds`` (None: no pings) and ``keepalive_timeout_seconds``.
    ``ssl_context``: for ``wss://``; default ``ssl.create_default_context()``. The repr
    hides the token, the header values and the URL's credentials.

    Raises:
        ValueError: an unusable URL, token, header or timeout; the message never holds a
            secret.
    """

    url: str
    token: str | None = None
    token_in: Literal["query", "header"] = "header"
    headers: Mapping[str, str] = field(default_factory=dict[str, str])
    open_timeout_seconds: float = DEFAULT_OPEN_TIMEOUT_SECONDS
    keepalive_interval_seconds: float | None = DEFAULT_KEEPALIVE_INTERVAL_SECONDS
    keepalive_timeout_seconds: float = DEFAULT_KEEPALIVE_TIMEOUT_SECONDS
    ssl_context: ssl.SSLContext | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "headers", MappingProxyType(dict(self.headers)))
        parts = _split_url(self.url)
        if self.token_in not in ("query", "header"):
            raise ValueError(f"token_in must be 'query' or 'header', not {self.token_in!r}")
        if self.token is not None:
            check_token(self.token)
            if self.token_in == "query" and _url_tokens(parts):
                raise ValueError("a token is given both in the URL and as token=")
            if self.token_in == "header" and any(n.lower() == "authorization" for n in self.headers):
                raise ValueError("token_in='header' and an Authorization header are both given")
        check_headers(self.headers.items(), reserved=_RESERVED_HEADERS, set_by="the WebSocket handshake")
        if not self.open_timeout_seconds > 0 or not self.keepalive_timeout_seconds > 0:
            raise ValueError("open_timeout_seconds and keepalive_timeout_seconds must be positive")
        if self.keepalive_interval_seconds is not None and not self.keepalive_interval_seconds > 0:
            raise ValueError("keepalive_interval_seconds must be positive or None")

    def secrets(self) -> list[str]:
        """Every value to redact (``server_secrets``): the credentials in the URL, each
        header value, and the token (raw and percent-encoded)."""
        return list(server_secrets(url=self.url, token=self.token, headers=self.headers))

    def __repr__(self) -> str:
        return (
            f"WebSocketParameters(url={shown_url(self.url, Redactor(self.secrets()))!r}, "
            f"token={REDACTED if self.token is not None else None!r}, token_in={self.token_in!r}, "
            f"headers={dict.fromkeys(self.headers, REDACTED)!r}, "
            f"open_timeout_seconds={self.open_timeout_seconds!r}, "
            f"keepalive_interval_seconds={self.keepalive_interval_seconds!r}, "
            f"keepalive_timeout_seconds={self.keepalive_timeout_seconds!r})"
        )


def _split_url(url: str) -> SplitResult:
    fragment_error = "a WebSocket URL must not have a fragment (RFC 6455 §3)"
    return split_url(url, kind="WebSocket", schemes=("ws", "wss"), fragment_error=fragment_error)


def _is_token_part(part: str) -> bool:
    """Whether one ``name=value`` part of a query is a ``token`` (any case, any encoding)."""
    return unquote_plus(part.partition("=")[0]).lower() == TOKEN_QUERY_PARAMETER


def _url_tokens(parts: SplitResult) -> list[str]:
    raw = [part.partition("=")[2] for part in parts.query.split("&") if _is_token_part(part)]
    return [value for token in raw for value in (token, unquote_plus(token)) if value]


def shown_url(url: str, redactor: Redactor | None = None) -> str:
    """``url`` as it may appear in logs, errors, reports and reprs: ``redact_url`` (the
    user-info password and every credential query parameter become ``[redacted]``, the
    rest is kept as written), the fragment dropped, then ``redactor`` applied. Never
    raises."""
    try:
        text = redact_url(url.partition("#")[0])
    except (AttributeError, TypeError):  # not a string
        return "<unparsable WebSocket URL>"
    return redactor.redact(text) if redactor is not None else text


_DEFAULT_PORTS = {"ws": 80, "wss": 443, "http": 80, "https": 443}
# Longest origin shown from a server's Location header (bytes it chose).
_MAX_SHOWN_ORIGIN = 300


def _origin(url: str) -> str | None:
    """``scheme://host:port`` of ``url`` (the default port written out), or None when it
    cannot be read or holds anything but printable ASCII (it came from the server)."""
    try:
        parts = urlsplit(url)
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:
        return None
    host = parts.hostname or ""
    origin = f"{parts.scheme.lower()}://{f'[{host}]' if ':' in host else host}:{port}"
    if not host or port is None or len(origin) > _MAX_SHOWN_ORIGIN or not origin.isascii():
        return None
    return origin if origin.isprintable() else None


def redirect_origins(dialled: str, location: str | None) -> tuple[str, str] | None:
    """When an answer to the WebSocket upgrade redirects (``Location``, relative ones
    resolved against ``dialled``) to another origin (scheme, host or port: MCPL §18.6):
    (the dialled origin, the redirect's origin, or ``"an unreadable Location"``). None
    when the origin is the same or no ``Location`` was given. Origins hold no user-info,
    path or query, so no credential. Pure; never raises."""
    if location is None:
        return None
    here = _origin(dialled) or "the URL dialled"
    try:
        there = _origin(urljoin(dialled, location))
    except ValueError:
        there = None
    if there == here:
        return None
    return here, there or "an unreadable Location"


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and addresses in 127.0.0.0/8 or ``::1`` (IPv4-mapped too)."""
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def sends_cleartext_credential(params: WebSocketParameters) -> bool:
    """True when a credential (token, header, ``token`` in the URL) would travel over
    cleartext ``ws://`` to a host that is not loopback."""
    parts = _split_url(params.url)
    has_credential = params.token is not None or bool(params.headers) or bool(url_secrets(params.url))
    return has_credential and parts.scheme.lower() == "ws" and not is_loopback_host(parts.hostname or "")

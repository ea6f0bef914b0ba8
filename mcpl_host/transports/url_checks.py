"""The checks that WebSocket and HTTP connection parameters share, made when the parameters
are built: the URL (RFC 3986; no user-info, no fragment), the token and the configured
headers (RFC 9110 §5.1 token names; no NUL, CR or LF in a value). Pure; no error message
repeats a secret.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import SplitResult, urlsplit

__all__ = ["check_headers", "check_token", "split_url"]

_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_BAD_HEADER_VALUE = re.compile(r"[\x00\r\n]")


def split_url(url: str, *, kind: str, schemes: tuple[str, str], fragment_error: str) -> SplitResult:
    """``url`` split (``urlsplit``), for a ``kind`` URL ("HTTP", "WebSocket") whose scheme
    is one of ``schemes`` (plain, then secure).

    Raises:
        ValueError: it cannot be parsed (a bad port included), has another scheme,
            user-info, no host, or a fragment (``fragment_error``).
    """
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a bad port)
    except (ValueError, TypeError):
        raise ValueError(f"the {kind} URL cannot be parsed") from None
    if parts.scheme.lower() not in schemes:
        plain, secure = schemes
        raise ValueError(f"unsupported URL scheme {parts.scheme!r}: use {plain}:// or {secure}://")
    if "@" in parts.netloc:
        raise ValueError("credentials in the URL's user-info are not supported: pass token= or headers=")
    if not parts.hostname:
        raise ValueError(f"the {kind} URL has no host")
    if parts.fragment or url.endswith("#"):
        raise ValueError(fragment_error)
    return parts


# The application (or a config file) may pass any value whatever the annotations say: these
# take what is really accepted and check it.
def check_token(token: object) -> None:
    """Raises ValueError: ``token`` is not a non-empty string, or holds NUL, CR or LF."""
    if not isinstance(token, str) or not token:
        raise ValueError("the token must be a non-empty string")
    if _BAD_HEADER_VALUE.search(token):
        raise ValueError("the token holds a NUL, CR or LF character")


def check_headers(headers: Iterable[tuple[object, object]], *, reserved: frozenset[str], set_by: str) -> None:
    """Check each (name, value) of ``headers``.

    Raises:
        ValueError: a name that is not an RFC 9110 token, a name in ``reserved`` (lower
            case; its value is set by ``set_by``), or a value that is not a string or holds
            NUL, CR or LF.
    """
    for name, value in headers:
        if not isinstance(name, str) or _HEADER_NAME.match(name) is None:
            raise ValueError(f"invalid header name {name!r}")
        if name.lower() in reserved:
            raise ValueError(f"header {name!r} is set by {set_by}")
        if not isinstance(value, str) or _BAD_HEADER_VALUE.search(value) is not None:
            raise ValueError(f"header {name!r} has a value that is not a string or holds NUL, CR or LF")

"""The host-mediated fetcher of bulk content references (MCPL §19.6, §19.7): the I/O.

The application calls it; nothing in the host does on receipt (§19.7). Rules, in the order a
fetch runs them (docs/protocol.md, "Bulk content references (MCPL §19)"):

1. The id names a record of the server's ``ReferenceRegistry`` (else ``UnknownReference``).
2. A reference past its ``expiresAt`` (or with one that does not parse) is not fetched
   (§19.7.2).
3. The URI's scheme is in ``FetchPolicy.schemes`` (``https`` by default) and httpx can fetch
   it (``http``/``https``); its origin is the connection's dialed origin
   (``FetchPolicy.dialed_origin``) or one of ``FetchPolicy.origins``. Nothing else is
   dialled: not ``file:``, not a link-local or internal address unless named (§19.7 1-2).
4. A claimed ``sizeBytes`` over ``Limits.max_reference_bytes`` is refused without dialling
   (vector 4).
5. GET, redirects followed by hand, at most ``Limits.max_reference_redirects``, each target
   checked as in 3; the connection's credential (``AuthBinding.headers``) goes only to a
   request whose origin is the dialed origin, so it is stripped on any other hop; cookies
   never cross hops (§19.6.1, vector 12). A status other than 200 is an error.
6. The body is read raw and its ``Content-Encoding`` undone by the transports' bounded
   decoder (``content_coding.BodyDecoder``); the decoded bytes are counted as they arrive
   and the transfer is aborted past ``Limits.max_reference_bytes``, whatever ``sizeBytes``
   said (vectors 10, 19). Partial bytes are never returned.
7. A claimed ``digest`` is checked over the decoded octets (§19.3, vector 5, 19); a mismatch
   is an error and the bytes are not returned.
8. The media type is observed: sniffed from the first bytes, else the ``Content-Type``
   header, else ``application/octet-stream``; the claimed ``mimeType`` is testimony only
   (vector 13). The record keeps what was verified (``Verified``).
9. The storage name is the reference id plus an extension of the observed type, never the
   server's ``name`` (§19.7.1, vectors 14, 18); with ``FetchPolicy.store_dir`` the payload
   is written there under that name.

Every failure raises ``ReferenceFetchError`` with a ``reason`` code and a message that names
no credential (the URI is not shown either: it may be a capability, §19.5).
"""

from __future__ import annotations

import base64
import hashlib
import mimetypes
import os
import ssl
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal

import anyio
import httpx

from mcpl_host.limits import Limits
from mcpl_host.mcpl.references import ReferenceRecord, ReferenceRegistry, Verified, origin_of
from mcpl_host.transports.content_coding import ACCEPT_ENCODING
from mcpl_host.transports.http_common import BadContentEncoding, BodyTooLarge, body_decoder, decoded_body

__all__ = ["FetchPolicy", "FetchedPayload", "ReferenceFetchError", "ReferenceFetcher"]

FetchFailure = Literal[
    "expired",
    "scheme",
    "origin",
    "claimed_too_large",
    "too_large",
    "redirects",
    "status",
    "digest",
    "coding",
    "unreachable",
]
#: Schemes httpx can dial at all; another one named by a policy is still refused.
_DIALABLE = ("http", "https")
#: Magic numbers of the media types sniffed (vector 13).
_SNIFFED: tuple[tuple[bytes, int, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", 0, "image/png"),
    (b"\xff\xd8\xff", 0, "image/jpeg"),
    (b"GIF87a", 0, "image/gif"),
    (b"GIF89a", 0, "image/gif"),
    (b"%PDF-", 0, "application/pdf"),
    (b"OggS", 0, "audio/ogg"),
    (b"fLaC", 0, "audio/flac"),
    (b"ID3", 0, "audio/mpeg"),
)
_EXTENSIONS = {"audio/wav": ".wav", "image/webp": ".webp", "audio/flac": ".flac", "audio/ogg": ".ogg"}


class ReferenceFetchError(Exception):
    """A fetch that did not give the described payload. ``reason``: ``expired``, ``scheme``,
    ``origin``, ``claimed_too_large``, ``too_large``, ``redirects``, ``status``, ``digest``,
    ``coding`` or ``unreachable``; the message names the reference id and the bound, never
    the URI or a credential."""

    def __init__(self, reason: FetchFailure, message: str) -> None:
        super().__init__(message)
        self.reason: FetchFailure = reason


@dataclass(frozen=True, slots=True)
class FetchPolicy:
    """What the fetcher may dial (module rules 3-5): ``schemes`` (lower case), ``origins``
    (``scheme://host[:port]``) besides the connection's dialed origin when ``dialed_origin``;
    ``store_dir``: where payloads are written (None: only returned); ``ssl_context``: how
    ``https`` is verified (None: the system's)."""

    schemes: tuple[str, ...] = ("https",)
    origins: tuple[str, ...] = ()
    dialed_origin: bool = True
    store_dir: str | None = None
    ssl_context: ssl.SSLContext | None = None


@dataclass(frozen=True, slots=True)
class FetchedPayload:
    """A verified payload: ``reference_id``, ``data`` (the decoded octets), ``media_type``
    (observed), ``digest_verified`` (None: no digest claimed), ``storage_name`` (host-made),
    ``path`` (where it was written, or None)."""

    reference_id: str
    data: bytes
    media_type: str
    digest_verified: bool | None
    storage_name: str
    path: str | None = None


def _sniffed(data: bytes) -> str | None:
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "audio/wav"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    for magic, offset, media_type in _SNIFFED:
        if data[offset : offset + len(magic)] == magic:
            return media_type
    return None


def _media_type(data: bytes, content_type: str | None) -> str:
    sniffed = _sniffed(data)
    if sniffed is not None:
        return sniffed
    declared = (content_type or "").split(";", 1)[0].strip().lower()
    return declared if declared and len(declared) <= 255 else "application/octet-stream"


def _storage_name(reference_id: str, media_type: str) -> str:
    extension = _EXTENSIONS.get(media_type) or mimetypes.guess_extension(media_type) or ".bin"
    return reference_id + extension


def _digest(data: bytes) -> str:
    """The §17.2 encoding of SHA-256 over ``data``: ``sha256:`` + unpadded base64url."""
    return "sha256:" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


class ReferenceFetcher:
    """Fetches references of one server's registry (module rules).

    Args:
        registry: the server's ``ReferenceRegistry`` (``HostedServer.references``).
        policy: ``FetchPolicy``.
        limits: the server's ``Limits`` (``max_reference_bytes``, ``max_reference_redirects``,
            ``reference_fetch_timeout_seconds``, ``http_connect_timeout_seconds``,
            ``read_chunk_bytes``, ``max_content_codings``).
    """

    def __init__(
        self, registry: ReferenceRegistry, policy: FetchPolicy | None = None, limits: Limits | None = None
    ) -> None:
        self.registry = registry
        self.policy = policy or FetchPolicy()
        self.limits = limits or Limits()

    def _check_target(self, record: ReferenceRecord, url: str) -> str:
        """The origin of ``url`` when the policy lets it be dialled; raises otherwise."""
        scheme = url.split(":", 1)[0].lower() if ":" in url else ""
        if scheme not in self.policy.schemes or scheme not in _DIALABLE:
            raise ReferenceFetchError("scheme", f"{record.id}: the scheme of its location is not allowed")
        origin = origin_of(url)
        allowed = set(self.policy.origins)
        if self.policy.dialed_origin and record.binding.origin is not None:
            allowed.add(record.binding.origin)
        if origin is None or origin not in allowed:
            raise ReferenceFetchError("origin", f"{record.id}: the origin of its location is not allowed")
        return origin

    async def fetch(self, reference_id: str) -> FetchedPayload:
        """The verified payload of ``reference_id`` (module rules).

        Raises:
            UnknownReference: no such record (never issued, or evicted).
            ReferenceFetchError: refused or failed (``reason`` says which rule).
        """
        record = self.registry.lookup(reference_id)
        fields, limits = record.fields, self.limits
        if fields.expired(datetime.now(timezone.utc)):
            raise ReferenceFetchError("expired", f"{record.id}: past its expiresAt (or it does not parse)")
        self._check_target(record, fields.uri)
        ceiling = limits.max_reference_bytes
        if fields.size_bytes is not None and fields.size_bytes > ceiling:
            raise ReferenceFetchError(
                "claimed_too_large",
                f"{record.id}: its claimed size is over limits.max_reference_bytes = {ceiling}",
            )
        with anyio.fail_after(limits.reference_fetch_timeout_seconds):
            data, content_type = await self._get(record, ceiling)
        digest_verified: bool | None = None
        media_type = _media_type(data, content_type)
        if fields.digest is not None:
            digest_verified = _digest(data) == fields.digest
            if not digest_verified:
                record.verified = Verified(len(data), False, media_type)
                raise ReferenceFetchError(
                    "digest", f"{record.id}: the fetched octets do not match its digest"
                )
        record.verified = Verified(len(data), digest_verified, media_type)
        name = _storage_name(record.id, media_type)
        path = None
        if self.policy.store_dir is not None:
            path = os.path.join(self.policy.store_dir, name)
            await anyio.Path(path).write_bytes(data)
        return FetchedPayload(record.id, data, media_type, digest_verified, name, path)

    async def _get(self, record: ReferenceRecord, ceiling: int) -> tuple[bytes, str | None]:
        limits = self.limits
        timeout = httpx.Timeout(
            limits.reference_fetch_timeout_seconds, connect=limits.http_connect_timeout_seconds
        )
        verify: ssl.SSLContext | bool = self.policy.ssl_context or True
        url = record.fields.uri
        async with httpx.AsyncClient(
            follow_redirects=False, timeout=timeout, verify=verify, trust_env=False
        ) as client:
            for _hop in range(limits.max_reference_redirects + 1):
                origin = self._check_target(record, url)
                headers = {"Accept-Encoding": ACCEPT_ENCODING}
                if origin == record.binding.origin:  # §19.6.1: only the dialed origin
                    headers.update(record.binding.headers)
                client.cookies.clear()
                try:
                    async with client.stream("GET", url, headers=headers) as response:
                        if response.is_redirect and "location" in response.headers:
                            url = str(response.url.join(response.headers["location"]))
                            continue
                        if response.status_code != 200:
                            raise ReferenceFetchError(
                                "status", f"{record.id}: answered HTTP {response.status_code}"
                            )
                        return await self._body(record, response, ceiling), response.headers.get(
                            "content-type"
                        )
                except httpx.HTTPError as exc:
                    raise ReferenceFetchError(
                        "unreachable", f"{record.id}: could not be fetched ({type(exc).__name__})"
                    ) from None
        raise ReferenceFetchError(
            "redirects",
            f"{record.id}: over limits.max_reference_redirects = {limits.max_reference_redirects}",
        )

    async def _body(self, record: ReferenceRecord, response: httpx.Response, ceiling: int) -> bytes:
        limits = self.limits
        buffer = bytearray()
        try:
            decoder = body_decoder(response, ceiling, limits.read_chunk_bytes, limits.max_content_codings)
            async for piece in decoded_body(response, decoder, "limits.max_reference_bytes"):
                buffer += piece
                if len(buffer) > ceiling:
                    break
        except BodyTooLarge:
            buffer = bytearray(ceiling + 1)
        except BadContentEncoding:
            raise ReferenceFetchError("coding", f"{record.id}: its content coding is not readable") from None
        if len(buffer) > ceiling:  # leaving the stream closes the connection: the transfer aborts
            raise ReferenceFetchError(
                "too_large", f"{record.id}: over limits.max_reference_bytes = {ceiling}"
            )
        return bytes(buffer)

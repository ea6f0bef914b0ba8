"""Bulk content references (MCPL §19, RFC-005 rev 3): reading, the registry, the stub. Pure.

Rules (docs/protocol.md, "Bulk content references (MCPL §19)"):

- **Which blocks are references** (§19.3, §19.8.1): a ``resource`` block with a ``uri``; an
  ``image`` or ``audio`` block in ``uri`` form; an MCP ``resource_link`` (read as a reference
  with no ``disposition``, ``size`` as ``sizeBytes``). Anything else is not a reference and
  passes as it is (``Passed``), except:
- **Fail closed** (§19.8, vector 2): an inline block (``image``/``audio`` with ``data``, an
  MCP embedded ``resource``) that claims a ``disposition``, or an ``image``/``audio`` block
  with both ``data`` and ``uri``, is ``Withheld``: nothing of it reaches the model-visible
  form. A reference whose ``uri`` is not a string of at most 4096 characters is rejected
  whole (``Withheld``), and so is a content entry that is not an object.
- **One invalid-field rule** (§19.8, vectors 15, 17): an optional field that breaks its
  App. B.1 constraint is dropped (its name in ``ReferenceFields.dropped``); the block and a
  valid ``disposition`` stay. ``sizeBytes`` is an integer in [0, 2^53-1] (a float with no
  fraction counts as an integer, as JSON Schema reads it); ``mimeType`` and ``name`` are
  strings of at most 255 characters, ``expiresAt`` of at most 64, ``digest`` matches
  ``^sha256:[A-Za-z0-9_-]{43}$``, ``disposition`` is ``never`` or ``ref``.
- **Expiry** (§19.7.2, vector 16): ``expiresAt`` is read as ISO 8601 (no offset: UTC); one
  that does not parse makes the reference already expired, never immortal.
- **The stub** (§19.5): a host-made text block ``[reference ref_…: name "…", type … (claimed),
  size … bytes (claimed); from …]`` carrying its id in ``_meta["mcpl-host/referenceId"]``.
  Every server-supplied string in it (``name``, ``mimeType``, the provenance) has its control
  and bidi characters removed (``logging.strip_unsafe``) and is cut to
  ``Limits.reference_label_chars``, marked with ``logging.CUT_MARKER``, after the server's
  secrets are redacted (``secrets.Redactor``); so a stub is at
  most about 3 labels plus 120 characters long, whatever the server sent. The ``uri`` is
  never in a stub, whatever the ``disposition`` (the safe default of §19.5; under ``never``
  it is binding).
- **The registry** (§19.5, §19.6.2, vector 20): one record per reference received (the same
  block received twice gives two records); ids are ``ref_`` + a random prefix of the
  registry + a counter, so never reused; past ``Limits.max_reference_records`` the oldest is
  evicted, and looking up an evicted or unknown id raises ``UnknownReference``.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal
from urllib.parse import urlsplit

from mcpl_host.jsonrpc.values import is_list_or_tuple, is_mapping
from mcpl_host.limits import DEFAULT_MAX_REFERENCE_RECORDS, DEFAULT_REFERENCE_LABEL_CHARS
from mcpl_host.logging import CUT_MARKER, strip_unsafe
from mcpl_host.secrets import Redactor

__all__ = [
    "MAX_SIZE_BYTES",
    "MODEL_CONTENT",
    "REFERENCE_ID_META",
    "AuthBinding",
    "BlockReading",
    "ContentView",
    "Disposition",
    "Passed",
    "Reference",
    "ReferenceFields",
    "ReferenceRecord",
    "ReferenceRegistry",
    "UnknownReference",
    "Verified",
    "Withheld",
    "display_label",
    "origin_of",
    "read_block",
    "reference_ids",
    "stub_text",
]

Disposition = Literal["never", "ref"]
#: App. B.1: the largest ``sizeBytes`` (2^53 - 1, the JSON-safe range).
MAX_SIZE_BYTES = 2**53 - 1
#: App. B.1 emitter maxima, in characters.
MAX_URI_CHARS = 4096
MAX_MIME_TYPE_CHARS = 255
MAX_NAME_CHARS = 255
MAX_EXPIRES_AT_CHARS = 64
_DIGEST = re.compile(r"sha256:[A-Za-z0-9_-]{43}")
#: The key of a stub block's ``_meta`` that holds its reference id.
REFERENCE_ID_META = "mcpl-host/referenceId"
#: The key of the host's copy of a ``push/event``'s params and of a ``channels/incoming``
#: message (what ``HostHandlers`` get) that holds the model-visible form of its content.
MODEL_CONTENT = "modelContent"
_MEDIA_TYPES = ("image", "audio")


class UnknownReference(LookupError):
    """MCPL §19.5: a reference id that names no record (never issued, or evicted). The
    message names the id (host-made, never a server value)."""

    def __init__(self, reference_id: str) -> None:
        super().__init__(f"unknown reference {reference_id!r}")
        self.reference_id = reference_id


@dataclass(frozen=True, slots=True)
class ReferenceFields:
    """The testimony of one reference block (§19.3), after the invalid-field rule: ``kind``
    (the block's ``type``: ``resource``, ``image``, ``audio`` or ``resource_link``), ``uri``,
    then each optional field or None: ``mime_type``, ``size_bytes``, ``digest``,
    ``expires_at`` (as sent), ``name``, ``disposition``; ``dropped``: the optional fields
    rejected (App. B.1 names). Every value is a claim, not a fact."""

    kind: str
    uri: str = field(repr=False)  # it may be a capability (§19.5)
    mime_type: str | None = None
    size_bytes: int | None = None
    digest: str | None = None
    expires_at: str | None = None
    name: str | None = None
    disposition: Disposition | None = None
    dropped: tuple[str, ...] = ()

    def expired(self, now: datetime) -> bool:
        """Whether the reference is past its ``expiresAt`` at ``now`` (an aware datetime);
        an ``expiresAt`` that does not parse as ISO 8601 is already past (§19.7.2)."""
        if self.expires_at is None:
            return False
        text = self.expires_at
        if text[-1:] in ("Z", "z"):  # Python 3.10 reads no "Z"
            text = text[:-1] + "+00:00"
        try:
            horizon = datetime.fromisoformat(text)
        except ValueError:
            return True
        if horizon.tzinfo is None:
            horizon = horizon.replace(tzinfo=timezone.utc)
        return horizon <= now


@dataclass(frozen=True, slots=True)
class Passed:
    """A block that is not a reference: it goes to the model-visible form as it is."""

    block: Any


@dataclass(frozen=True, slots=True)
class Withheld:
    """A block that fails closed (module rules): ``reason``, a host sentence naming no
    server value."""

    reason: str


@dataclass(frozen=True, slots=True)
class Reference:
    """A reference block (§19.3): its ``fields``."""

    fields: ReferenceFields


BlockReading = Passed | Withheld | Reference


def _size(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and 0 <= value <= MAX_SIZE_BYTES:
        return value
    return None


def _string(value: object, most: int) -> str | None:
    return value if isinstance(value, str) and len(value) <= most else None


def _fields(block: Mapping[str, Any], kind: str, uri: str) -> ReferenceFields:
    """The optional fields of a reference block under the one invalid-field rule (§19.8)."""
    dropped: list[str] = []
    link = kind == "resource_link"
    size_key = "size" if link else "sizeBytes"

    def take(key: str, value: Any) -> Any:
        if key in block and value is None:
            dropped.append(key)
        return value

    mime_type = take("mimeType", _string(block.get("mimeType"), MAX_MIME_TYPE_CHARS))
    size = take(size_key, _size(block.get(size_key)))
    raw_digest = block.get("digest")
    digest = raw_digest if isinstance(raw_digest, str) and _DIGEST.fullmatch(raw_digest) else None
    take("digest", digest)
    expires_at = take("expiresAt", _string(block.get("expiresAt"), MAX_EXPIRES_AT_CHARS))
    name = take("name", _string(block.get("name"), MAX_NAME_CHARS))
    raw_disposition = block.get("disposition")
    disposition: Disposition | None = None
    if raw_disposition == "never" or raw_disposition == "ref":
        disposition = raw_disposition
    if not link:  # §19.8.1: a ResourceLink has no disposition (absent testimony)
        take("disposition", disposition)
    return ReferenceFields(
        kind=kind,
        uri=uri,
        mime_type=mime_type,
        size_bytes=size,
        digest=digest,
        expires_at=expires_at,
        name=name,
        disposition=None if link else disposition,
        dropped=tuple(dropped),
    )


def read_block(block: object) -> BlockReading:
    """What one content block of a server→host lane is (module rules; §10.3, §19.3, §19.8)."""
    if not is_mapping(block):
        return Withheld("a content entry that is not an object")
    kind = block.get("type")
    if kind not in ("resource", "resource_link", *_MEDIA_TYPES):
        return Passed(block)
    claims = "disposition" in block
    inline = "data" in block if kind in _MEDIA_TYPES else (kind == "resource" and "uri" not in block)
    if inline and (claims or "uri" in block):
        reason = "claimed a disposition" if claims else "carried both data and uri"
        return Withheld(f"an inline {kind} block {reason}")
    if inline:
        return Passed(block)
    uri = block.get("uri")
    if not isinstance(uri, str) or len(uri) > MAX_URI_CHARS:
        return Withheld(f"a {kind} reference whose uri is invalid")
    return Reference(_fields(block, str(kind), uri))


@dataclass(frozen=True, slots=True)
class AuthBinding:
    """The host-private authentication context of the connection that delivered a
    reference (§19.6.1): ``origin`` it was dialed to (``scheme://host[:port]``, lower case,
    ``ws``/``wss`` read as ``http``/``https``; None for stdio), and ``headers`` the
    host-mediated fetcher may send to exactly that origin. Never in a repr."""

    origin: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict[str, str], repr=False)

    def __repr__(self) -> str:
        shown = "with credentials" if self.headers else "no credentials"
        return f"AuthBinding(origin={self.origin!r}, {shown})"


@dataclass(frozen=True, slots=True)
class Verified:
    """What a fetch established (§19.6.2): ``size`` (decoded bytes read), ``digest_verified``
    (True: it matched; None: no digest was claimed), ``media_type`` (observed)."""

    size: int
    digest_verified: bool | None
    media_type: str


@dataclass(eq=False, slots=True)
class ReferenceRecord:
    """The host-private record of one reference received (§19.1, §19.6.2): ``id``,
    ``fields`` (testimony), ``provenance`` (host sentence, e.g. ``tool `render```),
    ``binding`` (``AuthBinding``), ``verified`` (after a fetch, else None)."""

    id: str
    fields: ReferenceFields
    provenance: str
    binding: AuthBinding = field(default_factory=AuthBinding, repr=False)
    verified: Verified | None = None


class ReferenceRegistry:
    """The reference records of one server, bounded (module rules).

    Args:
        max_records: ``Limits.max_reference_records``.
    """

    def __init__(self, max_records: int = DEFAULT_MAX_REFERENCE_RECORDS) -> None:
        self._max = max_records
        self._records: OrderedDict[str, ReferenceRecord] = OrderedDict()
        self._prefix = os.urandom(3).hex()
        self._issued = 0

    def __len__(self) -> int:
        return len(self._records)

    def register(self, fields: ReferenceFields, provenance: str, binding: AuthBinding) -> ReferenceRecord:
        """A new record (a new id) for ``fields``; evicts the oldest past the bound."""
        self._issued += 1
        record = ReferenceRecord(f"ref_{self._prefix}{self._issued:x}", fields, provenance, binding)
        self._records[record.id] = record
        while len(self._records) > self._max:
            self._records.popitem(last=False)
        return record

    def lookup(self, reference_id: str) -> ReferenceRecord:
        """The record of ``reference_id``; raises ``UnknownReference``."""
        record = self._records.get(reference_id)
        if record is None:
            raise UnknownReference(reference_id)
        return record


_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_of(url: str) -> str | None:
    """``scheme://host[:port]`` of ``url`` (RFC 6454 §4), lower case, the default port left
    out, ``ws``/``wss`` read as ``http``/``https`` (§19.6.1: the dialed origin of a WebSocket
    connection serves its references over HTTP); None when it has no host or a bad port."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme.lower(), parts.scheme.lower())
    host = (parts.hostname or "").lower()
    if not host:
        return None
    if ":" in host:
        host = f"[{host}]"
    shown = "" if port is None or port == _DEFAULT_PORTS.get(scheme) else f":{port}"
    return f"{scheme}://{host}{shown}"


def display_label(
    text: str, most: int = DEFAULT_REFERENCE_LABEL_CHARS, redactor: Redactor | None = None
) -> str:
    """``text`` as a display label (§19.5, §19.7.1): the server's secrets redacted
    (``redactor``), control and bidi characters removed, then cut to ``most`` characters and
    marked with ``CUT_MARKER`` when cut."""
    head = text[: most * 4] if len(text) > most * 4 else text
    clean = strip_unsafe(redactor.redact(head) if redactor is not None else head)
    return clean if len(clean) <= most else clean[:most] + CUT_MARKER


def stub_text(
    record: ReferenceRecord, most: int = DEFAULT_REFERENCE_LABEL_CHARS, redactor: Redactor | None = None
) -> str:
    """The model-visible line of ``record`` (module rules): id, labels, claims, provenance;
    never the ``uri``."""
    fields = record.fields
    parts: list[str] = []
    if fields.name is not None:
        parts.append(f'name "{display_label(fields.name, most, redactor)}"')
    if fields.mime_type is not None:
        parts.append(f"type {display_label(fields.mime_type, most, redactor)} (claimed)")
    if fields.size_bytes is not None:
        parts.append(f"size {fields.size_bytes} bytes (claimed)")
    described = ", ".join(parts) if parts else "no description"
    return f"[reference {record.id}: {described}; from {display_label(record.provenance, most, redactor)}]"


def _withheld_text(reason: str) -> str:
    return f"[content withheld: {reason}]"


def reference_ids(blocks: Sequence[Any]) -> list[str]:
    """The reference ids of the stub blocks in a model-visible form, in order."""
    found: list[str] = []
    for block in blocks:
        meta = block.get("_meta") if is_mapping(block) else None
        ref = meta.get(REFERENCE_ID_META) if is_mapping(meta) else None
        if isinstance(ref, str):
            found.append(ref)
    return found


class ContentView:
    """Turns the content blocks of one lane into their model-visible form, registering each
    reference (§19.4, §19.5): the one place stubs are made. Never fetches.

    Args:
        registry: the server's ``ReferenceRegistry``.
        binding: the delivering connection's ``AuthBinding``.
        label_chars: ``Limits.reference_label_chars``.
        redactor: the server's ``Redactor`` (its secrets never reach a stub).
    """

    def __init__(
        self,
        registry: ReferenceRegistry,
        binding: AuthBinding | None = None,
        *,
        label_chars: int = DEFAULT_REFERENCE_LABEL_CHARS,
        redactor: Redactor | None = None,
    ) -> None:
        self.registry = registry
        self._binding = binding or AuthBinding()
        self._label_chars = label_chars
        self._redactor = redactor

    def model_content(self, content: object, provenance: str) -> list[dict[str, Any]]:
        """The model-visible form of ``content`` (a ``ContentBlock[]``; a string is one text
        block, §10.3; anything else is withheld whole): text and inline blocks as sent, a
        stub text block per reference (its id in ``_meta``), a withheld note per block that
        fails closed. ``provenance``: a host sentence (``tool `x```), cut like a label."""
        if isinstance(content, str):
            return [{"type": "text", "text": content}]
        if not is_list_or_tuple(content):
            return [{"type": "text", "text": _withheld_text("content that is not a list of blocks")}]
        view: list[dict[str, Any]] = []
        for block in content:
            reading = read_block(block)
            if isinstance(reading, Passed):
                view.append(dict(reading.block))
            elif isinstance(reading, Withheld):
                view.append({"type": "text", "text": _withheld_text(reading.reason)})
            else:
                record = self.registry.register(reading.fields, provenance, self._binding)
                text = stub_text(record, self._label_chars, self._redactor)
                view.append({"type": "text", "text": text, "_meta": {REFERENCE_ID_META: record.id}})
        return view

"""What ``--text`` leaves out (``call``, ``read``, ``prompt``): one line for stderr naming the
items that have no text form, so that an image is never dropped without a word. Pure.

Rules of this module:

- An item is a content block (MCP 2025-11-25 "Tools", "Prompts": ``image``, ``audio``,
  ``resource_link``, ``resource``, or a type this host does not know) or a resource's
  contents (``resources/read``: a ``blob``); a ``text`` block and text contents are shown,
  so never named.
- The line counts the items per kind, in the order first met, and shows each one's media
  type, size (the bytes its base64 ``data`` or ``blob`` decodes to) or URI, at most
  ``MAX_DETAILS`` per kind: ``1 image (image/png, 12 KiB) not shown; leave out --text to see
  it in the JSON``.
- Every value shown is a server's: the caller passes the items redacted, and each value is
  escaped and cut (``report.safe_text``) here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

from mcpl_host.report import safe_text

__all__ = ["MAX_DETAILS", "describe_size", "not_shown"]

#: Items described in parentheses per kind; the others are only counted.
MAX_DETAILS = 3
#: Characters of a media type or URI shown.
_MAX_VALUE_CHARS = 80
#: kind -> (one, many)
_WORDS = {
    "image": ("image", "images"),
    "audio": ("audio clip", "audio clips"),
    "resource_link": ("resource link", "resource links"),
    "resource": ("embedded resource", "embedded resources"),
    "blob": ("binary content", "binary contents"),
}


def describe_size(size: int) -> str:
    """``size`` bytes for a person: ``512 bytes``, ``12 KiB``, ``3.4 MiB``."""
    if size < 1024:
        return f"{size} byte{'' if size == 1 else 's'}"
    if size < 1024 * 1024:
        return f"{round(size / 1024)} KiB"
    return f"{size / (1024 * 1024):.1f} MiB"


def _decoded_size(data: object) -> int | None:
    """The bytes base64 ``data`` decodes to (RFC 4648 §4), or None when it is no string."""
    if not isinstance(data, str):
        return None
    text = "".join(data.split())  # line breaks a MIME encoder may have put in
    padding = len(text) - len(text.rstrip("="))
    return max(len(text) * 3 // 4 - padding, 0)


def _kind_and_detail(item: Mapping[str, Any]) -> tuple[str, str] | None:
    """The kind of an item left out and its detail, or None for an item that is shown."""
    kind = item.get("type")
    if kind is None and "uri" in item:  # resources/read contents
        if isinstance(item.get("text"), str):
            return None
        kind, data = "blob", item.get("blob")
    elif kind == "text" and isinstance(item.get("text"), str):
        return None
    else:
        data = item.get("data")
    parts: list[str] = []
    source: Mapping[str, Any] = item
    if kind == "resource" and isinstance(item.get("resource"), Mapping):
        source = item["resource"]
        data = source.get("blob", source.get("text"))
    if kind in ("resource_link", "resource") and source.get("uri") is not None:
        parts.append(safe_text(source.get("uri"), max_chars=_MAX_VALUE_CHARS))
    if source.get("mimeType") is not None:
        parts.append(safe_text(source.get("mimeType"), max_chars=_MAX_VALUE_CHARS))
    size = (
        len(data.encode()) if kind == "resource" and isinstance(data, str) and "blob" not in source else None
    )
    size = _decoded_size(data) if size is None else size
    if size is not None:
        parts.append(describe_size(size))
    shown_kind = kind if isinstance(kind, str) and kind in _WORDS else f"type {safe_text(kind, max_chars=40)}"
    return shown_kind, ", ".join(parts)


def not_shown(items: Iterable[object]) -> str | None:
    """The line naming what ``--text`` left out of ``items`` (module rules), or None when
    every item was shown."""
    kinds: dict[str, list[str]] = {}
    for item in items:
        if not isinstance(item, Mapping):
            continue
        found = _kind_and_detail(cast("Mapping[str, Any]", item))
        if found is not None:
            kinds.setdefault(found[0], []).append(found[1])
    if not kinds:
        return None
    phrases: list[str] = []
    for kind, details in kinds.items():
        one, many = _WORDS.get(kind, (f"block of {kind}", f"blocks of {kind}"))
        named = "; ".join(detail for detail in details[:MAX_DETAILS] if detail)
        more = f"; {len(details) - MAX_DETAILS} more" if len(details) > MAX_DETAILS and named else ""
        phrases.append(
            f"{len(details)} {one if len(details) == 1 else many}" + (f" ({named}{more})" if named else "")
        )
    listed = phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " and " + phrases[-1]
    total = sum(len(details) for details in kinds.values())
    return f"{listed} not shown; leave out --text to see {'it' if total == 1 else 'them'} in the JSON"

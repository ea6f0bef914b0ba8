"""``mcpl://`` endpoint URIs (MCPL §18): the string-level rejections, the resolution to the
``wss://`` transport URL and the canonical ``mcpl://`` form. Pure: no lookup, no I/O.

Rules (docs/protocol.md, "Endpoint URIs (MCPL §18)"):

1. Rejected on the string as written, before any substitution or parsing (§18.1.1): a
   fragment (any ``#``), user-info (an ``@`` in the authority), an empty authority
   (``mcpl:///x``: a WHATWG parser would make ``x`` the host), and a dot segment: ``.``,
   ``..`` or a percent-encoded spelling of either (``%2e``, ``%2E``, ``.%2e``, ...) as a
   complete path segment (§18.2.2). Segments are split on ``/`` and on ``\\`` (a WHATWG
   parser reads a backslash as ``/`` in a special scheme's path, so ``a\\..\\b`` would lose a
   segment too); ``a%2fb`` is one segment and stays valid. Also refused here (docs/protocol.md U2): an
   ASCII tab, line feed, carriage return, other control character or a space anywhere, and
   an ``mcpl:`` without ``//`` (``mcpl:x``), because a WHATWG parser removes or repairs
   them silently, which could again change the path or the host after the checks.
2. ``mcpl:`` becomes ``wss:`` (§18.2 step 2; the scheme is matched in any case, ``MCPL://``
   too), and the result is parsed by ada (``ada-url``), a WHATWG URL parser (step 3): host
   lowercased, IDNA A-labels, port 443 elided, an empty path made ``/``, IPv6 lowercased.
   The query is what the parser gives: order and duplicates kept, never re-serialized.
3. The canonical form is the parsed value with ``wss:`` mapped back to ``mcpl:`` (step 4).

``resolve_endpoint_uri`` returns the three values of §18.4 as one ``EndpointURI``, each kept
apart. Resolving grants nothing (§18.6): the record holds no setting of the connection.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["EndpointURI", "EndpointURIError", "RejectionRule", "is_mcpl_uri", "resolve_endpoint_uri"]

SCHEME: Final = "mcpl"
#: The scheme an ``mcpl://`` URI resolves to (MCPL §18.1: never ``ws``).
TRANSPORT_SCHEME: Final = "wss"

RejectionRule = Literal[
    "fragment", "userinfo", "empty-authority", "dot-segment", "port", "characters", "form", "unparsable"
]

# A dot segment, written plainly or percent-encoded (MCPL §18.2.2), as a whole segment.
_DOT_SEGMENT = re.compile(r"(?:\.|%2e){1,2}\Z", re.IGNORECASE)
# What a WHATWG parser strips or removes from its input without an error (URL Standard,
# "basic URL parser": leading and trailing C0 controls and spaces, every tab and newline).
_CONTROL_OR_SPACE = re.compile(r"[\x00-\x20\x7f]")
_PORT = re.compile(r":(\d+)\Z")
_MAX_PORT = 65535


class EndpointURIError(ValueError):
    """An ``mcpl://`` URI the host refuses. ``rule`` names the rule (``"fragment"``,
    ``"userinfo"``, ``"empty-authority"``, ``"dot-segment"``: MCPL §18.1.1; ``"port"``: out of
    range, §18.7 vector 20; ``"characters"``, ``"form"``: docs/protocol.md U2;
    ``"unparsable"``: the WHATWG parser refused it, §18.2 step 3). The message says which
    rule and never repeats the URI (its query may hold a credential)."""

    def __init__(self, rule: RejectionRule, message: str) -> None:
        super().__init__(message)
        self.rule: RejectionRule = rule


@dataclass(frozen=True, slots=True)
class EndpointURI:
    """The three values of one endpoint (MCPL §18.4), never derived from one another after
    resolution: ``configured_uri``, exactly as written; ``canonical_uri``, the §18.2
    ``mcpl://`` form (equality, "already connected"); ``resolved_transport``, the ``wss://``
    URL dialled. The values may hold a credential in their query: show them through the
    server's redactor."""

    configured_uri: str
    canonical_uri: str
    resolved_transport: str

    def to_json(self) -> dict[str, str]:
        """``{"configuredUri", "canonicalUri", "resolvedTransport"}`` (MCPL §18.4's names)."""
        return {
            "configuredUri": self.configured_uri,
            "canonicalUri": self.canonical_uri,
            "resolvedTransport": self.resolved_transport,
        }


def is_mcpl_uri(text: str) -> bool:
    """Whether ``text`` is written with the ``mcpl`` scheme (any case), so that
    ``resolve_endpoint_uri`` decides it."""
    return text[: len(SCHEME) + 1].lower() == f"{SCHEME}:"


def resolve_endpoint_uri(text: str) -> EndpointURI:
    """Resolve an ``mcpl://`` URI (MCPL §18.2): reject, substitute, parse, canonicalize.

    Raises:
        EndpointURIError: ``text`` is not an ``mcpl://`` URI, or breaks a rule of §18.1.1
            (checked on the string, before anything else), or the WHATWG parser refuses it.
    """
    _reject(text)
    transport = f"{TRANSPORT_SCHEME}:{text[len(SCHEME) + 1 :]}"
    import ada_url  # the WHATWG parser (a C extension): an mcpl:// URI's first use

    try:
        parsed = ada_url.URL(transport)
    except ValueError:
        raise _unparsable(text) from None
    resolved = parsed.href
    if parsed.protocol != f"{TRANSPORT_SCHEME}:" or not parsed.hostname:  # pragma: no cover
        raise EndpointURIError("unparsable", "the mcpl:// URI did not resolve to a wss:// URL (MCPL §18.2)")
    canonical = f"{SCHEME}:{resolved[len(TRANSPORT_SCHEME) + 1 :]}"
    return EndpointURI(configured_uri=text, canonical_uri=canonical, resolved_transport=resolved)


def _reject(text: str) -> None:
    """The string-level checks of MCPL §18.1.1 (and E2), in the order of the rules."""
    if not is_mcpl_uri(text):
        raise EndpointURIError("form", "not an mcpl:// URI")
    if _CONTROL_OR_SPACE.search(text):
        raise EndpointURIError(
            "characters",
            "the mcpl:// URI holds a space or a control character, which a URL parser would "
            "drop silently (docs/protocol.md U2)",
        )
    rest = text[len(SCHEME) + 1 :]
    if not rest.startswith("//"):
        raise EndpointURIError("form", "an mcpl URI must start with mcpl:// (MCPL §18.1)")
    if "#" in rest:
        raise EndpointURIError("fragment", "the mcpl:// URI has a fragment (rejected by MCPL §18.1.1)")
    after = rest[2:]
    end = len(after)
    for stop in "/?\\":
        at = after.find(stop)
        if at != -1:
            end = min(end, at)
    authority, path = after[:end], after[end:].partition("?")[0]
    if "@" in authority:
        raise EndpointURIError(
            "userinfo", "the mcpl:// URI has user-info (user@ or user:password@; rejected by MCPL §18.1.1)"
        )
    if not authority:
        raise EndpointURIError(
            "empty-authority",
            "the mcpl:// URI has an empty authority: no host is named (rejected by MCPL §18.1.1; "
            "a parser would take the first path segment as the host)",
        )
    if any(_DOT_SEGMENT.match(segment) for segment in re.split(r"[/\\]", path)):
        raise EndpointURIError(
            "dot-segment",
            "the mcpl:// URI has a dot segment (., .. or a percent-encoded one; rejected by "
            "MCPL §18.1.1 and §18.2.2)",
        )


def _unparsable(text: str) -> EndpointURIError:
    authority = text[len(SCHEME) + 3 :]
    for stop in "/?\\":
        authority = authority.partition(stop)[0]
    port = _PORT.search(authority)
    if port is not None and not authority.endswith("]") and int(port.group(1)) > _MAX_PORT:
        return EndpointURIError("port", f"the mcpl:// URI's port is out of range (0-{_MAX_PORT})")
    return EndpointURIError("unparsable", "the mcpl:// URI cannot be parsed as a URL (MCPL §18.2 step 3)")

"""The caching hints of cacheable results, as pure rules (MCP 2026-07-28 "Caching": the
time-to-live field ``ttlMs`` and the cache scope field ``cacheScope``). The project's
reading: docs/protocol.md S11.

Rules of this module:

- Hints count only in the stateless era: a handshake-era server's lists are listed again
  each time they are asked for, as before (its ``ttlMs`` / ``cacheScope``, if it sent any,
  are not read).
- ``cache_hint(result)``: ``ttlMs`` a whole number of milliseconds, 0 or more, is that many
  (cut to ``max_ttl_seconds``, ``Limits.max_cache_ttl_seconds``); negative, absent or not a
  whole number: 0, immediately stale (the revision: absent means 0, negative is treated as
  0). ``cacheScope`` ``"public"`` is public; anything else, absent included, is
  ``"private"`` (the narrower reading is the safe one).
- A paginated list is one cache entry made of pages (the cache key of each page is its
  cursor; the host always lists from the first page): ``list_freshness`` makes it fresh
  until the earliest end of any page's freshness (each page from the moment its answer
  arrived), and private when any page is.
- ``is_fresh(freshness, now)``: fresh while ``now`` is before the end (a monotonic clock,
  seconds). A list said changed (``notifications/*/list_changed``) is stale at once.
- Scope: the host keeps a cache per connection, which is one authorization context (one
  server's credentials, fixed for the connection), so a private list and a public one are
  both served within it, and no cache is shared across connections or servers ("private":
  never shared across authorization contexts; "public": may be, which the host does not
  need).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from mcpl_host.jsonrpc.values import is_object

__all__ = ["CacheHint", "CacheScope", "Freshness", "cache_hint", "is_fresh", "list_freshness"]

#: Who may share a cached result (MCP 2026-07-28 "Caching", cache scope field).
CacheScope = Literal["public", "private"]


@dataclass(frozen=True, slots=True)
class CacheHint:
    """The hints of one result: ``ttl_seconds`` (0: immediately stale) and ``scope``."""

    ttl_seconds: float
    scope: CacheScope


@dataclass(frozen=True, slots=True)
class Freshness:
    """How long a cached list may be served without a request: until ``until`` (clock
    seconds); ``scope`` as the server said (private when any page was)."""

    until: float
    scope: CacheScope


def cache_hint(result: object, *, max_ttl_seconds: float) -> CacheHint:
    """The hints of a cacheable result (module rules); a result that is not an object has
    none (0, private)."""
    ttl = result.get("ttlMs") if is_object(result) else None
    scope = result.get("cacheScope") if is_object(result) else None
    seconds = 0.0
    if isinstance(ttl, float) and ttl.is_integer():
        ttl = int(ttl)
    if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl > 0:
        # Compared before dividing: a huge integer does not fit a float.
        seconds = max_ttl_seconds if ttl >= max_ttl_seconds * 1000 else ttl / 1000
    return CacheHint(seconds, "public" if scope == "public" else "private")


def list_freshness(pages: Sequence[tuple[float, CacheHint]]) -> Freshness:
    """The freshness of a list made of ``pages`` (each ``(received_at, hint)``; module
    rules). No pages: stale (``until`` -inf)."""
    until = min((received + hint.ttl_seconds for received, hint in pages), default=float("-inf"))
    private = any(hint.scope == "private" for _, hint in pages) or not pages
    return Freshness(until, "private" if private else "public")


def is_fresh(freshness: Freshness | None, now: float) -> bool:
    """Whether a cached list may be served at ``now`` without a request (module rules)."""
    return freshness is not None and now < freshness.until

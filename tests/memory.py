"""Memory a test measures: what a block leaves allocated (``tracemalloc``)."""

from __future__ import annotations

import contextlib
import gc
import tracemalloc
from collections.abc import Iterator


class Kept:
    """``bytes``: what the ``kept_bytes()`` block allocated and left alive (set at its end)."""

    bytes: int = 0


@contextlib.contextmanager
def kept_bytes() -> Iterator[Kept]:
    """Traces the block and sets ``Kept.bytes`` at its end to the bytes it allocated that are
    still alive after a full collection (``gc.collect()``)."""
    kept = Kept()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        yield kept
        gc.collect()
        kept.bytes = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()

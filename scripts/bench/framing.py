"""mcpl-host's ``LineReader`` alone (no comparison): a 32 MiB line fed in 64 KiB chunks, and
lines fed one byte at a time at two sizes, whose time per byte must not grow with the line
(framing is linear)."""

from __future__ import annotations

import time

__all__ = ["measure_framing"]

MIB = 1024 * 1024


def measure_framing() -> dict[str, float]:
    """``chunked_32mib_ms``; ``bytewise_64kib_ns`` and ``bytewise_256kib_ns`` per byte."""
    from mcpl_host.jsonrpc.framing import LineReader

    chunk = b"x" * 65536
    reader = LineReader(max_line_bytes=64 * MIB)
    start = time.perf_counter()
    for _ in range(512):
        reader.feed(chunk)
    lines = reader.feed(b"\n")
    chunked = time.perf_counter() - start
    if len(lines) != 1 or not isinstance(lines[0], bytes) or len(lines[0]) != 32 * MIB:
        raise RuntimeError("the LineReader did not give back the 32 MiB line")
    figures = {"chunked_32mib_ms": chunked * 1e3}
    for size in (64 * 1024, 256 * 1024):
        reader = LineReader()
        data = b"y" * size
        start = time.perf_counter()
        for index in range(size):
            reader.feed(data[index : index + 1])
        reader.feed(b"\n")
        figures[f"bytewise_{size // 1024}kib_ns"] = (time.perf_counter() - start) * 1e9 / size
    return figures

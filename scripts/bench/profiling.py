"""Where mcpl-host's time goes (``scripts/bench.py --profile``).

Run unpinned (the default of ``--profile``): pinned to one CPU, a server preempts its client
on every write and its time is sampled inside the client's ``write`` call.

- cProfile over pings at 100 in flight, over one 32 MiB result line and over a push/event
  flood: the top functions by own time. cProfile inflates cheap calls and counts each resume
  of a coroutine as a call, so read the shares, not the absolute times.
- When ``py-spy`` is installed (``pip install py-spy``): a sampled profile of pings at 100 in
  flight in a child process, as shares of the samples of the main thread (import frames and
  the asyncio child-watcher thread left out), by inclusive and by own time.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from bench.drivers import Driver, open_client
from bench.measure import MIB, Settings, run_in_flight

__all__ = ["profile_report", "sampled_in_flight", "spin"]

SCRIPTS = Path(__file__).resolve().parents[1]


def _cprofile(
    server: Path,
    backend: str,
    title: str,
    warm: Callable[[Driver], Awaitable[object]],
    work: Callable[[Driver], Awaitable[object]],
    top: int,
    per: int,
    cumulative: bool = False,
) -> str:
    profiler = cProfile.Profile()

    async def run() -> None:
        async with open_client("mcpl-host", server) as driver:
            await warm(driver)
            profiler.enable()
            await work(driver)
            profiler.disable()

    anyio.run(run, backend=backend)
    stream = io.StringIO()
    stats = pstats.Stats(profiler, stream=stream)
    profiled: float = getattr(stats, "total_tt")  # noqa: B009 (set by pstats, not declared in its stubs)
    stream.write(f"### cProfile: {title}, {backend}\n\n")
    stream.write(f"profiled time {profiled:.3f} s ({profiled / per * 1e6:.1f} µs per unit)\n")
    stats.strip_dirs().sort_stats("tottime").print_stats(top)
    if cumulative:
        stats.sort_stats("cumulative").print_stats(top)
    return stream.getvalue()


def _sampled_shares(raw: str, top: int) -> str:
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        frames = [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";")]
        if any(f.startswith("Thread._bootstrap (") or "_find_and_load" in f for f in frames):
            continue  # another thread (the asyncio child watcher) or an import
        count = int(count_text)
        total += count
        for frame in set(frames):
            inclusive[frame] += count
        own[frames[-1]] += count
    if not total:
        return "py-spy gave no samples\n"
    # The trunk (the event loop running the tasks) is on nearly every sample: left out.
    branches = [(frame, n) for frame, n in inclusive.most_common() if n < 0.85 * total][:top]
    lines = [
        f"{total} samples of the main thread",
        "",
        "inclusive (frames on 85 % of samples or more left out):",
    ]
    lines += [f"  {n / total * 100:5.1f} %  {frame}" for frame, n in branches]
    lines += ["", "own time:"]
    lines += [f"  {n / total * 100:5.1f} %  {frame}" for frame, n in own.most_common(top)]
    return "\n".join(lines) + "\n"


def spin(server: str, backend: str, total: int, in_flight: int) -> None:
    """The py-spy target: ``total`` pings with ``in_flight`` outstanding."""

    async def run() -> None:
        async with open_client("mcpl-host", Path(server)) as driver:
            await run_in_flight(driver.ping, total, in_flight)

    anyio.run(run, backend=backend)


def sampled_in_flight(
    server: Path, backend: str, total: int = 200_000, in_flight: int = 100, top: int = 35
) -> str:
    """py-spy's view of ``total`` pings at ``in_flight`` (a note when py-spy is absent)."""
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if spy is None:
        return "py-spy is not installed (`pip install py-spy`): no sampled profile\n"
    code = (
        f"import sys; sys.path.insert(0, {str(SCRIPTS)!r}); from bench.profiling import spin; "
        f"spin({str(server)!r}, {backend!r}, {total}, {in_flight})"
    )
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "raw.txt"
        done = subprocess.run(
            [
                spy,
                "record",
                "--rate",
                "1000",
                "--format",
                "raw",
                "--output",
                str(out),
                "--",
                sys.executable,
                "-c",
                code,
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0 or not out.exists():
            return f"py-spy failed ({done.returncode}): {done.stderr.strip()[-500:]}\n"
        return f"### py-spy: {total:,} pings, {in_flight} in flight, {backend}\n\n" + _sampled_shares(
            out.read_text(), top
        )


def profile_report(server: Path, backend: str, settings: Settings, top: int = 25) -> str:
    """Every profile above, as one text."""
    pings = 3 * settings.requests
    events = settings.flood_events
    parts = [
        _cprofile(
            server,
            backend,
            f"{pings:,} pings, 100 in flight",
            lambda d: run_in_flight(d.ping, 1000, 100),
            lambda d: run_in_flight(d.ping, pings, 100),
            top,
            pings,
            cumulative=True,
        ),
        _cprofile(
            server,
            backend,
            "one 32 MiB result line",
            lambda d: d.call_tool("big", {"bytes": MIB}),
            lambda d: d.call_tool("big", {"bytes": 32 * MIB}),
            12,
            1,
        ),
        _cprofile(
            server,
            backend,
            f"{events:,} push/event flood",
            lambda d: d.call_tool("flood", {"count": 100}),
            lambda d: d.call_tool("flood", {"count": events}),
            top,
            events,
            cumulative=True,
        ),
        sampled_in_flight(server, backend),
    ]
    return "\n".join(parts)

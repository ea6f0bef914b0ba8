"""The measurements run inside the benchmark process, one connection per measurement.

Each ``measure_*`` takes a connected ``Driver`` and returns ``{metric: value}`` for one
repetition. Units are in the metric names: ``_us`` microseconds, ``_ms`` milliseconds,
``_per_s`` per second of wall time; ``cpu_us`` is the benchmark process's CPU time (user +
system, children excluded: ``time.process_time``) per request or per event.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio

from bench.drivers import Driver

__all__ = [
    "Settings",
    "measure_big_line",
    "measure_flood",
    "measure_in_flight",
    "measure_sequential",
    "percentile",
    "run_in_flight",
]

MIB = 1024 * 1024
Key = TypeVar("Key", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Settings:
    """What one run measures. Counts are requests, events, connections or repetitions."""

    reps: int = 3
    warmup_pings: int = 200
    sequential_pings: int = 5000
    requests: int = 10_000
    in_flight: tuple[int, ...] = (1, 16, 100, 1000)
    flood_events: int = 10_000
    big_mib: tuple[int, ...] = (1, 8, 32)
    idle_connections: int = 100
    process_reps: int = 3
    #: Seconds after which a measurement of pings in flight starts no more pings (the SDK
    #: would otherwise take most of the run's time).
    cell_seconds: float = 0.5
    #: Seconds one measurement may take before it is recorded as failed.
    cell_timeout_seconds: float = 180.0


#: ``--quick``: the same measurements with smaller counts, in well under a minute.
QUICK = Settings(
    reps=2,
    warmup_pings=50,
    sequential_pings=500,
    requests=2000,
    flood_events=5000,
    big_mib=(1, 8),
    idle_connections=20,
    process_reps=1,
    cell_seconds=0.25,
    cell_timeout_seconds=30.0,
)


def percentile(sorted_values: list[float], fraction: float) -> float:
    """The value at ``fraction`` (0..1) of ``sorted_values`` (nearest rank below)."""
    return sorted_values[int(fraction * (len(sorted_values) - 1))]


async def measure_sequential(
    drivers: Mapping[Key, Driver], settings: Settings, slice_pings: int = 100
) -> dict[Key, dict[str, float]]:
    """Every client connected at once, ``sequential_pings`` pings each, one after another,
    in slices of ``slice_pings`` taking turns, so that each client sees the same machine (on a
    shared VM a latency-bound figure swings with the scheduler's placement of the processes
    and with the other load). Per client: latency median and p99, CPU per ping."""
    for driver in drivers.values():
        for _ in range(settings.warmup_pings):
            await driver.ping()
    clock = time.perf_counter
    latencies: dict[Key, list[float]] = {name: [] for name in drivers}
    cpu = dict.fromkeys(drivers, 0.0)
    remaining = settings.sequential_pings
    while remaining > 0:
        count = min(slice_pings, remaining)
        remaining -= count
        for name, driver in drivers.items():
            own = latencies[name]
            started = time.process_time()
            for _ in range(count):
                start = clock()
                await driver.ping()
                own.append(clock() - start)
            cpu[name] += time.process_time() - started
    figures: dict[Key, dict[str, float]] = {}
    for name, own in latencies.items():
        own.sort()
        figures[name] = {
            "median_us": percentile(own, 0.5) * 1e6,
            "p99_us": percentile(own, 0.99) * 1e6,
            "cpu_us": cpu[name] / len(own) * 1e6,
        }
    return figures


async def run_in_flight(
    call: Callable[[], Awaitable[object]], total: int, in_flight: int, seconds: float | None = None
) -> list[float]:
    """``total`` calls from ``in_flight`` tasks, each calling in a loop; the latencies.

    With ``seconds``, a task starts no call once that many seconds have passed (each task
    makes at least one): a slow client's measurement is as long as a fast one's, and its rate
    is still calls over the wall time they took."""
    clock = time.perf_counter
    latencies: list[float] = []
    deadline = float("inf") if seconds is None else clock() + seconds

    async def worker(count: int) -> None:
        for _ in range(count):
            start = clock()
            await call()
            latencies.append(clock() - start)
            if start > deadline:
                return

    share, extra = divmod(total, in_flight)
    async with anyio.create_task_group() as tg:
        for index in range(in_flight):
            tg.start_soon(worker, share + (1 if index < extra else 0))
    return latencies


async def measure_in_flight(driver: Driver, settings: Settings, in_flight: int) -> dict[str, float]:
    """``requests`` pings with ``in_flight`` outstanding at all times (closed loop), or as
    many as ``cell_seconds`` allow: requests per second, latency median and p99, CPU per
    request."""
    await run_in_flight(driver.ping, max(settings.warmup_pings, min(in_flight, 1000)), in_flight)
    cpu, wall = time.process_time(), time.perf_counter()
    latencies = await run_in_flight(driver.ping, settings.requests, in_flight, settings.cell_seconds)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    latencies.sort()
    return {
        "req_per_s": len(latencies) / wall,
        "median_us": percentile(latencies, 0.5) * 1e6,
        "p99_us": percentile(latencies, 0.99) * 1e6,
        "cpu_us": cpu / len(latencies) * 1e6,
    }


async def measure_flood(driver: Driver, settings: Settings) -> dict[str, float]:
    """The server sends ``flood_events`` ``push/event`` requests as fast as the pipe takes
    them; wall time from the ``tools/call flood`` request to its result (which the server
    sends once every event is answered). Answers (results and errors) per second, accepted
    per second, refusals (error answers) counted, CPU per event."""
    await driver.call_tool("flood", {"count": 100})
    cpu, wall = time.process_time(), time.perf_counter()
    outcome = await driver.call_tool("flood", {"count": settings.flood_events})
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    stats: Any = outcome.structured
    try:
        accepted, refused = int(stats["accepted"]), int(stats["refused"])
    except (KeyError, TypeError, ValueError):
        raise RuntimeError(f"the flood's result carries no counts: {stats!r}") from None
    if accepted + refused != settings.flood_events:
        raise RuntimeError(f"flood answered {accepted + refused} of {settings.flood_events} events")
    return {
        "answers_per_s": (accepted + refused) / wall,
        "accepted_per_s": accepted / wall,
        "refused": float(refused),
        "cpu_us": cpu / settings.flood_events * 1e6,
    }


async def measure_big_line(driver: Driver, settings: Settings, mib: int) -> dict[str, float]:
    """One result line of exactly ``mib`` MiB (newline included): milliseconds from the
    request to the parsed result, and the CPU milliseconds it took."""
    await driver.call_tool("big", {"bytes": 4096})
    cpu, wall = time.process_time(), time.perf_counter()
    outcome = await driver.call_tool("big", {"bytes": mib * MIB})
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if not mib * MIB - 200 < outcome.text_length < mib * MIB:
        raise RuntimeError(f"a {mib} MiB line came back with {outcome.text_length} characters of text")
    return {"ms": wall * 1e3, "cpu_ms": cpu * 1e3}

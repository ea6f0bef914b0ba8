"""What OpenTelemetry costs a request (``--only telemetry``): sequential ping through
mcpl-host three ways, connected at once and taking turns in slices (as ``seq``), in the
same run:

- ``off``: ``connect(..., telemetry=False)``: the connection holds no telemetry;
- ``api``: the default with the OpenTelemetry API installed and no SDK configured (the
  global providers are the API's proxies, which record nothing: the connection is made
  without telemetry, ``Telemetry.live``);
- ``sdk``: ``Telemetry`` with an SDK ``TracerProvider`` exporting to an
  ``InMemorySpanExporter`` through a ``SimpleSpanProcessor`` and an SDK ``MeterProvider``
  with an ``InMemoryMetricReader`` (every span recorded, the trace context injected).

Skipped (and said so) without ``opentelemetry-sdk`` (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, Literal

from bench.drivers import Driver
from bench.measure import Settings, measure_sequential
from bench.report import Results, spread

__all__ = ["VARIANTS", "measure_telemetry", "sdk_installed", "telemetry_table"]

Variant = Literal["off", "api", "sdk"]
VARIANTS: tuple[Variant, ...] = ("off", "api", "sdk")
LABELS = {
    "off": "telemetry=False",
    "api": "API, no SDK configured (default)",
    "sdk": "SDK, in-memory exporter",
}
ROWS = (
    ("median_us", "sequential ping, median (µs)"),
    ("p99_us", "sequential ping, p99 (µs)"),
    ("cpu_us", "sequential ping, client CPU per call (µs)"),
)


def sdk_installed() -> bool:
    try:
        importlib.import_module("opentelemetry.sdk.trace")
    except ImportError:
        return False
    return True


@asynccontextmanager
async def open_variant(variant: Variant, server: Path) -> AsyncGenerator[Driver, None]:
    """mcpl-host (``connect``, defaults, granting ``pushEvents``) with ``variant``'s telemetry."""
    import mcpl_host

    telemetry: Any = None
    if variant == "off":
        telemetry = False
    elif variant == "sdk":
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from mcpl_host.telemetry import Telemetry

        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
        meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
        telemetry = Telemetry(tracer_provider=tracer_provider, meter_provider=meter_provider)
    policy = mcpl_host.GrantPolicy(grant=("pushEvents",))
    config = mcpl_host.ServerConfig(command=str(server), args=("--mcpl",), grant_policy=policy)
    async with mcpl_host.connect(config, telemetry=telemetry) as conn:
        expected = {"off": (False, False), "api": (True, False), "sdk": (True, True)}[variant]
        if (conn.hosted.telemetry is not None, conn.connection.telemetry is not None) != expected:
            raise RuntimeError(
                f"telemetry variant {variant!r} is not in force (is opentelemetry-api installed?)"
            )

        async def call_tool(name: str, arguments: dict[str, Any]) -> Any:
            raise NotImplementedError("the telemetry measure only pings")

        yield Driver(ping=conn.mcp.ping, call_tool=call_tool)


async def measure_telemetry(
    backend: str, server: Path, settings: Settings, results: Results
) -> dict[str, Any]:
    """One repetition: the three variants at once (``measure_sequential``), into ``results``
    under the measure ``telemetry``; returns the figures."""
    async with AsyncExitStack() as stack:
        drivers = {
            variant: await stack.enter_async_context(open_variant(variant, server)) for variant in VARIANTS
        }
        figures = await measure_sequential(drivers, settings)
    for variant, metrics in figures.items():
        results.add(backend, "telemetry", variant, metrics)
    return figures


def telemetry_table(results: Results, backend: str) -> str:
    """A Markdown table: min / **median** / max per variant and the ratios to ``off``."""
    lines = [
        f"| figure | {' | '.join(LABELS[v] for v in VARIANTS)} | API/off | SDK/off |",
        "|---|---|---|---|---|---|",
    ]
    for metric, label in ROWS:
        cells = [spread(results.get(backend, "telemetry", variant, metric)) for variant in VARIANTS]
        off = results.median(backend, "telemetry", "off", metric)
        ratios = []
        for variant in ("api", "sdk"):
            value = results.median(backend, "telemetry", variant, metric)
            ratios.append(f"{value / off:.2f}x" if value is not None and off else "n/a")
        lines.append(f"| {label} | {' | '.join(cells)} | {' | '.join(ratios)} |")
    return "\n".join(lines)

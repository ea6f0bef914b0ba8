"""Collected figures and their Markdown report: min / median / max per figure, the ratios
ours/SDK and ours/floor (of the medians), and the issue-8 target table."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "TARGETS",
    "Results",
    "Row",
    "Target",
    "figure_table",
    "met_cell",
    "rows_for",
    "spread",
    "tally",
    "target_table",
]

#: The backend key of figures that do not depend on the event loop (imports).
NO_BACKEND = "-"


@dataclass
class Results:
    """Every repetition's value of every figure, keyed (backend, measure, client, metric)."""

    values: dict[tuple[str, str, str, str], list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[tuple[str, str, str], list[str]] = field(default_factory=lambda: defaultdict(list))

    def add(self, backend: str, measure: str, client: str, metrics: dict[str, float]) -> None:
        for metric, value in metrics.items():
            self.values[(backend, measure, client, metric)].append(value)

    def fail(self, backend: str, measure: str, client: str, error: str) -> None:
        self.errors[(backend, measure, client)].append(error)

    def get(self, backend: str, measure: str, client: str, metric: str) -> list[float]:
        return self.values.get((backend, measure, client, metric), [])

    def median(self, backend: str, measure: str, client: str, metric: str) -> float | None:
        values = self.get(backend, measure, client, metric)
        return statistics.median(values) if values else None

    def as_json(self) -> dict[str, object]:
        return {
            "values": [
                {"backend": b, "measure": m, "client": c, "metric": k, "values": v}
                for (b, m, c, k), v in self.values.items()
            ],
            "errors": [
                {"backend": b, "measure": m, "client": c, "errors": v} for (b, m, c), v in self.errors.items()
            ],
        }


@dataclass(frozen=True, slots=True)
class Row:
    """One figure: ``measure`` and ``metric`` name it in ``Results``; ``label`` shows it."""

    measure: str
    metric: str
    label: str


def rows_for(
    requests: int, in_flight: Iterable[int], flood_events: int, big_mib: Iterable[int], idle: int
) -> list[Row]:
    """The rows of the per-backend table, in reading order."""
    rows = [
        Row("seq", "median_us", "sequential ping, median (µs)"),
        Row("seq", "p99_us", "sequential ping, p99 (µs)"),
        Row("seq", "cpu_us", "sequential ping, client CPU per call (µs)"),
    ]
    for width in in_flight:
        name = f"up to {requests:,} pings, {width:,} in flight"
        rows += [
            Row(f"inflight-{width}", "req_per_s", f"{name}: req/s"),
            Row(f"inflight-{width}", "median_us", f"{name}: latency median (µs)"),
            Row(f"inflight-{width}", "p99_us", f"{name}: latency p99 (µs)"),
            Row(f"inflight-{width}", "cpu_us", f"{name}: client CPU per request (µs)"),
        ]
    name = f"{flood_events:,} push/event flood"
    rows += [
        Row("flood", "answers_per_s", f"{name}: answers/s (results and errors)"),
        Row("flood", "accepted_per_s", f"{name}: accepted/s"),
        Row("flood", "refused", f"{name}: refusals (error answers)"),
        Row("flood", "cpu_us", f"{name}: client CPU per event (µs)"),
    ]
    for mib in big_mib:
        rows += [
            Row(f"big-{mib}", "ms", f"one {mib} MiB result line, request to parsed (ms)"),
            Row(f"big-{mib}", "cpu_ms", f"one {mib} MiB result line, client CPU (ms)"),
        ]
    rows += [
        Row("idle", "rss_base_mib", "RSS after import, no connection (MiB)"),
        Row("idle", "rss_mib", f"RSS, one process with {idle} idle connections (MiB)"),
        Row("idle", "bringup_ms", f"bring up {idle} servers at once (ms)"),
        Row("idle", "close_ms", f"close {idle} idle connections at once (ms)"),
    ]
    return rows


IMPORT_ROWS = [
    Row("import", "import_ms", "import of what connecting needs, fresh interpreter (ms)"),
    Row("import", "rss_mib", "RSS after import (MiB)"),
    Row("import", "package_import_ms", "`import mcpl_host` alone, fresh interpreter (ms)"),
]


FRAMING_ROWS = [
    Row("framing", "chunked_32mib_ms", "LineReader: a 32 MiB line in 64 KiB chunks (ms)"),
    Row("framing", "bytewise_64kib_ns", "LineReader: a 64 KiB line one byte at a time (ns per byte)"),
    Row("framing", "bytewise_256kib_ns", "LineReader: a 256 KiB line one byte at a time (ns per byte)"),
]


def _number(value: float) -> str:
    size = abs(value)
    if size >= 1000:
        return f"{value:,.0f}"
    if size >= 100:
        return f"{value:.0f}"
    if size >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _spread(values: list[float]) -> str:
    if not values:
        return "n/a"
    if len(values) == 1:
        return _number(values[0])
    return f"{_number(min(values))} / **{_number(statistics.median(values))}** / {_number(max(values))}"


#: min / **median** / max of one figure's values, as the tables show it.
spread = _spread


def _ratio(ours: float | None, other: float | None) -> str:
    if ours is None or other is None or other == 0:
        return "n/a"
    return f"{ours / other:.2f}x"


def figure_table(results: Results, backend: str, rows: Iterable[Row], clients: Iterable[str]) -> str:
    """A Markdown table: each row's min / **median** / max per client and the ratios."""
    clients = list(clients)
    lines = [
        "| figure | mcpl-host | SDK | floor | ours/SDK | ours/floor |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        cells = [
            _spread(results.get(backend, row.measure, client, row.metric)) if client in clients else "n/a"
            for client in ("mcpl-host", "sdk", "floor")
        ]
        ours = results.median(backend, row.measure, "mcpl-host", row.metric)
        sdk = results.median(backend, row.measure, "sdk", row.metric)
        floor = results.median(backend, row.measure, "floor", row.metric)
        lines.append(f"| {row.label} | {' | '.join(cells)} | {_ratio(ours, sdk)} | {_ratio(ours, floor)} |")
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Target:
    """An issue-8 target: ``limit`` applies to ours/floor (``kind="ratio"``) or to the
    median itself (``"absolute"``, in the metric's unit); ``direction`` says which side
    meets it."""

    label: str
    measure: str
    metric: str
    kind: Literal["ratio", "absolute"]
    direction: Literal["<=", ">="]
    limit: float
    unit: str = ""


TARGETS = [
    Target("sequential ping, median", "seq", "median_us", "ratio", "<=", 1.10, " µs"),
    Target("pings, 100 in flight", "inflight-100", "req_per_s", "ratio", ">=", 0.8, " req/s"),
    Target("pings, 1,000 in flight", "inflight-1000", "req_per_s", "ratio", ">=", 0.5, " req/s"),
    Target("client CPU per request, 100 in flight", "inflight-100", "cpu_us", "ratio", "<=", 1.3, " µs"),
    Target("inbound `push/event` accepted per second", "flood", "accepted_per_s", "ratio", ">=", 0.35, "/s"),
    Target("one 1 MiB result line, request to parsed", "big-1", "ms", "ratio", "<=", 2.0, " ms"),
    Target("one 32 MiB result line", "big-32", "ms", "ratio", "<=", 2.0, " ms"),
    Target("`import mcpl_host`", "import", "package_import_ms", "absolute", "<=", 100.0, " ms"),
    Target("RSS, one process with {idle} idle connections", "idle", "rss_mib", "ratio", "<=", 1.15, " MiB"),
    Target("bring up {idle} servers at once", "idle", "bringup_ms", "ratio", "<=", 1.2, " ms"),
    Target("close {idle} idle connections at once", "idle", "close_ms", "ratio", "<=", 2.0, " ms"),
]


def met_cell(verdicts: Sequence[bool | None]) -> str:
    """The "met" cell of a target row from its verdict on each backend (None: not measured
    there): ``**yes**``, ``no``, ``partly (yes / no)``, ``partly measured (n/a / yes)`` or
    ``not measured``; ``tally`` counts rows by these words."""
    if all(v is None for v in verdicts):
        return "not measured"
    if None in verdicts:
        return (
            "partly measured ("
            + " / ".join("n/a" if v is None else "yes" if v else "no" for v in verdicts)
            + ")"
        )
    if all(verdicts):
        return "**yes**"
    if any(verdicts):
        return "partly (" + " / ".join("yes" if v else "no" for v in verdicts) + ")"
    return "no"


def _meets(value: float, target: Target) -> bool:
    return value <= target.limit if target.direction == "<=" else value >= target.limit


def target_table(results: Results, backends: Iterable[str], *, requests: int, idle: int) -> str:
    """The issue-8 table: medians of mcpl-host, its ratios, the target and whether it is met
    (on every backend measured). Each cell gives the backends in order, separated by ``/``.
    ``requests`` and ``idle`` are the run's request and idle-connection counts (labels)."""
    backends = list(backends)
    lines = [
        f"| measure | mcpl-host ({' / '.join(backends)}) | vs SDK | vs floor | target | met |",
        "|---|---|---|---|---|---|",
    ]
    for target in TARGETS:
        keys = [NO_BACKEND] if target.measure == "import" else backends
        ours_cells: list[str] = []
        sdk_cells: list[str] = []
        floor_cells: list[str] = []
        verdicts: list[bool | None] = []
        for backend in keys:
            ours = results.median(backend, target.measure, "mcpl-host", target.metric)
            sdk = results.median(backend, target.measure, "sdk", target.metric)
            floor = results.median(backend, target.measure, "floor", target.metric)
            ours_cells.append("n/a" if ours is None else _number(ours) + target.unit)
            sdk_cells.append(_ratio(ours, sdk))
            floor_cells.append(_ratio(ours, floor))
            if target.kind == "absolute":
                verdicts.append(None if ours is None else _meets(ours, target))
            elif ours is None or not floor:
                verdicts.append(None)
            else:
                verdicts.append(_meets(ours / floor, target))
        limit = f"{target.limit:g}{target.unit}" if target.kind == "absolute" else f"{target.limit:.2f}x"
        goal = f"{target.direction} {limit}" + ("" if target.kind == "absolute" else " vs floor")
        lines.append(
            f"| {target.label.format(requests=requests, idle=idle)} | {' / '.join(ours_cells)} | {' / '.join(sdk_cells)} | "
            f"{' / '.join(floor_cells)} | {goal} | {met_cell(verdicts)} |"
        )
    return "\n".join(lines)


def tally(tables: Iterable[str]) -> str:
    """One sentence counting the rows of Markdown target tables by their last cell ("met"):
    ``**yes**``, ``no``, ``partly (...)``, ``not measured``; rows whose last cell is ``-``
    state a figure and have no target."""
    counts: dict[str, int] = {"met": 0, "partly met": 0, "not met": 0, "not measured": 0}
    for table in tables:
        for line in table.splitlines():
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not line.startswith("|") or len(cells) < 2 or cells[-1] in ("met", "-", "---"):
                continue
            verdict = cells[-1]
            if verdict == "**yes**":
                counts["met"] += 1
            elif verdict.startswith("partly ("):
                counts["partly met"] += 1
            elif verdict == "no":
                counts["not met"] += 1
            else:
                counts["not measured"] += 1
    total = sum(counts.values())
    return f"{total} targets: " + ", ".join(f"{n} {name}" for name, n in counts.items() if n) + "."

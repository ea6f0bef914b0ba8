"""The benchmark's command line: what runs, in which order, and the report it prints.

Order: for each repetition, for each backend: sequential ping with every client connected
at once, taking turns in short slices; then each other measurement with every client in
turn (the order rotates from one measurement and repetition to the next), each on a fresh
connection to a fresh server; then the fresh-interpreter measurements (imports, idle
connections), interleaved the same way. Progress goes to stderr, the Markdown report to
stdout.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import replace
from functools import partial
from importlib import metadata
from pathlib import Path

import anyio

from bench.child import IMPORTS, PACKAGE_IMPORT, import_profile, run_idle, run_import, warm_bytecode
from bench.drivers import CLIENTS, ClientKind, Driver, open_client, sdk_available
from bench.fleet import FLEET_QUICK, FleetSettings
from bench.framing import measure_framing
from bench.http_ws import MODES, net_report, net_targets, run_network
from bench.measure import (
    QUICK,
    Settings,
    measure_big_line,
    measure_flood,
    measure_in_flight,
    measure_sequential,
)
from bench.report import (
    FRAMING_ROWS,
    IMPORT_ROWS,
    NO_BACKEND,
    Results,
    figure_table,
    rows_for,
    tally,
    target_table,
)
from bench.server import build_echo_server
from bench.telemetry import measure_telemetry, sdk_installed, telemetry_table

__all__ = ["main"]

ROOT = Path(__file__).resolve().parents[2]
#: The sections over stdio, measured against the SDK and the floor by ``bench.measure``
#: and ``bench.child``.
STDIO_SECTIONS = ("seq", "inflight", "flood", "big", "import", "idle", "framing", "telemetry")
SECTIONS = (*STDIO_SECTIONS, "fleet", *MODES)  # MODES: Streamable HTTP and WebSocket (bench.http_ws)

Cell = tuple[str, Callable[[Driver], Awaitable[dict[str, float]]]]


def _cells(settings: Settings, sections: Sequence[str]) -> list[Cell]:
    cells: list[Cell] = []  # sequential ping is not a cell: it runs every client at once
    if "inflight" in sections:
        for width in settings.in_flight:
            cells.append(
                (f"inflight-{width}", partial(measure_in_flight, settings=settings, in_flight=width))
            )
    if "flood" in sections:
        cells.append(("flood", partial(measure_flood, settings=settings)))
    if "big" in sections:
        for mib in settings.big_mib:
            cells.append((f"big-{mib}", partial(measure_big_line, settings=settings, mib=mib)))
    return cells


def _rotated(clients: Sequence[ClientKind], turn: int) -> list[ClientKind]:
    k = turn % len(clients)
    return [*clients[k:], *clients[:k]]


def _short(metrics: dict[str, float]) -> str:
    return ", ".join(f"{key} {value:,.1f}" for key, value in metrics.items())


def _note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def _sequential(
    backend: str, rep: int, clients: Sequence[ClientKind], server: Path, settings: Settings, results: Results
) -> None:
    order = _rotated(clients, rep)
    gc.collect()
    try:
        with anyio.fail_after(settings.cell_timeout_seconds):
            async with AsyncExitStack() as stack:
                drivers = {
                    client: await stack.enter_async_context(open_client(client, server)) for client in order
                }
                figures = await measure_sequential(drivers, settings)
    except Exception as exc:  # recorded and reported; the run goes on
        for client in order:
            results.fail(backend, "seq", client, f"{type(exc).__name__}: {exc}"[:300])
        _note(f"  rep {rep + 1} {backend} seq: FAILED {type(exc).__name__}: {exc}")
        return
    for client, metrics in figures.items():
        results.add(backend, "seq", client, metrics)
        _note(f"  rep {rep + 1} {backend} seq {client}: {_short(metrics)}")


async def _telemetry(backend: str, rep: int, server: Path, settings: Settings, results: Results) -> None:
    gc.collect()
    try:
        with anyio.fail_after(settings.cell_timeout_seconds):
            figures = await measure_telemetry(backend, server, settings, results)
    except Exception as exc:  # recorded and reported; the run goes on
        results.fail(backend, "telemetry", "mcpl-host", f"{type(exc).__name__}: {exc}"[:300])
        _note(f"  rep {rep + 1} {backend} telemetry: FAILED {type(exc).__name__}: {exc}")
        return
    for variant, metrics in figures.items():
        _note(f"  rep {rep + 1} {backend} telemetry {variant}: {_short(metrics)}")


async def _round(
    backend: str,
    rep: int,
    sections: Sequence[str],
    cells: list[Cell],
    clients: Sequence[ClientKind],
    server: Path,
    settings: Settings,
    results: Results,
) -> None:
    if "seq" in sections:
        await _sequential(backend, rep, clients, server, settings, results)
    if "telemetry" in sections:
        await _telemetry(backend, rep, server, settings, results)
    for index, (measure, run) in enumerate(cells):
        for client in _rotated(clients, rep + index + 1):
            gc.collect()
            try:
                with anyio.fail_after(settings.cell_timeout_seconds):
                    async with open_client(client, server) as driver:
                        metrics = await run(driver)
            except Exception as exc:  # recorded and reported; the run goes on
                results.fail(backend, measure, client, f"{type(exc).__name__}: {exc}"[:300])
                _note(f"  rep {rep + 1} {backend} {measure} {client}: FAILED {type(exc).__name__}: {exc}")
                continue
            results.add(backend, measure, client, metrics)
            _note(f"  rep {rep + 1} {backend} {measure} {client}: {_short(metrics)}")


def _process_measurements(
    settings: Settings,
    sections: Sequence[str],
    backends: Sequence[str],
    clients: Sequence[ClientKind],
    server: Path,
    results: Results,
) -> None:
    if "import" in sections or "idle" in sections:
        warm_bytecode(clients)
    for rep in range(settings.process_reps):
        if "framing" in sections:
            figures = measure_framing()
            results.add(NO_BACKEND, "framing", "mcpl-host", figures)
            _note(f"  rep {rep + 1} framing mcpl-host: {_short(figures)}")
        if "import" in sections:
            for client in _rotated(clients, rep):
                try:
                    metrics = run_import(client)
                except Exception as exc:
                    results.fail(NO_BACKEND, "import", client, str(exc)[:300])
                    continue
                figures = {"import_ms": metrics["import_s"] * 1e3, "rss_mib": metrics["rss_mib"]}
                if client == "mcpl-host":
                    package = run_import(client, statement=PACKAGE_IMPORT)
                    figures["package_import_ms"] = package["import_s"] * 1e3
                results.add(NO_BACKEND, "import", client, figures)
                _note(f"  rep {rep + 1} import {client}: {_short(figures)}")
        if "idle" in sections:
            for backend in backends:
                for client in _rotated(clients, rep + 1):
                    try:
                        metrics = run_idle(
                            client, backend, settings.idle_connections, server, settings.cell_timeout_seconds
                        )
                    except Exception as exc:
                        results.fail(backend, "idle", client, str(exc)[:300])
                        _note(f"  rep {rep + 1} {backend} idle {client}: FAILED {exc}")
                        continue
                    figures = {
                        "rss_base_mib": metrics["rss_base_mib"],
                        "rss_mib": metrics["rss_mib"],
                        "bringup_ms": metrics["bringup_s"] * 1e3,
                        "close_ms": metrics["close_s"] * 1e3,
                    }
                    results.add(backend, "idle", client, figures)
                    _note(f"  rep {rep + 1} {backend} idle {client}: {_short(figures)}")


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _commit() -> str:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--", "mcpl_host", "scripts")
    return head + (" (with uncommitted changes)" if dirty else "")


def _loadavg() -> str:
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "unknown"


def _pin(choice: str) -> str:
    """Pin this process (and so every process it starts) to one CPU; a sentence saying what
    was done, or one starting ``error:``."""
    if choice == "all":
        return "not pinned"
    allowed = os.sched_getaffinity(0)
    if choice == "last":
        cpu = max(allowed)
    elif choice.isdigit():
        cpu = int(choice)
    else:
        return f"error: --cpu takes a CPU number, 'last' or 'all', not {choice!r}"
    if cpu not in allowed:
        return f"error: CPU {cpu} is not one this process may run on ({sorted(allowed)})"
    os.sched_setaffinity(0, {cpu})
    return f"pinned to CPU {cpu} of {sorted(allowed)}, with every server and child interpreter (--cpu)"


def _fleet_settings(args: argparse.Namespace) -> FleetSettings:
    fleet = FLEET_QUICK if args.quick else FleetSettings()
    if args.fleet:
        fleet = replace(fleet, counts=tuple(int(n) for n in args.fleet.split(",") if n))
    if args.reps:
        fleet = replace(fleet, reps=args.reps)
    return fleet


def _run_fleet(
    fleet: FleetSettings, base: str | None, backends: Sequence[str], server: Path, results: Results
) -> str:
    """The fleet section (``bench.fleet``); returns what limits it, in a sentence."""
    import tempfile

    from bench.fleet import base_tree, raise_fd_limit, remove_tree, run_fleet

    soft, now, hard = raise_fd_limit()  # the children raise theirs too
    with tempfile.TemporaryDirectory() as folder:
        tree = base_tree(base, Path(folder)) if base else None
        try:
            # Both revisions loaded from bytecode (``warm_bytecode``): a package compiled
            # from source in the child leaves the compiler's freed memory in the process
            # before the fleet starts, which the connections then reuse, so its RSS per
            # server read about 8 KiB lower (at 200, this machine) than the same code's.
            warm_bytecode(["mcpl-host"])
            if tree is not None:
                warm_bytecode(["mcpl-host"], package=tree)
            run_fleet(fleet, backends, server, results, _note, tree)
        finally:
            if tree is not None:
                remove_tree(tree)
    tasks = os.sysconf("SC_CHILD_MAX") if hasattr(os, "sysconf") else -1
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
    based = f"; `fleet-base-N`: mcpl-host at `{base}` in the same run" if base else ""
    return (
        f"limits: RLIMIT_NOFILE soft {soft} raised to {now} (hard {hard}); processes per user "
        f"{tasks}; {memory:.0f} GiB memory; each measurement in a fresh interpreter{based}"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/bench.py",
        description="mcpl-host, the official MCP SDK client and a floor client side by side, "
        "against the same C echo server, in one run.",
    )
    parser.add_argument("--quick", action="store_true", help="small counts, 2 repetitions: under a minute")
    parser.add_argument("--reps", type=int, help="repetitions of each in-process measurement")
    parser.add_argument("--backends", default="asyncio,trio", help="comma-separated (default: asyncio,trio)")
    parser.add_argument("--clients", default=",".join(CLIENTS), help="comma-separated (default: all three)")
    parser.add_argument(
        "--only",
        default=",".join(SECTIONS),
        help=f"comma-separated sections of {SECTIONS} (default: all)",
    )
    parser.add_argument("--fleet", help="fleet sizes, comma-separated (default 200,1000; --quick: 200)")
    parser.add_argument(
        "--fleet-base", help="the fleet also measures mcpl-host at this git revision, interleaved"
    )
    parser.add_argument(
        "--cpu",
        help="pin the benchmark and every process it starts to this CPU number ('last': the highest "
        "allowed, the default of a run; 'all': no pinning, the default of --profile, so that a "
        "server runs beside its client and is not sampled inside the client's writes). Pinned, "
        "the ratios hold still from run to run",
    )
    parser.add_argument("--json", type=Path, help="also write every repetition's value to this file")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="instead: profile mcpl-host (first backend): pings at 100 in flight, a 32 MiB line, a "
        "flood; with --only fleet, a fleet's start-up, burst and close; with --only naming network "
        "modes only, those",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    settings = QUICK if args.quick else Settings()
    if args.reps:
        settings = replace(settings, reps=args.reps)
    backends = [b for b in args.backends.split(",") if b]
    sections = [s for s in args.only.split(",") if s]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        _parser().error(f"unknown sections: {sorted(unknown)}")
    clients: list[ClientKind] = [c for c in CLIENTS if c in args.clients.split(",")]
    notes: list[str] = []
    if "sdk" in clients and not sdk_available():
        clients.remove("sdk")
        notes.append("SDK columns skipped: the `mcp` package is not installed (`pip install -e '.[bench]'`).")
        _note(notes[-1])
    pinning = _pin(args.cpu or ("all" if args.profile else "last"))
    if pinning.startswith("error:"):
        _parser().error(pinning[len("error: ") :])
    if "trio" in backends and not _importable("trio"):
        backends.remove("trio")
        notes.append(
            "trio columns skipped: the `trio` package is not installed (`pip install -e '.[bench]'`)."
        )
        _note(notes[-1])
    if "telemetry" in sections and not sdk_installed():
        sections.remove("telemetry")
        notes.append("telemetry skipped: `opentelemetry-sdk` is not installed (`pip install -e '.[bench]'`).")
        _note(notes[-1])
    if not backends:
        _parser().error("no backend left to measure")
    server = build_echo_server()
    fleet = _fleet_settings(args) if "fleet" in sections else None
    if args.profile and set(sections) <= set(MODES):
        from bench.http_ws import net_profile_report

        print(net_profile_report(sections, backends[0], quick=args.quick))
        return 0
    if args.profile:
        if sections == ["fleet"] and fleet is not None:
            from bench.fleet import profile_fleet

            print(profile_fleet(server, backends[0], fleet.counts[0]))
            return 0
        from bench.profiling import profile_report

        print(profile_report(server, backends[0], settings))
        return 0

    command = " ".join(["scripts/bench.py", *(argv if argv is not None else sys.argv[1:])])
    load_before, started = _loadavg(), time.perf_counter()
    results = Results()
    cells = _cells(settings, sections)
    in_process = bool(cells) or "seq" in sections or "telemetry" in sections
    for rep in range(settings.reps if in_process else 0):
        for backend in backends:
            _note(f"repetition {rep + 1}/{settings.reps}, {backend}")
            anyio.run(
                _round, backend, rep, sections, cells, clients, server, settings, results, backend=backend
            )
    net_settings = run_network(sections, backends, clients, results, quick=args.quick, reps=args.reps)
    _note("fresh-interpreter and framing measurements")
    _process_measurements(settings, sections, backends, clients, server, results)
    limits = ""
    if fleet is not None:
        _note("fleet measurements")
        limits = _run_fleet(fleet, args.fleet_base, backends, server, results)
    load_after, elapsed = _loadavg(), time.perf_counter() - started

    out: list[str] = [
        "## Run",
        "",
        f"- command: `.venv/bin/python {command}`",
        f"- commit: `{_commit()}`",
        f"- machine: {_cpu_model()}, {os.cpu_count()} cores; {platform.platform()}",
        f"- python {platform.python_version()}; anyio {_version('anyio')}, trio {_version('trio')}, "
        f"orjson {_version('orjson')}, mcp {_version('mcp')}, structlog {_version('structlog')}",
        f"- load average (1, 5, 15 min): before {load_before}; after {load_after}",
        f"- CPU: {pinning}",
        f"- {settings.reps} repetitions in-process, {settings.process_reps} of each fresh-interpreter "
        f"measurement; pings in flight: up to {settings.requests:,}, no new one started after "
        f"{settings.cell_seconds:g} s; {elapsed:.0f} s in all",
        "- each figure: min / **median** / max over the repetitions; ratios are of the medians",
        *(f"- {note}" for note in notes),
        "",
    ]
    stdio = bool(set(sections) & set(STDIO_SECTIONS))
    targets: list[str] = []
    if stdio:
        targets += [
            "### stdio (ratios of mcpl-host's median to the floor's and the SDK's)",
            "",
            target_table(results, backends, requests=settings.requests, idle=settings.idle_connections),
            "",
        ]
    targets += net_targets(results, sections, backends, net_settings)
    if fleet is not None:
        from bench.fleet import fleet_targets

        targets += fleet_targets(results, backends, fleet, limits)
    out += ["## Targets", "", tally(targets), "", *targets]
    rows = rows_for(
        settings.requests,
        settings.in_flight,
        settings.flood_events,
        settings.big_mib,
        settings.idle_connections,
    )
    for backend in backends if stdio else ():
        out += [f"## All figures, {backend}", "", figure_table(results, backend, rows, clients), ""]
    if fleet is not None:
        from bench.fleet import fleet_report

        out += fleet_report(results, backends, fleet)
    if "telemetry" in sections:
        for backend in backends:
            out += [
                f"## OpenTelemetry, {backend} (mcpl-host three ways, same run; scripts/bench/telemetry.py)",
                "",
                telemetry_table(results, backend),
                "",
            ]
    if "import" in sections:
        out += [
            "## Imports (fresh interpreter)",
            "",
            figure_table(results, NO_BACKEND, IMPORT_ROWS, clients),
            "",
        ]
        heaviest = import_profile(IMPORTS["mcpl-host"])
        out += [
            f"`python -X importtime -c '{IMPORTS['mcpl-host']}'`, self time by top-level package:",
            "",
            ", ".join(f"{name} {seconds * 1e3:.0f} ms" for name, seconds in heaviest),
            "",
        ]
    if "framing" in sections:
        out += [
            "## Framing (mcpl-host's LineReader alone; the two per-byte figures should be close)",
            "",
            figure_table(results, NO_BACKEND, FRAMING_ROWS, ["mcpl-host"]),
            "",
        ]
    out += net_report(results, sections, backends, clients, net_settings)
    if results.errors:
        out += ["## Failures", ""]
        for (backend, measure, client), errors in results.errors.items():
            out.append(f"- {backend} {measure} {client}: {len(errors)}x {errors[0]}")
        out.append("")
    print("\n".join(out))
    if args.json:
        args.json.write_text(json.dumps(results.as_json(), indent=1))
    return 1 if results.errors else 0

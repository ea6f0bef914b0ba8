"""A fleet: one ``Host`` with hundreds of stdio servers (the C echo server) from one config file.

Each repetition, for each fleet size and backend, in a fresh event loop:

- **floor**: spawn ``count`` echo servers (``anyio.open_process``, stdin and stdout piped),
  write one ``initialize`` line to each and wait for each one's answer line; the seconds
  from the first spawn to the last answer. Then close each one's stdin and reap it.
- **host**: an ``mcpServers`` config file naming ``count`` echo servers (``--mcpl``, granting
  ``pushEvents``), read by ``load_config``; ``Host(config, subscribe_all=False)`` with one
  subscription to ``push_event``. Measured: the seconds from entering the host to
  ``wait_ready()`` (every handshake and MCPL policy exchange done); the RSS the host process
  grew by, per server (``VmRSS`` before the ``Host`` is made and with every server ready; the
  servers' own RSS is given apart); then a burst: every server at once runs the echo
  server's ``flood`` tool (``events_each`` ``push/event`` requests each), and one consumer
  takes every delivery from the subscription; checked: each flood answered
  ``accepted == events_each``, every ``(server, eventId)`` taken exactly once (none missing,
  none twice), and the rate is events taken per second from the first call to the last
  result. Then the seconds to close the host (leaving ``async with``), and the pids of the
  servers still alive afterwards (none may be: each pid, with its start time, is looked up
  in ``/proc``; a zombie counts as alive).

Figures are min / **median** / max over the repetitions; the targets (issue: a fleet) are
``ready <= 2x floor``, ``close <= 1 s`` with no process left, every event exactly once.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc

from bench.child import rss_mib
from bench.report import Results, met_cell, spread

__all__ = [
    "FLEET_QUICK",
    "FleetSettings",
    "base_tree",
    "child",
    "fleet_report",
    "fleet_targets",
    "measure_fleet_floor",
    "measure_fleet_host",
    "raise_fd_limit",
    "remove_tree",
    "run_fleet",
]

FLOOR, HOST = "floor", "mcpl-host"


@dataclass(frozen=True, slots=True)
class FleetSettings:
    """Fleet sizes (servers), repetitions, ``push/event``s per server in the burst, and the
    seconds one measurement may take before it is recorded as failed."""

    counts: tuple[int, ...] = (200, 1000)
    reps: int = 2
    events_each: int = 20
    timeout_seconds: float = 300.0


#: ``--quick``: 200 servers only, once.
FLEET_QUICK = FleetSettings(counts=(200,), reps=1, events_each=10, timeout_seconds=60.0)


def raise_fd_limit() -> tuple[int, int, int]:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit (the servers' pipes are
    three descriptors each). Returns ``(soft before, soft now, hard)``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass
    now = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return soft, now, hard


def _start_time(pid: int) -> int | None:
    """The start time (clock ticks since boot) of ``pid`` from ``/proc``, None when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[19])


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return None


def _rss_of(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def still_alive(identities: Sequence[tuple[int, int | None]]) -> list[int]:
    """The pids of ``identities`` (pid, start time) that still exist as that same process
    (a zombie included: it was not reaped)."""
    return [pid for pid, start in identities if start is not None and _start_time(pid) == start]


_INITIALIZE = (
    json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "floor", "version": "0"},
            },
        }
    ).encode()
    + b"\n"
)


async def measure_fleet_floor(server: Path, count: int) -> dict[str, float]:
    """The floor: ``count`` echo servers spawned, each sent one ``initialize`` line, each one's
    answer line read; ``ready_s`` from the first spawn to the last answer, ``close_s`` to close
    every stdin and reap every process."""
    processes: list[anyio.abc.Process] = []
    start, cpu = time.perf_counter(), time.process_time()

    async def one() -> None:
        process = await anyio.open_process([str(server), "--mcpl"], stderr=subprocess.DEVNULL)
        processes.append(process)
        assert process.stdin is not None and process.stdout is not None
        await process.stdin.send(_INITIALIZE)
        received = b""
        while b"\n" not in received:
            received += await process.stdout.receive()

    try:
        async with anyio.create_task_group() as tg:
            for _ in range(count):
                tg.start_soon(one)
        ready, cpu = time.perf_counter() - start, time.process_time() - cpu
    finally:
        closing = time.perf_counter()
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for process in processes:
                    tg.start_soon(process.aclose)  # closes stdin (EOF: the server exits), reaps
        closed = time.perf_counter() - closing
    return {"ready_s": ready, "ready_cpu_s": cpu, "close_s": closed}


def write_config(folder: Path, server: Path, count: int) -> Path:
    """An ``mcpServers`` config file of ``count`` echo servers granting ``pushEvents``."""
    servers = {
        f"echo{index:04d}": {"command": str(server), "args": ["--mcpl"], "grant": ["pushEvents"]}
        for index in range(count)
    }
    path = folder / f"fleet-{count}.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


async def measure_fleet_host(server: Path, count: int, events_each: int, folder: Path) -> dict[str, float]:
    """The ``Host`` (module docstring): ``ready_s``, ``rss_per_server_kib`` (the host process),
    ``server_rss_kib`` (one echo server, mean), ``fds_per_server``, ``events_per_s``,
    ``burst_s``, ``close_s``, ``left_alive`` and, for a burst that lost or repeated events,
    ``missing``, ``twice`` and ``declined`` (pushes answered ``{"accepted": false}``: the
    server was told; absent when none was missing, twice or declined); ``*_cpu_s``: this process's CPU
    seconds (every thread) in each phase."""
    from mcpl_host import Host, load_config

    config = load_config(write_config(folder, server, count))
    rss_before, fds_before = rss_mib(), _open_fds()
    host = Host(config, subscribe_all=False)
    subscription = host.subscribe(kinds=["push_event"])
    identities: list[tuple[int, int | None]] = []
    figures: dict[str, float] = {}
    start, cpu = time.perf_counter(), time.process_time()
    async with host:
        await host.wait_ready(timeout=60.0 + count * 0.2)
        figures["ready_s"] = time.perf_counter() - start
        figures["ready_cpu_s"] = time.process_time() - cpu
        conns = [host.server(name).current for name in host.servers]
        pids = [conn.connection.pid for conn in conns if conn is not None]
        identities = [(pid, _start_time(pid)) for pid in pids if pid is not None]
        figures["rss_per_server_kib"] = (rss_mib() - rss_before) * 1024 / count
        figures["server_rss_kib"] = (
            sum(_rss_of(pid) for pid, _ in identities) * 1024 / max(1, len(identities))
        )
        figures["fds_per_server"] = (_open_fds() - fds_before) / count

        taken: Counter[tuple[str, str]] = Counter()
        expected = count * events_each
        all_taken = anyio.Event()

        async def consume() -> None:
            total = 0
            async for event in subscription:
                taken[(event.server, getattr(event, "event_id", ""))] += 1
                total += 1
                if total >= expected:
                    all_taken.set()

        declined = 0

        async def flood(name: str) -> None:
            nonlocal declined
            conn = await host.server(name).connected()
            result = await conn.mcp.call_tool("flood", {"count": events_each})  # every push answered
            counts = result.structured_content
            if isinstance(counts, dict):
                refused = counts.get("refused")  # pyright: ignore[reportUnknownMemberType]
                declined += refused if isinstance(refused, int) else 0

        burst_start, cpu = time.perf_counter(), time.process_time()
        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            async with anyio.create_task_group() as floods:
                for name in host.servers:
                    floods.start_soon(flood, name)
            with anyio.move_on_after(30.0):  # every push answered: taken, or refused at its timeout
                await all_taken.wait()
            tg.cancel_scope.cancel()
        burst = time.perf_counter() - burst_start
        figures["burst_cpu_s"] = time.process_time() - cpu
        # What the subscription gave the consumer is what counts; a push the host answered
        # {"accepted": false} (its delivery timeout passed before the consumer took it) is
        # one the server was told of, counted by the echo server as refused: ``declined``.
        twice = sum(n - 1 for n in taken.values() if n > 1)
        missing = expected - len(taken)
        if twice or missing or declined:
            figures["missing"], figures["twice"] = float(missing), float(twice)
            figures["declined"] = float(declined)
        figures["events_per_s"] = len(taken) / burst
        figures["burst_s"] = burst
        closing, cpu = time.perf_counter(), time.process_time()
    figures["close_s"] = time.perf_counter() - closing
    figures["close_cpu_s"] = time.process_time() - cpu
    figures["left_alive"] = float(len(still_alive(identities)))
    return figures


# --- a fresh interpreter per measurement ------------------------------------------------------

SCRIPTS = Path(__file__).resolve().parents[1]
ROOT = SCRIPTS.parent


def child() -> None:
    """The child's entry: ``KIND BACKEND COUNT EVENTS SERVER``; prints one JSON object."""
    kind, backend, count, events_each, server = sys.argv[1:6]
    raise_fd_limit()
    import mcpl_host  # noqa: F401 (imported before any figure, as an application would)

    with tempfile.TemporaryDirectory() as folder:
        if kind == FLOOR:
            figures = anyio.run(measure_fleet_floor, Path(server), int(count), backend=backend)
        else:
            figures = anyio.run(
                measure_fleet_host, Path(server), int(count), int(events_each), Path(folder), backend=backend
            )
    print(json.dumps(figures))


def run_child(
    kind: str, backend: str, count: int, events_each: int, server: Path, timeout: float, package: Path | None
) -> dict[str, float]:
    """One measurement in a fresh interpreter; ``package``: import ``mcpl_host`` from that
    tree (a base revision) instead of this one. Raises ``RuntimeError``."""
    code = f"import sys; sys.path.insert(0, {str(SCRIPTS)!r}); from bench.fleet import child; child()"
    env = dict(os.environ)
    if package is not None:
        env["PYTHONPATH"] = str(package)
    argv = [sys.executable, "-c", code, kind, backend, str(count), str(events_each), str(server)]
    # In scripts/: with the checkout as the current directory, first on a ``-c`` child's
    # sys.path, the base's PYTHONPATH would be shadowed (both measured this checkout).
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=SCRIPTS)
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {done.stderr.strip()[-400:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def base_tree(revision: str, folder: Path) -> Path:
    """A checkout of ``revision`` (``git worktree``) in ``folder``, for ``--fleet-base``."""
    tree = folder / "base"
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), revision], cwd=ROOT, check=True)
    return tree


def remove_tree(tree: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)


def measure_name(kind: str, count: int) -> str:
    """The ``Results`` measure of one variant and size: ``fleet-200``, ``fleet-floor-200``,
    ``fleet-base-200``."""
    return f"fleet-{count}" if kind == HOST else f"fleet-{kind}-{count}"


def run_fleet(
    settings: FleetSettings,
    backends: Sequence[str],
    server: Path,
    results: Results,
    note: Callable[[str], None],
    base: Path | None = None,
) -> None:
    """Every repetition: for each size and backend, the floor, the host (and the host at the
    base revision), each in a fresh interpreter, the order rotating from one repetition to
    the next. Figures go to ``results`` (client ``mcpl-host``), failures too."""
    kinds = [FLOOR, HOST, *(["base"] if base is not None else [])]
    for rep in range(settings.reps):
        for count in settings.counts:
            for backend in backends:
                k = rep % len(kinds)
                for kind in kinds[k:] + kinds[:k]:
                    measure = measure_name(kind, count)
                    try:
                        figures = run_child(
                            FLOOR if kind == FLOOR else HOST,
                            backend,
                            count,
                            settings.events_each,
                            server,
                            settings.timeout_seconds,
                            base if kind == "base" else None,
                        )
                    except (RuntimeError, subprocess.TimeoutExpired) as exc:
                        results.fail(backend, measure, HOST, str(exc)[:300])
                        note(f"  rep {rep + 1} {backend} {measure}: FAILED {exc}")
                        continue
                    results.add(backend, measure, HOST, figures)
                    if figures.get("missing") or figures.get("twice") or figures.get("left_alive"):
                        results.fail(
                            backend,
                            measure,
                            HOST,
                            f"{figures.get('missing', 0):.0f} events missing ({figures.get('declined', 0):.0f} "
                            "answered accepted: false to their server), "
                            f"{figures.get('twice', 0):.0f} "
                            f"taken twice, {figures.get('left_alive', 0):.0f} processes left",
                        )
                    shown = ", ".join(f"{key} {value:,.3g}" for key, value in figures.items())
                    note(f"  rep {rep + 1} {backend} {measure}: {shown}")


# --- the report ---------------------------------------------------------------------------------


def _median(results: Results, backend: str, measure: str, metric: str) -> float | None:
    return results.median(backend, measure, HOST, metric)


def _cell(value: float | None, unit: str, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}{unit}"


def fleet_targets(
    results: Results, backends: Sequence[str], settings: FleetSettings, limits: str
) -> list[str]:
    """The fleet's targets per size, in Markdown (each cell: the backends in order)."""
    out = [
        f"### Fleet: one Host, many stdio servers ({settings.reps} repetitions, "
        f"{settings.events_each} push/event per server in the burst)",
        "",
        f"- {limits}",
        "",
        f"| target | {' / '.join(backends)} | target | met |",
        "|---|---|---|---|",
    ]
    for count in settings.counts:
        host, floor = measure_name(HOST, count), measure_name(FLOOR, count)
        ready = [_median(results, b, host, "ready_s") for b in backends]
        floors = [_median(results, b, floor, "ready_s") for b in backends]
        ratios = [r / f if r is not None and f else None for r, f in zip(ready, floors)]
        cells = [
            f"{_cell(r, ' s')} vs floor {_cell(f, ' s')} = {_cell(x, 'x')}"
            for r, f, x in zip(ready, floors, ratios)
        ]
        verdicts = [None if x is None else x <= 2.0 for x in ratios]
        out.append(
            f"| {count} servers ready (wait_ready) | {' / '.join(cells)} | <= 2x floor | {met_cell(verdicts)} |"
        )
        rss = [_median(results, b, host, "rss_per_server_kib") for b in backends]
        srv = [_median(results, b, host, "server_rss_kib") for b in backends]
        cells = [_cell(r, " KiB", 0) + " (" + _cell(v, " KiB", 0) + ")" for r, v in zip(rss, srv)]
        out.append(
            f"| {count} servers: host RSS per server (the server's own) | {' / '.join(cells)} | stated | - |"
        )
        failed = [bool(results.errors.get((b, host, HOST))) for b in backends]
        rate = [_median(results, b, host, "events_per_s") for b in backends]
        cells = [
            _cell(r, "/s", 0) + (" (lost or repeated events: see Failures)" if f else "")
            for r, f in zip(rate, failed)
        ]
        verdicts = [None if r is None else not f for r, f in zip(rate, failed)]
        out.append(
            f"| {count} x {settings.events_each} push/event at once, each taken exactly once | "
            f"{' / '.join(cells)} | exactly once, rate stated | {met_cell(verdicts)} |"
        )
        close = [_median(results, b, host, "close_s") for b in backends]
        left = [max(results.get(b, host, HOST, "left_alive"), default=None) for b in backends]
        cells = [f"{_cell(c, ' s')}, {_cell(n, ' left', 0)}" for c, n in zip(close, left)]
        verdicts = [None if c is None or n is None else c <= 1.0 and n == 0 for c, n in zip(close, left)]
        out.append(
            f"| close all {count}, no process left | {' / '.join(cells)} | <= 1 s, 0 left | {met_cell(verdicts)} |"
        )
    return out + [""]


def fleet_report(results: Results, backends: Sequence[str], settings: FleetSettings) -> list[str]:
    """Every fleet figure's min / **median** / max, in Markdown."""
    out = [
        f"## Fleet: every figure (scripts/bench/fleet.py; {settings.reps} repetitions)",
    ]
    out += ["", "| figure | " + " | ".join(backends) + " |", "|---|" + "---|" * len(backends)]
    metrics = [
        ("ready_s", "ready (s)"),
        ("ready_cpu_s", "ready, this process's CPU (s)"),
        ("rss_per_server_kib", "host process RSS per server (KiB)"),
        ("server_rss_kib", "one echo server's RSS (KiB)"),
        ("fds_per_server", "descriptors per server"),
        ("events_per_s", "burst: events taken per second"),
        ("burst_s", "burst (s)"),
        ("burst_cpu_s", "burst, CPU (s)"),
        ("missing", "burst: events not taken"),
        ("declined", "burst: events the host answered accepted: false (delivery timeout)"),
        ("close_s", "close (s)"),
        ("close_cpu_s", "close, CPU (s)"),
        ("left_alive", "processes left after close"),
    ]
    measures = sorted({m for (_, m, _, _) in results.values if m.startswith("fleet-")}, key=_order)
    for measure in measures:
        for metric, label in metrics:
            cells = [spread(results.get(b, measure, HOST, metric)) for b in backends]
            if all(cell == "n/a" for cell in cells):
                continue
            out.append(f"| {measure}: {label} | {' | '.join(cells)} |")
    return out + [""]


def _order(measure: str) -> tuple[int, int]:
    parts = measure.split("-")
    kind = {"floor": 0, "base": 2}.get(parts[1], 1)
    return int(parts[-1]), kind


# --- where the time goes ----------------------------------------------------------------------


def profile_fleet(server: Path, backend: str, count: int, top: int = 22) -> str:
    """cProfile of a ``Host`` of ``count`` echo servers: its start-up (entering it to
    ``wait_ready``), the burst, and its close, each apart: own time, then cumulative time
    (wall clock, so time the scheduler gave other processes counts too; read the shares)."""
    import cProfile
    import io
    import pstats

    from mcpl_host import Host, load_config

    raise_fd_limit()
    phases = {name: cProfile.Profile() for name in ("start-up", "burst", "close")}

    async def run(folder: Path) -> None:
        host = Host(load_config(write_config(folder, server, count)), subscribe_all=False)
        subscription = host.subscribe(kinds=["push_event"])
        phases["start-up"].enable()
        async with host:
            await host.wait_ready(timeout=60.0 + count * 0.2)
            phases["start-up"].disable()

            async def consume() -> None:
                async for _ in subscription:
                    pass

            async def flood(name: str) -> None:
                conn = await host.server(name).connected()
                await conn.mcp.call_tool("flood", {"count": 20})

            phases["burst"].enable()
            async with anyio.create_task_group() as tg:
                tg.start_soon(consume)
                async with anyio.create_task_group() as floods:
                    for name in host.servers:
                        floods.start_soon(flood, name)
                tg.cancel_scope.cancel()
            phases["burst"].disable()
            phases["close"].enable()
        phases["close"].disable()

    with tempfile.TemporaryDirectory() as folder:
        anyio.run(run, Path(folder), backend=backend)
    parts: list[str] = []
    for name, profiler in phases.items():
        stream = io.StringIO()
        stats = pstats.Stats(profiler, stream=stream)
        total: float = getattr(stats, "total_tt")  # noqa: B009 (set by pstats, not in its stubs)
        stream.write(f"### cProfile: {count} servers, {name}, {backend}: {total:.2f} s profiled\n\n")
        stats.strip_dirs().sort_stats("tottime").print_stats(top)
        stats.sort_stats("cumulative").print_stats(top)
        parts.append(stream.getvalue())
    return "\n".join(parts)

"""Streamable HTTP and WebSocket measurements (``--only http-json,http-sse,ws``).

Three modes, each against the loopback server of ``bench.http_server`` (one process per
repetition and backend, pinned with the benchmark as the stdio echo server is; every
measurement opens a fresh session on it):

- ``http-json``: Streamable HTTP, each request answered with an ``application/json`` body;
  notifications on the session's GET stream.
- ``http-sse``: Streamable HTTP, each request answered with a ``text/event-stream`` body.
- ``ws``: WebSocket, one message per text frame.

Clients: mcpl-host (``connect(ServerConfig(url=...))``, its defaults: for ``http://`` the
automatic choice, Streamable HTTP first; its public API only: ``conn.mcp.ping``,
``conn.mcp.call_tool``, ``HostHandlers.on_notification``), the official SDK
(``streamable_http_client`` + ``ClientSession``; it has no WebSocket client, so n/a there),
and the floors of ``bench.net_floor`` (httpx; wsproto over anyio).

Measurements, per mode, client and backend: pings with 1, 16 and 100 in flight (requests
per second, latency, the client's CPU per request and the server's, from
``/proc/PID/schedstat``); a stream of ``notifications/resources/updated`` from the server
(``tools/call notify``: on the POST's event stream, the GET stream, or the socket), per
second, from the request until the result and every notification have arrived; one result of
``big_mib`` MiB, request to parsed result. Interleaved as the stdio measurements are: for each
repetition and backend, each measurement runs every client in turn, the order rotating.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Literal

import anyio

from bench.drivers import ClientKind, ToolOutcome, _outcome
from bench.measure import MIB, percentile, run_in_flight
from bench.report import Results, Row, _number, figure_table, met_cell

__all__ = [
    "MODES",
    "NET_QUICK",
    "NetSettings",
    "ServerProcess",
    "net_report",
    "net_targets",
    "run_network",
]

Mode = Literal["http-json", "http-sse", "ws"]
MODES: tuple[Mode, ...] = ("http-json", "http-sse", "ws")
_PATHS = {"http-json": "/json", "http-sse": "/sse", "ws": "/ws"}
_NOTIFICATION = "notifications/resources/updated"
SERVER_SCRIPT = Path(__file__).resolve().with_name("http_server.py")


@dataclass(frozen=True, slots=True)
class NetSettings:
    """What the network measurements do. Counts are requests or notifications."""

    reps: int = 2
    warmup: int = 100
    requests: int = 1000
    in_flight: tuple[int, ...] = (1, 16, 100)
    notifications: int = 5000
    big_mib: int = 32
    #: Seconds after which a measurement of pings in flight starts no more pings.
    cell_seconds: float = 0.5
    #: Seconds one measurement may take before it is recorded as failed.
    cell_timeout_seconds: float = 180.0


#: ``--quick``: the same measurements, small: under a minute for the three modes.
NET_QUICK = NetSettings(
    reps=1,
    warmup=20,
    requests=200,
    notifications=1000,
    big_mib=8,
    cell_seconds=0.25,
    cell_timeout_seconds=30.0,
)


# --- the server -------------------------------------------------------------------------


class ServerProcess:
    """``http_server.py`` in a process of its own: ``port``, and ``cpu_seconds()`` it has
    run so far (``/proc/PID/schedstat``, nanoseconds; 0.0 where it is absent)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(SERVER_SCRIPT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.strip().isdigit():
            self.stop()
            raise RuntimeError(f"the HTTP bench server did not start: {line!r}")
        self.port = int(line)
        self._schedstat = Path(f"/proc/{self.process.pid}/schedstat")

    def url(self, mode: Mode) -> str:
        scheme = "ws" if mode == "ws" else "http"
        return f"{scheme}://127.0.0.1:{self.port}{_PATHS[mode]}"

    def cpu_seconds(self) -> float:
        try:
            return int(self._schedstat.read_text().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            return 0.0

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# --- the clients ------------------------------------------------------------------------


class Tally:
    """Counts the notifications a client hands its application; ``expect(n)`` starts a
    count whose ``reached`` event is set at ``n``."""

    def __init__(self) -> None:
        self.count = 0
        self.target = -1
        self.reached = anyio.Event()

    def expect(self, target: int) -> None:
        self.count, self.target, self.reached = 0, target, anyio.Event()

    def hit(self) -> None:
        self.count += 1
        if self.count == self.target:
            self.reached.set()


@dataclass(frozen=True, slots=True)
class NetDriver:
    ping: Callable[[], Awaitable[object]]
    call_tool: Callable[[str, dict[str, Any]], Awaitable[ToolOutcome]]
    tally: Tally


@asynccontextmanager
async def open_mcpl_host(url: str) -> AsyncGenerator[NetDriver, None]:
    """mcpl-host with its defaults, through its public API only."""
    import mcpl_host

    tally = Tally()

    class Handlers(mcpl_host.HostHandlers):
        def on_notification(self, server: str, method: str, params: Any) -> None:
            if method == _NOTIFICATION:
                tally.hit()

    async with mcpl_host.connect(mcpl_host.ServerConfig(url=url), handlers=Handlers()) as conn:
        calls = conn.mcp

        async def call_tool(name: str, arguments: dict[str, Any]) -> ToolOutcome:
            result = await calls.call_tool(name, arguments)
            return _outcome(result.content, result.structured_content)

        yield NetDriver(ping=calls.ping, call_tool=call_tool, tally=tally)


@asynccontextmanager
async def open_sdk(url: str) -> AsyncGenerator[NetDriver, None]:
    """The official SDK's Streamable HTTP client, with its defaults but one: an event may
    be as large as mcpl-host's bound (``Limits.max_sse_event_bytes``, 34 MiB), not the
    SDK's 1 MiB, so that a large result answered as an event stream fits."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from mcpl_host import Limits

    tally = Tally()

    async def on_message(message: Any) -> None:
        root = getattr(message, "root", message)
        if getattr(root, "method", None) == _NOTIFICATION:
            tally.hit()

    async with (
        streamable_http_client(url, max_sse_event_size=Limits().max_sse_event_bytes) as (read, write),
        ClientSession(read, write, message_handler=on_message) as session,
    ):
        await session.initialize()

        async def call_tool(name: str, arguments: dict[str, Any]) -> ToolOutcome:
            result = await session.call_tool(name, arguments)
            blocks = result.content
            text = getattr(blocks[0], "text", None) if blocks else None
            return ToolOutcome(len(text) if isinstance(text, str) else 0, result.structured_content)

        yield NetDriver(ping=session.send_ping, call_tool=call_tool, tally=tally)


@asynccontextmanager
async def open_floor(url: str, mode: Mode) -> AsyncGenerator[NetDriver, None]:
    from bench.net_floor import open_http_floor, open_ws_floor

    tally = Tally()

    def on_notification(method: str) -> None:
        if method == _NOTIFICATION:
            tally.hit()

    opened = open_ws_floor if mode == "ws" else open_http_floor
    async with opened(url, on_notification) as floor:

        async def ping() -> object:
            return await floor.request("ping")

        async def call_tool(name: str, arguments: dict[str, Any]) -> ToolOutcome:
            result = await floor.request("tools/call", {"name": name, "arguments": arguments})
            return _outcome(result.get("content"), result.get("structuredContent"))

        yield NetDriver(ping=ping, call_tool=call_tool, tally=tally)


def clients_of(mode: Mode, clients: Sequence[ClientKind]) -> list[ClientKind]:
    """The clients measured in ``mode``: the SDK has no WebSocket client."""
    return [client for client in clients if not (mode == "ws" and client == "sdk")]


def open_net_client(kind: ClientKind, mode: Mode, url: str) -> AbstractAsyncContextManager[NetDriver]:
    if kind == "mcpl-host":
        return open_mcpl_host(url)
    if kind == "sdk":
        return open_sdk(url)
    return open_floor(url, mode)


# --- the measurements ---------------------------------------------------------------------


async def measure_in_flight(
    driver: NetDriver, server: ServerProcess, settings: NetSettings, in_flight: int
) -> dict[str, float]:
    """``requests`` pings with ``in_flight`` outstanding (closed loop), or as many as
    ``cell_seconds`` allow: requests per second, latency median and p99, the client's and
    the server's CPU per request."""
    await run_in_flight(driver.ping, max(settings.warmup, in_flight), in_flight)
    served = server.cpu_seconds()
    cpu, wall = time.process_time(), time.perf_counter()
    latencies = await run_in_flight(driver.ping, settings.requests, in_flight, settings.cell_seconds)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    served = server.cpu_seconds() - served
    latencies.sort()
    return {
        "req_per_s": len(latencies) / wall,
        "median_us": percentile(latencies, 0.5) * 1e6,
        "p99_us": percentile(latencies, 0.99) * 1e6,
        "cpu_us": cpu / len(latencies) * 1e6,
        "server_cpu_us": served / len(latencies) * 1e6,
    }


async def measure_notify(driver: NetDriver, server: ServerProcess, settings: NetSettings) -> dict[str, float]:
    """``tools/call notify``: the server sends ``notifications`` notifications, then the
    result. Notifications per second from the request until the result and every
    notification have reached the client's application; CPU per notification."""
    count = settings.notifications
    driver.tally.expect(settings.warmup)
    await driver.call_tool("notify", {"count": settings.warmup})
    await driver.tally.reached.wait()
    driver.tally.expect(count)
    served = server.cpu_seconds()
    cpu, wall = time.process_time(), time.perf_counter()
    outcome = await driver.call_tool("notify", {"count": count})
    await driver.tally.reached.wait()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    served = server.cpu_seconds() - served
    if not isinstance(outcome.structured, dict) or outcome.structured.get("sent") != count:
        raise RuntimeError(f"the notify result carries no count: {outcome.structured!r}")
    return {
        "per_s": count / wall,
        "cpu_us": cpu / count * 1e6,
        "server_cpu_us": served / count * 1e6,
    }


async def measure_big(driver: NetDriver, server: ServerProcess, settings: NetSettings) -> dict[str, float]:
    """One answer of exactly ``big_mib`` MiB: milliseconds from the request to the parsed
    result, and the client's CPU milliseconds."""
    size = settings.big_mib * MIB
    await driver.call_tool("big", {"bytes": 4096})
    cpu, wall = time.process_time(), time.perf_counter()
    outcome = await driver.call_tool("big", {"bytes": size})
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if not size - 200 < outcome.text_length < size:
        raise RuntimeError(f"a {settings.big_mib} MiB answer came back with {outcome.text_length} characters")
    return {"ms": wall * 1e3, "cpu_ms": cpu * 1e3}


Cell = tuple[str, Callable[[NetDriver, ServerProcess], Awaitable[dict[str, float]]]]


def _cells(settings: NetSettings) -> list[Cell]:
    cells: list[Cell] = [
        (f"inflight-{width}", partial(measure_in_flight, settings=settings, in_flight=width))
        for width in settings.in_flight
    ]
    cells.append(("notify", partial(measure_notify, settings=settings)))
    cells.append((f"big-{settings.big_mib}", partial(measure_big, settings=settings)))
    return cells


def _rotated(clients: Sequence[ClientKind], turn: int) -> list[ClientKind]:
    k = turn % len(clients) if clients else 0
    return [*clients[k:], *clients[:k]]


def _note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def _round(
    backend: str,
    rep: int,
    modes: Sequence[Mode],
    clients: Sequence[ClientKind],
    server: ServerProcess,
    settings: NetSettings,
    results: Results,
) -> None:
    cells = _cells(settings)
    for mode in modes:
        url = server.url(mode)
        for index, (measure, run) in enumerate(cells):
            for client in _rotated(clients_of(mode, clients), rep + index):
                gc.collect()
                key = f"{mode}/{measure}"
                try:
                    with anyio.fail_after(settings.cell_timeout_seconds):
                        async with open_net_client(client, mode, url) as driver:
                            metrics = await run(driver, server)
                except Exception as exc:  # recorded and reported; the run goes on
                    results.fail(backend, key, client, f"{type(exc).__name__}: {exc}"[:300])
                    _note(f"  rep {rep + 1} {backend} {key} {client}: FAILED {type(exc).__name__}: {exc}")
                    continue
                results.add(backend, key, client, metrics)
                shown = ", ".join(f"{name} {value:,.1f}" for name, value in metrics.items())
                _note(f"  rep {rep + 1} {backend} {key} {client}: {shown}")


def run_network(
    sections: Sequence[str],
    backends: Sequence[str],
    clients: Sequence[ClientKind],
    results: Results,
    *,
    quick: bool,
    reps: int | None = None,
) -> NetSettings | None:
    """Run the measurements of the modes named in ``sections`` into ``results``; the
    settings used (None when no mode was named)."""
    modes = [mode for mode in MODES if mode in sections]
    if not modes:
        return None
    settings = NET_QUICK if quick else NetSettings()
    if reps:
        settings = replace(settings, reps=reps)
    for rep in range(settings.reps):
        for backend in backends:
            _note(f"network repetition {rep + 1}/{settings.reps}, {backend}")
            server = ServerProcess()
            try:
                anyio.run(_round, backend, rep, modes, clients, server, settings, results, backend=backend)
            finally:
                server.stop()
    return settings


# --- the report ---------------------------------------------------------------------------


def rows_of(mode: Mode, settings: NetSettings) -> list[Row]:
    """The rows of one mode's figure table, in reading order."""
    rows: list[Row] = []
    for width in settings.in_flight:
        name = f"up to {settings.requests:,} pings, {width} in flight"
        measure = f"{mode}/inflight-{width}"
        rows += [
            Row(measure, "req_per_s", f"{name}: req/s"),
            Row(measure, "median_us", f"{name}: latency median (µs)"),
            Row(measure, "p99_us", f"{name}: latency p99 (µs)"),
            Row(measure, "cpu_us", f"{name}: client CPU per request (µs)"),
            Row(measure, "server_cpu_us", f"{name}: server CPU per request (µs)"),
        ]
    name = f"{settings.notifications:,} notifications from the server"
    rows += [
        Row(f"{mode}/notify", "per_s", f"{name}: per second"),
        Row(f"{mode}/notify", "cpu_us", f"{name}: client CPU per notification (µs)"),
        Row(f"{mode}/notify", "server_cpu_us", f"{name}: server CPU per notification (µs)"),
        Row(
            f"{mode}/big-{settings.big_mib}",
            "ms",
            f"one {settings.big_mib} MiB result, request to parsed (ms)",
        ),
        Row(
            f"{mode}/big-{settings.big_mib}", "cpu_ms", f"one {settings.big_mib} MiB result, client CPU (ms)"
        ),
    ]
    return rows


@dataclass(frozen=True, slots=True)
class NetTarget:
    """mcpl-host's median over ``against``'s (SDK or floor) must be ``direction`` ``limit``."""

    label: str
    measure: str
    metric: str
    against: Literal["sdk", "floor"]
    direction: Literal["<=", ">="]
    limit: float
    unit: str


def targets_of(mode: Mode, settings: NetSettings) -> list[NetTarget]:
    targets: list[NetTarget] = []
    for width in settings.in_flight:
        label = f"{mode}: pings, {width} in flight"
        measure = f"{mode}/inflight-{width}"
        targets.append(NetTarget(label, measure, "req_per_s", "floor", ">=", 0.7, " req/s"))
        if mode != "ws":
            targets.append(NetTarget(label, measure, "req_per_s", "sdk", ">=", 3.0, " req/s"))
    targets.append(
        NetTarget(
            f"{mode}: notifications from the server", f"{mode}/notify", "per_s", "floor", ">=", 0.5, "/s"
        )
    )
    big = f"{mode}: one {settings.big_mib} MiB result"
    targets.append(NetTarget(big, f"{mode}/big-{settings.big_mib}", "ms", "floor", "<=", 1.5, " ms"))
    return targets


def target_table(
    results: Results, modes: Sequence[Mode], backends: Sequence[str], settings: NetSettings
) -> str:
    """One line per target: mcpl-host's medians and ratio per backend (``/`` between
    them), the target, and whether it is met on every backend."""
    lines = [
        f"| measure | mcpl-host ({' / '.join(backends)}) | other ({' / '.join(backends)}) | ratio | target | met |",
        "|---|---|---|---|---|---|",
    ]
    for mode in modes:
        for target in targets_of(mode, settings):
            ours_cells, other_cells, ratio_cells = [], [], []
            verdicts: list[bool | None] = []
            for backend in backends:
                ours = results.median(backend, target.measure, "mcpl-host", target.metric)
                other = results.median(backend, target.measure, target.against, target.metric)
                ours_cells.append("n/a" if ours is None else _number(ours) + target.unit)
                other_cells.append("n/a" if other is None else _number(other) + target.unit)
                if ours is None or not other:
                    ratio_cells.append("n/a")
                    verdicts.append(None)
                    continue
                ratio = ours / other
                ratio_cells.append(f"{ratio:.2f}x")
                verdicts.append(ratio <= target.limit if target.direction == "<=" else ratio >= target.limit)
            against = "SDK" if target.against == "sdk" else "floor"
            lines.append(
                f"| {target.label} | {' / '.join(ours_cells)} | {against}: {' / '.join(other_cells)} | "
                f"{' / '.join(ratio_cells)} | {target.direction} {target.limit:.2f}x {against} | {met_cell(verdicts)} |"
            )
    return "\n".join(lines)


def net_targets(
    results: Results, sections: Sequence[str], backends: Sequence[str], settings: NetSettings | None
) -> list[str]:
    """The Markdown lines of the network targets (none when no mode ran)."""
    if settings is None:
        return []
    modes = [mode for mode in MODES if mode in sections]
    return [
        "### Streamable HTTP and WebSocket (ratios of mcpl-host's median to the other client's)",
        "",
        target_table(results, modes, backends, settings),
        "",
    ]


def net_report(
    results: Results,
    sections: Sequence[str],
    backends: Sequence[str],
    clients: Sequence[ClientKind],
    settings: NetSettings | None,
) -> list[str]:
    """The Markdown lines of the network measurements' figures (none when none ran)."""
    if settings is None:
        return []
    modes = [mode for mode in MODES if mode in sections]
    out = [
        "## Streamable HTTP and WebSocket (scripts/bench/http_ws.py)",
        "",
        f"- {settings.reps} repetitions; each measurement a fresh session on the loopback server "
        "of `scripts/bench/http_server.py` (one process per repetition and backend)",
        f"- pings in flight: up to {settings.requests:,}, no new one started after "
        f"{settings.cell_seconds:g} s",
        "- the SDK has no WebSocket client: n/a in `ws`",
        "",
    ]
    for mode in modes:
        for backend in backends:
            out += [
                f"### {mode}, {backend}",
                "",
                figure_table(results, backend, rows_of(mode, settings), clients_of(mode, clients)),
                "",
            ]
    return out


# --- where mcpl-host's time goes ------------------------------------------------------------


def _cprofile(
    mode: Mode, backend: str, title: str, work: Callable[[NetDriver], Awaitable[object]], per: int
) -> str:
    import cProfile
    import io
    import pstats

    # CPU time, not wall time: on a shared machine a send that lets another process run
    # would otherwise be charged with that process's time.
    profiler = cProfile.Profile(time.process_time)
    server = ServerProcess()

    async def run() -> None:
        async with open_mcpl_host(server.url(mode)) as driver:
            await work(driver)  # warm: the same work once unprofiled
            profiler.enable()
            await work(driver)
            profiler.disable()

    try:
        anyio.run(run, backend=backend)
    finally:
        server.stop()
    stream = io.StringIO()
    stats = pstats.Stats(profiler, stream=stream)
    profiled: float = getattr(stats, "total_tt")  # noqa: B009 (set by pstats, not in its stubs)
    stream.write(f"### cProfile: {mode}, {title}, {backend}\n\n")
    stream.write(f"profiled time {profiled:.3f} s ({profiled / per * 1e6:.1f} µs per unit)\n")
    stats.strip_dirs().sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(40)
    return stream.getvalue()


def spin(mode: Mode, backend: str, work: str, count: int, in_flight: int) -> None:
    """The py-spy target: a server of its own and mcpl-host doing ``work`` (``pings`` with
    ``in_flight`` outstanding, or ``notify``) ``count`` times over."""
    server = ServerProcess()

    async def run() -> None:
        async with open_mcpl_host(server.url(mode)) as driver:
            if work == "pings":
                await run_in_flight(driver.ping, count, in_flight)
            else:
                for _ in range(count // 1000):
                    driver.tally.expect(1000)
                    await driver.call_tool("notify", {"count": 1000})
                    await driver.tally.reached.wait()

    try:
        anyio.run(run, backend=backend)
    finally:
        server.stop()


def _sampled(mode: Mode, backend: str, work: str, count: int, in_flight: int) -> str:
    import shutil
    import tempfile

    from bench.profiling import _sampled_shares

    spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if spy is None:
        return "py-spy is not installed (`pip install py-spy`): no sampled profile\n"
    scripts = Path(__file__).resolve().parents[1]
    code = (
        f"import sys; sys.path.insert(0, {str(scripts)!r}); from bench.http_ws import spin; "
        f"spin({mode!r}, {backend!r}, {work!r}, {count}, {in_flight})"
    )
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "raw.txt"
        argv = [spy, "record", "--rate", "1000", "--format", "raw", "--output", str(out), "--"]
        done = subprocess.run(
            [*argv, sys.executable, "-c", code], capture_output=True, text=True, timeout=600
        )
        if done.returncode != 0 or not out.exists():
            return f"py-spy failed ({done.returncode}): {done.stderr.strip()[-500:]}\n"
        title = f"{count:,} pings, {in_flight} in flight" if work == "pings" else f"{count:,} notifications"
        return f"### py-spy: {mode}, {title}, {backend}\n\n" + _sampled_shares(out.read_text(), 40)


def net_profile_report(sections: Sequence[str], backend: str, *, quick: bool) -> str:
    """cProfile of mcpl-host in each mode named: pings at 16 in flight, a notification
    stream, one large result; and py-spy's samples of pings and of notifications."""
    settings = NET_QUICK if quick else NetSettings()
    pings, notes = settings.requests, settings.notifications
    parts: list[str] = []
    for mode in (mode for mode in MODES if mode in sections):

        async def in_flight(driver: NetDriver) -> None:
            await run_in_flight(driver.ping, pings, 16)

        async def notify(driver: NetDriver) -> None:
            driver.tally.expect(notes)
            await driver.call_tool("notify", {"count": notes})
            await driver.tally.reached.wait()

        async def big(driver: NetDriver) -> None:
            await driver.call_tool("big", {"bytes": settings.big_mib * MIB})

        parts.append(_cprofile(mode, backend, f"{pings:,} pings, 16 in flight", in_flight, pings))
        parts.append(_cprofile(mode, backend, f"{notes:,} notifications", notify, notes))
        parts.append(_cprofile(mode, backend, f"one {settings.big_mib} MiB result", big, 1))
        parts.append(_sampled(mode, backend, "pings", 4 * pings, 16))
        parts.append(_sampled(mode, backend, "notify", 4 * notes, 1))
    return "\n".join(parts)

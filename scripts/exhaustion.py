#!/usr/bin/env python3
"""Memory and time of the host against hostile servers, with the default ``Limits``.

Each case runs in its own host process, timed by ``/usr/bin/time -v`` (peak resident set
size, wall time), against ``fixtures/hostile_server.py`` (stdio) or, for the ``http-`` cases,
``fixtures/hostile_http_server.py`` (Streamable HTTP on loopback); the host process also
measures the longest stall of its event loop (a task that sleeps 5 ms and notes how late it
wakes).

    .venv/bin/python scripts/exhaustion.py                  # every case, a table
    .venv/bin/python scripts/exhaustion.py --json           # the same as JSON lines
    .venv/bin/python scripts/exhaustion.py --src OLD_CHECKOUT --cap-mib 3000 --timeout 120
                                                            # another checkout, for comparison

``--src`` runs the cases against the ``mcpl_host`` package of another checkout (with the
fixture of this one), under an address-space cap and a timeout, so a host without the bounds
fails instead of taking the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = ROOT / "fixtures" / "hostile_server.py"
HOSTILE_HTTP = ROOT / "fixtures" / "hostile_http_server.py"

#: case -> (server mode, count, the bound that applies, in words)
CASES: dict[str, tuple[str, int | None, str]] = {
    "idle": ("idle", None, "(baseline: handshake and ping)"),
    "pager": ("pager", None, "max_list_bytes = 32 MiB"),
    "channels": ("channels", 20000, "max_channels = 1024"),
    "state-doubling": ("state-doubling", None, "max_state_bytes = 1 MiB, max_patch_seconds = 0.1"),
    "state-large": ("state-large", 200, "max_total_state_bytes = 16 MiB"),
    "state-huge": ("state-huge", 64, "max_state_bytes = 1 MiB (64 updates of 8 MB)"),
    "manifest": ("manifest", 5, "max_manifest_bytes = 256 KiB (5 fetches near the bounds)"),
    "manifest-huge": ("manifest-huge", None, "max_manifest_bytes = 256 KiB (30 MB advertised)"),
    "tags": ("tags", 100, "max_tags = 256 (100 pushes of 100,000 tags)"),
    "http-idle": ("", None, "(baseline: Streamable HTTP handshake and tools/list)"),
    "http-gzip-gzip": ("gzip,gzip", None, "max_line_bytes = 33 MiB per decoding layer (4 GiB decoded)"),
    "http-gzip-gzip-sse": (
        "gzip,gzip",
        None,
        "max_sse_event_bytes = 34 MiB per decoding layer (4 GiB decoded, one event)",
    ),
    "schema-doubling": ("schema-doubling", 30, "max_schema_check_seconds = 2 (2^30 checks, in the worker)"),
    "channels-wide": ("channels-wide", 30, "max_channels = 1024 (30 requests of 20,000 channels)"),
    "probe-channels-wide": (
        "channels-wide",
        30,
        "mcpl-host probe --json --listen 20: max_recorded_event_bytes = 64 KiB, max_recorded_bytes = 8 MiB",
    ),
}
#: Cases that run ``mcpl-host probe --json`` (the CLI keeps a record of events) instead of the
#: library; their outcome gives the size of the ``--json`` document.
PROBE_CASES = frozenset({"probe-channels-wide"})


async def _http_side(case: str) -> str:
    """An ``http-`` case: ``tools/list`` answered by a body of 4 GiB decoded (or, for the
    baseline, by no tools)."""
    import anyio

    from mcpl_host import Limits, MCPLHostError, ServerConfig, connect

    codings = CASES[case][0]
    args = ["bomb", "--codings", codings, "--bytes", str(4 * 1024**3)] if codings else ["idle"]
    if case.endswith("-sse"):
        args.append("--sse")
    process = await anyio.open_process([sys.executable, str(HOSTILE_HTTP), *args], stderr=None)
    try:
        assert process.stdout is not None
        buffer = b""
        while b"\n" not in buffer:
            buffer += await process.stdout.receive()
        port = int(buffer.split(b"\n", 1)[0].split()[1])
        limits = Limits(close_grace_seconds=1.0, terminate_grace_seconds=1.0)
        conn = connect(
            ServerConfig(url=f"http://127.0.0.1:{port}/mcp", limits=limits, transport="streamable-http")
        )
        async with conn:
            try:
                tools = await conn.mcp.list_tools()
                return f"ok: {len(tools)} tools"
            except MCPLHostError as exc:
                return f"{type(exc).__name__}: {exc}"
    finally:
        process.terminate()
        await process.wait()


async def _host_side(case: str) -> dict[str, Any]:
    import anyio

    from mcpl_host import GrantPolicy, HostHandlers, Limits, MCPLHostError, ServerConfig, connect

    mode, count, _ = CASES[case]

    class Handlers(HostHandlers):
        def __init__(self) -> None:
            super().__init__()
            self.done = anyio.Event()
            self.pushes = 0
            self.last_tags = 0
            self.manifest_changes = 0
            self.changed = anyio.Event()

        def on_notification(self, server: str, method: str, params: Any) -> None:
            if method == "test/done":
                self.done.set()

        async def push_event(self, context: Any, params: dict[str, Any]) -> dict[str, Any]:
            self.pushes += 1
            self.last_tags = len(params.get("tags") or ())
            return {"accepted": True}

        def on_manifest_change(self, server: str, receipt: Any) -> None:
            self.manifest_changes += 1
            self.changed.set()

    stall = 0.0

    async def watch_loop() -> None:
        nonlocal stall
        while True:
            before = anyio.current_time()
            await anyio.sleep(0.005)
            stall = max(stall, anyio.current_time() - before - 0.005)

    handlers = Handlers()
    limits = Limits(close_grace_seconds=1.0, terminate_grace_seconds=1.0)
    args = [str(HOSTILE), mode, *([str(count)] if count is not None else [])]
    started = time.perf_counter()
    outcome = ""
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch_loop)
        if case.startswith("http-"):
            outcome = await _http_side(case)
            tg.cancel_scope.cancel()
            return {
                "case": case,
                "outcome": outcome,
                "host_seconds": round(time.perf_counter() - started, 2),
                "max_loop_stall_ms": round(stall * 1000, 1),
            }
        conn = connect(
            ServerConfig(
                command=sys.executable,
                args=tuple(args),
                grant_policy=GrantPolicy(grant_all_advertised=True),
                limits=limits,
            ),
            handlers=handlers,
        )
        async with conn:
            if mode == "schema-doubling":
                await conn.mcp.list_tools()
                try:
                    await conn.mcp.call_tool("t", {})
                    outcome = "checked"
                except MCPLHostError as exc:
                    outcome = f"{type(exc).__name__}: {str(exc)[-80:]}"
            elif mode == "pager":
                try:
                    tools = await conn.mcp.list_tools()
                    outcome = f"ok: {len(tools)} tools"
                except MCPLHostError as exc:
                    outcome = f"{type(exc).__name__}: {exc}"
            elif mode == "manifest-huge":
                await conn.mcp.ping()
                outcome = f"MCPL state {conn.mcpl_state.value}"
            elif mode == "idle":
                await conn.mcp.ping()
                outcome = "ping answered"
            else:
                await handlers.done.wait()
                await conn.mcp.ping()
                if mode == "manifest":
                    with anyio.move_on_after(30):
                        while handlers.manifest_changes < (count or 5):
                            handlers.changed = anyio.Event()
                            await handlers.changed.wait()
                    outcome = f"{handlers.manifest_changes} manifest changes applied"
                elif mode in ("channels", "channels-wide"):
                    outcome = f"{len(conn.hosted.channels)} channels registered"
                elif mode.startswith("state"):
                    store: Any = conn.hosted.state_store
                    current = store.current("demo")
                    held = getattr(store, "total_bytes", None)
                    outcome = f"current {current.checkpoint if current else None}, held {held} bytes"
                elif mode == "tags":
                    outcome = f"{handlers.pushes} pushes, {handlers.last_tags} tags delivered each"
        tg.cancel_scope.cancel()
    return {
        "case": case,
        "outcome": outcome,
        "host_seconds": round(time.perf_counter() - started, 2),
        "max_loop_stall_ms": round(stall * 1000, 1),
    }


def host_side(case: str) -> None:
    import anyio

    try:
        result = anyio.run(_host_side, case)
    except BaseException as exc:  # for a comparison run: an old host may fail in any way
        result = {"case": case, "outcome": f"host failed: {type(exc).__name__}: {str(exc)[:120]}"}
    print(json.dumps(result), flush=True)


def _cap(mib: int | None) -> Any:
    def apply() -> None:
        if mib is not None:
            resource.setrlimit(resource.RLIMIT_AS, (mib * 1024 * 1024, mib * 1024 * 1024))

    return apply


def run_case(case: str, src: Path | None, cap_mib: int | None, timeout: float) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(src if src is not None else ROOT)
    command = ["/usr/bin/time", "-v", sys.executable, str(Path(__file__).resolve()), "--case", case]
    if case in PROBE_CASES:
        mode, count, _ = CASES[case]
        server = [sys.executable, str(HOSTILE), mode, *([str(count)] if count is not None else [])]
        probe = ["-m", "mcpl_host.cli", "probe", "--json", "--listen", "20", "--", *server]
        command = ["/usr/bin/time", "-v", sys.executable, *probe]
    # Its own session, so that a case that runs out of time is ended whole (the timer, the
    # host and the hostile server), not only the timer.
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=_cap(cap_mib),
        start_new_session=True,
        cwd=env["PYTHONPATH"],  # ``-m`` puts the working directory first on the path
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return {"case": case, "outcome": f"did not finish within {timeout:g} s", "bound": CASES[case][2]}
    done = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    if case in PROBE_CASES:
        result: dict[str, Any] = {"case": case, "outcome": _probe_outcome(done.stdout)}
    else:
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        result = json.loads(lines[-1]) if lines else {"case": case, "outcome": "no result"}
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", done.stderr)
    if rss:
        result["peak_rss_mib"] = round(int(rss.group(1)) / 1024, 1)
    if wall:
        parts = [float(part) for part in wall.group(1).split(":")]
        result["wall_seconds"] = round(sum(p * 60**i for i, p in enumerate(reversed(parts))), 2)
    if done.returncode != 0 and "host failed" not in result.get("outcome", ""):
        result["outcome"] = f"exit {done.returncode}: " + result.get("outcome", "")
    result["bound"] = CASES[case][2]
    return result


def _probe_outcome(stdout: str) -> str:
    """The size of a probe's ``--json`` document and what its record of events left out."""
    try:
        doc = json.loads(stdout)
    except ValueError:
        return f"no JSON document ({len(stdout.encode())} bytes of stdout)"
    omitted = doc.get("eventsOmitted") or {"notKept": doc.get("eventsNotKept")}
    return (
        f"--json {len(stdout.encode()):,} bytes, {len(doc.get('events') or ())} events kept, "
        f"{len(doc.get('channels') or ())} channels; left out: {json.dumps(omitted)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--only", nargs="*", choices=list(CASES), help="run only these cases")
    parser.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    parser.add_argument("--src", type=Path, help="the checkout whose mcpl_host to measure")
    parser.add_argument("--cap-mib", type=int, help="address-space cap of each host process")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per case")
    options = parser.parse_args()
    if options.case:
        host_side(options.case)
        return
    for case in options.only or list(CASES):
        result = run_case(case, options.src, options.cap_mib, options.timeout)
        if options.json:
            print(json.dumps(result), flush=True)
        else:
            print(
                f"{case:18} rss {result.get('peak_rss_mib', '-'):>7} MiB  wall {result.get('wall_seconds', '-'):>6} s"
                f"  stall {result.get('max_loop_stall_ms', '-'):>7} ms  {result['bound']}\n"
                f"{'':18} {result['outcome']}",
                flush=True,
            )


if __name__ == "__main__":
    main()

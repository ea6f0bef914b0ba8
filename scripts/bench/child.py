"""Measurements that need a fresh interpreter: import time and resident memory.

The parent runs each in its own process (``run_import``, ``run_idle``) and reads one JSON
object from its stdout. Resident memory is ``VmRSS`` from ``/proc/self/status`` (this process
only, children excluded), in MiB.

Each child runs in ``scripts/`` (its ``sys.path[0]``), so that the ``mcpl_host`` it imports
is the installed one or ``PYTHONPATH``'s (``scripts/bench_compare.py``), never a checkout in
the current directory. ``warm_bytecode`` first writes any missing bytecode of what each
client imports: an editable install is not compiled by pip, and with
``PYTHONDONTWRITEBYTECODE`` set every child would compile the package again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "IMPORTS",
    "PACKAGE_IMPORT",
    "import_profile",
    "import_statement",
    "rss_mib",
    "run_idle",
    "run_import",
    "warm_bytecode",
]

SCRIPTS = Path(__file__).resolve().parents[1]

#: What each client needs imported before it can connect (``bench.drivers``), as one
#: statement. ``import mcpl_host`` alone loads none of its modules (every public name is
#: imported on first use): mcpl-host's is the names its driver uses.
IMPORTS: dict[str, str] = {
    "mcpl-host": "from mcpl_host import GrantPolicy, ServerConfig, connect",
    "sdk": "import mcp, mcp.client.stdio",
    "floor": "import anyio, orjson",
}

#: The package alone, the figure of the ``import mcpl_host`` target.
PACKAGE_IMPORT = "import mcpl_host"


def import_statement(kind: str) -> str:
    """The statement that imports what ``kind`` needs (``IMPORTS``)."""
    return IMPORTS[kind]


_IMPORT_CODE = """
import json, time
start = time.perf_counter()
{statement}
seconds = time.perf_counter() - start
rss = 0.0
with open("/proc/self/status") as status:
    for line in status:
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
print(json.dumps({{"import_s": seconds, "rss_mib": rss}}))
"""


def rss_mib() -> float:
    """This process's resident set size in MiB (0.0 where ``/proc`` is absent)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _run(argv: list[str], timeout: float) -> dict[str, Any]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=SCRIPTS)
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {done.stderr.strip()[-500:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def warm_bytecode(kinds: Iterable[str], timeout: float = 120.0, package: Path | None = None) -> None:
    """Write the bytecode of what each client of ``kinds`` imports (``IMPORTS``) and of the
    whole ``mcpl_host`` package (its modules loaded at the first connection too), untimed,
    with ``PYTHONDONTWRITEBYTECODE`` unset (module docstring); ``package``: the package of
    that tree (``PYTHONPATH``: a base revision's checkout) instead of this one."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    if package is not None:
        env["PYTHONPATH"] = str(package)
    code = "; ".join(
        [
            *(IMPORTS[kind] for kind in kinds),
            "import compileall, os, mcpl_host",
            "compileall.compile_dir(os.path.dirname(mcpl_host.__file__), quiet=1)",
        ]
    )
    subprocess.run([sys.executable, "-c", code], env=env, cwd=SCRIPTS, check=True, timeout=timeout)


def run_import(kind: str, timeout: float = 60.0, statement: str | None = None) -> dict[str, float]:
    """Seconds to import what ``kind`` needs (or to run ``statement``) in a fresh
    interpreter, and RSS afterwards."""
    code = _IMPORT_CODE.format(statement=statement or import_statement(kind))
    return _run([sys.executable, "-c", code], timeout)


def import_profile(statement: str = "import mcpl_host", top: int = 12) -> list[tuple[str, float]]:
    """``python -X importtime``: the ``top`` top-level packages by self time, in seconds."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", statement],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=SCRIPTS,
    )
    totals: dict[str, float] = {}
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        fields = line[len("import time:") :].split("|")
        try:
            self_us = int(fields[0])
        except ValueError:
            continue  # the header line
        package = fields[2].strip().split(".")[0]
        totals[package] = totals.get(package, 0.0) + self_us / 1e6
    return sorted(totals.items(), key=lambda item: -item[1])[:top]


def run_idle(kind: str, backend: str, count: int, server: Path, timeout: float) -> dict[str, float]:
    """In a fresh interpreter: bring up ``count`` connections of ``kind`` at once on
    ``backend``; seconds until all are ready, RSS before (after imports) and with all of
    them up and idle, then seconds to close them all at once (from the one signal to stop
    until every client has closed its connection and its server has been reaped)."""
    code = f"import sys; sys.path.insert(0, {str(SCRIPTS)!r}); from bench.child import main; main()"
    return _run([sys.executable, "-c", code, kind, backend, str(count), str(server)], timeout)


async def _idle(kind: str, count: int, server: Path) -> dict[str, float]:
    import anyio

    from bench.drivers import open_client

    base = rss_mib()
    ready = 0
    all_ready, stop = anyio.Event(), anyio.Event()

    async def one() -> None:
        nonlocal ready
        async with open_client(kind, server):  # type: ignore[arg-type]
            ready += 1
            if ready == count:
                all_ready.set()
            await stop.wait()

    bringup = rss = closing = 0.0
    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(count):
            tg.start_soon(one)
        await all_ready.wait()
        bringup = time.perf_counter() - start
        rss = rss_mib()
        stop.set()
        closing = time.perf_counter()
    closing = time.perf_counter() - closing
    return {"bringup_s": bringup, "rss_base_mib": base, "rss_mib": rss, "close_s": closing}


def main() -> None:
    """The child's entry: ``KIND BACKEND COUNT SERVER``; prints one JSON object."""
    import anyio

    kind, backend, count, server = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
    exec(IMPORTS[kind], {})  # what the client needs, before the base RSS is read
    print(json.dumps(anyio.run(_idle, kind, count, server, backend=backend)))

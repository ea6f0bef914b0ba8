"""The benchmark (scripts/bench.py) still builds and runs: its C echo server answers what
the measurements ask, each client completes one tiny measurement, and the report renders.

No speed is asserted here; speed is measured by the benchmark itself. Skipped without `cc`.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

from bench.drivers import CLIENTS, ClientKind, open_client, sdk_available  # noqa: E402
from bench.measure import Settings, measure_big_line, measure_flood, measure_in_flight, run_in_flight  # noqa: E402
from bench.report import tally  # noqa: E402
from bench.run import main  # noqa: E402
from bench.server import build_echo_server  # noqa: E402

pytestmark = pytest.mark.skipif(
    shutil.which("cc") is None, reason="no C compiler (cc) to build the echo server"
)

TINY = Settings(reps=1, warmup_pings=5, sequential_pings=20, requests=64, flood_events=50, big_mib=(1,))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_echo_server(tmp_path_factory.mktemp("bench-build"))


def _exchange(server: Path, *messages: dict[str, Any]) -> list[dict[str, Any]]:
    lines = b"".join(orjson.dumps(message) + b"\n" for message in messages)
    done = subprocess.run([str(server), "--mcpl"], input=lines, capture_output=True, timeout=10, check=True)
    return [orjson.loads(line) for line in done.stdout.splitlines()]


def test_echo_server_answers_by_the_top_level_id(server: Path) -> None:
    answers = _exchange(
        server,
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "params": {"id": 99, "text": 'a "}' + "\\"}, "id": "x", "method": "echo/this"},
        {"jsonrpc": "2.0", "id": 3, "method": "ping"},
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {"name": "big", "arguments": {"bytes": 5000}},
        },
    )
    assert [answer["id"] for answer in answers] == [1, "x", 3, 4]
    assert answers[0]["result"]["protocolVersion"] == "2025-06-18"
    assert answers[0]["result"]["capabilities"]["experimental"]["mcpl"]["pushEvents"] is True
    assert answers[1]["result"] == {"id": 99, "text": 'a "}' + "\\"}
    assert answers[2]["result"] == {}
    assert len(orjson.dumps(answers[3])) + 1 == 5000  # the whole line, newline included


@pytest.mark.anyio
@pytest.mark.parametrize("kind", CLIENTS)
async def test_each_client_completes_a_tiny_measurement(server: Path, kind: ClientKind) -> None:
    if kind == "sdk" and not sdk_available():
        pytest.skip("the mcp SDK is not installed")
    with anyio.fail_after(30):
        async with open_client(kind, server) as driver:
            in_flight = await measure_in_flight(driver, TINY, 16)
            flood = await measure_flood(driver, TINY)
            big = await measure_big_line(driver, TINY, 1)
    assert in_flight["req_per_s"] > 0 and in_flight["p99_us"] >= in_flight["median_us"] > 0
    # Every event was answered; the SDK cannot serve push/event and refuses each one.
    expected_refused = TINY.flood_events if kind == "sdk" else 0
    assert flood["refused"] == expected_refused
    assert big["ms"] > 0


def test_the_report_renders(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--quick", "--reps", "1", "--only", "seq", "--clients", "mcpl-host,floor", "--backends", "trio"]
    status = main([*argv, "--cpu", "all"])  # pinning would pin the test session itself
    report = capsys.readouterr().out
    assert status == 0
    assert "## Targets" in report
    assert "| sequential ping, median (µs) |" in report
    assert "mcpl-host (trio)" in report
    assert "- CPU: not pinned" in report


@pytest.mark.anyio
async def test_pings_in_flight_stop_starting_after_their_seconds() -> None:
    calls = 0
    release = anyio.Event()

    async def call() -> None:
        nonlocal calls
        calls += 1
        await release.wait()

    async def run() -> list[float]:
        return await run_in_flight(call, 1000, 4, seconds=0.0)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            latencies: list[list[float]] = []

            async def measure() -> None:
                latencies.append(await run())

            tg.start_soon(measure)
            await anyio.wait_all_tasks_blocked()
            release.set()
    # Each of the four tasks made its one call and started no other past the deadline.
    assert calls == 4 and len(latencies[0]) == 4


def test_the_tally_counts_each_target_row_by_its_verdict() -> None:
    table = "\n".join(
        [
            "| measure | ours | target | met |",
            "|---|---|---|---|",
            "| a | 1 | <= 2x | **yes** |",
            "| b | 3 | <= 2x | no |",
            "| c | 1 / 3 | <= 2x | partly (yes / no) |",
            "| d | n/a | <= 2x | not measured |",
            "| e | n/a | <= 2x | partly measured (n/a / yes) |",
            "| f | 120 KiB | stated | - |",
        ]
    )
    assert tally([table]) == "5 targets: 1 met, 1 partly met, 1 not met, 2 not measured."


def test_warm_bytecode_compiles_the_package_of_the_tree_it_is_given(tmp_path: Path) -> None:
    # The fleet's base revision (--fleet-base) is a fresh checkout with no bytecode; compiled
    # from source in each child, its RSS per server read lower than the same code's. Its
    # package is compiled too before the fleet runs, not only this tree's.
    from bench.child import warm_bytecode

    package = Path(__file__).resolve().parent.parent / "mcpl_host"
    shutil.copytree(package, tmp_path / "mcpl_host", ignore=shutil.ignore_patterns("__pycache__"))
    warm_bytecode(["mcpl-host"], package=tmp_path)
    compiled = {path.name.split(".")[0] for path in (tmp_path / "mcpl_host" / "__pycache__").glob("*.pyc")}
    assert {"connection", "hosted", "server_connection"} <= compiled
    assert list((tmp_path / "mcpl_host" / "transports" / "__pycache__").glob("stdio.*.pyc"))

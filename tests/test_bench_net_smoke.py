"""The benchmark's Streamable HTTP and WebSocket measurements (scripts/bench/http_ws.py)
still run: the loopback server answers each mode, each client completes one tiny measurement
in each mode it speaks, and the report renders.

No speed is asserted here; speed is measured by the benchmark itself.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

from bench.drivers import CLIENTS, ClientKind, sdk_available  # noqa: E402
from bench.http_ws import (  # noqa: E402
    MODES,
    Mode,
    NetSettings,
    ServerProcess,
    clients_of,
    measure_big,
    measure_in_flight,
    measure_notify,
    open_net_client,
)
from bench.run import main  # noqa: E402

TINY = NetSettings(reps=1, warmup=5, requests=40, in_flight=(16,), notifications=50, big_mib=1)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    process = ServerProcess()
    try:
        yield process
    finally:
        process.stop()


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", CLIENTS)
async def test_each_client_completes_a_tiny_measurement(
    server: ServerProcess, mode: Mode, kind: ClientKind
) -> None:
    if kind not in clients_of(mode, CLIENTS):
        pytest.skip(f"{kind} has no client for {mode}")
    if kind == "sdk" and not sdk_available():
        pytest.skip("the mcp SDK is not installed")
    with anyio.fail_after(60):
        async with open_net_client(kind, mode, server.url(mode)) as driver:
            in_flight = await measure_in_flight(driver, server, TINY, 16)
            notify = await measure_notify(driver, server, TINY)
            big = await measure_big(driver, server, TINY)
    assert in_flight["req_per_s"] > 0 and in_flight["p99_us"] >= in_flight["median_us"] > 0
    assert notify["per_s"] > 0  # every notification arrived (the measure waits for each)
    assert big["ms"] > 0  # the result had its size (the measure checks it)


def test_the_network_report_renders(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--quick", "--reps", "1", "--only", "ws", "--clients", "mcpl-host,floor", "--backends", "trio"]
    status = main([*argv, "--cpu", "all"])  # pinning would pin the test session itself
    report = capsys.readouterr().out
    assert status == 0
    assert "## Streamable HTTP and WebSocket" in report
    assert "| ws: pings, 16 in flight |" in report
    assert "### ws, trio" in report

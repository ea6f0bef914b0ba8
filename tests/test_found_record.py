"""What the host keeps of what a server sent is bounded in bytes, and the report says what it
left out (``mcpl_host.record``, ``Limits.max_recorded_event_bytes``, ``max_recorded_bytes``).

The probe runs as a child against ``fixtures/hostile_server.py channels-wide``: requests of
20,000 channels each (1.2 MB of JSON a request), of which ``max_channels`` are registered.
Its peak memory is measured (the largest resident set of the processes it waited for, as
``getrusage`` gives it to a wrapper), with the size of its ``--json`` document.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mcpl_host import limits
from mcpl_host.config import load_config
from mcpl_host.json_size import json_size

from . import forkserver
from .conftest import FIXTURES
from .test_cli import CLI, TIMEOUT

PY = sys.executable
HOSTILE = str(FIXTURES / "hostile_server.py")
#: Runs argv[1:], then prints the peak resident set (KiB) of the processes it waited for.
_PEAK = (
    "import resource, subprocess, sys\n"
    "done = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)\n"
    "sys.stdout.buffer.write(done.stdout)\n"
    "sys.stderr.buffer.write(done.stderr)\n"
    "sys.stderr.write(f'\\nPEAK_KIB {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\\n')\n"
    "sys.exit(done.returncode)\n"
)


def _probe_measured(*args: str) -> tuple[int, bytes, str, float]:
    """``probe --json ARGS``: status, stdout, stderr, peak memory in MiB."""
    done = subprocess.run(
        [PY, "-c", _PEAK, *CLI, "probe", "--json", *args], capture_output=True, timeout=TIMEOUT * 3
    )
    stderr = done.stderr.decode(errors="replace")
    peak = int(stderr.rsplit("PEAK_KIB ", 1)[1].split()[0]) / 1024
    return done.returncode, done.stdout, stderr, peak


def test_channel_registrations_of_20000_channels_are_recorded_within_bytes() -> None:
    status, stdout, stderr, peak_mib = _probe_measured(
        "--listen", "inf", "--", PY, HOSTILE, "channels-wide", "6", "exit"
    )
    assert status == 1, stderr  # the server went away while the probe listened, its work done
    doc: dict[str, Any] = json.loads(stdout)
    registers = [event for event in doc["events"] if event["method"] == "channels/register"]
    assert len(registers) == 6  # every request is still in the record, in order
    for event in registers:
        assert "params" not in event and "answer" not in event
        assert event["omitted"]["fields"] == ["params", "answer"]
        assert event["omitted"]["bytes"] > 1_000_000
        assert json_size(event) <= 64 * 1024
    omitted = doc["eventsOmitted"]
    assert omitted["cut"] == 6 and omitted["cutBytes"] == sum(e["omitted"]["bytes"] for e in registers)
    assert omitted["notKept"] == 0
    assert len(doc["channels"]) == 1024  # max_channels
    # 6 requests were 16 MB of --json and about 200 MiB of memory while the events were kept whole.
    assert len(stdout) < 1_000_000
    assert peak_mib < 160, peak_mib


def test_the_terminal_report_says_what_the_record_left_out() -> None:
    done = forkserver.run(
        [*CLI, "probe", "--listen", "inf", "--", PY, HOSTILE, "channels-wide", "2", "exit"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 1, done.stderr  # the server went away, its work done
    assert "params, answer left out:" in done.stdout
    assert "left out of the record: 2 kept without their params or answer" in done.stdout


def test_a_server_s_limits_bound_its_record(tmp_path: Path) -> None:
    config = {
        "mcpServers": {
            "h": {
                "command": PY,
                "args": [HOSTILE, "channels-wide", "3", "exit"],
                "limits": {"maxRecordedEventBytes": 100_000_000, "maxRecordedBytes": 2_000_000},
            }
        }
    }
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config))
    assert load_config(path).servers["h"].limits.max_recorded_bytes == 2_000_000
    status, stdout, stderr, _ = _probe_measured("--listen", "inf", "--config", str(path), "--server", "h")
    assert status == 1, stderr  # the server went away, its work done
    doc = json.loads(stdout)
    whole = [e for e in doc["events"] if e["method"] == "channels/register"]
    assert len(whole) == 1 and "params" in whole[0]  # one whole request (1.2 MB) fits in 2 MB
    assert doc["eventsOmitted"]["notKept"] == 2 and doc["eventsOmitted"]["notKeptBytes"] > 2_000_000
    assert doc["eventsNotKept"] == 2


def test_the_default_bounds() -> None:
    assert limits.DEFAULT_MAX_RECORDED_EVENT_BYTES == 64 * 1024
    assert limits.DEFAULT_MAX_RECORDED_BYTES == 8 * 1024 * 1024


# --- the decision, by plain calls -----------------------------------------------------------------


def _event(n: int, size: int) -> dict[str, Any]:
    return {"kind": "request", "method": "m", "params": {"x": "p" * size}, "answer": {"n": n}, "time": "t"}


def test_an_event_over_its_bound_is_kept_without_its_payload() -> None:
    from mcpl_host.record import EventRecord

    record = EventRecord(max_events=10, max_event_bytes=1000, max_total_bytes=10_000)
    small, big = _event(1, 10), _event(2, 5000)
    assert record.add(small) is small
    shown = record.add(big)
    assert shown == {
        "kind": "request",
        "method": "m",
        "answer": {"n": 2},  # small enough once the params are out
        "time": "t",
        "omitted": {"fields": ["params"], "bytes": 5008},
    }
    assert big["params"] == {"x": "p" * 5000}  # the event given is not changed
    assert record.events == [small, shown]
    assert record.omitted() == {"notKept": 0, "notKeptBytes": 0, "cut": 1, "cutBytes": 5008}
    assert record.kept_bytes == json_size(small) + json_size(shown)


def test_the_record_stops_at_its_byte_and_count_bounds_and_counts_the_rest() -> None:
    from mcpl_host.record import EventRecord

    record = EventRecord(max_events=3, max_event_bytes=10_000, max_total_bytes=2_500)
    events = [_event(n, 900) for n in range(4)]
    for event in events:
        record.add(event)
    assert record.events == events[:2]  # the third would pass 2,500 bytes
    assert record.omitted() == {
        "notKept": 2,
        "notKeptBytes": 2 * json_size(events[0]),
        "cut": 0,
        "cutBytes": 0,
    }
    by_count = EventRecord(max_events=3, max_event_bytes=10_000, max_total_bytes=10**9)
    for event in events:
        by_count.add(event)
    assert by_count.events == events[:3] and by_count.not_kept == 1


def test_a_large_answer_is_left_out_after_the_params() -> None:
    from mcpl_host.record import EventRecord

    record = EventRecord(max_events=10, max_event_bytes=1000, max_total_bytes=10**6)
    event = {"kind": "request", "method": "m", "params": {"a": 1}, "answer": {"x": "y" * 5000}, "time": "t"}
    shown = record.add(event)
    assert shown["omitted"]["fields"] == ["params", "answer"]
    assert json_size(shown) <= 1000


def _bridged(program: str, scheme: str, count: int) -> tuple[subprocess.Popen[str], str]:
    bridge = subprocess.Popen(
        [PY, str(FIXTURES / program), "--", PY, HOSTILE, "channels-wide", str(count), "exit"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert bridge.stdout is not None
    line = bridge.stdout.readline()
    assert line.startswith("PORT "), line
    return bridge, f"{scheme}://127.0.0.1:{line.split()[1]}/"


# Over WebSocket the bridge closes the socket when the server exits, so the probe listens
# until the server's work is done; the record is the same object on every transport.
@pytest.mark.parametrize(("program", "option", "scheme", "path"), [("ws_bridge.py", "--ws", "ws", "")])
def test_the_record_is_bounded_over_websocket(program: str, option: str, scheme: str, path: str) -> None:
    bridge, url = _bridged(program, scheme, 3)
    try:
        done = forkserver.run(
            [*CLI, "probe", "--json", "--listen", "inf", option, url + path],
            capture_output=True,
            timeout=TIMEOUT,
        )
    finally:
        assert bridge.stdin is not None
        bridge.stdin.close()
        bridge.wait(timeout=15)
    assert done.returncode == 1, done.stderr  # the server went away, its work done
    doc = json.loads(done.stdout)
    assert doc["error"]["type"] == "ConnectionLost"
    registers = [event for event in doc["events"] if event["method"] == "channels/register"]
    assert len(registers) == 3 and all("params" not in event for event in registers)
    assert doc["eventsOmitted"]["cut"] == 3
    assert len(done.stdout) < 1_000_000

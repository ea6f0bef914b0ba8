"""What ``mcpl-host check`` shows (issue 23): the skips of one cause on one line of the
summary (the JUnit file still lists each check), a failed raw probe's evidence (what was
sent, what came back), and each JUnit case's measured time.

One real run against a plain MCP server (``mcp_server_time``, which leaves an invalid request
and a request with ``"id": null`` unanswered) is shared by the module's tests.
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mcpl_host.check.registry import CHECKS_BY_ID, check_seconds, check_step
from mcpl_host.check.report import listing_rows

from .test_cli import run_cli


@dataclass(frozen=True)
class Run:
    done: subprocess.CompletedProcess[str]
    junit: ET.Element


@pytest.fixture(scope="module")
def plain_server_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    junit = tmp_path_factory.mktemp("check") / "report.xml"
    done = run_cli(
        "check", "--probe-timeout", "0.5", "--listen", "0", "--junit", str(junit),
        "--", sys.executable, "-m", "mcp_server_time",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr  # the two unanswered probes
    return Run(done, ET.fromstring(Path(junit).read_bytes()))


def test_the_skips_of_one_cause_are_one_line_naming_how_many(plain_server_run: Run) -> None:
    out = plain_server_run.done.stdout
    lines = [line for line in out.splitlines() if "not an MCPL server" in line]
    assert len(lines) == 1, lines
    skipped = [
        case
        for case in plain_server_run.junit.iter("testcase")
        if (s := case.find("skipped")) is not None and "not an MCPL server" in (s.get("message") or "")
    ]
    assert len(skipped) > 10  # JUnit still lists each check
    assert f"skipped  {len(skipped)} checks  not an MCPL server" in lines[0]


def test_a_failed_raw_probe_shows_what_it_sent_and_what_came_back(plain_server_run: Run) -> None:
    out = plain_server_run.done.stdout
    assert 'evidence: sent: {"jsonrpc":"2.0","id":"mcpl-host-check-invalid","method":7,"params":{}}' in out
    assert 'evidence: sent: {"jsonrpc":"2.0","id":null,"method":"ping"}' in out
    assert "evidence: received: nothing" in out
    (case,) = [
        c for c in plain_server_run.junit.iter("testcase") if c.get("name") == "jsonrpc.invalid-request"
    ]
    failure = case.find("failure")
    assert failure is not None and "evidence: sent: " in (failure.text or "")


def test_each_junit_case_has_its_measured_time(plain_server_run: Run) -> None:
    cases = list(plain_server_run.junit.iter("testcase"))
    times = {case.get("name"): float(case.get("time") or "nan") for case in cases}
    assert all(seconds >= 0 for seconds in times.values()), times
    # The handshake took some time; the raw session waited 0.5 s for each of two unanswered
    # probes, so its checks took longer than that. (The listen window of a plain MCP server
    # is over at once: its checks may measure 0.000.)
    assert times["init.answers"] > 0
    assert (
        times["jsonrpc.invalid-request"] > 1.0 and times["jsonrpc.ping"] == times["jsonrpc.invalid-request"]
    )
    total = float(plain_server_run.junit.get("time") or "nan")
    for suite in plain_server_run.junit.iter("testsuite"):
        assert 0 < float(suite.get("time") or "nan") <= total


# -- pure ------------------------------------------------------------------------------------


def _check(id_: str, status: str, reason: str) -> dict[str, Any]:
    return {"id": id_, "status": status, "reason": reason, "staleExpectedFailure": False}


def test_listing_rows_collapse_skips_by_reason_in_place() -> None:
    checks = [
        _check("a.one", "passed", "ok"),
        _check("a.two", "skipped", "not MCPL"),
        _check("a.three", "skipped", "no resource"),
        _check("a.four", "skipped", "not MCPL"),
        _check("a.five", "failed", "bad"),
    ]
    rows = [(check["id"], count) for check, count in listing_rows(checks)]
    assert rows == [("a.one", 1), ("a.two", 2), ("a.three", 1), ("a.five", 1)]


def test_a_check_takes_the_seconds_of_the_last_step_it_needs_that_ran() -> None:
    ran = {"main": 1.0, "lists": 0.25, "calls": 0.5, "raw": 3.0}
    assert check_seconds(CHECKS_BY_ID["init.answers"], ran) == 1.0
    assert check_seconds(CHECKS_BY_ID["tools.call.output-schema"], ran) == 0.5
    assert check_step(CHECKS_BY_ID["jsonrpc.ping"], ran) == "raw"
    assert check_seconds(CHECKS_BY_ID["jsonrpc.ping"], {"main": 1.0}) == 0.0

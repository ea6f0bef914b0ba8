"""scripts/conformance.py's readings of the official conformance suite (docs/conformance.md):
the scenario lists of ``list``, each scenario's verdict from its ``checks.json``, the
unexpected failures a run names (never rerun past a stale entry), and the shared client
process answering a relay as ``python -m mcpl_host.conformance_client`` would.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import conformance  # noqa: E402

LIST_OUTPUT = """Client scenarios (test against a client):
  - initialize [2025-06-18,2025-11-25]
  - auth/metadata-default [2025-11-25,2026-07-28]
  - sep-2640-client-no-prefetch [extension]

Authorization server scenarios:
  - as-metadata [2025-11-25]
"""


def test_the_client_scenarios_are_read_from_the_list() -> None:
    names = conformance.listed("\x1b[1m" + LIST_OUTPUT, "Client scenarios")
    assert names == ["initialize", "auth/metadata-default", "sep-2640-client-no-prefetch"]


def checks(folder: Path, name: str, *statuses: str) -> None:
    target = folder / f"{name}-2026-12-03T13-44-54-299Z"
    target.mkdir(parents=True)
    (target / "checks.json").write_text(json.dumps([{"id": "c", "status": status} for status in statuses]))


def test_each_verdict_follows_the_suite_rule(tmp_path: Path) -> None:
    checks(tmp_path, "tools_call", "SUCCESS", "INFO")
    checks(tmp_path, "auth/metadata-default", "INFO", "FAILURE")
    checks(tmp_path, "sse-retry", "SUCCESS", "WARNING")
    checks(tmp_path, "sep-2640-client-no-prefetch", "SKIPPED")
    assert conformance.verdicts(tmp_path) == {
        "tools_call": "passed",
        "auth/metadata-default": "failed",
        "sse-retry": "failed",  # the suite's summary fails a warning
        "sep-2640-client-no-prefetch": "unexercised",
    }


FAILED_RUN = """Total: 20 passed, 56 failed, 0 warnings
Unexpected failures (not in baseline):
  ✗ sse-retry
  ✗ tools_call
Unexpected failures detected: these are not in your expected-failures baseline.
"""


def test_unexpected_failures_are_named_unless_an_entry_is_stale() -> None:
    assert conformance.unexpected_failures(FAILED_RUN) == ["sse-retry", "tools_call"]
    stale = FAILED_RUN + "Stale baseline entries (now passing - remove from baseline):\n  ✓ initialize\n"
    assert conformance.unexpected_failures(stale) == []


def test_the_shared_process_answers_a_relay(tmp_path: Path) -> None:
    server, command, env = conformance.start_server(tmp_path, timeout=30.0)
    try:
        relay = shlex.split(command)
        # No scenario named: the usage error of python -m mcpl_host.conformance_client.
        done = subprocess.run(relay, capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 2 and "usage:" in done.stderr
        # A server that is not there: one line naming the scenario, status 1.
        environ = {**env, "MCP_CONFORMANCE_SCENARIO": "initialize"}
        done = subprocess.run(
            [*relay, "http://127.0.0.1:9/mcp"], capture_output=True, text=True, env=environ, timeout=60
        )
        assert done.returncode == 1 and done.stderr.startswith("conformance client: initialize: ")
    finally:
        server.terminate()
        server.wait(30)
        shutil.rmtree(Path(env["MCPL_CONFORMANCE_SOCKET"]).parent, ignore_errors=True)
    assert os.path.exists(tmp_path / "client-process.log")


@pytest.mark.parametrize("version", ["v20.11.1", "v24.19.0"])
def test_a_node_older_than_22_is_passed_over(tmp_path: Path, version: str) -> None:
    given = tmp_path / "node"
    given.write_text(f"#!/bin/sh\necho {version}\n")
    given.chmod(0o755)
    try:
        node: str | None = conformance.find_node(str(given))[0]  # else the PyPI package's, if any
    except conformance.Unrunnable:
        node = None
    assert (node == str(given)) == (version == "v24.19.0")


def test_the_baseline_lists_only_extensions_not_built() -> None:
    entries = conformance.baseline_entries(conformance.BASELINE)
    assert entries == {
        "auth/enterprise-managed-authorization",
        "auth/dpop",
        "auth/dpop-nonce",
        "auth/wif-jwt-bearer",
    }

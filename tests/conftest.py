"""Shared test set-up.

- Every ``@pytest.mark.anyio`` test runs on asyncio and on trio (``anyio_backend``).
- ``FIXTURES``: the directory of fixture server programs.
- No child process may outlive the test session: at its end, a process whose parent is
  pytest (a zombie included: every child must be reaped), or that is alive in a process
  group a test created (a wrapper's orphaned grandchild), or that is alive anywhere and
  carries this session's marker (``SESSION_MARKER`` in ``MCPL_HOST_TREE``: a daemon that
  left every process group, wherever it was reparented) fails the run. The marker is set in
  this process's environment before any test runs, so every child inherits it: those the
  tests start directly, and every server a host starts (the host keeps the lineage).
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog
from structlog.testing import capture_logs

from mcpl_host.logging import configure_logging

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
#: Marks every process this test session starts (``MCPL_HOST_TREE`` lineage).
SESSION_MARKER = f"pytest-{os.getpid()}-{uuid.uuid4().hex[:12]}"
os.environ["MCPL_HOST_TREE"] = SESSION_MARKER
_MARKER_ENTRY = b"MCPL_HOST_TREE=" + SESSION_MARKER.encode()


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param


def _stat(pid: int) -> tuple[str, int, int] | None:
    """``(state, ppid, pgrp)`` of a process from ``/proc/<pid>/stat``, None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0].decode(), int(fields[1]), int(fields[2])


def _marked(pid: int) -> bool:
    """Whether the environment of ``pid`` carries this session's marker (as the lineage's
    first segment: nested hosts append theirs)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            entries = f.read().split(b"\0")
    except OSError:
        return False
    return any(entry == _MARKER_ENTRY or entry.startswith(_MARKER_ENTRY + b"/") for entry in entries)


def _leftovers(me: int, groups: set[int]) -> dict[int, str]:
    """Processes that outlived the tests, with why each one counts."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        stat = _stat(int(entry))
        if stat is None:
            continue
        state, ppid, pgrp = stat
        # An orphan's zombie is init's to reap; our own children must all be reaped.
        reasons = [
            reason
            for reason, holds in (
                ("our child", ppid == me),
                ("in a test's process group", pgrp in groups and state != "Z"),
                ("marked by this session", state != "Z" and _marked(int(entry))),
            )
            if holds
        ]
        if reasons:
            found[int(entry)] = f"pid {entry} (state {state}, ppid {ppid}, pgrp {pgrp}; {', '.join(reasons)})"
    return found


@pytest.fixture(scope="session", autouse=True)
def _no_leftover_processes() -> Iterator[None]:
    # Record the process groups tests create: every child is spawned through
    # anyio.open_process, and with start_new_session its pid is its group id.
    groups: set[int] = set()
    real_open_process = anyio.open_process

    async def recording_open_process(*args, **kwargs):  # type: ignore[no-untyped-def]
        process = await real_open_process(*args, **kwargs)
        groups.add(process.pid)
        return process

    anyio.open_process = recording_open_process  # type: ignore[assignment]
    try:
        yield
    finally:
        anyio.open_process = real_open_process  # type: ignore[assignment]
    leftovers = _leftovers(os.getpid(), groups)
    for pid in leftovers:  # do not leave them running after reporting them
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert not leftovers, "processes outlived the tests: " + "; ".join(leftovers.values())


@pytest.fixture
def rendered_logs() -> Iterator[io.StringIO]:
    """Every log line of the test as the command line renders it (``configure_logging``:
    JSON lines, level debug) into a string: server values pass through the real processors
    and renderer, unlike ``capture_logs``, which skips them."""
    saved = structlog.get_config()
    stream = io.StringIO()
    configure_logging("debug", json_lines=True, stream=stream)
    try:
        yield stream
    finally:
        structlog.configure(**saved)


@pytest.fixture
def logs() -> Iterator[list[dict[str, Any]]]:
    """Every log event of the test, whatever level filter an earlier test configured."""
    saved = structlog.get_config()
    structlog.reset_defaults()
    try:
        with capture_logs() as captured:
            yield captured
    finally:
        structlog.configure(**saved)


# --- conformance vector summary: one line per vector file ---------------------------------
# A vector test names its file with ``record_property("vector_file", name)``; one that the
# project reads differently (docs/protocol.md) adds ``record_property("vector_reading",
# "different")``. User properties reach the controlling process under pytest-xdist too.
_VECTOR_COUNTS: dict[str, dict[str, int]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    properties = dict(report.user_properties)
    name = properties.get("vector_file")
    if not isinstance(name, str) or (report.when != "call" and not report.failed and not report.skipped):
        return
    counts = _VECTOR_COUNTS.setdefault(name, {"passed": 0, "failed": 0, "not applicable": 0})
    outcome = "failed" if report.failed else "not applicable" if report.skipped else "passed"
    counts[outcome] += 1


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for name, counts in sorted(_VECTOR_COUNTS.items()):
        terminalreporter.write_line(
            f"VECTORS {name}: {counts['passed']} passed, {counts['failed']} failed, "
            f"{counts['not applicable']} not applicable"
        )

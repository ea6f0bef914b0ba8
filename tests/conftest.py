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
- Test modules run longest first (``tests/module_seconds.json``, measured by
  ``scripts/module_seconds.py``; a module not listed counts 0 s and runs last, in collection
  order): pytest-xdist hands each worker whole modules (``--dist loadscope``) in collection
  order (``--no-loadscope-reorder``, pyproject.toml), so no long module starts last and keeps
  one worker busy while the others have nothing left to do. Tests keep their order within a
  module.
"""

from __future__ import annotations

import contextlib
import io
import json
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

from . import forkserver

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
#: Marks every process this test session starts (``MCPL_HOST_TREE`` lineage).
SESSION_MARKER = f"pytest-{os.getpid()}-{uuid.uuid4().hex[:12]}"
os.environ["MCPL_HOST_TREE"] = SESSION_MARKER
_MARKER_ENTRY = b"MCPL_HOST_TREE=" + SESSION_MARKER.encode()


#: Seconds each test module took in a whole run ({"tests/test_x.py": seconds}).
MODULE_SECONDS: dict[str, float] = json.loads(
    (Path(__file__).resolve().parent / "module_seconds.json").read_text(encoding="utf-8")
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest modules first (a stable sort: the order within a module is kept)."""
    items.sort(key=lambda item: -MODULE_SECONDS.get(item.nodeid.partition("::")[0], 0.0))


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


def _marker(pid: int) -> bytes | None:
    """The ``MCPL_HOST_TREE`` entry of the environment of ``pid`` (None: none, or unreadable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            entries = f.read().split(b"\0")
    except OSError:
        return None
    return next((entry for entry in entries if entry.startswith(b"MCPL_HOST_TREE=")), None)


def _marked(pid: int) -> bool:
    """Whether the environment of ``pid`` carries this session's marker (as the lineage's
    first segment: nested hosts append theirs)."""
    entry = _marker(pid)
    return entry is not None and (entry == _MARKER_ENTRY or entry.startswith(_MARKER_ENTRY + b"/"))


def _another_sessions(pid: int) -> bool:
    """Whether ``pid`` carries the marker of another test session: a process group id a test
    of ours recorded can be a pid reused by then, on a machine where other suites run."""
    entry = _marker(pid)
    return entry is not None and entry.startswith(b"MCPL_HOST_TREE=pytest-") and not _marked(pid)


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
                (
                    "in a test's process group",
                    pgrp in groups and state != "Z" and not _another_sessions(int(entry)),
                ),
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
    forkserver.SERVER.close()  # the fork server ends with the tests that use it
    leftovers = _leftovers(os.getpid(), groups)
    for pid in leftovers:  # do not leave them running after reporting them
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert not leftovers, "processes outlived the tests: " + "; ".join(leftovers.values())


@pytest.fixture(autouse=True)
def _structlog_defaults() -> Iterator[None]:
    """Each test starts from structlog's defaults: a command line run in this process
    (``CliRunner``) configures logging for itself (``configure_logging``, level warning), and
    a later test's ``capture_logs()`` would then miss every event under that level."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


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


# --- conformance vector summaries ----------------------------------------------------------
# A vector runner records each vector's result on its test (``record_vector``), or, for a
# module listed in ``VECTOR_MODULES``, names its tests ``test_case_NN_...`` (case NN). The
# controller (with or without xdist workers) counts them per file, a vector counting once
# however many backends ran it (failed if any run failed), and prints one line per file:
# ``VECTORS <file>: N passed, M failed, K not applicable``.

VECTOR_PROPERTY = "mcpl_vector"
#: Test module -> the vector source it runs (RFC-011 §10 has no file: its cases).
VECTOR_MODULES = {"test_targeted_publish.py": "RFC-011 §10"}
_vector_results: dict[str, dict[str, str]] = {}
_STATUS_RANK = {"passed": 0, "read differently": 1, "not applicable": 2, "failed": 3}


def record_vector(request: pytest.FixtureRequest, file: str, vector: str, status: str = "passed") -> None:
    """Note that ``vector`` of ``file`` ran here; ``status`` ``passed`` (the test's own outcome
    decides: a failed test counts as failed), ``read differently`` or ``not applicable``."""
    request.node.user_properties.append((VECTOR_PROPERTY, (file, vector, status)))


def _keep_vector(file: str, vector: str, status: str) -> None:
    kept = _vector_results.setdefault(file, {})
    if _STATUS_RANK[status] >= _STATUS_RANK.get(kept.get(vector, "passed"), 0):
        kept[vector] = status


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Collects each vector's outcomes (on the controller too, under xdist)."""
    for name, value in report.user_properties:
        if name != VECTOR_PROPERTY or report.when not in ("call", "setup"):
            continue
        if report.when == "setup" and report.passed:
            continue  # counted at its call
        file, vector, status = value
        _keep_vector(file, vector, "failed" if report.failed else status)
    properties = dict(report.user_properties)
    file = properties.get("vector_file")  # ``record_property("vector_file", name)``
    if isinstance(file, str) and (report.when == "call" or report.failed or report.skipped):
        # The vector is the test's id without its backend: each backend's run counts once.
        test_id = report.nodeid.partition("[")[2].rstrip("]")
        vector = "-".join(p for p in test_id.split("-") if p not in ("asyncio", "trio")) or report.nodeid
        status = "failed" if report.failed else "not applicable" if report.skipped else "passed"
        _keep_vector(file, vector, status)
    path, _, test = report.nodeid.partition("::")
    source = VECTOR_MODULES.get(Path(path).name)
    if source is None or not test.startswith("test_case_"):
        return
    if report.when != "call" and not (report.failed or report.skipped):
        return
    status = "failed" if report.failed else "not applicable" if report.skipped else "passed"
    _keep_vector(source, test.split("_")[2], status)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for file, results in sorted(_vector_results.items()):
        counts = {status: sum(1 for s in results.values() if s == status) for status in _STATUS_RANK}
        line = f"VECTORS {file}: {counts['passed']} passed, {counts['failed']} failed, "
        line += f"{counts['not applicable']} not applicable"
        if counts["read differently"]:
            line += f", {counts['read differently']} read differently (docs/protocol.md)"
        terminalreporter.write_line(line)

#!/usr/bin/env python3
"""Redaction on the log path: microseconds per typical server stderr line for
``Redactor.redact`` (configured secrets plus the well-known shapes) and ``log_value``,
milliseconds for hostile 64 KB lines built to make a regular expression backtrack; side by
side with the ``detect-secrets`` library (its ad hoc ``scan_line``, and its plugins called
directly) when it is installed.

    .venv/bin/python scripts/bench_redaction.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mcpl_host.logging import log_value  # noqa: E402
from mcpl_host.secrets import Redactor  # noqa: E402

#: Typical stderr lines of MCP servers (60-120 characters); a few hold a secret.
STDERR_LINES = [
    "2025-06-01T12:00:00.123Z INFO  server started on stdio, protocol 2025-06-18, 12 tools",
    '[debug] tools/call name=search_issues args={"query":"is:open label:bug","per_page":30}',
    "Warning: GITHUB_TOKEN not set, falling back to unauthenticated requests (60/hour)",
    "INFO:mcp.server.lowlevel.server:Processing request of type CallToolRequest",
    "GET https://api.github.com/repos/org/repo/issues?state=open&page=2 -> 200 (143 ms)",
    "using token ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8 for api.github.com",
    "connecting to postgres://app:hunter2-db-pw@db.internal:5432/app (pool size 10)",
    "request headers: {'Authorization': 'Bearer abc123.def456-ghi789', 'Accept': 'application/json'}",
    'Traceback (most recent call last): File "/srv/app/server.py", line 88, in handle',
    "node:internal/process/warning:50 (node:4242) ExperimentalWarning: Fetch API is experimental",
]


def _per_line_us(function: object, rounds: int) -> float:
    call = function  # a callable taking one line
    start = time.perf_counter()
    for _ in range(rounds):
        for line in STDERR_LINES:
            call(line)  # type: ignore[operator]
    return (time.perf_counter() - start) / (rounds * len(STDERR_LINES)) * 1e6


def bench_redaction(rounds: int = 2000) -> None:
    redactor = Redactor(["env-secret-value-1", "another-secret-22", "tok-333333", "k" * 40, "hunter2-x"])
    print(f"redaction: Redactor.redact: {_per_line_us(redactor.redact, rounds):.1f} µs per stderr line")
    print(
        f"redaction: Redactor().redact (shapes only): {_per_line_us(Redactor().redact, rounds):.1f} µs per line"
    )
    print(
        f"redaction: log_value (redact, cut, escape): {_per_line_us(lambda t: log_value(t, redactor), rounds):.1f} µs per line"
    )
    hostile = {
        "sk- repeated": "sk-" * 21000,
        "eyJ- repeated": "eyJ-" * 16000,
        "a- then ://": "a-" * 32000 + "://",
        "bearer repeated": "bearer " * 9000,
        'token=" repeated': 'token="' * 9000,
        "--token repeated": "--token " * 8000,
    }
    for name, line in hostile.items():
        start = time.perf_counter()
        redactor.redact(line)
        elapsed = time.perf_counter() - start
        print(f"redaction: hostile 64 KB line ({name}): {elapsed * 1000:.1f} ms (linear, not quadratic)")
    try:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
        from detect_secrets.core.scan import scan_line
        from detect_secrets.settings import default_settings
    except ImportError:
        print("detect-secrets: not installed (pip install detect-secrets) - skipped")
        return
    with default_settings():
        found = sum(1 for line in STDERR_LINES for _ in scan_line(line))
        scan = _per_line_us(lambda t: list(scan_line(t)), max(rounds // 20, 10))
        plugins = [cls() for cls in get_mapping_from_secret_type_to_class().values()]

        def analyze(line: str) -> None:
            for plugin in plugins:
                plugin.analyze_line(filename="stderr", line=line, line_number=0)

        direct = _per_line_us(analyze, max(rounds // 10, 10))
    print(
        f"detect-secrets: scan_line: {scan:.0f} µs per line ({found} findings in {len(STDERR_LINES)} lines)"
    )
    print(f"detect-secrets: {len(plugins)} plugins called directly (no filters): {direct:.0f} µs per line")


if __name__ == "__main__":
    bench_redaction()

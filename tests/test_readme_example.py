"""The README's example for framework authors runs as written and does what it says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def framework_example() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## For framework authors", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "no python block under 'For framework authors'"
    return found.group(1)


def test_the_framework_example_runs_as_written(tmp_path: Path) -> None:
    program = tmp_path / "agent_host.py"
    program.write_text(framework_example())
    done = subprocess.run(
        [sys.executable, str(program)], cwd=ROOT, capture_output=True, text=True, timeout=90, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    # A tool's classes and their source (RFC-008 §5): the server's _meta, or none (unclassed).
    assert lines[:3] == [
        "tool echo: classes ['body'] from server",
        "tool add: classes ['shell'] from server",
        "tool now: classes [] from none",
    ]
    assert lines[3] == "turn 0: 'hello', system context from ['memory']"
    assert lines[4] == "turn 1: 'tick 1', system context from ['memory']"
    assert lines[5] == "turn 2: 'tick 2', system context from ['memory']"
    # The reference on the last tick reaches the model as the host's stub (MCPL §19), and its
    # URI, with the signature in its query, reaches no output at all.
    stub = lines[6]
    assert re.fullmatch(
        r'  the model sees: \[reference ref_[0-9a-f]+: name "tick-2\.wav", type audio/wav \(claimed\), '
        r"size 96044 bytes \(claimed\); from push event of demo\.clock\]",
        stub,
    ), stub
    assert "demo.invalid" not in done.stdout and "not-for-models" not in done.stdout
    # The reply went to the thread the tick came from, and the server echoed it (RFC-011 §5).
    assert lines[7] == "reply in thread 'ticks': delivered"
    assert lines[8:] == [
        "pushEvents in force: False",
        "2 + 3 = 5",
        "closed: {'clock': 'closed', 'memory': 'closed'}",
    ]

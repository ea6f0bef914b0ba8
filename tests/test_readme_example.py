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
    assert lines[0] == "turn 0: 'hello', system context from ['memory']"
    assert "turn 1: 'tick 1', system context from ['memory']" in lines
    assert "pushEvents in force: False" in lines
    refused = "clock push refused: Capability denied: the host's policy denies it"  # with its reason
    assert refused in lines
    assert lines.index("pushEvents in force: False") < lines.index(refused)
    assert lines[-2:] == ["2 + 3 = 5", "closed: {'clock': 'closed', 'memory': 'closed'}"]

"""The composite action (``action.yml``): its inputs and outputs, that no input is pasted into
a script (GitHub's script-injection rule: inputs go through ``env``), and its run step, run
with bash against a real fixture server, building the command line and writing its outputs."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import FIXTURES

ACTION = Path(__file__).resolve().parent.parent / "action.yml"


def _action() -> dict[str, Any]:
    loaded = yaml.safe_load(ACTION.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def _step(name: str) -> dict[str, Any]:
    return next(step for step in _action()["runs"]["steps"] if step.get("name") == name)


def test_the_action_is_composite_with_its_inputs_and_output() -> None:
    action = _action()
    assert action["runs"]["using"] == "composite"
    assert {"command", "ws", "url", "expected-failures", "options", "junit-file", "artifact-name"} <= set(
        action["inputs"]
    )
    assert action["outputs"]["exit-status"]["value"] == "${{ steps.check.outputs.exit-status }}"
    upload = _step("Upload the JUnit report")
    assert upload["uses"].startswith("actions/upload-artifact@") and upload["if"] == "always()"


def test_no_input_is_pasted_into_a_script() -> None:
    for step in _action()["runs"]["steps"]:
        if "run" in step:
            assert "${{" not in step["run"], step["name"]


def _run_step(tmp_path: Path, **env: str) -> tuple[int, str, str]:
    script = _step("Run mcpl-host check")["run"]
    output = tmp_path / "github-output"
    output.write_text("", encoding="utf-8")
    values = {
        "CHECK_COMMAND": "",
        "CHECK_WS": "",
        "CHECK_URL": "",
        "CHECK_EXPECTED": "",
        "CHECK_OPTIONS": "",
        "CHECK_JUNIT": str(tmp_path / "report.xml"),
        **env,
    }
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    done = subprocess.run(
        ["bash", "-c", script],
        env={**os.environ, **values, "GITHUB_OUTPUT": str(output), "PATH": path},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, output.read_text(encoding="utf-8"), done.stderr


@pytest.mark.parametrize(("expected", "status"), [("", "1"), ("tools.call.output-schema\n", "0")])
def test_the_run_step_checks_the_command_and_writes_the_junit_file(
    tmp_path: Path, expected: str, status: str
) -> None:
    env = {
        "CHECK_COMMAND": f"'{sys.executable}' '{FIXTURES / 'check' / 'plain_mcp.py'}' --fault bad-output",
        "CHECK_OPTIONS": "--only 'tools.*' --listen 0",
    }
    if expected:
        known = tmp_path / "known.txt"
        known.write_text(expected, encoding="utf-8")
        env["CHECK_EXPECTED"] = str(known)
    code, output, stderr = _run_step(tmp_path, **env)
    assert code == 0, stderr  # the step itself succeeds; the last step fails the job
    assert output.strip() == f"exit-status={status}"
    root = ET.parse(tmp_path / "report.xml").getroot()
    # tools.*: the five checks of the tools category, and tools.observe.params (RFC-007)
    assert root.tag == "testsuites" and root.get("tests") == "6"


def test_the_run_step_without_a_target_reports_a_usage_error(tmp_path: Path) -> None:
    code, output, stderr = _run_step(tmp_path)
    assert code == 0 and output.strip() == "exit-status=2"
    assert "give the command, ws or url input" in stderr

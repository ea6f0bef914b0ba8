"""``mcpl-host probe --ask`` under a careless operator: Ctrl-C while a server's question is
on the terminal (mcpl_host/probe_features.py ``_Terminal.ask``). docs/cli.md "Signals": Ctrl-C
closes every server and the probe exits (0 while listening, 130 before).

The CLI runs in a real pseudo-terminal (pexpect) against ``fixtures/scripted_server.py``,
which asks ``elicitation/create`` right after the handshake.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pexpect

from .forkpty import spawn_pty
from .test_cli import CLI
from .wire import MCP_HANDSHAKE, SCRIPTED

ELICIT = {
    "jsonrpc": "2.0",
    "id": 70,
    "method": "elicitation/create",
    "params": {
        "mode": "form",
        "message": "your name?",
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
    },
}


def test_ctrl_c_while_a_question_is_asked_stops_the_probe(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([*MCP_HANDSHAKE, {"send": ELICIT}, {"wait_response": 70, "timeout": 60}]))
    command = [
        *CLI,
        "probe",
        "--ask",
        "--listen",
        "30",
        "--",
        sys.executable,
        str(SCRIPTED),
        str(script),
        str(tmp_path / "r.jsonl"),
    ]
    child = spawn_pty(command[0], command[1:], timeout=30, encoding="utf-8")
    try:
        child.expect("answer this form")
        child.sendintr()
        child.expect("stopping")
        child.expect(pexpect.EOF, timeout=15)  # not waiting for an answer nobody will type
    finally:
        child.close(force=True)
    assert child.exitstatus in (0, 130), child.before

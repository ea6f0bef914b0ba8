"""``mcpl-host probe`` and ``run`` against the four server shapes of
``fixtures/compat_server.py`` (docs/protocol.md, "Compatibility profiles"), end to end: the
CLI as a child process, the servers as its children (shape 3 also behind
``fixtures/ws_bridge.py``).

No sleeps: a test that must act mid-run waits for a line of the CLI's output; a bound the
issue names (a stalled server reported within 15 s) is the child's ``timeout``.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from . import forkserver
from .conftest import FIXTURES
from .test_cli import CLI, TIMEOUT, Running, probe_json, run_cli, scripted
from .test_cli_run import interrupt, wait_for_all, write_config
from .wire import initialize_steps

SERVER = str(FIXTURES / "compat_server.py")


def shape(name: str) -> list[str]:
    return ["--", sys.executable, SERVER, name]


def events(doc: dict[str, Any], method: str) -> list[dict[str, Any]]:
    return [e for e in doc["events"] if e["method"] == method and e["kind"] != "held"]


# --- shape 1: a 0.4 server that only reads the notification form ------------------------------


def test_shape1_by_default_is_ready_under_04_and_its_pushes_are_accepted() -> None:
    doc, _ = probe_json("--listen", "2", *shape("shape1"))
    state = doc["mcplState"]
    assert state["state"] == "ready" and state["profile"] == "0.4" and state["policyForm"] == "notification"
    assert state["line"] == (
        "MCPL ready (profile 0.4, chosen automatically: the server advertises MCPL 0.4); the policy is "
        "in force without a receipt: the server answered the featureSets/update request with an error"
    )
    pushes = events(doc, "push/event")
    assert [e["params"]["eventId"] for e in pushes] == [f"hb-{n}" for n in range(1, 6)]
    assert all(e["answer"] == {"accepted": True} for e in pushes)
    assert "heldSeconds" in pushes[0]  # it came before the policy
    assert doc["compat"]["held"] >= 1
    assert [n["kind"] for n in doc["compat"]["notes"]] == ["uses_lacks"]
    assert doc["grant"]["featureSets"] == [
        {
            "name": "heartbeat",
            "description": "A heartbeat every few seconds",
            "uses": ["tools"],
            "enabled": True,
        }
    ]


def test_shape1_in_strict_is_mcp_only_and_require_mcpl_fails_the_probe() -> None:
    doc, _ = probe_json("--compat", "strict", "--listen", "1", *shape("shape1"))
    assert doc["ok"] is True  # without --require-mcpl a plain-MCP outcome is not a failure
    assert doc["mcplState"]["state"] == "mcp-only"
    assert doc["grant"]["deniedCapabilities"] == ["pushEvents"]  # never "tools": MCP still serves it
    assert doc["grant"]["featureSets"][0]["reason"] == "mcpl_off"
    reasons = [e["reason"] for e in events(doc, "push/event")]
    assert reasons[0] == "not_in_force" and set(reasons) <= {"not_in_force", "mcpl_off"}
    failed, err = probe_json("--compat", "strict", "--require-mcpl", *shape("shape1"), status=1)
    assert failed["error"]["type"] == "MCPLNotReady"
    assert failed["error"]["message"].startswith("MCPL did not become ready (--require-mcpl): MCP-only: ")
    terminal = run_cli("probe", "--compat", "strict", "--require-mcpl", *shape("shape1"))
    assert terminal.returncode == 1
    assert "Not in force  pushEvents" in terminal.stdout and "tools, resources and prompts" in terminal.stdout
    assert (
        "What happened before:" in terminal.stderr
        and "MCPL is off: the policy request failed" in terminal.stderr
    )


# --- shape 2 and 4: they keep working -----------------------------------------------------------


def test_shape2_keeps_working_and_every_request_is_shown_with_its_answer() -> None:
    doc, _ = probe_json("--listen", "2", *shape("shape2"))
    assert doc["mcplState"]["state"] == "ready" and doc["mcplState"]["policyForm"] == "request"
    (register,) = events(doc, "channels/register")
    assert register["kind"] == "request"
    assert register["answer"] == {"results": [{"id": "news:feed", "accepted": True}]}
    assert [e["answer"] for e in events(doc, "push/event")] == [{"accepted": True}] * 2
    assert doc["channels"] == [{"id": "news:feed", "type": "feed", "direction": "outbound", "label": "Feed"}]
    done = run_cli("probe", "--listen", "2", *shape("shape2"))
    assert done.returncode == 0, done.stderr
    assert "channels/register" in done.stdout and "→ answered: 1 of 1 accepted" in done.stdout
    assert "news  enabled" in done.stdout and "feed  enabled" in done.stdout


def test_shape4_keeps_working() -> None:
    doc, _ = probe_json("--listen", "2", *shape("shape4"))
    assert doc["mcplState"]["profile"] == "strict" and doc["grant"]["receipt"] == {"accepted": True}
    assert [e["answer"] for e in events(doc, "push/event")] == [{"accepted": True}]
    (incoming,) = events(doc, "channels/incoming")
    assert incoming["answer"] == {"results": [{"messageId": "m1", "accepted": True}]}
    assert {fs["name"]: fs["enabled"] for fs in doc["grant"]["featureSets"]} == {"alerts": True, "chat": True}


def test_feature_sets_disabled_say_why_in_both_shapes() -> None:
    doc, _ = probe_json("--deny", "pushEvents", *shape("shape4"))  # object-shaped featureSets
    alerts = next(fs for fs in doc["grant"]["featureSets"] if fs["name"] == "alerts")
    assert alerts == {
        "name": "alerts",
        "description": "Alerts",
        "uses": ["pushEvents"],
        "enabled": False,
        "reason": "capability_denied",
        "missingCapabilities": ["pushEvents"],
    }
    done = run_cli("probe", "--compat", "strict", *shape("shape1"))  # array-shaped featureSets
    assert "heartbeat  disabled: mcpl_off" in done.stdout
    done = run_cli("probe", "--compat", "strict", "--deny", "pushEvents", *shape("shape4"))
    assert "alerts  disabled: capability_denied (not granted: pushEvents)" in done.stdout


# --- shape 3: says 0.5, behaves like 0.4 --------------------------------------------------------


def test_shape3_in_strict_fails_within_15_s_with_the_one_sentence_explanation() -> None:
    done = forkserver.run(
        [*CLI, "probe", "--json", *shape("shape3")], capture_output=True, text=True, timeout=15
    )
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    error = doc["error"]
    assert error["type"] == "ServerStalled"
    assert error["message"].startswith(
        "The host refused channels/register (-32002: the policy is not yet in force), and then the "
        "server stopped answering: nothing received for 10 s while the host waits for featureSets/update"
    )
    assert error["message"].endswith(
        "servers written for MCPL 0.4 behave this way (they send privileged requests before the policy "
        'and stop at a refusal): use --compat 0.4 (or "compat": "0.4" in a config file)'
    )
    assert "\n" not in error["message"]
    assert any('"code": -32002' in line for line in error["stderrTail"])  # quotes shown as text
    assert error["chain"][0].endswith(
        "the host refused channels/register: Capability denied: the policy is not yet in force (-32002)"
    )
    (refused,) = events(doc, "channels/register")
    assert refused["reason"] == "not_in_force"


@pytest.mark.parametrize("transport", ["stdio", "websocket"])
def test_shape3_with_the_04_profile_is_hosted(transport: str) -> None:
    anyio.run(_shape3_with_the_04_profile, transport)


async def _shape3_with_the_04_profile(transport: str) -> None:
    from .test_websocket import bridge

    async def probe(*target: str) -> dict[str, Any]:
        with anyio.fail_after(TIMEOUT):
            done = await forkserver.run_async([*CLI, "probe", "--json", "--compat", "0.4", *target])
        assert done.returncode == 0, done.stderr.decode()
        return json.loads(done.stdout)

    if transport == "websocket":
        async with bridge(command=[sys.executable, SERVER, "shape3"]) as server:
            doc = await probe("--ws", server.url())
    else:
        doc = await probe(*shape("shape3"))
    assert doc["mcplState"]["state"] == "ready" and doc["mcplState"]["policyForm"] == "notification"
    assert [t["name"] for t in doc["tools"]] == ["published"]
    (register,) = events(doc, "channels/register")
    assert register["answer"] == {"results": [{"id": "chat:general", "accepted": True}]}
    assert register["heldSeconds"] > 0
    assert doc["channels"][0]["id"] == "chat:general"
    kinds = {note["kind"] for note in doc["compat"]["notes"]}
    assert "unknown_uses" in kinds


# --- the probe's other reports ------------------------------------------------------------------


def test_progress_on_a_terminal_names_what_is_pending(tmp_path: Path) -> None:
    steps = [
        *initialize_steps({"tools": {}}, {"name": "slowpoke", "version": "1"}),
        {"wait_for": {"method": "tools/list"}},
        {"sleep": 2.5},
        {"reply": {"tools": []}},
    ]
    leader, follower = pty.openpty()
    try:
        process = subprocess.Popen(
            [*CLI, "probe", *scripted(tmp_path, steps)], stdout=subprocess.PIPE, stderr=follower, text=True
        )
        os.close(follower)
        seen = b""
        deadline = time.monotonic() + TIMEOUT
        while b"waiting for slowpoke: tools/list" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 1)
            if ready:
                try:
                    seen += os.read(leader, 4096)
                except OSError:  # the child closed its end
                    break
        assert process.wait(timeout=TIMEOUT) == 0
        assert process.stdout is not None
        process.stdout.close()
    finally:
        os.close(leader)
    assert b"waiting for slowpoke: tools/list (" in seen
    assert b"(Ctrl-C stops)" in seen


def test_inference_reply_answers_streamed_and_is_advertised_only_then(tmp_path: Path) -> None:
    manifest = {
        "version": "0.5",
        "inferenceRequest": {"streaming": True},
        "featureSets": {
            "ask": {"description": "a", "uses": ["inferenceRequest", "inferenceRequest.streaming"]}
        },
    }
    request = {
        "jsonrpc": "2.0",
        "id": "q1",
        "method": "inference/request",
        "params": {"featureSet": "ask", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
    }
    steps = [
        *initialize_steps({"experimental": {"mcpl": manifest}}, {"name": "asker", "version": "1"}),
        {"expect": {"method": "notifications/initialized"}},
        {"expect": {"method": "featureSets/update"}},
        {"reply": {"accepted": True}},
        {"send": request},
        {"wait_response": "q1"},
        {"stderr": "answered"},
    ]
    text = "the answer is forty-two, told in chunks"
    doc, _ = probe_json("--inference-reply", text, "--listen", "1", *scripted(tmp_path, steps))
    (answer,) = events(doc, "inference/request")
    assert answer["answer"]["content"] == text and answer["answer"]["finishReason"] == "end_turn"
    lines = [
        json.loads(row)["line"]
        for row in (tmp_path / "record.jsonl").read_text().splitlines()
        if "line" in row
    ]
    sent = [json.loads(line) for line in lines]
    initialize = next(m for m in sent if m.get("method") == "initialize")  # after the era probe
    assert "inferenceRequest" in initialize["params"]["capabilities"]["experimental"]["mcpl"]
    chunks = [m["params"]["delta"] for m in sent if m.get("method") == "inference/chunk"]
    assert "".join(chunks) == text and len(chunks) > 1
    without, _ = probe_json(*scripted(tmp_path, steps[:5]))
    record = (tmp_path / "record.jsonl").read_text().splitlines()
    again = [json.loads(json.loads(row)["line"]) for row in record if '"line"' in row]
    last_initialize = [m for m in again if m.get("method") == "initialize"][-1]
    assert "inferenceRequest" not in last_initialize["params"]["capabilities"]["experimental"]["mcpl"]
    assert without["ok"] is True


def test_server_stderr_is_shown_as_text(tmp_path: Path) -> None:
    steps = [{"stderr": 'config "prod" missing \u001b[31m'}, {"exit": 3}]
    doc, _ = probe_json(*scripted(tmp_path, steps), status=1)
    assert doc["error"]["stderrTail"] == ['config "prod" missing \\u001b[31m']
    done = run_cli("probe", *scripted(tmp_path, steps))
    assert 'config "prod" missing \\u001b[31m' in done.stderr and "\x1b[31m" not in done.stderr


# --- run --------------------------------------------------------------------------------------


def test_run_prints_a_refusal_only_after_the_ready_line_and_warns_about_no_grant(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        {
            "early": {
                "command": sys.executable,
                "args": [SERVER, "shape3"],
                "grantAllAdvertised": True,
                "compat": "strict",
                "timeouts": {"request": 2, "closeGrace": 1, "terminateGrace": 1},
            },
            "bare": {"command": sys.executable, "args": [SERVER, "shape4"], "timeouts": {"closeGrace": 1}},
        },
    )
    cli = Running("run", str(config))
    try:
        wait_for_all(cli, "early  degraded", "early  refused", "bare  ready")
    finally:
        status, out, err = interrupt(cli)
    assert status == 0, err
    lines = out.splitlines()
    degraded = next(i for i, line in enumerate(lines) if "early  degraded" in line)
    refused = next(i for i, line in enumerate(lines) if "early  refused" in line)
    assert degraded < refused
    assert "Capability denied: the policy is not yet in force (channels.register)" in lines[refused]
    assert 'compat="0.4"' in lines[degraded]
    assert "gives no grant" not in out  # stdout is the events'; the notice is on stderr
    assert any(line.startswith("warning: bare: its config entry gives no grant") for line in err.splitlines())
    ready = next(line for line in lines if "bare  ready" in line)
    assert "granted nothing (warning: no grant in the config)" in ready


def test_probe_of_a_config_entry_without_a_grant_warns(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"bare": {"command": sys.executable, "args": [SERVER, "shape4"]}})
    done = run_cli("probe", "--config", str(config), "--server", "bare")
    assert done.returncode == 0, done.stderr
    assert "warning: bare: its config entry gives no grant, so MCPL is granted nothing" in done.stderr
    overridden = run_cli("probe", "--json", "--config", str(config), "--server", "bare", "--compat", "0.4")
    state = json.loads(overridden.stdout)["mcplState"]
    assert state["profile"] == "0.4" and state["grantsNothing"] is True
    assert state["line"].endswith("; MCPL is granted nothing")

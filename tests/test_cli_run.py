"""``mcpl-host run`` and the new ``probe`` targets (``--ws``, ``--config --server``), end to end:
the CLI as a child process against the demo server, the scripted server and a loopback
WebSocket bridge; in process, what run's loop keeps once an event is printed.

No sleeps: a test that must act mid-run (Ctrl-C) waits for a line of the CLI's output. The
servers of each test run from ``tmp_path`` (the demo server through a symlink there), so
"no process left" is checked by looking for any process whose command line names it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from . import forkserver
from .conftest import FIXTURES
from .test_cli import CLI, TIMEOUT, Running, run_cli
from .test_supervisor import processes_with
from .wire import MCP_HANDSHAKE, SCRIPTED

SECRET = "run-secret-value-123"


def write_config(tmp_path: Path, servers: dict[str, Any]) -> Path:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return path


def demo_entry(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    link = tmp_path / "demo_server.py"
    if not link.exists():
        link.symlink_to(FIXTURES / "demo_server.py")
    return {
        "command": sys.executable,
        "args": ["./demo_server.py"],
        "env": {"DEMO_PUSH_INTERVAL": "0.2", "DEMO_PUSH_COUNT": "2"},
        "grant": ["pushEvents", "tools"],
        "timeouts": {"closeGrace": 1, "terminateGrace": 1},
        **extra,
    }


def scripted_entry(tmp_path: Path, steps: list[Any], name: str, **extra: Any) -> dict[str, Any]:
    script = tmp_path / f"{name}.json"
    script.write_text(json.dumps(steps), encoding="utf-8")
    return {
        "command": sys.executable,
        "args": [str(SCRIPTED), str(script), str(tmp_path / f"{name}.record")],
        "timeouts": {"closeGrace": 0.5, "terminateGrace": 1},
        **extra,
    }


def telling_secret(tmp_path: Path) -> dict[str, Any]:
    """A plain MCP server that sends a notification holding its own env value (a secret)."""
    steps = [*MCP_HANDSHAKE, {"send": {"jsonrpc": "2.0", "method": "test/hello", "params": {"key": SECRET}}}]
    return scripted_entry(tmp_path, steps, "teller", env={"API_KEY": SECRET})


def wait_for_all(cli: Running, *markers: str) -> None:
    """Read the CLI's stdout until every marker has appeared, in any order."""
    while not all(marker in "".join(cli.seen["stdout"]) for marker in markers):
        assert cli._take("stdout") is not None, f"stdout ended before {markers}: {cli.seen}"


def interrupt(cli: Running) -> tuple[int, str, str]:
    cli.process.send_signal(signal.SIGINT)
    return cli.finish()


# -- run ------------------------------------------------------------------------------------------


def test_run_prints_a_line_per_event_and_ctrl_c_closes_everything(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"demo": demo_entry(tmp_path), "teller": telling_secret(tmp_path)})
    cli = Running("run", str(config))
    try:
        wait_for_all(cli, "Hosting 2 server(s)", "tick-2", "test/hello")
    finally:
        status, out, err = interrupt(cli)
    assert status == 0, err
    assert (
        "demo  ready mcpl-demo 0.1.0, MCPL ready, profile strict, granted pushEvents, tools (attempt 1)"
        in out
    )
    assert "demo  push_event demo.clock tick-1: tick 1  → accepted" in out
    assert "teller  ready scripted 0, plain MCP (attempt 1)" in out
    assert 'teller  notification test/hello {"key":"[redacted]"}' in out
    assert "stopped: every server is closed" in out
    assert SECRET not in out + err and "Traceback" not in err
    assert not processes_with(str(tmp_path))


def test_run_json_prints_one_object_per_event(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"demo": demo_entry(tmp_path), "teller": telling_secret(tmp_path)})
    cli = Running("run", "--json", str(config))
    try:
        wait_for_all(cli, '"eventId":"tick-2"', "test/hello")
    finally:
        status, out, err = interrupt(cli)
    assert status == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert all(set(event) == {"time", "server", "kind", "data"} for event in events)
    demo = [event["kind"] for event in events if event["server"] == "demo"]
    # The receipt comes after the ready line (events.ConnectingOrder): nothing before "ready".
    assert demo[:3] == ["connecting", "ready", "policy_receipt"] and demo.count("push_event") == 2
    hello = next(e for e in events if e["kind"] == "notification" and e["data"]["method"] == "test/hello")
    assert hello["data"]["params"] == {"key": "[redacted]"}
    assert events[0]["time"].endswith("Z")
    assert SECRET not in out + err
    assert not processes_with(str(tmp_path))


def test_run_exits_1_when_every_server_gives_up(tmp_path: Path) -> None:
    entry = scripted_entry(
        tmp_path,
        [{"stderr": "no config, bye"}, {"exit": 2}],
        "crasher",
        restart={"baseDelay": 0.05, "jitter": 0, "maxFailures": 2},
    )
    done = run_cli("run", str(write_config(tmp_path, {"crasher": entry})))
    assert done.returncode == 1, done.stderr
    lines = [line.split("  ", 2)[2] for line in done.stdout.splitlines() if "  crasher  " in line]
    assert [line.split(" ", 1)[0] for line in lines] == [
        "connecting",
        "disconnected",
        "reconnecting",
        "connecting",
        "disconnected",
        "gave_up",
    ]
    assert "last stderr: no config, bye" in done.stdout
    assert "gave_up crashed 2 times in 60 seconds; last: the server went away" in done.stdout
    assert "stopped: every server gave up" in done.stdout
    assert not processes_with(str(tmp_path))


def test_run_a_broken_config_lists_every_problem_and_starts_nothing() -> None:
    done = run_cli("run", str(FIXTURES / "configs" / "broken.json"))
    assert done.returncode == 2 and done.stdout == ""
    assert "has 5 problems; nothing was started" in done.stderr
    for location in (
        "mcpServers.demo.args[1]",
        "mcpServers.demo.timeouts.request",
        "mcpServers.time.inherit_env",
        "mcpServers.remote.url",
        "mcpServers.remote.grant[0]",
    ):
        assert location in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["/no/such/servers.json"], "cannot read the file"),
        ([str(FIXTURES / "configs" / "example.json"), "--health-interval", "0"], "more than zero"),
    ],
)
def test_run_usage_errors_exit_2(args: list[str], message: str) -> None:
    done = run_cli("run", *args)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_run_with_no_enabled_server_exits_2(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"off": {"command": "true", "disabled": True}})
    done = run_cli("run", str(config))
    assert done.returncode == 2 and "no enabled server" in done.stderr


# -- probe --config / --ws ----------------------------------------------------------------------


def test_probe_config_server_uses_its_settings(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"demo": demo_entry(tmp_path, grant=["tools"])})
    done = run_cli("probe", "--json", "--config", str(config), "--server", "demo")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["config"] == {"file": str(config), "server": "demo"}
    assert doc["grant"]["effectiveCapabilities"] == ["tools"]  # the file's grant, not "all advertised"
    overridden = run_cli(
        "probe", "--json", "--config", str(config), "--server", "demo", "--grant", "pushEvents"
    )
    assert json.loads(overridden.stdout)["grant"]["effectiveCapabilities"] == ["pushEvents"]
    assert not processes_with(str(tmp_path))


def test_probe_config_problems_and_unknown_server_exit_2(tmp_path: Path) -> None:
    broken = run_cli("probe", "--config", str(FIXTURES / "configs" / "broken.json"), "--server", "demo")
    assert broken.returncode == 2 and "has 5 problems" in broken.stderr
    unknown = run_cli("probe", "--config", str(FIXTURES / "configs" / "example.json"), "--server", "nope")
    assert (
        unknown.returncode == 2
        and "no server named 'nope'" in unknown.stderr
        and "demo, time" in unknown.stderr
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ws", "ws://127.0.0.1:9/", "--", "python3", "x.py"], "not a command and --ws"),
        (["--ws", "ws://127.0.0.1:9/", "--config", "c.json", "--server", "x"], "not --ws and --config"),
        (["--config", "c.json"], "c.json has 1 problem; nothing was started:\n  cannot read the file"),
        (["--server", "demo"], "--server NAME goes with --config FILE"),
        (["--token", SECRET], "--token applies only with --ws or --url"),
        (["--token-in", "query", "--url", "http://127.0.0.1:9/mcp"], "--token-in applies only with --ws"),
        (["--header", f"X-Key={SECRET}"], "--header and --transport apply only with --url"),
        (["--url", "http://127.0.0.1:9/mcp", "--ws", "ws://127.0.0.1:9/"], "not --ws and --url"),
        (["--url", "ftp://127.0.0.1:9/mcp", "--header", f"X-Key={SECRET}"], "--url: unsupported URL scheme"),
        (["--url", "http://127.0.0.1:9/mcp", "--header", f"Accept={SECRET}"], "is set by the HTTP transport"),
        (
            ["--ws", "ws://127.0.0.1:9/", "--env", "A=b"],
            "--env, --cwd and --inherit-env apply only to a command",
        ),
        (["--ws", "http://127.0.0.1:9/"], "--ws:"),
    ],
)
def test_probe_target_usage_errors_exit_2(args: list[str], message: str) -> None:
    done = run_cli("probe", "--json", *args)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert message in done.stderr and SECRET not in done.stderr and "Traceback" not in done.stderr


def test_probe_ignores_a_token_in_the_environment_without_ws() -> None:
    done = forkserver.run(
        [*CLI, "probe", "--json"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "MCPL_HOST_TOKEN": SECRET},
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.anyio
@pytest.mark.parametrize("token_in", ["header", "query"])
async def test_probe_ws_with_a_token_never_shows_it(token_in: str) -> None:
    from .test_websocket import bridge

    async with bridge(
        "--require-token", SECRET, command=[sys.executable, str(FIXTURES / "demo_server.py")]
    ) as server:
        url = server.url()
        with anyio.fail_after(TIMEOUT):
            done = await anyio.run_process(
                [*CLI, "probe", "--json", "--ws", url, "--token-in", token_in],
                check=False,
                env={**os.environ, "MCPL_HOST_TOKEN": SECRET},
            )
            refused = await forkserver.run_async([*CLI, "probe", "--json", "--ws", url])
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, err
    doc = json.loads(out)
    assert doc["url"] == url and doc["server"]["name"] == "mcpl-demo"
    assert {tool["name"] for tool in doc["tools"]} >= {"echo", "add"}
    assert SECRET not in out + err
    assert refused.returncode == 1 and "401" in json.loads(refused.stdout)["error"]["message"]


@pytest.mark.anyio
async def test_run_keeps_nothing_of_the_last_event_while_it_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In process: run's loop prints each event (cut to a line) and waits for the next
    # holding nothing of it: an 8 MiB notification and what was made of it are freed while
    # the server stays silent, not kept until its next event. The host run makes is taken
    # (to ask the ping that makes the server send it) and the printed lines are not kept.
    from mcpl_host import cli, report
    from mcpl_host.config_file import HostConfig
    from mcpl_host.host import Host

    from .memory import kept_bytes
    from .wire import Script

    big = 8 * 2**20
    note = {"jsonrpc": "2.0", "method": "test/big", "params": {"blob": "x" * big}}
    steps = [*MCP_HANDSHAKE, {"expect": {"method": "ping"}}, {"reply": {}, "then": [note]}]
    script = Script(tmp_path, [*steps, {"expect": {"method": "test/never"}, "timeout": 60}])
    del note
    hosts: list[Host] = []
    made = anyio.Event()
    printed = anyio.Event()

    def host(*args: Any, **kwargs: Any) -> Host:
        hosts.append(Host(*args, **kwargs))
        made.set()
        return hosts[-1]

    class Lines:
        def write(self, text: str) -> int:
            if "test/big" in text:
                printed.set()
            return len(text)

        def flush(self) -> None:
            pass

    monkeypatch.setattr(cli, "Host", host)
    out = report.ReportConsole(file=Lines(), width=100, color_system=None)
    config = HostConfig({"scripted": script.config()})
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(cli._host, config, out, None)  # pyright: ignore[reportPrivateUsage]
            await made.wait()
            conn = await hosts[0].server("scripted").connected()
            with kept_bytes() as kept:
                assert await conn.connection.request("ping", None) == {}
                await printed.wait()
                await anyio.wait_all_tasks_blocked()  # the loop waiting for the next event
            tg.cancel_scope.cancel()
    assert kept.bytes < 2**20, f"{kept.bytes} bytes kept after the event was printed"

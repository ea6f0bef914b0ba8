"""``--config`` with the MCP configs people already have (Claude Desktop, Claude Code, Cursor,
VS Code, Windsurf), ``--config auto``, ``mcpl-host config list`` and the no-grant notice:
real CLI runs (forked, ``tests/forkserver.py``) against the demo server and mcp_server_time,
with HOME pointed at a temporary folder."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from . import forkserver
from .conftest import FIXTURES
from .test_cli import CLI, TIMEOUT, Running
from .test_cli_run import wait_for_all
from .test_http_transport import bridge, headers_of

DEMO = str(FIXTURES / "demo_server.py")
ECHO = str(FIXTURES / "echo_secret_server.py")
SECRET = "an-expanded-value-4c1f9"
TIME = {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}
DEMO_ENTRY = {"command": sys.executable, "args": [DEMO], "env": {"DEMO_PUSH_COUNT": "0"}}
#: The demo with its extra tools (``steps`` among them): a second server told apart by its
#: tools, and cheaper to start than mcp_server_time (a plain MCP server, kept where one is needed).
EXTRAS = {"command": sys.executable, "args": [DEMO], "env": {"DEMO_PUSH_COUNT": "0", "DEMO_EXTRAS": "1"}}


def cli(*args: str, home: Path, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """The CLI with HOME at ``home`` (no XDG_CONFIG_HOME), in ``cwd``, with ``env`` added."""
    environ = {k: v for k, v in os.environ.items() if k != "XDG_CONFIG_HOME"}
    environ.update(HOME=str(home), **env)
    done = forkserver.run(
        [*CLI, *args], capture_output=True, text=True, timeout=TIMEOUT, env=environ, cwd=cwd or home
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def write(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


def tool_names(done: subprocess.CompletedProcess[str]) -> list[str]:
    assert done.returncode == 0, done.stderr
    return [tool["name"] for tool in json.loads(done.stdout)["tools"]]


# --- shapes, one server, several ----------------------------------------------------------------


def test_one_server_in_the_file_is_picked_without_server(tmp_path: Path) -> None:
    config = write(tmp_path / "claude_desktop_config.json", {"mcpServers": {"time": EXTRAS}})
    done = cli("probe", "--json", "--config", str(config), home=tmp_path)
    assert "steps" in tool_names(done)
    assert json.loads(done.stdout)["config"] == {"file": str(config), "server": "time"}


def test_several_servers_and_no_server_lists_the_names_bounded(tmp_path: Path) -> None:
    servers = {f"s{i:02}": {"command": "/nonexistent/never-started"} for i in range(25)}
    config = write(tmp_path / "mcp.json", {"mcpServers": servers})
    done = cli("probe", "--config", str(config), home=tmp_path)
    assert done.returncode == 2
    names = ", ".join(f"s{i:02}" for i in range(20))
    assert f"has 25 servers: give --server NAME, one of {names} and 5 more" in done.stderr.replace("\n", " ")
    assert "never-started" not in done.stderr


def test_check_picks_the_one_server_of_a_file_and_lists_several(tmp_path: Path) -> None:
    one = write(tmp_path / "one" / ".vscode" / "mcp.json", {"servers": {"demo": DEMO_ENTRY}})
    done = cli("check", "--json", "--only", "init.answers", "--config", str(one), home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["summary"]["passed"] == 1
    several = write(tmp_path / "mcp.json", {"mcpServers": {"a": DEMO_ENTRY, "b": DEMO_ENTRY}})
    done = cli("check", "--config", str(several), home=tmp_path)
    assert done.returncode == 2
    assert "has 2 servers: give --server NAME, one of a, b" in done.stderr.replace("\n", " ")


def test_vscode_servers_shape_is_accepted(tmp_path: Path) -> None:
    config = write(
        tmp_path / ".vscode" / "mcp.json",
        {"servers": {"time": {"type": "stdio", **EXTRAS}}, "inputs": []},
    )
    assert "steps" in tool_names(cli("probe", "--json", "--config", str(config), home=tmp_path))


def test_vscode_input_reference_is_a_clear_error_naming_the_input(tmp_path: Path) -> None:
    entry = {"type": "stdio", **EXTRAS, "env": {"KEY": "${input:api-key}"}}
    config = write(tmp_path / "mcp.json", {"servers": {"time": entry}, "inputs": [{"id": "api-key"}]})
    done = cli("probe", "--config", str(config), home=tmp_path)
    assert done.returncode == 2
    assert "servers.time.env.KEY: ${input:api-key} asks VS Code's input 'api-key'" in done.stderr


def test_an_unset_variable_is_named_and_a_set_one_never_shown(tmp_path: Path) -> None:
    entry = {"type": "stdio", "command": sys.executable, "args": [ECHO, "PLAIN_VALUE"]}
    entry["env"] = {"PLAIN_VALUE": "${env:MY_VALUE}"}
    config = write(tmp_path / "mcp.json", {"servers": {"teller": entry}})
    unset = cli("probe", "--config", str(config), home=tmp_path)
    assert unset.returncode == 2
    assert "${env:MY_VALUE}: the environment variable MY_VALUE is not set" in unset.stderr
    done = cli("probe", "--json", "--config", str(config), home=tmp_path, MY_VALUE=SECRET)
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout + done.stderr
    assert "[redacted]" in done.stdout  # the server echoed the value it was given: hidden


def test_claude_code_project_servers_are_taken_from_claude_json(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    write(
        tmp_path / ".claude.json",
        {
            "numStartups": 7,
            "mcpServers": {"time": {"command": "/nonexistent/user-scope"}},
            "projects": {str(project): {"mcpServers": {"time": {"type": "stdio", **EXTRAS}}}},
        },
    )
    done = cli("probe", "--json", "--config", str(tmp_path / ".claude.json"), home=tmp_path, cwd=project)
    assert "steps" in tool_names(done)


# --- --config auto, config list -----------------------------------------------------------------


def test_config_auto_takes_the_first_well_known_config_found(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    write(project / ".cursor" / "mcp.json", {"mcpServers": {"demo": DEMO_ENTRY}})
    write(tmp_path / ".codeium" / "windsurf" / "mcp_config.json", {"mcpServers": {"time": EXTRAS}})
    done = cli("probe", "--json", "--config", "auto", home=tmp_path, cwd=project)
    assert "add" in tool_names(done)
    assert f"--config auto: using {project / '.cursor' / 'mcp.json'} (Cursor (project))" in done.stderr
    windsurf_only = cli("probe", "--json", "--config", "auto", home=tmp_path, cwd=tmp_path)
    assert "steps" in tool_names(windsurf_only)


@pytest.mark.parametrize("where", ["claude-desktop-xdg", "vscode-settings"])
def test_config_auto_finds_the_user_level_configs(tmp_path: Path, where: str) -> None:
    xdg = tmp_path / "xdg"
    if where == "claude-desktop-xdg":
        write(
            xdg / "Claude" / "claude_desktop_config.json",
            {"globalShortcut": "", "mcpServers": {"time": EXTRAS}},
        )
    else:
        settings = xdg / "Code" / "User" / "settings.json"
        settings.parent.mkdir(parents=True)
        entry = json.dumps({"type": "stdio", **EXTRAS})
        settings.write_text(
            f'{{\n  // user settings\n  "editor.tabSize": 2,\n  "mcp": {{"servers": {{"time": {entry},}}}},\n}}\n'
        )
    done = cli("probe", "--json", "--config", "auto", home=tmp_path, XDG_CONFIG_HOME=str(xdg))
    assert "steps" in tool_names(done)
    assert "--config auto: using " + str(xdg) in done.stderr


def test_config_auto_with_nothing_found_says_where_it_looked(tmp_path: Path) -> None:
    done = cli("probe", "--config", "auto", home=tmp_path)
    assert done.returncode == 2
    assert "--config auto: no MCP config found" in done.stderr
    assert str(tmp_path / ".claude.json") in done.stderr


def test_config_list_shows_each_path_and_its_servers_redacted(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    write(project / ".vscode" / "mcp.json", {"servers": {"time": {"type": "stdio", **EXTRAS}}})
    remote = {"serverUrl": "https://mcp.example.invalid/mcp?token=${REMOTE_TOKEN}"}
    write(tmp_path / ".codeium" / "windsurf" / "mcp_config.json", {"mcpServers": {"remote": remote}})
    write(tmp_path / ".cursor" / "mcp.json", {"mcpServers": {"bad": {"command": 3}}})
    (tmp_path / ".config" / "Code" / "User").mkdir(parents=True)
    (tmp_path / ".config" / "Code" / "User" / "settings.json").write_text('{"editor.tabSize": 2, // x\n}')
    done = cli("config", "list", home=tmp_path, cwd=project, REMOTE_TOKEN=SECRET)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert (
        f"VS Code (workspace): {project / '.vscode' / 'mcp.json'}: found, 1 server (--config auto takes this one)"
        in lines
    )
    assert any(line.startswith("  time  stdio") and "demo_server.py" in line for line in lines)
    assert f"Claude Code: {tmp_path / '.claude.json'}: not found" in lines
    assert f"Cursor: {tmp_path / '.cursor' / 'mcp.json'}: found, 1 problem" in lines
    assert "  mcpServers.bad.command: must be a non-empty string, not a number" in lines
    assert any(line.startswith("  remote  http") for line in lines)
    assert "found, no MCP servers" in done.stdout
    assert SECRET not in done.stdout + done.stderr

    as_json = cli("config", "list", "--json", home=tmp_path, cwd=project, REMOTE_TOKEN=SECRET)
    doc = json.loads(as_json.stdout)
    by_client = {entry["client"]: entry for entry in doc["paths"]}
    assert by_client["VS Code (workspace)"]["auto"] is True
    assert by_client["VS Code (workspace)"]["shape"] == "vscode"
    assert by_client["Windsurf"]["servers"][0]["transport"] == "http"
    assert by_client["Claude Desktop"]["found"] is False
    assert SECRET not in as_json.stdout


# --- the no-grant notice ------------------------------------------------------------------------

LONG = "a-server-whose-name-is-long-enough-to-push-the-notice-past-eighty-columns"


def test_probe_of_a_plain_mcp_server_without_a_grant_says_nothing_of_grants(tmp_path: Path) -> None:
    config = write(tmp_path / "c.json", {"mcpServers": {"time": TIME}})
    done = cli("probe", "--config", str(config), home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "no grant" not in done.stdout + done.stderr


def test_probe_of_an_mcpl_server_without_a_grant_tells_on_stderr_once(tmp_path: Path) -> None:
    config = write(tmp_path / "c.json", {"mcpServers": {LONG: DEMO_ENTRY}})
    done = cli("probe", "--json", "--config", str(config), home=tmp_path)
    assert done.returncode == 0, done.stderr
    json.loads(done.stdout)  # one document
    notices = [line for line in done.stderr.splitlines() if "gives no grant" in line]
    assert len(notices) == 1 and LONG in notices[0]


def _run_until_ready(config: Path, *markers: str) -> tuple[str, str]:
    running = Running("run", str(config))
    try:
        wait_for_all(running, *markers)
    finally:
        running.process.send_signal(signal.SIGINT)
        status, out, err = running.finish()
    assert status == 0, err
    return out, err


def test_run_tells_no_grant_only_for_mcpl_servers_on_stderr_unwrapped(tmp_path: Path) -> None:
    config = write(tmp_path / "c.json", {"mcpServers": {LONG: DEMO_ENTRY, "time": TIME}})
    out, err = _run_until_ready(config, f"{LONG}  ready", "time  ready")
    assert "gives no grant" not in out
    notices = [line for line in err.splitlines() if "gives no grant" in line]
    assert len(notices) == 1 and notices[0].startswith(f"warning: {LONG}: its config entry gives no grant")
    assert "time" not in notices[0].split(":")[1]


@pytest.mark.parametrize("shape", ["vscode", "windsurf"])
def test_run_hosts_an_editor_config(tmp_path: Path, shape: str) -> None:
    data = (
        {"servers": {"time": {"type": "stdio", **TIME}}}
        if shape == "vscode"
        else {"mcpServers": {"time": TIME}}
    )
    out, err = _run_until_ready(write(tmp_path / "c.json", data), "time  ready")
    assert "Hosting 1 server(s)" in out and "gives no grant" not in out + err


# --- HTTP entries -------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("shape", ["vscode", "windsurf"])
async def test_an_http_entry_reaches_the_server_with_its_expanded_header(tmp_path: Path, shape: str) -> None:
    headers = {"Authorization": "Bearer ${env:API_TOKEN}"}
    if shape == "vscode":
        data: dict[str, Any] = {
            "servers": {"web": {"type": "http", "url": "${env:DEMO_URL}", "headers": headers}}
        }
    else:
        data = {"mcpServers": {"web": {"serverUrl": "${DEMO_URL}", "headers": headers}}}
    config = write(tmp_path / "c.json", data)
    async with bridge(tmp_path) as server:
        done = await anyio.to_thread.run_sync(
            functools.partial(
                cli,
                "probe",
                "--json",
                "--config",
                str(config),
                home=tmp_path,
                DEMO_URL=server.url(),
                API_TOKEN=SECRET,
            )
        )
        rows = server.requests()
    assert "add" in tool_names(done)
    assert headers_of(rows, "POST")[0]["authorization"] == f"Bearer {SECRET}"
    assert SECRET not in done.stdout + done.stderr

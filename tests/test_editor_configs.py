"""The editors' config shapes read as the host's config (``mcpl_host.editor_configs``), by
plain calls: each shape, the variables, hostile input, the well-known paths."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from mcpl_host.config import ConfigError, read_config_json
from mcpl_host.editor_configs import (
    Place,
    detect_shape,
    load_any_config,
    look_around,
    names_phrase,
    parse_any_config,
    server_row,
    strip_jsonc,
    to_host_shape,
    well_known_paths,
)

SECRET = "s3cr3t-value-from-env"
PLACE = Place({"API_KEY": SECRET, "EMPTY": "", "SHORT": "ab"}, "/work/proj", "/home/u")


def parsed(data: object, place: Place = PLACE) -> Any:
    config, _ = parse_any_config(data, place, base_dir=Path("/cfg"), source="f.json")
    return config


def problems(data: object, place: Place = PLACE) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parsed(data, place)
    return [str(problem) for problem in caught.value.problems]


# --- shapes -----------------------------------------------------------------------------------


def test_claude_desktop_cursor_windsurf_entries_are_read_as_the_hosts() -> None:
    config = parsed(
        {
            "mcpServers": {
                "time": {"command": "python", "args": ["-m", "mcp_server_time"], "env": {"TZ": "UTC"}},
                "remote": {"serverUrl": "https://mcp.example.com/mcp", "headers": {"X-Key": "abcd1234"}},
                "legacy": {"url": "http://127.0.0.1:9/sse", "type": "sse"},
                "streamed": {"url": "http://127.0.0.1:9/mcp", "transport": "streamable-http"},
                "ui": {"command": "x", "autoApprove": ["a"], "disabledTools": ["b"], "alwaysAllow": []},
            }
        }
    )
    servers = config.servers
    assert servers["time"].transport == "stdio" and servers["time"].args == ("-m", "mcp_server_time")
    assert servers["remote"].transport == "http" and servers["remote"].url == "https://mcp.example.com/mcp"
    assert servers["legacy"].transport == "sse"
    assert servers["streamed"].transport == "streamable-http"
    assert servers["ui"].command == "x"


def test_vscode_servers_and_settings_shapes_are_read() -> None:
    entry = {
        "time": {"type": "stdio", "command": "python", "args": ["-m", "mcp_server_time"]},
        "web": {"type": "http", "url": "http://127.0.0.1:9/mcp", "dev": {"watch": "*.py"}},
        "old": {"type": "sse", "url": "http://127.0.0.1:9/sse"},
    }
    for data in ({"servers": entry, "inputs": []}, {"editor.fontSize": 12, "mcp": {"servers": entry}}):
        assert detect_shape(data) == "vscode"
        servers = parsed(data).servers
        assert [servers[n].transport for n in ("time", "web", "old")] == ["stdio", "http", "sse"]


def test_claude_code_takes_the_current_projects_servers_then_the_top_level() -> None:
    data = {
        "numStartups": 3,
        "mcpServers": {"time": {"command": "top"}, "user": {"command": "u"}},
        "projects": {
            "/work/proj": {"mcpServers": {"time": {"command": "project"}}, "allowedTools": []},
            "/elsewhere": {"mcpServers": {"other": {"command": "o"}}},
        },
    }
    config, converted = parse_any_config(data, PLACE, base_dir=Path("/"), source="c.json")
    assert converted.shape == "claude-code"
    assert list(config.servers) == ["time", "user"]
    assert config.servers["time"].command == "project"
    assert converted.shadowed == ("time",)
    assert converted.locations["time"] == 'projects["/work/proj"].mcpServers.time'


def test_a_problem_is_located_in_the_files_own_shape() -> None:
    assert problems({"servers": {"t": {"type": "stdio", "comand": "x"}}}) == [
        'servers.t.comand: unknown key; did you mean "command"?',
        'servers.t: a stdio server needs "command"',
    ]
    found = problems({"projects": {"/work/proj": {"mcpServers": {"x": {"command": 3}}}}})
    assert found == ['projects["/work/proj"].mcpServers.x.command: must be a non-empty string, not a number']


def test_a_file_of_no_known_shape_gets_the_hosts_own_hint() -> None:
    assert detect_shape({"mcpServer": {}}) is None
    assert any('did you mean "mcpServers"' in p for p in problems({"mcpServer": {}}))
    assert problems([1]) == ["the top level must be an object, not an array"]


def test_env_file_is_a_problem_and_editor_only_keys_are_left_out() -> None:
    assert problems({"servers": {"t": {"command": "x", "envFile": "${workspaceFolder}/.env"}}}) == [
        'servers.t.envFile: is not read by mcpl-host: put the variables in "env"'
    ]


def test_url_and_server_url_together_is_a_problem() -> None:
    found = problems({"mcpServers": {"r": {"url": "http://a/", "serverUrl": "http://b/"}}})
    assert found == ['mcpServers.r.serverUrl: give "url" or "serverUrl", not both']


# --- variables --------------------------------------------------------------------------------


def test_variables_are_expanded_and_environment_values_become_secrets() -> None:
    config = parsed(
        {
            "servers": {
                "t": {
                    "command": "${workspaceFolder}/bin/server",
                    "args": ["--key", "${env:API_KEY}", "${MISSING:-fallback}", "${EMPTY:-dflt}"],
                    "env": {"TOKEN": "${API_KEY}", "HOME_DIR": "${userHome}"},
                    "cwd": "${workspaceFolder}",
                }
            }
        }
    )
    server = config.servers["t"]
    assert server.command == "/work/proj/bin/server"
    assert server.args == ("--key", SECRET, "fallback", "dflt")
    assert server.env == {"TOKEN": SECRET, "HOME_DIR": "/home/u"}
    assert server.cwd == "/work/proj"
    assert SECRET in server.secrets
    assert SECRET not in repr(server) and SECRET not in server.describe


def test_a_short_environment_value_is_not_made_a_secret() -> None:
    server = parsed({"mcpServers": {"t": {"command": "x", "args": ["${SHORT}"]}}}).servers["t"]
    assert server.args == ("ab",) and server.secrets == ()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("${NOPE}", "${NOPE}: the environment variable NOPE is not set"),
        ("${env:NOPE}", "${env:NOPE}: the environment variable NOPE is not set"),
        (
            "${input:api-key}",
            "${input:api-key} asks VS Code's input 'api-key', which mcpl-host cannot ask: put the value "
            "in an environment variable and write ${env:NAME}",
        ),
        ("${command:pick}", "${command:pick} is not a variable mcpl-host expands"),
    ],
)
def test_an_unusable_variable_is_a_problem_naming_it(value: str, message: str) -> None:
    found = problems({"servers": {"t": {"command": "x", "env": {"K": value}}}})
    assert found == [f"servers.t.env.K: {message}"]


def test_no_problem_shows_an_environment_value() -> None:
    found = problems({"mcpServers": {"t": {"url": "ftp://${API_KEY}@host/", "args": ["${NOPE}"]}}})
    assert found and all(SECRET not in line for line in found)


# --- hostile input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        {"servers": []},
        {"servers": {"t": "python"}},
        {"servers": {"t": {"command": ["python"]}}},
        {"servers": {"t": {"command": "x", "args": "a b"}}},
        {"servers": {"t": {"command": "x", "env": {"K": 3}}}},
        {"mcp": {"servers": 7}},
        {"projects": {"/work/proj": {"mcpServers": "x"}}},
        {"projects": {"/work/proj": 3}, "mcpServers": {"t": {"command": None}}},
        {"mcpServers": {"t": {"command": "x", "secrets": "${API_KEY}"}}},
    ],
)
def test_wrong_types_are_problems_never_crashes(data: object) -> None:
    found = problems(data)
    assert found and all(SECRET not in line for line in found)


def test_duplicate_names_across_sections_are_a_problem() -> None:
    found = problems({"mcpServers": {"a": {"command": "x"}}, "mcplServers": {"a": {"command": "y"}}})
    assert found == ["mcplServers.a: the name 'a' is already used in mcpServers"]


def test_repeated_keys_are_problems_in_every_shape(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text('{"servers": {"a": {"command": "x", "command": "y", "env": {"K": "1", "K": "2"}}}}')
    with pytest.raises(ConfigError) as caught:
        load_any_config(path, PLACE)
    assert [str(p) for p in caught.value.problems] == [
        "servers.a.command: this key appears more than once in the same object",
        "servers.a.env.K: this key appears more than once in the same object",
    ]


def test_a_huge_file_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"mcpServers": {}, "pad": "x" * 5000}))
    with pytest.raises(ConfigError) as caught:
        load_any_config(path, PLACE, max_bytes=1000)
    assert str(caught.value) == f"{path}: the file is larger than 1000 bytes"


def test_a_file_that_is_not_utf8_is_one_problem(tmp_path: Path) -> None:
    path = tmp_path / "latin.json"
    path.write_bytes(b'{"mcpServers": {"caf\xe9": {"command": "x"}}}')
    with pytest.raises(ConfigError) as caught:
        load_any_config(path, PLACE)
    assert str(caught.value) == f"{path}: byte 20: the file is not UTF-8 text"


def test_jsonc_comments_and_trailing_commas_are_read(tmp_path: Path) -> None:
    text = '{\n  // servers\n  "servers": {"t": {"command": "a//b", "args": ["/*x*/",],},}, /* end */\n}\n'
    assert json.loads(strip_jsonc(text)) == {"servers": {"t": {"command": "a//b", "args": ["/*x*/"]}}}
    path = tmp_path / "mcp.json"
    path.write_text(text + "oops")
    with pytest.raises(ConfigError) as caught:
        read_config_json(path, prepare=strip_jsonc)
    assert str(caught.value).startswith(f"{path}: line 5, column 1: invalid JSON")


def test_names_phrase_is_bounded() -> None:
    assert names_phrase(["a", "b"]) == "a, b"
    assert names_phrase([str(i) for i in range(25)], limit=3) == "0, 1, 2 and 22 more"


# --- where the files are ----------------------------------------------------------------------


def test_well_known_paths_come_from_home_xdg_and_cwd() -> None:
    place = Place({"XDG_CONFIG_HOME": "/xdg"}, "/p", "/h")
    linux = dict((client, str(path)) for client, path in well_known_paths(place, "linux"))
    assert linux["Claude Desktop"] == "/xdg/Claude/claude_desktop_config.json"
    assert linux["VS Code (user settings)"] == "/xdg/Code/User/settings.json"
    assert linux["Cursor (project)"] == "/p/.cursor/mcp.json"
    assert linux["Windsurf"] == "/h/.codeium/windsurf/mcp_config.json"
    assert linux["Claude Code"] == "/h/.claude.json"
    mac = dict((client, str(path)) for client, path in well_known_paths(place, "darwin"))
    assert mac["Claude Desktop"] == "/h/Library/Application Support/Claude/claude_desktop_config.json"
    assert mac["VS Code (user)"] == "/h/Library/Application Support/Code/User/mcp.json"
    relative_xdg = Place({"XDG_CONFIG_HOME": "rel"}, "/p", "/h")
    assert (
        str(well_known_paths(relative_xdg, "linux")[4][1]) == "/h/.config/Claude/claude_desktop_config.json"
    )


def test_auto_passes_over_missing_files_and_files_without_servers(tmp_path: Path) -> None:
    home, cwd = tmp_path / "home", tmp_path / "proj"
    (home / ".config" / "Code" / "User").mkdir(parents=True)
    cwd.mkdir()
    (home / ".claude.json").write_text(json.dumps({"projects": {}, "numStartups": 1}))
    (home / ".config" / "Code" / "User" / "settings.json").write_text('{"editor.fontSize": 12, // x\n}')
    (home / ".cursor").mkdir()
    (home / ".cursor" / "mcp.json").write_text(json.dumps({"mcpServers": {"t": {"command": "x"}}}))
    place = Place({}, str(cwd), str(home))
    found = look_around(place, sys.platform if sys.platform == "darwin" else "linux", first_only=True)
    assert [f.client for f in found][-1] == "Cursor"
    assert found[-1].usable and found[-1].config is not None
    assert [f.exists for f in found] == [False, False, False, True, False, True]
    everything = look_around(place, "linux")
    settings = everything[-1]
    assert settings.exists and not settings.usable and settings.error is None


def test_server_row_redacts_secrets() -> None:
    config = parsed({"mcpServers": {"r": {"url": "https://h/mcp?token=${API_KEY}"}}})
    row = server_row("r", config.servers["r"])
    assert row["transport"] == "http" and SECRET not in json.dumps(row)


def test_to_host_shape_keeps_other_top_level_keys_for_near_miss_hints() -> None:
    converted = to_host_shape({"mcpServers": {}, "mcplServer": {}}, PLACE)
    assert converted.data == {"mcplServer": {}, "mcpServers": {}}

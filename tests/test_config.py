"""The config file: the common mcpServers shape, MCPL keys, path resolution, and every problem
reported at once with its location. Pure, apart from reading fixture and tmp files."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import ssl
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpl_host.auth.settings import OAuthSettings
from mcpl_host.config import (
    ConfigError,
    ConfigProblem,
    HostConfig,
    ServerConfig,
    default_server_name,
    load_config,
    parse_config,
)
from mcpl_host.jsonrpc.errors import MCPLHostError
from mcpl_host.limits import Limits
from mcpl_host.mcpl.feature_sets import FeatureSetPolicy
from mcpl_host.mcpl.grants import GrantPolicy
from mcpl_host.supervisor_policy import RestartPolicy

CONFIGS = Path(__file__).resolve().parent.parent / "fixtures" / "configs"
BASE = Path("/cfg")


def parse(servers: dict[str, Any], section: str = "mcpServers") -> HostConfig:
    return parse_config({section: servers}, base_dir=BASE, source="test.json")


def one(entry: dict[str, Any]) -> ServerConfig:
    return parse({"s": entry}).servers["s"]


def problems_of(data: Any) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data, base_dir=BASE, source="test.json")
    return [str(p) for p in info.value.problems]


def problems_of_entry(entry: Any) -> list[str]:
    return problems_of({"mcpServers": {"s": entry}})


# --- The common shape --------------------------------------------------------------------------


def test_claude_desktop_shape() -> None:
    config = load_config(CONFIGS / "claude_desktop.json")
    assert list(config.servers) == ["filesystem", "github", "time"]  # "globalShortcut" ignored
    fs = config.servers["filesystem"]
    assert (fs.transport, fs.command) == ("stdio", "npx")
    assert fs.args == (
        "-y",
        "@modelcontextprotocol/server-filesystem",
        "/Users/me/Desktop",
        str(CONFIGS / "notes"),
    )
    github = config.servers["github"]
    assert github.env == {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_not_a_real_token"}
    assert github.secrets_for_redaction == ("ghp_not_a_real_token",)
    assert config.servers["time"] == ServerConfig(
        name="time", transport="stdio", command="uvx", args=("mcp-server-time",)
    )
    assert config.source == str(CONFIGS / "claude_desktop.json")
    assert config.enabled_servers == config.servers


def test_example_with_every_kind_of_key() -> None:
    config = load_config(CONFIGS / "example.json")
    demo = config.servers["demo"]
    assert demo.args == (str(CONFIGS / "../demo_server.py"),)
    assert Path(os.path.normpath(demo.args[0])) == CONFIGS.parent / "demo_server.py"
    assert Path(demo.args[0]).is_file()
    assert demo.grant_policy == GrantPolicy(grant=("pushEvents", "tools"), deny=("channels.*",))
    assert demo.feature_set_policy == FeatureSetPolicy(enabled=("demo.*",), disabled=())
    assert demo.limits == Limits(
        handshake_timeout_seconds=10, request_timeout_seconds=30, close_grace_seconds=1
    )
    assert demo.restart_policy == RestartPolicy(
        base_delay_seconds=1, max_delay_seconds=20, max_failures=3, failure_window_seconds=30
    )
    remote = config.servers["remote"]
    assert (remote.transport, remote.url, remote.token_in) == (
        "websocket",
        "wss://mcpl.example.invalid/v1",
        "header",
    )
    assert remote.grant_policy.grant_all_advertised
    assert remote.secrets_for_redaction == ("mcpl-host", "example-token-not-real")
    assert list(config.servers) == ["demo", "time", "remote"]
    assert list(config.enabled_servers) == ["demo"]


def test_servers_under_mcplServers() -> None:
    config = parse({"a": {"command": "x"}}, section="mcplServers")
    assert config.servers["a"].command == "x"


def test_both_lists_merge_and_a_name_in_both_is_a_problem() -> None:
    config = parse_config(
        {"mcpServers": {"a": {"command": "x"}}, "mcplServers": {"b": {"url": "ws://h"}}},
        base_dir=BASE,
        source="t",
    )
    assert list(config.servers) == ["a", "b"]
    assert problems_of({"mcpServers": {"a": {"command": "x"}}, "mcplServers": {"a": {"command": "y"}}}) == [
        "mcplServers.a: the name 'a' is already used in mcpServers"
    ]


def test_an_empty_servers_object_is_a_config_with_no_servers() -> None:
    assert parse({}).servers == {}


# --- Paths -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arg", "expected"),
    [
        ("./server.py", "/cfg/server.py"),
        ("../demo_server.py", "/cfg/../demo_server.py"),
        (".", "/cfg"),
        ("..", "/cfg/.."),
        ("server.py", "server.py"),  # not marked: passed as written
        ("-m", "-m"),
        ("--dir=./x", "--dir=./x"),
        ("/abs/path", "/abs/path"),
        ("@scope/pkg", "@scope/pkg"),
        (".hidden", ".hidden"),
    ],
)
def test_args_resolve_only_when_marked_relative(arg: str, expected: str) -> None:
    assert one({"command": "python3", "args": [arg]}).args == (expected,)


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("./run.sh", "/cfg/run.sh"),
        ("../bin/server", "/cfg/../bin/server"),
        ("python3", "python3"),
        ("/usr/bin/python3", "/usr/bin/python3"),
    ],
)
def test_command_resolves_by_the_same_rule(command: str, expected: str) -> None:
    assert one({"command": command}).command == expected


@pytest.mark.parametrize(
    ("cwd", "expected"),
    [
        ("work", "/cfg/work"),
        ("./work", "/cfg/work"),
        ("../up", "/cfg/../up"),
        ("/abs", "/abs"),
        (".", "/cfg"),
    ],
)
def test_cwd_relative_resolves_against_the_config_folder(cwd: str, expected: str) -> None:
    assert one({"command": "x", "cwd": cwd}).cwd == expected


def test_load_config_resolves_against_the_folder_of_the_path_as_given(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.json").write_text(
        '{"mcpServers": {"s": {"command": "x", "args": ["./a"], "cwd": "w"}}}'
    )
    server = load_config(tmp_path / "sub" / "c.json").servers["s"]
    assert (server.args, server.cwd) == ((str(tmp_path / "sub" / "a"),), str(tmp_path / "sub" / "w"))


def test_tilde_is_not_expanded() -> None:
    assert problems_of_entry({"command": "x", "cwd": "~/work"}) == [
        'mcpServers.s.cwd: "~" is not expanded; write the path in full'
    ]


# --- WebSocket ---------------------------------------------------------------------------------


def test_websocket_entry_inferred_from_url() -> None:
    server = one(
        {
            "url": "wss://h:8443/mcpl?x=1",
            "token": "tok-12345",
            "tokenIn": "query",
            "headers": {"X-Api-Key": "key-12345"},
        }
    )
    assert server == ServerConfig(
        name="s",
        transport="websocket",
        url="wss://h:8443/mcpl?x=1",
        token="tok-12345",
        token_in="query",
        headers={"X-Api-Key": "key-12345"},
    )
    assert server.secrets_for_redaction == ("key-12345", "tok-12345")


@pytest.mark.parametrize(
    ("kind", "expected"), [("http", "http"), ("streamable-http", "streamable-http"), ("sse", "sse")]
)
def test_http_entries_in_the_shape_mcp_clients_write(kind: str, expected: str) -> None:
    headers = {"Authorization": "Bearer key-12345", "X-Org": "org-12345"}
    server = one({"type": kind, "url": "https://h.example/mcp?k=v", "headers": headers})
    assert server == ServerConfig(
        name="s", transport=expected, url="https://h.example/mcp?k=v", headers=headers
    )  # type: ignore[arg-type]
    # The credential also without its scheme word (docs/protocol.md L2a).
    assert server.secrets_for_redaction == (
        "Bearer key-12345",
        "key-12345",
        "Bearer%20key-12345",
        "org-12345",
    )


def test_an_http_url_without_a_transport_is_streamable_http_with_fallback() -> None:
    server = one({"url": "http://127.0.0.1:3001/mcp", "token": "tok-12345"})
    assert (server.transport, server.url, server.token) == ("http", "http://127.0.0.1:3001/mcp", "tok-12345")


def test_explicit_transport_picks_one_of_two_set_ups_and_drops_the_other() -> None:
    entry = {"command": "x", "args": ["./a"], "url": "ws://h", "token": "tok-12345"}
    stdio = one({**entry, "transport": "stdio"})
    assert (stdio.command, stdio.args, stdio.url, stdio.token) == ("x", ("/cfg/a",), None, None)
    ws = one({**entry, "type": "websocket"})
    assert (ws.command, ws.args, ws.url, ws.token) == (None, (), "ws://h", "tok-12345")


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (
            {"command": "x", "url": "ws://h"},
            ['mcpServers.s: has both "command" and "url"; set "transport" to "stdio", "websocket" or "http"'],
        ),
        ({}, ['mcpServers.s: needs "command" (a stdio server) or "url" (a websocket or HTTP server)']),
        ({"transport": "websocket"}, ['mcpServers.s: a websocket server needs "url"']),
        ({"transport": "stdio", "url": "ws://h"}, ['mcpServers.s: a stdio server needs "command"']),
        (
            {"transport": "ftp", "url": "ws://h"},
            [
                'mcpServers.s.transport: must be "stdio", "websocket", "http", "streamable-http" or "sse",'
                ' not the string "ftp"'
            ],
        ),
        (
            {"transport": "sse", "url": "ws://h"},
            ['mcpServers.s.url: must be an http:// or https:// URL; its scheme is "ws"'],
        ),
        (
            {"type": "http", "url": "https://h/mcp", "token": "tok-12345", "tokenIn": "query"},
            ["mcpServers.s.tokenIn: applies only to websocket servers, and this one is http"],
        ),
        (
            {"transport": "stdio", "type": "stdio", "command": "x"},
            ['mcpServers.s.type: give "transport" or "type", not both'],
        ),
        (
            {"url": "ws://h", "args": [], "env": {}},
            [
                "mcpServers.s.args: applies only to stdio servers, and this one is websocket",
                "mcpServers.s.env: applies only to stdio servers, and this one is websocket",
            ],
        ),
        (
            {"command": "x", "headers": {}},
            ["mcpServers.s.headers: applies only to websocket and HTTP servers, and this one is stdio"],
        ),
        (
            {"transport": "websocket", "url": "https://h/mcp"},
            ['mcpServers.s.url: must be a ws://, wss:// or mcpl:// URL; its scheme is "https"'],
        ),
        ({"url": "http:///path"}, ["mcpServers.s.url: must be an http:// or https:// URL; it has no host"]),
        ({"url": "ws:///path"}, ["mcpServers.s.url: must be a ws://, wss:// or mcpl:// URL; it has no host"]),
        (
            {"url": "localhost:80"},
            [
                'mcpServers.s.url: must be a ws://, wss://, mcpl://, http:// or https:// URL; its scheme is "localhost"'
            ],
        ),
        (
            {"url": "//h/x"},
            ["mcpServers.s.url: must be a ws://, wss://, mcpl://, http:// or https:// URL; it has no scheme"],
        ),
        (
            {"url": "ws://h", "tokenIn": "cookie", "token": "tok-12345"},
            ['mcpServers.s.tokenIn: must be "header" or "query", not the string "cookie"'],
        ),
        ({"url": "ws://h", "tokenIn": "query"}, ['mcpServers.s.tokenIn: has no effect without "token"']),
    ],
)
def test_transport_problems(entry: dict[str, Any], expected: list[str]) -> None:
    assert problems_of_entry(entry) == expected


# --- Host keys ---------------------------------------------------------------------------------


def test_timeouts_and_max_line_bytes_become_limits() -> None:
    server = one(
        {
            "command": "x",
            "maxLineBytes": 1048576,
            "timeouts": {"handshake": 5, "request": 0.5, "closeGrace": 0, "terminateGrace": 3},
        }
    )
    assert server.limits == Limits(
        max_line_bytes=1048576,
        handshake_timeout_seconds=5,
        request_timeout_seconds=0.5,
        close_grace_seconds=0,
        terminate_grace_seconds=3,
    )


def test_restart_becomes_a_restart_policy() -> None:
    server = one(
        {
            "command": "x",
            "restart": {
                "enabled": False,
                "baseDelay": 2,
                "maxDelay": 60,
                "jitter": 0,
                "healthyAfter": 10,
                "maxFailures": 9,
                "failureWindow": 120,
            },
        }
    )
    assert server.restart_policy == RestartPolicy(
        enabled=False,
        base_delay_seconds=2,
        max_delay_seconds=60,
        jitter=0,
        healthy_after_seconds=10,
        max_failures=9,
        failure_window_seconds=120,
    )


def test_grant_and_feature_sets() -> None:
    server = one(
        {
            "command": "x",
            "grant": ["pushEvents", "contextHooks.beforeInference.*"],
            "deny": ["channels.*"],
            "grantAllAdvertised": False,
            "featureSets": {"enabled": None, "disabled": ["memory.*"]},
        }
    )
    assert server.grant_policy == GrantPolicy(
        grant=("pushEvents", "contextHooks.beforeInference.*"), deny=("channels.*",)
    )
    assert server.feature_set_policy == FeatureSetPolicy(enabled=None, disabled=("memory.*",))


def test_secrets_for_redaction_collects_every_secret_once() -> None:
    server = one(
        {
            "command": "x",
            "args": ["--token", "arg-secret"],
            "env": {"A_TOKEN": "same-value", "DB_PASSWORD": "other-value", "C_KEY": "", "MODE": "tools"},
            "secrets": ["same-value", "extra-secret"],
        }
    )
    assert server.secrets_for_redaction == ("same-value", "other-value", "arg-secret", "extra-secret")


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"command": 3}, ["mcpServers.s.command: must be a non-empty string, not a number"]),
        ({"command": ""}, ["mcpServers.s.command: must be a non-empty string, not a string"]),
        ({"command": "x", "args": "a b"}, ["mcpServers.s.args: must be an array of strings, not a string"]),
        (
            {"command": "x", "args": ["a", None, True]},
            [
                "mcpServers.s.args[1]: must be a string, not null",
                "mcpServers.s.args[2]: must be a string, not true",
            ],
        ),
        (
            {"command": "x", "env": {"PORT": 8080, "K": ["v"]}},
            [
                "mcpServers.s.env.PORT: must be a string, not a number",
                "mcpServers.s.env.K: must be a string, not an array",
            ],
        ),
        ({"command": "x", "env": []}, ["mcpServers.s.env: must be an object of strings, not an array"]),
        ({"command": "x", "cwd": None}, ["mcpServers.s.cwd: must be a non-empty string, not null"]),
        (
            {"command": "x", "inheritEnv": "yes"},
            ["mcpServers.s.inheritEnv: must be true or false, not a string"],
        ),
        ({"command": "x", "disabled": 1}, ["mcpServers.s.disabled: must be true or false, not a number"]),
        ({"command": "x", "grant": "tools"}, ["mcpServers.s.grant: must be an array, not a string"]),
        (
            {"command": "x", "grant": ["tools", 7, "tool"]},
            [
                "mcpServers.s.grant[1]: must be a non-empty string, not a number",
                "mcpServers.s.grant[2]: 'tool' matches no capability path; did you mean \"tools\"?",
            ],
        ),
        (
            {"command": "x", "deny": ["channel.*", "contextHook.*.*.*"]},
            [
                "mcpServers.s.deny[0]: 'channel.*' matches no capability path; did you mean \"channels.*\"?",
                "mcpServers.s.deny[1]: 'contextHook.*.*.*' matches no capability path; "
                'did you mean "contextHooks.beforeInference.*"?',
            ],
        ),
        (
            {"command": "x", "featureSets": {"enabled": "a", "disable": []}},
            [
                'mcpServers.s.featureSets.disable: unknown key; did you mean "disabled"?',
                "mcpServers.s.featureSets.enabled: must be an array of strings, not a string",
            ],
        ),
        ({"command": "x", "featureSets": None}, ["mcpServers.s.featureSets: must be an object, not null"]),
        (
            {"command": "x", "timeouts": {"request": 0, "closeGrace": -1, "handshake": "5"}},
            [
                "mcpServers.s.timeouts.request: must be a positive number of seconds, not the number 0",
                "mcpServers.s.timeouts.closeGrace: must be a number of seconds, 0 or more, not the number -1",
                'mcpServers.s.timeouts.handshake: must be a positive number of seconds, not the string "5"',
            ],
        ),
        (
            {"command": "x", "maxLineBytes": 1.5},
            ["mcpServers.s.maxLineBytes: must be a positive whole number of bytes, not the number 1.5"],
        ),
        (
            {"command": "x", "restart": {"jitter": 1, "maxFailures": "5", "enabled": None}},
            [
                "mcpServers.s.restart.enabled: must be true or false, not null",
                "mcpServers.s.restart.jitter: must be a fraction from 0 up to, not including, 1, not the number 1",
                'mcpServers.s.restart.maxFailures: must be a whole number, 1 or more, not the string "5"',
            ],
        ),
        (
            {"command": "x", "restart": {"baseDelay": 60}},
            [
                "mcpServers.s.restart.maxDelay: must not be less than the base delay (60 seconds); "
                "it is 30 by default"
            ],
        ),
        (
            {"command": "x", "restart": {"baseDelay": 2, "maxDelay": 1}},
            [
                "mcpServers.s.restart.maxDelay: must not be less than the base delay (2 seconds), not the number 1"
            ],
        ),
        (
            {"command": "x", "secrets": ["abc", "long-enough"]},
            ["mcpServers.s.secrets[0]: is shorter than 4 characters, so it would not be redacted"],
        ),
    ],
)
def test_type_and_value_problems_name_the_expected_type(entry: dict[str, Any], expected: list[str]) -> None:
    assert problems_of_entry(entry) == expected


def test_secret_values_never_appear_in_messages() -> None:
    text = "\n".join(
        problems_of_entry(
            {
                "url": "https://h/?token=SECRET-1",
                "headers": {"A": 12345678},
                "token": 87654321,
                "secrets": [99999999],
            }
        )
    )
    assert "SECRET-1" not in text and "12345678" not in text and "87654321" not in text
    assert "99999999" not in text


# --- Unknown keys, locations, all problems at once ---------------------------------------------


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("comand", 'mcpServers.s.comand: unknown key; did you mean "command"?'),
        ("inherit_env", 'mcpServers.s.inherit_env: unknown key; did you mean "inheritEnv"?'),
        ("Args", 'mcpServers.s.Args: unknown key; did you mean "args"?'),
        ("timeout", 'mcpServers.s.timeout: unknown key; did you mean "timeouts"?'),
        ("description", "mcpServers.s.description: unknown key"),
    ],
)
def test_unknown_key_with_a_hint_for_near_misses(key: str, expected: str) -> None:
    assert problems_of_entry({"command": "x", "args": [], key: 1}) == [expected]


def test_five_mistakes_are_five_problems_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(CONFIGS / "broken.json")
    error = info.value
    assert [p.location for p in error.problems] == [
        "mcpServers.demo.args[1]",
        "mcpServers.demo.timeouts.request",
        "mcpServers.time.inherit_env",
        "mcpServers.remote.url",
        "mcpServers.remote.grant[0]",
    ]
    assert isinstance(error, MCPLHostError)
    lines = str(error).splitlines()
    assert len(lines) == 5
    assert all(line.startswith(f"{CONFIGS / 'broken.json'}: mcpServers.") for line in lines)
    assert lines[1].endswith(
        "mcpServers.demo.timeouts.request: must be a positive number of seconds, not the number -5"
    )


def test_disabled_servers_are_checked_too() -> None:
    assert problems_of_entry({"command": "x", "disabled": True, "args": [1]}) == [
        "mcpServers.s.args[0]: must be a string, not a number"
    ]


def test_names_that_are_not_plain_words_are_quoted_in_locations() -> None:
    assert problems_of({"mcpServers": {"my server": {"command": 1}, "a.b": [], "": {"command": "x"}}}) == [
        'mcpServers["my server"].command: must be a non-empty string, not a number',
        'mcpServers["a.b"]: must be an object, not an array',
        'mcpServers[""]: a server name must not be empty',
    ]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ([], ["the top level must be an object, not an array"]),
        ({}, ['no "mcpServers" object: the servers go in {"mcpServers": {name: {...}}}']),
        (
            {"mcp_servers": {}},
            [
                'mcp_servers: unknown key; did you mean "mcpServers"?',
                'no "mcpServers" object: the servers go in {"mcpServers": {name: {...}}}',
            ],
        ),
        ({"mcpServers": []}, ["mcpServers: must be an object keyed by server name, not an array"]),
        ({"mcpServers": None}, ["mcpServers: must be an object keyed by server name, not null"]),
    ],
)
def test_top_level_problems(data: Any, expected: list[str]) -> None:
    assert problems_of(data) == expected


# --- The file ----------------------------------------------------------------------------------


def test_invalid_json_is_one_problem_with_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    path.write_text('{\n  "mcpServers": {\n    "a": {"command": "x",}\n  }\n}\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == [
        ConfigProblem("line 3, column 26", "invalid JSON: Expecting property name enclosed in double quotes")
    ]
    assert str(info.value) == (
        f"{path}: line 3, column 26: invalid JSON: Expecting property name enclosed in double quotes"
    )


def test_a_key_repeated_in_one_object_is_a_problem(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('{"mcpServers": {"a": {"command": "x", "command": "y"}, "a": {"command": "z"}}}')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    # json keeps the last "a"; the first (with its own repeated key) is gone, but reported.
    assert [str(p) for p in info.value.problems] == [
        "mcpServers.a: this key appears more than once in the same object"
    ]


def test_a_repeated_key_inside_a_server_is_a_problem(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('{"mcpServers": {"a": {"command": "x", "command": "y"}}}')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert [str(p) for p in info.value.problems] == [
        "mcpServers.a.command: this key appears more than once in the same object"
    ]


def test_missing_file_and_non_utf8_are_one_problem_each(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.json")
    assert info.value.problems == [ConfigProblem("", "cannot read the file: No such file or directory")]
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"mcpServers": {"\xff": {}}}')
    with pytest.raises(ConfigError) as info:
        load_config(bad)
    assert info.value.problems == [ConfigProblem("byte 17", "the file is not UTF-8 text")]


def test_a_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"mcpServers": {"a": {"command": "x"}}}).encode())
    assert list(load_config(path).servers) == ["a"]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "mcpServers",
                    "mcplServers",
                    "command",
                    "args",
                    "url",
                    "env",
                    "restart",
                    "timeouts",
                    "grant",
                    "transport",
                    "maxDelay",
                    "x",
                    "",
                ]
            ),
            children,
            max_size=5,
        )
    ),
    max_leaves=20,
)


@given(_json)
def test_any_json_gives_a_config_or_a_config_error(data: Any) -> None:
    try:
        parse_config(data, base_dir=BASE, source="t")
    except ConfigError as exc:
        assert exc.problems and all(isinstance(p, ConfigProblem) for p in exc.problems)


# --- ServerConfig by hand, and a config held in memory ------------------------------------------


def test_a_config_held_in_memory_is_checked_as_a_file_is_and_resolves_against_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    data = {"mcpServers": {"demo": {"command": "./server", "args": ["./a.py", "b.py"]}}}
    config = parse_config(data)
    demo = config.servers["demo"]
    assert (demo.command, demo.args) == (str(tmp_path / "server"), (str(tmp_path / "a.py"), "b.py"))
    assert config.source == ""
    elsewhere = parse_config({"mcpServers": {"demo": {"command": "./server"}}}, base_dir="/srv")
    assert elsewhere.servers["demo"].command == "/srv/server"
    with pytest.raises(ConfigError) as info:
        parse_config({"mcpServers": {"demo": {"comand": "x"}}})
    assert [str(p) for p in info.value.problems] == [
        'mcpServers.demo.comand: unknown key; did you mean "command"?',
        'mcpServers.demo: needs "command" (a stdio server) or "url" (a websocket or HTTP server)',
    ]
    file = tmp_path / "servers.json"
    file.write_text(json.dumps(data))
    assert load_config(file).servers == config.servers


def test_a_server_config_by_hand_infers_its_transport_and_name() -> None:
    stdio = ServerConfig(command=sys.executable, args=("server.py",))
    assert (stdio.transport, stdio.name) == ("stdio", default_server_name(sys.executable, ["server.py"]))
    assert ServerConfig(command="python", args=("-m", "mcp_server_time")).name == "mcp_server_time"
    ws = ServerConfig(url="wss://h.example/mcp?token=tok-12345")
    assert (ws.transport, ws.name) == ("websocket", "wss://h.example/mcp?token=[redacted]")
    http = ServerConfig(url="https://h.example/mcp")
    assert (http.transport, http.name) == ("http", "https://h.example/mcp")
    assert ServerConfig(url="https://h.example/sse", transport="sse").transport == "sse"
    assert ServerConfig(name="mine", command="x").name == "mine"
    # A copy with a new name keeps everything else, and is checked again.
    assert dataclasses.replace(stdio, name="other").args == ("server.py",)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({}, "a server needs a command (stdio) or a url (websocket or HTTP)"),
        ({"command": "x", "url": "ws://h/"}, "a server with both a command and a url needs a transport"),
        ({"url": "ftp://h/tok-12345"}, "the url must be a ws://, wss://, mcpl://, http:// or https:// URL"),
        ({"url": "ws://h/", "transport": "carrier-pigeon"}, "transport must be one of"),
        ({"url": "ws://h/", "transport": "stdio"}, "a stdio server needs a command"),
        ({"command": "x", "transport": "websocket"}, "a websocket server needs a url"),
        ({"url": "http://h/", "transport": "websocket"}, "unsupported URL scheme 'http'"),
        ({"url": "ws://h/", "headers": {"X-Key": "tok-12345\r\n"}}, "header 'X-Key' has a value"),
        ({"url": "https://h/", "token": "tok-12345\n"}, "the token holds a NUL, CR or LF"),
        ({"url": "https://user:tok-12345@h/"}, "credentials in the URL's user-info are not supported"),
        ({"command": "x", "compat": "0.3"}, "compat must be one of strict, 0.4, auto, not '0.3'"),
        ({"command": "x", "protocol": "v2"}, "protocol must be one of"),
    ],
)
def test_a_server_config_that_cannot_work_is_refused_when_built_without_its_secret(
    settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        ServerConfig(**settings)
    assert "tok-12345" not in str(info.value)


def test_a_value_only_the_transport_refuses_is_a_problem_of_the_config() -> None:
    assert problems_of_entry({"url": "wss://h/", "headers": {"Host": "h"}}) == [
        "mcpServers.s: header 'Host' is set by the WebSocket handshake"
    ]


def test_the_repr_of_a_server_config_by_hand_hides_every_secret() -> None:
    context = ssl.create_default_context()
    config = ServerConfig(
        url="https://h.example/mcp?session=query-12345",
        token="tok-12345",
        headers={"X-Key": "key-12345"},
        secrets=("extra-12345",),
        ssl_context=context,
    )
    shown = repr(config)
    for secret in ("query-12345", "tok-12345", "key-12345", "extra-12345"):
        assert secret not in shown and secret not in config.name and secret not in config.describe
    assert "SSLContext" not in shown
    assert config == dataclasses.replace(config, ssl_context=None)
    stdio = ServerConfig(command="x", args=("--token", "arg-12345"), env={"API_KEY": "env-12345"})
    assert "arg-12345" not in repr(stdio) and "env-12345" not in repr(stdio)
    assert "arg-12345" not in stdio.describe
    assert {"arg-12345", "env-12345"} <= set(stdio.secrets_for_redaction)


def test_a_hosted_server_shows_where_its_server_is_as_the_config_does() -> None:
    # The HostedServer shows it with the redactor it made (``described``), not a second one.
    from mcpl_host.hosted import HostedServer  # noqa: PLC0415 (a layer above config)

    for config in (
        ServerConfig(command="x", args=("--token", "arg-12345", "https://u:pw-12345@h/")),
        ServerConfig(url="https://h.example/mcp?session=query-12345", secrets=("mcp-12345",)),
        ServerConfig(url="wss://h.example/ws?token=ws-12345"),
    ):
        hosted = HostedServer(config)
        assert hosted.describe == config.describe == config.described(config.redactor())
        assert "12345" not in hosted.describe


def test_an_integer_past_a_double_is_a_problem_not_an_overflow(tmp_path: Path) -> None:
    huge = "1" + "0" * 400  # exact as a Python int, but no float holds it
    file = tmp_path / "servers.json"
    file.write_text(
        '{"mcpServers": {"s": {"command": "x", "maxLineBytes": HUGE, "timeouts": {"handshake": HUGE},'
        ' "limits": {"maxStateBytes": HUGE}, "restart": {"maxDelay": HUGE}}}}'.replace("HUGE", huge)
    )
    with pytest.raises(ConfigError) as info:
        load_config(file)
    assert sorted(p.location for p in info.value.problems) == [
        "mcpServers.s.limits.maxStateBytes",
        "mcpServers.s.maxLineBytes",
        "mcpServers.s.restart.maxDelay",
        "mcpServers.s.timeouts.handshake",
    ]


def test_a_string_given_for_args_or_secrets_is_refused_so_no_secret_goes_unredacted() -> None:
    # A str is a sequence of characters: taken as one, "tok-12345" would be redacted as
    # nine one-character secrets, each too short to hide, and the secret would show.
    for settings in ({"secrets": "tok-12345"}, {"args": "--token=tok-12345"}):
        with pytest.raises(TypeError, match="a sequence of strings") as info:
            ServerConfig(command="x", **settings)
        assert "tok-12345" not in str(info.value)
    listed = ServerConfig(command="x", args=["a.py"], secrets=["tok-12345"])  # type: ignore[arg-type]
    assert (listed.args, listed.secrets) == (("a.py",), ("tok-12345",))
    assert listed.redactor().redact("say tok-12345") == "say [redacted]"


@pytest.mark.parametrize(
    ("settings", "error", "message"),
    [
        ({"command": 5}, TypeError, "command must be a string, not int"),
        ({"command": "x", "args": ("a", 5)}, TypeError, "args must be a sequence of strings"),
        ({"command": "x", "env": {"API_KEY": 12345}}, TypeError, "env must map strings to strings"),
        (
            {"url": "https://h/", "headers": {"X-Key": 12345}},
            TypeError,
            "headers must map strings to strings",
        ),
        ({"command": "x", "cwd": 5}, TypeError, "cwd must be a string, not int"),
        ({"command": "x", "name": 5}, TypeError, "name must be a string, not int"),
        ({"url": "https://h/", "token": 12345}, TypeError, "token must be a string, not int"),
        ({"command": "x", "grant_policy": "all"}, TypeError, "grant_policy must be a GrantPolicy, not str"),
        ({"command": "x", "limits": {"max_line_bytes": 1}}, TypeError, "limits must be a Limits, not dict"),
        ({"command": ""}, ValueError, "a stdio server needs a command"),
        (
            {"command": "x", "on_refusal": "explode"},
            ValueError,
            "on_refusal must be one of follow, mcp-only, close",
        ),
        ({"command": "x", "stderr_log_level": "loud"}, ValueError, "stderr_log_level must be one of"),
    ],
)
def test_a_server_config_value_of_the_wrong_type_is_refused_when_built(
    settings: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)) as info:
        ServerConfig(**settings)
    assert "12345" not in str(info.value)


def test_a_server_name_that_is_no_string_is_a_problem_of_a_config_held_in_memory() -> None:
    # JSON keys are strings; an object built in memory may have any key.
    with pytest.raises(ConfigError) as info:
        parse_config({"mcpServers": {5: {"command": "x"}, "ok": {"command": "x"}}})
    assert [str(p) for p in info.value.problems] == [
        "mcpServers: a server name must be a string, not a number"
    ]


def test_input_streams_are_off_unless_the_entry_turns_them_on() -> None:
    """RFC-009 is experimental (docs/protocol.md IS2): ``inputStreams``, a boolean, default off."""
    assert one({"command": "x"}).input_streams is False
    server = one({"command": "x", "inputStreams": True, "limits": {"maxInputStreams": 2}})
    assert server.input_streams is True and server.limits.max_input_streams == 2
    with pytest.raises(ValueError, match="input_stream_mode"):
        ServerConfig(command="x", input_stream_mode="loud")


def test_an_http_servers_oauth_object_in_the_mcp_servers_shape() -> None:
    server = one(
        {
            "url": "https://h.example/mcp",
            "oauth": {
                "clientId": "app",
                "clientSecret": "secret-12345",
                "scope": ["mcp", "admin"],
                "callbackPort": 8765,
            },
        }
    )
    assert server.oauth == OAuthSettings(
        client_id="app", client_secret="secret-12345", scope="mcp admin", callback_port=8765
    )
    assert "secret-12345" in server.secrets_for_redaction
    assert "secret-12345" not in repr(server)
    assert one({"url": "https://h.example/mcp", "oauth": False}).oauth.enabled is False


def test_oauth_problems_are_named_without_their_values() -> None:
    found = problems_of_entry(
        {"url": "https://h.example/mcp", "oauth": {"clientSecret": "secret-12345", "clientID": "x"}}
    )
    assert any("oauth.clientID" in p and 'did you mean "clientId"' in p for p in found)
    assert any("needs a client id" in p for p in found)
    assert not any("secret-12345" in p for p in found)
    stdio = problems_of_entry({"command": "x", "oauth": {"clientId": "app"}})
    assert any("applies only to HTTP servers" in p for p in stdio)

"""Bad input from the operator: capability patterns that match nothing, a config nested
100,000 levels, and ``--timeout`` bounding the WebSocket opening handshake. Each is a clear,
located, one-line error (exit 2), never a traceback or a silently ineffective setting."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from mcpl_host.cli import main
from mcpl_host.config import ConfigError, load_config, nesting_beyond
from mcpl_host.limits import CONFIG_MAX_DEPTH
from mcpl_host.mcpl.grants import PATTERN_HINTS, VOCABULARY, closest_pattern, pattern_problem

from .test_cli import run_cli

# -- capability patterns ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "closest"),
    [
        ("pushEvnts", "pushEvents"),
        ("PushEvents", "pushEvents"),
        ("channel.*", "channels.*"),
        ("channels.publsh", "channels.publish"),
        ("contextHooks.beforeInference.inject.sytem", "contextHooks.beforeInference.inject.system"),
        ("inferenceRequest.stream", "inferenceRequest.streaming"),
        ("tool", "tools"),
    ],
)
def test_a_pattern_matching_nothing_is_a_problem_naming_the_closest_path(pattern: str, closest: str) -> None:
    assert closest_pattern(pattern) == closest
    assert pattern_problem(pattern) == f'{pattern!r} matches no capability path; did you mean "{closest}"?'


@pytest.mark.parametrize("pattern", [*sorted(VOCABULARY), "*", "channels.*", "contextHooks.*.*.*", "*.*"])
def test_a_pattern_matching_a_path_is_no_problem(pattern: str) -> None:
    assert pattern_problem(pattern) is None


def test_every_hint_is_itself_a_valid_pattern_and_odd_text_is_escaped() -> None:
    assert all(pattern_problem(hint) is None for hint in PATTERN_HINTS)
    problem = pattern_problem("push\u202eEvents\x1b")
    assert problem is not None and "\u202e" not in problem and "\x1b" not in problem


@pytest.mark.parametrize("option", ["--grant", "--deny"])
def test_the_cli_refuses_a_pattern_matching_nothing_before_starting_anything(option: str) -> None:
    result = CliRunner().invoke(main, ["probe", "--json", option, "tools", option, "pushEvnts"])
    assert result.exit_code == 2
    assert (
        f"Invalid value for '{option}': 'pushEvnts' matches no capability path; did you mean \"pushEvents\"?"
        in (result.output)
    )
    assert "Traceback" not in result.output


def test_the_cli_accepts_valid_patterns() -> None:
    done = run_cli("probe", "--json", "--grant", "channels.*", "--deny", "pushEvents")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("key", ["grant", "deny"])
def test_the_config_refuses_a_pattern_matching_nothing(tmp_path: Path, key: str) -> None:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": {"s": {"command": "x", key: ["tools", "pushEvnts"]}}}))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert [str(p) for p in caught.value.problems] == [
        f"mcpServers.s.{key}[1]: 'pushEvnts' matches no capability path; did you mean \"pushEvents\"?"
    ]


# -- a config nested 100,000 levels ----------------------------------------------------------------


def test_nesting_beyond_ignores_brackets_in_strings_and_locates_the_first_too_deep() -> None:
    assert nesting_beyond('{"a": "[[[[[[", "b": [[1]]}', 3) is None
    assert nesting_beyond('{"a":\n  [[["\\"]"]]]}', 3) == (2, 5)
    assert nesting_beyond("[" * 10, 10) is None and nesting_beyond("[" * 11, 10) == (1, 11)


DEEP_PREFIX = '{"mcpServers": {"s": {"command": "x", "env": '  # three levels open
#: Where level CONFIG_MAX_DEPTH + 1 opens: the (bound - 2)th '{"a": ' after the prefix.
DEEP_COLUMN = len(DEEP_PREFIX) + 6 * (CONFIG_MAX_DEPTH - 3) + 1


@pytest.fixture
def deep_config(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "deep.json"
    path.write_text(DEEP_PREFIX + '{"a": ' * 100_000 + "1" + "}" * 100_003)
    yield path


def test_a_config_nested_100000_levels_is_one_located_problem(deep_config: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(deep_config)
    (problem,) = caught.value.problems
    assert problem.location == f"line 1, column {DEEP_COLUMN}"
    assert problem.message == f"nested more than {CONFIG_MAX_DEPTH} levels deep (a config needs a handful)"


@pytest.mark.parametrize("command", ["run", "probe"])
def test_the_cli_reports_a_deep_config_in_one_line_and_exits_2(deep_config: Path, command: str) -> None:
    args = [str(deep_config)] if command == "run" else ["--config", str(deep_config), "--server", "s"]
    done = run_cli(command, *args)
    assert done.returncode == 2 and done.stdout == ""
    assert "Traceback" not in done.stderr and "RecursionError" not in done.stderr
    lines = done.stderr.splitlines()
    assert lines == [
        f"Error: {deep_config} has 1 problem; nothing was started:",
        f"  line 1, column {DEEP_COLUMN}: "
        f"nested more than {CONFIG_MAX_DEPTH} levels deep (a config needs a handful)",
    ]


# -- --timeout bounds the WebSocket opening handshake ----------------------------------------------


@pytest.fixture
def silent_listener() -> Iterator[int]:
    """A loopback TCP port whose connections complete (the kernel's backlog) but never get
    an answer: a WebSocket upgrade there waits forever."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


def test_timeout_bounds_the_websocket_opening_handshake(silent_listener: int) -> None:
    done = run_cli("probe", "--json", "--ws", f"ws://127.0.0.1:{silent_listener}/", "--timeout", "0.5")
    assert done.returncode == 1, done.stderr
    message = json.loads(done.stdout)["error"]["message"]
    assert "no WebSocket handshake within 0.5 seconds" in message


def test_a_configs_handshake_timeout_bounds_the_websocket_opening_handshake(
    tmp_path: Path, silent_listener: int
) -> None:
    path = tmp_path / "servers.json"
    entry = {"url": f"ws://127.0.0.1:{silent_listener}/", "timeouts": {"handshake": 0.5}}
    path.write_text(json.dumps({"mcpServers": {"ws": entry}}))
    done = run_cli("probe", "--json", "--config", str(path), "--server", "ws", "--timeout", "0.5")
    assert done.returncode == 1, done.stderr
    assert "no WebSocket handshake within 0.5 seconds" in json.loads(done.stdout)["error"]["message"]

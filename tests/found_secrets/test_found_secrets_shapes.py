"""A credential a server echoes in another shape or over another way in is never shown: a
token JSON-escaped or split across lines, repeated in a 401's body and challenge, over
HTTP+SSE and WebSocket, in a config's headers and secret environment values (``probe``,
``call``, ``send``, ``check``, ``shell`` and ``run``), and in a URL's query.

The same echo server and bridges (``conftest.py``) as ``test_found_secrets.py`` (whose module docstring says
what the server repeats); every stream the CLI writes is searched for each form of the
credential.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcpl_host.secrets import REDACTED

from .. import forkserver
from ..test_cli import CLI, TIMEOUT, Running
from .conftest import ECHO, PY
from .test_found_secrets import (
    API_KEY,
    BASIC,
    COMMANDS,
    CREDENTIALS,
    TOKEN,
    Runs,
    _leaks,  # pyright: ignore[reportPrivateUsage]
    _outputs,  # pyright: ignore[reportPrivateUsage]
    started_runs,
)

SHAPE_COMMANDS = ["probe", "probe --json", "call", "send error"]
REFUSED_COMMANDS = ["probe", "probe --json", "call", "check --json"]
SSE_COMMANDS = ["probe --json", "call", "send error"]
CONFIG_COMMANDS = ["probe", "probe --json", "call", "send error", "check --junit"]
QUERY_COMMANDS = ["probe --json", "call", "send error"]
QUERY_SHAPES = ["http ?api_key=", "ws ?api_key=", "ws --token-in query"]
QUERY_KEY = "qk-1d8e3a6f90b2"


def bearer_args(command: str, url: str) -> list[str]:
    return [*COMMANDS[command], "--url", url, "--header", CREDENTIALS["bearer"][0]]


def sse_args(command: str, url: str) -> list[str]:
    return [*COMMANDS[command], "--url", url, "--transport", "sse", "--header", CREDENTIALS["basic"][0]]


def config_args(command: str, config: Path, server: str) -> list[str]:
    return [*COMMANDS[command], "--config", str(config), "--server", server]


def query_args(command: str, shape: str, http_url: str, ws_url: str) -> list[str]:
    """``command`` with ``QUERY_KEY`` in the URL's query (or as a token sent in it)."""
    if shape.startswith("http"):
        target = ["--url", f"{http_url}?api_key={QUERY_KEY}"]
    elif "--token-in" in shape:
        target = ["--ws", ws_url, "--token", QUERY_KEY, "--token-in", "query"]
    else:
        target = ["--ws", f"{ws_url}?api_key={QUERY_KEY}"]
    return [*COMMANDS[command], *target]


def _config(folder: Path, ws_url: str) -> tuple[Path, list[str]]:
    """A config of a WebSocket server with credential headers and a stdio server with secret
    environment values, both echoing them; every form that must never be shown."""
    env = {"API_TOKEN": "env-tok-62d9e1a7", "DB_PASSWORD": "env-pw-0c4b8f3e"}
    config = {
        "mcpServers": {
            "ws": {
                "transport": "websocket",
                "url": ws_url,
                "headers": {"Authorization": f"Basic {BASIC}", "X-Api-Key": API_KEY},
            },
            "stdio": {"command": PY, "args": [ECHO, *env], "env": env},
        }
    }
    path = folder / "servers.json"
    path.write_text(json.dumps(config))
    return path, [*CREDENTIALS["basic"][1], API_KEY, *env.values()]


@pytest.fixture(scope="module")
def config(ws_echo: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """``_config`` of this module's WebSocket echo."""
    return _config(tmp_path_factory.mktemp("config"), ws_echo)


@pytest.fixture(scope="module")
def runs(
    http_echo: str,
    http_echo_escaped: str,
    http_echo_split: str,
    http_refusing: str,
    sse_echo: str,
    ws_echo: str,
    config: tuple[Path, list[str]],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Runs]:
    """Every run of this module's parametrized tests."""
    every = [bearer_args(c, url) for c in SHAPE_COMMANDS for url in (http_echo_escaped, http_echo_split)]
    every += [bearer_args(c, http_refusing) for c in REFUSED_COMMANDS]
    every += [sse_args(c, sse_echo) for c in SSE_COMMANDS]
    every += [config_args(c, config[0], server) for c in CONFIG_COMMANDS for server in ("ws", "stdio")]
    every += [query_args(c, shape, http_echo, ws_echo) for c in QUERY_COMMANDS for shape in QUERY_SHAPES]
    with started_runs(tmp_path_factory.mktemp("runs"), every) as started:
        yield started


@pytest.mark.parametrize("shape", ["escaped", "split"])
@pytest.mark.parametrize("command", SHAPE_COMMANDS)
def test_a_token_json_escaped_or_split_across_lines_is_hidden(
    shape: str, command: str, http_echo_escaped: str, http_echo_split: str, runs: Runs
) -> None:
    url = http_echo_escaped if shape == "escaped" else http_echo_split
    _, forms = CREDENTIALS["bearer"]
    _, output = runs.result(bearer_args(command, url))
    assert REDACTED in output
    assert _leaks(output, forms) == []
    if shape == "split":  # the two halves, as the output writes a newline inside a string
        half = len(TOKEN) // 2
        for cut in (f"{TOKEN[:half]}\n{TOKEN[half:]}", f"{TOKEN[:half]}\\n{TOKEN[half:]}"):
            assert cut not in output


@pytest.mark.parametrize("command", REFUSED_COMMANDS)
def test_a_401_body_and_challenge_that_repeat_the_token_are_hidden(
    command: str, http_refusing: str, runs: Runs
) -> None:
    _, forms = CREDENTIALS["bearer"]
    status, output = runs.result(bearer_args(command, http_refusing))
    assert status == 1
    assert _leaks(output, forms) == []


@pytest.mark.parametrize("command", SSE_COMMANDS)
def test_over_http_sse_the_credential_is_hidden(command: str, sse_echo: str, runs: Runs) -> None:
    _, forms = CREDENTIALS["basic"]
    _, output = runs.result(sse_args(command, sse_echo))
    assert REDACTED in output
    assert _leaks(output, forms) == []


@pytest.mark.parametrize("server", ["ws", "stdio"])
@pytest.mark.parametrize("command", CONFIG_COMMANDS)
def test_websocket_headers_and_secret_environment_values_are_hidden(
    server: str, command: str, config: tuple[Path, list[str]], runs: Runs
) -> None:
    path, forms = config
    _, output = runs.result(config_args(command, path, server))
    assert REDACTED in output
    assert _leaks(output, forms) == []


def test_a_websocket_refusal_that_repeats_the_token_is_hidden(ws_refusing: str, tmp_path: Path) -> None:
    status, output = _outputs(["probe", "--ws", ws_refusing, "--token", TOKEN], tmp_path)
    assert status == 1
    assert _leaks(output, [TOKEN]) == []


def test_the_shell_shows_no_form_of_a_credential(config: tuple[Path, list[str]]) -> None:
    path, forms = config
    commands = "tools\ncall echo\nread echo://received\nprompt received\nservers\n@stdio call raise\n"
    done = forkserver.run(
        [*CLI, "shell", "--config", str(path)],
        input=commands,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    output = done.stdout + done.stderr
    assert "Traceback" not in output
    assert output.count(REDACTED) > 10
    assert _leaks(output, forms) == []


def test_run_logs_show_no_form_of_a_credential(config: tuple[Path, list[str]]) -> None:
    path, forms = config
    running = Running("run", str(path))
    try:
        for _ in ("ws", "stdio"):
            running.wait_for("stdout", "notification notifications/message")
    finally:
        running.process.send_signal(signal.SIGINT)
    status, stdout, stderr = running.finish()
    assert status == 0
    assert stdout.count(REDACTED) > 4
    assert _leaks(stdout + stderr, forms) == []


@pytest.mark.parametrize("command", QUERY_COMMANDS)
@pytest.mark.parametrize("shape", QUERY_SHAPES)
def test_a_credential_in_the_url_query_echoed_back_is_hidden(
    shape: str, command: str, http_echo: str, ws_echo: str, runs: Runs
) -> None:
    _, output = runs.result(query_args(command, shape, http_echo, ws_echo))
    assert REDACTED in output
    assert _leaks(output, [QUERY_KEY]) == []

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
import subprocess
from pathlib import Path

import pytest

from mcpl_host.secrets import REDACTED

from ..test_cli import CLI, TIMEOUT, Running
from .conftest import ECHO, PY
from .test_found_secrets import (
    API_KEY,
    BASIC,
    COMMANDS,
    CREDENTIALS,
    TOKEN,
    _leaks,  # pyright: ignore[reportPrivateUsage]
    _outputs,  # pyright: ignore[reportPrivateUsage]
)


@pytest.mark.parametrize("shape", ["escaped", "split"])
@pytest.mark.parametrize("command", ["probe", "probe --json", "call", "send error"])
def test_a_token_json_escaped_or_split_across_lines_is_hidden(
    shape: str, command: str, http_echo_escaped: str, http_echo_split: str, tmp_path: Path
) -> None:
    url = http_echo_escaped if shape == "escaped" else http_echo_split
    header, forms = CREDENTIALS["bearer"]
    _, output = _outputs([*COMMANDS[command], "--url", url, "--header", header], tmp_path)
    assert REDACTED in output
    assert _leaks(output, forms) == []
    if shape == "split":  # the two halves, as the output writes a newline inside a string
        half = len(TOKEN) // 2
        for cut in (f"{TOKEN[:half]}\n{TOKEN[half:]}", f"{TOKEN[:half]}\\n{TOKEN[half:]}"):
            assert cut not in output


@pytest.mark.parametrize("command", ["probe", "probe --json", "call", "check --json"])
def test_a_401_body_and_challenge_that_repeat_the_token_are_hidden(
    command: str, http_refusing: str, tmp_path: Path
) -> None:
    header, forms = CREDENTIALS["bearer"]
    status, output = _outputs([*COMMANDS[command], "--url", http_refusing, "--header", header], tmp_path)
    assert status == 1
    assert _leaks(output, forms) == []


@pytest.mark.parametrize("command", ["probe --json", "call", "send error"])
def test_over_http_sse_the_credential_is_hidden(command: str, sse_echo: str, tmp_path: Path) -> None:
    header, forms = CREDENTIALS["basic"]
    args = [*COMMANDS[command], "--url", sse_echo, "--transport", "sse", "--header", header]
    _, output = _outputs(args, tmp_path)
    assert REDACTED in output
    assert _leaks(output, forms) == []


def _config(tmp_path: Path, ws_url: str) -> tuple[Path, list[str]]:
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
    path = tmp_path / "servers.json"
    path.write_text(json.dumps(config))
    return path, [*CREDENTIALS["basic"][1], API_KEY, *env.values()]


@pytest.mark.parametrize("server", ["ws", "stdio"])
@pytest.mark.parametrize("command", ["probe", "probe --json", "call", "send error", "check --junit"])
def test_websocket_headers_and_secret_environment_values_are_hidden(
    server: str, command: str, ws_echo: str, tmp_path: Path
) -> None:
    config, forms = _config(tmp_path, ws_echo)
    _, output = _outputs([*COMMANDS[command], "--config", str(config), "--server", server], tmp_path)
    assert REDACTED in output
    assert _leaks(output, forms) == []


def test_a_websocket_refusal_that_repeats_the_token_is_hidden(ws_refusing: str, tmp_path: Path) -> None:
    status, output = _outputs(["probe", "--ws", ws_refusing, "--token", TOKEN], tmp_path)
    assert status == 1
    assert _leaks(output, [TOKEN]) == []


def test_the_shell_shows_no_form_of_a_credential(ws_echo: str, tmp_path: Path) -> None:
    config, forms = _config(tmp_path, ws_echo)
    commands = "tools\ncall echo\nread echo://received\nprompt received\nservers\n@stdio call raise\n"
    done = subprocess.run(
        [*CLI, "shell", "--config", str(config)],
        input=commands,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    output = done.stdout + done.stderr
    assert "Traceback" not in output
    assert output.count(REDACTED) > 10
    assert _leaks(output, forms) == []


def test_run_logs_show_no_form_of_a_credential(ws_echo: str, tmp_path: Path) -> None:
    config, forms = _config(tmp_path, ws_echo)
    running = Running("run", str(config))
    try:
        for _ in ("ws", "stdio"):
            running.wait_for("stdout", "notification notifications/message")
    finally:
        running.process.send_signal(signal.SIGINT)
    status, stdout, stderr = running.finish()
    assert status == 0
    assert stdout.count(REDACTED) > 4
    assert _leaks(stdout + stderr, forms) == []


QUERY_KEY = "qk-1d8e3a6f90b2"


@pytest.mark.parametrize("command", ["probe --json", "call", "send error"])
@pytest.mark.parametrize("shape", ["http ?api_key=", "ws ?api_key=", "ws --token-in query"])
def test_a_credential_in_the_url_query_echoed_back_is_hidden(
    shape: str, command: str, http_echo: str, ws_echo: str, tmp_path: Path
) -> None:
    if shape.startswith("http"):
        target = ["--url", f"{http_echo}?api_key={QUERY_KEY}"]
    elif "--token-in" in shape:
        target = ["--ws", ws_echo, "--token", QUERY_KEY, "--token-in", "query"]
    else:
        target = ["--ws", f"{ws_echo}?api_key={QUERY_KEY}"]
    _, output = _outputs([*COMMANDS[command], *target], tmp_path)
    assert REDACTED in output
    assert _leaks(output, [QUERY_KEY]) == []

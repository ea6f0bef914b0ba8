"""A credential in every shape a server can echo it never reaches an output.

The CLI runs as a child against ``fixtures/echo_secret_server.py``, a server that repeats what
it received (each credential header with and without its scheme word, a Basic credential
decoded, its password alone, each cookie value; the environment values named on its command
line) into serverInfo, instructions, descriptions, results, errors, a log notification, a
line that is not JSON and its stderr; over stdio, through ``http_bridge.py`` (Streamable HTTP
and HTTP+SSE) and ``ws_bridge.py`` (WebSocket), which hand it the headers of the request that
started it. Every stream the CLI writes (stdout, stderr, the JUnit file) is searched for each
form of the credential.
"""

from __future__ import annotations

import base64
import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcpl_host import secrets
from mcpl_host.secrets import MIN_SECRET_CHARS, REDACTED, Redactor, server_secrets

from .conftest import FIXTURES
from .test_cli import CLI, TIMEOUT, Running
from .wire import bridge_url

PY = sys.executable
ECHO = str(FIXTURES / "echo_secret_server.py")

TOKEN = "tok-3f9a7c21e8b4"
USER, PASSWORD = "alice", "pa55-word-91ab"
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
API_KEY = "key-77c1d0e94f2a"
COOKIE = "ck-5be8a0d3c6f1"

#: (the --header given, every form of it that must never be shown)
CREDENTIALS = {
    "bearer": ("Authorization=Bearer " + TOKEN, [TOKEN]),
    "basic": ("Authorization=Basic " + BASIC, [BASIC, f"{USER}:{PASSWORD}", PASSWORD]),
    "api-key": ("X-Api-Key=" + API_KEY, [API_KEY]),
    "cookie": (f"Cookie=sid={COOKIE}; theme=dark", [COOKIE]),
}


def _leaks(text: str, forms: list[str]) -> list[str]:
    """The forms (or their first character \\u-escaped) that appear in ``text``."""
    escaped = [f"\\u{ord(form[0]):04x}{form[1:]}" for form in forms]
    return [form for form in [*forms, *escaped] if form in text]


@contextlib.contextmanager
def _bridge(program: str, *options: str, shape: str = "plain", scheme: str = "http") -> Iterator[str]:
    """A bridge fixture serving the echo server (a new one per session); its URL. It exits at
    the end of its stdin, its children stopped."""
    command = [PY, str(FIXTURES / program), *options, "--", PY, ECHO, "--shape", shape]
    with bridge_url(command, scheme) as url:
        yield url


@pytest.fixture(scope="module")
def http_echo() -> Iterator[str]:
    with _bridge("http_bridge.py") as url:
        yield f"{url}mcp"


@pytest.fixture(scope="module")
def http_echo_escaped() -> Iterator[str]:
    with _bridge("http_bridge.py", shape="escaped") as url:
        yield f"{url}mcp"


@pytest.fixture(scope="module")
def http_echo_split() -> Iterator[str]:
    with _bridge("http_bridge.py", shape="split") as url:
        yield f"{url}mcp"


@pytest.fixture(scope="module")
def sse_echo() -> Iterator[str]:
    with _bridge("http_bridge.py", "--legacy") as url:
        yield f"{url}sse"


@pytest.fixture(scope="module")
def http_refusing() -> Iterator[str]:
    with _bridge("http_bridge.py", "--refuse-echo") as url:
        yield f"{url}mcp"


@pytest.fixture(scope="module")
def ws_echo() -> Iterator[str]:
    with _bridge("ws_bridge.py", scheme="ws") as url:
        yield url


@pytest.fixture(scope="module")
def ws_refusing() -> Iterator[str]:
    with _bridge("ws_bridge.py", "--refuse-echo", scheme="ws") as url:
        yield url


def _outputs(args: list[str], tmp_path: Path) -> tuple[int, str]:
    """Run the CLI; its exit status and everything it wrote (stdout, stderr, a --junit file)."""
    junit = tmp_path / "check.xml"
    args = [junit.as_posix() if arg == "{junit}" else arg for arg in args]
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=TIMEOUT)
    assert "Traceback" not in done.stderr, done.stderr
    written = junit.read_text() if junit.exists() else ""
    return done.returncode, done.stdout + done.stderr + written


#: Each command that prints what a server sent.
COMMANDS = {
    "probe": ["probe"],
    "probe --json": ["probe", "--json"],
    "call": ["call", "echo", "{}"],
    "call isError": ["call", "fail", "{}"],
    "call error": ["call", "raise", "{}"],
    "send": ["send", "echo/anything", "{}"],
    "send error": ["send", "echo/error", "{}"],
    "check": ["check"],
    "check --json": ["check", "--json"],
    "check --junit": ["check", "--junit", "{junit}"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_bearer_token_echoed_without_its_scheme_is_hidden_from_every_command(
    command: str, http_echo: str, tmp_path: Path
) -> None:
    header, forms = CREDENTIALS["bearer"]
    _, output = _outputs([*COMMANDS[command], "--url", http_echo, "--header", header], tmp_path)
    assert REDACTED in output  # the server did echo it
    assert _leaks(output, forms) == []


@pytest.mark.parametrize("credential", ["basic", "api-key", "cookie"])
@pytest.mark.parametrize("command", ["probe", "probe --json", "call", "send error", "check --junit"])
def test_every_credential_header_is_hidden_in_each_of_its_forms(
    credential: str, command: str, http_echo: str, tmp_path: Path
) -> None:
    header, forms = CREDENTIALS[credential]
    _, output = _outputs([*COMMANDS[command], "--url", http_echo, "--header", header], tmp_path)
    assert REDACTED in output
    assert _leaks(output, forms) == []


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


# --- the decision, by plain calls -----------------------------------------------------------------


def test_header_secrets_are_every_form_a_server_could_repeat() -> None:
    assert secrets.header_secrets("Authorization", f"Bearer {TOKEN}")[:2] == [f"Bearer {TOKEN}", TOKEN]
    basic = secrets.header_secrets("Proxy-Authorization", f"Basic {BASIC}")
    assert {BASIC, f"{USER}:{PASSWORD}", PASSWORD} <= set(basic)
    assert USER not in basic  # a user name alone is not a secret
    assert COOKIE in secrets.header_secrets("Cookie", f"sid={COOKIE}; theme=dark")
    # A known scheme word is dropped whatever the header's name; another header keeps its value.
    assert TOKEN in secrets.header_secrets("X-Upstream", f"Token {TOKEN}")
    assert secrets.header_secrets("X-Client", "my client") == ["my client", "my%20client"]
    assert set(secrets.header_secrets("X-Api-Key", "a/b c")) == {"a/b c", "a%2Fb%20c"}
    # Not base64, or not user:password: nothing decoded.
    assert secrets.header_secrets("Authorization", "Basic !!!!") == [
        "Basic !!!!",
        "!!!!",
        "Basic%20%21%21%21%21",
        "%21%21%21%21",
    ]


def test_server_secrets_take_the_header_forms() -> None:
    found = server_secrets(headers={"Authorization": f"Basic {BASIC}"}, token=TOKEN)
    assert {BASIC, f"{USER}:{PASSWORD}", PASSWORD, TOKEN} <= set(found)


def test_a_secret_written_in_pieces_is_still_hidden() -> None:
    redactor = Redactor([TOKEN, 'a/b"cd'])
    half = len(TOKEN) // 2
    for text in (
        f"x \\u{ord(TOKEN[0]):04x}{TOKEN[1:]} y",  # a JSON escape, in a raw line
        f"x \\u{ord(TOKEN[0]):04X}{TOKEN[1:]} y",
        f"x {TOKEN[:half]}\n{TOKEN[half:]} y",  # split across lines
        f"x {TOKEN[:half]}\r\n{TOKEN[half:]} y",
        f"x {TOKEN[:half]}\\n{TOKEN[half:]} y",  # split, in JSON text
        'x a\\/b\\"cd y',
        "x \\u0061\\u002f\\u0062\\u0022\\u0063\\u0064 y",
    ):
        assert redactor.redact(text) == f"x {REDACTED} y", text
    # Other text is kept: a piece of the token alone, the token cut by something else.
    for text in (TOKEN[:half], f"{TOKEN[:half]} {TOKEN[half:]}", f"{TOKEN[:half]}\n\n{TOKEN[half:]}"):
        assert redactor.redact(text) == text


def test_short_values_are_hidden_only_by_their_position() -> None:
    short = "ab1"
    assert len(short) < MIN_SECRET_CHARS
    redactor = Redactor(secrets.header_secrets("Authorization", f"Bearer {short}"))
    assert redactor.redact(f"tab1e {short}") == f"tab1e {short}"
    assert redactor.redact(f"Bearer {short}") == REDACTED


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

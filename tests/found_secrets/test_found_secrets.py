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
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from mcpl_host import secrets
from mcpl_host.secrets import MIN_SECRET_CHARS, REDACTED, Redactor, server_secrets

from .. import forkserver
from ..test_cli import CLI, TIMEOUT

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


def _outputs(args: list[str], tmp_path: Path) -> tuple[int, str]:
    """Run the CLI; its exit status and everything it wrote (stdout, stderr, a --junit file)."""
    junit = tmp_path / "check.xml"
    args = [junit.as_posix() if arg == "{junit}" else arg for arg in args]
    done = forkserver.run([*CLI, *args], capture_output=True, text=True, timeout=TIMEOUT)
    assert "Traceback" not in done.stderr, done.stderr
    written = junit.read_text() if junit.exists() else ""
    return done.returncode, done.stdout + done.stderr + written


class Runs:
    """A module's CLI runs (``_outputs``), started together by its module fixture, four at a
    time in threads (each is a child process that spends most of its time waiting on the echo
    server and its bridge), and read by each test: the exit status and everything written,
    or what the run raised. A run nobody started is started when a test asks for it."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._pool = ThreadPoolExecutor(max_workers=4)
        self._runs: dict[tuple[str, ...], Future[tuple[int, str]]] = {}

    def start(self, args: list[str]) -> None:
        if tuple(args) not in self._runs:
            folder = self._folder / str(len(self._runs))
            folder.mkdir()
            self._runs[tuple(args)] = self._pool.submit(_outputs, args, folder)

    def result(self, args: list[str]) -> tuple[int, str]:
        self.start(args)
        return self._runs[tuple(args)].result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


@contextlib.contextmanager
def started_runs(folder: Path, runs: Iterable[list[str]]) -> Iterator[Runs]:
    """``Runs`` with each of ``runs`` started; every thread ended on leaving."""
    started = Runs(folder)
    try:
        for args in runs:
            started.start(args)
        yield started
    finally:
        started.close()


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


#: The commands each other credential header is tried with.
FORM_COMMANDS = ["probe", "probe --json", "call", "send error", "check --junit"]
OTHER_CREDENTIALS = ["basic", "api-key", "cookie"]


def header_args(command: str, url: str, credential: str) -> list[str]:
    """``command`` against ``url`` with ``credential``'s header."""
    return [*COMMANDS[command], "--url", url, "--header", CREDENTIALS[credential][0]]


@pytest.fixture(scope="module")
def runs(http_echo: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    """Every run of this module's tests."""
    every = [header_args(command, http_echo, "bearer") for command in COMMANDS]
    every += [
        header_args(c, http_echo, credential) for credential in OTHER_CREDENTIALS for c in FORM_COMMANDS
    ]
    with started_runs(tmp_path_factory.mktemp("runs"), every) as started:
        yield started


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_bearer_token_echoed_without_its_scheme_is_hidden_from_every_command(
    command: str, http_echo: str, runs: Runs
) -> None:
    _, forms = CREDENTIALS["bearer"]
    _, output = runs.result(header_args(command, http_echo, "bearer"))
    assert REDACTED in output  # the server did echo it
    assert _leaks(output, forms) == []


@pytest.mark.parametrize("credential", OTHER_CREDENTIALS)
@pytest.mark.parametrize("command", FORM_COMMANDS)
def test_every_credential_header_is_hidden_in_each_of_its_forms(
    credential: str, command: str, http_echo: str, runs: Runs
) -> None:
    _, forms = CREDENTIALS[credential]
    _, output = runs.result(header_args(command, http_echo, credential))
    assert REDACTED in output
    assert _leaks(output, forms) == []


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

"""Which values are secrets, and that none reaches an output (``mcpl_host.secrets``).

Plain calls test the decision (names, arguments, URLs, shapes) and ``redact_json``; the CLI
tests run real fixture servers (``scripted_server.py`` echoing its argv and env and printing
secrets on stderr, the demo server, the WebSocket bridge) and read everything the CLI writes.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpl_host import connect
from mcpl_host.config import ServerConfig
from mcpl_host.report import HOST_KEYS, redact_json
from mcpl_host.secrets import (
    REDACTED,
    KeyBlockMasker,
    Redactor,
    argument_secrets,
    env_secrets,
    is_secret_name,
    redact_command,
    redact_url,
    server_secrets,
)
from mcpl_host.transports.stdio import StdioParameters, StdioTransport
from mcpl_host.transports.websocket import WebSocketTransport
from mcpl_host.transports.ws_params import WebSocketParameters, shown_url

from . import forkserver
from .conftest import FIXTURES
from .test_cli import CLI, TIMEOUT, initialize_reply, run_cli, scripted

# --- secrets of every class, each with the part that must never be shown ------------------------
# (Made-up values in the real shapes.)

GITHUB = {
    "ghp": "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "gho": "gho_Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2",
    "ghs": "ghs_Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8",
    "pat": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOP",
}
SLACK = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
SLACK_USER = "xoxp-223456789012-2234567890123-ZyXwVuTsRqPoNmLkJiHgFeDc"
AWS = "AKIAIOSFODNN7EXAMPLE"
BEARER_TOKEN = "abc123.def456-ghi789~xyz"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0"
    ".dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
)
URL_PASSWORD = "hunter2-db-pw"
OPENAI = "sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34"
ANTHROPIC = "sk-ant-api03-Zy98Xw76Vu54Ts32Rq10-Po98Nm76"
PEM_BODY = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"
PEM_LINES = [
    "-----BEGIN OPENSSH PRIVATE KEY-----",
    PEM_BODY,
    PEM_BODY[::-1],
    "-----END OPENSSH PRIVATE KEY-----",
]

#: (what a server prints on stderr, the secret in it)
STDERR_SHAPES = [
    *((f"using token {token}", token) for token in GITHUB.values()),
    (f"slack client ready with {SLACK}", SLACK),
    (f"slack user {SLACK_USER}", SLACK_USER),
    (f"aws key id {AWS} loaded", AWS),
    (f"Authorization: Bearer {BEARER_TOKEN}", BEARER_TOKEN),
    (f"decoded session {JWT}", JWT),
    (f"connecting to postgres://admin:{URL_PASSWORD}@db.internal:5432/app", URL_PASSWORD),
    (f"mysql://root:{URL_PASSWORD}@127.0.0.1/x failed", URL_PASSWORD),
    (f"OPENAI_API_KEY is {OPENAI}", OPENAI),
    (f"calling anthropic with {ANTHROPIC}", ANTHROPIC),
]

# Secrets in the command line, and the plain arguments next to them.
ARG_SLACK = "xoxb-999999999999-8888888888888-ArgumentSlackToken00"
ARG_DB_PASSWORD = "argdbpassword"
ARG_API_KEY = "arg-api-key-value-1"
ARG_TOKEN = "arg-token-value-22"
ARG_ACCESS_TOKEN = "arg-access-token-333"
ARG_SHORT = "pw1"  # shorter than MIN_SECRET_CHARS: hidden by its position only
COMMAND_SECRETS = [ARG_SLACK, ARG_DB_PASSWORD, ARG_API_KEY, ARG_TOKEN, ARG_ACCESS_TOKEN, ARG_SHORT]
EXTRA_ARGS = [
    "-e",
    f"SLACK_TOKEN={ARG_SLACK}",
    "--db",
    f"postgres://app:{ARG_DB_PASSWORD}@db/x",
    f"--api-key={ARG_API_KEY}",
    "--token",
    ARG_TOKEN,
    f"wss://h.example/mcpl?access_token={ARG_ACCESS_TOKEN}&mode=live",
    "--password",
    ARG_SHORT,
    "--log-level",
    "error",
]
ENV_SECRET = "env-github-token-4444"
EXPLICIT_SECRET = "explicit-secret-55555"


# --- the decision: names ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "TOKEN", "API_TOKEN", "GITHUB_PERSONAL_ACCESS_TOKEN", "SLACK_BOT_TOKEN", "OPENAI_API_KEY",
        "API_KEY", "APIKEY", "apiKey", "x-api-key", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID",
        "CLIENT_SECRET", "clientSecret", "DB_PASSWORD", "MYSQL_PWD", "PGPASSWORD", "PASSWD",
        "DB_PASS", "AUTH", "BASIC_AUTH", "Authorization", "GOOGLE_APPLICATION_CREDENTIALS_JSON",
        "CREDENTIALS", "PRIVATE_KEY", "SESSION", "SESSION_ID", "COOKIE", "SET_COOKIE",
        "githubtoken", "ACCESSTOKEN", "access_token", "refresh_token", "X-Amz-Signature", "sig",
        "SENTRY_DSN", "JWT", "PASSPHRASE",
    ],
)  # fmt: skip
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "LOG_LEVEL", "MODE", "DEBUG", "PORT", "HOST", "PATH", "HOME", "LANG", "TZ", "NODE_ENV",
        "DEMO_PUSH_INTERVAL", "KEYBOARD_LAYOUT", "MONKEY", "TURKEY_MODE", "BYPASS", "COMPASS",
        "SESSION_TIMEOUT", "TOKEN_TYPE", "KEY_FILE", "TOKEN_PATH", "SSH_AUTH_SOCK", "AUTH_MODE",
        "AUTH_URL", "PRIVATE_MODE", "CLIENT_ID", "AUTHOR", "PASSENGER", "TOKENIZER", "mode",
        "local-timezone",
    ],
)  # fmt: skip
def test_plain_names(name: str) -> None:
    assert not is_secret_name(name)


def test_env_secrets_are_the_values_of_secret_names_and_credentials_in_values() -> None:
    env = {
        "LOG_LEVEL": "error",
        "MODE": "tools",
        "GITHUB_TOKEN": ENV_SECRET,
        "DATABASE_URL": f"postgres://u:{URL_PASSWORD}@db/x",
        "PWD": "/home/me/project",
        "WEBHOOK": f"https://h/hook?sig={EXPLICIT_SECRET}",
    }
    assert set(env_secrets(env)) == {ENV_SECRET, URL_PASSWORD, EXPLICIT_SECRET}


def test_argument_secrets_in_every_form() -> None:
    found = argument_secrets(
        [
            *EXTRA_ARGS,
            "--password=p4ssw0rd!",
            "-token",
            "go-style-flag-value",
            "-H",
            "X-Api-Key: header-arg-key",
            "--header",
            "Authorization: Bearer header-arg-bearer",
            "--no-auth",
            "server.py",
            "--auth",
            "--port",
            "8080",
            "--key-file",
            "/etc/key.pem",
        ]
    )
    assert set(found) == {
        *COMMAND_SECRETS,
        "p4ssw0rd!",
        "go-style-flag-value",
        "header-arg-key",
        "header-arg-bearer",
    }


def test_server_secrets_is_the_one_decision() -> None:
    secrets = server_secrets(
        env={"LOG_LEVEL": "error", "API_KEY": ENV_SECRET},
        args=EXTRA_ARGS,
        url=f"wss://h/?api_key={AWS}",
        token="the-ws-token",
        headers={"X-Client": "header-value"},
        explicit=[EXPLICIT_SECRET, ENV_SECRET],
    )
    assert set(secrets) >= {
        ENV_SECRET,
        *COMMAND_SECRETS,
        AWS,
        "the-ws-token",
        "header-value",
        EXPLICIT_SECRET,
    }
    assert "error" not in secrets and len(secrets) == len(set(secrets))


# --- the decision: how commands and URLs are shown -----------------------------------------------


def test_redact_command_hides_every_credential_and_keeps_plain_arguments() -> None:
    shown = redact_command(["server", *EXTRA_ARGS, "--token", "abc"])
    assert shown == [
        "server",
        "-e",
        f"SLACK_TOKEN={REDACTED}",
        "--db",
        f"postgres://app:{REDACTED}@db/x",
        f"--api-key={REDACTED}",
        "--token",
        REDACTED,
        f"wss://h.example/mcpl?access_token={REDACTED}&mode=live",
        "--password",
        REDACTED,
        "--log-level",
        "error",
        "--token",
        REDACTED,  # short values too: it is the argument that says it is a secret
    ]


def test_redact_url_hides_user_info_passwords_and_credential_parameters() -> None:
    url = (
        f"wss://u:{URL_PASSWORD}@h:8443/a?x=1&token=t1-secret&Access_Token=t2-secret&%74oken=t3-secret"
        f"&api_key=k1-secret&apikey=k2-secret&key=k3-secret&secret=s-secret&password=p-secret"
        f"&sig=sig-secret&signature=sg-secret&auth=a-secret&mode=tools#frag"
    )
    shown = redact_url(url)
    for secret in (
        URL_PASSWORD,
        "t1-",
        "t2-",
        "t3-",
        "k1-",
        "k2-",
        "k3-",
        "s-secret",
        "p-secret",
        "sig-",
        "sg-",
    ):
        assert secret not in shown
    assert "a-secret" not in shown
    assert shown.startswith(f"wss://u:{REDACTED}@h:8443/a?x=1&token={REDACTED}&")
    assert shown.endswith("&mode=tools#frag")
    assert (
        redact_url(f"https://{GITHUB['ghp']}@github.com/o/r.git") == f"https://{REDACTED}@github.com/o/r.git"
    )
    assert redact_url("https://Z9x8Y7w6V5u4T3s2R1q0@h/") == f"https://{REDACTED}@h/"
    assert redact_url("ssh://git@github.com/o/r.git") == "ssh://git@github.com/o/r.git"
    assert (
        redact_url(f"https://h/cb#access_token={ARG_TOKEN}&state=s1")
        == f"https://h/cb#access_token={REDACTED}&state=s1"
    )


def test_shown_url_redacts_every_credential_parameter() -> None:
    url = f"ws://127.0.0.1:9/mcpl?access_token={ARG_ACCESS_TOKEN}&api_key={ARG_API_KEY}&mode=tools"
    assert shown_url(url) == f"ws://127.0.0.1:9/mcpl?access_token={REDACTED}&api_key={REDACTED}&mode=tools"
    params = WebSocketParameters(url)
    assert {ARG_ACCESS_TOKEN, ARG_API_KEY} <= set(params.secrets())


# --- the redactor: shapes without configuration -------------------------------------------------


@pytest.mark.parametrize(("text", "secret"), STDERR_SHAPES)
def test_well_known_shapes_are_masked_without_configuration(text: str, secret: str) -> None:
    masked = Redactor().redact(text)
    assert secret not in masked and REDACTED in masked


def test_shapes_keep_their_context() -> None:
    redactor = Redactor()
    assert redactor.redact("argv --token abc --no-auth srv.py --log-level error -password 'x'") == (
        f"argv --token {REDACTED} --no-auth srv.py --log-level error -password '{REDACTED}'"
    )
    assert redactor.redact(f"Authorization: Bearer {BEARER_TOKEN}") == f"Authorization: Bearer {REDACTED}"
    assert redactor.redact(f"postgres://admin:{URL_PASSWORD}@db/app") == f"postgres://admin:{REDACTED}@db/app"
    assert (
        redactor.redact(f"GET /x?access_token={ARG_TOKEN}&page=2") == f"GET /x?access_token={REDACTED}&page=2"
    )
    assert (
        redactor.redact('{"password": "hunter22", "user": "bob"}')
        == f'{{"password": "{REDACTED}", "user": "bob"}}'
    )
    assert redactor.redact("DB_PASSWORD=hunter22 MODE=tools") == f"DB_PASSWORD={REDACTED} MODE=tools"


@pytest.mark.parametrize(
    "text",
    [
        "LOG_LEVEL=error MODE=tools",
        "starting server on port 8080 with mode=tools",
        "the risk-free skeleton task-based approach",
        "ghp is a prefix, sk-short and xoxb- alone are not tokens",
        "Bearer of bad news",
        "eyJ is where a JWT starts",
        "https://example.com/path?page=2&sort=name",
        "ssh://git@github.com/org/repo.git",
        "key: value pairs and a token bucket",
        "-----BEGIN CERTIFICATE-----",
        "run with --no-auth server.py --session-timeout 30 --mode tools",
    ],
)
def test_plain_text_is_not_masked(text: str) -> None:
    assert Redactor().redact(text) == text


def test_a_private_key_block_is_masked_inline_and_over_lines() -> None:
    assert PEM_BODY not in Redactor().redact("\n".join(PEM_LINES))
    assert PEM_BODY not in Redactor().redact("\\n".join(PEM_LINES))  # JSON-escaped on one line
    masker = KeyBlockMasker()
    lines = [masker.line(line) for line in ["before", *PEM_LINES, "after"]]
    assert lines == ["before", PEM_LINES[0], REDACTED, REDACTED, REDACTED, "after"]
    assert [Redactor().redact(line) for line in lines][1] == REDACTED
    # A block that never ends stops at the first line that is not key material.
    masker = KeyBlockMasker()
    lines = [masker.line(line) for line in [PEM_LINES[0], PEM_BODY, "server listening on :8080"]]
    assert lines == [PEM_LINES[0], REDACTED, "server listening on :8080"]


def test_explicit_secrets_and_shapes_in_one_pass() -> None:
    redactor = Redactor([EXPLICIT_SECRET, "abc"])
    text = redactor.redact(f"a {EXPLICIT_SECRET} b {GITHUB['ghp']} c abc")
    assert text == f"a {REDACTED} b {REDACTED} c abc"


# --- redact_json: values, never the document's structure ------------------------------------------


def test_redact_json_never_renames_the_documents_keys() -> None:
    doc = {"ok": True, "error": None, "tools": [{"name": "tools", "description": "error tools"}]}
    shown = redact_json(doc, Redactor(["error", "tools"]))
    assert shown == {
        "ok": True,
        "error": None,
        "tools": [{"name": REDACTED, "description": REDACTED + " " + REDACTED}],
    }


def test_redact_json_hides_a_secret_in_a_servers_key_and_keeps_members_apart() -> None:
    value = {"properties": {EXPLICIT_SECRET: {"type": "string"}, f"x{EXPLICIT_SECRET}": 1, REDACTED: 2}}
    shown = redact_json(value, Redactor([EXPLICIT_SECRET]))
    assert EXPLICIT_SECRET not in json.dumps(shown)
    assert len(shown["properties"]) == 3 and shown["properties"][REDACTED] == 2
    assert sorted(map(str, shown["properties"].values())) == ["1", "2", "{'type': 'string'}"]


_ALPHABET = "xyz0123"
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(_ALPHABET, max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(_ALPHABET, max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def _shape(value: Any) -> Any:
    if isinstance(value, dict):
        return ("dict", len(value), sorted(repr(_shape(v)) for v in value.values()))
    if isinstance(value, list):
        return ("list", [_shape(v) for v in value])
    return type(value).__name__


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [*value, *(s for v in value.values() for s in _strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


@given(_json, st.lists(st.text(_ALPHABET, min_size=4, max_size=6), max_size=3))
def test_redact_json_keeps_the_structure_and_hides_every_secret(value: Any, secrets: list[str]) -> None:
    shown = redact_json(value, Redactor(secrets))
    assert _shape(shown) == _shape(value)
    assert not any(secret in text for secret in secrets for text in _strings(shown))
    # The host's own keys are never touched, whatever the secrets.
    doc = {key: value for key in sorted(HOST_KEYS)[:20]}
    assert list(redact_json(doc, Redactor([*secrets, *HOST_KEYS]))) == list(doc)


# --- reprs and describe() -------------------------------------------------------------------------


@pytest.mark.anyio
async def test_reprs_and_descriptions_hold_no_secret() -> None:
    params = StdioParameters(
        "npx", ("server", *EXTRA_ARGS), env={"GITHUB_TOKEN": ENV_SECRET, "MODE": "tools"}
    )
    ws = WebSocketParameters(
        f"ws://127.0.0.1:9/mcpl?access_token={ARG_ACCESS_TOKEN}",
        token=ARG_TOKEN,
        token_in="header",
        headers={"X-Api-Key": ARG_API_KEY},
    )
    config = ServerConfig(
        name="s",
        transport="stdio",
        command="npx",
        args=tuple(EXTRA_ARGS),
        env={"GITHUB_TOKEN": ENV_SECRET, "MODE": "tools"},
        token=ARG_TOKEN,
        headers={"X-Api-Key": ARG_API_KEY},
        url=f"ws://127.0.0.1:9/mcpl?access_token={ARG_ACCESS_TOKEN}",
        secrets=(EXPLICIT_SECRET,),
    )
    texts = [
        repr(params),
        repr(ws),
        repr(config),
        StdioTransport(params).describe(),
        repr(StdioTransport(params)),
        WebSocketTransport(ws).describe(),
        repr(WebSocketTransport(ws)),
        # named after an argument
        repr(connect(ServerConfig(command="npx", args=("-y", f"API_KEY={ENV_SECRET}", "pkg")))),
        repr(connect(ServerConfig(command="npx", args=("-y", f"--api-key={ENV_SECRET}", "pkg")))),
    ]
    for text in texts:
        for secret in (*COMMAND_SECRETS, ENV_SECRET, EXPLICIT_SECRET):
            assert secret not in text, text
    assert "'MODE': 'tools'" in repr(params) and "--log-level" in repr(params)


# --- the CLI, end to end --------------------------------------------------------------------------


def test_a_plain_env_setting_named_like_a_document_key_does_not_crash_probe() -> None:
    done = run_cli("probe", "--json", "--env", "LOG_LEVEL=error")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    doc = json.loads(done.stdout)
    assert doc["ok"] is True and doc["error"] is None


def test_a_plain_env_setting_named_like_a_list_does_not_empty_the_report() -> None:
    done = run_cli("probe", "--env", "MODE=tools")
    assert done.returncode == 0, done.stderr
    assert "Tools (3)" in done.stdout and "Tools: none" not in done.stdout


@pytest.mark.parametrize("secret", ["tools", "error", "server", "grant"])
def test_a_secret_equal_to_a_document_key_keeps_the_document(secret: str) -> None:
    json_run = run_cli("probe", "--json", "--secret", f"ODD={secret}")
    assert json_run.returncode == 0, json_run.stderr
    doc = json.loads(json_run.stdout)
    assert doc["ok"] is True and len(doc["tools"]) == 3 and doc["server"]["version"] == "0.1.0"
    human = run_cli("probe", "--secret", f"ODD={secret}")
    assert human.returncode == 0, human.stderr
    assert "Tools (3)" in human.stdout and "Traceback" not in human.stderr


def _secret_printing_steps(*, fail: bool) -> list[Any]:
    tool = {
        "name": "leaky",
        "description": f"uses {GITHUB['ghp']} and {EXPLICIT_SECRET} and {ENV_SECRET}",
        "inputSchema": {"type": "object", "properties": {"mode": {"default": "tools"}}},
    }
    steps: list[Any] = [
        {"echo_argv": True},
        {"echo_env": "GITHUB_TOKEN"},
        {"echo_env": "EXTRA"},
        {"echo_env": "MODE"},
        {"echo_env": "LOG_LEVEL"},
        *({"stderr": text} for text, _ in STDERR_SHAPES),
        *({"stderr": line} for line in PEM_LINES),
        {"stderr": "plain line: listening on port 8080"},
    ]
    if fail:
        return [*steps, {"expect": {"method": "initialize"}}, {"exit": 3}]
    return [
        *steps,
        *initialize_reply({"tools": {}}),
        {"wait_for": {"method": "tools/list"}},
        {"reply": {"tools": [tool]}},
    ]


ALL_SECRETS = [
    *(secret for _, secret in STDERR_SHAPES),
    PEM_BODY,
    PEM_BODY[::-1],
    *COMMAND_SECRETS,
    ENV_SECRET,
    EXPLICIT_SECRET,
]


def _probe_args(tmp_path: Path, *, fail: bool) -> list[str]:
    return [
        "--env",
        f"GITHUB_TOKEN={ENV_SECRET}",
        "--env",
        "MODE=tools",
        "--env",
        "LOG_LEVEL=error",
        "--secret",
        f"EXTRA={EXPLICIT_SECRET}",
        "--stderr-level",
        "warning",
        *scripted(tmp_path, _secret_printing_steps(fail=fail)),
        *EXTRA_ARGS,
    ]


def _assert_nothing_secret(text: str) -> None:
    for secret in ALL_SECRETS:
        assert secret not in text, f"{secret!r} reached the output"
    assert "Traceback" not in text


@pytest.mark.parametrize("fail", [False, True], ids=["listing", "failure"])
def test_no_secret_reaches_any_probe_output(tmp_path: Path, fail: bool) -> None:
    args = _probe_args(tmp_path, fail=fail)
    json_run = run_cli("probe", "--json", *args)
    human = run_cli("probe", *args)
    for done in (json_run, human):
        assert done.returncode == (1 if fail else 0), done.stderr
        _assert_nothing_secret(done.stdout + done.stderr)
        # Plain settings stay visible: in the log lines (stderr) ...
        assert "env MODE=tools" in done.stderr and "env LOG_LEVEL=error" in done.stderr
        assert "plain line: listening on port 8080" in done.stderr
    doc = json.loads(json_run.stdout)
    assert doc["command"][-len(EXTRA_ARGS) :] == redact_command(EXTRA_ARGS)
    assert "--log-level" in doc["command"] and "error" in doc["command"]
    if fail:
        tail = doc["error"]["stderrTail"]
        assert "env MODE=tools" in tail and "env LOG_LEVEL=error" in tail
        assert f"env GITHUB_TOKEN={REDACTED}" in tail and f"env EXTRA={REDACTED}" in tail
        assert "env MODE=tools" in human.stderr  # the tail as the human failure report shows it
    else:
        assert doc["tools"][0]["inputSchema"]["properties"]["mode"] == {"default": "tools"}
        assert "Tools (1)" in human.stdout and "leaky" in human.stdout


@pytest.mark.anyio
async def test_websocket_url_credentials_never_reach_the_output() -> None:
    from .test_websocket import bridge

    async with bridge(command=[sys.executable, str(FIXTURES / "demo_server.py")]) as server:
        url = f"{server.url()}mcpl?access_token={ARG_ACCESS_TOKEN}&api_key={ARG_API_KEY}&mode=tools"
        with anyio.fail_after(TIMEOUT):
            done = await anyio.run_process(
                [*CLI, "probe", "--json", "--log-level", "debug", "--ws", url], check=False
            )
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, err
    doc = json.loads(out)
    assert doc["url"].endswith(f"mcpl?access_token={REDACTED}&api_key={REDACTED}&mode=tools")
    assert "WebSocket open" in err  # a log line that names the URL
    assert ARG_ACCESS_TOKEN not in out + err and ARG_API_KEY not in out + err


def test_run_hides_every_secret_class(tmp_path: Path) -> None:
    script = tmp_path / "leaky.json"
    steps = [
        *_secret_printing_steps(fail=False)[:-4],
        *initialize_reply(),
        {"expect": {"method": "notifications/initialized"}},
        {
            "send": {
                "jsonrpc": "2.0",
                "method": "test/leak",
                "params": {"gh": GITHUB["ghs"], "x": EXPLICIT_SECRET},
            }
        },
        {"stderr": "about to exit"},
        {"exit": 4},
    ]
    script.write_text(json.dumps(steps), encoding="utf-8")
    entry = {
        "command": sys.executable,
        "args": [str(FIXTURES / "scripted_server.py"), str(script), str(tmp_path / "record"), *EXTRA_ARGS],
        "env": {"GITHUB_TOKEN": ENV_SECRET, "MODE": "tools", "LOG_LEVEL": "error"},
        "restart": {"enabled": False},
        "timeouts": {"closeGrace": 0.5, "terminateGrace": 1},
    }
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"leaky": entry}}), encoding="utf-8")
    outputs = {}
    for mode in ("--json", "--log-level"):
        options = ["--json"] if mode == "--json" else ["--log-level", "debug"]
        done = forkserver.run(
            [*CLI, "run", *options, "--secret", f"EXTRA={EXPLICIT_SECRET}", str(config)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env={**os.environ},
        )
        assert done.returncode == 1, done.stderr  # the one server gave up
        _assert_nothing_secret(done.stdout + done.stderr)
        assert "test/leak" in done.stdout
        outputs[mode] = done
    assert "env MODE=tools" in outputs["--log-level"].stderr  # a debug log line of the server's stderr
    events = [json.loads(line) for line in outputs["--json"].stdout.splitlines()]
    (ended,) = [event for event in events if event["kind"] == "disconnected"]
    assert "about to exit" in ended["data"]["stderrTail"]
    (leak,) = [event for event in events if event["kind"] == "notification"]
    assert leak["data"]["params"] == {"gh": REDACTED, "x": REDACTED}

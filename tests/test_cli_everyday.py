"""Issue 23, the everyday command line: ``call`` arguments and options, and the smaller items.

The CLI runs as a child process (tests/forkserver.py) against the bundled demo server, and
against ``fixtures/scripted_server.py`` where the wire must show that nothing was sent; the
shell's history needs a terminal (pexpect). Each test names the defect it was written for.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pexpect
import pytest

from mcpl_host.cli_text import not_shown
from mcpl_host.mcpl.policy_state import MCPLState
from mcpl_host.probe_features import elicitation_reply, form_defaults
from mcpl_host.shell.terminal import default_history_file

from . import forkserver
from .forkpty import spawn_pty
from .test_cli import CLI, TIMEOUT, run_cli, scripted
from .test_shell import PROMPT, end, terminal_env
from .wire import initialize_steps

EXTRAS = ["--env", "DEMO_EXTRAS=1"]


def fresh(tmp_path: Path) -> Path:
    """A directory of its own under ``tmp_path``, for one run's script and record (the
    scripted server appends to its record)."""
    where = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
    where.mkdir()
    return where


def sent_methods(tmp_path: Path) -> list[str]:
    """The methods the host sent to the scripted server (the era probe left out)."""
    entries = [json.loads(line) for line in (tmp_path / "record.jsonl").read_text().splitlines()]
    methods = [json.loads(entry["line"]).get("method") for entry in entries if "line" in entry]
    return [method for method in methods if method not in ("server/discover", None)]


def sent_messages(tmp_path: Path) -> list[dict[str, Any]]:
    entries = [json.loads(line) for line in (tmp_path / "record.jsonl").read_text().splitlines()]
    return [json.loads(entry["line"]) for entry in entries if "line" in entry]


def tool_steps(tools: list[dict[str, Any]], *, call_reply: dict[str, Any] | None = None) -> list[Any]:
    """A server listing ``tools``; with ``call_reply``, it answers one ``tools/call`` so."""
    steps: list[Any] = [
        *initialize_steps({"tools": {}}, {"name": "s", "version": "1"}),
        {"expect": {"method": "notifications/initialized"}},
        {"expect": {"method": "tools/list"}},
        {"reply": {"tools": tools}},
    ]
    if call_reply is not None:
        steps += [{"expect": {"method": "tools/call"}}, {"reply": call_reply}]
    return steps


# --- unknown arguments ------------------------------------------------------------------------

SUM = {
    "name": "get-sum",
    "inputSchema": {
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
    },
}


def test_a_misspelled_argument_is_named_with_the_closest_one_not_as_a_missing_one() -> None:
    done = run_cli("call", "echo", "txet=hi")
    assert done.returncode == 2 and done.stdout == ""
    assert "the tool 'echo' has no argument 'txet'; did you mean 'text'?" in done.stderr
    assert "is required" not in done.stderr


def test_an_unknown_argument_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    done = run_cli("call", "get-sum", "a=1", "b=2", "bb=3", *scripted(tmp_path, tool_steps([SUM])))
    assert done.returncode == 2 and done.stdout == ""
    assert "the tool 'get-sum' has no argument 'bb'; did you mean 'b'?" in done.stderr
    assert "nothing was sent" in done.stderr
    assert sent_methods(tmp_path) == ["initialize", "notifications/initialized", "tools/list"]
    as_json = run_cli("call", "get-sum", '{"a": 1, "b": 2, "c": 3}', *scripted(tmp_path, tool_steps([SUM])))
    assert as_json.returncode == 2 and "has no argument 'c'" in as_json.stderr
    assert "tools/call" not in sent_methods(tmp_path)


def test_unknown_arguments_go_when_the_schema_allows_them_or_with_allow_unknown(tmp_path: Path) -> None:
    open_schema = {**SUM["inputSchema"], "additionalProperties": True}
    steps = tool_steps([{**SUM, "inputSchema": open_schema}], call_reply={"content": []})
    first = fresh(tmp_path)
    allowed = run_cli("call", "get-sum", "a=1", "b=2", "bb=3", *scripted(first, steps))
    assert allowed.returncode == 0, allowed.stderr
    call = next(m for m in sent_messages(first) if m.get("method") == "tools/call")
    assert call["params"]["arguments"] == {"a": 1, "b": 2, "bb": 3}
    steps = tool_steps([SUM], call_reply={"content": []})
    second = fresh(tmp_path)
    forced = run_cli("call", "--allow-unknown", "get-sum", "a=1", "b=2", "bb=3", *scripted(second, steps))
    assert forced.returncode == 0, forced.stderr
    call = next(m for m in sent_messages(second) if m.get("method") == "tools/call")
    assert call["params"]["arguments"] == {"a": 1, "b": 2, "bb": 3}


def test_a_misspelled_prompt_argument_gets_the_closest_name() -> None:
    done = run_cli("prompt", "greet", "nmae=Ada")
    assert done.returncode == 2 and done.stdout == ""
    assert "the prompt 'greet' has no argument 'nmae'; did you mean 'name'?" in done.stderr


def test_the_shell_refuses_a_misspelled_argument_with_the_closest_name() -> None:
    done = forkserver.run(
        [*CLI, "shell"],
        input="call echo txet=hi\nprompt greet nmae=Ada\n",
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 1
    assert "has no argument 'txet'; did you mean 'text'?" in done.stdout + done.stderr
    assert "has no argument 'nmae'; did you mean 'name'?" in done.stdout + done.stderr
    allowed = forkserver.run(
        [*CLI, "shell", "--allow-unknown"],
        input="call echo text=hi extra=1\n",
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert "has no argument" not in allowed.stdout


# --- roots, sampling and elicitation for call, read, prompt, send ------------------------------


def test_call_serves_sampling_and_elicitation_as_probe_does() -> None:
    sampled = run_cli("call", *EXTRAS, "--sampling-reply", "forty-two", "--text", "sample", "question=why")
    assert (sampled.returncode, sampled.stdout) == (0, "forty-two\n"), sampled.stderr
    elicited = run_cli("call", *EXTRAS, "--elicit-reply", '{"name": "Ada"}', "--text", "form")
    assert (elicited.returncode, elicited.stdout) == (0, "accept: Ada\n"), elicited.stderr
    declined = run_cli("call", *EXTRAS, "--elicit-reply", "decline", "--text", "form")
    assert (declined.returncode, declined.stdout) == (0, "decline\n"), declined.stderr
    bad = run_cli("call", *EXTRAS, "--elicit-reply", "maybe-secret", "form")
    assert bad.returncode == 2 and "maybe-secret" not in bad.stderr


def test_call_serves_roots(tmp_path: Path) -> None:
    steps = [
        *tool_steps([{"name": "t", "inputSchema": {"type": "object"}}]),
        {"expect": {"method": "tools/call"}},
        {"send": {"jsonrpc": "2.0", "id": "r1", "method": "roots/list"}},
        {"wait_response": "r1"},
        {"reply": {"content": [{"type": "text", "text": "listed"}]}},
    ]
    done = run_cli("call", "--root", str(tmp_path), "--text", "t", *scripted(tmp_path, steps))
    assert (done.returncode, done.stdout) == (0, "listed\n"), done.stderr
    messages = sent_messages(tmp_path)
    initialize = next(m for m in messages if m.get("method") == "initialize")
    assert "roots" in initialize["params"]["capabilities"]
    answer = next(m for m in messages if m.get("id") == "r1")
    assert answer["result"]["roots"][0]["uri"] == tmp_path.as_uri()


FORM_WITH_DEFAULTS = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "default": "Ada"},
        "count": {"type": "integer", "default": 3},
        "tone": {"type": "string", "enum": ["warm", "dry"], "default": "dry"},
        "loud": {"type": "boolean", "default": False},
        "note": {"type": "string"},
    },
}


def test_an_accepted_form_gets_the_defaults_of_the_fields_the_reply_leaves_out(tmp_path: Path) -> None:
    """The conformance scenario for elicitation defaults (SEP-1034), through call: a canned
    accept fills each omitted field that declares a default."""
    for reply, expected in (
        ("accept", {"name": "Ada", "count": 3, "tone": "dry", "loud": False}),
        (
            '{"name": "Grace", "note": "hi"}',
            {"name": "Grace", "count": 3, "tone": "dry", "loud": False, "note": "hi"},
        ),
    ):
        elicit = {"mode": "form", "message": "Who?", "requestedSchema": FORM_WITH_DEFAULTS}
        steps = [
            *tool_steps([{"name": "t", "inputSchema": {"type": "object"}}]),
            {"expect": {"method": "tools/call"}},
            {"send": {"jsonrpc": "2.0", "id": "e1", "method": "elicitation/create", "params": elicit}},
            {"wait_response": "e1"},
            {"reply": {"content": [{"type": "text", "text": "asked"}]}},
        ]
        where = fresh(tmp_path)
        done = run_cli("call", "--elicit-reply", reply, "--text", "t", *scripted(where, steps))
        assert (done.returncode, done.stdout) == (0, "asked\n"), done.stderr
        answer = next(m for m in sent_messages(where) if m.get("id") == "e1")
        assert answer["result"] == {"action": "accept", "content": expected}


def test_read_prompt_and_send_take_the_same_options() -> None:
    for command in ("call", "read", "prompt", "send", "probe"):
        words = " ".join(run_cli(command, "--help").stdout.split())
        for option in ("--root PATH", "--sampling-reply TEXT", "--elicit-reply JSON|ACTION", "--ask"):
            assert option in words, (command, option)
    ping = run_cli("send", "--sampling-reply", "x", "--root", "/", "ping")
    assert ping.returncode == 0, ping.stderr


def test_server_everything_offers_its_sampling_tool_to_call_with_a_sampling_reply() -> None:
    """The filed defect: server-everything lists trigger-sampling-request only to a host
    advertising sampling, and misspelled arguments went by as missing ones."""
    executable = os.environ.get("MCPL_TEST_SERVER_EVERYTHING")
    if not executable or not os.path.exists(executable):
        pytest.skip("set MCPL_TEST_SERVER_EVERYTHING to the mcp-server-everything executable (.ci/run does)")
    server = ["--", executable, "stdio"]
    sampled = run_cli(
        "call", "--sampling-reply", "forty-two", "trigger-sampling-request", "prompt=hi", *server
    )
    assert sampled.returncode == 0, sampled.stderr
    assert "forty-two" in sampled.stdout
    misspelled = run_cli("call", "echo", "mesage=hi", *server)
    assert misspelled.returncode == 2
    assert "the tool 'echo' has no argument 'mesage'; did you mean 'message'?" in misspelled.stderr
    image = run_cli("call", "--text", "get-tiny-image", *server)
    assert image.returncode == 0 and "1 image (image/png, " in image.stderr


# --- the refresh that races the host's own close ----------------------------------------------


def test_no_refresh_warning_when_the_host_itself_closes(tmp_path: Path) -> None:
    steps = [
        *initialize_steps({"tools": {"listChanged": True}}, {"name": "s", "version": "1"}),
        {"expect": {"method": "notifications/initialized"}},
        {"expect": {"method": "tools/list"}},
        {"reply": {"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}},
        {"expect": {"method": "tools/call"}},
        {"send": {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}},
        {"wait_for": {"method": "tools/list"}},  # the refresh is in flight: answer the call
        {"reply": {"content": [{"type": "text", "text": "done"}]}, "id": 4},
        {"wait_for": {"method": "never/sent"}},  # until the host closes stdin
    ]
    done = run_cli("call", "--text", "t", *scripted(tmp_path, steps))
    assert (done.returncode, done.stdout) == (0, "done\n"), done.stderr
    call = next(m for m in sent_messages(tmp_path) if m.get("method") == "tools/call")
    assert call["id"] == 4  # the id the script answers
    assert sent_methods(tmp_path).count("tools/list") == 2  # the refresh was sent
    assert "could not refresh" not in done.stderr


# --- --text says what it leaves out -------------------------------------------------------------


def test_text_says_what_it_left_out(tmp_path: Path) -> None:
    image = base64.b64encode(b"\x89PNG" + bytes(12 * 1024 - 4)).decode()
    content = [
        {"type": "text", "text": "a picture:"},
        {"type": "image", "data": image, "mimeType": "image/png"},
    ]
    steps = tool_steps([{"name": "t", "inputSchema": {"type": "object"}}], call_reply={"content": content})
    done = run_cli("call", "--text", "t", *scripted(tmp_path, steps))
    assert (done.returncode, done.stdout) == (0, "a picture:\n"), done.stderr
    assert "1 image (image/png, 12 KiB) not shown; leave out --text to see it in the JSON" in done.stderr
    steps = tool_steps(
        [{"name": "t", "inputSchema": {"type": "object"}}], call_reply={"content": content[:1]}
    )
    plain = run_cli("call", "--text", "t", *scripted(tmp_path, steps))
    assert plain.returncode == 0 and plain.stderr == ""


# --- JSON keys ------------------------------------------------------------------------------------


def test_probe_json_errors_use_camel_case_keys(tmp_path: Path) -> None:
    done = run_cli("probe", "--json", *scripted(tmp_path, [{"stderr": "fatal: no config"}, {"exit": 3}]))
    assert done.returncode == 1
    error = json.loads(done.stdout)["error"]
    assert error["stderrTail"] == ["fatal: no config"]
    assert [key for key in error if "_" in key] == []


# --- the bare command, completion -----------------------------------------------------------------


def test_bare_mcpl_host_prints_help_and_exits_0() -> None:
    done = run_cli()
    assert done.returncode == 0, done.stderr
    assert "Usage: mcpl-host" in done.stdout and "probe" in done.stdout


def test_shell_completion_script_and_command_names() -> None:
    script = forkserver.run(
        CLI,
        env={**os.environ, "_MCPL_HOST_COMPLETE": "bash_source"},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert script.returncode == 0 and "_mcpl_host_completion" in script.stdout
    env = {
        **os.environ,
        "_MCPL_HOST_COMPLETE": "bash_complete",
        "COMP_WORDS": "mcpl-host pr",
        "COMP_CWORD": "1",
    }
    offered = forkserver.run(CLI, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert offered.stdout.splitlines() == ["plain,probe", "plain,prompt", "plain,prompts"]
    words = " ".join(run_cli("--help").stdout.split())
    assert "_MCPL_HOST_COMPLETE=bash_source" in words


# --- the shell's history --------------------------------------------------------------------------


def test_shell_history_is_kept_by_default_redacted_and_off_with_no_history(tmp_path: Path) -> None:
    secret = "hunter2-very-secret"
    env = {**terminal_env(), "XDG_STATE_HOME": str(tmp_path)}
    for flags in ([], ["--no-history"]):
        child = spawn_pty(
            CLI[0],
            [*CLI[1:], "shell", "--secret", f"X={secret}", *flags],
            encoding="utf-8",
            timeout=TIMEOUT,
            dimensions=(40, 120),
            env=env,
        )
        try:
            child.expect_exact(PROMPT)
            child.sendline(f"call echo text={secret}")
            child.expect_exact("[redacted]")
            child.sendline("quit")
            child.expect(pexpect.EOF)
        finally:
            end(child)
        history = tmp_path / "mcpl-host" / "shell_history"
        if not flags:
            kept = history.read_text(encoding="utf-8")
            assert "call echo text=[redacted]" in kept and secret not in kept
            history.unlink()
        else:
            assert not history.exists()


# --- the README's first library example --------------------------------------------------------


def test_the_mcpl_state_prints_as_its_value() -> None:
    """The README's first example prints ``server.mcpl_state``: \"ready\", not ``MCPLState.READY``."""
    assert f"{MCPLState.READY}" == str(MCPLState.READY) == "ready"
    assert str(MCPLState.MCP_ONLY) == "mcp-only"


# --- pure decisions, by plain calls -----------------------------------------------------------------


def test_not_shown_names_each_kind_with_its_media_type_size_or_uri() -> None:
    assert not_shown([{"type": "text", "text": "x"}, {"uri": "a://b", "text": "t"}]) is None
    line = not_shown(
        [
            {"type": "image", "data": "YQ==", "mimeType": "image/png"},
            {
                "type": "image",
                "data": base64.b64encode(bytes(3 * 1024 * 1024)).decode(),
                "mimeType": "image/gif",
            },
            {"type": "audio", "data": "YWI=", "mimeType": "audio/wav"},
            {"type": "resource_link", "uri": "file:///x", "name": "x"},
            {"type": "resource", "resource": {"uri": "a://b", "blob": "YWJj"}},
            {"type": "hologram\x1b[2J"},
        ]
    )
    assert line == (
        "2 images (image/png, 1 byte; image/gif, 3.0 MiB), 1 audio clip (audio/wav, 2 bytes), "
        "1 resource link (file:///x), 1 embedded resource (a://b, 3 bytes) and 1 block of type "
        "hologram\\u001b[2J not shown; leave out --text to see them in the JSON"
    )
    assert not_shown([{"uri": "a://b", "blob": "YWJjZA", "mimeType": "application/pdf"}]) == (
        "1 binary content (application/pdf, 4 bytes) not shown; leave out --text to see it in the JSON"
    )


def test_the_history_file_is_under_the_xdg_state_directory() -> None:
    home = Path("/home/ada")
    assert default_history_file({}, home) == home / ".local/state/mcpl-host/shell_history"
    assert default_history_file({"XDG_STATE_HOME": "/s"}, home) == Path("/s/mcpl-host/shell_history")
    relative = default_history_file({"XDG_STATE_HOME": "rel"}, home)  # ignored, as the spec says
    assert relative == home / ".local/state/mcpl-host/shell_history"


def test_call_ask_offers_the_form_defaults_on_the_terminal(tmp_path: Path) -> None:
    """``call --ask``: a question on the terminal shows each field's default, and Enter takes it."""
    schema = {"type": "object", "properties": {"name": {"type": "string", "default": "Ada"}}}
    elicit = {"mode": "form", "message": "Who?", "requestedSchema": schema}
    steps = [
        *tool_steps([{"name": "t", "inputSchema": {"type": "object"}}]),
        {"expect": {"method": "tools/call"}},
        {"send": {"jsonrpc": "2.0", "id": "e1", "method": "elicitation/create", "params": elicit}},
        {"wait_response": "e1"},
        {"reply": {"content": [{"type": "text", "text": "asked"}]}},
    ]
    command = [*CLI, "call", "--ask", "--text", "t", *scripted(tmp_path, steps)]
    child = spawn_pty(command[0], command[1:], timeout=TIMEOUT, encoding="utf-8")
    try:
        child.expect_exact("answer this form?")
        child.sendline("y")
        child.expect_exact("name [Ada]:")
        child.sendline("")
        child.expect_exact("asked")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    answer = next(m for m in sent_messages(tmp_path) if m.get("id") == "e1")
    assert answer["result"] == {"action": "accept", "content": {"name": "Ada"}}


def test_the_shell_elicit_reply_fills_the_form_defaults_too(tmp_path: Path) -> None:
    elicit = {"mode": "form", "message": "Who?", "requestedSchema": FORM_WITH_DEFAULTS}
    steps = [
        *tool_steps([{"name": "t", "inputSchema": {"type": "object"}}]),
        {"expect": {"method": "tools/list"}},  # the shell lists them again for the call
        {"reply": {"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}},
        {"expect": {"method": "tools/call"}},
        {"send": {"jsonrpc": "2.0", "id": "e1", "method": "elicitation/create", "params": elicit}},
        {"wait_response": "e1"},
        {"reply": {"content": [{"type": "text", "text": "asked"}]}},
    ]
    done = forkserver.run(
        [*CLI, "shell", "--elicit-reply", '{"note": "hi"}', *scripted(tmp_path, steps)],
        input="call t\n",
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    answer = next(m for m in sent_messages(tmp_path) if m.get("id") == "e1")
    expected = {"name": "Ada", "count": 3, "tone": "dry", "loud": False, "note": "hi"}
    assert answer["result"] == {"action": "accept", "content": expected}


def test_elicitation_reply_fills_defaults_only_for_an_accepted_form() -> None:
    assert elicitation_reply("accept", "form", FORM_WITH_DEFAULTS).content == {
        "name": "Ada",
        "count": 3,
        "tone": "dry",
        "loud": False,
    }
    assert elicitation_reply('{"count": 9}', "form", FORM_WITH_DEFAULTS).content == {
        "name": "Ada",
        "count": 9,
        "tone": "dry",
        "loud": False,
    }
    assert elicitation_reply("decline", "form", FORM_WITH_DEFAULTS).content is None
    assert elicitation_reply("accept", "url", FORM_WITH_DEFAULTS).content is None
    assert form_defaults({"properties": {"x": "not a schema"}}) == {} == form_defaults(None)

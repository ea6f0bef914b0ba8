"""``mcpl-host shell`` end to end: in a real pseudo-terminal (pexpect) against the demo server
(with its extras: the ``ask`` tool sends ``inference/request``), and with commands piped in.

What must hold on the terminal: Tab completes commands, tool names and argument names; a
push printed while a line is half typed leaves that line as it was (drawn again below it,
and completed and run as typed); an inference request is held until answered by hand; ``deny
pushEvents`` makes the next push refused. No sleeps: each step waits for the shell's output.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import termios
from collections.abc import Iterator
from pathlib import Path

import anyio
import pexpect
from prompt_toolkit import PromptSession
from prompt_toolkit.application import get_app, run_in_terminal
from prompt_toolkit.output import create_output

from mcpl_host.shell.terminal import keys_not_signals, prompt_input

from . import forkserver
from .forkpty import PtyForked, spawn_pty
from .test_cli import CLI, TIMEOUT
from .test_cli_run import demo_entry, write_config

EXTRAS = ["--env", "DEMO_EXTRAS=1"]
#: The state directory of the shells started here (never the user's own).
STATE_HOME = tempfile.mkdtemp(prefix="mcpl-host-shell-state-")
PROMPT = "mcpl-demo>"
#: An event line of a shell with more than one server: the time, the server's name, the event.
EVENT_LINE = re.compile(r"\d\d:\d\d:\d\d\.\d{3}  \S+  ")


def terminal_env() -> dict[str, str]:
    """The environment of a shell in a pseudo-terminal: its own size (no COLUMNS or LINES
    from the test session), and no cursor position requests (pexpect does not answer them)."""
    env = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "LINES")}
    env["PROMPT_TOOLKIT_NO_CPR"] = "1"
    env["XDG_STATE_HOME"] = STATE_HOME  # the history file the shell keeps by default
    return env


#: Terminal control sequences prompt_toolkit writes around a line (styles, cursor moves).
_ESC = r"(?:\x1b\[[0-9;?]*[A-Za-z])*"


def printed_line(text: str) -> str:
    """A pattern matching ``text`` printed as a whole line above the prompt: after a newline
    or the erased prompt, between control sequences only, up to the end of the line."""
    return r"(?:\n|>)" + _ESC + re.escape(text) + _ESC + r"\r"


def spawn_shell(*args: str) -> PtyForked:
    child = spawn_pty(
        CLI[0],
        [*CLI[1:], "shell", *args],
        encoding="utf-8",
        timeout=TIMEOUT,
        dimensions=(40, 120),
        env=terminal_env(),
    )
    child.expect_exact("ready")
    child.expect_exact(PROMPT)
    return child


def end(child: PtyForked) -> None:
    """SIGTERM if the shell is still running (it closes its server on it too), so that no
    process is left behind."""
    if child.isalive():
        child.kill(signal.SIGTERM)
        child.expect(pexpect.EOF)
    child.close()


def leave(child: PtyForked) -> None:
    """``quit``, and the shell closes its server and exits 0."""
    try:
        child.send("quit\r")
        child.expect_exact("closing 1 server…")
        child.expect(pexpect.EOF)
    finally:
        end(child)
    assert child.exitstatus == 0


@contextlib.contextmanager
def shell_session(*args: str) -> Iterator[PtyForked]:
    """A shell in a pseudo-terminal (``spawn_shell``) for the body, which then leaves it
    (``leave``). A body that fails is reported as it failed: the shell is only ended
    (``end``), as leaving a shell that has gone already would fail too, and that failure
    (an EOF with nothing before it) would be the one reported."""
    child = spawn_shell(*args)
    try:
        yield child
    except BaseException:
        end(child)
        raise
    leave(child)


def test_completion_and_a_call() -> None:
    with shell_session(*EXTRAS) as child:
        # Without completion this line would be "ca ad a 2 b 3": not a command. Each Tab's
        # completion is drawn before the next keys are sent (completing is asynchronous; a
        # trailing blank is drawn as a cursor move, so it is not matched).
        for keys, drawn in (("ca\t", "call"), ("ad\t", "add"), ("a\t", "a="), ("2 b\t", "b=")):
            child.send(keys)
            child.expect_exact(drawn)
        child.send("3\r")
        child.expect(printed_line("5"))
        child.expect_exact('structuredContent: {"sum":5}')
        child.expect_exact(PROMPT)
        child.send("\x1b[A")  # history: the last line again
        child.expect_exact("call add a=2 b=3")
        child.send("\r")
        child.expect(printed_line("5"))


def test_a_push_while_a_line_is_half_typed_leaves_the_line_as_it_was() -> None:
    with shell_session("--env", "DEMO_PUSH_INTERVAL=0.5", "--env", "DEMO_PUSH_COUNT=100") as child:
        child.expect(r"tick-\d+")  # ticks are arriving
        child.expect_exact(PROMPT)
        child.send("call ec")
        child.expect_exact("call ec")  # typed, not sent
        child.expect(r"demo\.clock tick-\d+: tick \d+  → accepted")  # a push printed meanwhile
        child.expect_exact(f"{PROMPT} call ec")  # ... above the line, drawn again as it was
        child.send("ho 'text=half typed'\r")
        child.expect(printed_line("half typed"))


def test_an_inference_request_is_held_and_answered_by_hand() -> None:
    with shell_session(*EXTRAS) as child:
        child.send("call ask 'question=what is six times seven?'\r")
        child.expect_exact("held inference/request #1: what is six times seven?  (answer 1 TEXT)")
        child.expect_exact("[1 held]>")  # the prompt says so; the call waits, the prompt does not
        child.send("pending\r")
        child.expect_exact("#1 mcpl-demo inference/request: what is six times seven?")
        child.send("answer 1 forty-two\r")
        child.expect_exact("answered #1")
        child.expect(r"inference/request \{.*\}  → answered")
        child.expect(printed_line("forty-two"))  # the tool's result: what the demo got back
        child.send("call ask question=again\r")
        child.expect_exact("held inference/request #2: again")
        child.sendcontrol("c")  # on an empty line: cancel the running call
        child.expect_exact("cancelled")


def test_sampling_and_elicitation_are_held_and_answered_by_hand() -> None:
    with shell_session(*EXTRAS) as child:
        child.send("call sample 'question=what is six times seven?'\r")
        child.expect_exact("held sampling/createMessage #1: what is six times seven?  (answer 1 TEXT)")
        child.send("answer 1 forty-two\r")
        child.expect_exact("answered #1")
        child.expect(printed_line("forty-two"))  # what the demo's sampling request got back
        child.send("call form 'message=Who are you?'\r")
        child.expect_exact(
            "held elicitation/create #2: Who are you? (fields: name*)  (answer 2 JSON|accept|decline|cancel)"
        )
        child.send("answer 2 maybe\r")  # neither an action nor a JSON object: still held
        child.expect_exact("#2 is still held")
        child.send("pending\r")
        child.expect_exact("#2 mcpl-demo elicitation/create: Who are you? (fields: name*)")
        child.send('answer 2 \'{"name": "Ada"}\'\r')  # one word, as the shell splits lines
        child.expect_exact("answered #2")
        child.expect(printed_line("accept: Ada"))
        child.send("call form\r")
        child.expect_exact("held elicitation/create #3")
        child.send("answer 3 decline\r")
        child.expect(printed_line("decline"))


def test_deny_push_events_then_the_next_push_is_refused() -> None:
    # DEMO_PUSH_ALWAYS: the demo goes on pushing after the reduction (a conforming server
    # stops at once), so the host's refusal shows.
    with shell_session(
        "--env", "DEMO_PUSH_INTERVAL=0.3", "--env", "DEMO_PUSH_COUNT=100", "--env", "DEMO_PUSH_ALWAYS=1"
    ) as child:
        child.expect(r"tick-\d+: tick \d+  → accepted")
        child.send("deny pushEvents\r")
        child.expect_exact("granted now: tools")
        # The line may wrap at a word boundary (the reason is long): match across the break.
        child.expect(r"demo\.clock tick-\d+: tick \d+  → refused -32002 [\s\S]*?\(pushEvents\)")
        child.send("grant pushEvents\r")
        child.expect_exact("granted now: pushEvents, tools")
        child.expect(r"demo\.clock tick-\d+: tick \d+  → accepted")


def test_publish_to_a_thread_to_the_root_and_to_an_unknown_thread() -> None:
    """``channels publish --thread=ID|--root`` (RFC-011 §4) against the demo's lobby, which
    declares publish target "exact" and has one thread, ``ticks``. The demo sends its first
    tick only once the lobby's registration is answered, so the tick says the lobby is known."""
    with shell_session(
        "--env", "DEMO_CHANNELS=1", "--env", "DEMO_PUSH_INTERVAL=0.2", "--env", "DEMO_PUSH_COUNT=1"
    ) as child:
        child.expect(r"demo\.clock tick-1: tick 1")
        child.expect_exact(PROMPT)
        child.send("channels publish --thread=ticks c1 demo:lobby in the thread\r")
        child.expect_exact("published: delivered (delivered in the thread asked for, echoed)")
        child.send("channels publish --root c1 demo:lobby at the root\r")
        child.expect_exact("published: delivered (delivered at the channel root, echoed)")
        child.send("channels publish --thread=elsewhere c1 demo:lobby lost\r")
        child.expect_exact("published: failed")  # styled and wrapped: the words apart
        child.expect(r"the server says[\s\S]*?no[\s\S]*?such[\s\S]*?thread")


def piped_shell(lines: str, *args: str) -> subprocess.CompletedProcess[str]:
    return forkserver.run(
        [*CLI, "shell", *args], input=lines, capture_output=True, text=True, timeout=TIMEOUT
    )


def test_piped_commands_run_in_order_and_the_status_says_how_they_went() -> None:
    server = ["--", sys.executable, str(Path(__file__).parent.parent / "fixtures" / "demo_server.py")]
    done = piped_shell("tools\ncall add a=1 b=2\n", *server)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "demo_server> tools" in lines and "add(a*, b*)  Add two numbers.  [shell (server)]" in lines
    assert lines[lines.index("demo_server> call add a=1 b=2") + 1] == "3"
    assert lines[-1] == "closing 1 server…"
    failed = piped_shell("call add a=1\nread demo://readme\n")
    assert failed.returncode == 1
    assert (
        "error: the arguments do not fit the schema; nothing was sent: argument 'b' is required"
        in failed.stdout
    )
    assert "mcpl-demo is the example MCPL server bundled with mcpl-host." in failed.stdout  # it went on


def test_piped_auto_answer_and_many_servers(tmp_path: Path) -> None:
    answered = piped_shell("call ask question=hi\n", *EXTRAS, "--auto-answer", "forty-two")
    assert answered.returncode == 0, answered.stdout + answered.stderr
    assert "\nforty-two\n" in answered.stdout
    config = write_config(tmp_path, {"one": demo_entry(tmp_path), "two": demo_entry(tmp_path)})
    script = "\n".join(
        [
            "servers",
            "@two call add a=2 b=2",
            "use two",
            "deny pushEvents",
            "restart",
            "call echo text=back",
            "servers",
        ]
    )
    done = piped_shell(script + "\n", "--config", str(config))
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    # Event lines (ticks, receipts) are printed as they come, between a command's line and
    # its output as it happens: each command's output follows it among the other lines.
    said = "".join(line for line in out.splitlines(keepends=True) if not EVENT_LINE.match(line))
    assert "one> @two call add a=2 b=2\n4\n" in said
    assert "two> deny pushEvents\ngranted now: tools\n" in said
    assert "two  disconnected restart asked for\n" in out and "two  connecting attempt 2" in out
    after = out.split("two> call echo text=back\n", 1)[1]  # events of the restart may come first
    assert after.split("\n").index("back") < after.split("\n").index("two> servers")
    last = out.rsplit("servers\n", 1)[1]
    assert "* two: ready, mcpl-demo 0.1.0, granted tools" in last  # the grant outlived the restart
    assert "  one: ready, mcpl-demo 0.1.0, granted pushEvents, tools" in last
    assert "closing 2 servers…" in out


def test_piped_client_features_serve_a_stateless_server(tmp_path: Path) -> None:
    # The MCP Python SDK 2.x fixture speaks MCP 2026-07-28 over stdio: its ask_client tool
    # answers input_required with roots, sampling and elicitation input requests, which the
    # shell serves from --root, --auto-answer and --elicit-reply (a pipe cannot answer by hand).
    server = [
        "--",
        sys.executable,
        str(Path(__file__).parent.parent / "fixtures" / "sdk_features_server.py"),
        "stdio",
    ]
    args = ["--root", str(tmp_path), "--auto-answer", "hi", "--elicit-reply", '{"name": "Ada"}', *server]
    done = piped_shell("call ask_client topic=tea\n", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"roots={tmp_path.as_uri()} | sampled=hi | form=accept:Ada" in done.stdout
    bad = piped_shell("", "--elicit-reply", "maybe")
    assert (
        bad.returncode == 2
        and "--elicit-reply must be a JSON object" in bad.stderr
        and "maybe" not in bad.stderr
    )


def test_shell_usage_errors_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"a": {"command": "x", "disabled": True}}}))
    empty = piped_shell("", "--config", str(config))
    assert empty.returncode == 2 and "has no enabled server" in empty.stderr
    alone = piped_shell("", "--server", "a")
    assert alone.returncode == 2 and "--server NAME goes with --config FILE" in alone.stderr


def test_ctrl_c_stays_a_key_for_the_whole_session_and_the_terminal_is_put_back() -> None:
    # Between two prompts (a line just entered) a terminal with ISIG on turns Ctrl-C into
    # SIGINT, which leaves the shell instead of cancelling the call: ISIG stays off.
    controller, terminal = os.openpty()
    try:
        before = termios.tcgetattr(terminal)
        assert before[3] & termios.ISIG
        with keys_not_signals(terminal):
            assert not termios.tcgetattr(terminal)[3] & termios.ISIG
        assert termios.tcgetattr(terminal) == before
    finally:
        os.close(controller)
        os.close(terminal)
    reader, writer = os.pipe()
    try:
        with keys_not_signals(reader):
            pass  # no terminal: nothing is changed, nothing raised
    finally:
        os.close(reader)
        os.close(writer)


def test_printing_above_the_prompt_keeps_ctrl_c_a_key_and_typed_keys_unechoed() -> None:
    # Every print above a running prompt (print_formatted_text, patch_stdout) goes through
    # prompt_toolkit's run_in_terminal, which puts the terminal in cooked mode unless the
    # input says otherwise: a Ctrl-C typed as a line is printed would be SIGINT (the shell
    # leaves) and keys would be echoed. The prompt, in a pseudo-terminal, with the shell's
    # input; the terminal as it is while something is printed above it. (prompt_toolkit runs
    # on asyncio only, as the shell does.)
    controller, terminal = os.openpty()
    modes: list[int] = []

    def look() -> None:
        assert get_app().is_running  # above the prompt, not before or after it
        modes.append(termios.tcgetattr(terminal)[3])

    async def print_above() -> None:
        await run_in_terminal(look)
        os.write(controller, b"done\r")

    async def prompt_once(prompt: PromptSession[str]) -> str:
        with anyio.fail_after(TIMEOUT):
            return await prompt.prompt_async(
                "> ",
                pre_run=lambda: get_app().create_background_task(print_above()),
                handle_sigint=False,
                set_exception_handler=False,
            )

    try:
        with (
            open(terminal, closefd=False) as stdin,
            open(terminal, "w", closefd=False) as stdout,
            keys_not_signals(terminal),  # as the shell's session is
        ):
            prompt: PromptSession[str] = PromptSession(
                input=prompt_input(stdin), output=create_output(stdout)
            )
            assert anyio.run(prompt_once, prompt, backend="asyncio") == "done"
    finally:
        os.close(controller)
        os.close(terminal)
    assert len(modes) == 1
    assert not modes[0] & termios.ISIG and not modes[0] & termios.ECHO

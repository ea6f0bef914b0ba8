"""The shell's input and output: an interactive prompt on a terminal (prompt_toolkit), or one
command per line from a pipe.

Rules of this module:

- **Interactive** (stdin and stdout are terminals): a prompt_toolkit prompt with history
  (kept in a file, each line redacted with every server's ``Redactor`` before it is
  written: by default ``default_history_file()``, the XDG state directory's
  ``mcpl-host/shell_history``, made owner-only; ``--history FILE`` another file;
  ``--no-history`` in memory only; a file that cannot be made is said once, and the
  history is kept in memory) and completion (``completion.complete``, on Tab).
  Everything printed while the prompt is up (events, results, held requests) goes above it
  (``print_formatted_text`` with the application running), and the line being typed is
  drawn again below, as it was. Each command runs in its own task, so the prompt is back at
  once: a ``call`` that waits for a held request does not stop you from typing ``answer``.
  Ctrl-C clears the line being typed and cancels the commands running (with none running
  it only clears the line); Ctrl-D, ``quit`` and ``exit`` leave. Ctrl-C is always a key, never
  a signal, for the whole session (``keys_not_signals``): between two prompts (a line just
  entered) the terminal would otherwise turn it into SIGINT, which leaves. Printing above
  the prompt leaves the terminal as the prompt has it (``StaysRawInput``): prompt_toolkit
  would put it in cooked mode for each print, where a Ctrl-C is again SIGINT and keys are
  echoed into the output.
- **Piped** (otherwise): each line of stdin is one command, run to its end before the next
  (``printf 'tools\\ncall add a=1 b=2\\n' | mcpl-host shell``), echoed after the prompt so
  that the output reads as a transcript. Before the first one, every server is waited for
  (up to its handshake timeout). End of input leaves.
- Leaving closes every server (bounded by their graces) after saying how many. SIGTERM and
  SIGHUP (and SIGINT sent from outside) leave the same way.
- Event lines are wrapped at word boundaries to the terminal's width
  (``report.print_event_line``); on a pipe they stay whole.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import termios
from collections.abc import Callable, Generator, Iterable, Mapping
from pathlib import Path
from typing import TextIO

import anyio
import anyio.abc
from prompt_toolkit import PromptSession, print_formatted_text
from prompt_toolkit.application.current import get_app_session
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.formatted_text import ANSI
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.input import Input, create_input
from prompt_toolkit.key_binding import KeyPress
from rich.console import Console, RenderableType
from rich.text import Text

from mcpl_host import report
from mcpl_host.jsonrpc.errors import MCPLHostError
from mcpl_host.logging import Redactor
from mcpl_host.shell.commands import Command, CommandError, parse_line
from mcpl_host.shell.completion import complete
from mcpl_host.shell.session import Session
from mcpl_host.signals import SHUTDOWN_SIGNALS

__all__ = [
    "PipePrinter",
    "RedactingFileHistory",
    "ShellCompleter",
    "default_history_file",
    "StaysRawInput",
    "TerminalPrinter",
    "interactive",
    "is_interactive",
    "piped",
    "prompt_input",
]


#: The history file under the state directory (XDG Base Directory Specification 0.8).
HISTORY_FILE = Path("mcpl-host", "shell_history")


def default_history_file(environ: Mapping[str, str], home: Path) -> Path:
    """The shell's history file: ``$XDG_STATE_HOME/mcpl-host/shell_history``, or under
    ``~/.local/state`` when ``XDG_STATE_HOME`` is unset, empty or relative (the XDG Base
    Directory Specification says to ignore a relative one)."""
    state = environ.get("XDG_STATE_HOME", "")
    base = Path(state) if state and Path(state).is_absolute() else home / ".local" / "state"
    return base / HISTORY_FILE


def _history_store(filename: str | None, redactors: Callable[[], Iterable[Redactor]]) -> History:
    """The history kept in ``filename`` (its directory made, the file owner-only), or in
    memory when ``filename`` is None or cannot be made (said on stderr)."""
    if filename is None:
        return InMemoryHistory()
    path = Path(filename)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    except OSError as exc:
        shown = report.safe_text(str(path), max_chars=500)
        print(
            f"mcpl-host: history kept for this session only: cannot write {shown} ({exc.strerror})",
            file=sys.stderr,
        )
        return InMemoryHistory()
    return RedactingFileHistory(str(path), redactors)


def is_interactive() -> bool:
    """Whether stdin and stdout are both terminals (the interactive loop), else piped."""
    return sys.stdin.isatty() and sys.stdout.isatty()


class TerminalPrinter:
    """Prints above a running prompt: each renderable is laid out by rich at the terminal's
    width, then handed to prompt_toolkit as ANSI text."""

    def _width(self) -> int:
        try:
            return max(20, get_app_session().output.get_size().columns)
        except Exception:  # no terminal size known: rich's default
            return 80

    def _print(self, renderable: RenderableType, event: tuple[Text, Text] | None = None) -> None:
        buffer = io.StringIO()
        console = Console(file=buffer, force_terminal=True, width=self._width(), highlight=False)
        if event is not None:
            report.print_event_line(console, *event)
        else:
            console.print(renderable)
        print_formatted_text(ANSI(buffer.getvalue()), end="")

    def line(self, text: Text) -> None:
        self._print(text)

    def event(self, head: Text, rest: Text) -> None:
        self._print(rest, (head, rest))


class PipePrinter:
    """Prints on stdout with rich (``report.ReportConsole``): wrapped to a terminal's width,
    whole lines on a pipe."""

    def __init__(self) -> None:
        self.console = report.ReportConsole(highlight=False)

    def line(self, text: Text) -> None:
        self.console.print(text, soft_wrap=not self.console.is_terminal)

    def event(self, head: Text, rest: Text) -> None:
        report.print_event_line(self.console, head, rest)


class ShellCompleter(Completer):
    """prompt_toolkit's side of ``completion.complete`` over the session's catalog."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterable[Completion]:
        for suggestion in complete(document.text_before_cursor, self.session.catalog):
            yield Completion(suggestion.text, -suggestion.replaces, display_meta=suggestion.meta)


class RedactingFileHistory(FileHistory):
    """A history file whose lines are redacted (every server's secrets, and the well-known
    shapes) before they are written; the session's own history keeps them as typed."""

    def __init__(self, filename: str, redactors: Callable[[], Iterable[Redactor]]) -> None:
        super().__init__(filename)
        self._redactors = redactors

    def store_string(self, string: str) -> None:
        for redactor in self._redactors():
            string = redactor.redact(string)
        super().store_string(string)


class StaysRawInput(Input):
    """The terminal's input as prompt_toolkit reads it (``inner``), except that its cooked
    mode changes nothing: while the prompt is up the terminal stays raw (no echo, no line
    editing, no ``ISIG``: Ctrl-C is the key ``c-c``, POSIX termios).

    prompt_toolkit runs every print above a running prompt (``print_formatted_text``,
    ``patch_stdout``) in ``run_in_terminal``, which turns the terminal to cooked mode for
    the print, ``ISIG`` and ``ECHO`` on. A Ctrl-C typed in that moment (a person answering a
    line that has just been printed) would be SIGINT, which leaves the shell, and anything
    typed would be echoed into the output. Nothing the shell runs in the terminal reads from
    it (no editor, no suspend, no system prompt: the prompt's defaults), so it needs no
    cooked mode. Everything else is ``inner``'s."""

    def __init__(self, inner: Input) -> None:
        self.inner = inner

    def fileno(self) -> int:
        return self.inner.fileno()

    def typeahead_hash(self) -> str:
        return self.inner.typeahead_hash()

    def read_keys(self) -> list[KeyPress]:
        return self.inner.read_keys()

    def flush_keys(self) -> list[KeyPress]:
        return self.inner.flush_keys()

    def flush(self) -> None:
        self.inner.flush()

    @property
    def closed(self) -> bool:
        return self.inner.closed

    def raw_mode(self) -> contextlib.AbstractContextManager[None]:
        return self.inner.raw_mode()

    def cooked_mode(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def attach(self, input_ready_callback: Callable[[], None]) -> contextlib.AbstractContextManager[None]:
        return self.inner.attach(input_ready_callback)

    def detach(self) -> contextlib.AbstractContextManager[None]:
        return self.inner.detach()

    def close(self) -> None:
        self.inner.close()


def prompt_input(stdin: TextIO) -> Input:
    """The prompt's input: the terminal on ``stdin``, kept raw while printing above the
    prompt (``StaysRawInput``)."""
    return StaysRawInput(create_input(stdin))


async def _leave_on_signals(stop: anyio.CancelScope, *, task_status: anyio.abc.TaskStatus[None]) -> None:
    """Cancel ``stop`` at the first of ``SHUTDOWN_SIGNALS``."""
    with anyio.open_signal_receiver(*SHUTDOWN_SIGNALS) as received:
        task_status.started()
        async for _signum in received:
            stop.cancel()
            return


@contextlib.contextmanager
def keys_not_signals(fd: int) -> Generator[None, None, None]:
    """While inside, the terminal on ``fd`` sends Ctrl-C (and Ctrl-\\, Ctrl-Z) as keys, not
    as signals (``ISIG`` off, POSIX termios); its settings as they were are put back on the
    way out. Nothing is changed where ``fd`` is no terminal."""
    try:
        saved = termios.tcgetattr(fd)
    except termios.error:
        yield
        return
    changed = list(saved)
    changed[3] = saved[3] & ~termios.ISIG
    termios.tcsetattr(fd, termios.TCSANOW, changed)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, saved)


async def interactive(session: Session, *, history: str | None) -> None:
    """The interactive loop (module rules) until the person leaves or a signal arrives."""
    hosted = session.host
    store = _history_store(history, lambda: [hosted.server(name).hosted.redactor for name in hosted.servers])
    prompt: PromptSession[str] = PromptSession(
        history=store,
        completer=ShellCompleter(session),
        complete_while_typing=False,
        input=prompt_input(sys.stdin),
    )
    running: set[anyio.CancelScope] = set()

    async def run(command: Command) -> None:
        with anyio.CancelScope() as scope:
            running.add(scope)
            try:
                await session.execute(command)
            finally:
                running.discard(scope)
        if scope.cancelled_caught:
            session.say("cancelled", "dim")

    async with anyio.create_task_group() as tg:
        with anyio.CancelScope() as leave, keys_not_signals(sys.stdin.fileno()):
            await tg.start(_leave_on_signals, leave)
            await tg.start(session.watch_events)
            while True:
                try:
                    line = await prompt.prompt_async(
                        session.prompt, handle_sigint=False, set_exception_handler=False
                    )
                except KeyboardInterrupt:  # Ctrl-C: the line is cleared already
                    if running:
                        for scope in list(running):
                            scope.cancel()
                    continue
                except EOFError:  # Ctrl-D
                    break
                try:
                    command = parse_line(line)
                except CommandError as exc:
                    session.say(f"error: {exc}", "red")
                    continue
                if command is None:
                    continue
                if command.name in ("quit", "exit"):
                    break
                tg.start_soon(run, command)
        _say_leaving(session)
        tg.cancel_scope.cancel()


def _say_leaving(session: Session) -> None:
    count = len(session.host.servers)
    session.say(f"closing {count} server{'' if count == 1 else 's'}…", "dim")


async def piped(session: Session) -> None:
    """The piped loop (module rules): every line of stdin, in order, until its end."""
    async with anyio.create_task_group() as tg:
        with anyio.CancelScope() as leave:
            await tg.start(_leave_on_signals, leave)
            await tg.start(session.watch_events)
            host = session.host
            for name in host.servers:
                handle = host.server(name)
                try:
                    await handle.connected(timeout=handle.hosted.limits.handshake_timeout_seconds)
                except MCPLHostError:  # its events said why; its commands will say so too
                    pass
            async for raw in anyio.wrap_file(sys.stdin):
                line = raw.rstrip("\n")
                session.say(f"{session.prompt()}{report.safe_text(line, max_chars=2000)}", "bold")
                try:
                    command = parse_line(line)
                except CommandError as exc:
                    session.say(f"error: {exc}", "red")
                    session.failures += 1
                    continue
                if command is None:
                    continue
                if command.name in ("quit", "exit"):
                    break
                await session.execute(command)
        _say_leaving(session)
        tg.cancel_scope.cancel()

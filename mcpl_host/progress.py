"""One progress line for a command that waits on a server (issue 23: ``check``, ``call``,
``read``, ``prompt``, ``send``, and any listing command): a spinner and a sentence on
stderr while the wait lasts, cleared when it ends.

Rules of this module:

- ``progress(text)`` is a context manager; it shows the line only when the stream (stderr by
  default) is a terminal and ``enabled`` is true (a command passes ``enabled=not as_json``):
  never in a pipe, a file or with ``--json``. Elsewhere it shows nothing and costs nothing.
- On a terminal it is a spinner in rich's ``Live`` display (transient): the line is drawn
  when the block starts and again at once when ``Progress.update(text)`` replaces the
  sentence (a step shorter than the spinner's frame is still shown), redrawn in place
  meanwhile, erased when the block ends (normally, by an exception or by a cancellation);
  whatever the command prints to stdout or stderr meanwhile goes above it.
- ``text`` is the caller's sentence; server text in it must already be safe for a terminal
  (``report.safe_text``). It is shown as plain text, never as rich markup.
- rich is imported only when a line is shown (a command in a pipe does not load it).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Generator
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.live import Live
    from rich.spinner import Spinner

__all__ = ["Progress", "is_terminal", "progress"]


def is_terminal(stream: TextIO) -> bool:
    """True when ``stream`` is a terminal (False for a pipe, a file, a closed stream)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


class Progress:
    """The line of one ``progress`` block; ``shown`` is False where nothing is shown."""

    def __init__(self, line: tuple[Live, Spinner] | None, text: str) -> None:
        self._line = line
        #: The sentence shown last.
        self.text = text

    @property
    def shown(self) -> bool:
        return self._line is not None

    def update(self, text: str) -> None:
        """Show ``text`` instead (plain text)."""
        self.text = text
        if self._line is not None:
            from rich.text import Text

            live, spinner = self._line
            spinner.update(text=Text(text))
            live.refresh()


@contextlib.contextmanager
def progress(
    text: str, *, stream: TextIO | None = None, enabled: bool = True
) -> Generator[Progress, None, None]:
    """A progress line saying ``text`` on ``stream`` (default: ``sys.stderr``) while the
    block runs (module rules)."""
    out = sys.stderr if stream is None else stream
    if not enabled or not is_terminal(out):
        yield Progress(None, text)
        return
    from rich.console import Console
    from rich.live import Live
    from rich.spinner import Spinner
    from rich.text import Text

    spinner = Spinner("dots", text=Text(text))
    live = Live(spinner, console=Console(file=out, highlight=False), refresh_per_second=12.5, transient=True)
    live.start(refresh=True)
    try:
        yield Progress((live, spinner), text)
    finally:
        live.stop()

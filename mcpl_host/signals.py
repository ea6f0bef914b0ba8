"""Stop on SIGTERM, SIGHUP and SIGINT exactly as on Ctrl-C, and when stdout's reader goes.

Rules of this module:

- ``SHUTDOWN_SIGNALS`` (SIGINT, SIGTERM, SIGHUP; those of them the platform has) all mean
  "stop": the innermost phase open in a ``StopRouter`` is cancelled, so the code inside it
  unwinds and every server closes the way it does on Ctrl-C (its close is shielded and
  bounded by its ``Limits`` graces: stdin, grace, SIGTERM to the group, grace, SIGKILL,
  reap). A signal while no phase is open (the servers are closing) is ignored.
- ``close_on_signals()`` is the helper for an embedding application: the body runs in one
  phase; the first shutdown signal cancels it.
- ``watch_stdout_reader()`` treats the reader of a pipe on stdout going away (``| head``)
  as a stop: the write end of a pipe becomes readable (``EPOLLERR``) only then, so this
  never wakes for anything else. It applies only to a pipe opened write-only.
- Signals are received through anyio (``open_signal_receiver``), so this works on asyncio
  and trio, in the main thread only (a limit of both backends).
"""

from __future__ import annotations

import os
import signal
import stat
import sys
from collections.abc import AsyncGenerator, Callable, Generator
from contextlib import asynccontextmanager, contextmanager
from typing import TextIO

import anyio
import anyio.abc

__all__ = ["SHUTDOWN_SIGNALS", "StopRouter", "close_on_signals", "stdout_is_a_pipe", "watch_stdout_reader"]

#: The signals that stop a host (those this platform defines).
SHUTDOWN_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


class StopRouter:
    """Routes a stop (a shutdown signal, or ``stop()``) to the innermost open phase.

    ``phase()`` opens a cancel scope; ``watch()`` (run it in a task group with
    ``start``) receives ``signals`` and cancels the innermost open phase on each one while
    ``armed``. ``reason`` is what stopped it first: the signal's name (``"SIGTERM"``) or
    the reason given to ``stop()``; None while nothing has. ``on_stop``, when set, is called
    with that reason at the first stop (it must not block: it may say what happens next).
    """

    def __init__(self, signals: tuple[signal.Signals, ...] = SHUTDOWN_SIGNALS) -> None:
        self.signals = signals
        self.armed = True
        self.reason: str | None = None
        self.on_stop: Callable[[str], None] | None = None
        self._scopes: list[anyio.CancelScope] = []

    @contextmanager
    def phase(self) -> Generator[anyio.CancelScope, None, None]:
        """A cancel scope that the next stop cancels (the innermost one open)."""
        with anyio.CancelScope() as scope:
            self._scopes.append(scope)
            try:
                yield scope
            finally:
                self._scopes.remove(scope)

    def stop(self, reason: str) -> None:
        """Cancel the innermost open phase, if armed and one is open; note ``reason`` if
        it is the first stop."""
        if self.armed and self._scopes:
            if self.reason is None:
                self.reason = reason
                if self.on_stop is not None:
                    self.on_stop(reason)
            self._scopes[-1].cancel()

    async def watch(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Receive ``signals`` until cancelled; each one is a ``stop()``. While this runs,
        those signals no longer have their default effect (SIGINT raises no
        ``KeyboardInterrupt``, SIGTERM and SIGHUP do not end the process)."""
        with anyio.open_signal_receiver(*self.signals) as received:
            task_status.started()
            async for signum in received:
                self.stop(signal.Signals(signum).name)


@asynccontextmanager
async def close_on_signals(
    *signals: signal.Signals,
) -> AsyncGenerator[StopRouter, None]:
    """Run the body until it ends or a shutdown signal arrives, then let it unwind.

    ``signals`` default to ``SHUTDOWN_SIGNALS``. On the first one the body is cancelled:
    a ``Host``, ``ServerConnection`` or ``StdioTransport`` entered inside it closes as on
    Ctrl-C (shielded, bounded by its graces), and the ``async with`` ends normally. The
    yielded ``StopRouter``'s ``reason`` names the signal (None if the body ended by
    itself). Later signals during the close are ignored. Use it in the main thread::

        async with close_on_signals() as stop:
            async with Host(load_config("servers.json")) as host:
                async for event in host.events():
                    ...
        exit_code = 0 if stop.reason is None else 130  # stopped by a signal
    """
    router = StopRouter(signals or SHUTDOWN_SIGNALS)
    async with anyio.create_task_group() as tg:
        await tg.start(router.watch)
        try:
            with router.phase():
                yield router
        finally:
            tg.cancel_scope.cancel()


def stdout_is_a_pipe(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (default: ``sys.stdout``) is the write end of a pipe, opened for
    writing only: the case ``watch_stdout_reader`` can watch."""
    stream = stream or sys.stdout
    if stream is None:  # no stdout at all (pythonw)
        return False
    try:
        fd = stream.fileno()
        return stat.S_ISFIFO(os.fstat(fd).st_mode) and _write_only(fd)
    except (OSError, ValueError, AttributeError):
        return False


def _write_only(fd: int) -> bool:
    try:
        import fcntl
    except ImportError:  # not POSIX
        return False
    return fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY


async def watch_stdout_reader(router: StopRouter, stream: TextIO | None = None) -> None:
    """Stop ``router`` with reason ``"stdout closed"`` when the reader of the pipe on
    ``stream`` (default: ``sys.stdout``) goes away. Returns at once if it is not a pipe
    (``stdout_is_a_pipe``); otherwise runs until then or until cancelled."""
    stream = stream or sys.stdout
    if stream is None or not stdout_is_a_pipe(stream):
        return
    await anyio.wait_readable(stream.fileno())  # only an error makes a write end readable
    router.stop("stdout closed")

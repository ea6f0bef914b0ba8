"""``mcpl-host`` runs in a real pseudo-terminal, forked by the fork server (``forkserver``):
what ``pexpect.spawn`` gives for ``python -m mcpl_host.cli``, less the 0.4 s of CPU its
start-up costs.

``spawn_pty`` opens a pseudo-terminal (``os.openpty``) of the size asked for, and the fork
server's child takes its end as stdin, stdout and stderr, starts a session of its own
(``setsid``) and makes it its controlling terminal (``TIOCSCTTY``), as ``pexpect.spawn``'s
child does: Ctrl-C typed is SIGINT to it, closing our end hangs it up (SIGHUP), its output
is a terminal's. The test reads and writes our end through ``pexpect.fdpexpect``, with
``pexpect.spawn``'s interface (``expect``, ``send``, ``sendline``, ``sendcontrol``,
``sendintr``, ``isalive``, ``kill``, ``close``, ``exitstatus``, ``signalstatus``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import struct
import termios
from collections.abc import Mapping, Sequence
from pathlib import Path

from pexpect.fdpexpect import fdspawn

from .forkserver import CLI, SERVER

#: Seconds ``close`` waits for the child to end after hanging it up, and between the signals
#: of ``terminate`` (``pexpect.spawn``'s ``delayafterclose`` and ``delayafterterminate``).
DELAY_AFTER_CLOSE = 0.1
DELAY_AFTER_TERMINATE = 0.1


class PtyForked(fdspawn):
    """A forked ``mcpl-host`` run in a pseudo-terminal (see the module)."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        dimensions: tuple[int, int] = (24, 80),
        timeout: float = 30,
        encoding: str | None = None,
    ) -> None:
        assert list(argv[: len(CLI)]) == CLI, argv
        ours, theirs = os.openpty()
        try:
            rows, columns = dimensions
            fcntl.ioctl(theirs, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
            self.pid = SERVER.spawn(
                argv[len(CLI) :],
                os.environ if env is None else env,
                str(cwd or os.getcwd()),
                [theirs, theirs, theirs],
                tty=True,
            )
        except BaseException:
            os.close(ours)
            raise
        finally:
            os.close(theirs)
        super().__init__(ours, timeout=timeout, encoding=encoding)
        self.args = list(argv)
        self.name = f"<forked {' '.join(argv[len(CLI) :])}>"
        self.exitstatus: int | None = None
        self.signalstatus: int | None = None
        self._returncode: int | None = None

    def _ended(self, timeout: float | None) -> bool:
        if self._returncode is None:
            code = SERVER.wait(self.pid, timeout)
            if code is None:
                return False
            self._returncode = code
            self.exitstatus, self.signalstatus = (code, None) if code >= 0 else (None, -code)
        return True

    def isalive(self) -> bool:
        return not self._ended(0)

    def wait(self) -> int | None:
        self._ended(None)
        return self.exitstatus

    def kill(self, sig: int) -> None:
        if self.isalive():
            self._signal(sig)

    def _signal(self, signum: int) -> None:
        """Send ``signum``, unless the child has ended already: the fork server reaps it as
        it ends, and its report may not have reached us yet (a ``pexpect.spawn`` child is a
        zombie until waited for, and takes the signal)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signum)

    def sendcontrol(self, char: str) -> int:
        """Send Ctrl-``char`` (a letter, or one of ``@[\\]^_?``)."""
        char = char.lower()
        if "a" <= char <= "z":
            return self.send(chr(ord(char) - ord("a") + 1))
        return self.send(chr({"@": 0, "[": 27, "\\": 28, "]": 29, "^": 30, "_": 31, "?": 127}[char]))

    def sendintr(self) -> None:
        """Type the terminal's interrupt character (Ctrl-C unless changed)."""
        intr = termios.tcgetattr(self.child_fd)[6][termios.VINTR]
        os.write(self.child_fd, intr if isinstance(intr, bytes) else bytes([intr]))

    def terminate(self, force: bool = False) -> bool:
        """As ``pexpect.spawn``: SIGHUP, SIGCONT, SIGINT, then (``force``) SIGKILL, until it
        ends; whether it did."""
        signals = [signal.SIGHUP, signal.SIGCONT, signal.SIGINT] + ([signal.SIGKILL] if force else [])
        for signum in signals:
            if not self.isalive():
                return True
            self._signal(signum)
            if self._ended(DELAY_AFTER_TERMINATE):
                return True
        return not self.isalive()

    def close(self, force: bool = True) -> None:
        """Close our end (the child is hung up), and see it end: after
        ``DELAY_AFTER_CLOSE`` seconds it is terminated (``terminate(force)``)."""
        if self.child_fd != -1:
            super().close()
        if not self._ended(DELAY_AFTER_CLOSE) and not self.terminate(force):
            raise OSError(f"could not terminate {self.name} (pid {self.pid})")


def spawn_pty(
    command: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    dimensions: tuple[int, int] = (24, 80),
    timeout: float = 30,
    encoding: str | None = None,
) -> PtyForked:
    """``pexpect.spawn(command, args, ...)`` for ``[command, *args]`` = ``[*CLI, ...]``,
    forked in a pseudo-terminal (the same keyword arguments)."""
    return PtyForked(
        [command, *args], env=env, cwd=cwd, dimensions=dimensions, timeout=timeout, encoding=encoding
    )

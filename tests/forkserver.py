"""``mcpl-host`` runs for tests, each a real child process forked from a process that has
already imported the CLI (a fork server, as ``multiprocessing``'s "forkserver" start method).

Starting ``python -m mcpl_host.cli`` costs some 0.4 s of CPU before the command does
anything (the interpreter and the imports), and the suite runs the CLI hundreds of times.
Here one server process per test process imports the CLI once; each run is a ``fork()`` of
it: a new process with its own pid, its own stdin, stdout and stderr (pipes the test made,
passed over a Unix socket), the test's environment and working directory, its own exit
status, and the interpreter's normal shutdown. What a test sees (exit status, bytes on
stdout and stderr, the servers it starts, how it ends) is the same as for a process
started from scratch, less the start-up. A run may have a pseudo-terminal instead of pipes
(``tests/forkpty.py``): the child then starts a session of its own whose controlling
terminal it is, as ``pexpect.spawn`` does. Tests that need the console entry point itself
or signals sent to a process group start ``python -m mcpl_host.cli``.

Run as a script, this module is the server: ``python forkserver.py FD`` serves requests on
the Unix socket FD until the other end closes it.
"""

from __future__ import annotations

import atexit
import io
import json
import locale
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

#: What a test names the CLI by (its ``args`` in a ``CompletedProcess``).
CLI = [sys.executable, "-m", "mcpl_host.cli"]
MAX_REQUEST = 1 << 20  # bytes: argv and environment of one run


# --- the server (runs in its own process) --------------------------------------------------


def _serve(sock_fd: int) -> list[str]:
    """Fork a child per request; report each pid and, when it ends, its wait status.
    Returns only in a child: the argv it is to run."""
    import gc
    import select

    sock = socket.socket(fileno=sock_fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    gc.freeze()  # what was imported is shared with each child, not copied on its first GC
    while True:
        ready, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
            _reap(sock)
        if sock not in ready:
            continue
        message, fds, _, _ = socket.recv_fds(sock, MAX_REQUEST, 3)
        if not message:  # the test process is gone
            os._exit(0)
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in (wake_r, wake_w):
                os.close(fd)
            sock.close()
            return _become(request, fds)
        for fd in fds:
            os.close(fd)
        sock.send(json.dumps({"request": request["request"], "pid": pid}).encode())


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        cpu = usage.ru_utime + usage.ru_stime  # the child's and its reaped descendants'
        sock.send(json.dumps({"pid": pid, "status": status, "cpu": cpu}).encode())


def _become(request: dict[str, Any], fds: list[int]) -> list[str]:
    """In the child: take the test's streams, environment and directory."""
    import random

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    if request.get("tty"):  # a session of its own, the terminal on fd 0 its controlling one
        import fcntl
        import termios

        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    os.chdir(request["cwd"])
    sys.path[0] = request["cwd"]
    os.environ.clear()
    os.environ.update(request["env"])
    random.seed()  # not the server's sequence
    # New standard streams on the new descriptors, buffered as at interpreter start-up:
    # stdout by line on a terminal only, stderr by line always.
    sys.stdin = sys.__stdin__ = _stream(0, sys.stdin, line_buffering=False)
    sys.stdout = sys.__stdout__ = _stream(1, sys.stdout, line_buffering=os.isatty(1))
    sys.stderr = sys.__stderr__ = _stream(2, sys.stderr, line_buffering=True)
    sys.argv = [request["argv0"], *request["args"]]
    return list(request["args"])


def _stream(fd: int, like: Any, *, line_buffering: bool) -> io.TextIOWrapper:
    raw = io.FileIO(fd, "r" if fd == 0 else "w", closefd=False)
    buffered: io.BufferedIOBase = io.BufferedReader(raw) if fd == 0 else io.BufferedWriter(raw)
    return io.TextIOWrapper(
        buffered, encoding=like.encoding, errors=like.errors, line_buffering=line_buffering
    )


# --- the client (in the test process) ------------------------------------------------------


class ForkServer:
    """One fork server for this test process, started on first use."""

    def __init__(self, python: str | None = None, cwd: str | None = None) -> None:
        """``python``: the interpreter the server runs on (default: this one), in ``cwd``
        (default: this one), whose packages each run then imports: another virtual
        environment's (tests/test_readme.py: the README's fresh ``.venv``)."""
        self._python = python or sys.executable
        self._cwd = cwd
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._next = 0
        self._spawned: dict[int, int] = {}  # request -> pid
        self._ended: dict[int, int] = {}  # pid -> wait status
        self._changed = threading.Condition(self._lock)
        self._gone = False
        #: CPU seconds of the children that ended (theirs and their reaped descendants'):
        #: what a child process's run costs, for the suite's measurements.
        self.cpu_seconds = 0.0

    def _start(self) -> socket.socket:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._gone = False
        self._process = subprocess.Popen(
            [self._python, __file__, str(theirs.fileno())],
            cwd=self._cwd,
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        theirs.close()
        threading.Thread(target=self._read, args=(ours,), daemon=True).start()
        atexit.register(self.close)
        return ours

    def _read(self, sock: socket.socket) -> None:
        while True:
            try:
                message = sock.recv(4096)
            except OSError:
                message = b""
            with self._changed:
                if not message:
                    self._gone = True
                    self._changed.notify_all()
                    return
                answer = json.loads(message)
                if "request" in answer:
                    self._spawned[answer["request"]] = answer["pid"]
                else:
                    self._ended[answer["pid"]] = answer["status"]
                    self.cpu_seconds += answer["cpu"]
                self._changed.notify_all()

    def close(self) -> None:
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)  # the server reads the end; the reader wakes
            sock.close()
        process, self._process = self._process, None
        if process is not None:
            process.wait(timeout=10)

    def spawn(
        self, args: Sequence[str], env: Mapping[str, str], cwd: str, fds: Sequence[int], *, tty: bool = False
    ) -> int:
        """Fork a child running ``mcpl-host ARGS`` with ``fds`` as its stdin, stdout and
        stderr (with ``tty``, a new session whose controlling terminal is the one on its
        stdin); its pid."""
        with self._changed:
            if self._sock is None:
                self._sock = self._start()
            self._next += 1
            request = self._next
            body = {
                "request": request,
                "args": list(args),
                "env": dict(env),
                "cwd": cwd,
                "argv0": CLI[-1],
                "tty": tty,
            }
            socket.send_fds(self._sock, [json.dumps(body).encode()], list(fds))
            while request not in self._spawned:
                if self._gone:
                    raise RuntimeError("the fork server has ended")
                self._changed.wait()
            return self._spawned.pop(request)

    def wait(self, pid: int, timeout: float | None) -> int | None:
        """The child's exit status as ``Popen.returncode`` gives it (``-N`` for signal N),
        or None when ``timeout`` seconds passed first."""
        with self._changed:
            ended = self._changed.wait_for(lambda: pid in self._ended or self._gone, timeout)
            if not ended:
                return None
            if pid not in self._ended:
                raise RuntimeError("the fork server has ended")
            return os.waitstatus_to_exitcode(self._ended.pop(pid))


SERVER = ForkServer()


def run(
    argv: Sequence[str],
    *,
    input: str | bytes | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    timeout: float,
    text: bool = False,
    capture_output: bool = True,
    server: ForkServer | None = None,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run(argv, capture_output=True, ...)`` for ``argv`` = ``[*CLI, *args]``,
    forked: the same arguments, the same ``CompletedProcess`` (str with ``text``, else bytes).

    Raises ``subprocess.TimeoutExpired`` (the child killed) after ``timeout`` seconds.
    """
    assert capture_output, "a forked run always captures stdout and stderr"
    stdin_r, stdin_w = os.pipe() if input is not None else (None, -1)
    process = Forked(argv, env, cwd, stdin=stdin_r, text=False, server=server)
    chunks: dict[str, bytes] = {}

    def drain(name: str) -> None:
        with getattr(process, name) as stream:
            chunks[name] = stream.read()

    threads = [threading.Thread(target=drain, args=(name,), daemon=True) for name in ("stdout", "stderr")]
    if stdin_w != -1:
        data = input.encode(locale.getpreferredencoding(False)) if isinstance(input, str) else input or b""
        threads.append(threading.Thread(target=_feed, args=(stdin_w, data), daemon=True))
    for thread in threads:
        thread.start()
    try:
        status = process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    for thread in threads:
        thread.join(timeout)
    stdout, stderr = chunks.get("stdout", b""), chunks.get("stderr", b"")
    if text:
        return subprocess.CompletedProcess(list(argv), status, _text(stdout), _text(stderr))
    return subprocess.CompletedProcess(list(argv), status, stdout, stderr)


class Forked:
    """A forked run as ``subprocess.Popen`` gives one with ``stdout`` and ``stderr`` piped in
    text mode (what the tests that act mid-run use: the streams, ``pid``, ``send_signal``,
    ``poll``, ``wait``, ``kill``, ``returncode``)."""

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        *,
        stdin: int | None = None,
        text: bool = True,
        server: ForkServer | None = None,
    ) -> None:
        """Fork ``argv`` = ``[*CLI, *args]`` in ``env`` (default: this one) and ``cwd`` (this
        one), reading ``stdin`` (a descriptor, closed here; default: this process's stdin),
        forked by ``server`` (default: ``SERVER``)."""
        assert list(argv[: len(CLI)]) == CLI, argv
        self.args = list(argv)
        stdin = os.dup(0) if stdin is None else stdin
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            self._server = server or SERVER
            self.pid = self._server.spawn(
                argv[len(CLI) :],
                os.environ if env is None else env,
                str(cwd or os.getcwd()),
                [stdin, out_w, err_w],
            )
        finally:
            for fd in (stdin, out_w, err_w):
                os.close(fd)
        encoding = locale.getpreferredencoding(False) if text else None
        mode = "r" if text else "rb"
        self.stdout: IO[Any] = open(out_r, mode, encoding=encoding)  # noqa: SIM115 (the caller reads it to its end)
        self.stderr: IO[Any] = open(err_r, mode, encoding=encoding)  # noqa: SIM115
        self.returncode: int | None = None

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.wait(self.pid, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._server.wait(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode


def _feed(fd: int, data: bytes) -> None:
    with os.fdopen(fd, "wb") as stream:
        try:
            stream.write(data)
        except BrokenPipeError:
            pass


def _text(data: bytes) -> str:
    """As ``text=True`` decodes: the locale's encoding, universal newlines."""
    return io.TextIOWrapper(io.BytesIO(data), encoding=locale.getpreferredencoding(False)).read()


async def run_async(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[bytes]:
    """``anyio.run_process(argv, check=False)`` for ``argv`` = ``[*CLI, *args]``, forked (the
    wait in a worker thread)."""
    import anyio.to_thread

    return await anyio.to_thread.run_sync(lambda: run(argv, env=env, timeout=timeout, text=False))


#: What a run imports beyond the commands' modules (the event loop's backend, the logging
#: configuration, rich's pieces for tracebacks and tables): imported once here, not per run.
PRELOADED = (
    "mcpl_host.check.cli",
    "mcpl_host.cli",
    "mcpl_host.cli_call",
    "mcpl_host.cli_config",
    "mcpl_host.cli_list",
    "mcpl_host.cli_task",
    "mcpl_host.replay.cli",
    "mcpl_host.shell.cli",
    # what the commands import when they run, not when they are listed (--help)
    "mcpl_host.check.schemas",
    "jsonschema",
    "mcpl_host.replay.serve",
    "mcpl_host.shell.session",
    "mcpl_host.shell.terminal",
    "importlib.metadata",
    "hashlib",
    "ada_url",
    # what a run over HTTP or WebSocket imports (OAuth is on for an HTTP server by default)
    "httpx",
    "mcpl_host.auth.provider",
    "mcpl_host.transports.http",
    "mcpl_host.transports.http_sse",
    "mcpl_host.transports.websocket",
    "anyio._backends._asyncio",
    "anyio.streams.stapled",
    "anyio.streams.tls",
    "anyio.to_thread",
    "difflib",
    "rich._emoji_codes",
    "rich.columns",
    "rich.pretty",
    "rich.syntax",
    "rich.traceback",
    "structlog",
    "structlog.dev",
    "structlog.processors",
    "structlog.stdlib",
    "structlog.testing",
)


if __name__ == "__main__":
    import importlib

    sys.path[0] = os.getcwd()  # as for ``python -m``: the working directory, not tests/
    for name in PRELOADED:
        importlib.import_module(name)
    import mcpl_host.cli

    argv = _serve(int(sys.argv[1]))
    mcpl_host.cli.main(args=argv, prog_name="mcpl-host")

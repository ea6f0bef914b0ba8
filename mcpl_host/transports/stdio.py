"""The stdio transport: a server as a child process speaking JSON lines on its pipes.

Rules of this module (MCP 2025-11-25, "Transports" (stdio) and "Lifecycle" (shutdown);
docs/protocol.md H5, L1-L3, T3 and "stdio"):

- The child runs in a new session, so it leads its own process group. Signals go to the
  whole group: a ``sh -c`` or ``npx`` wrapper never leaves its real server orphaned.
- The child gets a minimal environment (``ENV_ALLOWLIST``) plus its configured ``env``,
  unless ``inherit_env`` is set. The host's own secrets do not leak into every server.
- stdin is the host's own non-blocking pipe (``_PipeWriter``: ``os.write``, and
  ``anyio.wait_writable`` only while the pipe is full), so ``send_now()`` writes an idle
  link's message at once, with no task switch (``transports/base.py`` ``SendsNow``).
  Lines already read are handed over by ``receive_now()`` without a coroutine each
  (``ReceivesNow``); ``receive()`` waits for more.
- Every pipe has a reader. stdout feeds a ``LineReader``; stderr feeds a pump task that logs
  each line (escaped, redacted, cut, through ``log_value``; the lines of a private key block
  hidden by ``KeyBlockMasker``) and keeps the last ``limits.stderr_tail_lines`` lines to
  explain a failure (H5). A child flooding stderr never blocks.
- Secrets (``mcpl_host.secrets``): the redactor is built by default from
  ``server_secrets(env=..., args=...)``; ``describe()`` names only the command's basename and
  the repr of ``StdioParameters`` hides secret arguments and environment values.
- Shutdown (MCP lifecycle, stdio): close stdin, wait ``close_grace_seconds``, SIGTERM the
  group, wait ``terminate_grace_seconds``, SIGKILL the group, and always reap the child.
  It runs shielded, so it completes under cancellation, in at most the two graces.
- The whole tree (``StdioParameters.keep_tree``, on by default; Linux): every server is
  started with its own token in ``process_tree.TREE_ENV``, its descendants are noted every
  ``limits.process_tree_scan_seconds``, and each step of the shutdown signals, besides the
  group, every member of the tree (``process_tree``: a daemon that called ``setsid()``
  included); members reparented to the host (when it is a child subreaper) are reaped.
  Elsewhere, or with ``keep_tree=False``, the process group only. The transports of one
  event loop that close together share their looks at ``/proc`` (``_TreeScans``): each
  look starts after every transport it answers asked, so none learns less than from a look
  of its own, and many closes cost a few looks, not two each.
- The server process itself is watched, not only its stdout: when it exits, ``receive()``
  raises ``ConnectionLost`` with its exit status within ``limits.eof_exit_wait_seconds``, even
  while a descendant still holds stdout open (the lines it wrote before exiting come first).
- anyio and OS errors become ``ConnectionLost`` (the server went away) or
  ``ConnectionClosed`` (we closed it), here and nowhere else.
"""

from __future__ import annotations

import math
import os
import signal
import sys
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from subprocess import PIPE
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
from anyio.lowlevel import RunVar
from typing_extensions import Unpack

from mcpl_host._tasks import LazyEvent, Lifetime
from mcpl_host.jsonrpc.errors import ConnectionClosed, ConnectionLost
from mcpl_host.jsonrpc.framing import LineReader, LineTooLong, ReadItem
from mcpl_host.limits import (
    DEFAULT_EOF_EXIT_WAIT_SECONDS,
    DEFAULT_READ_CHUNK_BYTES,
    DEFAULT_STDERR_MAX_LINE_BYTES,
)
from mcpl_host.logging import ServerValue
from mcpl_host.secrets import KeyBlockMasker, Redactor, redact_command, server_secrets, shown_env
from mcpl_host.transports import process_tree
from mcpl_host.transports.base import TransportArgs, transport_options
from mcpl_host.transports.process_tree import ProcessTree, ProcStat

__all__ = [
    "ENV_ALLOWLIST",
    "ENV_ALLOWLIST_PREFIXES",
    "EOF_EXIT_WAIT_SECONDS",
    "READ_CHUNK_BYTES",
    "STDERR_MAX_LINE_BYTES",
    "StdioParameters",
    "StdioTransport",
    "child_environment",
]

#: Variables passed from the host's environment to a server by default (besides ``LC_*``):
#: what programs need to find tools, locate home, pick a locale and reach the network.
ENV_ALLOWLIST = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TMPDIR", "LANG", "TZ",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY",
    "http_proxy", "https_proxy", "no_proxy", "all_proxy",
})  # fmt: skip
#: Prefixes of further allowed variables (locale categories).
ENV_ALLOWLIST_PREFIXES = ("LC_",)
#: The defaults of ``Limits.read_chunk_bytes`` (one read from stdout or stderr),
#: ``stderr_max_line_bytes`` and ``eof_exit_wait_seconds``.
READ_CHUNK_BYTES = DEFAULT_READ_CHUNK_BYTES
STDERR_MAX_LINE_BYTES = DEFAULT_STDERR_MAX_LINE_BYTES
EOF_EXIT_WAIT_SECONDS = DEFAULT_EOF_EXIT_WAIT_SECONDS
#: Seconds between checks that a process group is empty while waiting for it to exit.
GROUP_POLL_SECONDS = 0.02
#: Seconds between checks that a process tree is empty (each one scans ``/proc``).
TREE_POLL_SECONDS = 0.05
#: Seconds at least from one look at ``/proc`` for closing transports to the next
#: (``_TreeScans``): the transports that ask meanwhile share the next look.
TREE_SCAN_GAP_SECONDS = 0.01
#: Levels the stderr pump may log at.
STDERR_LOG_LEVELS = frozenset({"debug", "info", "warning", "error", "critical"})

# What ends the stderr pump's reading: EOF, a broken pipe, or our own close.
_STDERR_ENDED = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


@dataclass(frozen=True, slots=True, repr=False)
class StdioParameters:
    """How to start a server: ``command`` (a path or a name looked up on ``PATH``), its
    ``args``, extra ``env`` variables, the working directory ``cwd`` (None: ours),
    ``inherit_env`` (pass the host's whole environment instead of ``ENV_ALLOWLIST``) and
    ``keep_tree`` (Linux: stop every descendant of the server found by ``process_tree`` on
    close, not only its process group). The
    repr hides every secret (``mcpl_host.secrets``)."""

    command: str
    args: Sequence[str] = ()
    env: Mapping[str, str] | None = None
    cwd: str | os.PathLike[str] | None = None
    inherit_env: bool = False
    keep_tree: bool = True

    def secrets(self) -> tuple[str, ...]:
        """The secrets of these parameters (``server_secrets`` of ``env`` and ``args``)."""
        return server_secrets(env=self.env, args=self.args)

    def __repr__(self) -> str:
        redactor = Redactor(self.secrets())
        command = redact_command([self.command, *self.args], redactor)
        env = shown_env(self.env) if self.env is not None else None
        return (
            f"StdioParameters(command={command[0]!r}, args={tuple(command[1:])!r}, env={env!r}, "
            f"cwd={self.cwd!r}, inherit_env={self.inherit_env!r})"
        )


def child_environment(params: StdioParameters) -> dict[str, str]:
    """The environment a server is started with: ``os.environ`` filtered by
    ``ENV_ALLOWLIST`` (or whole, with ``inherit_env``), then ``params.env`` on top."""
    environ = os.environ
    if params.inherit_env:
        env = dict(environ)
    else:
        # The names first, then the values of the allowed ones only: each value read from
        # os.environ is decoded again, and most variables are not allowed.
        env = {
            name: environ[name]
            for name in environ
            if name in ENV_ALLOWLIST or name.startswith(ENV_ALLOWLIST_PREFIXES)
        }
    if params.env:
        env.update(params.env)
    return env


def _exit_message(status: int | None) -> str:
    if status is None:
        return "server closed its stdout"
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = "unknown signal"
        return f"server process was killed by signal {-status} ({name})"
    return f"server process exited with status {status}"


def _signal_group(pgid: int, signum: int) -> bool:
    """Send ``signum`` (0: only check) to a process group; False if nothing in it can get
    it (the group is empty, or what is left is not ours to signal)."""
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


async def _wait_group(process: anyio.abc.Process, seconds: float) -> bool:
    """Wait up to ``seconds`` for the leader to exit (it is then reaped) and its group to
    empty (a wrapper's children); True if both happened."""
    with anyio.move_on_after(seconds):
        await process.wait()
        while _signal_group(process.pid, 0):  # noqa: ASYNC110 (no event for "group empty")
            await anyio.sleep(GROUP_POLL_SECONDS)
        return True
    return False


class _Asked:
    """One transport's question to ``_TreeScans``: its tree, and the members once looked."""

    __slots__ = ("done", "members", "tree")

    def __init__(self, tree: ProcessTree) -> None:
        self.tree = tree
        self.members: dict[int, ProcStat] | None = None
        self.done = anyio.Event()


class _TreeScans:
    """The looks at ``/proc`` for the trees of one event loop's closing transports (module
    rules): ``members(tree)`` answers from a look (``ProcessTree.scan``) that starts after
    it was called, shared with every transport that asked by then; a look starts
    ``TREE_SCAN_GAP_SECONDS`` after the previous one at the earliest (at once, after one
    checkpoint, when none was recent). The task that asks while no look is pending makes
    the next one and answers every asker, even when it is cancelled while it waits (then it
    looks at once): no asker waits on a task that went away. ``members`` never raises (but
    cancellation)."""

    __slots__ = ("_asked", "_last", "_looking")

    def __init__(self) -> None:
        self._asked: list[_Asked] = []
        self._looking = False  # a task waits to make the next look
        self._last = -math.inf  # anyio.current_time() when the last look ended

    async def members(self, tree: ProcessTree) -> dict[int, ProcStat]:
        asked = _Asked(tree)
        self._asked.append(asked)
        if self._looking:
            await asked.done.wait()
        else:
            self._looking = True
            try:
                await anyio.sleep_until(self._last + TREE_SCAN_GAP_SECONDS)
            finally:
                self._look()
        assert asked.members is not None  # set with done
        return asked.members

    def _look(self) -> None:
        batch, self._asked = self._asked, []
        self._looking = False
        for one, members in zip(batch, ProcessTree.scan([one.tree for one in batch]), strict=True):
            one.members = members
            one.done.set()
        self._last = anyio.current_time()


_TREE_SCANS: RunVar[_TreeScans] = RunVar("mcpl_host.transports.stdio.tree_scans")


def _tree_members(tree: ProcessTree) -> Awaitable[dict[int, ProcStat]]:
    """``tree``'s members now, from the current event loop's shared look (``_TreeScans``)."""
    scans = _TREE_SCANS.get(None)
    if scans is None:
        scans = _TreeScans()
        _TREE_SCANS.set(scans)
    return scans.members(tree)


async def _wait_tree(process: anyio.abc.Process, tree: ProcessTree, seconds: float) -> bool:
    """Wait up to ``seconds`` for the leader to exit and every member of its tree to be
    gone (zombies that are our children are reaped meanwhile); True if they are."""
    with anyio.move_on_after(seconds):
        await process.wait()
        while tree.alive(await _tree_members(tree)):  # noqa: ASYNC110 (no event for "tree empty")
            await anyio.sleep(TREE_POLL_SECONDS)
        return True
    return False


async def _signal_tree(process: anyio.abc.Process, tree: ProcessTree, signum: int) -> dict[int, ProcStat]:
    """Send ``signum`` to the group, and to every member of the tree outside it (once
    each); return the members."""
    members = await _tree_members(tree)
    _signal_group(process.pid, signum)
    tree.signal({pid: m for pid, m in members.items() if m.pgrp != process.pid}, signum)
    return members


def _running_trio() -> bool:
    """Whether the current task runs under trio (it is not imported unless it runs)."""
    trio: Any = sys.modules.get("trio")
    if trio is None:
        return False
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return False
    return True


async def _release(process: anyio.abc.Process, *, trio: bool) -> None:
    """Close the process's stdout and stderr and reap it (``process.aclose()``). On trio,
    once the child is reaped, its streams are closed without that call: its ``wait()``
    would take a turn of trio's per-process wait lock (a task switch per server) inside
    one more shielded cancel scope, and nothing else of the process is held (trio closes
    its pidfd at the reaping). On asyncio ``aclose()`` also closes the loop's subprocess
    transport, so it is always called there."""
    if not trio or process.returncode is None:
        await process.aclose()
        return
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            await stream.aclose()


class _PipeWriter:
    """The host's end of a server's stdin: a non-blocking pipe written with ``os.write``,
    waiting (``anyio.wait_writable``) only while the pipe is full. One ``send()`` at a time;
    ``write_now()`` only while none is in progress (the ``Link`` keeps that order)."""

    __slots__ = ("_closed", "_fd")

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._closed = False

    def write_now(self, data: bytes) -> int:
        """Bytes of ``data`` written at once (0: the pipe is full, closed or broken)."""
        if self._closed:
            return 0
        try:
            return os.write(self._fd, data)
        except OSError:  # EAGAIN, or EPIPE: the next send() meets it and reports it
            return 0

    async def send(self, data: bytes) -> None:
        """Write all of ``data``. Raises ``anyio.ClosedResourceError`` (closed by ``close()``,
        before or during the call) or ``OSError`` (``EPIPE``: the server's end is closed)."""
        view = memoryview(data)
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            try:
                written = os.write(self._fd, view)
            except BlockingIOError:
                written = 0
            view = view[written:]
            if not view:
                return
            await anyio.wait_writable(self._fd)  # ClosedResourceError if closed meanwhile

    def close(self) -> None:
        """Close the pipe (the server reads EOF); a ``send()`` waiting on it raises
        ``ClosedResourceError``. Idempotent."""
        if not self._closed:
            self._closed = True
            anyio.notify_closing(self._fd)
            os.close(self._fd)


class StdioTransport:
    """A server child process, its stdin and stdout as a line transport (``Transport``).

    Use it as ``async with StdioTransport(params) as transport:``; entering spawns the
    process and starts the stderr pump and the process watcher in a task group the
    transport owns, leaving calls ``aclose()``. Or open it with ``open_in(task_group)``
    (``OpensInGroup``: a ``Connection`` does), its two tasks in the opener's group, and
    close it with ``aclose()``. Enter and leave it in the same task. One task may ``receive()`` and one
    task may ``send()`` at a time; ``send_now()`` only while no ``send()`` is in progress;
    ``aclose()`` may be called from any task.

    Args:
        params: how to start the server.
        limits: bounds: ``max_line_bytes`` (stdout lines), ``stderr_tail_lines``,
            ``close_grace_seconds`` and ``terminate_grace_seconds`` (shutdown).
        redactor: applied to every stderr line; by default built from ``params.secrets()``.
        logger: a structlog logger; by default ``get_logger("mcpl_host.stdio")``.
        stderr_log_level: the level of stderr lines in the log (``"debug"`` ...).

    Raises:
        ValueError: an unknown ``stderr_log_level``.
    """

    def __init__(
        self,
        params: StdioParameters,
        *,
        stderr_log_level: str = "debug",
        **options: Unpack[TransportArgs],
    ) -> None:
        if stderr_log_level not in STDERR_LOG_LEVELS:
            raise ValueError(f"unknown stderr_log_level {stderr_log_level!r}")
        self._params = params
        self._limits, self._redactor, self._logger = transport_options(params, options, "mcpl_host.stdio")
        self._stderr_log_level = stderr_log_level
        self._process: anyio.abc.Process | None = None
        self._stdin: _PipeWriter | None = None
        self._pump_done = LazyEvent()  # waited on only by a close while the pump runs
        self._pump_started = False
        self._reader = LineReader(self._limits.max_line_bytes, self._limits.line_head_bytes)
        self._items: deque[ReadItem] = deque()
        self._tail: deque[str] | None = None  # made by the first stderr line (most write none)
        self._key_block = KeyBlockMasker()
        self._stdout_ended = False
        self._lost: tuple[str, int | None] | None = None  # set once stdout ended
        self._tree: ProcessTree | None = None
        self._watch_scope: anyio.CancelScope | None = None  # the watcher's current wait
        self._watch_ended = False  # the process watcher has returned
        self._watch_stopped = False  # aclose() stopped it
        self._exited_at: float | None = None  # when the watcher saw the process exit
        self._reading = False  # a read without a deadline is in progress
        self._cut_off = False  # the watcher closed stdout under it (the server had exited)
        self._life = Lifetime("a StdioTransport")
        self._trio = False  # the process runs under trio (found at the spawn; ``_release``)

    @property
    def pid(self) -> int | None:
        """The child's process id (also its process group id); None before it starts."""
        return self._process.pid if self._process is not None else None

    @property
    def exit_status(self) -> int | None:
        """The child's exit status: None while it runs (or before it starts), negative
        signal number if a signal killed it (as in ``subprocess``)."""
        return self._process.returncode if self._process is not None else None

    #: MCP 2026-07-28 may go over stdio (``CarriesStateless``).
    carries_stateless = True

    @property
    def stderr_tail(self) -> list[str]:
        """A copy of the server's last stderr lines, escaped, redacted (docs/protocol.md H5)."""
        return list(self._tail) if self._tail is not None else []

    def negotiated(self, protocol_version: str) -> None:
        """Nothing to do: this transport carries no protocol version."""

    def describe(self) -> str:
        """``"stdio:<command basename> pid=<pid>"`` (no arguments: they may hold secrets)."""
        return f"stdio:{os.path.basename(self._params.command)} pid={self.pid}"

    def __repr__(self) -> str:
        status = self.exit_status
        if self._life.closing:
            state = "closed" if self._life.closed.is_set() else "closing"
        else:
            state = "new" if self._process is None else "running" if status is None else "exited"
        return (
            f"<StdioTransport {self.describe()} {state} exit_status={status} "
            f"buffered={len(self._items)} stderr_tail={len(self.stderr_tail)}>"
        )

    async def __aenter__(self) -> StdioTransport:
        """Spawn the server and start the stderr pump.

        Raises:
            ConnectionLost: the command could not be started (not found, not executable,
                bad working directory); the message names the command.
            RuntimeError: the transport was already entered or closed.

        **Cancellation:** if cancelled after the spawn, the child is stopped and reaped.
        """
        await self._open()
        await self._life.start(self._start_tasks, self.aclose)
        return self

    async def open_in(self, task_group: anyio.abc.TaskGroup) -> StdioTransport:
        """Spawn the server, as entering does, with the stderr pump and the process
        watcher started in ``task_group`` (the opener's, ``transports.base.OpensInGroup``)
        rather than in a group of the transport's own; close it with ``aclose()``, after
        which both tasks end on their own. Instead of entering, once.

        Raises:
            ConnectionLost: the command could not be started (as ``__aenter__``).
            RuntimeError: the transport was already opened or closed.

        **Cancellation:** nothing is awaited after the spawn.
        """
        await self._open()
        try:
            await self._start_tasks(task_group)
        except BaseException:  # a task group that no longer takes tasks
            await self.aclose()
            raise
        return self

    async def _open(self) -> None:
        if self._process is not None or self._life.closing:
            raise RuntimeError("a StdioTransport can be entered only once")
        self._trio = _running_trio()
        self._process = await self._spawn()

    async def _start_tasks(self, task_group: anyio.abc.TaskGroup) -> None:
        assert self._process is not None
        # Started, not awaited to its start (no task switch, nor a nursery of anyio's
        # ``start()`` per server): a close before it first runs closes stderr, and it
        # then ends at once (``_pump_started`` tells the close not to wait for it).
        task_group.start_soon(self._pump_stderr)
        task_group.start_soon(self._watch_process, self._process)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Close (``aclose()``) and leave the task group. The close is shielded: it
        completes, then the cancellation goes on."""
        await self._life.leave(self.aclose, exc_type, exc, tb)

    async def _spawn(self) -> anyio.abc.Process:
        params = self._params
        token = process_tree.new_token()
        keep_tree = params.keep_tree and process_tree.supported()
        child_end, our_end = os.pipe()  # stdin: ours to write without a stream (module rules)
        try:
            process = await anyio.open_process(
                [params.command, *params.args], stdin=child_end, stdout=PIPE, stderr=PIPE,
                cwd=params.cwd, env=process_tree.marked_environment(child_environment(params), token),
                start_new_session=True,
            )  # fmt: skip
        except BaseException as exc:
            os.close(our_end)
            if not isinstance(exc, (OSError, ValueError)):
                raise
            reason = getattr(exc, "strerror", None) or str(exc)
            filename = getattr(exc, "filename", None)
            if params.cwd is not None and filename is not None:
                cwd = os.fsdecode(params.cwd)
                if os.fsdecode(filename) == cwd:  # subprocess names the cwd it failed on
                    reason = f"cannot use working directory {cwd!r}: {reason}"
            message = f"could not start server command {params.command!r} ({reason})"
            raise ConnectionLost(message) from None
        finally:
            os.close(child_end)
        os.set_blocking(our_end, False)
        self._stdin = _PipeWriter(our_end)
        process_tree.register_leader(process.pid)  # its exit status is ours to take
        if keep_tree:
            self._tree = ProcessTree(process.pid, token)
        return process

    async def _watch_process(self, process: anyio.abc.Process) -> None:
        """Note the tree every ``process_tree_scan_seconds`` until the server exits; then
        give the read in progress ``limits.eof_exit_wait_seconds`` for the rest of stdout."""
        interval = self._limits.process_tree_scan_seconds
        try:
            await self._watch(process, interval)
        finally:
            self._watch_ended = True

    async def _watch(self, process: anyio.abc.Process, interval: float) -> None:
        # Each wait is in a scope of its own, held as ``_watch_scope`` for aclose() to cancel
        # (there is no await between two of them): no scope around the whole watch.
        while True:
            if self._watch_stopped:  # aclose() came first
                return
            if self._tree is not None and interval > 0:
                self._tree.record()
                self._watch_scope = scope = anyio.move_on_after(interval)
            else:
                self._watch_scope = scope = anyio.CancelScope()
            with scope:
                await process.wait()
            if process.returncode is not None:
                break
            if self._watch_stopped:  # cancelled by aclose()
                return
        self._exited_at = anyio.current_time()
        if self._stdout_ended or self._life.closing:  # closing: aclose() ends the reads
            return
        # A read that started before the exit runs with no cancel scope (none is entered
        # per read): at the deadline, if it still waits, stdout is closed under it.
        self._watch_scope = scope = anyio.CancelScope(deadline=self._exit_deadline())
        with scope:
            await anyio.sleep_forever()
        if self._life.closing:  # cancelled by aclose(), which ends the reads
            return
        stdout = process.stdout
        if self._reading and not self._stdout_ended and stdout is not None:
            self._cut_off = True
            await stdout.aclose()

    def _exit_deadline(self) -> float:
        assert self._exited_at is not None
        return self._exited_at + min(self._limits.eof_exit_wait_seconds, self._limits.close_grace_seconds)

    def terminate_now(self) -> None:
        """Send SIGTERM to the server's process group now, without the stdin grace: the
        server already ended its output, and the host starts it again for ``initialize``
        within the handshake deadline (the era probe's restart, docs/protocol.md S3a).
        ``aclose()`` still stops and reaps it (SIGKILL after ``terminate_grace_seconds``)."""
        process = self._process
        if process is not None and process.returncode is None:
            _signal_group(process.pid, signal.SIGTERM)

    async def aclose(self) -> None:
        """Stop the server and release its pipes (MCP lifecycle (stdio shutdown)).

        Closes stdin; waits up to ``close_grace_seconds`` for the process group to exit;
        sends SIGTERM to the group; waits up to ``terminate_grace_seconds``; sends SIGKILL
        to the group; always reaps the child. A group whose leader has exited but that
        still has members gets the same signals. Then stops the stderr pump and closes the
        pipes. Idempotent; a second caller waits for the first to finish. Takes at most
        the two graces (seconds) plus a small epsilon. Never raises (beyond cancellation
        of a second caller while it waits).

        **Cancellation:** the whole close runs shielded: the child is always stopped and
        reaped, then the caller's cancellation takes effect at its next checkpoint.
        Another task blocked in ``send()`` or ``receive()`` gets ``ConnectionClosed``.
        """
        if not await self._life.first_close():
            return
        process = self._process
        with anyio.CancelScope(shield=True):
            try:
                if process is not None:
                    await self._stop_process(process)
            finally:
                try:
                    # Only what still runs is cancelled (each cancel costs anyio a formatted
                    # repr of the current task): the watcher has usually returned at the
                    # exit, and the pump at the end of stderr.
                    watch = self._watch_scope
                    self._watch_stopped = True
                    if not self._watch_ended and watch is not None:
                        watch.cancel()
                    stderr = process.stderr if process is not None else None
                    if not self._pump_done.is_set() and stderr is not None:
                        # Its read ends with stderr closed under it (no scope of its own).
                        await stderr.aclose()
                        if self._pump_started:  # it ends at once
                            await self._pump_done.wait()
                    if process is not None:
                        await _release(process, trio=self._trio)  # the pipes; the child reaped
                        process_tree.unregister_leader(process.pid)
                finally:
                    self._life.closed.set()

    async def _stop_process(self, process: anyio.abc.Process) -> None:
        limits, tree = self._limits, self._tree
        if tree is not None:
            # The last look below the leader while it surely runs: once stdin ends it may
            # exit at once, and its children are reparented before a later look sees them.
            tree.record()
        if self._stdin is not None:
            self._stdin.close()
        if tree is None:
            if not await _wait_group(process, limits.close_grace_seconds):
                _signal_group(process.pid, signal.SIGTERM)
                if not await _wait_group(process, limits.terminate_grace_seconds):
                    _signal_group(process.pid, signal.SIGKILL)
            await process.wait()  # reap: no zombie remains
            return
        if await _wait_tree(process, tree, limits.close_grace_seconds):
            return  # its last look found no member running and reaped the zombies of ours
        await _signal_tree(process, tree, signal.SIGTERM)
        if not await _wait_tree(process, tree, limits.terminate_grace_seconds):
            members = await _signal_tree(process, tree, signal.SIGKILL)
            await process.wait()
            with anyio.move_on_after(limits.terminate_grace_seconds):
                while tree.alive(members):  # noqa: ASYNC110 (reaping what SIGKILL ended)
                    await anyio.sleep(GROUP_POLL_SECONDS)
        await process.wait()  # reap: no zombie remains
        tree.reap(await _tree_members(tree))

    def receive_now(self) -> ReadItem | None:
        """The next line already read from stdout, as ``receive()`` would return it at once
        (``ReceivesNow``); None when none is held or the transport is closing."""
        if self._items and not self._life.closing:
            return self._items.popleft()
        return None

    async def receive(self) -> ReadItem:
        """Return the next stdout line (``bytes``, no newline, no trailing ``\\r``) or a
        ``LineTooLong`` marker for a line over ``limits.max_line_bytes`` (dropped; memory
        stays within the bound).

        At the end of stdout, an unterminated last line is returned first; then every call
        raises ``ConnectionLost`` with ``exit_status`` and ``stderr_tail`` (docs/protocol.md H5).
        To fill them it waits, at most ``limits.eof_exit_wait_seconds`` (and never more than
        ``close_grace_seconds``), for the process to exit and for stderr to end. When the
        process exits while its stdout stays open (a descendant holds it), the lines read
        within that same wait are returned, then ``ConnectionLost`` is raised as well.

        Raises:
            ConnectionLost: the server closed its stdout or exited.
            ConnectionClosed: ``aclose()`` was called (before or during this call).

        **Cancellation:** nothing is lost: lines already read stay buffered for the next
        call, and the process is left running.
        """
        while True:
            if self._life.closing:
                raise ConnectionClosed("the stdio transport was closed")
            if self._items:
                return self._items.popleft()
            if self._lost is not None:
                message, status = self._lost
                raise ConnectionLost(message, exit_status=status, stderr_tail=self.stderr_tail)
            if self._process is None or self._process.stdout is None:
                raise ConnectionClosed("the stdio transport is not open")
            if self._stdout_ended:
                await self._settle_after_eof(self._process)
                continue
            stdout = self._process.stdout
            if self._exited_at is None:  # the common case: no cancel scope per read
                self._reading = True
                try:
                    if await self._read_stdout(stdout, self._limits.read_chunk_bytes):
                        continue
                finally:
                    self._reading = False
            else:
                with anyio.CancelScope(deadline=self._exit_deadline()):
                    if await self._read_stdout(stdout, READ_CHUNK_BYTES):
                        continue
            # The process exited and its stdout stayed open past the wait (a descendant holds
            # it): it is lost all the same (T3). What is buffered of a last line is dropped.
            status = self._process.returncode
            self._lost = (_exit_message(status), status)

    async def _read_stdout(self, stdout: anyio.abc.ByteReceiveStream, size: int) -> bool:
        """One read of at most ``size`` bytes of stdout, its lines buffered: True when it gave
        bytes or stdout ended (``_stdout_ended``), False when the watcher closed stdout under
        it (the process exited and its stdout stayed open).

        Raises:
            ConnectionClosed: ``aclose()`` closed stdout under the read.
        """
        try:
            data = await stdout.receive(size)
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            self._stdout_ended = True
            self._items.extend(self._reader.finish())
            return True
        except anyio.ClosedResourceError:
            if not self._cut_off:
                raise ConnectionClosed("the stdio transport was closed") from None
            return False
        self._items.extend(self._reader.feed(data))
        return True

    async def _settle_after_eof(self, process: anyio.abc.Process) -> None:
        # A server that exits closes stdout a moment before its exit status is known: wait
        # that moment, briefly, so the failure names the status and holds the last stderr
        # lines (H5) while pending requests still fail at once (T3).
        with anyio.move_on_after(min(self._limits.eof_exit_wait_seconds, self._limits.close_grace_seconds)):
            await process.wait()
            await self._pump_done.wait()
        self._lost = (_exit_message(process.returncode), process.returncode)

    def send_now(self, data: bytes) -> int:
        """Write to stdin what the pipe takes now of ``data`` (``SendsNow``): the byte count,
        0 when it is full, closed or broken (``send()`` then reports why). Never raises."""
        stdin = self._stdin
        if stdin is None or self._life.closing:
            return 0
        return stdin.write_now(data)

    async def send(self, data: bytes) -> None:
        """Write ``data`` (one or more whole lines, each ending in ``\\n``) to stdin.

        Waits while the pipe is full (the server is not reading).

        Raises:
            ConnectionLost: the server's stdin is closed (it exited or closed it); a broken
                pipe never escapes as anything else.
            ConnectionClosed: ``aclose()`` was called (before or during this call).

        **Cancellation:** part of ``data`` may have been written; the stream is then out of
        step, so the caller should close the transport.
        """
        if self._life.closing:
            raise ConnectionClosed("the stdio transport was closed")
        if self._process is None or self._stdin is None:
            raise ConnectionClosed("the stdio transport is not open")
        try:
            await self._stdin.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            if self._life.closing:
                raise ConnectionClosed("the stdio transport was closed") from None
            # A closed stdin is most often a server exiting: wait a moment, as after EOF, so
            # the failure names its status and holds its last stderr lines (H5).
            process = self._process
            with anyio.move_on_after(min(EOF_EXIT_WAIT_SECONDS, self._limits.close_grace_seconds)):
                await process.wait()
                await self._pump_done.wait()
            status = process.returncode
            reason = "its stdin is closed" if status is None else _exit_message(status)
            message = f"could not write to the server ({reason})"
            raise ConnectionLost(message, exit_status=status, stderr_tail=self.stderr_tail) from None

    async def _pump_stderr(self) -> None:
        """Read stderr to its end, logging and keeping each line (docs/protocol.md H5, L3)."""
        self._pump_started = True
        try:
            assert self._process is not None and self._process.stderr is not None
            stderr = self._process.stderr
            reader = LineReader(min(self._limits.stderr_max_line_bytes, self._limits.max_line_bytes))
            logger, level = self._logger, self._stderr_log_level

            def log(event: str, **fields: Any) -> None:  # the logger is looked at when used
                getattr(logger, level)(event, **fields)

            while True:
                try:
                    data = await stderr.receive(self._limits.read_chunk_bytes)
                except _STDERR_ENDED:  # aclose() closes stderr under a read still waiting
                    break
                self._stderr_lines(reader.feed(data), log)
                del data  # nothing of this read is held while the next one is awaited
            self._stderr_lines(reader.finish(), log)
        finally:
            self._pump_done.set()

    def _stderr_lines(self, items: Iterable[ReadItem], log: Callable[..., None]) -> None:
        for item in items:
            self._stderr_line(item, log)

    def _stderr_line(self, item: ReadItem, log: Callable[..., None]) -> None:
        tail = self._tail
        if tail is None:
            tail = self._tail = deque(maxlen=self._limits.stderr_tail_lines)
        if isinstance(item, LineTooLong):
            tail.append(f"[stderr line longer than {item.max_line_bytes} bytes dropped]")
            log("server stderr line dropped", max_line_bytes=item.max_line_bytes)
            return
        text = self._key_block.line(item.decode("utf-8", errors="replace"))
        value = ServerValue(text, self._redactor, quotes=False)  # text: quotes stay quotes
        tail.append(str(value))  # log_value(): control characters escaped, redacted, cut
        log("server stderr", line=value)

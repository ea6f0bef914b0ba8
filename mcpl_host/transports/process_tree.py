"""Every process a stdio server starts, found and stopped when the server is closed (Linux).

Rules of this module (MCP lifecycle (stdio shutdown): the host ends what it started):

- A server leads its own session and process group (``stdio.py``), so its ordinary
  descendants share its session id. A descendant that calls ``setsid()`` leaves both, and
  when its parent exits it is reparented: to init, or, when the host is a *child subreaper*
  (``prctl(PR_SET_CHILD_SUBREAPER)``, Linux 3.4 and later), to the host, which must then
  reap it.
- A server's **tree** is found from ``/proc`` by four marks, any one of which is enough:
  its session id is the server's (every descendant that did not call ``setsid()``); its
  environment carries the server's token in ``TREE_ENV`` (a daemon that kept its
  environment, wherever it was reparented); it was seen below the server by an earlier
  ``ProcessTree.record()`` (identified by pid and start time, so a reused pid is not
  mistaken for it); or it descends from a process so marked. The host's own process is
  never a member.
- ``TREE_ENV`` holds a lineage: ``<inherited value>/<token>``. A host started by another
  host (or by a test run) keeps the outer value, so the outer host, or the test run, can
  find a whole nested tree by its own token.
- Finding the marked processes reads the environment of a process only where it may hold
  a token (``token_candidates``): one started no earlier than the leader (the token did not
  exist before), live, and neither the host's own process nor a leader the host spawned
  (``register_leader``: the host wrote those environments, each with its own token). One
  look at ``/proc`` serves several trees at once (``ProcessTree.scan``): the stdio
  transports closing together share it.
- Signals go through a pidfd opened and checked against the member's start time
  (``pidfd_send_signal``), so a pid that was reused after the scan is never signalled.
- Only members that are the host's own children (reparented to it as subreaper) are
  reaped here, each by its pid (``waitpid(pid, WNOHANG)``): a child this process spawned
  itself is never among them (its session is its own, its environment is not marked and
  it never descends from a server), so no other waiter loses an exit status.
- **Limit:** a descendant that calls ``setsid()``, clears its environment and is
  reparented before ``record()`` first sees it (a double fork under ``env -i``) is not
  found by its server's close.
- **Subreaper** (``become_child_subreaper``) is a process-wide choice, not made by the
  library: every orphan of every child of the process is then reparented to it, and
  becomes its zombie when it exits. An application that owns all its children (the
  ``mcpl-host`` command line) makes it, reaps what is reparented to it (``reap_strays``:
  zombie children that are not the leader of a live transport, ``register_leader``) and,
  once every server is closed, ends every descendant left (``end_descendants``): with that,
  no process a server started outlives the host, whatever marks it lost.

Everything here is Linux-only; ``supported()`` says whether ``/proc`` is there. Elsewhere
the stdio transport signals the process group only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "PR_SET_CHILD_SUBREAPER",
    "TREE_ENV",
    "ProcStat",
    "ProcessTree",
    "TableIndex",
    "become_child_subreaper",
    "end_descendants",
    "is_child_subreaper",
    "reap_strays",
    "register_leader",
    "unregister_leader",
    "lineage",
    "marked_environment",
    "new_token",
    "parse_stat",
    "supported",
    "token_candidates",
    "tree_members",
    "tree_tokens",
]

#: The environment variable that carries the tree lineage to every server.
TREE_ENV = "MCPL_HOST_TREE"
#: Lineage segments kept from an inherited ``TREE_ENV`` (the newest ones).
MAX_LINEAGE_SEGMENTS = 16
#: prctl(2) option numbers (linux/prctl.h).
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37

_TREE_PREFIX = TREE_ENV.encode() + b"="
_subreaper: bool | None = None  # None: not tried yet in this process
_live_leaders: set[int] = set()  # pids of children whose exit status a transport awaits


def supported() -> bool:
    """True on Linux with ``/proc`` mounted: the tree can be found and kept."""
    return sys.platform.startswith("linux") and os.path.isdir("/proc/self/task")


def _prctl(option: int, arg: int) -> int:
    import ctypes  # only where the subreaper is asked for (import time and memory)

    libc = ctypes.CDLL(None, use_errno=True)
    result = int(libc.prctl(option, arg, 0, 0, 0))
    if result < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return result


def become_child_subreaper() -> bool:
    """Make this process a child subreaper (Linux ``prctl(PR_SET_CHILD_SUBREAPER, 1)``), so
    that orphaned descendants of its servers are reparented to it instead of to init.

    Process-wide and done at most once (later calls return the first outcome). Returns
    True if this process is now a subreaper, False where that is not available (not
    Linux, or the call failed). Never raises.

    Side effect: orphans of *every* child of this process are reparented to it, and
    nothing in Python waits for them; call ``reap_strays`` now and then, and
    ``end_descendants`` at the end, if this process owns all its children.
    """
    global _subreaper
    if _subreaper is None:
        try:
            _subreaper = sys.platform.startswith("linux") and _prctl(PR_SET_CHILD_SUBREAPER, 1) == 0
        except (OSError, AttributeError):
            _subreaper = False
    return _subreaper


def is_child_subreaper() -> bool:
    """Whether this process is a child subreaper now (False where that cannot be asked)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    flag = ctypes.c_int(0)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0)) == 0 and bool(flag.value)
    except (OSError, AttributeError):
        return False


def register_leader(pid: int) -> None:
    """Note a child whose exit status a transport (anyio) awaits: ``reap_strays`` leaves it."""
    _live_leaders.add(pid)


def unregister_leader(pid: int) -> None:
    """The child ``pid`` has been reaped by its owner."""
    _live_leaders.discard(pid)


def reap_strays() -> int:
    """Reap every zombie child of this process that is not a registered leader: orphans
    reparented to this process as a subreaper. Only for a process that owns all its
    children (another part of it may await one of them). Returns how many were reaped;
    never raises."""
    reaped = 0
    for pid in children_of(os.getpid()):
        stat = read_stat(pid)
        if stat is not None and stat.state == "Z" and pid not in _live_leaders:
            with contextlib.suppress(ChildProcessError, OSError):
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    reaped += 1
    return reaped


def descendants(pid: int) -> dict[int, ProcStat]:
    """Every live or zombie process below ``pid``, by pid (walking ``children_of``)."""
    found: dict[int, ProcStat] = {}
    stack = children_of(pid)
    while stack:
        child = stack.pop()
        if child in found:
            continue
        stat = read_stat(child)
        if stat is not None:
            found[child] = stat
            stack.extend(children_of(child))
    return found


def end_descendants() -> int:
    """SIGKILL every process still below this one and reap those that are its children;
    for a process that owns all its children, once every server is closed (the transports
    have reaped their leaders). Returns how many were killed; never raises."""
    left = {pid: stat for pid, stat in descendants(os.getpid()).items() if stat.state != "Z"}
    for stat in left.values():
        _signal_process(stat, signal.SIGKILL)
    for _ in range(100):  # SIGKILL is prompt; a zombie needs its parent (or us) to reap it
        reap_strays()
        if not any(s.state != "Z" for s in descendants(os.getpid()).values()):
            break
        time.sleep(0.01)
    reap_strays()
    return len(left)


# --- the marker -------------------------------------------------------------------------------


def new_token() -> str:
    """A fresh token naming one server's tree: ``<host pid>.<16 hex digits>``."""
    return f"{os.getpid()}.{os.urandom(8).hex()}"  # what secrets.token_hex(8) returns


def lineage(inherited: str | None, token: str) -> str:
    """The ``TREE_ENV`` value for a server: the inherited lineage (its newest
    ``MAX_LINEAGE_SEGMENTS - 1`` segments) followed by ``token``."""
    segments = [s for s in (inherited or "").split("/") if s][-(MAX_LINEAGE_SEGMENTS - 1) :]
    return "/".join([*segments, token])


def marked_environment(env: Mapping[str, str], token: str) -> dict[str, str]:
    """``env`` with ``TREE_ENV`` set to the lineage of this process's own value and ``token``."""
    return {**env, TREE_ENV: lineage(os.environ.get(TREE_ENV), token)}


def tree_tokens(environ: bytes) -> tuple[str, ...]:
    """The lineage segments of ``TREE_ENV`` in a ``/proc/<pid>/environ`` image (entries
    separated by NUL bytes); empty if it is not set."""
    for entry in environ.split(b"\0"):
        if entry.startswith(_TREE_PREFIX):
            value = entry[len(_TREE_PREFIX) :].decode("utf-8", "replace")
            return tuple(s for s in value.split("/") if s)
    return ()


# --- /proc ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` used here (proc(5)): ``state`` (``"Z"``: a zombie),
    ``ppid``, ``pgrp``, ``session`` and ``start`` (start time, clock ticks after boot)."""

    pid: int
    state: str
    ppid: int
    pgrp: int
    session: int
    start: int

    @property
    def identity(self) -> tuple[int, int]:
        """``(pid, start)``: names one process even after its pid is reused."""
        return (self.pid, self.start)


def parse_stat(data: bytes) -> ProcStat | None:
    """Parse one ``/proc/<pid>/stat`` line; None if it is not one. The command name (field
    2) may hold spaces and parentheses, so the fields are read after its last ``)``."""
    head, sep, rest = data.rpartition(b")")
    if not sep:
        return None
    fields = rest.split()
    try:
        pid = int(head.split(b"(", 1)[0])
        return ProcStat(
            pid=pid,
            state=fields[0].decode("ascii", "replace"),
            ppid=int(fields[1]),
            pgrp=int(fields[2]),
            session=int(fields[3]),
            start=int(fields[19]),
        )
    except (ValueError, IndexError):
        return None


def read_stat(pid: int) -> ProcStat | None:
    """``/proc/<pid>/stat`` parsed, or None if that process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return parse_stat(f.read())
    except OSError:
        return None


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def process_table() -> dict[int, ProcStat]:
    """Every process this one can see, by pid."""
    table: dict[int, ProcStat] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = read_stat(int(entry))
            if stat is not None:
                table[stat.pid] = stat
    return table


def children_of(pid: int) -> list[int]:
    """The direct children of ``pid`` (``/proc/<pid>/task/<tid>/children``, every thread)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        found.extend(int(child) for child in _read(f"/proc/{pid}/task/{tid}/children").split())
    return found


# --- the decision -----------------------------------------------------------------------------


class TableIndex:
    """A process table's pids by session id (``sessions``) and by parent (``children``),
    built once for every tree looked up in it (``tree_members``). Pure."""

    __slots__ = ("children", "sessions")

    def __init__(self, table: Mapping[int, ProcStat]) -> None:
        self.children: dict[int, list[int]] = {}
        self.sessions: dict[int, list[int]] = {}
        for pid, stat in table.items():
            self.children.setdefault(stat.ppid, []).append(pid)
            self.sessions.setdefault(stat.session, []).append(pid)


def tree_members(
    table: Mapping[int, ProcStat],
    *,
    leader: tuple[int, int],
    recorded: Iterable[tuple[int, int]] = (),
    marked: Iterable[int] = (),
    exclude: Iterable[int] = (),
    index: TableIndex | None = None,
) -> set[int]:
    """The pids of one server's tree in ``table`` (see the module rules).

    Args:
        table: processes by pid (``process_table()``).
        leader: the server's ``(pid, start)``; its pid is also its session id.
        recorded: identities seen below the server earlier (``ProcessTree.record()``).
        marked: pids whose environment carries the server's token.
        exclude: pids never to include nor to descend through (this process: its other
            children are members only when marked themselves).
        index: ``TableIndex(table)``, when several trees are looked up in one table.

    Returns:
        the members, zombies included (they may need reaping); never raises.
    """
    if index is None:
        index = TableIndex(table)
    leader_pid, leader_start = leader
    holder = table.get(leader_pid)
    # The session id names the tree unless the leader's pid now belongs to someone else.
    session = leader_pid if holder is None or holder.start == leader_start else None
    excluded = set(exclude)
    seeds: set[int] = set(index.sessions.get(session, ())) if session is not None else set()
    for pid, start in (*recorded, leader):
        stat = table.get(pid)
        if stat is not None and stat.start == start:
            seeds.add(pid)
    seeds |= {pid for pid in marked if pid in table}
    children = index.children
    members: set[int] = set()
    stack = [pid for pid in seeds if pid not in excluded]
    while stack:
        pid = stack.pop()
        if pid in members:
            continue
        members.add(pid)
        stack.extend(child for child in children.get(pid, ()) if child not in excluded)
    return members


def token_candidates(table: Mapping[int, ProcStat], *, since: int, exclude: Iterable[int] = ()) -> list[int]:
    """The pids in ``table`` whose environment may carry the token of a tree whose leader
    started at ``since`` (clock ticks after boot; -1: unknown, every process): live ones
    started then or later, other than ``exclude`` (module rules). Pure; never raises."""
    excluded = set(exclude)
    return [
        pid
        for pid, stat in table.items()
        if stat.start >= since and stat.state != "Z" and pid not in excluded
    ]


# --- the I/O shell ----------------------------------------------------------------------------


class ProcessTree:
    """One server's process tree (Linux; see the module rules).

    Create it right after the spawn with the leader's pid and the ``token`` the server was
    started with (``marked_environment``). ``record()`` notes the current descendants
    (cheap: it walks down from the leader); ``members()`` finds the whole tree (one scan of
    ``/proc``); ``signal()``, ``alive()`` and ``reap()`` act on a set of members.
    """

    __slots__ = ("_leader", "_recorded", "_token")

    def __init__(self, leader_pid: int, token: str) -> None:
        stat = read_stat(leader_pid)
        self._leader = (leader_pid, stat.start if stat is not None else -1)
        self._token = token
        self._recorded: set[tuple[int, int]] = set()

    @property
    def token(self) -> str:
        return self._token

    def record(self) -> None:
        """Note every live descendant of the leader, so that one that later leaves the
        session and loses its parent is still known. Never raises."""
        leader = read_stat(self._leader[0])
        if leader is None or leader.start != self._leader[1] or leader.state == "Z":
            return
        me = os.getpid()
        stack, seen = children_of(leader.pid), {leader.pid}
        while stack:
            pid = stack.pop()
            if pid in seen or pid == me:
                continue
            seen.add(pid)
            stat = read_stat(pid)
            if stat is not None:
                self._recorded.add(stat.identity)
                stack.extend(children_of(pid))

    def members(self) -> dict[int, ProcStat]:
        """Every member of the tree now (zombies included), by pid. Never raises."""
        return ProcessTree.scan([self])[0]

    @staticmethod
    def scan(trees: Sequence[ProcessTree]) -> list[dict[int, ProcStat]]:
        """``members()`` of each of ``trees``, in order, from one look at ``/proc``: the
        process table read once, and the environment of each ``token_candidates`` process
        once (module rules). Never raises."""
        if not trees:
            return []
        table = process_table()
        me = os.getpid()
        since = min(tree._leader[1] for tree in trees)
        tokens = {
            pid: tree_tokens(_read(f"/proc/{pid}/environ"))
            for pid in token_candidates(table, since=since, exclude={me, *_live_leaders})
        }
        index = TableIndex(table)
        found: list[dict[int, ProcStat]] = []
        for tree in trees:
            marked = [pid for pid, held in tokens.items() if tree._token in held]
            pids = tree_members(
                table, leader=tree._leader, recorded=tree._recorded, marked=marked, exclude={me}, index=index
            )
            found.append({pid: table[pid] for pid in pids})
        return found

    def signal(self, members: Mapping[int, ProcStat], signum: int) -> None:
        """Send ``signum`` to every live member that is still the process scanned."""
        for stat in members.values():
            if stat.state != "Z":
                _signal_process(stat, signum)

    def alive(self, members: Mapping[int, ProcStat]) -> bool:
        """Whether any of ``members`` still runs (a zombie does not). Reaps the zombies that
        are this process's children (and not the leader, which its owner reaps)."""
        running = False
        for stat in members.values():
            now = read_stat(stat.pid)
            if now is None or now.start != stat.start:
                continue
            if now.state == "Z":
                self._reap(now)
            else:
                running = True
        return running

    def reap(self, members: Mapping[int, ProcStat]) -> None:
        """Reap every member that is a zombie child of this process."""
        self.alive(members)

    def _reap(self, stat: ProcStat) -> None:
        if stat.ppid == os.getpid() and stat.pid != self._leader[0]:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(stat.pid, os.WNOHANG)


def _signal_process(stat: ProcStat, signum: int) -> None:
    """Signal the process ``stat`` describes, never another that took its pid since."""
    try:
        fd = os.pidfd_open(stat.pid)
    except OSError as exc:
        if exc.errno not in (errno.ENOSYS, errno.EINVAL, errno.EPERM):
            return  # ESRCH: it is gone
        now = read_stat(stat.pid)
        if now is not None and now.start == stat.start:
            with contextlib.suppress(OSError):
                os.kill(stat.pid, signum)
        return
    try:
        now = read_stat(stat.pid)
        if now is not None and now.start == stat.start:  # the pidfd holds this very process
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(fd, signum)
    finally:
        os.close(fd)

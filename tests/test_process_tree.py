"""The whole process tree of a stdio server: found, signalled and reaped on close (Linux).

Rules under test: ``mcpl_host.transports.process_tree`` (its pure parts with plain calls),
and ``StdioTransport`` with ``keep_tree`` against real fixture processes that start a
daemon calling ``setsid()`` (``fixtures/proc_daemon.py``), on asyncio and trio.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from typing import Any

import anyio
import pytest

from mcpl_host.limits import Limits
from mcpl_host.transports import process_tree, stdio
from mcpl_host.transports.process_tree import (
    TREE_ENV,
    ProcessTree,
    ProcStat,
    TableIndex,
    lineage,
    parse_stat,
    token_candidates,
    tree_members,
    tree_tokens,
)
from mcpl_host.transports.stdio import StdioParameters, StdioTransport

from .conftest import FIXTURES

linux_only = pytest.mark.skipif(not process_tree.supported(), reason="the process tree is kept on Linux only")
TIMEOUT = 15
SHORT = Limits(close_grace_seconds=0.3, terminate_grace_seconds=0.3)


def stat(pid: int, ppid: int, session: int, start: int = 100, state: str = "S") -> ProcStat:
    return ProcStat(pid=pid, state=state, ppid=ppid, pgrp=session, session=session, start=start)


# -- pure parts -------------------------------------------------------------------------------


def test_parse_stat_reads_fields_after_a_command_name_with_parentheses() -> None:
    line = b"4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 " + b"0 " * 12 + b"987654 0 0\n"
    parsed = parse_stat(line)
    assert parsed == ProcStat(pid=4242, state="S", ppid=1, pgrp=4242, session=4242, start=987654)
    assert parse_stat(b"garbage") is None and parse_stat(b"1 (x) S") is None


def test_parse_stat_of_this_process() -> None:
    with open("/proc/self/stat", "rb") as f:
        me = parse_stat(f.read())
    assert me is not None and me.pid == os.getpid() and me.ppid == os.getppid()


def test_lineage_keeps_the_inherited_value_and_is_bounded() -> None:
    assert lineage(None, "t1") == "t1"
    assert lineage("outer", "t1") == "outer/t1"
    long = "/".join(f"s{i}" for i in range(40))
    assert lineage(long, "mine").split("/")[-1] == "mine"
    assert len(lineage(long, "mine").split("/")) == process_tree.MAX_LINEAGE_SEGMENTS
    environ = b"A=1\0" + TREE_ENV.encode() + b"=outer/t1\0B=2\0"
    assert tree_tokens(environ) == ("outer", "t1")
    assert tree_tokens(b"A=1\0") == ()


def test_tree_members_by_session_record_mark_and_descent() -> None:
    table = {
        10: stat(10, 1, 10),  # the leader
        11: stat(11, 10, 10),  # an ordinary child: same session
        12: stat(12, 99, 12),  # setsid daemon, reparented to the host (99), recorded
        13: stat(13, 12, 12),  # its child
        14: stat(14, 99, 14),  # setsid daemon carrying the token
        15: stat(15, 1, 15),  # unrelated
        99: stat(99, 1, 99),  # the host itself
    }
    members = tree_members(table, leader=(10, 100), recorded={(12, 100)}, marked={14}, exclude={99})
    assert members == {10, 11, 12, 13, 14}


def test_tree_members_never_take_a_reused_pid() -> None:
    table = {
        10: stat(10, 1, 10, start=555),  # the leader's pid, now another session leader
        11: stat(11, 10, 10, start=556),
        12: stat(12, 99, 12, start=777),  # the recorded pid, now another process
    }
    assert tree_members(table, leader=(10, 100), recorded={(12, 100)}) == set()


def test_tree_members_never_include_the_excluded_process_nor_descend_through_it() -> None:
    # The host (99) below the leader, with a child of its own (another server): neither.
    table = {10: stat(10, 1, 10), 99: stat(99, 10, 99), 100: stat(100, 99, 100)}
    assert tree_members(table, leader=(10, 100), exclude={99}) == {10}


def test_one_index_serves_every_tree_of_a_table() -> None:
    table = {
        10: stat(10, 1, 10),
        11: stat(11, 10, 10),
        12: stat(12, 1, 10),  # an orphan of 10's tree, still in its session
        20: stat(20, 1, 20),
        21: stat(21, 99, 21),  # setsid daemon of 20, carrying its token
        22: stat(22, 21, 21),
        99: stat(99, 1, 99),
    }
    index = TableIndex(table)
    first = tree_members(table, leader=(10, 100), exclude={99}, index=index)
    second = tree_members(table, leader=(20, 100), marked={21}, exclude={99}, index=index)
    assert (first, second) == ({10, 11, 12}, {20, 21, 22})
    assert second == tree_members(table, leader=(20, 100), marked={21}, exclude={99})


def test_token_candidates_are_live_processes_started_with_the_leader_or_later_but_the_excluded() -> None:
    table = {
        5: stat(5, 1, 5, start=50),  # older than the leader: the token did not exist yet
        10: stat(10, 1, 10, start=100),  # the leader (same tick)
        11: stat(11, 10, 10, start=101),
        12: stat(12, 10, 10, start=102, state="Z"),  # a zombie has no environment left
        13: stat(13, 99, 13, start=103),  # another server this host spawned (excluded)
        99: stat(99, 1, 99, start=10),
    }
    assert sorted(token_candidates(table, since=100, exclude={99, 13})) == [10, 11]
    assert sorted(token_candidates(table, since=-1)) == [5, 10, 11, 13, 99]  # start unknown: all


class _FakeScans:
    """``ProcessTree.scan`` replaced: records each look's trees, answers each tree by name."""

    def __init__(self) -> None:
        self.looks: list[list[str]] = []

    def __call__(self, trees: list[ProcessTree]) -> list[dict[int, ProcStat]]:
        self.looks.append([tree.token for tree in trees])
        return [{int(tree.token): stat(int(tree.token), 1, 1)} for tree in trees]


def _tree(number: int) -> ProcessTree:
    return ProcessTree(2**22 + number, str(number))  # a pid above the default pid_max: none


@pytest.fixture
def looks(monkeypatch: pytest.MonkeyPatch) -> _FakeScans:
    fake = _FakeScans()
    monkeypatch.setattr(ProcessTree, "scan", staticmethod(fake))
    return fake


@pytest.mark.anyio
async def test_transports_asking_together_share_one_look_and_each_gets_its_own_tree(
    looks: _FakeScans,
) -> None:
    answers: dict[int, dict[int, ProcStat]] = {}

    async def ask(number: int) -> None:
        answers[number] = await stdio._tree_members(_tree(number))

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            for number in range(5):
                tg.start_soon(ask, number)
    assert [sorted(look) for look in looks.looks] == [["0", "1", "2", "3", "4"]]  # trio: any order
    assert answers == {n: {n: stat(n, 1, 1)} for n in range(5)}


@pytest.mark.anyio
async def test_an_ask_after_a_look_gets_a_look_of_its_own(looks: _FakeScans) -> None:
    with anyio.fail_after(TIMEOUT):
        await stdio._tree_members(_tree(1))
        await stdio._tree_members(_tree(1))  # within the gap: it waits for a new look
    assert looks.looks == [["1"], ["1"]]


@pytest.mark.anyio
async def test_the_asker_making_the_look_answers_the_others_when_cancelled(
    looks: _FakeScans, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stdio, "TREE_SCAN_GAP_SECONDS", 3600.0)  # the next look waits for ever
    await stdio._tree_members(_tree(0))  # a look just happened
    answered: dict[int, dict[int, ProcStat]] = {}
    scopes: list[anyio.CancelScope] = []

    async def ask(number: int) -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            answered[number] = await stdio._tree_members(_tree(number))

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, 1)  # makes the next look: waits for the gap
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(ask, 2)  # waits for that look
            await anyio.wait_all_tasks_blocked()
            scopes[0].cancel()  # the maker goes away: it looks at once, for both
    assert [sorted(look) for look in looks.looks] == [["0"], ["1", "2"]]
    assert answered == {2: {2: stat(2, 1, 1)}}


# -- real processes ---------------------------------------------------------------------------


def daemon_server(mode: str, *extra: str, keep_tree: bool = True) -> StdioParameters:
    return StdioParameters(
        sys.executable, (str(FIXTURES / "proc_daemon.py"), mode, *extra), keep_tree=keep_tree
    )


async def announced_daemon(t: StdioTransport) -> int:
    line = await t.receive()
    assert isinstance(line, bytes), line
    pid = json.loads(line)["daemon"]
    assert isinstance(pid, int)
    return pid


def session_of(pid: int) -> int:
    found = process_tree.read_stat(pid)
    assert found is not None
    return found.session


async def wait_gone(pidfd: int) -> None:
    with anyio.fail_after(TIMEOUT):
        await anyio.wait_readable(pidfd)  # readable: the process has exited


def kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, 9)
    except OSError:
        pass


@linux_only
@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["double-fork", "setsid-child", "setsid-child-clean-env"])
async def test_a_daemon_that_left_the_session_is_killed_on_close(mode: str) -> None:
    with anyio.fail_after(TIMEOUT):
        async with StdioTransport(daemon_server(mode), limits=SHORT) as t:
            daemon = await announced_daemon(t)
            assert session_of(daemon) != t.pid  # it escaped the group and the session
            pidfd = os.pidfd_open(daemon)
            assert select.select([pidfd], [], [], 0)[0] == []  # alive before the close
    try:
        await wait_gone(pidfd)  # it has exited (init reaps it: this process is no subreaper)
    finally:
        os.close(pidfd)


@linux_only
@pytest.mark.anyio
async def test_the_daemons_of_servers_closed_together_are_all_killed() -> None:
    # Their closes share looks at /proc; each daemon is found by its own server's token
    # only (reparented to init, out of every session the host knows).
    pidfds: list[int] = []

    async def serve(ready: anyio.Event, stop: anyio.Event) -> None:
        async with StdioTransport(daemon_server("double-fork"), limits=SHORT) as t:
            daemon = await announced_daemon(t)
            assert session_of(daemon) != t.pid
            pidfds.append(os.pidfd_open(daemon))
            ready.set()
            await stop.wait()

    stop = anyio.Event()
    try:
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                for _ in range(4):
                    ready = anyio.Event()
                    tg.start_soon(serve, ready, stop)
                    await ready.wait()
                assert not any(select.select(pidfds, [], [], 0)[0])  # every daemon alive
                stop.set()  # the four close at once
        for pidfd in pidfds:
            await wait_gone(pidfd)
    finally:
        for pidfd in pidfds:
            os.close(pidfd)


@linux_only
@pytest.mark.anyio
async def test_a_daemon_whose_server_exited_first_is_killed_on_close() -> None:
    """The server exits, leaving its clean-environment daemon: only the record finds it."""
    limits = Limits(close_grace_seconds=0.3, terminate_grace_seconds=0.3, process_tree_scan_seconds=0)
    with anyio.fail_after(TIMEOUT):
        async with StdioTransport(daemon_server("setsid-child-clean-env", "then-exit"), limits=limits) as t:
            daemon = await announced_daemon(t)
            assert t._tree is not None
            t._tree.record()  # white-box: what the periodic look does
            pidfd = os.pidfd_open(daemon)
            await t.send(b"exit\n")
            with pytest.raises(Exception):  # noqa: B017 (ConnectionLost: it exited)
                while True:
                    await t.receive()
            assert process_tree.read_stat(daemon) is not None  # the daemon lives on
    try:
        await wait_gone(pidfd)
    finally:
        os.close(pidfd)


@linux_only
@pytest.mark.anyio
async def test_without_keep_tree_only_the_group_is_signalled() -> None:
    with anyio.fail_after(TIMEOUT):
        async with StdioTransport(daemon_server("setsid-child", keep_tree=False), limits=SHORT) as t:
            daemon = await announced_daemon(t)
    try:
        assert process_tree.read_stat(daemon) is not None  # it survived the close
    finally:
        kill_quietly(daemon)
        pidfd_reap(daemon)


def pidfd_reap(pid: int) -> None:
    """Wait for ``pid`` to exit and reap it if it is our child (we may be its subreaper)."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        select.select([fd], [], [], TIMEOUT)
    finally:
        os.close(fd)
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def test_marked_environment_sets_the_lineage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TREE_ENV, "outer")
    env: dict[str, Any] = process_tree.marked_environment({"A": "1"}, "tok")
    assert env == {"A": "1", TREE_ENV: "outer/tok"}


DOUBLE_FORK = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.write(1, b"%d\\n" % os.getpid())
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        time.sleep(3600)
    os._exit(0)
os.wait()
"""


@linux_only
def test_the_leftover_check_sees_a_setsid_escapee_by_its_marker() -> None:
    """tests/conftest.py would fail the run over a daemon that left every process group."""
    from . import conftest

    # Started as any test child is, outside every host: it inherits the session's marker.
    done = subprocess.run([sys.executable, "-c", DOUBLE_FORK], capture_output=True, timeout=TIMEOUT)
    daemon = int(done.stdout)
    try:
        found = conftest._leftovers(os.getpid(), set())
        assert daemon in found and "marked by this session" in found[daemon]
        assert process_tree.read_stat(daemon) is not None
        assert session_of(daemon) != os.getpid()
    finally:
        kill_quietly(daemon)
        pidfd_reap(daemon)
    assert daemon not in conftest._leftovers(os.getpid(), set())


@linux_only
@pytest.mark.parametrize("subreaper", [True, False])
def test_the_command_line_ends_even_a_daemon_that_lost_every_mark(tmp_path: Any, subreaper: bool) -> None:
    """A double fork under an empty environment: only the subreaper's final sweep finds it."""
    from .test_cli import CLI

    pid_file = tmp_path / "daemon.pid"
    command = [sys.executable, str(FIXTURES / "proc_daemon.py"), "double-fork-clean-env", str(pid_file)]
    options = ["--timeout", "1"] + ([] if subreaper else ["--no-subreaper"])
    done = subprocess.run(
        [*CLI, "probe", "--json", *options, "--", *command], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1, done.stderr  # it never answers initialize
    daemon = int(pid_file.read_text())
    try:
        if subreaper:
            assert process_tree.read_stat(daemon) is None  # killed and reaped by the CLI
            assert "killed 1 process(es) the servers left behind" in done.stderr
        else:
            alive = process_tree.read_stat(daemon)
            assert alive is not None and alive.state != "Z"  # what --no-subreaper gives up
    finally:
        kill_quietly(daemon)

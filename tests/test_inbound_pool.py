"""The decisions of the inbound pool (``mcpl_host.inbound``), by plain calls: when one more
worker starts, when the read loop pauses (back-pressure), and when a request read past the
pause is answered "host busy" (docs/architecture.md, the push path, hops 6-7). The pool at
work, over real pipes, is tested in test_core_connection.py and test_routing.py; what a
worker keeps of a job once it is answered is measured here, with a stand-in transport."""

from __future__ import annotations

from typing import Any

import pytest

from mcpl_host.inbound import over_backlog, reader_pauses, starts_worker
from mcpl_host.limits import Limits


def test_a_worker_starts_for_a_waiting_job_when_none_is_starting() -> None:
    # starts_worker(waiting, workers, starting, max_workers)
    assert starts_worker(1, 0, 0, 4)
    assert starts_worker(3, 2, 0, 4)


def test_no_worker_starts_without_a_waiting_job() -> None:
    assert not starts_worker(0, 0, 0, 4)


def test_workers_start_one_at_a_time() -> None:
    # A worker started and not yet running may take the job itself: jobs that never wait
    # are run back to back by one worker, with no task started each.
    assert not starts_worker(5, 1, 1, 4)


def test_never_more_workers_than_the_bound() -> None:
    assert not starts_worker(5, 4, 0, 4)
    assert not starts_worker(5, 0, 0, 0)


def test_the_reader_pauses_while_the_queue_is_full() -> None:
    assert not reader_pauses(3, 0, 4)
    assert reader_pauses(4, 0, 4)
    assert reader_pauses(9, 0, 4)


def test_the_reader_goes_on_while_a_job_awaits_an_answer_from_its_server() -> None:
    # That answer must be read: a handler calling back into its server cannot deadlock.
    assert not reader_pauses(9, 1, 4)


def test_host_busy_only_beyond_the_backlog() -> None:
    assert not over_backlog(4, 4, 2)
    assert not over_backlog(5, 4, 2)
    assert over_backlog(6, 4, 2)
    assert over_backlog(4, 4, 0)


@pytest.mark.parametrize(("queued", "pause_at"), [(0, 1), (16, 16)])
def test_the_pool_pauses_at_the_bound_and_at_least_at_one(queued: int, pause_at: int) -> None:
    from mcpl_host.inbound import InboundPool
    from mcpl_host.logging import Redactor, get_logger

    pool = InboundPool(
        Limits(max_queued_inbound=queued), log=get_logger("test"), redactor=Redactor(), is_open=lambda: False
    )
    assert pool.pause_at == pause_at  # a bound of 0 still reads
    assert pool.start_job(_never) is False  # not open: refused
    assert pool.waiting == 0 and pool.running == 0 and not pool.in_job()


async def _never() -> None:
    raise AssertionError("never started")


class _SentAtOnce:
    """A transport that takes every line at once (``SendsNow``), kept in ``lines``."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def send_now(self, data: bytes) -> int:
        self.lines.append(bytes(data))
        return len(data)


@pytest.mark.anyio
async def test_an_answer_at_once_over_the_outbox_bound_is_answered_internal_error(
    logs: list[dict[str, Any]],
) -> None:
    # The read loop's answer (``EagerJob.now``) goes through the same bound as a worker's:
    # over ``max_outbox_bytes`` it is not sent, and -32603 is, on the same link (logged).
    import json
    from typing import cast

    from mcpl_host.inbound import EagerJob, InboundPool
    from mcpl_host.jsonrpc.envelope import Request
    from mcpl_host.link import Link
    from mcpl_host.logging import Redactor, get_logger

    pipe = _SentAtOnce()
    link = Link(cast(Any, pipe), max_outbox_bytes=200, on_lost=_never_lost)
    pool = InboundPool(Limits(), log=get_logger("test"), redactor=Redactor(), is_open=lambda: True)
    too_large = b'{"accepted":false,"reason":"' + b"x" * 300 + b'"}'
    pool.queue(Request(7, "push/event", {}), EagerJob(lambda _: too_large, _never_job), link)
    assert [json.loads(line) for line in pipe.lines] == [
        {"jsonrpc": "2.0", "id": 7, "error": {"code": -32603, "message": "Internal error"}}
    ]
    assert [entry["event"] for entry in logs] == ["an answer is too large to send; answering -32603 instead"]
    assert pool.waiting == 0 and pool.running == 0


def _never_lost(exc: BaseException) -> None:
    raise AssertionError(f"the link was lost: {exc!r}")


async def _never_job(request: object) -> None:
    raise AssertionError("never run")


class _SentAndDropped:
    """A transport that takes every line at once (``SendsNow``) and keeps none."""

    def send_now(self, data: bytes) -> int:
        return len(data)


@pytest.mark.anyio
@pytest.mark.parametrize("next_job", ["request", "background"])
async def test_a_worker_keeps_nothing_of_the_last_job_while_it_runs_the_next(next_job: str) -> None:
    # A worker runs job after job: while the next one waits (for the user, say), nothing of
    # the last one (its 8 MiB request, its 8 MiB result and answer, answered and dropped) is
    # kept, whether the next is a server request's job or a background job.
    from typing import cast

    import anyio

    from mcpl_host.inbound import InboundPool
    from mcpl_host.jsonrpc.envelope import Request
    from mcpl_host.link import Link
    from mcpl_host.logging import Redactor, get_logger

    from .memory import kept_bytes

    big = 8 * 2**20
    release = anyio.Event()

    async def answer_big(request: object) -> object:
        return {"blob": "x" * big}

    async def wait(request: object) -> object:
        await release.wait()
        return {}

    async def wait_in_background() -> None:
        await release.wait()

    link = Link(cast(Any, _SentAndDropped()), max_outbox_bytes=4 * big, on_lost=_never_lost)
    pool = InboundPool(Limits(), log=get_logger("test"), redactor=Redactor(), is_open=lambda: True)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            pool.open(tg, anyio.Event)
            with kept_bytes() as kept:
                pool.queue(Request(1, "test/big", {"blob": "y" * big}), answer_big, link)
                if next_job == "request":
                    pool.queue(Request(2, "test/wait", {}), wait, link)
                else:
                    assert pool.start_job(wait_in_background)
                await anyio.wait_all_tasks_blocked()  # the first answered, the second waiting
            assert pool.running == 1
            release.set()
    assert kept.bytes < 2**20, f"{kept.bytes} bytes kept after the job was answered"

"""The decisions of the inbound pool (``mcpl_host.inbound``), by plain calls: when one more
worker starts, when the read loop pauses (back-pressure), and when a request read past the
pause is answered "host busy" (docs/architecture.md, the push path, hops 6-7). The pool at
work, over real pipes, is tested in test_core_connection.py and test_routing.py."""

from __future__ import annotations

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

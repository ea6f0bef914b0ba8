"""The wake rules (``mcpl_host.mcpl.wake``; MCPL RFC-006 rev 8 §4.2), by plain calls: the
quiet period, debounce of a qualifying replacement without a second wake, the finite
postponement bound, withdrawal by a non-qualifying replacement or a retraction, the
independence of unrelated causes (vector 44), and what a drain retires (docs/protocol.md
EC15). ``now`` is a number of seconds; nothing here reads a clock."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpl_host.mcpl.coalescing import SubjectKey
from mcpl_host.mcpl.wake import WakePolicy, WakeSchedule

K: SubjectKey = ("server", "featureSet", "doc", "K")
J: SubjectKey = ("server", "featureSet", "doc", "J")
POLICY = WakePolicy(quiet_seconds=0.3, max_postpone_seconds=1.0)


def test_an_ordinary_cause_is_due_its_quiet_period_after_it_arrived() -> None:
    schedule = WakeSchedule(POLICY)
    cause = schedule.ordinary(5.0, qualifies=True)
    assert cause is not None and cause.due == pytest.approx(5.3)
    assert schedule.due(5.29) == []
    assert schedule.due(5.3) == [cause]
    assert schedule.next_deadline() == pytest.approx(5.3)


def test_an_occurrence_that_does_not_qualify_creates_no_wake() -> None:
    schedule = WakeSchedule(POLICY)
    assert schedule.ordinary(0.0, qualifies=False) is None
    assert schedule.subject(K, 0.0, qualifies=False) is None
    assert len(schedule) == 0 and schedule.next_deadline() is None and schedule.due(100.0) == []


def test_a_qualifying_replacement_moves_the_deadline_but_is_never_a_second_wake() -> None:
    schedule = WakeSchedule(POLICY)
    first = schedule.subject(K, 0.0, qualifies=True)
    again = schedule.subject(K, 0.2, qualifies=True)
    assert first is again and len(schedule) == 1
    assert again is not None and again.due == pytest.approx(0.5)  # debounce: 0.2 + quiet
    assert schedule.due(0.3) == []  # the first arrival's deadline no longer applies
    assert [c.token for c in schedule.due(0.5)] == [again.token]


def test_a_replacement_that_now_qualifies_gets_normal_treatment() -> None:
    """RFC-006 §4.2: even if its predecessor did not qualify (vector 43 skip-to-qualifying)."""
    schedule = WakeSchedule(POLICY)
    assert schedule.subject(K, 0.0, qualifies=False) is None
    cause = schedule.subject(K, 0.1, qualifies=True)
    assert cause is not None and cause.first == 0.1 and cause.due == pytest.approx(0.4)


def test_the_bound_caps_a_subject_that_keeps_being_replaced() -> None:
    schedule = WakeSchedule(POLICY)
    times = [i * 0.04 for i in range(25)]
    for now in times:
        schedule.subject(K, now, qualifies=True)
        [cause] = schedule.causes()
        assert cause.due <= cause.first + POLICY.max_postpone_seconds
    assert schedule.next_deadline() == pytest.approx(min(times[-1] + 0.3, 1.0))


def test_a_non_qualifying_replacement_or_a_retraction_withdraws_the_cause() -> None:
    """RFC-006 §4.2 second bullet, §6 (vector 43's two timelines)."""
    replaced = WakeSchedule(POLICY)
    replaced.subject(K, 0.0, qualifies=True)
    replaced.subject(K, 0.1, qualifies=False)
    assert replaced.due(10.0) == [] and len(replaced) == 0
    retracted = WakeSchedule(POLICY)
    retracted.subject(K, 0.0, qualifies=True)
    assert retracted.withdraw(K) is not None
    assert retracted.due(10.0) == []


def test_another_cause_still_wakes_after_a_withdrawal() -> None:
    schedule = WakeSchedule(POLICY)
    schedule.subject(K, 0.0, qualifies=True)
    ordinary = schedule.ordinary(0.1, qualifies=True)
    schedule.withdraw(K)
    assert schedule.due(0.4) == [ordinary]


def test_a_drain_retires_due_causes_and_consumed_subjects() -> None:
    schedule = WakeSchedule(POLICY)
    schedule.ordinary(0.0, qualifies=True)
    schedule.subject(K, 0.0, qualifies=True)
    schedule.consume(0.3)
    assert len(schedule) == 0


def test_a_subject_with_work_still_pending_after_the_drain_keeps_its_cause() -> None:
    """A notice that came while its batch rendered: the new batch still wakes."""
    schedule = WakeSchedule(POLICY)
    cause = schedule.subject(K, 0.0, qualifies=True)
    schedule.subject(J, 0.0, qualifies=True)
    schedule.consume(0.3, keep={K})
    assert schedule.causes() == [cause]


def test_an_ordinary_cause_delivered_early_keeps_its_own_deadline() -> None:
    """EC15: a drain before its deadline (another cause's wake) delivers its content; the
    ordinary wake is neither shortened nor dropped: it comes at its own time, once."""
    schedule = WakeSchedule(WakePolicy(quiet_seconds=0.2, max_postpone_seconds=0.5))
    schedule.subject(K, 0.0, qualifies=True)
    ordinary = schedule.ordinary(0.4, qualifies=True)
    assert ordinary is not None
    bound = schedule.due(0.5)
    assert [c.subject for c in bound] == [K]  # the bound wake: the subject alone
    schedule.consume(0.5)
    assert schedule.due(0.59) == [] and schedule.next_deadline() == pytest.approx(0.6)
    assert schedule.due(ordinary.due) == [ordinary] and ordinary.delivered
    schedule.consume(ordinary.due)
    assert len(schedule) == 0


def test_delivered_ordinary_causes_are_bounded_oldest_first() -> None:
    schedule = WakeSchedule(POLICY, max_delivered=2)
    causes = [schedule.ordinary(0.01 * i, qualifies=True) for i in range(4)]
    schedule.consume(0.05)
    assert schedule.causes() == causes[2:]


@pytest.mark.parametrize(
    ("quiet", "bound"),
    [
        (-1.0, 1.0),
        (math.nan, 1.0),
        (0.0, 0.0),
        (0.5, -1.0),
        (0.5, math.inf),
        (2.0, 1.0),
        (math.inf, math.inf),
        (True, 1.0),
    ],
)
def test_a_policy_out_of_range_is_refused(quiet: float, bound: float) -> None:
    with pytest.raises(ValueError, match="seconds"):
        WakePolicy(quiet_seconds=quiet, max_postpone_seconds=bound)


def test_a_non_finite_now_is_refused() -> None:
    schedule = WakeSchedule(POLICY)
    for call in (
        lambda: schedule.ordinary(math.nan, qualifies=True),
        lambda: schedule.subject(K, math.inf, qualifies=True),
        lambda: schedule.consume(math.nan),
    ):
        with pytest.raises(ValueError, match="finite"):
            call()


#: A subject's traffic: gaps between arrivals (seconds) and whether each qualifies.
traffic = st.lists(st.tuples(st.floats(min_value=0.0, max_value=0.5), st.booleans()), min_size=1, max_size=60)
policies = st.tuples(st.floats(min_value=0.0, max_value=2.0), st.floats(min_value=0.01, max_value=5.0)).map(
    lambda qb: WakePolicy(quiet_seconds=qb[0], max_postpone_seconds=max(qb[0], qb[1]))
)


@given(policies, traffic)
def test_a_qualifying_subject_is_never_due_after_its_first_pending_arrival_plus_the_bound(
    policy: WakePolicy, arrivals: list[tuple[float, bool]]
) -> None:
    """RFC-006 §4.2 no starvation: whatever the replacement sequence, the subject's deadline
    is at most its first pending arrival + ``max_postpone_seconds``."""
    schedule = WakeSchedule(policy)
    now = 0.0
    first: float | None = None
    for gap, qualifies in arrivals:
        now += gap
        cause = schedule.subject(K, now, qualifies=qualifies)
        if cause is None:
            first = None
            continue
        if first is None:
            first = now
        assert cause.first == first
        assert cause.due <= first + policy.max_postpone_seconds + 1e-9
        assert cause.due >= now or cause.due == first + policy.max_postpone_seconds


@given(policies, traffic, st.lists(st.floats(min_value=0.0, max_value=3.0), min_size=1, max_size=10))
def test_unrelated_causes_deadlines_do_not_depend_on_subject_traffic(
    policy: WakePolicy, arrivals: list[tuple[float, bool]], ordinary_at: list[float]
) -> None:
    """RFC-006 §4.2 last bullet (vector 44): ordinary causes get the same deadlines with and
    without a subject's replacements (and its bound) in the same schedule."""
    alone, mixed = WakeSchedule(policy), WakeSchedule(policy)
    events = sorted(
        [(t, "ordinary", True) for t in ordinary_at]
        + [(t, "subject", q) for t, q in zip(_times(arrivals), (q for _, q in arrivals), strict=True)]
    )
    expected: list[float] = []
    observed: list[float] = []
    for now, kind, qualifies in events:
        if kind == "ordinary":
            a, m = alone.ordinary(now, qualifies=True), mixed.ordinary(now, qualifies=True)
            assert a is not None and m is not None
            expected.append(a.due)
            observed.append(m.due)
        else:
            mixed.subject(K, now, qualifies=qualifies)
    assert observed == expected
    assert [c.due for c in mixed.causes() if c.subject is None] == [c.due for c in alone.causes()]


def _times(arrivals: list[tuple[float, bool]]) -> list[float]:
    times: list[float] = []
    now = 0.0
    for gap, _ in arrivals:
        now += gap
        times.append(now)
    return times

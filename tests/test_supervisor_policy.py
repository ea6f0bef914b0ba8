"""The restart policy: backoff, jitter bounds, healthy reset, crash-loop stop (decide, then act).

Pure: a fake clock (plain floats) and an injected rng; no processes, no anyio.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpl_host.supervisor_policy import (
    DEFAULT_BASE_DELAY_SECONDS,
    DEFAULT_FAILURE_WINDOW_SECONDS,
    DEFAULT_HEALTHY_AFTER_SECONDS,
    DEFAULT_JITTER,
    DEFAULT_MAX_DELAY_SECONDS,
    DEFAULT_MAX_FAILURES,
    GiveUp,
    Restart,
    RestartPolicy,
    RestartTracker,
    restart_policy_problems,
)

EXIT_1 = "server process exited with status 1"


def fixed(u: float):
    return lambda: u


def sequence(values: list[float]):
    it: Iterator[float] = iter(values)
    return lambda: next(it)


def test_defaults_are_the_named_constants() -> None:
    assert RestartPolicy() == RestartPolicy(
        base_delay_seconds=DEFAULT_BASE_DELAY_SECONDS,
        max_delay_seconds=DEFAULT_MAX_DELAY_SECONDS,
        jitter=DEFAULT_JITTER,
        healthy_after_seconds=DEFAULT_HEALTHY_AFTER_SECONDS,
        max_failures=DEFAULT_MAX_FAILURES,
        failure_window_seconds=DEFAULT_FAILURE_WINDOW_SECONDS,
        enabled=True,
    )
    assert (DEFAULT_BASE_DELAY_SECONDS, DEFAULT_MAX_DELAY_SECONDS, DEFAULT_JITTER) == (0.5, 30.0, 0.2)
    assert (DEFAULT_HEALTHY_AFTER_SECONDS, DEFAULT_MAX_FAILURES, DEFAULT_FAILURE_WINDOW_SECONDS) == (
        30.0,
        5,
        60.0,
    )


def test_backoff_doubles_up_to_the_cap_with_nominal_rng() -> None:
    # Failures far apart (no crash loop) and never healthy (each run lasts 1 s).
    tracker = RestartTracker(RestartPolicy(max_failures=1000), rng=fixed(0.5))
    decisions = []
    now = 0.0
    for _ in range(9):
        tracker.record_start(now)
        decisions.append(tracker.record_failure(now + 1.0, EXIT_1))
        now += 1000.0
    assert decisions == [
        Restart(attempt=n, delay_seconds=d)
        for n, d in enumerate([0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0], start=1)
    ]


@pytest.mark.parametrize(
    ("u", "attempt", "expected"),
    [
        (0.0, 1, 0.4),  # nominal 0.5, -20 %
        (0.5, 1, 0.5),
        (1.0, 1, 0.6),  # +20 %
        (0.0, 3, 1.6),  # nominal 2.0
        (1.0, 7, 36.0),  # nominal capped at 30, +20 %
        (-3.0, 1, 0.4),  # clamped to 0
        (7.0, 1, 0.6),  # clamped to 1
    ],
)
def test_jitter_is_proportional_and_two_sided(u: float, attempt: int, expected: float) -> None:
    assert RestartPolicy().delay(attempt, u) == pytest.approx(expected)


@given(
    base=st.floats(0.001, 100.0),
    extra=st.floats(0.0, 1000.0),
    jitter=st.floats(0.0, 0.999),
    attempt=st.integers(1, 5000),
    u=st.floats(0.0, 1.0),
)
def test_delay_bounds(base: float, extra: float, jitter: float, attempt: int, u: float) -> None:
    policy = RestartPolicy(base_delay_seconds=base, max_delay_seconds=base + extra, jitter=jitter)
    nominal = policy.nominal_delay(attempt)
    delay = policy.delay(attempt, u)
    assert base <= nominal <= policy.max_delay_seconds
    assert nominal * (1 - jitter) * (1 - 1e-12) <= delay <= nominal * (1 + jitter) * (1 + 1e-12)
    assert delay >= base * (1 - jitter) * (1 - 1e-12) > 0
    assert delay <= policy.max_delay_seconds * (1 + jitter) * (1 + 1e-12)


def test_attempt_must_be_positive_and_huge_attempts_do_not_overflow() -> None:
    with pytest.raises(ValueError, match="attempt"):
        RestartPolicy().nominal_delay(0)
    assert RestartPolicy().nominal_delay(10**9) == DEFAULT_MAX_DELAY_SECONDS


def test_a_healthy_connection_resets_the_backoff() -> None:
    tracker = RestartTracker(RestartPolicy(max_failures=100), rng=fixed(0.5))
    now = 0.0
    for _ in range(4):
        tracker.record_start(now)
        now += 1.0
        assert isinstance(tracker.record_failure(now, EXIT_1), Restart)
        now += 100.0
    assert tracker.attempt == 4
    tracker.record_start(now)
    assert tracker.record_healthy(now + 29.9) is False
    assert tracker.attempt == 4
    assert tracker.record_healthy(now + 30.0) is True
    assert tracker.attempt == 0
    assert tracker.record_failure(now + 500.0, EXIT_1) == Restart(attempt=1, delay_seconds=0.5)


def test_record_failure_applies_the_healthy_reset_itself() -> None:
    tracker = RestartTracker(RestartPolicy(max_failures=100), rng=fixed(0.5))
    tracker.record_start(0.0)
    tracker.record_failure(1.0, EXIT_1)
    tracker.record_start(2.0)
    assert tracker.record_failure(3.0, EXIT_1) == Restart(attempt=2, delay_seconds=1.0)
    tracker.record_start(10.0)
    assert tracker.record_failure(40.0, EXIT_1) == Restart(attempt=1, delay_seconds=0.5)  # up 30 s


def test_healthy_before_any_start_is_not_healthy() -> None:
    assert RestartTracker().record_healthy(1e9) is False


def test_crash_loop_gives_up_with_a_one_sentence_reason() -> None:
    tracker = RestartTracker(rng=fixed(0.5))
    decisions = [tracker.record_failure(float(t), EXIT_1) for t in range(5)]
    assert all(isinstance(d, Restart) for d in decisions[:4])
    assert decisions[4] == GiveUp(
        reason="crashed 5 times in 60 seconds; last: server process exited with status 1",
        failures=5,
        window_seconds=60.0,
    )
    assert tracker.gave_up == decisions[4]


def test_one_failure_allowed_reads_once() -> None:
    tracker = RestartTracker(RestartPolicy(max_failures=1, failure_window_seconds=1.0))
    assert tracker.record_failure(0.0, "connection lost") == GiveUp(
        "crashed once in 1 second; last: connection lost", 1, 1.0
    )


@given(st.lists(st.floats(0.0, 0.999999), min_size=5, max_size=5))
def test_a_server_exiting_at_once_is_a_crash_loop_not_a_busy_loop(us: list[float]) -> None:
    policy = RestartPolicy()
    tracker = RestartTracker(policy, rng=sequence(us))
    now, delays = 0.0, []
    for _ in range(100):
        tracker.record_start(now)
        now += 0.01  # exits at once
        decision = tracker.record_failure(now, EXIT_1)
        if isinstance(decision, GiveUp):
            break
        delays.append(decision.delay_seconds)
        now += decision.delay_seconds
    assert isinstance(decision, GiveUp)
    assert decision.failures == policy.max_failures
    assert len(delays) == policy.max_failures - 1
    assert all(d >= policy.base_delay_seconds * (1 - policy.jitter) for d in delays)


def test_failures_spread_wider_than_the_window_never_give_up() -> None:
    tracker = RestartTracker(RestartPolicy(max_failures=3, failure_window_seconds=60.0), rng=fixed(0.5))
    decisions = [tracker.record_failure(float(t), EXIT_1) for t in range(0, 2000, 31)]
    assert all(isinstance(d, Restart) for d in decisions)  # 2 failures per window at most


def test_a_failure_counts_while_less_than_the_window_old() -> None:
    tracker = RestartTracker(RestartPolicy(max_failures=2, failure_window_seconds=60.0))
    tracker.record_failure(0.0, EXIT_1)
    assert isinstance(tracker.record_failure(60.0, EXIT_1), Restart)  # exactly 60 s old: out
    assert isinstance(tracker.record_failure(119.9, EXIT_1), GiveUp)


def test_the_window_is_not_reset_by_a_healthy_run() -> None:
    tracker = RestartTracker(RestartPolicy(max_failures=3, failure_window_seconds=60.0), rng=fixed(0.5))
    tracker.record_failure(0.0, EXIT_1)
    tracker.record_failure(1.0, EXIT_1)
    tracker.record_start(2.0)
    decision = tracker.record_failure(40.0, "connection lost")  # healthy for 38 s, still in window
    assert decision == GiveUp("crashed 3 times in 60 seconds; last: connection lost", 3, 60.0)


def test_a_failure_to_start_counts_like_any_failure() -> None:
    tracker = RestartTracker(RestartPolicy(max_failures=2), rng=fixed(0.5))
    assert tracker.record_failure(0.0, "command not found") == Restart(1, 0.5)
    assert isinstance(tracker.record_failure(0.5, "command not found"), GiveUp)


def test_disabled_gives_up_at_the_first_failure() -> None:
    tracker = RestartTracker(RestartPolicy(enabled=False))
    tracker.record_start(0.0)
    assert tracker.record_failure(100.0, EXIT_1) == GiveUp(
        "restarts are disabled; last: server process exited with status 1", 1, 60.0
    )


def test_giving_up_is_sticky_until_reset() -> None:
    tracker = RestartTracker(RestartPolicy(max_failures=1), rng=fixed(0.5))
    first = tracker.record_failure(0.0, EXIT_1)
    assert isinstance(first, GiveUp)
    assert tracker.record_failure(10_000.0, "other") is first
    tracker.reset()
    assert tracker.gave_up is None and tracker.attempt == 0
    assert tracker.failures_in_window(10_000.0) == 0
    assert isinstance(tracker.record_failure(10_001.0, EXIT_1), GiveUp)  # max_failures=1 still


def test_an_empty_reason_leaves_out_last() -> None:
    assert (
        RestartTracker(RestartPolicy(enabled=False)).record_failure(0.0, "").reason == "restarts are disabled"
    )


def test_default_rng_is_random_and_within_bounds() -> None:
    random.seed(1)
    decision = RestartTracker().record_failure(0.0, EXIT_1)
    assert isinstance(decision, Restart) and 0.4 <= decision.delay_seconds <= 0.6


def test_repr_shows_live_state() -> None:
    tracker = RestartTracker(rng=fixed(0.5))
    tracker.record_failure(0.0, EXIT_1)
    tracker.record_start(1.0)
    assert repr(tracker) == "<RestartTracker attempt=1 up since 1 recent_failures=1>"


@pytest.mark.parametrize(
    ("fields", "problems"),
    [
        ({}, {}),
        ({"base_delay_seconds": 0}, {"base_delay_seconds": "must be a positive number of seconds"}),
        (
            {"max_delay_seconds": 0.1},
            {"max_delay_seconds": "must not be less than the base delay (0.5 seconds)"},
        ),
        ({"jitter": 1.0}, {"jitter": "must be a fraction from 0 up to, not including, 1"}),
        ({"jitter": -0.1}, {"jitter": "must be a fraction from 0 up to, not including, 1"}),
        ({"healthy_after_seconds": -1}, {"healthy_after_seconds": "must be a number of seconds, 0 or more"}),
        ({"healthy_after_seconds": 0}, {}),
        ({"max_failures": 0}, {"max_failures": "must be a whole number, 1 or more"}),
        ({"max_failures": 2.0}, {"max_failures": "must be a whole number, 1 or more"}),
        ({"max_failures": True}, {"max_failures": "must be a whole number, 1 or more"}),
        (
            {"failure_window_seconds": float("inf")},
            {"failure_window_seconds": "must be a positive number of seconds"},
        ),
        (
            {"base_delay_seconds": float("nan")},
            {"base_delay_seconds": "must be a positive number of seconds"},
        ),
        ({"enabled": 1}, {"enabled": "must be true or false"}),
        ({"base_delay_seconds": "1"}, {"base_delay_seconds": "must be a positive number of seconds"}),
    ],
)
def test_policy_rules(fields: dict, problems: dict) -> None:
    assert restart_policy_problems(fields) == problems
    if problems:
        with pytest.raises(ValueError, match=next(iter(problems))):
            RestartPolicy(**fields)
    else:
        RestartPolicy(**fields)

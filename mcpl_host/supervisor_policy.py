"""The restart policy of one server: decide whether and when to restart it. Pure.

Rules (decide, then act: this module decides, the supervisor acts):

- The supervisor (the I/O shell) tells a ``RestartTracker`` what happened, with ``now`` in
  seconds on one monotonic clock (for example ``anyio.current_time()``): ``record_start(now)``
  when a connection is up, ``record_failure(now, reason)`` when it exits unexpectedly, its
  socket drops, or it cannot be started at all. Each failure returns a ``Decision``:
  ``Restart(attempt, delay_seconds)`` (sleep that long, then start again) or ``GiveUp(reason,
  ...)`` (stop, and report ``reason``). The shell only sleeps and spawns.
- **Backoff.** Attempt ``n`` (1 for the first restart since the last reset) has the nominal
  delay ``min(max_delay_seconds, base_delay_seconds * 2 ** (n - 1))``. **Decision:** jitter
  is proportional and two-sided, not "full jitter": with ``u = rng()`` clamped to [0, 1],
  ``delay = nominal * (1 + jitter * (2u - 1))``, so every delay lies in
  ``[nominal * (1 - jitter), nominal * (1 + jitter)]``, hence never below
  ``base_delay_seconds * (1 - jitter)`` and never above ``max_delay_seconds * (1 + jitter)``.
  ``jitter`` must be in [0, 1), so the floor is positive: a server that exits at once on
  start is never restarted in a busy loop (full jitter could pick a delay near 0).
- **Healthy reset.** A connection that stayed up ``healthy_after_seconds`` or longer resets
  the backoff: its failure restarts at attempt 1. The check runs inside
  ``record_failure``, so the shell need not call ``record_healthy`` (it may, to reset early).
- **Crash loop.** **Decision:** the failure window is independent of the healthy reset: a
  failure counts while it is less than ``failure_window_seconds`` old, whatever the
  connection did in between. The ``max_failures``-th failure inside the window gives up,
  with a one-sentence reason: "crashed 5 times in 60 seconds; last: server process exited
  with status 1". A failure a moment after start counts like any other.
- ``enabled=False`` gives up at the first failure ("restarts are disabled; last: ...").
- **Decision:** giving up is sticky: later failures return the same ``GiveUp`` until
  ``reset()`` (an explicit restart asked for by a person).

Randomness is injected (``rng``: a callable returning a float in [0, 1)), so tests are
deterministic. No I/O, no clock, no logging.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from mcpl_host.jsonrpc.errors import describe_seconds
from mcpl_host.jsonrpc.values import finite_number

__all__ = [
    "DEFAULT_BASE_DELAY_SECONDS",
    "DEFAULT_FAILURE_WINDOW_SECONDS",
    "DEFAULT_HEALTHY_AFTER_SECONDS",
    "DEFAULT_JITTER",
    "DEFAULT_MAX_DELAY_SECONDS",
    "DEFAULT_MAX_FAILURES",
    "Decision",
    "GiveUp",
    "Restart",
    "RestartPolicy",
    "RestartTracker",
    "restart_policy_problems",
]

#: Seconds before the first restart (the nominal delay of attempt 1).
DEFAULT_BASE_DELAY_SECONDS = 0.5
#: Largest nominal delay between restarts, in seconds (the cap of the doubling).
DEFAULT_MAX_DELAY_SECONDS = 30.0
#: Fraction of the nominal delay added or removed at random (±20 %), in [0, 1).
DEFAULT_JITTER = 0.2
#: Seconds a connection must stay up for its next failure to restart the backoff at attempt 1.
DEFAULT_HEALTHY_AFTER_SECONDS = 30.0
#: Failures within the window that make a crash loop: the last of them gives up.
DEFAULT_MAX_FAILURES = 5
#: Seconds a failure counts toward the crash-loop limit.
DEFAULT_FAILURE_WINDOW_SECONDS = 60.0

# Doubling stops here: 2.0 ** 1024 overflows a float (the cap is reached long before).
_MAX_DOUBLINGS = 1023


def _is_number(value: Any) -> bool:
    return finite_number(value) is not None


def restart_policy_problems(values: Mapping[str, Any]) -> dict[str, str]:
    """What is wrong with ``RestartPolicy`` field values: field name -> problem (a phrase,
    such as ``"must be a positive number of seconds"``). Fields missing from ``values`` take
    their defaults. Empty when a ``RestartPolicy`` can be built from them.

    The one statement of the policy's rules: ``RestartPolicy`` raises on them, and the config
    reader reports them at the location of each key.
    """
    v = {f.name: values.get(f.name, f.default) for f in fields(RestartPolicy)}
    problems: dict[str, str] = {}
    if not isinstance(v["enabled"], bool):
        problems["enabled"] = "must be true or false"
    for name in ("base_delay_seconds", "max_delay_seconds", "failure_window_seconds"):
        if not (_is_number(v[name]) and v[name] > 0):
            problems[name] = "must be a positive number of seconds"
    if not (_is_number(v["healthy_after_seconds"]) and v["healthy_after_seconds"] >= 0):
        problems["healthy_after_seconds"] = "must be a number of seconds, 0 or more"
    if not (_is_number(v["jitter"]) and 0 <= v["jitter"] < 1):
        problems["jitter"] = "must be a fraction from 0 up to, not including, 1"
    max_failures = v["max_failures"]
    if not (isinstance(max_failures, int) and not isinstance(max_failures, bool) and max_failures >= 1):
        problems["max_failures"] = "must be a whole number, 1 or more"
    delays_valid = not (problems.keys() & {"base_delay_seconds", "max_delay_seconds"})
    if delays_valid and v["max_delay_seconds"] < v["base_delay_seconds"]:
        problems["max_delay_seconds"] = (
            f"must not be less than the base delay ({describe_seconds(v['base_delay_seconds'])})"
        )
    return problems


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """How one server is restarted (see the module docstring for the exact rules).

    Seconds: ``base_delay_seconds`` (> 0), ``max_delay_seconds`` (>= base),
    ``healthy_after_seconds`` (>= 0), ``failure_window_seconds`` (> 0). ``jitter``: a
    fraction in [0, 1). ``max_failures``: an int >= 1. ``enabled``: False never restarts.
    Raises ``ValueError`` for values outside these ranges (``restart_policy_problems``).
    """

    base_delay_seconds: float = DEFAULT_BASE_DELAY_SECONDS
    max_delay_seconds: float = DEFAULT_MAX_DELAY_SECONDS
    jitter: float = DEFAULT_JITTER
    healthy_after_seconds: float = DEFAULT_HEALTHY_AFTER_SECONDS
    max_failures: int = DEFAULT_MAX_FAILURES
    failure_window_seconds: float = DEFAULT_FAILURE_WINDOW_SECONDS
    enabled: bool = True

    def __post_init__(self) -> None:
        problems = restart_policy_problems({f.name: getattr(self, f.name) for f in fields(self)})
        if problems:
            raise ValueError("; ".join(f"{name} {message}" for name, message in problems.items()))

    def nominal_delay(self, attempt: int) -> float:
        """Seconds before restart ``attempt`` (from 1) without jitter:
        ``min(max_delay_seconds, base_delay_seconds * 2 ** (attempt - 1))``."""
        if attempt < 1:
            raise ValueError(f"attempt must be 1 or more, not {attempt}")
        doubled = self.base_delay_seconds * 2.0 ** min(attempt - 1, _MAX_DOUBLINGS)
        return min(self.max_delay_seconds, doubled)

    def delay(self, attempt: int, u: float) -> float:
        """Seconds before restart ``attempt`` with jitter drawn from ``u`` (clamped to [0, 1]):
        ``nominal * (1 + jitter * (2u - 1))``; ``u = 0.5`` gives the nominal delay."""
        u = min(max(u, 0.0), 1.0)
        return self.nominal_delay(attempt) * (1.0 + self.jitter * (2.0 * u - 1.0))


@dataclass(frozen=True, slots=True)
class Restart:
    """Start the server again after ``delay_seconds``. ``attempt``: the number of this
    restart since the backoff was last reset, from 1."""

    attempt: int
    delay_seconds: float


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Do not restart. ``reason``: one sentence for the user. ``failures``: failures inside
    the window, this one included. ``window_seconds``: the policy's failure window."""

    reason: str
    failures: int
    window_seconds: float


#: What ``RestartTracker.record_failure`` returns.
Decision = Restart | GiveUp


class RestartTracker:
    """The restart history of one server under a ``RestartPolicy``; every method is a plain
    call taking ``now`` (seconds, monotonic). ``rng`` returns a float in [0, 1) for jitter
    (default ``random.random``, imported by the first tracker: a config's ``RestartPolicy``
    alone does not load ``random``)."""

    __slots__ = ("_attempt", "_failures", "_gave_up", "_rng", "_started_at", "policy")

    def __init__(
        self, policy: RestartPolicy | None = None, *, rng: Callable[[], float] | None = None
    ) -> None:
        if rng is None:
            import random  # noqa: PLC0415 (the first tracker: a Host's supervisor)

            rng = random.random
        self.policy = policy if policy is not None else RestartPolicy()
        self._rng = rng
        self._failures: deque[float] = deque(maxlen=self.policy.max_failures)
        self._attempt = 0
        self._started_at: float | None = None
        self._gave_up: GiveUp | None = None

    def __repr__(self) -> str:
        state = "gave up" if self._gave_up else f"attempt={self._attempt}"
        up = "down" if self._started_at is None else f"up since {self._started_at:g}"
        return f"<RestartTracker {state} {up} recent_failures={len(self._failures)}>"

    @property
    def attempt(self) -> int:
        """Restarts since the backoff was last reset (0: none)."""
        return self._attempt

    @property
    def gave_up(self) -> GiveUp | None:
        """The decision that stopped restarts, or None while restarts go on."""
        return self._gave_up

    def failures_in_window(self, now: float) -> int:
        """Failures less than ``failure_window_seconds`` old at ``now`` (at most ``max_failures``)."""
        return sum(1 for t in self._failures if now - t < self.policy.failure_window_seconds)

    def record_start(self, now: float) -> None:
        """A connection is up (spawned and, for the shell's purposes, started) at ``now``."""
        self._started_at = now

    def record_healthy(self, now: float) -> bool:
        """Reset the backoff if the connection has been up ``healthy_after_seconds`` at
        ``now``; True if it has. Idempotent; the failure window is left as it is."""
        if self._started_at is None or now - self._started_at < self.policy.healthy_after_seconds:
            return False
        self._attempt = 0
        return True

    def record_failure(self, now: float, reason: str) -> Decision:
        """The connection ended unexpectedly at ``now`` (or could not start): ``reason`` is a
        short phrase such as ``"server process exited with status 1"``. Returns ``Restart``
        or ``GiveUp`` (see the module docstring); after a ``GiveUp``, always that one."""
        if self._gave_up is not None:
            return self._gave_up
        self.record_healthy(now)
        self._started_at = None
        self._failures.append(now)
        failures = self.failures_in_window(now)
        policy = self.policy
        last = f"; last: {reason}" if reason else ""
        if not policy.enabled:
            self._gave_up = GiveUp(f"restarts are disabled{last}", failures, policy.failure_window_seconds)
        elif failures >= policy.max_failures:
            window = describe_seconds(policy.failure_window_seconds)
            times = "once" if failures == 1 else f"{failures} times"
            self._gave_up = GiveUp(
                f"crashed {times} in {window}{last}", failures, policy.failure_window_seconds
            )
        if self._gave_up is not None:
            return self._gave_up
        self._attempt += 1
        return Restart(attempt=self._attempt, delay_seconds=policy.delay(self._attempt, self._rng()))

    def reset(self) -> None:
        """Forget every failure and a ``GiveUp``: a person asked for the server to run again."""
        self._failures.clear()
        self._attempt = 0
        self._started_at = None
        self._gave_up = None

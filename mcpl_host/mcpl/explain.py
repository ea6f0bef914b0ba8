"""Saying plainly what went wrong: refusals, a server that went silent, and why MCPL is not
ready (docs/protocol.md, "Compatibility profiles", "Explaining a silence").

Rules:

- ``RefusalRecord``: the last privileged request a connection refused, with its reason
  (``admission.DenialReason``): kept so that a silence after it can be explained.
- ``stall_verdict``: a server is *stalled* when at least one host request waits for its
  answer and the server has sent nothing for ``bound`` seconds, counted from the later of its
  last message and the oldest request still waiting. A quiet server with nothing pending is
  never stalled.
- ``silence_sentence``: one sentence. After a refusal ``not_in_force`` under the strict
  profile it says which request was refused and why, that the server then stopped
  answering, that servers written for MCPL 0.4 behave this way, and the option that switches
  the profile (``switch``: ``--compat 0.4`` on the command line, ``compat="0.4"`` in the
  library).
- ``stall_due``: the moment a stall would begin if nothing changes, so a watch can sleep
  until then instead of polling.
- Pure: no I/O, no clock (times are passed in), no logging. Sentences carry no server text
  but method names, which the caller escapes like any server value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mcpl_host.mcpl.admission import DENIAL_TEXT, DenialReason
from mcpl_host.mcpl.compat import Profile

__all__ = [
    "CLI_SWITCH",
    "LIBRARY_SWITCH",
    "RefusalRecord",
    "Stall",
    "Waiting",
    "silence_sentence",
    "stall_due",
    "stall_verdict",
]

#: How to switch a server to the 0.4 profile, on the command line and in the library.
CLI_SWITCH = '--compat 0.4 (or "compat": "0.4" in a config file)'
LIBRARY_SWITCH = 'compat="0.4" (or "compat": "0.4" in a config file)'


@dataclass(frozen=True, slots=True)
class RefusalRecord:
    """A refused server request: ``method``, the error ``code``, the gate's ``reason`` (None
    for a refusal that is not the capability gate's), the ``capability`` it needed."""

    method: str
    code: int
    reason: DenialReason | None = None
    capability: str | None = None

    @property
    def phrase(self) -> str:
        """``channels/register (-32002: the policy is not yet in force)``."""
        why = f": {DENIAL_TEXT[self.reason]}" if self.reason is not None else ""
        return f"{self.method} ({self.code}{why})"


@dataclass(frozen=True, slots=True)
class Waiting:
    """A host request waiting for its answer: ``method``, for ``seconds``."""

    method: str
    seconds: float


@dataclass(frozen=True, slots=True)
class Stall:
    """The server sent nothing for ``silent_seconds`` while ``waiting`` (oldest first)."""

    silent_seconds: float
    waiting: tuple[Waiting, ...]

    @property
    def pending_phrase(self) -> str:
        return ", ".join(f"{w.method} ({w.seconds:.0f} s)" for w in self.waiting)


def stall_verdict(
    now: float, waiting: Sequence[tuple[str, float]], last_received: float | None, bound: float
) -> Stall | None:
    """The ``Stall`` at ``now`` (seconds, any monotonic clock), or None (module rules).
    ``waiting``: ``(method, sent_at)`` of each request waiting; ``last_received``: when the
    server last sent anything (None: never)."""
    if not waiting:
        return None
    ordered = sorted(waiting, key=lambda item: item[1])
    oldest = ordered[0][1]
    since = oldest if last_received is None else max(last_received, oldest)
    silent = now - since
    if silent < bound:
        return None
    return Stall(silent, tuple(Waiting(method, now - sent) for method, sent in ordered))


def stall_due(
    waiting: Sequence[tuple[str, float]], last_received: float | None, bound: float
) -> float | None:
    """When (the clock of ``waiting``) ``stall_verdict`` first finds a stall if the server
    sends nothing more and no request is answered; None while nothing waits."""
    if not waiting:
        return None
    oldest = min(sent for _, sent in waiting)
    return (oldest if last_received is None else max(last_received, oldest)) + bound


def silence_sentence(
    stall: Stall | None,
    refusal: RefusalRecord | None,
    profile: Profile | None,
    *,
    switch: str = CLI_SWITCH,
    waited_for: str | None = None,
) -> str:
    """One sentence about a server that stopped answering (module rules). ``stall``: what
    was pending and for how long; without one, ``waited_for`` names what got no answer
    (``"featureSets/update within 60 s"``)."""
    if stall is not None:
        silence = (
            f"the server stopped answering: nothing received for {stall.silent_seconds:.0f} s "
            f"while the host waits for {stall.pending_phrase}"
        )
    else:
        silence = f"the server stopped answering: no answer to {waited_for or 'the host'}"
    if refusal is None:
        return silence[0].upper() + silence[1:]
    refused = f"The host refused {refusal.phrase}, and then {silence}"
    if refusal.reason == "not_in_force" and profile == "strict":
        return (
            f"{refused}; servers written for MCPL 0.4 behave this way (they send privileged "
            f"requests before the policy and stop at a refusal): use {switch}"
        )
    return refused

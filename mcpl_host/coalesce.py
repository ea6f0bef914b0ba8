"""The one rule for work asked for again and again (a list said changed 20,000 times):
one run in flight, one pending. Pure: the caller runs the work and says when it ended.

- ``ask()`` when the work is wanted (a ``notifications/*/list_changed``: MCP 2025-11-25
  "Tools", "Resources", "Prompts", list changed notifications): True when nothing runs (the
  caller starts a run now); otherwise the one pending run is noted (however many times it
  is asked for) and False.
- ``done()`` when a run ended (whatever its outcome): True when a run was asked for while
  it ran (the caller starts it now: what the run read may predate the last change), else
  False and idle.

So a burst of N changes costs at most two runs after the first that was running, and the
last run starts after the last change: what it reads is the newest.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Coalesce"]


@dataclass(slots=True)
class Coalesce:
    """The state of one coalesced piece of work (module rules)."""

    running: bool = False
    pending: bool = False

    @property
    def idle(self) -> bool:
        return not self.running and not self.pending

    def ask(self) -> bool:
        """The work is wanted: True when a run must start now."""
        if self.running:
            self.pending = True
            return False
        self.running = True
        return True

    def hold(self) -> None:
        """The work is wanted after the run in progress ends, which the caller started by
        other means (a listing the application asked for): ``running`` is set."""
        self.running = True
        self.pending = True

    def done(self) -> bool:
        """A run ended: True when the pending run must start now."""
        if self.pending:
            self.pending = False
            return True
        self.running = False
        return False

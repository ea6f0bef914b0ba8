"""Leaving a task group an object entered in its own ``__aenter__``.

The owner closes itself first (its tasks end), then leaves the group. Only a cancellation is
handed to the group, whose scope may own it; any other exception propagates as it is, not
wrapped in an ExceptionGroup.
"""

from __future__ import annotations

from types import TracebackType

import anyio
import anyio.abc

__all__ = ["leave_task_group"]


async def leave_task_group(
    task_group: anyio.abc.TaskGroup | None,
    exc_type: type[BaseException] | None,
    exc: BaseException | None,
    tb: TracebackType | None,
) -> None:
    """Exit ``task_group`` (None: nothing to do) after its owner has closed."""
    if task_group is None:
        return
    if isinstance(exc, anyio.get_cancelled_exc_class()):
        await task_group.__aexit__(exc_type, exc, tb)
    else:
        await task_group.__aexit__(None, None, None)

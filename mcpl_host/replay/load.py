"""Reading a recording file into a ``Script`` (the one place ``replay`` and
``check --against`` open one)."""

from __future__ import annotations

from pathlib import Path

from mcpl_host.limits import Limits
from mcpl_host.replay.script import RecordingError, Script, read_script

__all__ = ["load_script"]

_DEFAULT_LIMITS = Limits()


def load_script(path: str | Path, server: str | None, limits: Limits = _DEFAULT_LIMITS) -> Script:
    """The script of ``server`` (None: the only one) in the recording at ``path``, a file
    of at most ``limits.max_recording_bytes`` (the recorder's bound for one file; a larger
    one is refused, never read whole).

    Raises ``RecordingError``: the file cannot be read, is too large, is no recording, or
    lacks the server.
    """
    bound = limits.max_recording_bytes
    try:
        with open(path, "rb") as file:
            data = file.read(bound + 1)
    except OSError as exc:
        raise RecordingError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > bound:
        raise RecordingError(
            f"{path} is over {bound} bytes (Limits.max_recording_bytes, the recorder's bound for one file)"
        )
    return read_script(data.splitlines(), server)

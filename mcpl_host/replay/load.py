"""Reading a recording file into a ``Script`` (the one place ``replay`` and
``check --against`` open one)."""

from __future__ import annotations

from pathlib import Path

from mcpl_host.replay.script import RecordingError, Script, read_script

__all__ = ["load_script"]


def load_script(path: str | Path, server: str | None) -> Script:
    """The script of ``server`` (None: the only one) in the recording at ``path``.

    Raises ``RecordingError``: the file cannot be read, is no recording, or lacks the server.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise RecordingError(f"cannot read {path}: {exc.strerror or exc}") from None
    return read_script(data.splitlines(), server)

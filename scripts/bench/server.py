"""Building the C echo server the benchmark talks to (``echo_server.c``, next to this file)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["BUILD_DIR", "SOURCE", "BuildError", "build_echo_server"]

SOURCE = Path(__file__).resolve().with_name("echo_server.c")
#: The cache of built binaries, at the repository root (ignored by git).
BUILD_DIR = SOURCE.parents[2] / ".bench-build"


class BuildError(RuntimeError):
    """No C compiler, or the compiler failed (the message carries its output)."""


def build_echo_server(build_dir: Path = BUILD_DIR) -> Path:
    """The path of the echo server binary, compiled with ``cc -O2`` on first use.

    The binary's name carries a hash of the source, so an edited source is rebuilt and an
    unchanged one is not. Raises ``BuildError``.
    """
    compiler = shutil.which("cc")
    if compiler is None:
        raise BuildError("no C compiler: `cc` is not on PATH")
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    binary = build_dir / f"echo_server-{digest}"
    if binary.exists():
        return binary
    build_dir.mkdir(parents=True, exist_ok=True)
    partial = build_dir / f"{binary.name}.{os.getpid()}.tmp"
    done = subprocess.run(
        [compiler, "-O2", "-Wall", "-o", str(partial), str(SOURCE)], capture_output=True, text=True
    )
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise BuildError(f"cc failed ({done.returncode}): {done.stderr.strip()[:2000]}")
    os.replace(partial, binary)
    for stale in build_dir.glob("echo_server-*"):  # builds of earlier sources
        if stale != binary and not stale.name.endswith(".tmp"):
            stale.unlink(missing_ok=True)
    return binary

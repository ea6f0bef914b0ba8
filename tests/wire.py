"""Helpers for wire-level tests: a scripted fixture server over real pipes, and its record.

``fixtures/scripted_server.py`` runs a JSON script and records every line the host writes;
tests assert on that record after the connection has closed.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from subprocess import PIPE
from typing import Any

import anyio
import anyio.abc

from mcpl_host import HostedServer, HostHandlers, ServerConfig, ServerConnection, connect
from mcpl_host.hosted import ServerRuntime
from mcpl_host.limits import Limits

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SCRIPTED = FIXTURES / "scripted_server.py"

SERVER_INFO = {"name": "scripted", "version": "0"}
MCP_RESULT = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": SERVER_INFO}
MCPL_MANIFEST = {
    "version": "0.5",
    "pushEvents": True,
    "featureSets": {"demo": {"description": "demo", "uses": ["pushEvents"]}},
}
MCPL_RESULT = {
    "protocolVersion": "2025-06-18",
    "capabilities": {"tools": {}, "experimental": {"mcpl": MCPL_MANIFEST}},
    "serverInfo": SERVER_INFO,
}

#: A plain MCP server's side of the handshake.
MCP_HANDSHAKE: list[dict[str, Any]] = [
    {"expect": {"method": "initialize"}},
    {"reply": MCP_RESULT},
    {"expect": {"method": "notifications/initialized"}},
]


def initialize_steps(capabilities: dict[str, Any], server_info: dict[str, Any]) -> list[dict[str, Any]]:
    """The steps that wait for ``initialize`` and answer it with ``capabilities`` and
    ``server_info`` (protocol version 2025-06-18)."""
    return [
        {"expect": {"method": "initialize"}},
        {"reply": {"protocolVersion": "2025-06-18", "capabilities": capabilities, "serverInfo": server_info}},
    ]


def mcpl_result(manifest: Any, server_info: dict[str, Any] | None = None) -> dict[str, Any]:
    """An ``initialize`` result advertising tools and the MCPL ``manifest`` (MCPL §3.3);
    ``server_info`` defaults to ``{"name": "s", "version": "0"}``."""
    return {
        "protocolVersion": "2025-06-18",
        "serverInfo": server_info if server_info is not None else {"name": "s", "version": "0"},
        "capabilities": {"tools": {}, "experimental": {"mcpl": manifest}},
    }


def mcpl_handshake(result: dict[str, Any]) -> list[dict[str, Any]]:
    """An MCPL server's side of the handshake, answering ``initialize`` with ``result``, up
    to and including the receipt of the host's initial policy."""
    return [
        {"expect": {"method": "initialize"}},
        {"reply": result},
        {"expect": {"method": "notifications/initialized"}},
        {"expect": {"method": "featureSets/update"}},
        {"reply": {"accepted": True}},
    ]


def server_notification(method: str, params: Any) -> dict[str, Any]:
    """The step that sends the server's notification ``method`` with ``params``."""
    return {"send": {"jsonrpc": "2.0", "method": method, "params": params}}


def server_request(request_id: Any, method: str, params: Any = None) -> dict[str, Any]:
    """The step that sends the server's request ``method`` (``params`` left out when None)."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return {"send": message}


#: An MCPL server's side of the handshake, up to and including the receipt.
MCPL_HANDSHAKE: list[dict[str, Any]] = mcpl_handshake(MCPL_RESULT)

#: Short grace periods: fixture servers exit at stdin EOF.
FAST = Limits(close_grace_seconds=2.0, terminate_grace_seconds=1.0, handshake_timeout_seconds=10.0)


def push_event(request_id: Any, event_id: str = "e1") -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "push/event",
        "params": {
            "featureSet": "demo",
            "eventId": event_id,
            "timestamp": "2026-01-01T00:00:00Z",
            "payload": {"content": [{"type": "text", "text": "hi"}]},
        },
    }


#: The notification every script sends after its last step (see ``Script``).
DONE_METHOD = "test/done"


class TestHandlers(HostHandlers):
    """Handlers that notice the end of a script: ``done`` is set on ``test/done``."""

    __test__ = False

    def __init__(self) -> None:
        self.done = anyio.Event()
        self._marks: dict[str, anyio.Event] = {}

    def mark(self, name: str) -> anyio.Event:
        """Set when the script sends ``mark(name)`` (a ``test/mark`` notification)."""
        return self._marks.setdefault(name, anyio.Event())

    def on_notification(self, server: str, method: str, params: Any) -> None:
        if method == DONE_METHOD:
            self.done.set()
        elif method == "test/mark" and isinstance(params, dict):
            self.mark(str(params.get("name"))).set()


def split_runtime(kwargs: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """``kwargs`` as (``ServerConfig`` fields, ``ServerRuntime`` keywords)."""
    runtime = {key: value for key, value in kwargs.items() if key in ServerRuntime.__annotations__}
    return {key: value for key, value in kwargs.items() if key not in runtime}, runtime


def mark(name: str) -> dict[str, Any]:
    """A script step telling the test that the script got this far."""
    return {"send": {"jsonrpc": "2.0", "method": "test/mark", "params": {"name": name}}}


class Script:
    """A script file and its record file in ``tmp_path``.

    A ``test/done`` notification is appended to the steps, so ``await script.finished(conn)``
    returns once the server has run every step (the handlers must be ``TestHandlers``).
    """

    def __init__(self, tmp_path: Path, steps: list[dict[str, Any]], name: str = "scripted") -> None:
        self.path = tmp_path / f"{name}.json"
        self.record_path = tmp_path / f"{name}.record.jsonl"
        done = {"send": {"jsonrpc": "2.0", "method": DONE_METHOD}}
        self.path.write_text(json.dumps([*steps, done]))

    def config(self, **settings: Any) -> ServerConfig:
        """A ``ServerConfig`` that runs this script (``limits`` default ``FAST``)."""
        settings.setdefault("limits", FAST)
        args = (str(SCRIPTED), str(self.path), str(self.record_path))
        return ServerConfig(command=sys.executable, args=args, **settings)

    def connect(self, **kwargs: Any) -> ServerConnection:
        """``connect()`` of ``config(...)``: ``kwargs`` are ``ServerConfig`` fields and
        ``ServerRuntime`` keywords (``handlers`` default ``TestHandlers()``)."""
        settings, runtime = split_runtime(kwargs)
        runtime.setdefault("handlers", TestHandlers())
        return connect(self.config(**settings), **runtime)

    def server(self, **kwargs: Any) -> HostedServer:
        """A ``HostedServer`` whose every transport runs this script (for a ``Supervisor``)."""
        settings, runtime = split_runtime(kwargs)
        runtime.setdefault("handlers", TestHandlers())
        return HostedServer(self.config(**settings), **runtime)

    @staticmethod
    async def finished(conn: ServerConnection) -> None:
        """Wait until the server has run its whole script."""
        handlers = conn.hosted.handlers
        assert isinstance(handlers, TestHandlers), "use TestHandlers to wait for a script"
        await handlers.done.wait()

    def rows(self) -> list[dict[str, Any]]:
        """Every row of the record: lines the host wrote and events, in order."""
        if not self.record_path.exists():
            return []
        return [json.loads(row) for row in self.record_path.read_text().splitlines() if row]

    def lines(self, *, probe: bool = False) -> list[str]:
        """Raw lines the host wrote, in order; without the ``server/discover`` era probe
        (which the fixture answers by itself, as a handshake-era server) unless ``probe``."""
        lines = [row["line"] for row in self.rows() if "line" in row]
        return lines if probe else [line for line in lines if not _is_probe(line)]

    def events(self) -> list[dict[str, Any]]:
        """What happened to the server process (``started``, ``stdin closed``, ``SIGTERM``),
        each with its ``time`` (``time.monotonic()`` in the server: the machine's clock)."""
        return [row for row in self.rows() if "event" in row]

    def messages(self, *, probe: bool = False) -> list[Any]:
        """The host's lines, parsed (``probe``: as ``lines``)."""
        return [json.loads(text) for text in self.lines(probe=probe)]


def _is_probe(line: str) -> bool:
    try:
        message = json.loads(line)
    except ValueError:
        return False
    return isinstance(message, dict) and message.get("method") == "server/discover" and "id" in message


class ExitWatch:
    """The moment a process exits, seen from outside (it cannot record its own SIGKILL): a
    thread waits on its pidfd and notes ``time.monotonic()``."""

    def __init__(self, pid: int) -> None:
        self.fd = os.pidfd_open(pid)
        self.at: float | None = None
        self._thread = threading.Thread(target=self._wait, daemon=True)
        self._thread.start()

    def _wait(self) -> None:
        select.select([self.fd], [], [], 60)
        self.at = time.monotonic()

    def result(self) -> float:
        self._thread.join(60)
        os.close(self.fd)
        assert self.at is not None
        return self.at


async def port_line(process: anyio.abc.Process, seconds: float = 60) -> int:
    """The port of a fixture server that prints ``PORT <n>`` as its first stdout line."""
    assert process.stdout is not None
    buffer = b""
    with anyio.fail_after(seconds):
        while b"\n" not in buffer:
            buffer += await process.stdout.receive()
    word, port = buffer.split(b"\n", 1)[0].split()
    assert word == b"PORT"
    return int(port)


async def open_server_process(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, stderr: int | None = None
) -> anyio.abc.Process:
    """Start a fixture server in a session of its own (its group can be signalled), stdin
    and stdout piped, ``env`` over this environment, ``stderr`` (None: inherited)."""
    return await anyio.open_process(
        list(argv),
        stdin=PIPE,
        stdout=PIPE,
        stderr=stderr,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )


@contextlib.asynccontextmanager
async def port_server(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    stderr: int | None = None,
    seconds: float = 60,
) -> AsyncIterator[tuple[anyio.abc.Process, int]]:
    """Run a fixture server that prints ``PORT <n>`` as its first stdout line, in a session
    of its own, with ``env`` over this environment and ``stderr`` (None: inherited); its
    process and port. Stopped and reaped on exit (``stop_server_process``)."""
    process = await open_server_process(argv, env=env, stderr=stderr)
    try:
        yield process, await port_line(process, seconds)
    finally:
        await stop_server_process(process, seconds)


def assert_no_secret(secret: str, logs: list[dict[str, Any]], *texts: str) -> None:
    """``secret`` is in no log entry and in none of ``texts``."""
    for entry in logs:
        assert secret not in repr(entry), entry
    for text in texts:
        assert secret not in text


@contextlib.contextmanager
def bridge_url(argv: Sequence[str], scheme: str) -> Iterator[str]:
    """Run a bridge fixture (``argv``: ``ws_bridge.py`` or ``http_bridge.py`` and its
    options) that prints ``PORT <n>`` first; its URL ``scheme://127.0.0.1:<n>/``. On exit its
    stdin is closed, so it exits with its children stopped (killed after 15 seconds)."""
    bridge = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert bridge.stdout is not None
        line = bridge.stdout.readline()
        assert line.startswith("PORT "), line
        yield f"{scheme}://127.0.0.1:{line.split()[1]}/"
    finally:
        assert bridge.stdin is not None
        bridge.stdin.close()
        try:
            bridge.wait(timeout=15)
        except subprocess.TimeoutExpired:
            bridge.kill()
            bridge.wait()


async def stop_server_process(process: anyio.abc.Process, seconds: float = 60) -> None:
    """Stop a server process a test started in its own session: SIGTERM, up to ``seconds``,
    then SIGKILL to its whole group; always reaped. Shielded from cancellation."""
    with anyio.CancelScope(shield=True):
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
        with anyio.move_on_after(seconds):
            await process.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
        await process.aclose()

"""``mcpl-host replay`` as a real process driven by the real host: over stdio (``connect()``
of a ``ServerConfig`` whose command is the CLI), WebSocket and Streamable HTTP (one replay
process each for the module: every connection starts the script afresh, RP1), and the first
request that differs ending the replay with exit status 1 and its sentence. The recordings
are hand-written in the format (tests/replay_recordings.py)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from mcpl_host import ServerConfig, connect
from mcpl_host.jsonrpc.errors import RemoteError
from mcpl_host.limits import Limits
from mcpl_host.replay.load import load_script
from mcpl_host.replay.serve import Outcome, ReplayOptions, serve_http
from tests.replay_recordings import echo_session

from . import forkserver

pytestmark = pytest.mark.anyio
REPLAY = [*forkserver.CLI, "replay"]


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("replay") / "echo.jsonl"
    path.write_bytes(echo_session().text())
    return path


@pytest.fixture(scope="module")
def listening(recording: Path) -> Iterator[dict[str, str]]:
    """One forked ``replay --ws`` and one ``replay --http`` on free loopback ports: option -> URL."""
    processes: list[forkserver.Forked] = []
    urls: dict[str, str] = {}
    try:
        for option in ("--ws", "--http"):
            process = forkserver.Forked(
                [*REPLAY, str(recording), option, "127.0.0.1:0"], stdin=os.open(os.devnull, os.O_RDONLY)
            )
            processes.append(process)
            urls[option] = process.stdout.readline().strip()
        yield urls
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
            process.wait(10)
            process.stdout.close()
            process.stderr.close()


async def test_the_host_is_answered_over_stdio_as_recorded(recording: Path) -> None:
    with anyio.fail_after(30):
        async with connect(
            ServerConfig(command=sys.executable, args=("-m", "mcpl_host.cli", "replay", str(recording)))
        ) as conn:
            assert conn.server_info is not None and conn.server_info.name == "recorded-echo"
            assert [tool.name for tool in await conn.mcp.list_tools()] == ["echo"]
            assert (await conn.mcp.call_tool("echo", {"text": "hi"})).text == "hi 1"
            assert (await conn.mcp.call_tool("echo", {"text": "hi"})).text == "hi 2"
            assert (await conn.mcp.call_tool("ask", {})).text == "asked"  # after roots/list, answered
            with pytest.raises(
                RemoteError, match=r"tools/call .*/params/arguments/text: recorded \\?\"yo\\?\", live"
            ):
                await conn.mcp.call_tool("echo", {"text": "changed"})


@pytest.mark.parametrize("option", ["--ws", "--http"])
async def test_the_replay_serves_websocket_and_streamable_http(
    listening: dict[str, str], option: str
) -> None:
    url = listening[option]
    assert url.startswith("ws://" if option == "--ws" else "http://")
    with anyio.fail_after(30):
        async with connect(ServerConfig(url=url)) as conn:
            assert conn.server_info is not None and conn.server_info.name == "recorded-echo"
            assert [tool.name for tool in await conn.mcp.list_tools()] == ["echo"]
            assert (await conn.mcp.call_tool("echo", {"text": "hi"})).text == "hi 1"
            assert (await conn.mcp.call_tool("ask", {})).text == "asked"


def test_the_first_request_that_differs_exits_1_naming_it(recording: Path) -> None:
    done = forkserver.run(
        [*REPLAY, str(recording)],
        input=b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}\n'
        b'{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"echo","arguments":{"text":"HI"}}}\n',
        timeout=30,
    )
    assert done.returncode == 1
    assert b'"id":1,"result"' in done.stdout and b'"id":"x","error"' in done.stdout
    err = done.stderr.decode()
    assert (
        'request tools/call (live id "x") differs from the recording at /params/arguments/text: recorded "hi", live "HI"'
        in err
    )
    assert "entry seq 8 (line 9)" in err


def test_an_unusable_recording_is_a_usage_error(tmp_path: Path) -> None:
    book = echo_session()
    book.request(1, "ping", None, {}, server="other")
    path = tmp_path / "two.jsonl"
    path.write_bytes(book.text())
    done = forkserver.run([*REPLAY, str(path)], timeout=30)
    assert done.returncode == 2
    assert b"2 servers (demo, other): name one with --server" in done.stderr
    assert (
        forkserver.run([*REPLAY, str(path), "--server", "other", "--ws", "nowhere"], timeout=30).returncode
        == 2
    )


def test_over_http_the_request_that_differs_is_answered_then_the_replay_exits_1(recording: Path) -> None:
    process = forkserver.Forked(
        [*REPLAY, str(recording), "--http", "127.0.0.1:0"], stdin=os.open(os.devnull, os.O_RDONLY)
    )
    try:
        url = process.stdout.readline().strip()
        accept = {"accept": "application/json, text/event-stream"}
        with httpx.Client(timeout=30) as client:
            init = client.post(
                url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}, headers=accept
            )
            assert init.status_code == 200 and '"recorded-echo"' in init.text
            session = {**accept, "mcp-session-id": init.headers["mcp-session-id"]}
            call = {"name": "echo", "arguments": {"text": "HI"}}
            differs = client.post(
                url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}, headers=session
            )
        assert '"id":2,"error"' in differs.text and "differs from the recording" in differs.text
        assert process.wait(30) == 1
        assert 'recorded "hi", live "HI"' in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        process.stdout.close()
        process.stderr.close()


async def test_http_sessions_past_the_bound_end_the_oldest(recording: Path) -> None:
    script = load_script(recording, None)
    options = ReplayOptions(limits=Limits(replay_max_sessions=1))
    outcome = Outcome()
    urls: list[str] = []
    accept = {"accept": "application/json, text/event-stream"}
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            ready = anyio.Event()

            def listening(url: str) -> None:
                urls.append(url)
                ready.set()

            tg.start_soon(serve_http, script, options, outcome, "127.0.0.1", 0, listening)
            await ready.wait()
            async with httpx.AsyncClient(timeout=30) as client:
                first = (await client.post(urls[0], json=initialize, headers=accept)).headers[
                    "mcp-session-id"
                ]
                second = (await client.post(urls[0], json=initialize, headers=accept)).headers[
                    "mcp-session-id"
                ]
                old = await client.post(urls[0], json=listing, headers={**accept, "mcp-session-id": first})
                new = await client.post(urls[0], json=listing, headers={**accept, "mcp-session-id": second})
            tg.cancel_scope.cancel()
    assert old.status_code == 404
    assert new.status_code == 200 and '"echo"' in new.text

"""Hostile HTTP servers on loopback (``fixtures/hostile_http_server.py``): stacked content
codings (of an answer, an event stream, an error body), numbers a server chooses in an
event stream. Every async test runs on asyncio and trio; memory is measured by tracemalloc
in the host (the test process), whose peak covers every bytes object the decoders make.

Rules under test: RFC 9110 §8.4 (Content-Encoding, codings in the order applied) with every
decoding layer bounded as it decodes (``transports/content_coding``); the SSE ``retry``
field (WHATWG HTML "Server-sent events", §9.2.6: milliseconds, ASCII digits) kept within
``Limits.sse_min_reconnect_delay_seconds`` and ``sse_max_reconnect_delay_seconds``; a
reconnect loop that backs off when a reopened stream delivers nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gzip
import os
import sys
import tracemalloc
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.abc
import pytest

from mcpl_host import ConnectionLost, Limits, ServerConfig, connect
from mcpl_host.limits import DEFAULT_READ_CHUNK_BYTES
from mcpl_host.transports.content_coding import BadCoding, BodyDecoder, LayerTooLarge, codings_of
from mcpl_host.transports.http_common import reconnect_delay

from .conftest import FIXTURES
from .wire import port_server

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("logs")]

TIMEOUT = 60
HOSTILE = FIXTURES / "hostile_http_server.py"
FAST = Limits(close_grace_seconds=1.0, terminate_grace_seconds=1.0, handshake_timeout_seconds=15.0)
MIB = 1024 * 1024


@contextlib.asynccontextmanager
async def hostile(*args: str) -> AsyncIterator[int]:
    """Run the hostile HTTP server with ``args``; its port; stopped and reaped on exit."""
    async with port_server([sys.executable, str(HOSTILE), *args], seconds=TIMEOUT) as (_, port):
        yield port


# -- content codings: pure --------------------------------------------------------------------


def _encode(data: bytes, codings: list[str]) -> bytes:
    for coding in codings:
        data = gzip.compress(data) if coding == "gzip" else zlib.compress(data)
    return data


def _decode(body: bytes, codings: list[str], max_layer_bytes: int, chunk: int = 7919) -> bytes:
    decoder = BodyDecoder(codings, max_layer_bytes)
    out: list[bytes] = []
    for start in range(0, len(body), chunk):
        out.extend(decoder.feed(body[start : start + chunk]))
    out.extend(decoder.finish())
    assert all(len(piece) <= DEFAULT_READ_CHUNK_BYTES for piece in out)
    return b"".join(out)


@pytest.mark.parametrize(
    "codings", [[], ["gzip"], ["deflate"], ["gzip", "gzip"], ["deflate", "gzip", "gzip"]]
)
def test_every_stack_of_codings_decodes_in_steps(codings: list[str]) -> None:
    payload = os.urandom(200_000) + b"a" * 1_000_000
    assert _decode(_encode(payload, codings), codings, 10 * MIB) == payload


def test_raw_deflate_and_gzip_members_split_anywhere_decode() -> None:
    squeezer = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    raw = squeezer.compress(b"raw deflate") + squeezer.flush()
    assert _decode(raw, ["deflate"], 1000) == b"raw deflate"
    assert _decode(raw, ["deflate"], 1000, chunk=1) == b"raw deflate"  # told apart from zlib
    assert _decode(zlib.compress(b"zlib"), ["deflate"], 1000, chunk=1) == b"zlib"
    members = gzip.compress(b"abc") + gzip.compress(b"def")
    for cut in range(len(members) + 1):
        assert _decode(members, ["gzip"], 1000, chunk=max(cut, 1)) == b"abcdef"


def test_each_layer_is_bounded_and_unknown_codings_are_refused() -> None:
    bomb = _encode(b"a" * (8 * MIB), ["gzip", "gzip"])
    with pytest.raises(LayerTooLarge, match=r"decoding layer 2 of 2 \(gzip\) gives over 1048576 bytes"):
        _decode(bomb, ["gzip", "gzip"], MIB)
    with pytest.raises(BadCoding, match="Content-Encoding 'br', which the host does not decode"):
        BodyDecoder(["br"], MIB)
    with pytest.raises(BadCoding, match="Content-Encoding that is no short token, which"):
        BodyDecoder(["\x1b[31mred"], MIB)
    with pytest.raises(BadCoding, match="not valid gzip"):
        _decode(b"not gzip at all", ["gzip"], MIB)
    assert codings_of(["gzip, X-GZIP", "identity", " deflate"]) == ["gzip", "gzip", "deflate"]


# -- content codings: a real server ----------------------------------------------------------


@pytest.mark.parametrize(
    ("codings", "sse"),
    [("gzip,gzip", False), ("gzip,gzip", True), ("deflate,gzip,gzip", False), ("gzip", False)],
)
async def test_stacked_codings_are_bounded_as_they_decode(codings: str, sse: bool) -> None:
    """A body of 64 MiB decoded, a few hundred bytes on the wire: the transport is lost
    naming the bound, and the host's traced memory stays within a few MiB (before every
    layer was bounded, one read of ``gzip, gzip`` held the whole 64 MiB)."""
    limits = dataclasses.replace(FAST, max_line_bytes=MIB, max_sse_event_bytes=MIB + 1024)
    args = ["bomb", "--codings", codings, "--bytes", str(64 * MIB), *(["--sse"] if sse else [])]
    async with hostile(*args) as port:
        conn = connect(
            ServerConfig(url=f"http://127.0.0.1:{port}/mcp", limits=limits, transport="streamable-http")
        )
        with anyio.fail_after(TIMEOUT):
            async with conn:
                tracemalloc.start()
                try:
                    with pytest.raises(ConnectionLost) as info:
                        await conn.mcp.list_tools()
                    _, peak = tracemalloc.get_traced_memory()
                finally:
                    tracemalloc.stop()
    bound = "limits.max_sse_event_bytes" if sse else "limits.max_line_bytes"
    assert bound in str(info.value)
    assert peak < 16 * MIB, f"peak traced memory {peak / MIB:.1f} MiB"


async def test_comments_between_messages_count_against_the_event_bound_of_each_layer() -> None:
    """An event stream of ``gzip, gzip``: one message, then 64 MiB of comments (``:`` and a
    blank line, over and over; a few hundred bytes on the wire). Each layer's count began
    again at every blank line, so no bound was ever reached and a stream of a few KB could
    keep the host decoding for as long as the server liked. The layers are now counted
    from one message to the next: past ``max_sse_event_bytes`` without one, the stream is
    refused."""
    limits = dataclasses.replace(FAST, max_line_bytes=MIB, max_sse_event_bytes=MIB + 1024)
    args = ["bomb", "--codings", "gzip,gzip", "--bytes", str(64 * MIB), "--sse", "--pad", ":\\n\\n"]
    async with hostile(*args) as port:
        conn = connect(
            ServerConfig(url=f"http://127.0.0.1:{port}/mcp", limits=limits, transport="streamable-http")
        )
        with anyio.fail_after(TIMEOUT):
            async with conn:
                with pytest.raises(ConnectionLost) as info:
                    await conn.mcp.list_tools()
    assert "gives over 1049600 bytes (limits.max_sse_event_bytes)" in str(info.value)


async def test_an_error_body_is_decoded_within_its_bound_too() -> None:
    """A 500 whose body is ``gzip, gzip`` of 64 MiB: the refusal quotes its start, and no
    more of it is decoded (before, the first read inflated all of it)."""
    args = ["bomb", "--codings", "gzip,gzip", "--bytes", str(64 * MIB), "--status", "500"]
    async with hostile(*args) as port:
        conn = connect(
            ServerConfig(url=f"http://127.0.0.1:{port}/mcp", limits=FAST, transport="streamable-http")
        )
        with anyio.fail_after(TIMEOUT):
            async with conn:
                tracemalloc.start()
                try:
                    with pytest.raises(ConnectionLost) as info:
                        await conn.mcp.list_tools()
                    _, peak = tracemalloc.get_traced_memory()
                finally:
                    tracemalloc.stop()
    assert "answered the POST of tools/list with HTTP 500" in str(info.value)
    assert 'it said: {"jsonrpc":"2.0","id":0,' in str(info.value)
    assert peak < 16 * MIB, f"peak traced memory {peak / MIB:.1f} MiB"


async def test_a_coding_the_host_does_not_ask_for_is_refused_clearly(tmp_path: Path) -> None:
    async with hostile("bomb", "--codings", "br", "--bytes", "1000") as port:
        conn = connect(
            ServerConfig(url=f"http://127.0.0.1:{port}/mcp", limits=FAST, transport="streamable-http")
        )
        with anyio.fail_after(TIMEOUT):
            async with conn:
                with pytest.raises(ConnectionLost) as info:
                    await conn.mcp.list_tools()
    assert "sent a body in Content-Encoding 'br', which the host does not decode" in str(info.value)


async def test_a_body_in_more_codings_than_the_bound_is_refused_clearly() -> None:
    """1,000 layers of gzip (22 KB on the wire): undone layer by layer, they raised
    RecursionError (and each layer holds a zlib state: a header of 100 KiB names 20,000).
    Past ``limits.max_content_codings`` the body is refused, naming the bound."""
    codings = ",".join(["gzip"] * 1000)
    async with hostile("bomb", "--codings", codings, "--bytes", "1000") as port:
        conn = connect(
            ServerConfig(url=f"http://127.0.0.1:{port}/mcp", limits=FAST, transport="streamable-http")
        )
        with anyio.fail_after(TIMEOUT):
            async with conn:
                with pytest.raises(ConnectionLost) as info:
                    await conn.mcp.list_tools()
    assert "a body in 1000 content codings, over limits.max_content_codings = 4" in str(info.value)


def test_the_number_of_codings_is_bounded_before_any_layer_is_made() -> None:
    assert len(BodyDecoder(["gzip"] * 4, MIB, max_codings=4)._layers) == 4
    with pytest.raises(BadCoding, match="a body in 5 content codings, over limits.max_content_codings = 4"):
        BodyDecoder(["gzip"] * 5, MIB, max_codings=4)


async def _peak_of_an_answer(chunk: int, sse: bool) -> int:
    """Peak traced memory while ``tools/list`` is answered by 64 KiB sent in chunks of
    ``chunk`` bytes."""
    args = ["trickle", "--bytes", str(64 * 1024), "--chunk", str(chunk), *(["--sse"] if sse else [])]
    async with hostile(*args) as port:
        conn = connect(
            ServerConfig(url=f"http://127.0.0.1:{port}/mcp", limits=FAST, transport="streamable-http")
        )
        with anyio.fail_after(2 * TIMEOUT):  # 32,768 chunks, each read and decoded
            async with conn:
                tracemalloc.start()
                try:
                    assert await conn.mcp.list_tools() == []
                    return tracemalloc.get_traced_memory()[1]
                finally:
                    tracemalloc.stop()


@pytest.mark.parametrize("sse", [False, True])
async def test_a_body_in_chunks_of_two_bytes_costs_what_it_costs_whole(sse: bool) -> None:
    """Each chunk is one piece as read; kept as a list of pieces (a JSON body) or of text
    pieces (an event stream's line), 64 KiB in chunks of 2 bytes peaked at 4.0 MiB (JSON)
    and 2.0 MiB (event stream) traced, against 0.9 and 1.1 MiB sent whole: some 50 bytes a
    byte, 1.6 GiB at the default ``max_line_bytes``. Pieces are now joined as they arrive."""
    whole = await _peak_of_an_answer(1024 * 1024, sse)
    trickled = await _peak_of_an_answer(2, sse)
    assert trickled < whole * 1.3, f"{trickled / MIB:.1f} MiB in chunks, {whole / MIB:.1f} MiB whole"


# -- numbers a server chooses: the SSE retry field ----------------------------------------


async def _get_times(process_stdout: anyio.abc.ByteReceiveStream, count: int) -> list[float]:
    """The arrival times of the first ``count`` GETs, as the server tells them."""
    buffer = b""
    times: list[float] = []
    while len(times) < count:
        while b"\n" not in buffer:
            buffer += await process_stdout.receive()
        line, buffer = buffer.split(b"\n", 1)
        word, _, seconds = line.split()
        assert word == b"GET"
        times.append(float(seconds))
    return times


@contextlib.asynccontextmanager
async def retry_server(retry: str) -> AsyncIterator[tuple[int, anyio.abc.ByteReceiveStream]]:
    argv = [sys.executable, str(HOSTILE), "get-retry", "--retry", retry]
    async with port_server(argv, seconds=TIMEOUT) as (process, port):
        assert process.stdout is not None
        yield port, process.stdout


RETRY_LIMITS = dataclasses.replace(
    FAST,
    sse_reconnect_delay_seconds=0.05,
    sse_min_reconnect_delay_seconds=0.01,
    sse_max_reconnect_delay_seconds=0.4,
)


async def test_a_get_stream_that_delivers_nothing_is_reopened_with_a_growing_delay() -> None:
    """``retry: 0`` and a GET stream that ends at once: each reopening waits longer
    (0.05, 0.1, 0.2, 0.4, 0.8 s: the server's 0 never shortens the back-off); before, every
    reopening came after 0.01 s, for ever. (The maximum is long, so that no stream, however
    slow the machine, lasts long enough to count as closed for idleness.)"""
    limits = dataclasses.replace(RETRY_LIMITS, sse_max_reconnect_delay_seconds=30.0)
    async with retry_server("0") as (port, stdout):
        conn = connect(
            ServerConfig(url=f"http://127.0.0.1:{port}/mcp", limits=limits, transport="streamable-http")
        )
        with anyio.fail_after(TIMEOUT):
            async with conn:
                times = await _get_times(stdout, 6)
                await conn.mcp.ping()
    gaps = [later - earlier for earlier, later in zip(times, times[1:])]
    for gap, least in zip(gaps, [0.05, 0.1, 0.2, 0.4, 0.8]):
        assert gap >= least, gaps


async def test_a_retry_field_too_large_for_a_float_is_cut_to_the_maximum() -> None:
    """``retry: 1`` and 400 zeros (an OverflowError traceback before): the reopening waits
    ``sse_max_reconnect_delay_seconds`` and the connection goes on."""
    async with retry_server("1" + "0" * 400) as (port, stdout):
        conn = connect(
            ServerConfig(url=f"http://127.0.0.1:{port}/mcp", limits=RETRY_LIMITS, transport="streamable-http")
        )
        with anyio.fail_after(TIMEOUT):
            async with conn:
                times = await _get_times(stdout, 3)
                await conn.mcp.ping()
    assert times[1] - times[0] >= 0.4 and times[2] - times[1] >= 0.4


async def test_a_retry_field_of_more_digits_than_int_reads_is_cut_to_the_maximum() -> None:
    """``retry: 1`` and 5,000 zeros: ``int()`` refuses more than 4,300 digits (a ValueError
    out of the event stream's reader); the reopening waits ``sse_max_reconnect_delay_seconds``
    and the connection goes on."""
    async with retry_server("1" + "0" * 5000) as (port, stdout):
        conn = connect(
            ServerConfig(url=f"http://127.0.0.1:{port}/mcp", limits=RETRY_LIMITS, transport="streamable-http")
        )
        with anyio.fail_after(TIMEOUT):
            async with conn:
                times = await _get_times(stdout, 3)
                await conn.mcp.ping()
    assert times[1] - times[0] >= 0.4 and times[2] - times[1] >= 0.4


def test_reconnect_delays_are_clamped_and_back_off_when_streams_deliver_nothing() -> None:
    delay = functools.partial(reconnect_delay, RETRY_LIMITS)
    assert delay(failures=0, empty=0, retry_ms=None) == 0.05
    assert delay(failures=0, empty=0, retry_ms=200) == 0.2
    assert delay(failures=0, empty=0, retry_ms=0) == 0.01  # the minimum
    assert delay(failures=0, empty=0, retry_ms=-5) == 0.01
    assert delay(failures=0, empty=0, retry_ms=10**400) == 0.4  # the maximum, no overflow
    assert [delay(failures=0, empty=n, retry_ms=0) for n in range(1, 6)] == [0.05, 0.1, 0.2, 0.4, 0.4]
    assert [delay(failures=n, empty=0, retry_ms=0) for n in (1, 2, 3, 100)] == [0.05, 0.1, 0.2, 0.4]

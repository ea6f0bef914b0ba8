"""The outbox and its writer (``mcpl_host.link.Link``), and the stdio transport's own stdin
pipe (``_PipeWriter``), on asyncio and trio.

Rules under test: a message sent while the writer is idle goes out in its sender's task
when the transport offers ``send_now()``; whatever follows before the writer's next turn is
queued and written in one ``send()``, after what went out at once (order kept); after two
answers read since the writer's turn, messages wait for the writer (``answered``); a partial
immediate write leaves the rest first in the queue; a transport that takes nothing at once
(full or broken pipe) leaves the message to the writer, whose ``send()`` reports the error.
The pipe writer writes what a full pipe takes, waits for the rest, and wakes a waiting
``send()`` when it is closed.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator

import anyio
import anyio.lowlevel
import pytest

from mcpl_host.jsonrpc.envelope import Response
from mcpl_host.jsonrpc.errors import ConnectionLost
from mcpl_host.jsonrpc.framing import ReadItem
from mcpl_host.limits import Limits
from mcpl_host.link import Link, Slot, native_event_type, slot_waiter_type
from mcpl_host.transports.stdio import StdioParameters, StdioTransport, _PipeWriter

from .conftest import FIXTURES

pytestmark = pytest.mark.anyio
TIMEOUT = 10


class ScriptedTransport:
    """A stand-in for a transport: records what is written at once and by ``send()``.
    ``takes`` bounds what ``send_now()`` accepts (None: everything); ``broken`` makes
    ``send()`` raise ``ConnectionLost``."""

    def __init__(self, takes: int | None = None, broken: bool = False) -> None:
        self.takes = takes
        self.broken = broken
        self.now: list[bytes] = []
        self.sent: list[bytes] = []
        self.sent_event = anyio.Event()

    def send_now(self, data: bytes) -> int:
        taken = data if self.takes is None else data[: self.takes]
        if taken:
            self.now.append(taken)
        return len(taken)

    async def send(self, data: bytes) -> None:
        if self.broken:
            raise ConnectionLost("could not write to the server (its stdin is closed)")
        self.sent.append(data)
        self.sent_event.set()

    def written(self) -> bytes:
        return b"".join(self.now) + b"".join(self.sent)


def make_link(transport: ScriptedTransport, lost: list[BaseException]) -> Link:
    return Link(transport, max_outbox_bytes=1 << 20, on_lost=lost.append)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def writing(link: Link) -> AsyncIterator[None]:
    """The link's writer runs inside; it is stopped on the way out, a failure included
    (it is shielded: nothing else would stop it)."""
    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(link.write_loop)
            try:
                yield
            finally:
                link.close()


async def test_a_message_sent_while_the_writer_is_idle_goes_out_in_the_senders_task() -> None:
    transport, lost = ScriptedTransport(), []
    link = make_link(transport, lost)
    link.send(b"one\n")
    assert transport.now == [b"one\n"] and link.queued_bytes == 0  # before any checkpoint


async def test_what_follows_before_the_writers_turn_is_queued_and_written_in_one_send() -> None:
    transport, lost = ScriptedTransport(), []
    link = make_link(transport, lost)
    async with writing(link):
        link.send(b"one\n")
        link.send(b"two\n")
        link.send(b"three\n")
        assert transport.now == [b"one\n"] and link.queued_bytes == len(b"two\nthree\n")
        await transport.sent_event.wait()
        assert transport.sent == [b"two\nthree\n"]
        assert transport.written() == b"one\ntwo\nthree\n"
    assert lost == []


async def test_after_the_writers_turn_an_idle_link_writes_at_once_again() -> None:
    transport, lost = ScriptedTransport(), []
    link = make_link(transport, lost)
    async with writing(link):
        link.send(b"one\n")
        await anyio.wait_all_tasks_blocked()  # the writer has had its turn, and waits
        link.send(b"two\n")
        assert transport.now == [b"one\n", b"two\n"] and transport.sent == []


async def test_after_two_answers_read_in_one_turn_the_next_message_waits_for_the_writer() -> None:
    # The tasks two answers wake send together: one write takes all they send. After one
    # answer, the next message (the usual sequential request) still goes at once, and the
    # count starts again at each turn of the writer.
    transport, lost = ScriptedTransport(), []
    link = make_link(transport, lost)
    async with writing(link):
        link.answered()
        link.send(b"one\n")
        assert transport.now == [b"one\n"]
        await anyio.wait_all_tasks_blocked()  # the writer's turn
        link.answered()
        link.answered()
        link.send(b"two\n")
        link.send(b"three\n")
        assert transport.now == [b"one\n"] and link.queued_bytes == len(b"two\nthree\n")
        await transport.sent_event.wait()
        assert transport.sent == [b"two\nthree\n"]
        await anyio.wait_all_tasks_blocked()
        link.answered()
        link.send(b"four\n")
        assert transport.now == [b"one\n", b"four\n"]


async def test_a_partial_immediate_write_leaves_the_rest_first_in_the_queue() -> None:
    transport, lost = ScriptedTransport(takes=3), []
    link = make_link(transport, lost)
    async with writing(link):
        link.send(b"abcdef\n")
        link.send(b"next\n")
        assert transport.now == [b"abc"] and link.queued_bytes == len(b"def\nnext\n")
        await transport.sent_event.wait()
        assert transport.written() == b"abcdef\nnext\n"


async def test_a_transport_that_takes_nothing_leaves_the_message_to_the_writer_which_reports() -> None:
    transport, lost = ScriptedTransport(takes=0, broken=True), []
    link = make_link(transport, lost)
    async with writing(link):
        link.send(b"one\n")
        assert transport.now == [] and link.queued_bytes == len(b"one\n")
        await link.stopped.wait()
    assert len(lost) == 1 and isinstance(lost[0], ConnectionLost)


# -- the stdio transport's stdin pipe ---------------------------------------------------------


def pipe() -> tuple[int, _PipeWriter]:
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    return read_end, _PipeWriter(write_end)


async def test_a_full_pipe_takes_part_at_once_and_send_waits_for_the_reader() -> None:
    read_end, writer = pipe()
    try:
        payload = bytes(range(256)) * 1024  # 256 KiB: more than a pipe holds
        taken = writer.write_now(payload)
        assert 0 < taken < len(payload)
        assert writer.write_now(payload[taken:]) == 0  # full: nothing more, no error
        got = bytearray()
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(writer.send, payload[taken:])
                while len(got) < len(payload):
                    await anyio.wait_readable(read_end)
                    got += os.read(read_end, 65536)
        assert bytes(got) == payload
    finally:
        writer.close()
        os.close(read_end)


async def test_closing_the_pipe_wakes_a_send_waiting_on_it() -> None:
    read_end, writer = pipe()
    try:
        while writer.write_now(b"x" * 65536):
            pass  # fill it
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:

                async def send() -> None:
                    with pytest.raises(anyio.ClosedResourceError):
                        await writer.send(b"more\n")

                tg.start_soon(send)
                await anyio.wait_all_tasks_blocked()
                writer.close()
        assert writer.write_now(b"late\n") == 0  # closed: nothing, no error
    finally:
        os.close(read_end)


async def test_a_broken_pipe_takes_nothing_at_once_and_send_raises() -> None:
    read_end, writer = pipe()
    os.close(read_end)  # the server's end is gone
    try:
        assert writer.write_now(b"one\n") == 0
        with pytest.raises(BrokenPipeError):
            await writer.send(b"one\n")
    finally:
        writer.close()


# -- a link over a real server's stdin --------------------------------------------------------


async def test_over_a_real_pipe_every_line_reaches_the_server_once_whole_and_in_send_order() -> None:
    # A server that echoes each line back. Each round starts on an idle link with a lead
    # line of a size around the pipe's capacity (64 KiB on Linux), written at once, whole or
    # in part, then several tasks send more before the writer's turn (queued behind the
    # rest). The echo must be exactly the lines in send() order, each once and whole.
    sizes = [0, 1, 4095, 4096, 65535, 65536, 65537, 200_000]
    limits = Limits(max_line_bytes=1 << 20)
    params = StdioParameters(sys.executable, (str(FIXTURES / "proc_echo.py"),))
    sent: list[bytes] = []
    lost: list[BaseException] = []
    got: list[ReadItem] = []

    def send(line: bytes) -> None:
        link.send(line + b"\n")
        sent.append(line)  # send() is synchronous: this is the order on the wire

    async def sender(number: int, size: int) -> None:
        send(f"task {number}:".encode() + b"y" * size)
        await anyio.lowlevel.checkpoint()
        send(f"task {number} again".encode())

    with anyio.fail_after(TIMEOUT * 3):
        async with StdioTransport(params, limits=limits) as transport:
            link = Link(transport, max_outbox_bytes=64 << 20, on_lost=lost.append)
            async with anyio.create_task_group() as tg:
                tg.start_soon(link.write_loop)
                try:
                    for round_number, lead in enumerate(sizes):
                        send(f"round {round_number}:".encode() + b"x" * lead)
                        async with anyio.create_task_group() as senders:
                            for number in range(6):
                                senders.start_soon(
                                    sender, number, sizes[(round_number + number) % len(sizes)]
                                )
                        while len(got) < len(sent):  # the link is idle again after this
                            got.append(await transport.receive())
                finally:
                    link.close()  # the writer is shielded: nothing else stops it
    assert lost == []
    assert got == sent


# -- the backend's own events -------------------------------------------------------------------


async def test_the_connections_events_are_the_running_backends_own_and_anyio_cancels_their_wait(
    anyio_backend_name: str,
) -> None:
    make = native_event_type()
    assert make.__module__.split(".")[0] == anyio_backend_name  # asyncio.Event or trio.Event
    slot = Slot(event=make())
    scope = anyio.CancelScope()

    async def wait() -> None:
        with scope:
            await slot.event.wait()

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await anyio.wait_all_tasks_blocked()  # waiting, and nobody answers
            scope.cancel()
    assert scope.cancelled_caught
    slot.settle(Response(1, {"ok": True}, None, False, False))
    with anyio.fail_after(TIMEOUT):
        await slot.event.wait()
    assert slot.outcome() == {"ok": True}


def test_outside_a_run_the_event_type_is_anyios() -> None:
    assert native_event_type() is anyio.Event


async def test_a_slots_waiter_is_set_once_and_its_cancelled_wait_leaves_set_harmless(
    anyio_backend_name: str,
) -> None:
    make = slot_waiter_type(native_event_type())
    assert make.__name__ == {"asyncio": "FutureWaiter", "trio": "TrioWaiter"}[anyio_backend_name]
    early = make()
    early.set()
    early.set()  # a second answer (or a failure after the answer) changes nothing
    assert early.is_set()
    with anyio.fail_after(TIMEOUT):
        await early.wait()  # set before the wait: returns
    waiter = make()
    scope = anyio.CancelScope()

    async def wait() -> None:
        with scope:
            await waiter.wait()

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await anyio.wait_all_tasks_blocked()
            scope.cancel()
    assert scope.cancelled_caught
    waiter.set()  # the answer read after its requester gave up: no error, no task woken
    await anyio.lowlevel.checkpoint()
    await anyio.wait_all_tasks_blocked()

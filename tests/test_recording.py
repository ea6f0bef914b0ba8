"""Session recordings (``mcpl_host.recording``): the pure parts by plain calls (entries,
bounds, the rotation decision and moves, redaction), the ``Recorder``'s file and its
subscriptions, and a real server (``fixtures/demo_server.py``) recorded through the real
``Host`` and read back, every line valid against the shipped ``recording.schema.json``.
"""

from __future__ import annotations

import datetime
import inspect
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import orjson
import pytest

from mcpl_host import GrantPolicy, Limits, connect
from mcpl_host.config import ServerConfig
from mcpl_host.host import Host
from mcpl_host.jsonrpc.framing import LineTooLong, ReadItem
from mcpl_host.recording import (
    FORMAT,
    MEMO_ENTRIES,
    MEMO_MAX_CHARS,
    MemoRedactor,
    Recorder,
    RecordingTransport,
    build_entry,
    header,
    message_fields,
    must_rotate,
    read_recording,
    redacted,
    rotation_moves,
    schema,
    session_fingerprint,
    shrunk,
    text_fields,
    too_long_fields,
)
from mcpl_host.secrets import REDACTED, Redactor
from mcpl_host.transports.base import CarriesStateless, ReceivesNow, SendsNow, StartsServer

from .conftest import FIXTURES

SECRET = "s3cr3t-recorded-value"
REDACTOR = Redactor([SECRET])
VALIDATOR = jsonschema.Draft202012Validator(schema(), format_checker=jsonschema.FormatChecker())


def valid_file(path: Path | str) -> list[dict[str, Any]]:
    """The entries of one recording file, after checking every line against the schema."""
    head, entries = read_recording(path)
    for line in (head, *entries):
        VALIDATOR.validate(line)
    return entries


# --- pure parts -------------------------------------------------------------------------------


def test_header_names_format_version_and_host() -> None:
    started = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    made = header(started, "9.9")
    assert made == {
        "format": FORMAT,
        "version": 1,
        "started": "2026-01-02T03:04:05Z",
        "host": {"name": "mcpl-host", "version": "9.9"},
    }
    VALIDATOR.validate(made)


def test_message_fields_keep_the_parsed_message_and_the_entry_redacts_it() -> None:
    message = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"text": SECRET}}
    fields = message_fields(orjson.dumps(message), 1000, REDACTOR)
    assert fields == {"message": message}
    entry = build_entry(1, 0.0, "s", 1, "sent", {"transport": "stdio", **fields}, REDACTOR)
    assert entry["message"]["params"] == {"text": REDACTED}
    VALIDATOR.validate(entry)


def test_message_over_the_bound_keeps_size_method_and_id() -> None:
    message = {"jsonrpc": "2.0", "id": "a", "method": "tools/call", "params": {"text": "x" * 200}}
    fields = message_fields(orjson.dumps(message), 100, REDACTOR)
    assert fields == {"omitted": {"bytes": len(orjson.dumps(message))}, "method": "tools/call", "id": "a"}


def test_line_that_is_not_json_is_text_redacted_then_cut() -> None:
    # The secret straddles the cut: redacted first, so no piece of it is left.
    line = b"x" * 10 + SECRET.encode() + b" tail"
    fields = message_fields(line, 14, REDACTOR)
    assert fields == {"text": "x" * 10 + REDACTED[:4]}
    assert text_fields("é".encode() * 4, 3, REDACTOR) == {"text": "é"}  # never half a character


def test_line_too_long_keeps_its_size_and_id() -> None:
    item = LineTooLong(max_line_bytes=10, size=99, head=b'{"jsonrpc":"2.0","id":7,"result":')
    assert too_long_fields(item) == {"omitted": {"bytes": 99}, "id": 7}


def test_redacted_hides_every_string_keys_included_at_any_depth() -> None:
    value = {SECRET: [SECRET, {"k": f"Bearer {SECRET}"}], f"x{SECRET}": 1, "n": None}
    assert redacted(value, REDACTOR) == {
        REDACTED: [REDACTED, {"k": f"Bearer {REDACTED}"}],
        f"x{REDACTED}": 1,
        "n": None,
    }
    deep: Any = SECRET
    for _ in range(5000):  # deeper than the interpreter's recursion limit
        deep = [deep]
    shown = redacted(deep, REDACTOR)
    for _ in range(5000):
        shown = shown[0]
    assert shown == REDACTED


def test_memo_redactor_answers_as_the_redactor_and_stays_bounded() -> None:
    memo = MemoRedactor(REDACTOR)
    texts = [SECRET, f"a {SECRET} b", "Bearer abcdefghijkl", "plain", "x" * (MEMO_MAX_CHARS + 1) + SECRET]
    for text in texts * 2:  # the second time from memory
        assert memo.redact(text) == REDACTOR.redact(text)
    for index in range(MEMO_ENTRIES * 2):
        memo.redact(str(index))
    assert len(memo._seen) <= MEMO_ENTRIES  # pyright: ignore[reportPrivateUsage]


def test_build_entry_puts_the_common_fields_first_and_redacts() -> None:
    entry = build_entry(
        4, 1.5, "srv", 2, "lifecycle", {"event": "spawn", "command": SECRET, "pid": 9}, REDACTOR
    )
    assert list(entry)[:5] == ["seq", "t", "server", "connection", "kind"]
    assert entry["command"] == REDACTED
    VALIDATOR.validate(entry)


def test_shrunk_leaves_out_the_content_with_its_size() -> None:
    entry = build_entry(1, 0.0, "s", 1, "decision", {"event": "refusal", "data": {"a": "b"}}, REDACTOR)
    small = shrunk(entry)
    assert "data" not in small and small["omitted"] == {"bytes": len(b'{"a":"b"}')}
    VALIDATOR.validate(small)


def test_a_session_id_is_shown_as_a_fingerprint_only() -> None:
    shown = session_fingerprint("a-session-id-worth-a-session")
    assert shown == session_fingerprint("a-session-id-worth-a-session") != session_fingerprint("another")
    assert shown.startswith("sha256:") and len(shown) == 7 + 16 and "session" not in shown


def test_rotation_decision() -> None:
    assert not must_rotate(90, 10, 100, has_entries=True)
    assert must_rotate(91, 10, 100, has_entries=True)
    assert not must_rotate(91, 10, 100, has_entries=False)  # a file never holds the header alone


def test_rotation_moves_oldest_first() -> None:
    assert rotation_moves("r", 3) == [("r.3", None), ("r.2", "r.3"), ("r.1", "r.2"), ("r", "r.1")]
    assert rotation_moves("r", 1) == [("r.1", None), ("r", "r.1")]


# --- the recorder -----------------------------------------------------------------------------


def test_rotation_keeps_each_file_under_the_bound_and_the_files_kept(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    limits = Limits(max_recording_bytes=2000, recording_files_kept=2, max_recorded_message_bytes=300)
    with Recorder(path, limits=limits) as recorder:
        recorder.set_redactor("s", REDACTOR)
        for index in range(200):
            recorder.entry("s", 1, "lifecycle", event="restart", reason=f"{index} {SECRET}")
        recorder.entry("s", 1, "decision", event="refusal", data={"big": "y" * 5000})  # over a file
    files = sorted(tmp_path.iterdir())
    assert [file.name for file in files] == ["rec.jsonl", "rec.jsonl.1", "rec.jsonl.2"]
    assert all(file.stat().st_size <= 2000 for file in files)
    seqs = [
        entry["seq"]
        for name in ("rec.jsonl.2", "rec.jsonl.1", "rec.jsonl")
        for entry in valid_file(tmp_path / name)
    ]
    assert seqs == list(range(seqs[0], 202))  # continuous across files, ending with the last
    last = valid_file(path)[-1]
    assert "data" not in last and last["omitted"]["bytes"] > 5000
    assert SECRET.encode() not in b"".join(file.read_bytes() for file in files)


def test_io_error_stops_the_recording_without_raising(tmp_path: Path, logs: list[dict[str, Any]]) -> None:
    folder = tmp_path / "gone"
    folder.mkdir()
    recorder = Recorder(folder / "rec.jsonl", limits=Limits(max_recording_bytes=400))
    (folder / "rec.jsonl").unlink()
    folder.rmdir()
    for _ in range(10):  # the second rotation cannot open the new file
        recorder.entry("s", 1, "lifecycle", event="closed", reason="x" * 100)
    assert recorder.failed and recorder.entries == 10 and recorder.unwritten == 0
    assert [entry["event"] for entry in logs] == ["recording stopped"]
    recorder.close()


def test_a_value_that_is_not_json_is_counted_not_raised(tmp_path: Path) -> None:
    with Recorder(tmp_path / "rec.jsonl") as recorder:
        recorder.entry("s", 1, "decision", event="refused", data={"x": object()})
        recorder.entry("s", 1, "lifecycle", event="closed")
    assert recorder.unwritten == 1 and [entry["seq"] for entry in valid_file(tmp_path / "rec.jsonl")] == [2]


def test_no_path_writes_nothing_and_counts(tmp_path: Path) -> None:
    with Recorder(None) as recorder:
        recorder.entry("s", 1, "lifecycle", event="closed")
        assert recorder.entries == 1 and not recorder.failed
    assert list(tmp_path.iterdir()) == []


@pytest.mark.anyio
async def test_subscription_is_bounded_and_never_blocks() -> None:
    with Recorder(None) as recorder:
        with recorder.subscribe(2) as subscription:
            for _ in range(5):
                recorder.entry("s", 1, "lifecycle", event="closed")
            assert subscription.dropped == 3
            recorder.close()  # ends the iteration after what is buffered
            seen = [entry["seq"] async for entry in subscription]
    assert seen == [1, 2]


class PartialPipe:
    """A transport whose ``send_now`` takes 7 bytes at a time (a full pipe), to check that
    a line written in two parts is recorded once, whole."""

    def __init__(self) -> None:
        self.written = b""

    def send_now(self, data: bytes) -> int:
        self.written += data[:7]
        return min(7, len(data))

    async def send(self, data: bytes) -> None:
        self.written += data

    async def receive(self) -> ReadItem:
        return b'{"jsonrpc":"2.0","id":1,"result":{}}'

    async def aclose(self) -> None:
        return None

    stderr_tail: list[str] = []

    def describe(self) -> str:
        return "partial"

    def negotiated(self, protocol_version: str) -> None:
        return None


class HeldLines(PartialPipe):
    """A transport that holds lines already read (``ReceivesNow``, as stdio does): one
    read gave three."""

    def __init__(self) -> None:
        super().__init__()
        self.held = [b'{"jsonrpc":"2.0","method":"b"}', b'{"jsonrpc":"2.0","method":"c"}']

    def receive_now(self) -> ReadItem | None:
        return self.held.pop(0) if self.held else None

    async def receive(self) -> ReadItem:
        return b'{"jsonrpc":"2.0","method":"a"}'


@pytest.mark.anyio
async def test_recording_transport_records_the_lines_handed_over_at_once() -> None:
    # The read loop takes the lines a read gave with receive_now(): each is recorded, in
    # order, as receive() records its own; a transport without it does not get one.
    with Recorder(None) as recorder, recorder.subscribe(10) as subscription:
        transport = RecordingTransport(HeldLines(), recorder, "s", 1, "stdio")
        assert isinstance(transport, ReceivesNow)
        assert not isinstance(RecordingTransport(PartialPipe(), recorder, "s", 2, "stdio"), ReceivesNow)
        receive_now = transport.receive_now  # type: ignore[attr-defined]
        taken = [await transport.receive(), receive_now(), receive_now(), receive_now()]
        recorder.close()
        seen = [entry async for entry in subscription]
    assert taken[3] is None
    assert [entry["message"]["method"] for entry in seen if entry["kind"] == "received"] == ["a", "b", "c"]


@pytest.mark.anyio
async def test_recording_transport_records_whole_lines_sent_in_parts() -> None:
    with Recorder(None) as recorder, recorder.subscribe(10) as subscription:
        inner = PartialPipe()
        transport = RecordingTransport(inner, recorder, "s", 1, "stdio")
        first, second = b'{"jsonrpc":"2.0","method":"a"}\n', b'{"jsonrpc":"2.0","method":"b"}\n'
        send_now = transport.send_now  # type: ignore[attr-defined]
        taken = send_now(first + second)
        await transport.send((first + second)[taken:])
        await transport.receive()
        recorder.close()
        seen = [entry async for entry in subscription]
    assert inner.written == first + second
    assert [(entry["kind"], entry["message"].get("method")) for entry in seen] == [
        ("sent", "a"),
        ("sent", "b"),
        ("received", None),
    ]
    # Read statically too, as isinstance() of a runtime_checkable Protocol does (Python 3.12+).
    assert inspect.getattr_static(transport, "send_now") is not None
    bare = RecordingTransport(object(), recorder, "s", 1, "stdio")  # type: ignore[arg-type]
    assert not hasattr(bare, "send_now") and not isinstance(bare, (SendsNow, StartsServer, CarriesStateless))


# --- a real server through the Host -----------------------------------------------------------


@pytest.mark.anyio
async def test_host_records_a_real_server_both_ways_with_its_lifecycle_and_decisions(tmp_path: Path) -> None:
    path = tmp_path / "demo.jsonl"
    config = ServerConfig(
        command=sys.executable,
        args=(str(FIXTURES / "demo_server.py"),),
        # pushEvents is not granted: the demo pushes one tick anyway, which the host refuses.
        env={"DEMO_API_TOKEN": SECRET, "DEMO_PUSH_COUNT": "1"},
        grant_policy=GrantPolicy(grant=("tools",)),
    )
    with Recorder(path) as recorder:
        async with Host({"demo": config}, record=recorder) as host:
            refusals = host.subscribe(kinds=["refused"])
            with anyio.fail_after(30):
                conn = await host.server("demo").connected()
                transport = conn.connection.transport
                assert isinstance(transport, RecordingTransport)
                # The stdio transport's capabilities, seen statically (isinstance, Python 3.12+).
                for name in ("send_now", "terminate_now", "carries_stateless"):
                    inspect.getattr_static(transport, name)
                assert all(isinstance(transport, kind) for kind in (SendsNow, StartsServer, CarriesStateless))
                result = await conn.mcp.call_tool("echo", {"text": f"say {SECRET}"})
                refused = await refusals.__anext__()
            assert SECRET in result.text  # the host got it; the recording must not
    entries = valid_file(path)
    assert SECRET.encode() not in path.read_bytes()
    lifecycle = [(entry["event"], entry.get("status")) for entry in entries if entry["kind"] == "lifecycle"]
    assert lifecycle == [("spawn", None), ("connect", None), ("exit", 0), ("closed", None)]
    assert entries[0]["pid"] > 0 and entries[0]["command"] == sys.executable
    decisions = [entry for entry in entries if entry["kind"] == "decision"]
    assert [entry["event"] for entry in decisions] == ["policy_receipt", "grant", "refused"]
    assert decisions[0]["data"]["accepted"] is True
    # The grant in force: tools only (pushEvents advertised, not granted), by the receipt.
    assert decisions[1]["data"] == {"paths": ["tools"], "settledBy": "receipt"}
    assert decisions[2]["data"]["method"] == "push/event"
    assert decisions[2]["data"]["reason"] == refused.reason and refused.reason
    assert {entry["server"] for entry in entries} == {"demo"}
    assert {entry["connection"] for entry in entries} == {1}
    sent = {
        entry["message"]["id"]: entry
        for entry in entries
        if entry["kind"] == "sent" and "method" in entry["message"] and "id" in entry["message"]
    }
    received = [entry for entry in entries if entry["kind"] == "received" and "id" in entry["message"]]
    assert sent[1]["message"]["method"] in ("initialize", "server/discover")
    answer_to_push = next(
        entry for entry in entries if entry["kind"] == "sent" and "error" in entry["message"]
    )
    assert answer_to_push["message"]["id"] == decisions[2]["data"]["id"]  # the refused push, answered
    call = next(entry for entry in sent.values() if entry["message"]["method"] == "tools/call")
    assert call["message"]["params"]["arguments"] == {"text": f"say {REDACTED}"}
    answer = next(entry for entry in received if entry["message"]["id"] == call["message"]["id"])
    assert answer["t"] >= call["t"] and answer["seq"] > call["seq"]
    assert [entry["seq"] for entry in entries] == list(range(1, len(entries) + 1))


@pytest.mark.anyio
async def test_a_connection_recorded_without_an_observer_still_records_its_decisions(tmp_path: Path) -> None:
    # No Host and no observer: the events are built for the recorder alone.
    path = tmp_path / "demo.jsonl"
    config = ServerConfig(
        command=sys.executable,
        args=(str(FIXTURES / "demo_server.py"),),
        env={"DEMO_PUSH_COUNT": "1"},
        grant_policy=GrantPolicy(grant=("tools",)),
    )
    with Recorder(path) as recorder:
        with anyio.fail_after(30):
            async with connect(config, record=recorder) as conn:
                await conn.mcp.call_tool("echo", {"text": "hi"})
    decisions = [entry["event"] for entry in valid_file(path) if entry["kind"] == "decision"]
    assert decisions[:2] == ["policy_receipt", "grant"]


@pytest.mark.anyio
async def test_no_recorder_wraps_nothing() -> None:
    config = ServerConfig(command=sys.executable, args=(str(FIXTURES / "demo_server.py"),))
    async with Host({"demo": config}) as host:
        with anyio.fail_after(30):
            conn = await host.server("demo").connected()
        assert not isinstance(conn.connection.transport, RecordingTransport)
        assert host.server("demo").hosted.recorder is None


def test_schema_is_shipped_in_the_package() -> None:
    import mcpl_host

    assert (Path(mcpl_host.__file__).parent / "recording.schema.json").is_file()
    jsonschema.Draft202012Validator.check_schema(schema())
    assert os.path.basename(schema()["$id"]) == "recording.schema.json"

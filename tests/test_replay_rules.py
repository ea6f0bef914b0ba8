"""The replay's pure rules by plain calls: reading a recording (``replay.script``), the first
difference of two JSON values (``replay.diff``) and the matching rule (``replay.matcher``,
docs/protocol.md RP1-RP7)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from mcpl_host.limits import Limits
from mcpl_host.replay.diff import MISSING, first_difference
from mcpl_host.replay.load import load_script
from mcpl_host.replay.matcher import Matcher, Mismatch, Reply
from mcpl_host.replay.script import RecordingError, read_script, server_names
from tests.replay_recordings import HEADER, Book, echo_session


def _reply(result: Reply | Mismatch) -> Reply:
    assert isinstance(result, Reply), result
    return result


def _messages(result: Reply | Mismatch) -> list[Any]:
    return [write.message for write in _reply(result).writes]


def _call(id: Any, text: str, meta: Any = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "echo", "arguments": {"text": text}}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}


def _text(message: Any) -> str:
    return message["result"]["content"][0]["text"]


def test_first_difference_names_the_json_pointer_of_the_first_change() -> None:
    assert first_difference({"a": [1, {"b": 2}]}, {"a": [1, {"b": 2.0}]}) is None
    found = first_difference({"a": [1, {"b/c": 2}], "z": 1}, {"a": [1, {"b/c": 3}], "z": 2})
    assert found is not None and (found.path, found.recorded, found.live) == ("/a/1/b~1c", 2, 3)
    found = first_difference({"a": 1}, {"a": 1, "new": True})
    assert found is not None and found.path == "/new" and found.recorded is MISSING
    found = first_difference([True], [1])
    assert found is not None and found.path == "/0"
    assert "recorded true, live 1" in found.sentence()


def test_a_recording_is_read_as_cues_and_gated_outputs() -> None:
    script = read_script(echo_session().lines())
    assert script.server == "demo"
    methods = [cue.method for cue in script.cues]
    assert methods == ["server/discover", "initialize", "notifications/initialized", "tools/list",
                       "tools/call", "tools/call", "tools/call", "tools/call", None]  # fmt: skip
    log = next(o for o in script.outputs if o.method == "notifications/message")
    assert script.cues[log.gate].method == "tools/call" and log.answers is None
    answers = [o.answers for o in script.outputs if o.answers is not None]
    assert answers == [0, 1, 3, 4, 5, 6, 7]


def test_reading_refuses_what_is_no_recording_and_asks_which_server() -> None:
    with pytest.raises(RecordingError, match="not an mcpl-host recording"):
        read_script([b'{"jsonrpc": "2.0"}'])
    with pytest.raises(RecordingError, match="version 2"):
        read_script([orjson.dumps({**HEADER, "version": 2})])
    with pytest.raises(RecordingError, match="line 2 is not JSON"):
        read_script([orjson.dumps(HEADER), b"{oops"])
    book = echo_session()
    book.request(1, "ping", None, {}, server="other")
    assert server_names(book.lines()) == ["demo", "other"]
    with pytest.raises(RecordingError, match=r"2 servers \(demo, other\): name one with --server"):
        read_script(book.lines())
    with pytest.raises(RecordingError, match="no server 'nope'"):
        read_script(book.lines(), "nope")
    assert [cue.method for cue in read_script(book.lines(), "other").cues] == ["ping"]


def test_requests_match_by_method_and_params_with_ids_remapped_and_meta_ignored() -> None:
    matcher = Matcher(read_script(echo_session().lines()))
    assert _messages(
        matcher.receive({"jsonrpc": "2.0", "id": 70, "method": "initialize", "params": {"x": 1}})
    ) == [{"jsonrpc": "2.0", "id": 70, "result": echo_session().entries[3]["message"]["result"]}]
    # RP2: the recorded call had a progress token, this one another: _meta is not compared.
    first = _messages(matcher.receive(_call("a", "hi", {"progressToken": "zz"})))
    assert first[0]["id"] == "a" and _text(first[0]) == "hi 1"
    # RP4: the log notification the server wrote after that call follows its answer.
    assert first[1]["method"] == "notifications/message"
    # RP3: identical requests take the recorded answers in order; then the last repeats.
    assert _text(_messages(matcher.receive(_call(8, "yo")))[0]) == "yo 1"
    assert _text(_messages(matcher.receive(_call(9, "hi")))[0]) == "hi 2"
    again = _messages(matcher.receive(_call(10, "hi")))
    assert len(again) == 1 and again[0]["id"] == 10 and _text(again[0]) == "hi 2"


def test_the_first_request_that_differs_is_named_with_its_params_diff_and_place() -> None:
    matcher = Matcher(read_script(echo_session().lines()))
    mismatch = matcher.receive(_call(12, "HI"))
    assert isinstance(mismatch, Mismatch)
    assert "request tools/call (live id 12)" in mismatch.sentence
    assert 'at /params/arguments/text: recorded "hi", live "HI"' in mismatch.sentence
    assert "entry seq 8 (line 9)" in mismatch.sentence
    assert mismatch.answer["id"] == 12 and mismatch.answer["error"]["code"] == -32603
    never = matcher.receive({"jsonrpc": "2.0", "id": 13, "method": "prompts/list"})
    assert isinstance(never, Mismatch) and "has no prompts/list request" in never.sentence


def test_notifications_and_unrecorded_answers_never_differ() -> None:
    matcher = Matcher(read_script(echo_session().lines()))
    assert (
        _reply(matcher.receive({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}})).writes
        == ()
    )
    assert _reply(matcher.receive({"jsonrpc": "2.0", "id": "s9", "result": {}})).writes == ()


def test_a_server_request_during_a_call_is_written_first_and_the_answer_waits_for_the_host() -> None:
    book = Book()
    book.request(1, "tools/call", {"name": "ask", "arguments": {}})
    book.received({"jsonrpc": "2.0", "id": "s1", "method": "sampling/createMessage", "params": {"m": 1}})
    book.sent({"jsonrpc": "2.0", "id": "s1", "result": {"content": {"type": "text", "text": "model says"}}})
    book.received({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "done"}]}})
    matcher = Matcher(read_script(book.lines()))
    first = _messages(matcher.receive({"jsonrpc": "2.0", "id": 44, "method": "tools/call",
                                       "params": {"name": "ask", "arguments": {}}}))  # fmt: skip
    assert first == [{"jsonrpc": "2.0", "id": "s1", "method": "sampling/createMessage", "params": {"m": 1}}]
    # The host's answer is not compared (RP4); the call's answer follows it, id remapped.
    second = _messages(matcher.receive({"jsonrpc": "2.0", "id": "s1", "result": {"other": True}}))
    assert second == [{"jsonrpc": "2.0", "id": 44, "result": {"content": [{"type": "text", "text": "done"}]}}]


def test_omitted_answers_become_errors_and_a_restart_ends_the_transport() -> None:
    book = Book()
    book.request(1, "server/discover", {})
    book.lifecycle("exit", status=1)
    book.connection = 2
    book.request(1, "initialize", {})
    book._add("received", transport="stdio", omitted={"bytes": 9000000}, id=1)
    book._add("received", transport="stdio", omitted={"bytes": 9000000}, method="notifications/message")
    script = read_script(book.lines())
    matcher = Matcher(script)
    discover = _reply(matcher.receive({"jsonrpc": "2.0", "id": 0, "method": "server/discover"}))
    assert discover.writes == () and discover.end  # RP7: the recorded server went away here
    init = _reply(Matcher(script).receive({"jsonrpc": "2.0", "id": 5, "method": "initialize", "params": {}}))
    assert not init.end
    assert (
        init.writes[0].message["id"] == 5
        and "omitted this answer (9000000 bytes)" in init.writes[0].message["error"]["message"]
    )
    assert len(init.writes) == 1 and "omitted this notifications/message" in init.skipped[0]


def test_timing_is_kept_only_when_asked_and_bounded() -> None:
    book = Book()
    book.request(1, "tools/list", {})
    book.received({"jsonrpc": "2.0", "id": 1, "result": {"tools": []}})
    book.entries[-1]["t"] = 100.0
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    assert _reply(Matcher(read_script(book.lines())).receive(request)).writes[0].delay == 0.0
    kept = Matcher(read_script(book.lines()), keep_timing=True, max_gap_seconds=2.5)
    assert _reply(kept.receive(request)).writes[0].delay == 2.5


def test_lines_that_were_not_json_are_written_back_and_opening_lines_come_first() -> None:
    book = Book()
    book._add("received", transport="stdio", text="starting up...")
    book.request(1, "ping", None, {})
    script = read_script(book.lines())
    matcher = Matcher(script)
    assert [w.text for w in matcher.opening().writes] == ["starting up..."]
    assert _messages(matcher.receive({"jsonrpc": "2.0", "id": 2, "method": "ping"})) == [
        {"jsonrpc": "2.0", "id": 2, "result": {}}
    ]


def test_a_recording_over_the_bound_is_refused_unread(tmp_path: Any) -> None:
    path = tmp_path / "big.jsonl"
    path.write_bytes(echo_session().text())
    assert load_script(path, None).server == "demo"
    with pytest.raises(RecordingError, match=r"over 100 bytes \(Limits.max_recording_bytes"):
        load_script(path, None, Limits(max_recording_bytes=100))
    with pytest.raises(RecordingError, match="cannot read"):
        load_script(tmp_path / "absent.jsonl", None)


def test_the_opening_lines_do_not_wait_for_the_recorders_start() -> None:
    book = Book()
    book._add("received", transport="stdio", text="banner")
    book.entries[-1]["t"] = 40.0
    matcher = Matcher(read_script(book.lines()), keep_timing=True, max_gap_seconds=5.0)
    assert [write.delay for write in matcher.opening().writes] == [0.0]


def test_a_ping_the_recording_lacks_is_answered_empty_never_a_difference() -> None:
    matcher = Matcher(read_script(echo_session().lines()))
    assert _messages(matcher.receive({"jsonrpc": "2.0", "id": "p", "method": "ping"})) == [
        {"jsonrpc": "2.0", "id": "p", "result": {}}
    ]

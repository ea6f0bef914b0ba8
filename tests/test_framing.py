"""LineReader, loads_line and dumps_message (ENVELOPE.md D6; PROTOCOL.md §1.1)."""

from __future__ import annotations

import json

import orjson
from hypothesis import given
from hypothesis import strategies as st

from mcpl_host.jsonrpc.framing import LineReader, LineTooLong, dumps_message, loads_line

STREAM = b'{"a":1}\r\n{"b":"\xc3\xa9t\xc3\xa9"}\n\n{"c":[1,2]}\n'
EXPECTED = [b'{"a":1}', b'{"b":"\xc3\xa9t\xc3\xa9"}', b"", b'{"c":[1,2]}']


def feed_all(reader: LineReader, chunks: list[bytes]) -> list[object]:
    out: list[object] = []
    for chunk in chunks:
        out.extend(reader.feed(chunk))
    return out


def test_whole_stream_crlf_stripped() -> None:
    assert feed_all(LineReader(), [STREAM]) == EXPECTED


def test_byte_by_byte_including_split_utf8() -> None:
    chunks = [STREAM[i : i + 1] for i in range(len(STREAM))]
    assert feed_all(LineReader(), chunks) == EXPECTED


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=10))
def test_random_splits_give_the_same_lines(cuts: list[int]) -> None:
    points = sorted(set(cuts))
    chunks = [STREAM[a:b] for a, b in zip([0, *points], [*points, len(STREAM)])]
    assert feed_all(LineReader(), chunks) == EXPECTED


def test_crlf_split_between_reads() -> None:
    assert feed_all(LineReader(), [b'{"a":1}\r', b"\n"]) == [b'{"a":1}']


def test_over_long_line_is_dropped_once_and_reading_goes_on() -> None:
    reader = LineReader(max_line_bytes=10)
    out = feed_all(reader, [b"x" * 8, b"x" * 8, b"x" * 50, b"yy\nok\n"])
    assert out == [LineTooLong(10), b"ok"]


def test_over_long_line_within_one_chunk() -> None:
    assert feed_all(LineReader(max_line_bytes=4), [b"123456\nabc\n"]) == [LineTooLong(4), b"abc"]


def test_stream_without_newline_never_buffers_past_the_bound() -> None:
    reader = LineReader(max_line_bytes=1000)
    highest = 0
    for _ in range(2000):
        reader.feed(b"z" * 512)
        highest = max(highest, reader.buffered_bytes)
    assert highest <= 1000
    assert reader.feed(b"\n{}\n") == [b"{}"]


def test_finish_returns_an_unterminated_last_line() -> None:
    reader = LineReader()
    assert reader.feed(b'{"a":1}\n{"b":2}') == [b'{"a":1}']
    assert reader.finish() == [b'{"b":2}']
    assert reader.finish() == []


def test_d6_integer_beyond_64_bits_is_parsed_and_echoed() -> None:
    big = 2**80 + 1
    line = b'{"jsonrpc":"2.0","id":' + str(big).encode() + b',"method":"ping"}'
    try:
        orjson_loses_it = orjson.loads(line)["id"] != big  # newer orjson: a float
    except orjson.JSONDecodeError:
        orjson_loses_it = True  # older orjson: refused
    assert orjson_loses_it, "the fallback is only needed while orjson cannot hold this"
    value = loads_line(line)
    assert value["id"] == big and type(value["id"]) is int
    out = dumps_message({"jsonrpc": "2.0", "id": value["id"], "result": {}})
    assert out.endswith(b"\n") and b"\n" not in out[:-1]
    assert json.loads(out)["id"] == big


def test_twenty_digit_run_inside_a_string_still_parses() -> None:
    assert loads_line(b'{"id":"123456789012345678901234","n":1.5}') == {
        "id": "123456789012345678901234",
        "n": 1.5,
    }


def test_lone_surrogate_string_is_parsed_and_echoed() -> None:
    value = loads_line(b'{"id":"\\ud800x","method":"ping"}')
    assert value["id"] == "\ud800x"
    assert json.loads(dumps_message({"id": value["id"]}))["id"] == "\ud800x"


def test_not_json_raises_value_error_including_nan() -> None:
    for line in (b"hello", b"{", b'{"a":NaN}', b"Infinity", b"\xff\xfe"):
        try:
            loads_line(line)
        except ValueError:
            continue
        raise AssertionError(f"{line!r} was accepted")


def test_dumps_is_one_compact_line() -> None:
    out = dumps_message({"text": "a\nb", "n": 1})
    assert out == b'{"text":"a\\nb","n":1}\n'

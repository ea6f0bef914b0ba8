"""LineReader, loads_line and dumps_message (docs/protocol.md D6; MCP 2025-11-25,
"Transports", stdio)."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpl_host.jsonrpc.framing import (
    ORJSON_MAX_DEPTH,
    HeadPeek,
    JSONTooDeep,
    LineReader,
    LineTooLong,
    dumps_message,
    loads_iterative,
    loads_line,
    peek_envelope,
    peek_id,
)
from mcpl_host.limits import DEFAULT_MAX_JSON_DEPTH, DEFAULT_MAX_LINE_BYTES

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


def test_over_long_line_is_dropped_once_with_its_size_and_head_and_reading_goes_on() -> None:
    reader = LineReader(max_line_bytes=10, head_bytes=6)
    out = feed_all(reader, [b"ab" + b"x" * 6, b"x" * 8, b"x" * 50, b"yy\nok\n"])
    assert out == [LineTooLong(10, 8 + 8 + 50 + 2, b"abxxxx"), b"ok"]


def test_over_long_line_within_one_chunk() -> None:
    out = feed_all(LineReader(max_line_bytes=4, head_bytes=2), [b"123456\nabc\n"])
    assert out == [LineTooLong(4, 6, b"12"), b"abc"]


def test_over_long_line_size_leaves_out_a_crlf_split_between_reads() -> None:
    reader = LineReader(max_line_bytes=4, head_bytes=3)
    assert feed_all(reader, [b"abcdefgh\r", b"\nok\r\n"]) == [LineTooLong(4, 8, b"abc"), b"ok"]


def test_over_long_last_line_is_reported_at_the_end_of_the_stream() -> None:
    reader = LineReader(max_line_bytes=4, head_bytes=100)
    assert reader.feed(b"{}\n" + b"z" * 9) == [b"{}"]
    assert reader.finish() == [LineTooLong(4, 9, b"z" * 4)]  # the head never exceeds the bound
    assert reader.finish() == []


def test_the_head_of_an_over_long_line_is_bounded() -> None:
    reader = LineReader(max_line_bytes=1000, head_bytes=64)
    for _ in range(100):
        reader.feed(b"q" * 4096)
        assert reader.buffered_bytes <= 1000 + 64
    (marker,) = reader.feed(b"\n")
    assert isinstance(marker, LineTooLong) and marker.size == 409600 and len(marker.head) == 64


def test_stream_without_newline_never_buffers_past_the_bound() -> None:
    reader = LineReader(max_line_bytes=1000)
    highest = 0
    for _ in range(2000):
        reader.feed(b"z" * 512)
        highest = max(highest, reader.buffered_bytes)
    assert highest <= 1000
    assert reader.feed(b"\n{}\n") == [LineTooLong(1000, 2000 * 512, b"z" * 1000), b"{}"]


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


# -- the default bound ---------------------------------------------------------------------------


def test_a_32_mib_tool_result_with_its_envelope_fits_the_default_line_bound() -> None:
    text = "A" * (32 * 1024 * 1024)  # base64-sized content
    line = dumps_message(
        {
            "jsonrpc": "2.0",
            "id": 123456,
            "result": {"content": [{"type": "text", "text": text}], "isError": False},
        }
    )
    assert len(line) > 32 * 1024 * 1024
    (item,) = LineReader().feed(line)
    assert isinstance(item, bytes) and len(line) - 1 <= DEFAULT_MAX_LINE_BYTES


# -- reading the id of a line that cannot be read whole ------------------------------------------


@pytest.mark.parametrize(
    ("head", "peek"),
    [
        (
            b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"text":"aaaa',
            HeadPeek(7, ("jsonrpc", "id", "result"), False),
        ),
        (b' { "id" : -3 , "error" : {"code": 1', HeadPeek(-3, ("id", "error"), False)),
        (
            b'{"result":{"id":99,"x":[1,"]",{"y":"}"}]},"id":"abc","jsonrpc"',
            HeadPeek("abc", ("result", "id"), False),
        ),
        (b'{"id":"a\\"b\\u00e9","result":1}', HeadPeek('a"b\u00e9', ("id", "result"), True)),
        (b'{"jsonrpc":"2.0","id":12', HeadPeek(None, ("jsonrpc", "id"), False)),  # maybe 123...
        (b'{"jsonrpc":"2.0","id":"ab', HeadPeek(None, ("jsonrpc", "id"), False)),  # a cut string
        (b'{"id":1.0,"result":{', HeadPeek(None, ("id", "result"), False)),  # never one of ours
        (b'{"id":null,"result":[', HeadPeek(None, ("id", "result"), False)),
        (b'{"id":true,"result":[', HeadPeek(None, ("id", "result"), False)),
        (b'{"id":1,"id":2,"result":[', HeadPeek(2, ("id", "id", "result"), False)),  # the last wins
        (
            b'{"params":{"id":5},"method":"x","id":6,"result":',
            HeadPeek(6, ("params", "method", "id", "result"), False),
        ),
        (b'{"result":"' + b"x" * 100, HeadPeek(None, ("result",), False)),  # the id comes after
        (b"[1,2", HeadPeek(None, (), False)),
        (b"not json", HeadPeek(None, (), False)),
        (b"", HeadPeek(None, (), False)),
        (b"{}", HeadPeek(None, (), True)),
        (b'{"id":01,"result":1}', HeadPeek(None, ("id",), False)),  # not JSON from there on
    ],
)
def test_peek_envelope_reads_top_level_members_only(head: bytes, peek: HeadPeek) -> None:
    assert peek_envelope(head) == peek
    assert peek_id(head) == peek.id


def test_peek_tells_an_answer_from_a_request() -> None:
    assert peek_envelope(b'{"jsonrpc":"2.0","id":1,"result":[[[').is_response
    assert peek_envelope(b'{"jsonrpc":"2.0","id":1,"error":{"code"').is_response
    assert not peek_envelope(b'{"jsonrpc":"2.0","id":1,"method":"x","params":[[[').is_response
    assert not peek_envelope(b'{"jsonrpc":"2.0","id":1,"params":[[[').is_response
    assert not peek_envelope(b'{"jsonrpc":"2.0","id":1,').is_response  # cannot tell yet


@given(st.integers(min_value=-(2**70), max_value=2**70) | st.text(max_size=20), st.binary(max_size=200))
def test_peek_id_reads_any_int_or_string_id_written_first(request_id: int | str, tail: bytes) -> None:
    line = dumps_message({"jsonrpc": "2.0", "id": request_id, "result": {"blob": tail.hex()}})
    for cut in (len(line), len(line) // 2 + 40, 60):
        head = line[:cut]
        if len(head) >= line.index(b',"result"') + 1:  # the id and what follows it are in
            assert peek_id(head) == request_id


# -- JSON deeper than orjson parses ---------------------------------------------------------------


def nested(levels: int, inner: str = "1") -> bytes:
    return ("[" * levels + inner + "]" * levels).encode()


def test_json_just_past_orjsons_depth_is_parsed() -> None:
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(nested(ORJSON_MAX_DEPTH + 76))  # orjson still refuses it
    value = loads_line(b'{"jsonrpc":"2.0","id":1,"result":' + nested(1100) + b"}")
    depth, node = 0, value["result"]
    while isinstance(node, list):
        depth, node = depth + 1, node[0]
    assert depth == 1100 and node == 1


def test_json_up_to_the_depth_bound_is_parsed_and_beyond_it_is_refused_naming_both() -> None:
    assert loads_line(nested(DEFAULT_MAX_JSON_DEPTH)) is not None
    with pytest.raises(JSONTooDeep) as caught:
        loads_line(nested(DEFAULT_MAX_JSON_DEPTH + 1))
    assert (
        caught.value.depth == DEFAULT_MAX_JSON_DEPTH + 1 and caught.value.max_depth == DEFAULT_MAX_JSON_DEPTH
    )
    assert str(caught.value).startswith(f"JSON nested more than {DEFAULT_MAX_JSON_DEPTH} levels deep (level")
    assert "Limits.max_json_depth" in str(caught.value)
    with pytest.raises(JSONTooDeep):
        loads_line(b"[" * 1_000_000)  # stops at the bound: never a million levels of work


def test_deep_json_in_a_line_over_the_deep_bytes_bound_is_refused() -> None:
    line = nested(1100, ",".join(["1"] * 1000))
    assert loads_line(line, max_deep_bytes=len(line)) is not None
    with pytest.raises(JSONTooDeep) as caught:
        loads_line(line, max_deep_bytes=len(line) - 1)
    assert caught.value.depth is None and caught.value.size == len(line)
    assert f"Limits.max_deep_json_bytes = {len(line) - 1} bytes" in str(caught.value)


def test_a_small_depth_bound_still_parses_what_orjson_parses() -> None:
    assert loads_line(nested(50), max_depth=5) is not None
    with pytest.raises(JSONTooDeep):
        loads_line(nested(1100), max_depth=1050)


@pytest.mark.parametrize(
    "text",
    [
        '{"a":1,"a":2}', '"\\ud800x"', "123456789012345678901234567890", "-0", "1E2", "1.5e-3", "[]", "{}",
        '{"x":{},"y":[[],{}]}', ' [ 1 , "two" , null , true , false ] ', '"\\u00e9\\n"', "1e400",
    ],
)  # fmt: skip
def test_the_iterative_parser_gives_the_standard_librarys_values(text: str) -> None:
    assert loads_iterative(text) == json.loads(text)


@pytest.mark.parametrize(
    "text",
    [
        "NaN",
        "[Infinity]",
        "[1,]",
        "[01]",
        '"a\x01"',
        "[1] x",
        "[",
        '{"a" 1}',
        "[1 2]",
        "tru",
        "-",
        ".5",
        '{"a":}',
        "{1:2}",
    ],
)
def test_the_iterative_parser_refuses_what_is_not_json(text: str) -> None:
    with pytest.raises(ValueError):
        loads_iterative(text)
    with pytest.raises(ValueError):
        loads_line(("[" * 1100 + text + "]" * 1100).encode())


def test_the_iterative_parser_uses_no_recursion() -> None:
    import sys

    depth = sys.getrecursionlimit() * 5
    node, levels = loads_iterative("[" * depth + "]" * depth, max_depth=depth), 1
    while node:
        node, levels = node[0], levels + 1
    assert levels == depth
    with pytest.raises(ValueError):
        loads_iterative("")


# --- the fast path: orjson first, the exact-integer check after it ---------------------------


@pytest.mark.parametrize("big", [2**64, -(2**63) - 1, 10**30])
def test_an_integer_beyond_64_bits_deep_in_a_long_line_is_kept_exact(big: int) -> None:
    # Over the searched length: the parsed value is walked, and the float orjson made of
    # the integer sends the line to the standard library.
    text = "x" * 10_000
    line = (
        b'{"id":1,"result":{"content":[{"text":"'
        + text.encode()
        + b'"}],"n":[1,{"v":'
        + str(big).encode()
        + b"}]}}"
    )
    value = loads_line(line)
    assert value["result"]["n"][1]["v"] == big and type(value["result"]["n"][1]["v"]) is int


def test_an_integer_beyond_64_bits_among_many_numbers_is_kept_exact() -> None:
    # So many values that the walk's work bound runs out: the line is searched instead.
    numbers = list(range(50_000))
    numbers[-1] = 2**70
    value = loads_line(orjson.dumps(numbers[:-1])[:-1] + b"," + str(2**70).encode() + b"]")
    assert value[-1] == 2**70 and type(value[-1]) is int and value[:-1] == numbers[:-1]


def test_a_large_float_as_written_stays_a_float_in_a_long_line() -> None:
    line = b'{"pad":"' + b"y" * 8000 + b'","f":1.5e300,"g":-9.3e18}'
    assert loads_line(line) == {"pad": "y" * 8000, "f": 1.5e300, "g": -9.3e18}


def _reference_lines(stream: bytes, max_line_bytes: int, head: int) -> list[object]:
    """What LineReader must give for the whole stream: split at newlines, one trailing \\r
    stripped, lines over the bound as markers."""
    *lines, last = stream.split(b"\n")
    out: list[object] = []
    for line in lines:
        if line.endswith(b"\r"):
            line = line[:-1]
        out.append(
            LineTooLong(max_line_bytes, len(line), line[: min(head, max_line_bytes)])
            if len(line) > max_line_bytes
            else line
        )
    return out


@given(
    st.binary(max_size=200).map(lambda b: b.translate(bytes.maketrans(bytes(range(256)), b"ab\r\n" * 64))),
    st.lists(st.integers(min_value=0, max_value=200), max_size=12),
    st.integers(min_value=1, max_value=12),
    st.integers(min_value=0, max_value=6),
)
def test_any_stream_in_any_chunks_gives_the_reference_lines(
    stream: bytes, cuts: list[int], bound: int, head: int
) -> None:
    points = sorted({min(cut, len(stream)) for cut in cuts})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)])]
    reader = LineReader(max_line_bytes=bound, head_bytes=head)
    out: list[object] = []
    for chunk in chunks:
        out.extend(reader.feed(chunk))
        assert reader.buffered_bytes <= bound + head + 1  # + a \r that may begin a CRLF
    assert out == _reference_lines(stream, bound, head)


def test_a_line_read_two_bytes_at_a_time_costs_memory_of_its_size() -> None:
    """1 MiB fed in reads of 2 bytes (a server that writes and flushes two bytes at a time):
    kept as one bytes object per read, the line peaked at 63 MiB traced; small reads
    are now gathered into one buffer (``framing.gather``), so the peak is a few times the
    line."""
    import tracemalloc

    reader = LineReader(max_line_bytes=2 * 1024 * 1024)
    data = b"ab" * (512 * 1024)
    tracemalloc.start()
    try:
        for at in range(0, len(data), 2):
            assert reader.feed(data[at : at + 2]) == []
        (line,) = reader.feed(b"\r\n")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert line == data
    assert peak < 4 * 1024 * 1024, f"peak traced memory {peak / 2**20:.1f} MiB"
    # A CRLF split after gathered pieces, and an over-long line's head, as before.
    reader = LineReader(max_line_bytes=8, head_bytes=4)
    assert reader.feed(b"ab") == [] and reader.feed(b"c\r") == [] and reader.feed(b"\n") == [b"abc"]
    assert reader.feed(b"12") == [] and reader.feed(b"3456789") == []
    (marker,) = reader.feed(b"\n")
    assert marker == LineTooLong(8, 9, b"1234")

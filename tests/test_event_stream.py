"""Server-Sent Events framing on bytes (``transports.event_stream``): plain calls for each
WHATWG rule the HTTP transports rely on, and generated streams compared with httpx-sse's
reading of them."""

from __future__ import annotations

import codecs
import time
from collections.abc import Sequence

import pytest
from httpx_sse._decoders import SSEDecoder, SSELineDecoder
from hypothesis import given, settings
from hypothesis import strategies as st

from mcpl_host.transports.event_stream import EventStreamParser, EventTooLarge, ServerSentEvent, as_event

BIG = 1 << 20


def _events(chunks: Sequence[bytes], max_event: int = BIG, max_data: int = BIG) -> list[ServerSentEvent]:
    parser = EventStreamParser(max_event, max_data)
    out: list[ServerSentEvent] = []
    for chunk in chunks:
        out += map(as_event, parser.feed(chunk))
    return out


def _message(data: bytes, event_id: str = "", retry: int | None = None) -> ServerSentEvent:
    return ServerSentEvent("message", data, event_id, retry)


def test_lines_end_at_lf_cr_and_crlf() -> None:
    for end in (b"\n", b"\r", b"\r\n"):
        stream = b"data: a" + end + b"data: b" + end + end + b"data: c" + end + end
        assert _events([stream]) == [_message(b"a\nb"), _message(b"c")]


def test_a_crlf_split_across_chunks_or_by_an_empty_chunk_is_one_line_end() -> None:
    # Were the LF a second line end, it would be a blank line: "a" dispatched alone.
    assert _events([b"data: a\r", b"\ndata: b\r\n\r\n"]) == [_message(b"a\nb")]
    assert _events([b"data: a\r", b"", b"\ndata: b\n\n"]) == [_message(b"a\nb")]
    # A CR then CR is a line end and a blank line.
    assert _events([b"data: a\r", b"\r", b"data: b\n\n"]) == [_message(b"a"), _message(b"b")]


def test_a_stream_in_one_byte_chunks_reads_as_one_chunk() -> None:
    stream = b"\xef\xbb\xbfid: 7\r\nevent: note\r\ndata: x\r\ndata:  y\r\n\r\n: c\ndata: \xc3\xa9\n\n"
    whole = _events([stream])
    assert whole == [ServerSentEvent("note", b"x\n y", "7", None), _message("é".encode())]
    assert _events([stream[i : i + 1] for i in range(len(stream))]) == whole


def test_fields_comments_and_the_space_after_the_colon() -> None:
    stream = (
        b": a comment\n"
        b"data:no space\n"
        b"data:  two spaces\n"
        b"data\n"  # no colon: a field with an empty value
        b"unknown: ignored\n"
        b":data: a comment too\n"
        b"\n"
    )
    assert _events([stream]) == [_message(b"no space\n two spaces\n")]


def test_event_type_id_and_retry() -> None:
    stream = (
        b"event: endpoint\ndata: /post\n\n"
        b"id: 12\nretry: 2500\ndata: x\n\n"
        b"id: bad\x00id\nretry: 1.5\ndata: y\n\n"  # an id holding NUL and a retry not digits: ignored
        b"retry: -3\nretry: \xd9\xa1\n\n"  # nor signs, nor digits outside ASCII
        b"event: message\ndata: z\n\n"
        b"id: 13\n\n"  # an event with only an id is still dispatched (resumption primer)
    )
    assert _events([stream]) == [
        ServerSentEvent("endpoint", b"/post", "", None),
        _message(b"x", "12", 2500),
        _message(b"y"),
        _message(b"z"),
        ServerSentEvent("message", b"", "13", None),
    ]


def test_a_retry_of_any_number_of_digits_is_read() -> None:
    # int() refuses more than 4,300 digits: such a retry is beyond every delay, read as the
    # largest the parser keeps; leading zeros do not count.
    huge = b"1" + b"0" * 5000
    assert _events([b"retry: " + huge + b"\ndata: x\n\n"]) == [_message(b"x", retry=10**18)]
    assert _events([b"retry: " + b"0" * 5000 + b"25\ndata: x\n\n"]) == [_message(b"x", retry=25)]
    assert _events([b"retry: " + b"0" * 5000 + b"\ndata: x\n\n"]) == [_message(b"x", retry=0)]


def test_an_event_the_stream_ends_in_is_dropped_and_a_blank_line_alone_dispatches_nothing() -> None:
    assert _events([b"\n\n: only a comment\n\nunknown: x\n\n"]) == []
    assert _events([b"data: a\n\ndata: cut off\n"]) == [_message(b"a")]


def test_the_byte_order_mark_is_dropped_at_the_start_only() -> None:
    assert _events([b"\xef\xbb\xbfdata: a\n\n"]) == [_message(b"a")]
    assert _events([b"\xef", b"\xbb", b"\xbf", b"data: a\n\n"]) == [_message(b"a")]
    assert _events([b"\xef\xbb", b"\xbfdata: a\n\n"]) == [_message(b"a")]
    # Not at the start: part of the line, so the field is "\ufeffdata", unknown.
    assert _events([b"data: a\n\n\xef\xbb\xbfdata: b\n\n"]) == [_message(b"a")]
    # A stream starting like one but not one keeps its bytes.
    assert _events([b"\xef", b"data: a\n\n"]) == []  # the field is b"\xefdata": unknown


def test_data_that_is_not_utf8_is_decoded_with_replacement() -> None:
    assert _events([b"data: a\xffb\xe2\x82\n\n"]) == [_message("a\ufffdb\ufffd".encode())]
    assert _events([b"id: \xff\ndata: x\n\n"]) == [_message(b"x", "\ufffd")]


def test_an_event_over_its_bound_raises_as_its_bytes_arrive() -> None:
    # "data: 0123456789\n" is 17 bytes; events of 17 bytes pass a bound of 20 again and again.
    parser = EventStreamParser(20, BIG)
    for chunk in (b"data: 0123456789\r", b"\n\r", b"\n", b"data: 0123456789\n\n", b"data: 0123456789\r\r"):
        parser.feed(chunk)
    parser = EventStreamParser(20, BIG)
    parser.feed(b"data: 0123456789\n")
    with pytest.raises(EventTooLarge, match="max_sse_event_bytes"):
        parser.feed(b"data: 0\n")  # two lines of one event: 25 bytes
    parser = EventStreamParser(20, BIG)
    parser.feed(b"x" * 20)
    with pytest.raises(EventTooLarge):
        parser.feed(b"x")  # a line that never ends: refused before it is whole
    parser = EventStreamParser(20, BIG)
    parser.feed(b"data: 0123456789\n")
    with pytest.raises(EventTooLarge):
        parser.feed(b"data: 0")  # the unfinished line counts with the event's lines
    with pytest.raises(EventTooLarge):
        EventStreamParser(20, BIG).feed(b"data: 0123456789\ndata: 0")  # so in one chunk


def test_chunks_inside_a_line_and_a_crlf_split_by_an_empty_chunk_count_once() -> None:
    parser = EventStreamParser(20, BIG)
    parser.feed(b"data: " + b"x" * 10)  # no line end in it: the line goes on
    parser.feed(b"\n")  # ends that line (17 bytes), not the event
    with pytest.raises(EventTooLarge):
        parser.feed(b"data: 0\n")
    parser = EventStreamParser(20, BIG)
    parser.feed(b"data: 0123456789\r")
    parser.feed(b"")
    parser.feed(b"\n")  # completes the CRLF: not a blank line
    with pytest.raises(EventTooLarge):
        parser.feed(b"data: 0\n")


def test_data_over_its_bound_raises() -> None:
    assert _events([b"data: 12345\n\n"], max_data=5) == [_message(b"12345")]
    with pytest.raises(EventTooLarge, match="max_line_bytes"):
        _events([b"data: 123\ndata: 45\n\n"], max_data=5)  # joined: 6 bytes


def test_data_is_bounded_as_it_is_handed_over_after_decoding_errors_are_replaced() -> None:
    # Each byte that is not UTF-8 becomes U+FFFD, three bytes: 5 such bytes are 15 bytes of
    # data, over a bound of 10, though the stream sent 5 (the bound would hold 3 times over).
    with pytest.raises(EventTooLarge, match="max_line_bytes"):
        _events([b"data: \xff\xff\xff\xff\xff\n\n"], max_data=10)
    assert _events([b"data: \xff\xff\xff\n\n"], max_data=9) == [_message("\ufffd\ufffd\ufffd".encode())]


def test_the_events_a_chunk_completed_before_its_bound_was_passed_come_with_the_error() -> None:
    # An answer and then a message over its bound, in one read: the answer is not lost with
    # the chunk (httpx-sse handed over each event before the next was checked).
    with pytest.raises(EventTooLarge, match="max_line_bytes") as data_over:
        EventStreamParser(BIG, 5).feed(b"data: 1\n\ndata: 2\n\ndata: 123456\n\n")
    assert list(map(as_event, data_over.value.events)) == [_message(b"1"), _message(b"2")]
    with pytest.raises(EventTooLarge, match="max_sse_event_bytes") as event_over:
        EventStreamParser(20, BIG).feed(b"data: 1\n\ndata: 0123456789\ndata: 0\n")
    assert list(map(as_event, event_over.value.events)) == [_message(b"1")]
    with pytest.raises(EventTooLarge) as unfinished_over:
        EventStreamParser(20, BIG).feed(b"data: 1\n\n" + b"x" * 21)  # the unfinished line
    assert list(map(as_event, unfinished_over.value.events)) == [_message(b"1")]
    with pytest.raises(EventTooLarge) as nothing_before:
        EventStreamParser(20, BIG).feed(b"x" * 21)
    assert nothing_before.value.events == []


# --- generated streams, compared with httpx-sse ---------------------------------------------

# Values without line ends or a byte order mark (httpx-sse keeps a BOM; module rules).
_VALUE = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n\ufeff"), max_size=12
)
_RETRY = st.text(alphabet="0123456789x", max_size=6)
_NAMES = ("data", "event", "id", "other", "")  # retry: _RETRY (module rules)
_LINE = st.one_of(
    st.tuples(st.sampled_from(_NAMES), st.sampled_from(["", " "]), _VALUE).map(
        lambda t: f"{t[0]}:{t[1]}{t[2]}"
    ),
    st.tuples(st.just("retry:"), st.sampled_from(["", " "]), _RETRY).map("".join),
    st.sampled_from(["", "", "data", "id", "event", ":comment"]),
)
_ENDED_LINE = st.tuples(_LINE, st.sampled_from(["\n", "\r", "\r\n"])).map("".join)
_RAW = st.binary(max_size=4).filter(lambda b: b"\r" not in b and b"\n" not in b)


@st.composite
def _streams(draw: st.DrawFn) -> tuple[bytes, list[int]]:
    parts = draw(
        st.lists(
            st.one_of(_ENDED_LINE.map(str.encode), _RAW.map(lambda b: b"data: " + b + b"\n")), max_size=30
        )
    )
    stream = b"".join(parts)
    if stream.startswith(b"\xef\xbb\xbf"):  # the BOM rule differs (module rules)
        stream = b"data: x\n" + stream
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    return stream, cuts


def _chunks(stream: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *cuts, len(stream)]
    return [stream[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def _transport_view(events: list[tuple[str, str, str, int | None]]) -> list[tuple[str, str, str, int | None]]:
    """What the transports take from events: the last id given so far, the last retry, and
    each event with data (its type and data, the id and retry then)."""
    last_id, retry = "", None
    seen: list[tuple[str, str, str, int | None]] = []
    for kind, data, event_id, event_retry in events:
        if event_id:
            last_id = event_id
        if event_retry is not None:
            retry = event_retry
        if data:
            seen.append((kind, data, last_id, retry))
    seen.append(("end", "", last_id, retry))
    return seen


def _httpx_sse(chunks: list[bytes]) -> list[tuple[str, str, str, int | None]]:
    text = codecs.getincrementaldecoder("utf-8")(errors="replace")  # as httpx's aiter_text
    lines, decoder, out = SSELineDecoder(), SSEDecoder(), []
    pieces = [text.decode(chunk) for chunk in chunks] + [text.decode(b"", final=True)]
    found = [line for piece in pieces if piece for line in lines.decode(piece)] + lines.flush()
    for line in found:
        event = decoder.decode(line.rstrip("\n"))
        if event is not None:
            out.append((event.event, event.data, event.id, event.retry))
    return out


@settings(max_examples=400, deadline=None)
@given(_streams())
def test_generated_streams_read_as_httpx_sse_reads_them(case: tuple[bytes, list[int]]) -> None:
    stream, cuts = case
    ours = [(e.event, e.data.decode("utf-8"), e.id, e.retry) for e in _events(_chunks(stream, cuts))]
    assert _transport_view(ours) == _transport_view(_httpx_sse(_chunks(stream, cuts)))
    assert _events([stream]) == _events(_chunks(stream, cuts))


# --- whole events of the common shapes, taken at once --------------------------------------

_SHAPED_PART = st.one_of(
    st.binary(max_size=6).map(lambda b: b"data: " + b + b"\n\n"),
    st.binary(max_size=6).map(lambda b: b"event: message\ndata: " + b + b"\n\n"),
    st.sampled_from(
        [
            b"id: 1\n",
            b": c\n",
            b"\n",
            b"data: a\n",
            b"data:a\n\n",
            b"retry: 5\n",
            b"event: message\n",
            b"\r\n",
        ]
    ),
)


def _read(chunks: Sequence[bytes], max_event: int, max_data: int) -> tuple[list[ServerSentEvent], str | None]:
    """The events read from ``chunks`` and the error that ended the reading (None)."""
    parser = EventStreamParser(max_event, max_data)
    out: list[ServerSentEvent] = []
    for chunk in chunks:
        try:
            out += map(as_event, parser.feed(chunk))
        except EventTooLarge as exc:
            return out + list(map(as_event, exc.events)), str(exc)
    return out, None


@settings(max_examples=600, deadline=None)
@given(
    st.lists(_SHAPED_PART, max_size=24),
    st.lists(st.integers(0, 400), max_size=4),
    st.integers(8, 40),
    st.integers(0, 12),
)
def test_whole_events_of_the_common_shapes_read_as_the_line_rules_read_them(
    parts: list[bytes], cuts: list[int], max_event: int, max_data: int
) -> None:
    # Fed one byte at a time no chunk holds a whole event: each line goes by the line rules.
    # In one chunk (or cut anywhere), runs of whole events of one shape are taken at once;
    # what is read, and where a bound stops it, must be the same.
    stream = b"".join(parts)
    by_bytes = _read([stream[i : i + 1] for i in range(len(stream))], max_event, max_data)
    assert _read([stream], max_event, max_data) == by_bytes
    assert (
        _read(_chunks(stream, sorted(c for c in cuts if c <= len(stream))), max_event, max_data) == by_bytes
    )


def test_plain_message_events_are_their_data_alone_and_others_are_events() -> None:
    parser = EventStreamParser(BIG, BIG)
    plain = b"event: message\ndata: {}\n\n" * 3
    assert parser.feed(plain) == [b"{}", b"{}", b"{}"]
    assert parser.feed(b"data: a\n\ndata: b\n\nid: 4\ndata: c\n\n") == [
        b"a",
        b"b",
        ServerSentEvent("message", b"c", "4", None),
    ]
    # An event begun in one chunk is ended by the next, before the whole events after it.
    assert parser.feed(b"data: x") == []
    assert parser.feed(b"y\n\ndata: z\n\n") == [b"xy", b"z"]


def test_a_long_line_of_data_prefixes_is_read_in_linear_time() -> None:
    # A shape is tried at line starts only: tried at each ``data: `` inside one line, each try
    # reads on to the line's end, and a 128 KiB read of them took about 9 s (quadratic).
    # Read linearly it takes about a millisecond; the bound leaves room for a loaded machine.
    chunk = b"data: " * (128 * 1024 // 6) + b"\nx\n\n"
    parser = EventStreamParser(BIG, BIG)
    started = time.perf_counter()
    events = parser.feed(chunk)
    assert time.perf_counter() - started < 1.0
    assert events == [b"data: " * (128 * 1024 // 6 - 1)]

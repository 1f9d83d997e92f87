"""The SSE decoder, fed every way a byte stream can be cut.

Each case is decoded whole, one byte at a time, at every single cut point and (for short inputs)
at every pair of cut points; every way must give the same events with the same raw bytes.
"""

from __future__ import annotations

from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spillguard.sse import DEFAULT_MAX_EVENT, Event, SSEDecoder, SSEError, encode_data, encode_event

E = Event


def decode(pieces: list[bytes], max_event: int = DEFAULT_MAX_EVENT) -> list[Event]:
    decoder = SSEDecoder(max_event)
    out: list[Event] = []
    for piece in pieces:
        out.extend(decoder.feed(piece))
    out.extend(decoder.flush())
    return out


def every_cut(data: bytes, pairs: bool = True) -> list[list[bytes]]:
    """The input whole, byte by byte, cut once at every point, and cut twice at every pair."""
    ways = [[data], [data[i : i + 1] for i in range(len(data))]]
    ways += [[data[:i], data[i:]] for i in range(len(data) + 1)]
    if pairs and len(data) <= 80:
        ways += [[data[:i], data[i:j], data[j:]] for i, j in combinations(range(len(data) + 1), 2)]
    return ways


def assert_every_cut(data: bytes, want: list[Event]) -> None:
    for pieces in every_cut(data):
        assert decode(pieces) == want, pieces


CASES: dict[str, tuple[bytes, list[Event]]] = {
    "lf": (b"data: a\n\n", [E(b"data: a\n\n", "a")]),
    "cr": (b"data: a\r\r", [E(b"data: a\r\r", "a")]),
    "crlf": (b"data: a\r\n\r\n", [E(b"data: a\r\n\r\n", "a")]),
    "mixed-endings": (
        b"data: a\r\ndata: b\rdata: c\n\r\n",
        [E(b"data: a\r\ndata: b\rdata: c\n\r\n", "a\nb\nc")],
    ),
    "two-events": (
        b'data: {"x": 1}\n\ndata: [DONE]\n\n',
        [E(b'data: {"x": 1}\n\n', '{"x": 1}'), E(b"data: [DONE]\n\n", "[DONE]")],
    ),
    "comment-only": (b": keep-alive\n\n", [E(b": keep-alive\n\n")]),
    "openrouter-comment": (
        b": OPENROUTER PROCESSING\r\n\r\ndata: x\r\n\r\n",
        [E(b": OPENROUTER PROCESSING\r\n\r\n"), E(b"data: x\r\n\r\n", "x")],
    ),
    "comment-inside-event": (b": c\ndata: x\n: d\n\n", [E(b": c\ndata: x\n: d\n\n", "x")]),
    "no-space": (b"data:x\n\n", [E(b"data:x\n\n", "x")]),
    "two-spaces": (b"data:  x\n\n", [E(b"data:  x\n\n", " x")]),
    "bare-data": (b"data\n\n", [E(b"data\n\n", "")]),
    "empty-data-lines": (b"data:\ndata:\n\n", [E(b"data:\ndata:\n\n", "\n")]),
    "named": (
        b"event: response.output_text.delta\ndata: {}\n\n",
        [E(b"event: response.output_text.delta\ndata: {}\n\n", "{}", "response.output_text.delta")],
    ),
    "event-only": (b"event: ping\n\n", [E(b"event: ping\n\n", None, "ping")]),
    "unknown-fields-kept-raw": (b"foo: bar\ndata: x\n\n", [E(b"foo: bar\ndata: x\n\n", "x")]),
    # id: and retry: never reach a client (openai-python keeps the last id forever)
    "id-retry-dropped": (
        b"id: 7\nretry: 10\nfoo: bar\ndata: x\n\n",
        [E(b"foo: bar\ndata: x\n\n", "x")],
    ),
    "id-retry-dropped-crlf": (
        b"data: a\r\nid: 2\r\nretry: 5\r\n\r\n",
        [E(b"data: a\r\n\r\n", "a")],
    ),
    "id-only-event": (b"id: 3\n\n", [E(b"\n")]),
    # every blank line is an event of its own: its bytes are kept
    "leading-blank-lines": (
        b"\n\r\n\rdata: a\n\n",
        [E(b"\n"), E(b"\r\n"), E(b"\r"), E(b"data: a\n\n", "a")],
    ),
    "utf8": (
        "data: ｜héllo 🌍 ▁\n\n".encode(),
        [E("data: ｜héllo 🌍 ▁\n\n".encode(), "｜héllo 🌍 ▁")],
    ),
    "invalid-utf8": (
        b"data: \xff\xc3(\xe2\x82\n\n",
        [E(b"data: \xff\xc3(\xe2\x82\n\n", "\ufffd\ufffd(\ufffd")],
    ),
    "colon-in-value": (b"data: a: b\n\n", [E(b"data: a: b\n\n", "a: b")]),
    "nul": (b"data: a\x00b\n\n", [E(b"data: a\x00b\n\n", "a\x00b")]),
    # one data line and a blank line, the common event, in its edge spellings
    "data-colon-only": (b"data:\n\n", [E(b"data:\n\n", "")]),
    "data-space-only": (b"data: \n\n", [E(b"data: \n\n", "")]),
    # cut twice anywhere: a read ends a pending event, holds whole ones, starts the next
    "reads-of-a-fast-stream": (
        b"data: a\ndata: a2\n\ndata: b\n\ndata: c\n\n\ndata: d\n\n",
        [
            E(b"data: a\ndata: a2\n\n", "a\na2"),
            E(b"data: b\n\n", "b"),
            E(b"data: c\n\n", "c"),
            E(b"\n"),
            E(b"data: d\n\n", "d"),
        ],
    ),
    "one-line-after-named": (
        b"event: a\ndata: 1\n\ndata: 2\n\nid: 4\ndata: 3\n\ndata: 5\n\n",
        [
            E(b"event: a\ndata: 1\n\n", "1", "a"),
            E(b"data: 2\n\n", "2"),
            E(b"data: 3\n\n", "3"),
            E(b"data: 5\n\n", "5"),
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_cut_gives_the_same_events(name: str) -> None:
    data, want = CASES[name]
    assert_every_cut(data, want)


@pytest.mark.parametrize(
    ("data", "want"),
    [
        (b"data: a", [E(b"data: a", "a")]),
        (b"data: a\n", [E(b"data: a\n", "a")]),
        (b"data: a\r", [E(b"data: a\r", "a")]),
        (b"data: a\r\n", [E(b"data: a\r\n", "a")]),
        (b"data: a\ndata: b", [E(b"data: a\ndata: b", "a\nb")]),
        (b": partial comment", [E(b": partial comment")]),
        (b"data: a\n\ndata: [DONE]", [E(b"data: a\n\n", "a"), E(b"data: [DONE]", "[DONE]")]),
        (b"", []),
        (b"data: a\n\n", [E(b"data: a\n\n", "a")]),
    ],
)
def test_flush_delivers_an_unterminated_event_exactly(data: bytes, want: list[Event]) -> None:
    for pieces in every_cut(data):
        assert decode(pieces) == want, pieces


def test_flush_twice_and_after_complete_events_is_empty() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n\n") == [E(b"data: a\n\n", "a")]
    assert decoder.flush() == []
    assert decoder.flush() == []
    assert decoder.feed(b"data: b") == []
    assert decoder.flush() == [E(b"data: b", "b")]
    assert decoder.flush() == []


def test_raw_bytes_rebuild_the_stream() -> None:
    """The events' raw bytes are the input exactly, but for the id: and retry: lines."""
    stream = b"".join(case[0] for _, case in sorted(CASES.items()))
    want = b"".join(
        line
        for line in stream.splitlines(keepends=True)
        if not line.startswith((b"id:", b"retry:"))
    )
    for pieces in [[stream], [stream[i : i + 7] for i in range(0, len(stream), 7)]]:
        assert b"".join(e.raw for e in decode(pieces)) == want


def test_is_comment() -> None:
    assert E(b": x\n\n").is_comment
    assert not E(b"data: x\n\n", "x").is_comment
    assert not E(b"event: e\n\n", None, "e").is_comment


def test_an_event_over_max_event_raises() -> None:
    decoder = SSEDecoder(max_event=100)
    assert decoder.feed(b"data: " + b"a" * 60) == []
    with pytest.raises(SSEError):
        decoder.feed(b"a" * 60)
    with pytest.raises(ValueError):  # SSEError is a ValueError
        SSEDecoder(max_event=10).feed(b"data: 0123456789")


def test_comment_lines_without_a_blank_line_count_toward_max_event() -> None:
    decoder = SSEDecoder(max_event=100)
    with pytest.raises(SSEError):
        for _ in range(50):
            decoder.feed(b": ping\n")


def test_many_small_events_never_hit_max_event() -> None:
    decoder = SSEDecoder(max_event=100)
    total = 0
    for i in range(10_000):
        total += len(decoder.feed(f"data: {i}\n\n".encode()))
    assert total == 10_000


def test_an_event_just_under_max_event_is_delivered() -> None:
    body = b"data: " + b"a" * 80 + b"\n\n"
    for pieces in [[body], [body[:50], body[50:]], [body[:-1], body[-1:]]]:
        assert decode(pieces, max_event=100) == [E(body, "a" * 80)]


def test_cr_at_the_end_of_a_chunk_waits_for_a_possible_lf() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r\n\r") == []
    assert decoder.feed(b"\n") == [E(b"data: a\r\n\r\n", "a")]
    assert decoder.feed(b"data: b\r\r") == []  # the second CR may be the start of a CRLF
    assert decoder.feed(b"data: c\n\n") == [E(b"data: b\r\r", "b"), E(b"data: c\n\n", "c")]


def test_encoders_round_trip() -> None:
    assert decode([encode_data('{"a": 1}')]) == [E(b'data: {"a": 1}\n\n', '{"a": 1}')]
    raw = encode_event("response.completed", "{}")
    assert decode([raw]) == [E(raw, "{}", "response.completed")]


class CountingBuffer(bytearray):
    """A bytearray that counts the bytes its searches scan."""

    scanned = 0

    def find(self, sub, start=None, end=None):  # type: ignore[no-untyped-def,override]
        begin = 0 if start is None else start
        stop = len(self) if end is None else end
        found = super().find(sub, begin, stop)
        CountingBuffer.scanned += (stop if found < 0 else found + 1) - begin
        return found


def scanned_for(data: bytes) -> int:
    decoder = SSEDecoder(max_event=len(data) + 1)
    decoder._buf = CountingBuffer()
    CountingBuffer.scanned = 0
    decoder.feed(data)
    decoder.flush()
    return CountingBuffer.scanned


@pytest.mark.parametrize(
    "unit",
    [b"data: x\n\n", b"data: x\r\n\r\n", b": c\n", b"data: " + b"y" * 100 + b"\n\n"],
    ids=["lf", "crlf", "comments", "long-lines"],
)
def test_decoding_is_linear(unit: bytes) -> None:
    """Bytes searched per byte fed stay bounded as the input grows (no wall clock)."""
    small, large = unit * 200, unit * 2000
    assert scanned_for(small) <= 4 * len(small)
    assert scanned_for(large) <= 4 * len(large)


@pytest.mark.parametrize("unit", [b"data: x\r\r", b": c\r"], ids=["cr-events", "cr-comments"])
def test_decoding_cr_only_lines_is_linear(unit: bytes) -> None:
    large = unit * 2000
    assert scanned_for(large) <= 4 * len(large)


# Pieces of a stream: common events and everything around them that is not one.
PARTS = st.sampled_from(
    [
        b"data: a\n\n",
        b'data: {"x":1}\n\n',
        b"data:b\n\n",
        b"data:\n\n",
        b"data: \xff\n\n",
        b"\n",
        b"\r\n",
        b"\r",
        b"data: c\n",
        b": ping\n\n",
        b"event: e\n",
        b"id: 1\n",
        b"data",
        b"data: [DONE]\n\n",
        b"retry: 2\n\n",
        b"\n\n",
        b"x: y\n\n",
    ]
)


def _decode_as_byte_by_byte(parts: list[bytes], cuts: list[int]) -> None:
    """The parts decode as the same bytes fed one at a time: whole, cut at `cuts`, and as the
    parts themselves."""
    data = b"".join(parts)
    want = decode([data[i : i + 1] for i in range(len(data))])
    assert decode([data]) == want
    points = sorted({min(c, len(data)) for c in cuts})
    pieces = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    assert decode(pieces) == want
    assert decode(parts) == want


@settings(max_examples=400)
@given(st.lists(PARTS, max_size=12), st.lists(st.integers(min_value=0, max_value=200), max_size=4))
def test_whole_pieces_of_common_events_decode_as_byte_by_byte(
    parts: list[bytes], cuts: list[int]
) -> None:
    _decode_as_byte_by_byte(parts, cuts)


NAMED = st.sampled_from(
    [
        b"event: e\ndata: a\n\n",
        b'event:content_block_delta\ndata:{"x":1}\n\n',
        b"event: \xff\ndata: \xfe\n\n",
        b"event:\ndata:\n\n",
        b"event: e\ndata: 1\ndata: 2\n\n",
        b"data: 3\nevent: e\n\n",
        b"event: e\n\n",
        b"event: e\n: note\ndata: x\n\n",
        b"event: e\nid: 9\n\n",
        b"event: e\ndata  : x\n\n",
        b"data: a\n\n",
        b": ping\n\n",
        b"\r\n",
    ]
)


@settings(max_examples=400)
@given(st.lists(NAMED, max_size=12), st.lists(st.integers(min_value=0, max_value=300), max_size=4))
def test_whole_pieces_of_named_events_decode_as_byte_by_byte(
    parts: list[bytes], cuts: list[int]
) -> None:
    """Messages and Responses streams name every event: a read of them is cut fast too, and
    any piece that is not only `event:` + one `data:` line goes the general way."""
    _decode_as_byte_by_byte(parts, cuts)


def test_a_read_of_named_events_is_cut_into_them_exactly() -> None:
    chunk = b'event: ping\ndata: {}\n\nevent:message_stop\ndata:{"type":"message_stop"}\n\n'
    assert SSEDecoder().feed(chunk) == [
        Event(b"event: ping\ndata: {}\n\n", "{}", "ping"),
        Event(
            b'event:message_stop\ndata:{"type":"message_stop"}\n\n',
            '{"type":"message_stop"}',
            "message_stop",
        ),
    ]
    one = b"event: e\ndata: x\n\n"
    (event,) = SSEDecoder().feed(one)
    assert event.raw is one  # one whole event: its bytes, not a copy

"""Content deltas read by their bytes (`chat_shape.Shape`): whatever a shape reads is what parsing
the chunk reads, and a shape is learned only where its place is plainly the delta's content."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spillguard.chat_shape import _PROBE, Shape, arguments_delta, content_delta
from spillguard.sse import Event
from tests.fuzz.chat_bytes import CHAT_HEAD, chat_chunk
from tests.fuzz.wire_bytes import decode


def event(raw: bytes) -> Event:
    (only,) = decode(raw)
    return only


def learned(raw: bytes) -> Shape | None:
    e = event(raw)
    chunk = json.loads(e.data or "")
    delta = content_delta(chunk)
    assert delta is not None
    return Shape.learn(e, chunk, *delta)


def read(shape: Shape, raw: bytes) -> str | None:
    """The text `shape` reads in one event's bytes, or None when it is not one of its shape."""
    texts = shape.texts([Event(raw)], 0)
    return texts[0] if texts else None


def parsed_text(raw: bytes) -> Any:
    e = event(raw)
    delta = content_delta(json.loads(e.data or ""))
    return None if delta is None else delta[1]


def test_a_content_delta_is_read_by_its_bytes() -> None:
    shape = learned(chat_chunk({"content": "Hello"}))
    assert shape is not None and shape.index == 0
    assert read(shape, chat_chunk({"content": " world"})) == " world"
    assert read(shape, chat_chunk({"content": ""})) == ""
    assert read(shape, chat_chunk({"content": "｜tool▁calls"})) == "｜tool▁calls"


@pytest.mark.parametrize(
    "raw",
    [
        chat_chunk({"content": "x"}, index=1),  # another choice
        chat_chunk({"role": "assistant", "content": "x"}),  # not content alone
        chat_chunk({"content": "x"}, finish="stop"),
        chat_chunk({"content": "x"}, head={**CHAT_HEAD, "id": "other"}),
        chat_chunk({"content": "x"}, usage=True),
        b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n',  # other fields around it
    ],
)
def test_anything_else_is_not_read_by_a_shape(raw: bytes) -> None:
    shape = learned(chat_chunk({"content": "Hello"}))
    assert shape is not None
    assert read(shape, raw) is None


def test_texts_reads_the_shape_s_events_in_a_row_and_stops_at_the_first_other() -> None:
    shape = learned(chat_chunk({"content": "Hello"}))
    assert shape is not None
    texts = ["a", 'say "hi"', "", "line\nend"]
    events = [event(chat_chunk({"content": t})) for t in texts]
    other = event(chat_chunk({"content": "x"}, finish="stop"))
    assert shape.texts(events, 0) == texts
    assert shape.texts([*events, other, *events], 1) == texts[1:]
    assert shape.texts([other, *events], 0) == []
    assert shape.texts(events, len(events)) == []


def test_a_text_with_escapes_is_read_as_its_string_token_spells_it() -> None:
    shape = learned(chat_chunk({"content": "Hello"}))
    assert shape is not None
    for text in ('say "hi"', "a\nb", "tab\there", "back\\slash", "é ｜", "😀"):
        raw = chat_chunk({"content": text})
        assert read(shape, raw) == parsed_text(raw) == text


@pytest.mark.parametrize(
    "body",
    [
        b'a","content":"b',  # a quote ends the token early: a second key follows it
        b"a\\",  # the backslash escapes the closing quote
        b"\\ud83d x",  # a lone surrogate: orjson refuses it, `json` reads it
        b"\\u00e9\xc3",  # bytes that are not UTF-8 beside an escape
        b"a\tb",  # a raw control character
    ],
)
def test_bytes_between_the_quotes_that_are_not_one_string_token_are_not_read(
    body: bytes,
) -> None:
    shape = learned(chat_chunk({"content": "Hello"}))
    assert shape is not None
    raw = chat_chunk({"content": "PLACE"}).replace(b"PLACE", body)
    assert read(shape, raw) is None


def test_a_text_with_escapes_teaches_no_shape() -> None:
    assert learned(chat_chunk({"content": 'a "quoted" word'})) is None
    assert learned(chat_chunk({"content": "tab\there"})) is None
    lone = b'data: {"choices":[{"index":0,"delta":{"content":"\\ud83d x"}}]}\n\n'
    assert parsed_text(lone) == "\ud83d x"
    assert learned(lone) is None


def test_a_place_that_only_holds_the_same_text_is_not_taken_for_the_content() -> None:
    # The delta's key is spelled with an escape, and another field holds the same text after
    # a plain `"content":"`: the probe shows that place is not the delta's content.
    raw = (
        b'data: {"choices":[{"index":0,"delta":{"con\\u0074ent":"hi"}}],'
        b'"note":{"content":"hi"}}\n\n'
    )
    assert parsed_text(raw) == "hi"
    assert learned(raw) is None


def test_a_data_line_cut_in_two_teaches_no_shape() -> None:
    raw = b'data: {"choices":[{"index":0,\ndata: "delta":{"content":"hi"}}]}\n\n'
    assert parsed_text(raw) == "hi"
    assert learned(raw) is None


def test_invalid_utf8_reads_as_the_decoder_and_parser_read_it() -> None:
    shape = learned(chat_chunk({"content": "Hello"}))
    assert shape is not None
    good = chat_chunk({"content": "é"})
    raw = good.replace("é".encode(), b"\xc3")  # a truncated character
    assert read(shape, raw) == parsed_text(raw) == "\ufffd"


def respaced(raw: bytes) -> bytes:
    """The same chunk as Python's `json.dumps` writes it by default (`: ` and `, `, ASCII)."""
    return b"data: " + json.dumps(json.loads(raw[6:-2])).encode() + b"\n\n"


@settings(max_examples=400)
@given(st.text(max_size=12), st.text(max_size=12), st.booleans())
def test_whatever_a_shape_reads_is_what_parsing_reads(first: str, later: str, space: bool) -> None:
    """Learned from a chunk written compact or with spaces, a shape reads the later chunks
    written the same way as parsing does, and none written the other way."""
    write, other_way = (respaced, bytes) if space else (bytes, respaced)
    raw = write(chat_chunk({"content": first}))
    e = event(raw)
    chunk = json.loads(e.data or "")
    shape = Shape.learn(e, chunk, 0, first)
    if shape is None:
        return
    other = write(chat_chunk({"content": later}))
    got = read(shape, other)
    assert got is None or got == parsed_text(other) == later
    if not any(0xD800 <= ord(c) <= 0xDFFF for c in later):  # all but lone surrogates
        assert got == later
    assert read(shape, other_way(chat_chunk({"content": later}))) is None


# ---- a call's argument chunks ----------------------------------------------------------------


def args_chunk(text: str, call: int = 0, index: int = 0, **fields: Any) -> bytes:
    piece = {"index": call, **fields, "function": {"arguments": text}}
    return chat_chunk({"tool_calls": [piece]}, index)


def learned_call(raw: bytes) -> Shape | None:
    e = event(raw)
    chunk = json.loads(e.data or "")
    more = arguments_delta(chunk)
    assert more is not None
    index, call, text = more
    return Shape.learn(e, chunk, index, text, call)


def test_a_call_shape_reads_that_call_s_argument_chunks() -> None:
    assert learned_call(args_chunk('{"ci')) is None  # learned from a plain text only
    shape = learned_call(args_chunk("{"))
    assert shape is not None and (shape.index, shape.call) == (0, 0)
    assert read(shape, args_chunk('"city": "Lis')) == '"city": "Lis'
    assert read(shape, args_chunk("bon\\n}")) == "bon\\n}"
    typed = learned_call(args_chunk("{", call=1, type="function"))
    assert typed is not None and typed.call == 1
    assert read(typed, args_chunk("}", call=1, type="function")) == "}"


def spaced(delta: dict[str, Any]) -> bytes:
    """A chunk as Python's `json.dumps` writes it by default: a space after each colon."""
    choice = {"index": 0, "delta": delta, "finish_reason": None}
    return b"data: " + json.dumps({**CHAT_HEAD, "choices": [choice]}).encode() + b"\n\n"


def test_a_text_that_is_the_probe_itself_still_shows_the_place() -> None:
    """Learned from a delta whose text is the probe's, the probe must differ from it: else a
    later field holding that text too would pass for the content's place."""
    choice = {"index": 0, "delta": {"content": _PROBE}, "logprobs": None, "finish_reason": None}
    body = {**CHAT_HEAD, "choices": [choice], "x": {"content": _PROBE}}
    raw = b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"
    e = event(raw)
    assert Shape.learn(e, json.loads(e.data or ""), 0, _PROBE) is None


def test_chunks_written_with_a_space_after_the_colon_are_read_by_their_shape() -> None:
    shape = learned(spaced({"content": "Hello"}))
    assert shape is not None
    assert read(shape, spaced({"content": ' a "quoted" word\n'})) == ' a "quoted" word\n'
    assert read(shape, chat_chunk({"content": "x"})) is None  # written the other way
    piece = {"index": 0, "function": {"arguments": "{"}}
    call = learned_call(spaced({"tool_calls": [piece]}))
    assert call is not None and call.call == 0
    more = {"index": 0, "function": {"arguments": '"path": "a.md"'}}
    assert read(call, spaced({"tool_calls": [more]})) == '"path": "a.md"'


@pytest.mark.parametrize(
    "raw",
    [
        args_chunk("x", call=1),  # another call
        args_chunk("x", index=1),  # another choice
        args_chunk("x", id="call_2"),  # a call that starts
        chat_chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "x"}}]}),
        chat_chunk({"content": "x"}),
        chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "x"}}]}, finish="stop"),
    ],
)
def test_a_call_shape_reads_no_other_chunk(raw: bytes) -> None:
    shape = learned_call(args_chunk("{"))
    assert shape is not None
    assert read(shape, raw) is None


def test_what_is_an_argument_chunk() -> None:
    def of(raw: bytes) -> Any:
        return arguments_delta(json.loads(event(raw).data or ""))

    assert of(args_chunk("{", call=2, index=1)) == (1, 2, "{")
    assert of(args_chunk("{", type="function")) == (0, 0, "{")
    assert of(args_chunk("{", id="call_1")) is None
    assert of(chat_chunk({"tool_calls": [{"index": 0, "function": {"name": "f"}}]})) is None
    assert of(chat_chunk({"tool_calls": []})) is None
    two = {"index": 0, "function": {"arguments": "{"}}
    assert of(chat_chunk({"tool_calls": [two, {**two, "index": 1}]})) is None
    assert of(chat_chunk({"tool_calls": [two], "content": ""})) is None


@settings(max_examples=300)
@given(st.text(max_size=12), st.text(max_size=12))
def test_whatever_a_call_shape_reads_is_what_parsing_reads(first: str, later: str) -> None:
    shape = learned_call(args_chunk(first))
    if shape is None:
        return
    other = args_chunk(later)
    got = read(shape, other)
    more = arguments_delta(json.loads(event(other).data or ""))
    assert got is None or (more is not None and got == more[2] == later)
    if not any(0xD800 <= ord(c) <= 0xDFFF for c in later):
        assert got == later

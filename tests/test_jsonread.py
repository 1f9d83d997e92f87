"""`jsonread.loads` returns exactly what `json.loads` returns, or raises what it raises, and
`loads_leaving` does too once its unread values are read."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spillguard import jsonread
from spillguard.jsonread import (
    LEAVE_FROM,
    Unread,
    loads,
    loads_leaving,
    loads_text,
    read_all,
    string_body,
)

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**62, max_value=2**70),
    st.integers(min_value=-(2**70), max_value=-(2**62)),
    st.floats(),
    st.text(),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)


def _agree(read: Any, data: Any) -> None:
    """`read(data)` returns what `json.loads(data)` returns, or raises what it raises."""
    try:
        want: Any = ("ok", repr(json.loads(data)))
    except (ValueError, RecursionError) as exc:
        want = ("error", type(exc))
    try:
        got: Any = ("ok", repr(read(data)))
    except (ValueError, RecursionError) as exc:
        got = ("error", type(exc))
    assert got == want


def _numbers(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return [value]


def _same(data: bytes) -> None:
    _agree(loads, data)


def _same_text(text: str) -> None:
    _agree(loads_text, text)


@settings(max_examples=500)
@given(VALUES, st.booleans(), st.booleans())
def test_any_json_text_reads_as_the_standard_library_reads_it(
    value: Any, ascii_only: bool, compact: bool
) -> None:
    separators = (",", ":") if compact else (", ", ": ")
    text = json.dumps(value, ensure_ascii=ascii_only, separators=separators)
    _same(text.encode("utf-8", "surrogatepass"))


@settings(max_examples=300)
@given(st.binary(max_size=40))
def test_any_bytes_read_or_fail_as_the_standard_library_does(data: bytes) -> None:
    _same(data)


@pytest.mark.parametrize(
    "data",
    [
        b'{"a": 1, "b": 2, "a": 3}',
        b"[9223372036854775807, 9223372036854775808, -9223372036854775809]",
        b"[18446744073709551616, 12345678901234567890123]",
        b'["1234567890123456789", 1.5e400, -0.0, 5e-324]',
        b"[NaN, Infinity, -Infinity]",
        b'"\\ud800"',
        b"\xef\xbb\xbf[1]",
        '{"k": "caf\u00e9"}'.encode("utf-16"),
        b"[" * 2000 + b"]" * 2000,
        b"[1,]",
        b"",
    ],
)
def test_the_edges_where_a_fast_parser_may_differ_read_as_the_standard_library_reads_them(
    data: bytes,
) -> None:
    _same(data)


@pytest.mark.parametrize(
    ("data", "long"),
    [
        (b'{"id": "chatcmpl-00000000000000000000001"}', False),
        (b'{"n": 12345678901234567890}', True),
        (b'{"n":-12345678901234567890}', True),
        (b"[1, \n 12345678901234567890]", True),
        (b"12345678901234567890", True),
        (b'["x", "a 12345678901234567890"]', False),
        (b'["x, 12345678901234567890"]', False),  # inside a string, after a comma
        (b'{"f": 0.12345678901234567890}', False),
        (b'{"s": "1234567890123456789012", "n": 1234567890123456789}', True),
    ],
)
def test_long_integers_and_long_digits_in_strings_read_as_the_standard_library_reads_them(
    data: bytes, long: bool
) -> None:
    _same(data)
    assert any(isinstance(v, int) and abs(v) >= 10**18 for v in _numbers(loads(data))) is long


@settings(max_examples=300)
@given(VALUES, st.booleans())
def test_decoded_text_reads_as_the_standard_library_reads_it(value: Any, ascii_only: bool) -> None:
    _same_text(json.dumps(value, ensure_ascii=ascii_only))


@settings(max_examples=300)
@given(st.text(max_size=40))
def test_any_text_reads_or_fails_as_the_standard_library_does(text: str) -> None:
    _same_text(text)


@pytest.mark.parametrize(
    "text",
    ['"\\ud800"', '"\ud800"', '["\udc00", 1]', "[1,]", "", "\ufeff[1]", "1\x00", "[NaN]"],
)
def test_text_with_a_lone_surrogate_or_an_error_reads_as_the_standard_library_reads_it(
    text: str,
) -> None:
    _same_text(text)


@settings(max_examples=500)
@given(st.text(max_size=40), st.booleans())
def test_a_string_token_s_body_reads_as_its_text(text: str, ascii_only: bool) -> None:
    body = json.dumps(text, ensure_ascii=ascii_only)[1:-1].encode("utf-8", "surrogatepass")
    got = string_body(body)
    if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        assert got is None  # a lone surrogate: left to `json`, with the whole chunk
    else:
        assert got == text == json.loads(b'"' + body + b'"')


@pytest.mark.parametrize(
    "body", [b'a","b', b"a\\", b'"', b"tab\there", b"\xff", b"\\x41", b"\\ud800"]
)
def test_bytes_that_are_not_one_string_token_s_body_read_as_none(body: bytes) -> None:
    assert string_body(body) is None


KEYS = frozenset({"messages", "system"})
PAD = {"pad": "x" * LEAVE_FROM}  # long enough to be read leaving `KEYS`


def _leaving(data: bytes) -> Any:
    value = loads_leaving(data, KEYS)  # raises here what `json` raises, never later
    if not isinstance(value, dict):
        return value
    try:
        return read_all(value)
    except (ValueError, RecursionError) as exc:
        raise AssertionError(f"left unread what `json` refuses: {exc!r}") from exc


def _same_leaving(data: bytes) -> None:
    _agree(_leaving, data)
    if jsonread._msgspec(data) is jsonread._REFUSED or len(data) < LEAVE_FROM:
        return
    value = loads_leaving(data, KEYS)  # what msgspec reads whole, it reads leaving the keys
    if isinstance(value, dict):
        for key in KEYS & value.keys():
            assert type(value[key]) is Unread
            assert loads(bytes(value[key])) == loads(data)[key]
        assert all(type(v) is not Unread for k, v in value.items() if k not in KEYS)


@settings(max_examples=500)
@given(
    st.dictionaries(st.sampled_from(["messages", "system", "model", "tools", "n"]), VALUES),
    st.booleans(),
    st.booleans(),
)
def test_a_long_request_reads_leaving_its_keys_as_the_standard_library_reads_it(
    members: dict[str, Any], ascii_only: bool, pad_first: bool
) -> None:
    members = {**PAD, **members} if pad_first else {**members, **PAD}
    text = json.dumps(members, ensure_ascii=ascii_only)
    _same_leaving(text.encode("utf-8", "surrogatepass"))


@settings(max_examples=300)
@given(st.binary(max_size=40), st.binary(max_size=40))
def test_any_bytes_in_a_long_request_read_leaving_or_fail_as_the_standard_library_does(
    inside: bytes, outside: bytes
) -> None:
    _same_leaving(
        b'{"pad": "%s", "messages": [%s], "n": %s}' % (PAD["pad"].encode(), inside, outside)
    )


LONG = b'{"pad": "' + PAD["pad"].encode() + b'", "messages": '


@pytest.mark.parametrize(
    "value",
    [
        b'[{"content": "caf\xc3\xa9"}]',
        b'["\xff"]',  # not UTF-8, which msgspec does not check in what it skips
        b'["\xed\xa0\x80"]',  # an encoded surrogate, which `json` lets through
        b"[1e999, -1e999]",
        b"[NaN, Infinity]",
        b'["\\ud800"]',
        b"[" * 2000 + b"]" * 2000,
        b"[" * 500 + b"]" * 500,
        b'[1], "messages": [2]',  # the last one counts, as in `json`
        b"[1,]",
        b'"a string"',
        b"12345678901234567890123",
    ],
)
def test_the_edges_of_a_long_request_read_leaving_as_the_standard_library_reads_them(
    value: bytes,
) -> None:
    _same_leaving(LONG + value + b"}")
    _same_leaving(LONG + value + b', "n": 1e999}')  # a read value out of range: `json` reads it


def test_a_short_request_or_no_keys_reads_whole() -> None:
    short = b'{"messages": [1]}'
    assert loads_leaving(short, KEYS) == {"messages": [1]}
    assert loads_leaving(LONG + b"[1]}", frozenset())["messages"] == [1]
    assert type(loads_leaving(LONG + b"[1]}", KEYS)["messages"]) is Unread
    assert loads_leaving(b'["' + PAD["pad"].encode() + b'"]', KEYS) == [PAD["pad"]]

"""Reading a JSON body: orjson where it gives the standard library's answer, `json` elsewhere.

Every inspected request and every whole reply is parsed once; orjson does it in about half the
time (bench/RESULTS.md). For any text it accepts it returns what `json.loads` returns, except an
integer outside 64 bits, which it reads as a float; so a text with such a number (19 digits in
a row where a number may begin: after `:`, `[` or `,`, or at the start) goes to `json`, as does
any text orjson refuses (NaN, Infinity, lone surrogates, UTF-16, nesting past 1024), and the
errors are the standard library's (ValueError, RecursionError). One difference stays: nesting
deeper than the interpreter's recursion limit lets `json` fail but orjson read up to 1024
levels, so such a body is inspected instead of forwarded unread (tests/test_hostile.py tries
every depth there).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

# Every byte to a space but the digits (to "0"): 19 digits in a row become a run of 19 "0"s.
_DIGITS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG = b"0" * 19
_BEFORE_NUMBER = frozenset(b":[,")
_BLANK = frozenset(b" \t\r\n")


def loads(data: bytes) -> Any:
    return json.loads(data) if (value := _orjson(data)) is _REFUSED else value


def loads_text(text: str) -> Any:
    """What `json.loads(text)` returns, for text already decoded (an SSE event's data): orjson
    reads its UTF-8, and anything orjson refuses (or a lone surrogate) goes to `json` as text."""
    try:
        data = text.encode()
    except UnicodeEncodeError:
        return json.loads(text)
    return json.loads(text) if (value := _orjson(data)) is _REFUSED else value


def string_body(body: bytes) -> str | None:
    """The text of the JSON string token `"body"`, or None when that is not one string token
    (a quote in `body` ends it early, a backslash at its end escapes the closing quote) or
    orjson refuses it (a lone surrogate, bytes that are not UTF-8): `json` then has the say."""
    try:
        text: str = orjson.loads(b'"' + body + b'"')  # a value that opens with `"` is a string
    except orjson.JSONDecodeError:
        return None
    return text


_REFUSED = object()


def _orjson(data: bytes) -> Any:
    """orjson's reading of `data` where it is `json`'s, else `_REFUSED`."""
    if _long_integer(data):
        return _REFUSED
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return _REFUSED


def _long_integer(data: bytes) -> bool:
    """Whether `data` may hold an integer of 19 digits or more: a run of them that follows (past
    blanks and a minus sign) `:`, `[`, `,` or the start. A run inside a string can look so too,
    which only costs the slower parse."""
    digits = data.translate(_DIGITS)
    at = digits.find(_LONG)
    while at != -1:
        i = at - 1
        if i >= 0 and data[i] == 0x2D:  # "-"
            i -= 1
        while i >= 0 and data[i] in _BLANK:
            i -= 1
        if i < 0 or data[i] in _BEFORE_NUMBER:
            return True
        end = digits.find(b" ", at)
        if end == -1:
            return False
        at = digits.find(_LONG, end)
    return False

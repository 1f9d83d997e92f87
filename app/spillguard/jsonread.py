"""Reading a JSON body: orjson where it gives the standard library's answer, `json` elsewhere.

Every inspected request and every whole reply is parsed once; orjson does it in about half the
time (bench/RESULTS.md). For any text it accepts it returns what `json.loads` returns, except an
integer outside 64 bits, which it reads as a float; so a text holding 19 digits in a row (the
shortest such integer; digits inside strings too) goes to `json`, as does any text orjson
refuses (NaN, Infinity, lone surrogates, UTF-16, nesting past 1024), and the errors are the
standard library's (ValueError, RecursionError). One difference stays: nesting deeper than the
interpreter's recursion limit lets `json` fail but orjson read up to 1024 levels, so such a
body is inspected instead of forwarded unread (tests/test_hostile.py tries every depth there).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

# Every byte to a space but the digits (to "0"): 19 digits in a row become a run of 19 "0"s.
_DIGITS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG = b"0" * 19


def loads(data: bytes) -> Any:
    if _LONG not in data.translate(_DIGITS):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)

"""Reading a JSON body: msgspec where it gives the standard library's answer, `json` elsewhere.

Every inspected request and every whole reply is parsed once; msgspec does it in a fifth to a
third of `json`'s time (the bench's request and reply: 3.7 against 17.5 µs, 2.1 against 6.6),
as fast as orjson. For any text it accepts it returns what `json.loads` returns, integers of
any size included (read as `int`, where orjson reads a float, so no text needs looking at
first); any text it refuses (NaN, Infinity, a number out of float range, lone surrogates, a
byte order mark, UTF-16) goes to `json`, and the errors are the standard library's
(ValueError, RecursionError). Nesting is held to the interpreter's recursion limit by both
(tests/test_hostile.py tries every depth).

`loads_leaving` reads a request the same way but leaves the values of the keys named (the
conversation, which spillguard reads only to write out a retry by hand, and the tools, read
only when a reply needs them) as `Unread`, their bytes: msgspec still checks their syntax and
depth as it skips them, at about a third of the cost of building them (a 48 KB agent turn: 36
against 100 µs). Whoever reads such a key reads it through `value`.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec


def loads(data: bytes) -> Any:
    return json.loads(data) if (value := _msgspec(data)) is _REFUSED else value


def loads_leaving(data: bytes, keys: frozenset[str]) -> Any:
    """What `loads(data)` returns, except that when it is an object at least `LEAVE_FROM`
    bytes long, the values of its `keys` are `Unread`: what `read_all` reads back. Anything
    msgspec would not read as `json` does (bytes that are not UTF-8, whose skipping it does
    not check) takes the whole of `loads`, so the answer never differs but for those values."""
    if len(data) < LEAVE_FROM or not keys:
        return loads(data)
    try:
        if not data.isascii():
            data.decode()
        top = _TOP.decode(data)
        decode = _DECODER.decode
        return {k: v if k in keys else decode(v) for k, v in top.items()}
    except (*_REFUSALS, UnicodeDecodeError):  # ValidationError: not an object, or out of range
        return loads(data)


def value(given: Any) -> Any:
    """A value of what `loads_leaving` returned, as `loads` would have read it."""
    return loads(bytes(given)) if type(given) is Unread else given


def read_all(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` with every `Unread` value read, as `loads` would have read it."""
    return {k: value(v) for k, v in obj.items()}


def loads_text(text: str) -> Any:
    """What `json.loads(text)` returns, for text already decoded (an SSE event's data): msgspec
    reads its UTF-8, and anything it refuses (or a lone surrogate) goes to `json` as text."""
    try:
        data = text.encode()
    except UnicodeEncodeError:
        return json.loads(text)
    return json.loads(text) if (value := _msgspec(data)) is _REFUSED else value


def string_body(body: bytes) -> str | None:
    """The text of the JSON string token `"body"`, or None when that is not one string token
    (a quote in `body` ends it early, a backslash at its end escapes the closing quote) or
    msgspec refuses it (a lone surrogate, bytes that are not UTF-8): `json` then has the say."""
    try:
        return _STRING.decode(b'"' + body + b'"')
    except _REFUSALS:
        return None


Unread = msgspec.Raw
# Below this, building the whole object is as quick as skipping its keys' values: reading a
# request and its declared tools crosses near 300 bytes (timeit; 305 bytes: 3.04 µs whole,
# 3.06 left; 858 bytes: 4.61 against 3.47), and a tool array read once serves every request
# that repeats it (`detect.KnownTools`).
LEAVE_FROM = 512
_REFUSED = object()
_DECODER = msgspec.json.Decoder()
_STRING = msgspec.json.Decoder(str)
_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_REFUSALS = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)


def _msgspec(data: bytes) -> Any:
    """msgspec's reading of `data` (integers of any size as `int`, as `json`), else `_REFUSED`."""
    try:
        return _DECODER.decode(data)
    except _REFUSALS:  # ValidationError: a number out of float range (`json` gives inf)
        return _REFUSED

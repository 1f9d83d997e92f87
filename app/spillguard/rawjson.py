"""Append to one array of a JSON request without re-serializing the rest of it.

A retry adds its messages to the request, and a chained request may name other ids; everything
else the client sent (unknown fields, number spellings like 1e400, escapes, nesting as deep as
the client likes) must reach the upstream as it was. A top-level key's value is found by
scanning, iteratively and string-aware (no recursion, no parse of other fields), and the new
bytes are spliced in.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

_WS = " \t\r\n"
# (string, end) of the JSON string whose opening quote is just before `i`; typeshed omits it.
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _value_end(text: str, i: int) -> int:
    """The end of the JSON value starting at `i` (a generous scan, for valid JSON)."""
    if text[i] == '"':
        return _scanstring(text, i + 1)[1]
    depth = 0
    in_string = escape = False
    for j in range(i, len(text)):
        ch = text[j]
        if in_string:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
            if depth <= 0:
                return j + 1 if depth == 0 else j
        elif depth == 0 and (ch == "," or ch in _WS):
            return j
    return len(text)


def _members(text: str) -> Iterator[tuple[str, int, int]]:
    """(name, start, end) of each top-level member's value, in order. Raises IndexError or
    ValueError on a body that is not a JSON object."""
    i = _skip_ws(text, 0)
    if text[i] != "{":
        raise ValueError("not an object")
    i += 1
    while True:
        i = _skip_ws(text, i)
        if text[i] != '"':
            raise ValueError("not a member name")
        name, i = _scanstring(text, i + 1)
        i = _skip_ws(text, i)
        if text[i] != ":":
            raise ValueError("no colon")
        start = _skip_ws(text, i + 1)
        end = _value_end(text, start)
        yield name, start, end
        i = _skip_ws(text, end)
        if text[i] != ",":
            return
        i += 1


def _locate(raw: bytes, key: str) -> tuple[str, int, int] | None:
    """The body as text, and where the top-level `key`'s value is in it: its last one, when
    the key is written more than once, as `json` (and msgspec) read it."""
    found = None
    try:
        text = raw.decode("utf-8")
        for name, start, end in _members(text):
            if name == key:
                found = text, start, end
    except (IndexError, ValueError, UnicodeDecodeError):
        return None
    return found


def append_items(
    raw: bytes,
    key: str,
    items: list[dict[str, Any]],
    from_string: Callable[[str], str] | None = None,
) -> bytes | None:
    """`raw` with `items` appended to the array under top-level `key`. A string value becomes
    an array of `from_string(its raw JSON)` then the items, when `from_string` is given. None
    when the body is not an object holding such a value."""
    found = _locate(raw, key)
    if found is None:
        return None
    text, start, end = found
    added = ",".join(json.dumps(item) for item in items)
    value = text[start:end]
    if value.startswith("["):
        inner = value[1:-1]
        spliced = "[" + inner + ("," if inner.strip() else "") + added + "]"
    elif value.startswith('"') and from_string is not None:
        spliced = "[" + from_string(value) + "," + added + "]"
    else:
        return None
    return (text[:start] + spliced + text[end:]).encode("utf-8")


def elements(raw: bytes, key: str) -> list[str] | None:
    """The raw JSON of each element of the array under top-level `key`, or None."""
    found = _locate(raw, key)
    if found is None:
        return None
    text, start, end = found
    if not text[start:end].startswith("["):
        return None
    out: list[str] = []
    i = _skip_ws(text, start + 1)
    try:
        while text[i] != "]":
            item_end = _value_end(text, i)
            out.append(text[i:item_end])
            i = _skip_ws(text, item_end)
            if text[i] == ",":
                i = _skip_ws(text, i + 1)
            elif text[i] != "]":
                return None
    except (IndexError, ValueError):
        return None
    return out


def replace_values(raw: bytes, values: dict[str, str]) -> bytes | None:
    """`raw` with the values of top-level members replaced by the given raw JSON. None when
    the body is not an object holding every one of them."""
    out = raw
    for key, value in values.items():
        found = _locate(out, key)
        if found is None:
            return None
        text, start, end = found
        out = (text[:start] + value + text[end:]).encode("utf-8")
    return out


def with_values(raw: bytes, parsed: dict[str, Any], values: dict[str, str]) -> bytes | None:
    """`raw` with top-level members set to the given raw JSON: spliced into its own bytes when
    they allow (`replace_values`), else `parsed` written out again with them; None when
    neither can be done."""
    spliced = replace_values(raw, values)
    if spliced is not None:
        return spliced
    try:
        changed = {key: json.loads(value) for key, value in values.items()}
        return json.dumps({**parsed, **changed}, allow_nan=False).encode()
    except (TypeError, ValueError, RecursionError):
        return None

"""Append to one array of a JSON request without re-serializing the rest of it.

A retry adds two messages to the request; everything else the client sent (unknown fields,
number spellings like 1e400, escapes, nesting as deep as the client likes) must reach the
upstream as it was. `append_items` finds the top-level key's value by scanning, iteratively and
string-aware (no recursion, no parse of other fields), and splices the new items in.
"""

from __future__ import annotations

import json
from collections.abc import Callable
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


def append_items(
    raw: bytes,
    key: str,
    items: list[dict[str, Any]],
    from_string: Callable[[str], str] | None = None,
) -> bytes | None:
    """`raw` with `items` appended to the array under top-level `key`. A string value becomes
    an array of `from_string(its raw JSON)` then the items, when `from_string` is given. None
    when the body is not an object holding such a value."""
    try:
        text = raw.decode("utf-8")
        i = _skip_ws(text, 0)
        if text[i] != "{":
            return None
        i += 1
        while True:
            i = _skip_ws(text, i)
            if text[i] != '"':
                return None
            name, i = _scanstring(text, i + 1)
            i = _skip_ws(text, i)
            if text[i] != ":":
                return None
            start = _skip_ws(text, i + 1)
            end = _value_end(text, start)
            if name == key:
                break
            i = _skip_ws(text, end)
            if text[i] != ",":
                return None
            i += 1
    except (IndexError, ValueError, UnicodeDecodeError):
        return None
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

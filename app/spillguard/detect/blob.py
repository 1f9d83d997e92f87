"""Whole-answer tool-call blobs: JSON call objects (and their envelopes) and the pythonic list.

`BlobProbe` reads a reply from its first character and says, one character at a time, whether
the reply so far could still be the prefix of such a blob. It is deliberately generous (a
superset of real blobs, so a blob's prefix is never published) and cheap (it rejects ordinary
prose at the first character and a JSON answer at its first key outside the vocabulary).
`classify` then decides exactly, on the complete text, with `json.loads` or `ast`.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from .tools import ToolSet

NAME_KEYS = frozenset({"name", "tool", "tool_name", "function"})
ARG_KEYS = frozenset({"arguments", "args", "parameters", "input"})
ENVELOPE_KEYS = frozenset({"tool_calls", "tool_call", "toolCalls"})
VOCABULARY = NAME_KEYS | ARG_KEYS | {"id", "type"}
_KEYS = VOCABULARY | ENVELOPE_KEYS  # a call object's keys: these, or a declared parameter
_FLAT_NAME_KEYS = ("name", "tool", "type")
_WS = " \t\r\n"
_MAX_KEY = 128
_MAX_INFO = 32  # a fence's info string ("json", "JSON", "")


class BlobProbe:
    """Incremental viability of "the whole reply is one tool-call blob".

    The grammar it tracks: optional fence opener; then a call object, an array of call objects,
    several call objects joined by `;` (Llama), or a pythonic list `[name(...), ...]`; then an
    optional closing fence and white space. Call-object keys must be vocabulary, an envelope key
    or a declared parameter; a string under a name key must be a declared tool name (unless that
    key is also a declared parameter). Values are otherwise skipped without being judged.
    """

    # The state a probe starts in, as class attributes: a probe is built for every content
    # field, and most die at their first character.
    _seen = 0
    _state = "start"
    _ticks = 0
    _info = 0
    _fenced = False
    _fence_char = "`"
    _pythonic = False  # the top-level array holds pythonic calls, not JSON objects
    _key: list[str]  # the key or name being read, set where one opens
    _current_key = ""
    _in_array = False
    _depth = 0
    _in_string = False
    _escape = False
    _quote = ""
    _ident: list[str]  # the pythonic call name being read, set where one opens

    def __init__(self, tools: ToolSet, limit: int) -> None:
        self.alive = bool(tools.names)
        self._tools = tools
        self._limit = limit

    def feed(self, text: str) -> None:
        if not self.alive:
            return
        if self._seen + len(text) > self._limit:
            self.alive = False
            return
        self._seen += len(text)
        step = self._step
        for ch in text:
            if not step(ch):
                self.alive = False
                return

    # One character; returns False once the reply can no longer be a blob.
    def _step(self, ch: str) -> bool:
        s = self._state
        if s == "start":
            if ch in _WS:
                return True
            if ch in "`~":
                self._state, self._ticks, self._fence_char = "fence_open", 1, ch
                return True
            return self._open_value(ch)
        if s == "fence_open":
            if ch == self._fence_char and self._info == 0:
                self._ticks += 1
                return True
            if self._ticks < 3:
                return False
            if ch == "\n":
                self._fenced, self._state = True, "after_fence"
                return True
            self._info += 1
            return ch != "`" and self._info <= _MAX_INFO
        if s == "after_fence":
            return True if ch in _WS else self._open_value(ch)
        if s == "key_or_end":  # after "{" or ","
            if ch in _WS:
                return True
            if ch == '"':
                self._state, self._key = "key", []
                return True
            return ch == "}" and self._close_object()
        if s == "key":
            if self._escape:
                self._escape = False
            elif ch == "\\":
                self._escape = True
                return True
            elif ch == '"':
                key = "".join(self._key)
                if key not in _KEYS and key not in self._tools.all_params:
                    return False
                self._current_key, self._state = key, "colon"
                return True
            self._key.append(ch)
            return len(self._key) <= _MAX_KEY
        if s == "colon":
            if ch in _WS:
                return True
            if ch == ":":
                self._state = "value"
                return True
            return False
        if s == "value":
            if ch in _WS:
                return True
            key = self._current_key
            if (
                ch == '"'
                and key in ("name", "tool", "tool_name", "type", "function")
                and (key not in self._tools.all_params)
            ):
                self._state, self._key = "name_value", []
                return True
            self._state, self._depth = "skip", 0
            self._in_string, self._escape = False, False
            return self._skip(ch)
        if s == "name_value":
            if self._escape:
                self._escape = False
            elif ch == "\\":
                self._escape = True
                return True
            elif ch == '"':
                name = "".join(self._key)
                if name in self._tools.names or (
                    self._current_key == "type" and name == "function"
                ):
                    self._state = "after_value"
                    return True
                return False
            self._key.append(ch)
            return len(self._key) <= _MAX_KEY
        if s == "skip":
            return self._skip(ch)
        if s == "after_value":
            if ch in _WS:
                return True
            if ch == ",":
                self._state = "key_or_end"
                return True
            return ch == "}" and self._close_object()
        if s == "array_elem":  # after "," inside a top-level array of calls
            if ch in _WS:
                return True
            if ch == "{" and not self._pythonic:
                self._state = "key_or_end"
                return True
            if self._pythonic and (ch.isalpha() or ch == "_"):
                self._state, self._ident = "py_name", [ch]
                return self._ident_viable()
            return False
        if s == "array_first":  # right after a top-level "["
            if ch in _WS:
                return True
            if ch == "{":
                self._in_array, self._state = True, "key_or_end"
                return True
            if ch.isalpha() or ch == "_":
                self._pythonic, self._state, self._ident = True, "py_name", [ch]
                return self._ident_viable()
            return False
        if s == "after_elem":
            if ch in _WS:
                return True
            if ch == ",":
                self._state = "array_elem"
                return True
            if ch == "]":
                self._state = "after_top"
                return True
            return False
        if s == "py_name":
            if ch.isalnum() or ch in "_.-":
                self._ident.append(ch)
                return self._ident_viable()
            if ch == "(" and "".join(self._ident) in self._tools.names:
                self._state, self._depth, self._quote = "py_args", 1, ""
                return True
            return False
        if s == "py_args":
            return self._skip_python(ch)
        if s == "after_top":
            if ch in _WS:
                return True
            if ch == ";" and not self._fenced:
                self._state = "next_top"
                return True
            if ch == self._fence_char and self._fenced:
                self._state, self._ticks = "fence_close", 1
                return True
            return False
        if s == "next_top":
            if ch in _WS:
                return True
            if ch == "{":
                self._state = "key_or_end"
                return True
            return False
        if s == "fence_close":
            if ch == self._fence_char:
                self._ticks += 1
                return True
            if ch in _WS and self._ticks >= 3:
                self._state = "trailing"
                return True
            return False
        if s == "trailing":
            return ch in _WS
        return False

    def _open_value(self, ch: str) -> bool:
        if ch == "{":
            self._state = "key_or_end"
            return True
        if ch == "[":
            self._state = "array_first"
            return True
        return False

    def _close_object(self) -> bool:
        self._state = "after_elem" if self._in_array else "after_top"
        return True

    def _skip(self, ch: str) -> bool:
        """Skip one JSON value of any kind; on its end, hand the closing character on."""
        if self._in_string:
            if self._escape:
                self._escape = False
            elif ch == "\\":
                self._escape = True
            elif ch == '"':
                self._in_string = False
                if self._depth == 0:
                    self._state = "after_value"
            return True
        if ch == '"':
            self._in_string = True
            return True
        if ch in "{[":
            self._depth += 1
            return True
        if ch in "}]":
            if self._depth == 0:
                self._state = "after_value"
                return self._step(ch)
            self._depth -= 1
            if self._depth == 0:
                self._state = "after_value"
            return True
        if self._depth == 0 and ch in ",":
            self._state = "after_value"
            return self._step(ch)
        return True

    def _skip_python(self, ch: str) -> bool:
        """Skip a pythonic argument list up to its closing parenthesis."""
        if self._quote:
            if self._escape:
                self._escape = False
            elif ch == "\\":
                self._escape = True
            elif ch == self._quote:
                self._quote = ""
            return True
        if ch in "'\"":
            self._quote = ch
        elif ch in "([{":
            self._depth += 1
        elif ch in ")]}":
            self._depth -= 1
            if self._depth == 0:
                if ch != ")":
                    return False
                self._state = "after_elem"
        return True

    def _ident_viable(self) -> bool:
        prefix = "".join(self._ident)
        return any(name.startswith(prefix) for name in self._tools.names)


def unfence(text: str) -> str | None:
    """The text inside one wrapping Markdown fence, the text itself when unfenced, or None
    when a fence opens but does not wrap the whole text."""
    stripped = text.strip(_WS)
    fence = stripped[:3]
    if fence not in ("```", "~~~"):
        return stripped
    _, sep, rest = stripped.partition("\n")
    if not sep or not rest.rstrip(_WS).endswith(fence):
        return None
    body = rest.rstrip(_WS)[:-3]
    if fence in body:
        return None
    return body


def _loads_all(body: str) -> list[Any] | None:
    """One JSON value, or several objects joined by `;` (Llama 3.x)."""
    decoder = json.JSONDecoder()
    values: list[Any] = []
    pos, end = 0, len(body)
    try:
        while True:
            while pos < end and body[pos] in _WS:
                pos += 1
            value, pos = decoder.raw_decode(body, pos)
            values.append(value)
            while pos < end and body[pos] in _WS:
                pos += 1
            if pos == end:
                return values
            if body[pos] != ";":
                return None
            pos += 1
    except (ValueError, RecursionError):
        return None


def _call_name(obj: Any, tools: ToolSet) -> str | None:
    """The declared tool a JSON object calls, or None if it is not a call object."""
    if not isinstance(obj, dict) or not obj:
        return None
    keys = set(obj)
    if len(keys) == 1 and keys <= ENVELOPE_KEYS:
        inner = next(iter(obj.values()))
        calls = inner if isinstance(inner, list) else [inner]
        return _calls_name(calls, tools)
    if keys <= VOCABULARY:
        fn = obj.get("function")
        if isinstance(fn, dict):  # OpenAI's own shape written out
            if keys - {"id", "type", "function"} or obj.get("type", "function") != "function":
                return None
            return _call_name(fn, tools) if set(fn) <= {"name", "arguments"} else None
        names = [obj[k] for k in NAME_KEYS if k in obj]
        args = [obj[k] for k in ARG_KEYS if k in obj]
        if (
            len(names) == 1
            and len(args) == 1
            and isinstance(names[0], str)
            and names[0] in tools.names
            and isinstance(args[0], dict | str)
            and obj.get("type", "function") in ("function", names[0])
        ):
            return names[0]
    for key in _FLAT_NAME_KEYS:  # name under name/tool/type, arguments flattened beside it
        name = obj.get(key)
        if isinstance(name, str) and name in tools.names:
            rest = keys - {key, "id"}
            if len(keys) > 1 and rest <= tools.params.get(name, frozenset()):
                return name
    return None


def _calls_name(calls: list[Any], tools: ToolSet) -> str | None:
    names = [_call_name(c, tools) for c in calls]
    if names and all(names):
        return names[0]
    return None


def _pythonic_name(body: str, tools: ToolSet) -> str | None:
    """`[get_weather(city='SF'), other(x=1)]` naming declared tools with literal arguments."""
    if not (body.startswith("[") and body.endswith("]")):
        return None
    try:
        tree = ast.parse(body, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    node = tree.body
    if not isinstance(node, ast.List) or not node.elts:
        return None
    names: list[str] = []
    for call in node.elts:
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
            return None
        if call.func.id not in tools.names:
            return None
        try:
            for arg in [*call.args, *(k.value for k in call.keywords)]:
                ast.literal_eval(arg)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            return None
        names.append(call.func.id)
    return names[0]


def classify(text: str, tools: ToolSet) -> tuple[str, str] | None:
    """(family, tool name) when the whole text is one tool-call blob naming a declared tool."""
    body = unfence(text)
    if body is None or not body:
        return None
    if body[0] == "[":
        name = _pythonic_name(body, tools) if text.lstrip(_WS)[0] == "[" else None
        if name:
            return "pythonic", name
    values = _loads_all(body)
    if not values:
        return None
    if len(values) == 1 and isinstance(values[0], list):
        name = _calls_name(values[0], tools)
    else:
        name = _calls_name(values, tools)
    family = "llama" if len(values) > 1 else "json"  # several joined by `;`: Llama 3.x
    return (family, name) if name else None

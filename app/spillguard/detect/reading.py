"""What the per-family call parsers share: a cursor over the markup, drift-tolerant tokens,
strict JSON, the JSON call objects several families carry, and the bare-text parameter values
the XML-ish families carry.

A parser reads the markup from its first character and must reach its end (white space, a
trailing end-of-turn token and the family's own closers aside); anything it cannot read raises
`NoParse`, and the markup is not repaired.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .blob import ARG_KEYS, ENVELOPE_KEYS, NAME_KEYS, VOCABULARY
from .markers import BAR, SEP
from .tools import ToolSet
from .values import Untyped


class NoParse(Exception):
    """The markup is not one complete, regular structure of its family."""


@dataclass(frozen=True)
class Draft:
    """A call as read from the markup: the name as written, the arguments in the model's key
    order, values still `values.Untyped` where the family writes bare text."""

    name: str
    arguments: dict[str, Any]


Parser = Callable[[str, ToolSet], list[Draft]]

# A tool name as the token families write it (a Markdown-escaped `\_` allowed).
NAME = r"(?:[A-Za-z_]|\\_)(?:[\w.\-]|\\_){0,127}"
NAME_RE = re.compile(NAME)
JSON_START = re.compile(r"[\[{]")
OBJECT_START = re.compile(r"\{")


# A tag's attributes (`name="read" string="true"`), as group 1 of a pattern.
ATTRS = r"((?:\s{1,8}[\w-]{1,32}=\"[^\"]{0,512}\"){0,16})\s{0,8}"
_ATTR = re.compile(r"([\w-]{1,32})=\"([^\"]{0,512})\"")


def attributes(match: re.Match[str]) -> dict[str, str]:
    return dict(_ATTR.findall(match.group(1)))


def name_of(text: str) -> str:
    return text.replace("\\_", "_")


def token(*words: str) -> str:
    """A bar-framed special token (`<｜tool▁sep｜>`, `<|python_tag|>`) with its drift: fullwidth,
    ASCII, doubled or `‖` bars; `▁`, `_` or a space between words; Markdown escapes."""
    return r"\\?<" + BAR + SEP.join(words) + BAR + ">"


def word(text: str) -> str:
    """A tag word whose underscores may drift like the tokens' (`tool_call`, `tool▁call`)."""
    return SEP.join(re.escape(part) for part in text.split("_"))


# What may end a turn after the markup: the end-of-turn tokens that leak with it.
_END_TOKEN = re.compile(
    "(?:"
    + "|".join(
        token(*w)
        for w in (
            ("im", "end"),
            ("eot", "id"),
            ("eot",),
            ("eom", "id"),
            ("end",),
            ("return",),
            ("endoftext",),
            ("end", "of", "sentence"),
        )
    )
    + r"|</s>)\Z"
)
_LONGEST_END = 48


def tail_start(text: str) -> int:
    """Where the white space and the end-of-turn token that may follow the markup begin."""
    end = len(text.rstrip())
    match = _END_TOKEN.search(text, max(0, end - _LONGEST_END), end)
    return len(text[: match.start()].rstrip()) if match else end


_WS = re.compile(r"\s*")


def _no_constant(name: str) -> Any:
    raise NoParse(f"not JSON: {name}")  # NaN and Infinity have no place in arguments


_DECODER = json.JSONDecoder(parse_constant=_no_constant)


def loads(text: str) -> Any:
    """Strict JSON (no NaN or Infinity); NoParse when it is not."""
    try:
        return _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:
        raise NoParse("not JSON") from exc


class Reader:
    """A cursor over the markup."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self._tail = -1  # where the markup's trailing white space and end token begin

    def ws(self) -> None:
        match = _WS.match(self.text, self.pos)
        self.pos = match.end() if match else self.pos

    def take(self, pattern: re.Pattern[str]) -> re.Match[str] | None:
        """Match `pattern` at the cursor (after white space) and move past it, or None."""
        self.ws()
        match = pattern.match(self.text, self.pos)
        if match is not None:
            self.pos = match.end()
        return match

    def expect(self, pattern: re.Pattern[str]) -> re.Match[str]:
        match = self.take(pattern)
        if match is None:
            raise NoParse(f"expected {pattern.pattern[:40]} at {self.pos}")
        return match

    def until(self, pattern: re.Pattern[str]) -> tuple[str, re.Match[str]]:
        """The text up to the next match of `pattern`, and that match; the cursor after it."""
        match = pattern.search(self.text, self.pos)
        if match is None:
            raise NoParse(f"no {pattern.pattern[:40]} after {self.pos}")
        text = self.text[self.pos : match.start()]
        self.pos = match.end()
        return text, match

    def json(self) -> Any:
        """One JSON value at the cursor (after white space)."""
        self.ws()
        try:
            value, self.pos = _DECODER.raw_decode(self.text, self.pos)
        except (ValueError, RecursionError) as exc:
            raise NoParse("not JSON") from exc
        return value

    def object(self) -> dict[str, Any]:
        """A JSON object at the cursor (after white space): a call's arguments."""
        if not self.at(OBJECT_START):
            raise NoParse("arguments are not an object")
        value = self.json()
        assert isinstance(value, dict)  # it began with "{"
        return value

    def at(self, pattern: re.Pattern[str]) -> bool:
        """Whether `pattern` matches at the cursor (after white space), without moving."""
        self.ws()
        return pattern.match(self.text, self.pos) is not None

    def end(self) -> None:
        """Only white space and an end-of-turn token may remain."""
        if not self.at_end():
            raise NoParse(f"text after the calls at {self.pos}")

    def at_end(self) -> bool:
        if self._tail < 0:
            self._tail = tail_start(self.text)
        return self.pos >= self._tail


# ---- JSON call objects ------------------------------------------------------------------------


def _arguments(value: Any) -> dict[str, Any]:
    """Arguments written as an object, or as a JSON string holding one."""
    if isinstance(value, str):
        value = loads(value)
    if not isinstance(value, dict):
        raise NoParse("arguments are not an object")
    return value


def call_object(obj: Any, tools: ToolSet) -> Draft:
    """The call one JSON object spells: `{"name", "arguments"|"parameters"|...}` (arguments an
    object or a JSON string), OpenAI's own `{"type": "function", "function": {...}}`, or the
    name under `name`/`tool`/`type` with declared parameters flattened beside it."""
    if not isinstance(obj, dict):
        raise NoParse("a call is not an object")
    keys = set(obj)
    fn = obj.get("function")
    if isinstance(fn, dict):
        if keys - {"id", "type", "function"} or obj.get("type", "function") != "function":
            raise NoParse("unknown keys beside function")
        if set(fn) - {"name", "arguments"}:
            raise NoParse("unknown keys in function")
        return call_object({"name": fn.get("name"), "arguments": fn.get("arguments", {})}, tools)
    if keys <= VOCABULARY:
        names = [obj[k] for k in NAME_KEYS if k in obj]
        args = [obj[k] for k in ARG_KEYS if k in obj]
        if len(names) == 1 and len(args) == 1 and isinstance(names[0], str):
            if obj.get("type", "function") not in ("function", names[0]):
                raise NoParse("a type that is not the call's")
            return Draft(names[0], _arguments(args[0]))
    for key in ("name", "tool", "type"):  # Grok's flat shape: arguments beside the name
        name = obj.get(key)
        if isinstance(name, str) and name in tools.names:
            rest = {k: v for k, v in obj.items() if k not in (key, "id")}
            if rest and set(rest) <= tools.params.get(name, frozenset()):
                return Draft(name, rest)
    raise NoParse("not a call object")


def calls_of(value: Any, tools: ToolSet) -> list[Draft]:
    """The calls in one JSON value: a call object, a non-empty list of them, or an envelope
    (`{"tool_calls": [...]}`, `{"tool_call": {...}}`, `{"toolCalls": [...]}`)."""
    if isinstance(value, dict) and len(value) == 1 and set(value) <= ENVELOPE_KEYS:
        value = next(iter(value.values()))
    if isinstance(value, list):
        if not value:
            raise NoParse("no calls")
        return [call_object(item, tools) for item in value]
    return [call_object(value, tools)]


# ---- bare-text parameter values (the XML-ish families) ----------------------------------------

_CDATA = re.compile(r"\s*<!\[CDATA\[(.*)\]\]>\s*", re.S)


def text_value(raw: str) -> str:
    """A parameter's value as written between its tags (a CDATA section gives its inside)."""
    cdata = _CDATA.fullmatch(raw)
    return cdata.group(1) if cdata else raw


def put(arguments: dict[str, Any], key: str | None, value: Any) -> None:
    """One argument read from its tags; a key without a name, or named twice, is NoParse."""
    if not key or key in arguments:
        raise NoParse("a parameter without a name, or named twice")
    arguments[key] = value


def params(r: Reader, opener: re.Pattern[str], closer: re.Pattern[str]) -> dict[str, Any]:
    """`<parameter name="K">v</parameter>`-like pairs: the opener's attributes name the key."""
    arguments: dict[str, Any] = {}
    while (m := r.take(opener)) is not None:
        raw, _ = r.until(closer)
        put(arguments, attributes(m).get("name"), Untyped(text_value(raw)))
    return arguments

"""Parsers of the families that write calls as code: the pythonic list (Llama 3.2/4, LFM2,
OLMo 3) and Gemma's `call:NAME{key:value}` syntax.

Pythonic text is parsed by `ast` and each keyword argument read with `ast.literal_eval`: only
literals (strings, numbers, booleans, None, lists, tuples, dicts) are accepted, so a call, a
name, an attribute or an operator inside an argument refuses the repair. Nothing is evaluated.
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any

from .markers import BAR, SEP
from .reading import Draft, NoParse, Parser, Reader, tail_start, token, word
from .tools import ToolSet


def _json_value(value: Any) -> Any:
    """A literal as JSON would hold it: tuples become lists; sets, bytes, complex numbers,
    non-string keys and non-finite floats have no JSON form."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NoParse("a non-finite number")
        return value
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _json_value(v) for k, v in value.items()}
    raise NoParse(f"no JSON form for {type(value).__name__}")


def _call(node: ast.expr) -> Draft:
    """One `name(key=literal, ...)`: keyword arguments only (positional ones bind to nothing)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)) or node.args:
        raise NoParse("not a call by keywords")
    arguments: dict[str, Any] = {}
    for keyword in node.keywords:
        if keyword.arg is None or keyword.arg in arguments:
            raise NoParse("** or a repeated keyword")
        try:
            arguments[keyword.arg] = _json_value(ast.literal_eval(keyword.value))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as exc:
            raise NoParse("an argument that is not a literal") from exc
    return Draft(node.func.id, arguments)


def _parse(source: str) -> ast.expr:
    try:
        return ast.parse(source.strip(), mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise NoParse("not Python") from exc


def _calls(source: str) -> list[Draft]:
    """`[name(k=v), other(x=1)]`: a non-empty list of calls."""
    node = _parse(source)
    if not isinstance(node, ast.List) or not node.elts:
        raise NoParse("not a list of calls")
    return [_call(element) for element in node.elts]


def wrapped_list(opener: str | None, closer: str | None) -> Parser:
    """A pythonic list, maybe after `opener` (then closed by `closer`)."""
    open_re = re.compile(opener) if opener else None
    close_re = re.compile(r"(?:" + closer + r")\Z") if closer else None

    def read(markup: str, tools: ToolSet) -> list[Draft]:
        r = Reader(markup)
        opened = open_re is not None and r.take(open_re) is not None
        r.ws()
        start, end = r.pos, tail_start(markup)
        closing = close_re.search(markup, max(start, end - 64), end) if close_re else None
        if closing is not None:
            end = closing.start()
        elif opened:
            raise NoParse("the list's wrapper is not closed")
        return _calls(markup[start:end])

    return read


_OLMO = re.compile(r"\\?<function" + SEP + r"calls>")
_OLMO_END = re.compile(r"</function" + SEP + r"calls>")


def read_olmo(markup: str, tools: ToolSet) -> list[Draft]:
    """`<function_calls>` then one `name(k=v)` per line, then `</function_calls>`."""
    r = Reader(markup)
    r.expect(_OLMO)
    body, _ = r.until(_OLMO_END)
    r.end()
    lines = [line for line in body.splitlines() if line.strip()]
    if not lines:
        raise NoParse("no calls")
    return [_call(_parse(line)) for line in lines]


# ---- Gemma: call:NAME{key:<|"|>text<|"|>,n:3,flag:true} ---------------------------------------

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]{0,400})(?:\.[0-9]{1,400})?(?:[eE][+-]?[0-9]{1,4})?")
_WORDS = {"true": True, "false": False, "null": None}
_WORD = re.compile(r"true|false|null")
_KEY = re.compile(r"[A-Za-z_][\w.\-]{0,127}")
_COLON = re.compile(r":")
_COMMA = re.compile(r",")
_OPEN_OBJECT, _CLOSE_OBJECT = re.compile(r"\{"), re.compile(r"\}")
_OPEN_LIST, _CLOSE_LIST = re.compile(r"\["), re.compile(r"\]")
_MAX_DEPTH = 64


class _Gemma:
    """Gemma's value syntax: strings fenced by a token, bare numbers, words, objects, lists."""

    def __init__(self, r: Reader, quote: str) -> None:
        self.r = r
        self.quote = re.compile(quote)

    def value(self, depth: int = 0) -> Any:
        r = self.r
        if depth > _MAX_DEPTH:
            raise NoParse("nested too deep")
        if r.take(self.quote) is not None:
            return r.until(self.quote)[0]
        if r.take(_OPEN_OBJECT) is not None:
            return self.pairs(depth + 1)
        if r.take(_OPEN_LIST) is not None:
            items: list[Any] = []
            if r.take(_CLOSE_LIST) is None:
                items.append(self.value(depth + 1))
                while r.take(_COMMA) is not None:
                    items.append(self.value(depth + 1))
                r.expect(_CLOSE_LIST)
            return items
        if (w := r.take(_WORD)) is not None:
            return _WORDS[w.group()]
        number = r.expect(_NUMBER).group()
        return float(number) if any(c in number for c in ".eE") else int(number)

    def pairs(self, depth: int) -> dict[str, Any]:
        """`key:value` pairs up to the closing brace (the opening one already read)."""
        r = self.r
        out: dict[str, Any] = {}
        if r.take(_CLOSE_OBJECT) is not None:
            return out
        while True:
            key_quoted = r.take(self.quote) is not None
            key = r.until(self.quote)[0] if key_quoted else r.expect(_KEY).group()
            r.expect(_COLON)
            if key in out:
                raise NoParse("a key named twice")
            out[key] = self.value(depth)
            if r.take(_COMMA) is None:
                r.expect(_CLOSE_OBJECT)
                return out


def gemma(opener: str, closer: str, quote: str) -> Parser:
    open_re = re.compile(opener + r"\s{0,8}(?:call)?:(" + _KEY.pattern + r")\s{0,8}\{")
    close_re = re.compile(closer)

    def read(markup: str, tools: ToolSet) -> list[Draft]:
        r = Reader(markup)
        reader = _Gemma(r, quote)
        drafts: list[Draft] = []
        while not drafts or r.at(open_re):
            name = r.expect(open_re).group(1)
            drafts.append(Draft(name, reader.pairs(1)))
            r.expect(close_re)
        r.end()
        return drafts

    return read


PYTHON_PARSERS: dict[str, Parser] = {
    "pythonic": wrapped_list(token("python", "start"), token("python", "end")),
    "lfm2": wrapped_list(token("tool", "call", "start"), token("tool", "call", "end")),
    "olmo": read_olmo,
    "gemma": gemma(
        r"\\?<" + BAR + word("tool_call") + ">",
        r"<" + word("tool_call") + BAR + ">",
        "<" + BAR + '"' + BAR + ">",
    ),
    "function_gemma": gemma(
        r"\\?<" + word("start_function_call") + ">",
        r"<" + word("end_function_call") + ">",
        "<escape>",
    ),
}

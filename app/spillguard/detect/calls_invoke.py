"""Parsers of the XML-ish families whose calls name themselves in a `name="..."` attribute:
`<invoke name=..>` blocks (MiniMax-M2, Claude's `<function_calls>`, dots), MiniMax-M3's
token-prefixed tags, xAI's `<xai:function_call>` and MiniCPM's `<function>`. Parameter values
are bare text (`reading.text_value`), typed later by the tool's schema.
"""

from __future__ import annotations

import re
from typing import Any

from .markers import SEP
from .reading import (
    ATTRS,
    Draft,
    NoParse,
    Parser,
    Reader,
    attributes,
    calls_of,
    params,
    put,
    text_value,
    word,
)
from .tools import ToolSet
from .values import Untyped

# ---- <invoke name=..> families: MiniMax-M2, Claude, xAI, MiniCPM -----------------------------

_INVOKE = re.compile(r"\\?<invoke" + ATTRS + ">")
_INVOKE_END = re.compile(r"</invoke>")
_PARAM = re.compile(r"<parameter" + ATTRS + ">")
_PARAM_END = re.compile(r"</parameter>")


def _invokes(r: Reader) -> list[Draft]:
    drafts: list[Draft] = []
    while not drafts or r.at(_INVOKE):
        name = attributes(r.expect(_INVOKE)).get("name")
        arguments = params(r, _PARAM, _PARAM_END)
        r.expect(_INVOKE_END)
        if not name:
            raise NoParse("an invoke without a name")
        drafts.append(Draft(name, arguments))
    return drafts


def _blocks(opener: str, closer: str, optional: bool) -> Parser:
    """Blocks of `<invoke>` calls between `opener` and `closer` (which may both be absent when
    `optional`), several in a row."""
    open_re, close_re = re.compile(opener), re.compile(closer)

    def read(markup: str, tools: ToolSet) -> list[Draft]:
        r = Reader(markup)
        drafts: list[Draft] = []
        while not drafts or r.at(open_re) or (optional and r.at(_INVOKE)):
            block = r.take(open_re) is not None
            if not (block or optional):
                raise NoParse("no block opener")
            drafts += _invokes(r)
            if block:
                r.expect(close_re)
        r.end()
        return drafts

    return read


_XAI = re.compile(r"\\?<xai:" + word("function_call") + ATTRS + ">")
# Grok mangles its closer: `</xai:function_call?`, `...">`, or another token right after it.
_XAI_END = re.compile(
    r"</xai:" + word("function_call") + r"(?:>|\?>?|\">|<\|\w{1,32}\|>|(?=\s*(?:<xai:|\Z)))"
)


def read_xai(markup: str, tools: ToolSet) -> list[Draft]:
    """`<xai:function_call name="N">` with `<parameter name="K">v</parameter>` pairs and its
    (maybe mangled) closer; several in a row."""
    r = Reader(markup)
    drafts: list[Draft] = []
    while not drafts or r.at(_XAI):
        name = attributes(r.expect(_XAI)).get("name")
        arguments = params(r, _PARAM, _PARAM_END)
        r.expect(_XAI_END)
        if not name:
            raise NoParse("a call without a name")
        drafts.append(Draft(name, arguments))
    r.end()
    return drafts


_MINICPM = re.compile(r"\\?<function" + ATTRS + ">")
_MINICPM_PARAM = re.compile(r"<param" + ATTRS + ">")
_MINICPM_PARAM_END = re.compile(r"</param>")
_MINICPM_END = re.compile(r"</function>")


def read_minicpm(markup: str, tools: ToolSet) -> list[Draft]:
    """`<function name="N">` with `<param name="K">v</param>` pairs (CDATA values), then
    `</function>`; several in a row."""
    r = Reader(markup)
    drafts: list[Draft] = []
    while not drafts or r.at(_MINICPM):
        name = attributes(r.expect(_MINICPM)).get("name")
        arguments = params(r, _MINICPM_PARAM, _MINICPM_PARAM_END)
        r.expect(_MINICPM_END)
        if not name:
            raise NoParse("a call without a name")
        drafts.append(Draft(name, arguments))
    r.end()
    return drafts


# ---- dots, MiniMax-M3 --------------------------------------------------------------------------

_DOTS = re.compile(r"\\?<dots" + SEP + "function" + SEP + "call>")
_DOTS_END = re.compile(r"</dots" + SEP + "function" + SEP + "call>")


def read_dots(markup: str, tools: ToolSet) -> list[Draft]:
    """`<dots_function_call>` with `<invoke>` calls or a JSON call (or list) inside, then
    `</dots_function_call>`; several in a row."""
    r = Reader(markup)
    drafts: list[Draft] = []
    while not drafts or r.at(_DOTS):
        r.expect(_DOTS)
        drafts += _invokes(r) if r.at(_INVOKE) else calls_of(r.json(), tools)
        r.expect(_DOTS_END)
    r.end()
    return drafts


_M3 = r"\]<\]minimax\[>\["  # the token MiniMax-M3 puts before every tag
_M3_BLOCK = re.compile(_M3 + "<" + word("tool_call") + ">")
_M3_BLOCK_END = re.compile(_M3 + "</" + word("tool_call") + ">")
_M3_INVOKE = re.compile(_M3 + "<invoke" + ATTRS + ">")
_M3_INVOKE_END = re.compile(_M3 + "</invoke>")
_M3_KEY = re.compile(_M3 + r"<([A-Za-z_][\w.\-]{0,127})>")


def read_minimax_m3(r: Reader) -> list[Draft]:
    """`<tool_call>`, per call `<invoke name="N">` with `<K>v</K>` per argument and
    `</invoke>`, then `</tool_call>`: every tag after the `]<]minimax[>[` token."""
    r.expect(_M3_BLOCK)
    drafts: list[Draft] = []
    while not drafts or r.at(_M3_INVOKE):
        name = attributes(r.expect(_M3_INVOKE)).get("name")
        arguments: dict[str, Any] = {}
        while (m := r.take(_M3_KEY)) is not None:
            key = m.group(1)
            raw, _ = r.until(re.compile(_M3 + "</" + re.escape(key) + ">"))
            put(arguments, key, Untyped(text_value(raw)))
        r.expect(_M3_INVOKE_END)
        if not name:
            raise NoParse("an invoke without a name")
        drafts.append(Draft(name, arguments))
    r.expect(_M3_BLOCK_END)
    r.end()
    return drafts


_MINIMAX_M2 = _blocks(r"\\?<minimax:" + word("tool_call") + ">", r"</minimax:tool_call>", False)


def read_minimax(markup: str, tools: ToolSet) -> list[Draft]:
    r = Reader(markup)
    return read_minimax_m3(r) if r.at(_M3_BLOCK) else _MINIMAX_M2(markup, tools)


INVOKE_PARSERS: dict[str, Parser] = {
    "minimax": read_minimax,
    "claude_xml": _blocks(r"\\?<function_calls>", r"</function_calls>", True),
    "xai": read_xai,
    "minicpm": read_minicpm,
    "dots": read_dots,
}

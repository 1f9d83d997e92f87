"""Parsers of the XML-ish families, whose parameter values are bare text typed later by the
tool's schema: DSML (DeepSeek V3.2/V4), Qwen3-Coder, GLM, MiniMax-M2, Claude's `<invoke>`,
xAI and MiniCPM.

A value is the text between a parameter's tags exactly as written (a CDATA section gives its
inside), except that Qwen3-Coder's template puts the value on a line of its own, so one newline
after the opening tag and one before the closing tag are not part of it. DSML says itself how a
value is typed: `string="true"` keeps the text, `string="false"` is JSON.
"""

from __future__ import annotations

import re
from typing import Any

from .markers import BAR, SEP
from .reading import (
    ATTRS,
    Draft,
    NoParse,
    Parser,
    Reader,
    attributes,
    calls_of,
    loads,
    word,
)
from .tools import ToolSet
from .values import Untyped

_CDATA = re.compile(r"\s*<!\[CDATA\[(.*)\]\]>\s*", re.S)


def _text(raw: str) -> str:
    cdata = _CDATA.fullmatch(raw)
    return cdata.group(1) if cdata else raw


def _put(arguments: dict[str, Any], key: str | None, value: Any) -> None:
    if not key or key in arguments:
        raise NoParse("a parameter without a name, or named twice")
    arguments[key] = value


def _params(r: Reader, opener: re.Pattern[str], closer: re.Pattern[str]) -> dict[str, Any]:
    """`<parameter name="K">v</parameter>`-like pairs: the opener's attributes name the key."""
    arguments: dict[str, Any] = {}
    while (m := r.take(opener)) is not None:
        raw, _ = r.until(closer)
        _put(arguments, attributes(m).get("name"), Untyped(_text(raw)))
    return arguments


# ---- DSML -------------------------------------------------------------------------------------


def _dsml(words: str, closing: bool = False, attrs: bool = False) -> re.Pattern[str]:
    """A DSML tag, with its drift: any bars, `DSM`, a space or `_|` before the word, the `<`
    lost, a bar where the closing `>` belongs."""
    head = r"\\?<?" + ("/" if closing else "") + BAR + r"DSML?" + BAR + r"(?: |_" + BAR + ")?"
    return re.compile(head + "(?:" + words + ")" + (ATTRS if attrs else r"\s{0,8}") + "[>|｜]")


_DSML_BLOCK = _dsml("function_calls|tool_calls|calls")
_DSML_BLOCK_END = _dsml("function_calls|tool_calls|calls", closing=True)
_DSML_INVOKE = _dsml("invoke", attrs=True)
_DSML_INVOKE_END = _dsml("invoke", closing=True)
_DSML_PARAM = _dsml("parameter", attrs=True)
_DSML_PARAM_END = _dsml("parameter", closing=True)


def read_dsml(markup: str, tools: ToolSet) -> list[Draft]:
    """`<｜DSML｜function_calls>` (or `tool_calls`, `calls`; a stream may lose it), then per call
    `<｜DSML｜invoke name="N">` with `<｜DSML｜parameter name="K" string="true|false">v
    </｜DSML｜parameter>` pairs and `</｜DSML｜invoke>`, then the block's end."""
    r = Reader(markup)
    block = r.take(_DSML_BLOCK) is not None
    drafts: list[Draft] = []
    while not drafts or r.at(_DSML_INVOKE):
        name = attributes(r.expect(_DSML_INVOKE)).get("name")
        arguments: dict[str, Any] = {}
        while (m := r.take(_DSML_PARAM)) is not None:
            attrs = attributes(m)
            text = _text(r.until(_DSML_PARAM_END)[0])
            flag = attrs.get("string")
            value = text if flag == "true" else loads(text) if flag == "false" else Untyped(text)
            _put(arguments, attrs.get("name"), value)
        r.expect(_DSML_INVOKE_END)
        if not name:
            raise NoParse("an invoke without a name")
        drafts.append(Draft(name, arguments))
    if block:
        r.expect(_DSML_BLOCK_END)
    else:
        r.take(_DSML_BLOCK_END)
    r.end()
    return drafts


# ---- Qwen3-Coder and GLM (both open with <tool_call>) ---------------------------------------

_TOOL_CALL = re.compile(r"\\?<" + word("tool_call") + ">")
_TOOL_CALL_END = re.compile(r"\\?</" + word("tool_call") + ">")
_FUNCTION = re.compile(r"<function=(\"?)([^\">\n]{1,128})\1>")
_FUNCTION_END = re.compile(r"</function>")
_PARAMETER = re.compile(r"<parameter=(\"?)([^\">\n]{1,128})\1>")
_PARAMETER_END = re.compile(r"</parameter>")


def _own_line(raw: str) -> str:
    raw = raw[1:] if raw.startswith("\n") else raw
    return raw[:-1] if raw.endswith("\n") else raw


def _declared(name: str, tools: ToolSet) -> str:
    """A quoted name as written, or, when only that spelling with underscores for its spaces
    is declared, the declared one (`"get current temperature"` for get_current_temperature)."""
    joined = name.replace(" ", "_")
    return joined if name not in tools.names and joined in tools.names else name


def functions(opener: str, closer: str) -> Parser:
    """Calls `<function=NAME>` (the name maybe quoted) with `<parameter=K>` v `</parameter>`
    pairs and `</function>`, each maybe wrapped in `opener` ... `closer`; several in a row."""
    open_re, close_re = re.compile(opener), re.compile(closer)

    def read(markup: str, tools: ToolSet) -> list[Draft]:
        r = Reader(markup)
        drafts: list[Draft] = []
        while not drafts or r.at(open_re) or r.at(_FUNCTION):
            wrapped = r.take(open_re) is not None
            function = r.expect(_FUNCTION)
            name = function.group(2).strip()
            name = _declared(name, tools) if function.group(1) else name
            arguments: dict[str, Any] = {}
            while (m := r.take(_PARAMETER)) is not None:
                raw, _ = r.until(_PARAMETER_END)
                _put(arguments, m.group(2).strip(), Untyped(_own_line(_text(raw))))
            r.expect(_FUNCTION_END)
            if wrapped:
                r.expect(close_re)
            drafts.append(Draft(name, arguments))
        r.end()
        return drafts

    return read


_GLM_NAME = re.compile(r"[A-Za-z_][\w.\-]{0,127}(?=\s*(?:<arg_key>|</tool_call>))")
_ARG_KEY = re.compile(r"<arg_key>")
_ARG_KEY_END = re.compile(r"</arg_key>")
_ARG_VALUE = re.compile(r"<arg_value>")
_ARG_VALUE_END = re.compile(r"</arg_value>")


def read_glm(markup: str, tools: ToolSet) -> list[Draft]:
    """`<tool_call>NAME` then `<arg_key>K</arg_key><arg_value>V</arg_value>` pairs and
    `</tool_call>`; several in a row."""
    r = Reader(markup)
    drafts: list[Draft] = []
    while not drafts or r.at(_TOOL_CALL):
        r.expect(_TOOL_CALL)
        name = r.expect(_GLM_NAME).group()
        arguments: dict[str, Any] = {}
        while r.take(_ARG_KEY) is not None:
            key, _ = r.until(_ARG_KEY_END)
            r.expect(_ARG_VALUE)
            raw, _ = r.until(_ARG_VALUE_END)
            _put(arguments, key.strip(), Untyped(_text(raw)))
        r.expect(_TOOL_CALL_END)
        drafts.append(Draft(name, arguments))
    r.end()
    return drafts


# ---- <invoke name=..> families: MiniMax-M2, Claude, xAI, MiniCPM -----------------------------

_INVOKE = re.compile(r"\\?<invoke" + ATTRS + ">")
_INVOKE_END = re.compile(r"</invoke>")
_PARAM = re.compile(r"<parameter" + ATTRS + ">")
_PARAM_END = re.compile(r"</parameter>")


def _invokes(r: Reader) -> list[Draft]:
    drafts: list[Draft] = []
    while not drafts or r.at(_INVOKE):
        name = attributes(r.expect(_INVOKE)).get("name")
        arguments = _params(r, _PARAM, _PARAM_END)
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
        arguments = _params(r, _PARAM, _PARAM_END)
        r.expect(_XAI_END)
        if not name:
            raise NoParse("a call without a name")
        drafts.append(Draft(name, arguments))
    r.end()
    return drafts


_MINICPM = re.compile(r"\\?<function" + ATTRS + ">")
_MINICPM_PARAM = re.compile(r"<param" + ATTRS + ">")
_MINICPM_PARAM_END = re.compile(r"</param>")


def read_minicpm(markup: str, tools: ToolSet) -> list[Draft]:
    """`<function name="N">` with `<param name="K">v</param>` pairs (CDATA values), then
    `</function>`; several in a row."""
    r = Reader(markup)
    drafts: list[Draft] = []
    while not drafts or r.at(_MINICPM):
        name = attributes(r.expect(_MINICPM)).get("name")
        arguments = _params(r, _MINICPM_PARAM, _MINICPM_PARAM_END)
        r.expect(_FUNCTION_END)
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
            _put(arguments, key, Untyped(_text(raw)))
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


XML_PARSERS: dict[str, Parser] = {
    "dsml": read_dsml,
    "qwen3_coder": functions(_TOOL_CALL.pattern, _TOOL_CALL_END.pattern),
    "seed": functions(r"\\?<seed:" + word("tool_call") + ">", r"</seed:" + word("tool_call") + ">"),
    "glm": read_glm,
    "minimax": read_minimax,
    "claude_xml": _blocks(r"\\?<function_calls>", r"</function_calls>", True),
    "xai": read_xai,
    "minicpm": read_minicpm,
    "dots": read_dots,
}

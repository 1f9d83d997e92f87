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

from .markers import BAR
from .reading import Draft, NoParse, Parser, Reader, loads, word
from .schema import Untyped
from .tools import ToolSet

_ATTRS = r"((?:\s{1,8}[\w-]{1,32}=\"[^\"]{0,512}\")*)\s{0,8}"
_ATTR = re.compile(r"([\w-]{1,32})=\"([^\"]{0,512})\"")
_CDATA = re.compile(r"\s*<!\[CDATA\[(.*)\]\]>\s*", re.S)


def _attrs(match: re.Match[str]) -> dict[str, str]:
    return dict(_ATTR.findall(match.group(1)))


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
        _put(arguments, _attrs(m).get("name"), Untyped(_text(raw)))
    return arguments


# ---- DSML -------------------------------------------------------------------------------------


def _dsml(words: str, closing: bool = False, attrs: bool = False) -> re.Pattern[str]:
    """A DSML tag, with its drift: any bars, `DSM`, a space or `_|` before the word, the `<`
    lost, a bar where the closing `>` belongs."""
    head = r"\\?<?" + ("/" if closing else "") + BAR + r"DSML?" + BAR + r"(?: |_" + BAR + ")?"
    return re.compile(head + "(?:" + words + ")" + (_ATTRS if attrs else r"\s{0,8}") + "[>|｜]")


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
        name = _attrs(r.expect(_DSML_INVOKE)).get("name")
        arguments: dict[str, Any] = {}
        while (m := r.take(_DSML_PARAM)) is not None:
            attrs = _attrs(m)
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


def read_qwen3_coder(markup: str, tools: ToolSet) -> list[Draft]:
    """`<tool_call>` (sometimes absent), `<function=NAME>` (the name maybe quoted), then
    `<parameter=K>` v `</parameter>` pairs, `</function>`, `</tool_call>`; several in a row."""
    r = Reader(markup)
    drafts: list[Draft] = []
    while not drafts or r.at(_TOOL_CALL) or r.at(_FUNCTION):
        wrapped = r.take(_TOOL_CALL) is not None
        name = r.expect(_FUNCTION).group(2).strip()
        arguments: dict[str, Any] = {}
        while (m := r.take(_PARAMETER)) is not None:
            raw, _ = r.until(_PARAMETER_END)
            _put(arguments, m.group(2).strip(), Untyped(_own_line(_text(raw))))
        r.expect(_FUNCTION_END)
        if wrapped:
            r.expect(_TOOL_CALL_END)
        drafts.append(Draft(name, arguments))
    r.end()
    return drafts


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

_INVOKE = re.compile(r"\\?<invoke" + _ATTRS + ">")
_INVOKE_END = re.compile(r"</invoke>")
_PARAM = re.compile(r"<parameter" + _ATTRS + ">")
_PARAM_END = re.compile(r"</parameter>")


def _invokes(r: Reader) -> list[Draft]:
    drafts: list[Draft] = []
    while not drafts or r.at(_INVOKE):
        name = _attrs(r.expect(_INVOKE)).get("name")
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


_XAI = re.compile(r"\\?<xai:" + word("function_call") + _ATTRS + ">")
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
        name = _attrs(r.expect(_XAI)).get("name")
        arguments = _params(r, _PARAM, _PARAM_END)
        r.expect(_XAI_END)
        if not name:
            raise NoParse("a call without a name")
        drafts.append(Draft(name, arguments))
    r.end()
    return drafts


_MINICPM = re.compile(r"\\?<function" + _ATTRS + ">")
_MINICPM_PARAM = re.compile(r"<param" + _ATTRS + ">")
_MINICPM_PARAM_END = re.compile(r"</param>")


def read_minicpm(markup: str, tools: ToolSet) -> list[Draft]:
    """`<function name="N">` with `<param name="K">v</param>` pairs (CDATA values), then
    `</function>`; several in a row."""
    r = Reader(markup)
    drafts: list[Draft] = []
    while not drafts or r.at(_MINICPM):
        name = _attrs(r.expect(_MINICPM)).get("name")
        arguments = _params(r, _MINICPM_PARAM, _MINICPM_PARAM_END)
        r.expect(_FUNCTION_END)
        if not name:
            raise NoParse("a call without a name")
        drafts.append(Draft(name, arguments))
    r.end()
    return drafts


XML_PARSERS: dict[str, Parser] = {
    "dsml": read_dsml,
    "qwen3_coder": read_qwen3_coder,
    "glm": read_glm,
    "minimax": _blocks(r"\\?<minimax:" + word("tool_call") + ">", r"</minimax:tool_call>", False),
    "claude_xml": _blocks(r"\\?<function_calls>", r"</function_calls>", True),
    "xai": read_xai,
    "minicpm": read_minicpm,
}

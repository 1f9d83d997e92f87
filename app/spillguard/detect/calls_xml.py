"""Parsers of the XML-ish families that name a call and its parameters in tags of their own:
DSML (DeepSeek V3.2/V4), Qwen3-Coder (and Seed) and GLM. Their parameter values are bare text,
typed later by the tool's schema (`reading.text_value`: the text between a parameter's tags
exactly as written, a CDATA section giving its inside), except that Qwen3-Coder's template puts
the value on a line of its own, so one newline after the opening tag and one before the
closing tag are not part of it. DSML says itself how a value is typed: `string="true"` keeps the
text, `string="false"` is JSON. The `<invoke name=..>` families are in `calls_invoke`.
"""

from __future__ import annotations

import re
from typing import Any

from .markers import BAR
from .reading import (
    ATTRS,
    Draft,
    NoParse,
    Parser,
    Reader,
    attributes,
    loads,
    put,
    text_value,
    word,
)
from .tools import ToolSet
from .values import Untyped

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
            text = text_value(r.until(_DSML_PARAM_END)[0])
            flag = attrs.get("string")
            value = text if flag == "true" else loads(text) if flag == "false" else Untyped(text)
            put(arguments, attrs.get("name"), value)
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
                put(arguments, m.group(2).strip(), Untyped(_own_line(text_value(raw))))
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
            put(arguments, key.strip(), Untyped(text_value(raw)))
        r.expect(_TOOL_CALL_END)
        drafts.append(Draft(name, arguments))
    r.end()
    return drafts


XML_PARSERS: dict[str, Parser] = {
    "dsml": read_dsml,
    "qwen3_coder": functions(_TOOL_CALL.pattern, _TOOL_CALL_END.pattern),
    "seed": functions(r"\\?<seed:" + word("tool_call") + ">", r"</seed:" + word("tool_call") + ">"),
    "glm": read_glm,
}

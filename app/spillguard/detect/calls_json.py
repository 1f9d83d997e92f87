"""Parsers of the families that write a JSON call object (or a list of them) in or after a tag:
the whole-answer blob, Llama, Hermes/Qwen, Mistral (array and v11), and the tags that wrap a
JSON call or list (Granite, GigaChat, Nemotron, InternLM, Longcat, `<tools>`, `<tool_calls>`,
...), Command R's and Apertus' own call objects."""

from __future__ import annotations

import re
from typing import Any

from .blob import unfence
from .markers import BAR, SEP
from .reading import (
    JSON_START,
    NAME,
    NAME_RE,
    OBJECT_START,
    Draft,
    NoParse,
    Parser,
    Reader,
    calls_of,
    name_of,
    token,
    word,
)
from .tools import ToolSet

_SEMICOLON = re.compile(";")

# ---- the whole-answer blob, and Llama 3.x ----------------------------------------------------

_PYTHON_TAG = re.compile(token("python", "tag"))


def read_json(markup: str, tools: ToolSet) -> list[Draft]:
    """A JSON call, a list or envelope of them, or several objects joined by `;` (Llama); maybe
    in one Markdown fence, maybe after `<|python_tag|>`."""
    r = Reader(markup)
    if r.take(_PYTHON_TAG) is not None:
        markup = markup[r.pos :]
    body = unfence(markup)
    if not body:
        raise NoParse("no body")
    r = Reader(body)
    drafts: list[Draft] = []
    while True:
        drafts += calls_of(r.json(), tools)
        if r.take(_SEMICOLON) is None:
            break
    r.end()
    return drafts


# ---- Hermes / Qwen: <tool_call>{json}</tool_call>, several in a row --------------------------

_TOOL_CALL = re.compile(r"\\?<" + word("tool_call") + ">")
_TOOL_CALL_END = re.compile(r"\\?</" + word("tool_call") + ">")


def read_hermes(markup: str, tools: ToolSet) -> list[Draft]:
    """`<tool_call>{"name": ..., "arguments": ...}</tool_call>` (or a list inside), several in a
    row."""
    r = Reader(markup)
    drafts: list[Draft] = []
    first = True
    while first or r.at(_TOOL_CALL):
        # The first opener may be lost after reasoning: `</think>{"name": ...}</tool_call>`.
        if r.take(_TOOL_CALL) is None and not (first and r.at(OBJECT_START)):
            raise NoParse("no <tool_call>")
        first = False
        drafts += calls_of(r.json(), tools)
        r.expect(_TOOL_CALL_END)
    r.end()
    return drafts


# ---- Mistral ----------------------------------------------------------------------------------

_TOOL_CALLS = re.compile(r"\\?\[TOOL" + SEP + r"CALLS\\?\]")
_ARGS = re.compile(r"\\?\[ARGS\\?\]")
_CALL_ID = re.compile(r"\\?\[CALL" + SEP + r"ID\\?\][ \t]{0,4}[\w\-]{1,64}")
_V11_CALL = re.compile(NAME + r"\s{0,8}(?:\\?\[CALL" + SEP + r"ID|\\?\[ARGS)")


def read_mistral(markup: str, tools: ToolSet) -> list[Draft]:
    """`[TOOL_CALLS]` then a JSON list (older tokenizers), or `NAME[ARGS]{json}` per call (v11+,
    maybe with `[CALL_ID]id` before `[ARGS]`), each call after its own `[TOOL_CALLS]` or not."""
    r = Reader(markup)
    r.expect(_TOOL_CALLS)
    drafts: list[Draft] = []
    while True:
        if r.at(JSON_START):
            drafts += calls_of(r.json(), tools)
        else:
            name = name_of(r.expect(NAME_RE).group())
            r.take(_CALL_ID)
            r.expect(_ARGS)
            drafts.append(Draft(name, r.object()))
        if r.take(_TOOL_CALLS) is None and not r.at(_V11_CALL):
            break
    r.end()
    return drafts


# ---- tags around a JSON call or list ------------------------------------------------------------


def wrapped(opener: str, closer: str | None) -> Parser:
    """A parser of JSON calls (or lists of them) each after `opener` (and before `closer`)."""
    open_re = re.compile(opener)
    close_re = re.compile(closer) if closer else None

    def read(markup: str, tools: ToolSet) -> list[Draft]:
        r = Reader(markup)
        drafts: list[Draft] = []
        while not drafts or r.at(open_re):
            r.expect(open_re)
            drafts += calls_of(r.json(), tools)
            if close_re is not None:
                r.expect(close_re)
        r.end()
        return drafts

    return read


# ---- Command R, Apertus, K2 Horizon: their own call shapes --------------------------------------

_START_ACTION = re.compile(token("START", "ACTION"))
_END_ACTION = re.compile(token("END", "ACTION"))
_ACTION_LINE = re.compile(r"Action:[ \t]{0,4}(?:\r?\n[ \t]{0,4})?```(?:json)?[ \t]{0,4}\r?\n")
_FENCE_CLOSE = re.compile(r"```")


def _command_r_calls(value: Any) -> list[Draft]:
    """`[{"tool_call_id": "0", "tool_name": "N", "parameters": {...}}, ...]`."""
    if not isinstance(value, list) or not value:
        raise NoParse("not a list of actions")
    drafts = []
    for item in value:
        if not isinstance(item, dict) or set(item) - {"tool_call_id", "tool_name", "parameters"}:
            raise NoParse("not an action")
        name, args = item.get("tool_name"), item.get("parameters", {})
        if not isinstance(name, str) or not isinstance(args, dict):
            raise NoParse("an action without a name or parameters")
        drafts.append(Draft(name, args))
    return drafts


def read_command_r(markup: str, tools: ToolSet) -> list[Draft]:
    """`<|START_ACTION|>[...]<|END_ACTION|>` (R7B, Command A), or the older R+ line `Action:`
    and a ```json fenced list."""
    r = Reader(markup)
    if r.take(_START_ACTION) is not None:
        drafts = _command_r_calls(r.json())
        r.expect(_END_ACTION)
    else:
        r.expect(_ACTION_LINE)
        drafts = _command_r_calls(r.json())
        r.expect(_FENCE_CLOSE)
    r.end()
    return drafts


_TOOLS_PREFIX = re.compile(token("tools", "prefix"))
_TOOLS_SUFFIX = re.compile(token("tools", "suffix"))


def read_apertus(markup: str, tools: ToolSet) -> list[Draft]:
    """`<|tools_prefix|>[{"NAME": {arguments}}, ...]<|tools_suffix|>`: the name is the key."""
    r = Reader(markup)
    r.expect(_TOOLS_PREFIX)
    value = r.json()
    r.expect(_TOOLS_SUFFIX)
    r.end()
    if not isinstance(value, list) or not value:
        raise NoParse("not a list of calls")
    drafts = []
    for item in value:
        if not isinstance(item, dict) or len(item) != 1:
            raise NoParse("a call is one name and its arguments")
        [(name, args)] = item.items()
        if not isinstance(args, dict):
            raise NoParse("arguments are not an object")
        drafts.append(Draft(name, args))
    return drafts


_IFM_CALLS = re.compile(r"<ifm" + BAR + word("tool_calls") + ">")
_IFM_CALLS_END = re.compile(r"</ifm" + BAR + word("tool_calls") + ">")
_IFM_CALL = re.compile(r"<ifm" + BAR + word("tool_call") + r">\s{0,8}(" + NAME + ")")
_IFM_CALL_END = re.compile(r"</ifm" + BAR + word("tool_call") + ">")


def read_k2_horizon(markup: str, tools: ToolSet) -> list[Draft]:
    """`<ifm|tool_calls>` then `<ifm|tool_call>NAME{json}</ifm|tool_call>` per call, then
    `</ifm|tool_calls>`."""
    r = Reader(markup)
    block = r.take(_IFM_CALLS) is not None
    drafts: list[Draft] = []
    while not drafts or r.at(_IFM_CALL):
        name = name_of(r.expect(_IFM_CALL).group(1))
        drafts.append(Draft(name, r.object()))
        r.expect(_IFM_CALL_END)
    if block:
        r.expect(_IFM_CALLS_END)
    r.end()
    return drafts


JSON_PARSERS: dict[str, Parser] = {
    "json": read_json,
    "llama": read_json,
    "hermes": read_hermes,
    "mistral": read_mistral,
    "command_r": read_command_r,
    "apertus": read_apertus,
    "k2_horizon": read_k2_horizon,
    "granite": wrapped(token("tool", "call"), None),
    "granite_fc": wrapped(r"\\?<function" + SEP + r"call>", None),
    # GigaChat 3: `<|function_call|>{json}`, or `<|message_sep|>`, a line `function call
    # <|role_sep|>`, then the JSON.
    "gigachat": wrapped(
        token("function", "call")
        + "|"
        + token("message", "sep")
        + r"\s{0,8}function[ _]call"
        + token("role", "sep"),
        None,
    ),
    "qwen_tools": wrapped(r"\\?<tools>", r"\\?</tools>"),
    "tool_calls_tag": wrapped(r"\\?<tool" + SEP + r"calls>", r"\\?</tool" + SEP + r"calls>"),
    "nemotron": wrapped(r"\\?<TOOLCALL>", r"\\?</TOOLCALL>"),
    "functools": wrapped(r"functools(?=\[)", None),
    "internlm": wrapped(token("action", "start") + token("plugin"), token("action", "end")),
    "longcat": wrapped(
        r"\\?<longcat" + SEP + "tool" + SEP + "call>", r"</longcat" + SEP + "tool" + SEP + "call>"
    ),
}

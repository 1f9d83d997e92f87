"""Parsers of the special-token families whose arguments are JSON: DeepSeek (V3 fenced, V3.1,
V4 attributes), Kimi K2, harmony (gpt-oss), and Kimi K3's token-framed arguments."""

from __future__ import annotations

import re

from .reading import (
    ATTRS,
    JSON_START,
    NAME,
    NAME_RE,
    OBJECT_START,
    Draft,
    NoParse,
    Parser,
    Reader,
    attributes,
    calls_of,
    name_of,
    token,
    word,
)
from .tools import ToolSet
from .values import Untyped

# ---- DeepSeek ---------------------------------------------------------------------------------

_CALLS_BEGIN = re.compile(token("tool", "calls", "begin"))
_CALLS_END = re.compile(token("tool", "calls", "end"))
_CALL_BEGIN = re.compile(token("tool", "call", "begin"))
_CALL_END = re.compile(token("tool", "call", "end"))
_TOOL_SEP = re.compile(token("tool", "sep"))
_FENCE_OPEN = re.compile(r"```(?:json)?[ \t]*\r?\n")
_FENCE_CLOSE = re.compile(r"```")
_V4_END = re.compile(r"\\?</" + word("tool_call") + ">")
_V4_OPEN = re.compile(r"\\?<tool_call" + ATTRS + ">")


def read_deepseek(markup: str, tools: ToolSet) -> list[Draft]:
    """V3: `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME` and a ```json fence; V3.1:
    `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}`; both inside `<｜tool▁calls▁begin｜>` (which a
    stream may lose) and its end. V4: `<tool_call name="NAME" ...>{json}</tool_call>`."""
    r = Reader(markup)
    if r.at(_V4_OPEN):
        return _deepseek_v4(r)
    outer = r.take(_CALLS_BEGIN) is not None
    drafts: list[Draft] = []
    while not drafts or r.at(_CALL_BEGIN):
        r.expect(_CALL_BEGIN)
        first = r.take(NAME_RE)
        r.expect(_TOOL_SEP)
        if first is not None and r.at(OBJECT_START):  # V3.1
            drafts.append(Draft(name_of(first.group()), r.object()))
        else:  # V3: the type before the separator, the name after it, then a fence
            if first is not None and first.group() != "function":
                raise NoParse("a V3 call type that is not function")
            name = name_of(r.expect(NAME_RE).group())
            r.expect(_FENCE_OPEN)
            drafts.append(Draft(name, r.object()))
            r.expect(_FENCE_CLOSE)
        r.expect(_CALL_END)
    if outer:
        r.expect(_CALLS_END)
    else:
        r.take(_CALLS_END)
    r.end()
    return drafts


def _deepseek_v4(r: Reader) -> list[Draft]:
    drafts: list[Draft] = []
    while not drafts or r.at(_V4_OPEN):
        attrs = attributes(r.expect(_V4_OPEN))
        if "name" not in attrs:
            raise NoParse("no name attribute")
        drafts.append(Draft(attrs["name"], r.object()))
        r.expect(_V4_END)
    r.end()
    return drafts


# ---- Kimi K2 ----------------------------------------------------------------------------------

_SECTION_BEGIN = re.compile(token("tool", "calls?", "section", "begin"))
_SECTION_END = re.compile(token("tool", "calls?", "section", "end"))
_ARGUMENT_BEGIN = re.compile(token("tool", "call", "argument", "begin"))
_KIMI_ID = re.compile(r"(?:functions\.)?(" + NAME + r"):\d{1,6}")


def read_kimi(markup: str, tools: ToolSet) -> list[Draft]:
    """`<|tool_calls_section_begin|>` then `<|tool_call_begin|>functions.NAME:0
    <|tool_call_argument_begin|>{json}<|tool_call_end|>` per call, then the section's end. The
    section opener, and with it the first call's opener, may be lost; a JSON list of calls may
    stand right after the section opener."""
    r = Reader(markup)
    section = r.take(_SECTION_BEGIN) is not None
    drafts: list[Draft] = []
    if section and r.at(JSON_START) and not r.at(OBJECT_START):
        drafts = calls_of(r.json(), tools)
    while not drafts or r.at(_CALL_BEGIN):
        if r.take(_CALL_BEGIN) is None and (drafts or section):
            raise NoParse("no call opener")
        name = name_of(r.expect(_KIMI_ID).group(1))
        r.expect(_ARGUMENT_BEGIN)
        drafts.append(Draft(name, r.object()))
        r.expect(_CALL_END)
    if section:
        r.expect(_SECTION_END)
    else:
        r.take(_SECTION_END)
    r.end()
    return drafts


# ---- harmony (gpt-oss) ------------------------------------------------------------------------

_START = re.compile(token("start") + r"\s*assistant")
_CHANNEL = re.compile(token("channel") + r"\s*([a-z]{1,20})")
_RECIPIENT = re.compile(r"to=functions\.(" + NAME + ")")
_CONSTRAIN = re.compile(r"(?:" + token("constrain") + r")?\s*json")
_MESSAGE = re.compile(token("message"))
_CALL = re.compile(token("call") + "|" + token("end"))
_HEADER = re.compile(token("start") + "|" + token("channel") + "|to=functions\\.")


def read_harmony(markup: str, tools: ToolSet) -> list[Draft]:
    """`<|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>
    {json}<|call|>`, the recipient before or after the channel, the leading tokens maybe lost,
    several calls in a row. `<|call|>` is a stop token a server may strip: the last call may end
    without it."""
    r = Reader(markup)
    drafts: list[Draft] = []
    while not drafts or r.at(_HEADER):
        r.take(_START)
        name: str | None = None
        while r.take(_MESSAGE) is None:
            if (recipient := r.take(_RECIPIENT)) is not None:
                if name is not None:
                    raise NoParse("two recipients")
                name = name_of(recipient.group(1))
            elif (channel := r.take(_CHANNEL)) is not None:
                if channel.group(1) == "final":
                    raise NoParse("a final answer, not a call")
            elif r.take(_CONSTRAIN) is None:
                raise NoParse("not a harmony call header")
        if name is None:
            raise NoParse("no recipient")
        drafts.append(Draft(name, r.object()))
        if r.take(_CALL) is None and not r.at_end():
            raise NoParse("no <|call|>")
    r.end()
    return drafts


# ---- Kimi K3: token-framed calls and arguments ------------------------------------------------


def _k3(kind: str, word: str, attrs: bool = False) -> re.Pattern[str]:
    return re.compile(token(kind) + word + (ATTRS if attrs else r"\s{0,8}") + token("sep"))


_K3_TOOLS, _K3_TOOLS_END = _k3("open", "tools"), _k3("close", "tools")
_K3_CALL, _K3_CALL_END = _k3("open", "call", attrs=True), _k3("close", "call")
_K3_ARGUMENT, _K3_ARGUMENT_END = _k3("open", "argument", attrs=True), _k3("close", "argument")


def read_kimi_k3(markup: str, tools: ToolSet) -> list[Draft]:
    """`<|open|>tools<|sep|>`, per call `<|open|>call tool="N" index="1"<|sep|>` with
    `<|open|>argument key="K" type="T"<|sep|>v<|close|>argument<|sep|>` each, and
    `<|close|>call<|sep|>`, then `<|close|>tools<|sep|>`. A `string` argument keeps its text;
    the others are typed by the schema."""
    r = Reader(markup)
    r.expect(_K3_TOOLS)
    drafts: list[Draft] = []
    while not drafts or r.at(_K3_CALL):
        name = attributes(r.expect(_K3_CALL)).get("tool")
        arguments: dict[str, object] = {}
        while (m := r.take(_K3_ARGUMENT)) is not None:
            attrs = attributes(m)
            text, _ = r.until(_K3_ARGUMENT_END)
            key = attrs.get("key")
            if not key or key in arguments:
                raise NoParse("an argument without a key, or named twice")
            arguments[key] = text if attrs.get("type") == "string" else Untyped(text)
        r.expect(_K3_CALL_END)
        if not name:
            raise NoParse("a call without a tool")
        drafts.append(Draft(name, arguments))
    r.expect(_K3_TOOLS_END)
    r.end()
    return drafts


TOKEN_PARSERS: dict[str, Parser] = {
    "deepseek": read_deepseek,
    "kimi": read_kimi,
    "harmony": read_harmony,
    "kimi_k3": read_kimi_k3,
}

"""Parsers of the families whose arguments are JSON: the whole-answer blob, Llama, Hermes/Qwen,
DeepSeek (V3 fenced, V3.1, V4 attributes), Kimi, Mistral (array and v11), harmony, and the tags
that wrap a JSON call or list (Granite, GigaChat, Nemotron, `<tools>`, `<tool_calls>`, ...)."""

from __future__ import annotations

import re

from .blob import unfence
from .markers import SEP
from .reading import Draft, NoParse, Parser, Reader, calls_of, token, word
from .tools import ToolSet

NAME = r"(?:[A-Za-z_]|\\_)(?:[\w.\-]|\\_){0,127}"
_NAME = re.compile(NAME)
_JSON_START = re.compile(r"[\[{]")
_OBJECT_START = re.compile(r"\{")
_SEMICOLON = re.compile(";")


def name_of(text: str) -> str:
    return text.replace("\\_", "_")


def _object(r: Reader) -> dict[str, object]:
    if not r.at(_OBJECT_START):
        raise NoParse("arguments are not an object")
    value = r.json()
    assert isinstance(value, dict)  # it began with "{"
    return value


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
    r = Reader(markup)
    drafts: list[Draft] = []
    first = True
    while first or r.at(_TOOL_CALL):
        # The first opener may be lost after reasoning: `</think>{"name": ...}</tool_call>`.
        if r.take(_TOOL_CALL) is None and not (first and r.at(_OBJECT_START)):
            raise NoParse("no <tool_call>")
        first = False
        drafts += calls_of(r.json(), tools)
        r.expect(_TOOL_CALL_END)
    r.end()
    return drafts


# ---- DeepSeek ---------------------------------------------------------------------------------

_CALLS_BEGIN = re.compile(token("tool", "calls", "begin"))
_CALLS_END = re.compile(token("tool", "calls", "end"))
_CALL_BEGIN = re.compile(token("tool", "call", "begin"))
_CALL_END = re.compile(token("tool", "call", "end"))
_TOOL_SEP = re.compile(token("tool", "sep"))
_FENCE_OPEN = re.compile(r"```(?:json)?[ \t]*\r?\n")
_FENCE_CLOSE = re.compile(r"```")
_V4_OPEN = re.compile(r"\\?<tool_call((?:\s+[\w-]{1,32}=\"[^\"<>]{0,256}\")+)\s*>")
_ATTR = re.compile(r"([\w-]{1,32})=\"([^\"<>]{0,256})\"")


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
        first = r.take(_NAME)
        r.expect(_TOOL_SEP)
        if first is not None and r.at(_OBJECT_START):  # V3.1
            drafts.append(Draft(name_of(first.group()), _object(r)))
        else:  # V3: the type before the separator, the name after it, then a fence
            if first is not None and first.group() != "function":
                raise NoParse("a V3 call type that is not function")
            name = name_of(r.expect(_NAME).group())
            r.expect(_FENCE_OPEN)
            drafts.append(Draft(name, _object(r)))
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
        attrs = dict(_ATTR.findall(r.expect(_V4_OPEN).group(1)))
        if "name" not in attrs:
            raise NoParse("no name attribute")
        drafts.append(Draft(attrs["name"], _object(r)))
        r.expect(_TOOL_CALL_END)
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
    if section and r.at(_JSON_START) and not r.at(_OBJECT_START):
        drafts = calls_of(r.json(), tools)
    while not drafts or r.at(_CALL_BEGIN):
        if r.take(_CALL_BEGIN) is None and (drafts or section):
            raise NoParse("no call opener")
        name = name_of(r.expect(_KIMI_ID).group(1))
        r.expect(_ARGUMENT_BEGIN)
        drafts.append(Draft(name, _object(r)))
        r.expect(_CALL_END)
    if section:
        r.expect(_SECTION_END)
    else:
        r.take(_SECTION_END)
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
        if r.at(_JSON_START):
            drafts += calls_of(r.json(), tools)
        else:
            name = name_of(r.expect(_NAME).group())
            r.take(_CALL_ID)
            r.expect(_ARGS)
            drafts.append(Draft(name, _object(r)))
        if r.take(_TOOL_CALLS) is None and not r.at(_V11_CALL):
            break
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
            recipient = r.take(_RECIPIENT)
            channel = None if recipient else r.take(_CHANNEL)
            if recipient is not None and name is None:
                name = name_of(recipient.group(1))
            elif channel is not None and channel.group(1) != "final":
                continue
            elif r.take(_CONSTRAIN) is None:
                raise NoParse("not a harmony call header")
        if name is None:
            raise NoParse("no recipient")
        drafts.append(Draft(name, _object(r)))
        if r.take(_CALL) is None and not r.at_end():
            raise NoParse("no <|call|>")
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


JSON_PARSERS: dict[str, Parser] = {
    "json": read_json,
    "llama": read_json,
    "hermes": read_hermes,
    "deepseek": read_deepseek,
    "kimi": read_kimi,
    "mistral": read_mistral,
    "harmony": read_harmony,
    "granite": wrapped(token("tool", "call"), None),
    "granite_fc": wrapped(r"\\?<function" + SEP + r"call>", None),
    "gigachat": wrapped(token("function", "call"), None),
    "qwen_tools": wrapped(r"\\?<tools>", r"\\?</tools>"),
    "tool_calls_tag": wrapped(r"\\?<tool" + SEP + r"calls>", r"\\?</tool" + SEP + r"calls>"),
    "nemotron": wrapped(r"\\?<TOOLCALL>", r"\\?</TOOLCALL>"),
    "functools": wrapped(r"functools(?=\[)", None),
}

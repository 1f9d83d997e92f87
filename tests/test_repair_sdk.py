"""Repair mode end to end: the real openai SDK against spillguard on loopback, in front of the
scripted upstream. Every family `read_calls` reads comes back as a structured call from one
upstream call, through `create`, `create(stream=True)` and the `.stream()` helper's final
completion; whatever cannot be repaired is retried, as without repair (two upstream calls).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest

from spillguard.detect.calls import PARSERS
from spillguard.scripted import Turn, call
from tests.conftest import TOOLS, chat_body

CITY = '{"city": "Lisbon"}'
# One leaked get_weather(city="Lisbon") per family, spelled the way that family writes it.
FAMILIES = {
    "apertus": '<|tools_prefix|>[{"get_weather": {"city": "Lisbon"}}]<|tools_suffix|>',
    "command_r": '<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get_weather", '
    f'"parameters": {CITY}}}]<|END_ACTION|>',
    "dots": f'<dots_function_call>{{"name": "get_weather", "arguments": {CITY}}}'
    "</dots_function_call>",
    "internlm": f'<|action_start|><|plugin|>\n{{"name": "get_weather", "parameters": {CITY}}}'
    "<|action_end|>",
    "k2_horizon": f"<ifm|tool_calls><ifm|tool_call>get_weather{CITY}</ifm|tool_call>"
    "</ifm|tool_calls>",
    "kimi_k3": '<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|>'
    '<|open|>argument key="city" type="string"<|sep|>Lisbon<|close|>argument<|sep|>'
    "<|close|>call<|sep|><|close|>tools<|sep|>",
    "longcat": f'<longcat_tool_call>\n{{"name": "get_weather", "arguments": {CITY}}}\n'
    "</longcat_tool_call>",
    "seed": "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Lisbon</parameter>\n"
    "</function>\n</seed:tool_call>",
    "claude_xml": '<invoke name="get_weather">\n<parameter name="city">Lisbon</parameter>\n'
    "</invoke>",
    "deepseek": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
    f"```json\n{CITY}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    "dsml": '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
    '<｜DSML｜parameter name="city" string="true">Lisbon</｜DSML｜parameter>\n'
    "</｜DSML｜invoke>\n</｜DSML｜function_calls>",
    "function_gemma": "<start_function_call>call:get_weather{city:<escape>Lisbon<escape>}"
    "<end_function_call>",
    "functools": f'functools[{{"name": "get_weather", "arguments": {CITY}}}]',
    "gemma": '<|tool_call>call:get_weather{city:<|"|>Lisbon<|"|>}<tool_call|>',
    "gigachat": f'<|function_call|>{{"name": "get_weather", "arguments": {CITY}}}',
    "glm": "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Lisbon</arg_value>\n"
    "</tool_call>",
    "granite": f'<|tool_call|>[{{"name": "get_weather", "arguments": {CITY}}}]',
    "granite_fc": f'<function_call> {{"name": "get_weather", "arguments": {CITY}}}',
    "harmony": "<|channel|>commentary to=functions.get_weather <|constrain|>json"
    f"<|message|>{CITY}<|call|>",
    "hermes": f'<tool_call>\n{{"name": "get_weather", "arguments": {CITY}}}\n</tool_call>',
    "json": f'{{"name": "get_weather", "arguments": {CITY}}}',
    "kimi": "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    f"<|tool_call_argument_begin|>{CITY}<|tool_call_end|><|tool_calls_section_end|>",
    "lfm2": "<|tool_call_start|>[get_weather(city='Lisbon')]<|tool_call_end|>",
    "llama": f'<|python_tag|>{{"name": "get_weather", "parameters": {CITY}}}',
    "minicpm": '<function name="get_weather"><param name="city">Lisbon</param></function>',
    "minimax": '<minimax:tool_call>\n<invoke name="get_weather">\n'
    '<parameter name="city">Lisbon</parameter>\n</invoke>\n</minimax:tool_call>',
    "mistral": f"[TOOL_CALLS]get_weather[ARGS]{CITY}",
    "nemotron": f'<TOOLCALL>[{{"name": "get_weather", "arguments": {CITY}}}]</TOOLCALL>',
    "olmo": "<function_calls>\nget_weather(city='Lisbon')\n</function_calls>",
    "pythonic": "[get_weather(city='Lisbon')]",
    "qwen3_coder": "<tool_call>\n<function=get_weather>\n<parameter=city>\nLisbon\n"
    "</parameter>\n</function>\n</tool_call>",
    "qwen_tools": f'<tools>{{"name": "get_weather", "arguments": {CITY}}}</tools>',
    "tool_calls_tag": f'<tool_calls>[{{"name": "get_weather", "arguments": {CITY}}}]</tool_calls>',
    "xai": '<xai:function_call name="get_weather"><parameter name="city">Lisbon</parameter>'
    "</xai:function_call>",
}
HERMES = FAMILIES["hermes"]
PROSE = "Checking the forecast now.\n"
TWO = (
    HERMES + "\n<tool_call>\n"
    '{"name": "run_in_terminal", "arguments": {"command": "date"}}\n</tool_call>'
)
REAL = Turn(tool_calls=[call("get_weather", {"city": "Porto"}, "call_real")])
APIS = ["create", "create-stream", "stream-helper"]
CALL_ID = re.compile(r"call_[0-9a-f]{24}")


def hermes(body: str) -> str:
    return f"<tool_call>\n{body}\n</tool_call>"


@dataclass
class Answer:
    """What the client made of the reply, whichever way it asked."""

    action: str | None = None  # x-spillguard-action, when the API shows headers
    content: str | None = None
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # (id, name, arguments)
    finish: str | None = None
    usage: int | None = None  # total_tokens, when the reply carried usage


def _message(answer: Answer, choice: Any) -> Answer:
    answer.content, answer.finish = choice.message.content, choice.finish_reason
    for tc in choice.message.tool_calls or []:
        answer.calls.append((tc.id, tc.function.name, tc.function.arguments))
    return answer


async def ask(client: openai.AsyncOpenAI, api: str, **extra: Any) -> Answer:
    kw: dict[str, Any] = {"model": "m", "messages": chat_body()["messages"], "tools": TOOLS}
    kw |= extra
    if api == "create":
        raw = await client.chat.completions.with_raw_response.create(**kw)
        reply = raw.parse()
        answer = _message(Answer(raw.headers.get("x-spillguard-action")), reply.choices[0])
        answer.usage = reply.usage.total_tokens if reply.usage else None
        return answer
    if api == "stream-helper":
        async with client.chat.completions.stream(**kw) as stream:
            reply = await stream.get_final_completion()
        return _message(Answer(), reply.choices[0])
    kw["stream_options"] = {"include_usage": True}
    raw = await client.chat.completions.with_raw_response.create(stream=True, **kw)
    answer = Answer(raw.headers.get("x-spillguard-action"))
    calls: dict[int, list[str]] = {}
    async for chunk in raw.parse():
        if chunk.usage is not None:
            answer.usage = chunk.usage.total_tokens
        for choice in chunk.choices:
            if choice.delta.content:
                answer.content = (answer.content or "") + choice.delta.content
            for tc in choice.delta.tool_calls or []:
                slot = calls.setdefault(tc.index, ["", "", ""])
                slot[0] += tc.id or ""
                slot[1] += (tc.function and tc.function.name) or ""
                slot[2] += (tc.function and tc.function.arguments) or ""
            answer.finish = choice.finish_reason or answer.finish
    answer.calls = [(i, n, a) for i, n, a in (calls[k] for k in sorted(calls))]
    return answer


def assert_repaired(answer: Answer, api: str, *calls: tuple[str, Any]) -> None:
    assert answer.action == (None if api == "stream-helper" else "repaired")
    assert [(name, json.loads(args)) for _, name, args in answer.calls] == list(calls)
    ids = [i for i, _, _ in answer.calls]
    assert all(CALL_ID.fullmatch(i) for i in ids) and len(set(ids)) == len(ids)
    assert answer.finish == "tool_calls"
    if api != "stream-helper":
        assert answer.usage == 15  # the scripted upstream's usage, passed on


def test_every_family_read_calls_reads_has_a_sample_here() -> None:
    assert set(FAMILIES) == set(PARSERS)


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("api", APIS)
async def test_every_family_is_repaired_from_one_upstream_call(
    harness: Any, family: str, api: str
) -> None:
    h = await harness(Turn(content=FAMILIES[family]), REAL, mode="repair")
    answer = await ask(h.client(), api)
    assert_repaired(answer, api, ("get_weather", {"city": "Lisbon"}))
    assert not answer.content
    assert h.calls == 1


@pytest.mark.parametrize("api", APIS)
async def test_prose_before_the_markup_stays_as_content(harness: Any, api: str) -> None:
    h = await harness(Turn(content=PROSE + FAMILIES["kimi"], delta_size=5), mode="repair")
    answer = await ask(h.client(), api)
    assert_repaired(answer, api, ("get_weather", {"city": "Lisbon"}))
    assert answer.content == PROSE
    assert h.calls == 1


@pytest.mark.parametrize("api", APIS)
async def test_two_calls_in_one_leak(harness: Any, api: str) -> None:
    h = await harness(Turn(content=PROSE + TWO), mode="repair")
    answer = await ask(h.client(), api)
    calls = ("get_weather", {"city": "Lisbon"}), ("run_in_terminal", {"command": "date"})
    assert_repaired(answer, api, *calls)
    assert h.calls == 1


FALLBACKS = {
    "unparsable": (hermes('{"name": "get_weather", "arguments": {"city": "Lisbon"'), {}),
    "undeclared-name": (hermes('{"name": "book_flight", "arguments": {"to": "LIS"}}'), {}),
    "schema-failure": (hermes('{"name": "get_weather", "arguments": {"city": 7}}'), {}),
    "prose-after-markup": (HERMES + "\nThat should settle it.", {}),
    "tool-choice-none": (HERMES, {"tool_choice": "none"}),
    "other-named-tool": (
        HERMES,
        {"tool_choice": {"type": "function", "function": {"name": "run_in_terminal"}}},
    ),
    "parallel-calls-off": (TWO, {"parallel_tool_calls": False}),
}


@pytest.mark.parametrize("case", sorted(FALLBACKS))
@pytest.mark.parametrize("api", APIS)
async def test_what_cannot_be_repaired_is_retried(harness: Any, case: str, api: str) -> None:
    text, extra = FALLBACKS[case]
    h = await harness(Turn(content=text), REAL, mode="repair")
    answer = await ask(h.client(), api, **extra)
    assert answer.action == (None if api == "stream-helper" else "retried")
    assert answer.calls == [("call_real", "get_weather", '{"city": "Porto"}')]
    assert h.calls == 2
    assert "<tool_call>" not in json.dumps(h.upstream.requests[1]["body"])


@pytest.mark.parametrize("api", APIS)
async def test_a_readable_leak_on_the_retry_is_repaired(harness: Any, api: str) -> None:
    broken = hermes('{"name": "get_weather", "arguments": {"city": ')
    h = await harness(Turn(content=broken), Turn(content=FAMILIES["dsml"]), mode="repair")
    answer = await ask(h.client(), api)
    assert_repaired(answer, api, ("get_weather", {"city": "Lisbon"}))
    assert h.calls == 2


@pytest.mark.parametrize("api", APIS)
async def test_retry_mode_still_retries_a_readable_leak(harness: Any, api: str) -> None:
    h = await harness(Turn(content=HERMES), REAL)
    answer = await ask(h.client(), api)
    assert answer.calls == [("call_real", "get_weather", '{"city": "Porto"}')]
    assert h.calls == 2


# A tool whose parameters keep their types in `$defs` (as pydantic and zod write them).
BOOKING = {
    "type": "function",
    "function": {
        "name": "book_table",
        "parameters": {
            "$ref": "#/$defs/Booking",
            "$defs": {
                "Booking": {
                    "type": "object",
                    "properties": {
                        "guests": {"$ref": "#/$defs/Count"},
                        "terrace": {"allOf": [{"$ref": "#/$defs/Flag"}], "description": "outside"},
                    },
                    "required": ["guests"],
                },
                "Count": {"type": "integer", "minimum": 1},
                "Flag": {"type": "boolean"},
            },
        },
    },
}
BOOKED = (
    '<minimax:tool_call>\n<invoke name="book_table">\n<parameter name="guests">4</parameter>\n'
    '<parameter name="terrace">true</parameter>\n</invoke>\n</minimax:tool_call>'
)


@pytest.mark.parametrize("api", APIS)
async def test_values_typed_behind_a_ref_are_repaired(harness: Any, api: str) -> None:
    h = await harness(Turn(content=BOOKED), REAL, mode="repair")
    answer = await ask(h.client(), api, tools=[BOOKING])
    assert_repaired(answer, api, ("book_table", {"guests": 4, "terrace": True}))
    assert h.calls == 1

"""read_calls on the JSON-bodied families: each layout and its drift reads into the calls the
model meant; anything short of one complete, declared, schema-valid structure is None."""

from __future__ import annotations

from typing import Any

import pytest

from spillguard.detect import Call, TurnScanner, declared_tools, inspect_text, read_calls

FLIGHTS = {
    "type": "object",
    "properties": {
        "origin": {"type": "string"},
        "seats": {"type": "integer", "minimum": 1},
        "cabin": {"enum": ["economy", "business"]},
    },
    "required": ["origin"],
    "additionalProperties": False,
}
NOTE = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
TOOLS = declared_tools(
    {
        "tools": [
            {"type": "function", "function": {"name": "find_flights", "parameters": FLIGHTS}},
            {"type": "function", "function": {"name": "save_note", "parameters": NOTE}},
            {"type": "function", "function": {"name": "ping"}},
        ]
    }
)


def calls_in(text: str, tools: Any = TOOLS) -> tuple[Call, ...] | None:
    """What repair makes of a whole reply: the scanner's finding, its markup, its family."""
    turn = TurnScanner(tools)
    turn.feed_content(text)
    turn.finish()
    found = turn.finding
    assert found is not None, "the text must be a finding for repair to be asked"
    assert turn.markup is not None
    return read_calls(turn.markup, found.family, tools)


def one(name: str, arguments: str) -> tuple[Call, ...]:
    return (Call(name, arguments),)


LHR = one("find_flights", '{"origin":"LHR","seats":2}')

# ---- every family reads ------------------------------------------------------------------------

READS = [
    pytest.param(
        "Looking that up.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
        'find_flights\n```json\n{"origin": "LHR", "seats": 2}\n```<｜tool▁call▁end｜>'
        "<｜tool▁calls▁end｜>",
        LHR,
        id="deepseek-v3-fenced",
    ),
    pytest.param(
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>find_flights<｜tool▁sep｜>"
        '{"origin": "LHR", "seats": 2}<｜tool▁call▁end｜><｜tool▁call▁begin｜>save_note'
        '<｜tool▁sep｜>{"text": "window seat"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
        "<｜end▁of▁sentence｜>",
        (*LHR, Call("save_note", '{"text":"window seat"}')),
        id="deepseek-v31-two-calls",
    ),
    pytest.param(
        "<|tool_calls_begin|><|tool_call_begin|>find_flights<|tool_sep|>"
        '{"origin": "LHR", "seats": 2}<|tool_call_end|><|tool_calls_end|>',
        LHR,
        id="deepseek-ascii-bars",
    ),
    pytest.param(
        "<｜tool calls begin｜><｜tool call begin｜>find_flights<｜tool sep｜>"
        '{"origin": "LHR", "seats": 2}<｜tool call end｜><｜tool calls end｜>',
        LHR,
        id="deepseek-spaces",
    ),
    pytest.param(
        r"<\|tool\_calls\_begin\|><\|tool\_call\_begin\|>find\_flights<\|tool\_sep\|>"
        '{"origin": "LHR", "seats": 2}'
        r"<\|tool\_call\_end\|><\|tool\_calls\_end\|>",
        LHR,
        id="deepseek-markdown-escaped",
    ),
    pytest.param(
        "One moment.<｜tool▁call▁begin｜>find_flights<｜tool▁sep｜>"
        '{"origin": "LHR", "seats": 2}<｜tool▁call▁end｜>',
        LHR,
        id="deepseek-outer-lost",
    ),
    pytest.param(
        'Checking.\n<tool_call id="call_7" name="find_flights">{"origin": "LHR", "seats": 2}'
        "</tool_call>",
        LHR,
        id="deepseek-v4-attributes",
    ),
    pytest.param(
        'Sure.\n<tool_call>\n{"name": "find_flights", "arguments": {"origin": "LHR", '
        '"seats": 2}}\n</tool_call>\n<tool_call>\n{"name": "save_note", "arguments": '
        '"{\\"text\\": \\"aisle\\"}"}\n</tool_call><|im_end|>',
        (*LHR, Call("save_note", '{"text":"aisle"}')),
        id="hermes-two-arguments-as-string",
    ),
    pytest.param(
        'Planning.</think>{"name": "find_flights", "arguments": {"origin": "LHR", "seats": 2}}'
        "</tool_call>",
        LHR,
        id="hermes-opener-lost",
    ),
    pytest.param(
        '{"name": "find_flights", "parameters": {"origin": "LHR", "seats": 2}}',
        LHR,
        id="blob-parameters",
    ),
    pytest.param(
        '```json\n[{"name": "find_flights", "arguments": "{\\"origin\\": \\"LHR\\", '
        '\\"seats\\": 2}"}, {"name": "ping", "arguments": {}}]\n```',
        (*LHR, Call("ping", "{}")),
        id="blob-fenced-list",
    ),
    pytest.param(
        '{"tool_calls": [{"id": "call_1", "type": "function", "function": {"name": '
        '"find_flights", "arguments": "{\\"origin\\":\\"LHR\\",\\"seats\\":2}"}}]}',
        LHR,
        id="blob-openai-envelope",
    ),
    pytest.param(
        '<|python_tag|>{"name": "find_flights", "parameters": {"origin": "LHR", "seats": 2}}; '
        '{"name": "ping", "parameters": {}}<|eom_id|>',
        (*LHR, Call("ping", "{}")),
        id="llama-python-tag",
    ),
    pytest.param(
        "I'll search. <|tool_calls_section_begin|><|tool_call_begin|>functions.find_flights:0"
        '<|tool_call_argument_begin|>{"origin": "LHR", "seats": 2}<|tool_call_end|>'
        "<|tool_call_begin|>functions.ping:1<|tool_call_argument_begin|>{}<|tool_call_end|>"
        "<|tool_calls_section_end|>",
        (*LHR, Call("ping", "{}")),
        id="kimi-two",
    ),
    pytest.param(
        "<|tool_call_section_begin|><|tool_call_begin|>find_flights:3"
        '<|tool_call_argument_begin|>{"origin": "LHR", "seats": 2}<|tool_call_end|>'
        "<|tool_call_section_end|>",
        LHR,
        id="kimi-singular-bare-id",
    ),
    pytest.param(
        'Sure[TOOL_CALLS]find_flights[ARGS]{"origin": "LHR", "seats": 2}'
        "[TOOL_CALLS]ping[CALL_ID]a1b2c3d4e[ARGS]{}</s>",
        (*LHR, Call("ping", "{}")),
        id="mistral-v11",
    ),
    pytest.param(
        '[TOOL_CALLS] [{"name": "find_flights", "arguments": {"origin": "LHR", "seats": 2}}]',
        LHR,
        id="mistral-array",
    ),
    pytest.param(
        "<|start|>assistant<|channel|>commentary to=functions.find_flights <|constrain|>json"
        '<|message|>{"origin": "LHR", "seats": 2}<|call|>',
        LHR,
        id="harmony",
    ),
    pytest.param(
        "<|start|>assistant to=functions.find_flights<|channel|>commentary json"
        '<|message|>{"origin": "LHR", "seats": 2}',
        LHR,
        id="harmony-recipient-first-call-stripped",
    ),
    pytest.param(
        'Done.<|tool_call|>[{"name": "find_flights", "arguments": {"origin": "LHR", "seats": 2}}]',
        LHR,
        id="granite",
    ),
    pytest.param(
        'Wait.<|function_call|>{"name": "find_flights", "arguments": {"origin": "LHR", '
        '"seats": 2}}',
        LHR,
        id="gigachat",
    ),
    pytest.param(
        '<TOOLCALL>[{"name": "find_flights", "arguments": {"origin": "LHR", "seats": 2}}]'
        "</TOOLCALL>",
        LHR,
        id="nemotron",
    ),
    pytest.param(
        'Searching.<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "find_flights", '
        '"parameters": {"origin": "LHR", "seats": 2}}]<|END_ACTION|>',
        LHR,
        id="command-r7b",
    ),
    pytest.param(
        'Action: ```json\n[{"tool_name": "find_flights", "parameters": {"origin": "LHR", '
        '"seats": 2}}]\n```',
        LHR,
        id="command-r-plus-action",
    ),
    pytest.param(
        '<|tools_prefix|>[{"find_flights": {"origin": "LHR", "seats": 2}}, {"ping": {}}]'
        "<|tools_suffix|>",
        (*LHR, Call("ping", "{}")),
        id="apertus-name-as-key",
    ),
    pytest.param(
        '<ifm|tool_calls><ifm|tool_call>find_flights{"origin": "LHR", "seats": 2}'
        "</ifm|tool_call></ifm|tool_calls>",
        LHR,
        id="k2-horizon",
    ),
    pytest.param(
        '<|action_start|><|plugin|>\n{"name": "find_flights", "parameters": {"origin": "LHR", '
        '"seats": 2}}<|action_end|>',
        LHR,
        id="internlm",
    ),
    pytest.param(
        '<longcat_tool_call>\n{"name": "find_flights", "arguments": {"origin": "LHR", '
        '"seats": 2}}\n</longcat_tool_call>',
        LHR,
        id="longcat",
    ),
    pytest.param(
        'Один момент.<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "find_flights", '
        '"arguments": {"origin": "LHR", "seats": 2}}',
        LHR,
        id="gigachat-role-sep",
    ),
    pytest.param(
        '<|tool_calls_section_begin|>[{"name": "find_flights", "arguments": {"origin": "LHR", '
        '"seats": 2}}]<|tool_calls_section_end|>',
        LHR,
        id="kimi-json-list-in-section",
    ),
]


@pytest.mark.parametrize(("text", "expected"), READS)
def test_family_reads(text: str, expected: tuple[Call, ...]) -> None:
    assert calls_in(text) == expected


# ---- completely, or not at all -----------------------------------------------------------------

NOT_COMPLETE = [
    pytest.param(
        '<tool_call>\n{"name": "find_flights", "arguments": {"origin": "LHR"}}\n</tool_call>\n'
        "Let me know if that works.",
        id="prose-after",
    ),
    pytest.param(
        '<tool_call>\n{"name": "find_flights", "arguments": {"origin": "LHR"}}\n', id="no-closer"
    ),
    pytest.param('<tool_call>\n{"name": "find_flights", "arguments": {"origin": "LH', id="cut"),
    pytest.param(
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>find_flights<｜tool▁sep｜>"
        '{"origin": "LHR"}<｜tool▁call▁end｜>',
        id="deepseek-outer-not-closed",
    ),
    pytest.param(
        '[TOOL_CALLS]find_flights[ARGS]{"origin": "LHR"}<tool_call>{"name": "ping", '
        '"arguments": {}}</tool_call>',
        id="second-family",
    ),
    pytest.param(
        '<|channel|>commentary<|message|>{"origin": "LHR"}<|call|>', id="harmony-no-recipient"
    ),
    pytest.param(
        '<tool_call>\n{"name": "find_flights", "arguments": {"origin": NaN}}\n</tool_call>',
        id="nan",
    ),
]


@pytest.mark.parametrize("text", NOT_COMPLETE)
def test_incomplete_markup_is_not_repaired(text: str) -> None:
    assert calls_in(text) is None


def hermes(arguments: str, name: str = "find_flights") -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        ('{"seats": 2}', "required key missing"),
        ('{"origin": "LHR", "seats": "2"}', "a JSON string is no integer"),
        ('{"origin": "LHR", "seats": 0}', "below the minimum"),
        ('{"origin": "LHR", "cabin": "first"}', "not in the enum"),
        ('{"origin": "LHR", "pets": true}', "additionalProperties false"),
        ('"not an object"', "arguments string is no JSON object"),
        ("[1, 2]", "arguments not an object"),
    ],
)
def test_arguments_that_fail_the_schema(arguments: str, why: str) -> None:
    assert calls_in(hermes(arguments)) is None, why


def test_an_undeclared_name_is_not_repaired() -> None:
    assert calls_in(hermes('{"city": "Rome"}', "book_hotel")) is None


def test_one_bad_call_sinks_the_whole_leak() -> None:
    good = hermes('{"origin": "LHR"}')
    bad = hermes('{"seats": 1}')
    assert calls_in(good + "\n" + bad) is None


def test_arguments_keep_the_models_key_order_and_text() -> None:
    text = hermes('{"seats": 3, "origin": "Zürich \\u2708"}')
    assert calls_in(text) == one("find_flights", '{"seats":3,"origin":"Zürich ✈"}')


def test_a_tool_without_a_schema_takes_any_object() -> None:
    assert calls_in(hermes('{"anything": [1, {"x": null}]}', "ping")) == one(
        "ping", '{"anything":[1,{"x":null}]}'
    )


def test_unknown_family_and_no_tools() -> None:
    text = hermes('{"origin": "LHR"}')
    assert read_calls(text, "no_such_family", TOOLS) is None
    assert read_calls(text, "hermes", declared_tools({})) is None


def test_prose_before_is_not_markup() -> None:
    text = "Let me look for flights from London.\n" + hermes('{"origin": "LHR"}')
    found = inspect_text(text, TOOLS)
    assert found is not None and found.start == text.index("<tool_call>")
    assert calls_in(text) == one("find_flights", '{"origin":"LHR"}')

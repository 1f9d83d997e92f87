"""read_calls on the XML-ish families: values are bare text, typed by the declared schema (DSML
says itself with string="true|false"); drift parses the same; anything incomplete is None."""

from __future__ import annotations

import pytest

from spillguard.detect import Call, declared_tools
from tests.test_detect_calls import calls_in

ROUTE = {
    "type": "object",
    "properties": {
        "start": {"type": "string"},
        "stops": {"type": "integer"},
        "avoid_tolls": {"type": "boolean"},
        "speed": {"type": "number"},
        "via": {"type": "array", "items": {"type": "string"}},
        "prefs": {
            "type": "object",
            "properties": {"scenic": {"type": "boolean"}},
            "additionalProperties": False,
        },
        "note": {"type": ["string", "null"]},
        "level": {"type": ["integer", "null"]},
    },
    "required": ["start"],
    "additionalProperties": False,
}
TOOLS = declared_tools(
    {
        "tools": [
            {"type": "function", "function": {"name": "plan_route", "parameters": ROUTE}},
            {"type": "function", "name": "look up", "parameters": ROUTE},
        ]
    }
)
TYPED = (Call("plan_route", '{"start":"Leeds","stops":3,"avoid_tolls":true}'),)


def calls(text: str) -> tuple[Call, ...] | None:
    return calls_in(text, TOOLS)


def dsml(bar: str = "｜", block: str = "function_calls", dsml_word: str = "DSML") -> str:
    t = f"{bar}{dsml_word}{bar}"
    return (
        f'Working on it.\n\n<{t}{block}>\n<{t}invoke name="plan_route">\n'
        f'<{t}parameter name="start" string="true">Leeds</{t}parameter>\n'
        f'<{t}parameter name="stops" string="false">3</{t}parameter>\n'
        f'<{t}parameter name="avoid_tolls" string="false">true</{t}parameter>\n'
        f"</{t}invoke>\n</{t}{block}>"
    )


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(dsml(), id="v32"),
        pytest.param(dsml(block="tool_calls"), id="v4-block"),
        pytest.param(dsml(block="calls"), id="calls-block"),
        pytest.param(dsml(bar="|"), id="ascii-bars"),
        pytest.param(dsml(bar="｜｜"), id="doubled-bars"),
        pytest.param(dsml(bar="‖"), id="double-vertical-bars"),
        pytest.param(dsml(dsml_word="DSM"), id="dsm"),
    ],
)
def test_dsml(text: str) -> None:
    assert calls(text) == TYPED


def test_dsml_string_flags_decide_the_type() -> None:
    t = "｜DSML｜"
    text = (
        f'<{t}function_calls><{t}invoke name="plan_route">'
        f'<{t}parameter name="start" string="true">42</{t}parameter>'
        f'<{t}parameter name="via" string="false">["York", "Hull"]</{t}parameter>'
        f"</{t}invoke></{t}function_calls>"
    )
    assert calls(text) == (Call("plan_route", '{"start":"42","via":["York","Hull"]}'),)
    # string="true" keeps text even where the schema wants an integer: no repair then.
    wrong = text.replace('name="start" string="true">42', 'name="stops" string="true">42')
    assert calls(wrong) is None
    broken = text.replace('["York", "Hull"]', "[York]")
    assert calls(broken) is None  # string="false" must be JSON


def test_dsml_cdata_and_inner_invoke_only() -> None:
    t = "｜DSML｜"
    text = (
        f'<{t}invoke name="plan_route"><{t}parameter name="start" string="true">'
        f"<![CDATA[A <b> & C]]></{t}parameter></{t}invoke></{t}function_calls>"
    )
    assert calls(text) == (Call("plan_route", '{"start":"A <b> & C"}'),)


def test_dsml_block_not_closed() -> None:
    assert calls(dsml().rsplit("</", 1)[0]) is None


def qwen3(name: str = "plan_route", wrapped: bool = True) -> str:
    body = (
        f"<function={name}>\n<parameter=start>\nLeeds\n</parameter>\n"
        "<parameter=stops>\n3\n</parameter>\n<parameter=avoid_tolls>\ntrue\n</parameter>\n"
        "</function>"
    )
    return f"Let me plan that.\n<tool_call>\n{body}\n</tool_call>" if wrapped else body


def test_qwen3_coder() -> None:
    assert calls(qwen3()) == TYPED
    assert calls(qwen3(wrapped=False)) == TYPED
    quoted = qwen3(name='"look up"')
    assert calls(quoted) == (Call("look up", TYPED[0].arguments),)


def test_qwen3_coder_keeps_string_text_but_its_own_newlines() -> None:
    text = (
        "<tool_call>\n<function=plan_route>\n<parameter=start>\n  two\nlines  \n</parameter>\n"
        '<parameter=via>\n["A"]\n</parameter>\n<parameter=prefs>\n{"scenic": false}\n'
        "</parameter>\n<parameter=note>\nnull\n</parameter>\n</function>\n</tool_call>"
    )
    assert calls(text) == (
        Call(
            "plan_route",
            '{"start":"  two\\nlines  ","via":["A"],"prefs":{"scenic":false},"note":"null"}',
        ),
    )


def test_qwen3_coder_two_calls_and_no_closers() -> None:
    assert calls(qwen3() + "\n" + qwen3()[len("Let me plan that.\n") :]) == TYPED * 2
    assert calls(qwen3().replace("</function>\n</tool_call>", "")) is None


def glm(value: str = "3") -> str:
    return (
        "<tool_call>plan_route\n<arg_key>start</arg_key>\n<arg_value>Leeds</arg_value>\n"
        f"<arg_key>stops</arg_key>\n<arg_value>{value}</arg_value>\n"
        "<arg_key>avoid_tolls</arg_key>\n<arg_value>true</arg_value>\n</tool_call>"
    )


def test_glm() -> None:
    assert calls(glm()) == TYPED
    assert calls(glm().replace("\n", "")) == TYPED  # GLM-4.7 writes no newlines
    assert calls(glm("three")) is None  # no integer
    assert calls(glm("3.5")) is None


def test_minimax_and_claude_invoke() -> None:
    invoke = (
        '<invoke name="plan_route">\n<parameter name="start">Leeds</parameter>\n'
        '<parameter name="stops">3</parameter>\n<parameter name="avoid_tolls">true</parameter>\n'
        "</invoke>"
    )
    assert calls(f"On it.<minimax:tool_call>\n{invoke}\n{invoke}\n</minimax:tool_call>") == (
        TYPED * 2
    )
    assert calls(f"<minimax:tool_call>\n{invoke}") is None
    assert calls(f"<function_calls>\n{invoke}\n</function_calls>") == TYPED
    assert calls(f"count{invoke}") == TYPED


@pytest.mark.parametrize(
    "closer", ["</xai:function_call>", "</xai:function_call?", '</xai:function_call">']
)
def test_xai_closers(closer: str) -> None:
    call = (
        '<xai:function_call name="plan_route"><parameter name="start">Leeds</parameter>'
        '<parameter name="stops">3</parameter><parameter name="avoid_tolls">true</parameter>'
    )
    assert calls("Sure." + call + closer + call + "</xai:function_call<|control9|>") == TYPED * 2


def test_minicpm() -> None:
    text = (
        '<function name="plan_route"><param name="start"><![CDATA[Leeds]]></param>'
        '<param name="stops">3</param><param name="avoid_tolls">true</param></function>'
    )
    assert calls(text) == TYPED


@pytest.mark.parametrize(
    ("value", "schema_type", "expected"),
    [
        ("7", "stops", '"stops":7'),
        ("-2", "stops", '"stops":-2'),
        ("4.0", "stops", '"stops":4'),
        ("2.5", "speed", '"speed":2.5'),
        ("false", "avoid_tolls", '"avoid_tolls":false'),
        ("null", "level", '"level":null'),
        ("5", "level", '"level":5'),
        ("007", "note", '"note":"007"'),
        ('["a", "b"]', "via", '"via":["a","b"]'),
        ('{"scenic": true}', "prefs", '"prefs":{"scenic":true}'),
    ],
)
def test_values_are_typed_by_the_schema(value: str, schema_type: str, expected: str) -> None:
    text = (
        f'<minimax:tool_call><invoke name="plan_route"><parameter name="start">x</parameter>'
        f'<parameter name="{schema_type}">{value}</parameter></invoke></minimax:tool_call>'
    )
    got = calls(text)
    assert got is not None
    assert expected in got[0].arguments


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("stops", "many", "no integer"),
        ("avoid_tolls", "yes", "no boolean"),
        ("via", '"York"', "no array"),
        ("via", "[1]", "items must be strings"),
        ("prefs", '{"scenic": "very"}', "nested type"),
        ("prefs", '{"fast": true}', "nested additionalProperties"),
        ("colour", "red", "undeclared key, additionalProperties false"),
    ],
)
def test_values_that_fail_the_schema(key: str, value: str, why: str) -> None:
    text = (
        f'<minimax:tool_call><invoke name="plan_route"><parameter name="start">x</parameter>'
        f'<parameter name="{key}">{value}</parameter></invoke></minimax:tool_call>'
    )
    assert calls(text) is None, why


def test_a_key_written_twice_is_not_repaired() -> None:
    text = glm().replace(
        "</tool_call>", "<arg_key>stops</arg_key><arg_value>4</arg_value></tool_call>"
    )
    assert calls(text) is None


def test_missing_required_key() -> None:
    text = '<minimax:tool_call><invoke name="plan_route"></invoke></minimax:tool_call>'
    assert calls(text) is None


def test_seed_and_dots() -> None:
    seed = (
        "<seed:tool_call>\n<function=plan_route>\n<parameter=start>Leeds</parameter>\n"
        "<parameter=stops>3</parameter>\n<parameter=avoid_tolls>true</parameter>\n</function>\n"
        "</seed:tool_call>"
    )
    assert calls(seed) == TYPED
    invoke = (
        '<invoke name="plan_route"><parameter name="start">Leeds</parameter>'
        '<parameter name="stops">3</parameter><parameter name="avoid_tolls">true</parameter>'
        "</invoke>"
    )
    assert calls(f"<dots_function_call>{invoke}</dots_function_call>") == TYPED
    as_json = (
        '<dots_function_call>{"name": "plan_route", "arguments": {"start": "Leeds", "stops": 3, '
        '"avoid_tolls": true}}</dots_function_call>'
    )
    assert calls(as_json) == TYPED


def test_minimax_m3() -> None:
    p = "]<]minimax[>["
    text = (
        f'Sure.{p}<tool_call>\n{p}<invoke name="plan_route">\n{p}<start>Leeds{p}</start>\n'
        f"{p}<stops>3{p}</stops>\n{p}<avoid_tolls>true{p}</avoid_tolls>\n{p}</invoke>\n"
        f"{p}</tool_call>"
    )
    assert calls(text) == TYPED
    assert calls(text.replace(f"{p}</stops>", "")) is None


def test_kimi_k3_types_by_attribute_then_schema() -> None:
    def arg(key: str, kind: str, value: str) -> str:
        return f'<|open|>argument key="{key}" type="{kind}"<|sep|>{value}<|close|>argument<|sep|>'

    text = (
        '<|open|>tools<|sep|><|open|>call tool="plan_route" index="1"<|sep|>'
        + arg("start", "string", "Leeds")
        + arg("stops", "integer", "3")
        + arg("avoid_tolls", "boolean", "true")
        + "<|close|>call<|sep|><|close|>tools<|sep|>"
    )
    assert calls(text) == TYPED
    # type="string" keeps the text, which the integer schema then refuses.
    assert calls(text.replace('"stops" type="integer"', '"stops" type="string"')) is None
    assert calls(text.replace("<|close|>tools<|sep|>", "")) is None

"""read_calls on the code-like families: pythonic lists are read as literals and never evaluated;
Gemma's key:value syntax reads its own types."""

from __future__ import annotations

from pathlib import Path

import pytest

from spillguard.detect import Call, declared_tools, read_calls
from tests.test_detect_calls import calls_in

LAMP = {
    "type": "object",
    "properties": {
        "room": {"type": "string"},
        "level": {"type": "integer"},
        "on": {"type": "boolean"},
        "colour": {"type": "array", "items": {"type": "number"}},
        "extra": {"type": "object"},
    },
    "required": ["room"],
}
TOOLS = declared_tools(
    {
        "tools": [
            {"type": "function", "function": {"name": "set_lamp", "parameters": LAMP}},
            {"type": "function", "function": {"name": "all_off"}},
        ]
    }
)
KITCHEN = Call("set_lamp", '{"room":"kitchen","level":40}')


def calls(text: str) -> tuple[Call, ...] | None:
    return calls_in(text, TOOLS)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[set_lamp(room="kitchen", level=40)]', (KITCHEN,)),
        ("[set_lamp(room='kitchen', level=40), all_off()]", (KITCHEN, Call("all_off", "{}"))),
        ('<|python_start|>[set_lamp(room="kitchen", level=40)]<|python_end|>', (KITCHEN,)),
        (
            'Sure.<|tool_call_start|>[set_lamp(room="kitchen", level=40)]<|tool_call_end|>',
            (KITCHEN,),
        ),
        (
            '<function_calls>\nset_lamp(room="kitchen", level=40)\nall_off()\n</function_calls>',
            (KITCHEN, Call("all_off", "{}")),
        ),
        (
            '[set_lamp(room="hall", on=True, colour=(0.5, 1), extra={"why": None})]',
            (Call("set_lamp", '{"room":"hall","on":true,"colour":[0.5,1],"extra":{"why":null}}'),),
        ),
    ],
)
def test_pythonic(text: str, expected: tuple[Call, ...]) -> None:
    assert calls(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        '[set_lamp(room=__import__("os").system("true"))]',
        "[set_lamp(room=kitchen)]",  # a name
        "[set_lamp(room=str(1))]",  # a call
        '[set_lamp(room="a".upper())]',  # an attribute
        "[set_lamp(room='a', level=2**8)]",  # an operator
        "[set_lamp(room='a', level=1+2j)]",  # no JSON form
        "[set_lamp(room='a', extra={1, 2})]",
        "[set_lamp(room='a', extra={1: 'x'})]",  # a key that is no string
        "[set_lamp(room='a', extra=b'x')]",
        "[set_lamp(room='a', level=1e999)]",
        "[set_lamp('kitchen')]",  # positional: binds to nothing
        "[set_lamp(**{'room': 'a'})]",
        "[set_lamp(room='a', room='b')]",
        "[set_lamp(room='a')",  # cut
        "[set_lamp(room='a')] and then some prose",
        "[lambda: 1]",
        "[os.system(room='a')]",
        "[]",
    ],
)
def test_pythonic_refusals(text: str) -> None:
    assert read_calls(text, "pythonic", TOOLS) is None


def test_pythonic_is_never_evaluated(tmp_path: Path) -> None:
    witness = tmp_path / "ran"
    text = f"[set_lamp(room=open({str(witness)!r}, 'w').write('x') and 'hall')]"
    assert read_calls(text, "pythonic", TOOLS) is None
    assert not witness.exists()


def test_pythonic_schema_still_applies() -> None:
    assert calls('[set_lamp(room="kitchen", level="40")]') is None
    assert calls("[set_lamp(level=40)]") is None


def gemma(body: str, opener: str = "<|tool_call>call:") -> str:
    return f"Checking now.{opener}set_lamp{{{body}}}<tool_call|>"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (gemma('room:<|"|>kitchen<|"|>,level:40'), KITCHEN),
        (gemma('room:<|"|>kitchen<|"|>,level:40', opener="<|tool_call>:"), KITCHEN),
        (gemma('room:<｜"｜>kitchen<｜"｜>, level: 40'), KITCHEN),
        (
            gemma('room:<|"|>a, b: c<|"|>,on:false,colour:[0.5,-1e2],extra:{k:null,n:[]}'),
            Call(
                "set_lamp",
                '{"room":"a, b: c","on":false,"colour":[0.5,-100.0],"extra":{"k":null,"n":[]}}',
            ),
        ),
    ],
)
def test_gemma(text: str, expected: Call) -> None:
    assert calls(text) == (expected,)


def test_gemma_two_calls_and_function_gemma() -> None:
    one = '<|tool_call>call:set_lamp{room:<|"|>kitchen<|"|>,level:40}<tool_call|>'
    assert calls("Ok." + one + one) == (KITCHEN, KITCHEN)
    fg = (
        "<start_function_call>call:set_lamp{room:<escape>kitchen<escape>,level:40}"
        "<end_function_call>"
    )
    assert calls(fg) == (KITCHEN,)


@pytest.mark.parametrize(
    "body",
    [
        'room:<|"|>kitchen',  # string not closed
        "room:kitchen",  # a bare word
        'room:<|"|>k<|"|>,level:40,',  # trailing comma
        'room:<|"|>k<|"|>,level:4O',
        'room:<|"|>k<|"|>,room:<|"|>j<|"|>',
    ],
)
def test_gemma_refusals(body: str) -> None:
    assert calls(gemma(body)) is None

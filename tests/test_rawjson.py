"""Appending to one array of a raw JSON request, leaving every other byte as it was."""

from __future__ import annotations

import json

import pytest

from spillguard.rawjson import append_items

ITEMS = [{"role": "assistant", "content": "leak"}, {"role": "user", "content": "fix it"}]


def as_user(raw: str) -> str:
    return '{"role":"user","content":' + raw + "}"


def test_appends_after_existing_messages_and_keeps_other_bytes() -> None:
    head = b'{"model": "m",  "x": 1e400, "messages": [{"role":"user","content":"hi \\ud83d"}'
    raw = head + b'],"n":[[[]]]}'
    out = append_items(raw, "messages", ITEMS)
    assert out is not None
    assert out.startswith(head + b",")
    assert out.endswith(b'],"n":[[[]]]}')
    parsed = json.loads(out)
    assert parsed["messages"][1:] == ITEMS


def test_empty_array_gets_no_leading_comma() -> None:
    out = append_items(b'{"messages": [ ]}', "messages", ITEMS)
    assert out is not None and json.loads(out)["messages"] == ITEMS


def test_string_input_becomes_a_user_message_then_the_items() -> None:
    out = append_items(b'{"input": "hello \\"you\\"", "store": false}', "input", ITEMS, as_user)
    assert out is not None
    assert json.loads(out) == {
        "input": [{"role": "user", "content": 'hello "you"'}, *ITEMS],
        "store": False,
    }


def test_key_after_deeply_nested_fields_is_found_without_recursion() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    raw = b'{"x": ' + deep + b', "s": "a,}]\\"", "messages": []}'
    out = append_items(raw, "messages", ITEMS)
    assert out is not None
    assert out.startswith(b'{"x": ' + deep + b', "s": "a,}]\\"", "messages": [')


@pytest.mark.parametrize(
    "raw",
    [b"[1]", b'{"model": "m"}', b'{"messages": 5}', b'{"messages": "text"}', b"{", b"", b"\xff"],
)
def test_bodies_without_such_an_array_give_none(raw: bytes) -> None:
    assert append_items(raw, "messages", ITEMS) is None


def test_a_key_written_twice_is_appended_to_where_json_reads_it() -> None:
    raw = b'{"messages": [{"role":"user","content":"first"}], "messages": [], "n": 1}'
    out = append_items(raw, "messages", ITEMS)
    assert out is not None
    assert out.startswith(b'{"messages": [{"role":"user","content":"first"}], "messages": [')
    assert json.loads(out)["messages"] == ITEMS

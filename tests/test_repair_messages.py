"""Repair on the Messages API: a leaked text block becomes `tool_use` blocks, in a whole message
(every other byte as the upstream wrote it, stop_reason `tool_use`) and in a stream fed as
bytes, cut at every point (the prose published as it came, its block closed, the calls as
blocks at the next indexes, message_delta saying `tool_use` with the upstream's usage)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from spillguard import messages, messages_repair
from spillguard.detect import Call
from spillguard.messages_stream import MessagesStream, new_stream
from tests.fuzz.messages_bytes import MessagesWriter, messages_events, messages_reply, messages_view
from tests.fuzz.wire_bytes import HOLD, TOOLS, WEATHER, Turn, cut, drive, dumps
from tests.repair_wires import (
    BLOB,
    LEAKS,
    PROSE,
    calls_of,
    every_split_repairs,
    numbered,
    repaired_stream,
)
from tests.samples import HERMES


def whole(reply: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
    return dumps(reply).encode(), reply


def repair(raw: bytes, reply: dict[str, Any]) -> bytes | None:
    """The decision's path for a whole reply: inspect, read the markup, repair."""
    found = messages.inspect_reply(reply, TOOLS, HOLD)
    assert found is not None
    finding, prose = found
    calls = calls_of(messages_repair.reply_markup(reply, finding), finding.family)
    assert calls, "the markup did not read as calls"
    return messages_repair.repair_reply(raw, reply, finding, prose, calls)


# ---- whole replies ---------------------------------------------------------------------------


@pytest.mark.parametrize("family", sorted(LEAKS))
def test_a_whole_leak_becomes_tool_use_blocks(family: str) -> None:
    raw, reply = whole(messages_reply(Turn(content=(LEAKS[family],))))
    out = repair(raw, reply)
    assert out is not None
    got = json.loads(out)
    names = ["get_weather", "run_in_terminal"] if family == "two" else ["get_weather"]
    assert [b["name"] for b in got["content"]] == names  # no text block: there was no prose
    for block in got["content"]:
        assert set(block) == {"type", "id", "name", "input"} and block["type"] == "tool_use"
        assert block["id"].startswith("toolu_01") and len(block["id"]) == 30
    assert got["content"][0]["input"] == {"city": "Lisbon"}
    assert got["stop_reason"] == "tool_use"
    assert len({b["id"] for b in got["content"]}) == len(names)
    assert {k: v for k, v in got.items() if k not in ("content", "stop_reason")} == {
        k: v for k, v in reply.items() if k not in ("content", "stop_reason")
    }


def test_prose_and_thinking_before_the_markup_stay_and_every_other_byte_stays() -> None:
    reply = messages_reply(Turn(content=(PROSE + HERMES,), reasoning=("Look it up.",)))
    raw = dumps(reply).encode().replace(b'"role":"assistant"', b'"role" : "assistant","n":1e400')
    out = repair(raw, json.loads(raw.replace(b"1e400", b"0")))
    assert out is not None
    thinking_raw = dumps(reply["content"][0]).encode()
    assert out.startswith(raw[: raw.index(b'"content":')] + b'"content":[' + thinking_raw + b",")
    got = json.loads(out.replace(b"1e400", b"0"))
    assert [b["type"] for b in got["content"]] == ["thinking", "text", "tool_use"]
    assert got["content"][1] == {"type": "text", "text": PROSE}
    assert out.endswith(b'"usage":{"input_tokens":40,"output_tokens":18}}')


def test_a_stop_sequence_no_longer_applies() -> None:
    reply = {**messages_reply(Turn(content=(HERMES,))), "stop_reason": "stop_sequence"}
    reply["stop_sequence"] = "###"
    out = repair(*whole(reply))
    assert out is not None
    assert json.loads(out)["stop_sequence"] is None


def _found(reply: dict[str, Any]) -> Any:
    found = messages.inspect_reply(reply, TOOLS, HOLD)
    assert found is not None
    return found


def test_what_a_whole_message_cannot_carry_falls_back() -> None:
    calls = (Call("get_weather", '{"city":"Lisbon"}'),)
    # A tool_use block beside the leak.
    reply = messages_reply(Turn(content=(HERMES,), calls=(WEATHER,)))
    finding, prose = _found(reply)
    assert messages_repair.repair_reply(*whole(reply), finding, prose, calls) is None
    # A block after the leaking one.
    reply = messages_reply(Turn(content=(HERMES,)))
    reply["content"].append({"type": "text", "text": "More."})
    finding, prose = _found(reply)
    assert messages_repair.repair_reply(*whole(reply), finding, prose, calls) is None
    # Arguments that are not an object, and the prose of another reply.
    reply = messages_reply(Turn(content=(PROSE + HERMES,)))
    finding, prose = _found(reply)
    listed = (Call("get_weather", "[1]"),)
    assert messages_repair.repair_reply(*whole(reply), finding, prose, listed) is None
    assert messages_repair.repair_reply(*whole(reply), finding, "other", calls) is None
    # Markup in thinking: nothing to replace.
    reply = messages_reply(Turn(content=("Checking.",), reasoning=("Calling.\n" + HERMES,)))
    finding, _ = _found(reply)
    assert finding.field == "reasoning"
    assert messages_repair.reply_markup(reply, finding) is None


# ---- streams ---------------------------------------------------------------------------------


def fresh() -> MessagesStream:
    return new_stream(TOOLS, HOLD, None)


def stream_of(text: str, *at: int, reasoning: tuple[str, ...] = ()) -> bytes:
    return b"".join(messages_events(Turn(content=cut(text, *at), reasoning=reasoning)))


@pytest.mark.parametrize("family", sorted(LEAKS))
def test_a_streamed_leak_becomes_tool_use_blocks_at_every_cut(family: str) -> None:
    text = PROSE + LEAKS[family] if family != "json" else BLOB  # a blob is a whole answer
    data = stream_of(text, 5, len(PROSE) + 3, len(PROSE) + 11)
    view = messages_view(every_split_repairs(fresh, data))
    uses = view.of("tool_use")
    names = ["get_weather", "run_in_terminal"] if family == "two" else ["get_weather"]
    assert [b.name for b in uses] == names
    assert json.loads(uses[0].text) == {"city": "Lisbon"}
    assert all(b.stopped for b in view.blocks)
    prose = "" if family == "json" else PROSE
    assert view.text == prose
    assert [b.type for b in view.blocks] == ["text"] * bool(prose) + ["tool_use"] * len(names)
    assert view.stop_reason == "tool_use"
    assert view.usage == {"output_tokens": 18}
    assert view.kinds[-2:] == ["message_delta", "message_stop"]
    # The same blocks as the whole message's repair.
    whole_out = repair(*whole(messages_reply(Turn(content=(text,)))))
    assert whole_out is not None
    content = json.loads(whole_out)["content"]
    assert [(b["type"], b.get("name"), b.get("text", "")) for b in content] == [
        (b.type, b.name, b.text if b.type == "text" else "") for b in view.blocks
    ]
    assert [b["input"] for b in content if b["type"] == "tool_use"] == [
        json.loads(b.text) for b in uses
    ]


def test_the_events_a_repair_adds() -> None:
    out, tail = repaired_stream(fresh(), [stream_of(PROSE + HERMES, len(PROSE) + 4)])
    assert tail is not None
    events = [json.loads(e.split(b"data: ", 1)[1]) for e in tail.split(b"\n\n") if e]
    assert [e["type"] for e in events] == [
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert [e.get("index") for e in events[:4]] == [0, 1, 1, 1]
    opened = events[1]["content_block"]
    assert opened == {"type": "tool_use", "id": opened["id"], "name": "get_weather", "input": {}}
    assert events[2]["delta"] == {"type": "input_json_delta", "partial_json": '{"city":"Lisbon"}'}
    assert events[4] == {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 18},
    }
    assert tail.endswith(messages_events(Turn(content=(HERMES,)))[-1])  # the upstream's stop
    assert messages_view(out).text == PROSE


def test_a_blank_block_before_the_markup_is_never_opened() -> None:
    out, tail = repaired_stream(fresh(), [stream_of(" \n" + HERMES, 2)])
    assert tail is not None
    view = messages_view(out + tail)
    assert [b.type for b in view.blocks] == ["tool_use"]
    assert b"content_block_start" not in out


def test_thinking_before_the_text_stays_with_its_signature() -> None:
    data = stream_of(PROSE + HERMES, 7, reasoning=("Look it ", "up."))
    view = messages_view(every_split_repairs(fresh, data))
    assert [b.type for b in view.blocks] == ["thinking", "text", "tool_use"]
    assert view.thinking == "Look it up." and view.blocks[0].signature


def test_ids_are_fresh_for_every_repair() -> None:
    data = stream_of(HERMES)
    first, second = (repaired_stream(fresh(), [data])[1] for _ in range(2))
    assert first is not None and second is not None
    assert first != second and numbered(first) == numbered(second)


def _tail_of(events: list[bytes]) -> bytes | None:
    return repaired_stream(fresh(), [b"".join(events)])[1]


def test_what_a_stream_cannot_carry_falls_back() -> None:
    # A block after the leaking one (a real call, here).
    assert _tail_of(messages_events(Turn(content=(HERMES,), calls=(WEATHER,)))) is None
    # The message never ended.
    events = messages_events(Turn(content=(HERMES,)))
    assert _tail_of(events[:-1]) is None
    assert _tail_of(events[:-2]) is None
    # An error after the leak.
    writer = MessagesWriter()
    writer.start()
    writer.text([HERMES])
    writer.emit("error", error={"type": "overloaded_error", "message": "Overloaded"})
    assert _tail_of(writer.events) is None


def test_markup_in_thinking_has_no_markup_to_replace() -> None:
    stream = fresh()
    drive(stream, [stream_of("Checking.", reasoning=("Calling.\n" + HERMES,))])
    assert stream.finding is not None and stream.finding.field == "reasoning"
    assert stream.markup is None and stream.repair(()) is None


def test_markup_longer_than_the_hold_limit_is_not_read() -> None:
    long = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "' + "L" * 200 + '"}}'
    stream = new_stream(TOOLS, 64, None)
    drive(stream, [stream_of(long + "\n</tool_call>")])
    assert stream.finding is not None and stream.markup is None

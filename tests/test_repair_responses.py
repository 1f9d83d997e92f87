"""Repair on the Responses API: a leaked text part becomes `function_call` items, in a whole
response (every other byte as the upstream wrote it) and in a stream fed as bytes, cut at every
point (the prose published as it came, the message closed at the text the client has, the items
streamed with consistent indexes and sequence numbers, `response.completed` listing what the
client received)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from spillguard import responses, responses_repair
from spillguard.detect import Call
from spillguard.responses import ResponsesStream, new_stream
from tests.fuzz.responses_bytes import (
    ResponsesWriter,
    responses_events,
    responses_reply,
    responses_view,
    well_formed,
)
from tests.fuzz.wire_bytes import HOLD, TOOLS, WEATHER, Turn, cut, drive, dumps
from tests.repair_wires import (
    BLOB,
    BOTH,
    LEAKS,
    PROSE,
    TWO,
    calls_of,
    every_split_repairs,
    numbered,
    repaired_stream,
)
from tests.samples import HERMES


def whole(text: str, **extra: Any) -> tuple[bytes, dict[str, Any]]:
    reply = {**responses_reply(Turn(content=(text,))), **extra}
    return dumps(reply).encode(), reply


def repair(raw: bytes, reply: dict[str, Any]) -> bytes | None:
    """The decision's path for a whole reply: inspect, read the markup, repair."""
    found = responses.inspect_reply(reply, TOOLS, HOLD)
    assert found is not None
    finding, prose = found
    calls = calls_of(responses_repair.reply_markup(reply, finding), finding.family)
    assert calls, "the markup did not read as calls"
    return responses_repair.repair_reply(raw, reply, finding, prose, calls)


def items(data: bytes) -> list[dict[str, Any]]:
    output: list[dict[str, Any]] = json.loads(data)["output"]
    return output


# ---- whole replies ---------------------------------------------------------------------------


@pytest.mark.parametrize("family", sorted(LEAKS))
def test_a_whole_leak_becomes_function_call_items(family: str) -> None:
    raw, reply = whole(LEAKS[family])
    out = repair(raw, reply)
    assert out is not None
    got = items(out)
    names = ["get_weather", "run_in_terminal"] if family == "two" else ["get_weather"]
    assert [i["name"] for i in got] == names  # no message: there was no prose
    for item in got:
        assert set(item) == {"type", "id", "call_id", "name", "arguments", "status"}
        assert (item["type"], item["status"]) == ("function_call", "completed")
        assert item["id"].startswith("fc_") and item["call_id"].startswith("call_")
    assert json.loads(got[0]["arguments"]) == {"city": "Lisbon"}
    assert len({i["call_id"] for i in got}) == len({i["id"] for i in got}) == len(got)


def test_prose_before_the_markup_stays_the_message_and_every_other_byte_stays() -> None:
    raw, reply = whole(PROSE + HERMES)
    raw = raw.replace(b'"model":"grok-4"', b'"model" : "grok-4", "extra": 1e400')
    reply = json.loads(raw.replace(b"1e400", b"0"))  # 1e400 cannot be parsed as a float
    out = repair(raw, reply)
    assert out is not None
    message, call = items(out.replace(b"1e400", b"0"))
    assert message == {**reply["output"][0], "content": [{**message["content"][0], "text": PROSE}]}
    assert call["name"] == "get_weather"
    before, after = raw.split(b'"output":', 1)
    assert out.startswith(before + b'"output":')
    assert out.endswith(after[after.index(b"]}]") + 3 :])  # the fields after `output`


def test_output_text_when_the_upstream_writes_it_is_the_prose() -> None:
    raw, reply = whole(PROSE + TWO, output_text=PROSE + TWO)
    out = repair(raw, reply)
    assert out is not None
    assert json.loads(out)["output_text"] == PROSE
    assert [i["type"] for i in items(out)] == ["message", "function_call", "function_call"]


def test_a_blank_prose_drops_the_message() -> None:
    raw, reply = whole("  \n" + BLOB)
    assert [i["type"] for i in items(repair(raw, reply) or b"{}")] == ["function_call"]


def test_items_before_the_message_keep_their_bytes() -> None:
    writer = ResponsesWriter()
    output = [writer.reasoning(0, ["Think ", "first."]), writer.message(1, [PROSE + HERMES])]
    raw = dumps({"id": "resp_1", "output": output, "status": "completed"}).encode()
    out = repair(raw, json.loads(raw))
    assert out is not None
    assert out.startswith(b'{"id":"resp_1","output":[' + dumps(output[0]).encode() + b",")
    assert [i["type"] for i in items(out)] == ["reasoning", "message", "function_call"]


def _finding(reply: dict[str, Any]) -> Any:
    found = responses.inspect_reply(reply, TOOLS, HOLD)
    assert found is not None
    return found


def test_what_a_whole_reply_cannot_carry_falls_back() -> None:
    # A real call beside the leak.
    reply = responses_reply(Turn(content=(HERMES,), calls=(WEATHER,)))
    finding, prose = _finding(reply)
    raw = dumps(reply).encode()
    assert responses_repair.repair_reply(raw, reply, finding, prose, BOTH[:1]) is None
    # An item after the leaking message.
    reply = responses_reply(Turn(content=(HERMES,)))
    reply["output"].append({**reply["output"][0], "id": "msg_2"})
    finding, prose = _finding(reply)
    raw = dumps(reply).encode()
    assert responses_repair.repair_reply(raw, reply, finding, prose, BOTH[:1]) is None
    # The prose the decision judged is not this reply's.
    reply = responses_reply(Turn(content=(PROSE + HERMES,)))
    finding, _ = _finding(reply)
    raw = dumps(reply).encode()
    assert responses_repair.repair_reply(raw, reply, finding, "other", BOTH[:1]) is None
    # No calls.
    assert responses_repair.repair_reply(raw, reply, finding, PROSE, ()) is None
    # A response that did not complete (cut by max_output_tokens).
    cut_short = {**reply, "status": "incomplete"}
    raw = dumps(cut_short).encode()
    assert responses_repair.repair_reply(raw, cut_short, finding, PROSE, BOTH[:1]) is None


def test_markup_in_reasoning_has_no_markup_to_replace() -> None:
    reply = responses_reply(Turn(content=("Checking.",), reasoning=("Calling.\n" + HERMES,)))
    finding, _ = _finding(reply)
    assert finding.field == "reasoning"
    assert responses_repair.reply_markup(reply, finding) is None


# ---- streams ---------------------------------------------------------------------------------


def fresh() -> ResponsesStream:
    return new_stream(TOOLS, HOLD, None)


def stream_of(text: str, *at: int, reasoning: tuple[str, ...] = ()) -> bytes:
    return b"".join(responses_events(Turn(content=cut(text, *at), reasoning=reasoning)))


@pytest.mark.parametrize("family", sorted(LEAKS))
def test_a_streamed_leak_becomes_function_call_items_at_every_cut(family: str) -> None:
    text = PROSE + LEAKS[family] if family != "json" else BLOB  # a blob is a whole answer
    data = stream_of(text, 5, len(PROSE) + 3, len(PROSE) + 11)
    client = every_split_repairs(fresh, data)
    view = responses_view(client)
    well_formed(view)
    assert view.seqs == list(range(len(view.seqs)))
    calls = [i for i in view.closed.values() if i["type"] == "function_call"]
    names = ["get_weather", "run_in_terminal"] if family == "two" else ["get_weather"]
    assert [c["name"] for c in calls] == names
    prose = "" if family == "json" else PROSE
    assert view.all_text == prose == view.done_text[0]
    message = view.closed[0]
    assert message["type"] == "message" and message["content"][0]["text"] == prose
    final = view.completed
    assert final is not None and final["output"] == [view.closed[i] for i in sorted(view.closed)]
    assert final["usage"] == {"input_tokens": 40, "output_tokens": 18, "total_tokens": 58}
    # The same calls as the whole reply's repair.
    whole_out = repair(*whole(text))
    assert whole_out is not None
    assert [(c["name"], c["arguments"]) for c in calls] == [
        (i["name"], i["arguments"]) for i in items(whole_out) if i["type"] == "function_call"
    ]


def test_the_events_a_repair_adds() -> None:
    data = stream_of(PROSE + HERMES, len(PROSE) + 4)
    out, tail = repaired_stream(fresh(), [data])
    assert tail is not None
    events = [json.loads(e.split(b"data: ", 1)[1]) for e in tail.split(b"\n\n") if e]
    assert [e["type"] for e in events] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    added, delta, done, item_done = events[3:7]
    assert added["output_index"] == delta["output_index"] == item_done["output_index"] == 1
    assert added["item"] == {**item_done["item"], "arguments": "", "status": "in_progress"}
    assert delta["item_id"] == done["item_id"] == added["item"]["id"]
    assert delta["delta"] == done["arguments"] == '{"city":"Lisbon"}'
    assert responses_view(out).text == {0: PROSE}  # published as it came
    assert b"<tool_call>" not in out + tail


def test_reasoning_before_the_message_stays_as_the_client_had_it() -> None:
    data = stream_of(PROSE + HERMES, 9, reasoning=("Look it ", "up."))
    view = responses_view(every_split_repairs(fresh, data))
    well_formed(view)
    assert [view.closed[i]["type"] for i in sorted(view.closed)] == [
        "reasoning",
        "message",
        "function_call",
    ]
    assert view.completed is not None and view.completed["output"][0]["summary"][0]["text"] == (
        "Look it up."
    )


def test_ids_are_fresh_for_every_repair() -> None:
    data = stream_of(HERMES)
    first, second = (repaired_stream(fresh(), [data])[1] for _ in range(2))
    assert first is not None and second is not None
    assert first != second and numbered(first) == numbered(second)


def _tail_of(events: list[bytes]) -> bytes | None:
    return repaired_stream(fresh(), [b"".join(events)])[1]


def test_what_a_stream_cannot_carry_falls_back() -> None:
    # An item after the leaking message.
    writer = ResponsesWriter()
    writer.start()
    output = [writer.message(0, [HERMES]), writer.message(1, ["More."], item_id="msg_2")]
    writer.complete(output)
    assert _tail_of(writer.events) is None
    # A response that did not complete.
    events = responses_events(Turn(content=(HERMES,)))
    failed = events[-1].replace(b"response.completed", b"response.incomplete")
    assert _tail_of([*events[:-1], failed]) is None
    # No terminal event at all.
    assert _tail_of(events[:-1]) is None


def test_a_real_call_after_the_leak_or_a_splice_is_not_repaired() -> None:
    assert _tail_of(responses_events(Turn(content=(HERMES,), calls=(WEATHER,)))) is None
    first = fresh()
    repaired_stream(first, [stream_of(PROSE + HERMES, len(PROSE))])
    spliced = new_stream(TOOLS, HOLD, first)
    repaired_stream(spliced, [stream_of(HERMES)])
    assert spliced.markup is None


def test_calls_are_written_as_given() -> None:
    events, made = responses_repair.call_events((Call("get_weather", "{}"),), 3)
    assert [e["output_index"] for e in events] == [3, 3, 3, 3]
    assert made[0]["arguments"] == "{}" and made[0]["status"] == "completed"


def test_markup_longer_than_the_hold_limit_is_not_read() -> None:
    long = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "' + "L" * 200 + '"}}'
    stream = new_stream(TOOLS, 64, None)
    drive(stream, [stream_of(long + "\n</tool_call>")])
    assert stream.finding is not None and stream.markup is None

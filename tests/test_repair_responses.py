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
from spillguard.responses_events import Pending
from spillguard.responses_repair import Unshown
from tests.fuzz.responses_bytes import (
    ResponsesWriter,
    responses_events,
    responses_reply,
    responses_view,
    well_formed,
)
from tests.fuzz.wire_bytes import (
    HOLD,
    TOOLS,
    WEATHER,
    Turn,
    cut,
    drive,
    dumps,
    every_split_agrees,
)
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


@pytest.mark.parametrize("family", sorted(set(LEAKS) - {"json"}))  # a blob is a whole answer
def test_a_streamed_leak_becomes_function_call_items_at_every_cut(family: str) -> None:
    text = PROSE + LEAKS[family]
    data = stream_of(text, 5, len(PROSE) + 3, len(PROSE) + 11)
    client = every_split_repairs(fresh, data)
    view = responses_view(client)
    well_formed(view)
    assert view.seqs == list(range(len(view.seqs)))
    calls = [i for i in view.closed.values() if i["type"] == "function_call"]
    names = ["get_weather", "run_in_terminal"] if family == "two" else ["get_weather"]
    assert [c["name"] for c in calls] == names
    assert view.all_text == PROSE == view.done_text[0]
    message = view.closed[0]
    assert message["type"] == "message" and message["content"][0]["text"] == PROSE
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


# ---- a message that never showed text -------------------------------------------------------


def shape(output: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """A final output as a client reads it, fresh ids aside."""
    out: list[tuple[Any, ...]] = []
    for item in output:
        if item["type"] == "message":
            out.append(("message", tuple(p["text"] for p in item["content"])))
        elif item["type"] == "function_call":
            out.append(("function_call", item["name"], item["arguments"]))
        else:
            out.append((item["type"],))
    return out


NO_PROSE = ("", " \n\n")


@pytest.mark.parametrize(
    ("family", "prose"),
    [
        *((f, PROSE) for f in sorted(LEAKS) if f != "json"),  # a blob is a whole answer
        *((f, p) for f in sorted(LEAKS) for p in NO_PROSE),
    ],
)
def test_a_streamed_repair_lists_what_the_whole_repair_does(family: str, prose: str) -> None:
    text = prose + LEAKS[family]
    data = stream_of(text, 1, len(prose) + 3)
    view = responses_view(every_split_repairs(fresh, data))
    well_formed(view)
    assert view.seqs == list(range(len(view.seqs)))
    assert sorted(view.added) == list(range(len(view.added))) == sorted(view.closed)
    final = view.completed
    assert final is not None and final["output"] == [view.closed[i] for i in sorted(view.closed)]
    assert final["usage"] == {"input_tokens": 40, "output_tokens": 18, "total_tokens": 58}
    whole_out = repair(*whole(text))
    assert whole_out is not None
    assert shape(final["output"]) == shape(items(whole_out))


def test_no_prose_before_the_markup_announces_no_message() -> None:
    writer = ResponsesWriter()
    writer.start()
    output = [writer.reasoning(0, ["Look it ", "up."]), writer.message(1, ["\n", HERMES])]
    writer.complete(output)
    out, tail = repaired_stream(fresh(), [b"".join(writer.events)])
    assert tail is not None
    view = responses_view(out + tail)
    well_formed(view)
    assert [view.added[i]["type"] for i in sorted(view.added)] == ["reasoning", "function_call"]
    assert view.text == {} and view.done_text == {}
    assert b"msg_1" not in out + tail


def test_a_retry_spliced_after_a_leak_with_no_prose_starts_at_the_first_index() -> None:
    # A keep-alive started the response; the leak had no prose: the retry's message is the
    # first item the client sees.
    first = fresh()
    published = drive(first, [stream_of(" \n" + HERMES)])
    assert first.finding is not None and first.sent.opened == {}
    spliced = new_stream(TOOLS, HOLD, first)
    view = responses_view(published + drive(spliced, [stream_of("Sunny.")]))
    well_formed(view)
    assert [view.added[i]["type"] for i in sorted(view.added)] == ["message"]
    assert view.text == {0: "Sunny."}


@pytest.mark.parametrize(
    "deltas",
    [(" \n", "\n\n "), (" \n", "Sunny."), ("\n", "\n", "It is ", "sunny.")],
    ids=["blank", "blank-then-text", "blank-deltas-then-text"],
)
def test_a_message_without_a_leak_reaches_the_client_whole_at_every_cut(
    deltas: tuple[str, ...],
) -> None:
    for calls in ((), (WEATHER,)):
        events = responses_events(Turn(content=deltas, calls=calls))
        out, editor = every_split_agrees(fresh, b"".join(events))
        assert editor.finding is None
        view, upstream = responses_view(out), responses_view(b"".join(events))
        well_formed(view)
        assert view.all_text == "".join(deltas)
        assert (view.added, view.closed) == (upstream.added, upstream.closed)
        assert view.kinds[0] == "response.created" and view.completed == upstream.completed


# ---- Unshown, event by event ----------------------------------------------------------------


def ev(kind: str, oi: int | None = 0, **fields: Any) -> Pending:
    data: dict[str, Any] = {"type": kind, **fields}
    if oi is not None:
        data["output_index"] = oi
    return (data, None, False)


MESSAGE = ev("response.output_item.added", item={"type": "message", "id": "msg_1"})
PART = ev("response.content_part.added", content_index=0, part={"type": "output_text", "text": ""})


def text(delta: str, oi: int = 0) -> Pending:
    return ev("response.output_text.delta", oi, content_index=0, delta=delta)


def routed(gate: Unshown, *pending: Pending, final: bool = False, leaked: bool = False) -> list:
    return [gate.route([p], False, leaked) for p in pending] + [gate.route([], final, leaked)]


def test_a_message_waits_until_it_shows_text() -> None:
    gate = Unshown(HOLD)
    assert routed(gate, MESSAGE, PART, text(" \n"), text("Hi")) == [
        [],
        [],
        [],
        [MESSAGE, PART, text(" \n"), text("Hi")],
        [],
    ]


def test_what_belongs_elsewhere_releases_the_message_first() -> None:
    call = ev("response.output_item.added", 1, item={"type": "function_call"})
    completed = ev("response.completed", None, response={})
    for after in (call, completed, ev("response.output_text.done", text="")):
        gate = Unshown(HOLD)
        assert gate.route([MESSAGE, PART, after], False, False) == [MESSAGE, PART, after]
    gate = Unshown(HOLD)
    second = ev("response.output_item.added", 1, item={"type": "message", "id": "msg_2"})
    assert gate.route([MESSAGE, second], False, False) == [MESSAGE]
    assert gate.route([text("x", 1)], False, False) == [second, text("x", 1)]


def test_a_part_that_opens_with_text_shows_it() -> None:
    shown = ev(
        "response.content_part.added", content_index=0, part={"type": "output_text", "text": "A"}
    )
    assert Unshown(HOLD).route([MESSAGE, shown], False, False) == [MESSAGE, shown]


def test_the_end_releases_and_a_leak_drops() -> None:
    assert routed(Unshown(HOLD), MESSAGE, PART, final=True) == [[], [], [MESSAGE, PART]]
    gate = Unshown(HOLD)
    assert routed(gate, MESSAGE, PART, text(" ")) == [[], [], [], []]
    assert gate.route([], False, True) == []
    closing = ev("response.output_item.added", 0, item={"type": "function_call"})
    assert gate.route([closing], True, True) == [closing]  # nothing of the message is left


def test_text_in_the_same_batch_as_the_leak_still_opens_its_message() -> None:
    assert Unshown(HOLD).route([MESSAGE, PART, text("Let me")], False, True) == [
        MESSAGE,
        PART,
        text("Let me"),
    ]


def test_other_items_are_never_held() -> None:
    reasoning = ev("response.output_item.added", item={"type": "reasoning", "id": "rs_1"})
    nameless = ev("response.output_item.added", None, item={"type": "message"})
    assert Unshown(HOLD).route([reasoning, text(" ")], False, False) == [reasoning, text(" ")]
    assert Unshown(HOLD).route([nameless], False, False) == [nameless]


def test_white_space_is_held_up_to_the_limit() -> None:
    gate = Unshown(4)
    assert gate.route([MESSAGE, text("  "), text("  ")], False, False) == []
    assert gate.route([text(" ")], False, False) == [MESSAGE, text("  "), text("  "), text(" ")]

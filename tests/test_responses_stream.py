"""The Responses stream editor, fed SSE bytes: what it publishes and what it finds.

Every scenario is a named-event stream written the way the API writes it (response.created,
output items, content and summary parts, text and argument deltas, response.completed), fed
whole, cut once at every byte and one byte at a time; each way must publish the same bytes and
end with the same finding. Events the editor leaves alone come out as the upstream's bytes.
"""

from __future__ import annotations

import json
from typing import Any

from spillguard.responses import ResponsesStream, new_stream
from tests.fuzz.responses_bytes import (
    RESPONSE,
    ResponsesView,
    ResponsesWriter,
    completed_texts,
    responses_events,
    responses_view,
    well_formed,
)
from tests.fuzz.wire_bytes import HOLD, TOOLS, WEATHER, Turn, cut, decode, drive, every_split_agrees
from tests.samples import HERMES

KIMI = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>{"city": "Lisbon"}<|tool_call_end|><|tool_calls_section_end|>'
)
PROSE = "Let me check that.\n"


def fresh() -> ResponsesStream:
    return new_stream(TOOLS, HOLD, None)


def bodies(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(e.data) for e in decode(data) if e.data]


def test_an_honest_answer_is_published_byte_for_byte() -> None:
    data = b"".join(responses_events(Turn(content=("Sunny ｜", " 21 °C", " in Lisbon."))))
    assert "｜".encode() in data
    out, stream = every_split_agrees(fresh, data)
    assert out == data
    assert stream.finding is None


def test_a_real_function_call_is_published_byte_for_byte() -> None:
    data = b"".join(responses_events(Turn(calls=(WEATHER,))))
    out, stream = every_split_agrees(fresh, data)
    assert out == data
    assert stream.finding is None
    view = responses_view(out)
    assert view.closed[0]["name"] == "get_weather"
    assert view.closed[0]["arguments"] == '{"city":"Lisbon"}'


def test_a_leak_at_the_start_publishes_only_the_openings() -> None:
    turn = Turn(content=cut(HERMES, 3, 20))
    events = responses_events(turn)
    out, stream = every_split_agrees(fresh, b"".join(events))
    # response.created and in_progress: neither is meaningful, so neither starts the
    # response; both are the upstream's bytes. The message showed no text before the markup,
    # so it is never announced.
    assert out == b"".join(events[:2])
    assert responses_view(out).text == {}
    assert stream.finding is not None
    assert (stream.finding.family, stream.finding.field) == ("hermes", "content")
    assert (stream.finding.tool_name, stream.finding.start) == ("get_weather", 0)
    assert stream.leaked_text() == ""  # no prose: the retry sends no assistant turn


def test_prose_then_a_leak_glued_on_the_next_line() -> None:
    text = PROSE + HERMES
    rest = text[len("Let me check that.\n<tool") :]
    events = responses_events(Turn(content=("Let me", " check that.\n<tool", rest)))
    out, stream = every_split_agrees(fresh, b"".join(events))
    kept = b"".join(events[:5])  # up to the first delta, unchanged
    assert out.startswith(kept)
    edited = bodies(out[len(kept) :])
    original = bodies(events[5])[0]
    assert edited == [{**original, "delta": " check that.\n"}]
    assert responses_view(out).all_text == PROSE
    assert stream.finding is not None
    assert (stream.finding.family, stream.finding.tool_name) == ("hermes", "get_weather")
    assert stream.finding.start == len(PROSE)
    assert stream.leaked_text() == PROSE  # the prose, never the markup


def test_markup_in_reasoning_without_a_call_is_a_finding() -> None:
    reasoning = "The user wants the weather.\n" + KIMI
    turn = Turn(content=("Checking.",), reasoning=cut(reasoning, 10, 40))
    out, stream = every_split_agrees(fresh, b"".join(responses_events(turn)))
    view = responses_view(out)
    well_formed(view)
    assert view.all_summary == "The user wants the weather.\n"
    assert view.text == {}  # parked behind the reasoning markup, then dropped with it
    assert view.completed is None
    assert stream.finding is not None
    assert (stream.finding.family, stream.finding.field) == ("kimi", "reasoning")
    assert stream.finding.start == len("The user wants the weather.\n")
    assert stream.leaked_text() == "Checking."  # the assistant turn's text, not its reasoning


def test_markup_in_reasoning_beside_a_real_call_is_released_in_order() -> None:
    reasoning = "Calling the tool.\n" + KIMI
    turn = Turn(reasoning=cut(reasoning, 18, 50), calls=(WEATHER,))
    out, stream = every_split_agrees(fresh, b"".join(responses_events(turn)))
    assert stream.finding is None
    view = responses_view(out)
    well_formed(view)
    assert view.seqs == list(range(len(view.seqs)))  # renumbered after the inserted delta
    assert view.all_summary == reasoning
    assert view.kinds.index("response.reasoning_summary_text.done") < view.kinds.index(
        "response.function_call_arguments.delta"
    )
    assert view.closed[1]["name"] == "get_weather"
    assert view.completed is not None
    assert completed_texts(view.completed) == ("", reasoning)


def test_content_markup_while_parked_behind_reasoning_markup_publishes_no_content() -> None:
    """The prose before the markup must not go out alone, ahead of the parked events (it would
    be text for a message the client never saw added)."""
    text = "It is sunny.\n" + HERMES
    turn = Turn(content=(text[:1], text[1:]), reasoning=("Thinking.\n" + HERMES,))
    out, stream = every_split_agrees(fresh, b"".join(responses_events(turn)))
    view = responses_view(out)
    well_formed(view)
    assert view.text == {}
    assert stream.finding is not None and stream.finding.field == "content"
    assert stream.leaked_text() == "It is sunny.\n"  # the prose before the markup


# ---- a retry spliced into the client's stream ------------------------------------------------

RETRY = {**RESPONSE, "id": "resp_retry_2", "created_at": 1741476999}


def first_attempt() -> tuple[bytes, ResponsesStream]:
    """An attempt that published prose, then leaked: what the client got, and the editor."""
    events = responses_events(Turn(content=(PROSE, *cut(HERMES, 9))))
    stream = fresh()
    out = drive(stream, [b"".join(events)])
    assert stream.finding is not None
    return out, stream


def retry_events(turn: Turn) -> bytes:
    writer = ResponsesWriter(response=RETRY)
    writer.start()
    output: list[dict[str, Any]] = []
    if turn.content:
        output.append(writer.message(0, turn.content, item_id="msg_2"))
    for call in turn.calls:
        output.append(writer.function_call(len(output), call))
    writer.complete(output)
    return b"".join(writer.events)


def spliced(turn: Turn) -> tuple[ResponsesView, ResponsesStream]:
    """The client's whole stream: the first attempt's bytes, then the retry spliced in, the
    retry fed every way it can be cut."""
    before, _ = first_attempt()
    out, stream = every_split_agrees(
        lambda: new_stream(TOOLS, HOLD, first_attempt()[1]), retry_events(turn)
    )
    view = responses_view(before + out)
    well_formed(view)
    return view, stream


def late_stream(text: str) -> bytes:
    """A message whose part gets one more delta after its `output_text.done`."""
    seq = iter(range(100))

    def event(kind: str, **fields: Any) -> bytes:
        body = {"type": kind, **fields, "sequence_number": next(seq)}
        return f"event: {kind}\ndata: {json.dumps(body)}\n\n".encode()

    part = {"output_index": 0, "content_index": 0, "item_id": "msg_1"}
    item = {"type": "message", "id": "msg_1", "role": "assistant", "content": []}
    data = event("response.created", response={"id": "resp_1", "status": "in_progress"})
    data += event("response.output_item.added", output_index=0, item=item)
    data += event("response.output_text.delta", **part, delta=text)
    data += event("response.output_text.done", **part, text=text)
    return data + event("response.output_text.delta", **part, delta=" late")


def test_a_text_delta_after_its_part_was_done_goes_as_it_came() -> None:
    """The part's text was judged whole at its `done`: a delta after it is not read, and goes
    as it came (it used to fail the stream: its scanner had finished)."""
    data = late_stream("It is sunny.")
    out, stream = every_split_agrees(fresh, data)
    assert out == data and stream.finding is None


def test_a_text_delta_after_a_leaking_part_was_done_is_drained_without_failing() -> None:
    out, stream = every_split_agrees(fresh, late_stream(PROSE + HERMES))
    assert stream.finding is not None and stream.finding.family == "hermes"
    assert b"tool_call" not in out


def test_a_calls_argument_deltas_go_as_they_came_and_after_a_withheld_message() -> None:
    """A call's argument deltas go out as the upstream's bytes. A blank message opened while a
    call streams is withheld, and an argument delta that comes meanwhile first lets it go, in
    order (its blank text, held by its scanner, goes at the end), whether each event is fed
    alone or a read's events together."""
    w = ResponsesWriter()
    w.start()
    call = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "get_weather"}
    w.emit("response.output_item.added", output_index=0, item={**call, "arguments": ""})
    args = {"item_id": "fc_1", "output_index": 0}
    w.emit("response.function_call_arguments.delta", **args, delta='{"city":')
    message = {"id": "msg_1", "type": "message", "role": "assistant", "content": []}
    w.emit("response.output_item.added", output_index=1, item=message)
    w.emit(
        "response.output_text.delta", item_id="msg_1", output_index=1, content_index=0, delta=" "
    )
    w.emit("response.function_call_arguments.delta", **args, delta='"Lisbon"}')
    w.complete([{**call, "arguments": '{"city":"Lisbon"}'}])
    data = b"".join(w.events)
    out, stream = every_split_agrees(fresh, data)
    assert stream.finding is None and drive(fresh(), [data], one_by_one=True) == out
    sent = [(body["type"], body["sequence_number"]) for body in bodies(out)]
    assert sent[2:] == [
        ("response.output_item.added", 2),
        ("response.function_call_arguments.delta", 3),
        ("response.output_item.added", 4),
        ("response.function_call_arguments.delta", 6),
        ("response.output_text.delta", 7),
        ("response.completed", 8),
    ]
    assert out.startswith(data[: data.index(b"event: response.output_text.delta")])


def test_a_splice_keeps_the_identity_and_numbers_and_shifts_the_call() -> None:
    view, stream = spliced(Turn(calls=(WEATHER,)))
    assert stream.finding is None
    assert view.kinds.count("response.created") == 1
    ids = {(r["id"], r["created_at"]) for r in view.responses}
    assert ids == {(RESPONSE["id"], RESPONSE["created_at"])}
    assert view.all_text == PROSE
    assert view.done_text == {0: PROSE}  # the first message closed at the client's text
    assert view.closed[0]["content"][0]["text"] == PROSE
    assert view.added[1]["type"] == "function_call"  # the retry's item 0, after the message
    assert view.closed[1]["arguments"] == '{"city":"Lisbon"}'
    completed = view.completed
    assert completed is not None
    assert [i["type"] for i in completed["output"]] == ["message", "function_call"]
    assert completed_texts(completed) == (PROSE, "")


def test_a_splice_completes_with_exactly_the_text_the_client_received() -> None:
    view, stream = spliced(Turn(content=("It is sunny", " in Lisbon.")))
    assert stream.finding is None
    assert view.text == {0: PROSE, 1: "It is sunny in Lisbon."}
    completed = view.completed
    assert completed is not None
    assert completed_texts(completed) == (view.all_text, "")
    assert [i["id"] for i in completed["output"]] == ["msg_1", "msg_2"]


# ---- the client's end -----------------------------------------------------------------------


def test_what_follows_the_terminal_event_goes_as_it_came_unread() -> None:
    """After response.completed the client has the response's end: later events (here text
    that would leak) are neither read nor held."""
    late = b"event: response.output_text.delta\ndata: " + json.dumps(
        {"type": "response.output_text.delta", "output_index": 0, "content_index": 0,
         "delta": PROSE + HERMES}
    ).encode() + b"\n\n"  # fmt: skip
    data = b"".join(responses_events(Turn(content=("Sunny", " in Lisbon.")))) + late
    out, stream = every_split_agrees(fresh, data)
    assert out == data
    assert stream.finding is None and stream.closed and stream.holding == 0

"""The Messages stream editor, fed SSE bytes: what it publishes and what it finds.

Every scenario is an Anthropic event stream written the way providers write it (message_start,
content blocks with their deltas, a ping, message_delta, message_stop), fed whole, cut once at
every byte and one byte at a time; each way must publish the same bytes and end with the same
finding. Events the editor leaves alone come out as the upstream's bytes.
"""

from __future__ import annotations

import json
from typing import Any

from spillguard.messages_stream import MessagesStream, new_stream
from tests.fuzz.messages_bytes import SIGNATURE, MessagesWriter, messages_events, messages_view
from tests.fuzz.wire_bytes import HOLD, TOOLS, WEATHER, Turn, cut, decode, drive, every_split_agrees
from tests.samples import DSML, HERMES

KIMI = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>{"city": "Lisbon"}<|tool_call_end|><|tool_calls_section_end|>'
)
MINIMAX = (
    '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Lisbon</parameter>'
    "\n</invoke>\n</minimax:tool_call>"
)
PROSE = "Let me check that.\n"


def fresh() -> MessagesStream:
    return new_stream(TOOLS, HOLD, None)


def bodies(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(e.data) for e in decode(data) if e.data]


def test_an_honest_answer_is_published_byte_for_byte() -> None:
    data = b"".join(messages_events(Turn(content=("Sunny ｜", " 21 °C", " in Lisbon."))))
    assert "｜".encode() in data
    out, stream = every_split_agrees(fresh, data)
    assert out == data
    assert stream.finding is None
    assert stream.leaked_text() == "Sunny ｜ 21 °C in Lisbon."


def test_thinking_text_and_a_real_call_are_published_byte_for_byte() -> None:
    turn = Turn(content=("I will look", " it up."), reasoning=("Weather,", " so call."))
    data = b"".join(messages_events(Turn(turn.content, turn.reasoning, (WEATHER,))))
    out, stream = every_split_agrees(fresh, data)
    assert out == data
    view = messages_view(out)
    assert [b.type for b in view.blocks] == ["thinking", "text", "tool_use"]
    assert view.blocks[0].signature == SIGNATURE
    assert view.blocks[2].text == '{"city":"Lisbon"}'
    assert stream.anomalies == []


def test_a_leak_at_the_start_publishes_only_the_message_start() -> None:
    events = messages_events(Turn(content=cut(DSML, 3, 20)))
    out, stream = every_split_agrees(fresh, b"".join(events))
    # message_start is the upstream's; the text block never opens (it would stay blank), and
    # the ping held in its place goes with it.
    assert out == events[0]
    assert messages_view(out).blocks == []
    assert stream.finding is not None
    assert (stream.finding.family, stream.finding.field) == ("dsml", "content")
    assert (stream.finding.tool_name, stream.finding.start) == ("get_weather", 0)
    assert stream.leaked_text() == ""  # the retry sends no assistant turn
    assert stream.ended


def test_blank_prose_before_a_leak_never_opens_a_block() -> None:
    events = messages_events(Turn(content=("\n", "  \n", MINIMAX[:9], MINIMAX[9:])))
    out, stream = every_split_agrees(fresh, b"".join(events))
    assert messages_view(out).blocks == []
    assert stream.finding is not None and stream.finding.family == "minimax"
    assert stream.leaked_text() == "\n  \n"


def test_prose_then_a_leak_publishes_the_prose_in_one_open_block() -> None:
    text = PROSE + HERMES
    rest = text[len("Let me check that.\n<tool") :]
    events = messages_events(Turn(content=("Let me", " check that.\n<tool", rest)))
    out, stream = every_split_agrees(fresh, b"".join(events))
    kept = b"".join(events[:4])  # message_start, the block's start, the ping, the first delta
    assert out.startswith(kept)
    edited = bodies(out[len(kept) :])
    original = bodies(events[4])[0]
    assert edited == [{**original, "delta": {"type": "text_delta", "text": " check that.\n"}}]
    view = messages_view(out)
    assert view.text == PROSE and not view.blocks[0].stopped
    assert stream.finding is not None
    assert (stream.finding.family, stream.finding.tool_name) == ("hermes", "get_weather")
    assert stream.finding.start == len(PROSE)
    assert stream.leaked_text() == PROSE  # never the markup


def test_a_whole_answer_json_call_is_held_and_found_at_the_blocks_end() -> None:
    blob = '{"name": "get_weather", "arguments": {"city": "Lisbon"}}'
    out, stream = every_split_agrees(fresh, b"".join(messages_events(Turn(cut(blob, 5, 30)))))
    assert messages_view(out).blocks == []
    assert stream.finding is not None and stream.finding.family == "json"
    assert stream.ended


def test_markup_in_thinking_without_a_call_is_a_finding() -> None:
    thought = "The user wants the weather.\n" + KIMI
    turn = Turn(content=("Checking.",), reasoning=cut(thought, 10, 40))
    out, stream = every_split_agrees(fresh, b"".join(messages_events(turn)))
    view = messages_view(out)
    assert view.thinking == "The user wants the weather.\n"
    assert view.of("text") == []  # parked behind the thinking markup, then dropped with it
    assert view.stop_reason is None and view.stops == 0
    assert stream.finding is not None
    assert (stream.finding.family, stream.finding.field) == ("kimi", "reasoning")
    assert stream.finding.start == len("The user wants the weather.\n")
    assert stream.leaked_text() == "Checking."  # the text blocks' prose, not the thinking


def test_markup_in_thinking_before_a_real_call_is_released_in_order() -> None:
    thought = "Calling the tool.\n" + KIMI
    turn = Turn(content=("Checking.",), reasoning=cut(thought, 18, 50), calls=(WEATHER,))
    out, stream = every_split_agrees(fresh, b"".join(messages_events(turn)))
    assert stream.finding is None
    view = messages_view(out)
    assert [b.type for b in view.blocks] == ["thinking", "text", "tool_use"]
    assert view.thinking == thought
    assert view.blocks[0].signature == SIGNATURE  # after all its thinking, as sent
    kinds = [(d["type"], d.get("delta", {}).get("type")) for d in bodies(out)]
    assert kinds.index(("content_block_delta", "signature_delta")) > max(
        i for i, k in enumerate(kinds) if k[1] == "thinking_delta"
    )
    assert view.text == "Checking." and view.stop_reason == "tool_use"


def test_content_markup_while_parked_behind_thinking_markup_publishes_no_content() -> None:
    turn = Turn(content=("Sure.\n", HERMES), reasoning=("Plan:\n", KIMI), calls=(WEATHER,))
    out, stream = every_split_agrees(fresh, b"".join(messages_events(turn)))
    view = messages_view(out)
    assert view.thinking == "Plan:\n" and view.of("text") == []
    assert stream.finding is not None and stream.finding.field == "content"
    assert stream.leaked_text() == "Sure.\n"


def test_a_stop_for_a_call_without_a_call_is_an_anomaly() -> None:
    writer = MessagesWriter()
    writer.start()
    writer.text(["Done."])
    writer.end("tool_use")
    stream = fresh()
    drive(stream, [b"".join(writer.events)])
    assert [a.kind for a in stream.anomalies] == ["tool_calls_without_calls"]


def test_comments_unknown_events_and_upstream_errors_pass_as_sent() -> None:
    error = b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error"}}\n\n'
    data = b': hello\n\nevent: vendor_note\ndata: {"type":"vendor_note"}\n\n' + error
    out, stream = every_split_agrees(fresh, data)
    assert out == data and stream.finding is None


def event(kind: str, **fields: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n".encode()


def late_text(index: int, text: str) -> bytes:
    delta = {"type": "text_delta", "text": text}
    return event("content_block_delta", index=index, delta=delta)


def test_a_text_delta_after_its_block_stopped_goes_as_it_came() -> None:
    """An upstream that sends text after the block's stop: the block's text was judged whole
    at the stop, so the late delta is not read, and goes as it came (it used to fail the
    stream: its scanner had finished)."""
    data = event("message_start", message={"id": "msg_1", "role": "assistant", "content": []})
    data += event("content_block_start", index=0, content_block={"type": "text", "text": ""})
    data += late_text(0, "It is sunny.") + event("content_block_stop", index=0)
    data += late_text(0, " And warm.") + event("message_stop")
    out, stream = every_split_agrees(fresh, data)
    assert out == data and stream.finding is None


def test_a_text_delta_after_a_leaking_block_stopped_is_drained_without_failing() -> None:
    data = event("message_start", message={"id": "msg_1", "role": "assistant", "content": []})
    data += event("content_block_start", index=0, content_block={"type": "text", "text": ""})
    data += late_text(0, PROSE + HERMES) + event("content_block_stop", index=0)
    data += late_text(0, " more") + event("message_stop")
    out, stream = every_split_agrees(fresh, data)
    assert stream.finding is not None and stream.finding.family == "hermes"
    assert HERMES.encode()[:12] not in out


# ---- a retry spliced into the client's stream ------------------------------------------------


def first_attempt(turn: Turn) -> tuple[bytes, MessagesStream]:
    """An attempt that published something, then leaked: what the client got, and the editor."""
    stream = fresh()
    out = drive(stream, [b"".join(messages_events(turn))])
    assert stream.finding is not None
    return out, stream


def spliced(first: Turn, retry: Turn) -> tuple[bytes, MessagesStream]:
    """The client's whole stream: the first attempt's bytes, then the retry spliced in, the
    retry fed every way it can be cut."""
    before, _ = first_attempt(first)
    out, stream = every_split_agrees(
        lambda: new_stream(TOOLS, HOLD, first_attempt(first)[1]),
        b"".join(messages_events(retry)),
    )
    return before + out, stream


def test_a_splice_closes_the_prose_and_numbers_the_call_after_it() -> None:
    data, stream = spliced(Turn(content=(PROSE, *cut(HERMES, 9))), Turn(calls=(WEATHER,)))
    assert stream.finding is None
    view = messages_view(data)  # one message_start, indexes 0 then 1
    assert [(b.type, b.text) for b in view.blocks] == [
        ("text", PROSE),
        ("tool_use", '{"city":"Lisbon"}'),
    ]
    assert all(b.stopped for b in view.blocks)
    assert view.stop_reason == "tool_use" and view.usage == {"output_tokens": 18}
    assert view.kinds.count("message_start") == 1 and view.stops == 1


def test_a_splice_after_thinking_and_prose_keeps_every_block() -> None:
    first = Turn(content=(PROSE, MINIMAX), reasoning=("Weather wanted.",))
    data, _ = spliced(first, Turn(content=("It is sunny", " in Lisbon."), reasoning=("Again.",)))
    view = messages_view(data)
    assert [(b.type, b.text) for b in view.blocks] == [
        ("thinking", "Weather wanted."),
        ("text", PROSE),
        ("thinking", "Again."),
        ("text", "It is sunny in Lisbon."),
    ]
    assert [b.signature for b in view.of("thinking")] == [SIGNATURE, SIGNATURE]


def test_a_splice_after_thinking_markup_closes_the_thinking_at_its_prose() -> None:
    first = Turn(content=("Done.",), reasoning=("Let me call it.\n", KIMI))
    data, _ = spliced(first, Turn(calls=(WEATHER,)))
    view = messages_view(data)
    assert [(b.type, b.text) for b in view.blocks] == [
        ("thinking", "Let me call it.\n"),
        ("tool_use", '{"city":"Lisbon"}'),
    ]
    assert view.blocks[0].signature == ""  # a cut block does not carry the model's signature


# ---- the client's end -----------------------------------------------------------------------


def test_what_follows_message_stop_goes_as_it_came_unread() -> None:
    """After message_stop the client has the message's end: later events (here a block that
    would leak, and one of blank text that would be held) are neither read nor held, so they
    can neither make a finding after the end nor hold the end back."""
    late = event("content_block_start", index=1, content_block={"type": "text", "text": ""})
    late += late_text(1, PROSE + HERMES) + late_text(1, " " * 3000)
    late += event("content_block_stop", index=1) + b": comment\n\n"
    data = b"".join(messages_events(Turn(content=("Sunny", " in Lisbon.")))) + late
    out, stream = every_split_agrees(fresh, data)
    assert out == data
    assert stream.finding is None and stream.closed and stream.holding == 0

"""The Chat Completions stream editor (`chat_stream.py` and the per-choice edits of
`chat_choices.py`), fed SSE bytes: what it publishes and what it finds.

Every scenario is a byte stream written the way providers write it, fed whole, cut once at
every byte (inside a line, a CRLF, a `｜`) and one byte at a time; each way must publish the
same bytes and end with the same finding. Chunks the editor leaves alone must come out as the
upstream's exact bytes; chunks it edits are parsed and checked field by field.
"""

from __future__ import annotations

import json
from typing import Any

from spillguard.chat import ChatStream, new_stream
from tests.fuzz.chat_bytes import (
    CHAT_DONE,
    CHAT_HEAD,
    chat_call_chunks,
    chat_chunk,
    chat_events,
    chat_usage_chunk,
    chat_view,
)
from tests.fuzz.wire_bytes import (
    HOLD,
    TOOLS,
    WEATHER,
    Call,
    Turn,
    cut,
    decode,
    drive,
    every_split_agrees,
)
from tests.samples import DSML, HERMES

DEEPSEEK = (
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
    '```json\n{"city": "Lisbon"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
)
KIMI = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>{"city": "Lisbon"}<|tool_call_end|><|tool_calls_section_end|>'
)
ROLE = chat_chunk({"role": "assistant", "content": ""})
FINISH = chat_chunk({}, finish="stop")


def fresh() -> ChatStream:
    return new_stream(TOOLS, HOLD, None)


def chunks_of(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(e.data) for e in decode(data) if e.data and e.data != "[DONE]"]


def test_an_honest_answer_is_published_byte_for_byte() -> None:
    turn = Turn(content=("It is sunny", " in Lisbon ｜ 21 °C", ", light wind.\n", "Enjoy."))
    data = b"".join(chat_events(turn))
    assert "｜".encode() in data
    out, stream = every_split_agrees(fresh, data)
    assert out == data
    assert stream.finding is None


def test_a_real_tool_call_is_published_byte_for_byte() -> None:
    data = b"".join(chat_events(Turn(calls=(WEATHER,))))
    out, stream = every_split_agrees(fresh, data)
    assert out == data
    assert stream.finding is None
    view = chat_view(out)
    assert view.calls == {0: {0: ["call_1", "get_weather", '{"city":"Lisbon"}']}}
    assert view.finish == {0: "tool_calls"}


def test_a_leak_at_the_start_publishes_nothing_but_the_role_chunk() -> None:
    turn = Turn(content=cut(DEEPSEEK, 1, 3, 30, 60))
    data = b"".join(chat_events(turn))
    out, stream = every_split_agrees(fresh, data)
    assert out == ROLE  # not meaningful: the response does not start for it
    assert stream.finding is not None
    assert (stream.finding.family, stream.finding.field) == ("deepseek", "content")
    assert (stream.finding.tool_name, stream.finding.start) == ("get_weather", 0)
    assert stream.leaked_text() == ""  # no prose: the retry sends no assistant turn
    assert stream.ended  # the editor read on to [DONE] to settle the name


def test_prose_then_a_leak_glued_on_the_next_line() -> None:
    """The delta that carries the end of the prose and the start of the markup is edited down
    to the prose; the deltas before it go out as they came."""
    text = "Let me check that.\n" + HERMES
    turn = Turn(content=("Let me", " check that.\n<tool", text[len("Let me check that.\n<tool") :]))
    events = chat_events(turn)
    out, stream = every_split_agrees(fresh, b"".join(events))
    assert out.startswith(ROLE + events[1])
    edited = chunks_of(out[len(ROLE + events[1]) :])
    original = chunks_of(events[2])
    assert edited[0]["choices"][0]["delta"] == {"content": " check that.\n"}
    assert {k: v for k, v in edited[0].items() if k != "choices"} == {
        k: v for k, v in original[0].items() if k != "choices"
    }
    assert len(edited) == 1
    assert chat_view(out).content == {0: "Let me check that.\n"}
    assert stream.finding is not None
    assert (stream.finding.family, stream.finding.tool_name) == ("hermes", "get_weather")
    assert stream.finding.start == len("Let me check that.\n")
    assert stream.leaked_text() == "Let me check that.\n"  # the prose, never the markup


def test_a_delta_read_by_its_bytes_in_a_read_of_its_own_is_edited_as_when_parsed() -> None:
    """A paced stream's deltas come a read each. Once their shape is known they are read by
    their bytes; the one whose end is held back (`<tool` may open markup) is parsed then and
    edited exactly as when each event is parsed (`feed` one by one)."""
    text = "Let me check the weather " + HERMES
    head = ("Let me", " check", " the weather <tool")
    turn = Turn(content=(*head, text[len("".join(head)) :]))
    events = chat_events(turn)
    stream = fresh()
    out = drive(stream, events)  # each piece one event, fed to `feed_all`
    assert stream._shape is not None  # the deltas were read by their bytes
    assert out == drive(fresh(), events, one_by_one=True)
    assert out.startswith(b"".join(events[:3]))
    edited = chunks_of(out[len(b"".join(events[:3])) :])
    assert [c["choices"][0]["delta"] for c in edited] == [{"content": " the weather "}]
    assert stream.finding is not None
    assert stream.finding.start == len("Let me check the weather ")


def test_markup_in_reasoning_without_a_call_is_a_finding() -> None:
    reasoning = "The user wants the weather.\n" + KIMI
    turn = Turn(content=("Checking.",), reasoning=cut(reasoning, 5, 29, 40))
    data = b"".join(chat_events(turn))
    out, stream = every_split_agrees(fresh, data)
    view = chat_view(out)
    assert view.reasoning == {0: "The user wants the weather.\n"}
    assert view.content == {0: "Checking."}
    assert not view.done
    assert stream.finding is not None
    assert (stream.finding.family, stream.finding.field) == ("kimi", "reasoning")
    assert stream.finding.start == len("The user wants the weather.\n")
    assert stream.leaked_text() == "Checking."  # the assistant turn's content, not its reasoning


def test_markup_in_reasoning_beside_a_real_call_is_released_ahead_of_the_call() -> None:
    reasoning = "Calling the tool.\n" + KIMI
    turn = Turn(reasoning=cut(reasoning, 18, 30), calls=(WEATHER,))
    events = chat_events(turn, usage=True)
    data = b"".join(events)
    out, stream = every_split_agrees(fresh, data)
    assert stream.finding is None
    view = chat_view(out)
    assert view.reasoning == {0: reasoning}
    assert view.calls == {0: {0: ["call_1", "get_weather", '{"city":"Lisbon"}']}}
    assert view.usage == [{"prompt_tokens": 31, "completion_tokens": 12, "total_tokens": 43}]
    # The held reasoning rides on the call's first chunk; every other chunk is the upstream's.
    first_call = 1 + len(turn.reasoning)
    held = chunks_of(events[first_call])[0]
    held["choices"][0]["delta"]["reasoning_content"] = KIMI
    released = out[: -len(b"".join(events[first_call + 1 :]))]
    assert out.endswith(b"".join(events[first_call + 1 :]))
    assert released.startswith(b"".join(events[:2]))  # the prose before the markup, unchanged
    assert chunks_of(released[len(b"".join(events[:2])) :]) == [held]


def test_usage_chunk_and_done_pass_unchanged_after_an_edit() -> None:
    turn = Turn(content=("Sunny.", "\n", "<b>21 °C</b>"))
    events = chat_events(turn, usage=True)
    out, stream = every_split_agrees(fresh, b"".join(events))
    assert stream.finding is None
    assert out.endswith(chat_usage_chunk() + CHAT_DONE)
    assert chat_view(out).content == {0: "Sunny.\n<b>21 °C</b>"}


def test_two_honest_choices_are_published_byte_for_byte() -> None:
    parts = [("Sunny", " and warm."), ("Clear ｜ skies", ", 21 °C.")]
    events = [chat_chunk({"role": "assistant", "content": ""}, i) for i in (0, 1)]
    for a, b in zip(*parts, strict=True):
        events += [chat_chunk({"content": a}, 0), chat_chunk({"content": b}, 1)]
    events += [chat_chunk({}, 0, "stop"), chat_chunk({}, 1, "stop"), CHAT_DONE]
    data = b"".join(events)
    out, stream = every_split_agrees(fresh, data)
    assert out == data
    assert chat_view(out).content == {0: "Sunny and warm.", 1: "Clear ｜ skies, 21 °C."}
    assert stream.finding is None and stream.can_splice is False


def test_a_leak_in_the_second_choice_stops_the_stream_and_cannot_splice() -> None:
    events = [chat_chunk({"role": "assistant", "content": ""}, i) for i in (0, 1)]
    events += [chat_chunk({"content": "Sunny."}, 0), chat_chunk({"content": DSML[:20]}, 1)]
    events += [chat_chunk({"content": DSML[20:]}, 1), chat_chunk({"content": " Warm."}, 0)]
    events += [chat_chunk({}, 0, "stop"), chat_chunk({}, 1, "stop"), CHAT_DONE]
    out, stream = every_split_agrees(fresh, b"".join(events))
    assert out == b"".join(events[:3])  # after the marker, nothing more of any choice
    assert stream.finding is not None
    assert (stream.finding.family, stream.finding.tool_name) == ("dsml", "get_weather")
    assert stream.finding_choice == 1
    assert stream.leaked_text() == ""  # the leaking choice wrote no prose
    assert stream.can_splice is False


# ---- a retry spliced into the client's stream ------------------------------------------------

RETRY_HEAD = {**CHAT_HEAD, "id": "chatcmpl-retry", "created": 1733000099, "model": "ds-2"}
PROSE = "Let me check that.\n"


def first_attempt(calls: tuple[Call, ...] = ()) -> ChatStream:
    """An attempt that published prose (and maybe a real call), then leaked."""
    events = [ROLE, chat_chunk({"content": PROSE})]
    for tool_index, call in enumerate(calls):
        events += chat_call_chunks(call, tool_index)
    events += [chat_chunk({"content": HERMES}), FINISH, CHAT_DONE]
    stream = fresh()
    drive(stream, [b"".join(events)])
    assert stream.finding is not None and stream.can_splice
    return stream


def test_argument_chunks_go_as_they_came_and_take_their_call_index() -> None:
    """Most of a call's chunks only add arguments. They are published unchanged, and their
    index is taken even for a call never named, so a splice would shift past it."""
    stray = chat_chunk(
        {"tool_calls": [{"index": 1, "type": "function", "function": {"arguments": "{}"}}]}
    )
    events = [ROLE, *chat_call_chunks(WEATHER, 0), stray]
    events += [chat_chunk({}, finish="tool_calls"), CHAT_DONE]
    out, stream = every_split_agrees(fresh, b"".join(events))
    assert out == b"".join(events)
    assert stream.finding is None
    assert stream.tool_next == {0: 2}
    assert stream.anomalies == []


def test_argument_chunks_read_by_their_bytes_go_as_they_came() -> None:
    """A call's argument chunks are read by their bytes once one has been parsed (a plain
    piece teaches the call's shape), fed a read each as a paced stream is, or together."""

    def call(number: int, name: str, pieces: list[str]) -> list[bytes]:
        first = {"index": number, "id": f"call_{number}", "type": "function"}
        first["function"] = {"name": name, "arguments": ""}
        out = [chat_chunk({"tool_calls": [first]})]
        for piece in pieces:
            args = {"index": number, "function": {"arguments": piece}}
            out.append(chat_chunk({"tool_calls": [args]}))
        return out

    events = [ROLE, *call(0, "get_weather", ["{", '"city"', ": ", "Lis", '"', "}"])]
    events += [*call(1, "get_weather", ["{", "}"]), chat_chunk({}, finish="tool_calls")]
    events.append(CHAT_DONE)
    for reads in (events, [b"".join(events)]):
        stream = fresh()
        assert drive(stream, reads) == b"".join(events)
        assert stream._call_shape is not None  # read by their bytes
        assert stream.tool_next == {0: 2}
        assert stream.anomalies == []
        assert stream.finding is None


def test_argument_chunks_in_a_row_in_one_read_go_out_together_as_sent() -> None:
    """Once the call's shape is known, the argument chunks that follow it in one read are read
    in one loop and go out as one piece: the upstream's bytes, with the call's index taken."""
    args = json.dumps({"path": "notes.md", "content": 'A "quoted" line\nand more.\n' * 8})
    pieces = [args[i : i + 5] for i in range(0, len(args), 5)]
    named = chat_call_chunks(Call("write_file", "", "call_7"), 0)
    chunks = [
        chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}) for p in pieces
    ]
    events = [ROLE, *named, *chunks, chat_chunk({}, finish="tool_calls"), CHAT_DONE]
    stream = fresh()
    outs = stream.feed_all(decode(b"".join(events)))
    # The first piece with nothing JSON escapes teaches the shape; those after it are read by it.
    taught = next(n for n, p in enumerate(pieces) if json.dumps(p) == f'"{p}"')
    assert b"".join(chunks[taught + 1 :]) in [out.data for out in outs]
    assert b"".join(out.data for out in outs) + stream.trailer == b"".join(events)
    assert stream.tool_next == {0: 1}
    assert stream.finding is None
    assert chat_view(b"".join(events)).calls == {0: {0: ["call_7", "write_file", args]}}


def test_a_splice_keeps_the_first_id_and_sends_no_second_role_chunk() -> None:
    retry = b"".join(chat_events(Turn(calls=(WEATHER,)), head=RETRY_HEAD))
    out, stream = every_split_agrees(lambda: new_stream(TOOLS, HOLD, first_attempt()), retry)
    assert stream.finding is None
    chunks = chunks_of(out)
    assert {(c["id"], c["created"], c["model"]) for c in chunks} == {
        (CHAT_HEAD["id"], CHAT_HEAD["created"], CHAT_HEAD["model"])
    }
    view = chat_view(out)
    assert view.roles == 0
    assert view.calls == {0: {0: ["call_1", "get_weather", '{"city":"Lisbon"}']}}
    assert view.finish == {0: "tool_calls"}
    assert out.endswith(CHAT_DONE)


def test_a_splice_shifts_tool_indices_past_the_calls_already_sent() -> None:
    earlier = Call("run_in_terminal", '{"command":"date"}', "call_0")
    retry = b"".join(chat_events(Turn(content=("Here:",), calls=(WEATHER,)), head=RETRY_HEAD))
    previous = first_attempt((earlier,))
    assert previous.tool_next == {0: 1}
    out, stream = every_split_agrees(
        lambda: new_stream(TOOLS, HOLD, first_attempt((earlier,))), retry
    )
    view = chat_view(out)
    assert view.calls == {0: {1: ["call_1", "get_weather", '{"city":"Lisbon"}']}}
    assert view.content == {0: "Here:"}
    assert view.roles == 0 and view.ids == {CHAT_HEAD["id"]}
    assert stream.tool_next == {0: 2}


def before_the_end(stream: ChatStream, data: bytes, one_by_one: bool) -> bytes:
    """What the editor publishes of `data` while the upstream's body has not ended."""
    events = decode(data)
    outs = [o for e in events for o in stream.feed(e)] if one_by_one else stream.feed_all(events)
    return b"".join(o.data for o in outs)


def test_done_goes_out_when_it_comes_not_at_the_end_of_the_body() -> None:
    """An upstream may end its body a while after [DONE] (the bench's paced upstream, one delta
    later): [DONE] goes out as it comes, every split agreeing, and the end adds nothing."""
    data = b"".join(chat_events(Turn(content=("It is sunny", " in Lisbon."))))
    assert data.endswith(CHAT_DONE)
    every_split_agrees(fresh, data)
    for one_by_one in (False, True):
        stream = fresh()
        assert before_the_end(stream, data, one_by_one) == data
        assert stream.ended and stream.finish() == [] and stream.trailer == b""


def test_text_held_when_done_comes_goes_out_before_it() -> None:
    # No finish_reason: the choice is settled at [DONE], its held "<tool" released first.
    held = chat_chunk({"content": "Compare a and b <tool"})
    for one_by_one in (False, True):
        stream = fresh()
        assert b"<tool" not in before_the_end(stream, ROLE + held, one_by_one)
        out = before_the_end(stream, CHAT_DONE, one_by_one)
        assert out.endswith(CHAT_DONE) and chunks_of(out)[0]["choices"][0]["delta"] == {
            "content": "<tool"
        }
        assert stream.finding is None and stream.finish() == [] and stream.trailer == b""


def test_a_leak_settled_at_done_keeps_done_back_for_a_repair() -> None:
    # A call written as a JSON blob is a finding only once the turn is over: at [DONE] here.
    blob = '{"name": "get_weather", "arguments": {"city": "Lisbon"}}'
    for one_by_one in (False, True):
        stream = fresh()
        before_the_end(stream, ROLE + chat_chunk({"content": blob}), one_by_one)
        assert not stream.certain
        assert before_the_end(stream, CHAT_DONE, one_by_one) == b""
        assert stream.certain and stream.ended and stream.trailer == CHAT_DONE


def test_what_comes_after_done_goes_as_it_came_unread() -> None:
    """Clients take [DONE] as the end: what an upstream sends after it is not judged (it could
    only start a retry the client would never show), and goes out as it came."""
    data = b"".join(chat_events(Turn(content=("It is sunny.",))))
    data += chat_chunk({"content": "Let me check.\n" + HERMES}) + b": bye\n\n"
    out, stream = every_split_agrees(fresh, data)
    assert out == data and stream.finding is None
    assert before_the_end(fresh(), data, one_by_one=True) == data

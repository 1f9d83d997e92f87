"""Repair on the Chat Completions wire, sans-IO: the whole reply written from the upstream's
bytes, and the stream fed bytes at every chunk boundary, the markup replaced by tool-call deltas.

A stream is driven as the proxy drives a repairable leak: published until the finding, read to
its end, then `markup` -> `read_calls` -> `repair`. Every cut of the bytes must publish the same
client stream (tool-call ids aside: they are fresh per repair) and the same calls.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import pytest

from spillguard.chat import WIRE, ChatStream, inspect_reply, new_stream
from spillguard.chat_repair import call_id
from spillguard.detect import Call, read_calls
from tests.fuzz.chat_bytes import (
    CHAT_DONE,
    CHAT_HEAD,
    USAGE,
    chat_call_chunks,
    chat_chunk,
    chat_usage_chunk,
    chat_view,
)
from tests.fuzz.wire_bytes import HOLD, TOOLS, cut, decode, drive, every_split
from tests.fuzz.wire_bytes import Call as Structured
from tests.samples import DSML, HERMES
from tests.test_repair_sdk import FAMILIES

BLOBS = ("json", "pythonic")  # a call that is the whole answer: no prose before it

CALL_ID = re.compile(r"call_[0-9a-f]{24}")
LISBON = Call("get_weather", '{"city":"Lisbon"}')
LS = Call("run_in_terminal", '{"command":"ls -la"}')
TWO = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lisbon"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "run_in_terminal", "arguments": {"command": "ls -la"}}\n</tool_call>'
)
PROSE = "Let me check the forecast.\n"


def repaired(stream: ChatStream, pieces: Iterable[bytes]) -> tuple[bytes, tuple[Call, ...]]:
    """What the client gets: the published stream, then the repair (which must happen)."""
    out = drive(stream, pieces)
    assert stream.finding is not None and stream.markup is not None
    calls = read_calls(stream.markup, stream.finding.family, TOOLS)
    assert calls is not None
    outs = stream.repair(calls)
    assert outs is not None
    return out + b"".join(o.data for o in outs), calls


def unrepaired(stream: ChatStream, pieces: Iterable[bytes]) -> None:
    """The leak is certain, but nothing can be repaired: the decision retries."""
    drive(stream, pieces)
    assert stream.finding is not None
    markup = stream.markup
    calls = read_calls(markup, stream.finding.family, TOOLS) if markup is not None else None
    assert calls is None or stream.repair(calls) is None


def without_ids(data: bytes) -> bytes:
    return CALL_ID.sub("call_ID", data.decode()).encode()


def every_cut_repairs(data: bytes) -> tuple[bytes, tuple[Call, ...]]:
    """Every split of `data` repairs into the same client stream and calls; the unsplit one."""
    whole, calls = repaired(new_stream(TOOLS, HOLD, None), [data])
    for pieces in every_split(data):
        got, got_calls = repaired(new_stream(TOOLS, HOLD, None), pieces)
        assert (without_ids(got), got_calls) == (without_ids(whole), calls), len(pieces[0])
    return whole, calls


def leak(
    content: tuple[str, ...], usage: bool = False, finish: str = "stop", head: Any = CHAT_HEAD
) -> list[bytes]:
    out = [chat_chunk({"role": "assistant", "content": ""}, usage=usage, head=head)]
    out += [chat_chunk({"content": c}, usage=usage, head=head) for c in content]
    out.append(chat_chunk({}, finish=finish, usage=usage, head=head))
    if usage:
        out.append(chat_usage_chunk(head))
    return [*out, CHAT_DONE]


def test_call_ids_are_call_and_24_hex_and_fresh() -> None:
    ids = {call_id() for _ in range(100)}
    assert len(ids) == 100 and all(CALL_ID.fullmatch(i) for i in ids)


# ---- streams -----------------------------------------------------------------------------------


def test_prose_then_markup_becomes_the_prose_and_one_call_at_every_cut() -> None:
    events = leak(cut(PROSE + HERMES, 9, 27, 40, 61), usage=True)
    data, calls = every_cut_repairs(b"".join(events))
    assert calls == (LISBON,)
    view = chat_view(data)
    assert view.content == {0: PROSE}
    assert view.roles == 1 and view.done and view.ids == {CHAT_HEAD["id"]}
    [(call_id_, name, arguments)] = view.calls[0].values()
    assert CALL_ID.fullmatch(call_id_) and (name, arguments) == ("get_weather", LISBON.arguments)
    assert list(view.calls[0]) == [0]
    assert view.finish == {0: "tool_calls"}
    assert view.usage == [USAGE]
    # The usage chunk and [DONE] are the upstream's own bytes, last and in order.
    assert data.endswith(events[-2] + events[-1])
    assert "tool_call>" not in "".join(view.content.values())


def test_the_tool_call_deltas_are_shaped_as_clients_expect() -> None:
    data, _ = repaired(new_stream(TOOLS, HOLD, None), leak(cut(HERMES, 30), usage=True))
    chunks = [json.loads(e.data) for e in decode(data) if e.data and e.data != "[DONE]"]
    deltas = [c for c in chunks if c["choices"] and "tool_calls" in c["choices"][0]["delta"]]
    first, rest = deltas[0]["choices"][0]["delta"]["tool_calls"][0], deltas[1:]
    assert set(first) == {"index", "id", "type", "function"} and first["type"] == "function"
    assert first["function"] == {"name": "get_weather", "arguments": ""}
    for chunk in rest:  # later fragments: the index and argument text only
        [piece] = chunk["choices"][0]["delta"]["tool_calls"]
        assert set(piece) == {"index", "function"} and set(piece["function"]) == {"arguments"}
    for chunk in deltas:  # every other field as the upstream's chunks carry them
        assert {k: chunk[k] for k in CHAT_HEAD} == CHAT_HEAD
        assert chunk["usage"] is None and chunk["choices"][0]["finish_reason"] is None
    finish = chunks[-2]
    assert finish["choices"] == [
        {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "tool_calls"}
    ]
    assert finish["system_fingerprint"] == CHAT_HEAD["system_fingerprint"]


def test_two_calls_in_one_leak_get_indices_0_and_1_and_distinct_ids() -> None:
    data, calls = every_cut_repairs(b"".join(leak(cut(TWO, 50, 100))))
    assert calls == (LISBON, LS)
    view = chat_view(data)
    assert sorted(view.calls[0]) == [0, 1]
    assert [view.calls[0][i][1:] for i in (0, 1)] == [
        ["get_weather", LISBON.arguments],
        ["run_in_terminal", LS.arguments],
    ]
    assert len({view.calls[0][i][0] for i in (0, 1)}) == 2
    assert view.content == {} and view.finish == {0: "tool_calls"}


def test_other_families_repair_the_same_way() -> None:
    data, calls = every_cut_repairs(b"".join(leak(cut(DSML, 20, 70))))
    assert calls == (LISBON,) and chat_view(data).finish == {0: "tool_calls"}


def test_markup_and_finish_in_one_chunk() -> None:
    """Prose, the whole markup and finish_reason in a single chunk: the prose goes out, the
    finish is the repair's."""
    events = [
        chat_chunk({"role": "assistant", "content": ""}),
        chat_chunk({"content": PROSE + HERMES}, finish="stop"),
        CHAT_DONE,
    ]
    data, calls = repaired(new_stream(TOOLS, HOLD, None), events)
    view = chat_view(data)
    assert calls == (LISBON,) and view.content == {0: PROSE}
    assert view.finish == {0: "tool_calls"} and len(view.calls[0]) == 1


def test_a_whole_answer_that_is_a_json_call_is_repaired_at_its_finish() -> None:
    body = '{"name": "get_weather", "arguments": {"city": "Lisbon"}}'
    data, calls = every_cut_repairs(b"".join(leak(cut(body, 10, 30))))
    assert calls == (LISBON,) and chat_view(data).content == {}


def test_usage_on_the_finishing_chunk_is_kept_once() -> None:
    events = leak(cut(HERMES, 25), usage=True)
    last = json.loads(events[-3][6:])  # the finish chunk carries the usage itself
    last["usage"] = USAGE
    events[-3] = b"data: " + json.dumps(last).encode() + b"\n\n"
    del events[-2]
    data, _ = repaired(new_stream(TOOLS, HOLD, None), events)
    assert chat_view(data).usage == [USAGE]


def test_a_stream_that_made_structured_calls_already_is_not_repaired() -> None:
    # The retry answers it: a repair beside the model's own call could break
    # parallel_tool_calls: false, and which of the two the model meant is not the text's to say.
    before = chat_call_chunks(Structured("run_in_terminal", '{"command":"pwd"}'), 0)
    events = [chat_chunk({"role": "assistant", "content": ""}), *before]
    events += leak(cut(HERMES, 20))[1:]
    unrepaired(new_stream(TOOLS, HOLD, None), events)


# ---- streams that are not repaired --------------------------------------------------------------


def test_prose_after_the_markup_is_not_repaired() -> None:
    unrepaired(new_stream(TOOLS, HOLD, None), leak(cut(HERMES + "\nDone.", 30)))


def test_reasoning_after_the_markup_is_not_repaired() -> None:
    events = leak(cut(HERMES, 30))
    events.insert(-2, chat_chunk({"reasoning_content": "hmm"}))
    unrepaired(new_stream(TOOLS, HOLD, None), events)


def test_an_error_event_after_the_markup_is_not_repaired() -> None:
    events = leak(cut(HERMES, 30))
    events.insert(-2, b'data: {"error": {"message": "overloaded"}}\n\n')
    unrepaired(new_stream(TOOLS, HOLD, None), events)


def test_a_stream_without_a_finish_is_not_repaired() -> None:
    events = leak(cut(HERMES, 30))
    del events[-2]
    unrepaired(new_stream(TOOLS, HOLD, None), events)


def test_two_choices_are_not_repaired() -> None:
    events = leak(cut(HERMES, 30))
    events.insert(1, chat_chunk({"content": "Hello."}, index=1))
    unrepaired(new_stream(TOOLS, HOLD, None), events)


def test_a_second_choice_in_the_finding_chunk_is_not_repaired() -> None:
    body = {**CHAT_HEAD, "choices": [{"index": 0, "delta": {"content": HERMES}}, {"index": 1}]}
    events = [b"data: " + json.dumps(body).encode() + b"\n\n", chat_chunk({}, finish="stop")]
    unrepaired(new_stream(TOOLS, HOLD, None), [*events, CHAT_DONE])


def test_markup_in_reasoning_is_not_repaired() -> None:
    events = [chat_chunk({"reasoning_content": r}) for r in cut(HERMES, 20)]
    unrepaired(new_stream(TOOLS, HOLD, None), [*events, chat_chunk({}, finish="stop"), CHAT_DONE])


def test_a_spliced_retry_is_not_repaired() -> None:
    first = new_stream(TOOLS, HOLD, None)
    drive(first, leak(cut(PROSE + HERMES, 30)))
    unrepaired(new_stream(TOOLS, HOLD, first), leak(cut(PROSE + HERMES, 30)))


# ---- whole replies -----------------------------------------------------------------------------

# An upstream's reply, written the way providers write it: spacing, an unknown field with an
# unusual number spelling, and unescaped UTF-8 that must survive byte for byte.
REPLY = (
    '{"id": "chatcmpl-9", "object": "chat.completion", "created": 1733000000, '
    '"model": "deepseek-chät", "x_vendor": {"score": 1.50E+2, "tag": "ñ"}, '
    '"choices": [{"index": 0, "message": {"role": "assistant", "content": CONTENT, '
    '"reasoning_content": "Thinking…"}, "logprobs": LOGPROBS, "finish_reason": "stop"}], '
    '"usage": {"prompt_tokens": 31, "completion_tokens": 12, "total_tokens": 43}}'
)


def reply_bytes(content: str, logprobs: str = "null") -> bytes:
    text = REPLY.replace("CONTENT", json.dumps(content, ensure_ascii=False))
    return text.replace("LOGPROBS", logprobs).encode()


def repair_whole(raw: bytes) -> bytes | None:
    parsed = json.loads(raw)
    found = inspect_reply(parsed, TOOLS, HOLD)
    assert found is not None
    markup = WIRE.reply_markup(parsed, found[0])
    calls = read_calls(markup, found[0].family, TOOLS) if markup is not None else None
    if calls is None:
        return None
    assert WIRE.repair_reply is not None
    return WIRE.repair_reply(raw, parsed, found[0], found[1], calls)


def test_a_whole_reply_gets_tool_calls_and_keeps_every_other_field_byte_for_byte() -> None:
    raw = reply_bytes(PROSE + TWO, logprobs='{"content": [{"token": "<"}]}')
    out = repair_whole(raw)
    assert out is not None
    head, tail = raw.split(b'"choices": ')[0], raw.split(b"}], ")[-1]
    assert out.startswith(head) and out.endswith(b"], " + tail)
    reply = json.loads(out)
    [choice] = reply["choices"]
    assert choice["finish_reason"] == "tool_calls" and choice["logprobs"] is None
    message = choice["message"]
    assert message["content"] == PROSE and message["reasoning_content"] == "Thinking…"
    calls = message["tool_calls"]
    assert [c["function"] for c in calls] == [
        {"name": c.name, "arguments": c.arguments} for c in (LISBON, LS)
    ]
    assert all(c["type"] == "function" and CALL_ID.fullmatch(c["id"]) for c in calls)
    assert calls[0]["id"] != calls[1]["id"]


def test_a_whole_reply_without_prose_has_null_content() -> None:
    out = repair_whole(reply_bytes(HERMES))
    assert out is not None
    assert json.loads(out)["choices"][0]["message"]["content"] is None


def test_a_whole_reply_that_made_calls_already_is_not_repaired() -> None:
    parsed = json.loads(reply_bytes(HERMES))
    made = {"id": "call_0", "type": "function", "function": {"name": "x", "arguments": "{}"}}
    parsed["choices"][0]["message"]["tool_calls"] = [made]
    assert repair_whole(json.dumps(parsed).encode()) is None


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param({"choices": [{"message": {"content": HERMES}}] * 2}, id="two-choices"),
        pytest.param(
            {"choices": [{"message": {"content": HERMES, "function_call": {"name": "x"}}}]},
            id="legacy-function-call",
        ),
    ],
)
def test_whole_replies_that_cannot_carry_calls(reply: dict[str, Any]) -> None:
    assert WIRE.repair_reply is not None
    found = inspect_reply(reply, TOOLS, HOLD)
    assert found is not None
    raw = json.dumps(reply).encode()
    assert WIRE.repair_reply(raw, reply, found[0], found[1], (LISBON,)) is None


def test_a_whole_reply_with_markup_in_reasoning_has_no_markup_to_repair() -> None:
    reply = {"choices": [{"message": {"content": None, "reasoning_content": HERMES}}]}
    found = inspect_reply(reply, TOOLS, HOLD)
    assert found is not None and found[0].field == "reasoning"
    assert WIRE.reply_markup(reply, found[0]) is None


def test_stream_and_whole_reply_make_the_same_calls() -> None:
    for text in (PROSE + HERMES, TWO, DSML):
        whole = repair_whole(reply_bytes(text))
        assert whole is not None
        message = json.loads(whole)["choices"][0]["message"]
        data, _ = repaired(new_stream(TOOLS, HOLD, None), leak(cut(text, 17)))
        view = chat_view(data)
        assert [c["function"]["name"] for c in message["tool_calls"]] == [
            v[1] for v in view.calls[0].values()
        ]
        assert [c["function"]["arguments"] for c in message["tool_calls"]] == [
            v[2] for v in view.calls[0].values()
        ]
        assert (message["content"] or "") == view.content.get(0, "")


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("size", [1, 3, 11])
def test_every_family_streamed_in_any_delta_size_makes_the_whole_replys_calls(
    family: str, size: int
) -> None:
    text = PROSE + FAMILIES[family] if family not in BLOBS else FAMILIES[family]
    whole = repair_whole(reply_bytes(text))
    assert whole is not None
    message = json.loads(whole)["choices"][0]["message"]
    deltas = tuple(text[i : i + size] for i in range(0, len(text), size))
    data, _ = repaired(new_stream(TOOLS, HOLD, None), leak(deltas, usage=True))
    view = chat_view(data)
    made = [[c["function"]["name"], c["function"]["arguments"]] for c in message["tool_calls"]]
    assert [v[1:] for v in view.calls[0].values()] == made
    assert (message["content"] or "") == view.content.get(0, "")
    assert view.finish == {0: "tool_calls"} and view.usage == [USAGE]

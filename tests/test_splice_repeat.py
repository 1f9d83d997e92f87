"""A spliced retry that restates the prose the client already has (issue 12, item 2): the
restatement is dropped, in a chat splice and in a Responses splice, with the retry's bytes fed
whole, cut once at every byte and one byte at a time. A retry that does not restate the prose
is spliced as before."""

from __future__ import annotations

from typing import Any

from spillguard import chat, responses
from tests.fuzz.chat_bytes import CHAT_DONE, CHAT_HEAD, chat_chunk, chat_events, chat_view
from tests.fuzz.responses_bytes import (
    RESPONSE,
    ResponsesWriter,
    completed_texts,
    responses_events,
    responses_view,
    well_formed,
)
from tests.fuzz.wire_bytes import HOLD, TOOLS, WEATHER, Turn, cut, drive, every_split_agrees
from tests.samples import HERMES

PROSE = "Let me check the weather.\n"


# ---- Chat Completions ------------------------------------------------------------------------


def chat_first() -> chat.ChatStream:
    events = [chat_chunk({"role": "assistant", "content": ""}), chat_chunk({"content": PROSE})]
    events += [chat_chunk({"content": HERMES}), chat_chunk({}, finish="stop"), CHAT_DONE]
    stream = chat.new_stream(TOOLS, HOLD, None)
    drive(stream, [b"".join(events)])
    assert stream.leaked_text() == PROSE
    return stream


def chat_spliced(turn: Turn) -> tuple[bytes, chat.ChatStream]:
    head = {**CHAT_HEAD, "id": "chatcmpl-retry"}
    retry = b"".join(chat_events(turn, head=head))
    return every_split_agrees(lambda: chat.new_stream(TOOLS, HOLD, chat_first()), retry)


def test_chat_a_retry_restating_the_prose_sends_it_once_then_the_call() -> None:
    out, stream = chat_spliced(Turn(content=cut(PROSE, 3, 11), calls=(WEATHER,)))
    assert stream.finding is None
    view = chat_view(out)
    assert view.content == {}  # the client already has PROSE: nothing more of it
    assert view.calls == {0: {0: ["call_1", "get_weather", '{"city":"Lisbon"}']}}
    assert view.roles == 0 and view.ids == {CHAT_HEAD["id"]}
    assert stream.leaked_text() == ""


def test_chat_a_retry_restating_the_prose_then_answering_sends_only_the_answer() -> None:
    answer = "It is sunny, 21 °C."
    out, _ = chat_spliced(Turn(content=("\n", *cut(PROSE + answer, 5, 26))))
    assert chat_view(out).content == {0: answer}


def test_chat_a_retry_that_says_something_else_is_spliced_whole() -> None:
    text = "Let me check the forecast instead.\nIt is sunny."
    out, _ = chat_spliced(Turn(content=cut(text, 7, 30)))
    assert chat_view(out).content == {0: text}


# ---- Responses -------------------------------------------------------------------------------

RETRY = {**RESPONSE, "id": "resp_retry_2", "created_at": 1741476999}


def responses_first() -> tuple[bytes, responses.ResponsesStream]:
    stream = responses.new_stream(TOOLS, HOLD, None)
    out = drive(stream, [b"".join(responses_events(Turn(content=(PROSE, *cut(HERMES, 9)))))])
    assert stream.leaked_text() == PROSE
    return out, stream


def retry_events(text: tuple[str, ...], calls: bool) -> tuple[bytes, list[dict[str, Any]]]:
    writer = ResponsesWriter(response=RETRY)
    writer.start()
    output = [writer.message(0, text, item_id="msg_2")] if text else []
    if calls:
        output.append(writer.function_call(len(output), WEATHER))
    writer.complete(output)
    return b"".join(writer.events), output


def responses_spliced(text: tuple[str, ...], calls: bool) -> Any:
    before, _ = responses_first()
    retry, _ = retry_events(text, calls)
    out, stream = every_split_agrees(
        lambda: responses.new_stream(TOOLS, HOLD, responses_first()[1]), retry
    )
    assert stream.finding is None
    view = responses_view(before + out)
    well_formed(view)
    return view, stream


def test_responses_a_message_that_only_restates_the_prose_is_never_sent() -> None:
    view, stream = responses_spliced(cut(PROSE, 4, 12), calls=True)
    assert view.text == {0: PROSE}
    assert [i["type"] for i in view.added.values()] == ["message", "function_call"]
    assert view.added[1]["name"] == "get_weather"  # right after the client's message
    assert view.closed[1]["arguments"] == '{"city":"Lisbon"}'
    completed = view.completed
    assert completed is not None
    assert [i["type"] for i in completed["output"]] == ["message", "function_call"]
    assert completed_texts(completed) == (PROSE, "")
    assert completed["id"] == RESPONSE["id"]
    spliced = responses.spliced(stream)
    assert spliced is not None
    assert (spliced.response_id, spliced.upstream_id) == (RESPONSE["id"], RETRY["id"])
    assert set(spliced.items) == {"msg_1"}
    assert spliced.items["msg_1"]["content"][0]["text"] == PROSE


def test_responses_a_restatement_then_an_answer_is_trimmed_everywhere() -> None:
    answer = "It is sunny, 21 °C."
    view, _ = responses_spliced(cut(PROSE + answer, 6, 27), calls=False)
    assert view.text == {0: PROSE, 1: answer}
    assert view.done_text == {0: PROSE, 1: answer}
    assert view.closed[1]["content"][0]["text"] == answer
    completed = view.completed
    assert completed is not None
    assert [i["id"] for i in completed["output"]] == ["msg_1", "msg_2"]
    assert completed_texts(completed) == (PROSE + answer, "")


def test_responses_a_retry_that_says_something_else_is_spliced_whole() -> None:
    text = "Let me check the forecast instead.\n"
    view, _ = responses_spliced(cut(text, 9), calls=True)
    assert view.text == {0: PROSE, 1: text}
    completed = view.completed
    assert completed is not None
    assert [i["type"] for i in completed["output"]] == ["message", "message", "function_call"]
    assert completed_texts(completed) == (PROSE + text, "")

"""`Wire.retry_request`: spliced into the client's bytes, else the parsed body written out again,
its unread values (`jsonread.loads_leaving`) read as a whole parse would have read them. And
`Stream.closed` on the named-event wires (Messages, Responses): the client has had the stream's
end exactly when the end's event went out, as chat's `[DONE]` (tests/test_chat_stream.py)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from spillguard import chat, messages, messages_stream, responses_stream
from spillguard.jsonread import LEAVE_FROM, Unread, loads_leaving
from spillguard.wire import Stream, Wire
from tests.fuzz.messages_bytes import messages_events
from tests.fuzz.responses_bytes import responses_events
from tests.fuzz.wire_bytes import HOLD, TOOLS, Turn, fed_before_the_end
from tests.samples import HERMES

LONG = {
    "model": "m",
    "system": "Be brief. " * (LEAVE_FROM // 10),
    "messages": [{"role": "user", "content": "Weather?"}],
    "tools": [{"type": "function", "function": {"name": "get_weather"}}],
    "n": 1.5,
}
RAW = json.dumps(LONG).encode()
ADDED = [
    {"role": "assistant", "content": "One moment."},
    {"role": "user", "content": "Call the tool."},
]


@pytest.mark.parametrize("wire", [chat.WIRE, messages.WIRE], ids=["chat", "messages"])
def test_a_long_request_s_retry_is_spliced_into_its_bytes(wire: Wire) -> None:
    body = loads_leaving(RAW, wire.unread)
    assert type(body["messages"]) is Unread
    out = wire.retry_request(RAW, body, "One moment.", "Call the tool.")
    assert out.startswith(RAW[: RAW.index(b"}]")])
    assert json.loads(out) == {**LONG, "messages": [*LONG["messages"], *ADDED]}


@pytest.mark.parametrize("wire", [chat.WIRE, messages.WIRE], ids=["chat", "messages"])
def test_a_retry_written_out_again_reads_the_values_left_unread(wire: Wire) -> None:
    body = loads_leaving(RAW, wire.unread)
    # Bytes where no `messages` can be found: the parsed body is written out instead.
    out = wire.retry_request(b"not the body", body, "One moment.", "Call the tool.")
    assert json.loads(out) == {**LONG, "messages": [*LONG["messages"], *ADDED]}
    assert list(json.loads(out)) == list(LONG)  # in the client's order


@pytest.mark.parametrize("wire", [chat.WIRE, messages.WIRE], ids=["chat", "messages"])
def test_a_long_request_without_a_messages_array_has_no_retry(wire: Wire) -> None:
    raw = json.dumps({**LONG, "messages": "hi"}).encode()
    with pytest.raises(TypeError):
        wire.retry_request(raw, loads_leaving(raw, wire.unread), "x", "y")


# ---- Stream.closed ---------------------------------------------------------------------------

KIMI = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>{"city": "Lisbon"}<|tool_call_end|><|tool_calls_section_end|>'
)
Events = Callable[[Turn], list[bytes]]
WIRES = [
    pytest.param(messages_stream.new_stream, messages_events, b"message_stop", id="messages"),
    pytest.param(
        responses_stream.new_stream, responses_events, b"response.completed", id="responses"
    ),
]


@pytest.mark.parametrize(("new", "events", "end"), WIRES)
def test_closed_once_the_end_has_gone_out(
    new: Callable[..., Stream], events: Events, end: bytes
) -> None:
    """`closed` says the client has the stream's end, so a failure reading the rest of the
    upstream's body adds no error event after it (an SDK would raise on one)."""
    sent = events(Turn(content=("Sunny", " in Lisbon.")))
    stream = new(TOOLS, HOLD, None)
    assert end in sent[-1]
    assert fed_before_the_end(stream, b"".join(sent[:-1])) == b"".join(sent[:-1])
    assert not stream.closed
    assert fed_before_the_end(stream, sent[-1]) == sent[-1]
    assert stream.closed


@pytest.mark.parametrize(("new", "events", "end"), WIRES)
def test_not_closed_when_the_end_is_kept_back(
    new: Callable[..., Stream], events: Events, end: bytes
) -> None:
    """A leak found keeps the end back (for the retry or the error), and so does markup in the
    reasoning at the end, which is a finding: not closed."""
    thought = Turn(content=("Checking.",), reasoning=("The user wants the weather.\n", KIMI))
    for turn in (Turn(("Let me check that.\n", HERMES)), thought):
        stream = new(TOOLS, HOLD, None)
        out = fed_before_the_end(stream, b"".join(events(turn)))
        assert stream.certain and end not in out and not stream.closed

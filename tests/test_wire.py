"""`Stream.closed` on the named-event wires (Messages, Responses): the client has had the
stream's end exactly when the end's event went out, as chat's `[DONE]` (tests/test_chat_stream.py).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from spillguard import messages_stream, responses_stream
from spillguard.wire import Stream
from tests.fuzz.messages_bytes import messages_events
from tests.fuzz.responses_bytes import responses_events
from tests.fuzz.wire_bytes import HOLD, TOOLS, Turn, fed_before_the_end
from tests.samples import HERMES

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

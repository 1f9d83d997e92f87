"""`Wire.retry_request`: spliced into the client's bytes, else the parsed body written out again,
its unread values (`jsonread.loads_leaving`) read as a whole parse would have read them."""

from __future__ import annotations

import json

import pytest

from spillguard import chat, messages
from spillguard.jsonread import LEAVE_FROM, Unread, loads_leaving
from spillguard.wire import Wire

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

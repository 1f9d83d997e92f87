"""Review: a reply the upstream did not end as a turn (cut at max tokens, stopped by a content
filter) is turned into tool calls on Chat and Messages, while Responses retries such a reply
(`responses_repair.repair_reply`: "incomplete or failed: not a turn"). Each test is a defect
found in review, fixed since; each test now holds the fix."""

from __future__ import annotations

import json
from typing import Any

import pytest

from spillguard import chat, messages, messages_repair
from spillguard.detect import declared_tools, read_calls
from spillguard.messages_stream import new_stream
from spillguard.scripted import Raw
from tests.conftest import chat_body
from tests.fuzz.messages_bytes import MessagesWriter
from tests.fuzz.wire_bytes import HOLD, TOOLS
from tests.repair_wires import REPAIR, repaired_stream, whole_repair

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}}
CHAT = {"tools": [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]}
LEAK = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lisbon"}}\n</tool_call>'
SSE = {"content-type": "text/event-stream"}


def chat_whole(finish: str) -> dict[str, Any] | None:
    body = {"model": "m", "messages": [], **CHAT}
    message = {"role": "assistant", "content": LEAK}
    reply = {"id": "c", "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
    raw = whole_repair(chat.WIRE, body, reply)
    return None if raw is None else json.loads(raw)


@pytest.mark.parametrize("finish", ["length", "content_filter"])
def test_a_chat_reply_that_did_not_end_its_turn_is_not_repaired(finish: str) -> None:
    assert chat_whole(finish) is None


@pytest.mark.parametrize("stop", ["max_tokens", "refusal"])
def test_a_message_that_did_not_end_its_turn_is_not_repaired(stop: str) -> None:
    tools = declared_tools({"tools": [{"name": "get_weather", "input_schema": WEATHER}]})
    reply = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": LEAK}],
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 4},
    }
    found = messages.inspect_reply(reply, tools, REPAIR.hold_limit)
    assert found is not None
    finding, prose = found
    markup = messages_repair.reply_markup(reply, finding)
    assert markup is not None
    calls = read_calls(markup, finding.family, tools)
    assert calls is not None
    assert (
        messages_repair.repair_reply(json.dumps(reply).encode(), reply, finding, prose, calls)
        is None
    )


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    data = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    return b"data: " + json.dumps({**data, "choices": [choice]}).encode() + b"\n\n"


async def test_a_chat_stream_cut_at_max_tokens_is_not_repaired(harness: Any) -> None:
    events = [
        chunk({"role": "assistant", "content": LEAK}),
        chunk({}, "length"),
        b"data: [DONE]\n\n",
    ]
    h = await harness(Raw(headers=SSE, chunks=events), mode="repair")
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body(stream=True))
    assert r.headers.get("x-spillguard-action") != "repaired"
    assert '"finish_reason": "length"' in r.text or h.calls == 2


def test_a_messages_stream_cut_at_max_tokens_is_not_repaired() -> None:
    writer = MessagesWriter()
    writer.start()
    writer.text([LEAK])
    writer.end("max_tokens")
    _, tail = repaired_stream(new_stream(TOOLS, HOLD, None), [b"".join(writer.events)])
    assert tail is None  # retried, as a Responses stream that did not complete is

"""Review: `parallel_tool_calls: false` allows one call in the reply, yet a repair beside a
call the model made as structured output adds a second (repair.py counts only the repaired
calls). Fixed since; the tests hold the fix."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from spillguard import chat
from spillguard.detect import declared_tools
from spillguard.policy import Policy
from spillguard.repair import repair_calls
from spillguard.scripted import Raw
from spillguard.settings import Mode, Settings
from tests.conftest import chat_body

POLICY = replace(Policy.of(Settings(upstream="http://127.0.0.1:9/v1")), mode=Mode.REPAIR)
LEAK = '<tool_call>\n{"name": "run_in_terminal", "arguments": {"command": "ls"}}\n</tool_call>'
REAL: dict[str, Any] = {
    "id": "call_real",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Porto"}'},
}
SSE = {"content-type": "text/event-stream"}


def test_a_whole_reply_with_a_call_already_gets_no_second_one() -> None:
    body = chat_body(parallel_tool_calls=False)
    tools = declared_tools(body)
    message = {"role": "assistant", "content": LEAK, "tool_calls": [REAL]}
    reply = {"id": "c", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
    found = chat.WIRE.inspect_reply(reply, tools, POLICY.hold_limit)
    assert found is not None
    finding, prose = found
    markup = chat.WIRE.reply_markup(reply, finding)
    calls = repair_calls(POLICY, body, tools, finding, markup, chat.WIRE.chaining)
    assert calls is not None  # the leak alone is one readable call ...
    assert chat.WIRE.repair_reply is not None
    raw = chat.WIRE.repair_reply(json.dumps(reply).encode(), reply, finding, prose, calls)
    assert raw is None  # ... but beside the reply's own call it is the retry's to answer


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    data = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    return b"data: " + json.dumps({**data, "choices": [choice]}).encode() + b"\n\n"


async def test_a_stream_with_a_call_already_gets_no_second_one(harness: Any) -> None:
    opening = {"index": 0, **REAL, "function": {"name": "get_weather", "arguments": ""}}
    rest = {"index": 0, "function": {"arguments": REAL["function"]["arguments"]}}
    events = [
        chunk({"role": "assistant", "tool_calls": [opening]}),
        chunk({"tool_calls": [rest]}),
        chunk({"content": LEAK}),
        chunk({}, "tool_calls"),
        b"data: [DONE]\n\n",
    ]
    h = await harness(Raw(headers=SSE, chunks=events), mode="repair")
    async with h.http() as http:
        r = await http.post(
            "/chat/completions", json=chat_body(stream=True, parallel_tool_calls=False)
        )
    indexes = {
        c["index"]
        for line in r.text.split("\n\n")
        if line.startswith("data: {")
        for choice in json.loads(line[6:])["choices"]
        for c in choice["delta"].get("tool_calls") or []
    }
    # Not repaired: retried (the scripted upstream leaks again, so the retry fails), and the
    # client never sees a second call beside the model's own.
    assert h.calls == 2
    assert r.headers.get("x-spillguard-action") != "repaired"
    assert indexes <= {0}

"""`/v1/responses` end to end: real servers on loopback, the real openai SDK as the client."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from spillguard.scripted import Raw, Turn, call, response_events

TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]
HERMES = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lisbon"}}\n</tool_call>'
DEEPSEEK = (
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
    '```json\n{"city": "Lisbon"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
)
HONEST = Turn(content="Sunny in Lisbon, 21 °C.")
REAL = Turn(tool_calls=[call("get_weather", {"city": "Lisbon"})])


def events_of(body: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]


@pytest.mark.parametrize("stream", [False, True])
async def test_pass_is_byte_identical(harness: Any, stream: bool) -> None:
    h = await harness(HONEST)
    body = {"model": "m", "input": "weather?", "tools": TOOLS, "stream": stream}
    async with httpx.AsyncClient(timeout=10) as direct, h.http() as http:
        want = await direct.post(h.upstream.url + "/responses", json=body)
        got = await http.post("/responses", json=body)
    assert got.status_code == 200
    assert got.content == want.content
    assert got.headers["x-spillguard-action"] == "passed"


async def test_retry_recovers_non_streamed(harness: Any) -> None:
    h = await harness(Turn(content=DEEPSEEK), REAL)
    client = h.client()
    raw = await client.responses.with_raw_response.create(
        model="m", input="weather in Lisbon?", tools=TOOLS, store=False
    )
    response = raw.parse()
    assert raw.headers["x-spillguard-action"] == "retried"
    assert [i.type for i in response.output] == ["function_call"]
    assert response.output[0].name == "get_weather"  # type: ignore[union-attr]
    retry = h.upstream.requests[1]["body"]
    assert retry["store"] is False
    assert retry["input"][0] == {"role": "user", "content": "weather in Lisbon?"}
    # The model never sees its markup: no prose before it, so no assistant turn at all.
    assert [i["role"] for i in retry["input"]] == ["user", "user"]
    assert h.calls == 2


async def test_retry_keeps_previous_response_id(harness: Any) -> None:
    h = await harness(Turn(content=HERMES), HONEST)
    items = [{"role": "user", "content": "and tomorrow?"}]
    await h.client().responses.create(
        model="m", input=items, tools=TOOLS, previous_response_id="resp_prev"
    )
    retry = h.upstream.requests[1]["body"]
    assert retry["previous_response_id"] == "resp_prev"
    assert retry["input"][0] == items[0]
    assert [i["role"] for i in retry["input"]] == ["user", "user"]  # no prose, no assistant


@pytest.mark.parametrize("stream", [False, True])
async def test_double_leak_fails_with_502(harness: Any, stream: bool) -> None:
    h = await harness(Turn(content=HERMES), Turn(content=DEEPSEEK))
    body = {"model": "m", "input": "weather?", "tools": TOOLS, "stream": stream}
    async with h.http() as http:
        r = await http.post("/responses", json=body)
    assert r.status_code == 502
    assert r.headers["x-should-retry"] == "false"
    assert r.json()["error"]["code"] == "TEXT_ENCODED_TOOL_CALL"
    assert r.json()["error"]["meta"]["attempts"] == 2
    assert h.calls == 2


async def test_streamed_retry_with_sdk_create(harness: Any) -> None:
    h = await harness(Turn(content=HERMES), REAL)
    stream = await h.client().responses.create(
        model="m", input="weather?", tools=TOOLS, stream=True
    )
    kinds, text = [], ""
    async for event in stream:
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            text += event.delta
    assert text == ""
    assert "response.function_call_arguments.done" in kinds
    assert kinds[-1] == "response.completed"
    assert h.calls == 2


async def test_stream_helper_splices_retry_after_prose(harness: Any) -> None:
    prose = "Let me look that up.\n"
    h = await harness(Turn(content=prose + HERMES, delay=0.01), REAL)
    seqs: list[int] = []
    text = ""
    async with h.client().responses.stream(model="m", input="weather?", tools=TOOLS) as stream:
        async for event in stream:
            seqs.append(event.sequence_number)
            if event.type == "response.output_text.delta":
                text += event.delta
        final = await stream.get_final_response()
    assert text == prose
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert [i.type for i in final.output] == ["message", "function_call"]
    assert final.output[0].content[0].text == prose  # type: ignore[union-attr]
    assert final.output[1].name == "get_weather"  # type: ignore[union-attr]
    assert not any(bit in final.output_text for bit in ("<tool_call", '"name"'))
    assert h.calls == 2


async def test_stream_helper_surfaces_failure_after_prose(harness: Any) -> None:
    prose = "Checking.\n"
    h = await harness(Turn(content=prose + HERMES, delay=0.01), Turn(content=DEEPSEEK))
    text = ""
    with pytest.raises(openai.APIError) as info:
        async with h.client().responses.stream(model="m", input="weather?", tools=TOOLS) as stream:
            async for event in stream:
                if event.type == "response.output_text.delta":
                    text += event.delta
    assert text == prose
    assert info.value.code == "TEXT_ENCODED_TOOL_CALL"
    assert h.calls == 2


async def test_stream_error_event_shape_and_sequence(harness: Any) -> None:
    h = await harness(Turn(content="Ok.\n" + HERMES, delay=0.01), mode="fail")
    body = {"model": "m", "input": "weather?", "tools": TOOLS, "stream": True}
    async with h.http() as http:
        r = await http.post("/responses", json=body)
    events = events_of(r.text)
    assert events[-1]["type"] == "error"
    assert events[-1]["code"] == "TEXT_ENCODED_TOOL_CALL"
    assert events[-1]["error"]["meta"]["family"] == "hermes"
    seqs = [e["sequence_number"] for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert not any(e["type"] == "response.completed" for e in events)
    assert "<tool_call" not in r.text


async def test_real_function_call_passes(harness: Any) -> None:
    h = await harness(REAL)
    response = await h.client().responses.create(model="m", input="weather?", tools=TOOLS)
    assert response.output[0].type == "function_call"
    assert h.calls == 1


async def test_reasoning_markup_without_a_call_is_a_leak(harness: Any) -> None:
    turn = Turn(reasoning="<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0")
    h = await harness(turn, HONEST)
    response = await h.client().responses.create(model="m", input="weather?", tools=TOOLS)
    assert response.output_text == HONEST.content
    assert h.calls == 2


async def test_reasoning_markup_with_a_real_call_is_released_in_order(harness: Any) -> None:
    reasoning = "I will call it.\n<tool_call>get_weather"
    h = await harness(Turn(reasoning=reasoning, tool_calls=REAL.tool_calls, delay=0.002))
    body = {"model": "m", "input": "weather?", "tools": TOOLS, "stream": True}
    async with h.http() as http:
        r = await http.post("/responses", json=body)
    events = events_of(r.text)
    summary = "".join(
        e["delta"] for e in events if e["type"] == "response.reasoning_summary_text.delta"
    )
    assert summary == reasoning
    kinds = [e["type"] for e in events]
    assert kinds.index("response.reasoning_summary_text.done") < kinds.index(
        "response.function_call_arguments.done"
    )
    assert kinds[-1] == "response.completed"
    assert h.calls == 1


async def test_builtin_tools_count_as_declared(harness: Any) -> None:
    h = await harness(Turn(content=HERMES), HONEST)
    response = await h.client().responses.create(
        model="m",
        input="search",
        tools=[{"type": "web_search"}],  # type: ignore[list-item]
    )
    assert response.output_text == HONEST.content
    assert h.calls == 2


async def test_other_responses_endpoints_are_proxied(harness: Any) -> None:
    stored = b'{"id": "resp_1", "object": "response", "status": "completed", "output": []}'
    h = await harness(Raw(200, {"content-type": "application/json"}, [stored]))
    async with h.http() as http:
        got = await http.get("/responses/resp_1")
        deleted = await http.delete("/responses/resp_1")
    assert got.content == stored and deleted.status_code == 200
    assert [r["method"] for r in h.upstream.requests] == ["GET", "DELETE"]
    assert h.upstream.requests[0]["path"] == "/v1/responses/resp_1"


async def test_splice_keeps_the_response_identity_when_attempts_differ(harness: Any) -> None:
    # Real servers give each attempt its own response and item ids; the SDK's stream helper
    # refuses a stream whose response identity changes, so the splice must keep the first.
    retry = [
        e.replace(b"resp_scripted", b"resp_B").replace(b"fc_call_1", b"fc_B")
        for e in response_events(REAL, "m")
    ]
    prose = "Let me look.\n"
    h = await harness(
        Turn(content=prose + HERMES, delay=0.01),
        Raw(200, {"content-type": "text/event-stream"}, retry),
    )
    async with h.client().responses.stream(model="m", input="weather?", tools=TOOLS) as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_response()
    assert final.id == "resp_scripted"
    assert [i.type for i in final.output] == ["message", "function_call"]
    assert final.output[0].content[0].text == prose  # type: ignore[union-attr]
    assert h.calls == 2

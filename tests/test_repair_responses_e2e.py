"""Repair on `/v1/responses` end to end: the real openai SDK against spillguard (mode repair) on
loopback, in front of a scripted upstream that leaks. Every way of reading a response (create,
create with stream=True, the `.stream()` helper's final response) gets the calls as
`function_call` items from ONE upstream call; what cannot be repaired is retried."""

from __future__ import annotations

import json
from typing import Any

import pytest

from spillguard.scripted import Raw, Turn, call, response_events
from tests.fuzz.responses_bytes import responses_view
from tests.repair_wires import BLOB, DEEPSEEK, PROSE, TWO
from tests.samples import DSML, HERMES

TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
    {
        "type": "function",
        "name": "run_in_terminal",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
]
LEAKS = {
    "hermes": HERMES,
    "deepseek": DEEPSEEK,
    "dsml": DSML,
    "json": BLOB,
    "two": TWO,
    "prose": PROSE + HERMES,
}
REAL = Turn(tool_calls=[call("get_weather", {"city": "Porto"}, "call_real")])
WAYS = ["create", "create_stream", "stream_helper"]


async def respond(client: Any, way: str, **extra: Any) -> tuple[Any, dict[str, str]]:
    """The final response as the client reads it, and the response headers."""
    body: dict[str, Any] = {"model": "m", "input": "weather in Lisbon?", "tools": TOOLS}
    body |= {"store": False, **extra}  # a stored response is never repaired: see below
    if way == "create":
        raw = await client.responses.with_raw_response.create(**body)
        return raw.parse(), dict(raw.headers)
    if way == "create_stream":
        raw = await client.responses.with_raw_response.create(**body, stream=True)
        final = None
        async for event in raw.parse():
            if event.type == "response.completed":
                final = event.response
        return final, dict(raw.headers)
    async with client.responses.stream(**body) as stream:
        async for _ in stream:
            pass
        return await stream.get_final_response(), {}


def calls_in(response: Any) -> list[tuple[str, dict[str, Any]]]:
    return [
        (item.name, json.loads(item.arguments))
        for item in response.output
        if item.type == "function_call"
    ]


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("family", sorted(LEAKS))
async def test_a_leak_is_answered_with_function_calls(harness: Any, family: str, way: str) -> None:
    h = await harness(Turn(content=LEAKS[family]), REAL, mode="repair")
    response, headers = await respond(h.client(), way)
    want = [("get_weather", {"city": "Lisbon"})]
    if family == "two":
        want.append(("run_in_terminal", {"command": "ls"}))
    assert calls_in(response) == want
    assert h.calls == 1  # no second generation
    if headers:
        assert headers["x-spillguard-action"] == "repaired"
    items = [i for i in response.output if i.type == "function_call"]
    assert all(i.id.startswith("fc_") and i.call_id.startswith("call_") for i in items)
    assert all(i.status == "completed" for i in items)
    assert response.output_text == (PROSE if family == "prose" else "")
    assert response.usage is not None and response.usage.total_tokens == 15


@pytest.mark.parametrize("way", WAYS)
async def test_what_cannot_be_repaired_is_retried(harness: Any, way: str) -> None:
    # `city` is required: arguments without it fail the declared schema.
    bad = '<tool_call>\n{"name": "get_weather", "arguments": {"town": "Lisbon"}}\n</tool_call>'
    h = await harness(Turn(content=bad), REAL, mode="repair")
    response, headers = await respond(h.client(), way)
    assert calls_in(response) == [("get_weather", {"city": "Porto"})]
    assert h.calls == 2
    if headers:
        assert headers["x-spillguard-action"] == "retried"


@pytest.mark.parametrize("way", WAYS)
async def test_a_response_the_upstream_stores_is_retried_not_repaired(
    harness: Any, way: str
) -> None:
    # The upstream would keep the markup, not the calls: a next turn naming this response with
    # a `function_call_output` for a repaired call would be refused. The retry's call is real.
    h = await harness(Turn(content=HERMES), REAL, mode="repair")
    response, headers = await respond(h.client(), way, store=True)
    assert calls_in(response) == [("get_weather", {"city": "Porto"})]
    assert h.calls == 2
    if headers:
        assert headers["x-spillguard-action"] == "retried"


async def test_tool_choice_none_is_never_repaired(harness: Any) -> None:
    h = await harness(Turn(content=HERMES), Turn(content="Sunny."), mode="repair")
    response, headers = await respond(h.client(), "create", tool_choice="none")
    assert headers["x-spillguard-action"] == "retried"
    assert response.output_text == "Sunny." and h.calls == 2


async def test_the_repaired_stream_events_as_the_sdk_reads_them(harness: Any) -> None:
    h = await harness(Turn(content=PROSE + TWO), mode="repair")
    body = {"model": "m", "input": "weather in Lisbon?", "tools": TOOLS, "store": False}
    kinds: list[str] = []
    args: dict[int, str] = {}
    async with h.client().responses.stream(**body) as stream:
        async for event in stream:
            kinds.append(event.type)
            if event.type == "response.function_call_arguments.done":
                args[event.output_index] = event.arguments
            if event.type == "response.output_text.done":
                assert event.text == PROSE
    assert args == {1: '{"city":"Lisbon"}', 2: '{"command":"ls"}'}
    assert kinds[-1] == "response.completed"
    assert kinds.count("response.output_item.added") == 3
    assert kinds.count("response.output_item.done") == 3


@pytest.mark.parametrize("way", WAYS)
async def test_no_prose_leaves_no_message_whichever_way_it_is_read(harness: Any, way: str) -> None:
    h = await harness(Turn(content=" \n" + HERMES), REAL, mode="repair")
    response, _ = await respond(h.client(), way)
    assert [i.type for i in response.output] == ["function_call"]
    assert response.output_text == "" and h.calls == 1


KEEPALIVE = 0.05


def slow_message(text: str) -> Raw:
    """The stream of a message of `text`, a pause far longer than the keep-alive before the
    message's first event: the keep-alive starts the client's response."""
    events = response_events(Turn(content=text, delta_size=32), "m")
    return Raw(200, {"content-type": "text/event-stream"}, events, pauses=(0.0, 0.0, 0.5))


@pytest.mark.parametrize(
    ("prose", "types"),
    [
        (PROSE, ["message", "function_call"]),
        ("", ["function_call"]),
    ],
)
async def test_a_keepalive_started_stream_shows_what_the_whole_repair_does(
    harness: Any, prose: str, types: list[str]
) -> None:
    h = await harness(slow_message(prose + HERMES), mode="repair", keepalive=KEEPALIVE)
    body = {"model": "m", "input": "weather in Lisbon?", "tools": TOOLS, "store": False}
    async with (
        h.http() as http,
        http.stream("POST", "/responses", json=body | {"stream": True}) as r,
    ):
        data = b"".join([chunk async for chunk in r.aiter_raw()])
    assert data.index(b": keep-alive") < data.index(b"response.output_item.added")
    view = responses_view(data)
    assert [view.added[i]["type"] for i in sorted(view.added)] == types
    assert view.completed is not None
    assert [i["type"] for i in view.completed["output"]] == types
    assert view.all_text == prose and h.calls == 1
    async with h.client().responses.stream(**body) as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_response()
    assert [i.type for i in final.output] == types and final.output_text == prose

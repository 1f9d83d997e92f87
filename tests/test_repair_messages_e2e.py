"""Repair on `/v1/messages` end to end: the real anthropic SDK against spillguard (mode repair)
on loopback, in front of a scripted Anthropic-compatible upstream that leaks. `messages.create`
(whole and streamed) and `messages.stream(...).get_final_message()` get the calls as `tool_use`
blocks, stop_reason `tool_use`, from ONE upstream call; what cannot be repaired is retried."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from spillguard.scripted import Raw
from spillguard.scripted_anthropic import Message, text, thinking, tool_use
from tests.anthropic_stack import AnthropicStack
from tests.repair_wires import BLOB, DEEPSEEK, PROSE, TWO
from tests.samples import DSML, HERMES

anthropic = pytest.importorskip("anthropic")

Make = Callable[..., Any]
TOOLS: list[dict[str, Any]] = [
    {
        "name": "get_weather",
        "description": "Current weather for a city",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
    {
        "name": "run_in_terminal",
        "description": "Run a shell command",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
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
REAL = Message([tool_use("get_weather", {"city": "Porto"}, "toolu_real")])
WAYS = ["create", "create_stream", "stream_helper"]


@pytest.fixture
async def stack() -> AsyncIterator[Make]:
    made: list[AnthropicStack] = []

    async def make(*turns: Message | Raw, **settings: Any) -> AnthropicStack:
        s = AnthropicStack(*turns)
        made.append(s)
        return await s.start(**settings)

    yield make
    for s in made:
        await s.stop()


async def answer(s: AnthropicStack, way: str, **extra: Any) -> tuple[Any, dict[str, str]]:
    """The final message as the client reads it, and the response headers."""
    client = anthropic.AsyncAnthropic(base_url=s.base_url, api_key="sk-ant-test", max_retries=0)
    body = {"model": "deepseek-chat", "max_tokens": 1024, "tools": TOOLS, **extra}
    body["messages"] = [{"role": "user", "content": "What is the weather in Lisbon?"}]
    if way == "create":
        raw = await client.messages.with_raw_response.create(**body)
        return await raw.parse(), dict(raw.headers)
    if way == "create_stream":
        raw = await client.messages.with_raw_response.create(**body, stream=True)
        events = [event async for event in await raw.parse()]
        return events, dict(raw.headers)
    async with client.messages.stream(**body) as stream:
        async for _ in stream:
            pass
        return await stream.get_final_message(), {}


def read(way: str, got: Any) -> tuple[list[tuple[str, Any]], str | None, int]:
    """(each block's type and text or (name, input), the stop reason, output tokens)."""
    if way != "create_stream":
        blocks = [
            (b.type, (b.name, b.input) if b.type == "tool_use" else getattr(b, b.type))
            for b in got.content
        ]
        return blocks, got.stop_reason, got.usage.output_tokens
    # The raw events, assembled by hand: starts, deltas, the stop reason.
    out: list[tuple[str, Any]] = []
    parts: list[str] = []
    stop, tokens = None, 0
    for event in got:
        if event.type == "content_block_start":
            block = event.content_block
            out.append((block.type, block.name if block.type == "tool_use" else ""))
            parts.append("")
        elif event.type == "content_block_delta":
            delta = event.delta
            parts[event.index] += getattr(delta, "text", None) or getattr(delta, "partial_json", "")
        elif event.type == "message_delta":
            stop, tokens = event.delta.stop_reason, event.usage.output_tokens
    blocks = [
        (kind, (name, json.loads(part)) if kind == "tool_use" else part)
        for (kind, name), part in zip(out, parts, strict=True)
    ]
    return blocks, stop, tokens


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("family", sorted(LEAKS))
async def test_a_leak_is_answered_with_tool_use_blocks(stack: Make, family: str, way: str) -> None:
    s = await stack(Message([text(LEAKS[family])]), REAL, mode="repair")
    got, headers = await answer(s, way)
    blocks, stop, tokens = read(way, got)
    want: list[tuple[str, Any]] = [("text", PROSE)] if family == "prose" else []
    want.append(("tool_use", ("get_weather", {"city": "Lisbon"})))
    if family == "two":
        want.append(("tool_use", ("run_in_terminal", {"command": "ls"})))
    assert blocks == want
    assert stop == "tool_use" and tokens == 12  # the upstream's usage
    assert s.calls == 1  # no second generation
    if headers:
        assert headers["x-spillguard-action"] == "repaired"
    if way != "create_stream":
        ids = [b.id for b in got.content if b.type == "tool_use"]
        assert all(i.startswith("toolu_01") for i in ids) and len(set(ids)) == len(ids)


@pytest.mark.parametrize("way", WAYS)
async def test_thinking_before_the_leak_stays_with_its_signature(stack: Make, way: str) -> None:
    leak = Message([thinking("The user wants the weather."), text(PROSE + HERMES)])
    s = await stack(leak, REAL, mode="repair")
    got, _ = await answer(s, way)
    blocks, stop, _ = read(way, got)
    assert [b[0] for b in blocks] == ["thinking", "text", "tool_use"]
    assert stop == "tool_use" and s.calls == 1
    if way != "create_stream":
        assert got.content[0].signature


@pytest.mark.parametrize("way", WAYS)
async def test_what_cannot_be_repaired_is_retried(stack: Make, way: str) -> None:
    # `city` is required: arguments without it fail the declared schema.
    bad = '<tool_call>\n{"name": "get_weather", "arguments": {"town": "Lisbon"}}\n</tool_call>'
    s = await stack(Message([text(bad)]), REAL, mode="repair")
    got, headers = await answer(s, way)
    blocks, stop, _ = read(way, got)
    assert blocks == [("tool_use", ("get_weather", {"city": "Porto"}))]
    assert stop == "tool_use" and s.calls == 2
    if headers:
        assert headers["x-spillguard-action"] == "retried"


async def test_a_leak_beside_a_real_call_is_retried(stack: Make) -> None:
    leak = Message([text(HERMES), tool_use("get_weather", {"city": "Faro"})])
    s = await stack(leak, REAL, mode="repair")
    got, headers = await answer(s, "create")
    assert read("create", got)[0] == [("tool_use", ("get_weather", {"city": "Porto"}))]
    assert headers["x-spillguard-action"] == "retried" and s.calls == 2

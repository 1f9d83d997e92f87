"""The Messages API end to end: the real `anthropic` Python SDK against spillguard on loopback, in
front of a scripted Anthropic-compatible upstream that leaks the way DeepSeek, Kimi, GLM and
MiniMax do (and Claude's own `<invoke>` after a stray `count`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from spillguard import jsonread
from spillguard.jsonread import LEAVE_FROM
from spillguard.scripted import Raw
from spillguard.scripted_anthropic import Message, error, text, thinking
from tests.anthropic_stack import (
    CALL,
    DSML,
    FAMILIES,
    HONEST,
    KIMI,
    MINIMAX,
    TOOLS,
    AnthropicStack,
)
from tests.conftest import read_whole_unless
from tests.fuzz.messages_bytes import messages_view

anthropic = pytest.importorskip("anthropic")

Make = Callable[..., Any]
QUESTION = [{"role": "user", "content": "What is the weather in Lisbon?"}]


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


def client(s: AnthropicStack, **kw: Any) -> Any:
    kw.setdefault("max_retries", 0)
    return anthropic.AsyncAnthropic(base_url=s.base_url, api_key="sk-ant-test", **kw)


def create(**extra: Any) -> dict[str, Any]:
    body = {"model": "deepseek-chat", "max_tokens": 1024, "messages": QUESTION, "tools": TOOLS}
    return body | extra


async def final(s: AnthropicStack, **kw: Any) -> Any:
    async with client(s).messages.stream(**create(), **kw) as events:
        async for _ in events:
            pass
        return await events.get_final_message()


def blocks(message: Any) -> list[tuple[str, str]]:
    """Each block's type and its text, thinking or tool name."""
    names = {"text": "text", "thinking": "thinking", "tool_use": "name"}
    return [(b.type, getattr(b, names[b.type])) for b in message.content]


# ---- whole replies ---------------------------------------------------------------------------


async def test_an_honest_answer_passes_byte_for_byte(stack: Make) -> None:
    s = await stack(HONEST)
    headers = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"}
    headers["anthropic-beta"] = "interleaved-thinking-2025-05-14"
    async with httpx.AsyncClient() as http:
        got = await http.post(s.base_url + "/v1/messages", json=create(), headers=headers)
        direct = await http.post(s.upstream.url + "/messages", json=create(), headers=headers)
    assert got.status_code == 200
    assert got.content == direct.content
    assert got.headers["x-spillguard-action"] == "passed"
    assert got.headers["request-id"] == "req_scripted"  # the provider's, for `.request_id`
    sent = s.message_requests[0]["headers"]
    assert sent["x-api-key"] == "sk-ant-test"
    assert sent["anthropic-version"] == "2023-06-01"
    assert sent["anthropic-beta"] == "interleaved-thinking-2025-05-14"


@pytest.mark.parametrize("family", sorted(FAMILIES))
async def test_every_family_is_retried_into_the_real_call(stack: Make, family: str) -> None:
    s = await stack(Message([text(FAMILIES[family])]), CALL)
    raw = await client(s).messages.with_raw_response.create(**create())
    message = await raw.parse()
    assert blocks(message) == [("tool_use", "get_weather")]
    assert message.content[0].input == {"city": "Lisbon"}
    assert raw.headers["x-spillguard-action"] == "retried"
    assert raw.headers["x-spillguard-family"] == family
    assert s.calls == 2


@pytest.mark.parametrize("long", [False, True])
async def test_the_retry_keeps_every_field_and_never_echoes_the_markup(
    stack: Make, long: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`long`: a system prompt that makes the request long enough to be read leaving its
    messages, system and tools as their bytes (`jsonread.LEAVE_FROM`)."""
    read_whole_unless(long, monkeypatch)
    s = await stack(Message([text("Let me check that.\n" + MINIMAX)]), CALL)
    system = "Be brief. " * (LEAVE_FROM // 10 if long else 1)
    body = {
        **create(),
        "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "metadata": {"user_id": "u-42"},
        "tool_choice": {"type": "auto"},
        "x_vendor_field": [1e400, "kept"],
    }
    raw = json.dumps(body).replace("Infinity", "1e400").encode()
    async with httpx.AsyncClient(base_url=s.base_url) as http:
        headers = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
        got = await http.post("/v1/messages", content=raw, headers=headers)
    assert got.status_code == 200, got.text
    retry = s.message_requests[1]
    sent = retry["raw"].decode()
    assert "1e400" in sent and "minimax:tool_call" not in sent
    first, second = json.loads(raw), retry["body"]
    assert {k: v for k, v in second.items() if k != "messages"} == {
        k: v for k, v in first.items() if k != "messages"
    }
    assert second["messages"][:1] == QUESTION
    assert second["messages"][1] == {"role": "assistant", "content": "Let me check that.\n"}
    assert second["messages"][2]["role"] == "user"
    assert len(second["messages"]) == 3
    assert (len(raw) >= jsonread.LEAVE_FROM) is long


async def test_a_leak_with_no_prose_sends_no_assistant_turn(stack: Make) -> None:
    s = await stack(Message([text("\n  " + DSML)]), CALL)
    await client(s).messages.create(**create(), tool_choice={"type": "none"})
    retry = s.message_requests[1]["body"]
    assert [m["role"] for m in retry["messages"]] == ["user", "user"]
    assert retry["tool_choice"] == {"type": "none"}


async def test_a_double_leak_fails_in_anthropics_shape(stack: Make) -> None:
    s = await stack(Message([text(DSML)]), Message([text(KIMI)]))
    with pytest.raises(anthropic.InternalServerError) as caught:
        await client(s, max_retries=2).messages.create(**create())  # x-should-retry: false
    e = caught.value
    assert e.status_code == 502
    assert e.error_code == "TEXT_ENCODED_TOOL_CALL"
    assert e.type == "api_error"
    assert e.api_message.startswith("TEXT_ENCODED_TOOL_CALL: ")
    assert e.body["error"]["details"]["meta"]["attempts"] == 2
    assert e.body["error"]["details"]["meta"]["family"] == "kimi"
    assert e.response.headers["x-should-retry"] == "false"
    assert e.request_id == e.body["request_id"]
    assert s.calls == 2


async def test_fail_mode_fails_at_once(stack: Make) -> None:
    s = await stack(Message([text(MINIMAX)]), mode="fail")
    with pytest.raises(anthropic.InternalServerError) as caught:
        await client(s).messages.create(**create())
    assert caught.value.error_code == "TEXT_ENCODED_TOOL_CALL"
    assert s.calls == 1


async def test_observe_mode_passes_the_leak(stack: Make) -> None:
    s = await stack(Message([text(MINIMAX)]), mode="observe")
    raw = await client(s).messages.with_raw_response.create(**create())
    assert (await raw.parse()).content[0].text == MINIMAX
    assert raw.headers["x-spillguard-action"] == "observed"


async def test_requests_without_tools_are_never_inspected(stack: Make) -> None:
    s = await stack(Message([text(DSML)]))
    body = {k: v for k, v in create().items() if k != "tools"}
    raw = await client(s).messages.with_raw_response.create(**body)
    assert (await raw.parse()).content[0].text == DSML
    assert "x-spillguard-family" not in raw.headers
    assert s.calls == 1


# ---- thinking --------------------------------------------------------------------------------


async def test_thinking_and_its_signature_reach_the_client_intact(stack: Make) -> None:
    turn = Message([thinking("Lisbon, so a weather lookup.", "sig-A1"), *CALL.content])
    s = await stack(turn)
    whole = await client(s).messages.create(**create())
    streamed = await final(s)
    for message in (whole, streamed):
        assert message.content[0].thinking == "Lisbon, so a weather lookup."
        assert message.content[0].signature == "sig-A1"
        assert message.content[1].name == "get_weather"
    assert s.calls == 2


async def test_markup_in_thinking_before_a_real_call_is_released(stack: Make) -> None:
    turn = Message([thinking("I will call it:\n" + KIMI, "sig-B2"), *CALL.content])
    s = await stack(turn)
    message = await final(s)
    assert message.content[0].thinking == "I will call it:\n" + KIMI
    assert message.content[0].signature == "sig-B2"
    assert message.content[1].name == "get_weather"
    assert s.calls == 1


async def test_a_call_written_only_in_thinking_is_retried(stack: Make) -> None:
    turn = Message([thinking("Calling now.\n" + KIMI, "sig-C3"), text("Done.")], delay=0.01)
    s = await stack(turn, CALL, turn, CALL)
    whole = await client(s).messages.create(**create())
    assert blocks(whole) == [("tool_use", "get_weather")]
    streamed = await final(s)
    # The stream had shown the thinking before the markup; the retry follows it.
    assert blocks(streamed) == [("thinking", "Calling now.\n"), ("tool_use", "get_weather")]
    assert s.calls == 4


# ---- streams ---------------------------------------------------------------------------------


async def raw_stream(s: AnthropicStack, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    headers = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"}
    async with (
        httpx.AsyncClient(base_url=s.base_url, timeout=30) as http,
        http.stream("POST", "/v1/messages", json=body, headers=headers) as r,
    ):
        data = b"".join([chunk async for chunk in r.aiter_raw()])
        return r.status_code, dict(r.headers), data


@pytest.mark.parametrize("long", [False, True])
async def test_prose_then_a_leak_is_spliced_into_one_message(
    stack: Make, long: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    read_whole_unless(long, monkeypatch)
    leak = Message([text("Let me check that.\n" + DSML)], delay=0.01)
    s = await stack(leak, CALL, leak, CALL)
    message = await final(s, system="Be brief. " * (LEAVE_FROM // 10) if long else "Be brief.")
    assert blocks(message) == [("text", "Let me check that.\n"), ("tool_use", "get_weather")]
    assert message.stop_reason == "tool_use"
    extra = {"system": "Be brief. " * (LEAVE_FROM // 10)} if long else {}
    status, _, data = await raw_stream(s, {**create(**extra), "stream": True})
    view = messages_view(data)  # one message_start, consecutive indexes, no blank text block
    assert status == 200 and view.starts == 1 and view.stops == 1
    assert [b.type for b in view.blocks] == ["text", "tool_use"]
    assert view.stop_reason == "tool_use" and view.usage == {"output_tokens": 12}
    assert "DSML" not in data.decode()
    assert s.calls == 4


async def test_a_leak_after_blank_prose_shows_no_blank_block(stack: Make) -> None:
    s = await stack(Message([text("\n\n" + MINIMAX)], delay=0.01), HONEST)
    message = await final(s)
    assert blocks(message) == [("text", HONEST.content[0].text)]


async def test_a_double_leak_after_prose_ends_with_an_error_event(stack: Make) -> None:
    leak = Message([text("Let me check that.\n" + DSML)], delay=0.01)
    s = await stack(leak, Message([text(KIMI)]))
    seen = ""
    with pytest.raises(anthropic.APIStatusError) as caught:
        async with client(s).messages.stream(**create()) as events:
            async for event in events:
                if event.type == "text":
                    seen += event.text
    assert seen == "Let me check that.\n"
    assert caught.value.error_code == "TEXT_ENCODED_TOOL_CALL"
    assert caught.value.body["error"]["type"] == "api_error"


async def test_a_leak_before_anything_publishable_is_a_real_502(stack: Make) -> None:
    s = await stack(Message([text(DSML)]), mode="fail")
    status, headers, data = await raw_stream(s, {**create(), "stream": True})
    assert status == 502 and headers["x-should-retry"] == "false"
    assert json.loads(data)["error"]["details"]["error_code"] == "TEXT_ENCODED_TOOL_CALL"


async def test_held_text_keeps_the_stream_alive_with_ping_events(stack: Make) -> None:
    blob = '{"name": "get_weather", "arguments": {"city": "Lisbon"}}'  # held whole, as a blob
    s = await stack(Message([text(blob)], delta_size=2, delay=0.05), CALL, keepalive=0.2)
    status, _, data = await raw_stream(s, {**create(), "stream": True})
    assert status == 200
    assert b'event: ping\ndata: {"type": "ping"}\n\n' in data
    assert b": keep-alive" not in data
    view = messages_view(data)
    assert [b.type for b in view.blocks] == ["tool_use"]


# ---- everything else under /v1 ---------------------------------------------------------------


async def test_count_tokens_and_models_pass_untouched(stack: Make) -> None:
    s = await stack(HONEST)
    c = client(s)
    counted = await c.messages.count_tokens(model="deepseek-chat", messages=QUESTION, tools=TOOLS)
    assert counted.input_tokens > 0
    models = await c.models.list()
    assert [m.id for m in models.data] == ["deepseek-chat"]
    paths = [r["path"] for r in s.upstream.requests]
    assert paths == ["/v1/messages/count_tokens", "/v1/models"], paths
    async with httpx.AsyncClient(base_url=s.base_url) as http:  # no anthropic-version
        await http.get("/v1/models")
    assert s.upstream.requests[-1]["path"] == "/v1/openai/models"  # the OpenAI upstream


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        (error(429, "rate_limit_error", "Slow down", **{"retry-after": "7"}), "RateLimitError"),
        (error(529, "overloaded_error", "Overloaded", **{"retry-after": "3"}), "OverloadedError"),
    ],
)
async def test_upstream_errors_pass_through(stack: Make, reply: Raw, kind: str) -> None:
    s = await stack(reply)
    with pytest.raises(getattr(anthropic, kind)) as caught:
        await client(s).messages.create(**create())
    e = caught.value
    assert e.request_id == "req_err"
    assert e.response.headers["retry-after"] == reply.headers["retry-after"]
    assert e.body == json.loads(reply.chunks[0])


async def test_proxy_keys_and_key_injection_work_with_x_api_key(stack: Make) -> None:
    s = await stack(HONEST, proxy_keys=("sg-proxy-key",), upstream_key="sk-upstream")
    good = anthropic.AsyncAnthropic(base_url=s.base_url, api_key="sg-proxy-key", max_retries=0)
    await good.messages.create(**create())
    sent = s.message_requests[0]["headers"]
    assert sent["x-api-key"] == "sk-upstream"
    assert "authorization" not in sent
    bad = anthropic.AsyncAnthropic(base_url=s.base_url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as caught:
        await bad.messages.create(**create())
    assert caught.value.type == "authentication_error"
    assert caught.value.error_code == "INVALID_PROXY_KEY"


async def test_spillguards_own_errors_are_in_anthropics_shape(stack: Make) -> None:
    s = await stack(HONEST)
    await s.upstream.stop()  # nothing listens there now
    with pytest.raises(anthropic.InternalServerError) as caught:
        await client(s).messages.create(**create())
    assert caught.value.status_code == 502
    assert caught.value.error_code == "UPSTREAM_UNAVAILABLE"
    assert caught.value.type == "api_error"
    async with httpx.AsyncClient(base_url=s.base_url) as http:
        huge = {"anthropic-version": "2023-06-01", **{f"x-h{i}": "v" for i in range(250)}}
        refused = await http.get("/v1/models", headers=huge)
    assert refused.status_code == 431
    assert refused.json()["error"]["type"] == "invalid_request_error"
    assert refused.json()["error"]["details"]["error_code"] == "HEADERS_TOO_LARGE"

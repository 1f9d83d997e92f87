"""spillguard end to end: real servers on loopback, the real openai SDK as the client."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from spillguard.scripted import Raw, Turn, call, chunks, completion
from tests.conftest import TOOLS, chat_body

LEAKS = {
    "deepseek": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
    '```json\n{"city": "Lisbon"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    "dsml": '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
    '<｜DSML｜parameter name="city" string="true">Lisbon</｜DSML｜parameter>\n'
    "</｜DSML｜invoke>\n</｜DSML｜function_calls>",
    "hermes": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lisbon"}}\n</tool_call>',
    "kimi": "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>{"city": "Lisbon"}<|tool_call_end|><|tool_calls_section_end|>',
    "mistral": '[TOOL_CALLS]get_weather[ARGS]{"city": "Lisbon"}',
    "harmony": "<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Lisbon"}<|call|>',
    "xai": '<xai:function_call name="get_weather"><parameter name="city">Lisbon</parameter>'
    "</xai:function_call>",
    "json": '{"name": "get_weather", "arguments": {"city": "Lisbon"}}',
}
HONEST = Turn(content="It is sunny in Lisbon, 21 °C.")
REAL = Turn(tool_calls=[call("get_weather", {"city": "Lisbon"})])
MARKUP_BITS = ("<｜", "<tool_call", "<|", "[TOOL_CALLS", "<xai", '{"name"', "DSML")


async def collect(stream: Any) -> tuple[str, list[Any], list[Any]]:
    """(text, chunks, tool-call deltas) of an openai SDK stream."""
    text, got, calls = "", [], []
    async for chunk in stream:
        got.append(chunk)
        for choice in chunk.choices:
            text += choice.delta.content or ""
            calls.extend(choice.delta.tool_calls or [])
    return text, got, calls


@pytest.mark.parametrize("family", sorted(LEAKS))
@pytest.mark.parametrize("stream", [False, True])
async def test_retry_mode_recovers_every_family(harness: Any, family: str, stream: bool) -> None:
    h = await harness(Turn(content=LEAKS[family]), REAL)
    client = h.client()
    kwargs: dict[str, Any] = {"model": "m", "messages": chat_body()["messages"], "tools": TOOLS}
    if stream:
        text, _, calls = await collect(await client.chat.completions.create(stream=True, **kwargs))
        assert text == ""
        assert calls[0].function.name == "get_weather"
    else:
        reply = await client.chat.completions.with_raw_response.create(**kwargs)
        assert reply.headers["x-spillguard-action"] == "retried"
        assert reply.headers["x-spillguard-family"] == ("json" if family == "json" else family)
        message = reply.parse().choices[0].message
        assert message.content is None
        assert message.tool_calls[0].function.name == "get_weather"
    assert h.calls == 2
    retry = h.upstream.requests[1]["body"]
    # The model never sees its markup: no prose before it, so no assistant turn at all.
    assert retry["messages"][:-1] == chat_body()["messages"]
    assert retry["messages"][-1]["role"] == "user"
    assert "tool-calling interface" in retry["messages"][-1]["content"]


@pytest.mark.parametrize("stream", [False, True])
async def test_double_leak_fails_with_502(harness: Any, stream: bool) -> None:
    h = await harness(Turn(content=LEAKS["dsml"]), Turn(content=LEAKS["hermes"]))
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body(stream=stream))
    assert r.status_code == 502
    assert r.headers["x-should-retry"] == "false"
    assert r.headers["content-type"].startswith("application/json")
    error = r.json()["error"]
    assert error["code"] == "TEXT_ENCODED_TOOL_CALL"
    message = "TEXT_ENCODED_TOOL_CALL: Model returned tool-control text instead of a final answer"
    assert error["message"] == message
    assert error["param"] is None
    assert error["meta"]["family"] == "hermes"
    assert error["meta"]["tool_name"] == "get_weather"
    assert error["meta"]["attempts"] == 2
    assert error["meta"]["request_id"] == r.headers["x-request-id"]
    assert h.calls == 2


async def test_sdk_sees_the_502_code_and_does_not_retry(harness: Any) -> None:
    h = await harness(Turn(content=LEAKS["json"]))
    client = openai.AsyncOpenAI(base_url=h.url, api_key="k", max_retries=2)
    with pytest.raises(openai.APIStatusError) as info:
        await client.chat.completions.create(model="m", messages=[], tools=TOOLS)  # type: ignore[arg-type]
    assert info.value.status_code == 502
    assert info.value.code == "TEXT_ENCODED_TOOL_CALL"
    assert h.calls == 2  # spillguard's one retry; x-should-retry: false stopped the SDK's


@pytest.mark.parametrize("stream", [False, True])
async def test_fail_mode_fails_at_once(harness: Any, stream: bool) -> None:
    h = await harness(Turn(content=LEAKS["deepseek"]), REAL, mode="fail")
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body(stream=stream))
    assert r.status_code == 502
    assert r.json()["error"]["meta"] == {
        "tool_name": "get_weather",
        "family": "deepseek",
        "request_id": r.headers["x-request-id"],
        "attempts": 1,
    }
    assert h.calls == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_observe_mode_passes_the_leak_byte_for_byte(harness: Any, stream: bool) -> None:
    h = await harness(Turn(content=LEAKS["hermes"]), mode="observe")
    async with httpx.AsyncClient(timeout=10) as direct, h.http() as http:
        want = await direct.post(h.upstream.url + "/chat/completions", json=chat_body(stream))
        got = await http.post("/chat/completions", json=chat_body(stream=stream))
    assert got.status_code == 200
    assert got.content == want.content
    assert got.headers["x-spillguard-action"] == "observed"
    assert h.calls == 2  # one direct, one through spillguard


@pytest.mark.parametrize("stream", [False, True])
async def test_benign_replies_pass_byte_identical(harness: Any, stream: bool) -> None:
    h = await harness(Turn(content='Plain prose, `code`, **bold** (and "quotes").\n' * 3))
    async with httpx.AsyncClient(timeout=10) as direct, h.http() as http:
        want = await direct.post(h.upstream.url + "/chat/completions", json=chat_body(stream))
        got = await http.post("/chat/completions", json=chat_body(stream=stream))
    assert got.status_code == 200
    assert got.content == want.content
    assert got.headers["x-spillguard-action"] == "passed"
    assert got.headers["x-request-id"]


def _data_events(body: bytes) -> list[bytes]:
    return [e + b"\n\n" for e in body.split(b"\n\n") if e]


def _content(event: bytes) -> str:
    data = event.removeprefix(b"data: ").strip()
    if data == b"[DONE]":
        return ""
    delta = json.loads(data)["choices"][0]["delta"]
    return str(delta.get("content") or "")


@pytest.mark.parametrize("stream", [False, True])
async def test_benign_html_and_links_change_only_events_ending_in_a_marker_prefix(
    harness: Any, stream: bool
) -> None:
    """A delta that ends in a tail that could still open a marker (`<`, `]` of `]<]minimax[>[`)
    is held back until the next one rules it out: those events are re-framed, every other event
    passes as the upstream's bytes, and the client's text is the upstream's exactly. A whole
    reply that passes is byte-identical."""
    h = await harness(Turn(content="Plain <b>prose</b>, [a link](http://x), `code`.\n" * 3))
    async with httpx.AsyncClient(timeout=10) as direct, h.http() as http:
        want = await direct.post(h.upstream.url + "/chat/completions", json=chat_body(stream))
        got = await http.post("/chat/completions", json=chat_body(stream=stream))
    assert got.status_code == 200
    assert got.headers["x-spillguard-action"] == "passed"
    if not stream:
        assert got.content == want.content
        return
    upstream, client = _data_events(want.content), _data_events(got.content)
    assert "".join(map(_content, client)) == "".join(map(_content, upstream))
    changed = [e for e in upstream if e not in client]
    assert changed, "the text was chosen to end deltas in marker prefixes"
    assert all(
        _content(e).endswith(("<", "]")) or _content(e).startswith(("b>", "(")) for e in changed
    )


async def test_real_tool_call_passes(harness: Any) -> None:
    h = await harness(REAL)
    reply = await h.client().chat.completions.create(
        model="m", messages=chat_body()["messages"], tools=TOOLS
    )
    assert reply.choices[0].message.tool_calls[0].function.arguments == '{"city": "Lisbon"}'
    assert h.calls == 1


async def test_stream_keeps_prose_published_before_a_leak(harness: Any) -> None:
    prose = "Let me check the weather for you.\n"
    h = await harness(Turn(content=prose + LEAKS["hermes"], delay=0.01), REAL)
    client = h.client()
    stream = await client.chat.completions.create(
        model="m", messages=chat_body()["messages"], tools=TOOLS, stream=True
    )
    text, got, calls = await collect(stream)
    assert text == prose
    assert not any(bit in text for bit in MARKUP_BITS)
    assert [c.function.name for c in calls if c.function.name] == ["get_weather"]
    assert calls[0].index == 0 and calls[0].id == "call_1"
    assert len({c.id for c in got}) == 1  # one chunk id across the splice
    roles = [c for c in got if c.choices and c.choices[0].delta.role]
    assert len(roles) == 1
    assert h.calls == 2


async def test_stream_retry_leak_after_prose_ends_with_error_event(harness: Any) -> None:
    prose = "Checking now.\n"
    h = await harness(Turn(content=prose + LEAKS["dsml"], delay=0.01), Turn(content=LEAKS["json"]))
    client = h.client()
    stream = await client.chat.completions.create(
        model="m", messages=chat_body()["messages"], tools=TOOLS, stream=True
    )
    text = ""
    with pytest.raises(openai.APIError) as info:
        async for chunk in stream:
            for choice in chunk.choices:
                text += choice.delta.content or ""
    assert text == prose
    assert "tool-control text" in info.value.message
    assert info.value.code == "TEXT_ENCODED_TOOL_CALL"
    assert h.calls == 2


async def test_leak_at_stream_start_is_a_real_502(harness: Any) -> None:
    h = await harness(Turn(content=LEAKS["kimi"], delay=0.01), mode="fail")
    async with (
        h.http() as http,
        http.stream("POST", "/chat/completions", json=chat_body(stream=True)) as r,
    ):
        body = await r.aread()
    assert r.status_code == 502
    assert json.loads(body)["error"]["code"] == "TEXT_ENCODED_TOOL_CALL"


async def test_no_markup_reaches_any_delta(harness: Any) -> None:
    content = "Sure.\n" + LEAKS["deepseek"]
    h = await harness(Turn(content=content, delta_size=1, delay=0.001), HONEST)
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body(stream=True))
    deltas = [
        json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in r.text.splitlines()
        if line.startswith("data: {") and json.loads(line[6:])["choices"]
    ]
    assert "".join(deltas) == "Sure.\n" + HONEST.content
    for delta in deltas:
        assert not any(bit in delta for bit in ("<", "｜", "▁"))


async def test_include_usage_reaches_the_client(harness: Any) -> None:
    h = await harness(HONEST)
    stream = await h.client().chat.completions.create(
        model="m",
        messages=chat_body()["messages"],
        tools=TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, got, _ = await collect(stream)
    assert text == HONEST.content
    assert got[-1].choices == [] and got[-1].usage.total_tokens == 15


async def test_reasoning_and_tool_call_deltas_reach_the_client(harness: Any) -> None:
    turn = Turn(reasoning="The user wants weather; call the tool.", tool_calls=REAL.tool_calls)
    h = await harness(turn)
    async with h.http() as http, httpx.AsyncClient(timeout=10) as direct:
        want = await direct.post(h.upstream.url + "/chat/completions", json=chat_body(True))
        got = await http.post("/chat/completions", json=chat_body(stream=True))
    assert got.content == want.content


async def test_n2_stream_choices_pass(harness: Any) -> None:
    two = "".join(
        c.decode().replace('"index": 0', '"index": 1')
        for c in chunks(Turn(content="second"), "m")[:-1]
    )
    first = b"".join(chunks(Turn(content="first"), "m")[:-1])
    body = first + two.encode() + b"data: [DONE]\n\n"
    raw = Raw(200, {"content-type": "text/event-stream"}, [body])
    h = await harness(raw)
    stream = await h.client().chat.completions.create(
        model="m", messages=chat_body()["messages"], tools=TOOLS, stream=True, n=2
    )
    texts: dict[int, str] = {}
    async for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
    assert texts == {0: "first", 1: "second"}


@pytest.mark.parametrize("stream", [False, True])
async def test_upstream_429_passes_with_headers(harness: Any, stream: bool) -> None:
    error = b'{"error": {"message": "slow down", "type": "rate_limit", "code": "rate_limited"}}'
    headers = {
        "content-type": "application/json",
        "retry-after": "7",
        "retry-after-ms": "7000",
        "x-request-id": "up-429",
        "x-ratelimit-remaining-requests": "0",
    }
    h = await harness(Raw(429, headers, [error]))
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body(stream=stream))
    assert r.status_code == 429
    assert r.content == error
    for key in ("retry-after", "retry-after-ms", "x-ratelimit-remaining-requests"):
        assert r.headers[key] == headers[key]
    assert h.calls == 1


async def test_upstream_down_is_502_upstream_unavailable(harness: Any) -> None:
    h = await harness(HONEST)
    await h.upstream.stop()
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body())
    assert r.status_code == 502
    assert r.json()["error"]["code"] == "UPSTREAM_UNAVAILABLE"


async def test_slow_upstream_is_504_upstream_timeout(harness: Any) -> None:
    slow = Raw(200, {"content-type": "application/json"}, [b"{}"], delay=2)
    h = await harness(slow, total_timeout=0.5)
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body())
    assert r.status_code == 504
    assert r.json()["error"]["code"] == "UPSTREAM_TIMEOUT"


async def test_requests_without_tools_are_not_inspected(harness: Any) -> None:
    h = await harness(Turn(content=LEAKS["hermes"]))
    body = chat_body()
    del body["tools"]
    async with h.http() as http:
        r = await http.post("/chat/completions", json=body)
    assert r.status_code == 200
    assert r.json()["choices"][0]["message"]["content"] == LEAKS["hermes"]
    assert h.calls == 1


async def test_json_schema_response_format_is_not_inspected(harness: Any) -> None:
    h = await harness(Turn(content=LEAKS["json"]))
    fmt = {"type": "json_schema", "json_schema": {"name": "call", "schema": {}}}
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body(response_format=fmt))
    assert r.json()["choices"][0]["message"]["content"] == LEAKS["json"]
    assert h.calls == 1


async def test_request_forwarded_byte_for_byte_with_unknown_fields(harness: Any) -> None:
    h = await harness(HONEST)
    raw = json.dumps(chat_body(reasoning_effort="high", thinking={"type": "on"}, seed=7)).encode()
    raw = raw.replace(b", ", b",  ")  # spacing no re-serializer would keep
    headers = {"authorization": "Bearer sk-client", "content-type": "application/json"}
    async with h.http() as http:
        r = await http.post("/chat/completions", content=raw, headers=headers)
    assert r.status_code == 200
    seen = h.upstream.requests[0]
    assert seen["raw"] == raw
    assert seen["headers"]["authorization"] == "Bearer sk-client"
    assert seen["headers"]["host"] == f"127.0.0.1:{h.upstream.port}"


async def test_non_json_body_is_forwarded_as_is(harness: Any) -> None:
    h = await harness(Raw(400, {"content-type": "application/json"}, [b'{"error": {}}']))
    async with h.http() as http:
        r = await http.post("/chat/completions", content=b"not json {")
    assert r.status_code == 400
    assert h.upstream.requests[0]["raw"] == b"not json {"


async def test_other_routes_are_proxied_untouched(harness: Any) -> None:
    models = b'{"object": "list", "data": [{"id": "m", "object": "model"}]}'
    h = await harness(Raw(200, {"content-type": "application/json", "x-vendor": "v"}, [models]))
    async with h.http() as http:
        r = await http.get("/models?limit=5", headers={"authorization": "Bearer k"})
    assert r.content == models
    assert r.headers["x-vendor"] == "v"
    assert h.upstream.requests[0]["path"] == "/v1/models?limit=5"


async def test_request_id_is_honoured_and_passed_upstream(harness: Any) -> None:
    h = await harness(HONEST)
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body(), headers={"x-request-id": "r-1"})
    assert r.headers["x-request-id"] == "r-1"
    assert h.upstream.requests[0]["headers"]["x-request-id"] == "r-1"


async def test_health_and_readiness(harness: Any) -> None:
    h = await harness(Raw(401, {}, [b"{}"]))
    async with httpx.AsyncClient(base_url=h.url.removesuffix("/v1")) as http:
        assert (await http.get("/healthz")).json() == {"status": "ok"}
        assert (await http.get("/readyz")).status_code == 200
    await h.upstream.stop()
    await h.restart()
    async with httpx.AsyncClient(base_url=h.url.removesuffix("/v1")) as http:
        assert (await http.get("/readyz")).status_code == 503


def test_completion_helper_shape() -> None:
    body = completion(HONEST, "m")
    assert body["choices"][0]["message"]["content"] == HONEST.content


async def test_keepalive_comments_while_held_and_no_id_or_retry_fields(harness: Any) -> None:
    # A reply that stays a viable JSON tool-call prefix for longer than the keep-alive interval.
    pieces = ['{"name": "get_weather", ', '"arguments": {"city": "Lisbon"}, ', '"note": 1}']
    events = chunks(Turn(content=""), "m")
    head, tail = events[0], events[-2:]
    body = (
        [head]
        + [
            b"data: "
            + json.dumps(
                {
                    "id": "chatcmpl-scripted",
                    "object": "chat.completion.chunk",
                    "created": 1,
                    "model": "m",
                    "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}],
                }
            ).encode()
            + b"\n\n"
            for p in pieces
        ]
        + tail
    )
    raw = Raw(200, {"content-type": "text/event-stream"}, body, delay=0.5)
    h = await harness(raw, keepalive=0.2)
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body(stream=True))
    lines = r.text.splitlines()
    assert ": keep-alive" in lines
    assert not any(line.startswith(("id:", "retry:")) for line in lines)
    # Not a tool call after all ("note" is no vocabulary): the whole text arrives, once.
    text = "".join(
        json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in lines
        if line.startswith("data: {") and json.loads(line[6:])["choices"]
    )
    assert text == "".join(pieces)
    # And the SDK reads the same stream without tripping on the comments.
    stream = await h.client().chat.completions.create(
        model="m", messages=chat_body()["messages"], tools=TOOLS, stream=True
    )
    got, _, _ = await collect(stream)
    assert got == "".join(pieces)


async def test_stream_request_answered_with_whole_json_is_inspected(harness: Any) -> None:
    leak = json.dumps(completion(Turn(content=LEAKS["hermes"]), "m")).encode()
    fine = json.dumps(completion(HONEST, "m")).encode()
    json_headers = {"content-type": "application/json"}
    h = await harness(Raw(200, json_headers, [leak]), Raw(200, json_headers, [fine]))
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body(stream=True))
    assert r.status_code == 200
    assert r.content == fine
    assert r.headers["x-spillguard-action"] == "retried"
    assert h.calls == 2

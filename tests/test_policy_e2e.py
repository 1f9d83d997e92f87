"""x-spillguard-mode and [[rules]] through a real spillguard in front of a scripted upstream:
the header is never forwarded, a bad one is a 400 in the shape of the API the client speaks
(an OpenAI SDK raises BadRequestError), a loosening without leave a 403, and the mode held to
is the one the rules and the header chose."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from spillguard.scripted import Turn
from tests.conftest import TOOLS, chat_body
from tests.samples import HERMES, HONEST

LEAK = Turn(content=HERMES)


async def test_the_header_is_never_forwarded(harness: Any) -> None:
    h = await harness(HONEST)
    async with h.http() as http:
        r = await http.post(
            "/chat/completions", json=chat_body(), headers={"x-spillguard-mode": "fail"}
        )
    assert r.status_code == 200
    (sent,) = h.upstream.requests
    assert "x-spillguard-mode" not in sent["headers"]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_bad_header_is_a_400_in_the_openai_shape(harness: Any, stream: bool) -> None:
    h = await harness(HONEST)
    async with h.http() as http:
        r = await http.post(
            "/chat/completions",
            json=chat_body(stream=stream),
            headers={"x-spillguard-mode": "fial", "x-request-id": "rid-1"},
        )
    assert r.status_code == 400
    assert r.headers["content-type"] == "application/json"
    assert r.headers["x-spillguard-request-id"] == "rid-1"
    assert r.json() == {
        "error": {
            "message": "x-spillguard-mode must be one of observe, retry, repair, fail, not 'fial'",
            "type": "invalid_request_error",
            "param": None,
            "code": "INVALID_MODE_HEADER",
        }
    }
    assert h.calls == 0  # nothing went upstream


async def test_the_openai_sdk_raises_bad_request(harness: Any) -> None:
    h = await harness(HONEST)
    client = h.client(default_headers={"x-spillguard-mode": "strict"})
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            tools=TOOLS,
        )
    assert caught.value.code == "INVALID_MODE_HEADER"


async def test_a_bad_header_on_messages_is_a_400_in_the_anthropic_shape(harness: Any) -> None:
    h = await harness(HONEST)
    client = anthropic.AsyncAnthropic(
        base_url=h.url.removesuffix("/v1"),
        api_key="sk-test",
        max_retries=0,
        default_headers={"x-spillguard-mode": "nope"},
    )
    tool = {"name": "get_weather", "input_schema": {"type": "object", "properties": {}}}
    with pytest.raises(anthropic.BadRequestError) as caught:
        await client.messages.create(
            model="m",
            max_tokens=64,
            messages=[{"role": "user", "content": "hi"}],
            tools=[tool],  # type: ignore[list-item]
        )
    body = caught.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert "x-spillguard-mode must be one of" in body["error"]["message"]
    await client.close()


async def test_loosening_without_leave_is_a_403(harness: Any) -> None:
    h = await harness(LEAK, mode="fail")
    async with h.http() as http:
        r = await http.post(
            "/chat/completions", json=chat_body(), headers={"x-spillguard-mode": "observe"}
        )
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "MODE_LOOSENING_NOT_ALLOWED"
    assert h.calls == 0


async def test_the_header_tightens_a_request(harness: Any) -> None:
    h = await harness(LEAK, mode="observe")
    async with h.http() as http:
        observed = await http.post("/chat/completions", json=chat_body())
        failed = await http.post(
            "/chat/completions", json=chat_body(), headers={"x-spillguard-mode": "FAIL"}
        )
    assert observed.headers["x-spillguard-action"] == "observed"
    assert failed.status_code == 502
    assert failed.json()["error"]["code"] == "TEXT_ENCODED_TOOL_CALL"
    assert h.calls == 2  # fail mode does not retry


async def test_a_marked_proxy_key_loosens(harness: Any) -> None:
    h = await harness(LEAK, mode="fail", proxy_keys=("app",), loosening_keys=("admin",))
    async with h.http() as http:
        headers = {"x-spillguard-mode": "observe"}
        refused = await http.post(
            "/chat/completions",
            json=chat_body(),
            headers=headers | {"authorization": "Bearer app"},
        )
        allowed = await http.post(
            "/chat/completions",
            json=chat_body(),
            headers=headers | {"authorization": "Bearer admin"},
        )
    assert refused.status_code == 403
    assert allowed.status_code == 200
    assert allowed.headers["x-spillguard-action"] == "observed"


async def test_rules_choose_the_mode_by_model(harness: Any) -> None:
    h = await harness(LEAK, mode="observe", rules=[{"model": "grok-*", "mode": "fail"}])
    async with h.http() as http:
        grok = await http.post("/chat/completions", json=chat_body(model="grok-4"))
        other = await http.post("/chat/completions", json=chat_body(model="deepseek-chat"))
    assert grok.status_code == 502
    assert other.headers["x-spillguard-action"] == "observed"

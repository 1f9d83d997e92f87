"""Two scripted upstreams behind one spillguard, at /a/v1 and /b/v1, each with its own injected
key and its own rule; the default stays at /v1 (`mounts.Prefixes` in front of the app, each
request's decision picked by `Context.target`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest

from spillguard.runner import Running, start_background
from spillguard.scripted import ScriptedUpstream, Turn
from spillguard.settings import Settings
from tests.conftest import TOOLS, chat_body
from tests.samples import HERMES
from tests.test_metrics import parse, value

LEAK = Turn(content=HERMES)
FINE = Turn(content="Sunny.")


class Pair:
    def __init__(self, proxy: Running, a: ScriptedUpstream, b: ScriptedUpstream) -> None:
        self.proxy, self.a, self.b = proxy, a, b

    @property
    def origin(self) -> str:
        return self.proxy.url.removesuffix("/v1")

    def http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.origin, timeout=30)


@pytest.fixture
async def pair(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Pair]:
    monkeypatch.setenv("SG_TEST_KEY_A", "key-a")
    monkeypatch.setenv("SG_TEST_KEY_B", "key-b")
    a = await ScriptedUpstream(lambda record: LEAK if len(a.requests) == 1 else FINE).start()
    b = await ScriptedUpstream(lambda record: LEAK).start()
    settings = Settings(
        upstream=a.url,
        port=0,
        log_level="WARNING",
        incidents_db="",
        upstreams={
            "a": {"url": a.url, "api_key_env": "SG_TEST_KEY_A"},
            "b": {"url": b.url, "api_key_env": "SG_TEST_KEY_B"},
        },
        rules=[{"upstream": "b", "mode": "fail"}],
    )
    proxy = await start_background(settings)
    try:
        yield Pair(proxy, a, b)
    finally:
        await proxy.stop()
        await a.stop()
        await b.stop()


async def test_each_prefix_reaches_its_upstream_with_its_key_and_rule(pair: Pair) -> None:
    async with pair.http() as http:
        at_a = await http.post("/a/v1/chat/completions", json=chat_body())
        at_b = await http.post("/b/v1/chat/completions", json=chat_body())
        missing = await http.post("/c/v1/chat/completions", json=chat_body())
    assert at_a.status_code == 200 and at_a.headers["x-spillguard-action"] == "retried"
    assert at_b.status_code == 502  # its rule: fail mode
    assert at_b.json()["error"]["code"] == "TEXT_ENCODED_TOOL_CALL"
    assert missing.status_code == 404
    assert [r["path"] for r in pair.a.requests] == ["/v1/chat/completions"] * 2
    assert [r["path"] for r in pair.b.requests] == ["/v1/chat/completions"]
    assert {r["headers"]["authorization"] for r in pair.a.requests} == {"Bearer key-a"}
    assert pair.b.requests[0]["headers"]["authorization"] == "Bearer key-b"


async def test_an_sdk_pointed_at_a_prefix(pair: Pair) -> None:
    client = openai.AsyncOpenAI(base_url=f"{pair.origin}/b/v1", api_key="sk", max_retries=0)
    with pytest.raises(openai.APIStatusError) as caught:
        await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            tools=TOOLS,  # type: ignore[arg-type]
        )
    assert caught.value.status_code == 502
    assert len(pair.b.requests) == 1 and not pair.a.requests


async def test_relayed_paths_and_the_header_under_a_prefix(pair: Pair) -> None:
    async with pair.http() as http:
        models = await http.get("/b/v1/models?limit=2")
        tightened = await http.post(
            "/a/v1/chat/completions", json=chat_body(), headers={"x-spillguard-mode": "fail"}
        )
    assert models.status_code == 200
    assert pair.b.requests[0]["path"] == "/v1/models?limit=2"
    assert tightened.status_code == 502
    assert "x-spillguard-mode" not in pair.a.requests[0]["headers"]


async def test_metrics_and_readiness_name_each_upstream(pair: Pair) -> None:
    async with pair.http() as http:
        await http.post("/a/v1/chat/completions", json=chat_body())
        await http.post("/b/v1/chat/completions", json=chat_body())
        ready = await http.get("/readyz")
        scraped = parse((await http.get("/metrics")).text)
    assert ready.status_code == 200
    assert ready.json()["upstreams"] == {"default": "ready", "a": "ready", "b": "ready"}
    requests = "spillguard_requests_total"
    labels: dict[str, Any] = {"route": "chat"}
    assert value(scraped, requests, **labels, mode="retry", outcome="retried", upstream="a") == 1
    assert value(scraped, requests, **labels, mode="fail", outcome="failed", upstream="b") == 1
    assert value(scraped, "spillguard_retries_total", route="chat", upstream="a") == 1


async def test_a_bad_header_is_refused_without_tools_too(pair: Pair) -> None:
    async with pair.http() as http:
        r = await http.post(
            "/b/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            headers={"x-spillguard-mode": "loose"},
        )
    assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_MODE_HEADER"
    assert not pair.b.requests


async def test_proxy_keys_guard_every_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SG_TEST_KEY_A", "key-a")
    up = await ScriptedUpstream(lambda record: FINE).start()
    settings = Settings(
        upstream=up.url,
        port=0,
        log_level="WARNING",
        incidents_db="",
        proxy_keys=("client-key",),
        upstreams={"a": {"url": up.url, "api_key_env": "SG_TEST_KEY_A"}},
    )
    proxy = await start_background(settings)
    try:
        async with httpx.AsyncClient(base_url=proxy.url.removesuffix("/v1")) as http:
            refused = await http.get("/a/v1/models")
            allowed = await http.get("/a/v1/models", headers={"authorization": "Bearer client-key"})
    finally:
        await proxy.stop()
        await up.stop()
    assert refused.status_code == 401
    assert allowed.status_code == 200
    (sent,) = up.requests
    assert sent["headers"]["authorization"] == "Bearer key-a"

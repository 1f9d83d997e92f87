"""Proxy-key mode and bounded concurrency, through the real server."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from spillguard.scripted import Raw, Turn
from tests.conftest import chat_body

CANARY = "sk-canary-7f3a9c"


async def test_proxy_key_required_and_upstream_key_injected(harness: Any) -> None:
    h = await harness(Turn(content="hi"), proxy_keys=("pk-one", "pk-two"), upstream_key=CANARY)
    async with h.http() as http:
        missing = await http.post("/chat/completions", json=chat_body())
        wrong = await http.post(
            "/chat/completions", json=chat_body(), headers={"authorization": "Bearer pk-nope"}
        )
        ok = await http.post(
            "/chat/completions", json=chat_body(), headers={"authorization": "Bearer pk-two"}
        )
    for r in (missing, wrong):
        assert r.status_code == 401
        assert r.json()["error"]["code"] == "INVALID_PROXY_KEY"
        assert CANARY not in r.text
    assert ok.status_code == 200
    assert h.calls == 1
    assert h.upstream.requests[0]["headers"]["authorization"] == f"Bearer {CANARY}"


async def test_health_needs_no_key(harness: Any) -> None:
    h = await harness(Turn(content="hi"), proxy_keys=("pk",))
    async with httpx.AsyncClient(base_url=h.url.removesuffix("/v1")) as http:
        assert (await http.get("/healthz")).status_code == 200


async def test_over_the_concurrency_limit_is_503_with_retry_after(harness: Any) -> None:
    slow = Raw(200, {"content-type": "application/json"}, [b"{}"], delay=0.5)
    h = await harness(slow, max_concurrency=1)
    async with h.http() as http:
        first = asyncio.create_task(http.post("/models"))
        await asyncio.sleep(0.2)
        second = await http.post("/models")
        assert (await first).status_code == 200
    assert second.status_code == 503
    assert second.headers["retry-after"] == "1"
    assert second.json()["error"]["code"] == "OVERLOADED"

"""The inspected route's handler through a real spillguard: the policy still sees every
x-spillguard-mode the client sends, in any letter case, though most requests send none."""

from __future__ import annotations

from typing import Any

import httpx

from spillguard.scripted import Turn
from tests.conftest import chat_body
from tests.samples import HERMES, HONEST


async def test_the_mode_header_in_any_case_is_read(harness: Any) -> None:
    h = await harness(Turn(content=HERMES))
    async with h.http() as http:
        r = await http.post(
            "/chat/completions", json=chat_body(), headers={"X-Spillguard-Mode": "fail"}
        )
    assert r.status_code == 502 and r.json()["error"]["code"] == "TEXT_ENCODED_TOOL_CALL"
    assert len(h.upstream.requests) == 1  # failed, not retried


async def test_the_mode_header_twice_is_a_400(harness: Any) -> None:
    h = await harness(HONEST)
    headers = httpx.Headers([("x-spillguard-mode", "fail"), ("x-spillguard-mode", "fail")])
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body(), headers=headers)
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "x-spillguard-mode was sent more than once"
    assert h.upstream.requests == []


async def test_without_the_header_the_configured_mode_holds(harness: Any) -> None:
    h = await harness(Turn(content=HERMES), HONEST, mode="retry")
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body())
    assert r.status_code == 200 and r.headers["x-spillguard-action"] == "retried"
    assert len(h.upstream.requests) == 2

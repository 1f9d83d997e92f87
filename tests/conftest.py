"""Shared fixtures: a scripted upstream and a real spillguard, both on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import openai
import pytest

from spillguard import jsonread
from spillguard.runner import Running, start_background
from spillguard.scripted import Raw, ScriptedUpstream, Turn
from spillguard.settings import Settings

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_in_terminal",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    },
]


class Harness:
    """A scripted upstream plus spillguard in front of it, started per test."""

    def __init__(self) -> None:
        self.turns: list[Turn | Raw] = []
        self.upstream = ScriptedUpstream(self._next)
        self.proxy: Running | None = None

    def _next(self, record: dict[str, Any]) -> Turn | Raw:
        index = len(self.upstream.requests) - 1
        return self.turns[min(index, len(self.turns) - 1)]

    def script(self, *turns: Turn | Raw) -> Harness:
        self.turns = list(turns)
        return self

    async def start(self, **settings: Any) -> Harness:
        await self.upstream.start()
        self.proxy = await start_background(Settings(**(self.base() | settings)))
        return self

    async def restart(self, **settings: Any) -> Harness:
        assert self.proxy is not None
        await self.proxy.stop()
        self.proxy = await start_background(Settings(**(self.base() | settings)))
        return self

    def base(self) -> dict[str, Any]:
        # No incident database: tests that want one name it.
        return {
            "upstream": self.upstream.url,
            "port": 0,
            "log_level": "WARNING",
            "incidents_db": "",
        }

    @property
    def url(self) -> str:
        assert self.proxy is not None
        return self.proxy.url

    @property
    def calls(self) -> int:
        return len(self.upstream.requests)

    def client(self, **kw: Any) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.url, api_key="sk-test", max_retries=0, **kw)

    def http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=30)

    async def stop(self) -> None:
        if self.proxy is not None:
            await self.proxy.stop()
        await self.upstream.stop()


@pytest.fixture
async def harness() -> AsyncIterator[Callable[..., Any]]:
    made: list[Harness] = []

    async def make(*turns: Turn | Raw, **settings: Any) -> Harness:
        h = Harness().script(*turns)
        made.append(h)
        return await h.start(**settings)

    yield make
    for h in made:
        await h.stop()


def chat_body(stream: bool = False, **extra: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [{"role": "user", "content": "weather in Lisbon?"}],
        "tools": TOOLS,
        "stream": stream,
        **extra,
    }


def read_whole_unless(long: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test of both ways a request is read: unless `long`, every request is read whole
    (`jsonread.LEAVE_FROM` out of any request's reach), however long the test's short one."""
    if not long:
        monkeypatch.setattr(jsonread, "LEAVE_FROM", 1 << 62)

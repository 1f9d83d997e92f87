"""The lean path (`lean.Lean`) answers every inspected request exactly as the FastAPI routes
behind it do: the same status, headers and bytes to the client, and the same requests upstream.

Two servers on loopback run the same application; in one the lean table is emptied, so every
request takes the FastAPI routes (which mount the same ASGI apps behind FastAPI's middleware and
routing). Each case is sent to both, with the same scripted upstream replies, and everything
observable is compared.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import uvicorn

from spillguard.asgi import App, create_app
from spillguard.runner import uvicorn_config
from spillguard.scripted import Raw, ScriptedUpstream, Turn, call
from spillguard.settings import Settings
from tests.conftest import chat_body

HERMES = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lisbon"}}\n</tool_call>'
REAL = Turn(tool_calls=[call("get_weather", {"city": "Lisbon"})])
MESSAGES_BODY = {
    "model": "claude",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "weather in Lisbon?"}],
    "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
}
# Differ from one response to the next whatever the path: the server's clock.
VARYING = {"date"}


@contextlib.asynccontextmanager
async def serving(app: App, settings: Settings) -> AsyncIterator[str]:
    server = uvicorn.Server(uvicorn.Config(app, **uvicorn_config(settings, port=0)))
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def both(
    turns: list[Turn | Raw], send: dict[str, Any], **settings: Any
) -> tuple[list[Any], list[Any]]:
    """What the client and the upstream saw, on the lean path and on the FastAPI routes."""
    seen = []
    for lean in (True, False):
        upstream = ScriptedUpstream(_replay(turns))
        await upstream.start()
        options = {"upstream": upstream.url, "log_level": "WARNING", "incidents_db": ""}
        s = Settings(**(options | settings))
        app = create_app(s)
        if not lean:
            app.lean.routes.clear()
        try:
            async with serving(app, s) as base, httpx.AsyncClient(base_url=base) as http:
                r = await http.post(**send)
        finally:
            await upstream.stop()
        headers = [(k, v) for k, v in r.headers.multi_items() if k not in VARYING]
        upstream_saw = [
            (q["method"], q["path"], sorted(_upstream_headers(q)), q["raw"])
            for q in upstream.requests
        ]
        seen.append([(r.status_code, headers, r.content), upstream_saw])
    return seen[0], seen[1]


def _replay(turns: list[Turn | Raw]) -> Any:
    """A script answering each request with the next of `turns`."""
    left = iter(turns)
    return lambda record: next(left)


def _upstream_headers(request: dict[str, Any]) -> list[tuple[str, str]]:
    # The upstream's own host and port: each run of a case has its own scripted upstream.
    return [(k, v) for k, v in request["headers"].items() if k != "host"]


def chat(stream: bool = False, **extra: Any) -> dict[str, Any]:
    headers = {"x-request-id": "rid-lean", "authorization": "Bearer sk-client"}
    return {"url": "/v1/chat/completions", "json": chat_body(stream), "headers": headers} | extra


CASES: dict[str, tuple[list[Turn | Raw], dict[str, Any], dict[str, Any]]] = {
    "benign": ([Turn(content="It is sunny.")], chat(), {}),
    "retried": ([Turn(content=HERMES), REAL], chat(), {}),
    "failed": ([Turn(content=HERMES)], chat(), {"mode": "fail"}),
    "observed": ([Turn(content=HERMES)], chat(), {"mode": "observe"}),
    "stream benign": ([Turn(content="It is sunny in Lisbon today.")], chat(True), {}),
    "stream retried": ([Turn(content="Let me see. " + HERMES), REAL], chat(True), {}),
    "stream failed": ([Turn(content=HERMES)], chat(True), {"mode": "fail"}),
    "no tools": ([Turn(content="hi")], chat(json={"model": "m", "messages": []}), {}),
    "not json": ([Turn(content="hi")], chat(json=None, content=b"{not json"), {}),
    "query and key": (
        [Turn(content="hi")],
        chat(url="/v1/chat/completions?api-version=2024-10-21"),
        {"upstream_key": "sk-upstream-lean-1234"},
    ),
    "upstream 429": (
        [Raw(429, {"retry-after": "3", "content-type": "application/json"}, [b'{"e":1}'])],
        chat(),
        {},
    ),
    "upstream compressed": (
        [Raw(200, {"content-type": "application/json", "content-encoding": "br"}, [b"\x0b"])],
        chat(),
        {},
    ),
    "too large": (
        [Turn(content="hi")],
        chat(json=chat_body(user="x" * 2000)),
        {"max_body": 1024},
    ),
    "anthropic header on chat": (
        [Turn(content="hi")],
        chat(headers={"anthropic-version": "2023-06-01", "x-request-id": "rid-lean"}),
        {},
    ),
    "responses": (
        [Turn(content="It is sunny.")],
        {
            "url": "/v1/responses",
            "json": {"model": "m", "input": "hi", "tools": [{"type": "function", "name": "f"}]},
            "headers": {"x-request-id": "r"},
        },
        {},
    ),
    "messages": (
        [Turn(content=HERMES), Turn(content="It is sunny.")],
        {"url": "/v1/messages", "json": MESSAGES_BODY, "headers": {"x-request-id": "r"}},
        {},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_the_lean_path_answers_as_the_fastapi_routes(case: str) -> None:
    turns, send, settings = CASES[case]
    lean, routed = await both(turns, send, **settings)
    assert lean == routed


async def test_other_paths_and_methods_are_not_taken_by_the_lean_path() -> None:
    app = create_app(Settings(upstream="http://127.0.0.1:9/v1", incidents_db=""))
    taken = []
    for path in list(app.lean.routes):
        app.lean.routes[path] = lambda request, path=path: taken.append(path)  # type: ignore[assignment,misc]
    calls = []

    async def fastapi(scope: Any, receive: Any, send: Any) -> None:
        calls.append((scope["method"], scope["path"]))

    app.lean.app = fastapi
    for method, path in (
        ("GET", "/v1/chat/completions"),
        ("POST", "/v1/chat/completions/"),
        ("POST", "/v1/models"),
        ("POST", "/healthz"),
    ):
        scope = {"type": "http", "method": method, "path": path, "headers": [], "root_path": ""}
        await app.lean(scope, None, None)  # type: ignore[arg-type]
    assert taken == []
    assert len(calls) == 4

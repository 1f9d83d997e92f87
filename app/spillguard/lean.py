"""The lean path: the inspected routes served straight from ASGI, ahead of FastAPI.

FastAPI's per-request middleware stack and routing cost more than a whole request's inspection
(bench/RESULTS.md), and an inspected route uses none of them: it reads the raw request and
answers with a response of its own. So the application uvicorn runs is `Lean`: a POST whose path
is in its table goes straight to that route's endpoint; everything else (the service routes, the
relayed `/v1` paths, other methods, lifespan) goes to the FastAPI application, which still has
the same routes and so answers exactly as it did. `limits.Limits` wraps both.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

from starlette.background import BackgroundTask
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

Endpoint = Callable[[Request], Awaitable[Response]]


class Lean:
    """Routes `POST <path>` for each path in `routes` to its endpoint, the rest to `app`.

    `routes` maps an exact request path (`/v1/chat/completions`) to the endpoint serving it;
    a route served under another prefix is one more entry."""

    def __init__(self, app: ASGIApp, routes: Mapping[str, Endpoint]) -> None:
        self.app = app
        self.routes = dict(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            endpoint = self.routes.get(scope["path"])
            if endpoint is not None:
                # An exception escaping here reaches uvicorn, which logs it and answers 500
                # (as FastAPI's error middleware would have).
                response = await endpoint(Request(scope, receive))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class EventStream(Response):
    """Server-sent events from an async iterator of bytes, sent as sse-starlette's
    `EventSourceResponse` sends them here (its headers but `Connection`, which is the server's;
    `ping_bytes` every `ping` seconds; the body closed as soon as the client leaves, then
    `background`), with one watcher task a stream instead of a task group of four.

    On shutdown the server's own graceful timeout ends a stream still running (uvicorn cancels
    it), where sse-starlette's grace period did the same."""

    media_type = "text/event-stream"

    def __init__(
        self,
        body: AsyncIterator[bytes],
        status: int,
        headers: Mapping[str, str],
        ping: float,
        ping_bytes: bytes,
        background: BackgroundTask | None = None,
    ) -> None:
        self.body_iterator = body
        self.status_code = status
        self.background = background
        self.ping, self.ping_bytes = ping, ping_bytes
        merged = MutableHeaders(headers=dict(headers))
        merged.setdefault("Cache-Control", "no-store")
        merged["X-Accel-Buffering"] = "no"
        self.init_headers(merged)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        lock = asyncio.Lock()  # a ping never lands inside another send
        state = {"active": True, "gone": False}

        async def watch() -> None:
            loop = asyncio.get_running_loop()
            due = loop.time() + self.ping
            while True:
                try:
                    message = await asyncio.wait_for(receive(), max(due - loop.time(), 0))
                except TimeoutError:
                    due += self.ping
                    async with lock:
                        if state["active"]:
                            await send(
                                {
                                    "type": "http.response.body",
                                    "body": self.ping_bytes,
                                    "more_body": True,
                                }
                            )
                    continue
                if message["type"] == "http.disconnect":
                    state["active"], state["gone"] = False, True
                    task.cancel()
                    return

        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        watcher = asyncio.get_running_loop().create_task(watch())
        try:
            try:
                async for chunk in self.body_iterator:
                    async with lock:
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                async with lock:
                    state["active"] = False
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
            finally:
                state["active"] = False
                watcher.cancel()
                aclose = getattr(self.body_iterator, "aclose", None)
                if aclose is not None:
                    await aclose()
        except asyncio.CancelledError:
            if not state["gone"]:
                raise
            task.uncancel()  # the client left: the stream is over, not this task
        if self.background is not None:
            await self.background()

"""The SSE response of the inspected routes' streams: sse-starlette's headers and keep-alive,
with one watcher task a stream (its task group of four cost more than the stream's own work,
bench/RESULTS.md); `id:` and `retry:` fields are never sent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping

from starlette.background import BackgroundTask
from starlette.datastructures import MutableHeaders
from starlette.responses import Response
from starlette.types import Receive, Scope, Send


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

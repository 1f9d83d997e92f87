"""The SSE response of the inspected routes' streams: sse-starlette's headers and keep-alive,
with one watcher task a stream (its task group of four cost more than the stream's own work,
bench/RESULTS.md); `id:` and `retry:` fields are never sent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping

from starlette.background import BackgroundTask
from starlette.datastructures import MutableHeaders
from starlette.responses import Response
from starlette.types import Receive, Scope, Send


class EventStream(Response):
    """Server-sent events from an async iterator of bytes, sent as sse-starlette's
    `EventSourceResponse` sends them here (its headers but `Connection`, which is the server's;
    `ping_bytes` every `ping` seconds, none once `ended()` says the client has had the stream's
    end; the body closed as soon as the client leaves, then `background`), with one watcher
    task a stream instead of a task group of four.

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
        ended: Callable[[], bool] = lambda: False,
    ) -> None:
        self.body_iterator = body
        self.status_code = status
        self.background = background
        self.ping, self.ping_bytes = ping, ping_bytes
        self.ended = ended
        merged = MutableHeaders(headers=dict(headers))
        merged.setdefault("Cache-Control", "no-store")
        merged["X-Accel-Buffering"] = "no"
        self.init_headers(merged)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        # A ping never lands inside another send, without a lock a chunk: a ping takes `lock`
        # and is skipped while a body send is under way (writes are paused then, and the
        # client is about to get bytes anyway); a body send waits only for a ping under way.
        lock = asyncio.Lock()
        active = True  # the body may still send
        sending = False  # a body send is under way
        gone = False  # the client left

        async def watch() -> None:
            nonlocal active, gone
            loop = asyncio.get_running_loop()
            due = loop.time() + self.ping
            ping = {"type": "http.response.body", "body": self.ping_bytes, "more_body": True}
            while True:
                try:
                    message = await asyncio.wait_for(receive(), max(due - loop.time(), 0))
                except TimeoutError:
                    due += self.ping
                    if active and not sending and not self.ended():
                        async with lock:
                            if active:
                                await send(ping)
                    continue
                if message["type"] == "http.disconnect":
                    active, gone = False, True
                    task.cancel()
                    return

        async def body(chunk: bytes, more: bool) -> None:
            nonlocal sending
            message = {"type": "http.response.body", "body": chunk, "more_body": more}
            if lock.locked():
                async with lock:
                    await send(message)
                return
            sending = True
            await send(message)
            sending = False

        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        watcher = asyncio.get_running_loop().create_task(watch())
        try:
            try:
                async for chunk in self.body_iterator:
                    await body(chunk, True)
                active = False
                await body(b"", False)
            finally:
                active = False
                watcher.cancel()
                aclose = getattr(self.body_iterator, "aclose", None)
                if aclose is not None:
                    await aclose()
        except asyncio.CancelledError:
            if not gone:
                raise
            task.uncancel()  # the client left: the stream is over, not this task
        if self.background is not None:
            await self.background()

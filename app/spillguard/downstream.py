"""The client's side of a request: its body, read under a deadline, and noticing it leave.

Both are on every inspected request's path, so each costs one timer and nothing else while the
client behaves: `read_body` arms one `call_later` for the whole body (not an `asyncio.timeout`
per request), and `until_disconnect` watches the client only once a reply has taken
`WATCH_AFTER` seconds (a reply that comes sooner costs no watcher task).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import ClientDisconnect
from starlette.types import Receive

from .errors import ClientError

T = TypeVar("T")
WATCH_AFTER = 0.05  # seconds before a handler waiting on the upstream watches its client


class ClientGone(Exception):
    """The client disconnected while spillguard was still waiting on the upstream."""


class _Alarm:
    """Cancels `task` when its timer fires, and remembers that it did."""

    __slots__ = ("rang", "task")

    def __init__(self, task: asyncio.Task[object]) -> None:
        self.task = task
        self.rang = False

    def __call__(self) -> None:
        self.rang = True
        self.task.cancel()


async def read_body(receive: Receive, declared: str, limit: int, timeout: float) -> bytes:
    """The whole request body, refused with 413 past `limit` (before reading, when the declared
    Content-Length says so) and with 408 if it has not all come within `timeout` seconds."""
    if declared.isdigit() and int(declared) > limit:
        raise ClientError(413, "REQUEST_TOO_LARGE", f"Request body exceeds {limit} bytes")
    task = asyncio.current_task()
    assert task is not None
    alarm = _Alarm(task)
    timer = task.get_loop().call_later(timeout, alarm)
    parts, size = [], 0
    try:
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left
                raise ClientDisconnect()
            part = message.get("body", b"")
            size += len(part)
            if size > limit:
                raise ClientError(413, "REQUEST_TOO_LARGE", f"Request body exceeds {limit} bytes")
            parts.append(part)
            if not message.get("more_body", False):
                break
    except asyncio.CancelledError:
        if not alarm.rang:
            raise
        task.uncancel()
        raise ClientError(
            408, "REQUEST_TIMEOUT", "The request body did not arrive in time"
        ) from None
    finally:
        timer.cancel()
    return parts[0] if len(parts) == 1 else b"".join(parts)


class _Watch:
    """Starts watching the client for a disconnect (when its timer fires), and cancels `task`
    when the client has gone."""

    __slots__ = ("gone", "receive", "task", "watcher")

    def __init__(self, task: asyncio.Task[object], receive: Receive) -> None:
        self.task = task
        self.receive = receive
        self.gone = False
        self.watcher: asyncio.Task[None] | None = None

    def __call__(self) -> None:
        self.watcher = self.task.get_loop().create_task(self._watch())

    async def _watch(self) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass
        self.gone = True
        self.task.cancel()


async def until_disconnect(receive: Receive, work: Awaitable[T]) -> T:
    """Await `work`, cancelling it if the client disconnects first (Starlette does not cancel a
    handler when its client leaves). Call only after the request body has been read.

    The client is watched from `WATCH_AFTER` seconds on: a client that left before then is seen
    as gone at that moment."""
    task = asyncio.current_task()
    assert task is not None
    watch = _Watch(task, receive)
    timer = task.get_loop().call_later(WATCH_AFTER, watch)
    try:
        return await work
    except asyncio.CancelledError:
        if watch.gone:
            raise ClientGone() from None
        raise
    finally:
        timer.cancel()
        if watch.watcher is not None:
            watch.watcher.cancel()

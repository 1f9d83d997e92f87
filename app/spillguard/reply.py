"""An upstream response being read (`Reply`), under its exchange's deadlines.

Every exchange, streamed or read whole, holds its deadlines the same way: one `Deadline` timer
from the request on, through the response headers and every read of the body. It keeps the
total deadline, the read-idle timeout (no byte from the upstream for `read_timeout` seconds)
and a stream's keep-alive bound, and ends the wait on the upstream it finds under way (it
cancels the waiting task); every wait after the total deadline fails at once. The timer is
moved only when it fires, so a read costs a store of the time it heard a byte. aiohttp keeps
only its connect timeout: its read-idle timer was cancelled and set again on every piece the
socket gave (about 4 µs a piece on uvloop, bench/RESULTS.md), and its total timeout was a timer
context around every read.
"""

from __future__ import annotations

import asyncio
import math
import time
import zlib
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Any

import aiohttp
from multidict import CIMultiDictProxy

from .errors import ReplyTooLarge, UpstreamTimeout, UpstreamUnavailable

OnWait = Callable[[float], None]  # told the seconds of each wait on the upstream
TOTAL = "Upstream exceeded the total deadline"
SILENT = "Upstream stopped sending"
BOUND, DEADLINE, IDLE = 1, 2, 3  # what the timer ended a wait for
# uvloop keeps timers in whole milliseconds, and `TimerHandle.when()` may read a hair past the
# time it was set for: a timer this close to where a wait should end is not set again.
SLACK = 0.001


def no_wait(seconds: float) -> None:
    pass


class Deadline:
    """One exchange's total deadline, at `when` (loop time); its read-idle timeout, `idle`
    seconds after the upstream's last byte (`heard`); and the bound of the wait under way
    (`due`): one timer, armed at the earliest of them that may end the wait under way, and
    moved earlier only for a wait that may end sooner.

    A wait registers its task (`begin`); the timer cancels that task when it finds it waiting
    past its bound, past the idle timeout or past the deadline, and notes why (`ended`). A
    cancelled aiohttp read loses nothing: the bytes stay buffered for the next one. The
    silence counts from the last byte read, and only a wait is ended for it: bytes that came
    while spillguard was busy (a client slow to take the stream) are read at once, before it."""

    __slots__ = ("due", "ended", "heard", "idle", "loop", "passed", "timer", "waiter", "when")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, when: float, idle: float = math.inf
    ) -> None:
        self.loop = loop
        self.when = when
        self.idle = idle
        self.heard = loop.time()  # the request counts as the last thing heard
        self.due = math.inf
        self.waiter: asyncio.Task[Any] | None = None
        self.passed = False  # the deadline has come: every wait from now on fails
        self.ended = 0  # BOUND, DEADLINE or IDLE: the timer cancelled the waiter for that
        # Armed where the first wait (the response head's) may end: no second timer for it.
        edge = min(when, self.heard + idle)
        self.timer: asyncio.TimerHandle | None = loop.call_at(edge, self._fire)

    def begin(self, task: asyncio.Task[Any], due: float = math.inf) -> None:
        """`task` waits on the upstream now, until `due` at the latest (loop time)."""
        if self.passed:
            raise UpstreamTimeout(TOTAL)
        self.waiter = task
        self.due = due
        edge = min(due, self.heard + self.idle)
        if edge < self.when:
            timer = self.timer
            if timer is not None and timer.when() > edge + SLACK:
                timer.cancel()
                timer = None
            if timer is None:
                self.timer = self.loop.call_at(edge, self._fire)

    def ended_by(self, task: asyncio.Task[Any]) -> int:
        """In the waiter's `except CancelledError`: BOUND, DEADLINE or IDLE when that cancel is
        this timer's alone (taken back), else 0 (someone else cancelled the task too)."""
        why, self.ended = self.ended, 0
        return why if why and task.uncancel() == 0 else 0

    def end(self, task: asyncio.Task[Any]) -> None:
        """The wait is over, however it ended."""
        self.waiter = None
        self.due = math.inf
        if self.ended:  # the timer cancelled it, but the wait ended otherwise: taken back
            self.ended = 0
            task.uncancel()

    def _fire(self) -> None:
        self.timer = None
        now = self.loop.time()
        waiter = self.waiter
        if now >= self.when:
            self.passed = True
            if waiter is not None:
                self.ended = DEADLINE
                waiter.cancel()
            return
        edge = math.inf
        if waiter is not None:
            silent = self.heard + self.idle
            if now >= silent:
                self.ended = IDLE
            elif now >= self.due:
                self.ended = BOUND
            else:  # not due yet: a byte was heard, or the wait moved on, since it was set
                edge = min(self.due, silent)
            if self.ended:
                waiter.cancel()
        self.timer = self.loop.call_at(min(edge, self.when), self._fire)

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


class Reply:
    """An upstream response being read; release it with `async with` or `close()`. Every wait
    for the body (`chunk`, `wait_chunk`, `read`) is reported to `on_wait`."""

    def __init__(
        self,
        resp: aiohttp.ClientResponse,
        deadline: Deadline,
        decode: bool,
        on_wait: OnWait = no_wait,
    ) -> None:
        self.status = resp.status
        self.headers: CIMultiDictProxy[str] = resp.headers
        self._resp = resp
        self._deadline = deadline
        self._loop = deadline.loop
        self._on_wait = on_wait
        encoding = resp.headers.get("content-encoding", "").strip().lower()
        self.decoded = decode and encoding in ("gzip", "deflate", "x-gzip")
        self._zlib = zlib.decompressobj(47 if "gzip" in encoding else 15) if self.decoded else None

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    @property
    def identity(self) -> bool:
        """The body can be read as text: not compressed, or decoded here."""
        enc = self.headers.get("content-encoding", "identity").strip().lower()
        return enc in ("", "identity") or self.decoded

    def _decoded(self, data: bytes) -> bytes | None:
        """Bytes read, as the body's next piece (decoded, when spillguard decodes); b"" only at
        the end; None for a piece that decodes to nothing yet (a gzip header)."""
        if self._zlib is None:
            return data
        try:
            if not data:
                if not self._zlib.eof:
                    raise UpstreamUnavailable("Upstream's compressed body was cut short")
                return self._zlib.flush()
            return self._zlib.decompress(data) or None
        except zlib.error as exc:
            raise UpstreamUnavailable("Upstream sent a corrupt compressed body") from exc

    async def _read_raw(self) -> bytes:
        """The next bytes of the body (decoded, when spillguard decodes); b"" only at the end.
        The caller holds the deadline (`Deadline.begin`)."""
        while True:
            try:
                data = await self._resp.content.readany()
            except (aiohttp.ClientError, OSError) as exc:
                kind = type(exc).__name__
                raise UpstreamUnavailable(f"Upstream connection failed: {kind}") from exc
            self._deadline.heard = self._loop.time()
            decoded = self._decoded(data)
            if decoded is not None:
                return decoded

    async def _waited(self, due: float) -> bytes | None:
        """`_read_raw` under the deadlines, and until `due` (loop time): None when that came
        first. The next call reads on. A piece already buffered is returned without a wait."""
        task = asyncio.current_task(self._loop)
        assert task is not None
        deadline = self._deadline
        deadline.begin(task, due)
        since = time.perf_counter()
        try:
            return await self._read_raw()
        except asyncio.CancelledError:
            why = deadline.ended_by(task)
            if why == DEADLINE:
                raise UpstreamTimeout(TOTAL) from None
            if why == IDLE:
                raise UpstreamTimeout(SILENT) from None
            if why != BOUND:
                raise
        finally:
            deadline.end(task)
            self._on_wait(time.perf_counter() - since)
        return None

    async def chunk(self) -> bytes:
        """The next piece of the body; b"" at the end. The total deadline applies."""
        data = await self._waited(math.inf)
        assert data is not None  # no bound but the deadline, which raises
        return data

    async def wait_chunk(self, wait: float | None) -> bytes | None:
        """Like `chunk`, but give up waiting after `wait` seconds and return None; the next
        call reads on. No task and no timer a call: the bound is the deadline's timer, moved
        on only when it comes due."""
        return await self._waited(math.inf if wait is None else self._loop.time() + wait)

    async def read(self, limit: int) -> bytes:
        """The whole body, under the deadlines (one wait, for every read of it)."""
        task = asyncio.current_task(self._loop)
        assert task is not None
        deadline = self._deadline
        deadline.begin(task)
        since = time.perf_counter()
        parts, size = [], 0
        try:
            while data := await self._read_raw():
                size += len(data)
                if size > limit:
                    raise ReplyTooLarge(f"Upstream reply exceeded {limit} bytes")
                parts.append(data)
        except asyncio.CancelledError:
            why = deadline.ended_by(task)
            if why == 0:
                raise
            raise UpstreamTimeout(TOTAL if why == DEADLINE else SILENT) from None
        finally:
            deadline.end(task)
            self._on_wait(time.perf_counter() - since)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def iter_raw(self) -> AsyncIterator[bytes]:
        while data := await self.chunk():
            yield data

    def close(self) -> None:
        self._deadline.cancel()
        self._resp.close()

    async def __aenter__(self) -> Reply:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

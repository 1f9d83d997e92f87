"""An upstream response being read (`Reply`), under its exchange's one total deadline.

Every exchange, streamed or read whole, holds its total deadline the same way: one `Deadline`
timer from the request on, through the response headers and every read of the body. It ends
the wait on the upstream it finds under way (it cancels the waiting task), and every wait after
it fails at once. A stream's bounded wait (`Reply.wait_chunk`, the keep-alive's) is the same
timer, moved on lazily. aiohttp keeps only its connect and read-idle timeouts, so no read pays
a timer context of aiohttp's.
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
BOUND, DEADLINE = 1, 2  # what the timer ended a wait for


def no_wait(seconds: float) -> None:
    pass


class Deadline:
    """One exchange's total deadline, at `when` (loop time), and the bound of the wait under
    way (`due`): one timer, armed at the deadline and moved earlier only for a bound.

    A wait registers its task (`begin`); the timer cancels that task when it finds it waiting
    past its bound or the deadline, and notes why (`ended`). A cancelled aiohttp read loses
    nothing: the bytes stay buffered for the next one."""

    __slots__ = ("due", "ended", "loop", "passed", "timer", "waiter", "when")

    def __init__(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        self.loop = loop
        self.when = when
        self.due = math.inf
        self.waiter: asyncio.Task[Any] | None = None
        self.passed = False  # the deadline has come: every wait from now on fails
        self.ended = 0  # BOUND or DEADLINE: the timer cancelled the waiter for that
        self.timer: asyncio.TimerHandle | None = loop.call_at(when, self._fire)

    def begin(self, task: asyncio.Task[Any], due: float = math.inf) -> None:
        """`task` waits on the upstream now, until `due` at the latest (loop time)."""
        if self.passed:
            raise UpstreamTimeout(TOTAL)
        self.waiter = task
        if due < self.when:
            self.due = due
            timer = self.timer
            if timer is not None and timer.when() > due:
                timer.cancel()
                timer = None
            if timer is None:
                self.timer = self.loop.call_at(due, self._fire)

    def ended_by(self, task: asyncio.Task[Any]) -> int:
        """In the waiter's `except CancelledError`: BOUND or DEADLINE when that cancel is this
        timer's alone (taken back), else 0 (someone else cancelled the task too)."""
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
        if waiter is not None and now >= self.due:
            self.ended = BOUND
            waiter.cancel()
        # Not due yet (the wait moved on since the timer was set), or ended: set again.
        due = self.due if waiter is not None and not self.ended else math.inf
        self.timer = self.loop.call_at(min(due, self.when), self._fire)

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

    def _buffered(self) -> bytes | None:
        """The next piece if it is already here (or the end), without waiting; else None."""
        if self._deadline.passed:
            raise UpstreamTimeout(TOTAL)
        content = self._resp.content
        try:
            data = content.read_nowait()
        except TimeoutError as exc:  # aiohttp's read-idle timeout, its only one here
            raise UpstreamTimeout("Upstream stopped sending") from exc
        except (aiohttp.ClientError, OSError) as exc:
            kind = type(exc).__name__
            raise UpstreamUnavailable(f"Upstream connection failed: {kind}") from exc
        if data or content.is_eof():
            return self._decoded(data)
        return None

    async def _read_raw(self) -> bytes:
        """The next bytes of the body (decoded, when spillguard decodes); b"" only at the end.
        The caller holds the deadline (`Deadline.begin`)."""
        while True:
            try:
                data = await self._resp.content.readany()
            except TimeoutError as exc:  # aiohttp's read-idle timeout, its only one here
                raise UpstreamTimeout("Upstream stopped sending") from exc
            except (aiohttp.ClientError, OSError) as exc:
                kind = type(exc).__name__
                raise UpstreamUnavailable(f"Upstream connection failed: {kind}") from exc
            decoded = self._decoded(data)
            if decoded is not None:
                return decoded

    async def _waited(self, due: float) -> bytes | None:
        """`_read_raw` under the deadline, and until `due` (loop time): None when that came
        first. The next call reads on."""
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
        call reads on. No task and no timer a call: a piece already here costs no wait, and
        the bound is the deadline's timer, moved on only when it comes due."""
        data = self._buffered()
        if data is not None:
            return data
        return await self._waited(math.inf if wait is None else self._loop.time() + wait)

    async def read(self, limit: int) -> bytes:
        """The whole body, under the total deadline (one wait, for every read of it)."""
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
            if deadline.ended_by(task) != DEADLINE:
                raise
            raise UpstreamTimeout(TOTAL) from None
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

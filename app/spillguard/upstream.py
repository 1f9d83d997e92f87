"""The upstream hop, on aiohttp: one pooled session, strict hygiene, and foreign errors mapped.

Hygiene: no cookie jar (one user's Set-Cookie must never reach another), no environment proxies,
no redirects, no transparent decompression (bytes pass as sent; routes that inspect ask for an
identity encoding and decode gzip or deflate themselves if the upstream compresses anyway).
"""

from __future__ import annotations

import asyncio
import math
import time
import zlib
from collections.abc import AsyncIterator, Callable, Mapping
from types import TracebackType
from typing import Any
from urllib.parse import unquote, urlsplit

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy

from .errors import ClientError, ReplyTooLarge, UpstreamTimeout, UpstreamUnavailable
from .settings import Settings

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)


def end_to_end(headers: Mapping[str, str], drop: frozenset[str] = frozenset()) -> dict[str, str]:
    """Headers minus hop-by-hop ones, those named in Connection, and `drop`; names in lower
    case, repeated headers joined as HTTP allows (Set-Cookie values newline-separated, for
    `handlers.respond` to send as separate lines)."""
    named: set[str] = set()
    if "connection" in headers:  # as case-blind as `_getall` for each kind of headers
        for value in _getall(headers, "connection"):
            named.update(t.strip().lower() for t in value.split(","))
    out: dict[str, str] = {}
    for key, value in headers.items():
        low = key.lower()
        if low in HOP_BY_HOP or low in named or low in drop:
            continue
        if low in out:  # Set-Cookie cannot be comma-joined: kept apart, see `set_cookies`
            value = out[low] + ("\n" if low == "set-cookie" else ", ") + value
        out[low] = value
    return out


def _getall(headers: Mapping[str, str], key: str) -> list[str]:
    getall = getattr(headers, "getall", None)  # multidict
    if getall is not None:
        return list(getall(key, []))
    getlist = getattr(headers, "getlist", None)  # Starlette
    if getlist is not None:
        return list(getlist(key))
    value = headers.get(key)
    return [value] if value is not None else []


def target_path(base_path: str, rest: str) -> str:
    """`<base path>/<rest>`, refusing anything that could leave the configured origin or path."""
    decoded = unquote(unquote(rest))
    if (
        rest.startswith("/")
        or "\\" in decoded
        or "@" in decoded
        or "://" in decoded
        or "?" in decoded  # the query travels apart; in the path it could cut a ".." free
        or "#" in decoded
        or any(seg in (".", "..") for seg in decoded.split("/"))
        or "//" in decoded
        or any(ord(c) < 0x20 for c in decoded)
    ):
        raise ClientError(400, "INVALID_PATH", "Request path is not allowed")
    return f"{base_path.rstrip('/')}/{rest}"


OnWait = Callable[[float], None]  # told the seconds of each wait on the upstream


def _no_wait(seconds: float) -> None:
    pass


class Reply:
    """An upstream response being read; release it with `async with` or `close()`. Every wait
    for the body (`chunk`, `wait_chunk`, `read`) is reported to `on_wait`."""

    def __init__(
        self,
        resp: aiohttp.ClientResponse,
        deadline: float,
        decode: bool,
        on_wait: OnWait = _no_wait,
        alarm: _Deadline | None = None,
    ) -> None:
        self.status = resp.status
        self.headers: CIMultiDictProxy[str] = resp.headers
        self._resp = resp
        self._deadline = deadline
        self._on_wait = on_wait
        self._alarm = alarm  # the total deadline of a reply opened `whole`
        encoding = resp.headers.get("content-encoding", "").strip().lower()
        self.decoded = decode and encoding in ("gzip", "deflate", "x-gzip")
        self._zlib = zlib.decompressobj(47 if "gzip" in encoding else 15) if self.decoded else None
        # `wait_chunk`'s bound: one timer a reply, moved on lazily, that cancels the read it
        # finds waiting past `_due` (a cancelled read loses nothing: aiohttp keeps the bytes).
        self._due = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._waiting: asyncio.Task[Any] | None = None
        self._woke = False

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    @property
    def identity(self) -> bool:
        """The body can be read as text: not compressed, or decoded here."""
        enc = self.headers.get("content-encoding", "identity").strip().lower()
        return enc in ("", "identity") or self.decoded

    def _timeout(self, exc: BaseException) -> UpstreamTimeout:
        """aiohttp's own timeouts end every wait: the total deadline, or a read-idle one."""
        if asyncio.get_running_loop().time() >= self._deadline:
            return UpstreamTimeout("Upstream exceeded the total deadline")
        return UpstreamTimeout("Upstream stopped sending")

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
        content = self._resp.content
        try:
            data = content.read_nowait()
        except TimeoutError as exc:
            raise self._timeout(exc) from exc
        except (aiohttp.ClientError, OSError) as exc:
            kind = type(exc).__name__
            raise UpstreamUnavailable(f"Upstream connection failed: {kind}") from exc
        if data or content.is_eof():
            return self._decoded(data)
        return None

    async def _read_raw(self) -> bytes:
        """The next bytes of the body (decoded, when spillguard decodes); b"" only at the end.
        aiohttp's total timeout (`Upstream.start`) holds every wait to the deadline."""
        while True:
            try:
                data = await self._resp.content.readany()
            except TimeoutError as exc:
                raise self._timeout(exc) from exc
            except (aiohttp.ClientError, OSError) as exc:
                kind = type(exc).__name__
                raise UpstreamUnavailable(f"Upstream connection failed: {kind}") from exc
            decoded = self._decoded(data)
            if decoded is not None:
                return decoded

    async def chunk(self) -> bytes:
        """The next piece of the body; b"" at the end. The total deadline applies."""
        since = time.perf_counter()
        try:
            return await self._read_raw()
        finally:
            self._on_wait(time.perf_counter() - since)

    async def wait_chunk(self, wait: float | None) -> bytes | None:
        """Like `chunk`, but give up waiting after `wait` seconds and return None; the next
        call reads on. No task and no timer a call: a piece already here costs no wait, and
        the bound is one timer a reply, moved on only when it comes due."""
        data = self._buffered()
        if data is not None:
            return data
        loop = asyncio.get_running_loop()
        self._due = self._deadline if wait is None else min(loop.time() + wait, self._deadline)
        if self._timer is not None and self._timer.when() > self._due:
            self._timer.cancel()
            self._timer = None
        if self._timer is None:
            self._timer = loop.call_at(self._due, self._wake)
        task = self._waiting = asyncio.current_task()
        assert task is not None
        since = time.perf_counter()
        try:
            return await self._read_raw()
        except asyncio.CancelledError:
            if not self._woke:
                raise
            self._woke = False
            if task.uncancel() > 0:  # cancelled from elsewhere too
                raise
        finally:
            self._waiting = None
            if self._woke:  # woken, but the read ended otherwise: take the cancel back
                self._woke = False
                task.uncancel()
            self._on_wait(time.perf_counter() - since)
        if loop.time() >= self._deadline:
            raise UpstreamTimeout("Upstream exceeded the total deadline")
        return None

    def _wake(self) -> None:
        """The bound's timer: a wait still under way past its due time is ended."""
        self._timer = None
        if self._waiting is None:
            return
        loop = asyncio.get_running_loop()
        if loop.time() < self._due:  # the wait moved on since the timer was set
            self._timer = loop.call_at(self._due, self._wake)
            return
        self._woke = True
        self._waiting.cancel()

    async def read(self, limit: int) -> bytes:
        """The whole body, under the total deadline (aiohttp's, or the one timer of a reply
        opened `whole`; not one timer per read)."""
        since = time.perf_counter()
        parts, size = [], 0
        try:
            while data := await self._read_raw():
                size += len(data)
                if size > limit:
                    raise ReplyTooLarge(f"Upstream reply exceeded {limit} bytes")
                parts.append(data)
        except asyncio.CancelledError:
            if self._alarm is None or not self._alarm.expired():
                raise
            raise UpstreamTimeout("Upstream exceeded the total deadline") from None
        finally:
            self._on_wait(time.perf_counter() - since)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def iter_raw(self) -> AsyncIterator[bytes]:
        while data := await self.chunk():
            yield data

    def close(self) -> None:
        if self._alarm is not None:
            self._alarm.cancel()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._resp.close()

    async def __aenter__(self) -> Reply:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class Upstream:
    """A configured upstream origin and a pooled session to it: `settings.upstream`, or `base`
    (the Anthropic upstream's `/v1`)."""

    def __init__(self, settings: Settings, base: str | None = None) -> None:
        self.settings = settings
        parts = urlsplit(settings.upstream if base is None else base)
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.base_path = parts.path
        self._session: aiohttp.ClientSession | None = None
        s = settings
        # The total deadline covers the whole exchange, the body's reads included (aiohttp
        # cancels the timer when the connection is released); never rounded up. A `whole`
        # exchange (`open`) holds it with a timer of its own instead.
        self._timeout = aiohttp.ClientTimeout(
            total=s.total_timeout,
            sock_connect=s.connect_timeout,
            sock_read=s.read_timeout,
            ceil_threshold=math.inf,
        )
        self._timeout_whole = aiohttp.ClientTimeout(
            sock_connect=s.connect_timeout, sock_read=s.read_timeout, ceil_threshold=math.inf
        )

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, enable_cleanup_closed=True),
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
            auto_decompress=False,
            timeout=self._timeout,
            skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def open_connections(self) -> int:
        connector = self._session.connector if self._session else None
        return len(getattr(connector, "_acquired", ())) if connector else 0

    def url(self, rest: str, query: str) -> str:
        path = target_path(self.base_path, rest)
        return f"{self.origin}{path}" + (f"?{query}" if query else "")

    async def open(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: Any,
        *,
        decode: bool = False,
        on_wait: OnWait = _no_wait,
        whole: bool = False,
    ) -> Reply:
        """Send a request and return once the response headers are in. `on_wait` is told how
        long that took, and then every wait for the body.

        `whole`: the calling task reads the reply with `read` and closes it, awaiting nothing
        else meanwhile. Its total deadline is then one timer that cancels this task when it
        comes (`_Deadline`), instead of aiohttp's timer and its checks on every wait; the same
        errors say so (the headers late: "did not answer"; the body: "the total deadline")."""
        assert self._session is not None, "Upstream.start() was not called"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.total_timeout
        if decode:
            headers = _identity(headers)
        alarm = _Deadline(loop, deadline) if whole else None
        resp = None
        since = time.perf_counter()
        try:
            resp = await self._session.request(
                method,
                url,
                headers=headers,
                data=body,
                allow_redirects=False,
                timeout=self._timeout_whole if whole else self._timeout,
            )
        except asyncio.CancelledError:
            if alarm is None or not alarm.expired():
                raise
            raise UpstreamTimeout("Upstream did not answer in time") from None
        except TimeoutError as exc:  # aiohttp's own timeouts are TimeoutError too
            raise UpstreamTimeout("Upstream did not answer in time") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamUnavailable(f"Upstream is unreachable: {type(exc).__name__}") from exc
        finally:
            on_wait(time.perf_counter() - since)
            if resp is None and alarm is not None:  # no reply to close it: not left to ring
                alarm.cancel()
        return Reply(resp, deadline, decode, on_wait, alarm)


class _Deadline:
    """The total deadline of a reply opened `whole`: at `when` (loop time) it cancels the task
    that opened it, and remembers that it did."""

    __slots__ = ("rang", "task", "timer")

    def __init__(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        task = asyncio.current_task(loop)
        assert task is not None
        self.task = task
        self.rang = False
        self.timer = loop.call_at(when, self._ring)

    def _ring(self) -> None:
        self.rang = True
        self.task.cancel()

    def expired(self) -> bool:
        """Whether the CancelledError the task has is this deadline's alone: its cancel taken
        back. False when it did not ring, or something else cancelled the task too."""
        if not self.rang:
            return False
        self.rang = False
        return self.task.uncancel() == 0

    def cancel(self) -> None:
        self.timer.cancel()


def _identity(headers: Mapping[str, str]) -> CIMultiDict[str]:
    """`headers` asking for an identity encoding (aiohttp copies them once more anyway)."""
    send = CIMultiDict(headers)
    send["Accept-Encoding"] = "identity"
    return send

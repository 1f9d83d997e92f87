"""The upstream hop, on aiohttp: one pooled session, strict hygiene, and foreign errors mapped.

Hygiene: no cookie jar (one user's Set-Cookie must never reach another), no environment proxies,
no redirects, no transparent decompression (bytes pass as sent; routes that inspect ask for an
identity encoding and decode gzip or deflate themselves if the upstream compresses anyway).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

import aiohttp
from multidict import CIMultiDict

from .errors import ClientError, UpstreamTimeout, UpstreamUnavailable
from .reply import Deadline, OnWait, Reply, no_wait
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
        # The total deadline and the read-idle timeout are spillguard's own (`reply.Deadline`);
        # aiohttp's connect timeout only, never rounded up.
        self._timeout = aiohttp.ClientTimeout(
            sock_connect=s.connect_timeout, ceil_threshold=math.inf
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
        on_wait: OnWait = no_wait,
    ) -> Reply:
        """Send a request and return once the response headers are in. `on_wait` is told how
        long that took, and then every wait for the body.

        The deadlines cover the whole exchange, headers and body, for every reply alike
        (`reply.Deadline`): the total deadline, and the read-idle timeout counted from the
        request on. Headers late say "did not answer"; a body late says "the total deadline",
        or "stopped sending"."""
        assert self._session is not None, "Upstream.start() was not called"
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        assert task is not None
        if decode:
            headers = _identity(headers)
        s = self.settings
        deadline = Deadline(loop, loop.time() + s.total_timeout, s.read_timeout)
        deadline.begin(task)
        resp = None
        since = time.perf_counter()
        try:
            resp = await self._session.request(
                method, url, headers=headers, data=body, allow_redirects=False
            )
        except asyncio.CancelledError:
            if deadline.ended_by(task) == 0:  # the total deadline or the read-idle timeout
                raise
            raise UpstreamTimeout("Upstream did not answer in time") from None
        except TimeoutError as exc:  # aiohttp's own timeouts are TimeoutError too
            raise UpstreamTimeout("Upstream did not answer in time") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamUnavailable(f"Upstream is unreachable: {type(exc).__name__}") from exc
        finally:
            deadline.end(task)
            on_wait(time.perf_counter() - since)
            if resp is None:  # no reply to close it: not left to ring
                deadline.cancel()
        return Reply(resp, deadline, decode, on_wait)


def _identity(headers: Mapping[str, str]) -> CIMultiDict[str]:
    """`headers` asking for an identity encoding (aiohttp copies them once more anyway)."""
    send = CIMultiDict(headers)
    send["Accept-Encoding"] = "identity"
    return send

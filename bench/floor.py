"""The floor: the thinnest pass-through on spillguard's own stack, to measure spillguard against.

Starlette on uvicorn (uvloop, httptools, the same server options as
`app/spillguard/runner.py`), an aiohttp client session with the same hygiene as
`app/spillguard/upstream.py` (no cookie jar, no environment proxies, no redirects, no
decompression). A JSON reply is read whole and parsed once (what any inspecting
proxy must do at least); a stream is relayed chunk by chunk as it arrives, untouched.
`--parse-events` additionally splits a stream into SSE events and parses each event's JSON once,
to show what per-event parsing alone costs.

Run it with `python -m bench.floor --upstream http://127.0.0.1:9100/v1 --port 9201`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any
from urllib.parse import urlsplit

FORWARD = ("authorization", "content-type", "accept", "x-request-id")


def create_app(upstream: str, parse_events: bool = False) -> Any:
    import aiohttp
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    parts = urlsplit(upstream.rstrip("/"))
    origin, base = f"{parts.scheme}://{parts.netloc}", parts.path
    state: dict[str, aiohttp.ClientSession] = {}

    @asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        state["session"] = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, enable_cleanup_closed=True),
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=120),
            skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
        )
        try:
            yield
        finally:
            await state["session"].close()

    async def proxy(request: Request) -> Response:
        body = await request.body()
        headers = {k: v for k in FORWARD if (v := request.headers.get(k)) is not None}
        url = f"{origin}{base}/{request.path_params['rest']}"
        resp = await state["session"].request(
            request.method, url, headers=headers, data=body, allow_redirects=False
        )
        ctype = resp.headers.get("content-type", "")
        out = {"content-type": ctype}
        if "x-request-id" in resp.headers:
            out["x-request-id"] = resp.headers["x-request-id"]
        if ctype.startswith("text/event-stream"):

            async def relay() -> AsyncIterator[bytes]:
                tail = b""
                try:
                    async for data in resp.content.iter_any():
                        if parse_events:
                            *events, tail = (tail + data).split(b"\n\n")
                            for event in events:
                                payload = event[6:]
                                if payload and payload != b"[DONE]":
                                    json.loads(payload)
                        yield data
                finally:
                    resp.close()

            return StreamingResponse(relay(), resp.status, headers=out)
        try:
            data = await resp.read()
        finally:
            resp.close()
        if "json" in ctype:
            with suppress(ValueError):
                json.loads(data)
        return Response(data, resp.status, headers=out)

    routes = [Route("/v1/{rest:path}", proxy, methods=["GET", "POST"])]
    return Starlette(routes=routes, lifespan=lifespan)


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description="the floor pass-through for the benchmarks")
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9201)
    parser.add_argument("--parse-events", action="store_true")
    args = parser.parse_args(argv)
    uvicorn.run(
        create_app(args.upstream, args.parse_events),
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        access_log=False,
        log_level="warning",
        server_header=False,
        date_header=False,
        proxy_headers=False,
    )


if __name__ == "__main__":
    main()

"""In-process cost of one ASGI call through each routing stack (no network, no upstream).

    python -m bench.asgi_overhead

Times a trivial POST route on a bare Starlette Router, as a Starlette route inside FastAPI, as a
FastAPI APIRoute, and inside spillguard's whole application (guardrails middleware included).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, Router

from app.server import create_app
from app.settings import Settings

CALLS = 20_000


async def ok(request: Request) -> Response:
    return Response(b"ok")


def scope(path: str) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "root_path": "",
    }


async def per_call(app: Any, path: str = "/v1/x") -> float:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        return None

    for _ in range(500):
        await app(scope(path), receive, send)
    start = time.perf_counter()
    for _ in range(CALLS):
        await app(scope(path), receive, send)
    return (time.perf_counter() - start) / CALLS * 1e6


async def main() -> None:
    bare = Router(routes=[Route("/v1/x", ok, methods=["POST"])])
    plain = FastAPI()
    plain.router.add_route("/v1/x", ok, methods=["POST"])
    api = FastAPI()

    @api.post("/v1/x")
    async def ok_api() -> Response:
        return Response(b"ok")

    spillguard = create_app(Settings(incidents_db=""))
    spillguard.router.add_route("/v1/x", ok, methods=["POST"])
    spillguard.router.routes.insert(0, spillguard.router.routes.pop())  # ahead of /v1/{rest}
    for name, app in (
        ("bare Starlette Router", bare),
        ("Starlette route inside FastAPI", plain),
        ("FastAPI APIRoute", api),
        ("spillguard's application", spillguard),
    ):
        print(f"{name:32} {await per_call(app):6.1f} µs per call")


if __name__ == "__main__":
    asyncio.run(main())

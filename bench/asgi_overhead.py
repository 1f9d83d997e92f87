"""In-process cost of one ASGI call through each routing stack (no network, no upstream).

    python -m bench.asgi_overhead

Times a trivial POST route on a bare Starlette Router, as a Starlette route inside FastAPI, as a
FastAPI APIRoute, and inside spillguard's whole application (the limits middleware included):
on its FastAPI side, and on the lean path (`lean.Lean`) its inspected routes take.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, Router

from bench.components import asgi_post_us
from spillguard.asgi import create_app
from spillguard.settings import Settings

CALLS = 20_000


async def ok(request: Request) -> Response:
    return Response(b"ok")


def main() -> None:
    bare = Router(routes=[Route("/v1/x", ok, methods=["POST"])])
    plain = FastAPI()
    plain.router.add_route("/v1/x", ok, methods=["POST"])
    api = FastAPI()

    @api.post("/v1/x")
    async def ok_api() -> Response:
        return Response(b"ok")

    spillguard = create_app(Settings(incidents_db=""))
    router = spillguard.fastapi.router
    router.add_route("/v1/x", ok, methods=["POST"])
    router.routes.insert(0, router.routes.pop())  # ahead of /v1/{rest}
    lean = create_app(Settings(incidents_db=""))
    lean.lean.routes["/v1/x"] = ok
    for name, app in (
        ("bare Starlette Router", bare),
        ("Starlette route inside FastAPI", plain),
        ("FastAPI APIRoute", api),
        ("spillguard's application (FastAPI)", spillguard),
        ("spillguard's application (lean)", lean),
    ):
        print(f"{name:36} {asgi_post_us(app, '/v1/x', b'', CALLS):6.1f} µs per call")


if __name__ == "__main__":
    main()

"""The lean path: the inspected routes served straight from ASGI, ahead of FastAPI.

FastAPI's per-request middleware stack and routing cost more than a whole request's inspection
(bench/RESULTS.md), and an inspected route uses none of them: it reads the raw request and
answers with a response of its own. So the application uvicorn runs is `Lean`: a POST whose path
is in its table goes straight to that route's endpoint; everything else (the service routes, the
relayed `/v1` paths, other methods, lifespan) goes to the FastAPI application, which still has
the same routes and so answers exactly as it did. `limits.Limits` wraps both.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

Endpoint = Callable[[Request], Awaitable[Response]]


class Lean:
    """Routes `POST <path>` for each path in `routes` to its endpoint, the rest to `app`.

    `routes` maps an exact request path (`/v1/chat/completions`) to the endpoint serving it;
    a route served under another prefix is one more entry."""

    def __init__(self, app: ASGIApp, routes: Mapping[str, Endpoint]) -> None:
        self.app = app
        self.routes = dict(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            endpoint = self.routes.get(scope["path"])
            if endpoint is not None:
                # An exception escaping here reaches uvicorn, which logs it and answers 500
                # (as FastAPI's error middleware would have).
                response = await endpoint(Request(scope, receive))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

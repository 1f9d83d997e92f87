"""The lean path: the inspected routes served straight from ASGI, ahead of FastAPI.

FastAPI's per-request middleware stack and routing cost more than a whole request's inspection
(bench/RESULTS.md), and an inspected route uses none of them: it is an ASGI app of its own
(`handlers.Inspected`). So the application uvicorn runs is `Lean`: a POST whose path is in its
table goes straight to that route's app; everything else (the service routes, the
relayed `/v1` paths, other methods, lifespan) goes to the FastAPI application, which still has
the same routes and so answers exactly as it did. `limits.Limits` wraps both.
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.types import ASGIApp, Receive, Scope, Send


class Lean:
    """Routes `POST <path>` for each path in `routes` to its app, the rest to `app`.

    `routes` maps an exact request path (`/v1/chat/completions`) to the ASGI app serving it;
    a route served under another prefix is one more entry."""

    def __init__(self, app: ASGIApp, routes: Mapping[str, ASGIApp]) -> None:
        self.app = app
        self.routes = dict(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            route = self.routes.get(scope["path"])
            if route is not None:
                # An exception escaping here reaches uvicorn, which logs it and answers 500
                # (as FastAPI's error middleware would have).
                await route(scope, receive, send)
                return
        await self.app(scope, receive, send)

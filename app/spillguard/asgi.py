"""The ASGI application: the wiring of settings, upstream, observer, middleware and routes.

The handlers themselves live in `handlers.py`. A wire format is served by adding it to `WIRES`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial

from fastapi import FastAPI, Request, Response
from starlette.routing import Route

from . import chat, handlers, responses
from .errors import SpillguardError
from .handlers import Context
from .limits import Limits
from .logs import setup_logging
from .observe import Observer
from .proxy import Decision
from .settings import Settings
from .upstream import Upstream
from .wire import Wire

log = logging.getLogger("spillguard")
WIRES: tuple[Wire, ...] = (chat.WIRE, responses.WIRE)  # each served at POST /v1/<wire.path>
PROXY_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


def create_app(settings: Settings) -> FastAPI:
    upstream = Upstream(settings)
    ctx = Context(settings, upstream, Observer(settings))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        setup_logging(settings)
        ctx.observer.start()
        await upstream.start()
        origin = upstream.origin.split("://", 1)
        shown = f"{origin[0]}://{origin[-1].rsplit('@', 1)[-1]}"  # never userinfo
        log.info("spillguard ready", extra={"fields": {"upstream": shown}})
        try:
            yield
        finally:
            await upstream.close()
            await asyncio.to_thread(ctx.observer.close)

    app = FastAPI(
        title="spillguard", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    app.state.upstream = upstream
    app.add_middleware(Limits, settings=settings)

    @app.exception_handler(SpillguardError)
    async def _spillguard_error(_: Request, error: SpillguardError) -> Response:
        return handlers.error_response(error)

    # Plain Starlette routes: FastAPI's per-request dependency solving buys nothing for an
    # endpoint that reads the raw request (see bench/RESULTS.md).
    routes = app.router.routes
    routes.append(_get("/healthz", partial(handlers.healthz, ctx)))
    routes.append(_get("/readyz", partial(handlers.readyz, ctx)))
    routes.append(_get("/metrics", partial(handlers.metrics, ctx)))
    for wire in WIRES:
        inspect = partial(handlers.inspected, ctx, Decision(settings, upstream, wire))
        routes.append(Route(f"/v1/{wire.path}", inspect, methods=["POST"]))
    passthrough = partial(handlers.passthrough, ctx)
    routes.append(Route("/v1/{rest:path}", passthrough, methods=PROXY_METHODS))
    return app


def _get(path: str, endpoint: Callable[[Request], Awaitable[Response]]) -> Route:
    """A GET route that, like FastAPI's, does not also answer HEAD."""
    route = Route(path, endpoint, methods=["GET"])
    route.methods = {"GET"}
    return route


def app_from_env() -> FastAPI:
    """The factory uvicorn calls in each worker; settings come from SPILLGUARD_* variables."""
    return create_app(Settings())

"""The ASGI application: the wiring of settings, upstream, observer, middleware and routes.

The handlers themselves live in `handlers.py`. A wire format is served by adding it to `WIRES`.
With an Anthropic upstream configured, each wire has a second decision there, for the requests
that speak Anthropic (`context.py`). The inspected routes are served by `lean.Lean` ahead of
FastAPI (which keeps them too, and serves everything else); `limits.Limits` is in front of both.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial

from fastapi import FastAPI, Request, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from . import chat, handlers, messages, responses
from .context import Context, error_body_for
from .errors import SpillguardError
from .lean import Lean
from .limits import Limits
from .logs import setup_logging
from .mounts import Prefixes
from .observe import Observer
from .settings import Settings
from .upstream import Upstream
from .wire import Wire

log = logging.getLogger("spillguard")
# Each served at POST /v1/<wire.path>.
WIRES: tuple[Wire, ...] = (chat.WIRE, responses.WIRE, messages.WIRE)
PROXY_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


class App:
    """The application uvicorn runs: `Limits`, then the lean routes, then FastAPI (`fastapi`,
    for the service routes and everything relayed)."""

    def __init__(self, fastapi: FastAPI, lean: dict[str, ASGIApp], ctx: Context) -> None:
        self.fastapi = fastapi
        self.lean = Lean(fastapi, lean)
        limits = Limits(self.lean, settings=ctx.settings, observer=ctx.observer)
        # /NAME/v1 is served as /v1 when there are named upstreams; without, no layer for it.
        named = len(ctx.mounts) > 1
        self.app: ASGIApp = Prefixes(limits, ctx.mounts) if named else limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def create_app(settings: Settings) -> App:
    upstream = Upstream(settings)
    base = settings.anthropic_upstream
    anthropic = Upstream(settings, f"{base}/v1") if base is not None else None
    ctx = Context(settings, upstream, Observer(settings), anthropic)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        setup_logging(settings)
        ctx.observer.start()
        for each in ctx.upstreams:
            await each.start()
        fields = {"upstream": _shown(upstream)}
        if anthropic is not None:
            fields["anthropic_upstream"] = _shown(anthropic)
        for name, mount in list(ctx.mounts.items())[1:]:
            fields[f"upstreams.{name}"] = _shown(mount.upstream)
        log.info("spillguard ready", extra={"fields": fields})
        # What start-up made stays for the process's life: frozen out of the collector's view,
        # a collection walks only what requests allocate (bench/RESULTS.md: "The garbage
        # collector", about 80 µs a request before).
        gc.collect()
        gc.freeze()
        try:
            yield
        finally:
            for each in ctx.upstreams:
                await each.close()
            ctx.observer.drain()  # on the loop: nothing is queued for a turn after `close`
            await asyncio.to_thread(ctx.observer.close)
            gc.unfreeze()  # the application is going: what it held may be collected again

    app = FastAPI(
        title="spillguard", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    app.state.upstream = upstream
    app.state.anthropic_upstream = anthropic

    @app.exception_handler(SpillguardError)
    async def _spillguard_error(request: Request, error: SpillguardError) -> Response:
        return handlers.error_response(error, None, error_body_for(request.scope))

    # Plain Starlette routes: FastAPI's per-request dependency solving buys nothing for an
    # endpoint that reads the raw request (see bench/RESULTS.md); the /v1 ones are ASGI apps.
    routes = app.router.routes
    routes.append(_get("/healthz", partial(handlers.healthz, ctx)))
    routes.append(_get("/readyz", partial(handlers.readyz, ctx)))
    routes.append(_get("/metrics", partial(handlers.metrics, ctx)))
    lean: dict[str, ASGIApp] = {}  # request path -> its inspected route's app
    decided = {wire.path: ctx.decisions(wire) for wire in WIRES}
    for wire in WIRES:
        inspect = handlers.Inspected(ctx, decided[wire.path])
        lean[f"/v1/{wire.path}"] = inspect
        routes.append(Route(f"/v1/{wire.path}", inspect, methods=["POST"]))
    # Passed through, but a GET of a spliced response is the Responses decisions' to answer.
    passthrough = handlers.Relayed(ctx, decided[responses.WIRE.path])
    routes.append(Route("/v1/{rest:path}", passthrough, methods=PROXY_METHODS))
    return App(app, lean, ctx)


def _shown(upstream: Upstream) -> str:
    scheme, _, rest = upstream.origin.partition("://")
    return f"{scheme}://{rest.rsplit('@', 1)[-1]}"  # never userinfo


def _get(path: str, endpoint: Callable[[Request], Awaitable[Response]]) -> Route:
    """A GET route that, like FastAPI's, does not also answer HEAD."""
    route = Route(path, endpoint, methods=["GET"])
    route.methods = {"GET"}
    return route


def app_from_env() -> App:
    """The factory uvicorn calls in each worker; settings come from SPILLGUARD_* variables."""
    return create_app(Settings())

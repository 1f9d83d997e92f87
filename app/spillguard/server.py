"""The ASGI application: routes, request bodies, responses. Thin by design."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.background import BackgroundTask

from . import chat as chat_wire
from . import responses as responses_wire
from .detect import declared_tools
from .errors import ClientError, SpillguardError
from .guardrails import Guardrails
from .metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from .observe import Observer, Outcome, setup_logging, timed
from .proxy import Exchange, Guard, Head, action_headers
from .settings import Settings
from .upstream import Upstream, end_to_end

log = logging.getLogger("spillguard")
T = TypeVar("T")
# Request headers never forwarded: the upstream sees its own Host, and bodies are re-framed.
REQUEST_DROP = frozenset({"host", "content-length", "expect"})


class ClientGone(Exception):
    """The client disconnected while spillguard was still waiting on the upstream."""


async def until_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Await `work`, cancelling it if the client disconnects first (Starlette does not cancel a
    handler when its client leaves). Call only after the request body has been read."""
    task = asyncio.current_task()
    assert task is not None
    gone = False

    async def watch() -> None:
        nonlocal gone
        while (await request.receive())["type"] != "http.disconnect":
            pass
        gone = True
        task.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
        return await work
    except asyncio.CancelledError:
        if gone:
            raise ClientGone() from None
        raise
    finally:
        watcher.cancel()


async def read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The whole request body, refused with 413 past `limit` (before reading, when declared)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ClientError(413, "REQUEST_TOO_LARGE", f"Request body exceeds {limit} bytes")
    parts, size = [], 0
    try:
        async with asyncio.timeout(timeout):  # a client that stops sending holds no slot
            async for part in request.stream():
                size += len(part)
                if size > limit:
                    raise ClientError(
                        413, "REQUEST_TOO_LARGE", f"Request body exceeds {limit} bytes"
                    )
                parts.append(part)
    except TimeoutError:
        raise ClientError(
            408, "REQUEST_TIMEOUT", "The request body did not arrive in time"
        ) from None
    return b"".join(parts)


def error_response(error: SpillguardError, headers: dict[str, str] | None = None) -> Response:
    return Response(
        error.json_bytes(), error.status, headers=headers, media_type="application/json"
    )


def create_app(settings: Settings) -> FastAPI:
    upstream = Upstream(settings)
    observer = Observer(settings)
    chat = Guard(settings, upstream, chat_wire.WIRE)
    responses_guard = Guard(settings, upstream, responses_wire.WIRE)
    ready: dict[str, Any] = {"at": 0.0, "ok": False}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        setup_logging(settings)
        observer.start()
        await upstream.start()
        origin = upstream.origin.split("://", 1)
        shown = f"{origin[0]}://{origin[-1].rsplit('@', 1)[-1]}"  # never userinfo
        log.info("spillguard ready", extra={"fields": {"upstream": shown}})
        try:
            yield
        finally:
            await upstream.close()
            await asyncio.to_thread(observer.close)

    app = FastAPI(
        title="spillguard", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    app.state.upstream = upstream
    app.add_middleware(Guardrails, settings=settings)

    @app.exception_handler(SpillguardError)
    async def _spillguard_error(_: Request, error: SpillguardError) -> Response:
        return error_response(error)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> Response:
        now = time.monotonic()
        if now - ready["at"] > 5:
            ready["at"], ready["ok"] = now, await _probe(upstream)
        body = {"status": "ready" if ready["ok"] else "upstream unreachable"}
        return JSONResponse(body, status_code=200 if ready["ok"] else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        data = await asyncio.to_thread(observer.metrics.exposition)
        return Response(data, media_type=METRICS_CONTENT_TYPE)

    def outcome_for(request: Request, route: str) -> Outcome:
        rid = request.headers.get("x-request-id") or f"sg-{uuid.uuid4().hex}"
        return Outcome(request_id=rid[:128], route=route, mode=settings.mode.value)

    upstream_auth = (
        {"authorization": f"Bearer {settings.upstream_key.get_secret_value()}"}
        if settings.upstream_key
        else {}
    )
    drop = REQUEST_DROP | (
        {"authorization", "api-key"} if settings.proxy_keys or settings.upstream_key else set()
    )

    def send_headers(request: Request, outcome: Outcome) -> dict[str, str]:
        headers = {k: _utf8(v) for k, v in end_to_end(request.headers, drop).items()}
        headers |= upstream_auth
        headers["x-request-id"] = outcome.request_id
        return headers

    # The proxy routes are plain Starlette routes: FastAPI's per-request dependency solving
    # buys nothing for an endpoint that reads the raw request (see bench/RESULTS.md).
    async def chat_completions(request: Request) -> Response:
        return await inspected(request, chat, "chat", "chat/completions")

    async def responses(request: Request) -> Response:
        return await inspected(request, responses_guard, "responses", "responses")

    app.router.add_route("/v1/chat/completions", chat_completions, methods=["POST"])
    app.router.add_route("/v1/responses", responses, methods=["POST"])

    async def handled(outcome: Outcome, work: Awaitable[Response]) -> Response:
        """Run a route: spillguard's own errors become their error response, a client that left
        is a 499, and the outcome is recorded once (a streamed body records when it ends)."""
        try:
            return await work
        except SpillguardError as error:
            outcome.status, outcome.error = error.status, error.code
            if outcome.action != "failed":  # failed: a leak; anything else is an error
                outcome.action = "error"
            return error_response(error, _ids(chat.error_headers(error), outcome))
        except ClientGone:
            outcome.status, outcome.action = 499, "client_gone"
            return Response(status_code=499)
        finally:
            if not outcome.deferred:
                observer.record(outcome)

    async def inspected(request: Request, guard: Guard, route: str, path: str) -> Response:
        """A route whose replies are inspected: chat completions, responses."""
        outcome = outcome_for(request, route)
        return await handled(outcome, _inspect(request, guard, path, outcome))

    async def _inspect(request: Request, guard: Guard, path: str, outcome: Outcome) -> Response:
        body = await read_body(request, settings.max_body, settings.read_timeout)
        url = upstream.url(path, request.url.query)
        obj = _parse(body)
        tools = declared_tools(obj)
        headers = send_headers(request, outcome)
        if isinstance(obj, dict):
            outcome.model = obj.get("model") if isinstance(obj.get("model"), str) else None
            outcome.stream = obj.get("stream") is True
        if not isinstance(obj, dict) or not tools.declared:
            return await _forward(request, outcome, url, headers, body)
        ex = Exchange("POST", url, headers, body, obj, tools, outcome)
        if outcome.stream:
            return await _streamed(request, guard, ex)
        status, rheaders, data = await until_disconnect(request, guard.reply(ex))
        outcome.status = status
        rheaders = _ids(rheaders | action_headers(outcome), outcome)
        return respond(Response(data, status), rheaders)

    async def _streamed(request: Request, guard: Guard, ex: Exchange) -> Response:
        agen = guard.stream(ex)
        try:
            head = await until_disconnect(request, anext(agen))
        except BaseException:
            await agen.aclose()
            raise
        assert isinstance(head, Head)
        headers = _ids(head.headers, ex.outcome)

        async def rest() -> AsyncIterator[bytes]:
            try:
                async for item in agen:
                    assert isinstance(item, bytes)
                    yield item
            finally:
                await done()

        async def done() -> None:
            await agen.aclose()
            observer.record(ex.outcome)

        if head.body is not None:
            await agen.aclose()
            return respond(Response(head.body, head.status, media_type="application/json"), headers)
        observer.defer(ex.outcome)
        if not head.sse:
            response = StreamingResponse(rest(), head.status, background=BackgroundTask(done))
            return respond(response, headers)
        cookies = headers.pop("set-cookie", None)
        sse = EventSourceResponse(
            rest(),
            background=BackgroundTask(done),
            status_code=head.status,
            headers=headers,
            ping=int(settings.keepalive) or 1,
            sep="\n",
            ping_message_factory=lambda: ServerSentEvent(comment="keep-alive"),
            shutdown_grace_period=settings.graceful_timeout,
        )
        # sse-starlette adds `Connection: keep-alive`; connection management is the server's.
        sse.raw_headers = [(k, v) for k, v in sse.raw_headers if k != b"connection"]
        return respond(sse, {"set-cookie": cookies} if cookies else {})

    async def _forward(
        request: Request, outcome: Outcome, url: str, headers: dict[str, str], body: Any
    ) -> Response:
        """Pass a request through untouched, streaming both ways."""
        opening = timed(outcome, upstream.open(request.method, url, headers, body))
        reply = await until_disconnect(request, opening)
        outcome.status = reply.status

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for data in reply.iter_raw():
                    yield data
            except SpillguardError as error:  # mid-body: too late for an error response
                outcome.error = error.code
                raise
            finally:
                reply.close()
                observer.record(outcome)

        rheaders = _ids(end_to_end(reply.headers), outcome)

        async def done() -> None:  # async: on the event loop, never in a thread
            observer.record(outcome)

        observer.defer(outcome)  # recorded when the body has been relayed
        response = StreamingResponse(relay(), reply.status, background=BackgroundTask(done))
        return respond(response, rheaders)

    async def passthrough(request: Request) -> Response:
        outcome = outcome_for(request, "other")
        return await handled(outcome, _pass(request, outcome))

    async def _pass(request: Request, outcome: Outcome) -> Response:
        raw_rest = request.scope.get("raw_path", b"").decode("latin-1").split("/v1/", 1)[-1]
        url = upstream.url(raw_rest, request.url.query)
        headers = send_headers(request, outcome)
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > settings.max_body:
            raise ClientError(413, "REQUEST_TOO_LARGE", "Request body too large")
        body: Any = None
        if request.method not in ("GET", "HEAD", "OPTIONS") or declared:
            body = await read_body(request, settings.max_body, settings.read_timeout)
        return await _forward(request, outcome, url, headers, body)

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
    app.router.add_route("/v1/{rest:path}", passthrough, methods=methods)
    return app


def respond(response: Response, headers: dict[str, str]) -> Response:
    """Put relayed headers on a response, each Set-Cookie value on a line of its own."""
    raw = response.raw_headers
    for name, value in headers.items():
        values = value.split("\n") if name == "set-cookie" else [value]
        raw.extend((name.encode("latin-1"), v.encode("latin-1")) for v in values)
    return response


def _utf8(value: str) -> str:
    """A header value as the client's bytes meant it: Starlette decodes them as Latin-1, and
    aiohttp encodes as UTF-8, so UTF-8 bytes would arrive upstream encoded twice."""
    if value.isascii():
        return value
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value


def _ids(headers: dict[str, str], outcome: Outcome) -> dict[str, str]:
    """The request ids on a response: the upstream's own `x-request-id` passes through (an SDK's
    `.request_id`, what its provider's support asks for); spillguard's id fills it otherwise,
    and is always in `x-spillguard-request-id`. Header names here are lower case."""
    headers.setdefault("x-request-id", outcome.request_id)
    headers["x-spillguard-request-id"] = outcome.request_id
    return headers


def _parse(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


async def _probe(upstream: Upstream) -> bool:
    """Reachable: any HTTP answer from the upstream's models route counts."""
    try:
        async with asyncio.timeout(3):
            reply = await upstream.open("GET", upstream.url("models", ""), {}, None)
            reply.close()
        return True
    except (SpillguardError, TimeoutError):
        return False


def app_from_env() -> FastAPI:
    """The factory uvicorn calls in each worker; settings come from SPILLGUARD_* variables."""
    return create_app(Settings())

"""The request handlers: module-level functions of an explicit `Context` and a request.

`asgi.py` binds them to routes. An inspected route reads the body, decides whether it can be
inspected at all, and hands the exchange to its wire's `Decision`; every other `/v1` path is
relayed untouched, streaming both ways. Each request's `Outcome` is recorded exactly once.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.background import BackgroundTask

from .detect import declared_tools
from .errors import ClientError, SpillguardError
from .metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from .observe import Observer
from .outcome import Outcome
from .proxy import Decision, Exchange, Head, action_headers, error_headers, open_upstream
from .settings import Settings
from .upstream import Upstream, end_to_end

T = TypeVar("T")
# Request headers never forwarded: the upstream sees its own Host, and bodies are re-framed.
REQUEST_DROP = frozenset({"host", "content-length", "expect"})
READY_FOR = 5.0  # seconds a readiness probe's answer is reused


@dataclass
class Readiness:
    """The last upstream probe, reused for `READY_FOR` seconds."""

    at: float = -READY_FOR
    ok: bool = False


@dataclass
class Context:
    """What every handler needs: the settings, the upstream, the observer."""

    settings: Settings
    upstream: Upstream
    observer: Observer
    readiness: Readiness = field(default_factory=Readiness)
    # The client's key is dropped when spillguard has its own (proxy keys, or a key it injects).
    _drop: frozenset[str] = field(init=False)
    _auth: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        s = self.settings
        own_key = bool(s.proxy_keys or s.upstream_key)
        self._drop = REQUEST_DROP | (frozenset({"authorization", "api-key"}) if own_key else set())
        key = s.upstream_key
        self._auth = {"authorization": f"Bearer {key.get_secret_value()}"} if key else {}

    def upstream_headers(self, request: Request, outcome: Outcome) -> dict[str, str]:
        """The client's headers as they go upstream: end-to-end ones only, with the request id."""
        headers = {k: _utf8(v) for k, v in end_to_end(request.headers, self._drop).items()}
        headers |= self._auth
        headers["x-request-id"] = outcome.request_id
        return headers

    def outcome_for(self, request: Request, route: str) -> Outcome:
        rid = request.headers.get("x-request-id") or f"sg-{uuid.uuid4().hex}"
        return Outcome(request_id=rid[:128], route=route, mode=self.settings.mode.value)


# ---- the service routes ----------------------------------------------------------------------


async def healthz(ctx: Context, request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(ctx: Context, request: Request) -> Response:
    now, ready = time.monotonic(), ctx.readiness
    if now - ready.at > READY_FOR:
        ready.at, ready.ok = now, await _probe(ctx.upstream)
    body = {"status": "ready" if ready.ok else "upstream unreachable"}
    return JSONResponse(body, status_code=200 if ready.ok else 503)


async def metrics(ctx: Context, request: Request) -> Response:
    data = await asyncio.to_thread(ctx.observer.metrics.exposition)
    return Response(data, media_type=METRICS_CONTENT_TYPE)


# ---- inspected routes ------------------------------------------------------------------------


async def inspected(ctx: Context, decision: Decision, request: Request) -> Response:
    """A route whose replies are inspected (chat completions, responses)."""
    outcome = ctx.outcome_for(request, decision.wire.route)
    return await _handled(ctx, outcome, _inspect(ctx, decision, request, outcome))


async def _inspect(
    ctx: Context, decision: Decision, request: Request, outcome: Outcome
) -> Response:
    s = ctx.settings
    body = await read_body(request, s.max_body, s.read_timeout)
    url = ctx.upstream.url(decision.wire.path, request.url.query)
    obj = _parse(body)
    tools = declared_tools(obj)
    headers = ctx.upstream_headers(request, outcome)
    if isinstance(obj, dict):
        model = obj.get("model")
        outcome.describe(model if isinstance(model, str) else None, obj.get("stream") is True)
    if not isinstance(obj, dict) or not tools.declared:
        return await _forward(ctx, request, outcome, url, headers, body)
    ex = Exchange("POST", url, headers, body, obj, tools, outcome)
    if outcome.stream:
        return await _streamed(ctx, decision, request, ex)
    status, rheaders, data = await until_disconnect(request, decision.reply(ex))
    outcome.answered(status)
    rheaders = _ids(rheaders | action_headers(outcome), outcome)
    return respond(Response(data, status), rheaders)


async def _streamed(ctx: Context, decision: Decision, request: Request, ex: Exchange) -> Response:
    agen = decision.stream(ex)
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
        ctx.observer.record(ex.outcome)

    if head.body is not None:
        await agen.aclose()
        return respond(Response(head.body, head.status, media_type="application/json"), headers)
    ctx.observer.defer(ex.outcome)
    if not head.sse:
        response = StreamingResponse(rest(), head.status, background=BackgroundTask(done))
        return respond(response, headers)
    cookies = headers.pop("set-cookie", None)
    sse = EventSourceResponse(
        rest(),
        background=BackgroundTask(done),
        status_code=head.status,
        headers=headers,
        ping=int(ctx.settings.keepalive) or 1,
        sep="\n",
        ping_message_factory=lambda: ServerSentEvent(comment="keep-alive"),
        shutdown_grace_period=ctx.settings.graceful_timeout,
    )
    # sse-starlette adds `Connection: keep-alive`; connection management is the server's.
    sse.raw_headers = [(k, v) for k, v in sse.raw_headers if k != b"connection"]
    return respond(sse, {"set-cookie": cookies} if cookies else {})


# ---- everything else under /v1 ---------------------------------------------------------------


async def passthrough(ctx: Context, request: Request) -> Response:
    outcome = ctx.outcome_for(request, "other")
    return await _handled(ctx, outcome, _pass(ctx, request, outcome))


async def _pass(ctx: Context, request: Request, outcome: Outcome) -> Response:
    s = ctx.settings
    raw_rest = request.scope.get("raw_path", b"").decode("latin-1").split("/v1/", 1)[-1]
    url = ctx.upstream.url(raw_rest, request.url.query)
    headers = ctx.upstream_headers(request, outcome)
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > s.max_body:
        raise ClientError(413, "REQUEST_TOO_LARGE", "Request body too large")
    body: Any = None
    if request.method not in ("GET", "HEAD", "OPTIONS") or declared:
        body = await read_body(request, s.max_body, s.read_timeout)
    return await _forward(ctx, request, outcome, url, headers, body)


async def _forward(
    ctx: Context,
    request: Request,
    outcome: Outcome,
    url: str,
    headers: dict[str, str],
    body: Any,
) -> Response:
    """Pass a request through untouched, streaming both ways."""
    opening = open_upstream(ctx.upstream, outcome, request.method, url, headers, body)
    reply = await until_disconnect(request, opening)
    outcome.answered(reply.status)

    async def relay() -> AsyncIterator[bytes]:
        try:
            async for data in reply.iter_raw():
                yield data
        except SpillguardError as error:  # mid-body: too late for an error response
            outcome.relay_failed(error.code)
            raise
        finally:
            reply.close()
            ctx.observer.record(outcome)

    rheaders = _ids(end_to_end(reply.headers), outcome)

    async def done() -> None:  # async: on the event loop, never in a thread
        ctx.observer.record(outcome)

    ctx.observer.defer(outcome)  # recorded when the body has been relayed
    response = StreamingResponse(relay(), reply.status, background=BackgroundTask(done))
    return respond(response, rheaders)


# ---- shared ----------------------------------------------------------------------------------


class ClientGone(Exception):
    """The client disconnected while spillguard was still waiting on the upstream."""


async def _handled(ctx: Context, outcome: Outcome, work: Awaitable[Response]) -> Response:
    """Run a route: spillguard's own errors become their error response, a client that left is
    a 499, and the outcome is recorded once (a streamed body records when it ends)."""
    try:
        return await work
    except SpillguardError as error:
        outcome.failed(error.code, error.status)
        return error_response(error, _ids(error_headers(ctx.settings, error), outcome))
    except ClientGone:
        outcome.client_gone()
        return Response(status_code=499)
    finally:
        if not outcome.deferred:
            ctx.observer.record(outcome)


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

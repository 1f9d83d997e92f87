"""The request handlers: module-level functions of an explicit `Context` and a request.

`asgi.py` binds them to routes. An inspected route reads the body, decides whether it can be
inspected at all, and hands the exchange to its wire's `Decision` (the one for the upstream the
request goes to, `context.py`); every other `/v1` path is relayed untouched, streaming both
ways. Each request's `Outcome` is recorded exactly once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Mapping
from types import MappingProxyType
from typing import Any, cast

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

from . import jsonread
from .chains import Chains, Lookup
from .context import Context, ErrorBody, error_body_for, response_ids
from .detect import declared_tools
from .downstream import ClientGone, read_body, until_disconnect
from .errors import ClientError, SpillguardError
from .eventstream import EventStream
from .metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from .mounts import Target
from .outcome import Outcome
from .policy import MODE_HEADER
from .proxy import (
    REFRAMED,
    Decision,
    Exchange,
    Head,
    action_headers,
    error_headers,
    open_upstream,
)
from .upstream import Upstream, end_to_end

RAW_MODE_HEADER = MODE_HEADER.encode()
NO_HEADERS: Mapping[str, str] = MappingProxyType({})

# ---- the service routes ----------------------------------------------------------------------


async def healthz(ctx: Context, request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(ctx: Context, request: Request) -> Response:
    ready = await ctx.ready()
    return JSONResponse(ready.body(), status_code=200 if ready.ok else 503)


async def metrics(ctx: Context, request: Request) -> Response:
    data = await asyncio.to_thread(ctx.observer.metrics.exposition)
    return Response(data, media_type=METRICS_CONTENT_TYPE)


# ---- inspected routes ------------------------------------------------------------------------


async def inspected(
    ctx: Context, decisions: Mapping[Target, Decision], request: Request
) -> Response:
    """A route whose replies are inspected (chat completions, responses, messages), through
    its wire's decision for the upstream the request goes to (`Context.target`)."""
    decision = decisions[ctx.target(request)]
    outcome = ctx.outcome_for(request, decision.wire.route)
    ctx.observer.trace(request.scope, outcome)
    work = _inspect(ctx, decision, request, outcome)
    return await _handled(ctx, request, outcome, work, decision.wire.error_body)


async def _inspect(
    ctx: Context, decision: Decision, request: Request, outcome: Outcome
) -> Response:
    s = ctx.settings
    body = await read_body(request.receive, _declared(request), s.max_body, s.read_timeout)
    url = decision.url(_query(request))
    obj = _parse(body)
    tools = declared_tools(obj)
    headers = ctx.upstream_headers(request, outcome)
    if isinstance(obj, dict):
        model = obj.get("model")
        outcome.describe(model if isinstance(model, str) else None, obj.get("stream") is True)
    # Before forwarding too: a bad x-spillguard-mode is refused even without tools.
    policy = ctx.policy_for(_mode_headers(request), outcome.model, outcome.upstream)
    outcome.mode = policy.mode.value
    if not isinstance(obj, dict) or not tools.declared:
        if isinstance(obj, dict):  # a next turn without tools may still name a splice
            body = decision.chains.request(body, obj)[0]
        return await _forward(ctx, decision.upstream, request, outcome, url, headers, body)
    ex = Exchange("POST", url, headers, body, obj, tools, outcome, policy)
    if outcome.stream:
        return await _streamed(ctx, decision, request, ex)
    status, rheaders, data = await until_disconnect(request.receive, decision.reply(ex))
    outcome.answered(status)
    rheaders.update(action_headers(outcome))  # the decision's own dict, made for this reply
    return respond(Response(data, status), response_ids(request.scope, rheaders, outcome))


async def _streamed(ctx: Context, decision: Decision, request: Request, ex: Exchange) -> Response:
    agen = decision.stream(ex)
    try:
        head = await until_disconnect(request.receive, anext(agen))
    except BaseException:
        await agen.aclose()
        raise
    assert isinstance(head, Head)
    headers = response_ids(request.scope, head.headers, ex.outcome)

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
    sse = EventStream(
        rest(),
        head.status,
        headers,
        ping=int(ctx.settings.keepalive) or 1,  # whole seconds, as sse-starlette had them
        # The wire's own keep-alive (a comment, or Messages' `ping` event), sent as its bytes.
        ping_bytes=decision.wire.keepalive,
        background=BackgroundTask(done),
    )
    return respond(sse, {"set-cookie": cookies} if cookies else {})


# ---- everything else under /v1 ---------------------------------------------------------------


async def passthrough(
    ctx: Context, responses: Mapping[Target, Decision], request: Request
) -> Response:
    """`responses`: the Responses wire's decisions, whose chains know the spliced responses."""
    outcome = ctx.outcome_for(request, "other")
    ctx.observer.trace(request.scope, outcome)
    work = _pass(ctx, responses[ctx.target(request)].chains, request, outcome)
    return await _handled(ctx, request, outcome, work, error_body_for(request.scope))


async def _pass(ctx: Context, chains: Chains, request: Request, outcome: Outcome) -> Response:
    s = ctx.settings
    raw_rest = request.scope.get("raw_path", b"").decode("latin-1").split("/v1/", 1)[-1]
    upstream = ctx.upstream_for(request)
    url = upstream.url(raw_rest, _query(request))
    headers = ctx.upstream_headers(request, outcome)
    declared = _declared(request)
    if declared.isdigit() and int(declared) > s.max_body:
        raise ClientError(413, "REQUEST_TOO_LARGE", "Request body too large")
    body: Any = None
    if request.method not in ("GET", "HEAD", "OPTIONS") or declared:
        body = await read_body(request.receive, declared, s.max_body, s.read_timeout)
    lookup = chains.lookup(request.method, raw_rest, _query(request))
    if lookup is not None:
        return await _looked_up(ctx, upstream, request, outcome, headers, lookup)
    response = await _forward(ctx, upstream, request, outcome, url, headers, body)
    chains.passed(request.method, raw_rest, response.status_code)
    return response


async def _looked_up(
    ctx: Context,
    upstream: Upstream,
    request: Request,
    outcome: Outcome,
    headers: dict[str, str],
    lookup: Lookup,
) -> Response:
    """A GET of a spliced response: the retry's response, as the client received it."""
    url = upstream.url(lookup.rest, _query(request))
    opening = open_upstream(upstream, outcome, "GET", url, headers, None, decode=True)
    async with await until_disconnect(request.receive, opening) as reply:
        data = await until_disconnect(request.receive, reply.read(ctx.settings.max_reply))
    outcome.answered(reply.status)
    drop = REFRAMED
    if reply.identity:
        data = lookup.reply(reply.status, data)
    else:  # compressed in a way spillguard cannot read: passed as it came
        drop = frozenset({"content-length"})
    rheaders = response_ids(request.scope, end_to_end(reply.headers, drop), outcome)
    return respond(Response(data, reply.status), rheaders)


async def _forward(
    ctx: Context,
    upstream: Upstream,
    request: Request,
    outcome: Outcome,
    url: str,
    headers: dict[str, str],
    body: Any,
) -> Response:
    """Pass a request through untouched, streaming both ways."""
    opening = open_upstream(upstream, outcome, request.method, url, headers, body)
    reply = await until_disconnect(request.receive, opening)
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

    rheaders = response_ids(request.scope, end_to_end(reply.headers), outcome)

    async def done() -> None:  # async: on the event loop, never in a thread
        ctx.observer.record(outcome)

    ctx.observer.defer(outcome)  # recorded when the body has been relayed
    response = StreamingResponse(relay(), reply.status, background=BackgroundTask(done))
    return respond(response, rheaders)


# ---- shared ----------------------------------------------------------------------------------


async def _handled(
    ctx: Context,
    request: Request,
    outcome: Outcome,
    work: Awaitable[Response],
    error_body: ErrorBody,
) -> Response:
    """Run a route: spillguard's own errors become their error response (`error_body` writes
    it, in the route's API shape), a client that left is a 499, and the outcome is recorded
    once (a streamed body records when it ends)."""
    try:
        return await work
    except SpillguardError as error:
        outcome.failed(error.code, error.status)
        headers = response_ids(request.scope, error_headers(ctx.settings, error), outcome)
        return error_response(error, headers, error_body)
    except ClientGone:
        outcome.client_gone()
        return Response(status_code=499)
    finally:
        if not outcome.deferred:
            ctx.observer.record(outcome)


def error_response(
    error: SpillguardError,
    headers: dict[str, str] | None = None,
    error_body: ErrorBody = SpillguardError.json_bytes,
) -> Response:
    return Response(error_body(error), error.status, headers=headers, media_type="application/json")


def respond(response: Response, headers: dict[str, str]) -> Response:
    """Put relayed headers on a response, each Set-Cookie value on a line of its own."""
    raw = response.raw_headers
    for name, value in headers.items():
        if name == "set-cookie":
            raw.extend((b"set-cookie", v.encode("latin-1")) for v in value.split("\n"))
        else:
            raw.append((name.encode("latin-1"), value.encode("latin-1")))
    return response


def _declared(request: Request) -> str:
    """The request's Content-Length as sent ('' without one), read from the raw headers."""
    for name, value in request.scope["headers"]:
        if name == b"content-length":
            return cast(bytes, value).decode("latin-1")
    return ""


def _mode_headers(request: Request) -> Mapping[str, str]:
    """The headers `Context.policy_for` reads: none unless the request sends x-spillguard-mode
    (without it, the policy reads no header), so most requests build no `Headers`."""
    for name, _ in request.scope["headers"]:
        if name == RAW_MODE_HEADER:
            return request.headers
    return NO_HEADERS


def _query(request: Request) -> str:
    """The request's query string, as `request.url.query` has it (without building the URL)."""
    return cast(bytes, request.scope.get("query_string", b"")).decode("latin-1")


def _parse(body: bytes) -> Any:
    try:
        return jsonread.loads(body)
    except (ValueError, RecursionError):
        return None

"""The request handlers, of an explicit `Context`: the service routes (functions of a request),
and the `/v1` routes (ASGI apps, `Inspected` and `Relayed`, which read what they need of the raw
scope once, `Context.incoming`).

`asgi.py` binds them to routes. An inspected route reads the body, decides whether it can be
inspected at all, and hands the exchange to its wire's `Decision` (the one for the upstream the
request goes to, `context.py`); every other `/v1` path is relayed untouched, streaming both
ways. Each request's `Outcome` is recorded exactly once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any, cast

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.datastructures import Headers
from starlette.types import Receive, Scope, Send

from . import jsonread
from .answer import Whole, respond
from .chains import Chains, Lookup
from .context import Context, ErrorBody, Incoming, error_body_for, response_ids
from .detect import declared_tools
from .downstream import ClientGone, read_body, until_disconnect
from .errors import ClientError, SpillguardError
from .eventstream import EventStream
from .metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from .mounts import Target
from .outcome import Outcome
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

NO_HEADERS: Mapping[str, str] = MappingProxyType({})
# What a route answers with: a Starlette response, or a `Whole` one.
Answer = Callable[[Scope, Receive, Send], Awaitable[None]]

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


class Inspected:
    """The ASGI app of a route whose replies are inspected (chat completions, responses,
    messages), through its wire's decision for the target the request goes to."""

    __slots__ = ("ctx", "decisions")

    def __init__(self, ctx: Context, decisions: Mapping[Target, Decision]) -> None:
        self.ctx = ctx
        self.decisions = decisions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx = self.ctx
        came = ctx.incoming(scope)
        target = came.target
        decision = self.decisions[target]
        outcome = Outcome(came.request_id, decision.wire.route, ctx.mode, upstream=target.upstream)
        ctx.observer.trace(scope, outcome)
        work = _inspect(ctx, decision, scope, receive, came, outcome)
        response = await _handled(ctx, scope, outcome, work, decision.wire.error_body)
        await response(scope, receive, send)


async def _inspect(
    ctx: Context,
    decision: Decision,
    scope: Scope,
    receive: Receive,
    came: Incoming,
    outcome: Outcome,
) -> Answer:
    s = ctx.settings
    body = await read_body(receive, came.declared, s.max_body, s.read_timeout)
    url = decision.url(_query(scope))
    obj = _parse(body, decision.wire.unread)
    tools = declared_tools(obj, ctx.known_tools)
    if isinstance(obj, dict):
        model = obj.get("model")
        outcome.describe(model if isinstance(model, str) else None, obj.get("stream") is True)
    # Before forwarding too: a bad x-spillguard-mode is refused even without tools. Without
    # the header, the policy reads none, so most requests build no `Headers`.
    mode_headers = Headers(scope=scope) if came.asks_mode else NO_HEADERS
    policy = ctx.policy_for(mode_headers, outcome.model, outcome.upstream)
    outcome.mode = policy.mode.value
    if not isinstance(obj, dict) or not tools.declared:
        if isinstance(obj, dict):  # a next turn without tools may still name a splice
            body = decision.chains.request(body, obj)[0]
        return await _forward(ctx, came.upstream, scope, receive, outcome, url, came.headers, body)
    ex = Exchange("POST", url, came.headers, body, obj, tools, outcome, policy)
    if outcome.stream:
        return await _streamed(ctx, decision, scope, receive, ex)
    status, rheaders, data = await until_disconnect(receive, decision.reply(ex))
    outcome.answered(status)
    rheaders.update(action_headers(outcome))  # the decision's own dict, made for this reply
    return Whole(status, response_ids(scope, rheaders, outcome), data)


async def _streamed(
    ctx: Context, decision: Decision, scope: Scope, receive: Receive, ex: Exchange
) -> Answer:
    agen = decision.stream(ex)
    try:
        head = await until_disconnect(receive, anext(agen))
    except BaseException:
        await agen.aclose()
        raise
    assert isinstance(head, Head)
    headers = response_ids(scope, head.headers, ex.outcome)

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
        ended=lambda: ex.current is not None and ex.current.closed,
    )
    return respond(sse, {"set-cookie": cookies} if cookies else {})


# ---- everything else under /v1 ---------------------------------------------------------------


class Relayed:
    """The ASGI app of every other /v1 path, relayed untouched. `responses`: the Responses
    wire's decisions, whose chains know the spliced responses."""

    __slots__ = ("ctx", "responses")

    def __init__(self, ctx: Context, responses: Mapping[Target, Decision]) -> None:
        self.ctx = ctx
        self.responses = responses

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx = self.ctx
        came = ctx.incoming(scope)
        outcome = Outcome(came.request_id, "other", ctx.mode, upstream=came.target.upstream)
        ctx.observer.trace(scope, outcome)
        chains = self.responses[came.target].chains
        work = _pass(ctx, chains, scope, receive, came, outcome)
        response = await _handled(ctx, scope, outcome, work, error_body_for(scope))
        await response(scope, receive, send)


async def _pass(
    ctx: Context,
    chains: Chains,
    scope: Scope,
    receive: Receive,
    came: Incoming,
    outcome: Outcome,
) -> Answer:
    s = ctx.settings
    raw_rest = scope.get("raw_path", b"").decode("latin-1").split("/v1/", 1)[-1]
    method: str = scope["method"]
    query = _query(scope)
    upstream = came.upstream
    url = upstream.url(raw_rest, query)
    declared = came.declared
    if declared.isdigit() and int(declared) > s.max_body:
        raise ClientError(413, "REQUEST_TOO_LARGE", "Request body too large")
    body: Any = None
    if method not in ("GET", "HEAD", "OPTIONS") or declared:
        body = await read_body(receive, declared, s.max_body, s.read_timeout)
    lookup = chains.lookup(method, raw_rest, query)
    if lookup is not None:
        return await _looked_up(ctx, upstream, scope, receive, outcome, came.headers, lookup)
    response = await _forward(ctx, upstream, scope, receive, outcome, url, came.headers, body)
    chains.passed(method, raw_rest, response.status_code)
    return response


async def _looked_up(
    ctx: Context,
    upstream: Upstream,
    scope: Scope,
    receive: Receive,
    outcome: Outcome,
    headers: dict[str, str],
    lookup: Lookup,
) -> Answer:
    """A GET of a spliced response: the retry's response, as the client received it."""
    url = upstream.url(lookup.rest, _query(scope))
    opening = open_upstream(upstream, outcome, "GET", url, headers, None, decode=True)
    async with await until_disconnect(receive, opening) as reply:
        data = await until_disconnect(receive, reply.read(ctx.settings.max_reply))
    outcome.answered(reply.status)
    drop = REFRAMED
    if reply.identity:
        data = lookup.reply(reply.status, data)
    else:  # compressed in a way spillguard cannot read: passed as it came
        drop = frozenset({"content-length"})
    rheaders = response_ids(scope, end_to_end(reply.headers, drop), outcome)
    return Whole(reply.status, rheaders, data)


async def _forward(
    ctx: Context,
    upstream: Upstream,
    scope: Scope,
    receive: Receive,
    outcome: Outcome,
    url: str,
    headers: dict[str, str],
    body: Any,
) -> Response:
    """Pass a request through untouched, streaming both ways."""
    opening = open_upstream(upstream, outcome, scope["method"], url, headers, body)
    reply = await until_disconnect(receive, opening)
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

    rheaders = response_ids(scope, end_to_end(reply.headers), outcome)

    async def done() -> None:  # async: on the event loop, never in a thread
        ctx.observer.record(outcome)

    ctx.observer.defer(outcome)  # recorded when the body has been relayed
    response = StreamingResponse(relay(), reply.status, background=BackgroundTask(done))
    return respond(response, rheaders)


# ---- shared ----------------------------------------------------------------------------------


async def _handled(
    ctx: Context,
    scope: Scope,
    outcome: Outcome,
    work: Awaitable[Answer],
    error_body: ErrorBody,
) -> Answer:
    """Run a route: spillguard's own errors become their error response (`error_body` writes
    it, in the route's API shape), a client that left is a 499, and the outcome is recorded
    once (a streamed body records when it ends)."""
    try:
        return await work
    except SpillguardError as error:
        outcome.failed(error.code, error.status)
        headers = response_ids(scope, error_headers(ctx.settings, error), outcome)
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


def _query(scope: Scope) -> str:
    """The request's query string, as `request.url.query` has it (without building the URL)."""
    return cast(bytes, scope.get("query_string", b"")).decode("latin-1")


def _parse(body: bytes, unread: frozenset[str]) -> Any:
    try:
        return jsonread.loads_leaving(body, unread)
    except (ValueError, RecursionError):
        return None

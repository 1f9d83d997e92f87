"""The decision: pass, retry once, or fail, for a whole reply or a stream, over any wire format.

A `Wire` (`wire.py`) knows one API's shapes; this module knows only what to do with a finding.
Streams are an async generator that first yields a `Head` (the status and headers to start the
response with, decided as late as `start.ResponseStart` allows) and then bytes.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any

from .detect import Finding, ToolSet
from .errors import InternalError, LeakedToolCall, ReplyTooLarge, SpillguardError, UpstreamError
from .outcome import Action, Outcome
from .settings import Mode, Settings
from .sse import Out, SSEDecoder, SSEError
from .start import ResponseStart, Send
from .upstream import Reply, Upstream, end_to_end
from .wire import Stream, Wire

DRAIN_SECONDS = 1.0  # at most this long reading on after a marker, for the name and family
log = logging.getLogger("spillguard")
# Headers of a reply whose body spillguard may rewrite or re-frame.
REFRAMED = frozenset({"content-length", "content-encoding"})


@dataclass
class Exchange:
    """One client request on its way through."""

    method: str
    url: str
    headers: dict[str, str]  # to send upstream
    body: bytes
    obj: dict[str, Any]
    tools: ToolSet
    outcome: Outcome
    current: Stream | None = None  # the stream being edited, for an error event's place in it


@dataclass
class Head:
    status: int
    headers: dict[str, str]
    sse: bool = True
    body: bytes | None = None  # a complete response (errors) instead of a stream


def action_headers(outcome: Outcome) -> dict[str, str]:
    out = {"x-spillguard-action": str(outcome.action)}
    if outcome.family:
        out["x-spillguard-family"] = outcome.family
    return out


def error_headers(settings: Settings, error: SpillguardError) -> dict[str, str]:
    if isinstance(error, LeakedToolCall) and settings.should_retry_header:
        return {"x-should-retry": settings.should_retry_header}
    return {}


async def open_upstream(
    upstream: Upstream,
    outcome: Outcome,
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: Any,
    *,
    decode: bool = False,
) -> Reply:
    """One upstream exchange for `outcome`: counted, every wait on it timed, its status noted."""
    outcome.calling()
    reply = await upstream.open(method, url, headers, body, decode=decode, on_wait=outcome.waited)
    outcome.upstream_answered(reply.status)
    return reply


def _passed(attempt: int) -> Action:
    return Action.RETRIED if attempt == 2 else Action.PASSED


class Decision:
    """For one wire: send the request upstream, inspect the reply, and pass it, retry once with
    the corrective instruction, or fail with TEXT_ENCODED_TOOL_CALL."""

    def __init__(self, settings: Settings, upstream: Upstream, wire: Wire) -> None:
        self.settings = settings
        self.upstream = upstream
        self.wire = wire

    def _leak(self, ex: Exchange, finding: Finding, attempt: int) -> LeakedToolCall:
        ex.outcome.act(Action.FAILED)
        return LeakedToolCall(
            {
                "tool_name": finding.tool_name,
                "family": finding.family,
                "request_id": ex.outcome.request_id,
                "attempts": attempt,
            }
        )

    def _note(self, ex: Exchange, finding: Finding, attempt: int) -> None:
        ex.outcome.finding(finding.family, finding.tool_name, attempt, finding.excerpt)

    async def _open(self, ex: Exchange, body: bytes) -> Reply:
        return await open_upstream(
            self.upstream, ex.outcome, ex.method, ex.url, ex.headers, body, decode=True
        )

    def _retry(self, ex: Exchange, found: tuple[Finding, str], attempt: int) -> bytes:
        """The retry request. One that cannot be written as standard JSON (a body too deep, a
        number out of range, `messages` that is no list) cannot be retried: the leak fails."""
        finding, leaked = found
        try:
            return self.wire.retry_request(ex.body, ex.obj, leaked, self.settings.correction)
        except (TypeError, ValueError, RecursionError) as exc:
            log.warning("retry impossible", extra={"fields": {"error": type(exc).__name__}})
            raise self._leak(ex, finding, attempt) from None

    # ---- whole replies -------------------------------------------------------------------

    async def reply(self, ex: Exchange) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) for a non-streamed request."""
        s = self.settings
        body = ex.body
        for attempt in (1, 2):
            ex.outcome.attempt(attempt)
            async with await self._open(ex, body) as reply:
                data = await reply.read(s.max_reply)
                headers = end_to_end(reply.headers, REFRAMED)
                status, ctype, identity = reply.status, reply.content_type, reply.identity
                if not identity:  # compressed in a way spillguard cannot read: pass it as is
                    headers = end_to_end(reply.headers, frozenset({"content-length"}))
            if status != 200 or "json" not in ctype or not identity:
                if attempt == 2:
                    ex.outcome.act(Action.RETRIED)
                return status, headers, data  # the upstream's own answer, as it sent it
            found = self._judge_whole(ex, data, attempt)
            if found is None:
                return status, headers, data
            body = self._retry(ex, found, attempt)
        raise AssertionError("unreachable")

    def _judge_whole(self, ex: Exchange, data: bytes, attempt: int) -> tuple[Finding, str] | None:
        """Judge a whole JSON reply: None to pass it (setting the action), the finding and the
        leaked text to retry with, or raise the leak when there is no retry left."""
        s = self.settings
        try:
            parsed = json.loads(data)
        except (ValueError, RecursionError):
            parsed = None
        found = self.wire.inspect_reply(parsed, ex.tools, s.hold_limit) if parsed else None
        if found is None:
            ex.outcome.act(_passed(attempt))
            ex.outcome.saw(self.wire.reply_anomalies(parsed, ex.tools), attempt)
            return None
        self._note(ex, found[0], attempt)
        if s.mode is Mode.OBSERVE:
            ex.outcome.act(Action.OBSERVED)
            ex.outcome.saw(self.wire.reply_anomalies(parsed, ex.tools), attempt)
            return None
        if s.mode is Mode.FAIL or attempt == 2:
            raise self._leak(ex, found[0], attempt)
        return found

    # ---- streams -------------------------------------------------------------------------

    async def stream(self, ex: Exchange) -> AsyncGenerator[Head | bytes, None]:
        """Yields one Head, then the bytes of the client's stream. Errors before the Head become
        an error response; after it, an error event in the wire's shape."""
        started = False
        try:
            async for item in self._stream(ex):
                if isinstance(item, Head):
                    started = True
                    ex.outcome.answered(item.status)
                yield item
        except Exception as exc:
            if isinstance(exc, SpillguardError):
                error = exc
            elif isinstance(exc, SSEError):
                error = ReplyTooLarge(f"Upstream sent an event over the size limit: {exc}")
            else:  # a bug of spillguard's own: the client still gets a clean error, never a 500
                log.error("stream failed", extra={"fields": {"error": type(exc).__name__}})
                error = InternalError("spillguard failed while relaying the stream")
            ex.outcome.stream_failed(error.code)
            if started:
                yield self.wire.error_event(error, ex.current)
            else:
                ex.outcome.answered(error.status)
                body = self.wire.error_body(error)
                headers = error_headers(self.settings, error)
                yield Head(error.status, headers, sse=False, body=body)

    def _head(self, ex: Exchange, attempt: int, headers: dict[str, str]) -> Head:
        observe = self.settings.mode is Mode.OBSERVE
        ex.outcome.act(Action.OBSERVED if observe else _passed(attempt))
        return Head(200, headers | action_headers(ex.outcome))

    def _send(
        self, ex: Exchange, attempt: int, headers: dict[str, str], send: Send
    ) -> list[Head | bytes]:
        return [self._head(ex, attempt, headers), send.data] if send.start else [send.data]

    async def _stream(self, ex: Exchange) -> AsyncGenerator[Head | bytes, None]:
        s = self.settings
        body = ex.body
        start = ResponseStart()
        previous: Stream | None = None
        for attempt in (1, 2):
            ex.outcome.attempt(attempt)
            start.next_attempt()
            async with await self._open(ex, body) as reply:
                json_reply = reply.status == 200 and "json" in reply.content_type
                if json_reply and reply.identity and not start.started:
                    # A stream request answered with one JSON reply: judge it whole.
                    data = await reply.read(s.max_reply)
                    found = self._judge_whole(ex, data, attempt)
                    if found is None:
                        headers = end_to_end(reply.headers, REFRAMED) | action_headers(ex.outcome)
                        yield Head(200, headers, sse=False)
                        yield data
                        return
                    body = self._retry(ex, found, attempt)
                    continue
                if (
                    reply.status != 200
                    or reply.content_type != "text/event-stream"
                    or not reply.identity
                ):
                    if start.started:
                        raise UpstreamError(f"Upstream answered the retry with {reply.status}")
                    if attempt == 2:
                        ex.outcome.act(Action.RETRIED)
                    # Bytes go as read: decoded (and re-framed) only if spillguard decoded them.
                    drop = REFRAMED if reply.decoded else frozenset()
                    headers = end_to_end(reply.headers, drop) | action_headers(ex.outcome)
                    yield Head(reply.status, headers, sse=False)
                    async for data in reply.iter_raw():
                        yield data
                    return
                headers = end_to_end(reply.headers, REFRAMED)
                stream = ex.current = self.wire.new_stream(ex.tools, s.hold_limit, previous)
                async for item in self._edit(ex, attempt, reply, stream, start, headers):
                    yield item
            finding = stream.finding
            if finding is None:
                ex.outcome.saw(stream.anomalies, attempt)
                return
            self._note(ex, finding, attempt)
            if s.mode is Mode.OBSERVE:
                ex.outcome.saw(stream.anomalies, attempt)
                return
            if s.mode is Mode.FAIL or attempt == 2 or (start.started and not stream.can_splice):
                raise self._leak(ex, finding, attempt)
            body = self._retry(ex, (finding, stream.leaked_text()), attempt)
            previous = stream if start.started else None

    async def _edit(
        self,
        ex: Exchange,
        attempt: int,
        reply: Reply,
        stream: Stream,
        start: ResponseStart,
        headers: dict[str, str],
    ) -> AsyncGenerator[Head | bytes, None]:
        """One attempt's SSE stream through its editor, until it ends or leaks."""
        s = self.settings
        observe = s.mode is Mode.OBSERVE
        decoder = SSEDecoder()
        while True:
            if start.started:
                chunk: bytes | None = await reply.chunk()
            else:
                chunk = await reply.wait_chunk(s.keepalive)
                if chunk is None:  # held back for long: start the response, keep it alive
                    for item in self._send(ex, attempt, headers, start.idle(self.wire.keepalive)):
                        yield item
                    continue
            outs: list[Out] = []
            for event in decoder.feed(chunk) if chunk else decoder.flush():
                fed = stream.feed(event)
                outs.extend([Out(event.raw)] if observe else fed)
            if not chunk:  # the upstream's stream ended
                if stream.certain:
                    stream.settle()
                else:
                    tail = stream.finish()
                    if not observe and not stream.certain:
                        outs.extend(tail)
                        if stream.trailer:
                            outs.append(Out(stream.trailer))
            leaking = stream.certain and not observe  # this attempt publishes no more
            # Output is publishable by construction; the start policy says when it may go.
            send = start.output(
                b"".join(o.data for o in outs),
                meaningful=any(o.meaningful for o in outs),
                last=not chunk,
                leaking=leaking,
            )
            if send is not None:
                for item in self._send(ex, attempt, headers, send):
                    yield item
            if not observe and stream.holding > s.hold_limit:
                raise ReplyTooLarge(f"Held back more than {s.hold_limit} characters")
            if not chunk or leaking:
                break
        if leaking and chunk:
            await self._drain(reply, decoder, stream)

    async def _drain(self, reply: Reply, decoder: SSEDecoder, stream: Stream) -> None:
        """Read a little more of a leaking reply so its family and tool name settle: bounded
        in size and in time (the retry, or the 502, should not wait for a whole generation)."""
        read = 0
        try:
            async with asyncio.timeout(DRAIN_SECONDS):
                while read < self.settings.hold_limit and not stream.ended:
                    chunk = await reply.chunk()
                    read += len(chunk)
                    for event in decoder.feed(chunk) if chunk else decoder.flush():
                        stream.feed(event)
                    if not chunk:
                        break
        except TimeoutError:
            pass
        stream.settle()

"""The decision: pass, retry once, or fail, for a whole reply or a stream, over any wire format.

A `Wire` (`wire.py`) knows one API's shapes; this module knows only what to do with a finding.
Streams are an async generator that first yields a `Head` (the status and headers to start the
response with, decided as late as `start.ResponseStart` allows) and then bytes.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator

from .chains import Chains
from .correction import correction
from .detect import Finding
from .errors import InternalError, LeakedToolCall, ReplyTooLarge, SpillguardError, UpstreamError
from .exchange import Exchange, Head, action_headers, error_headers, open_upstream
from .outcome import Action
from .settings import Mode, Settings
from .sse import Out, SSEDecoder, SSEError
from .start import ResponseStart, Send
from .upstream import Reply, Upstream, end_to_end
from .usage import Usage
from .wire import Stream, Wire

# The handlers import the exchange's names from here, beside the decision.
__all__ = ["Decision", "Exchange", "Head", "action_headers", "error_headers", "open_upstream"]

DRAIN_SECONDS = 1.0  # at most this long reading on after a marker, for the name and family
log = logging.getLogger("spillguard")
# Headers of a reply whose body spillguard may rewrite or re-frame.
REFRAMED = frozenset({"content-length", "content-encoding"})


def _passed(attempt: int) -> Action:
    return Action.RETRIED if attempt == 2 else Action.PASSED


class Decision:
    """For one wire: send the request upstream, inspect the reply, and pass it, retry once with
    the corrective instruction, or fail with TEXT_ENCODED_TOOL_CALL."""

    def __init__(self, settings: Settings, upstream: Upstream, wire: Wire) -> None:
        self.settings = settings
        self.upstream = upstream
        self.wire = wire
        self.chains = Chains(settings, wire.chaining)  # spliced responses named later

    def _leak(self, ex: Exchange, finding: Finding, attempt: int) -> LeakedToolCall:
        ex.outcome.act(Action.FAILED)
        meta = {
            "tool_name": finding.tool_name,
            "family": finding.family,
            "request_id": ex.outcome.request_id,
            "attempts": attempt,
        }
        leaked = ex.outcome.leaked_usage
        return LeakedToolCall(meta, leaked.total_tokens if leaked is not None else None)

    def _note(self, ex: Exchange, finding: Finding, attempt: int, usage: Usage | None) -> None:
        outcome = ex.outcome
        outcome.finding(finding.family, finding.tool_name, attempt, finding.excerpt, usage)

    async def _open(self, ex: Exchange, body: bytes) -> Reply:
        return await open_upstream(
            self.upstream, ex.outcome, ex.method, ex.url, ex.headers, body, decode=True
        )

    def _retry(self, ex: Exchange, found: tuple[Finding, str], attempt: int) -> bytes:
        """The retry request. One that cannot be written as standard JSON (a body too deep, a
        number out of range, `messages` that is no list) cannot be retried: the leak fails."""
        finding, prose = found
        try:
            instruction = correction(ex.policy, ex.obj)
            return self.wire.retry_request(ex.body, ex.obj, prose, instruction)
        except (TypeError, ValueError, RecursionError) as exc:
            log.warning("retry impossible", extra={"fields": {"error": type(exc).__name__}})
            raise self._leak(ex, finding, attempt) from None

    # ---- whole replies -------------------------------------------------------------------

    async def reply(self, ex: Exchange) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) for a non-streamed request."""
        s = self.settings
        self.chains.rewrite(ex)
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
        try:
            parsed = json.loads(data)
        except (ValueError, RecursionError):
            parsed = None
        found = self.wire.inspect_reply(parsed, ex.tools, ex.policy.hold_limit) if parsed else None
        if found is None or ex.policy.mode is Mode.OBSERVE:  # this reply reaches the client
            ex.outcome.saw(self.wire.reply_anomalies(parsed, ex.tools), attempt)
        if found is None:
            ex.outcome.act(_passed(attempt))
            return None
        self._note(ex, found[0], attempt, self.wire.reply_usage(parsed))
        if ex.policy.mode is Mode.OBSERVE:
            ex.outcome.act(Action.OBSERVED)
            return None
        if ex.policy.mode is Mode.FAIL or attempt == 2:
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
        observe = ex.policy.mode is Mode.OBSERVE
        ex.outcome.act(Action.OBSERVED if observe else _passed(attempt))
        return Head(200, headers | action_headers(ex.outcome))

    def _send(
        self, ex: Exchange, attempt: int, headers: dict[str, str], start: ResponseStart, send: Send
    ) -> list[Head | bytes]:
        if send.data:
            start.delivered(asyncio.get_running_loop().time())
        return [self._head(ex, attempt, headers), send.data] if send.start else [send.data]

    async def _stream(self, ex: Exchange) -> AsyncGenerator[Head | bytes, None]:
        s = self.settings
        self.chains.rewrite(ex)
        body = ex.body
        # The client's wait starts now: keep-alives are measured from its side.
        start = ResponseStart(since=asyncio.get_running_loop().time())
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
                stream = ex.current = self.wire.new_stream(ex.tools, ex.policy.hold_limit, previous)
                edit = self._edit(ex, attempt, reply, stream, start, headers, previous is not None)
                async for item in edit:
                    yield item
            finding = stream.finding
            if finding is None or ex.policy.mode is Mode.OBSERVE:  # this stream reached the client
                ex.outcome.saw(stream.anomalies, attempt)
            if finding is None:
                return
            self._note(ex, finding, attempt, self.wire.stream_usage(stream))
            if ex.policy.mode is Mode.OBSERVE:
                return
            cannot_splice = start.started and not self.chains.may_splice(ex, stream)
            if ex.policy.mode is Mode.FAIL or attempt == 2 or cannot_splice:
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
        splice: bool,
    ) -> AsyncGenerator[Head | bytes, None]:
        """One attempt's SSE stream through its editor, until it ends or leaks."""
        s = self.settings
        observe = ex.policy.mode is Mode.OBSERVE
        decoder = SSEDecoder()
        loop = asyncio.get_running_loop()
        remember = splice and self.chains.stored(ex)  # a stored splice, for later requests
        while True:
            # A keep-alive is due `keepalive` seconds after the client's last byte (or its
            # request), however steadily the upstream sends text that is held back.
            left = start.since + s.keepalive - loop.time()
            chunk: bytes | None = await reply.wait_chunk(left) if left > 0 else None
            if chunk is None:  # keep the connection alive (starting the response if need be)
                for item in self._send(
                    ex, attempt, headers, start, start.idle(self.wire.keepalive)
                ):
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
            if remember and self.chains.remember(stream):  # before the client has the id
                remember = False
            # Output is publishable by construction; the start policy says when it may go.
            send = start.output(
                b"".join(o.data for o in outs),
                meaningful=any(o.meaningful for o in outs),
                last=not chunk,
                leaking=leaking,
            )
            if send is not None:
                for item in self._send(ex, attempt, headers, start, send):
                    yield item
            if not observe and stream.holding > ex.policy.hold_limit:
                raise ReplyTooLarge(f"Held back more than {ex.policy.hold_limit} characters")
            if not chunk or leaking:
                break
        if leaking and chunk:
            await self._drain(reply, decoder, stream, ex.policy.hold_limit)

    async def _drain(self, reply: Reply, decoder: SSEDecoder, stream: Stream, limit: int) -> None:
        """Read a little more of a leaking reply so its family and tool name settle: bounded
        in size and in time (the retry, or the 502, should not wait for a whole generation)."""
        read = 0
        try:
            async with asyncio.timeout(DRAIN_SECONDS):
                while read < limit and not stream.ended:
                    chunk = await reply.chunk()
                    read += len(chunk)
                    for event in decoder.feed(chunk) if chunk else decoder.flush():
                        stream.feed(event)
                    if not chunk:
                        break
        except TimeoutError:
            pass
        stream.settle()

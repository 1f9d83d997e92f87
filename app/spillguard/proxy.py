"""The decision: pass, repair, retry once, or fail, for a whole reply or a stream, over any wire.

A `Wire` (`wire.py`) knows one API's shapes; this module knows only what to do with a finding.
Streams are an async generator that first yields a `Head` (the status and headers to start the
response with, decided as late as `start.ResponseStart` allows) and then bytes; one attempt's
stream goes through `relay.Relay`. A repair (`repair.py`) answers a finding with the calls its
markup spells out, from the one upstream call; whatever cannot be repaired is retried.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from typing import Any

from . import jsonread
from .chains import Chains
from .correction import correction
from .detect import Finding
from .errors import InternalError, LeakedToolCall, ReplyTooLarge, SpillguardError, UpstreamError
from .exchange import Exchange, Head, action_headers, error_headers, open_upstream
from .outcome import Action
from .relay import Attempt, Relay, passed
from .repair import may_repair, repair_calls
from .settings import Mode, Settings
from .sse import SSEError
from .start import ResponseStart, Send
from .upstream import Upstream, end_to_end
from .usage import Usage
from .wire import Repairable, Stream, Wire

# The handlers import the exchange's names from here, beside the decision.
__all__ = ["Decision", "Exchange", "Head", "action_headers", "error_headers", "open_upstream"]

log = logging.getLogger("spillguard")
# Headers of a reply whose body spillguard may rewrite or re-frame.
REFRAMED = frozenset({"content-length", "content-encoding"})


class Decision:
    """For one wire: send the request upstream, inspect the reply, and pass it, repair it (mode
    repair), retry once with the corrective instruction, or fail with TEXT_ENCODED_TOOL_CALL."""

    def __init__(self, settings: Settings, upstream: Upstream, wire: Wire) -> None:
        self.settings = settings
        self.upstream = upstream
        self.wire = wire
        self.chains = Chains(settings, wire.chaining)  # spliced responses named later
        self.relay = Relay(settings, wire, self.chains)
        self._url = upstream.url(wire.path, "")  # checked once: the wire's path never changes

    def url(self, query: str) -> str:
        """Where this wire's requests go upstream, with the client's query string."""
        return f"{self._url}?{query}" if query else self._url

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
            opening = open_upstream(
                self.upstream,
                ex.outcome,
                ex.method,
                ex.url,
                ex.headers,
                body,
                decode=True,
            )
            async with await opening as reply:
                data = await reply.read(s.max_reply)
                headers = end_to_end(reply.headers, REFRAMED)
                status, ctype, identity = reply.status, reply.content_type, reply.identity
                if not identity:  # compressed in a way spillguard cannot read: pass it as is
                    headers = end_to_end(reply.headers, frozenset({"content-length"}))
            if status != 200 or "json" not in ctype or not identity:
                if attempt == 2:
                    ex.outcome.act(Action.RETRIED)
                return status, headers, data  # the upstream's own answer, as it sent it
            judged = self._judge_whole(ex, data, attempt)
            if isinstance(judged, bytes):
                return status, headers, judged
            body = self._retry(ex, judged, attempt)
        raise AssertionError("unreachable")

    def _judge_whole(self, ex: Exchange, data: bytes, attempt: int) -> bytes | tuple[Finding, str]:
        """Judge a whole JSON reply: the body to answer with (the upstream's, or its repair),
        setting the action; the finding and the leaked text to retry with; or raise the leak
        when there is no retry left."""
        try:
            parsed = jsonread.loads(data)
        except (ValueError, RecursionError):
            parsed = None
        found = self.wire.inspect_reply(parsed, ex.tools, ex.policy.hold_limit) if parsed else None
        if found is None or ex.policy.mode is Mode.OBSERVE:  # this reply reaches the client
            ex.outcome.saw(self.wire.reply_anomalies(parsed, ex.tools), attempt)
        if found is None:
            ex.outcome.act(passed(attempt))
            return data
        self._note(ex, found[0], attempt, self.wire.reply_usage(parsed))
        if ex.policy.mode is Mode.OBSERVE:
            ex.outcome.act(Action.OBSERVED)
            return data
        repaired = self._repair_whole(ex, data, parsed, found, attempt)
        if repaired is not None:
            return repaired
        if ex.policy.mode is Mode.FAIL or attempt == 2:
            raise self._leak(ex, found[0], attempt)
        return found

    def _repair_whole(
        self, ex: Exchange, data: bytes, parsed: Any, found: tuple[Finding, str], attempt: int
    ) -> bytes | None:
        """The reply with the calls its markup spells out, when it can be repaired."""
        finding, prose = found
        if self.wire.repair_reply is None or not may_repair(ex.policy, ex.obj, self.wire.chaining):
            return None  # in retry or fail mode, no markup is read out
        markup = self.wire.reply_markup(parsed, finding)
        calls = repair_calls(ex.policy, ex.obj, ex.tools, finding, markup, self.wire.chaining)
        body = self.wire.repair_reply(data, parsed, finding, prose, calls) if calls else None
        if calls is None or body is None:
            return None
        ex.outcome.saw(self.wire.reply_anomalies(jsonread.loads(body), ex.tools), attempt)
        ex.outcome.repaired(calls)
        return body

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
            if started and ex.current is not None and ex.current.closed:
                # The client has the whole answer and its end; reading the rest of the
                # upstream's body failed. Nothing is added after the end, nor counted as failed.
                if not isinstance(exc, (SpillguardError, SSEError)):
                    log.error("stream failed", extra={"fields": {"error": type(exc).__name__}})
                self._reached(ex, ex.current, ex.outcome.attempts)
                return
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
            opening = open_upstream(
                self.upstream, ex.outcome, ex.method, ex.url, ex.headers, body, decode=True
            )
            async with await opening as reply:
                json_reply = reply.status == 200 and "json" in reply.content_type
                if json_reply and reply.identity and not start.started:
                    # A stream request answered with one JSON reply: judge it whole.
                    data = await reply.read(s.max_reply)
                    judged = self._judge_whole(ex, data, attempt)
                    if isinstance(judged, bytes):
                        headers = end_to_end(reply.headers, REFRAMED) | action_headers(ex.outcome)
                        yield Head(200, headers, sse=False)
                        yield judged
                        return
                    body = self._retry(ex, judged, attempt)
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
                at = Attempt(ex, attempt, stream, start, headers)
                # A splice (a retry continuing the client's stream) is never repaired.
                repairable = self._repairable(ex, stream) if previous is None else None
                edit = self.relay.edit(at, reply, previous is not None, repairable is not None)
                async for item in edit:
                    yield item
            finding = stream.finding
            if finding is None:
                self._reached(ex, stream, attempt)
                return
            if ex.policy.mode is Mode.OBSERVE:  # this stream reached the client
                ex.outcome.saw(stream.anomalies, attempt)
            self._note(ex, finding, attempt, self.wire.stream_usage(stream))
            if ex.policy.mode is Mode.OBSERVE:
                return
            if repairable is not None and at.complete:
                repaired = self._repair_stream(at, repairable, finding)
                if repaired is not None:
                    for item in repaired:
                        yield item
                    return
            if start.started and at.held:  # the client's stream goes on from the prose
                for item in self.relay.send(at, Send(at.held)):
                    yield item
            cannot_splice = start.started and not self.chains.may_splice(ex, stream)
            if ex.policy.mode is Mode.FAIL or attempt == 2 or cannot_splice:
                raise self._leak(ex, finding, attempt)
            body = self._retry(ex, (finding, stream.leaked_text()), attempt)
            previous = stream if start.started else None

    def _reached(self, ex: Exchange, stream: Stream, attempt: int) -> None:
        """A stream with no finding reached the client: its anomalies, and a second attempt's
        action (also a retry that continued the client's stream)."""
        ex.outcome.saw(stream.anomalies, attempt)
        if attempt == 2:
            ex.outcome.act(Action.RETRIED)

    def _repairable(self, ex: Exchange, stream: Stream) -> Repairable | None:
        """The stream, when its leak would be read out for a repair."""
        may = may_repair(ex.policy, ex.obj, self.wire.chaining)
        return self.wire.repairable(stream) if may else None

    def _repair_stream(
        self, at: Attempt, stream: Repairable, finding: Finding
    ) -> list[Head | bytes] | None:
        """What finishes the client's stream with the calls in place of the markup (the prose
        that came with the marker first), when the leak can be repaired."""
        ex = at.ex
        calls = repair_calls(
            ex.policy, ex.obj, ex.tools, finding, stream.markup, self.wire.chaining
        )
        outs = stream.repair(calls) if calls else None
        if calls is None or outs is None:
            return None
        ex.outcome.saw(at.stream.anomalies, at.number)
        ex.outcome.repaired(calls)
        data = at.held + b"".join(o.data for o in outs)
        send = at.start.output(data, meaningful=True, last=True, leaking=False)
        return self.relay.send(at, send, Action.REPAIRED) if send is not None else []

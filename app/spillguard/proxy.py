"""The decision: pass, retry once, or fail, for a whole reply or a stream, over any wire format.

A `Wire` knows one API's shapes (Chat Completions, Responses); this module knows only what to do
with a finding. Streams are an async generator that first yields a `Head` (the status and headers
to start the response with, decided as late as possible) and then bytes.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .detect import Finding, ToolSet
from .errors import (
    InternalError,
    LeakedToolCall,
    ReplyTooLarge,
    SpillguardError,
    UpstreamError,
)
from .observe import Outcome, Timed, timed
from .rawjson import append_items
from .settings import Mode, Settings
from .sse import Event, Out, SSEDecoder, SSEError
from .upstream import Upstream, end_to_end

KEEPALIVE = b": keep-alive\n\n"
DRAIN_SECONDS = 1.0  # at most this long reading on after a marker, for the name and family
log = logging.getLogger("spillguard")
# Headers of a reply whose body spillguard may rewrite or re-frame.
REFRAMED = frozenset({"content-length", "content-encoding"})


class Stream(Protocol):
    done: bytes | None

    @property
    def finding(self) -> Finding | None: ...
    @property
    def certain(self) -> bool: ...
    @property
    def holding(self) -> int: ...
    @property
    def can_splice(self) -> bool: ...
    def feed(self, event: Event) -> list[Any]: ...
    def finish(self) -> list[Any]: ...
    def settle(self) -> None: ...
    def leaked_text(self) -> str: ...


@dataclass(frozen=True)
class Wire:
    """One API's shapes, as the decision needs them (Chat Completions, Responses)."""

    retry_key: str  # the top-level array a retry appends its two messages to
    inspect_reply: Callable[[Any, ToolSet, int], tuple[Finding, str] | None]
    retry_body: Callable[[dict[str, Any], str, str], dict[str, Any]]
    new_stream: Callable[[ToolSet, int, Any | None], Stream]
    error_event: Callable[[SpillguardError, Any], bytes]


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
    current: Any = None  # the stream being edited, for an error event's place in it


@dataclass
class Head:
    status: int
    headers: dict[str, str]
    sse: bool = True
    body: bytes | None = None  # a complete response (errors) instead of a stream


def action_headers(outcome: Outcome) -> dict[str, str]:
    out = {"x-spillguard-action": outcome.action}
    if outcome.family:
        out["x-spillguard-family"] = outcome.family
    return out


class Guard:
    def __init__(self, settings: Settings, upstream: Upstream, wire: Wire) -> None:
        self.settings = settings
        self.upstream = upstream
        self.wire = wire

    def error_headers(self, error: SpillguardError) -> dict[str, str]:
        if isinstance(error, LeakedToolCall) and self.settings.should_retry_header:
            return {"x-should-retry": self.settings.should_retry_header}
        return {}

    def _leak(self, ex: Exchange, finding: Finding, attempt: int) -> LeakedToolCall:
        ex.outcome.action = "failed"
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

    async def _open(self, ex: Exchange, body: bytes) -> Timed:
        """One upstream exchange, its waits counted in the outcome's upstream time."""
        opening = self.upstream.open(ex.method, ex.url, ex.headers, body, decode=True)
        return await timed(ex.outcome, opening)

    # ---- whole replies -------------------------------------------------------------------

    async def reply(self, ex: Exchange) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) for a non-streamed request."""
        s = self.settings
        body, obj = ex.body, ex.obj
        for attempt in (1, 2):
            ex.outcome.attempts = attempt
            async with await self._open(ex, body) as reply:
                data = await reply.read(s.max_reply)
                headers = end_to_end(reply.headers, REFRAMED)
                status, ctype, identity = reply.status, reply.content_type, reply.identity
                if not identity:  # compressed in a way spillguard cannot read: pass it as is
                    headers = end_to_end(reply.headers, frozenset({"content-length"}))
            if status != 200 or "json" not in ctype or not identity:
                if attempt == 2:
                    ex.outcome.action = "retried"
                return status, headers, data  # the upstream's own answer, as it sent it
            leaked = self._judge_whole(ex, data, attempt)
            if leaked is None:
                return status, headers, data
            obj, body = self._retry(ex, obj, leaked, attempt)
        raise AssertionError("unreachable")

    def _retry(
        self, ex: Exchange, obj: dict[str, Any], leaked: str, attempt: int
    ) -> tuple[dict[str, Any], bytes]:
        """The retry request. One that cannot be written as standard JSON (a body too deep, a
        number out of range, `messages` that is no list) cannot be retried: the leak fails."""
        items = [
            {"role": "assistant", "content": leaked},
            {"role": "user", "content": self.settings.correction},
        ]
        key = self.wire.retry_key
        raw = append_items(ex.body, key, items, _as_user if key == "input" else None)
        if raw is not None:  # the rest of the request goes as the client wrote it
            return obj, raw
        try:
            retry = self.wire.retry_body(obj, leaked, self.settings.correction)
            return retry, json.dumps(retry, allow_nan=False).encode()
        except (TypeError, ValueError, RecursionError) as exc:
            log.warning("retry impossible", extra={"fields": {"error": type(exc).__name__}})
            finding = ex.outcome.findings[-1]
            leak = Finding(finding["family"], finding["tool_name"], 0)
            raise self._leak(ex, leak, attempt) from None

    def _judge_whole(self, ex: Exchange, data: bytes, attempt: int) -> str | None:
        """Judge a whole JSON reply: None to pass it (setting the action), the leaked text to
        retry with, or raise the leak when there is no retry left."""
        s = self.settings
        try:
            parsed = json.loads(data)
        except (ValueError, RecursionError):
            parsed = None
        found = self.wire.inspect_reply(parsed, ex.tools, s.hold_limit) if parsed else None
        if found is None:
            ex.outcome.action = "retried" if attempt == 2 else "passed"
            return None
        finding, leaked = found
        self._note(ex, finding, attempt)
        if s.mode is Mode.OBSERVE:
            ex.outcome.action = "observed"
            return None
        if s.mode is Mode.FAIL or attempt == 2:
            raise self._leak(ex, finding, attempt)
        return leaked

    # ---- streams -------------------------------------------------------------------------

    async def stream(self, ex: Exchange) -> AsyncGenerator[Head | bytes, None]:
        """Yields one Head, then the bytes of the client's stream. Errors before the Head become
        an error response; after it, an error event in the wire's shape."""
        started = False
        try:
            async for item in self._stream(ex):
                if isinstance(item, Head):
                    started = True
                    ex.outcome.status = item.status
                yield item
        except Exception as exc:
            if isinstance(exc, SpillguardError):
                error = exc
            elif isinstance(exc, SSEError):
                error = ReplyTooLarge(f"Upstream sent an event over the size limit: {exc}")
            else:  # a bug of spillguard's own: the client still gets a clean error, never a 500
                log.error("stream failed", extra={"fields": {"error": type(exc).__name__}})
                error = InternalError("spillguard failed while relaying the stream")
            ex.outcome.error = error.code
            if ex.outcome.action in ("forwarded", "passed", "retried"):
                ex.outcome.action = "failed" if isinstance(error, LeakedToolCall) else "error"
            if started:
                yield self.wire.error_event(error, ex.current)
            else:
                ex.outcome.status = error.status
                body = error.json_bytes()
                yield Head(error.status, self.error_headers(error), sse=False, body=body)

    def _head(self, ex: Exchange, attempt: int, headers: dict[str, str]) -> Head:
        if self.settings.mode is Mode.OBSERVE:
            ex.outcome.action = "observed"
        else:
            ex.outcome.action = "retried" if attempt == 2 else "passed"
        return Head(200, headers | action_headers(ex.outcome))

    async def _stream(self, ex: Exchange) -> AsyncGenerator[Head | bytes, None]:
        s = self.settings
        observe = s.mode is Mode.OBSERVE
        body, obj = ex.body, ex.obj
        committed = False
        previous: Any | None = None
        for attempt in (1, 2):
            ex.outcome.attempts = attempt
            async with await self._open(ex, body) as reply:
                json_reply = reply.status == 200 and "json" in reply.content_type
                if json_reply and reply.identity and not committed:
                    # A stream request answered with one JSON reply: judge it whole.
                    data = await reply.read(s.max_reply)
                    found = self._judge_whole(ex, data, attempt)
                    if found is None:
                        headers = end_to_end(reply.headers, REFRAMED) | action_headers(ex.outcome)
                        yield Head(200, headers, sse=False)
                        yield data
                        return
                    obj, body = self._retry(ex, obj, found, attempt)
                    continue
                if (
                    reply.status != 200
                    or reply.content_type != "text/event-stream"
                    or not reply.identity
                ):
                    if committed:
                        raise UpstreamError(f"Upstream answered the retry with {reply.status}")
                    if attempt == 2:
                        ex.outcome.action = "retried"
                    # Bytes go as read: decoded (and re-framed) only if spillguard decoded them.
                    drop = REFRAMED if reply.decoded else frozenset()
                    headers = end_to_end(reply.headers, drop) | action_headers(ex.outcome)
                    yield Head(reply.status, headers, sse=False)
                    async for data in reply.iter_raw():
                        yield data
                    return
                headers = end_to_end(reply.headers, REFRAMED)
                stream = ex.current = self.wire.new_stream(ex.tools, s.hold_limit, previous)
                decoder = SSEDecoder()
                pending: list[bytes] = []
                while True:
                    if committed:
                        chunk: bytes | None = await reply.chunk()
                    else:
                        chunk = await reply.wait_chunk(s.keepalive)
                        if chunk is None:  # held back for long: start the response, keep it alive
                            yield self._head(ex, attempt, headers)
                            committed = True
                            yield b"".join(pending) + KEEPALIVE
                            pending.clear()
                            continue
                    outs: list[Any] = []
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
                                if stream.done is not None:
                                    outs.append(Out(stream.done))
                    leaking = stream.certain and not observe  # this attempt publishes no more
                    # Output is publishable by construction. Before the response has started, a
                    # leak drops it: the retry (or a real 502) replaces it whole.
                    data = b"".join(o.data for o in outs)
                    if committed:
                        if data:
                            yield data
                    elif not leaking and (not chunk or any(o.meaningful for o in outs)):
                        yield self._head(ex, attempt, headers)
                        committed = True
                        yield b"".join(pending) + data
                        pending.clear()
                    elif not leaking:
                        pending.append(data)
                    if not observe and stream.holding > s.hold_limit:
                        raise ReplyTooLarge(f"Held back more than {s.hold_limit} characters")
                    if not chunk or leaking:
                        break
                if leaking and chunk:
                    await self._drain(reply, decoder, stream)
            finding = stream.finding
            if finding is None:
                return
            self._note(ex, finding, attempt)
            if observe:
                return
            if s.mode is Mode.FAIL or attempt == 2 or (committed and not stream.can_splice):
                raise self._leak(ex, finding, attempt)
            obj, body = self._retry(ex, obj, stream.leaked_text(), attempt)
            previous = stream if committed else None

    async def _drain(self, reply: Timed, decoder: SSEDecoder, stream: Any) -> None:
        """Read a little more of a leaking reply so its family and tool name settle: bounded
        in size and in time (the retry, or the 502, should not wait for a whole generation)."""
        read = 0
        try:
            async with asyncio.timeout(DRAIN_SECONDS):
                while read < self.settings.hold_limit and stream.done is None:
                    chunk = await reply.chunk()
                    read += len(chunk)
                    for event in decoder.feed(chunk) if chunk else decoder.flush():
                        stream.feed(event)
                    if not chunk:
                        break
        except TimeoutError:
            pass
        stream.settle()


def _as_user(text: str) -> str:
    """A Responses `input` given as a string, as the user message it stands for."""
    return '{"role":"user","content":' + text + "}"

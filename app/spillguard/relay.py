"""One attempt's SSE stream, relayed to the client through its wire's editor.

The loop waits on the upstream no longer than a keep-alive interval (measured from the client's
last byte), feeds each read's events to the editor and publishes what the start policy lets go:
a long read in turns of `TURN` events, the event loop running the other streams between turns,
and at most two turns' output written at once (every write costs a send). After a
finding the attempt publishes nothing more: the rest is drained briefly so the finding's family
and name settle (a retry follows), or, when the leak may be repaired, read to its end (within
the hold limit, keep-alives flowing), the prose that came with the marker held in `Attempt.held`
until the repair is decided.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from .chains import Chains
from .errors import ReplyTooLarge
from .exchange import Exchange, Head, action_headers
from .outcome import Action
from .reply import Reply
from .settings import Mode, Settings
from .sse import Event, SSEDecoder
from .start import ResponseStart, Send
from .wire import Stream, Wire

DRAIN_SECONDS = 1.0  # at most this long reading on after a marker, for the name and family
TURN = 32  # events one stream judges before it lets the event loop run the others


def passed(attempt: int) -> Action:
    return Action.RETRIED if attempt == 2 else Action.PASSED


@dataclass
class Attempt:
    """One upstream attempt of a stream request, as the relay leaves it to the decision."""

    ex: Exchange
    number: int
    stream: Stream
    start: ResponseStart
    headers: dict[str, str]  # the upstream's, for the response head
    held: bytes = b""  # prose that came with the marker while the response had not started
    complete: bool = False  # a leaking stream was read to its end within the hold limit


def _judged(stream: Stream, events: list[Event], observe: bool) -> tuple[bytes, bool]:
    """The events fed to the stream: the bytes to publish, and whether they mean anything to
    the client (observe mode publishes every event as it came)."""
    outs = stream.feed_all(events)
    if observe:
        return b"".join(event.raw for event in events), bool(events)
    if len(outs) == 1:  # a paced stream's read: one event
        return outs[0].data, outs[0].meaningful
    return b"".join(out.data for out in outs), any(out.meaningful for out in outs)


class Relay:
    def __init__(self, settings: Settings, wire: Wire, chains: Chains) -> None:
        self.settings = settings
        self.wire = wire
        self.chains = chains

    def send(self, at: Attempt, send: Send, action: Action | None = None) -> list[Head | bytes]:
        """Bytes for the client, after the response head when they start the response (its
        action `action`, or what a published attempt is: passed, retried or observed)."""
        if send.data:
            at.start.delivered(asyncio.get_running_loop().time())
        if not send.start:
            return [send.data]
        if action is None:
            observe = at.ex.policy.mode is Mode.OBSERVE
            action = Action.OBSERVED if observe else passed(at.number)
        at.ex.outcome.act(action)
        return [Head(200, at.headers | action_headers(at.ex.outcome)), send.data]

    async def edit(
        self, at: Attempt, reply: Reply, splice: bool, read_out: bool
    ) -> AsyncGenerator[Head | bytes, None]:
        """The attempt's stream until it ends or leaks; a leak is then read to its end when
        `read_out` (for a repair), else drained."""
        s, ex, stream, start = self.settings, at.ex, at.stream, at.start
        observe = ex.policy.mode is Mode.OBSERVE
        decoder = SSEDecoder()
        loop = asyncio.get_running_loop()
        remember = splice and self.chains.stored(ex)  # a stored splice, for later requests
        turn = 0  # events judged since this stream last let the event loop run the others
        unsent: list[bytes] = []  # output of this read's parts not yet yielded
        while True:
            # A keep-alive is due `keepalive` seconds after the client's last byte (or its
            # request), however steadily the upstream sends text that is held back; none after
            # the client has had the stream's end.
            left = None if stream.closed else start.since + s.keepalive - loop.time()
            chunk = await reply.wait_chunk(left) if left is None or left > 0 else None
            if chunk is None:  # keep the connection alive (starting the response if need be)
                for item in self.send(at, start.idle(self.wire.keepalive)):
                    yield item
                continue
            events = decoder.feed(chunk) if chunk else decoder.flush()
            last = not chunk  # the upstream's stream ended
            begin, count = 0, len(events)
            while True:
                # A piece that is already buffered is read without waiting, so a fast upstream
                # would hold the event loop for a whole burst: at most TURN events a turn.
                end = count if count - begin <= TURN - turn else begin + TURN - turn
                part = events if begin == 0 and end == count else events[begin:end]
                data, meaningful = _judged(stream, part, observe)
                turn += end - begin
                ends = last and end == count
                if ends:
                    if stream.certain:
                        stream.settle()
                    else:
                        tail = stream.finish()  # with a finding made now: the prose before it
                        if not observe:
                            data += b"".join(o.data for o in tail)
                            meaningful = meaningful or any(o.meaningful for o in tail)
                            if stream.trailer and not stream.certain:
                                data += stream.trailer
                                meaningful = True
                leaking = stream.certain and not observe  # this attempt publishes no more
                if remember and self.chains.remember(stream):  # before the client has the id
                    remember = False
                # Output is publishable by construction; the start policy says when it may go.
                send = start.output(data, meaningful=meaningful, last=ends, leaking=leaking)
                if send is not None and not send.start:  # the common case, as `send` without a list
                    if send.data:
                        start.delivered(loop.time())
                        unsent.append(send.data)
                elif send is not None:
                    if unsent:
                        yield b"".join(unsent)
                        unsent.clear()
                    for item in self.send(at, send):
                        yield item
                elif leaking and not start.started:
                    at.held = data
                if not observe and stream.holding > ex.policy.hold_limit:
                    raise ReplyTooLarge(f"Held back more than {ex.policy.hold_limit} characters")
                if leaking:  # the rest of the piece is read on, for the finding's name
                    for event in events[end:]:
                        stream.feed(event)
                    if last and end < count:
                        stream.settle()
                    break
                if turn >= TURN:
                    if len(unsent) > 1:  # two turns' output, one write
                        yield b"".join(unsent)
                        unsent.clear()
                    await asyncio.sleep(0)
                    turn = 0
                if end == count:
                    break
                begin = end
            if unsent:
                yield unsent[0] if len(unsent) == 1 else b"".join(unsent)
                unsent.clear()
            if last or leaking:
                break
        if not leaking:
            return
        if last:
            at.complete = True
        elif read_out:
            async for item in self._read_out(at, reply, decoder):
                yield item
        else:
            await self._drain(reply, decoder, stream, ex.policy.hold_limit)

    async def _read_out(
        self, at: Attempt, reply: Reply, decoder: SSEDecoder
    ) -> AsyncGenerator[Head | bytes, None]:
        """Read a leaking stream to its end for a repair, the client kept alive meanwhile;
        more than the hold limit held back leaves it incomplete (the retry follows)."""
        s, stream, start = self.settings, at.stream, at.start
        loop = asyncio.get_running_loop()
        while not stream.ended:
            left = start.since + s.keepalive - loop.time()
            chunk = await reply.wait_chunk(left) if left > 0 else None
            if chunk is None:
                for item in self.send(at, start.idle(self.wire.keepalive)):
                    yield item
                continue
            for event in decoder.feed(chunk) if chunk else decoder.flush():
                stream.feed(event)
            if stream.holding > at.ex.policy.hold_limit:
                stream.settle()
                return
            if not chunk:
                break
        stream.settle()
        at.complete = True

    async def _drain(self, reply: Reply, decoder: SSEDecoder, stream: Stream, limit: int) -> None:
        """Read a little more of a leaking reply so its family and tool name settle: bounded
        in size and in time (the retry, or the 502, should not wait for a whole generation)."""
        loop = asyncio.get_running_loop()
        until, read = loop.time() + DRAIN_SECONDS, 0
        while read < limit and not stream.ended and (left := until - loop.time()) > 0:
            chunk = await reply.wait_chunk(left)
            if chunk is None:  # the time is up
                break
            read += len(chunk)
            for event in decoder.feed(chunk) if chunk else decoder.flush():
                stream.feed(event)
            if not chunk:
                break
        stream.settle()

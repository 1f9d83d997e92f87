"""What the byte-fed tests share: a turn as the model streams it, a stream editor driven the way
the proxy's stream loop drives it, and every way to cut the bytes.

Used by the byte-fed stream tests, the stream-vs-whole property tests and the fuzz target; each
wire's own bytes are written in `chat_bytes.py` and `responses_bytes.py`, the way providers write
them: compact JSON with UTF-8 left unescaped, so `｜` is three bytes a transport can cut.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from spillguard.detect import declared_tools
from spillguard.sse import Event, SSEDecoder
from spillguard.wire import Stream
from tests import conftest

TOOLS = declared_tools({"tools": conftest.TOOLS})  # get_weather(city), run_in_terminal(command)
HOLD = 256 * 1024  # the proxy's default hold-back limit


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Call:
    """A structured tool call, its arguments as the JSON string the wire carries."""

    name: str
    arguments: str
    id: str = "call_1"


@dataclass(frozen=True)
class Turn:
    """One assistant turn as the model streams it: each text already cut into its deltas."""

    content: tuple[str, ...] = ()
    reasoning: tuple[str, ...] = ()
    calls: tuple[Call, ...] = ()

    @property
    def text(self) -> str:
        return "".join(self.content)

    @property
    def thought(self) -> str:
        return "".join(self.reasoning)


def cut(text: str, *at: int) -> tuple[str, ...]:
    """The text as deltas, cut at the given offsets."""
    bounds = [0, *at, len(text)]
    return tuple(text[a:b] for a, b in itertools.pairwise(bounds))


WEATHER = Call("get_weather", '{"city":"Lisbon"}')


def decode(data: bytes) -> list[Event]:
    decoder = SSEDecoder()
    return decoder.feed(data) + decoder.flush()


class HeldTooLong(Exception):
    """The editor held back more than the hold limit: the proxy fails the reply here."""


def fed_before_the_end(stream: Stream, data: bytes) -> bytes:
    """What `stream` publishes of `data` while the upstream's body has not ended yet (no
    `finish`, no trailer)."""
    return b"".join(o.data for o in stream.feed_all(SSEDecoder().feed(data)))


def drive(
    stream: Stream,
    pieces: Iterable[bytes],
    hold_limit: int | None = None,
    one_by_one: bool = False,
) -> bytes:
    """Feed the upstream's bytes, piece by piece, through an SSE decoder into `stream`, the way
    the proxy's stream loop does (each piece's events together, `feed_all`); return what the
    editor published.

    At the end of the bytes the editor settles (after a finding) or is finished, its tail and
    trailer (chat's `[DONE]`) published unless the tail made a finding. After a finding, the rest
    is read (published nowhere) until the editor has `ended` or the bytes end, then settled.
    With `hold_limit`, holding more than that after a piece raises HeldTooLong. `one_by_one`
    feeds each event alone instead (`feed`).
    """
    decoder = SSEDecoder()
    out = bytearray()
    rest = iter([*(p for p in pieces if p), b""])  # an empty read is the end, as upstream
    for piece in rest:
        events = decoder.feed(piece) if piece else decoder.flush()
        if one_by_one:
            out += b"".join(o.data for e in events for o in stream.feed(e))
        else:
            out += b"".join(o.data for o in stream.feed_all(events))
        if not piece and stream.certain:
            stream.settle()
        elif not piece:
            tail = stream.finish()  # with a finding made now: the prose before it
            out += b"".join(o.data for o in tail)
            if not stream.certain:
                out += stream.trailer
        if hold_limit is not None and stream.holding > hold_limit:
            raise HeldTooLong(stream.holding)
        if not piece:
            break
        if stream.certain:
            for more in rest:  # the proxy also stops after hold_limit bytes, or a second
                if stream.ended:
                    break
                for event in decoder.feed(more) if more else decoder.flush():
                    stream.feed(event)
            stream.settle()
            break
    return bytes(out)


def every_split(data: bytes) -> Iterator[list[bytes]]:
    """The bytes whole, cut once at every point, and one byte at a time."""
    yield [data]
    for i in range(1, len(data)):
        yield [data[:i], data[i:]]
    yield [data[i : i + 1] for i in range(len(data))]


def verdict(stream: Stream) -> tuple[Any, ...]:
    """What the decision reads off an editor at the end: the finding and the retry's text."""
    f = stream.finding
    found = None if f is None else (f.family, f.field, f.tool_name, f.start, f.excerpt)
    return found, stream.leaked_text()


E = TypeVar("E", bound=Stream)


def every_split_agrees(make: Callable[[], E], data: bytes) -> tuple[bytes, E]:
    """Drive a fresh editor from `make` over every split of `data`; each must publish the same
    bytes and end with the same finding and leaked text as the unsplit feed, which is returned
    (what it published, and the editor)."""
    whole = make()
    out = drive(whole, [data])
    want = (out, verdict(whole))
    for pieces in every_split(data):
        stream = make()
        got = (drive(stream, pieces), verdict(stream))
        assert got == want, f"cut after {len(pieces[0])} of {len(data)} bytes ({len(pieces)})"
    return out, whole

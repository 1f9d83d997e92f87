"""The Messages and Responses editors' `feed_all` (the relay's way: a read's events together,
text deltas the short way) against `feed` of each event alone: for every stream here, however
its events are grouped and however its bytes are cut, the same `Out`s in the same order, the same
finding, certainty, holding and end after every group, the same markup, repair, anomalies and
retry text at the end; and a splice after a leak, fed each way, continues the same.

The streams: prose cut into deltas of several sizes, markup of each family glued to prose or on
its own line, thinking with and without markup, `tool_use` and function calls, pings, comments,
errors and data that is not JSON among the events.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spillguard import messages, responses
from spillguard.detect import Call as RepairCall
from spillguard.relay import TURN
from spillguard.sse import Event
from spillguard.wire import Stream, Wire
from tests.fuzz.messages_bytes import messages_events
from tests.fuzz.responses_bytes import responses_events
from tests.fuzz.wire_bytes import HOLD, TOOLS, WEATHER, Turn, decode, drive, every_split, verdict
from tests.test_messages_properties import ANTHROPIC_MARKUP
from tests.test_wire_properties import MARKUP, PROPS, PROSE, deltas, pieces, turns

WIRES: dict[str, tuple[Wire, Callable[[Turn], list[bytes]]]] = {
    "messages": (messages.WIRE, messages_events),
    "responses": (responses.WIRE, responses_events),
}
CALLS = (RepairCall("get_weather", '{"city":"Lisbon"}'),)
# The ids a repair makes up for its calls, different every time.
MADE_UP = re.compile(rb'"(toolu_01[0-9A-Za-z]{22}|fc_[0-9a-f]{48}|call_[0-9a-f]{24})"')

# Events an upstream may send among the others.
PING = b"event: ping\ndata: {}\n\n"
COMMENT = b": still here\n\n"
NOT_JSON = b"event: content_block_delta\ndata: {not json\n\n"
ERROR = (
    b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
    b'"message":"Overloaded"}}\n\n'
)
EXTRAS = [PING, COMMENT, NOT_JSON, ERROR]


def sized(text: str, size: int) -> tuple[str, ...]:
    return tuple(text[i : i + size] for i in range(0, len(text), size))


def table() -> Iterator[Turn]:
    """Turns enough to reach every branch: clean prose, each family's markup glued to prose or
    after a new line, markup alone, blank prose, thinking with markup, with and without a call."""
    prose = PROSE[0] + " " + PROSE[2]
    contents = ["", prose, "   ", "finally the final answer is commentary"]
    for markup in MARKUP + ANTHROPIC_MARKUP:
        contents += [prose + markup, prose + "\n" + markup + "\nAfter it.", markup]
    for n, content in enumerate(contents):
        for reasoning in ("", PROSE[1], PROSE[1] + "\n" + MARKUP[n % len(MARKUP)]):
            for calls in ((), (WEATHER,)):
                size = (1, 3, 4, 7)[n % 4] if calls else 5
                yield Turn(sized(content, size), sized(reasoning, 5), calls)


def groupings(count: int, every: bool) -> Iterator[list[int]]:
    """Where the events are cut into `feed_all` calls: not at all, once at every event (or at
    a dozen, unless `every`), after every event, in threes at each offset, and in the relay's
    turns."""
    yield [count]
    for at in range(1, count, 1 if every else max(1, count // 12)):
        yield [at, count - at]
    yield [1] * count
    for offset in (1, 2):
        yield [offset] + [3] * ((count - offset) // 3 + 1)
    yield [TURN] * (count // TURN + 1)


def grouped(events: list[Event], sizes: list[int]) -> list[list[Event]]:
    groups, at = [], 0
    for size in sizes:
        groups.append(events[at : at + size])
        at += size
    return groups


@dataclass
class Fed:
    wire: Wire
    stream: Stream
    steps: list[Any]  # after each group: its outs and what the decision reads

    def record(self, outs: list[Any]) -> None:
        s = self.stream
        f = s.finding
        found = None if f is None else (f.family, f.field, f.tool_name, f.start, f.excerpt)
        outs = [(MADE_UP.sub(b"ID", o.data), o.meaningful) for o in outs]
        self.steps.append((outs, found, s.certain, s.holding, s.ended))

    def end(self) -> tuple[Any, ...]:
        """The relay's end of the stream, then what the decision reads, and a repair."""
        s = self.stream
        if s.certain:
            s.settle()
            self.record([])
        else:
            self.record(s.finish())
        mend = self.wire.repairable(s)
        mended = mend.markup if mend is not None else None
        fixed = mend.repair(CALLS) if mend is not None and mended is not None else None
        if fixed is not None:
            self.record(fixed)
        return verdict(s), mended, fixed is not None, s.anomalies, s.trailer


def fed(wire: Wire, events: list[Event], sizes: list[int], together: bool, previous: Any) -> Fed:
    run = Fed(wire, wire.new_stream(TOOLS, HOLD, previous), [])
    for group in grouped(events, sizes):
        if together:
            run.record(run.stream.feed_all(group))
        else:
            run.record([out for event in group for out in run.stream.feed(event)])
    return run


def agree(
    wire: str, raw: list[bytes], previous: tuple[Stream, Stream] | None = None, every: bool = True
) -> None:
    events = decode(b"".join(raw))
    for sizes in groupings(len(events), every):
        was = previous or (None, None)
        apart = fed(WIRES[wire][0], events, sizes, False, was[0])
        together = fed(WIRES[wire][0], events, sizes, True, was[1])
        assert together.steps == apart.steps, sizes
        assert together.end() == apart.end(), sizes


def with_extras(raw: list[bytes], n: int) -> list[bytes]:
    """`raw` with one of the extra events put in at a place that moves with `n`."""
    at = 1 + n % max(1, len(raw) - 1)
    return [*raw[:at], EXTRAS[n % len(EXTRAS)], *raw[at:]]


@pytest.mark.parametrize("wire", sorted(WIRES))
def test_feed_all_is_feed_event_by_event_over_every_grouping(wire: str) -> None:
    write = WIRES[wire][1]
    for n, turn in enumerate(table()):
        agree(wire, write(turn) if n % 2 else with_extras(write(turn), n), every=n % 12 == 0)


@pytest.mark.parametrize("wire", sorted(WIRES))
def test_a_splice_after_a_leak_continues_the_same_either_way(wire: str) -> None:
    """A first attempt that leaked (after prose, or in thinking), each way, and its retry."""
    spec, write = WIRES[wire]
    retry = write(Turn(sized(PROSE[0] + " " + PROSE[1], 4), (), (WEATHER,)))
    first_turns = [
        Turn(sized(PROSE[0] + "\n" + MARKUP[0], 4)),
        Turn(sized(PROSE[1], 3), sized(PROSE[1] + MARKUP[1], 6)),
        Turn(sized(PROSE[0] + ANTHROPIC_MARKUP[0], 5), sized(PROSE[1], 5)),
    ]
    for first in first_turns:
        events = decode(b"".join(write(first)))
        whole = [len(events)]
        apart = fed(spec, events, whole, False, None)
        together = fed(spec, events, whole, True, None)
        assert together.steps == apart.steps
        assert together.end() == apart.end()
        agree(wire, retry, (apart.stream, together.stream))


@pytest.mark.parametrize("wire", sorted(WIRES))
def test_every_cut_of_the_bytes_publishes_the_same_either_way(wire: str) -> None:
    """The proxy's stream loop (`drive`) over every cut of the bytes, each read's events fed
    together, against the same reads fed event by event."""
    spec, write = WIRES[wire]
    for turn in (
        Turn(sized(PROSE[0], 4), (), (WEATHER,)),
        Turn(sized(PROSE[1] + MARKUP[2] + " and on", 4), sized(PROSE[1], 9)),
        Turn(sized(PROSE[1], 2), sized(PROSE[1] + "\n" + MARKUP[4], 9)),
    ):
        data = b"".join(with_extras(write(turn), 1))
        for cuts in every_split(data):
            if len(cuts) == 2 and len(cuts[0]) % 7:
                continue  # a cut at every 7th byte, whole, and one byte at a time
            apart, together = spec.new_stream(TOOLS, HOLD, None), spec.new_stream(TOOLS, HOLD, None)
            got = drive(together, cuts), verdict(together)
            assert got == (drive(apart, cuts, one_by_one=True), verdict(apart)), len(cuts[0])


@PROPS
@given(data=st.data(), turn=turns(), wire=st.sampled_from(sorted(WIRES)))
def test_feed_all_is_feed_event_by_event(data: st.DataObject, turn: Turn, wire: str) -> None:
    """Random turns, random delta cuts, random byte cuts: the relay's loop publishes the same
    bytes and ends with the same verdict either way."""
    spec, write = WIRES[wire]
    turn = Turn(data.draw(deltas(turn.text)), turn.reasoning, turn.calls)
    raw = b"".join(write(turn))
    cuts = data.draw(pieces(raw))
    apart, together = spec.new_stream(TOOLS, HOLD, None), spec.new_stream(TOOLS, HOLD, None)
    assert drive(together, cuts) == drive(apart, cuts, one_by_one=True)
    assert verdict(together) == verdict(apart)
    assert json.dumps(together.holding) == json.dumps(apart.holding)

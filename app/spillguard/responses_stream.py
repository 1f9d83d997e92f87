"""A Responses API SSE stream (named events) edited for the client.

Each text part and each reasoning summary part has its own scanner. Events whose text is
published unchanged go out as the upstream's bytes. Once markup shows in reasoning, everything
after it is parked until a real call releases it or the response ends (then it is a finding).
A retry that continues a started client stream does so through `responses_splice.Splice`.
"""

from __future__ import annotations

from typing import Any

from .detect import Anomaly, Call, Finding, ToolSet, TurnScanner, call_anomalies
from .responses_events import (
    TERMINAL,
    Key,
    Pending,
    Sent,
    Text,
    function_names,
    index_of,
    is_call,
)
from .responses_repair import Tail, Unshown
from .responses_splice import Splice, close_open_items
from .sse import Event, Out
from .usage import Usage, usage_of
from .wire import NamedEvents, Stream

ARGUMENTS_DELTA = "response.function_call_arguments.delta"


class ResponsesStream(NamedEvents):
    DELTAS = ("response.output_text.delta", ARGUMENTS_DELTA)

    def __init__(self, tools: ToolSet, hold_limit: int, previous: ResponsesStream | None) -> None:
        self._tools = tools
        self._hold_limit = hold_limit
        self.parts: dict[Key, Text] = {}
        self.summaries: dict[Key, Text] = {}
        self._parked: list[Pending] = []
        self._parked_bytes = 0
        self._called = False
        self._ended = False  # a terminal event was read (after a finding: drained to)
        self.sent = Sent()  # what the client has been sent
        self.usage: Usage | None = None  # from the terminal event's response
        self.splice: Splice | None = None
        self._closing: list[Out] = []  # what closes the first attempt's items, in a splice
        self._tail: Tail | None = None  # after a content finding: what came, for a repair
        self._unshown = Unshown(hold_limit)  # a first attempt's message, until it shows text
        # Read once an event, so kept as the scanners change (`_note`): some part or summary has
        # had a finding; some summary has shown markup.
        self._found = False
        self._reasoning_seen = False
        if previous is not None:
            was = previous.sent
            pending, carried, closed = close_open_items(
                was.opened, was.closed, previous.parts, previous.summaries
            )
            self._closing = previous._send_all(pending)
            self.splice = Splice(was.next_index, carried, closed, previous.leaked_text())
            self.sent = Sent(seq=was.seq, identity=was.identity, renumber=True)

    @property
    def finding(self) -> Finding | None:
        """The turn rule, over every part: the first content finding wins; reasoning counts only
        once its part has ended and the response made no structured call."""
        if not self._found:
            return None
        leak = self._leak()
        if leak is not None:
            return leak.finding
        for summary in self.summaries.values():
            if summary.finding is not None:
                return summary.finding
        return None

    @property
    def certain(self) -> bool:
        return self.finding is not None

    @property
    def can_splice(self) -> bool:
        return True

    @property
    def holding(self) -> int:
        held = sum(p.turn.holding for p in self.parts.values())
        held += sum(t.turn.holding for t in self.summaries.values())
        return held + self._parked_bytes + (self.splice.holding if self.splice else 0)

    @property
    def ended(self) -> bool:
        return self._ended

    @property
    def closed(self) -> bool:
        # The terminal event went out: a finding keeps it back (reasoning markup parked at
        # the response's end is one).
        return self._ended and not self.certain

    @property
    def trailer(self) -> bytes:
        return b""  # Responses streams have no [DONE]

    @property
    def anomalies(self) -> list[Anomaly]:
        items = {**self.sent.opened, **self.sent.closed}  # by output index, as the client saw them
        return call_anomalies(function_names(items.values()), False, self._tools)

    @property
    def markup(self) -> str | None:
        """The leaking text part's markup, when a repair could replace it: not in a splice,
        no call item, no reasoning markup parked (what follows it never went out)."""
        leak = self._leak()
        if leak is None or self.splice is not None or self._called or self._reasoning_marker():
            return None
        return leak.turn.markup

    def repair(self, calls: tuple[Call, ...]) -> list[Out] | None:
        """After the response completed: the items the client has open closed at the text it
        has, a `function_call` item per call, and `response.completed` listing what the client
        received. None when the response cannot carry them (another part or item after the
        leaked one, a response that did not complete)."""
        if self.markup is None or self._tail is None:
            return None
        pending = self._tail.finish(calls, self.sent, self.parts, self.summaries)
        return self._send_all(pending) if pending is not None else None

    def _leak(self) -> Text | None:
        return next((p for p in self.parts.values() if p.finding is not None), None)

    def leaked_text(self) -> str:
        """The prose the client has of the message parts (the markup never went out)."""
        return "".join("".join(p.published) for p in self.parts.values())

    def settle(self) -> None:
        """Read the family and name from all the markup seen (the stream ended after a content
        finding). Idempotent: `finding` is derived from the parts, content first."""
        for part in self.parts.values():
            if part.scanner.marker_seen:
                self._finish_text(part)

    def finish(self) -> list[Out]:
        """The upstream ended without a terminal event: settle what was held."""
        return self._send_all(self._flush_all(), final=True)

    def _text_delta(self, event: Event, data: dict[str, Any]) -> list[Out] | None:
        """What `feed` makes of an `output_text.delta` with text, or of a call's
        `function_call_arguments.delta`, while nothing has a finding and no reasoning markup is
        parked, in a stream that is no splice (only a splice has items `_closing`); None for any
        other event, which is left unread. What goes as it came, with no message withheld, is
        numbered and sent at once."""
        if self._found or self.splice is not None or self._reasoning_marker():
            return None
        if data["type"] == ARGUMENTS_DELTA:
            pending: list[Pending] = [(data, event, False)]  # as `_edit` leaves it
        else:
            delta = data.get("delta")
            if type(delta) is not str:
                return None
            part = self._text(data, index_of(data, "output_index"), True)
            pending = self._scan(part, data, event)
        unchanged = len(pending) == 1 and pending[0][1] is event
        if unchanged and not self._found and not self._unshown.withholding:
            return [self.sent.send(data, event, False, None)]  # as `_send_all` would send it
        return self._send_all(pending)

    def _feed(self, event: Event, data: Any) -> list[Out]:
        """`feed`, once the event's data has been parsed (None when it is not JSON)."""
        kind = data.get("type") if isinstance(data, dict) else None
        if isinstance(kind, str) and kind in TERMINAL and isinstance(data, dict):
            self._usage(data)
        if not isinstance(kind, str) or self.certain:
            if self.certain and isinstance(data, dict):
                self._drain(kind, data)
            return [] if self.certain else [Out(event.raw, True)]
        assert isinstance(data, dict)
        outs, self._closing = self._closing, []
        parking = self._reasoning_marker()  # markup seen in reasoning before this event
        pending = self._edit(kind, data, event)
        if parking and self._reasoning_marker():
            # Parked until a real call releases it, or the end makes it a finding. A content
            # finding here ends the stream: what was parked before it never goes out, so
            # neither does this event's prose (it would overtake them).
            if not self.certain:
                self._parked += pending
                self._parked_bytes += len(event.raw)
            return outs
        return outs + self._send_all(pending)

    # ---- editing -----------------------------------------------------------------------

    def _edit(self, kind: str, data: dict[str, Any], event: Event) -> list[Pending]:
        oi = index_of(data, "output_index")
        same: list[Pending] = [(data, event, False)]
        if self.splice and kind in ("response.created", "response.in_progress"):
            self.splice.opening(data)
            return []
        if kind == "response.output_item.added" and is_call(data.get("item")):
            return self._release_reasoning() + same
        if kind == "response.output_text.delta":
            part = self._text(data, oi, True)
            return self._scan(part, data, event)
        if kind == "response.output_text.done":
            part = self._text(data, oi, True)
            rest = self._released(part, self._finish_text(part), ended=True)
            prose = [part.delta_event(rest)] if rest else []  # before any markup: it goes out
            return prose if part.finding is not None else prose + same
        if kind.startswith("response.reasoning_summary_text.") and not self._called:
            summary = self._text(data, oi, False)
            if kind.endswith(".delta"):
                return self._scan(summary, data, event)
            if kind.endswith(".done") and not summary.scanner.marker_seen:
                rest = self._released(summary, self._finish_text(summary), ended=True)
                return ([summary.delta_event(rest)] if rest else []) + same
        if kind in TERMINAL:
            self._ended = True
            flushed = self._flush_all()
            if self.certain:  # a finding made at the end: only the prose before it goes out
                self._drain(kind, data)
                return flushed
            if self.splice is not None:
                return [*flushed, (self.splice.completed(data), None, False)]
            return [*flushed, (data, event, False)]
        return same

    def _scan(self, text: Text, data: dict[str, Any], event: Event) -> list[Pending]:
        if text.turn.finished:  # a delta after its part's `done`: judged whole then, not read
            return [(data, event, False)]
        delta = data.get("delta")
        out = self._released(
            text, self._feed_text(text, delta) if isinstance(delta, str) else "", False
        )
        if out == delta:
            return [(data, event, False)]
        return [({**data, "delta": out}, None, False)] if out else []

    def _released(self, text: Text, out: str, ended: bool) -> str:
        """What a part's scanner released goes out, in a splice without the retry's
        restatement of the prose the client has."""
        if self.splice is not None and not text.reasoning:
            out = self.splice.unrepeated((text.output_index, text.index), out, ended)
        text.published.append(out)
        return out

    def _send_all(self, pending: list[Pending], final: bool = False) -> list[Out]:
        if self.splice is not None:
            pending = self.splice.route(pending, final)
        else:
            pending = self._unshown.route(pending, final, leaked=self.certain)
        return [self._send(*p) for p in pending]

    def _send(self, data: dict[str, Any], event: Event | None, synthesized: bool) -> Out:
        place = self.splice.placed if self.splice is not None else None
        return self.sent.send(data, event, synthesized, place)

    def _text(self, data: dict[str, Any], oi: int, is_part: bool) -> Text:
        """The part (or reasoning summary part) an event belongs to; made on first sight."""
        table = self.parts if is_part else self.summaries
        index = index_of(data, "content_index" if is_part else "summary_index")
        text = table.get((oi, index))
        if text is None:
            turn = TurnScanner(self._tools, self._hold_limit)
            text = Text(oi, index, data.get("item_id"), turn, reasoning=not is_part)
            table[(oi, index)] = text
        return text

    def _reasoning_marker(self) -> bool:
        """Markup has shown in reasoning, and no real call has come."""
        return self._reasoning_seen and not self._called

    def _feed_text(self, text: Text, delta: str) -> str:
        out = text.feed(delta)
        self._note(text)
        return out

    def _finish_text(self, text: Text) -> str:
        out = text.finish()
        self._note(text)
        return out

    def _note(self, text: Text) -> None:
        """A part's scanner has read text or finished: note a finding or reasoning markup it
        shows (neither is ever undone; only a feed or a finish makes one)."""
        self._found |= text.finding is not None
        self._reasoning_seen |= text.reasoning and text.scanner.marker_seen

    def _release_reasoning(self) -> list[Pending]:
        """A real call arrived: held reasoning (markup included) goes out, then what was
        parked behind it, in order."""
        self._called = True
        out: list[Pending] = []
        for summary in self.summaries.values():
            if summary.turn.finished:
                continue
            text = summary.turn.structured_call()
            summary.published.append(text)
            if text:
                out.append(summary.delta_event(text))
        out += self._parked
        self._parked, self._parked_bytes = [], 0
        return out

    def _flush_all(self) -> list[Pending]:
        """Settle every open part at the end: held text goes out, or a finding is made."""
        out: list[Pending] = []
        for table, is_part in ((self.parts, True), (self.summaries, False)):
            if not is_part and self._called:
                continue
            for text in table.values():
                if text.turn.finished:
                    continue
                rest = self._released(text, self._finish_text(text), ended=True)
                if rest:  # with a finding, the prose before its markup
                    out.append(text.delta_event(rest))
        if self.finding is None and self._parked:
            out = self._parked + out
            self._parked, self._parked_bytes = [], 0
        return out

    def _usage(self, data: dict[str, Any]) -> None:
        response = data.get("response")
        if isinstance(response, dict):
            self.usage = usage_of(response.get("usage")) or self.usage

    def _drain(self, kind: str | None, data: dict[str, Any]) -> None:
        """After a finding, keep feeding the leaking part so its name and family settle, and
        read on to the terminal event for the usage the upstream billed (and a repair)."""
        leak = self._leak()
        if leak is not None:
            self._tail = self._tail or Tail((leak.output_index, leak.index))
            self._tail.see(kind, data)
        if kind == "response.output_text.delta" and isinstance(data.get("delta"), str):
            key = (index_of(data, "output_index"), index_of(data, "content_index"))
            part = self.parts.get(key)
            if part is not None and part.scanner.marker_seen and not part.turn.finished:
                self._feed_text(part, data["delta"])
        elif kind == "response.output_text.done":
            self.settle()
        elif kind in TERMINAL:
            self.settle()
            self._ended = True


def new_stream(tools: ToolSet, hold_limit: int, previous: Stream | None) -> ResponsesStream:
    prev = previous if isinstance(previous, ResponsesStream) else None
    return ResponsesStream(tools, hold_limit, prev)


def stream_usage(stream: Stream) -> Usage | None:
    return stream.usage if isinstance(stream, ResponsesStream) else None

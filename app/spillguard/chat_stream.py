"""A Chat Completions SSE stream edited for the client, and a retry spliced into it.

Sans-IO: events in, bytes out. A chunk whose text the scanner publishes unchanged is forwarded
as the exact bytes the upstream sent; only chunks whose text is held back are re-serialized,
with every other field left as it was. A retry after published prose continues the client's
stream: the same chunk `id`, no second role delta, tool-call indices shifted past the calls
already sent, and its restatement of the published prose dropped (`repeat.py`). After a
finding, what follows the markup is kept in a `Tail`, for a repair (`chat_repair.py`).
"""

from __future__ import annotations

import json
from typing import Any

from .chat_choices import Choices, Splice
from .chat_repair import stream_repair
from .chat_shape import Shape, arguments_delta, content_delta
from .detect import Anomaly, Call, ToolSet
from .jsonread import loads_text
from .repeat import Repeat
from .sse import Event, Out, encode_data
from .usage import Usage, usage_of
from .wire import Stream


def _dumps(obj: Any) -> str:
    # ASCII escapes: a lone surrogate from an upstream must not make a chunk unwritable.
    return json.dumps(obj, separators=(",", ":"))


class ChatStream(Choices):
    """One upstream chat stream, edited through one TurnScanner per choice (`Choices`)."""

    def __init__(self, tools: ToolSet, hold_limit: int, splice: Splice | None = None) -> None:
        super().__init__(tools, hold_limit, splice)
        self.head: dict[str, Any] = {}  # id, created, model of the first chunk
        self.done: bytes | None = None  # the raw [DONE] event
        self._over = False  # [DONE] has gone out: what follows goes as it came, unread
        self.usage: Usage | None = None  # from a chunk's `usage` (stream_options.include_usage)
        self._shape: Shape | None = None  # the bytes of its content deltas around their text
        self._call_shape: Shape | None = None  # of one call's argument chunks around them
        self._shapes_left = self._call_shapes_left = 8  # shapes it may still learn, of each

    @property
    def certain(self) -> bool:
        """A finding is certain: nothing more of this stream may reach the client."""
        return self.finding is not None

    @property
    def holding(self) -> int:
        total = self._splice.repeat.holding if self._splice is not None else 0
        for guard in self._guards.values():  # read once an event: no generator
            total += guard.holding
        return total

    @property
    def ended(self) -> bool:
        return self.done is not None

    @property
    def closed(self) -> bool:
        return self._over

    @property
    def trailer(self) -> bytes:
        return b"" if self._over else self.done or b""

    @property
    def can_splice(self) -> bool:
        """A retry may continue this client stream: one choice only (with n > 1 the other
        choices have already finished their answers)."""
        return len(self._guards) <= 1

    @property
    def anomalies(self) -> list[Anomaly]:
        return self._calls.anomalies(sorted(self._guards), self._tools)

    def feed(self, event: Event) -> list[Out]:
        data = event.data
        if self._over:
            return [Out(event.raw, False)]
        if data is None:
            return [] if self.certain else [Out(event.raw, False)]
        if data[:1] != "{" and data.strip() == "[DONE]":  # a chunk is never stripped
            return self._done(event)
        return self._feed_chunk(event, _parsed(data))

    def _done(self, event: Event) -> list[Out]:
        """[DONE] ends the stream for every client: what was held is settled now, and unless
        that is a finding, [DONE] goes out after it (not at the upstream's end of the body,
        which may come later). After a finding it is kept, for a repair's trailer."""
        self.done = event.raw
        outs = self.finish()  # nothing, after a finding
        if self.certain:
            return []
        self._over = True
        outs.append(Out(event.raw, True))
        return outs

    def feed_all(self, events: list[Event]) -> list[Out]:
        """`feed` each event in turn; but content deltas of one choice in a row are read as one
        text, and when the scanner takes it whole (`Scanner.feed_quiet`) they go out together
        as the upstream sent them. The text published is the same either way; only a delta the
        scanner would have held until the next one is not re-serialized. Such deltas are read
        by their bytes once their `Shape` is known."""
        if self._over:
            return [Out(event.raw, False) for event in events]
        outs: list[Out] = []
        # A run of content deltas of one choice: their events, parsed data (None when read by
        # the shape) and texts.
        run: list[Event] = []
        chunks: list[dict[str, Any] | None] = []
        texts: list[str] = []
        index = 0
        at, count = 0, len(events)
        while at < count:
            shape = self._shape
            read = shape.texts(events, at) if shape is not None else None
            if read and shape is not None:  # the shape's deltas in a row, the most of a read
                if len(read) == count:  # the whole read (so `at` is 0): most reads
                    return self._feed_run(events, None, read, shape.index)
                if run and shape.index != index:
                    outs += self._feed_run(run, chunks, texts, index)
                    run, chunks, texts = [], [], []
                index, end = shape.index, at + len(read)
                run += events[at:end]
                chunks += [None] * len(read)
                texts += read
                if end == count:
                    break
                at = end  # the shape does not read this one
            call = self._call_shape
            more = call.texts(events, at) if call is not None else None
            if more and call is not None:  # a call's argument chunks in a row
                if run:
                    outs += self._feed_run(run, chunks, texts, index)
                    run, chunks, texts = [], [], []
                end = at + len(more)
                outs += self._arguments(events[at:end] if at or end < count else events, call)
                at = end
                continue
            event = events[at]
            at += 1
            data = event.data
            chunk = _parsed(data) if data is not None and data[:1] == "{" else None
            delta = content_delta(chunk)
            if self.head:
                self._learn(event, chunk, delta)
            if run and (delta is None or delta[0] != index):
                outs += self._feed_run(run, chunks, texts, index)
                run, chunks, texts = [], [], []
            if delta is not None:
                index = delta[0]
                run.append(event)
                chunks.append(chunk)
                texts.append(delta[1])
            elif chunk is not None:
                outs += self._feed_chunk(event, chunk)
            else:
                outs += self.feed(event)
                if self._over:  # that was [DONE]
                    return outs + [Out(event.raw, False) for event in events[at:]]
        if run:
            outs += self._feed_run(run, chunks, texts, index)
        return outs

    def _learn(self, event: Event, chunk: Any, delta: tuple[int, str] | None) -> None:
        """The shape of a parsed content delta, or of a call's argument chunk; a stream whose
        chunks all differ stops trying."""
        if delta is not None:
            if self._shapes_left:
                self._shapes_left -= 1
                self._shape = Shape.learn(event, chunk, *delta) or self._shape
            return
        more = arguments_delta(chunk) if self._call_shapes_left else None
        if more is not None:
            self._call_shapes_left -= 1
            index, number, text = more
            self._call_shape = Shape.learn(event, chunk, index, text, number) or self._call_shape

    def _arguments(self, events: list[Event], shape: Shape) -> list[Out]:
        """Argument chunks of one call in a row, read by its shape: published together as they
        came when the choice takes such chunks so (`_more_arguments`, which none of them
        changes), else each parsed and fed."""
        assert shape.call is not None
        if self._plain(shape.index) and self._more_arguments(shape.index, shape.call):
            if len(events) == 1:
                return [Out(events[0].raw, True)]
            return [Out(b"".join([event.raw for event in events]), True)]
        outs: list[Out] = []
        for event in events:
            outs += self._feed_chunk(event, _parsed(event.data or ""))
        return outs

    def _feed_run(
        self,
        run: list[Event],
        chunks: list[dict[str, Any] | None] | None,
        texts: list[str],
        index: int,
    ) -> list[Out]:
        """The content deltas `run` of choice `index`, with their parsed data (`chunks`, None
        for all read by the shape) and texts."""
        outs: list[Out] = []
        at = 0
        while at < len(run):
            plain = self._plain(index)  # until a finding, or a finish
            if plain:
                guard = self._guards.get(index) or self._guard(index)
                taken = guard.content.feed_quiet_run(texts[at:] if at else texts)
                if taken:
                    if taken == 1:  # most often the whole of a paced stream's read
                        text, raw = texts[at], run[at].raw
                    else:
                        text = "".join(texts[at : at + taken])
                        raw = b"".join([event.raw for event in run[at : at + taken]])
                    self._record(index, text)
                    outs.append(Out(raw, bool(text)))
                    at += taken
                    continue
            event, text = run[at], texts[at]
            chunk = chunks[at] if chunks is not None else None
            if plain:
                outs += self._delta(event, chunk, index, text)
            else:
                outs += self._feed_chunk(
                    event, chunk if chunk is not None else _parsed(event.data or "")
                )
            at += 1
        return outs

    def _plain(self, index: int) -> bool:
        """A content delta of choice `index` is read by `_delta`: no splice, no tail, no
        finding, and the choice has not finished."""
        return (
            bool(self.head)
            and self._tail is None
            and self._splice is None
            and not self.certain
            and index not in self._finished
        )

    def _delta(self, event: Event, chunk: Any, index: int, text: str) -> list[Out]:
        """A delta of content alone (`content_delta`) when `_plain`, what `_feed_chunk` makes of
        it; `chunk` is its parsed data, or None when it was read by its shape (and is parsed
        only if its text changes). Published unchanged, it goes as it came."""
        guard = self._guards.get(index) or self._guard(index)
        content = guard.feed_content(text)
        if content == text and guard.finding is None:
            self._record(index, content)
            return [Out(event.raw, bool(content))]
        if chunk is None:
            chunk = _parsed(event.data or "")
        choice = chunk["choices"][0]
        changed, meaningful, keep = self._edit_content(index, choice, choice["delta"], content)
        if not changed:
            return [Out(event.raw, meaningful)]
        if not keep:
            return []
        return [Out(encode_data(_dumps(chunk)), meaningful)]

    def _feed_chunk(self, event: Event, chunk: Any) -> list[Out]:
        """`feed`, once the event's data has been parsed (None when it is not JSON)."""
        choices = chunk.get("choices") if isinstance(chunk, dict) else None
        if self._tail is not None:
            self._tail.note(event, chunk)
        if not isinstance(choices, list):
            return [] if self.certain else [Out(event.raw, True)]  # errors, unknown events
        if not self.head:
            self.head = {k: chunk.get(k) for k in ("id", "created", "model")}
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = usage_of(usage) or self.usage
        if self.certain:
            self._drain(choices)
            return []
        if len(choices) == 1 and not usage and self._splice is None and self._tail is None:
            # Most chunks: one choice, nothing to splice. What the loop below makes of it.
            choice = choices[0]
            if isinstance(choice, dict):
                found = content_delta(chunk)
                if found is not None and found[0] not in self._finished:
                    # Most of a stream: a delta of content alone, what `_edit_choice` would
                    # hand to `_edit_content`.
                    return self._delta(event, chunk, *found)
                more = arguments_delta(chunk)
                if more is not None and self._more_arguments(more[0], more[1]):
                    return [Out(event.raw, True)]
                changed, meaningful, keep = self._edit_choice(chunk, choice)
                if not changed:
                    return [Out(event.raw, meaningful)]
                if not keep:
                    return []
                return [Out(encode_data(_dumps(chunk)), meaningful)]
        changed, meaningful, kept = self._splice is not None, False, []
        for n, choice in enumerate(choices):
            if not isinstance(choice, dict):
                kept.append(choice)
                continue
            c_changed, c_meaningful, keep = self._edit_choice(chunk, choice)
            changed |= c_changed
            meaningful |= c_meaningful
            if keep:
                kept.append(choice)
            if self._tail is not None:
                self._tail.clean &= n == len(choices) - 1  # no other choice may follow
                break
        if usage:
            meaningful = True
        if not changed:
            return [Out(event.raw, meaningful)]
        if choices and not kept and not usage:
            return []
        chunk["choices"] = kept
        if self._splice is not None:
            chunk.update(self._splice.head)
        return [Out(encode_data(_dumps(chunk)), meaningful)]

    def finish(self) -> list[Out]:
        """The upstream ended: settle every choice that did not finish, flush what was held."""
        outs: list[Out] = []
        for index, guard in self._guards.items():
            if index in self._finished or self.certain:
                continue
            self._finished.add(index)
            content, reasoning = guard.finish()
            if guard.finding is not None:  # only the prose before its markup goes out now
                self._found(index, guard.finding)
                outs = []
            content = self._unrepeated(index, content, ended=True)
            delta: dict[str, Any] = {}
            if reasoning:
                delta[self._rkeys.get(index, "reasoning_content")] = reasoning
            if content:
                delta["content"] = content
                self._record(index, content)
            if delta:
                chunk = {**self.head, "object": "chat.completion.chunk"}
                if self._splice is not None:
                    chunk.update(self._splice.head)
                chunk["choices"] = [{"index": index, "delta": delta, "finish_reason": None}]
                outs.append(Out(encode_data(_dumps(chunk)), True))
        return outs

    def repair(self, calls: tuple[Call, ...]) -> list[Out] | None:
        """After the upstream ended: the calls in place of the markup, then the finish, usage
        and [DONE]. None for a splice, several choices, or anything after the markup."""
        if self._tail is None or self._splice is not None or len(self._guards) != 1:
            return None
        if self.tool_next.get(self.finding_choice, 0):
            return None  # structured calls came already: the retry's to answer
        return stream_repair(self._tail, calls, self.trailer)


def _parsed(data: str) -> Any:
    try:
        return loads_text(data)
    except (ValueError, RecursionError):
        return None


def new_stream(tools: ToolSet, hold_limit: int, previous: Stream | None) -> ChatStream:
    """A stream; after `previous` published prose, the retry continues that client stream."""
    splice = None
    if isinstance(previous, ChatStream) and previous.head:
        head = {k: previous.head[k] for k in ("id", "created", "model")}
        repeat = Repeat(previous.leaked_text())
        splice = Splice(head, dict(previous.tool_next), previous.finding_choice, repeat)
    return ChatStream(tools, hold_limit, splice)

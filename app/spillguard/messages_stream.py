"""The Anthropic Messages stream editor: named SSE events in, publishable bytes out.

Events: `message_start`, then per content block `content_block_start`, `content_block_delta`
(`text_delta`, `thinking_delta`, `signature_delta`, `input_json_delta`, ...) and
`content_block_stop`, then `message_delta` and `message_stop`; `ping` and `error` anywhere.

Each text and thinking block has its own `TurnScanner` (a block starts its own lines), text on
its content side, thinking on its reasoning side. Events whose text is published unchanged go
out as the upstream's bytes. A text block's start waits until the block has text that is not
whitespace, so a block cut short by a finding is never empty or blank at the client. Once
markup shows in thinking, everything after it is parked until a call block releases it (the
thinking was real reasoning after all) or the message ends (then it is a finding). A retry
spliced into a started stream closes the blocks the client has open, numbers its own blocks
after them and sends no second `message_start`; its `message_delta` carries its stop reason
and usage. A repair (`messages_repair.py`) reads a leak on to the message's end, then closes
the blocks the client has open and sends the calls' blocks after them.
"""

from __future__ import annotations

from typing import Any

from .detect import Anomaly, Call, Finding, ToolSet, TurnScanner, call_anomalies
from .messages_events import (
    DELTA_KEYS,
    MESSAGE_END,
    Block,
    ClientBlocks,
    Pending,
    is_call,
    meaningful,
    new_event,
)
from .messages_repair import Tail
from .sse import Event, Out
from .wire import NamedEvents

__all__ = ["MessagesStream", "is_call", "new_stream"]


class MessagesStream(NamedEvents):
    DELTAS = ("content_block_delta",)

    def __init__(self, tools: ToolSet, hold_limit: int, previous: MessagesStream | None) -> None:
        self._tools = tools
        self._hold_limit = hold_limit
        self._blocks: dict[int, Block] = {}
        self._parked: list[Pending] = []
        self._parked_bytes = 0
        self._called = False
        self._names: list[str | None] = []  # of the tool_use blocks, for `anomalies`
        self._claimed = False  # the message said it stopped for a tool call
        self._over = False  # the message ended: thinking markup may count now
        self._ended = False
        self._splice = previous is not None
        self._waiting: Block | None = None  # the text block whose start is held back
        # The blocks' indexes at the client; a splice goes on from the first attempt's.
        self.sent: ClientBlocks = previous.sent if previous else ClientBlocks()
        self._closing = self.sent.close_all() if previous is not None else []
        self._tail = Tail()  # after a finding: what the upstream sent, for a repair
        # Read once an event, so kept as the blocks' scanners change (`_fed`): some text block
        # has a finding; some thinking block has shown markup.
        self._text_found = False
        self._thinking_marker = False

    # ---- what the decision reads ----------------------------------------------------------

    @property
    def finding(self) -> Finding | None:
        """Content first, in block order; thinking counts once the message has ended without
        a call block."""
        leak = self._leak()
        if leak is not None and leak.turn is not None:
            return leak.turn.finding
        if not self._over or self._called:
            return None
        for block in self._blocks.values():
            if block.kind == "thinking" and block.turn is not None and block.turn.finding:
                return block.turn.finding
        return None

    @property
    def certain(self) -> bool:
        return self.finding is not None

    @property
    def can_splice(self) -> bool:
        return True

    @property
    def holding(self) -> int:
        held = sum(b.turn.holding for b in self._blocks.values() if b.turn is not None)
        held += sum(len(o) for b in self._blocks.values() if not b.shown for o in b.published)
        return held + self._parked_bytes

    @property
    def ended(self) -> bool:
        return self._ended

    @property
    def closed(self) -> bool:
        # message_stop went out: a finding keeps it back (thinking markup parked at the
        # message's end is one).
        return self._ended and not self.certain

    @property
    def trailer(self) -> bytes:
        return b""  # Messages streams end with message_stop, which is an event like the others

    @property
    def anomalies(self) -> list[Anomaly]:
        return call_anomalies(self._names, self._claimed, self._tools)

    @property
    def markup(self) -> str | None:
        """The leaking text block's markup, when a repair could replace it: no call block, no
        thinking markup parked (its block would be cut short at the client)."""
        leak = self._leak()
        if leak is None or leak.turn is None or self._called or self._parking():
            return None
        return leak.turn.markup

    def repair(self, calls: tuple[Call, ...]) -> list[Out] | None:
        """After the upstream's message ended: the blocks the client has open closed at the
        text it has, a `tool_use` block per call, and the message's end (stop reason
        `tool_use`, the upstream's usage). None when the message cannot carry them."""
        if self.markup is None or (tail := self._tail.finish(calls, self.sent.next)) is None:
            return None
        self.sent.next += len(calls)
        return self.sent.close_all() + tail

    def _leak(self) -> Block | None:
        if not self._text_found:
            return None
        blocks = self._blocks.values()
        return next((b for b in blocks if b.kind == "text" and b.turn and b.turn.finding), None)

    def leaked_text(self) -> str:
        """The prose of the text blocks, never the markup: the retry's assistant turn."""
        return "".join("".join(b.published) for b in self._blocks.values() if b.kind == "text")

    def settle(self) -> None:
        """Read the family and name from all the markup seen. Idempotent."""
        for block in self._blocks.values():
            if block.kind == "text" and block.turn is not None and block.turn.content.marker_seen:
                block.finish()
                self._fed(block)

    def finish(self) -> list[Out]:
        """The upstream's stream ended: settle what was held (nothing, after message_stop)."""
        return self._send_all(self._end())

    def _text_delta(self, event: Event, data: dict[str, Any]) -> list[Out] | None:
        """What `feed` makes of a `text_delta` of a text block that has shown text, while
        nothing is parked or found and the message has not ended, or of any delta of a block
        spillguard does not read (a call's arguments: the upstream's bytes); None for any other
        event, which is left unread. (A splice's `_closing` went out before any block
        started.)"""
        index, delta = data.get("index"), data.get("delta")
        block = self._blocks.get(index) if type(index) is int else None
        if block is not None and block.turn is None:  # a call's `input_json_delta`, most often
            if block.client != index or self._closing or self.certain or self._parking():
                return None
            return [Out(event.raw, meaningful(data))]  # as `_delta` and `_show` leave it
        if (
            block is None
            or block.kind != "text"
            or not block.shown
            or block.done
            or block.client != index
            or self._text_found
            or self._over
            or self._parking()
            or type(delta) is not dict
            or delta.get("type") != "text_delta"
        ):
            return None
        text = delta.get("text")
        if type(text) is not str:
            return None
        out = block.feed(text)
        self._fed(block)
        if out == text:
            # `meaningful` of a delta of its type and text alone: whether the text is empty
            return [Out(event.raw, bool(text) if len(delta) == 2 else meaningful(data))]
        return [new_event({**data, "delta": {**delta, "text": out}})] if out else []

    def _feed(self, event: Event, data: Any) -> list[Out]:
        """`feed`, once the event's data has been parsed (None when it is not JSON)."""
        kind = data.get("type") if isinstance(data, dict) else None
        if not isinstance(kind, str) or self.certain:
            if self.certain and isinstance(data, dict):
                self._drain(kind, data, event)
            return [] if self.certain else [Out(event.raw, True)]
        assert isinstance(data, dict)
        outs, self._closing = self._closing, []
        parking = self._parking()  # markup seen in thinking before this event
        pending = self._edit(kind, data, event)
        if self.certain:
            return outs + (self._send_all(pending) if not parking else [])
        if parking and self._parking():
            self._parked += pending
            self._parked_bytes += len(event.raw)
            return outs
        return outs + self._send_all(pending)

    # ---- editing --------------------------------------------------------------------------

    def _edit(self, kind: str, data: dict[str, Any], event: Event) -> list[Pending]:
        same: list[Pending] = [(data, event)]
        index = data.get("index")
        block = self._blocks.get(index) if isinstance(index, int) else None
        if kind == "message_start":
            return [] if self._splice else same
        if kind == "content_block_start" and isinstance(index, int):
            return self._start(index, data, event)
        if kind == "content_block_delta" and block is not None:
            return self._delta(block, data, event)
        if kind == "content_block_stop" and block is not None:
            out = self._finish(block)
            if self.certain:  # a finding made at the block's end: the prose before it goes out
                return out
            return out + self._show(block, same, force=True)
        if kind in MESSAGE_END:
            delta = data.get("delta")
            self._claimed |= isinstance(delta, dict) and delta.get("stop_reason") == "tool_use"
            out = self._end()
            self._ended |= kind == "message_stop"
            if self.certain:
                self._tail.see(kind, data, event)
            return out if self.certain else out + same
        if kind == "ping" and self._waiting is not None:
            self._waiting.queued.append((data, event))  # kept in its place among the events
            return []
        return same

    def _start(self, index: int, data: dict[str, Any], event: Event) -> list[Pending]:
        opened = data.get("content_block")
        kind = opened.get("type") if isinstance(opened, dict) else None
        kind = kind if isinstance(kind, str) else ""
        turn = TurnScanner(self._tools, self._hold_limit) if kind in ("text", "thinking") else None
        block = self._blocks[index] = Block(index, kind, turn)
        if kind == "tool_use":
            name = opened.get("name") if isinstance(opened, dict) else None
            self._names.append(name if isinstance(name, str) else None)
        if turn is not None and kind == "thinking" and self._called:
            turn.structured_call()  # after a call, reasoning is not judged
        self._waiting = block if kind == "text" else None
        if kind == "text":
            block.queued.append((data, event))
            return []
        block.shown = True
        return (self._release() if is_call(kind) else []) + [(data, event)]

    def _delta(self, block: Block, data: dict[str, Any], event: Event) -> list[Pending]:
        delta = data.get("delta")
        kind = delta.get("type") if isinstance(delta, dict) else None
        key = DELTA_KEYS.get(kind) if isinstance(kind, str) else None
        same: list[Pending] = [(data, event)]
        # A delta after its block's text was finished (sent after the block's stop) is not
        # read: it goes as it came.
        if key is None or block.turn is None or key != block.kind or block.turn.finished:
            if kind == "signature_delta" and block.kind == "thinking":
                return self._finish(block) + same  # the signature follows the whole thinking
            return self._show(block, same)
        assert isinstance(delta, dict)
        text = delta.get(key)
        if not isinstance(text, str):
            return self._show(block, same)
        out = block.feed(text)
        self._fed(block)
        if out == text:
            return self._show(block, same)
        edited: Pending = ({**data, "delta": {**delta, key: out}}, None)
        return self._show(block, [edited] if out else [])

    def _finish(self, block: Block) -> list[Pending]:
        """The block's text is complete: what its scanner still held, unless it is markup."""
        if block.turn is None or block.done:
            return []
        block.done = True
        rest = block.finish()
        self._fed(block)
        return self._show(block, [block.delta(rest)] if rest else [])

    def _show(self, block: Block, pending: list[Pending], force: bool = False) -> list[Pending]:
        """A text block's events wait until it has shown non-whitespace text (or ends as the
        upstream wrote it, `force`); then its start and everything queued go out."""
        if block.shown:
            return pending
        block.queued += pending
        if not force and not "".join(block.published).strip():
            return []
        block.shown = True
        self._waiting = None
        out, block.queued = block.queued, []
        return out

    def _end(self) -> list[Pending]:
        """The message is over: settle every block, then thinking markup counts."""
        out: list[Pending] = []
        for block in self._blocks.values():
            out += self._finish(block)
        self._over = True
        return out

    def _parking(self) -> bool:
        """Markup has shown in thinking, and no call block has come."""
        return self._thinking_marker and not self._called

    def _fed(self, block: Block) -> None:
        """The block's scanner has read text or finished: note a finding or markup it shows
        (neither is ever undone)."""
        turn = block.turn
        if turn is None:
            return
        if block.kind == "text" and turn.content.finding is not None:
            self._text_found = True
        elif block.kind == "thinking" and turn.reasoning.marker_seen:
            self._thinking_marker = True

    def _release(self) -> list[Pending]:
        """A call block arrived: held thinking (markup included) goes out, then what was
        parked behind it, in order."""
        self._called = True
        out: list[Pending] = []
        for block in self._blocks.values():
            if block.kind == "thinking" and block.turn is not None:
                text = block.turn.structured_call()
                if text:
                    block.published.append(text)
                    out.append(block.delta(text))
        out += self._parked
        self._parked, self._parked_bytes = [], 0
        return out

    def _drain(self, kind: str | None, data: dict[str, Any], event: Event) -> None:
        """After a finding, keep feeding the leaking block so its name and family settle, and
        read on to the message's end for a repair (`_tail`)."""
        index = data.get("index")
        block = self._blocks.get(index) if isinstance(index, int) else None
        turn = block.turn if block is not None else None
        leaking = turn is not None and turn.content.marker_seen
        delta = data.get("delta")
        if kind == "content_block_delta" and leaking and isinstance(delta, dict):
            text = delta.get("text")
            # Not after the block's stop settled it: its markup is complete.
            if (
                isinstance(text, str)
                and block is not None
                and turn is not None
                and not turn.finished
            ):
                block.feed(text)
                self._fed(block)
        elif (kind == "content_block_stop" and leaking) or kind in MESSAGE_END:
            self.settle()
        self._tail.see(kind, data, event)
        self._ended |= kind == "message_stop"

    # ---- sending --------------------------------------------------------------------------

    def _send_all(self, pending: list[Pending]) -> list[Out]:
        return [self.sent.send(self._block_of(data), data, event) for data, event in pending]

    def _block_of(self, data: dict[str, Any]) -> Block | None:
        index = data.get("index")
        return self._blocks.get(index) if isinstance(index, int) else None


def new_stream(tools: ToolSet, hold_limit: int, previous: MessagesStream | None) -> MessagesStream:
    return MessagesStream(tools, hold_limit, previous)

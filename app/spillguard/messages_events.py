"""The Anthropic Messages API's stream shapes, shared by the editor (`messages_stream.py`) and
the repair (`messages_repair.py`): a content block as the editor tracks it, and events on their
way out."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .detect import TurnScanner
from .sse import Event, Out, encode_event

# An event on its way out: its data, and the upstream's event while the data is unchanged.
Pending = tuple[dict[str, Any], Event | None]
DELTA_KEYS = {"text_delta": "text", "thinking_delta": "thinking"}
MESSAGE_END = ("message_delta", "message_stop")


def is_call(kind: Any) -> bool:
    """A block that is a structured call: `tool_use`, `server_tool_use`, `mcp_tool_use`."""
    return isinstance(kind, str) and kind.endswith("tool_use")


def dumps(obj: Any) -> str:
    # ASCII escapes: a lone surrogate from an upstream must not make an event unwritable.
    return json.dumps(obj, separators=(",", ":"))


def new_event(data: dict[str, Any]) -> Out:
    """An event made here, as it goes out."""
    return Out(encode_event(str(data.get("type")), dumps(data)), meaningful(data))


@dataclass
class Block:
    index: int  # the upstream's
    kind: str
    turn: TurnScanner | None  # text and thinking blocks
    shown: bool = False  # its events may go out (a text block: once it has shown text)
    client: int | None = None  # its index at the client, once its start went out
    queued: list[Pending] = field(default_factory=list)  # a text block not yet shown
    published: list[str] = field(default_factory=list)  # what its scanner let through
    done: bool = False

    def feed(self, text: str) -> str:
        assert self.turn is not None
        turn = self.turn
        out = turn.feed_content(text) if self.kind == "text" else turn.feed_reasoning(text)
        self.published.append(out)
        return out

    def finish(self) -> str:
        assert self.turn is not None
        content, reasoning = self.turn.finish()
        out = content if self.kind == "text" else reasoning
        self.published.append(out)
        return out

    def delta(self, text: str) -> Pending:
        """A delta of this block's text (or thinking), made here to release text that was held."""
        key = "text" if self.kind == "text" else "thinking"
        delta = {"type": f"{key}_delta", key: text}
        return ({"type": "content_block_delta", "index": self.index, "delta": delta}, None)


@dataclass
class ClientBlocks:
    """The blocks as the client has them: their indexes there, and which are open."""

    next: int = 0  # the next block index at the client (after a splice: past the first's)
    opened: set[int] = field(default_factory=set)

    def send(self, block: Block | None, data: dict[str, Any], event: Event | None) -> Out:
        """An event as it goes out: the upstream's bytes while unchanged and at its own index,
        else re-serialized at the block's index at the client."""
        kind, index = data.get("type"), data.get("index")
        if block is not None and kind == "content_block_start":
            block.client, self.next = self.next, self.next + 1
            self.opened.add(block.client)
        if block is not None and block.client is not None:
            if kind == "content_block_stop":
                self.opened.discard(block.client)
            if block.client != index:
                data, event = {**data, "index": block.client}, None
        return Out(event.raw, meaningful(data)) if event is not None else new_event(data)

    def close_all(self) -> list[Out]:
        """Stop every block the client has open, at the text it has (a splice, a repair)."""
        stops = [{"type": "content_block_stop", "index": i} for i in sorted(self.opened)]
        self.opened.clear()
        return [new_event(stop) for stop in stops]


def meaningful(data: dict[str, Any]) -> bool:
    """Something the client shows or acts on (so a response may start for it)."""
    kind = data.get("type")
    if kind in ("message_start", "ping"):
        return False
    if kind == "content_block_start":
        opened = data.get("content_block")
        return isinstance(opened, dict) and is_call(opened.get("type"))
    if kind == "content_block_delta":
        delta = data.get("delta")
        return isinstance(delta, dict) and any(v for k, v in delta.items() if k != "type")
    return True

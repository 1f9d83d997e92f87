"""The Anthropic Messages API as an upstream writes it (named events: message_start, content blocks
with their deltas, message_delta, message_stop, a ping; the whole message), and what a client
reads back from spillguard's output, checked for the shape the SDKs rely on."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tests.fuzz.wire_bytes import Call, Turn, decode, dumps

MESSAGE = {"id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant"}
MESSAGE |= {"model": "deepseek-chat", "content": [], "stop_reason": None, "stop_sequence": None}
SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"


class MessagesWriter:
    """Writes named events the way an Anthropic-compatible provider streams them."""

    def __init__(self) -> None:
        self.events: list[bytes] = []
        self.content: list[dict[str, Any]] = []

    def emit(self, kind: str, **fields: Any) -> bytes:
        raw = f"event: {kind}\ndata: {dumps({'type': kind, **fields})}\n\n".encode()
        self.events.append(raw)
        return raw

    def start(self) -> None:
        usage = {"input_tokens": 40, "output_tokens": 1}
        self.emit("message_start", message={**MESSAGE, "usage": usage})

    def _block(self, opened: dict[str, Any], deltas: list[dict[str, Any]]) -> None:
        index = len(self.content)
        self.emit("content_block_start", index=index, content_block=opened)
        if index == 0:
            self.emit("ping")
        for delta in deltas:
            self.emit("content_block_delta", index=index, delta=delta)
        self.emit("content_block_stop", index=index)

    def thinking(self, deltas: Iterable[str], signature: str = SIGNATURE) -> None:
        deltas = list(deltas)
        pieces = [{"type": "thinking_delta", "thinking": d} for d in deltas]
        pieces.append({"type": "signature_delta", "signature": signature})
        self._block({"type": "thinking", "thinking": "", "signature": ""}, pieces)
        text = "".join(deltas)
        self.content.append({"type": "thinking", "thinking": text, "signature": signature})

    def text(self, deltas: Iterable[str]) -> None:
        deltas = list(deltas)
        pieces = [{"type": "text_delta", "text": d} for d in deltas]
        self._block({"type": "text", "text": ""}, pieces)
        self.content.append({"type": "text", "text": "".join(deltas)})

    def tool_use(self, call: Call) -> None:
        opened = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
        args = call.arguments
        pieces = [{"type": "input_json_delta", "partial_json": ""}]
        pieces += [
            {"type": "input_json_delta", "partial_json": args[i : i + 7]}
            for i in range(0, len(args), 7)
        ]
        self._block(opened, pieces)
        self.content.append({**opened, "input": json.loads(args)})

    def end(self, stop_reason: str) -> None:
        delta = {"stop_reason": stop_reason, "stop_sequence": None}
        self.emit("message_delta", delta=delta, usage={"output_tokens": 18})
        self.emit("message_stop")


def written(turn: Turn) -> MessagesWriter:
    """The turn in the order a thinking model streams it: thinking, text, then its calls."""
    writer = MessagesWriter()
    writer.start()
    if turn.reasoning:
        writer.thinking(turn.reasoning)
    if turn.content:
        writer.text(turn.content)
    for call in turn.calls:
        writer.tool_use(call)
    writer.end("tool_use" if turn.calls else "end_turn")
    return writer


def messages_events(turn: Turn) -> list[bytes]:
    return written(turn).events


def messages_reply(turn: Turn) -> dict[str, Any]:
    """The same turn as one non-streamed message."""
    writer = written(turn)
    stop = "tool_use" if turn.calls else "end_turn"
    usage = {"input_tokens": 40, "output_tokens": 18}
    return {**MESSAGE, "content": writer.content, "stop_reason": stop, "usage": usage}


@dataclass
class Block:
    type: str
    text: str = ""  # text, thinking, or a tool_use's input JSON
    signature: str = ""
    name: str | None = None
    stopped: bool = False


@dataclass
class MessagesView:
    """What a client assembles from the events, as the SDKs do (by block index)."""

    starts: int = 0  # message_start events
    blocks: list[Block] = field(default_factory=list)
    stop_reason: str | None = None
    usage: dict[str, Any] | None = None
    stops: int = 0  # message_stop events
    errors: list[dict[str, Any]] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)

    def of(self, kind: str) -> list[Block]:
        return [b for b in self.blocks if b.type == kind]

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.of("text"))

    @property
    def thinking(self) -> str:
        return "".join(b.text for b in self.of("thinking"))


def messages_view(out: bytes) -> MessagesView:
    """Read spillguard's output, asserting what every Anthropic client relies on: events named
    as their `type`, block indexes consecutive from 0 (a delta or stop only for a block that is
    open), one message_start at most, nothing after message_stop, and no text block that is
    empty or only whitespace."""
    view = MessagesView()
    for event in decode(out):
        if event.data is None:
            continue
        data = json.loads(event.data)
        kind = data["type"]
        assert event.event == kind, (event.event, kind)
        assert view.stops == 0, f"{kind} after message_stop"
        view.kinds.append(kind)
        if kind == "message_start":
            view.starts += 1
            assert view.starts == 1 and not view.blocks
        elif kind == "content_block_start":
            assert data["index"] == len(view.blocks), (data["index"], len(view.blocks))
            opened = data["content_block"]
            view.blocks.append(Block(opened["type"], name=opened.get("name")))
        elif kind in ("content_block_delta", "content_block_stop"):
            block = view.blocks[data["index"]]
            assert not block.stopped, f"{kind} after the block stopped"
            if kind == "content_block_stop":
                block.stopped = True
                assert block.type != "text" or block.text.strip(), "a blank text block"
                continue
            delta = data["delta"]
            for key in ("text", "thinking", "partial_json"):
                block.text += delta.get(key, "")
            block.signature += delta.get("signature", "")
        elif kind == "message_delta":
            view.stop_reason = data["delta"].get("stop_reason")
            view.usage = data.get("usage")
        elif kind == "message_stop":
            view.stops += 1
        elif kind == "error":
            view.errors.append(data)
    return view

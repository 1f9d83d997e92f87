"""Repair mode on the Messages API: `tool_use` blocks in place of a leaked text block.

A whole message keeps every byte the upstream sent except `content` (the blocks before the leak
as written, the leaked block cut to its prose or dropped when that is blank, then one `tool_use`
block per call), `stop_reason` (`tool_use`) and a `stop_sequence` that no longer applies. A
stream closes the text block the client has open and sends the blocks as Anthropic streams them
(`messages_stream.py` decides when). A message that holds a call block already, or any block
after the leaked one, cannot be repaired: the decision retries.
"""

from __future__ import annotations

import json
import secrets
import string
from dataclasses import dataclass
from typing import Any

from .detect import Call, Finding
from .messages_events import dumps, is_call, new_event
from .rawjson import elements, with_values
from .sse import Event, Out

_BASE62 = string.digits + string.ascii_letters


def tool_use_id() -> str:
    """An id in the shape Anthropic's have (`toolu_01` and 22 base62 characters)."""
    return "toolu_01" + "".join(secrets.choice(_BASE62) for _ in range(22))


def _blocks(reply: Any) -> list[Any]:
    content = reply.get("content") if isinstance(reply, dict) else None
    return content if isinstance(content, list) else []


def _text(block: Any) -> str | None:
    if isinstance(block, dict) and block.get("type") == "text":
        text = block.get("text")
        return text if isinstance(text, str) else None
    return None


def _leaking(blocks: list[Any], finding: Finding) -> int | None:
    """The text block the finding was made in: the first whose text holds the finding's
    excerpt at its start (whole replies are judged one scanner per text block, in order)."""
    if finding.field != "content" or not finding.excerpt:
        return None
    for k, block in enumerate(blocks):
        text = _text(block)
        if text is not None and text.startswith(finding.excerpt, finding.start):
            return k
    return None


def reply_markup(reply: Any, finding: Finding) -> str | None:
    """The finding's markup in a whole message: its text block from `Finding.start` on."""
    blocks = _blocks(reply)
    k = _leaking(blocks, finding)
    text = _text(blocks[k]) if k is not None else None
    return text[finding.start :] if text is not None else None


def _arguments(call: Call) -> str | None:
    """The call's arguments as the raw JSON of its `input`, when they are an object."""
    try:
        value = json.loads(call.arguments)
    except (ValueError, RecursionError):
        return None
    return call.arguments if isinstance(value, dict) else None


def tool_use_raw(call: Call, block_id: str) -> str | None:
    """A `tool_use` block's JSON, its `input` the arguments' own text."""
    arguments = _arguments(call)
    if arguments is None:
        return None
    head = {"type": "tool_use", "id": block_id, "name": call.name}
    return dumps(head)[:-1] + ',"input":' + arguments + "}"


# A message that stopped so did not end its turn: cut at a token limit, refused, or paused.
NOT_A_TURN = frozenset({"max_tokens", "model_context_window_exceeded", "refusal", "pause_turn"})


def repair_reply(
    raw: bytes, reply: Any, finding: Finding, prose: str, calls: tuple[Call, ...]
) -> bytes | None:
    """The whole message with `calls` as `tool_use` blocks in place of the leaked markup; None
    when the message cannot carry them (a call block already, a block after the leaked one,
    arguments that are not an object)."""
    blocks = _blocks(reply)
    k = _leaking(blocks, finding)
    if not calls or k is None or k != len(blocks) - 1:
        return None
    if isinstance(reply, dict) and reply.get("stop_reason") in NOT_A_TURN:
        return None
    if any(isinstance(b, dict) and is_call(b.get("type")) for b in blocks):
        return None
    text = _text(blocks[k]) or ""
    kept = text[: finding.start]
    before = "".join(t for b in blocks[:k] if (t := _text(b)) is not None)
    if before + kept != prose:  # not the block the decision judged
        return None
    uses = [tool_use_raw(call, tool_use_id()) for call in calls]
    if any(u is None for u in uses):
        return None
    raws = elements(raw, "content")
    if raws is None or len(raws) != len(blocks):
        raws = [dumps(b) for b in blocks]
    content = raws[:k] + ([dumps({**blocks[k], "text": kept})] if kept.strip() else [])
    content += [u for u in uses if u is not None]
    changes = {"content": "[" + ",".join(content) + "]", "stop_reason": '"tool_use"'}
    if isinstance(reply, dict) and reply.get("stop_sequence") is not None:
        changes["stop_sequence"] = "null"  # it stopped for the calls, not a stop sequence
    return with_values(raw, reply, changes)


def tool_use_events(calls: tuple[Call, ...], first: int) -> list[dict[str, Any]] | None:
    """The stream events of one `tool_use` block per call, from client index `first`: its
    start (with `input: {}`), its arguments as one `input_json_delta`, its stop."""
    events: list[dict[str, Any]] = []
    for n, call in enumerate(calls):
        arguments = _arguments(call)
        if arguments is None:
            return None
        index = first + n
        opened = {"type": "tool_use", "id": tool_use_id(), "name": call.name, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": arguments}
        events += [
            {"type": "content_block_start", "index": index, "content_block": opened},
            {"type": "content_block_delta", "index": index, "delta": delta},
            {"type": "content_block_stop", "index": index},
        ]
    return events


def stopped_for_calls(message_delta: dict[str, Any]) -> dict[str, Any]:
    """The upstream's `message_delta` saying the message stopped for its calls; its usage and
    every other field as sent."""
    delta = message_delta.get("delta")
    delta = delta if isinstance(delta, dict) else {}
    return {**message_delta, "delta": {**delta, "stop_reason": "tool_use", "stop_sequence": None}}


@dataclass
class Tail:
    """What the upstream sent after a leak was found, as a repair needs it: the message's end
    (its `message_delta`, with the usage, and `message_stop`), and whether anything came that
    a repair cannot carry (another block, an error)."""

    message_delta: dict[str, Any] | None = None
    message_stop: Event | None = None
    other: bool = False

    def see(self, kind: str | None, data: dict[str, Any], event: Event) -> None:
        if kind == "message_delta":
            self.message_delta = data
        elif kind == "message_stop":
            self.message_stop = event
        elif kind in ("content_block_start", "error"):
            self.other = True

    def finish(self, calls: tuple[Call, ...], first: int) -> list[Out] | None:
        """The calls' blocks from client index `first`, then the message's end; None when the
        upstream did not end its message cleanly after the leaked block."""
        events = tool_use_events(calls, first)
        if self.other or events is None:
            return None
        if self.message_delta is None or self.message_stop is None:  # the message never ended
            return None
        delta = self.message_delta.get("delta")
        if isinstance(delta, dict) and delta.get("stop_reason") in NOT_A_TURN:
            return None
        outs = [new_event(e) for e in events] + [new_event(stopped_for_calls(self.message_delta))]
        return [*outs, Out(self.message_stop.raw)]

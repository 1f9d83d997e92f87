"""Repair on the Chat Completions wire: leaked markup answered with the calls it spelled out.

Sans-IO. A whole reply's one choice gets `tool_calls`, its content becomes the prose before the
markup (or null) and its finish_reason `tool_calls`; only the `choices` value is written anew,
every other field stays the upstream's bytes. A stream keeps what followed its markup in a
`Tail`; `stream_repair` then writes the tool-call deltas and the finish chunk, and passes the
rest (the usage chunk, `[DONE]`) as the upstream sent it. A choice that made structured calls
already, or that ended without ending its turn (`length`, `content_filter`), is not repaired.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from .detect import Call, Finding
from .rawjson import replace_values
from .sse import Event, Out, encode_data

# A choice that ended so did not end its turn: cut at the token limit, or stopped by a filter.
NOT_A_TURN = frozenset({"length", "content_filter"})


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def call_id() -> str:
    return "call_" + secrets.token_hex(12)


def _only_choice(reply: Any) -> dict[str, Any] | None:
    """The reply's choice when it has exactly one (with n > 1 the retry answers every one)."""
    choices = reply.get("choices") if isinstance(reply, dict) else None
    if isinstance(choices, list) and len(choices) == 1 and isinstance(choices[0], dict):
        return choices[0]
    return None


def _message(reply: Any, finding: Finding) -> dict[str, Any] | None:
    """The leaking message, when its markup is in content and it made no legacy call."""
    choice = _only_choice(reply)
    message = choice.get("message") if choice is not None else None
    if not isinstance(message, dict) or finding.field != "content":
        return None
    if not isinstance(message.get("content"), str) or message.get("function_call") is not None:
        return None
    return message


def reply_markup(reply: Any, finding: Finding) -> str | None:
    message = _message(reply, finding)
    return None if message is None else message["content"][finding.start :]


def repair_reply(
    raw: bytes, reply: Any, finding: Finding, prose: str, calls: tuple[Call, ...]
) -> bytes | None:
    message = _message(reply, finding)
    choice = _only_choice(reply)
    if message is None or choice is None or message.get("tool_calls"):
        return None  # a reply with structured calls already is the retry's to answer
    if choice.get("finish_reason") in NOT_A_TURN:
        return None
    tool_calls = [{"id": call_id(), **_call(c)} for c in calls]
    message = {**message, "content": prose if prose.strip() else None, "tool_calls": tool_calls}
    repaired = {**choice, "message": message, "finish_reason": "tool_calls"}
    if repaired.get("logprobs") is not None:
        repaired["logprobs"] = None  # they would spell out the markup
    return replace_values(raw, {"choices": "[" + _dumps(repaired) + "]"})


def _call(call: Call) -> dict[str, Any]:
    return {"type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def _quiet(delta: Any, markup: bool) -> bool:
    """A delta that carries nothing but the markup (`markup`) or nothing at all."""
    if not isinstance(delta, dict):
        return False
    allowed = ("content", "role") if markup else ("role",)
    return all(k in allowed or v in ("", None, []) for k, v in delta.items())


@dataclass
class Tail:
    """What an upstream stream sent after its leaking choice's markup, for a repair: the
    chunk that finished that choice (its fields but `choices`), and the events in order, None
    standing for that chunk. `clean` is false once anything but markup, the finish, other
    events without choices (usage) and `[DONE]` came: then no repair."""

    choice: int
    closing: dict[str, Any] | None = None
    logprobs: bool = False  # the finishing choice carried a `logprobs` key
    finish: str | None = None  # the upstream's finish_reason
    events: list[bytes | None] = field(default_factory=list)
    clean: bool = True

    def close(self, chunk: dict[str, Any], choice: dict[str, Any], published: bool) -> None:
        """`chunk` finished the choice; `published`: it went out already (with the prose)."""
        if self.closing is not None:
            self.clean = False
            return
        self.closing = {k: v for k, v in chunk.items() if k != "choices"}
        if published and self.closing.get("usage") is not None:
            self.closing["usage"] = None  # already sent with the prose
        self.logprobs = "logprobs" in choice
        self.finish = choice.get("finish_reason")
        self.events.append(None)

    def note(self, event: Event, chunk: Any) -> None:
        """One event after the finding; `chunk` its parsed data."""
        choices = chunk.get("choices") if isinstance(chunk, dict) else None
        if not isinstance(choices, list):
            self.clean = False  # an error or an unknown event: not for a repair to drop
            return
        if not choices:
            self.events.append(event.raw)
            return
        for choice in choices:
            index = choice.get("index", 0) if isinstance(choice, dict) else None
            if index != self.choice or not _quiet(choice.get("delta"), self.closing is None):
                self.clean = False
                return
            if choice.get("finish_reason") is not None:
                self.close(chunk, choice, published=False)


def stream_repair(tail: Tail, calls: tuple[Call, ...], done: bytes) -> list[Out] | None:
    """The events that finish the client's stream with `calls` in place of the markup, their
    indices from 0; None unless `tail` is clean and has a finishing chunk that ended the turn."""
    if not tail.clean or tail.closing is None or tail.finish in NOT_A_TURN:
        return None
    template = dict(tail.closing)
    if template.get("usage") is not None:
        template["usage"] = None  # only the upstream's own chunks carry it

    def chunk(head: dict[str, Any], delta: dict[str, Any], finish: str | None) -> Out:
        choice: dict[str, Any] = {"index": tail.choice, "delta": delta}
        if tail.logprobs:
            choice["logprobs"] = None
        choice["finish_reason"] = finish
        return Out(encode_data(_dumps({**head, "choices": [choice]})), True)

    outs: list[Out] = []
    for n, call in enumerate(calls):
        opening = {"index": n, "id": call_id(), **_call(call)}
        opening["function"] = {"name": call.name, "arguments": ""}
        outs.append(chunk(template, {"tool_calls": [opening]}, None))
        piece = {"index": n, "function": {"arguments": call.arguments}}
        outs.append(chunk(template, {"tool_calls": [piece]}, None))
    for raw in tail.events:
        outs.append(chunk(tail.closing, {}, "tool_calls") if raw is None else Out(raw, True))
    if done:
        outs.append(Out(done, True))
    return outs

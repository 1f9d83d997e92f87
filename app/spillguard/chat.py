"""Chat Completions on the wire: whole replies, SSE chunk streams, and the retry request.

Sans-IO: events in, bytes out. The decision (pass, retry, fail) belongs to `proxy.py`; this module
only knows the Chat Completions shapes. A chunk whose text the scanner publishes unchanged is
forwarded as the exact bytes the upstream sent; only chunks whose text is held back are
re-serialized, with every other field left as it was.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .detect import Anomaly, Finding, ToolSet, TurnScanner, call_anomalies
from .errors import SpillguardError
from .sse import Event, Out, encode_data
from .wire import Stream, Wire

REASONING_KEYS = ("reasoning_content", "reasoning")
CALL_FINISHES = ("tool_calls", "function_call")


def _dumps(obj: Any) -> str:
    # ASCII escapes: a lone surrogate from an upstream must not make a chunk unwritable.
    return json.dumps(obj, separators=(",", ":"))


def inspect_reply(reply: Any, tools: ToolSet, hold_limit: int) -> tuple[Finding, str] | None:
    """The first finding in a whole Chat Completions reply, with the leaked choice's text."""
    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list):
        return None
    for choice in choices:
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            continue
        guard = TurnScanner(tools, hold_limit)
        if message.get("tool_calls") or message.get("function_call"):
            guard.structured_call()
        content = message.get("content")
        if isinstance(content, str):
            guard.feed_content(content)
        for key in REASONING_KEYS:
            reasoning = message.get(key)
            if isinstance(reasoning, str):
                guard.feed_reasoning(reasoning)
                break
        guard.finish()
        if guard.finding is not None:
            return guard.finding, content if isinstance(content, str) else ""
    return None


def _name(call: Any) -> str | None:
    """The function name of a tool call (or legacy function_call) object, if it has one."""
    fn = call.get("function", call) if isinstance(call, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    return name if isinstance(name, str) else None


def reply_anomalies(reply: Any, tools: ToolSet) -> list[Anomaly]:
    """Missing or malformed structured calls in a whole reply, choice by choice."""
    choices = reply.get("choices") if isinstance(reply, dict) else None
    found: list[Anomaly] = []
    for choice in choices if isinstance(choices, list) else []:
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            continue
        calls = message.get("tool_calls")
        names = [_name(c) for c in calls] if isinstance(calls, list) else []
        if isinstance(message.get("function_call"), dict):
            names.append(_name(message["function_call"]))
        claimed = choice.get("finish_reason") in CALL_FINISHES
        found += call_anomalies(names, claimed, tools)
    return found


def retry_body(body: dict[str, Any], items: list[dict[str, Any]]) -> dict[str, Any]:
    """The parsed request with the retry's items appended to `messages`."""
    given = body.get("messages")
    if not isinstance(given, list):
        raise TypeError("messages is not a list")
    return {**body, "messages": [*given, *items]}


@dataclass
class Splice:
    """How a retry's stream continues a client stream that has already published prose."""

    id: Any
    created: Any
    model: Any
    tool_offset: dict[int, int] = field(default_factory=dict)


class ChatStream:
    """One upstream chat stream, edited through one TurnScanner per choice."""

    def __init__(self, tools: ToolSet, hold_limit: int, splice: Splice | None = None) -> None:
        self._tools = tools
        self._hold_limit = hold_limit
        self._splice = splice
        self._guards: dict[int, TurnScanner] = {}
        self._finished: set[int] = set()
        self._published: dict[int, list[str]] = {}
        self._published_len: dict[int, int] = {}
        self.tool_next: dict[int, int] = {}  # next free tool-call index per choice
        self._rkeys: dict[int, str] = {}  # the reasoning key each choice uses
        self.head: dict[str, Any] = {}  # id, created, model of the first chunk
        self.finding: Finding | None = None
        self.finding_choice = 0
        self.done: bytes | None = None  # the raw [DONE] event, held until the end
        # Structured calls by (choice, call index): their names as streamed (None until one
        # is), and the choices that finished saying they called.
        self._calls: dict[tuple[int, int], str | None] = {}
        self._claimed: set[int] = set()

    @property
    def certain(self) -> bool:
        """A finding is certain: nothing more of this stream may reach the client."""
        return self.finding is not None

    @property
    def holding(self) -> int:
        return sum(g.holding for g in self._guards.values())

    @property
    def ended(self) -> bool:
        return self.done is not None

    @property
    def trailer(self) -> bytes:
        return self.done or b""

    @property
    def can_splice(self) -> bool:
        """A retry may continue this client stream: one choice only (with n > 1 the other
        choices have already finished their answers)."""
        return len(self._guards) <= 1

    @property
    def anomalies(self) -> list[Anomaly]:
        found: list[Anomaly] = []
        for index in sorted(self._guards):
            names = [name for (c, _), name in self._calls.items() if c == index]
            found += call_anomalies(names, index in self._claimed, self._tools)
        return found

    def leaked_text(self) -> str:
        """The leaked choice's content as the model wrote it: published prose, then the markup
        when the markup was in the content (reasoning is not the assistant turn's content)."""
        prose = "".join(self._published.get(self.finding_choice, []))
        if self.finding is not None and self.finding.field == "content":
            return prose + self.finding.excerpt
        return prose

    def feed(self, event: Event) -> list[Out]:
        if event.data is None:
            return [] if self.certain else [Out(event.raw, False)]
        if event.data.strip() == "[DONE]":
            self.done = event.raw
            return []
        try:
            chunk = json.loads(event.data)
        except (ValueError, RecursionError):
            chunk = None
        choices = chunk.get("choices") if isinstance(chunk, dict) else None
        if not isinstance(choices, list):
            return [] if self.certain else [Out(event.raw, True)]  # errors, unknown events
        if not self.head:
            self.head = {k: chunk.get(k) for k in ("id", "created", "model")}
        if self.certain:
            self._drain(choices)
            return []
        changed, meaningful, kept = self._splice is not None, False, []
        for choice in choices:
            if not isinstance(choice, dict):
                kept.append(choice)
                continue
            c_changed, c_meaningful, keep = self._edit_choice(choice)
            changed |= c_changed
            meaningful |= c_meaningful
            if keep:
                kept.append(choice)
            if self.certain:
                break
        if chunk.get("usage"):
            meaningful = True
        if not changed:
            return [Out(event.raw, meaningful)]
        if choices and not kept and not chunk.get("usage"):
            return []
        chunk["choices"] = kept
        if self._splice is not None:
            chunk.update(id=self._splice.id, created=self._splice.created, model=self._splice.model)
        return [Out(encode_data(_dumps(chunk)), meaningful)]

    def finish(self) -> list[Out]:
        """The upstream ended: settle every choice that did not finish, flush what was held."""
        outs: list[Out] = []
        for index, guard in self._guards.items():
            if index in self._finished or self.certain:
                continue
            self._finished.add(index)
            content, reasoning = guard.finish()
            if guard.finding is not None:
                self._found(index, guard.finding)
                return []
            delta: dict[str, Any] = {}
            if reasoning:
                delta[self._rkeys.get(index, "reasoning_content")] = reasoning
            if content:
                delta["content"] = content
                self._record(index, content)
            if delta:
                chunk = {**self.head, "object": "chat.completion.chunk"}
                if self._splice is not None:
                    chunk.update(
                        id=self._splice.id, created=self._splice.created, model=self._splice.model
                    )
                chunk["choices"] = [{"index": index, "delta": delta, "finish_reason": None}]
                outs.append(Out(encode_data(_dumps(chunk)), True))
        return outs

    def _guard(self, index: int) -> TurnScanner:
        guard = self._guards.get(index)
        if guard is None:
            guard = self._guards[index] = TurnScanner(self._tools, self._hold_limit)
        return guard

    def _edit_choice(self, choice: dict[str, Any]) -> tuple[bool, bool, bool]:
        """Edit one choice in place: (changed, meaningful, keep)."""
        index = choice.get("index", 0)
        index = index if isinstance(index, int) else 0
        delta = choice.get("delta")
        delta = delta if isinstance(delta, dict) else {}
        if index in self._finished:  # a stray delta after finish_reason: nothing to judge
            return False, any(v not in ("", None, []) for v in delta.values()), True
        guard = self._guard(index)
        changed = meaningful = False
        released = ""
        tool_calls = delta.get("tool_calls")
        if tool_calls or delta.get("function_call"):
            released = guard.structured_call()
            meaningful = True
            self._note_calls(index, tool_calls, delta.get("function_call"))
            if isinstance(tool_calls, list):
                changed |= self._index_tools(index, tool_calls)
        # vLLM may send the same reasoning under both keys: judge it once, edit every copy.
        rkeys = [k for k in REASONING_KEYS if isinstance(delta.get(k), str)]
        if rkeys:
            self._rkeys.setdefault(index, rkeys[0])
        reasoning = released + (guard.feed_reasoning(delta[rkeys[0]]) if rkeys else "")
        content_in = delta.get("content")
        content = guard.feed_content(content_in) if isinstance(content_in, str) else ""
        finish = choice.get("finish_reason")
        if finish in CALL_FINISHES:
            self._claimed.add(index)
        if finish is not None:
            self._finished.add(index)
            rest_content, rest_reasoning = guard.finish()
            content += rest_content
            reasoning += rest_reasoning
            meaningful = True
        if guard.finding is not None:
            self._found(index, guard.finding)
            # Prose before the markup in this very chunk may still go out, as a plain delta.
            finish = None
            choice["finish_reason"] = None
            changed = True
        for key in rkeys or ([self._rkeys.get(index, "reasoning_content")] if reasoning else []):
            if delta.get(key) != reasoning:
                delta[key] = reasoning
                changed = True
        meaningful |= bool(reasoning)
        if isinstance(content_in, str) or content:
            if content != content_in:
                delta["content"] = content
                changed = True
                if choice.get("logprobs") is not None:
                    choice["logprobs"] = None  # they would spell out the held text
            meaningful |= bool(content)
            self._record(index, content)
        if self._splice is not None and "role" in delta:
            del delta["role"]
            changed = True
        if not changed:
            return False, meaningful, True
        choice["delta"] = delta
        empty = not any(v not in ("", None, []) for v in delta.values())
        return True, meaningful, not (empty and finish is None and not choice.get("logprobs"))

    def _note_calls(self, index: int, tool_calls: Any, function_call: Any) -> None:
        """Keep each structured call's name as its fragments arrive (for `anomalies`)."""
        calls = tool_calls if isinstance(tool_calls, list) else []
        numbered = [(c.get("index"), c) for c in calls if isinstance(c, dict)]
        if isinstance(function_call, dict):
            numbered.append((-1, function_call))
        for number, call in numbered:
            key = (index, number if isinstance(number, int) else 0)
            piece = _name(call)
            before = self._calls.get(key)
            self._calls[key] = before if piece is None else (before or "") + piece

    def _index_tools(self, index: int, tool_calls: list[Any]) -> bool:
        """Track tool-call indices; in a splice, shift them past the calls already sent."""
        offset = self._splice.tool_offset.get(index, 0) if self._splice else 0
        for call in tool_calls:
            if isinstance(call, dict) and isinstance(call.get("index"), int):
                call["index"] += offset
                self.tool_next[index] = max(self.tool_next.get(index, 0), call["index"] + 1)
        return offset != 0

    def _record(self, index: int, text: str) -> None:
        if not text:
            return
        size = self._published_len.get(index, 0)
        if size < self._hold_limit:
            self._published.setdefault(index, []).append(text[: self._hold_limit - size])
            self._published_len[index] = size + len(text)

    def _found(self, index: int, finding: Finding) -> None:
        if self.finding is None:
            self.finding, self.finding_choice = finding, index

    def _drain(self, choices: list[Any]) -> None:
        """After a finding, keep reading the leaking choice so its name and family settle."""
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != self.finding_choice:
                continue
            guard = self._guards[self.finding_choice]
            delta = choice.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                guard.feed_content(delta["content"])
            if choice.get("finish_reason") is not None:
                self.settle()

    def settle(self) -> None:
        """Settle the finding's family and name from all the markup read so far."""
        guard = self._guards.get(self.finding_choice)
        if guard is not None and not guard.finished:
            guard.finish()
            if guard.finding is not None:
                self.finding = guard.finding
                self._finished.add(self.finding_choice)


def new_stream(tools: ToolSet, hold_limit: int, previous: Stream | None) -> ChatStream:
    """A stream; after `previous` published prose, the retry continues that client stream."""
    splice = None
    if isinstance(previous, ChatStream) and previous.head:
        h = previous.head
        splice = Splice(h["id"], h["created"], h["model"], dict(previous.tool_next))
    return ChatStream(tools, hold_limit, splice)


def error_event(error: SpillguardError, stream: Stream | None) -> bytes:
    """A mid-stream failure: an error event (openai-python raises APIError on it), then [DONE]
    as vLLM does."""
    return b"data: " + error.json_bytes() + b"\n\ndata: [DONE]\n\n"


WIRE = Wire(
    "chat",
    "chat/completions",
    "messages",
    inspect_reply,
    new_stream,
    error_event,
    retry_body,
    reply_anomalies=reply_anomalies,
)

"""Chat Completions as an upstream writes it (SSE chunks with `logprobs` and, when asked for,
`usage: null`; the usage chunk; `[DONE]`; the whole reply), and what a client reads back."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tests.fuzz.wire_bytes import Call, Turn, decode, dumps

CHAT_ID = "chatcmpl-8kQ2"
CHAT_HEAD = {"id": CHAT_ID, "object": "chat.completion.chunk", "created": 1733000000}
CHAT_HEAD |= {"model": "deepseek-chat", "system_fingerprint": "fp_3a5770e1b4"}
CHAT_DONE = b"data: [DONE]\n\n"
USAGE = {"prompt_tokens": 31, "completion_tokens": 12, "total_tokens": 43}


def chat_chunk(
    delta: dict[str, Any],
    index: int = 0,
    finish: str | None = None,
    *,
    usage: bool = False,
    head: dict[str, Any] = CHAT_HEAD,
) -> bytes:
    """One chunk of one choice; `usage` marks a stream that asked for include_usage (every chunk
    then carries `usage: null`)."""
    choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
    body: dict[str, Any] = {**head, "choices": [choice]}
    if usage:
        body["usage"] = None
    return b"data: " + dumps(body).encode() + b"\n\n"


def chat_usage_chunk(head: dict[str, Any] = CHAT_HEAD) -> bytes:
    return b"data: " + dumps({**head, "choices": [], "usage": USAGE}).encode() + b"\n\n"


def chat_call_chunks(
    call: Call, tool_index: int, index: int = 0, usage: bool = False, **kw: Any
) -> list[bytes]:
    """A structured call as clients expect it: id, type and name once, then argument pieces."""
    first = {"index": tool_index, "id": call.id, "type": "function"}
    first["function"] = {"name": call.name, "arguments": ""}
    out = [chat_chunk({"tool_calls": [first]}, index, usage=usage, **kw)]
    args = call.arguments
    for i in range(0, len(args), 7):
        piece = {"index": tool_index, "function": {"arguments": args[i : i + 7]}}
        out.append(chat_chunk({"tool_calls": [piece]}, index, usage=usage, **kw))
    return out


def chat_events(turn: Turn, usage: bool = False, **kw: Any) -> list[bytes]:
    """The turn as a Chat Completions stream: role chunk, reasoning deltas, content deltas, tool
    call deltas, the finish chunk, the usage chunk when asked for, [DONE]."""
    out = [chat_chunk({"role": "assistant", "content": ""}, usage=usage, **kw)]
    out += [chat_chunk({"reasoning_content": r}, usage=usage, **kw) for r in turn.reasoning]
    out += [chat_chunk({"content": c}, usage=usage, **kw) for c in turn.content]
    for tool_index, call in enumerate(turn.calls):
        out += chat_call_chunks(call, tool_index, usage=usage, **kw)
    finish = "tool_calls" if turn.calls else "stop"
    out.append(chat_chunk({}, finish=finish, usage=usage, **kw))
    if usage:
        out.append(chat_usage_chunk(kw.get("head", CHAT_HEAD)))
    return [*out, CHAT_DONE]


def chat_reply(turn: Turn) -> dict[str, Any]:
    """The same turn as one non-streamed Chat Completions reply."""
    message: dict[str, Any] = {"role": "assistant", "content": turn.text if turn.content else None}
    if turn.reasoning:
        message["reasoning_content"] = turn.thought
    if turn.calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in turn.calls
        ]
    choice = {"index": 0, "message": message, "logprobs": None}
    choice["finish_reason"] = "tool_calls" if turn.calls else "stop"
    return {"id": CHAT_ID, "object": "chat.completion", "choices": [choice], "usage": USAGE}


@dataclass
class ChatView:
    """A Chat Completions stream as a client reads it."""

    content: dict[int, str] = field(default_factory=dict)
    reasoning: dict[int, str] = field(default_factory=dict)
    calls: dict[int, dict[int, list[str]]] = field(default_factory=dict)  # [id, name, args]
    finish: dict[int, str] = field(default_factory=dict)
    roles: int = 0
    ids: set[str] = field(default_factory=set)
    usage: list[Any] = field(default_factory=list)
    done: bool = False
    errors: list[Any] = field(default_factory=list)


def chat_view(data: bytes) -> ChatView:
    view = ChatView()
    for event in decode(data):
        if event.data is None:
            continue
        if event.data == "[DONE]":
            view.done = True
            continue
        chunk = json.loads(event.data)
        if "error" in chunk:
            view.errors.append(chunk["error"])
            continue
        view.ids.add(chunk["id"])
        if chunk.get("usage"):
            view.usage.append(chunk["usage"])
        for choice in chunk["choices"]:
            index, delta = choice["index"], choice["delta"]
            view.roles += "role" in delta
            for key, into in (("content", view.content), ("reasoning_content", view.reasoning)):
                if delta.get(key):
                    into[index] = into.get(index, "") + delta[key]
            for tc in delta.get("tool_calls") or []:
                slot = view.calls.setdefault(index, {}).setdefault(tc["index"], ["", "", ""])
                fn = tc.get("function") or {}
                slot[0] += tc.get("id", "")
                slot[1] += fn.get("name", "")
                slot[2] += fn.get("arguments", "")
            if choice.get("finish_reason"):
                view.finish[index] = choice["finish_reason"]
    return view

"""A scripted Anthropic-compatible upstream, for `spillguard demo` and the tests.

It runs on `scripted.ScriptedUpstream` (which records every request): a script answers each
request with a `Message` (what the model says, as thinking, text and tool_use blocks) or a
`Raw` reply. A message goes out as JSON, or as SSE events with its text cut into small deltas,
as the request asked; `/v1/messages/count_tokens` and `/v1/models` answer as Anthropic's do. It
misbehaves the way DeepSeek, Kimi, GLM and MiniMax do behind their Anthropic endpoints when a
text or thinking block is given leaked markup.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .scripted import Raw, ScriptedUpstream

SSE = {"content-type": "text/event-stream", "request-id": "req_scripted_stream"}
JSON = {"content-type": "application/json", "request-id": "req_scripted"}


@dataclass(frozen=True)
class Block:
    """One content block: `text`, `thinking` (with its signature) or `tool_use`."""

    type: str
    text: str = ""
    signature: str = ""
    name: str = ""
    input: dict[str, Any] = field(default_factory=dict)
    id: str = "toolu_01"


def text(value: str) -> Block:
    return Block("text", value)


def thinking(value: str, signature: str = "c2lnbmF0dXJlLW9mLXRoZS10aGlua2luZw==") -> Block:
    return Block("thinking", value, signature=signature)


def tool_use(name: str, arguments: dict[str, Any], call_id: str = "toolu_01") -> Block:
    return Block("tool_use", name=name, input=arguments, id=call_id)


@dataclass
class Message:
    """What the scripted model says."""

    content: list[Block]
    delta_size: int = 4
    delay: float = 0.0  # between stream events

    @property
    def stop_reason(self) -> str:
        return "tool_use" if any(b.type == "tool_use" for b in self.content) else "end_turn"


def _block(block: Block) -> dict[str, Any]:
    if block.type == "thinking":
        return {"type": "thinking", "thinking": block.text, "signature": block.signature}
    if block.type == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    return {"type": block.type, "text": block.text}


def message_object(message: Message, model: str) -> dict[str, Any]:
    return {
        "id": "msg_scripted",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [_block(b) for b in message.content],
        "stop_reason": message.stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 25, "output_tokens": 12},
    }


def _pieces(value: str, size: int) -> list[str]:
    return [value[i : i + size] for i in range(0, len(value), max(1, size))]


def message_events(message: Message, model: str) -> list[bytes]:
    """The message as Anthropic SSE events, its texts cut into `delta_size` deltas."""
    events: list[bytes] = []

    def emit(kind: str, **fields: Any) -> None:
        data = json.dumps({"type": kind, **fields}, ensure_ascii=False)
        events.append(f"event: {kind}\ndata: {data}\n\n".encode())

    opening = {**message_object(message, model), "content": [], "stop_reason": None}
    emit("message_start", message={**opening, "usage": {"input_tokens": 25, "output_tokens": 1}})
    for index, block in enumerate(message.content):
        deltas: list[dict[str, Any]]
        if block.type == "thinking":
            opened: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(block.text, 8)]
            deltas.append({"type": "signature_delta", "signature": block.signature})
        elif block.type == "tool_use":
            opened = {**_block(block), "input": {}}
            args = json.dumps(block.input)
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in _pieces(args, 8)]
        else:
            opened = {"type": "text", "text": ""}
            pieces = _pieces(block.text, message.delta_size)
            deltas = [{"type": "text_delta", "text": p} for p in pieces]
        emit("content_block_start", index=index, content_block=opened)
        if index == 0:
            emit("ping")
        for delta in deltas:
            emit("content_block_delta", index=index, delta=delta)
        emit("content_block_stop", index=index)
    delta = {"stop_reason": message.stop_reason, "stop_sequence": None}
    emit("message_delta", delta=delta, usage={"output_tokens": 12})
    emit("message_stop")
    return events


def error(status: int, kind: str, text: str, **headers: str) -> Raw:
    """An Anthropic error reply, e.g. `error(529, "overloaded_error", "Overloaded")`."""
    body = {"type": "error", "error": {"type": kind, "message": text}, "request_id": "req_err"}
    headers = {"content-type": "application/json", "request-id": "req_err", **headers}
    return Raw(status, headers, [json.dumps(body).encode()])


def render(message: Message, body: Any) -> Raw:
    """The message as the request asked for it: SSE when `stream` is true, else JSON."""
    model = body.get("model", "scripted") if isinstance(body, dict) else "scripted"
    if isinstance(body, dict) and body.get("stream"):
        return Raw(200, dict(SSE), message_events(message, model), message.delay)
    data = json.dumps(message_object(message, model), ensure_ascii=False).encode()
    return Raw(200, dict(JSON), [data])


Answer = Callable[[dict[str, Any]], "Message | Raw | Awaitable[Message | Raw]"]


def anthropic_upstream(answer: Answer) -> ScriptedUpstream:
    """A scripted upstream whose `POST /v1/messages` is answered by `answer`; count_tokens and
    the model list answer by themselves (everything else is a 404 in Anthropic's shape)."""

    async def script(record: dict[str, Any]) -> Raw:
        path = record["path"].split("?", 1)[0]
        if path.endswith("/v1/messages/count_tokens"):
            size = len(json.dumps(record["body"])) // 4 if record["body"] else 0
            return Raw(200, dict(JSON), [json.dumps({"input_tokens": size}).encode()])
        if path.endswith("/v1/models") and record["method"] == "GET":
            model = {"type": "model", "id": "deepseek-chat", "display_name": "DeepSeek Chat"}
            model["created_at"] = "2025-01-01T00:00:00Z"
            listing = {"data": [model], "has_more": False, "first_id": model["id"]}
            return Raw(200, dict(JSON), [json.dumps({**listing, "last_id": model["id"]}).encode()])
        if not path.endswith("/v1/messages"):
            return error(404, "not_found_error", f"Not found: {path}")
        result = answer(record)
        if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
            result = await result
        assert isinstance(result, Message | Raw)
        return result if isinstance(result, Raw) else render(result, record["body"])

    return ScriptedUpstream(script)

"""Chat Completions on the wire: whole replies, the retry request, and the `Wire` record.

Sans-IO. The decision (pass, retry, fail) belongs to `proxy.py`; this module only knows the
Chat Completions shapes. The stream editor is `chat_stream.py`.
"""

from __future__ import annotations

from typing import Any

from .chat_calls import reply_anomalies
from .chat_choices import REASONING_KEYS
from .chat_repair import repair_reply, reply_markup
from .chat_stream import ChatStream, new_stream
from .detect import Finding, ToolSet, TurnScanner, may_find
from .errors import SpillguardError
from .usage import Usage
from .wire import Repairable, Stream, Wire

__all__ = ["WIRE", "ChatStream", "inspect_reply", "new_stream", "reply_anomalies"]


def inspect_reply(reply: Any, tools: ToolSet, hold_limit: int) -> tuple[Finding, str] | None:
    """The first finding in a whole Chat Completions reply, with the leaked choice's prose
    before the markup (all of its content when the markup was in its reasoning)."""
    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list):
        return None
    for choice in choices:
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if not isinstance(content, str):
            content = None
        reasoning = None
        for key in REASONING_KEYS:
            value = message.get(key)
            if isinstance(value, str):
                reasoning = value
                break
        if not (
            (content is not None and may_find(content, tools))
            or (reasoning is not None and may_find(reasoning, tools, blobs=False))
        ):
            continue  # no scanner could find anything in this choice
        guard = TurnScanner(tools, hold_limit)
        if message.get("tool_calls") or message.get("function_call"):
            guard.structured_call()
        if content is not None:
            guard.feed_content(content)
        if reasoning is not None:
            guard.feed_reasoning(reasoning)
        guard.finish()
        finding = guard.finding
        if finding is not None:
            text = content or ""
            return finding, text[: finding.start] if finding.field == "content" else text
    return None


def retry_body(body: dict[str, Any], items: list[dict[str, Any]]) -> dict[str, Any]:
    """The parsed request with the retry's items appended to `messages`."""
    given = body.get("messages")
    if not isinstance(given, list):
        raise TypeError("messages is not a list")
    return {**body, "messages": [*given, *items]}


def error_event(error: SpillguardError, stream: Stream | None) -> bytes:
    """A mid-stream failure: an error event (openai-python raises APIError on it), then [DONE]
    as vLLM does."""
    return b"data: " + error.json_bytes() + b"\n\ndata: [DONE]\n\n"


def stream_usage(stream: Stream) -> Usage | None:
    return stream.usage if isinstance(stream, ChatStream) else None


def repairable(stream: Stream) -> Repairable | None:
    return stream if isinstance(stream, ChatStream) else None


WIRE = Wire(
    "chat",
    "chat/completions",
    "messages",
    inspect_reply,
    new_stream,
    error_event,
    retry_body,
    reply_anomalies=reply_anomalies,
    stream_usage=stream_usage,
    repair_reply=repair_reply,
    reply_markup=reply_markup,
    repairable=repairable,
    unread=frozenset({"messages", "tools", "functions"}),
)

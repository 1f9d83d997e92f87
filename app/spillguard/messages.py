"""The Anthropic Messages API (`POST /v1/messages`) on the wire, for the decision in `proxy.py`.

Tools are `{"name", "input_schema"}`; a real call is a `tool_use` block (or a server's
`server_tool_use` / `mcp_tool_use`). A leak is a `text` block that the core recognises, or a
`thinking` block when the message has no call block. The stream editor is in
`messages_stream.py`; this module has the whole-reply check, the retry request, the error shape
and the `Wire` record.

A retry never shows the model its markup: the assistant turn it appends carries only the prose
before the markup, and is left out when there is none (the API refuses a text block that is
empty or only whitespace).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .detect import Anomaly, Finding, ToolSet, TurnScanner, call_anomalies, may_find
from .errors import SpillguardError
from .jsonread import read_all
from .messages_events import is_call
from .messages_repair import repair_reply, reply_markup
from .messages_stream import MessagesStream, new_stream
from .rawjson import append_items
from .sse import encode_event
from .wire import Repairable, Stream, Wire, content_finding

ROUTE = "/v1/messages"  # this path and those under it are Anthropic's whatever the headers
VERSION_HEADER = b"anthropic-version"  # sent by every Anthropic SDK and Claude Code
PING = b'event: ping\ndata: {"type": "ping"}\n\n'  # the keep-alive Anthropic's own streams send
# Anthropic's error `type` for a status (its documented table); others: 4xx invalid request,
# 5xx api_error.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def _blocks(reply: Any) -> list[dict[str, Any]]:
    content = reply.get("content") if isinstance(reply, dict) else None
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _text(block: dict[str, Any], kind: str) -> str | None:
    value = block.get(kind) if block.get("type") == kind else None
    return value if isinstance(value, str) else None


def inspect_reply(reply: Any, tools: ToolSet, hold_limit: int) -> tuple[Finding, str] | None:
    """The first finding in a whole message, with the prose the assistant turn keeps: the text
    blocks up to the markup (the same turn rule as the stream, one scanner per block)."""
    blocks = _blocks(reply)
    texts = [t for b in blocks if (t := _text(b, "text")) is not None]
    found = content_finding(texts, tools, hold_limit)
    if found is not None:
        return found
    if any(is_call(b.get("type")) for b in blocks):
        return None
    for block in blocks:
        thought = _text(block, "thinking")
        if thought is None or not may_find(thought, tools, blobs=False):  # scanned without blobs
            continue
        turn = TurnScanner(tools, hold_limit)
        turn.feed_reasoning(thought)
        turn.finish()
        if turn.finding is not None:
            return turn.finding, "".join(texts)
    return None


def reply_anomalies(reply: Any, tools: ToolSet) -> list[Anomaly]:
    """Missing or malformed tool_use blocks in a whole message (server tools bind no name)."""
    names = [b.get("name") for b in _blocks(reply) if b.get("type") == "tool_use"]
    claimed = isinstance(reply, dict) and reply.get("stop_reason") == "tool_use"
    return call_anomalies([n if isinstance(n, str) else None for n in names], claimed, tools)


def retry_body(body: dict[str, Any], items: list[dict[str, Any]]) -> dict[str, Any]:
    """The parsed request with the retry's items appended to `messages`."""
    given = body.get("messages")
    if not isinstance(given, list):
        raise TypeError("messages is not a list")
    return {**body, "messages": [*given, *items]}


def error_type(status: int) -> str:
    return ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")


def error_object(error: SpillguardError) -> dict[str, Any]:
    """Anthropic's error shape. Both SDKs read `error.details.error_code` as the error's code
    (`.error_code` in Python, `.errorCode` in Node) and keep the whole body reachable; the
    message starts with the code for clients that keep only the message."""
    details: dict[str, Any] = {"error_code": error.code}
    if error.meta is not None:
        details["meta"] = error.meta
    inner = {"type": error_type(error.status), "message": f"{error.code}: {error.message}"}
    body: dict[str, Any] = {"type": "error", "error": {**inner, "details": details}}
    request_id = (error.meta or {}).get("request_id")
    if isinstance(request_id, str):
        body["request_id"] = request_id
    return body


def error_body(error: SpillguardError) -> bytes:
    return json.dumps(error_object(error), ensure_ascii=False).encode()


def error_event(error: SpillguardError, stream: Stream | None) -> bytes:
    """A mid-stream failure: an `error` event, which both SDKs raise as an APIError."""
    return encode_event("error", json.dumps(error_object(error), separators=(",", ":")))


@dataclass(frozen=True)
class MessagesWire(Wire):
    def retry_request(
        self, raw: bytes, body: dict[str, Any], leaked: str, correction: str
    ) -> bytes:
        """The request once more, with the prose before the markup as the assistant turn (none
        when there is no prose) and the corrective instruction as a user turn, spliced into the
        client's own bytes: `system`, `tools`, `max_tokens`, `thinking`, `metadata` and every
        unknown field reach the upstream as written."""
        items = [{"role": "assistant", "content": leaked}] if leaked.strip() else []
        items.append({"role": "user", "content": correction})
        spliced = append_items(raw, self.retry_key, items)
        if spliced is not None:
            return spliced
        return json.dumps(self.retry_body(read_all(body), items), allow_nan=False).encode()


def _new_stream(tools: ToolSet, hold_limit: int, previous: Stream | None) -> MessagesStream:
    return new_stream(tools, hold_limit, previous if isinstance(previous, MessagesStream) else None)


def repairable(stream: Stream) -> Repairable | None:
    return stream if isinstance(stream, MessagesStream) else None


WIRE = MessagesWire(
    "messages",
    "messages",
    "messages",
    inspect_reply,
    _new_stream,
    error_event,
    retry_body,
    reply_anomalies=reply_anomalies,
    keepalive=PING,
    error_body=error_body,
    repair_reply=repair_reply,
    reply_markup=reply_markup,
    repairable=repairable,
    unread=frozenset({"messages", "system", "tools"}),
)

"""The Responses API (`POST /v1/responses`) on the wire, for the decision in `proxy.py`.

A leak is an `output_text` part of a `message` item, or reasoning summary text, in a response with
no tool-call item. This module has the whole replies, the retry request, the chaining of later
requests after a splice and the `Wire` record; the stream editor is `responses_stream.py`, and
a retry spliced into a started stream is `responses_splice.py`.
"""

from __future__ import annotations

import json
from typing import Any

from .detect import Anomaly, Finding, ToolSet, TurnScanner, call_anomalies, may_find
from .errors import SpillguardError
from .idmap import IdMap, Spliced
from .jsonread import Unread, read_all, value
from .rawjson import elements, replace_values
from .responses_events import dumps, function_names, is_call
from .responses_repair import repair_reply, reply_markup
from .responses_stream import ResponsesStream, new_stream, stream_usage
from .sse import encode_event
from .wire import Chaining, Repairable, Stream, Wire, content_finding

__all__ = ["WIRE", "ResponsesStream", "inspect_reply", "new_stream", "reply_anomalies"]


def reply_anomalies(reply: Any, tools: ToolSet) -> list[Anomaly]:
    """Function calls in a whole response that name no declared tool, or hold markup."""
    output = reply.get("output") if isinstance(reply, dict) else None
    return call_anomalies(function_names(output or []), False, tools)


def _texts(item: dict[str, Any]) -> list[str]:
    parts = item.get("content") if item.get("type") == "message" else None
    return [
        p["text"]
        for p in parts or []
        if isinstance(p, dict) and p.get("type") == "output_text" and isinstance(p.get("text"), str)
    ]


def _summaries(item: dict[str, Any]) -> list[str]:
    parts = item.get("summary") if item.get("type") == "reasoning" else None
    return [
        p["text"] for p in parts or [] if isinstance(p, dict) and isinstance(p.get("text"), str)
    ]


def inspect_reply(reply: Any, tools: ToolSet, hold_limit: int) -> tuple[Finding, str] | None:
    """The finding in a whole response, with the prose of its `output_text` before the markup
    (all of it when the markup was in reasoning): the same turn rule as a stream, through one
    `TurnScanner` per part."""
    output = reply.get("output") if isinstance(reply, dict) else None
    if not isinstance(output, list):
        return None
    items = [i for i in output if isinstance(i, dict)]
    texts = [text for item in items for text in _texts(item)]
    found = content_finding(texts, tools, hold_limit)
    if found is not None:
        return found
    called = any(is_call(i) for i in items)
    for item in items:
        for text in _summaries(item):
            if not may_find(text, tools, blobs=False):  # reasoning is scanned without blobs
                continue
            turn = TurnScanner(tools, hold_limit)
            if called:
                turn.structured_call()
            turn.feed_reasoning(text)
            turn.finish()
            if turn.finding is not None:
                return turn.finding, "".join(texts)
    return None


def retry_body(body: dict[str, Any], items: list[dict[str, Any]]) -> dict[str, Any]:
    """The parsed request with the retry's items appended to `input`. With
    `previous_response_id` the history lives upstream; it is kept, and only this request's
    items plus the new ones go."""
    given = body.get("input")
    first = [{"role": "user", "content": given}] if isinstance(given, str) else list(given or [])
    return {**body, "input": [*first, *items]}


def item_from_string(text: str) -> str:
    """An `input` given as a string (its raw JSON), as the user message it stands for."""
    return '{"role":"user","content":' + text + "}"


# ---- chaining after a splice ---------------------------------------------------------------


def stored(body: dict[str, Any]) -> bool:
    """The upstream keeps the response (`store` defaults to true), so it may be named later."""
    return body.get("store") is not False


def spliced(stream: Stream) -> Spliced | None:
    """A spliced stream whose retry completed cleanly, as the `IdMap` keeps it."""
    if not isinstance(stream, ResponsesStream) or stream.splice is None or stream.certain:
        return None
    return stream.splice.record(stream.sent.identity)


def _reference(item: Any) -> str | None:
    """The id an `item_reference` input item names (its `type` may be left out)."""
    if not isinstance(item, dict) or not isinstance(item.get("id"), str):
        return None
    return item["id"] if item.get("type") == "item_reference" or set(item) == {"id"} else None


def _as_input(item: dict[str, Any]) -> list[dict[str, Any]]:
    """A first-attempt item as the client received it, as input: a message is its text as an
    assistant turn (none when it has no text); other kinds have no valid input form without
    their upstream id, whose copy the client never received, so they are left out."""
    text = "".join(_texts(item))
    return [{"role": "assistant", "content": text}] if text else []


def chain_request(
    raw: bytes, body: dict[str, Any], ids: IdMap
) -> tuple[bytes, dict[str, Any]] | None:
    """The request naming what the client received instead of a spliced response's leaked
    attempt: `previous_response_id` becomes the retry's response, and an `item_reference` to
    a first-attempt item becomes the item as the client has it. Every other byte stays the
    client's. None when the request names no spliced response or item."""
    changes: dict[str, str] = {}
    values: dict[str, Any] = {}
    previous = body.get("previous_response_id")
    upstream = ids.response(previous) if isinstance(previous, str) else None
    if upstream is not None:
        changes["previous_response_id"] = json.dumps(upstream)
        values["previous_response_id"] = upstream
    given = body.get("input")
    if type(given) is Unread:  # read only when an item it names may have a copy
        given = value(given) if ids.holds_items() else None
    given = given if isinstance(given, list) else []
    copies = [ids.item(ref) if (ref := _reference(i)) else None for i in given]
    if any(copies):
        raws = elements(raw, "input")
        if raws is None or len(raws) != len(given):
            raws = [json.dumps(i) for i in given]
        new_raw: list[str] = []
        new: list[Any] = []
        for item, item_raw, copy in zip(given, raws, copies, strict=True):
            inline = [item] if copy is None else _as_input(copy)
            new += inline
            new_raw += [item_raw] if copy is None else [json.dumps(i) for i in inline]
        changes["input"] = "[" + ",".join(new_raw) + "]"
        values["input"] = new
    if not changes:
        return None
    rewritten = {**body, **values}
    out = replace_values(raw, changes)
    if out is None:
        try:
            out = json.dumps(read_all(rewritten), allow_nan=False).encode()
        except (TypeError, ValueError, RecursionError):
            return None
    return out, rewritten


def error_event(error: SpillguardError, stream: Stream | None) -> bytes:
    """A Responses `error` event; the nested `error` object makes the openai SDK raise
    APIError with the code, from `responses.create(stream=True)` and `responses.stream`."""
    seq = stream.sent.seq + 1 if isinstance(stream, ResponsesStream) else 0
    body = error.body()["error"]
    data = {
        "type": "error",
        "code": error.code,
        "message": error.client_message,
        "param": None,
        "sequence_number": seq,
        "error": body,
    }
    return encode_event("error", dumps(data))


def repairable(stream: Stream) -> Repairable | None:
    return stream if isinstance(stream, ResponsesStream) else None


WIRE = Wire(
    "responses",
    "responses",
    "input",
    inspect_reply,
    new_stream,
    error_event,
    retry_body,
    item_from_string,
    reply_anomalies,
    stream_usage=stream_usage,
    chaining=Chaining(stored, spliced, chain_request),
    repair_reply=repair_reply,
    reply_markup=reply_markup,
    repairable=repairable,
    unread=frozenset({"input", "instructions", "tools"}),
)

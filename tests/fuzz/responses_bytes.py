"""The Responses API as an upstream writes it (named events, each with its `sequence_number`; the
whole reply), and what a client reads back."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tests.fuzz.wire_bytes import Call, Turn, decode, dumps

RESPONSE = {"id": "resp_67ccd2bed1ec8190", "object": "response", "created_at": 1741476542}
RESPONSE |= {"model": "grok-4", "tools": [], "parallel_tool_calls": True, "error": None}


class ResponsesWriter:
    """Writes named events, numbering them as an upstream does."""

    def __init__(self, first: int = 0, response: dict[str, Any] = RESPONSE) -> None:
        self.events: list[bytes] = []
        self.next = first
        self.response = response

    def emit(self, kind: str, **fields: Any) -> bytes:
        body = {"type": kind, **fields, "sequence_number": self.next}
        self.next += 1
        raw = f"event: {kind}\ndata: {dumps(body)}\n\n".encode()
        self.events.append(raw)
        return raw

    def start(self) -> None:
        opening = {**self.response, "status": "in_progress", "output": [], "usage": None}
        self.emit("response.created", response=opening)
        self.emit("response.in_progress", response=opening)

    def reasoning(self, oi: int, deltas: Iterable[str], item_id: str = "rs_1") -> dict[str, Any]:
        deltas = list(deltas)
        self.emit("response.output_item.added", output_index=oi, item=_reasoning(item_id, None))
        common = {"item_id": item_id, "output_index": oi, "summary_index": 0}
        self.emit("response.reasoning_summary_part.added", **common, part=_summary(""))
        for d in deltas:
            self.emit("response.reasoning_summary_text.delta", **common, delta=d)
        text = "".join(deltas)
        self.emit("response.reasoning_summary_text.done", **common, text=text)
        self.emit("response.reasoning_summary_part.done", **common, part=_summary(text))
        item = _reasoning(item_id, text)
        self.emit("response.output_item.done", output_index=oi, item=item)
        return item

    def message(self, oi: int, deltas: Iterable[str], item_id: str = "msg_1") -> dict[str, Any]:
        deltas = list(deltas)
        opened = {"id": item_id, "type": "message", "status": "in_progress", "role": "assistant"}
        self.emit("response.output_item.added", output_index=oi, item={**opened, "content": []})
        common = {"item_id": item_id, "output_index": oi, "content_index": 0}
        self.emit("response.content_part.added", **common, part=_output_text(""))
        for d in deltas:
            self.emit("response.output_text.delta", **common, delta=d, logprobs=[])
        text = "".join(deltas)
        self.emit("response.output_text.done", **common, text=text, logprobs=[])
        self.emit("response.content_part.done", **common, part=_output_text(text))
        item = {**opened, "status": "completed", "content": [_output_text(text)]}
        self.emit("response.output_item.done", output_index=oi, item=item)
        return item

    def function_call(self, oi: int, call: Call) -> dict[str, Any]:
        item = {"id": "fc_" + call.id, "type": "function_call", "call_id": call.id}
        item |= {"name": call.name, "arguments": "", "status": "in_progress"}
        self.emit("response.output_item.added", output_index=oi, item=item)
        common = {"item_id": item["id"], "output_index": oi}
        for i in range(0, len(call.arguments), 7):
            piece = call.arguments[i : i + 7]
            self.emit("response.function_call_arguments.delta", **common, delta=piece)
        self.emit("response.function_call_arguments.done", **common, arguments=call.arguments)
        done = {**item, "arguments": call.arguments, "status": "completed"}
        self.emit("response.output_item.done", output_index=oi, item=done)
        return done

    def complete(self, output: list[dict[str, Any]]) -> None:
        usage = {"input_tokens": 40, "output_tokens": 18, "total_tokens": 58}
        final = {**self.response, "status": "completed", "output": output, "usage": usage}
        self.emit("response.completed", response=final)


def _reasoning(item_id: str, text: str | None) -> dict[str, Any]:
    summary = [] if text is None else [_summary(text)]
    return {"id": item_id, "type": "reasoning", "summary": summary}


def _summary(text: str) -> dict[str, Any]:
    return {"type": "summary_text", "text": text}


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def response_items(writer: ResponsesWriter, turn: Turn) -> list[dict[str, Any]]:
    """The turn's output items, in the order a reasoning model streams them."""
    output: list[dict[str, Any]] = []
    if turn.reasoning:
        output.append(writer.reasoning(len(output), turn.reasoning))
    if turn.content:
        output.append(writer.message(len(output), turn.content))
    for call in turn.calls:
        output.append(writer.function_call(len(output), call))
    return output


def responses_events(turn: Turn) -> list[bytes]:
    writer = ResponsesWriter()
    writer.start()
    writer.complete(response_items(writer, turn))
    return writer.events


def responses_reply(turn: Turn) -> dict[str, Any]:
    """The same turn as one non-streamed Responses reply (the body of response.completed)."""
    writer = ResponsesWriter()
    output = response_items(writer, turn)
    return {**RESPONSE, "status": "completed", "output": output}


@dataclass
class ResponsesView:
    """A Responses stream as a client reads it."""

    kinds: list[str] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    text: dict[int, str] = field(default_factory=dict)  # output_text deltas by output index
    summary: dict[int, str] = field(default_factory=dict)
    done_text: dict[int, str] = field(default_factory=dict)  # output_text.done by output index
    added: dict[int, dict[str, Any]] = field(default_factory=dict)
    closed: dict[int, dict[str, Any]] = field(default_factory=dict)
    responses: list[dict[str, Any]] = field(default_factory=list)  # created ... completed
    errors: list[dict[str, Any]] = field(default_factory=list)

    @property
    def completed(self) -> dict[str, Any] | None:
        last = self.responses[-1] if self.responses else None
        return last if last is not None and last.get("status") == "completed" else None

    @property
    def all_text(self) -> str:
        return "".join(t for _, t in sorted(self.text.items()))

    @property
    def all_summary(self) -> str:
        return "".join(t for _, t in sorted(self.summary.items()))


def responses_view(data: bytes) -> ResponsesView:
    view = ResponsesView()
    for event in decode(data):
        if event.data is None:
            continue
        body = json.loads(event.data)
        kind = body["type"]
        assert event.event == kind, (event.event, kind)
        view.kinds.append(kind)
        view.seqs.append(body["sequence_number"])
        oi = body.get("output_index")
        if kind == "response.output_text.delta":
            view.text[oi] = view.text.get(oi, "") + body["delta"]
        elif kind == "response.reasoning_summary_text.delta":
            view.summary[oi] = view.summary.get(oi, "") + body["delta"]
        elif kind == "response.output_text.done":
            view.done_text[oi] = body["text"]
        elif kind == "response.output_item.added":
            view.added[oi] = body["item"]
        elif kind == "response.output_item.done":
            view.closed[oi] = body["item"]
        elif "response" in body:
            view.responses.append(body["response"])
        elif kind == "error":
            view.errors.append(body)
    return view


def well_formed(view: ResponsesView) -> None:
    """What a client's stream helper relies on: sequence numbers strictly increasing, and text
    only for items it saw added."""
    assert all(a < b for a, b in itertools.pairwise(view.seqs)), view.seqs
    assert set(view.text) <= set(view.added), (view.text, view.added)
    assert set(view.summary) <= set(view.added), (view.summary, view.added)


def completed_texts(response: dict[str, Any]) -> tuple[str, str]:
    """(output_text, summary text) listed in a final response, each joined over its items."""
    text = summary = ""
    for item in response.get("output") or []:
        if item.get("type") == "message":
            text += "".join(p["text"] for p in item["content"] if p["type"] == "output_text")
        elif item.get("type") == "reasoning":
            summary += "".join(p["text"] for p in item["summary"])
    return text, summary

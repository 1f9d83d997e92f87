"""The Responses API (`POST /v1/responses`) on the wire, for the decision in `proxy.py`.

A leak is an `output_text` part of a `message` item, or reasoning summary text, in a response with
no tool-call item. Streams are named events; each text part and each reasoning summary part has
its own scanner. Events whose text is published unchanged go out as the upstream's bytes. Once
markup shows in reasoning, everything after it is parked until a real call releases it or the
response ends (then it is a finding). A retry spliced into a started stream closes the first
attempt's open message, shifts the retry's output indices past it, keeps `sequence_number`
strictly increasing, and makes `response.completed` carry exactly the text the client received.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .detect import Finding, Scanner, ToolSet
from .errors import SpillguardError
from .proxy import Wire
from .sse import Event, encode_event

TERMINAL = ("response.completed", "response.failed", "response.incomplete")
Key = tuple[int, int]


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _index(data: dict[str, Any], key: str) -> int:
    value = data.get(key)
    return value if isinstance(value, int) else 0


def _is_call(item: Any) -> bool:
    return isinstance(item, dict) and str(item.get("type", "")).endswith("_call")


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
    output = reply.get("output") if isinstance(reply, dict) else None
    if not isinstance(output, list):
        return None
    items = [i for i in output if isinstance(i, dict)]
    called = any(_is_call(i) for i in items)
    for item in items:
        for text in _texts(item):
            scanner = Scanner(tools, hold_limit=hold_limit)
            scanner.feed(text)
            scanner.finish()
            if scanner.finding is not None:
                return scanner.finding, text
    if not called:
        for item in items:
            for text in _summaries(item):
                scanner = Scanner(tools, blobs=False, field="reasoning", hold_limit=hold_limit)
                scanner.feed(text)
                scanner.finish()
                if scanner.finding is not None:
                    return scanner.finding, text
    return None


def retry_body(body: dict[str, Any], leaked: str, correction: str) -> dict[str, Any]:
    """Append the leaked turn and the instruction to `input`. With `previous_response_id` the
    history lives upstream; it is kept, and only this request's items plus the new ones go."""
    given = body.get("input")
    items = [{"role": "user", "content": given}] if isinstance(given, str) else list(given or [])
    items.append({"role": "assistant", "content": leaked})
    items.append({"role": "user", "content": correction})
    return {**body, "input": items}


@dataclass
class Out:
    data: bytes
    meaningful: bool


@dataclass
class _Part:
    """One output_text part as the client has seen it."""

    item: dict[str, Any]
    output_index: int
    content_index: int
    scanner: Scanner
    published: list[str] = field(default_factory=list)


class ResponsesStream:
    def __init__(self, tools: ToolSet, hold_limit: int, previous: ResponsesStream | None) -> None:
        self._tools = tools
        self._hold_limit = hold_limit
        self._parts: dict[Key, _Part] = {}
        self._items: dict[int, dict[str, Any]] = {}  # message items opened, by output index
        self._reasoning: dict[Key, Scanner] = {}
        self._reasoning_ids: dict[int, Any] = {}
        self._parked: list[Out] = []
        self._called = False
        self.finding: Finding | None = None
        self.done: bytes | None = None  # Responses streams have no [DONE]
        self.seq = -1  # the last sequence number sent
        self._splice = previous
        self._offset = 0  # output indices of the first attempt's items, in a splice
        self._closing: list[Out] = []
        self._carried: list[dict[str, Any]] = []  # the first attempt's items, closed
        if previous is not None:
            self._closing, self._carried = previous.close_open_items()
            self.seq = previous.seq
            self._offset = previous.next_index

    @property
    def certain(self) -> bool:
        return self.finding is not None

    @property
    def holding(self) -> int:
        held = sum(p.scanner.holding for p in self._parts.values())
        held += sum(len(o.data) for o in self._parked)
        return held + sum(s.holding for s in self._reasoning.values())

    @property
    def next_index(self) -> int:
        return self._offset + max((k + 1 for k in self._items), default=0)

    def leaked_text(self) -> str:
        published = "".join("".join(p.published) for p in self._parts.values())
        return published + (self.finding.excerpt if self.finding else "")

    def settle(self) -> None:
        """Read the family and name from all markup seen (the stream ended after a finding)."""
        for scanner in [p.scanner for p in self._parts.values()] + list(self._reasoning.values()):
            if scanner.marker_seen and not scanner.finished:
                scanner.finish()
                if scanner.finding is not None:
                    self.finding = scanner.finding
                    return

    def finish(self) -> list[Out]:
        """The upstream ended without a terminal event: settle what was held."""
        return self._flush_all(None)

    def feed(self, event: Event) -> list[Out]:
        if event.data is None:
            return [] if self.certain else [Out(event.raw, False)]
        try:
            data = json.loads(event.data)
        except (ValueError, RecursionError):
            data = None
        kind = data.get("type") if isinstance(data, dict) else None
        if not isinstance(kind, str) or self.certain:
            if self.certain and isinstance(data, dict):
                self._drain(kind, data)
            return [] if self.certain else [Out(event.raw, True)]
        assert isinstance(data, dict)
        outs, self._closing = self._closing, []
        parking = self._reasoning_marker()  # markup seen in reasoning before this event
        edited = self._edit(kind, data, event)
        if parking and self._reasoning_marker() and not self.certain:
            self._parked += edited  # until a real call releases it, or the end makes a finding
        else:
            outs += edited
        return outs

    # ---- editing -----------------------------------------------------------------------

    def _edit(self, kind: str, data: dict[str, Any], event: Event) -> list[Out]:
        oi = _index(data, "output_index")
        if kind in ("response.created", "response.in_progress") and self._splice is not None:
            return []
        if kind == "response.output_item.added":
            item = data.get("item")
            if _is_call(item):
                released = self._release_reasoning()
                return [*released, self._emit(data, event)]
            if isinstance(item, dict) and item.get("type") == "message":
                self._items[oi] = item
        elif kind == "response.output_text.delta":
            part = self._part(data, oi)
            delta = data.get("delta")
            text = part.scanner.feed(delta) if isinstance(delta, str) else ""
            part.published.append(text)
            if part.scanner.marker_seen:
                self.finding = part.scanner.finding
            if text != delta:
                if not text:
                    return []
                return [self._emit({**data, "delta": text}, None)]
        elif kind == "response.output_text.done":
            part = self._part(data, oi)
            rest = part.scanner.finish()
            part.published.append(rest)
            if part.scanner.finding is not None:
                self.finding = part.scanner.finding
                return []
            before = [self._synth_delta(part, rest)] if rest else []
            return [*before, self._emit(data, event)]
        elif kind == "response.reasoning_summary_text.delta" and not self._called:
            scanner = self._summary(data, oi)
            delta = data.get("delta")
            text = scanner.feed(delta) if isinstance(delta, str) else ""
            if text != delta:
                return [self._emit({**data, "delta": text}, None)] if text else []
        elif kind == "response.reasoning_summary_text.done" and not self._called:
            scanner = self._summary(data, oi)
            if not scanner.marker_seen:
                rest = scanner.finish()
                if rest:
                    synth = {**data, "type": "response.reasoning_summary_text.delta"}
                    synth.pop("text", None)
                    synth["delta"] = rest
                    return [self._emit(synth, None), self._emit(data, event)]
        elif kind in TERMINAL:
            flushed = self._flush_all(data)
            if self.certain:
                return []
            raw = event if self._splice is None else None
            return [*flushed, self._emit(self._completed(data), raw)]
        return [self._emit(data, event)]

    def _emit(self, data: dict[str, Any], event: Event | None) -> Out:
        """Send an event: its own bytes when untouched, else re-serialized. In a splice every
        event is renumbered and shifted past the first attempt's items."""
        seq = data.get("sequence_number")
        if self._splice is None and event is not None:
            self.seq = seq if isinstance(seq, int) else self.seq
            return Out(event.raw, self._meaningful(data))
        if self._splice is not None:
            data = dict(data)
            if isinstance(data.get("output_index"), int):
                data["output_index"] += self._offset
            seq = self.seq + 1
        elif not isinstance(seq, int) or seq <= self.seq:
            seq = self.seq + 1
        data["sequence_number"] = seq
        self.seq = seq
        return Out(encode_event(str(data.get("type")), _dumps(data)), self._meaningful(data))

    @staticmethod
    def _meaningful(data: dict[str, Any]) -> bool:
        kind = data.get("type", "")
        if kind.endswith(".delta"):
            return bool(data.get("delta"))
        return kind not in ("response.created", "response.in_progress") and not kind.endswith(
            ".added"
        )

    def _part(self, data: dict[str, Any], oi: int) -> _Part:
        ci = _index(data, "content_index")
        part = self._parts.get((oi, ci))
        if part is None:
            item = self._items.setdefault(oi, {"id": data.get("item_id"), "type": "message"})
            scanner = Scanner(self._tools, hold_limit=self._hold_limit)
            part = self._parts[(oi, ci)] = _Part(item, oi, ci, scanner)
        return part

    def _summary(self, data: dict[str, Any], oi: int) -> Scanner:
        si = _index(data, "summary_index")
        self._reasoning_ids.setdefault(oi, data.get("item_id"))
        scanner = self._reasoning.get((oi, si))
        if scanner is None:
            scanner = self._reasoning[(oi, si)] = Scanner(
                self._tools,
                blobs=False,
                field="reasoning",
                hold_limit=self._hold_limit,
                markup_limit=self._hold_limit,
            )
        return scanner

    def _synth_delta(self, part: _Part, text: str) -> Out:
        return self._emit(
            {
                "type": "response.output_text.delta",
                "item_id": part.item.get("id"),
                "output_index": part.output_index,
                "content_index": part.content_index,
                "delta": text,
                "logprobs": [],
            },
            None,
        )

    def _reasoning_marker(self) -> bool:
        return not self._called and any(s.marker_seen for s in self._reasoning.values())

    def _release_reasoning(self) -> list[Out]:
        """A real call arrived: held reasoning (markup included) goes out, then what was
        parked behind it, in order."""
        self._called = True
        outs: list[Out] = []
        for (oi, si), scanner in self._reasoning.items():
            if scanner.finished:
                continue
            held = scanner.finish()
            markup = scanner.finding.excerpt if scanner.finding else ""
            if held + markup:
                delta = {"type": "response.reasoning_summary_text.delta", "output_index": oi}
                delta.update(item_id=self._reasoning_ids.get(oi), summary_index=si)
                delta["delta"] = held + markup
                outs.append(self._emit(delta, None))
        outs += self._parked
        self._parked = []
        return outs

    def _flush_all(self, terminal: dict[str, Any] | None) -> list[Out]:
        outs: list[Out] = []
        for part in self._parts.values():
            if not part.scanner.finished:
                rest = part.scanner.finish()
                part.published.append(rest)
                if part.scanner.finding is not None:
                    self.finding = part.scanner.finding
                elif rest:
                    outs.append(self._synth_delta(part, rest))
        if not self._called:
            for scanner in self._reasoning.values():
                if not scanner.finished:
                    scanner.finish()
                if scanner.finding is not None and self.finding is None:
                    self.finding = scanner.finding
        if self.finding is None and self._parked:
            outs, self._parked = self._parked + outs, []
        return outs

    def _completed(self, data: dict[str, Any]) -> dict[str, Any]:
        """In a splice, the final response lists the first attempt's closed items first."""
        if self._splice is None or not isinstance(data.get("response"), dict):
            return data
        response = dict(data["response"])
        response["output"] = self._carried + list(response.get("output") or [])
        return {**data, "response": response}

    def close_open_items(self) -> tuple[list[Out], list[dict[str, Any]]]:
        """Close this attempt's message items at the text the client has, for a splice."""
        outs: list[Out] = []
        carried: list[dict[str, Any]] = []
        for oi, item in sorted(self._items.items()):
            parts = [p for p in self._parts.values() if p.output_index == oi]
            content = []
            for part in sorted(parts, key=lambda p: p.content_index):
                text = "".join(part.published)
                piece = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
                content.append(piece)
                common = {"item_id": item.get("id"), "output_index": oi}
                common["content_index"] = part.content_index
                text_done = {"type": "response.output_text.done", **common, "text": text}
                text_done["logprobs"] = []
                part_done = {"type": "response.content_part.done", **common, "part": piece}
                outs += [self._emit(text_done, None), self._emit(part_done, None)]
            closed = {**item, "status": "completed", "content": content}
            carried.append(closed)
            done = {"type": "response.output_item.done", "output_index": oi, "item": closed}
            outs.append(self._emit(done, None))
        return outs, carried

    def _drain(self, kind: str | None, data: dict[str, Any]) -> None:
        """After a finding, keep feeding the leaking part so its name and family settle."""
        if kind == "response.output_text.delta" and isinstance(data.get("delta"), str):
            key = (_index(data, "output_index"), _index(data, "content_index"))
            part = self._parts.get(key)
            if part is not None and part.scanner.marker_seen:
                part.scanner.feed(data["delta"])
        elif kind in TERMINAL or kind == "response.output_text.done":
            self.settle()
            self.done = b""


def new_stream(tools: ToolSet, hold_limit: int, previous: Any | None) -> ResponsesStream:
    prev = previous if isinstance(previous, ResponsesStream) else None
    return ResponsesStream(tools, hold_limit, prev)


def error_event(error: SpillguardError, stream: Any) -> bytes:
    """A Responses `error` event; the nested `error` object makes the openai SDK raise
    APIError with the code, from `responses.create(stream=True)` and `responses.stream`."""
    seq = stream.seq + 1 if isinstance(stream, ResponsesStream) else 0
    body = error.body()["error"]
    data = {
        "type": "error",
        "code": error.code,
        "message": error.message,
        "param": None,
        "sequence_number": seq,
        "error": body,
    }
    return encode_event("error", _dumps(data))


WIRE = Wire("responses", inspect_reply, retry_body, new_stream, error_event)

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

from .detect import Anomaly, Finding, Scanner, ToolSet, TurnScanner, call_anomalies
from .errors import SpillguardError
from .sse import Event, Out, encode_event
from .wire import Stream, Wire

TERMINAL = ("response.completed", "response.failed", "response.incomplete")
Key = tuple[int, int]


def _dumps(obj: Any) -> str:
    # ASCII escapes: a lone surrogate from an upstream must not make a chunk unwritable.
    return json.dumps(obj, separators=(",", ":"))


def _index(data: dict[str, Any], key: str) -> int:
    value = data.get(key)
    return value if isinstance(value, int) else 0


def _is_call(item: Any) -> bool:
    return isinstance(item, dict) and str(item.get("type", "")).endswith("_call")


def _function_names(items: Any) -> list[str | None]:
    """The names of the function_call items among `items`."""
    names: list[str | None] = []
    for item in items:
        if isinstance(item, dict) and item.get("type") == "function_call":
            name = item.get("name")
            names.append(name if isinstance(name, str) else None)
    return names


def reply_anomalies(reply: Any, tools: ToolSet) -> list[Anomaly]:
    """Function calls in a whole response that name no declared tool, or hold markup."""
    output = reply.get("output") if isinstance(reply, dict) else None
    return call_anomalies(_function_names(output or []), False, tools)


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
    """The finding in a whole response, with the assistant turn's text (its `output_text`, up to
    the leaking part): the same turn rule as a stream, through one `TurnScanner` per part."""
    output = reply.get("output") if isinstance(reply, dict) else None
    if not isinstance(output, list):
        return None
    items = [i for i in output if isinstance(i, dict)]
    texts = [text for item in items for text in _texts(item)]
    for n, text in enumerate(texts):
        turn = TurnScanner(tools, hold_limit)
        turn.feed_content(text)
        turn.finish()
        if turn.finding is not None:
            return turn.finding, "".join(texts[: n + 1])
    called = any(_is_call(i) for i in items)
    for item in items:
        for text in _summaries(item):
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


@dataclass
class _Text:
    """One output_text part, or one reasoning summary part, as the client has seen it. Each
    has its own `TurnScanner` (a part starts its own lines), fed on the content side or on the
    reasoning side, so the turn rule is the one chat uses."""

    output_index: int
    index: int  # content_index, or summary_index
    item_id: Any
    turn: TurnScanner
    reasoning: bool
    published: list[str] = field(default_factory=list)

    @property
    def scanner(self) -> Scanner:
        return self.turn.reasoning if self.reasoning else self.turn.content

    @property
    def finding(self) -> Finding | None:
        return self.turn.finding

    def feed(self, text: str) -> str:
        return self.turn.feed_reasoning(text) if self.reasoning else self.turn.feed_content(text)

    def finish(self) -> str:
        content, reasoning = self.turn.finish()
        return reasoning if self.reasoning else content


# An event on its way out: (data, the upstream's event when unchanged, synthesized here).
Pending = tuple[dict[str, Any], Event | None, bool]


class ResponsesStream:
    def __init__(self, tools: ToolSet, hold_limit: int, previous: ResponsesStream | None) -> None:
        self._tools = tools
        self._hold_limit = hold_limit
        self._parts: dict[Key, _Text] = {}
        self._summaries: dict[Key, _Text] = {}
        self._opened: dict[int, dict[str, Any]] = {}  # items the client saw added, by index
        self._closed: dict[int, dict[str, Any]] = {}  # items the client saw done
        self._parked: list[Pending] = []
        self._parked_bytes = 0
        self._called = False
        self._ended = False  # after a finding: the leaking part, or the response, ended
        self.seq = -1  # the last sequence number sent
        self.identity: dict[str, Any] = {}  # id and created_at of the response the client saw
        self._splice = previous is not None
        self._renumber = self._splice  # once set, every event gets the next number
        self._offset = 0  # output indices taken by the first attempt's items, in a splice
        self._carried: list[dict[str, Any]] = []  # the first attempt's items, closed
        self._closing: list[Out] = []
        if previous is not None:
            self._closing, self._carried = previous.close_open_items()
            self.seq = previous.seq
            self._offset = previous.next_index
            self.identity = previous.identity

    @property
    def finding(self) -> Finding | None:
        """The turn rule, over every part: the first content finding wins; reasoning counts only
        once its part has ended and the response made no structured call."""
        for part in self._parts.values():
            if part.finding is not None:
                return part.finding
        for summary in self._summaries.values():
            if summary.finding is not None:
                return summary.finding
        return None

    @property
    def certain(self) -> bool:
        return self.finding is not None

    @property
    def can_splice(self) -> bool:
        return True

    @property
    def holding(self) -> int:
        held = sum(p.turn.holding for p in self._parts.values())
        held += sum(t.turn.holding for t in self._summaries.values())
        return held + self._parked_bytes

    @property
    def ended(self) -> bool:
        return self._ended

    @property
    def trailer(self) -> bytes:
        return b""  # Responses streams have no [DONE]

    @property
    def next_index(self) -> int:
        return self._offset + max((k + 1 for k in self._opened), default=0)

    @property
    def anomalies(self) -> list[Anomaly]:
        items = {**self._opened, **self._closed}  # by output index, as the client saw them
        return call_anomalies(_function_names(items.values()), False, self._tools)

    def leaked_text(self) -> str:
        published = "".join("".join(p.published) for p in self._parts.values())
        if self.finding is not None and self.finding.field == "content":
            return published + self.finding.excerpt
        return published

    def settle(self) -> None:
        """Read the family and name from all the markup seen (the stream ended after a content
        finding). Idempotent: `finding` is derived from the parts, content first."""
        for part in self._parts.values():
            if part.scanner.marker_seen:
                part.finish()

    def finish(self) -> list[Out]:
        """The upstream ended without a terminal event: settle what was held."""
        return self._send_all(self._flush_all())

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
        pending = self._edit(kind, data, event)
        if parking and self._reasoning_marker():
            # Parked until a real call releases it, or the end makes it a finding. A content
            # finding here ends the stream: what was parked before it never goes out, so
            # neither does this event's prose (it would overtake them).
            if not self.certain:
                self._parked += pending
                self._parked_bytes += len(event.raw)
            return outs
        return outs + self._send_all(pending)

    # ---- editing -----------------------------------------------------------------------

    def _edit(self, kind: str, data: dict[str, Any], event: Event) -> list[Pending]:
        oi = _index(data, "output_index")
        same: list[Pending] = [(data, event, False)]
        if self._splice and kind in ("response.created", "response.in_progress"):
            return []
        if kind == "response.output_item.added" and _is_call(data.get("item")):
            return self._release_reasoning() + same
        if kind == "response.output_text.delta":
            part = self._text(data, oi, True)
            return self._scan(part, data, event, is_part=True)
        if kind == "response.output_text.done":
            part = self._text(data, oi, True)
            rest = part.finish()
            part.published.append(rest)
            if part.finding is not None:
                return []
            return ([self._synth_delta(part, rest, True)] if rest else []) + same
        if kind.startswith("response.reasoning_summary_text.") and not self._called:
            summary = self._text(data, oi, False)
            if kind.endswith(".delta"):
                return self._scan(summary, data, event, is_part=False)
            if kind.endswith(".done") and not summary.scanner.marker_seen:
                rest = summary.finish()
                summary.published.append(rest)
                return ([self._synth_delta(summary, rest, False)] if rest else []) + same
        if kind in TERMINAL:
            flushed = self._flush_all()
            if self.certain:
                return []
            return [*flushed, (self._completed(data), None if self._splice else event, False)]
        return same

    def _scan(
        self, text: _Text, data: dict[str, Any], event: Event, is_part: bool
    ) -> list[Pending]:
        delta = data.get("delta")
        out = text.feed(delta) if isinstance(delta, str) else ""
        text.published.append(out)
        if out == delta:
            return [(data, event, False)]
        return [({**data, "delta": out}, None, False)] if out else []

    def _send_all(self, pending: list[Pending]) -> list[Out]:
        return [self._send(*p) for p in pending]

    def _send(self, data: dict[str, Any], event: Event | None, synthesized: bool) -> Out:
        """Number an event as it goes out: the upstream's own bytes while nothing here has
        been inserted, else re-serialized with the next number (and, in a splice, shifted past
        the first attempt's items and carrying the first response's identity)."""
        kind = data.get("type")
        oi = _index(data, "output_index")
        if kind == "response.output_item.added" and isinstance(data.get("item"), dict):
            self._opened[oi] = data["item"]
        elif kind == "response.output_item.done" and isinstance(data.get("item"), dict):
            self._closed[oi] = data["item"]
        elif kind == "response.created" and isinstance(data.get("response"), dict):
            response = data["response"]
            self.identity = {"id": response.get("id"), "created_at": response.get("created_at")}
        self._renumber |= synthesized
        seq = data.get("sequence_number")
        if event is not None and not self._renumber and isinstance(seq, int) and seq > self.seq:
            self.seq = seq
            return Out(event.raw, _meaningful(data))
        data = dict(data)
        if not self._renumber and isinstance(seq, int) and seq > self.seq:
            self.seq = seq
        else:
            self.seq = data["sequence_number"] = self.seq + 1
        if self._offset and isinstance(data.get("output_index"), int):
            data["output_index"] += self._offset
        if self._splice and isinstance(data.get("response"), dict) and self.identity:
            data["response"] = {**data["response"], **self.identity}
        return Out(encode_event(str(kind), _dumps(data)), _meaningful(data))

    def _text(self, data: dict[str, Any], oi: int, is_part: bool) -> _Text:
        """The part (or reasoning summary part) an event belongs to; made on first sight."""
        table = self._parts if is_part else self._summaries
        index = _index(data, "content_index" if is_part else "summary_index")
        text = table.get((oi, index))
        if text is None:
            turn = TurnScanner(self._tools, self._hold_limit)
            text = _Text(oi, index, data.get("item_id"), turn, reasoning=not is_part)
            table[(oi, index)] = text
        return text

    def _synth_delta(self, text: _Text, delta: str, is_part: bool) -> Pending:
        common = {"item_id": text.item_id, "output_index": text.output_index}
        if is_part:
            data = {"type": "response.output_text.delta", **common, "content_index": text.index}
            data["logprobs"] = []
        else:
            data = {"type": "response.reasoning_summary_text.delta", **common}
            data["summary_index"] = text.index
        data["delta"] = delta
        return (data, None, True)

    def _reasoning_marker(self) -> bool:
        return not self._called and any(t.scanner.marker_seen for t in self._summaries.values())

    def _release_reasoning(self) -> list[Pending]:
        """A real call arrived: held reasoning (markup included) goes out, then what was
        parked behind it, in order."""
        self._called = True
        out: list[Pending] = []
        for summary in self._summaries.values():
            if summary.turn.finished:
                continue
            text = summary.turn.structured_call()
            summary.published.append(text)
            if text:
                out.append(self._synth_delta(summary, text, False))
        out += self._parked
        self._parked, self._parked_bytes = [], 0
        return out

    def _flush_all(self) -> list[Pending]:
        """Settle every open part at the end: held text goes out, or a finding is made."""
        out: list[Pending] = []
        for table, is_part in ((self._parts, True), (self._summaries, False)):
            if not is_part and self._called:
                continue
            for text in table.values():
                if text.turn.finished:
                    continue
                rest = text.finish()
                text.published.append(rest)
                if text.finding is None and rest:
                    out.append(self._synth_delta(text, rest, is_part))
        if self.finding is None and self._parked:
            out = self._parked + out
            self._parked, self._parked_bytes = [], 0
        return out

    def _completed(self, data: dict[str, Any]) -> dict[str, Any]:
        """In a splice, the final response lists the first attempt's items first."""
        if not self._splice or not isinstance(data.get("response"), dict):
            return data
        response = dict(data["response"])
        response["output"] = self._carried + list(response.get("output") or [])
        return {**data, "response": response}

    def close_open_items(self) -> tuple[list[Out], list[dict[str, Any]]]:
        """For a splice: every item the client saw, closed at the text the client has (items
        already done stay as they were), and the events that close the open ones."""
        pending: list[Pending] = []
        carried: list[dict[str, Any]] = []
        for oi, item in sorted(self._opened.items()):
            if oi in self._closed:
                carried.append(self._closed[oi])
                continue
            closed = {**item, "status": "completed"}
            if item.get("type") == "message":
                content = []
                for part in sorted(self._at(self._parts, oi), key=lambda p: p.index):
                    text = "".join(part.published)
                    piece = {"type": "output_text", "text": text, "annotations": []}
                    piece["logprobs"] = []
                    content.append(piece)
                    common = {"item_id": part.item_id, "output_index": oi}
                    common["content_index"] = part.index
                    done = {"type": "response.output_text.done", **common, "text": text}
                    part_done = {"type": "response.content_part.done", **common, "part": piece}
                    pending += [({**done, "logprobs": []}, None, True), (part_done, None, True)]
                closed["content"] = content
            elif item.get("type") == "reasoning":
                summary = []
                for text_part in sorted(self._at(self._summaries, oi), key=lambda t: t.index):
                    text = "".join(text_part.published)
                    summary.append({"type": "summary_text", "text": text})
                    done = {"type": "response.reasoning_summary_text.done", "output_index": oi}
                    done.update(item_id=text_part.item_id, summary_index=text_part.index)
                    pending.append(({**done, "text": text}, None, True))
                closed["summary"] = summary
            carried.append(closed)
            item_done = {"type": "response.output_item.done", "output_index": oi, "item": closed}
            pending.append((item_done, None, True))
        return self._send_all(pending), carried

    @staticmethod
    def _at(table: dict[Key, _Text], oi: int) -> list[_Text]:
        return [t for (o, _), t in table.items() if o == oi]

    def _drain(self, kind: str | None, data: dict[str, Any]) -> None:
        """After a finding, keep feeding the leaking part so its name and family settle."""
        if kind == "response.output_text.delta" and isinstance(data.get("delta"), str):
            key = (_index(data, "output_index"), _index(data, "content_index"))
            part = self._parts.get(key)
            if part is not None and part.scanner.marker_seen:
                part.feed(data["delta"])
        elif kind in TERMINAL or kind == "response.output_text.done":
            self.settle()
            self._ended = True


def _meaningful(data: dict[str, Any]) -> bool:
    kind = str(data.get("type", ""))
    if kind.endswith(".delta"):
        return bool(data.get("delta"))
    return kind not in ("response.created", "response.in_progress") and not kind.endswith(".added")


def new_stream(tools: ToolSet, hold_limit: int, previous: Stream | None) -> ResponsesStream:
    prev = previous if isinstance(previous, ResponsesStream) else None
    return ResponsesStream(tools, hold_limit, prev)


def error_event(error: SpillguardError, stream: Stream | None) -> bytes:
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
)

"""The Responses API's stream shapes, shared by the editor (`responses_stream.py`) and the
splice (`responses_splice.py`): events on their way out, and the text parts being scanned."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .detect import Finding, Scanner, TurnScanner
from .sse import Event, Out, encode_event

TERMINAL = ("response.completed", "response.failed", "response.incomplete")
# An event on its way out: (data, the upstream's event when unchanged, synthesized here).
Pending = tuple[dict[str, Any], Event | None, bool]
# The events `Sent` keeps something of: the items opened and closed, the response's identity.
_NOTED = ("response.output_item.added", "response.output_item.done", "response.created")
Key = tuple[int, int]  # (output_index, content_index or summary_index)
# A splice's placing of an event (its own copy) under the response's identity.
Place = Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]


def dumps(obj: Any) -> str:
    # ASCII escapes: a lone surrogate from an upstream must not make a chunk unwritable.
    return json.dumps(obj, separators=(",", ":"))


def index_of(data: dict[str, Any], key: str) -> int:
    value = data.get(key)
    return value if isinstance(value, int) else 0


def is_call(item: Any) -> bool:
    return isinstance(item, dict) and str(item.get("type", "")).endswith("_call")


def function_names(items: Any) -> list[str | None]:
    """The names of the function_call items among `items`."""
    names: list[str | None] = []
    for item in items:
        if isinstance(item, dict) and item.get("type") == "function_call":
            name = item.get("name")
            names.append(name if isinstance(name, str) else None)
    return names


@dataclass
class Text:
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

    def delta_event(self, delta: str) -> Pending:
        """A text delta of this part, made here (to release text that was held)."""
        common = {"item_id": self.item_id, "output_index": self.output_index}
        if self.reasoning:
            data = {"type": "response.reasoning_summary_text.delta", **common}
            data["summary_index"] = self.index
        else:
            data = {"type": "response.output_text.delta", **common, "content_index": self.index}
            data["logprobs"] = []
        data["delta"] = delta
        return (data, None, True)


@dataclass
class Sent:
    """What the client has been sent: the items it saw added and done (by output index), the
    last sequence number, and the identity (id, created_at) of the response it saw."""

    opened: dict[int, dict[str, Any]] = field(default_factory=dict)
    closed: dict[int, dict[str, Any]] = field(default_factory=dict)
    seq: int = -1
    identity: dict[str, Any] = field(default_factory=dict)
    renumber: bool = False  # once set, every event gets the next number

    @property
    def next_index(self) -> int:
        return max((k + 1 for k in self.opened), default=0)

    def send(
        self, data: dict[str, Any], event: Event | None, synthesized: bool, place: Place | None
    ) -> Out:
        """Number an event as it goes out: the upstream's own bytes while nothing here has
        been inserted, else re-serialized with the next number (and, in a splice, `place`d
        after the first attempt's items under the first response's identity)."""
        kind = data.get("type")
        if kind in _NOTED:  # not a delta: most events are
            self._note(kind, data)
        self.renumber |= synthesized
        seq = data.get("sequence_number")
        if event is not None and not self.renumber and isinstance(seq, int) and seq > self.seq:
            self.seq = seq
            return Out(event.raw, meaningful(data))
        data = dict(data)
        if not self.renumber and isinstance(seq, int) and seq > self.seq:
            self.seq = seq
        else:
            self.seq = data["sequence_number"] = self.seq + 1
        if place is not None:
            data = place(data, self.identity)
        return Out(encode_event(str(kind), dumps(data)), meaningful(data))

    def _note(self, kind: Any, data: dict[str, Any]) -> None:
        oi = index_of(data, "output_index")
        if kind == "response.output_item.added" and isinstance(data.get("item"), dict):
            self.opened[oi] = data["item"]
        elif kind == "response.output_item.done" and isinstance(data.get("item"), dict):
            self.closed[oi] = data["item"]
        elif kind == "response.created" and isinstance(data.get("response"), dict):
            response = data["response"]
            self.identity = {"id": response.get("id"), "created_at": response.get("created_at")}


def meaningful(data: dict[str, Any]) -> bool:
    """An event carries something for the client (the start policy's `meaningful`)."""
    kind = str(data.get("type", ""))
    if kind.endswith(".delta"):
        return bool(data.get("delta"))
    return kind not in ("response.created", "response.in_progress") and not kind.endswith(".added")

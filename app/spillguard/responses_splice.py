"""A retry spliced into a Responses stream the client has already seen start.

The first attempt's open items are closed at the text the client has; the retry's items follow
them (output indices shifted past them), `sequence_number` keeps rising, the first response's
identity stays, and `response.completed` lists exactly what the client received. A retry that
restates the prose the client already has loses the restatement (`repeat.py`): its text is
trimmed in every event and in the final output, and a message left with no text at all is
never sent (its events are held until it shows text or ends).
"""

from __future__ import annotations

from typing import Any

from .idmap import Spliced
from .repeat import Repeat
from .responses_events import Key, Pending, Text


def _at(table: dict[Key, Text], oi: int) -> list[Text]:
    return sorted((t for (o, _), t in table.items() if o == oi), key=lambda t: t.index)


def close_open_items(
    opened: dict[int, dict[str, Any]],
    finished: dict[int, dict[str, Any]],
    parts: dict[Key, Text],
    summaries: dict[Key, Text],
) -> tuple[list[Pending], list[dict[str, Any]], list[dict[str, Any]]]:
    """For a splice after a stream that `opened` items and `finished` some: the events
    that close the open ones at the text the client has (of its `parts` and `summaries`);
    every item the client saw, closed; and the items closed here, as the client has them."""
    pending: list[Pending] = []
    carried: list[dict[str, Any]] = []
    closed_here: list[dict[str, Any]] = []
    for oi, item in sorted(opened.items()):
        if oi in finished:
            carried.append(finished[oi])
            continue
        closed = {**item, "status": "completed"}
        if item.get("type") == "message":
            content = []
            for part in _at(parts, oi):
                text = "".join(part.published)
                piece = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
                content.append(piece)
                common = {"item_id": part.item_id, "output_index": oi, "content_index": part.index}
                done = {"type": "response.output_text.done", **common, "text": text}
                part_done = {"type": "response.content_part.done", **common, "part": piece}
                pending += [({**done, "logprobs": []}, None, True), (part_done, None, True)]
            closed["content"] = content
        elif item.get("type") == "reasoning":
            summary = []
            for text_part in _at(summaries, oi):
                text = "".join(text_part.published)
                summary.append({"type": "summary_text", "text": text})
                done = {"type": "response.reasoning_summary_text.done", "output_index": oi}
                done.update(item_id=text_part.item_id, summary_index=text_part.index)
                pending.append(({**done, "text": text}, None, True))
            closed["summary"] = summary
        carried.append(closed)
        closed_here.append(closed)
        item_done = {"type": "response.output_item.done", "output_index": oi, "item": closed}
        pending.append((item_done, None, True))
    return pending, carried, closed_here


def _is_message(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "message"


class Splice:
    """How the retry's events continue the client's stream."""

    def __init__(
        self,
        offset: int,
        carried: list[dict[str, Any]],
        closed: list[dict[str, Any]],
        prose: str,
    ) -> None:
        self.offset = offset  # output indices the first attempt's items take
        self.carried = carried  # the first attempt's items, as the client has them
        self.closed = closed  # those of them closed at the splice
        self.repeat = Repeat(prose)
        self.upstream_id: str | None = None  # the retry's own response id
        self.done = False  # the retry's response.completed has been edited to go out
        self._first: Key | None = None  # the retry's first text part: where a repeat can be
        self._trim: dict[Key, int] = {}  # characters dropped from the start of a part
        self._held_item: int | None = None  # the retry's first message, while it shows nothing
        self._held: list[Pending] = []
        self._messages = 0
        self._removed: set[int] = set()  # the retry's items never sent (all repeat)
        self._output: list[dict[str, Any]] = []  # the client's final output, once completed

    @property
    def holding(self) -> int:
        return self.repeat.holding

    def opening(self, data: dict[str, Any]) -> None:
        """The retry's response.created or in_progress: not sent, but its id is the upstream's
        name for what the client receives."""
        response = data.get("response")
        if isinstance(response, dict) and isinstance(response.get("id"), str):
            self.upstream_id = response["id"]

    def unrepeated(self, key: Key, out: str, ended: bool) -> str:
        """A text part's released text without the restatement, in the retry's first part."""
        if self._first is None:
            self._first = key
        if key != self._first:
            return out
        out = self.repeat.feed(out) + (self.repeat.finish() if ended else "")
        if self.repeat.dropped:
            self._trim[key] = self.repeat.dropped
        return out

    def route(self, pending: list[Pending], final: bool) -> list[Pending]:
        """The events that may go out now: the retry's first message waits until it shows text
        (then everything held goes, in order) or ends with none (then none of it goes)."""
        out: list[Pending] = []
        for p in pending:
            out += self._route(p)
        return out + (self._release() if final else [])

    def _route(self, p: Pending) -> list[Pending]:
        data = p[0]
        kind = data.get("type")
        oi = data.get("output_index")
        if kind == "response.output_item.added" and _is_message(data.get("item")):
            self._messages += 1
            if self._messages == 1 and not self.repeat.decided and isinstance(oi, int):
                self._held_item = oi
        if self._held_item is None:
            return [p]
        if oi != self._held_item or (kind == "response.output_text.delta" and data.get("delta")):
            return [*self._release(), p]
        if kind == "response.output_item.done":
            if self.repeat.dropped:  # all its text was the restatement
                self._removed.add(self._held_item)
                self._held, self._held_item = [], None
                return []
            return [*self._release(), p]
        self._held.append(p)
        return []

    def _release(self) -> list[Pending]:
        held, self._held, self._held_item = self._held, [], None
        return held

    def placed(self, data: dict[str, Any], identity: dict[str, Any]) -> dict[str, Any]:
        """A retry event as the client gets it: its text trimmed, after the first attempt's
        items, under the first response's identity. `data` is the event's own copy."""
        oi = data.get("output_index")
        if isinstance(oi, int):
            self._trim_event(data, oi)
            data["output_index"] = self.offset + oi - sum(1 for r in self._removed if r < oi)
        if isinstance(data.get("response"), dict) and identity:
            data["response"] = {**data["response"], **identity}
        return data

    def completed(self, data: dict[str, Any]) -> dict[str, Any]:
        """The retry's terminal event: the final response lists the first attempt's items
        first, then the retry's as the client received them."""
        response = data.get("response")
        if not isinstance(response, dict):
            return data
        if self.upstream_id is None and isinstance(response.get("id"), str):
            self.upstream_id = response["id"]
        given = response.get("output")
        output = [
            self._trimmed(oi, item)
            for oi, item in enumerate(given if isinstance(given, list) else [])
            if oi not in self._removed
        ]
        self.done = data.get("type") == "response.completed"
        self._output = self.carried + output
        return {**data, "response": {**response, "output": self._output}}

    def record(self, identity: dict[str, Any]) -> Spliced | None:
        """The splice as the `IdMap` keeps it, once the retry's response has completed."""
        response_id = identity.get("id")
        if not self.done or self.upstream_id is None or not isinstance(response_id, str):
            return None
        items = {i["id"]: i for i in self.closed if isinstance(i.get("id"), str)}
        output = tuple(self._output)
        return Spliced(response_id, self.upstream_id, items, output, identity.get("created_at"))

    def _cut(self, oi: int, index: Any, holder: Any) -> Any:
        """`holder` (an event or a part) with its `text` trimmed as part (oi, index) was."""
        n = self._trim.get((oi, index if isinstance(index, int) else 0), 0)
        if not n or not isinstance(holder, dict) or not isinstance(holder.get("text"), str):
            return holder
        return {**holder, "text": holder["text"][n:]}

    def _trimmed(self, oi: int, item: Any) -> Any:
        if not _is_message(item) or not isinstance(item.get("content"), list):
            return item
        return {**item, "content": [self._cut(oi, ci, p) for ci, p in enumerate(item["content"])]}

    def _trim_event(self, data: dict[str, Any], oi: int) -> None:
        kind, index = data.get("type"), data.get("content_index")
        if kind == "response.output_text.done":
            data.update(self._cut(oi, index, data))
        elif kind == "response.content_part.done":
            data["part"] = self._cut(oi, index, data.get("part"))
        elif kind == "response.output_item.done":
            data["item"] = self._trimmed(oi, data.get("item"))

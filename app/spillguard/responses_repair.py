"""Repair mode on the Responses API: `function_call` items in place of a leaked text part.

A whole response keeps every byte the upstream sent except `output` (the items before the leak
as written, the leaking message cut to its prose or dropped when that is blank, then one
`function_call` item per call) and an `output_text` convenience field, when the upstream wrote
one. A stream closes the message the client has open at the text it has and sends the items as
the API streams them (`responses_stream.py` decides when). A response that holds a call item
already, or anything after the leaked part, cannot be repaired: the decision retries.

So that a stream and a whole reply agree, a first attempt's message is not announced to the
client until it shows text that is not white space (`Unshown`): a leak with no prose before it
then leaves no message behind, streamed or whole, and the SDKs (openai-python's final response,
the Vercel AI SDK's text parts) see no empty message.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from .detect import Call, Finding
from .rawjson import elements, with_values
from .responses_events import TERMINAL, Key, Pending, Sent, Text, dumps, index_of, is_call
from .responses_splice import close_open_items


def function_call(call: Call, status: str = "completed") -> dict[str, Any]:
    """A `function_call` output item with fresh ids; `arguments` empty while in progress."""
    item = {"type": "function_call", "id": "fc_" + secrets.token_hex(24)}
    item |= {"call_id": "call_" + secrets.token_hex(12), "name": call.name}
    return item | {"arguments": call.arguments, "status": status}


def _texts(item: Any) -> list[tuple[int, str]]:
    """(content index, text) of a message item's `output_text` parts."""
    message = isinstance(item, dict) and item.get("type") == "message"
    parts = item.get("content") if message else None
    return [
        (j, p["text"])
        for j, p in enumerate(parts if isinstance(parts, list) else [])
        if isinstance(p, dict) and p.get("type") == "output_text" and isinstance(p.get("text"), str)
    ]


def _leaking(output: list[Any], finding: Finding) -> tuple[int, int, str] | None:
    """(item index, content index, text) of the part the finding was made in: the first whose
    text holds the finding's excerpt at its start (a whole response is judged one scanner per
    `output_text` part, in order)."""
    if finding.field != "content" or not finding.excerpt:
        return None
    for i, item in enumerate(output):
        for j, text in _texts(item):
            if text.startswith(finding.excerpt, finding.start):
                return i, j, text
    return None


def _output(reply: Any) -> list[Any]:
    output = reply.get("output") if isinstance(reply, dict) else None
    return output if isinstance(output, list) else []


def reply_markup(reply: Any, finding: Finding) -> str | None:
    """The finding's markup in a whole response: its text part from `Finding.start` on."""
    found = _leaking(_output(reply), finding)
    return found[2][finding.start :] if found is not None else None


def _within(annotation: Any, size: int) -> bool:
    """An annotation whose offsets (`start_index`, `end_index`, `index`) are all in the text."""
    if not isinstance(annotation, dict):
        return True
    offsets = [v for k, v in annotation.items() if k.endswith("index") and isinstance(v, int)]
    return all(v <= size for v in offsets)


def _cut(part: dict[str, Any], text: str) -> dict[str, Any]:
    """An `output_text` part cut to `text`: annotations past it dropped, logprobs to its tokens."""
    cut = {**part, "text": text}
    notes = part.get("annotations")
    if isinstance(notes, list):
        cut["annotations"] = [a for a in notes if _within(a, len(text))]
    logprobs = part.get("logprobs")
    if isinstance(logprobs, list):
        kept, size = [], 0
        for entry in logprobs:
            token = entry.get("token") if isinstance(entry, dict) else None
            size += len(token) if isinstance(token, str) else 0
            if size > len(text):
                break
            kept.append(entry)
        cut["logprobs"] = kept
    return cut


def output_text(output: list[Any]) -> str:
    """What the SDKs' `output_text` is: every message's `output_text` parts, joined."""
    return "".join(text for item in output for _, text in _texts(item))


def repair_reply(
    raw: bytes, reply: Any, finding: Finding, prose: str, calls: tuple[Call, ...]
) -> bytes | None:
    """The whole response with `calls` as `function_call` items in place of the leaked markup;
    None when it cannot carry them (a call item already, a part or item after the leaked one,
    a response that did not complete)."""
    output = _output(reply)
    found = _leaking(output, finding)
    if not calls or found is None or any(is_call(item) for item in output):
        return None
    if reply.get("status", "completed") != "completed":  # incomplete or failed: not a turn
        return None
    i, j, text = found
    message = output[i]
    if i != len(output) - 1 or j != len(message["content"]) - 1:
        return None
    kept = text[: finding.start]
    before = "".join(t for item in output[:i] for _, t in _texts(item))
    if before + "".join(t for n, t in _texts(message) if n < j) + kept != prose:
        return None  # not the part the decision judged
    content = message["content"][:j] + ([_cut(message["content"][j], kept)] if kept.strip() else [])
    new = [{**message, "content": content}] if content else []
    new += [function_call(call) for call in calls]
    raws = elements(raw, "output")
    if raws is None or len(raws) != len(output):
        raws = [dumps(item) for item in output]
    changes = {"output": "[" + ",".join([*raws[:i], *map(dumps, new)]) + "]"}
    if isinstance(reply.get("output_text"), str):
        changes["output_text"] = dumps(output_text([*output[:i], *new]))
    return with_values(raw, reply, changes)


def call_events(calls: tuple[Call, ...], first: int) -> tuple[list[dict[str, Any]], list[Any]]:
    """The stream events of one `function_call` item per call, from output index `first` (each
    added in progress, its arguments as one delta, done, the item done), and the items."""
    events: list[dict[str, Any]] = []
    items: list[Any] = []
    for n, call in enumerate(calls):
        oi = first + n
        item = function_call(call)
        common = {"item_id": item["id"], "output_index": oi}
        opened = {**item, "arguments": "", "status": "in_progress"}
        args = call.arguments
        events += [
            {"type": "response.output_item.added", "output_index": oi, "item": opened},
            {"type": "response.function_call_arguments.delta", **common, "delta": args},
            {"type": "response.function_call_arguments.done", **common, "arguments": args},
            {"type": "response.output_item.done", "output_index": oi, "item": item},
        ]
        items.append(item)
    return events, items


@dataclass
class Tail:
    """What the upstream sent after a leak was found in part `key`, as a repair needs it: the
    terminal event, and whether anything came that a repair cannot carry (another part or item,
    an error)."""

    key: Key
    terminal: dict[str, Any] | None = None
    other: bool = False

    def see(self, kind: str | None, data: dict[str, Any]) -> None:
        oi = index_of(data, "output_index")
        if kind in TERMINAL:
            self.terminal = data
        elif kind == "error" or (kind == "response.output_item.added" and oi != self.key[0]):
            self.other = True
        elif kind == "response.content_part.added" and oi == self.key[0]:
            self.other |= index_of(data, "content_index") != self.key[1]

    def completed(self, output: list[Any]) -> dict[str, Any] | None:
        """The upstream's `response.completed`, listing `output` (what the client received);
        None when the response did not complete (failed, incomplete, cut short) or more came."""
        data = self.terminal
        if self.other or data is None or data.get("type") != "response.completed":
            return None
        response = data.get("response")
        if not isinstance(response, dict):
            return None
        response = {**response, "output": output}
        if isinstance(response.get("output_text"), str):
            response["output_text"] = output_text(output)
        return {**data, "response": response}

    def finish(
        self,
        calls: tuple[Call, ...],
        sent: Sent,
        parts: dict[Key, Text],
        summaries: dict[Key, Text],
    ) -> list[Pending] | None:
        """The events that finish the client's stream (what it was `sent`, the texts it has
        of `parts` and `summaries`): its open items closed at that text, one `function_call`
        item per call after them, then `response.completed`. None when the leaked part did not
        end its message and the response, or the response did not complete."""
        if any(key[0] == self.key[0] and key != self.key for key in parts):
            return None  # the message has other parts
        pending, carried, _ = close_open_items(sent.opened, sent.closed, parts, summaries)
        events, items = call_events(calls, sent.next_index)
        final = self.completed(carried + items)
        if final is None:
            return None
        return [*pending, *((e, None, True) for e in [*events, final])]


class Unshown:
    """A first attempt's message item, withheld while it shows the client nothing: its
    `output_item.added`, a blank `content_part.added` and deltas of white space wait, and go
    out, in order, just before the first event that shows something or belongs elsewhere (or at
    the upstream's end). A leak found meanwhile drops them: the client never learns of the
    message. More than `limit` characters of white space release it (held text is bounded)."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._item: int | None = None  # the message's output index, while it is withheld
        self._held: list[Pending] = []
        self._blank = 0  # characters of white space held

    @property
    def withholding(self) -> bool:
        return self._item is not None

    def route(self, pending: list[Pending], final: bool, leaked: bool) -> list[Pending]:
        """The events that may go out now; `final` at the upstream's end, `leaked` once the
        attempt has a finding (what is still withheld then is dropped)."""
        out: list[Pending] = []
        for p in pending:
            out += self._route(p)
        if leaked:
            self._item, self._held, self._blank = None, [], 0
        elif final:
            out += self._release()
        return out

    def _route(self, p: Pending) -> list[Pending]:
        data = p[0]
        oi = data.get("output_index")
        if data.get("type") == "response.output_item.added" and _is_message(data.get("item")):
            out = self._release()
            if isinstance(oi, int):
                self._item, self._held = oi, [p]
                return out
            return [*out, p]
        if self._item is None or oi != self._item:
            return [*self._release(), p]
        blank = _blank_text(data)
        if blank is None or self._blank + len(blank) > self._limit:
            return [*self._release(), p]
        self._blank += len(blank)
        self._held.append(p)
        return []

    def _release(self) -> list[Pending]:
        held, self._item, self._held, self._blank = self._held, None, [], 0
        return held


def _is_message(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "message"


def _blank_text(data: dict[str, Any]) -> str | None:
    """The white space a message's event adds while it shows nothing (its part opening, a
    delta of white space), or None when the event shows something."""
    kind = data.get("type")
    if kind == "response.content_part.added":
        part = data.get("part")
        text = part.get("text", "") if isinstance(part, dict) else None
    elif kind == "response.output_text.delta":
        text = data.get("delta")
    else:
        return None
    return text if isinstance(text, str) and not text.strip() else None

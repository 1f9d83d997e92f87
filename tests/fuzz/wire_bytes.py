"""Turns written as each wire's bytes, a stream editor driven the way the proxy drives it, and
what a client reads back out of the published bytes.

Used by the byte-fed stream tests, the stream-vs-whole property tests and the fuzz target. The
upstream bytes are written here the way providers write them: compact JSON with UTF-8 left
unescaped (so `｜` is three bytes a transport can cut), Chat Completions chunks with `logprobs`
and `usage: null`, Responses named events with a `sequence_number` each.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from spillguard.detect import Finding, declared_tools
from spillguard.sse import Event, Out, SSEDecoder

TOOLS = declared_tools(
    {
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                },
            },
            {
                "type": "function",
                "function": {
                    "name": "run_in_terminal",
                    "parameters": {
                        "type": "object",
                        "properties": {"command": {"type": "string"}},
                    },
                },
            },
        ]
    }
)
HOLD = 256 * 1024  # the proxy's default hold-back limit


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Call:
    """A structured tool call, its arguments as the JSON string the wire carries."""

    name: str
    arguments: str
    id: str = "call_1"


@dataclass(frozen=True)
class Turn:
    """One assistant turn as the model streams it: each text already cut into its deltas."""

    content: tuple[str, ...] = ()
    reasoning: tuple[str, ...] = ()
    calls: tuple[Call, ...] = ()

    @property
    def text(self) -> str:
        return "".join(self.content)

    @property
    def thought(self) -> str:
        return "".join(self.reasoning)


def cut(text: str, *at: int) -> tuple[str, ...]:
    """The text as deltas, cut at the given offsets."""
    bounds = [0, *at, len(text)]
    return tuple(text[a:b] for a, b in itertools.pairwise(bounds))


WEATHER = Call("get_weather", '{"city":"Lisbon"}')


# ---- Chat Completions -------------------------------------------------------------------------

CHAT_ID = "chatcmpl-8kQ2"
CHAT_HEAD = {"id": CHAT_ID, "object": "chat.completion.chunk", "created": 1733000000}
CHAT_HEAD |= {"model": "deepseek-chat", "system_fingerprint": "fp_3a5770e1b4"}
CHAT_DONE = b"data: [DONE]\n\n"
USAGE = {"prompt_tokens": 31, "completion_tokens": 12, "total_tokens": 43}


def chat_chunk(
    delta: dict[str, Any],
    index: int = 0,
    finish: str | None = None,
    *,
    usage: bool = False,
    head: dict[str, Any] = CHAT_HEAD,
) -> bytes:
    """One chunk of one choice; `usage` marks a stream that asked for include_usage (every chunk
    then carries `usage: null`)."""
    choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
    body: dict[str, Any] = {**head, "choices": [choice]}
    if usage:
        body["usage"] = None
    return b"data: " + dumps(body).encode() + b"\n\n"


def chat_usage_chunk(head: dict[str, Any] = CHAT_HEAD) -> bytes:
    return b"data: " + dumps({**head, "choices": [], "usage": USAGE}).encode() + b"\n\n"


def chat_call_chunks(
    call: Call, tool_index: int, index: int = 0, usage: bool = False, **kw: Any
) -> list[bytes]:
    """A structured call as clients expect it: id, type and name once, then argument pieces."""
    first = {"index": tool_index, "id": call.id, "type": "function"}
    first["function"] = {"name": call.name, "arguments": ""}
    out = [chat_chunk({"tool_calls": [first]}, index, usage=usage, **kw)]
    args = call.arguments
    for i in range(0, len(args), 7):
        piece = {"index": tool_index, "function": {"arguments": args[i : i + 7]}}
        out.append(chat_chunk({"tool_calls": [piece]}, index, usage=usage, **kw))
    return out


def chat_events(turn: Turn, usage: bool = False, **kw: Any) -> list[bytes]:
    """The turn as a Chat Completions stream: role chunk, reasoning deltas, content deltas, tool
    call deltas, the finish chunk, the usage chunk when asked for, [DONE]."""
    out = [chat_chunk({"role": "assistant", "content": ""}, usage=usage, **kw)]
    out += [chat_chunk({"reasoning_content": r}, usage=usage, **kw) for r in turn.reasoning]
    out += [chat_chunk({"content": c}, usage=usage, **kw) for c in turn.content]
    for tool_index, call in enumerate(turn.calls):
        out += chat_call_chunks(call, tool_index, usage=usage, **kw)
    finish = "tool_calls" if turn.calls else "stop"
    out.append(chat_chunk({}, finish=finish, usage=usage, **kw))
    if usage:
        out.append(chat_usage_chunk(kw.get("head", CHAT_HEAD)))
    return [*out, CHAT_DONE]


def chat_reply(turn: Turn) -> dict[str, Any]:
    """The same turn as one non-streamed Chat Completions reply."""
    message: dict[str, Any] = {"role": "assistant", "content": turn.text if turn.content else None}
    if turn.reasoning:
        message["reasoning_content"] = turn.thought
    if turn.calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in turn.calls
        ]
    choice = {"index": 0, "message": message, "logprobs": None}
    choice["finish_reason"] = "tool_calls" if turn.calls else "stop"
    return {"id": CHAT_ID, "object": "chat.completion", "choices": [choice], "usage": USAGE}


@dataclass
class ChatView:
    """A Chat Completions stream as a client reads it."""

    content: dict[int, str] = field(default_factory=dict)
    reasoning: dict[int, str] = field(default_factory=dict)
    calls: dict[int, dict[int, list[str]]] = field(default_factory=dict)  # [id, name, args]
    finish: dict[int, str] = field(default_factory=dict)
    roles: int = 0
    ids: set[str] = field(default_factory=set)
    usage: list[Any] = field(default_factory=list)
    done: bool = False
    errors: list[Any] = field(default_factory=list)


def chat_view(data: bytes) -> ChatView:
    view = ChatView()
    for event in decode(data):
        if event.data is None:
            continue
        if event.data == "[DONE]":
            view.done = True
            continue
        chunk = json.loads(event.data)
        if "error" in chunk:
            view.errors.append(chunk["error"])
            continue
        view.ids.add(chunk["id"])
        if chunk.get("usage"):
            view.usage.append(chunk["usage"])
        for choice in chunk["choices"]:
            index, delta = choice["index"], choice["delta"]
            view.roles += "role" in delta
            for key, into in (("content", view.content), ("reasoning_content", view.reasoning)):
                if delta.get(key):
                    into[index] = into.get(index, "") + delta[key]
            for tc in delta.get("tool_calls") or []:
                slot = view.calls.setdefault(index, {}).setdefault(tc["index"], ["", "", ""])
                fn = tc.get("function") or {}
                slot[0] += tc.get("id", "")
                slot[1] += fn.get("name", "")
                slot[2] += fn.get("arguments", "")
            if choice.get("finish_reason"):
                view.finish[index] = choice["finish_reason"]
    return view


# ---- the Responses API ------------------------------------------------------------------------

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


# ---- driving an editor --------------------------------------------------------------------------


class Editor(Protocol):
    """What the proxy's stream loop uses of a stream editor (ChatStream, ResponsesStream)."""

    @property
    def finding(self) -> Finding | None: ...
    @property
    def certain(self) -> bool: ...
    @property
    def ended(self) -> bool: ...
    @property
    def trailer(self) -> bytes: ...
    @property
    def holding(self) -> int: ...
    def feed(self, event: Event) -> list[Out]: ...
    def finish(self) -> list[Out]: ...
    def settle(self) -> None: ...
    def leaked_text(self) -> str: ...


def decode(data: bytes) -> list[Event]:
    decoder = SSEDecoder()
    return decoder.feed(data) + decoder.flush()


class HeldTooLong(Exception):
    """The editor held back more than the hold limit: the proxy fails the reply here."""


def drive(stream: Editor, pieces: Iterable[bytes], hold_limit: int | None = None) -> bytes:
    """Feed the upstream's bytes, piece by piece, through an SSE decoder into `stream`, the way
    the proxy's stream loop does; return what the editor published.

    At the end of the bytes the editor settles (after a finding) or is finished, its tail and
    trailer (chat's `[DONE]`) published unless the tail made a finding. After a finding, the rest
    is read (published nowhere) until the editor has `ended` or the bytes end, then settled.
    With `hold_limit`, holding more than that after a piece raises HeldTooLong.
    """
    decoder = SSEDecoder()
    out = bytearray()
    rest = iter([*(p for p in pieces if p), b""])  # an empty read is the end, as upstream
    for piece in rest:
        for event in decoder.feed(piece) if piece else decoder.flush():
            out += b"".join(o.data for o in stream.feed(event))
        if not piece and stream.certain:
            stream.settle()
        elif not piece:
            tail = stream.finish()
            if not stream.certain:
                out += b"".join(o.data for o in tail) + stream.trailer
        if hold_limit is not None and stream.holding > hold_limit:
            raise HeldTooLong(stream.holding)
        if not piece:
            break
        if stream.certain:
            for more in rest:  # the proxy also stops after hold_limit bytes, or a second
                if stream.ended:
                    break
                for event in decoder.feed(more) if more else decoder.flush():
                    stream.feed(event)
            stream.settle()
            break
    return bytes(out)


def every_split(data: bytes) -> Iterator[list[bytes]]:
    """The bytes whole, cut once at every point, and one byte at a time."""
    yield [data]
    for i in range(1, len(data)):
        yield [data[:i], data[i:]]
    yield [data[i : i + 1] for i in range(len(data))]


def verdict(stream: Editor) -> tuple[Any, ...]:
    """What the decision reads off an editor at the end: the finding and the retry's text."""
    f = stream.finding
    found = None if f is None else (f.family, f.field, f.tool_name, f.start, f.excerpt)
    return found, stream.leaked_text()


E = TypeVar("E", bound=Editor)


def every_split_agrees(make: Callable[[], E], data: bytes) -> tuple[bytes, E]:
    """Drive a fresh editor from `make` over every split of `data`; each must publish the same
    bytes and end with the same finding and leaked text as the unsplit feed, which is returned
    (what it published, and the editor)."""
    whole = make()
    out = drive(whole, [data])
    want = (out, verdict(whole))
    for pieces in every_split(data):
        stream = make()
        got = (drive(stream, pieces), verdict(stream))
        assert got == want, f"cut after {len(pieces[0])} of {len(data)} bytes ({len(pieces)})"
    return out, whole

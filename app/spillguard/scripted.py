"""A scripted OpenAI-compatible upstream on loopback, for `spillguard demo` and the tests.

It answers `POST /v1/chat/completions` with whatever its script returns for each request, in the
wire format the request asked for (JSON, or SSE cut into small deltas), and records every request
it receives. It never calls a model and needs no network beyond loopback.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Turn:
    """What the scripted model says: text, structured tool calls, or both."""

    content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    reasoning: str | None = None
    delta_size: int = 4
    delay: float = 0.0  # between stream chunks


@dataclass
class Raw:
    """A reply given byte for byte (status, headers, body chunks), for faults and errors."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[bytes] = field(default_factory=list)
    delay: float = 0.0
    pauses: tuple[float, ...] = ()  # before each chunk, in place of `delay` (when given)


Script = Callable[[dict[str, Any]], "Turn | Raw | Awaitable[Turn | Raw]"]


def call(name: str, arguments: dict[str, Any], call_id: str = "call_1") -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def completion(turn: Turn, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.content}
    if turn.reasoning is not None:
        message["reasoning_content"] = turn.reasoning
    if turn.tool_calls:
        message["tool_calls"] = turn.tool_calls
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if turn.tool_calls else "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def chunks(turn: Turn, model: str, usage: bool = False) -> list[bytes]:
    """The turn as Chat Completions SSE events."""
    base = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 1700000000}
    base["model"] = model

    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        body = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    out = [event({"role": "assistant", "content": ""})]
    size = max(1, turn.delta_size)
    for key, text in (("reasoning_content", turn.reasoning), ("content", turn.content)):
        for i in range(0, len(text or ""), size):
            out.append(event({key: (text or "")[i : i + size]}))
    for index, tc in enumerate(turn.tool_calls):
        first = {"index": index, "id": tc["id"], "type": "function"}
        first["function"] = {"name": tc["function"]["name"], "arguments": ""}
        out.append(event({"tool_calls": [first]}))
        args = tc["function"]["arguments"]
        for i in range(0, len(args), 8):
            piece = {"index": index, "function": {"arguments": args[i : i + 8]}}
            out.append(event({"tool_calls": [piece]}))
    out.append(event({}, "tool_calls" if turn.tool_calls else "stop"))
    if usage:
        tail = {**base, "choices": [], "usage": {"prompt_tokens": 10, "total_tokens": 15}}
        out.append(b"data: " + json.dumps(tail).encode() + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return out


def _response(turn: Turn, model: str, status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": "resp_scripted",
        "object": "response",
        "created_at": 1700000000,
        "status": status,
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
    }


def output_items(turn: Turn) -> list[dict[str, Any]]:
    """The turn as Responses API output items."""
    items: list[dict[str, Any]] = []
    if turn.reasoning is not None:
        summary = [{"type": "summary_text", "text": turn.reasoning}]
        items.append({"id": "rs_1", "type": "reasoning", "summary": summary})
    if turn.content is not None:
        part = {"type": "output_text", "text": turn.content, "annotations": [], "logprobs": []}
        message = {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant"}
        items.append({**message, "content": [part]})
    for tc in turn.tool_calls:
        fn = tc["function"]
        items.append(
            {
                "id": "fc_" + tc["id"],
                "type": "function_call",
                "call_id": tc["id"],
                "name": fn["name"],
                "arguments": fn["arguments"],
                "status": "completed",
            }
        )
    return items


def response_object(turn: Turn, model: str) -> dict[str, Any]:
    return _response(turn, model, "completed", output_items(turn))


def response_events(turn: Turn, model: str) -> list[bytes]:
    """The turn as Responses API SSE events, text cut into small deltas."""
    events: list[bytes] = []

    def emit(kind: str, **fields: Any) -> None:
        body = {"type": kind, "sequence_number": len(events), **fields}
        events.append(f"event: {kind}\ndata: {json.dumps(body)}\n\n".encode())

    emit("response.created", response=_response(turn, model, "in_progress", []))
    emit("response.in_progress", response=_response(turn, model, "in_progress", []))
    size = max(1, turn.delta_size)
    for oi, item in enumerate(output_items(turn)):
        if item["type"] == "reasoning":
            emit("response.output_item.added", output_index=oi, item={**item, "summary": []})
            text = item["summary"][0]["text"]
            common = {"item_id": item["id"], "output_index": oi, "summary_index": 0}
            for i in range(0, len(text), size):
                emit("response.reasoning_summary_text.delta", **common, delta=text[i : i + size])
            emit("response.reasoning_summary_text.done", **common, text=text)
        elif item["type"] == "message":
            opened = {**item, "status": "in_progress", "content": []}
            emit("response.output_item.added", output_index=oi, item=opened)
            common = {"item_id": item["id"], "output_index": oi, "content_index": 0}
            empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            emit("response.content_part.added", **common, part=empty)
            text = item["content"][0]["text"]
            for i in range(0, len(text), size):
                emit("response.output_text.delta", **common, delta=text[i : i + size], logprobs=[])
            emit("response.output_text.done", **common, text=text, logprobs=[])
            emit("response.content_part.done", **common, part=item["content"][0])
        else:
            opened = {**item, "arguments": "", "status": "in_progress"}
            emit("response.output_item.added", output_index=oi, item=opened)
            common = {"item_id": item["id"], "output_index": oi}
            args = item["arguments"]
            for i in range(0, len(args), 8):
                emit("response.function_call_arguments.delta", **common, delta=args[i : i + 8])
            emit("response.function_call_arguments.done", **common, arguments=args)
        emit("response.output_item.done", output_index=oi, item=item)
    emit("response.completed", response=response_object(turn, model))
    return events


class ScriptedUpstream:
    """Serve a script on 127.0.0.1; `requests` records (method, path, headers, json body)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> ScriptedUpstream:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = runner_port(self._runner)
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        record = {
            "method": request.method,
            "path": request.path_qs,
            "headers": {k.lower(): v for k, v in request.headers.items()},
            "body": body,
            "raw": raw,
            "at": time.monotonic(),
        }
        self.requests.append(record)
        result = self.script(record)
        if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
            result = await result
        if isinstance(result, Raw):
            return await self._raw(request, result)
        assert isinstance(result, Turn)
        model = body.get("model", "scripted") if isinstance(body, dict) else "scripted"
        if request.path.endswith("/responses"):
            if isinstance(body, dict) and body.get("stream"):
                headers = {"content-type": "text/event-stream"}
                reply = Raw(200, headers, response_events(result, model), result.delay)
                return await self._raw(request, reply)
            data = json.dumps(response_object(result, model)).encode()
            return web.Response(body=data, content_type="application/json")
        if isinstance(body, dict) and body.get("stream"):
            opts = body.get("stream_options") or {}
            events = chunks(result, model, usage=bool(opts.get("include_usage")))
            headers = {"content-type": "text/event-stream", "x-request-id": "up-1"}
            return await self._raw(request, Raw(200, headers, events, result.delay))
        data = json.dumps(completion(result, model)).encode()
        return web.Response(body=data, content_type="application/json")

    async def _raw(self, request: web.Request, raw: Raw) -> web.StreamResponse:
        response = web.StreamResponse(status=raw.status, headers=raw.headers)
        await response.prepare(request)
        try:
            for n, piece in enumerate(raw.chunks):
                pause = raw.pauses[n] if n < len(raw.pauses) else raw.delay
                if pause:
                    await asyncio.sleep(pause)
                await response.write(piece)
            await response.write_eof()
        except ConnectionResetError:  # the client hung up (spillguard stops reading a leak)
            pass
        return response


def runner_port(runner: web.AppRunner) -> int:
    """The port an aiohttp runner's first site was bound to (port 0 picks a free one)."""
    for address in runner.addresses:
        return int(address[1])
    raise RuntimeError("the runner has no bound site")


def attempt(record: dict[str, Any]) -> int:
    """Which attempt a request is: spillguard's retry appends an assistant turn."""
    body = record.get("body") or {}
    messages = body.get("messages") or body.get("input") or []
    if isinstance(messages, str):
        return 1
    return 1 + sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")

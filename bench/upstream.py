"""A fast fake OpenAI-compatible upstream for the benchmarks: raw HTTP/1.1 on asyncio + uvloop.

Every reply is built once at start-up, so answering costs a header scan and a write. What it
answers depends on the `model` named in the request body:

* any model, `"stream"` absent or false: one chat completion (prose with Markdown, about 2 KB);
* `"stream": true` and model `bench` (or any name not below): the SSE stream of a realistic turn,
  several hundred small prose deltas, then a structured tool call in argument deltas, a finish
  chunk, usage and `[DONE]`, written as fast as the reader takes it;
* `paced:<ms>`: the same stream with `<ms>` milliseconds before each event after the first;
* `ttfb:<ms>`: a short stream (role chunk, 5 prose deltas, finish) paced at `<ms>`;
* `drip:<ms>`: a long stream (the role chunk, then one prose delta every `<ms>` milliseconds for
  up to 10 minutes) for holding many streams open;
* `sustain:<ms>:<n>`: the role chunk, then `<n>` prose deltas `<ms>` milliseconds apart, the
  finish, usage and `[DONE]`, paced by timer callbacks (no task per stream), so that thousands of
  streams at once cost this process little.

`GET /v1/models` answers a tiny list. Run it with `python -m bench.upstream --port P`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
from typing import Any

MODEL_RE = re.compile(rb'"model"\s*:\s*"([^"]{0,64})"')
STREAM_RE = re.compile(rb'"stream"\s*:\s*true')
CHUNK_ID = "chatcmpl-bench0000000000000000000001"

PROSE = (
    "Here is a summary of the weather situation in Lisbon and what it means for your plans "
    "this weekend.\n\n"
    "## Forecast\n\n"
    "Saturday starts clear with a light northerly breeze; temperatures climb from 14 °C in "
    "the morning to about 23 °C by mid-afternoon. Sunday is similar, though a band of high "
    "cloud may arrive late in the day. Rain is unlikely (under 10%) on both days.\n\n"
    "## Details\n\n"
    "| day | min | max | wind | rain |\n"
    "|---|---|---|---|---|\n"
    "| Saturday | 14 °C | 23 °C | N 12 km/h | 5% |\n"
    "| Sunday | 15 °C | 22 °C | NW 15 km/h | 8% |\n\n"
    "The humidity stays moderate, between 55% and 70%, and the UV index peaks at 7 around "
    "2 pm, so sunscreen is a good idea if you will be outside for long. Visibility is "
    "excellent, which makes the viewpoints in Alfama and Graça worth a visit at sunset, "
    "when the light over the river is at its best.\n\n"
    "## Suggestions\n\n"
    "1. Plan the walk along the river for the morning, before the sun is strongest.\n"
    "2. Bring a light jacket for the evening; it cools quickly after sunset near the water.\n"
    "3. If you want to compare cities, I can look up Porto as well.\n\n"
    "A quick way to check the numbers yourself:\n\n"
    "```python\n"
    "import json\n"
    'reply = json.loads(raw)\nprint(reply["daily"]["temperature_2m_max"])\n'
    "```\n\n"
    "Let me know if you would like hourly detail, or the forecast for next week, and I will "
    "fetch it. Meanwhile I will check the marine forecast for your boat trip."
)
TOOL_ARGS = json.dumps(
    {"city": "Lisbon", "days": 2, "units": "metric", "fields": ["wave_height", "wind_speed"]}
)


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def completion_body(model: str = "bench") -> bytes:
    return _dumps(
        {
            "id": CHUNK_ID,
            "object": "chat.completion",
            "created": 1700000000,
            "model": model,
            "system_fingerprint": "fp_bench",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": PROSE, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 412, "completion_tokens": 238, "total_tokens": 650},
        }
    )


def _event(model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": CHUNK_ID,
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": model,
        "system_fingerprint": "fp_bench",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    return b"data: " + _dumps(body) + b"\n\n"


def _tokens(text: str) -> list[str]:
    """Cut prose roughly the way a tokenizer does: words with their leading space, 1-6 chars."""
    out: list[str] = []
    for piece in re.findall(r"\s*\S+|\s+", text):
        while len(piece) > 6:
            out.append(piece[:4])
            piece = piece[4:]
        out.append(piece)
    return out


def stream_events(model: str = "bench", prose_deltas: int | None = None) -> list[bytes]:
    """A whole chat stream as SSE events: role, prose deltas, a tool call, finish, [DONE]."""
    tokens = _tokens(PROSE)
    if prose_deltas is not None:
        tokens = tokens[:prose_deltas]
    events = [_event(model, {"role": "assistant", "content": ""})]
    events += [_event(model, {"content": t}) for t in tokens]
    if prose_deltas is None:
        first = {"index": 0, "id": "call_bench_1", "type": "function"}
        first["function"] = {"name": "get_marine_forecast", "arguments": ""}
        events.append(_event(model, {"tool_calls": [first]}))
        for i in range(0, len(TOOL_ARGS), 3):
            piece = {"index": 0, "function": {"arguments": TOOL_ARGS[i : i + 3]}}
            events.append(_event(model, {"tool_calls": [piece]}))
        events.append(_event(model, {}, "tool_calls"))
    else:
        events.append(_event(model, {}, "stop"))
    usage = {"prompt_tokens": 412, "completion_tokens": len(tokens), "total_tokens": 0}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    tail = {"id": CHUNK_ID, "object": "chat.completion.chunk", "created": 1700000000}
    tail |= {"model": model, "choices": [], "usage": usage}
    events.append(b"data: " + _dumps(tail) + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return events


def _chunked(event: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(event), event)


def _json_response(body: bytes) -> bytes:
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        b"x-request-id: up-bench\r\ncontent-length: %d\r\n\r\n" % len(body)
    )
    return head + body


SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"x-request-id: up-bench\r\ntransfer-encoding: chunked\r\n\r\n"
)
NOT_FOUND = (
    b"HTTP/1.1 404 Not Found\r\ncontent-type: text/plain\r\ncontent-length: 9\r\n\r\nnot found"
)
MODELS = _json_response(b'{"object":"list","data":[{"id":"bench","object":"model"}]}')


class Canned:
    """Replies built once, per model name."""

    def __init__(self) -> None:
        self._json: dict[str, bytes] = {}
        self._streams: dict[tuple[str, int | None], list[bytes]] = {}

    def json(self, model: str) -> bytes:
        reply = self._json.get(model)
        if reply is None:
            reply = self._json[model] = _json_response(completion_body(model))
        return reply

    def stream(self, model: str, prose_deltas: int | None = None) -> list[bytes]:
        key = (model, prose_deltas)
        events = self._streams.get(key)
        if events is None:
            events = [_chunked(e) for e in stream_events(model, prose_deltas)]
            self._streams[key] = events
        return events


CANNED = Canned()


class UpstreamProtocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.busy: asyncio.Future[None] | None = None
        self.can_write = asyncio.Event()
        self.can_write.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.busy is not None:
            self.busy.cancel()
        self.transport = None
        self.can_write.set()

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.busy is None:
            self._serve()

    def _serve(self) -> None:
        """Answer every complete request in the buffer (pipelining allowed)."""
        while self.transport is not None and self.busy is None:
            buf = self.buf
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buf[:end]).lower()
            length = 0
            at = head.find(b"\r\ncontent-length:")
            if at >= 0:
                stop = head.find(b"\r\n", at + 2)
                length = int(head[at + 17 : stop if stop >= 0 else len(head)])
            elif b"\r\ntransfer-encoding: chunked" in head:
                self.transport.write(b"HTTP/1.1 411 Length Required\r\ncontent-length: 0\r\n\r\n")
                self.transport.close()
                return
            if len(buf) < end + 4 + length:
                return
            body = bytes(buf[end + 4 : end + 4 + length])
            del buf[: end + 4 + length]
            close = b"\r\nconnection: close" in head
            self._answer(head, body)
            if close and self.transport is not None:
                if self.busy is None:
                    self.transport.close()
                return

    def _answer(self, head: bytes, body: bytes) -> None:
        assert self.transport is not None
        line = head[: head.find(b"\r\n")]
        if line.startswith(b"get ") and b"/models" in line:
            self.transport.write(MODELS)
            return
        if not (line.startswith(b"post ") and b"/chat/completions" in line):
            self.transport.write(NOT_FOUND)
            return
        found = MODEL_RE.search(body)
        model = found.group(1).decode() if found else "bench"
        if not STREAM_RE.search(body):
            self.transport.write(CANNED.json(model))
            return
        kind, _, arg = model.partition(":")
        if kind == "sustain":
            ms, _, n = arg.partition(":")
            self._sustain(CANNED.stream(model, prose_deltas=int(n or 64)), float(ms) / 1000)
            return
        delay = float(arg) / 1000 if arg else 0.0
        events = CANNED.stream(model, prose_deltas=5 if kind == "ttfb" else None)
        self.busy = asyncio.ensure_future(self._stream(events, delay, drip=kind == "drip"))
        self.busy.add_done_callback(self._stream_done)

    def _sustain(self, events: list[bytes], delay: float) -> None:
        """Write `events` `delay` seconds apart from timer callbacks; the next request on the
        connection is served after the last."""
        assert self.transport is not None
        self.transport.write(SSE_HEAD + events[0])
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self.busy = done
        rest = iter(events[1:])

        def tick() -> None:
            if self.transport is None or done.done():
                return
            event = next(rest, None)
            if event is None:
                self.transport.write(b"0\r\n\r\n")
                done.set_result(None)
                return
            self.transport.write(event)
            loop.call_later(delay, tick)

        loop.call_later(delay, tick)
        done.add_done_callback(self._stream_done)

    def _stream_done(self, task: asyncio.Future[None]) -> None:
        self.busy = None
        if not task.cancelled() and task.exception() is None and self.transport is not None:
            self._serve()

    async def _stream(self, events: list[bytes], delay: float, drip: bool) -> None:
        write = self.transport.write if self.transport else None
        assert write is not None
        write(SSE_HEAD + events[0])
        if drip:
            loop = asyncio.get_running_loop()
            end = loop.time() + 600
            piece = events[1]
            while loop.time() < end and self.transport is not None:
                await asyncio.sleep(delay)
                if self.transport is None:
                    return
                self.transport.write(piece)
            events = events[-3:]
        for event in events[1:]:
            if delay:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)  # let other streams and requests interleave
            if not self.can_write.is_set():
                await self.can_write.wait()
            if self.transport is None:
                return
            self.transport.write(event)
        if self.transport is not None:
            self.transport.write(b"0\r\n\r\n")


async def serve(host: str, port: int, ready: asyncio.Future[int] | None = None) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        UpstreamProtocol, host, port, backlog=4096, reuse_address=True
    )
    bound = server.sockets[0].getsockname()[1]
    if ready is not None:
        ready.set_result(bound)
    print(f"upstream listening on {host}:{bound}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    args = parser.parse_args(argv)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency of uvicorn[standard]
        uvloop = None
    with contextlib.suppress(KeyboardInterrupt):
        if uvloop is not None:
            uvloop.run(serve(args.host, args.port))
        else:
            asyncio.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()

"""What each step of spillguard's request path costs on its own, in microseconds per call.

In one process (run it pinned: `taskset -c 0 .venv/bin/python -m bench.components`), each step
timed over many calls on the bench's own request and replies, best of 5 batches:

* the non-streamed path's steps: parsing the request, reading its tools, parsing the reply,
  inspecting it, filtering headers, a request id, recording the outcome (log line, metrics);
* the framework: one POST through spillguard's FastAPI app and middleware to a trivial route,
  against the same route on bare Starlette (ASGI called directly, no sockets);
* the streamed path per SSE event: decoding, `json.loads` alone, and spillguard's chat stream
  editor (decode + parse + scan + re-emit) over the bench's 376-event stream, each event alone
  and as the relay feeds it (each 8 KB read's events together, in turns); the Messages and
  Responses editors over the same prose and call, as the relay feeds them.

Prints a table, and JSON with `--json`.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import logging
import os
import time
import uuid
from collections.abc import Callable
from typing import Any


def best_us(fn: Callable[[], Any], n: int, batches: int = 5) -> float:
    best = float("inf")
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def post_scope(path: str, body: bytes) -> dict[str, Any]:
    """The ASGI scope of the bench's JSON POST of `body` to `path`, as uvicorn would pass it."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1:8080"),
            (b"content-type", b"application/json"),
            (b"authorization", b"Bearer sk-bench"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }


def asgi_post_us(app: Any, path: str, body: bytes, n: int) -> float:
    """Microseconds for one POST through an ASGI app, called directly."""
    scope_base = post_scope(path, body)
    message = {"type": "http.request", "body": body, "more_body": False}

    async def receive() -> dict[str, Any]:
        return message

    async def send(_: dict[str, Any]) -> None:
        return None

    async def many(count: int) -> float:
        t0 = time.perf_counter()
        for _ in range(count):
            await app(dict(scope_base), receive, send)
        return (time.perf_counter() - t0) / count

    async def run() -> float:
        await many(200)  # warm up
        return min([await many(n) for _ in range(5)])

    try:
        import uvloop

        return uvloop.run(run()) * 1e6
    except ImportError:  # pragma: no cover
        return asyncio.run(run()) * 1e6


def measure(n: int = 2000) -> list[dict[str, Any]]:
    from spillguard import chat
    from spillguard.detect import declared_tools
    from spillguard.observe import Observer
    from spillguard.outcome import Action, Outcome
    from spillguard.relay import TURN
    from spillguard.settings import Settings
    from spillguard.sse import SSEDecoder
    from spillguard.upstream import end_to_end

    from .payloads import chat_request
    from .upstream import completion_body, stream_events

    rows: list[dict[str, Any]] = []

    def add(group: str, step: str, us: float, note: str = "") -> None:
        rows.append({"group": group, "step": step, "us": round(us, 2), "note": note})

    request = chat_request("bench")
    reply = completion_body("bench")
    obj = json.loads(request)
    parsed_reply = json.loads(reply)
    tools = declared_tools(obj)
    hold = 256 * 1024

    add(
        "non-streamed",
        "json.loads(request)",
        best_us(lambda: json.loads(request), n),
        f"{len(request)} bytes",
    )
    add("non-streamed", "declared_tools(request)", best_us(lambda: declared_tools(obj), n))
    add(
        "non-streamed",
        "json.loads(reply)",
        best_us(lambda: json.loads(reply), n),
        f"{len(reply)} bytes",
    )
    add(
        "non-streamed",
        "inspect_reply(reply)",
        best_us(lambda: chat.inspect_reply(parsed_reply, tools, hold), n),
        "the detection core on the whole reply",
    )
    headers = {
        "host": "127.0.0.1:9203",
        "user-agent": "wrk",
        "content-type": "application/json",
        "authorization": "Bearer sk-bench",
        "content-length": str(len(request)),
        "accept": "*/*",
    }
    add("non-streamed", "end_to_end(headers)", best_us(lambda: end_to_end(headers), n))
    add("non-streamed", "uuid4().hex", best_us(lambda: uuid.uuid4().hex, n))

    # The outcome record as the server does it: log line (INFO, console format) to a file,
    # metrics; the incident writer off (no findings on this path anyway).
    settings = Settings(upstream="http://127.0.0.1:9/v1", incidents_db="")
    observer = Observer(settings)
    from spillguard.logs import setup_logging

    setup_logging(settings)
    spill_log = logging.getLogger("spillguard")
    devnull = open(os.devnull, "w")  # noqa: SIM115 - the handler keeps it for the process
    for handler in spill_log.handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(devnull)

    def record() -> None:
        outcome = Outcome(request_id="sg-" + "0" * 32, route="chat", mode="retry")
        outcome.model, outcome.status, outcome.action = "bench", 200, Action.PASSED
        outcome.upstream_calls, outcome.upstream_statuses = 1, [200]
        observer.record(outcome)

    # What is timed is the request line itself, not an error path beside it.
    probe = io.StringIO()
    for handler in spill_log.handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(probe)
    record()
    if not probe.getvalue().startswith("info    request request_id="):
        raise RuntimeError(f"Observer.record wrote {probe.getvalue()!r}, not the request line")
    for handler in spill_log.handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(devnull)
    add(
        "non-streamed",
        "Observer.record(outcome)",
        best_us(record, n),
        "log line at INFO to /dev/null + metrics",
    )
    spill_log.setLevel(logging.WARNING)
    add("non-streamed", "Observer.record, --log-level WARNING", best_us(record, n), "metrics only")

    # Framework: spillguard's app (FastAPI, its middleware) against bare Starlette.
    from fastapi import Request as FRequest
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route, request_response

    from spillguard.asgi import create_app

    async def trivial(request: Request) -> Response:
        await request.body()
        return Response(b"{}", media_type="application/json")

    async def trivial_f(request: FRequest) -> Response:
        await request.body()
        return Response(b"{}", media_type="application/json")

    bare = Starlette(routes=[Route("/bench", trivial, methods=["POST"])])
    sg_app = create_app(settings)
    sg_app.fastapi.add_api_route("/bench", trivial_f, methods=["POST"])
    # A lean route is an ASGI app (as `handlers.Inspected` is): the same trivial handler,
    # made one as Starlette's `Route` makes it, so the two rows differ only in what is around it.
    sg_app.lean.routes["/v1/bench"] = request_response(trivial)
    k = max(500, n // 2)
    add("framework", "Starlette, trivial POST route", asgi_post_us(bare, "/bench", request, k))
    add(
        "framework",
        "spillguard app, trivial FastAPI route",
        asgi_post_us(sg_app, "/bench", request, k),
        "FastAPI + spillguard middleware (the service routes, relayed paths)",
    )
    add(
        "framework",
        "spillguard app, trivial route on the lean path",
        asgi_post_us(sg_app, "/v1/bench", request, k),
        "limits + lean dispatch (the inspected routes)",
    )

    # Streams, per event.
    events = stream_events("bench")
    raw = b"".join(events)

    def decode() -> None:
        SSEDecoder().feed(raw)

    def parse_only() -> None:
        for event in events:
            payload = event[6:-2]
            if payload != b"[DONE]":
                json.loads(payload)

    def edit() -> None:
        stream = chat.new_stream(tools, hold, None)
        for event in SSEDecoder().feed(raw):
            stream.feed(event)
        stream.finish()

    reads = [raw[i : i + 8192] for i in range(0, len(raw), 8192)]

    def edit_reads() -> None:
        # What the relay does: each read's events to the editor together, in turns of TURN.
        stream, decoder = chat.new_stream(tools, hold, None), SSEDecoder()
        for piece in reads:
            got = decoder.feed(piece)
            for i in range(0, len(got), TURN):
                stream.feed_all(got[i : i + TURN])
        stream.finish()

    per = len(events)
    m = max(20, n // 50)
    add("stream, per event", "SSEDecoder.feed", best_us(decode, m) / per, f"{per} events")
    add("stream, per event", "json.loads alone", best_us(parse_only, m) / per)
    add(
        "stream, per event",
        "decode + ChatStream.feed",
        best_us(edit, m) / per,
        "each event alone",
    )
    add(
        "stream, per event",
        "decode + ChatStream.feed_all",
        best_us(edit_reads, m) / per,
        f"what the relay does: 8 KB reads, {TURN}-event turns",
    )
    for wire, wire_events in other_wire_streams():
        add(
            "stream, per event",
            f"decode + {wire} feed_all",
            relay_us(wire, wire_events, tools, hold, m),
            f"{len(wire_events)} events, as ChatStream.feed_all is fed",
        )
    for wire, wire_events in call_streams():
        add(
            "stream, per event",
            f"decode + {wire} feed_all, a long call",
            relay_us(wire, wire_events, tools, hold, m),
            f"{len(wire_events)} events, most of them the call's 8-character argument pieces",
        )
    return rows


def other_wire_streams() -> list[tuple[str, list[bytes]]]:
    """The bench's prose (4-character text deltas) and its tool call as an Anthropic Messages
    stream and as a Responses stream, written by the scripted upstreams."""
    from spillguard import scripted, scripted_anthropic

    from .upstream import PROSE, TOOL_ARGS

    arguments = json.loads(TOOL_ARGS)
    call = scripted_anthropic.tool_use("get_marine_forecast", arguments, "toolu_bench_1")
    message = scripted_anthropic.Message([scripted_anthropic.text(PROSE), call])
    turn = scripted.Turn(PROSE, [scripted.call("get_marine_forecast", arguments, "call_bench_1")])
    return [
        ("Messages", scripted_anthropic.message_events(message, "bench")),
        ("Responses", scripted.response_events(turn, "bench")),
    ]


def call_streams() -> list[tuple[str, list[bytes]]]:
    """A short sentence, then one call whose arguments hold a whole file (the bench's prose), as
    an agent writing a file streams it: in Chat, Messages and Responses, by the scripted
    upstreams."""
    from spillguard import scripted, scripted_anthropic

    from .upstream import PROSE

    arguments = {"path": "notes/lisbon.md", "content": PROSE}
    sentence = "I will save the forecast."
    call = scripted_anthropic.tool_use("write_file", arguments, "toolu_bench_2")
    message = scripted_anthropic.Message([scripted_anthropic.text(sentence), call])
    turn = scripted.Turn(sentence, [scripted.call("write_file", arguments, "call_bench_2")])
    return [
        ("Chat", scripted.chunks(turn, "bench")),
        ("Messages", scripted_anthropic.message_events(message, "bench")),
        ("Responses", scripted.response_events(turn, "bench")),
    ]


def relay_us(wire: str, events: list[bytes], tools: Any, hold: int, m: int) -> float:
    """Microseconds an event for a wire's editor fed as the relay feeds it (each 8 KB read's
    events together, in turns of `TURN`), decoding included."""
    from spillguard import chat, messages, responses
    from spillguard.relay import TURN
    from spillguard.sse import SSEDecoder

    new_stream = {"Chat": chat.WIRE, "Messages": messages.WIRE, "Responses": responses.WIRE}[
        wire
    ].new_stream
    raw = b"".join(events)
    reads = [raw[i : i + 8192] for i in range(0, len(raw), 8192)]

    def run() -> None:
        stream, decoder = new_stream(tools, hold, None), SSEDecoder()
        for piece in reads:
            got = decoder.feed(piece)
            for i in range(0, len(got), TURN):
                stream.feed_all(got[i : i + TURN])
        stream.finish()

    return best_us(run, m) / len(events)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=2000, help="calls per batch")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = measure(args.n)
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    for row in rows:
        print(f"{row['group']:18} {row['step']:42} {row['us']:9.2f} us  {row['note']}")


if __name__ == "__main__":
    main()

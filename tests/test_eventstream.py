"""`eventstream.EventStream`, the inspected routes' SSE response, against sse-starlette's
`EventSourceResponse`, which it replaced: the same messages to the server, pings between slow
chunks, and a client that leaves closes the body and still runs the background."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.background import BackgroundTask

from spillguard.eventstream import EventStream


async def _events(chunks: list[bytes], closed: list[str], pause: float = 0.0) -> Any:
    try:
        for chunk in chunks:
            if pause:
                await asyncio.sleep(pause)
            yield chunk
    finally:
        closed.append("closed")


async def _sent(response: Any, receive: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}
    await response(scope, receive, send)
    return messages


async def _never() -> dict[str, Any]:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def test_event_stream_sends_what_sse_starlette_sent() -> None:
    from sse_starlette import EventSourceResponse

    chunks = [b"data: 1\n\n", b": keep-alive\n\n", b"data: [DONE]\n\n"]
    headers = {"content-type": "text/event-stream", "x-request-id": "r", "cache-control": "x"}
    ran: list[str] = []
    ours = EventStream(
        _events(chunks, []), 200, headers, 100, b": ka\n\n", BackgroundTask(ran.append, "ours")
    )
    theirs = EventSourceResponse(
        _events(chunks, []),
        status_code=200,
        headers=headers,
        ping=100,
        sep="\n",
        background=BackgroundTask(ran.append, "theirs"),
    )
    got, want = await _sent(ours, _never), await _sent(theirs, _never)
    want[0]["headers"] = [(k, v) for k, v in want[0]["headers"] if k != b"connection"]
    assert got == want
    assert ran == ["ours", "theirs"]


async def test_event_stream_without_a_content_type_gets_sse_starlettes() -> None:
    ours = EventStream(_events([b"data: 1\n\n"], []), 200, {}, 100, b": ka\n\n")
    start = (await _sent(ours, _never))[0]
    assert (b"content-type", b"text/event-stream; charset=utf-8") in start["headers"]
    assert (b"cache-control", b"no-store") in start["headers"]
    assert (b"x-accel-buffering", b"no") in start["headers"]


async def test_a_client_that_leaves_closes_the_stream_and_the_background_still_runs() -> None:
    closed: list[str] = []
    ran: list[str] = []
    sent_first = asyncio.Event()

    async def body() -> Any:
        try:
            yield b"data: 1\n\n"
            sent_first.set()
            await asyncio.Event().wait()  # an upstream that goes quiet
            yield b"data: never\n\n"
        finally:
            closed.append("closed")

    async def receive() -> dict[str, Any]:
        await sent_first.wait()
        return {"type": "http.disconnect"}

    ours = EventStream(body(), 200, {}, 100, b": ka\n\n", BackgroundTask(ran.append, "done"))
    messages = await _sent(ours, receive)
    assert [m.get("body") for m in messages[1:]] == [b"data: 1\n\n"]
    assert closed == ["closed"]
    assert ran == ["done"]


async def test_pings_go_out_between_slow_chunks() -> None:
    chunks = [b"data: 1\n\n", b"data: 2\n\n"]
    ours = EventStream(_events(chunks, [], pause=0.3), 200, {}, 0.05, b": ka\n\n")
    bodies = [m.get("body") for m in (await _sent(ours, _never))[1:]]
    assert [b for b in bodies if b != b": ka\n\n"] == [*chunks, b""]
    assert bodies.index(b": ka\n\n") < bodies.index(b"data: 1\n\n")


async def test_no_pings_once_the_stream_has_ended_for_the_client() -> None:
    """Pings go out while the body waits, until `ended()`; none while it waits after that."""
    done = b"data: [DONE]\n\n"

    async def body() -> Any:
        await asyncio.sleep(0.3)
        yield b"data: 1\n\n"
        yield done
        await asyncio.sleep(0.3)  # the upstream's body still open after the end

    ours = EventStream(body(), 200, {}, 0.05, b": ka\n\n", ended=lambda: done in sent)
    sent: list[bytes] = []

    async def record(message: dict[str, Any]) -> None:
        sent.append(message.get("body", b""))

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}
    await ours(scope, _never, record)
    assert b": ka\n\n" in sent[: sent.index(b"data: 1\n\n")]  # pinged before the end
    assert sent[sent.index(done) :] == [done, b""]  # nothing but the body's end after it

"""Upstream faults and client disconnects: every failure reaches the client as its documented
outcome, nothing hangs, and every upstream connection spillguard opened is closed or released.

Upstreams here are a `RawUpstream` (exact bytes, or none) or the scripted upstream behind a
`FaultProxy`. Timeouts are small so the suite stays fast; `asyncio.timeout(HANG)` guards against
hangs and measures nothing.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from spillguard.scripted import ScriptedUpstream, Turn, response_events
from spillguard.scripted_anthropic import Message, message_events, text
from tests.conftest import chat_body
from tests.faults import (
    HANG,
    JSON,
    LAST_CHUNK,
    LEAK,
    PROSE,
    SSE,
    Fault,
    FaultProxy,
    RawConn,
    RawRequest,
    RawUpstream,
    chunk,
    completion_bytes,
    error_of,
    events,
    eventually,
    free_port,
    head,
    pool_in_use,
    reply,
    serve,
    socket_fds,
    sse_events,
)

FAST = {"read_timeout": 0.5, "total_timeout": 1.5, "connect_timeout": 1.0}


async def post(url: str, stream: bool, **extra: Any) -> httpx.Response:
    """POST a chat request with tools; the whole response is read."""
    async with httpx.AsyncClient(timeout=HANG) as http:
        return await http.post(url + "/chat/completions", json=chat_body(stream=stream, **extra))


def assert_error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, (r.status_code, r.text[:500])
    assert r.headers["content-type"].startswith("application/json")
    error = error_of(r.content)
    assert error["code"] == code, error
    return error


def assert_error_event(text: str, code: str) -> list[str]:
    """A stream that started (200) and ended with an error event in the OpenAI shape, then
    [DONE]."""
    data = sse_events(text)
    assert data[-1] == "[DONE]", data[-3:]
    error = error_of(data[-2])
    assert error["code"] == code, error
    return data


# ---- the upstream cannot be reached, or does not answer ---------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_refused_connection_is_502_unavailable(stream: bool) -> None:
    async with serve(f"http://127.0.0.1:{free_port()}/v1", **FAST) as sg:
        r = await asyncio.wait_for(post(sg.url, stream), HANG)
        assert_error(r, 502, "UPSTREAM_UNAVAILABLE")
        assert pool_in_use(sg) == 0


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "deadline", [{"read_timeout": 0.5, "total_timeout": 30}, {"read_timeout": 30}]
)
async def test_accepts_but_never_answers_is_504(stream: bool, deadline: dict[str, Any]) -> None:
    async def silent(conn: RawConn, req: RawRequest) -> None:
        await conn.until_closed()

    settings = FAST | deadline
    async with RawUpstream(silent) as up, serve(up.url, **settings) as sg:
        r = await asyncio.wait_for(post(sg.url, stream), HANG)
        assert_error(r, 504, "UPSTREAM_TIMEOUT")
        # spillguard hung up on the upstream rather than leaving the request open
        await eventually(lambda: up.conns[0].client_closed.is_set())
        assert pool_in_use(sg) == 0


@pytest.mark.parametrize("stream", [False, True])
async def test_headers_then_stall_is_504(stream: bool) -> None:
    async def stall(conn: RawConn, req: RawRequest) -> None:
        if stream:
            await conn.send(head(200, SSE))
        else:
            await conn.send(head(200, JSON, content_length="200") + b'{"id": "c", "cho')
        await conn.until_closed()

    async with RawUpstream(stall) as up, serve(up.url, **FAST) as sg:
        r = await asyncio.wait_for(post(sg.url, stream), HANG)
        assert_error(r, 504, "UPSTREAM_TIMEOUT")
        await eventually(lambda: up.conns[0].client_closed.is_set())
        assert pool_in_use(sg) == 0


@pytest.mark.parametrize(
    "deadline", [{"read_timeout": 30}, {"read_timeout": 0.5, "total_timeout": 30}]
)
async def test_stalled_stream_held_past_keepalive_ends_with_error_event(
    deadline: dict[str, Any],
) -> None:
    """Held back long enough that keep-alives started the response: the total deadline, or the
    read timeout (silence counted from the upstream's last byte, not from the last keep-alive),
    then arrives as an error event and [DONE], not as a hang."""

    async def stall(conn: RawConn, req: RawRequest) -> None:
        await conn.send(head(200, SSE) + chunk(events("")[0]))  # the role chunk only
        await conn.until_closed()

    settings = FAST | deadline | {"keepalive": 0.1}
    async with RawUpstream(stall) as up, serve(up.url, **settings) as sg:
        r = await asyncio.wait_for(post(sg.url, True), HANG)
        assert r.status_code == 200
        assert ": keep-alive" in r.text
        assert_error_event(r.text, "UPSTREAM_TIMEOUT")
        await eventually(lambda: up.conns[0].client_closed.is_set())
        assert pool_in_use(sg) == 0


@pytest.mark.parametrize("stream", [False, True])
async def test_drip_below_read_timeout_still_meets_total_deadline(stream: bool) -> None:
    """One byte every 50 ms beats a 0.5 s read timeout forever; the 1.5 s total must end it."""
    scripted = await ScriptedUpstream(lambda _: Turn(content=PROSE)).start()
    try:
        async with (
            FaultProxy(scripted.port, Fault(drip=0.05)) as fp,
            serve(fp.url, **FAST) as sg,
        ):
            r = await asyncio.wait_for(post(sg.url, stream), HANG)
            assert_error(r, 504, "UPSTREAM_TIMEOUT")
            await eventually(lambda: fp.conns[0].client_closed.is_set())
            assert pool_in_use(sg) == 0
    finally:
        await scripted.stop()


async def test_done_reaches_the_client_before_the_upstream_ends_its_body() -> None:
    """[DONE] ends the stream for every client: it goes out when it comes, though the upstream
    ends its body only later (here: once the client has it); the connection is then reused."""
    got_done = asyncio.Event()
    ended: list[bool] = []

    async def late_end(conn: RawConn, req: RawRequest) -> None:
        await conn.send(head(200, SSE) + chunk(b"".join(events(PROSE))))
        await got_done.wait()
        await conn.send(LAST_CHUNK)
        ended.append(True)

    async def streamed(http: httpx.AsyncClient, url: str) -> str:
        text, before = "", len(ended)
        body = chat_body(stream=True)
        async with http.stream("POST", url + "/chat/completions", json=body) as r:
            async for piece in r.aiter_text():
                text += piece
                if text.endswith("data: [DONE]\n\n") and not got_done.is_set():
                    assert len(ended) == before  # the upstream's body has not ended yet
                    got_done.set()
        return text

    async with RawUpstream(late_end) as up, serve(up.url, **FAST) as sg:
        async with httpx.AsyncClient(timeout=HANG) as http:
            for n in (1, 2):
                got_done.clear()
                text = await asyncio.wait_for(streamed(http, sg.url), HANG)
                data = sse_events(text)
                assert data[-1] == "[DONE]" and len(ended) == n
                content = [json.loads(d)["choices"][0]["delta"].get("content") for d in data[:-1]]
                assert "".join(c for c in content if c) == PROSE
        assert len(up.conns) == 1  # read to its end and released: the second request reused it
        await eventually(lambda: pool_in_use(sg) == 0)


async def fail(conn: RawConn, fault: str) -> None:
    """The upstream, what it had to say sent, resets the connection or never ends its body."""
    if fault == "reset":
        await asyncio.sleep(0.05)
        conn.reset()
    else:
        await conn.until_closed()


@pytest.mark.parametrize("fault", ["reset", "silent"])
async def test_an_upstream_failure_after_done_adds_nothing_to_the_clients_stream(
    fault: str,
) -> None:
    """The client has the whole answer and [DONE]: the upstream then resetting, or never ending
    its body, adds no error event (nor a second [DONE]) and fails nothing."""

    async def after_done(conn: RawConn, req: RawRequest) -> None:
        await conn.send(head(200, SSE) + chunk(b"".join(events(PROSE))))
        await fail(conn, fault)

    async with RawUpstream(after_done) as up, serve(up.url, **FAST) as sg:
        r = await asyncio.wait_for(post(sg.url, True), HANG)
        assert r.status_code == 200
        data = sse_events(r.text)
        assert data.count("[DONE]") == 1 and data[-1] == "[DONE]"
        content = [json.loads(d)["choices"][0]["delta"].get("content") for d in data[:-1]]
        assert "".join(c for c in content if c) == PROSE
        async with httpx.AsyncClient(timeout=HANG) as http:
            metrics = (await http.get(sg.url.removesuffix("/v1") + "/metrics")).text
        assert 'outcome="passed"' in metrics and 'outcome="error"' not in metrics
        await eventually(lambda: pool_in_use(sg) == 0)


@pytest.mark.parametrize("fault", ["reset", "silent"])
@pytest.mark.parametrize("wire", ["messages", "responses"])
async def test_an_upstream_failure_after_the_terminal_event_adds_nothing(
    wire: str, fault: str
) -> None:
    """Messages' message_stop and Responses' terminal event end the client's stream as [DONE]
    ends chat's: the upstream then resetting, or never ending its body, adds no error event
    (on which the SDK would raise, a whole answer in hand) and fails nothing."""
    if wire == "messages":
        sent = message_events(Message([text(PROSE)]), "m")
    else:
        sent = response_events(Turn(content=PROSE), "m")

    async def after_the_end(conn: RawConn, req: RawRequest) -> None:
        await conn.send(head(200, SSE) + chunk(b"".join(sent)))
        await fail(conn, fault)

    async with RawUpstream(after_the_end) as up, serve(up.url, **FAST) as sg:
        if wire == "messages":
            claude = anthropic.AsyncAnthropic(base_url=sg.url.removesuffix("/v1"), api_key="k")
            async with claude.messages.stream(
                model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}],
                tools=[{"name": "get_weather", "input_schema": {"type": "object"}}],
            ) as stream:  # fmt: skip
                got = await asyncio.wait_for(stream.get_final_text(), HANG)
        else:
            gpt = openai.AsyncOpenAI(base_url=sg.url, api_key="k", max_retries=0)
            events = await gpt.responses.create(
                model="m", input="hi", stream=True,
                tools=[{"type": "function", "name": "get_weather", "parameters": {}}],
            )  # fmt: skip
            seen = [event async for event in events]
            kinds = [event.type for event in seen]
            assert kinds[-1] == "response.completed" and "error" not in kinds
            got = "".join(e.delta for e in seen if e.type == "response.output_text.delta")
        assert got == PROSE
        async with httpx.AsyncClient(timeout=HANG) as http:
            metrics = (await http.get(sg.url.removesuffix("/v1") + "/metrics")).text
        assert 'outcome="passed"' in metrics and 'outcome="error"' not in metrics
        await eventually(lambda: pool_in_use(sg) == 0)


@pytest.mark.parametrize("fault", ["reset", "silent"])
async def test_a_spliced_retry_whose_upstream_fails_after_its_end_still_counts_as_retried(
    fault: str,
) -> None:
    """A Messages stream leaks after its prose has gone out; the retry continues the client's
    stream to its message_stop, and only then does the retry's upstream reset or fall silent:
    the request is retried (not passed, not failed), with no error event."""
    prose = "It is sunny in Lisbon today. "

    async def handler(conn: RawConn, req: RawRequest) -> None:
        if req.index == 0:
            leaking = message_events(Message([text(prose + LEAK)], delta_size=len(prose)), "m")
            await conn.send(head(200, SSE) + chunk(b"".join(leaking[:4])))
            await asyncio.sleep(0.2)  # the prose reaches the client: the response has started
            await conn.send(chunk(b"".join(leaking[4:])) + LAST_CHUNK)
            return
        retry = message_events(Message([text("Twenty-one degrees.")]), "m")
        await conn.send(head(200, SSE) + chunk(b"".join(retry)))
        await fail(conn, fault)

    body = {
        "model": "m", "max_tokens": 64, "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
    }  # fmt: skip
    async with (
        RawUpstream(handler) as up,
        serve(up.url, **FAST) as sg,
        httpx.AsyncClient(timeout=HANG) as http,
    ):
        r = await asyncio.wait_for(http.post(sg.url + "/messages", json=body), HANG)
        metrics = (await http.get(sg.url.removesuffix("/v1") + "/metrics")).text
    assert r.status_code == 200 and len(up.requests) == 2
    assert r.text.rstrip().endswith('data: {"type": "message_stop"}'), r.text[-200:]
    assert "event: error" not in r.text
    assert 'outcome="retried"' in metrics
    assert 'outcome="passed"' not in metrics and 'outcome="error"' not in metrics


async def test_drip_after_stream_started_ends_with_error_event() -> None:
    async def drip(conn: RawConn, req: RawRequest) -> None:
        evs = events(PROSE)
        await conn.send(head(200, SSE) + chunk(b"".join(evs[:4])))
        for ev in evs[4:]:
            for i in range(len(ev)):  # a chunk per byte, 50 ms apart
                await conn.send(chunk(ev[i : i + 1]))
                await asyncio.sleep(0.05)
        await conn.send(LAST_CHUNK)

    async with RawUpstream(drip) as up, serve(up.url, **FAST) as sg:
        r = await asyncio.wait_for(post(sg.url, True), HANG)
        assert r.status_code == 200
        data = assert_error_event(r.text, "UPSTREAM_TIMEOUT")
        assert any('"content"' in d for d in data[:-2])  # the prose before the deadline arrived
        await eventually(lambda: up.conns[0].client_closed.is_set())
        assert pool_in_use(sg) == 0


async def test_upstream_that_stops_reading_the_request_is_504() -> None:
    """The upstream accepts and never reads: spillguard's upload backs up; the deadline ends it."""
    async with (
        FaultProxy(free_port(), Fault(stop_reading=True)) as fp,
        serve(fp.url, **FAST) as sg,
    ):
        big = chat_body(padding="x" * (12 * 1024 * 1024))
        async with httpx.AsyncClient(timeout=HANG) as http:
            r = await asyncio.wait_for(http.post(sg.url + "/chat/completions", json=big), HANG)
        assert_error(r, 504, "UPSTREAM_TIMEOUT")
        await eventually(lambda: pool_in_use(sg) == 0)


# ---- the upstream breaks the reply -----------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_reset_before_reply_is_502(stream: bool) -> None:
    async def reset(conn: RawConn, req: RawRequest) -> None:
        conn.reset()

    async with RawUpstream(reset) as up, serve(up.url, **FAST) as sg:
        r = await asyncio.wait_for(post(sg.url, stream), HANG)
        assert_error(r, 502, "UPSTREAM_UNAVAILABLE")
        assert pool_in_use(sg) == 0


async def test_reset_mid_body_is_502() -> None:
    async def reset(conn: RawConn, req: RawRequest) -> None:
        await conn.send(head(200, JSON, content_length="4000") + b'{"id": "c", "choices": [')
        await asyncio.sleep(0.05)
        conn.reset()

    async with RawUpstream(reset) as up, serve(up.url, **FAST) as sg:
        r = await asyncio.wait_for(post(sg.url, False), HANG)
        assert_error(r, 502, "UPSTREAM_UNAVAILABLE")
        assert pool_in_use(sg) == 0


async def test_reset_mid_stream_through_fault_proxy_ends_with_error_event() -> None:
    turn = Turn(content=PROSE, delta_size=8)
    scripted = await ScriptedUpstream(lambda _: turn).start()
    try:
        # Where to cut: halfway through the stream the scripted upstream sends.
        async with httpx.AsyncClient(timeout=HANG) as http:
            whole = await http.post(scripted.url + "/chat/completions", json=chat_body(True))
        cut = 300 + len(whole.content) // 2  # past the head and the first events
        async with (
            FaultProxy(scripted.port, Fault(reset_after=cut)) as fp,
            serve(fp.url, **FAST) as sg,
        ):
            r = await asyncio.wait_for(post(sg.url, True), HANG)
            assert r.status_code == 200
            data = assert_error_event(r.text, "UPSTREAM_UNAVAILABLE")
            text = "".join(
                json.loads(d)["choices"][0]["delta"].get("content") or "" for d in data[:-2]
            )
            assert text and PROSE.startswith(text)
            assert pool_in_use(sg) == 0
    finally:
        await scripted.stop()


async def test_non_sse_reply_to_a_stream_cut_mid_body_is_not_completed_with_sse() -> None:
    async def json_then_reset(conn: RawConn, req: RawRequest) -> None:
        await conn.send(head(200, JSON) + chunk(b'{"id": "c", "choices": ['))  # chunked
        await asyncio.sleep(0.05)
        conn.reset()

    async with RawUpstream(json_then_reset) as up, serve(up.url, **FAST) as sg:
        try:
            r = await asyncio.wait_for(post(sg.url, True), HANG)
        except httpx.TransportError:
            return  # the cut reached the client as a cut: correct
        assert r.status_code != 200 or b"data: " not in r.content, r.content[:200]


async def test_chunked_stream_cut_without_last_chunk_ends_with_error_event() -> None:
    async def cut(conn: RawConn, req: RawRequest) -> None:
        await conn.send(head(200, SSE) + chunk(b"".join(events(PROSE, done=False))))
        conn.close()  # FIN without the terminating 0-chunk: the body is incomplete

    async with RawUpstream(cut) as up, serve(up.url, **FAST) as sg:
        r = await asyncio.wait_for(post(sg.url, True), HANG)
        assert r.status_code == 200
        assert_error_event(r.text, "UPSTREAM_UNAVAILABLE")
        assert pool_in_use(sg) == 0


@pytest.mark.parametrize("stream", [False, True])
async def test_close_without_done_passes_what_was_sent(stream: bool) -> None:
    """A close-delimited reply (no length, no chunking) that ends without [DONE]: everything the
    upstream sent reaches the client, and the response ends."""
    sent = b"".join(events(PROSE, done=False)) if stream else completion_bytes(PROSE)

    async def close_delimited(conn: RawConn, req: RawRequest) -> None:
        ctype = "text/event-stream" if stream else "application/json"
        raw_head = f"HTTP/1.1 200 OK\r\ncontent-type: {ctype}\r\nconnection: close\r\n\r\n"
        await conn.send(raw_head.encode() + sent)
        conn.close()

    async with RawUpstream(close_delimited) as up, serve(up.url, **FAST) as sg:
        r = await asyncio.wait_for(post(sg.url, stream), HANG)
        assert r.status_code == 200
        if stream:  # a delta whose tail could open a marker (". " before a recipient) is
            # re-framed with the next one: the text is the upstream's, to the character
            assert _stream_text(r.content) == _stream_text(sent) == PROSE
        else:
            assert r.content == sent
        assert "[DONE]" not in r.text
        assert pool_in_use(sg) == 0


def _stream_text(body: bytes) -> str:
    text = ""
    for event in body.split(b"\n\n"):
        if event.startswith(b"data: {"):
            delta = json.loads(event[6:])["choices"][0]["delta"]
            text += delta.get("content") or ""
    return text


@pytest.mark.parametrize(
    "body",
    [b'{"id": "c", "choices": [', b"\xff\xfe not json \x00", b"[" * 100_000, b"1" + b"0" * 10_000],
    ids=["truncated", "binary", "deep", "huge-number"],
)
async def test_invalid_json_reply_passes_through_as_sent(body: bytes) -> None:
    async def bad(conn: RawConn, req: RawRequest) -> None:
        await reply(conn, 200, JSON, body)

    async with RawUpstream(bad) as up, serve(up.url, **FAST) as sg:
        r = await asyncio.wait_for(post(sg.url, False), HANG)
        assert r.status_code == 200
        assert r.content == body


@pytest.mark.parametrize(
    "bad",
    [
        b"data: {not json}\n\n",
        b"data: \xff\xfe\xc3\x28 invalid utf-8\n\n",
        b'data: {"choices": "not a list"}\n\n',
        b'data: {"choices": [{"index": "x", "delta": 7}]}\n\n',
        b'data: {"choices": [{"delta": {"content": 12}}]}\n\n',
        b"event: weird\nid: 1\nretry: 10\nbogus line without colon\n\n",
        b"data: " + b"[" * 50_000 + b"\n\n",
    ],
    ids=["not-json", "bad-utf8", "choices-str", "bad-types", "content-num", "fields", "deep"],
)
async def test_invalid_sse_passes_through_byte_for_byte(bad: bytes) -> None:
    evs = events("Hello there.")
    body = evs[0] + evs[1] + bad + b"".join(evs[2:])

    async def send(conn: RawConn, req: RawRequest) -> None:
        await conn.send(head(200, SSE) + chunk(body) + LAST_CHUNK)

    async with RawUpstream(send) as up, serve(up.url, **FAST) as sg:
        r = await asyncio.wait_for(post(sg.url, True), HANG)
        assert r.status_code == 200
        # byte for byte, but for id: and retry: lines, which never reach a client
        assert r.content == body.replace(b"id: 1\n", b"").replace(b"retry: 10\n", b"")


async def test_sse_event_over_the_decoder_limit_is_a_clean_502() -> None:
    """An upstream that never ends an event: the decoder refuses past 1 MiB; the client must get
    a clean 502 in the OpenAI shape, not a 500 with a traceback."""

    async def endless(conn: RawConn, req: RawRequest) -> None:
        await conn.send(head(200, SSE) + chunk(b"data: " + b"a" * (2 * 1024 * 1024)))
        await conn.until_closed()

    async with RawUpstream(endless) as up, serve(up.url, **FAST) as sg:
        r = await asyncio.wait_for(post(sg.url, True), HANG)
        assert r.status_code == 502, (r.status_code, r.text[:200])
        assert error_of(r.content)["code"] in ("REPLY_TOO_LARGE", "UPSTREAM_UNAVAILABLE")
        await eventually(lambda: up.conns[0].client_closed.is_set())


async def test_sse_event_over_the_decoder_limit_mid_stream_is_an_error_event() -> None:
    async def endless(conn: RawConn, req: RawRequest) -> None:
        start = b"".join(events(PROSE, done=False)[:6])
        await conn.send(head(200, SSE) + chunk(start) + chunk(b"data: " + b"a" * (2 << 20)))
        await conn.until_closed()

    async with RawUpstream(endless) as up, serve(up.url, **FAST) as sg:
        r = await asyncio.wait_for(post(sg.url, True), HANG)
        assert r.status_code == 200
        data = sse_events(r.text)
        assert data and data[-1] == "[DONE]"
        assert error_of(data[-2])["code"] in ("REPLY_TOO_LARGE", "UPSTREAM_UNAVAILABLE")


# ---- replies past the hold-back cap and max_reply ------------------------------------------------


async def test_stream_held_past_hold_limit_is_502_reply_too_large() -> None:
    """Reasoning that opens with markup is held (it may still be released by a real call); past
    hold_limit the stream fails cleanly instead of buffering without bound."""
    reasoning = "<tool_call>\n" + "x" * 20_000
    turn = Turn(reasoning=reasoning, content="ok", delta_size=256)
    scripted = await ScriptedUpstream(lambda _: turn).start()
    try:
        async with serve(scripted.url, hold_limit=1024, **FAST) as sg:
            r = await asyncio.wait_for(post(sg.url, True), HANG)
            assert_error(r, 502, "REPLY_TOO_LARGE")
            assert pool_in_use(sg) == 0
    finally:
        await scripted.stop()


@pytest.mark.parametrize("stream", [False, True])
async def test_blob_prefix_longer_than_hold_limit_is_published_by_both_paths(stream: bool) -> None:
    """A JSON blob longer than the cap stops being held (the probe gives up at the cap): both
    paths agree and the client gets the upstream's bytes."""
    content = '{"name": "get_weather", "arguments": {"city": "' + "L" * 5000 + '"}}'
    turn = Turn(content=content, delta_size=64)
    scripted = await ScriptedUpstream(lambda _: turn).start()
    try:
        async with serve(scripted.url, hold_limit=1024, **FAST) as sg:
            r = await asyncio.wait_for(post(sg.url, stream), HANG)
            assert r.status_code == 200
            assert r.headers["x-spillguard-action"] == "passed"
            if stream:
                pieces = [json.loads(d)["choices"] for d in sse_events(r.text)[:-1]]
                text = "".join(c[0]["delta"].get("content") or "" for c in pieces if c)
            else:
                text = r.json()["choices"][0]["message"]["content"]
            assert text == content
            assert len(scripted.requests) == 1  # no retry
    finally:
        await scripted.stop()


async def test_reply_over_max_reply_is_502_and_connection_dropped() -> None:
    async def big(conn: RawConn, req: RawRequest) -> None:
        await reply(conn, 200, JSON, completion_bytes("x" * 8000))

    async with RawUpstream(big) as up, serve(up.url, max_reply=1024, **FAST) as sg:
        r = await asyncio.wait_for(post(sg.url, False), HANG)
        assert_error(r, 502, "REPLY_TOO_LARGE")
        assert pool_in_use(sg) == 0


# ---- the client goes away --------------------------------------------------------------------


def request_bytes(port: int, body: dict[str, Any], path: str = "/v1/chat/completions") -> bytes:
    data = json.dumps(body).encode()
    return (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n"
    ).encode() + data


async def open_client(port: int, body: dict[str, Any]) -> tuple[Any, Any]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request_bytes(port, body))
    await writer.drain()
    return reader, writer


async def hang_up(writer: asyncio.StreamWriter) -> None:
    writer.close()
    await writer.wait_closed()


async def assert_released(sg: Any, up: RawUpstream | FaultProxy, sockets_before: int) -> None:
    """Every upstream connection closed by spillguard, the pool empty, sockets back to baseline."""
    await eventually(lambda: all(c.client_closed.is_set() for c in up.conns))
    await eventually(lambda: all(c.closed.is_set() for c in up.conns))
    await eventually(lambda: pool_in_use(sg) == 0)
    await eventually(lambda: socket_fds() <= sockets_before)


BODIES = {
    "inspected": chat_body(),
    "inspected-stream": chat_body(stream=True),
    "forwarded": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "forwarded-stream": {"model": "m", "messages": [], "stream": True},
}


@pytest.mark.parametrize("kind", sorted(BODIES))
async def test_disconnect_before_headers_cancels_upstream(kind: str) -> None:
    async def silent(conn: RawConn, req: RawRequest) -> None:
        await conn.until_closed()

    async with RawUpstream(silent) as up, serve(up.url, read_timeout=30, total_timeout=60) as sg:
        before = socket_fds()
        async with asyncio.timeout(HANG):
            _, writer = await open_client(sg.port, BODIES[kind])
            await up.got_request.wait()
            assert pool_in_use(sg) == 1
            await hang_up(writer)
            await assert_released(sg, up, before)


@pytest.mark.parametrize("kind", ["inspected-stream", "forwarded-stream"])
async def test_disconnect_mid_stream_cancels_upstream(kind: str) -> None:
    async def half(conn: RawConn, req: RawRequest) -> None:
        await conn.send(head(200, SSE) + chunk(b"".join(events(PROSE, done=False)[:6])))
        await conn.until_closed()

    async with RawUpstream(half) as up, serve(up.url, read_timeout=30, total_timeout=60) as sg:
        before = socket_fds()
        async with asyncio.timeout(HANG):
            reader, writer = await open_client(sg.port, BODIES[kind])
            got = b""
            while b'"content"' not in got:
                got += await reader.read(4096)
            assert got.startswith(b"HTTP/1.1 200")
            await hang_up(writer)
            await assert_released(sg, up, before)


async def test_disconnect_mid_stream_through_fault_proxy_cancels_scripted_upstream() -> None:
    turn = Turn(content=PROSE, delta_size=4, delay=0.02)  # about 3 s of stream
    scripted = await ScriptedUpstream(lambda _: turn).start()
    try:
        async with (
            FaultProxy(scripted.port) as fp,
            serve(fp.url, read_timeout=30, total_timeout=60) as sg,
        ):
            before = socket_fds()
            async with asyncio.timeout(HANG):
                reader, writer = await open_client(sg.port, chat_body(stream=True))
                got = b""
                while got.count(b'"content"') < 3:
                    got += await reader.read(4096)
                await hang_up(writer)
                await assert_released(sg, fp, before)
            assert fp.conns[0].down < 4 * len(PROSE)  # cut short, not read to the end
    finally:
        await scripted.stop()


@pytest.mark.parametrize("stream", [False, True])
async def test_disconnect_while_reply_held_back_cancels_upstream(stream: bool) -> None:
    """The upstream sends a JSON-blob prefix slowly: spillguard holds it (nothing published)."""
    blob = '{"name": "get_weather", "arguments": {"ci'

    async def slow_blob(conn: RawConn, req: RawRequest) -> None:
        if stream:
            await conn.send(head(200, SSE) + chunk(b"".join(events(blob)[:-2])))
        else:
            await conn.send(head(200, JSON, content_length="500") + b'{"choices": [{"mess')
        await conn.until_closed()

    async with RawUpstream(slow_blob) as up, serve(up.url, read_timeout=30, total_timeout=60) as sg:
        before = socket_fds()
        async with asyncio.timeout(HANG):
            reader, writer = await open_client(sg.port, chat_body(stream=stream))
            await up.got_request.wait()
            await eventually(lambda: up.conns[0].down > 0)
            with pytest.raises(TimeoutError):  # held back: not one byte reaches the client
                await asyncio.wait_for(reader.read(1), 0.3)
            await hang_up(writer)
            await assert_released(sg, up, before)


@pytest.mark.parametrize("where", ["whole", "stream-start", "stream-spliced"])
async def test_disconnect_while_retry_in_flight_cancels_upstream(where: str) -> None:
    stream = where != "whole"
    first = ("Checking the weather.\n" if where == "stream-spliced" else "") + LEAK
    retry_seen = asyncio.Event()

    async def leak_then_stall(conn: RawConn, req: RawRequest) -> None:
        if req.index == 0:
            if stream:
                evs = events(first)
                split = 4 if where == "stream-spliced" else 1  # prose in its own read
                await conn.send(head(200, SSE) + chunk(b"".join(evs[:split])))
                await asyncio.sleep(0.2)
                await conn.send(chunk(b"".join(evs[split:])) + LAST_CHUNK)
            else:
                await reply(conn, 200, JSON, completion_bytes(first))
            return
        retry_seen.set()
        await conn.until_closed()

    async with (
        RawUpstream(leak_then_stall) as up,
        serve(up.url, read_timeout=30, total_timeout=60) as sg,
    ):
        before = socket_fds()
        async with asyncio.timeout(HANG):
            reader, writer = await open_client(sg.port, chat_body(stream=stream))
            await retry_seen.wait()
            if where == "stream-spliced":
                got = b""
                while b"Checking" not in got:
                    got += await reader.read(4096)
            await hang_up(writer)
            await eventually(lambda: up.conns[-1].client_closed.is_set())
            await assert_released(sg, up, before)
        assert len(up.requests) == 2


async def test_many_disconnects_leave_nothing_open() -> None:
    """A storm of clients hanging up at every stage; afterwards the pool and sockets are back
    to baseline and spillguard still answers."""

    async def varied(conn: RawConn, req: RawRequest) -> None:
        if req.index % 3 == 0:
            await conn.until_closed()
        else:
            await conn.send(head(200, SSE) + chunk(b"".join(events(PROSE, done=False)[:5])))
            await conn.until_closed()

    async with RawUpstream(varied) as up, serve(up.url, read_timeout=30, total_timeout=60) as sg:
        before = socket_fds()
        async with asyncio.timeout(HANG):

            async def one(i: int) -> None:
                _, writer = await open_client(sg.port, chat_body(stream=i % 2 == 0))
                await asyncio.sleep(0.01 * (i % 7))
                await hang_up(writer)

            await asyncio.gather(*(one(i) for i in range(60)))
            await eventually(lambda: pool_in_use(sg) == 0)
            await eventually(lambda: up.open_count == 0)
            await eventually(lambda: socket_fds() <= before)
        async with httpx.AsyncClient(timeout=HANG) as http:
            r = await http.get(sg.url.removesuffix("/v1") + "/healthz")
        assert r.status_code == 200


# ---- back-pressure on streams ----------------------------------------------------------------


async def test_streams_over_the_concurrency_limit_get_503_with_retry_after() -> None:
    release = asyncio.Event()

    async def held(conn: RawConn, req: RawRequest) -> None:
        evs = events("Hello there, streaming slowly.")
        await conn.send(head(200, SSE) + chunk(b"".join(evs[:3])))
        await release.wait()
        await conn.send(chunk(b"".join(evs[3:])) + LAST_CHUNK)

    async with RawUpstream(held) as up, serve(up.url, max_concurrency=1, **FAST) as sg:
        async with asyncio.timeout(HANG), httpx.AsyncClient(timeout=HANG) as http:
            url = sg.url + "/chat/completions"
            async with http.stream("POST", url, json=chat_body(stream=True)) as first:
                assert first.status_code == 200
                second = await http.post(url, json=chat_body(stream=True))
                assert_error(second, 503, "OVERLOADED")
                assert second.headers["retry-after"] == "1"
                release.set()
                assert "[DONE]" in (await first.aread()).decode()
            third = await http.post(url, json=chat_body(stream=True))
            assert third.status_code == 200
        assert len(up.requests) == 2  # the refused stream never reached the upstream


# ---- SIGTERM with a stream open ----------------------------------------------------------------


def spawn(upstream: str, port: int, where: Path) -> subprocess.Popen[bytes]:
    """The real CLI in its own process (run from `where`, so its files land there)."""
    exe = Path(sys.executable).parent / "spillguard"
    cmd = [str(exe), "--upstream", upstream, "--port", str(port), "--graceful-timeout", "5"]
    return subprocess.Popen(cmd, cwd=where, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


async def until_up(http: httpx.AsyncClient, port: int) -> None:
    while True:
        try:
            if (await http.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200:
                return
        except httpx.TransportError:
            await asyncio.sleep(0.05)


async def test_sigterm_drains_open_stream_and_refuses_new_connections(tmp_path: Path) -> None:
    turn = Turn(content=PROSE, delta_size=16, delay=0.06)  # a stream of about 2 s
    scripted = await ScriptedUpstream(lambda _: turn).start()
    port = free_port()
    proc = spawn(scripted.url, port, tmp_path)
    try:
        async with asyncio.timeout(HANG), httpx.AsyncClient(timeout=HANG) as http:
            await until_up(http, port)
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            async with http.stream("POST", url, json=chat_body(stream=True)) as r:
                assert r.status_code == 200
                it = r.aiter_text()
                text = await anext(it)
                while '"content"' not in text:
                    text += await anext(it)
                proc.send_signal(signal.SIGTERM)
                refused = False  # new connections are refused once the listener closes
                while not refused:
                    try:
                        _, w = await asyncio.open_connection("127.0.0.1", port)
                        w.close()
                        await asyncio.sleep(0.05)
                    except ConnectionRefusedError:
                        refused = True
                async for piece in it:
                    text += piece
            data = sse_events(text)
            assert data[-1] == "[DONE]"
            content = "".join(
                json.loads(d)["choices"][0]["delta"].get("content") or "" for d in data[:-1]
            )
            assert content == PROSE  # the in-flight stream finished in full
            # exits within the grace period (5 s) once drained; see the exit-status test
            await asyncio.to_thread(proc.wait, 10)
        assert proc.returncode in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        await scripted.stop()


async def test_sigterm_exit_status_is_zero(tmp_path: Path) -> None:
    scripted = await ScriptedUpstream(lambda _: Turn(content="hi")).start()
    port = free_port()
    proc = spawn(scripted.url, port, tmp_path)
    try:
        async with asyncio.timeout(HANG), httpx.AsyncClient(timeout=HANG) as http:
            await until_up(http, port)
            proc.send_signal(signal.SIGTERM)
            await asyncio.to_thread(proc.wait, 10)
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        await scripted.stop()

"""Keep-alives measured from the client's side (issue 12, item 1).

The upstream here never falls silent: it drips text spillguard must hold back, a few bytes at a
time, and goes on until the test has seen a keep-alive. Measured from upstream silence, no
keep-alive would ever be due and the test would hang (the timeout is a hang guard only). Before
the response has started, the first keep-alive starts it (its headers and the comment); after,
a comment arrives while the held text keeps coming.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from spillguard.scripted import Turn as ScriptedTurn
from spillguard.scripted import call, chunks
from tests.conftest import chat_body
from tests.faults import HANG, LAST_CHUNK, SSE, RawConn, RawRequest, RawUpstream, chunk, head, serve

KEEPALIVE = 0.3
DRIP = 0.05  # seconds between the upstream's pieces: far below the keep-alive interval
BLOB = '{"name": "get_weather", "arguments": {"city": "Lisbon'  # a whole-answer call, so far
KIMI = "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
REAL = ScriptedTurn(tool_calls=[call("get_weather", {"city": "Lisbon"})])


def delta(**fields: Any) -> bytes:
    body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    body["choices"] = [{"index": 0, "delta": fields, "finish_reason": None}]
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class Dripping:
    """An upstream that drips held text until `go`, then ends its first attempt as `ending`;
    any later request (spillguard's retry) gets a real tool call."""

    def __init__(self, opening: list[bytes], piece: dict[str, str], ending: list[bytes]) -> None:
        self.opening, self.piece, self.ending = opening, piece, ending
        self.go = asyncio.Event()
        self.pieces = 0

    async def __call__(self, conn: RawConn, req: RawRequest) -> None:
        sse = head(200, SSE, transfer_encoding="chunked")
        if req.index > 0:
            await conn.send(sse + b"".join(chunk(e) for e in chunks(REAL, "m")) + LAST_CHUNK)
            return
        await conn.send(sse + b"".join(chunk(e) for e in self.opening))
        while not self.go.is_set():
            await conn.send(chunk(delta(**self.piece)))
            self.pieces += 1
            await asyncio.sleep(DRIP)
        await conn.send(b"".join(chunk(e) for e in self.ending) + LAST_CHUNK)


async def read_until(lines: Any, seen: list[str], want: str) -> None:
    async for line in lines:
        seen.append(line)
        if want in line:
            return


async def drive(upstream: Dripping, before: str | None) -> list[str]:
    """The client's stream: (after a line holding `before`, when given) until a keep-alive,
    then the rest."""
    seen: list[str] = []
    async with (
        RawUpstream(upstream) as up,
        serve(up.url, keepalive=KEEPALIVE, incidents_db="") as sg,
        httpx.AsyncClient(base_url=sg.url, timeout=HANG) as http,
        http.stream("POST", "/chat/completions", json=chat_body(stream=True)) as r,
    ):
        assert r.status_code == 200
        lines = r.aiter_lines()
        if before is not None:
            await asyncio.wait_for(read_until(lines, seen, before), HANG)
        await asyncio.wait_for(read_until(lines, seen, ": keep-alive"), HANG)
        assert upstream.pieces > 0 and not upstream.go.is_set()  # it was still dripping
        upstream.go.set()
        seen += [line async for line in lines]
    return seen


def contents(lines: list[str]) -> tuple[str, list[str]]:
    text, names = "", []
    for line in lines:
        if line.startswith("data: {"):
            for choice in json.loads(line[6:])["choices"]:
                text += choice["delta"].get("content") or ""
                for tc in choice["delta"].get("tool_calls") or []:
                    names.append((tc.get("function") or {}).get("name"))
    return text, [n for n in names if n]


async def test_a_held_drip_before_the_start_still_gets_a_keepalive() -> None:
    upstream = Dripping(
        [delta(role="assistant", content=""), delta(content=BLOB)],
        {"content": "n"},  # the city name goes on: still a viable JSON tool call
        [delta(content='"}}'), b"data: [DONE]\n\n"],
    )
    seen = await drive(upstream, before=None)
    text, names = contents(seen)
    assert text == ""  # the blob leaked and never reached the client
    assert names == ["get_weather"]  # the retry, spliced into the started response


async def test_a_held_drip_after_the_start_still_gets_a_keepalive() -> None:
    prose = "Checking the forecast."
    upstream = Dripping(
        [delta(role="assistant", content=prose), delta(reasoning_content="Thinking.\n" + KIMI)],
        {"reasoning_content": "x"},  # reasoning markup, held until a real call releases it
        chunks(REAL, "m")[1:],
    )
    seen = await drive(upstream, before=prose)
    text, names = contents(seen)
    assert text == prose
    assert names == ["get_weather"]  # a real call: the held reasoning went out ahead of it


async def test_no_keepalive_after_done() -> None:
    """[DONE] is the client's end: an upstream that keeps its body open after it, silent for
    longer than both keep-alive intervals (the relay's and the response's ping, whole seconds),
    gets nothing of spillguard's after it; only the body's end follows."""
    prose = ScriptedTurn(content="Sunny in Lisbon.")

    async def silent_after_done(conn: RawConn, req: RawRequest) -> None:
        await conn.send(head(200, SSE) + b"".join(chunk(e) for e in chunks(prose, "m")))
        await asyncio.sleep(1.6)
        await conn.send(LAST_CHUNK)

    async with (
        RawUpstream(silent_after_done) as up,
        serve(up.url, keepalive=KEEPALIVE, read_timeout=5.0, incidents_db="") as sg,
        httpx.AsyncClient(base_url=sg.url, timeout=HANG) as http,
    ):
        r = await asyncio.wait_for(
            http.post("/chat/completions", json=chat_body(stream=True)), HANG
        )
    assert r.status_code == 200
    assert r.text.endswith("data: [DONE]\n\n"), r.text[-200:]
    assert contents(r.text.splitlines())[0] == "Sunny in Lisbon."

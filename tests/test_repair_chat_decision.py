"""The repair decision on Chat Completions through the real server: what it records (header,
log line, metrics, incident), how a leak is read out (keep-alives flowing, the hold limit), and
how a fallback continues a client stream the read-out had to start.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from spillguard.jsonread import LEAVE_FROM
from spillguard.scripted import Raw, Turn, call, chunks, completion
from tests.conftest import chat_body
from tests.fuzz.chat_bytes import chat_view
from tests.test_metrics import eventually, requests

HERMES = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lisbon"}}\n</tool_call>'
BROKEN = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lis'
PROSE = "Checking the forecast now.\n"
REAL = Turn(tool_calls=[call("get_weather", {"city": "Porto"}, "call_real")])
SSE = {"content-type": "text/event-stream"}
CALLS = '[{"name":"get_weather","arguments":{"city":"Lisbon"}}]'


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.fields: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == "request":
            self.fields.append(getattr(record, "fields", {}))


@contextmanager
def request_lines() -> Iterator[Lines]:
    lines, logger = Lines(), logging.getLogger("spillguard")
    logger.addHandler(lines)
    try:
        yield lines
    finally:
        logger.removeHandler(lines)


async def until_logged(lines: Lines) -> dict[str, Any]:
    for _ in range(300):  # a stream logs just after its last byte
        if lines.fields:
            return lines.fields[-1]
        await asyncio.sleep(0.01)
    raise AssertionError("no request line")


def split_markup(prose: str, markup: str, at: int) -> list[bytes]:
    """A chat stream whose first content chunk is the prose and the markup's first `at`
    characters, then the rest of the markup, the finish and [DONE]."""
    head = chunks(Turn(content=prose + markup[:at], delta_size=10**6), "m")
    rest = chunks(Turn(content=markup[at:], delta_size=10**6), "m")
    return [b"".join(head[:2]), *rest[1:]]


async def test_a_repair_is_recorded_in_the_header_log_metrics_and_incident(
    harness: Any, tmp_path: Path
) -> None:
    db = tmp_path / "incidents.sqlite3"
    h = await harness(Turn(content=PROSE + HERMES), mode="repair", incidents_db=str(db))
    with request_lines() as lines:
        async with h.http() as http:
            r = await http.post("/chat/completions", json=chat_body())
        line = await until_logged(lines)
    assert r.headers["x-spillguard-action"] == "repaired"
    assert r.headers["x-spillguard-family"] == "hermes"
    assert "x-spillguard-leaked-tokens" not in r.headers  # the client got that attempt
    assert line["outcome"] == "repaired" and line["upstream_calls"] == 1
    assert line["findings"][0]["repaired"] == CALLS
    samples = await eventually(h.url, lambda s: requests(s, "repaired", mode="repair") == 1)
    assert requests(samples, "repaired", mode="repair") == 1
    await h.proxy.stop()  # shutdown writes what is queued
    h.proxy = None
    with sqlite3.connect(db) as conn:
        [(action, excerpt, repaired)] = conn.execute(
            "SELECT action, excerpt, repaired_calls FROM incidents"
        ).fetchall()
    assert (action, excerpt, repaired) == ("repaired", HERMES, CALLS)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_long_request_is_repaired_from_the_tools_it_left_unread(
    harness: Any, stream: bool
) -> None:
    h = await harness(Turn(content=PROSE + HERMES), mode="repair")
    body = chat_body(stream=stream)
    body["messages"].insert(0, {"role": "system", "content": "x" * LEAVE_FROM})
    async with h.http() as http:
        r = await http.post("/chat/completions", json=body)
    assert r.headers["x-spillguard-action"] == "repaired"
    if stream:
        assert chat_view(r.content).finish == {0: "tool_calls"}
    else:
        [made] = r.json()["choices"][0]["message"]["tool_calls"]
        assert made["function"]["name"] == "get_weather"
        assert json.loads(made["function"]["arguments"]) == {"city": "Lisbon"}
    assert h.calls == 1


async def test_a_repair_on_the_retry_counts_only_the_first_attempt_as_leaked(harness: Any) -> None:
    h = await harness(Turn(content=BROKEN), Turn(content=HERMES), mode="repair")
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body())
    assert r.headers["x-spillguard-action"] == "repaired"
    assert r.headers["x-spillguard-leaked-tokens"] == "15"  # the scripted reply's usage
    assert h.calls == 2


async def test_a_streamed_repair_is_recorded_too(harness: Any) -> None:
    h = await harness(Turn(content=HERMES), mode="repair")
    with request_lines() as lines:
        async with h.http() as http:
            r = await http.post("/chat/completions", json=chat_body(stream=True))
        line = await until_logged(lines)
    assert r.headers["x-spillguard-action"] == "repaired"
    assert chat_view(r.content).finish == {0: "tool_calls"}
    assert line["outcome"] == "repaired" and line["findings"][0]["repaired"] == CALLS


async def test_a_whole_reply_keeps_the_upstreams_other_bytes(harness: Any) -> None:
    body = completion(Turn(content=HERMES), "m")
    body["x_vendor"] = {"note": "ünïcode"}
    raw = json.dumps(body, ensure_ascii=False).encode()
    h = await harness(Raw(200, {"content-type": "application/json"}, [raw]), mode="repair")
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body())
    assert r.headers["x-spillguard-action"] == "repaired"
    assert r.content.startswith(raw.split(b'"choices"')[0])
    assert r.content.endswith(raw.split(b"}]")[-1])
    assert int(r.headers["content-length"]) == len(r.content)


async def test_a_stream_request_answered_with_whole_json_is_repaired(harness: Any) -> None:
    raw = json.dumps(completion(Turn(content=HERMES), "m")).encode()
    h = await harness(Raw(200, {"content-type": "application/json"}, [raw]), mode="repair")
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body(stream=True))
    assert r.headers["x-spillguard-action"] == "repaired"
    message = r.json()["choices"][0]["message"]
    assert message["tool_calls"][0]["function"]["name"] == "get_weather"
    assert h.calls == 1


async def test_keepalives_flow_while_the_markup_is_read_out(harness: Any) -> None:
    slow = Turn(content=HERMES, delta_size=3, delay=0.02)  # about half a second of markup
    h = await harness(slow, mode="repair", keepalive=0.1)
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body(stream=True))
    assert r.content.count(b": keep-alive\n\n") >= 2
    view = chat_view(r.content)
    assert view.calls[0][0][1:] == ["get_weather", '{"city":"Lisbon"}']
    assert view.finish == {0: "tool_calls"} and view.done
    assert h.calls == 1


async def test_the_prose_that_came_with_the_marker_precedes_the_calls(harness: Any) -> None:
    pieces = split_markup(PROSE, HERMES, 15)
    slow = Raw(200, SSE, pieces, pauses=(0.0, 0.4))
    h = await harness(slow, mode="repair", keepalive=0.1)
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body(stream=True))
    assert r.content.index(b": keep-alive") < r.content.index(b"Checking")
    view = chat_view(r.content)
    assert view.content == {0: PROSE} and view.roles == 1
    assert view.finish == {0: "tool_calls"}


async def test_a_fallback_after_a_keepalive_started_the_stream_continues_it(harness: Any) -> None:
    """The read-out started the response (a keep-alive): when the markup then cannot be
    repaired, the held prose goes out and the retry continues the client's stream from it."""
    slow = Raw(200, SSE, split_markup(PROSE, BROKEN, 15), pauses=(0.0, 0.4))
    h = await harness(slow, Turn(content=PROSE + "Porto it is."), mode="repair", keepalive=0.1)
    with request_lines() as lines:
        async with h.http() as http:
            r = await http.post("/chat/completions", json=chat_body(stream=True))
        assert (await until_logged(lines))["outcome"] == "retried"
    view = chat_view(r.content)
    assert view.content == {0: PROSE + "Porto it is."}
    assert view.roles == 1 and view.finish == {0: "stop"}
    assert h.calls == 2
    assistant = h.upstream.requests[1]["body"]["messages"][-2]
    assert assistant == {"role": "assistant", "content": PROSE}


async def test_markup_longer_than_the_hold_limit_is_retried(harness: Any) -> None:
    long = HERMES.replace("Lisbon", "Lisbon " * 200)
    for stream in (False, True):
        h = await harness(Turn(content=long, delta_size=4), REAL, mode="repair", hold_limit=1024)
        async with h.http() as http:
            r = await http.post("/chat/completions", json=chat_body(stream=stream))
        assert r.status_code == 200 and h.calls == 2
        assert r.headers["x-spillguard-action"] == "retried"


async def test_a_readable_leak_in_a_spliced_retry_is_not_repaired(harness: Any) -> None:
    first = Turn(content=PROSE + BROKEN, delay=0.01)
    h = await harness(first, Turn(content=HERMES), mode="repair")
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body(stream=True))
    view = chat_view(r.content)
    assert view.content == {0: PROSE} and view.calls == {}
    assert view.errors[0]["code"] == "TEXT_ENCODED_TOOL_CALL"
    assert h.calls == 2


async def test_observe_and_fail_modes_do_not_repair(harness: Any) -> None:
    h = await harness(Turn(content=HERMES), mode="observe")
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body())
    assert r.headers["x-spillguard-action"] == "observed"
    h = await harness(Turn(content=HERMES), mode="fail")
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body())
    assert r.status_code == 502

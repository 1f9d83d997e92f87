"""Adjacent silent failures (issue 10, item 5): a structured call that is missing or malformed.

Reported (metrics, the log line, the incident record under its own kind) and never acted on: the
reply reaches the client exactly as the upstream sent it, in every mode.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from spillguard import chat, responses
from spillguard.detect import Anomaly, AnomalyKind, call_anomalies, declared_tools
from spillguard.scripted import Raw
from spillguard.sse import SSEDecoder
from tests.conftest import TOOLS, chat_body

TOOLSET = declared_tools({"tools": TOOLS})
MISSING, MARKUP, UNDECLARED = (
    AnomalyKind.CALLS_MISSING,
    AnomalyKind.MARKUP_IN_NAME,
    AnomalyKind.UNDECLARED,
)
MANGLED = "read<arg_key>filePath</arg_key><arg_value>/etc/hosts"


# ---- the check ---------------------------------------------------------------------------------


def test_a_declared_call_is_fine() -> None:
    assert call_anomalies(["get_weather"], True, TOOLSET) == []


def test_tool_calls_finish_without_a_call() -> None:
    assert call_anomalies([], True, TOOLSET) == [Anomaly(MISSING)]
    assert call_anomalies([], False, TOOLSET) == []


def test_a_name_with_markup_or_undeclared() -> None:
    assert call_anomalies([MANGLED, "book_flight"], True, TOOLSET) == [
        Anomaly(MARKUP, MANGLED),
        Anomaly(UNDECLARED, "book_flight"),
    ]


def test_a_nameless_call_still_counts_as_a_call() -> None:
    assert call_anomalies([None], True, TOOLSET) == []


def test_names_are_not_judged_without_declared_function_names() -> None:
    builtin = declared_tools({"tools": [{"type": "web_search"}]})
    assert call_anomalies(["web_search", "anything"], True, builtin) == []


def test_a_reported_name_is_cut() -> None:
    (found,) = call_anomalies(["x" * 10_000], False, TOOLSET)
    assert found.tool_name is not None and len(found.tool_name) == 200


# ---- the wires ---------------------------------------------------------------------------------


def _message(tool_calls: list[dict[str, Any]] | None, finish: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish}]}


def _call(name: str) -> dict[str, Any]:
    return {"id": "c1", "type": "function", "function": {"name": name, "arguments": "{}"}}


def test_chat_whole_reply() -> None:
    assert chat.reply_anomalies(_message(None, "tool_calls"), TOOLSET) == [Anomaly(MISSING)]
    assert chat.reply_anomalies(_message([], "tool_calls"), TOOLSET) == [Anomaly(MISSING)]
    assert chat.reply_anomalies(_message([_call(MANGLED)], "tool_calls"), TOOLSET) == [
        Anomaly(MARKUP, MANGLED)
    ]
    assert chat.reply_anomalies(_message([_call("get_weather")], "stop"), TOOLSET) == []
    assert chat.reply_anomalies({"choices": "nope"}, TOOLSET) == []


def _sse(*chunks: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + (
        b"data: [DONE]\n\n"
    )


def _delta(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "x", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _chat_stream(data: bytes, cut: int) -> chat.ChatStream:
    stream = chat.ChatStream(TOOLSET, 4096)
    decoder = SSEDecoder()
    for piece in (data[:cut], data[cut:]):
        for event in decoder.feed(piece):
            stream.feed(event)
    for event in decoder.flush():
        stream.feed(event)
    stream.finish()
    return stream


@pytest.mark.parametrize(
    ("chunks", "want"),
    [
        pytest.param(
            [_delta({"role": "assistant", "content": ""}), _delta({}, "tool_calls")],
            [Anomaly(MISSING)],
            id="finish-without-calls",
        ),
        pytest.param(
            [
                _delta({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "read<arg"}}]}),
                _delta({"tool_calls": [{"index": 0, "function": {"name": "_key>filePath"}}]}),
                _delta({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
                _delta({}, "tool_calls"),
            ],
            [Anomaly(MARKUP, "read<arg_key>filePath")],
            id="name-in-fragments",
        ),
        pytest.param(
            [
                _delta({"tool_calls": [{"index": 0, "function": {"name": "get_weather"}}]}),
                _delta({"tool_calls": [{"index": 1, "function": {"name": "book_flight"}}]}),
                _delta({}, "tool_calls"),
            ],
            [Anomaly(UNDECLARED, "book_flight")],
            id="second-call-undeclared",
        ),
        pytest.param(
            [_delta({"content": "Sunny."}), _delta({}, "stop")],
            [],
            id="an-answer",
        ),
    ],
)
def test_chat_stream_at_every_cut(chunks: list[dict[str, Any]], want: list[Anomaly]) -> None:
    data = _sse(*chunks)
    for cut in range(len(data) + 1):
        assert _chat_stream(data, cut).anomalies == want


def test_responses_whole_and_streamed() -> None:
    item = {"type": "function_call", "call_id": "c1", "name": "book_flight", "arguments": "{}"}
    reply = {"output": [item]}
    assert responses.reply_anomalies(reply, TOOLSET) == [Anomaly(UNDECLARED, "book_flight")]
    stream = responses.ResponsesStream(TOOLSET, 4096, None)
    added = {"type": "response.output_item.added", "output_index": 0, "item": item}
    data = b"event: response.output_item.added\ndata: " + json.dumps(added).encode() + b"\n\n"
    for event in SSEDecoder().feed(data):
        stream.feed(event)
    assert stream.anomalies == [Anomaly(UNDECLARED, "book_flight")]


# ---- through the proxy -------------------------------------------------------------------------

WHOLE = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": _message(None, "x")["choices"][0]["message"]}],
    }
).encode()


def _raw_whole(finish: str, calls: list[dict[str, Any]] | None) -> Raw:
    body = json.loads(WHOLE)
    body["choices"][0]["finish_reason"] = finish
    if calls is not None:
        body["choices"][0]["message"]["tool_calls"] = calls
    return Raw(headers={"content-type": "application/json"}, chunks=[json.dumps(body).encode()])


def _raw_stream(finish: str, name: str | None) -> Raw:
    chunks = [_delta({"role": "assistant", "content": ""})]
    if name is not None:
        chunks.append(_delta({"tool_calls": [{"index": 0, "id": "c", "function": {"name": name}}]}))
    chunks.append(_delta({}, finish))
    return Raw(headers={"content-type": "text/event-stream"}, chunks=[_sse(*chunks)])


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.fields: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == "request":
            self.fields.append(dict(getattr(record, "fields", {})))


@pytest.mark.parametrize("mode", ["retry", "fail", "observe"])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("finish", "name", "kind"),
    [
        ("tool_calls", None, "tool_calls_without_calls"),
        ("tool_calls", MANGLED, "markup_in_tool_name"),
        ("tool_calls", "book_flight", "undeclared_tool"),
    ],
)
async def test_reported_and_passed_untouched(
    harness: Any,
    tmp_path: Path,
    mode: str,
    stream: bool,
    finish: str,
    name: str | None,
    kind: str,
) -> None:
    db = tmp_path / "incidents.sqlite3"
    raw = (
        _raw_stream(finish, name)
        if stream
        else _raw_whole(finish, None if name is None else [_call(name)])
    )
    h = await harness(raw, mode=mode, incidents_db=str(db))
    records = Records()
    logging.getLogger("spillguard").addHandler(records)
    try:
        async with h.http() as http:
            got = await http.post("/chat/completions", json=chat_body(stream=stream))
            scraped = (await http.get(h.url.removesuffix("/v1") + "/metrics")).text
    finally:
        logging.getLogger("spillguard").removeHandler(records)
    assert got.status_code == 200
    assert got.content == b"".join(raw.chunks)  # never edited, in any mode
    assert h.calls == 1  # never retried
    labels = f'kind="{kind}",model="m",upstream="default"'
    assert f"spillguard_anomalies_total{{{labels}}} 1.0" in scraped
    (logged,) = [f for f in records.fields if f.get("anomalies")]
    assert logged["anomalies"] == [{"kind": kind, "tool_name": name, "attempt": 1}]
    await h.restart()  # the incident writer flushes on shutdown
    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT kind, family, tool_name, excerpt FROM incidents").fetchone()
    assert row == (kind, "", name, "")

"""Log lines and request ids through the real server, and the canary: no key anywhere."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from spillguard.logs import ConsoleFormatter, JsonFormatter
from spillguard.outcome import Outcome
from spillguard.redact import Redactor
from spillguard.scripted import Raw, Turn
from tests.conftest import chat_body
from tests.samples import DSML, HERMES, HONEST, REAL

OWN_CODES = {
    "TEXT_ENCODED_TOOL_CALL",
    "INVALID_PROXY_KEY",
    "REQUEST_TOO_LARGE",
    "UPSTREAM_UNAVAILABLE",
}
JSON_LOGS = {"log_format": "json", "log_level": "INFO", "incidents_db": ""}


def json_lines(err: str) -> list[dict[str, Any]]:
    out = []
    for line in err.splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


class Lines:
    """What the "spillguard" logger wrote to stderr, read through pytest's capsys."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys
        self.err = ""

    def read(self) -> list[dict[str, Any]]:
        self.err += self.capsys.readouterr().err
        return json_lines(self.err)

    def requests(self) -> list[dict[str, Any]]:
        return [line for line in self.read() if line["msg"] == "request"]

    async def until(self, count: int) -> list[dict[str, Any]]:
        """Streams log just after their last byte: wait a little for their line."""
        for _ in range(300):
            lines = self.requests()
            if len(lines) >= count:
                return lines
            await asyncio.sleep(0.01)
        return self.requests()


@pytest.fixture
def lines(capsys: pytest.CaptureFixture[str]) -> Lines:
    return Lines(capsys)


# ---- one JSON line per request ---------------------------------------------------------------


async def test_one_json_line_per_request_with_its_fields(harness: Any, lines: Lines) -> None:
    h = await harness(Turn(content=HERMES), REAL, **JSON_LOGS)
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body(), headers={"x-request-id": "r-1"})
    assert r.status_code == 200
    [line] = lines.requests()
    assert line["level"] == "warning"  # it carries leaked text: leak_log_level
    assert line["request_id"] == "r-1"
    assert line["route"] == "chat"
    assert line["mode"] == "retry"
    assert line["upstream"] == "default"  # the named upstream ([upstreams.NAME]) it went to
    assert line["model"] == "m"
    assert line["stream"] is False
    assert line["status"] == 200
    assert line["outcome"] == "retried"
    assert line["family"] == "hermes"
    assert line["tool_name"] == "get_weather"
    assert line["attempts"] == 2
    assert line["upstream_calls"] == 2
    assert line["upstream_status"] == 200
    assert line["error"] is None
    assert line["total_ms"] >= line["upstream_ms"] > 0
    assert line["added_ms"] == pytest.approx(line["total_ms"] - line["upstream_ms"], abs=0.02)
    assert line["findings"] == [
        {"family": "hermes", "tool_name": "get_weather", "attempt": 1, "excerpt": HERMES}
    ]
    assert "authorization" not in json.dumps(line).lower()


async def test_each_kind_of_request_logs_exactly_once(harness: Any, lines: Lines) -> None:
    h = await harness(HONEST, **JSON_LOGS)
    no_tools = chat_body()
    del no_tools["tools"]
    async with h.http() as http:
        await http.post("/chat/completions", json=chat_body(), headers={"x-request-id": "a"})
        await http.post(
            "/chat/completions", json=chat_body(stream=True), headers={"x-request-id": "b"}
        )
        await http.post("/chat/completions", json=no_tools, headers={"x-request-id": "c"})
        await http.get("/models", headers={"x-request-id": "d"})
        h.script(Turn(content=DSML), Turn(content=HERMES))
        await http.post("/chat/completions", json=chat_body(), headers={"x-request-id": "e"})
        await h.upstream.stop()
        await http.post("/chat/completions", json=chat_body(), headers={"x-request-id": "f"})
    got = {line["request_id"]: line for line in await lines.until(6)}
    await asyncio.sleep(0.05)  # nothing more may come
    assert sorted(line["request_id"] for line in lines.requests()) == list("abcdef")
    assert {k: got[k]["outcome"] for k in got} == {
        "a": "passed",
        "b": "passed",
        "c": "forwarded",
        "d": "forwarded",
        "e": "failed",
        "f": "error",
    }
    assert got["b"]["stream"] is True
    assert got["d"]["route"] == "other"
    assert got["e"]["status"] == 502 and got["e"]["error"] == "TEXT_ENCODED_TOOL_CALL"
    assert [f["attempt"] for f in got["e"]["findings"]] == [1, 2]
    assert got["f"]["status"] == 502 and got["f"]["error"] == "UPSTREAM_UNAVAILABLE"
    assert got["f"]["upstream_status"] is None


async def test_excerpt_limit_and_leak_level(harness: Any, lines: Lines) -> None:
    h = await harness(Turn(content=HERMES), excerpt_limit=12, mode="observe", **JSON_LOGS)
    async with h.http() as http:
        await http.post("/chat/completions", json=chat_body())
    [line] = lines.requests()
    assert line["findings"][0]["excerpt"] == HERMES[:12]
    # With the leak level below the log level, the line stays (at INFO) without the text.
    await h.restart(leak_log_level="DEBUG", mode="observe", **JSON_LOGS)
    async with h.http() as http:
        await http.post("/chat/completions", json=chat_body())
    line = lines.requests()[-1]
    assert line["level"] == "info" and line["family"] == "hermes"
    assert "findings" not in line


async def test_log_level_warning_hides_plain_request_lines(harness: Any, lines: Lines) -> None:
    h = await harness(HONEST, log_format="json", log_level="WARNING", incidents_db="")
    async with h.http() as http:
        await http.post("/chat/completions", json=chat_body())
    assert lines.requests() == []


async def test_console_format_is_readable(harness: Any, capsys: pytest.CaptureFixture[str]) -> None:
    h = await harness(Turn(content=HERMES), REAL, log_level="INFO", incidents_db="")
    async with h.http() as http:
        await http.post("/chat/completions", json=chat_body(), headers={"x-request-id": "r-9"})
    err = capsys.readouterr().err
    [line] = [x for x in err.splitlines() if " request " in x]
    assert line.startswith("warning request request_id=r-9 route=chat")
    assert "outcome=retried" in line and "family=hermes" in line and "total_ms=" in line
    assert "leaked family=hermes tool_name=get_weather attempt=1 excerpt='<tool_call>" in err


# ---- request ids -----------------------------------------------------------------------------


async def test_request_id_generated_returned_passed_logged(harness: Any, lines: Lines) -> None:
    h = await harness(Turn(content=HERMES), mode="fail", **JSON_LOGS)
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body())
    rid = r.headers["x-request-id"]
    assert re.fullmatch(r"sg-[0-9a-f]{32}", rid)
    assert h.upstream.requests[0]["headers"]["x-request-id"] == rid
    assert r.json()["error"]["meta"]["request_id"] == rid
    assert lines.requests()[0]["request_id"] == rid


@pytest.mark.parametrize("path", ["/chat/completions", "/models"])
async def test_request_id_honoured_everywhere(harness: Any, lines: Lines, path: str) -> None:
    h = await harness(HONEST, **JSON_LOGS)
    async with h.http() as http:
        if path == "/models":
            r = await http.get(path, headers={"x-request-id": "mine-1"})
        else:
            r = await http.post(path, json=chat_body(), headers={"x-request-id": "mine-1"})
    assert r.headers["x-request-id"] == "mine-1"
    assert h.upstream.requests[0]["headers"]["x-request-id"] == "mine-1"
    assert [line["request_id"] for line in await lines.until(1)] == ["mine-1"]


async def test_request_ids_differ_and_long_ones_are_cut(harness: Any) -> None:
    h = await harness(HONEST, incidents_db="")
    async with h.http() as http:
        one = await http.post("/chat/completions", json=chat_body())
        two = await http.post("/chat/completions", json=chat_body())
        long = await http.post(
            "/chat/completions", json=chat_body(), headers={"x-request-id": "x" * 500}
        )
    assert one.headers["x-request-id"] != two.headers["x-request-id"]
    assert long.headers["x-request-id"] == "x" * 128
    assert h.upstream.requests[2]["headers"]["x-request-id"] == "x" * 128


async def test_spillguard_errors_carry_the_request_id(harness: Any) -> None:
    h = await harness(HONEST, max_body=1024, incidents_db="")
    async with h.http() as http:
        r = await http.post(
            "/chat/completions", content=b"x" * 2048, headers={"x-request-id": "big-1"}
        )
    assert r.status_code == 413
    assert r.headers["x-request-id"] == "big-1"


# ---- redaction -------------------------------------------------------------------------------


def test_redactor_keys_and_token_shapes() -> None:
    redact = Redactor(["my-own-proxy-key", "abc"])  # "abc" is too short to search for
    assert redact("key my-own-proxy-key here") == "key [redacted] here"
    assert redact("Authorization: Bearer abc.def-123_456") == "Authorization: Bearer [redacted]"
    assert redact("sk-proj-ABCDEF123456 and xai-0123456789abcdefABCD") == (
        "sk-[redacted] and xai-[redacted]"
    )
    assert (
        redact("abc sk-short task-list bearer of news") == "abc sk-short task-list bearer of news"
    )
    assert redact.deep({"a": ["Bearer zzzzzzzz"], "b": 3}) == {"a": ["Bearer [redacted]"], "b": 3}


def _record(msg: str, fields: dict[str, Any], exc: BaseException | None = None) -> Any:
    record = logging.LogRecord("spillguard", logging.ERROR, __file__, 1, msg, None, None)
    if exc is not None:
        record.exc_info = (type(exc), exc, exc.__traceback__)
    record.fields = fields
    return record


def test_formatters_never_print_a_traceback_or_a_key() -> None:
    redact = Redactor(["sk-canary-formatter"])
    try:
        raise RuntimeError("headers: {'authorization': 'Bearer sk-canary-formatter'}")
    except RuntimeError as exc:
        record = _record("boom", {"note": "sk-canary-formatter"}, exc)
    for formatter in (JsonFormatter(redact), ConsoleFormatter(redact)):
        text = formatter.format(record)
        assert "sk-canary-formatter" not in text
        assert "Traceback" not in text and "RuntimeError" in text
    line = json.loads(JsonFormatter(redact).format(record))
    assert line["exc_type"] == "RuntimeError" and "[redacted]" in line["exc"]


def test_outcome_has_no_field_for_headers() -> None:
    fields = set(Outcome.__dataclass_fields__)
    assert not {f for f in fields if "header" in f or "auth" in f or "key" in f}


# ---- the canary ------------------------------------------------------------------------------


async def test_canary_key_appears_nowhere(harness: Any, lines: Lines, tmp_path: Path) -> None:
    """One key as the client's Authorization, the upstream key and a proxy key - and, as a
    safety net, echoed by the model and in the model name. Then no log line, metric, incident
    row or spillguard error body may hold it."""
    canary = f"sk-canary-{uuid.uuid4().hex}"
    leak = HERMES.replace("Lisbon", canary)
    db = tmp_path / "incidents.sqlite3"
    h = await harness(
        Turn(content=leak),
        REAL,
        upstream_key=canary,
        proxy_keys=(canary,),
        log_format="json",
        log_level="DEBUG",
        leak_log_level="INFO",
        incidents_db=str(db),
        max_body=4096,
    )
    auth = {"authorization": f"Bearer {canary}"}
    seen: list[str] = []

    def keep(r: httpx.Response) -> None:
        """Keep spillguard's own error responses (the upstream's replies pass as they are:
        this one echoes the model name)."""
        error = r.json().get("error") if r.status_code >= 400 else None
        if isinstance(error, dict) and error.get("code") in OWN_CODES:
            seen.append(r.text + json.dumps(dict(r.headers)))

    async with h.http() as http:
        model = f"gpt-{canary}"
        keep(await http.post("/chat/completions", json=chat_body(model=model), headers=auth))
        h.script(Turn(content=leak), Turn(content=leak))
        for stream in (False, True):
            r = await http.post(
                "/chat/completions", json=chat_body(stream, model=model), headers=auth
            )
            assert r.status_code in (200, 502)
            keep(r)
        h.script(HONEST)
        keep(await http.post("/chat/completions", json=chat_body(stream=True), headers=auth))
        keep(await http.get("/models", headers=auth))
        bad = {"authorization": f"Bearer {canary}x"}
        r = await http.post("/chat/completions", json=chat_body(), headers=bad)
        assert r.status_code == 401
        keep(r)
        r = await http.post("/chat/completions", content=b"x" * 8192, headers=auth)
        assert r.status_code == 413
        keep(r)
        h.script(Raw(500, {"content-type": "application/json"}, [b'{"error": {}}']))
        keep(await http.post("/chat/completions", json=chat_body(), headers=auth))
        await h.upstream.stop()
        r = await http.post("/chat/completions", json=chat_body(), headers=auth)
        assert r.json()["error"]["code"] == "UPSTREAM_UNAVAILABLE"
        keep(r)
    async with httpx.AsyncClient(base_url=h.url.removesuffix("/v1")) as http:
        metrics = (await http.get("/metrics")).text
    assert len(await lines.until(8)) == 8  # the 401 is refused before any route
    await h.proxy.stop()  # flushes the incident record
    h.proxy = None
    lines.read()
    logged = lines.err

    # The key was really in play: clients sent it, the upstream received it.
    assert all(req["headers"]["authorization"] == f"Bearer {canary}" for req in h.upstream.requests)
    assert "[redacted]" in logged  # the echoed key and model name were there to redact
    with sqlite3.connect(db) as conn:
        rows = "\n".join(conn.iterdump())
    assert "INSERT INTO" in rows and "[redacted]" in rows
    for where, text in [("logs", logged), ("metrics", metrics), ("incidents", rows)]:
        assert canary not in text, where
        assert canary[3:] not in text, where
    assert len(seen) == 5  # two leaks, 401, 413, unavailable
    for body in seen:
        assert canary not in body


def test_json_formatter_output_is_one_line() -> None:
    record = _record("request", {"excerpt": "line one\nline two"})
    assert "\n" not in JsonFormatter().format(record)

"""Log lines and request ids through the real server, and the canary: no key anywhere."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http import HTTPStatus
from pathlib import Path
from typing import Any
from unittest import mock

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spillguard.logs import ConsoleFormatter, JsonFormatter, setup_logging
from spillguard.observe import REQUEST, Observer
from spillguard.outcome import Action, Irregularity, Leak, Outcome
from spillguard.redact import Redactor
from spillguard.scripted import Raw, Turn
from spillguard.settings import Settings
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


# ---- the request line ------------------------------------------------------------------------

LOGGER = logging.getLogger("spillguard")


def reference_fields(outcome: Outcome, settings: Settings) -> dict[str, Any]:
    """The request line's fields by their plainest reading: every field of the outcome, then
    its findings (where the leak level is logged) and anomalies."""
    fields: dict[str, Any] = {
        "request_id": outcome.request_id,
        "route": outcome.route,
        "mode": outcome.mode,
        "upstream": outcome.upstream,
        "stream": outcome.stream,
        "model": outcome.model,
        "status": outcome.status,
        "family": outcome.family,
        "tool_name": outcome.tool_name,
        "attempts": outcome.attempts,
        "error": outcome.error,
        "upstream_calls": outcome.upstream_calls,
        "outcome": outcome.action.value,
        "upstream_status": outcome.upstream_statuses[-1] if outcome.upstream_statuses else None,
        "upstream_ms": outcome.upstream_ms,
        "added_ms": round(max(outcome.total_ms - outcome.upstream_ms, 0.0), 2),
        "total_ms": outcome.total_ms,
    }
    if outcome.findings and LOGGER.isEnabledFor(logging.getLevelName(settings.leak_log_level)):
        limit = settings.excerpt_limit
        fields["findings"] = []
        for f in outcome.findings:
            found: dict[str, Any] = {
                "family": f.family,
                "tool_name": f.tool_name,
                "attempt": f.attempt,
                "excerpt": f.excerpt[:limit],
            }
            if f.repaired is not None:
                found["repaired"] = f.repaired[:limit]
            fields["findings"].append(found)
    if outcome.anomalies:
        fields["anomalies"] = [
            {"kind": a.kind, "tool_name": a.tool_name, "attempt": a.attempt}
            for a in outcome.anomalies
        ]
    return fields


@contextmanager
def logged_to(settings: Settings) -> Iterator[io.StringIO]:
    """The spillguard logger set up for these settings, writing to the stream yielded (and as
    it was afterwards); `time.time` stands still, so JSON lines made apart can be compared."""
    handlers, level, propagate = LOGGER.handlers[:], LOGGER.level, LOGGER.propagate
    setup_logging(settings)
    stream = io.StringIO()
    handler = LOGGER.handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(stream)
    try:
        with mock.patch("time.time", return_value=1764600000.123456):
            yield stream
    finally:
        LOGGER.handlers[:], LOGGER.propagate = handlers, propagate
        LOGGER.setLevel(level)


def _taken(stream: io.StringIO) -> str:
    text = stream.getvalue()
    stream.seek(0)
    stream.truncate()
    return text


def _result(run: Callable[[], None], stream: io.StringIO) -> tuple[str, str]:
    try:
        run()
    except Exception as exc:  # values no line can be made of fail either way
        _taken(stream)
        return "error", type(exc).__name__
    return "line", _taken(stream)


class Odd:
    """A value equal to everything: shown or not as its comparisons say."""

    def __eq__(self, other: object) -> bool:
        return True

    def __str__(self) -> str:
        return "odd"


class Text(str):
    pass


TEXT = st.one_of(
    st.sampled_from(
        [
            "",
            "chat",
            "sg-0123456789abcdef0123456789abcdef",
            "gpt-4o-mini",
            "sk-abcdefghij12",
            "Bearer abcdef123456",
            "my-own-proxy-key",
            "bearer",
            'say "hi"\\',
            "two\nlines\t\x00",
            "héllo ſk-abcdefghij1",
        ]
    ),
    st.text(st.characters(codec="ascii"), max_size=12),  # most lines: nothing to redact
    st.text(max_size=12),
)
NUMBER = st.one_of(st.integers(-3, 600), st.integers())
MS = st.one_of(
    st.floats(0, 10_000).map(lambda ms: round(ms, 2)),
    st.sampled_from([-0.0, float("inf"), -float("inf"), float("nan"), 1e308, -1e308]),
    st.floats(),
)
# Of an unusual type: each line is made from the dict, and comes out the same.
ODD = st.sampled_from(
    [HTTPStatus.OK, Action.PASSED, Text("x"), Text(""), b"", 0, 1.5, -0.0, True, [], (), Odd()]
)


def outcomes(odd: bool) -> st.SearchStrategy[Outcome]:
    """Outcomes with values of their usual types - or, with `odd`, of any."""

    def maybe(usual: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(usual, ODD) if odd else usual

    text, optional = maybe(TEXT), maybe(st.none() | TEXT)
    leak = st.builds(
        Leak, TEXT, st.none() | TEXT, st.integers(1, 3), TEXT, repaired=st.none() | TEXT
    )
    irregularity = st.builds(Irregularity, TEXT, st.none() | TEXT, st.integers(1, 3))
    return st.builds(
        Outcome,
        request_id=text,
        route=text,
        mode=text,
        upstream=text,
        stream=maybe(st.booleans()),
        model=optional,
        action=st.sampled_from(Action),
        status=maybe(NUMBER),
        family=optional,
        tool_name=optional,
        attempts=maybe(NUMBER),
        error=optional,
        upstream_ms=maybe(MS),
        total_ms=maybe(MS),
        upstream_calls=maybe(NUMBER),
        upstream_statuses=st.lists(maybe(NUMBER), max_size=3),
        # Mostly none: a line with either is made from the dict.
        findings=st.lists(leak, max_size=2) if odd else st.just([]),
        anomalies=st.lists(irregularity, max_size=2) if odd else st.just([]),
    )


OBSERVERS: dict[tuple[str, str], tuple[Settings, Observer]] = {}


def assert_the_line_of_its_fields(log_format: str, leak_log_level: str, outcome: Outcome) -> None:
    """The outcome's line is the one `Logger.log` writes of its fields."""
    if (log_format, leak_log_level) not in OBSERVERS:
        sets = Settings(
            log_format=log_format,
            log_level="INFO",
            leak_log_level=leak_log_level,
            excerpt_limit=5,
            incidents_db="",
            proxy_keys=["my-own-proxy-key"],
        )
        OBSERVERS[log_format, leak_log_level] = sets, Observer(sets)
    sets, observer = OBSERVERS[log_format, leak_log_level]
    with logged_to(sets) as stream:
        got = _result(lambda: observer._log(outcome), stream)
        level = logging.INFO
        if outcome.findings or outcome.anomalies:
            level = max(logging.getLevelName(leak_log_level), logging.INFO)

        def logged() -> None:
            LOGGER.log(level, "request", extra={"fields": reference_fields(outcome, sets)})

        assert got == _result(logged, stream)
        # Exactly its line, and in JSON one line however many the values hold.
        assert got[0] == "error" or got[1].endswith("\n")
        assert got[0] == "error" or log_format == "console" or got[1].count("\n") == 1


@pytest.mark.parametrize("log_format", ["console", "json"])
@settings(max_examples=600, deadline=None)
@given(
    st.sampled_from(["INFO", "WARNING", "ERROR"]),
    st.one_of(outcomes(odd=False), outcomes(odd=True)),
)
def test_the_request_line_is_the_line_of_its_fields(
    log_format: str, leak_log_level: str, outcome: Outcome
) -> None:
    """Whatever the outcome holds, its line is the one `Logger.log` writes of its fields:
    every line is made from the dict but those of the usual types, made straight."""
    assert_the_line_of_its_fields(log_format, leak_log_level, outcome)


def _edge(**values: Any) -> Outcome:
    outcome = Outcome("sg-1", "chat", "retry", model="m", upstream_ms=0.5, total_ms=1.25)
    outcome.upstream_statuses.append(200)
    for name, value in values.items():
        setattr(outcome, name, value)
    return outcome


INF = float("inf")
EDGES = [
    _edge(),
    _edge(upstream_statuses=[]),
    _edge(upstream_statuses=[500, 0]),
    _edge(model="", error="", family="", tool_name=""),
    _edge(model=None, error="UPSTREAM_UNAVAILABLE", family="hermes", tool_name="f"),
    _edge(status=0, attempts=0, upstream_calls=0, stream=True),
    _edge(request_id="", route=""),
    _edge(upstream_ms=INF),
    _edge(upstream_ms=-INF),
    _edge(total_ms=-INF),
    _edge(total_ms=INF),
    _edge(total_ms=float("nan")),
    _edge(upstream_ms=-1e308, total_ms=1e308),
    _edge(upstream_ms=1e308, total_ms=-1e308),
    _edge(upstream_ms=-0.0, total_ms=-0.0),
    _edge(upstream_ms=1, total_ms=3),
    _edge(upstream_statuses=[HTTPStatus.OK], status=HTTPStatus.BAD_GATEWAY),
    _edge(model=Text("m"), upstream=Text("")),
    _edge(stream=1, attempts=True),
    _edge(upstream_ms=HTTPStatus.OK, total_ms=HTTPStatus.CREATED),
    _edge(model=b"x"),
    _edge(route=HTTPStatus.OK, upstream=b""),
    _edge(error=Odd()),
    _edge(request_id="sk-abcdefghij12", model="my-own-proxy-key", error="Bearer abcdef123456"),
    _edge(model="héllo", tool_name='say "hi"\\\n'),
]


@pytest.mark.parametrize("log_format", ["console", "json"])
@pytest.mark.parametrize("outcome", EDGES)
def test_edge_outcomes_line_as_their_fields(log_format: str, outcome: Outcome) -> None:
    assert_the_line_of_its_fields(log_format, "WARNING", outcome)


@settings(max_examples=300, deadline=None)
@given(outcomes(odd=False))
def test_an_outcome_of_usual_values_is_written_straight(outcome: Outcome) -> None:
    """The lines made straight are the lines of most outcomes: the test above compares them."""
    values = [outcome.request_id, outcome.route, outcome.mode, outcome.upstream]
    up, total = outcome.upstream_ms, outcome.total_ms
    added = max(total - up, 0.0)  # as the line writes it: a negative or -inf difference is 0.0
    finite = all(abs(ms) < float("inf") for ms in (up, total, added))
    assert (REQUEST.json(outcome) is not None) is finite
    assert (REQUEST.console(outcome) is not None) is (finite and all(values))


def test_a_plain_request_line_needs_no_dict(monkeypatch: pytest.MonkeyPatch) -> None:
    outcome = Outcome("r-1", "chat", "retry", model="m", status=200, upstream_calls=1)
    outcome.upstream_statuses.append(200)
    outcome.close()
    # The dict is for `logger.log` and for lines that need it.
    monkeypatch.setattr(REQUEST, "fields", lambda outcome: pytest.fail("the dict was made"))
    lines: dict[str, str] = {}
    for log_format in ("console", "json"):
        sets = Settings(log_format=log_format, log_level="INFO", incidents_db="")
        with logged_to(sets) as stream:
            Observer(sets)._log(outcome)
        lines[log_format] = stream.getvalue()
    assert lines["console"].startswith("info    request request_id=r-1 route=chat mode=retry")
    assert json.loads(lines["json"])["request_id"] == "r-1"


# ---- recording on the loop's next turn -------------------------------------------------------


def _ended(rid: str, **values: Any) -> Outcome:
    outcome = Outcome(rid, "chat", "retry", model="m", status=200, upstream_calls=1, **values)
    outcome.upstream_statuses.append(200)
    return outcome


def _requests_counted(observer: Observer) -> float:
    value = observer.metrics.registry.get_sample_value(
        "spillguard_requests_total",
        {"route": "chat", "mode": "retry", "outcome": "passed", "upstream": "default"},
    )
    return value or 0.0


async def test_outcomes_are_sealed_at_once_and_recorded_together_on_the_next_turn() -> None:
    sets = Settings(log_format="json", log_level="INFO", incidents_db="")
    leak = Leak("hermes", "get_weather", 1, "<tool_call>")
    with logged_to(sets) as stream:
        observer = Observer(sets)
        observer.start()
        ended = [
            _ended("a", action=Action.PASSED),
            _ended("b", action=Action.FAILED, findings=[leak]),
            _ended("c", action=Action.PASSED),
        ]
        for outcome in ended:
            observer.record(outcome)
            assert outcome.recorded and outcome.total_ms >= 0  # its times taken when it ended
        observer.record(ended[0])  # recorded once, however often it is asked
        assert stream.getvalue() == "" and _requests_counted(observer) == 0
        await asyncio.sleep(0)
        lines = [json.loads(line) for line in stream.getvalue().splitlines()]
        observer.close()
    assert [line["request_id"] for line in lines] == ["a", "b", "c"]  # in the order they ended
    assert lines[1]["findings"][0]["family"] == "hermes"
    assert _requests_counted(observer) == 2


async def test_flush_and_close_record_what_waits() -> None:
    sets = Settings(log_format="json", log_level="INFO", incidents_db="")
    with logged_to(sets) as stream:
        observer = Observer(sets)
        observer.start()
        observer.record(_ended("a", action=Action.PASSED))
        observer.flush()
        assert [json.loads(line)["request_id"] for line in stream.getvalue().splitlines()] == ["a"]
        observer.record(_ended("b", action=Action.PASSED))
        observer.drain()  # at shutdown, before the loop's next turn
        observer.record(_ended("c", action=Action.PASSED))  # drained: at once
        got = [json.loads(line)["request_id"] for line in stream.getvalue().splitlines()]
        await asyncio.sleep(0)  # the turn asked for before `drain` finds nothing left
        again = [json.loads(line)["request_id"] for line in stream.getvalue().splitlines()]
        observer.close()
    assert got == again == ["a", "b", "c"]
    assert _requests_counted(observer) == 3


@pytest.mark.parametrize("then", ["close", "record"])
def test_outcomes_left_on_a_loop_closed_before_their_turn_are_recorded(then: str) -> None:
    """By `close` at shutdown, or with the next outcome recorded."""
    sets = Settings(log_format="json", log_level="INFO", incidents_db="")
    loop = asyncio.new_event_loop()
    with logged_to(sets) as stream:
        observer = Observer(sets)
        loop.run_until_complete(_started(observer))
        observer.record(_ended("a", action=Action.PASSED))  # waits for a turn
        assert stream.getvalue() == ""
        loop.close()  # that never comes
        if then == "close":
            observer.close()
        else:
            observer.record(_ended("b", action=Action.PASSED))
        ids = [json.loads(line)["request_id"] for line in stream.getvalue().splitlines()]
    assert ids == (["a"] if then == "close" else ["a", "b"])
    assert _requests_counted(observer) == len(ids)


async def _started(observer: Observer) -> None:
    observer.start()


def test_outcomes_are_recorded_at_once_off_the_loop_and_after_it_has_closed() -> None:
    sets = Settings(log_format="json", log_level="INFO", incidents_db="")

    async def started() -> Observer:
        observer = Observer(sets)
        await _started(observer)
        return observer

    with logged_to(sets) as stream:
        never = Observer(sets)  # never started: no loop to wait for
        never.record(_ended("a", action=Action.PASSED))
        assert json.loads(stream.getvalue())["request_id"] == "a"
        gone = asyncio.run(started())  # its loop is closed now
        gone.record(_ended("b", action=Action.PASSED))
        gone.record(_ended("c", action=Action.PASSED))
        ids = [json.loads(line)["request_id"] for line in stream.getvalue().splitlines()]
    assert ids == ["a", "b", "c"]
    assert _requests_counted(gone) == 2


async def test_a_failing_part_skips_no_other_outcome(monkeypatch: pytest.MonkeyPatch) -> None:
    sets = Settings(log_format="json", log_level="INFO", incidents_db="")
    with logged_to(sets) as stream:
        observer = Observer(sets)
        observer.start()
        observe = observer.metrics.observe

        def failing(outcome: Outcome) -> None:
            if outcome.request_id == "b":
                raise RuntimeError("boom")
            observe(outcome)

        observer._parts = (failing,)
        for rid in "abc":
            observer.record(_ended(rid, action=Action.PASSED))
        await asyncio.sleep(0)
        lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line.get("request_id") for line in lines] == ["a", "b", "c", "b"]
    assert lines[3]["msg"] == "outcome not fully recorded"
    assert _requests_counted(observer) == 2

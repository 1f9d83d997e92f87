"""The incident record: every finding lands in SQLite through the real server, a broken database
never fails a request, and `spillguard incidents` lists, filters, exports and counts - from a
SQLite file and from PostgreSQL alike (tests/test_incident_postgres.py has the fleet's cases)."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import logging
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from spillguard.cli import main
from spillguard.incident_query import parse_since
from spillguard.incident_sqlite import SCHEMA, SqliteStore
from spillguard.incident_store import COLUMNS, open_store
from spillguard.incidents import IncidentWriter, iso, rows_for
from spillguard.outcome import Outcome
from spillguard.scripted import Turn, call
from spillguard.usage import Usage
from tests.conftest import chat_body
from tests.pgserver import Server, database

pytest_plugins = ["tests.pg_fixtures"]  # its PostgreSQL fixtures

HERMES = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lisbon"}}\n</tool_call>'
DSML = (
    '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
    '<｜DSML｜parameter name="city" string="true">Lisbon</｜DSML｜parameter>\n'
    "</｜DSML｜invoke>\n</｜DSML｜function_calls>"
)
REAL = Turn(tool_calls=[call("get_weather", {"city": "Lisbon"})])


def rows(db: Path) -> list[dict[str, Any]]:
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute("SELECT * FROM incidents ORDER BY id")]


class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def attach(self) -> None:
        """(Again:) a server's start sets the logger's handlers up afresh."""
        logger = logging.getLogger("spillguard")
        if self not in logger.handlers:
            logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def messages(self) -> list[str]:
        return [r.getMessage() for r in self.records]


@pytest.fixture
def captured() -> Iterator[Captured]:
    """The "spillguard" logger's records (added after the server set its own handler up)."""
    handler = Captured()
    handler.attach()
    yield handler
    logging.getLogger("spillguard").removeHandler(handler)


# ---- through the server ----------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_every_field_lands(harness: Any, tmp_path: Path, stream: bool) -> None:
    db = tmp_path / "incidents.sqlite3"
    h = await harness(Turn(content=HERMES), REAL, incidents_db=str(db))
    before = datetime.now(UTC)
    async with h.http() as http:
        body = chat_body(stream=stream, model="deepseek-chat")
        r = await http.post("/chat/completions", json=body, headers={"x-request-id": "inc-1"})
    assert r.status_code == 200
    await h.proxy.stop()  # shutdown writes what is queued
    h.proxy = None
    [row] = rows(db)
    when = datetime.fromisoformat(row["time"])
    assert when.tzinfo is not None and before - timedelta(seconds=1) <= when
    assert row["request_id"] == "inc-1"
    assert row["route"] == "chat"
    assert row["mode"] == "retry"
    assert row["model"] == "deepseek-chat"
    assert row["family"] == "hermes"
    assert row["tool_name"] == "get_weather"
    assert row["action"] == "retried"
    assert row["attempt"] == 1
    assert row["excerpt"] == HERMES
    assert row["excerpt_chars"] == len(HERMES)
    # What the leaked attempt cost, as its reply said (a stream says only when asked to).
    tokens = (row["input_tokens"], row["output_tokens"])
    assert tokens == ((None, None) if stream else (10, 5))
    assert row["repaired_calls"] is None
    assert row["upstream"] == "default"


async def test_a_stream_asked_for_usage_records_its_cost(harness: Any, tmp_path: Path) -> None:
    db = tmp_path / "incidents.sqlite3"
    h = await harness(Turn(content=HERMES), REAL, incidents_db=str(db))
    body = chat_body(stream=True) | {"stream_options": {"include_usage": True}}
    async with h.http() as http:
        assert (await http.post("/chat/completions", json=body)).status_code == 200
    await h.proxy.stop()
    h.proxy = None
    [row] = rows(db)
    assert (row["input_tokens"], row["output_tokens"]) == (10, 5)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_repair_records_the_calls_it_made(
    harness: Any, tmp_path: Path, stream: bool
) -> None:
    db = tmp_path / "incidents.sqlite3"
    h = await harness(Turn(content=HERMES), mode="repair", incidents_db=str(db))
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body(stream=stream))
    assert r.status_code == 200
    await h.proxy.stop()
    h.proxy = None
    [row] = rows(db)
    assert (row["action"], row["attempt"], row["family"]) == ("repaired", 1, "hermes")
    assert json.loads(row["repaired_calls"]) == [
        {"name": "get_weather", "arguments": {"city": "Lisbon"}}
    ]
    assert row["excerpt"] == HERMES  # beside the text it was made of


async def test_double_leak_records_both_attempts(harness: Any, tmp_path: Path) -> None:
    db = tmp_path / "incidents.sqlite3"
    h = await harness(Turn(content=DSML), Turn(content=HERMES), incidents_db=str(db))
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body())
    assert r.status_code == 502
    await h.proxy.stop()
    h.proxy = None
    got = [(r["family"], r["attempt"], r["action"]) for r in rows(db)]
    assert got == [("dsml", 1, "failed"), ("hermes", 2, "failed")]
    assert {r["request_id"] for r in rows(db)} == {r.headers["x-request-id"]}


@pytest.mark.parametrize("mode", ["observe", "fail"])
async def test_action_follows_the_mode(harness: Any, tmp_path: Path, mode: str) -> None:
    db = tmp_path / "incidents.sqlite3"
    h = await harness(Turn(content=HERMES), mode=mode, incidents_db=str(db))
    async with h.http() as http:
        await http.post("/chat/completions", json=chat_body())
    await h.proxy.stop()
    h.proxy = None
    [row] = rows(db)
    assert (row["mode"], row["action"]) == (mode, {"observe": "observed", "fail": "failed"}[mode])


async def test_excerpt_is_cut_to_the_limit(harness: Any, tmp_path: Path) -> None:
    db = tmp_path / "incidents.sqlite3"
    h = await harness(Turn(content=HERMES), REAL, incidents_db=str(db), incident_excerpt_limit=10)
    async with h.http() as http:
        await http.post("/chat/completions", json=chat_body())
    await h.proxy.stop()
    h.proxy = None
    [row] = rows(db)
    assert row["excerpt"] == HERMES[:10]
    assert row["excerpt_chars"] == len(HERMES)


async def test_clean_requests_record_nothing(harness: Any, tmp_path: Path) -> None:
    db = tmp_path / "incidents.sqlite3"
    h = await harness(Turn(content="Sunny."), incidents_db=str(db))
    async with h.http() as http:
        await http.post("/chat/completions", json=chat_body())
    await h.proxy.stop()
    h.proxy = None
    assert not db.exists()  # opened on the first incident


async def test_empty_path_disables_the_record(
    harness: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    h = await harness(Turn(content=HERMES), REAL, incidents_db="")
    async with h.http() as http:
        assert (await http.post("/chat/completions", json=chat_body())).status_code == 200
    await h.proxy.stop()
    h.proxy = None
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where", ["directory", "proc"])
async def test_unwritable_database_never_fails_a_request(
    harness: Any, tmp_path: Path, captured: Captured, where: str
) -> None:
    path = str(tmp_path) if where == "directory" else "/proc/spillguard-nope/incidents.sqlite3"
    h = await harness(Turn(content=HERMES), mode="observe", incidents_db=path)
    captured.attach()
    async with h.http() as http:
        for _ in range(6):  # an incident each
            r = await http.post("/chat/completions", json=chat_body())
            assert r.status_code == 200
            assert r.headers["x-spillguard-action"] == "observed"
    await h.proxy.stop()
    h.proxy = None
    messages = captured.messages()
    assert "incident record unavailable: incidents dropped" in messages
    # Said when it first failed, and how often since in one line at shutdown: not per request.
    said = "cannot open the incident database"
    unopened = [r for r in captured.records if r.getMessage() == said]
    assert 1 <= len(unopened) <= 2
    assert unopened[0].fields["failures"] == 1  # type: ignore[attr-defined]
    dropped = [r for r in captured.records if r.getMessage().endswith("incidents dropped")]
    assert sum(r.fields["dropped"] for r in dropped) == 6  # type: ignore[attr-defined]


async def test_failing_writes_never_fail_a_request(
    harness: Any, tmp_path: Path, captured: Captured
) -> None:
    """A database that refuses every insert, as a full disk would."""
    db = tmp_path / "full.sqlite3"
    with sqlite3.connect(db) as conn:
        conn.executescript(SCHEMA)
        conn.execute(
            "CREATE TRIGGER full BEFORE INSERT ON incidents "
            "BEGIN SELECT RAISE(FAIL, 'database or disk is full'); END"
        )
    h = await harness(Turn(content=HERMES), REAL, incidents_db=str(db))
    captured.attach()
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body())
    assert r.status_code == 200
    await h.proxy.stop()
    h.proxy = None
    [record] = [r for r in captured.records if "dropped" in r.getMessage()]
    fields = record.fields  # type: ignore[attr-defined]
    assert fields["dropped"] == 1 and "full" in fields["error"]
    assert rows(db) == []


# ---- the writer on its own -------------------------------------------------------------------


def outcome(rid: str = "r", findings: int = 1) -> Outcome:
    o = Outcome(request_id=rid, route="chat", mode="retry", model="m", action="retried")
    for i in range(findings):
        o.finding("hermes", "get_weather", i + 1, HERMES)
    return o


def test_a_full_queue_drops_with_a_log_line_and_never_blocks(
    tmp_path: Path, captured: Captured
) -> None:
    store = SqliteStore(str(tmp_path / "q.sqlite3"))
    writer = IncidentWriter(store, 100, queue_size=1)  # not started
    writer.submit(outcome("first"))
    writer.submit(outcome("second"))  # the queue is full: dropped at once
    writer.submit(outcome("third"))  # dropped too, said once in a while only
    [record] = [r for r in captured.records if r.getMessage().startswith("incident queue full")]
    assert record.fields == {"dropped": 1, "request_id": "second"}  # type: ignore[attr-defined]
    writer.start()
    writer.close()
    assert [r["request_id"] for r in rows(tmp_path / "q.sqlite3")] == ["first"]


def test_writer_batches_and_closes(tmp_path: Path) -> None:
    db = tmp_path / "w.sqlite3"
    writer = IncidentWriter(SqliteStore(str(db)), 5, clean=lambda s: s.replace("Lisbon", "X"))
    writer.start()
    for i in range(50):
        writer.submit(outcome(f"r{i}", findings=2))
    writer.close()
    got = rows(db)
    assert len(got) == 100 and writer.written == 100
    assert got[0]["excerpt"] == HERMES[:5]
    assert [r["attempt"] for r in got[:2]] == [1, 2]
    writer.close()  # twice is fine


async def test_submit_from_the_loop_does_not_wait_for_the_disk(tmp_path: Path) -> None:
    """The writer thread is busy (held on a lock the test owns); submit still returns."""
    db = tmp_path / "slow.sqlite3"
    writer = IncidentWriter(SqliteStore(str(db)), 100)
    held = sqlite3.connect(db, isolation_level=None)
    held.executescript(SCHEMA)
    held.execute("BEGIN EXCLUSIVE")
    writer.start()
    try:
        for i in range(20):
            writer.submit(outcome(f"r{i}"))
        await asyncio.sleep(0)  # the loop is free; nothing was written yet
        assert writer.written == 0
    finally:
        held.execute("COMMIT")
        held.close()
    writer.close()
    assert len(rows(db)) == 20


# ---- the command -----------------------------------------------------------------------------

NOW = datetime.now(UTC)


STORES = ["sqlite", "postgres"]


def target_for(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty store of the test's kind: a SQLite file's path, or a fresh database's URL."""
    if request.param == "sqlite":
        yield str(tmp_path / "incidents.sqlite3")
    else:
        server: Server = request.getfixturevalue("postgres")
        yield from database(server)


@pytest.fixture(params=STORES)
def empty(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from target_for(request, tmp_path)


# What some of the leaked attempts cost (the others' replies did not say).
COST = {("r2", 1): Usage(1200, 80), ("r4", 1): Usage(900, 60), ("r4", 2): Usage(950, 70)}


@pytest.fixture(params=STORES)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store holding five incidents of four requests, written as the writer writes them."""
    data = [
        (NOW - timedelta(days=3), "r1", "deepseek-chat", "deepseek", "get_weather", "failed", 1),
        (NOW - timedelta(hours=5), "r2", "deepseek-chat", "dsml", "get_weather", "retried", 1),
        (NOW - timedelta(hours=2), "r3", "grok-4", "xai", "run_in_terminal", "retried", 1),
        (NOW - timedelta(minutes=5), "r4", "deepseek-chat", "dsml", None, "failed", 1),
        (NOW - timedelta(minutes=5), "r4", "deepseek-chat", "dsml", None, "failed", 2),
    ]
    for target in target_for(request, tmp_path):
        store = open_store(target)
        rows = []
        for when, rid, model, family, tool, action, attempt in data:
            o = Outcome(request_id=rid, route="chat", mode="retry", model=model, action=action)
            o.finding(family, tool, attempt, f"<leak {rid}>\nline, two", COST.get((rid, attempt)))
            rows += rows_for(o, 100, str, iso(when))
        store.open()
        store.write(rows)
        store.close()
        yield target


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["incidents", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_list_table(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--db", db)
    assert code == 0
    header, *lines = out.splitlines()
    assert header.split() == list(COLUMNS)
    assert len(lines) == 5
    assert "r1" in lines[0] and "r4" in lines[-1]  # oldest first
    assert "<leak r1>\\nline, two" in lines[0]  # one line per incident
    # The tokens when the leaked attempt's reply said them (no repair; the default upstream).
    assert lines[0].split()[-2:] == ["leak", "default"]
    assert lines[1].split()[-4:] == ["leak", "1200", "80", "default"]


def test_list_is_the_default_action(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "list", "--db", db) == run(capsys, "--db", db)


def test_jsonl_export_has_every_field(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--db", db, "--format", "jsonl")
    got = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(got) == 5
    assert list(got[0]) == list(COLUMNS)
    assert got[1]["request_id"] == "r2" and got[1]["family"] == "dsml"
    assert got[0]["excerpt"] == "<leak r1>\nline, two"
    assert got[3]["tool_name"] is None


def test_csv_export(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--db", db, "--format", "csv", "--family", "dsml")
    got = list(csv.DictReader(io.StringIO(out)))
    assert code == 0
    assert [r["request_id"] for r in got] == ["r2", "r4", "r4"]
    assert [r["attempt"] for r in got] == ["1", "1", "2"]
    assert got[0]["excerpt"] == "<leak r2>\nline, two"
    assert set(got[0]) == set(COLUMNS)


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (["--model", "grok-4"], ["r3"]),
        (["--family", "deepseek"], ["r1"]),
        (["--since", "1h"], ["r4", "r4"]),
        (["--since", "1d"], ["r2", "r3", "r4", "r4"]),
        (["--since", (NOW - timedelta(days=4)).date().isoformat()], ["r1", "r2", "r3", "r4", "r4"]),
        (["--since", iso(NOW - timedelta(hours=3))], ["r3", "r4", "r4"]),
        (["--since", "1d", "--model", "deepseek-chat", "--family", "dsml"], ["r2", "r4", "r4"]),
        (["--limit", "2"], ["r4", "r4"]),
        (["--limit", "0"], ["r1", "r2", "r3", "r4", "r4"]),
        (["--model", "nobody"], []),
    ],
)
def test_filters(
    db: str, capsys: pytest.CaptureFixture[str], args: list[str], want: list[str]
) -> None:
    code, out, _ = run(capsys, "--db", db, "--format", "jsonl", *args)
    assert code == 0
    assert [json.loads(line)["request_id"] for line in out.splitlines()] == want


def test_table_shows_the_last_50_by_default(empty: str, capsys: pytest.CaptureFixture[str]) -> None:
    db = empty
    writer = IncidentWriter(open_store(db), 100)
    writer.start()
    for i in range(60):
        writer.submit(outcome(f"r{i}"))
    writer.close()
    _, out, _ = run(capsys, "--db", db)
    assert len(out.splitlines()) == 51
    _, out, _ = run(capsys, "--db", db, "--format", "jsonl")
    assert len(out.splitlines()) == 60


def test_stats(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "stats", "--db", db, "--format", "jsonl")
    got = [json.loads(line) for line in out.splitlines()]
    assert code == 0
    counts = [(r["model"], r["family"], r["incidents"], r["requests"]) for r in got]
    assert counts == [
        ("deepseek-chat", "dsml", 3, 2),
        ("deepseek-chat", "deepseek", 1, 1),
        ("grok-4", "xai", 1, 1),
    ]
    # The leaked attempts' tokens, summed over the rows whose reply said what it cost.
    assert [(r["input_tokens"], r["output_tokens"]) for r in got] == [
        (1200 + 900 + 950, 80 + 60 + 70),
        (None, None),
        (None, None),
    ]
    code, out, _ = run(capsys, "stats", "--db", db)
    assert out.splitlines()[0].split() == [
        *("model", "kind", "family", "incidents", "requests"),
        *("input_tokens", "output_tokens", "first", "last"),
    ]
    assert out.splitlines()[1].split()[:7] == [
        *("deepseek-chat", "leak", "dsml", "3", "2", "3050", "210"),
    ]
    # No cost known: the token cells are empty.
    assert out.splitlines()[2].split()[3:6] == ["1", "1", iso(NOW - timedelta(days=3))]
    assert out.splitlines()[-1] == "5 incidents"
    code, out, _ = run(capsys, "stats", "--db", db, "--since", "1d", "--format", "csv")
    got = list(csv.DictReader(io.StringIO(out)))
    assert [(r["model"], r["family"], r["incidents"], r["input_tokens"]) for r in got] == [
        ("deepseek-chat", "dsml", "3", "3050"),
        ("grok-4", "xai", "1", ""),
    ]


def test_empty_results(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "--db", db, "--model", "nobody") == (0, "no incidents\n", "")
    assert run(capsys, "stats", "--db", db, "--model", "nobody")[1] == "no incidents\n"


def test_errors(tmp_path: Path, db: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--db", str(tmp_path / "missing.sqlite3"))
    assert code == 1 and "no incident database" in err
    assert not (tmp_path / "missing.sqlite3").exists()  # reading never creates it
    junk = tmp_path / "junk.sqlite3"
    junk.write_text("not a database")
    code, _, err = run(capsys, "--db", str(junk))
    assert code == 1 and "cannot read" in err
    code, _, err = run(capsys, "--db", db, "--since", "yesterday")
    assert code == 2 and "--since" in err
    code, _, err = run(capsys, "--db", "")
    assert code == 2 and "disabled" in err


def test_db_defaults_to_the_setting(
    db: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPILLGUARD_INCIDENTS_DB", db)
    code, out, _ = run(capsys, "--format", "jsonl")
    assert code == 0 and len(out.splitlines()) == 5


def test_database_without_the_table_is_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.sqlite3"
    sqlite3.connect(empty).close()
    assert run(capsys, "--db", str(empty)) == (0, "no incidents\n", "")


async def test_end_to_end_from_server_to_command(
    harness: Any, empty: str, capsys: pytest.CaptureFixture[str]
) -> None:
    h = await harness(Turn(content=HERMES), REAL, incidents_db=empty)
    async with h.http() as http:
        await http.post("/chat/completions", json=chat_body(), headers={"x-request-id": "e2e"})
    await h.proxy.stop()
    h.proxy = None
    capsys.readouterr()
    code, out, _ = run(capsys, "--db", empty, "--format", "jsonl", "--since", "1h")
    [got] = [json.loads(line) for line in out.splitlines()]
    assert code == 0
    assert (got["request_id"], got["family"], got["action"]) == ("e2e", "hermes", "retried")
    assert list(got) == list(COLUMNS)  # the writer's own `uid` is not shown


def test_parse_since() -> None:
    now = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
    assert parse_since("90m", now) == "2025-05-01T10:30:00.000+00:00"
    assert parse_since("2d", now) == "2025-04-29T12:00:00.000+00:00"
    assert parse_since("1w", now) == "2025-04-24T12:00:00.000+00:00"
    assert parse_since("2025-04-30", now) == "2025-04-30T00:00:00.000+00:00"
    assert parse_since("2025-04-30T10:00:00+02:00", now) == "2025-04-30T08:00:00.000+00:00"
    assert parse_since("2025-04-30T10:00:00Z", now) == "2025-04-30T10:00:00.000+00:00"
    with pytest.raises(ValueError):
        parse_since("soon", now)

"""Both incident stores, side by side on real databases: the same table, migrations from older
files, a batch sent twice stored once, text either would refuse made storable, and a URL's
password in no message."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest

from spillguard.incident_postgres import PostgresStore, shown
from spillguard.incident_query import Filters, incident_stats, read_incidents
from spillguard.incident_sqlite import SqliteStore
from spillguard.incident_store import (
    COLUMNS,
    VERSION,
    Incident,
    IncidentStore,
    StoreUnavailable,
    open_store,
)
from spillguard.incidents import now_iso, rows_for
from spillguard.outcome import Action, Irregularity, Outcome
from spillguard.usage import Usage
from tests.pgserver import Server, database

pytest_plugins = ["tests.pg_fixtures"]  # its PostgreSQL fixtures

HERMES = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lisbon"}}\n</tool_call>'


NO_COST = dict(input_tokens=None, output_tokens=None, repaired_calls=None)


def leak(rid: str = "r", excerpt: str = HERMES, usage: Usage | None = None) -> list[Incident]:
    o = Outcome(request_id=rid, route="chat", mode="retry", model="m", action="retried")
    o.finding("hermes", "get_weather", 1, excerpt, usage)
    return rows_for(o, 4000, str, now_iso())


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[IncidentStore]:
    if request.param == "sqlite":
        made: IncidentStore = SqliteStore(str(tmp_path / "incidents.sqlite3"))
        yield made
        made.close()
        return
    server: Server = request.getfixturevalue("postgres")
    for url in database(server):
        made = PostgresStore(url)
        yield made
        made.close()


def test_the_target_chooses_the_store(tmp_path: Path) -> None:
    assert isinstance(open_store(str(tmp_path / "x.sqlite3")), SqliteStore)
    assert isinstance(open_store("postgresql://u@db.internal/incidents"), PostgresStore)
    assert isinstance(open_store("postgres://u@db.internal/incidents"), PostgresStore)
    assert isinstance(open_store("POSTGRESQL://u@db.internal/incidents"), PostgresStore)


def test_both_stores_hold_the_same_table(tmp_path: Path, pg_url: str) -> None:
    lite = SqliteStore(str(tmp_path / "x.sqlite3"))
    lite.open()
    lite.close()
    with sqlite3.connect(tmp_path / "x.sqlite3") as db:
        mine = [(r[1], bool(r[3])) for r in db.execute("PRAGMA table_info(incidents)")]
    pg = PostgresStore(pg_url)
    pg.open()
    pg.close()
    with psycopg.connect(pg_url) as db:
        theirs = [
            (name, nullable == "NO")
            for name, nullable in db.execute(
                "SELECT column_name, is_nullable FROM information_schema.columns"
                " WHERE table_name = 'incidents' ORDER BY ordinal_position"
            )
        ]
    # The key is NOT NULL in both (SQLite's INTEGER PRIMARY KEY does not say so).
    assert [(n, nn or n == "id") for n, nn in mine] == theirs


def test_writes_read_back_in_order(store: IncidentStore) -> None:
    store.open()
    store.write(leak("one") + leak("two"))
    got = read_incidents(store, Filters())
    assert [r["request_id"] for r in got] == ["one", "two"]
    assert list(got[0]) == list(COLUMNS)
    assert got[0]["excerpt"] == HERMES and got[0]["kind"] == "leak"


CALLS = '[{"name":"get_weather","arguments":{"city":"Lisbon"}}]'  # as Outcome.repaired writes


def test_what_leaks_cost_and_repairs_made_are_kept(store: IncidentStore) -> None:
    billed = Outcome(request_id="billed", route="chat", mode="retry", model="m", action="failed")
    billed.finding("hermes", "get_weather", 1, HERMES, Usage(812, 64))
    billed.finding("hermes", "get_weather", 2, HERMES)  # this reply did not say
    fixed = Outcome(request_id="fixed", route="responses", mode="repair", model="m")
    fixed.act(Action.REPAIRED)
    fixed.upstream = "eu"
    fixed.finding("hermes", "get_weather", 1, HERMES, Usage(500, 40))
    fixed.findings[0] = replace(fixed.findings[0], repaired=CALLS)
    odd = Outcome(request_id="odd", route="chat", mode="retry", model="m", action="passed")
    odd.anomalies.append(Irregularity("undeclared_tool", "rm", 1))
    store.open()
    store.write([row for o in (billed, fixed, odd) for row in rows_for(o, 4000, str, now_iso())])
    fields = ("request_id", "kind", "input_tokens", "output_tokens", "repaired_calls", "upstream")
    got = [tuple(r[c] for c in (*fields, "action")) for r in read_incidents(store, Filters())]
    assert got == [
        ("billed", "leak", 812, 64, None, "default", "failed"),
        ("billed", "leak", None, None, None, "default", "failed"),
        ("fixed", "leak", 500, 40, CALLS, "eu", "repaired"),
        ("odd", "undeclared_tool", None, None, None, "default", "passed"),
    ]
    stats = [
        (r["kind"], r["incidents"], r["requests"], r["input_tokens"], r["output_tokens"])
        for r in incident_stats(store, Filters())
    ]
    # The repaired attempt's tokens reached the client as calls: no leaked cost.
    assert stats == [("leak", 3, 2, 812, 64), ("undeclared_tool", 1, 1, None, None)]


def test_a_batch_sent_twice_is_stored_once(store: IncidentStore) -> None:
    """What the writer does when a commit's acknowledgement was lost: it sends the batch again."""
    store.open()
    batch = leak("once") + leak("also")
    store.write(batch)
    store.write(batch)
    store.write(batch[:1] + leak("new"))
    assert [r["request_id"] for r in read_incidents(store, Filters())] == ["once", "also", "new"]


def test_text_neither_store_would_take_is_made_storable(store: IncidentStore) -> None:
    store.open()
    store.write(leak("nul", "before\x00after") + leak("half", "a lone \ud800 surrogate"))
    got = {r["request_id"]: r["excerpt"] for r in read_incidents(store, Filters())}
    assert got == {"nul": "before\ufffdafter", "half": "a lone ? surrogate"}


def test_reading_an_empty_store_finds_nothing_and_creates_nothing(
    tmp_path: Path, pg_url: str
) -> None:
    assert read_incidents(pg_url, Filters()) == []
    with psycopg.connect(pg_url) as db:
        assert db.execute("SELECT to_regclass('incidents')").fetchone() == (None,)
    empty = tmp_path / "empty.sqlite3"
    sqlite3.connect(empty).close()
    assert read_incidents(str(empty), Filters()) == []


# ---- migrations --------------------------------------------------------------------------------

# Every table, made fresh or migrated, in this column order (a migration appends).
LAYOUT = [
    *("id", "time", "request_id", "route", "mode", "model", "family", "tool_name", "action"),
    *("attempt", "excerpt", "excerpt_chars", "kind", "uid", "input_tokens", "output_tokens"),
    *("repaired_calls", "upstream"),
]
# The table as spillguard 1 made it (in SQLite's words: PostgreSQL's key is spelled apart).
V1 = """CREATE TABLE incidents (id INTEGER PRIMARY KEY, time TEXT NOT NULL,
    request_id TEXT NOT NULL, route TEXT NOT NULL, mode TEXT NOT NULL, model TEXT,
    family TEXT NOT NULL, tool_name TEXT, action TEXT NOT NULL, attempt INTEGER NOT NULL,
    excerpt TEXT NOT NULL, excerpt_chars INTEGER NOT NULL)"""
LATER = {
    2: ["ALTER TABLE incidents ADD COLUMN kind TEXT NOT NULL DEFAULT 'leak'"],
    3: [
        "ALTER TABLE incidents ADD COLUMN uid TEXT",
        "CREATE INDEX incidents_time ON incidents (time)",
        "CREATE UNIQUE INDEX incidents_uid ON incidents (uid)",
    ],
}
OLD = dict(
    time="2025-01-01T00:00:00.000+00:00",
    request_id="old",
    route="chat",
    mode="retry",
    model="m",
    family="xai",
    tool_name=None,
    action="failed",
    attempt=1,
    excerpt="<old>",
    excerpt_chars=5,
)


def old_table(version: int, run: Any, key: str = "INTEGER PRIMARY KEY", mark: str = "?") -> None:
    """The table as spillguard `version` made it, holding one row it wrote."""
    run(V1.replace("INTEGER PRIMARY KEY", key))
    for later in range(2, version + 1):
        for statement in LATER[later]:
            run(statement)
    row = dict(OLD) | ({"uid": "0" * 32} if version >= 3 else {})
    run(f"INSERT INTO incidents ({', '.join(row)}) VALUES ({', '.join(mark for _ in row)})", row)


def layout(store: IncidentStore) -> list[str]:
    if isinstance(store, SqliteStore):
        with sqlite3.connect(store.path) as db:
            return [r[1] for r in db.execute("PRAGMA table_info(incidents)")]
    assert isinstance(store, PostgresStore)
    with psycopg.connect(store.url) as db:
        return [
            name
            for (name,) in db.execute(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_name = 'incidents' ORDER BY ordinal_position"
            )
        ]


def made_by(version: int, store: IncidentStore) -> None:
    if isinstance(store, SqliteStore):
        with sqlite3.connect(store.path) as db:
            old_table(version, lambda q, a=(): db.execute(q, tuple(a.values()) if a else ()))
            db.execute(f"PRAGMA user_version = {version if version > 1 else 0}")
        return
    assert isinstance(store, PostgresStore)
    with psycopg.connect(store.url) as pg:
        key = "BIGSERIAL PRIMARY KEY"
        old_table(version, lambda q, a=(): pg.execute(q, tuple(a.values()) if a else ()), key, "%s")


def test_a_fresh_table_has_the_layout(store: IncidentStore) -> None:
    store.open()
    store.close()
    assert layout(store) == LAYOUT


@pytest.mark.parametrize("version", [1, 2, 3])
def test_tables_of_older_versions_are_read_then_migrated(
    store: IncidentStore, version: int
) -> None:
    made_by(version, store)
    before = read_incidents(store, Filters())  # read as it is, before any migration
    assert before == [OLD | dict(kind="leak", **NO_COST, upstream=None)]
    [stats] = incident_stats(store, Filters())
    assert (stats["incidents"], stats["input_tokens"], stats["output_tokens"]) == (1, None, None)
    store.open()
    batch = leak("new", usage=Usage(120, 30))
    store.write(batch)
    store.write(batch)  # sent twice, stored once: `uid` is there and unique
    store.close()
    assert layout(store) == LAYOUT
    if isinstance(store, SqliteStore):
        with sqlite3.connect(store.path) as db:
            assert db.execute("PRAGMA user_version").fetchone() == (VERSION,)
    after = read_incidents(store, Filters())
    assert after[0] == before[0]
    assert [r["request_id"] for r in after] == ["old", "new"]
    assert (after[1]["input_tokens"], after[1]["output_tokens"]) == (120, 30)
    stats = [
        (r["family"], r["incidents"], r["input_tokens"], r["output_tokens"])
        for r in incident_stats(store, Filters())
    ]
    assert stats == [("hermes", 1, 120, 30), ("xai", 1, None, None)]  # the old row's cost unknown


def test_a_newer_table_is_left_as_it_is(tmp_path: Path) -> None:
    """A file a later spillguard migrated further (a column this one does not know): opened
    and written without a change to its table."""
    path = str(tmp_path / "newer.sqlite3")
    SqliteStore(path).open()
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE incidents ADD COLUMN later TEXT")
        db.execute(f"PRAGMA user_version = {VERSION + 1}")
    store = SqliteStore(path)
    store.open()
    store.write(leak("now"))
    store.close()
    assert layout(store) == [*LAYOUT, "later"]
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (VERSION + 1,)
    assert [r["request_id"] for r in read_incidents(path, Filters())] == ["now"]


def test_replicas_starting_together_create_the_table_once(pg_url: str) -> None:
    stores = [PostgresStore(pg_url) for _ in range(6)]
    errors: list[BaseException] = []
    go = threading.Barrier(len(stores))

    def start(store: PostgresStore) -> None:
        go.wait()
        try:
            store.open()
            store.write(leak(f"r{stores.index(store)}"))
        except BaseException as exc:
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=start, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(read_incidents(pg_url, Filters())) == len(stores)


# ---- what may be shown -------------------------------------------------------------------------


def test_a_url_is_shown_without_its_password() -> None:
    url = "postgresql://spill:s3cret-pass@db.internal:6432/incidents?sslmode=require"
    assert shown(url) == "postgresql://spill@db.internal:6432/incidents"
    assert "s3cret" not in shown("postgresql://u@h/db?password=s3cret-pass")


def test_a_refused_connection_names_no_password(postgres: Server) -> None:
    url = postgres.url(user="nobody", password="s3cret-pass")
    store = PostgresStore(url)
    with pytest.raises(StoreUnavailable) as caught:
        store.open()
    assert "nobody" in str(caught.value) and "s3cret-pass" not in str(caught.value)

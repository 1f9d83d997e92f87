"""Both incident stores, side by side on real databases: the same table, migrations from older
files, a batch sent twice stored once, text either would refuse made storable, and a URL's
password in no message."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from spillguard.incident_postgres import PostgresStore, shown
from spillguard.incident_query import Filters, read_incidents
from spillguard.incident_sqlite import SqliteStore
from spillguard.incident_store import (
    COLUMNS,
    VERSION,
    WRITTEN,
    IncidentStore,
    StoreUnavailable,
    open_store,
)
from spillguard.incidents import now_iso, rows_for
from spillguard.outcome import Outcome
from tests.pgserver import Server, database

pytest_plugins = ["tests.pg_fixtures"]  # its PostgreSQL fixtures

HERMES = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lisbon"}}\n</tool_call>'


def leak(rid: str = "r", excerpt: str = HERMES) -> list[tuple[Any, ...]]:
    o = Outcome(request_id=rid, route="chat", mode="retry", model="m", action="retried")
    o.finding("hermes", "get_weather", 1, excerpt)
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
    assert [n for n, _ in theirs] == ["id", *WRITTEN]


def test_writes_read_back_in_order(store: IncidentStore) -> None:
    store.open()
    store.write(leak("one") + leak("two"))
    got = read_incidents(store, Filters())
    assert [r["request_id"] for r in got] == ["one", "two"]
    assert list(got[0]) == list(COLUMNS)
    assert got[0]["excerpt"] == HERMES and got[0]["kind"] == "leak"


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

V1 = """CREATE TABLE incidents (id INTEGER PRIMARY KEY, time TEXT NOT NULL,
    request_id TEXT NOT NULL, route TEXT NOT NULL, mode TEXT NOT NULL, model TEXT,
    family TEXT NOT NULL, tool_name TEXT, action TEXT NOT NULL, attempt INTEGER NOT NULL,
    excerpt TEXT NOT NULL, excerpt_chars INTEGER NOT NULL)"""
OLD_ROW = ("2025-01-01T00:00:00.000+00:00", "old", "chat", "retry", "m", "xai", None)
OLD_ROW += ("failed", 1, "<old>", 5)


@pytest.mark.parametrize("version", [1, 2])
def test_sqlite_files_of_older_versions_are_migrated(tmp_path: Path, version: int) -> None:
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute(V1)
        if version == 2:
            db.execute("ALTER TABLE incidents ADD COLUMN kind TEXT NOT NULL DEFAULT 'leak'")
            db.execute("PRAGMA user_version = 2")
        marks = ", ".join("?" for _ in OLD_ROW)
        db.execute(f"INSERT INTO incidents ({', '.join(COLUMNS[:-1])}) VALUES ({marks})", OLD_ROW)
    before = read_incidents(str(path), Filters())  # read as it is, before any migration
    store = SqliteStore(str(path))
    store.open()
    store.write(leak("new"))
    store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (VERSION,)
        columns = [r[1] for r in db.execute("PRAGMA table_info(incidents)")]
    assert columns == ["id", *WRITTEN]
    after = read_incidents(str(path), Filters())
    assert after[0] == before[0] and after[0]["kind"] == "leak"
    assert [r["request_id"] for r in after] == ["old", "new"]


def test_a_postgres_table_without_uid_is_migrated(pg_url: str) -> None:
    with psycopg.connect(pg_url) as db:
        db.execute(V1.replace("INTEGER PRIMARY KEY", "BIGSERIAL PRIMARY KEY"))
        db.execute("ALTER TABLE incidents ADD COLUMN kind TEXT NOT NULL DEFAULT 'leak'")
        marks = ", ".join("%s" for _ in OLD_ROW)
        db.execute(f"INSERT INTO incidents ({', '.join(COLUMNS[:-1])}) VALUES ({marks})", OLD_ROW)
    store = PostgresStore(pg_url)
    store.open()
    batch = leak("new")
    store.write(batch)
    store.write(batch)
    store.close()
    assert [r["request_id"] for r in read_incidents(pg_url, Filters())] == ["old", "new"]


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

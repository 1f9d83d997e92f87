"""Retention on both stores: rows past the age or over the cap are deleted (oldest first, a chunk
at a time), on start and then in the background, counted in spillguard_incidents_deleted_total;
several replicas pruning one store delete each row once."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from spillguard import retention
from spillguard.incident_postgres import PostgresStore
from spillguard.incident_query import Filters, read_incidents
from spillguard.incident_store import IncidentStore, open_store
from spillguard.incidents import IncidentWriter, iso, rows_for
from spillguard.metrics import Metrics
from spillguard.outcome import Outcome
from spillguard.retention import Pruned, Retention, prune
from spillguard.scripted import Turn
from spillguard.settings import Settings
from tests.pgserver import Server, database
from tests.test_metrics import scrape, value

pytest_plugins = ["tests.pg_fixtures"]  # its PostgreSQL fixtures

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
HERMES = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lisbon"}}\n</tool_call>'


def rows(rid: str, when: datetime) -> list[tuple[Any, ...]]:
    o = Outcome(request_id=rid, route="chat", mode="retry", model="m", action="retried")
    o.finding("hermes", "get_weather", 1, HERMES)
    return rows_for(o, 100, str, iso(when))


def fill(store: IncidentStore, ages: list[timedelta], now: datetime = NOW) -> None:
    """One incident per age, oldest written first (so ids follow time)."""
    store.open()
    store.write([r for i, age in enumerate(ages) for r in rows(f"r{i}", now - age)])


def left(store: IncidentStore) -> list[str]:
    return [r["request_id"] for r in read_incidents(store, Filters())]


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "incidents.sqlite3")
    else:
        server: Server = request.getfixturevalue("postgres")
        yield from database(server)


@pytest.fixture
def store(target: str) -> Iterator[IncidentStore]:
    made = open_store(target)
    yield made
    made.close()


DAYS = [timedelta(days=d) for d in (40, 35, 31, 29, 2, 0)]


def test_rows_past_the_age_go(store: IncidentStore) -> None:
    fill(store, DAYS)
    assert prune(store, Retention(max_age=timedelta(days=30)), NOW) == Pruned(by_age=3)
    assert left(store) == ["r3", "r4", "r5"]
    assert prune(store, Retention(max_age=timedelta(days=30)), NOW) == Pruned()  # done


def test_rows_over_the_cap_go_oldest_first(store: IncidentStore) -> None:
    fill(store, DAYS)
    assert prune(store, Retention(max_rows=2), NOW) == Pruned(by_rows=4)
    assert left(store) == ["r4", "r5"]
    assert prune(store, Retention(max_rows=10), NOW) == Pruned()


def test_both_rules_together(store: IncidentStore) -> None:
    fill(store, DAYS)
    both = Retention(max_age=timedelta(days=30), max_rows=1)
    assert prune(store, both, NOW) == Pruned(by_age=3, by_rows=2)
    assert left(store) == ["r5"]


def test_deletes_go_a_chunk_at_a_time(
    store: IncidentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    statements: list[str] = []
    execute = store.execute

    def counted(statement: str, args: Any) -> int:
        statements.append(statement)
        return execute(statement, args)

    fill(store, [timedelta(days=60 - i) for i in range(10)])
    monkeypatch.setattr(retention, "PRUNE_CHUNK", 3)
    monkeypatch.setattr(store, "execute", counted)
    assert prune(store, Retention(max_age=timedelta(days=1)), NOW) == Pruned(by_age=10)
    assert len(statements) == 4  # 3 + 3 + 3 + 1
    assert left(store) == []


def test_replicas_pruning_together_delete_each_row_once(pg_url: str) -> None:
    fill(PostgresStore(pg_url), [timedelta(days=100 - i) for i in range(60)])
    stores = [PostgresStore(pg_url) for _ in range(4)]
    done: list[Pruned] = []
    go = threading.Barrier(len(stores))

    def run(store: PostgresStore) -> None:
        go.wait()
        done.append(prune(store, Retention(max_age=timedelta(days=60), max_rows=10), NOW))
        store.close()

    threads = [threading.Thread(target=run, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # 40 are past the age and 10 more over the cap, whichever replica deleted which.
    assert sum(p.by_age + p.by_rows for p in done) == 50
    assert len(read_incidents(pg_url, Filters())) == 10


def test_the_writer_prunes_in_the_background(target: str) -> None:
    metrics = Metrics(Settings(incidents_db=""))
    store = open_store(target)
    keep = Retention(max_age=timedelta(days=30), every=0.02)
    writer = IncidentWriter(store, 100, retention=keep, counts=metrics)
    writer.start()
    try:
        other = open_store(target)  # another replica, writing rows that are already old
        fill(other, [timedelta(days=90), timedelta(days=60)], datetime.now(UTC))
        other.close()
        sample = metrics.registry.get_sample_value
        for _ in range(500):
            if sample("spillguard_incidents_deleted_total", {"rule": "age"}) == 2:
                break
            threading.Event().wait(0.01)
        assert sample("spillguard_incidents_deleted_total", {"rule": "age"}) == 2
    finally:
        writer.close()
    assert read_incidents(target, Filters()) == []


async def test_retention_through_the_server(harness: Any, target: str) -> None:
    now = datetime.now(UTC)
    fill(open_store(target), [timedelta(days=d) for d in (9, 8, 3, 2, 1, 0)], now)
    h = await harness(Turn(content="Sunny."), incidents_db=target, incident_retention="7d")
    await deleted(h.url, "age", 2)  # on start: the two past a week
    await h.restart(incidents_db=target, incident_retention="7d", incident_max_rows=3)
    await deleted(h.url, "rows", 1)  # the oldest left, over the cap
    assert [r["request_id"] for r in read_incidents(target, Filters())] == ["r3", "r4", "r5"]


async def deleted(url: str, rule: str, count: int) -> None:
    for _ in range(500):
        if value(await scrape(url), "spillguard_incidents_deleted_total", rule=rule) == count:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"never {count} deleted by {rule}")


@pytest.mark.parametrize("given", ["0d", "soon", "-3d", "30"])
def test_retention_settings_are_checked(given: str) -> None:
    with pytest.raises(ValidationError):
        Settings(incident_retention=given)


def test_retention_from_settings() -> None:
    assert Retention.from_settings(Settings()) == Retention(timedelta(days=30), 1_000_000)
    off = Settings(incident_retention="", incident_max_rows=0)
    assert not Retention.from_settings(off).active
    assert Retention.from_settings(Settings(incident_retention="0")).max_age is None
    assert Retention.from_settings(Settings(incident_retention="12h")).max_age == timedelta(
        hours=12
    )


def test_only_sqlite_paths_and_postgres_urls_are_stores() -> None:
    with pytest.raises(ValidationError):
        Settings(incidents_db="mysql://u@h/db")
    assert Settings(incidents_db="postgres://u@h/db").incidents_db == "postgres://u@h/db"

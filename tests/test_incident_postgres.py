"""The shared incident store on a real PostgreSQL server: several spillguard processes writing to
one database, the database restarted mid-run, and one that refuses connections or stalls. Never
a failed request; every incident recorded exactly once while the store comes back in time; a
log line and a counter otherwise."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from spillguard.cli import main
from spillguard.incident_postgres import PostgresStore
from spillguard.incidents import IncidentWriter
from spillguard.metrics import Metrics
from spillguard.outcome import Outcome
from spillguard.scripted import Turn
from spillguard.settings import Settings
from tests.conftest import chat_body
from tests.pgserver import Server
from tests.test_metrics import Samples, scrape, value

pytest_plugins = ["tests.pg_fixtures"]  # its PostgreSQL fixtures

HERMES = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lisbon"}}\n</tool_call>'
ROOT = Path(__file__).resolve().parent.parent
OBSERVE = {"mode": "observe"}  # every reply leaks: one incident a request, passed through


class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def attach(self) -> None:
        logger = logging.getLogger("spillguard")
        if self not in logger.handlers:
            logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def named(self, message: str) -> list[dict[str, Any]]:
        return [r.fields for r in self.records if r.getMessage() == message]  # type: ignore[attr-defined]


@pytest.fixture
def captured() -> Iterator[Captured]:
    handler = Captured()
    handler.attach()
    yield handler
    logging.getLogger("spillguard").removeHandler(handler)


def count(url: str) -> tuple[int, int, int]:
    """Rows, distinct request ids and distinct uids in the store."""
    with psycopg.connect(url) as db:
        row = db.execute(
            "SELECT count(*), count(DISTINCT request_id), count(DISTINCT uid) FROM incidents"
        ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


async def send(h: Any, prefix: str, n: int) -> None:
    async with h.http() as http:
        for i in range(n):
            headers = {"x-request-id": f"{prefix}-{i}"}
            r = await http.post("/chat/completions", json=chat_body(), headers=headers)
            assert r.status_code == 200 and r.headers["x-spillguard-action"] == "observed"


async def until(check: Any, tries: int = 500) -> None:
    for _ in range(tries):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the condition never held")


def total(samples: Samples, name: str) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)


# ---- a fleet -----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_several_processes_write_to_one_database(
    harness: Any, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three spillguard processes started at once on a fresh database (each creates the table
    on start), each sent leaks concurrently: every incident is there once, and `incidents stats`
    counts the whole fleet."""
    h = await harness(Turn(content=HERMES))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPILLGUARD_")}
    ports = [_free_port() for _ in range(3)]
    procs = [
        subprocess.Popen(
            [
                *(sys.executable, "-m", "spillguard.cli", "serve", "--port", str(port)),
                *("--upstream", h.upstream.url, "--mode", "observe", "--incidents-db", pg_url),
                *("--log-level", "WARNING"),
            ],
            env=env,
            cwd=ROOT,
        )
        for port in ports
    ]
    per_replica = 25
    try:
        for port in ports:
            for _ in range(300):
                try:
                    async with httpx.AsyncClient() as http:
                        r = await http.get(f"http://127.0.0.1:{port}/healthz")
                    if r.status_code == 200:
                        break
                except httpx.TransportError:
                    await asyncio.sleep(0.05)

        async def replica(port: int) -> None:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}/v1") as http:
                for i in range(per_replica):
                    rid = {"x-request-id": f"p{port}-{i}"}
                    r = await http.post("/chat/completions", json=chat_body(), headers=rid)
                    assert r.status_code == 200

        await asyncio.gather(*(replica(port) for port in ports))
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(30)
    assert [proc.returncode for proc in procs] == [0, 0, 0]
    sent = per_replica * len(ports)
    assert count(pg_url) == (sent, sent, sent)
    capsys.readouterr()
    assert main(["incidents", "stats", "--db", pg_url, "--format", "jsonl"]) == 0
    [stats] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (stats["model"], stats["family"], stats["incidents"]) == ("m", "hermes", sent)
    assert stats["requests"] == sent


# ---- a database that goes away -----------------------------------------------------------------


async def test_a_database_restarted_mid_run_loses_nothing(
    harness: Any, own_postgres: Server, captured: Captured
) -> None:
    url = own_postgres.url()
    h = await harness(Turn(content=HERMES), incidents_db=url, **OBSERVE)
    captured.attach()
    await send(h, "before", 10)
    await until(lambda: count(url)[0] == 10)
    own_postgres.stop()
    await send(h, "down", 10)  # answered as ever; the rows wait
    await until(
        lambda: (
            captured.named("incident store unavailable: rows kept, will retry")
            or captured.named("cannot open the incident database")
        )
    )
    samples = await scrape(h.url)
    assert total(samples, "spillguard_incident_store_errors_total") >= 1
    own_postgres.start()
    await send(h, "after", 10)
    await h.proxy.stop()  # whatever still waits is written now
    h.proxy = None
    assert count(url) == (30, 30, 30)
    assert captured.named("incident record unavailable: incidents dropped") == []


@pytest.mark.parametrize("refusal", ["nothing listening", "unknown role"])
async def test_a_database_that_refuses_connections_never_fails_a_request(
    harness: Any, postgres: Server, captured: Captured, refusal: str
) -> None:
    if refusal == "nothing listening":
        url = f"postgresql://spill:s3cret-pass@127.0.0.1:{_free_port()}/incidents"
    else:
        url = postgres.url(user="nobody", password="s3cret-pass")
    h = await harness(Turn(content=HERMES), incidents_db=url, **OBSERVE)
    captured.attach()
    await send(h, "r", 5)
    for _ in range(500):  # it is tried on start (retention) and again for the rows
        samples = await scrape(h.url)
        if value(samples, "spillguard_incident_store_errors_total", operation="open") >= 2:
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError("the store was never tried")
    await h.proxy.stop()
    h.proxy = None
    [first, *_] = captured.named("cannot open the incident database")
    assert first["store"].startswith("postgresql://")
    dropped = captured.named("incident record unavailable: incidents dropped")
    assert sum(d["dropped"] for d in dropped) == 5
    said = json.dumps([r.__dict__.get("fields") for r in captured.records], default=str)
    assert "s3cret-pass" not in said


async def test_a_stalled_database_costs_no_request_and_loses_nothing(
    harness: Any, pg_url: str
) -> None:
    """A lock held on the table stalls every insert; requests are answered, the rows wait, and
    once the lock goes they are all written."""
    store = PostgresStore(pg_url)
    store.open()  # the table exists, to be locked
    store.close()
    h = await harness(Turn(content=HERMES), incidents_db=pg_url, **OBSERVE)
    with psycopg.connect(pg_url) as holder:
        holder.execute("LOCK TABLE incidents IN ACCESS EXCLUSIVE MODE")  # until the commit
        await send(h, "stalled", 8)
        assert value(await scrape(h.url), "spillguard_incidents_written_total") == 0
    await until(lambda: count(pg_url)[0] == 8)
    await until_written(h.url, 8)


async def until_written(url: str, n: int) -> None:
    for _ in range(500):
        if value(await scrape(url), "spillguard_incidents_written_total") == n:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"never {n} written")


def test_a_full_queue_is_a_counted_drop(pg_url: str) -> None:
    metrics = Metrics(Settings(incidents_db=""))
    writer = IncidentWriter(PostgresStore(pg_url), 100, queue_size=2, counts=metrics)
    for i in range(5):  # not started: nothing drains the queue
        o = Outcome(request_id=f"q{i}", route="chat", mode="observe", action="observed")
        o.finding("hermes", "get_weather", 1, HERMES)
        writer.submit(o)
    sample = metrics.registry.get_sample_value
    assert sample("spillguard_incidents_dropped_total", {"reason": "queue_full"}) == 3
    writer.start()
    writer.close()
    assert count(pg_url) == (2, 2, 2)
    assert sample("spillguard_incidents_written_total") == 2

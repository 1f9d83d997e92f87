"""The incident record: every finding, in an embedded SQLite database, and the queries behind
`spillguard incidents`. A row's `kind` is `leak` for a tool call written as text, or the kind of
a missing or malformed structured call (`detect.anomalies`), recorded beside them.

Writing never blocks a request: `IncidentWriter.submit` only puts rows on a bounded queue that a
background thread drains into the database. A full queue drops the rows, and a database that
cannot be opened or written drops them too; either way with a log line, never a failed request.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from .outcome import Outcome

log = logging.getLogger("spillguard")

COLUMNS = (
    "time",
    "request_id",
    "route",
    "mode",
    "model",
    "family",
    "tool_name",
    "action",
    "attempt",
    "excerpt",
    "excerpt_chars",
    "kind",
)
LEAK = "leak"
SCHEMA = """
CREATE TABLE IF NOT EXISTS incidents (
    id INTEGER PRIMARY KEY,
    time TEXT NOT NULL,           -- UTC, ISO 8601 with milliseconds: sorts as it reads
    request_id TEXT NOT NULL,
    route TEXT NOT NULL,
    mode TEXT NOT NULL,
    model TEXT,                   -- as the client asked for it
    family TEXT NOT NULL,         -- the markup family found
    tool_name TEXT,
    action TEXT NOT NULL,         -- what happened to the request: retried, failed, observed...
    attempt INTEGER NOT NULL,     -- 1, or 2 for the retry
    excerpt TEXT NOT NULL,        -- the offending text, truncated to incident_excerpt_limit
    excerpt_chars INTEGER NOT NULL, -- its length before truncation
    kind TEXT NOT NULL DEFAULT 'leak' -- leak, or a missing or malformed structured call
);
CREATE INDEX IF NOT EXISTS incidents_time ON incidents (time);
"""
VERSION = 2  # 1 had no `kind`: every row was a leak
QUEUE_SIZE = 1000
BATCH = 200
REPORT_EVERY = 60.0  # seconds between repeated "dropped" log lines
REOPEN_AFTER = 30.0  # seconds before trying a database that failed to open again
_STOP = object()


def now_iso() -> str:
    return iso(datetime.now(UTC))


def iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat(timespec="milliseconds")


def rows_for(
    outcome: Outcome, excerpt_limit: int, clean: Callable[[str], str], when: str
) -> list[tuple[Any, ...]]:
    """One row per finding of a recorded outcome."""

    def text(value: str | None) -> str | None:
        return None if value is None else clean(value)

    rows = []
    for odd in outcome.anomalies:  # no text: the structured call itself is the evidence
        rows.append(
            (
                when,
                clean(outcome.request_id),
                outcome.route,
                outcome.mode,
                text(outcome.model),
                "",
                text(odd.tool_name),
                str(outcome.action),
                odd.attempt,
                "",
                0,
                odd.kind,
            )
        )
    for found in outcome.findings:
        excerpt = found.excerpt
        rows.append(
            (
                when,
                clean(outcome.request_id),
                outcome.route,
                outcome.mode,
                text(outcome.model),
                found.family,
                text(found.tool_name),
                str(outcome.action),
                found.attempt,
                clean(excerpt[:excerpt_limit]),
                len(excerpt),
                LEAK,
            )
        )
    return rows


class _Throttle:
    """Counts dropped rows; says so at once, then at most every REPORT_EVERY seconds."""

    def __init__(self, message: str) -> None:
        self.message = message
        self.dropped = 0
        self.last = -REPORT_EVERY

    def drop(self, count: int, **fields: Any) -> None:
        self.dropped += count
        if time.monotonic() - self.last >= REPORT_EVERY:
            self.flush(**fields)

    def flush(self, **fields: Any) -> None:
        """Say how many were dropped since the last line, if any were."""
        if self.dropped:
            log.warning(self.message, extra={"fields": {"dropped": self.dropped, **fields}})
            self.last, self.dropped = time.monotonic(), 0


class IncidentWriter:
    """Writes findings to `path` on a background thread. `start()`, then `submit()` from the
    request path, `close()` at shutdown (writes what is queued, within a timeout)."""

    def __init__(
        self,
        path: str,
        excerpt_limit: int,
        clean: Callable[[str], str] = str,
        queue_size: int = QUEUE_SIZE,
    ) -> None:
        self.path = path
        self.excerpt_limit = excerpt_limit
        self.clean = clean
        self.queue: queue.Queue[object] = queue.Queue(queue_size)
        self.written = 0
        self._thread: threading.Thread | None = None
        self._db: sqlite3.Connection | None = None
        self._failed_at: float | None = None
        self._full = _Throttle("incident queue full: incidents dropped")
        self._broken = _Throttle("incident record unavailable: incidents dropped")

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="spillguard-incidents", daemon=True
            )
            self._thread.start()

    def submit(self, outcome: Outcome) -> None:
        """Queue the outcome's findings; never blocks and never raises."""
        if not outcome.findings and not outcome.anomalies:
            return
        try:
            rows = rows_for(outcome, self.excerpt_limit, self.clean, now_iso())
            self.queue.put_nowait(rows)
        except queue.Full:
            self._full.drop(len(outcome.findings), request_id=outcome.request_id)
        except Exception as exc:  # the record must never fail a request
            log.warning("incident not recorded", extra={"fields": {"error": repr(exc)}})

    def close(self, timeout: float = 5.0) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        deadline = time.monotonic() + timeout
        while thread.is_alive():
            try:
                self.queue.put(_STOP, timeout=0.1)
                break
            except queue.Full:
                if time.monotonic() > deadline:
                    break
        thread.join(max(deadline - time.monotonic(), 0.1))
        if thread.is_alive():
            log.warning("incident writer did not finish in time", extra={"fields": {}})
        self._full.flush()

    # ---- the writer thread ---------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                item = self.queue.get()
                batch: list[tuple[Any, ...]] = []
                stop = item is _STOP
                if not stop:
                    assert isinstance(item, list)
                    batch.extend(item)
                while not stop and len(batch) < BATCH:
                    try:
                        more = self.queue.get_nowait()
                    except queue.Empty:
                        break
                    if more is _STOP:
                        stop = True
                    else:
                        assert isinstance(more, list)
                        batch.extend(more)
                if batch:
                    self._write(batch)
                if stop:
                    return
        finally:
            self._broken.flush(path=self.path)
            if self._db is not None:
                self._db.close()
                self._db = None

    def _open(self) -> sqlite3.Connection | None:
        if self._db is not None:
            return self._db
        if self._failed_at is not None and time.monotonic() - self._failed_at < REOPEN_AFTER:
            return None
        try:
            parent = os.path.dirname(self.path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=5, check_same_thread=False)
            try:
                db.execute("PRAGMA busy_timeout = 5000")
                with contextlib.suppress(sqlite3.Error):  # WAL: readers never wait on writers
                    db.execute("PRAGMA journal_mode = WAL")
                db.executescript(SCHEMA)
                _migrate(db)
            except BaseException:
                db.close()
                raise
        except (sqlite3.Error, OSError) as exc:
            self._failed_at = time.monotonic()
            log.error(
                "cannot open the incident database",
                extra={"fields": {"path": self.path, "error": str(exc)}},
            )
            return None
        self._failed_at = None
        self._db = db
        return db

    def _write(self, batch: list[tuple[Any, ...]]) -> None:
        db = self._open()
        if db is None:
            self._broken.drop(len(batch), path=self.path)
            return
        names = ", ".join(COLUMNS)
        marks = ", ".join("?" for _ in COLUMNS)
        try:
            with db:
                db.executemany(f"INSERT INTO incidents ({names}) VALUES ({marks})", batch)
            self.written += len(batch)
        except (sqlite3.Error, OSError) as exc:
            self._broken.drop(len(batch), path=self.path, error=str(exc))
            if isinstance(exc, sqlite3.DatabaseError) and not isinstance(
                exc, sqlite3.OperationalError
            ):
                db.close()  # corrupt or replaced: open afresh next time
                self._db = None
                self._failed_at = time.monotonic()


def _migrate(db: sqlite3.Connection) -> None:
    """Bring a database written by an older spillguard up to VERSION."""
    (version,) = db.execute("PRAGMA user_version").fetchone()
    if version < VERSION:
        if "kind" not in _columns(db):
            db.execute(f"ALTER TABLE incidents ADD COLUMN kind TEXT NOT NULL DEFAULT '{LEAK}'")
        db.execute(f"PRAGMA user_version = {VERSION}")
        db.commit()


def _columns(db: sqlite3.Connection) -> set[str]:
    return {row[1] for row in db.execute("PRAGMA table_info(incidents)")}


# ---- reading ------------------------------------------------------------------------------


class IncidentDbError(Exception):
    """The incident database cannot be read."""


RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str, now: datetime | None = None) -> str:
    """An ISO date or time (UTC unless it says otherwise), or a span back from now: 30m, 1h, 2d,
    1w. Returns the ISO UTC form the database stores."""
    now = now or datetime.now(UTC)
    match = RELATIVE.match(text)
    if match:
        amount, unit = float(match.group(1)), match.group(2).lower()
        return iso(now - timedelta(**{UNITS[unit]: amount}))
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"--since {text!r}: expected an ISO date or time, or a span like 30m, 1h, 2d, 1w"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return iso(when)


@dataclass
class Filters:
    since: str | None = None  # ISO UTC, as parse_since returns it
    model: str | None = None
    family: str | None = None
    kind: str | None = None

    def where(self) -> tuple[str, list[Any]]:
        terms, args = [], []
        for column, value, op in (
            ("time", self.since, ">="),
            ("model", self.model, "="),
            ("family", self.family, "="),
            ("kind", self.kind, "="),
        ):
            if value is not None:
                terms.append(f"{column} {op} ?")
                args.append(value)
        return (" WHERE " + " AND ".join(terms) if terms else ""), args


def _connect(path: str) -> sqlite3.Connection:
    file = Path(path)
    if not file.is_file():
        raise IncidentDbError(f"no incident database at {path}")
    try:
        db = sqlite3.connect(file.resolve().as_uri() + "?mode=ro", uri=True, timeout=5)
        db.row_factory = sqlite3.Row
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:
        raise IncidentDbError(f"cannot read {path}: {exc}") from None
    return db


def _readable(db: sqlite3.Connection) -> bool:
    """True when the database has incidents. One written before kinds were recorded is read
    through a view that calls every row a leak (the file itself is opened read-only)."""
    row = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'incidents'"
    ).fetchone()
    if row is None:
        return False
    if "kind" not in _columns(db):
        db.execute(f"CREATE TEMP VIEW incidents AS SELECT *, '{LEAK}' AS kind FROM main.incidents")
    return True


def read_incidents(path: str, filters: Filters, limit: int | None = None) -> list[dict[str, Any]]:
    """Matching incidents, oldest first; with a limit, the most recent `limit` of them."""
    db = _connect(path)
    try:
        if not _readable(db):
            return []
        where, args = filters.where()
        sql = f"SELECT {', '.join(COLUMNS)} FROM incidents{where} ORDER BY time DESC, id DESC"
        if limit:
            sql += " LIMIT ?"
            args.append(limit)
        try:
            rows = [dict(r) for r in db.execute(sql, args)]
        except sqlite3.Error as exc:
            raise IncidentDbError(f"cannot read {path}: {exc}") from None
        rows.reverse()
        return rows
    finally:
        db.close()


STATS_COLUMNS = ("model", "kind", "family", "incidents", "requests", "first", "last")


def incident_stats(path: str, filters: Filters) -> list[dict[str, Any]]:
    """Counts per model, kind and family, most incidents first."""
    db = _connect(path)
    try:
        if not _readable(db):
            return []
        where, args = filters.where()
        sql = (
            "SELECT model, kind, family, count(*) AS incidents,"
            " count(DISTINCT request_id) AS requests,"
            f" min(time) AS first, max(time) AS last FROM incidents{where}"
            " GROUP BY model, kind, family ORDER BY incidents DESC, model, kind, family"
        )
        try:
            return [dict(r) for r in db.execute(sql, args)]
        except sqlite3.Error as exc:
            raise IncidentDbError(f"cannot read {path}: {exc}") from None
    finally:
        db.close()


def table(rows: Iterable[dict[str, Any]], columns: tuple[str, ...], width: int = 60) -> str:
    """Rows as an aligned text table, cells on one line and cut at `width` characters."""

    def cell(value: Any) -> str:
        text = "" if value is None else str(value)
        text = text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")
        return text if len(text) <= width else text[: width - 1] + "…"

    body = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(line[i]) for line in body]) for i, c in enumerate(columns)]
    lines = [list(columns), *body]
    return "\n".join(
        "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )

"""The embedded incident store: one SQLite file, written by one process (or a few on one host).

WAL mode, so a reader (`spillguard incidents`) never waits on the writer; the file is opened
read-only to be read, and reading never creates it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from .incident_store import (
    INDEXES,
    INSERT,
    VERSION,
    IncidentDbError,
    Row,
    StoreRejected,
    StoreUnavailable,
    added,
    as_current,
    sql,
    table_ddl,
)

MARK = "?"
SCHEMA = ";\n".join([table_ddl("id INTEGER PRIMARY KEY", "TEXT"), *INDEXES]) + ";\n"
ADDED = added("TEXT")


class SqliteStore:
    mark = MARK

    def __init__(self, path: str) -> None:
        self.path = path
        self.where = path
        self._db: sqlite3.Connection | None = None

    def present(self) -> bool:
        return os.path.isfile(self.path)

    def open(self) -> None:
        if self._db is not None:
            return
        try:
            parent = os.path.dirname(self.path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=5, check_same_thread=False)
            try:
                db.execute("PRAGMA busy_timeout = 5000")
                with contextlib.suppress(sqlite3.Error):  # WAL: readers never wait on writers
                    db.execute("PRAGMA journal_mode = WAL")
                _migrate(db)
            except BaseException:
                db.close()
                raise
        except (sqlite3.Error, OSError) as exc:
            raise StoreUnavailable(str(exc)) from None
        self._db = db

    def write(self, rows: Sequence[Row]) -> None:
        db = self._connected()
        try:
            with db:
                db.executemany(sql(INSERT, MARK), rows)
        except (sqlite3.IntegrityError, sqlite3.ProgrammingError, sqlite3.InterfaceError) as exc:
            raise StoreRejected(str(exc)) from None
        except (sqlite3.Error, OSError) as exc:
            self._failed(exc)

    def execute(self, statement: str, args: Sequence[Any]) -> int:
        db = self._connected()
        try:
            with db:
                return db.execute(sql(statement, MARK), args).rowcount
        except (sqlite3.Error, OSError) as exc:
            self._failed(exc)

    def fetch(self, statement: str, args: Sequence[Any]) -> list[Row]:
        db = self._connected()
        try:
            return db.execute(sql(statement, MARK), args).fetchall()
        except (sqlite3.Error, OSError) as exc:
            self._failed(exc)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def read(self, statement: str, args: Sequence[Any]) -> list[dict[str, Any]]:
        db = _reader(self.path)
        try:
            if not _readable(db):
                return []
            return [dict(r) for r in db.execute(sql(statement, MARK), args)]
        except sqlite3.Error as exc:
            raise IncidentDbError(f"cannot read {self.path}: {exc}") from None
        finally:
            db.close()

    def _connected(self) -> sqlite3.Connection:
        self.open()
        assert self._db is not None
        return self._db

    def _failed(self, exc: BaseException) -> NoReturn:
        """A write or query failed: the rows wait. A file that is no database (corrupt, or
        replaced) is opened afresh next time; a busy or full one is simply tried again."""
        if isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.OperationalError):
            self.close()
        raise StoreUnavailable(str(exc)) from None


def _migrate(db: sqlite3.Connection) -> None:
    """Create the table, or bring one an older spillguard wrote up to VERSION."""
    (version,) = db.execute("PRAGMA user_version").fetchone()
    if version >= VERSION and {name for name, _ in ADDED} <= _columns(db):
        return
    db.executescript(table_ddl("id INTEGER PRIMARY KEY", "TEXT"))
    have = _columns(db)
    for name, ddl in ADDED:
        if name not in have:
            db.execute(f"ALTER TABLE incidents ADD COLUMN {name} {ddl}")
    for index in INDEXES:
        db.execute(index)
    db.execute(f"PRAGMA user_version = {VERSION}")
    db.commit()


def _columns(db: sqlite3.Connection) -> set[str]:
    return {row[1] for row in db.execute("PRAGMA table_info(incidents)")}


def _reader(path: str) -> sqlite3.Connection:
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
    """True when the database has incidents. One an older spillguard wrote is read through a
    temporary view that has every column (the file itself is opened read-only)."""
    row = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'incidents'"
    ).fetchone()
    if row is None:
        return False
    older = as_current(_columns(db), "main.incidents")
    if older is not None:
        db.execute(f"CREATE TEMP VIEW incidents AS {older}")
    return True

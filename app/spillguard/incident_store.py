"""Where incidents are kept: the store interface, the one table every store holds, and the
choice of store by the target's form - a `postgresql://` URL is a PostgreSQL server shared by a
fleet, anything else a SQLite file (the embedded default).

Both stores run the same SQL (written here with `{m}` where the driver's placeholder goes), so
they hold the same columns and answer the same queries the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

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
WRITTEN = (*COLUMNS, "uid")  # what the writer inserts; `uid` is not shown to readers
LEAK = "leak"
POSTGRES_SCHEMES = ("postgresql://", "postgres://")

Row = tuple[Any, ...]


def table_ddl(id_column: str, text: str) -> str:
    """The incidents table, given the store's spelling of an auto-numbered key and of text that
    compares byte by byte (so both stores sort and filter alike)."""
    return f"""
CREATE TABLE IF NOT EXISTS incidents (
    {id_column},
    time {text} NOT NULL,           -- UTC, ISO 8601 with milliseconds: sorts as it reads
    request_id {text} NOT NULL,
    route {text} NOT NULL,
    mode {text} NOT NULL,
    model {text},                   -- as the client asked for it
    family {text} NOT NULL,         -- the markup family found ('' for a structured call)
    tool_name {text},
    action {text} NOT NULL,         -- what happened to the request: retried, failed, observed...
    attempt INTEGER NOT NULL,       -- 1, or 2 for the retry
    excerpt {text} NOT NULL,        -- the offending text, truncated to incident_excerpt_limit
    excerpt_chars INTEGER NOT NULL, -- its length before truncation
    kind {text} NOT NULL DEFAULT '{LEAK}', -- leak, or a missing or malformed structured call
    uid {text}                      -- made by the writer: a batch sent twice is stored once
)"""


# Columns later versions added, in order, for tables an older spillguard made: 1 had no `kind`
# (every row was a leak), 2 no `uid`.
ADDED = (("kind", f"TEXT NOT NULL DEFAULT '{LEAK}'"), ("uid", "TEXT"))
INDEXES = (
    "CREATE INDEX IF NOT EXISTS incidents_time ON incidents (time)",
    "CREATE UNIQUE INDEX IF NOT EXISTS incidents_uid ON incidents (uid)",
)
VERSION = 3

INSERT = (
    f"INSERT INTO incidents ({', '.join(WRITTEN)}) VALUES ({', '.join('{m}' for _ in WRITTEN)})"
    " ON CONFLICT (uid) DO NOTHING"
)
PRUNE_CHUNK = 5000  # rows per delete: no lock is held for long
# The oldest rows first, a chunk at a time: older than a time, or at or below an id.
DELETE_BEFORE = (
    "DELETE FROM incidents WHERE id IN"
    " (SELECT id FROM incidents WHERE time < {m} ORDER BY id LIMIT {m})"
)
DELETE_UP_TO = (
    "DELETE FROM incidents WHERE id IN"
    " (SELECT id FROM incidents WHERE id <= {m} ORDER BY id LIMIT {m})"
)
# The newest id past the cap: it and every older row go.
CAP_BOUNDARY = "SELECT id FROM incidents ORDER BY id DESC LIMIT 1 OFFSET {m}"


def sql(template: str, mark: str) -> str:
    return template.replace("{m}", mark)


class StoreUnavailable(Exception):
    """The store cannot be reached or written just now: the rows are kept and tried again."""


class StoreRejected(Exception):
    """The store refused these rows for what they hold: trying them again would not help."""


class IncidentDbError(Exception):
    """The incident record cannot be read."""


class IncidentStore(Protocol):
    """A place incidents are written to (from the writer's thread) and read from."""

    where: str  # for log lines and messages: the path, or the URL without its password
    mark: str  # the driver's placeholder

    def present(self) -> bool:
        """There may be rows to prune without creating anything (a SQLite file exists)."""
        ...

    def open(self) -> None:
        """Connect, and create or migrate the table. Raises StoreUnavailable."""
        ...

    def write(self, rows: Sequence[Row]) -> None:
        """Insert `rows` (in `WRITTEN` order) in one transaction. Raises StoreUnavailable or
        StoreRejected."""
        ...

    def execute(self, statement: str, args: Sequence[Any]) -> int:
        """Run one statement of this module's SQL in a transaction of its own; the number of
        rows it changed. Raises StoreUnavailable."""
        ...

    def fetch(self, statement: str, args: Sequence[Any]) -> list[Row]:
        """The rows one query of this module's SQL returns. Raises StoreUnavailable."""
        ...

    def close(self) -> None: ...

    def read(self, statement: str, args: Sequence[Any]) -> list[dict[str, Any]]:
        """A reader's query on a connection of its own that can change nothing. No table
        yet: no rows. Raises IncidentDbError."""
        ...


def is_postgres(target: str) -> bool:
    return target.lower().startswith(POSTGRES_SCHEMES)


def open_store(target: str) -> IncidentStore:
    """The store `target` names (nothing is connected until it is used)."""
    if is_postgres(target):
        from .incident_postgres import PostgresStore

        return PostgresStore(target)
    from .incident_sqlite import SqliteStore

    return SqliteStore(target)

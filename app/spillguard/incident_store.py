"""Where incidents are kept: the store interface, the one table every store holds, and the
choice of store by the target's form - a `postgresql://` URL is a PostgreSQL server shared by a
fleet, anything else a SQLite file (the embedded default).

Both stores run the same SQL (written here with `{m}` where the driver's placeholder goes), so
they hold the same columns and answer the same queries the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol


class Incident(NamedTuple):
    """One row as the writer inserts it (`WRITTEN` order)."""

    time: str
    request_id: str
    route: str
    mode: str
    model: str | None
    family: str
    tool_name: str | None
    action: str
    attempt: int
    excerpt: str
    excerpt_chars: int
    kind: str
    input_tokens: int | None
    output_tokens: int | None
    repaired_calls: str | None
    upstream: str | None
    uid: str


WRITTEN = Incident._fields
COLUMNS = tuple(c for c in WRITTEN if c != "uid")  # what readers see: `uid` is the writer's
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
    uid {text},                     -- made by the writer: a batch sent twice is stored once
    input_tokens INTEGER,           -- what the upstream billed for the leaked attempt, when
    output_tokens INTEGER,          --   its reply said (NULL otherwise, and for anomalies)
    repaired_calls {text},          -- the calls a repair made of the finding, a JSON array
    upstream {text}                 -- the named upstream the request went to
)"""


# Columns later versions added, in order, for tables an older spillguard made: 1 had no `kind`
# (every row was a leak), 2 no `uid`, 3 none of the last four. Each with its type ({t}: the
# store's text) and what a reader takes it to hold in a table without it.
_ADDED = (
    ("kind", f"{{t}} NOT NULL DEFAULT '{LEAK}'", f"'{LEAK}'"),
    ("uid", "{t}", "CAST(NULL AS TEXT)"),
    ("input_tokens", "INTEGER", "CAST(NULL AS INTEGER)"),
    ("output_tokens", "INTEGER", "CAST(NULL AS INTEGER)"),
    ("repaired_calls", "{t}", "CAST(NULL AS TEXT)"),
    ("upstream", "{t}", "CAST(NULL AS TEXT)"),
)
INDEXES = (
    "CREATE INDEX IF NOT EXISTS incidents_time ON incidents (time)",
    "CREATE UNIQUE INDEX IF NOT EXISTS incidents_uid ON incidents (uid)",
)
VERSION = 4


def added(text: str) -> list[tuple[str, str]]:
    """The columns a table may lack, each with its type, given the store's spelling of text."""
    return [(name, ddl.replace("{t}", text)) for name, ddl, _ in _ADDED]


def as_current(have: set[str], table: str) -> str | None:
    """A query reading `table`, made by an older spillguard and lacking some columns, as if it
    had them all; None when it lacks none."""
    fill = [f"{value} AS {name}" for name, _, value in _ADDED if name not in have]
    return f"SELECT *, {', '.join(fill)} FROM {table}" if fill else None


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
        yet: no rows; a table an older spillguard made reads as if it had every column (what
        it lacks as `as_current` says). Raises IncidentDbError."""
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

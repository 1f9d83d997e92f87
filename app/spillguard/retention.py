"""How long incidents are kept: an age and a row cap, enforced by the writer's thread every
`every` seconds (and once on start). The oldest rows go first, a chunk at a time, so neither
store holds a lock for long; several replicas pruning one store at once delete each row once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from .incident_store import (
    CAP_BOUNDARY,
    DELETE_BEFORE,
    DELETE_UP_TO,
    PRUNE_CHUNK,
    IncidentStore,
)
from .settings import Settings
from .spans import parse_span

PRUNE_EVERY = 60.0  # seconds


@dataclass(frozen=True)
class Retention:
    max_age: timedelta | None = None  # older rows are deleted
    max_rows: int | None = None  # past this many, the oldest are deleted
    every: float = PRUNE_EVERY

    @classmethod
    def from_settings(cls, settings: Settings) -> Retention:
        return cls(parse_span(settings.incident_retention), settings.incident_max_rows or None)

    @property
    def active(self) -> bool:
        return self.max_age is not None or self.max_rows is not None


@dataclass(frozen=True)
class Pruned:
    by_age: int = 0
    by_rows: int = 0


def prune(store: IncidentStore, retention: Retention, now: datetime | None = None) -> Pruned:
    """Delete what `retention` no longer keeps. Raises StoreUnavailable."""
    by_age = by_rows = 0
    if retention.max_age is not None:
        cutoff = ((now or datetime.now(UTC)) - retention.max_age).astimezone(UTC)
        before = cutoff.isoformat(timespec="milliseconds")
        by_age = _in_chunks(store, DELETE_BEFORE, before)
    if retention.max_rows is not None:
        boundary = store.fetch(CAP_BOUNDARY, [retention.max_rows])
        if boundary:
            by_rows = _in_chunks(store, DELETE_UP_TO, boundary[0][0])
    return Pruned(by_age, by_rows)


def _in_chunks(store: IncidentStore, statement: str, bound: object) -> int:
    total = 0
    while True:
        deleted = store.execute(statement, [bound, PRUNE_CHUNK])
        total += deleted
        if deleted < PRUNE_CHUNK:
            return total

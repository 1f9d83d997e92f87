"""Reading the incident record, from either store: the queries behind `spillguard incidents`,
their filters, and the text table they print as."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .incident_store import COLUMNS, IncidentStore, open_store
from .incidents import iso
from .spans import parse_span

STATS_COLUMNS = (
    *("model", "kind", "family", "incidents", "requests"),
    *("input_tokens", "output_tokens", "first", "last"),
)


def parse_since(text: str, now: datetime | None = None) -> str:
    """An ISO date or time (UTC unless it says otherwise), or a span back from now: 30m, 1h, 2d,
    1w. Returns the ISO UTC form the stores hold."""
    now = now or datetime.now(UTC)
    span = parse_span(text)
    if span is not None:
        return iso(now - span)
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"--since {text!r}: expected an ISO date or time, or a span like 30m, 1h, 2d, 1w"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return iso(when)


@dataclass(frozen=True)
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
                terms.append(f"{column} {op} {{m}}")
                args.append(value)
        return (" WHERE " + " AND ".join(terms) if terms else ""), args


def read_incidents(
    target: str | IncidentStore, filters: Filters, limit: int | None = None
) -> list[dict[str, Any]]:
    """Matching incidents, oldest first; with a limit, the most recent `limit` of them."""
    where, args = filters.where()
    statement = f"SELECT {', '.join(COLUMNS)} FROM incidents{where} ORDER BY time DESC, id DESC"
    if limit:
        statement += " LIMIT {m}"
        args.append(limit)
    rows = _store(target).read(statement, args)
    rows.reverse()
    return rows


def incident_stats(target: str | IncidentStore, filters: Filters) -> list[dict[str, Any]]:
    """Counts per model, kind and family, most incidents first, with the tokens the upstream
    billed for attempts that leaked: the sum over the rows whose reply said what it cost (None
    when none did). A repaired attempt is no leaked cost (its reply reached the client as
    calls), as in spillguard_leaked_tokens_total."""
    where, args = filters.where()
    statement = (
        "SELECT model, kind, family, count(*) AS incidents,"
        " count(DISTINCT request_id) AS requests,"
        " sum(CASE WHEN repaired_calls IS NULL THEN input_tokens END) AS input_tokens,"
        " sum(CASE WHEN repaired_calls IS NULL THEN output_tokens END) AS output_tokens,"
        f" min(time) AS first, max(time) AS last FROM incidents{where}"
        " GROUP BY model, kind, family"
        " ORDER BY incidents DESC, coalesce(model, ''), kind, family"
    )
    return _store(target).read(statement, args)


def _store(target: str | IncidentStore) -> IncidentStore:
    return open_store(target) if isinstance(target, str) else target


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

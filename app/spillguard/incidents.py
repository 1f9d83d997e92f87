"""The incident record's writer: every finding of a recorded outcome becomes a row, queued from
the request path and written in batches by a background thread to the store (`incident_store`:
a SQLite file, or PostgreSQL for a fleet). A row's `kind` is `leak` for a tool call written as
text, or the kind of a missing or malformed structured call (`detect.anomalies`).

Writing never blocks a request: `submit` only puts rows on a bounded queue. A store that is down
or slow loses nothing by it: the batch in hand is tried again after a pause that grows, while the
queue fills. Only a full queue drops rows, and so does a store still down at shutdown; either
way with a log line and a counter, never a failed request. Retention runs on the same thread.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from .incident_store import (
    LEAK,
    Incident,
    IncidentStore,
    Row,
    StoreRejected,
    StoreUnavailable,
)
from .outcome import Irregularity, Leak, Outcome
from .retention import Retention, prune

log = logging.getLogger("spillguard")

QUEUE_SIZE = 1000  # outcomes waiting to be written
BATCH = 200  # rows a transaction
REPORT_EVERY = 60.0  # seconds between repeated log lines about the same trouble
RETRY_FIRST, RETRY_MOST = 0.5, 30.0  # seconds before trying a failing store again
_STOP = object()


class Counts(Protocol):
    """Where the writer counts what it did (the metrics)."""

    def incidents_written(self, count: int) -> None: ...
    def incidents_dropped(self, reason: str, count: int) -> None: ...
    def incident_store_failed(self, operation: str) -> None: ...
    def incidents_deleted(self, rule: str, count: int) -> None: ...


def now_iso() -> str:
    return iso(datetime.now(UTC))


def iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat(timespec="milliseconds")


def storable(text: str) -> str:
    """Text every store takes: no NUL (PostgreSQL refuses it) and no lone surrogate (it has no
    UTF-8)."""
    text = text.replace("\x00", "\ufffd")
    return text if text.isascii() else text.encode("utf-8", "replace").decode("utf-8")


CUT = "\u2026"  # ends repaired calls cut to the limit: no JSON array ends so


def cut_calls(calls: str, limit: int) -> str:
    """A repair's calls (a JSON array) whole when they fit in `limit` characters, else their
    first limit - 1 characters and CUT ('' with the limit 0): they carry the leaked text, kept
    no longer than the excerpt. Never NULL, which reads as no repair (incident_query)."""
    if len(calls) <= limit:
        return calls
    return calls[: limit - 1] + CUT if limit else ""


def rows_for(
    outcome: Outcome, excerpt_limit: int, clean: Callable[[str], str], when: str
) -> list[Incident]:
    """One row per finding of a recorded outcome."""

    def text(value: str | None) -> str | None:
        return None if value is None else clean(storable(value))

    def calls(value: str | None) -> str | None:
        # Cleaned before it is cut, so that a cut cannot leave part of a secret unredacted.
        cleaned = text(value)
        return None if cleaned is None else cut_calls(cleaned, excerpt_limit)

    def row(found: Leak | Irregularity) -> Incident:
        # An anomaly has no text: the structured call itself is the evidence.
        leak = found if isinstance(found, Leak) else None
        excerpt = leak.excerpt if leak else ""
        usage = leak.usage if leak else None
        return Incident(
            time=when,
            request_id=clean(storable(outcome.request_id)),
            route=outcome.route,
            mode=outcome.mode,
            model=text(outcome.model),
            family=leak.family if leak else "",
            tool_name=text(found.tool_name),
            action=str(outcome.action),
            attempt=found.attempt,
            excerpt=clean(storable(excerpt))[:excerpt_limit],  # cut once clean: no part of a secret
            excerpt_chars=len(excerpt),
            kind=found.kind if isinstance(found, Irregularity) else LEAK,
            input_tokens=usage.input_tokens if usage else None,
            output_tokens=usage.output_tokens if usage else None,
            repaired_calls=calls(leak.repaired) if leak else None,
            upstream=text(outcome.upstream),
            uid=uuid.uuid4().hex,
        )

    return [*map(row, outcome.anomalies), *map(row, outcome.findings)]


class Throttle:
    """One kind of trouble: said at once, then at most every REPORT_EVERY seconds, with how
    many rows (or failures: `field`) it came to since."""

    def __init__(self, message: str, field: str = "dropped", level: int = logging.WARNING) -> None:
        self.message = message
        self.field = field
        self.level = level
        self.count = 0
        self.last = -REPORT_EVERY

    def add(self, count: int, **fields: Any) -> None:
        self.count += count
        if time.monotonic() - self.last >= REPORT_EVERY:
            self.flush(**fields)

    def flush(self, **fields: Any) -> None:
        if self.count:
            fields = {self.field: self.count, **fields}
            log.log(self.level, self.message, extra={"fields": fields})
            self.last, self.count = time.monotonic(), 0


class IncidentWriter:
    """Writes findings to `store` on a background thread. `start()`, then `submit()` from the
    request path, `close()` at shutdown (writes what is queued, within a timeout)."""

    def __init__(
        self,
        store: IncidentStore,
        excerpt_limit: int,
        clean: Callable[[str], str] = str,
        queue_size: int = QUEUE_SIZE,
        retention: Retention | None = None,
        counts: Counts | None = None,
    ) -> None:
        self.store = store
        self.excerpt_limit = excerpt_limit
        self.clean = clean
        self.retention = retention or Retention()
        self.counts = counts
        self.queue: queue.Queue[object] = queue.Queue(queue_size)
        self.written = 0
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._deadline = 0.0
        self._failures = 0  # in a row
        self._next_prune = 0.0
        self._full = Throttle("incident queue full: incidents dropped")
        self._lost = Throttle("incident record unavailable: incidents dropped")
        self._rejected = Throttle("incident store refused rows: incidents dropped")
        self._unopened = Throttle("cannot open the incident database", "failures", logging.ERROR)
        self._down = Throttle("incident store unavailable: rows kept, will retry", "failures")

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
            self._drop("queue_full", len(rows), self._full, request_id=outcome.request_id)
        except Exception as exc:  # the record must never fail a request
            log.warning("incident not recorded", extra={"fields": {"error": repr(exc)}})

    def close(self, timeout: float = 5.0) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._deadline = time.monotonic() + timeout
        self._stopping.set()
        with contextlib.suppress(queue.Full):  # then it is busy with rows, and sees the event
            self.queue.put_nowait(_STOP)  # wakes a thread waiting for rows
        thread.join(max(self._deadline - time.monotonic(), 0.1))
        if thread.is_alive():
            log.warning("incident writer did not finish in time", extra={"fields": {}})
        self._full.flush()

    # ---- the writer thread ---------------------------------------------------------------

    def _run(self) -> None:
        batch: list[Row] = []
        try:
            while not self._stopping.is_set():
                self._take(batch, wait=self._next_prune - time.monotonic())
                if batch and not self._flush(batch):
                    self._stopping.wait(self._pause())  # the same rows, a little later
                if time.monotonic() >= self._next_prune:
                    self._prune()
            self._finish(batch)
        except Exception as exc:  # a defect: say so, rather than stop writing in silence
            log.error("incident writer stopped", extra={"fields": {"error": repr(exc)}})
        finally:
            self.store.close()
            for throttle in (self._lost, self._rejected, self._unopened, self._down):
                throttle.flush(store=self.store.where)

    def _take(self, batch: list[Row], wait: float) -> None:
        """Top `batch` up from the queue, waiting up to `wait` seconds when it is empty."""
        block = not batch
        while len(batch) < BATCH:
            try:
                item = self.queue.get(block, timeout=max(wait, 0.001))
            except queue.Empty:
                return
            if item is _STOP:
                return
            assert isinstance(item, list)
            batch.extend(item)
            block = False

    def _flush(self, batch: list[Row]) -> bool:
        """Write `batch`; False (and the batch kept) when the store is unavailable."""
        if not self._opened():
            return False
        try:
            self.store.write(batch)
        except StoreUnavailable as exc:
            self._failed("write", self._down, str(exc))
            return False
        except StoreRejected:
            self._one_by_one(batch)
        else:
            self._wrote(len(batch))
        batch.clear()
        if self._failures:
            fields = {"store": self.store.where}
            log.info("incident store available again", extra={"fields": fields})
            self._failures = 0
        return True

    def _one_by_one(self, batch: list[Row]) -> None:
        """A batch the store refused: each row that it takes is written, the others dropped."""
        for row in batch:
            try:
                self.store.write([row])
            except (StoreRejected, StoreUnavailable) as exc:
                self._drop("rejected", 1, self._rejected, error=str(exc))
            else:
                self._wrote(1)

    def _opened(self) -> bool:
        try:
            self.store.open()
        except StoreUnavailable as exc:
            self._failed("open", self._unopened, str(exc))
            return False
        return True

    def _finish(self, batch: list[Row]) -> None:
        """At shutdown: what is queued is written while the store answers and time is left;
        then the rest is dropped, and counted."""
        while time.monotonic() < self._deadline:
            self._take(batch, wait=0)
            if not batch or not self._flush(batch):
                break
        while True:
            self._take(batch, wait=0)
            if not batch:
                return
            self._drop("unavailable", len(batch), self._lost, store=self.store.where)
            batch.clear()

    def _prune(self) -> None:
        self._next_prune = time.monotonic() + self.retention.every
        if not self.retention.active or not self.store.present() or not self._opened():
            return
        try:
            done = prune(self.store, self.retention)
        except StoreUnavailable as exc:
            self._failed("prune", self._down, str(exc))
            return
        if done.by_age or done.by_rows:
            if self.counts is not None:
                self.counts.incidents_deleted("age", done.by_age)
                self.counts.incidents_deleted("rows", done.by_rows)
            fields = {"by_age": done.by_age, "by_rows": done.by_rows, "store": self.store.where}
            log.info("incidents deleted by retention", extra={"fields": fields})

    def _pause(self) -> float:
        return float(min(RETRY_FIRST * 2 ** (self._failures - 1), RETRY_MOST))

    def _failed(self, operation: str, throttle: Throttle, error: str) -> None:
        self._failures += 1
        if self.counts is not None:
            self.counts.incident_store_failed(operation)
        throttle.add(1, store=self.store.where, error=error)

    def _wrote(self, count: int) -> None:
        self.written += count
        if self.counts is not None:
            self.counts.incidents_written(count)

    def _drop(self, reason: str, count: int, throttle: Throttle, **fields: Any) -> None:
        if self.counts is not None:
            self.counts.incidents_dropped(reason, count)
        throttle.add(count, **fields)

"""The observer: every outcome, recorded once - logged (one line), counted (the metrics) and,
for each finding, written to the incident record (`incidents.py`, to the store the settings
name) and, with --otel-traces, ends its spans (`tracing.py`). A request refused before any
route (`limits.py`) is a `Refusal`: a line and a count.

Nothing here may carry a key: outcomes hold none, and every log line, metric label and incident
row goes through `Redactor` as a safety net for the configured keys and anything shaped like a
token.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .incident_store import open_store
from .incidents import IncidentWriter
from .logs import write
from .metrics import Metrics
from .outcome import Outcome
from .redact import Redactor
from .retention import Retention
from .settings import Settings
from .tracing import Tracing

log = logging.getLogger("spillguard")

PATH_CHARS = 200


@dataclass(frozen=True)
class Refusal:
    """A request spillguard answered itself before any route: its error code and status, and
    where it was going - never anything of its body or headers but the request id."""

    request_id: str
    method: str
    path: str
    status: int
    code: str

    @property
    def reason(self) -> str:
        return self.code.lower()


def log_refusal(refusal: Refusal) -> None:
    fields = {
        "request_id": refusal.request_id,
        "method": refusal.method,
        "path": refusal.path[:PATH_CHARS],
        "status": refusal.status,
        "error": refusal.code,
        "reason": refusal.reason,
    }
    write(log, logging.INFO, "refused", fields)


class Observer:
    """Receives every outcome, once: one log line, the metrics, the incident record."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.redact = Redactor.from_settings(settings)
        self._leak_level = logging.getLevelName(settings.leak_log_level)
        self._level = max(self._leak_level, logging.INFO)
        self.metrics = Metrics(settings, self.redact)
        self.incidents = (
            IncidentWriter(
                open_store(settings.incidents_db),
                settings.incident_excerpt_limit,
                self.redact,
                retention=Retention.from_settings(settings),
                counts=self.metrics,
            )
            if settings.incidents_db
            else None
        )
        self.tracing = Tracing.from_settings(settings, self.redact)
        # What `record` does with an outcome, each part apart (one failing skips no other):
        # the incident record and the spans only where they are on.
        parts: list[Callable[[Outcome], None]] = [self._log, self.metrics.observe]
        if self.incidents is not None:
            parts.append(self.incidents.submit)
        if self.tracing is not None:
            parts.append(self.tracing.finish)
        self._parts = tuple(parts)

    def start(self) -> None:
        if self.incidents is not None:
            self.incidents.start()

    def close(self) -> None:
        """At shutdown (blocking: run it off the event loop): write what is queued."""
        if self.incidents is not None:
            self.incidents.close()
        if self.tracing is not None:
            self.tracing.shutdown()
        self.metrics.close()

    def trace(self, scope: Mapping[str, Any], outcome: Outcome) -> None:
        """A request with this outcome begins (its ASGI scope): its span, when tracing."""
        if self.tracing is None:
            return
        try:
            self.tracing.begin(scope, outcome)
        except Exception as exc:  # tracing must never fail a request
            log.error("request not traced", extra={"fields": {"error": repr(exc)}})

    def defer(self, outcome: Outcome) -> None:
        """The response is being streamed: `record` comes when it ends."""
        if outcome.defer():
            self.metrics.stream_opened()

    def record(self, outcome: Outcome) -> None:
        if not outcome.close():
            return
        for part in self._parts:
            try:
                part(outcome)
            except Exception as exc:  # recording must never fail a request
                log.error(
                    "outcome not fully recorded",
                    extra={"fields": {"request_id": outcome.request_id, "error": repr(exc)}},
                )
        if outcome.stream_closed():
            self.metrics.stream_closed()

    def refused(self, refusal: Refusal) -> None:
        """A request refused before any route: one line, one count."""
        try:
            log_refusal(refusal)
            self.metrics.refused(refusal.code)
        except Exception as exc:  # recording must never fail a request
            log.error("refusal not recorded", extra={"fields": {"error": repr(exc)}})

    def _log(self, outcome: Outcome) -> None:
        level = self._level if outcome.findings or outcome.anomalies else logging.INFO
        if not log.isEnabledFor(level):
            return
        statuses = outcome.upstream_statuses
        fields: dict[str, Any] = {
            "request_id": outcome.request_id,
            "route": outcome.route,
            "mode": outcome.mode,
            "upstream": outcome.upstream,
            "stream": outcome.stream,
            "model": outcome.model,
            "status": outcome.status,
            "family": outcome.family,
            "tool_name": outcome.tool_name,
            "attempts": outcome.attempts,
            "error": outcome.error,
            "upstream_calls": outcome.upstream_calls,
            "outcome": outcome.action._value_,  # `.value`, without the enum property's call
            "upstream_status": statuses[-1] if statuses else None,
            "upstream_ms": outcome.upstream_ms,
            "added_ms": round(max(outcome.total_ms - outcome.upstream_ms, 0.0), 2),
            "total_ms": outcome.total_ms,
        }
        if outcome.findings and log.isEnabledFor(self._leak_level):
            limit = self.settings.excerpt_limit
            fields["findings"] = [
                {
                    "family": f.family,
                    "tool_name": f.tool_name,
                    "attempt": f.attempt,
                    "excerpt": f.excerpt[:limit],
                    # The calls a repair made of it (JSON, cut like the excerpt).
                    **({"repaired": f.repaired[:limit]} if f.repaired is not None else {}),
                }
                for f in outcome.findings
            ]
        if outcome.anomalies:
            fields["anomalies"] = [
                {"kind": a.kind, "tool_name": a.tool_name, "attempt": a.attempt}
                for a in outcome.anomalies
            ]
        write(log, level, "request", fields)

"""The observer: every outcome, recorded once - logged (one line), counted (the metrics) and,
for each finding, written to the incident record (`incidents.py`, to the store the settings
name) and, with --otel-traces, ends its spans (`tracing.py`). A request refused before any
route (`limits.py`) is a `Refusal`: a line and a count.

On the event loop (from `start`), an outcome is sealed (its times taken) and its spans ended when
its request ends, and the rest of its recording waits for the loop's next turn, where every
outcome sealed in the meantime is recorded together: their lines in as few writes as keep each
whole, then the metrics and incident rows of each. Recorded one by one, each between a
request's other work, the same steps cost about three times as much CPU in process (25 µs a
request against 7; bench/RESULTS.md, "6 December"). The turn comes right after the one that
sends the response: a client on the same loop reads it on a later turn; one in another process may
read it some µs before its line is written. Lines carry the time they are written, one for all
of a turn's. `flush`, `drain` and `close` record whatever still waits.

Nothing here may carry a key: outcomes hold none, and every log line, metric label and incident
row goes through `Redactor` as a safety net for the configured keys and anything shaped like a
token.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import Any

from .incident_store import open_store
from .incidents import IncidentWriter
from .logs import write, write_all
from .metrics import Metrics
from .outcome import Outcome
from .redact import Redactor
from .retention import Retention
from .settings import Settings
from .tracing import Tracing

log = logging.getLogger("spillguard")

PATH_CHARS = 200
INF = float("inf")


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
        # What recording does with each outcome after its line, each part apart (one failing
        # skips no other): the incident record only where it is on.
        parts: list[Callable[[Outcome], None]] = [self.metrics.observe]
        if self.incidents is not None:
            parts.append(self.incidents.submit)
        self._parts = tuple(parts)
        self._loop: asyncio.AbstractEventLoop | None = None  # recording waits for its turns
        self._waiting: deque[Outcome] = deque()

    def start(self) -> None:
        """On the event loop that serves the requests: outcomes are recorded on its turns."""
        self._loop = asyncio.get_running_loop()
        if self.incidents is not None:
            self.incidents.start()

    def flush(self) -> None:
        """Record every outcome still waiting for its turn."""
        waiting, batch = self._waiting, []
        while waiting:
            batch.append(waiting.popleft())  # one by one: `close` may run on another thread
        if batch:
            self._record(batch)

    def drain(self) -> None:
        """On the loop, at shutdown: record what waits, and every outcome from now on at once."""
        self._loop = None
        self.flush()

    def close(self) -> None:
        """At shutdown, after `drain` (blocking: run it off the event loop): write what is
        queued."""
        self.flush()
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
        """The outcome's request has ended: sealed and its spans ended now, the rest recorded
        on the loop's next turn (at once, off the loop)."""
        if not outcome.close():
            return
        if self.tracing is not None:
            self._each((self.tracing.finish,), outcome)
        loop = self._loop
        # A flush is due whenever outcomes wait, unless their loop closed before its turn.
        if loop is not None and (not self._waiting or loop.is_closed()):
            try:
                loop.call_soon(self.flush)
            except RuntimeError:  # that loop has closed: what waits, and from now on all, at once
                self._loop = loop = None
                self.flush()
        if loop is None:
            self._record((outcome,))
            return
        self._waiting.append(outcome)

    def _record(self, outcomes: Sequence[Outcome]) -> None:
        """The log lines of these outcomes, in order, then each one's metrics and incident."""
        try:
            self._log_all(outcomes)
        except Exception as exc:  # recording must never fail a request
            log.error("outcomes not logged", extra={"fields": {"error": repr(exc)}})
        for outcome in outcomes:
            self._each(self._parts, outcome)
            if outcome.stream_closed():
                self.metrics.stream_closed()

    def _each(self, parts: Sequence[Callable[[Outcome], None]], outcome: Outcome) -> None:
        for part in parts:
            try:
                part(outcome)
            except Exception as exc:  # recording must never fail a request
                log.error(
                    "outcome not fully recorded",
                    extra={"fields": {"request_id": outcome.request_id, "error": repr(exc)}},
                )

    def refused(self, refusal: Refusal) -> None:
        """A request refused before any route: one line, one count."""
        try:
            log_refusal(refusal)
            self.metrics.refused(refusal.code)
        except Exception as exc:  # recording must never fail a request
            log.error("refusal not recorded", extra={"fields": {"error": repr(exc)}})

    def _log_all(self, outcomes: Sequence[Outcome]) -> None:
        """The "request" line of each outcome, in order; runs of plain ones (no finding, no
        anomaly: most) written together."""
        plain: list[Outcome] = []
        for outcome in outcomes:
            if not outcome.findings and not outcome.anomalies:
                plain.append(outcome)
                continue
            if plain:
                write_all(log, logging.INFO, "request", REQUEST, plain)
                plain = []
            self._log(outcome)
        if plain:
            write_all(log, logging.INFO, "request", REQUEST, plain)

    def _log(self, outcome: Outcome) -> None:
        if not outcome.findings and not outcome.anomalies:
            write_all(log, logging.INFO, "request", REQUEST, (outcome,))
            return
        if not log.isEnabledFor(self._level):
            return
        fields = REQUEST.fields(outcome)
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
        write(log, self._level, "request", fields)


class RequestFields:
    """The "request" line's fields of an outcome, all but its findings and anomalies
    (`logs.Fields`): written straight where every value has its usual type, else from the
    dict (the tests hold the two to the same line)."""

    def fields(self, outcome: Outcome) -> dict[str, Any]:
        statuses = outcome.upstream_statuses
        return {
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

    def console(self, outcome: Outcome) -> str | None:
        return _written(outcome, json=False)

    def json(self, outcome: Outcome) -> str | None:
        return _written(outcome, json=True)


REQUEST = RequestFields()


def _written(outcome: Outcome, json: bool) -> str | None:
    """`RequestFields.fields` as a console line writes them or, with `json`, a JSON line, when
    each value is of its usual type (a float, a finite one); None when any is not."""
    rid, route, mode, upstream = outcome.request_id, outcome.route, outcome.mode, outcome.upstream
    action = outcome.action._value_
    model, family, tool_name, error = (
        outcome.model,
        outcome.family,
        outcome.tool_name,
        outcome.error,
    )
    stream, status, attempts = outcome.stream, outcome.status, outcome.attempts
    calls, statuses = outcome.upstream_calls, outcome.upstream_statuses
    last = statuses[-1] if statuses else None
    up, total = outcome.upstream_ms, outcome.total_ms
    if not (
        str is type(rid) is type(route) is type(mode) is type(upstream) is type(action)
        and bool is type(stream)
        and int is type(status) is type(attempts) is type(calls)
        and (last is None or type(last) is int)
        and (model is None or type(model) is str)
        and (family is None or type(family) is str)
        and (tool_name is None or type(tool_name) is str)
        and (error is None or type(error) is str)
        and float is type(up) is type(total)
        and -INF < up < INF
        and -INF < total < INF
    ):
        return None
    added = round(max(total - up, 0.0), 2)
    if not added < INF:
        return None
    if json:
        enc = encode_basestring
        model = "null" if model is None else enc(model)
        family = "null" if family is None else enc(family)
        tool_name = "null" if tool_name is None else enc(tool_name)
        error = "null" if error is None else enc(error)
        return (
            f', "request_id": {enc(rid)}, "route": {enc(route)}, "mode": {enc(mode)}'
            f', "upstream": {enc(upstream)}, "stream": {"true" if stream else "false"}'
            f', "model": {model}, "status": {status}, "family": {family}'
            f', "tool_name": {tool_name}, "attempts": {attempts}, "error": {error}'
            f', "upstream_calls": {calls}, "outcome": {enc(action)}'
            f', "upstream_status": {"null" if last is None else last}'
            f', "upstream_ms": {up!r}, "added_ms": {added!r}, "total_ms": {total!r}'
        )
    if not (rid and route and mode and upstream and action):
        return None
    # A str is shown when it is not empty, None never, a number or a bool always.
    model = f" model={model}" if model else ""
    family = f" family={family}" if family else ""
    tool_name = f" tool_name={tool_name}" if tool_name else ""
    error = f" error={error}" if error else ""
    upstream_status = "" if last is None else f" upstream_status={last}"
    return (
        f" request_id={rid} route={route} mode={mode} upstream={upstream} stream={stream!r}"
        f"{model} status={status}{family}{tool_name} attempts={attempts}{error}"
        f" upstream_calls={calls} outcome={action}{upstream_status}"
        f" upstream_ms={up!r} added_ms={added!r} total_ms={total!r}"
    )

"""Prometheus metrics: one registry per application, multi-process aware.

With several uvicorn workers every worker counts into files under `PROMETHEUS_MULTIPROC_DIR`
and `/metrics`, whichever worker answers it, sums them all. `multiprocess_dir` prepares that
directory before the workers start (the `serve` command does it when `workers > 1`); the
choice between one process and many is made by prometheus-client when it is first imported,
from that variable, so it must be set before the workers start.

    spillguard_requests_total{route,mode,outcome,upstream}  requests, by what happened to them
    spillguard_findings_total{family,model,upstream}   tool calls found written as text
    spillguard_retries_total{route,upstream}         corrective retries sent upstream
    spillguard_upstream_errors_total{kind,upstream}  unavailable, timeout, too_large,
                                                     status_4xx, status_5xx
    spillguard_upstream_latency_seconds{route,upstream}  time spent waiting on the upstream
    spillguard_added_latency_seconds{route}          spillguard's own time: total - upstream
    spillguard_streams_open                          streamed responses in progress
    spillguard_refusals_total{reason}                requests spillguard refused itself
    spillguard_incidents_written_total               incident rows stored
    spillguard_incidents_dropped_total{reason}       queue_full, unavailable, rejected
    spillguard_incident_store_errors_total{operation}  open, write, prune attempts that failed
    spillguard_incidents_deleted_total{rule}         deleted by retention: age, rows

`upstream` is the name of the upstream a request went to (`default` for the one at /v1, else
its `[upstreams.NAME]`): a handful of values the config file fixes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

from .outcome import Outcome
from .settings import Settings
from .tally import Tally

log = logging.getLogger("spillguard")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # what generate_latest writes
MODEL_CHARS = 64
# Upstream exchanges take seconds to minutes (a model generating); spillguard's own share is
# milliseconds.
UPSTREAM_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
ADDED_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
ERROR_KINDS = {
    "UPSTREAM_UNAVAILABLE": "unavailable",
    "UPSTREAM_TIMEOUT": "timeout",
    "REPLY_TOO_LARGE": "too_large",
}

# (name, documentation, label names) of the metrics every request counts on.
REQUESTS = (
    "spillguard_requests_total",
    "Requests by route, mode, outcome (passed, retried, failed, observed, repaired, "
    "forwarded, error, client_gone) and upstream (its name, default for /v1).",
    ["route", "mode", "outcome", "upstream"],
)
UPSTREAM_LATENCY = (
    "spillguard_upstream_latency_seconds",
    "Per request that reached the upstream: seconds spent waiting on it - connecting, "
    "its response headers and every body read, over all attempts (a retried request "
    "includes both exchanges; a stream includes the model's generation time), by route "
    "and upstream.",
    ["route", "upstream"],
)
ADDED_LATENCY = (
    "spillguard_added_latency_seconds",
    "Per request that reached the upstream: spillguard's own share of its time, the "
    "total time in spillguard minus spillguard_upstream_latency_seconds (reading the "
    "request, inspecting, holding back, writing to the client).",
    ["route"],
)


def multiprocess_enabled() -> bool:
    return bool(os.environ.get(MULTIPROC_ENV))


@contextlib.contextmanager
def multiprocess_dir(workers: int) -> Iterator[str | None]:
    """For `workers > 1`: make sure `PROMETHEUS_MULTIPROC_DIR` names a directory the workers
    (started inside this block, inheriting the environment) share. An operator's own directory is
    kept; otherwise a fresh temporary one is made and removed afterwards."""
    if workers <= 1:
        yield None
        return
    given = os.environ.get(MULTIPROC_ENV)
    if given:
        os.makedirs(given, exist_ok=True)
        yield given
        return
    made = tempfile.mkdtemp(prefix="spillguard-metrics-")
    os.environ[MULTIPROC_ENV] = made
    try:
        yield made
    finally:
        os.environ.pop(MULTIPROC_ENV, None)
        shutil.rmtree(made, ignore_errors=True)


class ModelLabels:
    """Bounds the `model` label: truncated, and past `limit` distinct values, "other"."""

    def __init__(self, limit: int, clean: Callable[[str], str] = str) -> None:
        self.limit = limit
        self.clean = clean
        self.seen: set[str] = set()

    def __call__(self, model: str | None) -> str:
        if not model:
            return "unknown"
        label = self.clean(model)[:MODEL_CHARS]
        if label in self.seen:
            return label
        if len(self.seen) >= self.limit:
            return "other"
        self.seen.add(label)
        return label


class Hot:
    """The labelled children every finished request counts under (its request count, and its
    two latencies), kept by the request's labels: the same few serve every request, and
    prometheus-client's `labels()` validates and locks on each call."""

    __slots__ = ("added_latency", "known", "requests", "upstream_latency")

    def __init__(
        self,
        requests: Counter | Tally,
        upstream_latency: Histogram | Tally,
        added: Histogram | Tally,
    ) -> None:
        self.requests = requests
        self.upstream_latency = upstream_latency
        self.added_latency = added
        self.known: dict[tuple[str, str, str, str], tuple[Any, Any, Any]] = {}

    def __call__(self, route: str, mode: str, outcome: str, upstream: str) -> tuple[Any, Any, Any]:
        """(the requests counter's, the upstream latency's, the added latency's) children."""
        key = (route, mode, outcome, upstream)
        children = self.known.get(key)
        if children is None:
            children = self.known[key] = (
                self.requests.labels(route, mode, outcome, upstream),
                self.upstream_latency.labels(route, upstream),
                self.added_latency.labels(route),
            )
        return children


class Children:
    """A labelled counter's children, kept by their label values: prometheus-client's `labels()`
    validates, converts and locks on every call, and a few label sets serve every request."""

    __slots__ = ("counter", "known")

    def __init__(self, counter: Counter) -> None:
        self.counter = counter
        self.known: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self.known.get(values)
        if child is None:
            child = self.known[values] = self.counter.labels(*values)
        return child


class Metrics:
    """The application's metrics. `observe(outcome)` counts one finished request."""

    def __init__(self, settings: Settings, clean: Callable[[str], str] = str) -> None:
        self.multiprocess = multiprocess_enabled()
        self.registry = CollectorRegistry(auto_describe=True)
        if self.multiprocess:
            multiprocess.MultiProcessCollector(self.registry)  # type: ignore[no-untyped-call]
        elif settings.workers > 1:
            log.warning(
                "metrics are per worker: set PROMETHEUS_MULTIPROC_DIR (spillguard serve does)",
                extra={"fields": {"workers": settings.workers}},
            )
        # In multi-process mode values live in files, collected above; registering the metrics
        # too would count this worker twice.
        own = None if self.multiprocess else self.registry
        self.model = ModelLabels(settings.metrics_model_limit, clean)
        # The three every request counts on: in one process, kept by `tally.Tally`.
        if self.multiprocess:
            self.requests: Counter | Tally = Counter(*REQUESTS, registry=None)
            self.upstream_latency: Histogram | Tally = Histogram(
                *UPSTREAM_LATENCY, buckets=UPSTREAM_BUCKETS, registry=None
            )
            self.added_latency: Histogram | Tally = Histogram(
                *ADDED_LATENCY, buckets=ADDED_BUCKETS, registry=None
            )
        else:
            self.requests = Tally(*REQUESTS)
            self.upstream_latency = Tally(*UPSTREAM_LATENCY, buckets=UPSTREAM_BUCKETS)
            self.added_latency = Tally(*ADDED_LATENCY, buckets=ADDED_BUCKETS)
            for tally in (self.requests, self.upstream_latency, self.added_latency):
                self.registry.register(tally)
        self.findings = Counter(
            "spillguard_findings_total",
            "Tool calls found written out as text, by markup family, requested model and "
            "upstream (one per finding: a retry that leaks again counts twice).",
            ["family", "model", "upstream"],
            registry=own,
        )
        self.leaked_tokens = Counter(
            "spillguard_leaked_tokens_total",
            "Tokens the upstream billed for attempts that leaked (input or output), by markup "
            "family, requested model and upstream: a retried reply's own usage covers only its "
            "retry.",
            ["family", "model", "direction", "upstream"],
            registry=own,
        )
        self.anomalies = Counter(
            "spillguard_anomalies_total",
            "Structured calls that are missing or malformed, by kind (tool_calls_without_calls, "
            "markup_in_tool_name, undeclared_tool), requested model and upstream; reported, never "
            "acted on.",
            ["kind", "model", "upstream"],
            registry=own,
        )
        self.retries = Counter(
            "spillguard_retries_total",
            "Corrective retries sent upstream after a finding, by route and upstream.",
            ["route", "upstream"],
            registry=own,
        )
        self.upstream_errors = Counter(
            "spillguard_upstream_errors_total",
            "Upstream failures by kind: unavailable (connect or read failed), timeout, too_large "
            "(reply over max_reply or the hold-back limit), status_4xx and status_5xx (per "
            "upstream answer with that status), by upstream.",
            ["kind", "upstream"],
            registry=own,
        )
        self.refusals = Counter(
            "spillguard_refusals_total",
            "Requests spillguard refused itself, by reason: its error code in lower case "
            "(invalid_proxy_key 401, headers_too_large 431, overloaded 503, request_too_large "
            "413, request_timeout 408, invalid_path 400, invalid_mode_header 400, "
            "mode_loosening_not_allowed 403).",
            ["reason"],
            registry=own,
        )
        self.incidents_stored = Counter(
            "spillguard_incidents_written",
            "Incident rows written to the incident store.",
            registry=own,
        )
        self.incidents_lost = Counter(
            "spillguard_incidents_dropped",
            "Incident rows not recorded, by reason: queue_full (the store fell behind), "
            "unavailable (the store was still down at shutdown), rejected (the store refused "
            "the row).",
            ["reason"],
            registry=own,
        )
        self.incident_store_errors = Counter(
            "spillguard_incident_store_errors",
            "Failed attempts to use the incident store, by operation (open, write, prune); the "
            "rows wait and are tried again.",
            ["operation"],
            registry=own,
        )
        self.incidents_pruned = Counter(
            "spillguard_incidents_deleted",
            "Incident rows deleted by retention, by rule: age (incident_retention) or rows "
            "(incident_max_rows).",
            ["rule"],
            registry=own,
        )
        self.streams_open = Gauge(
            "spillguard_streams_open",
            "Streamed responses (stream: true) being sent to clients right now.",
            registry=own,
            multiprocess_mode="livesum",
        )
        self._hot = Hot(self.requests, self.upstream_latency, self.added_latency)
        # The event loop's counts (the incident writer's thread counts with `labels()`).
        self._findings = Children(self.findings)
        self._leaked_tokens = Children(self.leaked_tokens)
        self._anomalies = Children(self.anomalies)
        self._retries = Children(self.retries)
        self._upstream_errors = Children(self.upstream_errors)
        self._refusals = Children(self.refusals)

    def observe(self, outcome: Outcome) -> None:
        up = outcome.upstream
        # The action is its own label value (a StrEnum is the str it names).
        requests, upstream_latency, added_latency = self._hot(
            outcome.route, outcome.mode, outcome.action, up
        )
        requests.inc()
        if outcome.findings or outcome.anomalies:
            self._leaked(outcome)
        if outcome.attempts > 1:
            self._retries(outcome.route, up).inc(outcome.attempts - 1)
        for status in outcome.upstream_statuses:
            if status >= 400:
                answered = "status_4xx" if status < 500 else "status_5xx"
                self._upstream_errors(answered, up).inc()
        if outcome.error:
            kind = ERROR_KINDS.get(outcome.error)
            if kind:
                self._upstream_errors(kind, up).inc()
            if 400 <= outcome.status < 500:  # refused by its route
                self.refused(outcome.error)
        if outcome.upstream_calls:
            upstream = outcome.upstream_ms / 1000
            upstream_latency.observe(upstream)
            added_latency.observe(max(outcome.total_ms / 1000 - upstream, 0.0))

    def _leaked(self, outcome: Outcome) -> None:
        """The findings and anomalies of a request that has some."""
        up = outcome.upstream
        for found in outcome.findings:
            model = self.model(outcome.model)
            self._findings(found.family, model, up).inc()
            if found.usage is not None and found.repaired is None:  # a repair reached the client
                tokens = self._leaked_tokens
                tokens(found.family, model, "input", up).inc(found.usage.input_tokens)
                tokens(found.family, model, "output", up).inc(found.usage.output_tokens)
        for odd in outcome.anomalies:
            self._anomalies(odd.kind, self.model(outcome.model), up).inc()

    def refused(self, code: str) -> None:
        self._refusals(code.lower()).inc()

    # ---- the incident writer's (`incidents.Counts`), from its thread ---------------------

    def incidents_written(self, count: int) -> None:
        self.incidents_stored.inc(count)

    def incidents_dropped(self, reason: str, count: int) -> None:
        self.incidents_lost.labels(reason).inc(count)

    def incident_store_failed(self, operation: str) -> None:
        self.incident_store_errors.labels(operation).inc()

    def incidents_deleted(self, rule: str, count: int) -> None:
        if count:
            self.incidents_pruned.labels(rule).inc(count)

    def stream_opened(self) -> None:
        self.streams_open.inc()

    def stream_closed(self) -> None:
        self.streams_open.dec()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def close(self) -> None:
        """At worker shutdown: drop this worker's live gauge (its open streams) from the sum."""
        if self.multiprocess:
            with contextlib.suppress(OSError):
                multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]

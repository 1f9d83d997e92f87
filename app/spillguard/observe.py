"""What happened to each request: one outcome, recorded once - logged (one line), counted (the
metrics) and, for each finding, written to the incident record.

Nothing here may carry a key: outcomes hold none, exceptions are logged by type and message only
(never a traceback, never headers), and every log line, metric label and incident row goes
through `Redactor` as a safety net for the configured keys and anything shaped like a token.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from multidict import CIMultiDictProxy

from .incidents import IncidentWriter
from .metrics import Metrics
from .settings import Settings
from .upstream import Reply

log = logging.getLogger("spillguard")


@dataclass
class Outcome:
    """One request through spillguard. `action` is passed, retried, failed or observed for an
    inspected request, forwarded for one spillguard did not inspect, error for its own errors,
    client_gone when the client left first."""

    request_id: str
    route: str
    mode: str
    stream: bool = False
    model: str | None = None
    action: str = "forwarded"
    status: int = 0
    family: str | None = None
    tool_name: str | None = None
    attempts: int = 0
    error: str | None = None
    upstream_ms: float = 0.0  # waiting on the upstream, over every exchange (see `timed`)
    total_ms: float = 0.0
    upstream_calls: int = 0
    upstream_statuses: list[int] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    findings: list[dict[str, Any]] = field(default_factory=list)
    deferred: bool = False  # a streamed response records its outcome when it ends
    streaming: bool = False  # counted in spillguard_streams_open until recorded
    recorded: bool = False

    def finding(self, family: str, tool_name: str | None, attempt: int, excerpt: str) -> None:
        self.family, self.tool_name = family, tool_name
        self.findings.append(
            {"family": family, "tool_name": tool_name, "attempt": attempt, "excerpt": excerpt}
        )

    def waited(self, since: float) -> None:
        self.upstream_ms += (time.perf_counter() - since) * 1000


# ---- timing the upstream ---------------------------------------------------------------------


class Timed:
    """An upstream `Reply` whose every wait counts toward `outcome.upstream_ms`."""

    def __init__(self, reply: Reply, outcome: Outcome) -> None:
        self.reply = reply
        self.outcome = outcome

    @property
    def status(self) -> int:
        return self.reply.status

    @property
    def headers(self) -> CIMultiDictProxy[str]:
        return self.reply.headers

    @property
    def content_type(self) -> str:
        return self.reply.content_type

    @property
    def identity(self) -> bool:
        return self.reply.identity

    @property
    def decoded(self) -> bool:
        return self.reply.decoded

    async def chunk(self) -> bytes:
        since = time.perf_counter()
        try:
            return await self.reply.chunk()
        finally:
            self.outcome.waited(since)

    async def wait_chunk(self, wait: float | None) -> bytes | None:
        since = time.perf_counter()
        try:
            return await self.reply.wait_chunk(wait)
        finally:
            self.outcome.waited(since)

    async def read(self, limit: int) -> bytes:
        since = time.perf_counter()
        try:
            return await self.reply.read(limit)
        finally:
            self.outcome.waited(since)

    async def iter_raw(self) -> AsyncIterator[bytes]:
        while data := await self.chunk():
            yield data

    def close(self) -> None:
        self.reply.close()

    async def __aenter__(self) -> Timed:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


async def timed(outcome: Outcome, opening: Awaitable[Reply]) -> Timed:
    """Await `Upstream.open(...)` for `outcome`: one more upstream exchange, its wait for the
    response headers timed and its status noted; the reply's reads are timed as they happen."""
    outcome.upstream_calls += 1
    since = time.perf_counter()
    try:
        reply = await opening
    finally:
        outcome.waited(since)
    outcome.upstream_statuses.append(reply.status)
    return Timed(reply, outcome)


# ---- redaction -------------------------------------------------------------------------------

REDACTED = "[redacted]"
MIN_KEY = 4  # shorter configured keys are not searched for (they would blot out ordinary text)
TOKENS = re.compile(
    r"(?i)(?P<bearer>\bbearer\s+)[^\s\"',;]{6,}"
    r"|\b(?P<prefix>sk-|xai-|sk_)[A-Za-z0-9][A-Za-z0-9_\-]{7,}"
)


class Redactor:
    """Replaces the configured keys, bearer tokens and `sk-`-style keys in text."""

    def __init__(self, keys: list[str]) -> None:
        keys = sorted({k for k in keys if len(k) >= MIN_KEY}, key=len, reverse=True)
        self.keys = re.compile("|".join(re.escape(k) for k in keys)) if keys else None

    @classmethod
    def from_settings(cls, settings: Settings) -> Redactor:
        keys = [k.get_secret_value() for k in settings.proxy_keys]
        if settings.upstream_key is not None:
            keys.append(settings.upstream_key.get_secret_value())
        return cls(keys)

    def __call__(self, text: str) -> str:
        if self.keys is not None:
            text = self.keys.sub(REDACTED, text)
        return TOKENS.sub(self._token, text)

    @staticmethod
    def _token(match: re.Match[str]) -> str:
        return (match.group("bearer") or match.group("prefix") or "") + REDACTED

    def deep(self, value: Any) -> Any:
        """`value` with every string in it (and in nested lists and dicts) redacted."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {k: self.deep(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.deep(v) for v in value]
        return value


# ---- log lines -------------------------------------------------------------------------------


def _exception(record: logging.LogRecord) -> dict[str, str]:
    """An exception as its type and message only: a traceback could quote anything."""
    if not record.exc_info or record.exc_info[0] is None:
        return {}
    out = {"exc_type": record.exc_info[0].__name__}
    if record.exc_info[1] is not None and str(record.exc_info[1]):
        out["exc"] = str(record.exc_info[1])[:500]
    return out


class JsonFormatter(logging.Formatter):
    def __init__(self, redact: Redactor | None = None) -> None:
        super().__init__()
        self.redact = redact or Redactor([])

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict):
            out.update(extra)
        out.update(_exception(record))
        text = json.dumps(self.redact.deep(out), ensure_ascii=False, default=str)
        return self.redact(text)


class ConsoleFormatter(logging.Formatter):
    def __init__(self, redact: Redactor | None = None) -> None:
        super().__init__()
        self.redact = redact or Redactor([])

    def format(self, record: logging.LogRecord) -> str:
        fields = dict(getattr(record, "fields", None) or {})
        findings = fields.pop("findings", None) or []
        fields.update(_exception(record))
        text = f"{record.levelname.lower():7} {record.getMessage()}"
        text += "".join(f" {k}={v}" for k, v in fields.items() if v not in (None, "", []))
        for found in findings:
            text += "\n        leaked " + " ".join(
                f"{k}={v!r}" if k == "excerpt" else f"{k}={v}" for k, v in found.items()
            )
        return self.redact(text)


def setup_logging(settings: Settings) -> None:
    """The "spillguard" logger to stderr, as JSON or for a console. In JSON mode uvicorn's own
    lines (its errors) go through the same formatter, so every line is JSON and none carries a
    traceback."""
    redact = Redactor.from_settings(settings)
    handler = logging.StreamHandler(sys.stderr)
    json_mode = settings.log_format == "json"
    handler.setFormatter(JsonFormatter(redact) if json_mode else ConsoleFormatter(redact))
    log.handlers[:] = [handler]
    log.setLevel(settings.log_level)
    log.propagate = False
    if json_mode:
        for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
            other = logging.getLogger(name)
            other.handlers[:] = [handler] if name != "uvicorn.error" else []
            other.propagate = name == "uvicorn.error"


# ---- the observer ----------------------------------------------------------------------------

LOGGED = (
    "request_id",
    "route",
    "mode",
    "stream",
    "model",
    "status",
    "family",
    "tool_name",
    "attempts",
    "error",
    "upstream_calls",
)


class Observer:
    """Receives every outcome, once: one log line, the metrics, the incident record."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.redact = Redactor.from_settings(settings)
        self._leak_level = logging.getLevelName(settings.leak_log_level)
        self._level = max(self._leak_level, logging.INFO)
        self.metrics = Metrics(settings, self.redact)
        self.incidents = (
            IncidentWriter(settings.incidents_db, settings.incident_excerpt_limit, self.redact)
            if settings.incidents_db
            else None
        )

    def start(self) -> None:
        if self.incidents is not None:
            self.incidents.start()

    def close(self) -> None:
        """At shutdown (blocking: run it off the event loop): write what is queued."""
        if self.incidents is not None:
            self.incidents.close()
        self.metrics.close()

    def defer(self, outcome: Outcome) -> None:
        """The response is being streamed: `record` comes when it ends."""
        outcome.deferred = True
        if outcome.stream and not outcome.streaming and not outcome.recorded:
            outcome.streaming = True
            self.metrics.stream_opened()

    def record(self, outcome: Outcome) -> None:
        if outcome.recorded:
            return
        outcome.recorded = True
        outcome.total_ms = round((time.perf_counter() - outcome.started) * 1000, 2)
        outcome.upstream_ms = round(min(outcome.upstream_ms, outcome.total_ms), 2)
        for part in (self._log, self.metrics.observe, self._incidents):
            try:
                part(outcome)
            except Exception as exc:  # recording must never fail a request
                log.error(
                    "outcome not fully recorded",
                    extra={"fields": {"request_id": outcome.request_id, "error": repr(exc)}},
                )
        if outcome.streaming:
            outcome.streaming = False
            self.metrics.stream_closed()

    def _incidents(self, outcome: Outcome) -> None:
        if self.incidents is not None:
            self.incidents.submit(outcome)

    def _log(self, outcome: Outcome) -> None:
        level = self._level if outcome.findings else logging.INFO
        if not log.isEnabledFor(level):
            return
        fields: dict[str, Any] = {k: getattr(outcome, k) for k in LOGGED}
        fields["outcome"] = outcome.action
        fields["upstream_status"] = (
            outcome.upstream_statuses[-1] if outcome.upstream_statuses else None
        )
        fields["upstream_ms"] = outcome.upstream_ms
        fields["added_ms"] = round(max(outcome.total_ms - outcome.upstream_ms, 0.0), 2)
        fields["total_ms"] = outcome.total_ms
        if outcome.findings and log.isEnabledFor(self._leak_level):
            limit = self.settings.excerpt_limit
            fields["findings"] = [
                {
                    "family": f["family"],
                    "tool_name": f["tool_name"],
                    "attempt": f["attempt"],
                    "excerpt": f["excerpt"][:limit],
                }
                for f in outcome.findings
            ]
        log.log(level, "request", extra={"fields": fields})

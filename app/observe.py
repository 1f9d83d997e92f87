"""What happened to each request: one outcome, logged once (and counted, and recorded)."""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from .settings import Settings

log = logging.getLogger("spillguard")


@dataclass
class Outcome:
    """One request through spillguard. `action` is passed, retried, failed or observed for an
    inspected request, forwarded for one spillguard did not inspect, error for its own errors."""

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
    upstream_ms: float = 0.0
    total_ms: float = 0.0
    started: float = field(default_factory=time.perf_counter)
    findings: list[dict[str, Any]] = field(default_factory=list)
    deferred: bool = False  # a streamed response records its outcome when it ends
    recorded: bool = False

    def finding(self, family: str, tool_name: str | None, attempt: int, excerpt: str) -> None:
        self.family, self.tool_name = family, tool_name
        self.findings.append(
            {"family": family, "tool_name": tool_name, "attempt": attempt, "excerpt": excerpt}
        )


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "msg": record.getMessage(),
        }
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict):
            out.update(extra)
        if record.exc_info and record.exc_info[0] is not None:
            out["exc_type"] = record.exc_info[0].__name__
        return json.dumps(out, ensure_ascii=False, default=str)


class ConsoleFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        extra = getattr(record, "fields", None)
        text = f"{record.levelname.lower():7} {record.getMessage()}"
        if isinstance(extra, dict):
            text += " " + " ".join(f"{k}={v}" for k, v in extra.items() if v not in (None, ""))
        return text


def setup_logging(settings: Settings) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if settings.log_format == "json" else ConsoleFormatter())
    log.handlers[:] = [handler]
    log.setLevel(settings.log_level)
    log.propagate = False


class Observer:
    """Receives every outcome. Logging here; metrics and the incident record hook in too."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._leak_level = logging.getLevelName(settings.leak_log_level)

    def record(self, outcome: Outcome) -> None:
        if outcome.recorded:
            return
        outcome.recorded = True
        outcome.total_ms = round((time.perf_counter() - outcome.started) * 1000, 2)
        fields = {
            k: v
            for k, v in asdict(outcome).items()
            if k not in ("started", "findings", "deferred", "recorded")
        }
        log.info("request", extra={"fields": fields})
        limit = self.settings.excerpt_limit
        for found in outcome.findings:
            log.log(
                self._leak_level,
                "leaked tool call",
                extra={
                    "fields": {
                        "request_id": outcome.request_id,
                        "model": outcome.model,
                        "family": found["family"],
                        "tool_name": found["tool_name"],
                        "attempt": found["attempt"],
                        "excerpt": found["excerpt"][:limit],
                    }
                },
            )

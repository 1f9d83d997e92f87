"""Log lines: JSON (one object a line) or console text, and the logger's setup.

Exceptions are logged by type and message only, never a traceback (it could quote anything);
every line goes through the `Redactor`.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from .redact import Redactor
from .settings import Settings

log = logging.getLogger("spillguard")


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
        text = json.dumps(out, ensure_ascii=False, default=str)
        if self.redact.finds_nothing(text):  # most lines: nothing to redact
            return text
        text = json.dumps(self.redact.deep(out), ensure_ascii=False, default=str)
        return self.redact(text)


class ConsoleFormatter(logging.Formatter):
    def __init__(self, redact: Redactor | None = None) -> None:
        super().__init__()
        self.redact = redact or Redactor([])

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", None) or {}
        if record.exc_info:
            fields = {**fields, **_exception(record)}
        parts = [f"{record.levelname.lower():7} {record.getMessage()}"]
        findings: list[dict[str, Any]] = []
        for k, v in fields.items():
            if k == "findings":
                findings = v or []
            elif v is not None and v != "" and v != []:
                parts.append(f" {k}={v}")
        text = "".join(parts)
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
    # No formatter here reads where a line was logged from, or its thread or process: a record
    # need not look them up (the logging module's documented optimisations).
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    log.propagate = False
    if json_mode:
        for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
            other = logging.getLogger(name)
            other.handlers[:] = [handler] if name != "uvicorn.error" else []
            other.propagate = name == "uvicorn.error"

"""`logs.write`: the line it writes straight to the stream is the line `Logger.log` writes."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from spillguard.logs import ConsoleFormatter, JsonFormatter, setup_logging, write
from spillguard.redact import Redactor
from spillguard.settings import Settings

LOGGER = logging.getLogger("spillguard")
FIELDS: list[dict[str, Any]] = [
    {},
    {"request_id": "r-1", "route": "chat", "stream": False, "status": 200, "upstream_ms": 0.25},
    {"model": None, "family": "", "anomalies": [], "attempts": 0, "ok": True, "ratio": 1e-7},
    {"findings": [{"family": "hermes", "tool_name": "f", "attempt": 1, "excerpt": "<t>\n'x'"}]},
    {"note": "héllo ſk-abcdefghij1", "auth": "Bearer abcdef123456", "key": "my-own-proxy-key"},
    {"nested": {"a": ["sk-abcdefghij12", 3]}, "bytes": b"\x00", "quote": 'say "hi"\\'},
]


@pytest.fixture
def restored() -> Iterator[None]:
    """The spillguard logger as it was, whatever a test does to it."""
    handlers, level, propagate = LOGGER.handlers[:], LOGGER.level, LOGGER.propagate
    yield
    LOGGER.handlers[:], LOGGER.propagate = handlers, propagate
    LOGGER.setLevel(level)


def _setup(log_format: str, log_level: str = "DEBUG") -> io.StringIO:
    setup_logging(
        Settings(log_format=log_format, log_level=log_level, proxy_keys=["my-own-proxy-key"])
    )
    stream = io.StringIO()
    handler = LOGGER.handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(stream)
    return stream


@pytest.mark.parametrize("log_format", ["console", "json"])
@pytest.mark.parametrize("level", [logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR])
@pytest.mark.parametrize("fields", FIELDS)
def test_the_direct_line_is_the_logged_line(
    restored: None, monkeypatch: pytest.MonkeyPatch, log_format: str, level: int, fields: Any
) -> None:
    monkeypatch.setattr("time.time", lambda: 1764600000.123456)  # a LogRecord's and write's
    stream = _setup(log_format)
    LOGGER.log(level, "request", extra={"fields": fields})
    logged = stream.getvalue()
    stream.seek(0)
    stream.truncate()
    write(LOGGER, level, "request", fields)
    assert stream.getvalue() == logged
    assert logged.endswith("\n") and logged.count("\n") == 1 + (
        log_format == "console" and bool(fields.get("findings"))
    )


@pytest.mark.parametrize("log_format", ["console", "json"])
def test_levels_filter_as_the_logger_does(restored: None, log_format: str) -> None:
    stream = _setup(log_format, log_level="WARNING")
    write(LOGGER, logging.INFO, "request", {"a": 1})
    assert stream.getvalue() == ""
    LOGGER.handlers[0].setLevel(logging.ERROR)
    write(LOGGER, logging.WARNING, "request", {"a": 1})
    assert stream.getvalue() == ""
    write(LOGGER, logging.ERROR, "request", {"a": 1})
    assert "request" in stream.getvalue()


class Seen(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_any_other_arrangement_gets_the_record(restored: None) -> None:
    """A second handler, a filter, a propagating logger or another formatter: the record goes
    through the logging module, with its fields."""
    stream = _setup("console")
    seen = Seen()
    LOGGER.addHandler(seen)
    write(LOGGER, logging.INFO, "request", {"a": 1})
    assert [r.fields for r in seen.records] == [{"a": 1}]  # type: ignore[attr-defined]
    assert stream.getvalue() == "info    request a=1\n"

    LOGGER.removeHandler(seen)
    LOGGER.propagate = True
    logging.getLogger().addHandler(seen)
    try:
        write(LOGGER, logging.INFO, "request", {"a": 2})
    finally:
        logging.getLogger().removeHandler(seen)
    assert len(seen.records) == 2

    LOGGER.propagate = False
    handler = LOGGER.handlers[0]
    handler.addFilter(lambda record: False)
    write(LOGGER, logging.INFO, "request", {"a": 3})
    assert stream.getvalue() == "info    request a=1\ninfo    request a=2\n"


def test_a_subclassed_formatter_formats_its_own_way(restored: None) -> None:
    class Shouting(ConsoleFormatter):
        def format(self, record: logging.LogRecord) -> str:
            return super().format(record).upper()

    stream = _setup("console")
    LOGGER.handlers[0].setFormatter(Shouting())
    write(LOGGER, logging.INFO, "request", {"a": "b"})
    assert stream.getvalue() == "INFO    REQUEST A=B\n"


def test_a_failing_stream_is_handled_as_the_handler_would(
    restored: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Broken(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError("disk full")

    _setup("json")
    LOGGER.handlers[0].setStream(Broken())  # type: ignore[attr-defined]
    handled: list[logging.LogRecord] = []
    monkeypatch.setattr(logging.StreamHandler, "handleError", lambda self, r: handled.append(r))
    write(LOGGER, logging.INFO, "request", {"a": 1})
    assert [(r.getMessage(), r.fields) for r in handled] == [("request", {"a": 1})]  # type: ignore[attr-defined]


def test_formatters_line_is_their_format() -> None:
    redact = Redactor(["my-own-proxy-key"])
    record = logging.LogRecord("spillguard", logging.INFO, __file__, 1, "request", None, None)
    record.fields = FIELDS[4]
    assert ConsoleFormatter(redact).format(record) == ConsoleFormatter(redact).line(
        "INFO", "request", FIELDS[4]
    )
    assert JsonFormatter(redact).format(record) == JsonFormatter(redact).line(
        "INFO", "request", FIELDS[4], record.created, "spillguard"
    )

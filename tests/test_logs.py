"""`logs.write`: the line it writes straight to the stream is the line `Logger.log` writes - and
`logs.write_all`'s, made from fields written straight, the line of their dict."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterator
from http import HTTPStatus
from typing import Any
from unittest import mock

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from spillguard.logs import (
    AS_GIVEN,
    PIPE_BUF,
    ConsoleFormatter,
    JsonFormatter,
    setup_logging,
    write,
    write_all,
)
from spillguard.outcome import Action
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


@pytest.mark.parametrize("count", [1, 3])
def test_a_failing_stream_is_each_records_failure_as_the_handler_would(
    restored: None, monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    """One line (`write`), or several written together (`write_all`): each record fails."""

    class Broken(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError("disk full")

    _setup("json")
    LOGGER.handlers[0].setStream(Broken())  # type: ignore[attr-defined]
    handled: list[logging.LogRecord] = []
    monkeypatch.setattr(logging.StreamHandler, "handleError", lambda self, r: handled.append(r))
    many = [{"a": n} for n in range(count)]
    if count == 1:
        write(LOGGER, logging.INFO, "request", many[0])
    else:
        write_all(LOGGER, logging.INFO, "request", AS_GIVEN, many)
    got = [(r.getMessage(), r.fields) for r in handled]  # type: ignore[attr-defined]
    assert got == [("request", fields) for fields in many]


@pytest.mark.parametrize("log_format", ["console", "json"])
def test_every_line_is_flushed_as_it_is_written(restored: None, log_format: str) -> None:
    """No line waits in a buffer for the next: a hard kill loses none."""

    class Flushes(io.StringIO):
        def __init__(self) -> None:
            super().__init__()
            self.flushed: list[str] = []

        def flush(self) -> None:
            self.flushed.append(self.getvalue())

    _setup(log_format)
    stream = Flushes()
    LOGGER.handlers[0].setStream(stream)  # type: ignore[attr-defined]
    write(LOGGER, logging.INFO, "request", {"a": 1})
    write(LOGGER, logging.INFO, "request", {"a": 2})
    lines = stream.getvalue().splitlines(keepends=True)
    assert len(lines) == 2
    assert stream.flushed == [lines[0], lines[0] + lines[1]]


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


def reference_line(redact: Redactor, levelname: str, msg: str, fields: dict[str, Any]) -> str:
    """The console line by its plainest reading: every field but "findings" compared with None,
    "" and [], in order; each finding on a line of its own."""
    parts = [f"{levelname.lower():7} {msg}"]
    findings: Any = []
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
    return redact(text)


class Odd:
    """A value equal to everything: shown or not as its comparisons say."""

    def __eq__(self, other: object) -> bool:
        return True

    def __str__(self) -> str:
        return "odd"


SCALAR = st.one_of(
    st.none(),
    st.sampled_from(["", "chat", "sk-abcdefghij12", "Bearer abcdef123456", "my-own-proxy-key"]),
    st.text(max_size=10),
    st.integers(),
    st.floats(),
    st.booleans(),
    st.sampled_from([HTTPStatus.OK, Action.PASSED, b"", b"x", 0.0, -0.0, (), (1,), {}, Odd()]),
)
VALUE = st.one_of(
    SCALAR, st.lists(SCALAR, max_size=3), st.dictionaries(st.text(max_size=3), SCALAR)
)
FINDING = st.dictionaries(st.sampled_from(["family", "tool_name", "attempt", "excerpt"]), VALUE)
FINDINGS = st.one_of(
    st.none(), st.just([]), st.lists(FINDING, max_size=3), st.sampled_from(["", 0, False, "x", 3])
)
KEY = st.one_of(
    st.sampled_from(["request_id", "status", "model", "findings", "error"]), st.text(max_size=4)
)
LINE_FIELDS = st.dictionaries(KEY, VALUE, max_size=8).flatmap(
    lambda d: FINDINGS.map(lambda f: d if "findings" not in d else {**d, "findings": f})
)


def _result(line: Callable[[], str]) -> tuple[str, str]:
    try:
        return "line", line()
    except Exception as exc:  # a findings value no line can be made of fails either way
        return "error", type(exc).__name__


@settings(max_examples=600)
@given(
    st.sampled_from(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL", "Level 25", "NOTE"]),
    LINE_FIELDS,
)
def test_the_console_line_is_its_plainest_reading(levelname: str, fields: dict[str, Any]) -> None:
    redact = Redactor(["my-own-proxy-key"])
    formatter = ConsoleFormatter(redact)
    assert _result(lambda: formatter.line(levelname, "request", fields)) == _result(
        lambda: reference_line(redact, levelname, "request", fields)
    )


def reference_json_line(redact: Redactor, fields: dict[str, Any]) -> str:
    """The JSON line by its plainest reading: every string redacted, dumped, and the text
    redacted."""
    out = {
        "ts": 1764600000.123,
        "level": "info",
        "logger": "spillguard",
        "msg": "request",
        **fields,
    }
    return redact(json.dumps(redact.deep(out), ensure_ascii=False, default=str))


@settings(max_examples=400)
@given(st.dictionaries(KEY, VALUE, max_size=8))
def test_the_json_line_is_its_plainest_reading(fields: dict[str, Any]) -> None:
    redact = Redactor(["my-own-proxy-key"])
    line = JsonFormatter(redact).line("INFO", "request", fields, 1764600000.1234, "spillguard")
    assert line == reference_json_line(redact, fields)


OWN = frozenset({"ts", "level", "logger", "msg"})  # a JSON line's members before the fields


class Written:
    """Fields (`logs.Fields`) of a dict of non-empty strings and ints, written straight as the
    formatters would write them; counts the dicts asked for."""

    def __init__(self) -> None:
        self.dicts = 0

    def fields(self, about: dict[str, Any]) -> dict[str, Any]:
        self.dicts += 1
        return about

    def console(self, about: dict[str, Any]) -> str:
        return "".join(f" {k}={v}" for k, v in about.items())

    def json(self, about: dict[str, Any]) -> str | None:
        if not OWN.isdisjoint(about):  # the dict's would replace a member of the line's own
            return None
        return "".join(
            ", " + json.dumps({k: v}, ensure_ascii=False)[1:-1] for k, v in about.items()
        )


PLAIN = st.one_of(
    st.integers(),
    st.sampled_from(["chat", "sk-abcdefghij12", "Bearer abcdef123456", "my-own-proxy-key"]),
    st.text(min_size=1, max_size=10),
    st.text(st.characters(codec="ascii"), min_size=1, max_size=10),
)


@pytest.mark.parametrize("log_format", ["console", "json"])
@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([logging.DEBUG, logging.INFO, logging.WARNING, logging.CRITICAL, 25]),
    st.sampled_from(["request", "refused", 'a "quoted"\\ msg\n', "ſk-abcdefghij1"]),
    st.dictionaries(st.text(max_size=6), PLAIN, max_size=6),
)
@example(logging.INFO, "request", {"ts": 1, "msg": "x", "level": "y", "logger": "z"})
def test_fields_written_straight_make_the_line_of_their_dict(
    log_format: str, level: int, msg: str, fields: dict[str, Any]
) -> None:
    written = Written()
    handlers, old_level, propagate = LOGGER.handlers[:], LOGGER.level, LOGGER.propagate
    stream = _setup(log_format)
    try:
        with mock.patch("time.time", return_value=1764600000.123456):
            LOGGER.log(level, msg, extra={"fields": fields})
            logged = stream.getvalue()
            stream.seek(0)
            stream.truncate()
            write_all(LOGGER, level, msg, written, (fields,))
    finally:
        LOGGER.handlers[:], LOGGER.propagate = handlers, propagate
        LOGGER.setLevel(old_level)
    assert stream.getvalue() == logged
    # Only a JSON line with something to redact is made again from the dict.
    names = {"ts": 0, "level": logging.getLevelName(level).lower(), "logger": "spillguard"}
    unredacted = json.dumps({**names, "msg": msg, **fields}, ensure_ascii=False)
    redacts = not Redactor(["my-own-proxy-key"]).finds_nothing(unredacted)
    assert written.dicts == (log_format == "json" and (redacts or not OWN.isdisjoint(fields)))


def test_any_other_arrangement_gets_the_dict_of_fields_written_straight(restored: None) -> None:
    stream = _setup("json")
    seen = Seen()
    LOGGER.addHandler(seen)
    write_all(LOGGER, logging.INFO, "request", Written(), ({"a": 1},))
    assert [r.fields for r in seen.records] == [{"a": 1}]  # type: ignore[attr-defined]
    assert json.loads(stream.getvalue())["a"] == 1


class Writes(io.StringIO):
    """A stream that keeps each write and each flush."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []
        self.flushes = 0

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)

    def flush(self) -> None:
        self.flushes += 1


@pytest.mark.parametrize("log_format", ["console", "json"])
def test_lines_written_together_go_in_whole_pieces_of_pipe_buf_at_most(
    restored: None, log_format: str
) -> None:
    """Lines of several workers sharing a pipe never interleave: a write of PIPE_BUF bytes or
    fewer reaches it in one piece, and every write holds whole lines (a longer line alone)."""
    many = [{"n": n, "note": "é" * (n % 7) * 40} for n in range(60)]
    many[30]["note"] = "x" * (2 * PIPE_BUF)
    with mock.patch("time.time", return_value=1764600000.123456):
        _setup(log_format)
        apart = Writes()
        LOGGER.handlers[0].setStream(apart)  # type: ignore[attr-defined]
        for fields in many:
            write(LOGGER, logging.INFO, "request", fields)
        together = Writes()
        LOGGER.handlers[0].setStream(together)  # type: ignore[attr-defined]
        write_all(LOGGER, logging.INFO, "request", AS_GIVEN, many)
    assert together.getvalue() == apart.getvalue()
    assert len(apart.writes) == 60
    assert 2 < len(together.writes) < 60
    assert together.flushes == len(together.writes)
    for text in together.writes:
        assert text.endswith("\n")
        assert len(text.encode()) <= PIPE_BUF or text.count("\n") == 1


def test_a_lone_surrogate_is_written_escaped_and_costs_no_other_line(restored: None) -> None:
    """A client's text read by `json` may hold a lone surrogate: stderr writes it escaped, and
    the lines written with it are written too."""
    raw = io.BytesIO()
    stderr_like = io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace")
    _setup("json")
    LOGGER.handlers[0].setStream(stderr_like)  # type: ignore[attr-defined]
    write_all(LOGGER, logging.INFO, "request", AS_GIVEN, [{"n": 1}, {"m": "a\ud800b"}, {"n": 3}])
    stderr_like.flush()
    lines = raw.getvalue().decode().splitlines()
    assert [json.loads(line).get("n") for line in lines] == [1, None, 3]
    assert '"a\\ud800b"' in lines[1]  # escaped: it reads back as the text logged
    assert json.loads(lines[1])["m"] == "a\ud800b"

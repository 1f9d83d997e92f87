"""Log lines: JSON (one object a line) or console text, and the logger's setup.

Exceptions are logged by type and message only, never a traceback (it could quote anything);
every line goes through the `Redactor`.
"""

from __future__ import annotations

import json
import logging
import select
import sys
import time
from collections.abc import Sequence
from json.encoder import encode_basestring
from typing import Any, Protocol, TypeVar

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


T = TypeVar("T")
About = TypeVar("About", contravariant=True)


class Fields(Protocol[About]):
    """How one kind of line gets its fields from what it is about: as the dict `logger.log` is
    given (any line can be made of it) and, where it can make them straight, as they are
    written - the console line's text after the message (` key=value` each) and the JSON
    line's members after "msg" (`, "key": value` each); None where it cannot."""

    def fields(self, about: About) -> dict[str, Any]: ...

    def console(self, about: About) -> str | None: ...

    def json(self, about: About) -> str | None: ...


class AsGiven:
    """Fields given as their dict."""

    def fields(self, about: dict[str, Any]) -> dict[str, Any]:
        return about

    def console(self, about: dict[str, Any]) -> None:
        return None

    def json(self, about: dict[str, Any]) -> None:
        return None


AS_GIVEN = AsGiven()


class JsonFormatter(logging.Formatter):
    def __init__(self, redact: Redactor | None = None) -> None:
        super().__init__()
        self.redact = redact or Redactor([])
        # `json.dumps(value, ensure_ascii=False, default=str)`, without making its encoder anew
        # for every line.
        self.dumps = json.JSONEncoder(ensure_ascii=False, default=str).encode

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", None)
        extra = fields if isinstance(fields, dict) else {}
        message = record.getMessage()
        return self.line(
            record.levelname, message, extra, record.created, record.name, _exception(record)
        )

    def line(
        self,
        levelname: str,
        msg: str,
        fields: dict[str, Any],
        created: float,
        name: str,
        exception: dict[str, str] | None = None,
    ) -> str:
        """The line of a record with these attributes (`fields`: its `extra` fields)."""
        out: dict[str, Any] = {
            "ts": round(created, 3),
            "level": levelname.lower(),
            "logger": name,
            "msg": msg,
        }
        out.update(fields)
        if exception:
            out.update(exception)
        text = self.dumps(out)
        if self.redact.finds_nothing(text):  # most lines: nothing to redact
            return text
        return self.redact(self.dumps(self.redact.deep(out)))

    def line_of(
        self, levelname: str, msg: str, fields: Fields[T], about: T, created: float, name: str
    ) -> str:
        """`line` of `fields.fields(about)`, from its JSON straight where `fields` makes it."""
        members = fields.json(about)
        if members is not None:
            # What `dumps` makes of the dict `line` would dump (a string is its
            # `encode_basestring`, a finite float its repr).
            text = (
                f'{{"ts": {round(created, 3)!r}, "level": {encode_basestring(levelname.lower())}, '
                f'"logger": {encode_basestring(name)}, "msg": {encode_basestring(msg)}{members}}}'
            )
            if self.redact.finds_nothing(text):
                return text
        return self.line(levelname, msg, fields.fields(about), created, name)


# The standard levels as a console line starts with them: `f"{levelname.lower():7}"`.
LEVELS = {name: f"{name.lower():7}" for name in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")}


class ConsoleFormatter(logging.Formatter):
    def __init__(self, redact: Redactor | None = None) -> None:
        super().__init__()
        self.redact = redact or Redactor([])

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", None) or {}
        if record.exc_info:
            fields = {**fields, **_exception(record)}
        return self.line(record.levelname, record.getMessage(), fields)

    def line(self, levelname: str, msg: str, fields: dict[str, Any]) -> str:
        """The line of a record with these attributes (`fields`: its `extra` fields)."""
        findings = fields.get("findings")
        if findings is not None:  # a leak's: each finding goes on a line of its own
            fields = {k: v for k, v in fields.items() if k != "findings"}
        level = LEVELS.get(levelname) or f"{levelname.lower():7}"
        parts = [f"{level} {msg}"]
        # Every field but None, "" and []: a str, int, float or bool is known without comparing
        # (and a float's or bool's repr is its str, written without a format call).
        for k, v in fields.items():
            if v is None:
                continue
            cls = type(v)
            if cls is str:
                if v:
                    parts.append(f" {k}={v}")
            elif cls is float or cls is bool:
                parts.append(f" {k}={v!r}")
            elif cls is int or (v != "" and v != []):
                parts.append(f" {k}={v}")
        text = "".join(parts)
        for found in findings or ():
            text += "\n        leaked " + " ".join(
                f"{k}={v!r}" if k == "excerpt" else f"{k}={v}" for k, v in found.items()
            )
        return self.redact(text)

    def line_of(self, levelname: str, msg: str, fields: Fields[T], about: T) -> str:
        """`line` of `fields.fields(about)`, from its text straight where `fields` makes it."""
        text = fields.console(about)
        if text is None:
            return self.line(levelname, msg, fields.fields(about))
        level = LEVELS.get(levelname) or f"{levelname.lower():7}"
        return self.redact(f"{level} {msg}{text}")


FORMATTERS = (ConsoleFormatter, JsonFormatter)  # exactly these: a subclass may format otherwise
PIPE_BUF = getattr(select, "PIPE_BUF", 512)  # POSIX: at least 512


def write(logger: logging.Logger, level: int, msg: str, fields: dict[str, Any]) -> None:
    """`logger.log(level, msg, extra={"fields": fields})`: the same line, but written without
    the logging module's record and handler calls (about half of what a line costs) when
    nothing but one plain stream handler with spillguard's formatter, and no filter, would
    see it; any other arrangement goes through `logger.log`."""
    write_all(logger, level, msg, AS_GIVEN, (fields,))


def write_all(
    logger: logging.Logger, level: int, msg: str, fields: Fields[T], abouts: Sequence[T]
) -> None:
    """`write` of `fields.fields(about)` for each of `abouts`, in order, each line made as
    `fields` makes it (only `logger.log` needs the dict). On the plain stream handler the lines
    go in as few writes as keep each whole: a write of `PIPE_BUF` bytes or fewer reaches a pipe
    in one piece, so lines from several workers sharing one never interleave mid-line."""
    if not logger.isEnabledFor(level):
        return
    handlers = logger.handlers
    if len(handlers) == 1 and not logger.propagate and not logger.filters:
        handler = handlers[0]
        formatter = handler.formatter
        if (
            type(handler) is logging.StreamHandler
            and type(formatter) in FORMATTERS
            and level >= handler.level
            and not handler.filters
        ):
            assert isinstance(formatter, ConsoleFormatter | JsonFormatter)
            _emit(handler, formatter, logger, level, msg, fields, abouts)
            return
    for about in abouts:
        logger.log(level, msg, extra={"fields": fields.fields(about)})


def _emit(
    handler: logging.StreamHandler[Any],
    formatter: ConsoleFormatter | JsonFormatter,
    logger: logging.Logger,
    level: int,
    msg: str,
    fields: Fields[T],
    abouts: Sequence[T],
) -> None:
    """What `Handler.handle` and `StreamHandler.emit` do with each record, under its lock,
    the lines written together in pieces of at most `PIPE_BUF` bytes (a longer line alone); a
    piece that fails is each of its records' failure."""
    handler.acquire()
    try:
        levelname = logging.getLevelName(level)
        created = time.time()  # as a LogRecord takes it
        end = handler.terminator
        texts: list[str] = []
        piece: list[T] = []
        size = 0
        for about in abouts:
            try:
                if isinstance(formatter, JsonFormatter):
                    text = formatter.line_of(levelname, msg, fields, about, created, logger.name)
                else:
                    text = formatter.line_of(levelname, msg, fields, about)
                text += end
                # A lone surrogate (a client's text read by `json`) is written escaped, as
                # stderr writes it.
                n = len(text) if text.isascii() else len(text.encode(errors="backslashreplace"))
            except RecursionError:
                raise
            except Exception:
                _failed(handler, logger, level, msg, fields.fields(about))
                continue
            if piece and size + n > PIPE_BUF:
                _put(handler, logger, level, msg, fields, "".join(texts), piece)
                texts, piece, size = [], [], 0
            texts.append(text)
            piece.append(about)
            size += n
        if piece:
            _put(handler, logger, level, msg, fields, "".join(texts), piece)
    finally:
        handler.release()


def _put(
    handler: logging.StreamHandler[Any],
    logger: logging.Logger,
    level: int,
    msg: str,
    fields: Fields[T],
    text: str,
    abouts: list[T],
) -> None:
    try:
        stream = handler.stream
        stream.write(text)
        if stream and hasattr(stream, "flush"):  # `handler.flush()`, whose lock is held
            stream.flush()
    except RecursionError:
        raise
    except Exception:
        for about in abouts:
            _failed(handler, logger, level, msg, fields.fields(about))


def _failed(
    handler: logging.StreamHandler[Any],
    logger: logging.Logger,
    level: int,
    msg: str,
    fields: dict[str, Any],
) -> None:
    """`handler.handleError` of the record that failed, as the logging module reports it."""
    record = logger.makeRecord(logger.name, level, "(unknown file)", 0, msg, (), None)
    record.fields = fields
    handler.handleError(record)


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

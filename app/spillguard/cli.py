"""The `spillguard` command: serve (the default), `demo` and `incidents`."""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from typing import Any

from pydantic import ValidationError

from .settings import Mode, Settings

SERVE_FLAGS: list[tuple[str, dict[str, Any]]] = [
    ("--upstream", {"help": "upstream base URL, or xai / deepseek / openai"}),
    (
        "--anthropic-upstream",
        {"help": "Anthropic-compatible base URL, or deepseek/moonshot/zai/minimax/anthropic"},
    ),
    ("--host", {"help": "address to listen on (default 127.0.0.1)"}),
    ("--port", {"type": int, "help": "port to listen on (default 8080)"}),
    (
        "--mode",
        {"choices": [m.value for m in Mode], "help": "retry (default), fail, observe, repair"},
    ),
    ("--correction", {"help": "the corrective instruction sent with a retry"}),
    ("--correction-required", {"help": "the retry's instruction when tool_choice is required"}),
    ("--correction-named", {"help": "the same when tool_choice names a function ({name})"}),
    ("--correction-none", {"help": "the same when tool_choice is none"}),
    ("--should-retry-header", {"help": "x-should-retry value on spillguard's 502 (default false)"}),
    ("--connect-timeout", {"type": float, "help": "seconds to connect upstream (default 10)"}),
    ("--read-timeout", {"type": float, "help": "seconds between upstream bytes (default 120)"}),
    ("--total-timeout", {"type": float, "help": "seconds for a whole exchange (default 600)"}),
    ("--hold-limit", {"type": int, "help": "characters a reply may be held back (256 KiB)"}),
    ("--max-body", {"type": int, "help": "request body limit in bytes (16 MiB)"}),
    ("--max-reply", {"type": int, "help": "non-streamed reply limit in bytes (32 MiB)"}),
    ("--keepalive", {"type": float, "help": "seconds between keep-alive comments (15)"}),
    ("--log-level", {"help": "DEBUG, INFO (default), WARNING, ERROR"}),
    ("--log-format", {"choices": ["console", "json"], "help": "log line format"}),
    ("--leak-log-level", {"help": "level of the log line carrying leaked text (WARNING)"}),
    ("--excerpt-limit", {"type": int, "help": "characters of leaked text logged (2000)"}),
    ("--graceful-timeout", {"type": float, "help": "seconds to drain on SIGTERM (30)"}),
    ("--workers", {"type": int, "help": "worker processes (default 1)"}),
    ("--max-concurrency", {"type": int, "help": "requests in flight before 503 (0: no limit)"}),
    (
        "--proxy-key",
        {"action": "append", "dest": "proxy_keys", "help": "a key clients must present"},
    ),
    ("--proxy-key-file", {"help": "file with one proxy key per line"}),
    ("--incidents-db", {"help": "SQLite file or postgresql:// URL recording findings ('' off)"}),
    ("--incident-retention", {"help": "delete incidents older than: 12h, 30d (30d; '' keeps)"}),
    ("--incident-max-rows", {"type": int, "help": "incidents kept at most (1000000; 0: no cap)"}),
    ("--incident-excerpt-limit", {"type": int, "help": "characters of leaked text kept (4000)"}),
    ("--metrics-model-limit", {"type": int, "help": "distinct model labels before 'other' (50)"}),
    (
        "--otel-traces",
        {"action": "store_true", "default": None, "help": "OpenTelemetry traces over OTLP"},
    ),
    (
        "--otel-leaked-text",
        {"action": "store_true", "default": None, "help": "leaked text on the trace's spans"},
    ),
]


def _serve_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="An OpenAI-compatible proxy that stops tool calls written out as text. "
        "Every option can also be set as a SPILLGUARD_* environment variable.",
    )
    for flag, kw in SERVE_FLAGS:
        parser.add_argument(flag, **kw)
    return parser


def settings_from(args: argparse.Namespace) -> Settings:
    given = {k: v for k, v in vars(args).items() if v is not None}
    if "proxy_keys" in given:
        given["proxy_keys"] = tuple(given["proxy_keys"])
    return Settings(**given)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv and not argv[0].startswith("-") else "serve"
    rest = argv[1:] if argv and command == argv[0] else argv
    if command == "demo":
        from .demo import main as demo

        return demo()
    if command == "incidents":
        return incidents(rest)
    if command != "serve":
        print(f"spillguard: unknown command {command!r} (serve, demo, incidents)", file=sys.stderr)
        return 2
    args = _serve_parser("spillguard").parse_args(rest)
    try:
        settings = settings_from(args)
    except ValidationError as exc:
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "settings"
            print(f"spillguard: {where}: {err['msg']}", file=sys.stderr)
        return 2
    from .metrics import multiprocess_dir

    with multiprocess_dir(settings.workers):  # before the workers start: they inherit it
        from .runner import run

        run(settings)
    return 0


def _incidents_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="The incident record: every tool call spillguard found written as text, and "
        "every structured call that was missing or malformed. Lists incidents (oldest first), or "
        "with 'stats' counts them per model, kind and family.",
    )
    parser.add_argument("action", nargs="?", choices=["list", "stats"], default="list")
    parser.add_argument(
        "--db",
        help="the SQLite file or postgresql:// URL (default: SPILLGUARD_INCIDENTS_DB or the "
        "serve default)",
    )
    parser.add_argument("--since", help="ISO date or time (UTC unless given), or 30m, 1h, 2d, 1w")
    parser.add_argument("--model", help="only this model")
    parser.add_argument("--family", help="only this markup family")
    parser.add_argument(
        "--kind",
        help="only this kind: leak, tool_calls_without_calls, markup_in_tool_name, undeclared_tool",
    )
    parser.add_argument(
        "--limit",
        type=int,
        help="the most recent N incidents (list; default 50 for table, all for jsonl and csv; "
        "0: all)",
    )
    parser.add_argument("--format", choices=["table", "jsonl", "csv"], default="table")
    return parser


def _default_db() -> str:
    try:
        return Settings().incidents_db
    except ValidationError:  # other settings are broken; this one has a plain default
        default = Settings.model_fields["incidents_db"].default
        return os.environ.get("SPILLGUARD_INCIDENTS_DB", str(default))


def incidents(argv: list[str]) -> int:
    """`spillguard incidents [list|stats] [--db PATH] [--since ...] [--format ...]`."""
    from .incident_query import (
        STATS_COLUMNS,
        Filters,
        incident_stats,
        parse_since,
        read_incidents,
        table,
    )
    from .incident_store import COLUMNS, IncidentDbError

    args = _incidents_parser("spillguard incidents").parse_args(argv)
    path = args.db if args.db is not None else _default_db()
    if not path:
        print("spillguard: the incident record is disabled (no --db)", file=sys.stderr)
        return 2
    try:
        since = parse_since(args.since) if args.since else None
    except ValueError as exc:
        print(f"spillguard: {exc}", file=sys.stderr)
        return 2
    filters = Filters(since=since, model=args.model, family=args.family, kind=args.kind)
    columns: tuple[str, ...]
    try:
        if args.action == "stats":
            rows, columns = incident_stats(path, filters), STATS_COLUMNS
        else:
            limit = args.limit if args.limit is not None else (50 if args.format == "table" else 0)
            rows, columns = read_incidents(path, filters, limit or None), COLUMNS
    except IncidentDbError as exc:
        print(f"spillguard: {exc}", file=sys.stderr)
        return 1
    out = sys.stdout
    if args.format == "jsonl":
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    elif args.format == "csv":
        writer = csv.DictWriter(out, fieldnames=list(columns), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    elif rows:
        out.write(table(rows, columns) + "\n")
        if args.action == "stats":
            total = sum(r["incidents"] for r in rows)
            out.write(f"{total} incident{'s' if total != 1 else ''}\n")
    else:
        out.write("no incidents\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

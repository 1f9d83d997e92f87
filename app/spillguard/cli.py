"""The `spillguard` command: serve (the default), `demo`, `incidents` and `config`."""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from typing import Any

from pydantic import ValidationError

from .config import ConfigError, Origins, explain, render
from .settings import Mode, ModeHeader, Settings

SERVE_FLAGS: list[tuple[str, dict[str, Any]]] = [
    ("--config", {"help": "TOML file of options, [upstreams.NAME] and [[rules]]"}),
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
    (
        "--mode-header",
        {
            "choices": [m.value for m in ModeHeader],
            "help": "what x-spillguard-mode may do: tighten (default) or any",
        },
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
        "Every option can also be set as a SPILLGUARD_* environment variable or in the "
        "--config file (flag > environment > file > default).",
    )
    for flag, kw in SERVE_FLAGS:
        parser.add_argument(flag, **kw)
    return parser


def _given(args: argparse.Namespace) -> dict[str, Any]:
    given = {k: v for k, v in vars(args).items() if v is not None}
    if "proxy_keys" in given:
        given["proxy_keys"] = tuple(given["proxy_keys"])
    return given


def settings_from(args: argparse.Namespace) -> Settings:
    return Settings(**_given(args))


def load(given: dict[str, Any]) -> tuple[Settings | None, Origins]:
    """The settings from these flags, the environment and the config file; None (each problem
    printed, naming the key and the reason) when they cannot be made."""
    origin = Origins.of(given)
    try:
        return Settings(**given), origin
    except (ValidationError, ConfigError) as exc:
        for line in explain(exc, origin):
            print(f"spillguard: {line}", file=sys.stderr)
        return None, origin


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv and not argv[0].startswith("-") else "serve"
    rest = argv[1:] if argv and command == argv[0] else argv
    if command == "demo":
        from .demo import main as demo

        return demo()
    if command == "incidents":
        return incidents(rest)
    if command == "config":
        return config(rest)
    if command != "serve":
        names = "serve, demo, incidents, config"
        print(f"spillguard: unknown command {command!r} ({names})", file=sys.stderr)
        return 2
    settings, _ = load(_given(_serve_parser("spillguard").parse_args(rest)))
    if settings is None:
        return 2
    from .metrics import multiprocess_dir

    with multiprocess_dir(settings.workers):  # before the workers start: they inherit it
        from .runner import run

        run(settings)
    return 0


def config(argv: list[str]) -> int:
    """`spillguard config check PATH`: validate a file and print the settings it resolves to,
    with the environment's; `spillguard config show [--config PATH]`: the settings `serve`
    would run with here. Secrets are printed as ***."""
    parser = argparse.ArgumentParser(
        prog="spillguard config",
        description="check PATH: validate a config file and print the settings it resolves to "
        "(with this environment's SPILLGUARD_* variables over it); show: print the settings "
        "spillguard runs with here (SPILLGUARD_CONFIG or --config, the environment, the "
        "defaults). Secrets are printed as ***.",
    )
    parser.add_argument("action", choices=["check", "show"])
    parser.add_argument("path", nargs="?", help="the file (check)")
    parser.add_argument("--config", help="the file (show; default SPILLGUARD_CONFIG)")
    args = parser.parse_args(argv)
    path = args.path if args.action == "check" else args.config
    if args.action == "check" and not path:
        parser.error("check needs the file: spillguard config check PATH")
    if args.action == "show" and args.path:
        parser.error("show takes no file argument; use --config PATH")
    settings, origin = load({"config": path} if path is not None else {})
    if settings is None:
        return 1
    sys.stdout.write(render(settings, origin))
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
    except ConfigError as exc:  # the file may name the database: say why it cannot be read
        lines = [f"spillguard: {line}" for line in str(exc).splitlines()]
        raise SystemExit("\n".join(lines)) from None
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

"""The `spillguard` command: serve (the default) and `demo`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pydantic import ValidationError

from .settings import Mode, Settings

SERVE_FLAGS: list[tuple[str, dict[str, Any]]] = [
    ("--upstream", {"help": "upstream base URL, or xai / deepseek / openai"}),
    ("--host", {"help": "address to listen on (default 127.0.0.1)"}),
    ("--port", {"type": int, "help": "port to listen on (default 8080)"}),
    ("--mode", {"choices": [m.value for m in Mode], "help": "retry (default), fail or observe"}),
    ("--correction", {"help": "the corrective instruction sent with a retry"}),
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
    if command != "serve":
        print(f"spillguard: unknown command {command!r} (serve, demo)", file=sys.stderr)
        return 2
    args = _serve_parser("spillguard").parse_args(rest)
    try:
        settings = settings_from(args)
    except ValidationError as exc:
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "settings"
            print(f"spillguard: {where}: {err['msg']}", file=sys.stderr)
        return 2
    from .serving import run

    run(settings)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

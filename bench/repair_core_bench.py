"""What schema validation costs repair, per call: cached against uncached validators.

    taskset -c 1 python -m bench.repair_core_bench

Every request brings its own tools, so a validator built per request would be built on every
repair; `detect.schema` caches one per canonical schema instead. This times, interleaved in one
run (best of ROUNDS): the cached path (canonical JSON key, LRU hit, `is_valid`), the uncached
one (meta-schema check, build, `is_valid`), the canonical key alone, and a whole `read_calls` of
a Hermes leak. When `jsonschema_rs` is importable it is timed beside them for comparison only
(it is not a dependency: see the report for why).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from typing import Any

from spillguard.detect import declared_tools, read_calls
from spillguard.detect import schema as sch

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "minLength": 1},
        "mode": {"enum": ["read", "write", "append"]},
        "lines": {
            "type": "array",
            "items": {"type": "object", "properties": {"n": {"type": "integer"}}},
        },
        "options": {
            "type": "object",
            "properties": {"encoding": {"type": "string"}, "follow": {"type": "boolean"}},
            "additionalProperties": False,
        },
    },
    "required": ["path"],
    "additionalProperties": False,
}
ARGS = {"path": "notes/today.md", "mode": "read", "lines": [{"n": 1}, {"n": 2}]}
MARKUP = (
    '<tool_call>\n{"name": "open_file", "arguments": {"path": "notes/today.md", "mode": "read", '
    '"lines": [{"n": 1}, {"n": 2}]}}\n</tool_call>'
)
TOOLS = declared_tools(
    {"tools": [{"type": "function", "function": {"name": "open_file", "parameters": SCHEMA}}]}
)
N = 2000
ROUNDS = 5


def uncached() -> bool:
    """What every repair would pay without the cache: the key, the meta-schema check, the
    build (the cached function's own body), then the validation."""
    check = sch._compiled.__wrapped__(sch.canonical(SCHEMA))
    return bool(check.is_valid(ARGS))


def cases() -> dict[str, Callable[[], object]]:
    out: dict[str, Callable[[], object]] = {
        "jsonschema cached (key + LRU hit + is_valid)": lambda: sch.valid(ARGS, SCHEMA),
        "jsonschema uncached (key + check + build + is_valid)": uncached,
        "canonical key alone": lambda: sch.canonical(SCHEMA),
        "read_calls, Hermes leak, cached": lambda: read_calls(MARKUP, "hermes", TOOLS),
    }
    try:
        rs: Any = importlib.import_module("jsonschema_rs")
    except ImportError:
        return out
    compiled = rs.validator_for(SCHEMA)
    out["jsonschema_rs uncached (build + is_valid)"] = lambda: rs.validator_for(SCHEMA).is_valid(
        ARGS
    )
    out["jsonschema_rs cached (is_valid only)"] = lambda: compiled.is_valid(ARGS)
    return out


def main() -> None:
    table = cases()
    best = dict.fromkeys(table, float("inf"))
    for _ in range(ROUNDS):  # interleaved: each round times every case once
        for name, fn in table.items():
            start = time.perf_counter()
            for _ in range(N):
                fn()
            best[name] = min(best[name], (time.perf_counter() - start) / N)
    for name, seconds in best.items():
        print(f"{name:50s} {seconds * 1e6:9.1f} µs")


if __name__ == "__main__":
    main()

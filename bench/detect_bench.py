"""The detection core alone: MB/s per input kind, and how time grows from 1 MB to 10 MB.

Two ways in, as the proxy uses the core: `whole` is `inspect_text` on the whole reply (the
non-streamed path); `stream` feeds one `Scanner` in 16-character deltas, then finishes it (the
streamed path). Each case runs in its own process with a time limit, so a pathological input
shows up as a timeout instead of hanging the run.

  python -m bench.detect_bench                      # every case, a table on stdout
  python -m bench.detect_bench case prose 1 whole   # one case, JSON on stdout

`hot` times what the proxy pays per request and per event on the bench's own request, reply and
stream (µs, best of 7 batches); `ab OLD NEW` runs `hot` against two source trees (their `app/`
folders) in alternating subprocesses and prints the medians side by side:

  taskset -c 0 python -m bench.detect_bench ab /tmp/old/app app --rounds 5

`ab-cases OLD NEW` does the same for `case`, each kind whole and streamed at one size:

  taskset -c 0 python -m bench.detect_bench ab-cases /tmp/old/app app --kinds inline,lt
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from .components import best_us

BATCHES = 7  # best of this many batches, for each hot step

DELTA = 16
MB = 1_000_000

CODE = (
    "Here is the function you asked for:\n\n"
    "```python\n"
    "def parse(raw: str) -> dict[str, list[int]]:\n"
    '    """Split `name: 1, 2, 3` lines into a mapping."""\n'
    "    out: dict[str, list[int]] = {}\n"
    "    for line in raw.splitlines():\n"
    '        if not line.strip() or line.lstrip().startswith("#"):\n'
    "            continue\n"
    '        name, _, values = line.partition(":")\n'
    '        out[name.strip()] = [int(v) for v in values.split(",") if v.strip()]\n'
    "    return out\n"
    "```\n\n"
    "And the JSON it produces for the example input:\n\n"
    "```json\n"
    '{"alpha": [1, 2, 3], "beta": [4, 5], "tool_calls": [], "name": "get_weather"}\n'
    "```\n\n"
    "<details><summary>Shell usage</summary>\n\n"
    "    $ python -m parse < input.txt\n"
    "    {'alpha': [1, 2, 3]}\n\n"
    "</details>\n\n"
    "[1]: https://docs.python.org/3/library/stdtypes.html#str.partition\n\n"
)

INLINE = (
    "To read the file, call `open(path)` and hand the handle to `json.load`; you get a "
    "`dict[str, Any]` back. In Rust the same function returns `Result<Vec<String>, io::Error>`, "
    "and in TypeScript a `Promise<Config>`. Keep `retries` small (`retries < 3`) and put long "
    "output in a `<details>` block.\n\n"
    "- `--verbose` prints every step\n"
    "- `--dry-run` changes nothing\n\n"
)

KINDS: dict[str, str] = {
    "prose": "the bench upstream's Markdown answer, repeated",
    "code": "code-heavy answers: fenced Python and JSON, indented blocks, HTML, links",
    "inline": "Markdown dense with inline code spans holding `<` (generics, comparisons, tags)",
    "lt": "`<` repeated",
    "brace": "`{` repeated",
    "bracket": "`[` repeated",
    "tool_calls": "`[TOOL_CALLS` repeated on one line",
    "tool_calls_lines": "`[TOOL_CALLS` at the start of every line",
    "fences": "unclosed fences: ```` ```python ```` lines that never close",
    "newlines": "newlines only",
    "lt_bar": "`<|` repeated: every place a special token could open",
    "closer": "`</think` repeated: a reasoning closer that never closes",
    "rbracket": "`]<]` repeated: MiniMax-M3's token prefix",
    "recipient": "`. to=functions` repeated: harmony's recipient, never named",
    "backticks": "`` `a` `` repeated: inline code spans",
    "quotes": '`"` repeated: triple-quote openers and closers',
    "rst": "`text::` lines with indented blocks: reST literal blocks opening and closing",
}


def make(kind: str, size: int) -> str:
    from .upstream import PROSE

    unit = {
        "prose": PROSE + "\n\n",
        "code": CODE,
        "inline": INLINE,
        "lt": "<",
        "brace": "{",
        "bracket": "[",
        "tool_calls": "[TOOL_CALLS",
        "tool_calls_lines": "[TOOL_CALLS\n",
        "fences": "```python\nx = 1\n",
        "newlines": "\n",
        "lt_bar": "<|",
        "closer": "</think",
        "rbracket": "]<]",
        "recipient": ". to=functions",
        "backticks": "`a` ",
        "quotes": '"',
        "rst": "Example::\n\n   <tool_call>\n\n",
    }[kind]
    return (unit * (size // len(unit) + 1))[:size]


def run_case(kind: str, mb: int, mode: str, repeat: int) -> dict[str, Any]:
    from spillguard.detect import Scanner, declared_tools, inspect_text

    from .payloads import TOOLS

    tools = declared_tools({"tools": TOOLS})
    text = make(kind, mb * MB)
    best = float("inf")
    published = 0
    finding = None
    runs = 0
    spent = 0.0
    # At least `repeat` runs; fast cases repeat until 0.5 s were spent (at most 200 runs), so a
    # sub-millisecond time is a best-of-many, not one noisy sample.
    while runs < repeat or (spent < 0.5 and runs < 200):
        runs += 1
        t0 = time.perf_counter()
        if mode == "whole":
            found = inspect_text(text, tools)
        else:
            scanner = Scanner(tools)
            feed = scanner.feed
            out = 0
            for i in range(0, len(text), DELTA):
                out += len(feed(text[i : i + DELTA]))
            out += len(scanner.finish())
            found = scanner.finding
            published = out
        took = time.perf_counter() - t0
        spent += took
        best = min(best, took)
        finding = found.family if found else None
    return {
        "kind": kind,
        "mb": mb,
        "mode": mode,
        "seconds": round(best, 6),
        "mb_per_s": round(mb / best, 2),
        "runs": runs,
        "finding": finding,
        "published_chars": published if mode == "stream" else None,
    }


def run_all(
    sizes: tuple[int, ...] = (1, 10), timeout: float = 120, cpu: str | None = None
) -> list[dict[str, Any]]:
    rows = []
    for kind in KINDS:
        for mode in ("whole", "stream"):
            for mb in sizes:
                repeat = 3 if mb == 1 else 2
                cmd = [sys.executable, "-m", "bench.detect_bench", "case", kind, str(mb), mode]
                cmd += ["--repeat", str(repeat)]
                if cpu is not None:
                    cmd = ["taskset", "-c", cpu, *cmd]
                try:
                    done = subprocess.run(
                        cmd, capture_output=True, text=True, timeout=timeout, check=True
                    )
                    rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
                except subprocess.TimeoutExpired:
                    rows.append({"kind": kind, "mb": mb, "mode": mode, "timeout": timeout})
                except subprocess.CalledProcessError as exc:
                    err = (exc.stderr or "").strip().splitlines()[-1:] or ["?"]
                    rows.append({"kind": kind, "mb": mb, "mode": mode, "error": err[0]})
                print(f"  detect {kind:17} {mode:6} {mb:>2} MB: {rows[-1]}", flush=True)
    return rows


def run_hot(n: int = 2000) -> dict[str, float]:
    """The detection core's per-request and per-event costs on the bench's own traffic."""
    from spillguard import chat
    from spillguard.detect import TurnScanner, declared_tools
    from spillguard.sse import SSEDecoder

    from .payloads import chat_request
    from .upstream import completion_body, stream_events

    body = json.loads(chat_request("bench"))
    reply = json.loads(completion_body("bench"))
    tools = declared_tools(body)
    hold = 256 * 1024
    events = stream_events("bench")
    raw = b"".join(events)
    deltas = []
    for event in events:
        payload = event[6:-2]
        if payload != b"[DONE]":
            for choice in json.loads(payload).get("choices") or []:
                text = choice.get("delta", {}).get("content")
                if text:
                    deltas.append(text)

    def scan() -> None:
        turn = TurnScanner(tools, hold)
        feed = turn.feed_content
        for text in deltas:
            feed(text)
        turn.finish()

    def edit() -> None:
        stream = chat.new_stream(tools, hold, None)
        for event in SSEDecoder().feed(raw):
            stream.feed(event)
        stream.finish()

    m = max(20, n // 40)
    return {
        "inspect_reply(reply)": best_us(
            lambda: chat.inspect_reply(reply, tools, hold), n, batches=7
        ),
        "declared_tools(request)": best_us(lambda: declared_tools(body), n, BATCHES),
        "TurnScanner(tools)": best_us(lambda: TurnScanner(tools, hold), n, BATCHES),
        "TurnScanner.feed_content, per prose delta": best_us(scan, m, BATCHES) / len(deltas),
        "decode + ChatStream.feed, per event": best_us(edit, m, BATCHES) / len(events),
    }


def _in_tree(path: str, *args: str) -> str:
    """`python -m bench.detect_bench ARGS` with the source tree `path` (an `app/` folder) on
    the path: its last line of output."""
    env = {**os.environ, "PYTHONPATH": path}
    cmd = [sys.executable, "-m", "bench.detect_bench", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    return done.stdout.strip().splitlines()[-1]


def run_ab(old: str, new: str, rounds: int) -> dict[str, tuple[float, float]]:
    """`hot` against two source trees, alternating, `rounds` times each: the medians."""
    samples: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
    for _ in range(rounds):
        for side, path in (("old", old), ("new", new)):
            for step, us in json.loads(_in_tree(path, "hot")).items():
                samples[side].setdefault(step, []).append(us)
    return {
        step: (statistics.median(samples["old"][step]), statistics.median(samples["new"][step]))
        for step in samples["new"]
    }


def run_ab_cases(
    old: str, new: str, kinds: list[str], mb: int, rounds: int
) -> dict[tuple[str, str], tuple[float, float]]:
    """`case` for each kind and mode against two source trees, alternating, `rounds` times
    each: the median seconds."""
    samples: dict[tuple[str, str, str], list[float]] = {}
    for _ in range(rounds):
        for kind in kinds:
            for mode in ("whole", "stream"):
                for side, path in (("old", old), ("new", new)):
                    row = json.loads(_in_tree(path, "case", kind, str(mb), mode))
                    samples.setdefault((kind, mode, side), []).append(row["seconds"])
    return {
        (kind, mode): (
            statistics.median(samples[(kind, mode, "old")]),
            statistics.median(samples[(kind, mode, "new")]),
        )
        for kind in kinds
        for mode in ("whole", "stream")
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="benchmark the detection core")
    sub = parser.add_subparsers(dest="cmd")
    case = sub.add_parser("case")
    case.add_argument("kind", choices=list(KINDS))
    case.add_argument("mb", type=int)
    case.add_argument("mode", choices=["whole", "stream"])
    case.add_argument("--repeat", type=int, default=3)
    sub.add_parser("hot")
    ab = sub.add_parser("ab")
    ab.add_argument("old", help="the old tree's app/ folder")
    ab.add_argument("new", help="the new tree's app/ folder")
    ab.add_argument("--rounds", type=int, default=5)
    cases = sub.add_parser("ab-cases")
    cases.add_argument("old", help="the old tree's app/ folder")
    cases.add_argument("new", help="the new tree's app/ folder")
    cases.add_argument("--kinds", default="prose,code,inline,backticks,lt")
    cases.add_argument("--mb", type=int, default=1)
    cases.add_argument("--rounds", type=int, default=3)
    every = sub.add_parser("all")
    every.add_argument("--timeout", type=float, default=120)
    every.add_argument("--cpu", default=None, help="pin each case with taskset -c CPU")
    args = parser.parse_args(argv)
    if args.cmd == "case":
        print(json.dumps(run_case(args.kind, args.mb, args.mode, args.repeat)))
    elif args.cmd == "hot":
        print(json.dumps(run_hot()))
    elif args.cmd == "ab":
        print(f"{'step (µs, medians of ' + str(args.rounds) + ')':44} {'old':>8} {'new':>8}")
        for step, (was, now) in run_ab(args.old, args.new, args.rounds).items():
            print(f"{step:44} {was:8.2f} {now:8.2f}  x{was / now:.1f}")
    elif args.cmd == "ab-cases":
        kinds = args.kinds.split(",")
        head = f"case (seconds at {args.mb} MB, medians of {args.rounds})"
        print(f"{head:44} {'old':>8} {'new':>8}")
        for (kind, mode), (was, now) in run_ab_cases(
            args.old, args.new, kinds, args.mb, args.rounds
        ).items():
            print(f"{kind + ' ' + mode:44} {was:8.4f} {now:8.4f}  x{was / now:.1f}")
    else:
        rows = run_all(timeout=getattr(args, "timeout", 120), cpu=getattr(args, "cpu", None))
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

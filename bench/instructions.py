"""Instructions a request (or a stream event) costs, counted by valgrind: a figure the VM's speed
does not move.

CPU time on this kind of VM moves by two to three times between hours (the host's other tenants);
the instructions a process executes do not. Each row drives its ASGI app in-process
(`bench.inproc`: no server, no load generator) under `valgrind --tool=callgrind` twice, with `n1`
and `n2` requests measured; the difference of the two totals, divided by the difference in
requests (or in SSE events the client received), cancels start-up, imports and warm-up. The
upstream is `bench.upstream`, started on CPU 1 as `bench.run` starts it (its port must be free).
Counts of one tree differed by 1.5% at most (three runs, 5 December). spillguard's rows watch a
client after 2.5 s instead of 0.05 s (`downstream.WATCH_AFTER`): at valgrind's pace every reply
took longer than 0.05 s and started a watcher task that no reply at full speed starts (about
50,000 instructions a request counted before).

  .venv/bin/python -m bench.instructions                        # floor and spillguard, non-streamed
  .venv/bin/python -m bench.instructions --load stream --load paced
  .venv/bin/python -m bench.instructions --baseline /tmp/old/app  # another checkout's app/ too

Loads: `nonstream` (the bench's request and 1.7 KB reply, 50 at a time), `stream` (the 376-event
stream, 8 KB reads), `paced` (64 deltas 20 ms apart, each in a read of its own; 2 streams at a
time, so that the process under valgrind, some 50 times slower, still reads each delta alone).
Needs valgrind (`apt-get install valgrind`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .run import PORTS, PY, ROOT, Stack, _port_free, running_upstream, upstream_url

# load: (inproc arguments, n1, n2, unit)
LOADS = {
    "nonstream": (["--conc", "50"], 200, 1200, "request"),
    "stream": (["--conc", "10", "--stream", "bench"], 10, 60, "event"),
    "paced": (["--conc", "2", "--stream", "sustain:20:64"], 4, 24, "event"),
}
_COLLECTED = re.compile(rb"^==\d+== Collected : (\d+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Count:
    instructions: int
    requests: int
    events: int


def parse(output: bytes, measured: dict[str, object]) -> Count:
    """A run's total from valgrind's output and its requests and events from inproc's line."""
    found = _COLLECTED.findall(output)
    if len(found) != 1:
        raise RuntimeError(f"expected one 'Collected' line from valgrind, found {len(found)}")
    statuses = measured.get("statuses")
    if not isinstance(statuses, dict) or set(statuses) != {"200"}:
        raise RuntimeError(f"every request must answer 200: {statuses}")
    events = measured.get("events", 0)
    if not isinstance(events, int):
        raise RuntimeError(f"inproc's event count is not a number: {events!r}")
    return Count(int(found[0]), int(statuses["200"]), events)


def _units(count: Count, unit: str) -> int:
    return count.events if unit == "event" else count.requests


def per_unit(first: Count, second: Count, unit: str) -> float:
    """Instructions a request or an event, from two runs that differ only in how many."""
    units = _units(second, unit) - _units(first, unit)
    if units <= 0:
        raise RuntimeError(f"the second run must measure more {unit}s than the first")
    return (second.instructions - first.instructions) / units


def counted(tree: Path | None, floor: bool, args: list[str], n: int, upstream: str) -> Count:
    argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    argv += [PY, "-m", "bench.inproc", "--n", str(n), "--upstream", upstream, *args]
    if floor:
        argv.append("--floor")
    else:  # a reply takes some 50 times as long here: 50 times `WATCH_AFTER` (0.05 s)
        argv += ["--watch-after", "2.5"]
    env = {"PYTHONPATH": f"{tree}:{ROOT}"} if tree is not None else {}
    done = subprocess.run(argv, capture_output=True, cwd=ROOT, env=os.environ | env, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"inproc failed under valgrind: {done.stderr[-2000:].decode()}")
    line = done.stdout.strip().splitlines()[-1]
    return parse(done.stderr, json.loads(line))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load", action="append", choices=sorted(LOADS), help="repeatable")
    parser.add_argument("--baseline", type=Path, help="another checkout's app/ folder, as a row")
    parser.add_argument("--no-floor", action="store_true", help="spillguard's rows only")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        sys.exit("missing: valgrind (apt-get install valgrind)")
    if not _port_free(PORTS["upstream"]):
        sys.exit(f"port {PORTS['upstream']} in use (is another benchmark running?)")
    rows: list[tuple[str, Path | None, bool]] = [] if args.no_floor else [("floor", None, True)]
    rows.append(("spillguard", ROOT / "app", False))
    if args.baseline is not None:
        rows.append(("spillguard (baseline)", args.baseline.resolve(), False))
    upstream = upstream_url()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as logs:
        stack = Stack(Path(logs))
        try:
            with running_upstream(stack):
                for load in args.load or ["nonstream"]:
                    extra, n1, n2, unit = LOADS[load]
                    for label, tree, floor in rows:
                        first = counted(tree, floor, extra, n1, upstream)
                        second = counted(tree, floor, extra, n2, upstream)
                        value = per_unit(first, second, unit)
                        results.setdefault(load, {})[label] = value
                        line = f"{load:9s} {label:24s} {value:12,.0f} instructions/{unit}"
                        print(line, flush=True)
        finally:
            stack.stop_all()
    for load, by_row in results.items():
        if "floor" in by_row:
            for label, value in by_row.items():
                if label != "floor":
                    print(f"{load:9s} floor / {label}: {by_row['floor'] / value:.2f}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()

"""Profile a proxy under load with py-spy and summarise where its CPU time goes.

  .venv/bin/python -m bench.profile --target retry --load nonstream   # spillguard, wrk c=50
  .venv/bin/python -m bench.profile --target floor --load stream      # the floor, 10 streams
  .venv/bin/python -m bench.profile --target retry --load sustain     # 250 paced streams held

Same pinning as bench.run (proxy on CPU 0; upstream, load and py-spy on CPU 1). py-spy samples
only the thread holding the GIL (`--gil`), so the shares are of the proxy's Python CPU time; time
uvloop spends in C outside the GIL does not show. Writes the raw collapsed stacks and a summary
(self and inclusive time per function) to bench/out/profile-<target>-<load>/.
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from .run import BENCH, LOAD_CPU, PORTS, Plan, Row, Stack, loadgen, start_row, wrk

FRAME = re.compile(r"^(.*) \((.*?)(?::\d+)?\)$")


def _package(frame: str) -> str:
    """Which package a frame's code belongs to: spillguard/<module>, or a top-level package (py-spy
    prints paths relative to their sys.path entry: `aiohttp/client.py`, `json/decoder.py`)."""
    m = FRAME.match(frame)
    path = m.group(2) if m else frame
    if path.startswith(("spillguard/", "app/", "bench/")):
        return path.removesuffix(".py")
    return path.split("/", 1)[0].removesuffix(".py")


def summarise(raw: Path, top: int = 40) -> str:
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    package: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        names = []
        for frame in stack.split(";"):
            m = FRAME.match(frame)
            if m:
                where = re.sub(r".*/(site-packages|work/main|lib/python3\.\d+)/", "", m.group(2))
                names.append(f"{m.group(1)} ({where})")
            else:
                names.append(frame)
        own[names[-1]] += n
        package[_package(stack.split(";")[-1])] += n
        for name in set(names):
            inclusive[name] += n
    lines = [f"{total} samples (GIL-holding thread only)", "", "self time by package:"]
    lines += [f"  {100 * v / total:5.1f}%  {k}" for k, v in package.most_common()]
    lines += ["", "self time:"]
    lines += [f"  {100 * v / total:5.1f}%  {k}" for k, v in own.most_common(top)]
    lines += ["", "inclusive time:"]
    lines += [f"  {100 * v / total:5.1f}%  {k}" for k, v in inclusive.most_common(top + 20)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="retry", choices=["retry", "observe", "floor"])
    loads = ["nonstream", "stream", "one", "sustain"]
    parser.add_argument("--load", default="nonstream", choices=loads)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument(
        "--concurrency", type=int, default=0, help="default: 50; 10 streams; 250 sustained"
    )
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--sg-arg", action="append", default=[], help="extra spillguard flag")
    args = parser.parse_args(argv)
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        sys.exit("py-spy not found: .venv/bin/pip install py-spy")
    out = (BENCH / "out" / f"profile-{args.target}-{args.load}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    plan = Plan(sg_args=args.sg_arg)
    stack = Stack(out)
    conc = args.concurrency or {"nonstream": 50, "sustain": 250}.get(args.load, 10)
    try:
        argv_up = [sys.executable, "-m", "bench.upstream", "--port", str(PORTS["upstream"])]
        up = stack.start("upstream", argv_up, LOAD_CPU)
        up.wait_http(PORTS["upstream"], "/v1/models")
        row = Row(args.target, args.target, PORTS[args.target])
        proc = start_row(stack, row, plan, out)
        assert proc is not None
        url = f"http://127.0.0.1:{row.port}/v1"
        result: dict = {}
        load_secs = args.seconds + 3

        def load() -> None:
            if args.load == "nonstream":
                result.update(wrk(row.port, conc, load_secs, out))
            elif args.load == "sustain":
                cmd = ["sustain", "--url", url, "--model", "sustain:20:64", "-c", str(conc)]
                result.update(loadgen([*cmd, "-d", str(load_secs), "--warmup", "0"]))
            elif args.load == "stream":
                cmd = ["load", "--stream", "--url", url, "-c", str(conc)]
                result.update(loadgen([*cmd, "-d", str(load_secs), "--warmup", "0"]))
            else:
                n = str(int(load_secs * 200))
                result.update(loadgen(["one", "--url", url, "-n", n, "--max-seconds", "60"]))

        worker = threading.Thread(target=load)
        worker.start()
        time.sleep(1.5)
        raw = out / "stacks.txt"
        spy_cmd = ["taskset", "-c", LOAD_CPU, spy, "record", "-p", str(proc.pid), "--gil"]
        spy_cmd += ["-d", str(int(args.seconds)), "-r", str(args.rate), "-f", "raw"]
        spy_cmd += ["-o", str(raw)]
        subprocess.run(spy_cmd, capture_output=True, check=True)
        worker.join()
    finally:
        stack.stop_all()
    summary = summarise(raw)
    head = f"target {args.target}, load {args.load} (concurrency {conc}): {result}\n\n"
    (out / "summary.txt").write_text(head + summary)
    print(head + summary)
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

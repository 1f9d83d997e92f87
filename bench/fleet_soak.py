"""Fleet soak (issue 17): two spillguard replicas behind one port, sharing one PostgreSQL incident
store, under a known mix of requests for a few minutes.

  .venv/bin/python -m bench.fleet_soak                 # 120 s of load, about 2.5 minutes in all
  .venv/bin/python -m bench.fleet_soak --duration 20   # a quick look

Processes on loopback: a private PostgreSQL server (tests/pgserver.py, started as the tests start
one), the soak's scripted upstream (`bench.soak upstream`), two `spillguard serve` replicas writing
incidents to that server, a round-robin front on one port (the `front` sub-command: each client
connection goes to the next replica, as a Kubernetes Service balances connections), and this load
generator: `--clients` closed-loop clients with keep-alive connections, each request a random
kind of bench.soak's mix (benign, leaking, upstream errors; whole and streamed) with a request
id of its own.

The run passes only if:
- every request got its documented outcome (bench.soak's checks of status, code and content);
- every request's outcome is recorded exactly once: a leaking request's id is in the rows of
  exactly the attempts that leaked (attempt 1 for a leak the retry recovered; 1 and 2 for one
  that failed), each once, and no other request's id is in any row;
- `spillguard incidents stats --db postgresql://...` (the real command) counts the whole fleet:
  its incidents, requests and tokens per model and family equal what this generator sent;
- both replicas served requests and wrote incidents, none dropped, and both exited 0 on SIGTERM;
- each replica's RSS stayed flat (late median within 10% or 8 MB of the early median).

The figures are written to `<out>/FLEET.md` and `<out>/fleet.json`; bench/RESULTS.md's "Fleet
soak" section is updated from them by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import itertools
import json
import os
import random
import shlex
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.soak import KINDS, SPILLGUARD, Kind, free_port, machine, one, wait_http

ROOT = Path(__file__).resolve().parent.parent
# The mix: bench.soak's kinds but the model list and the stall (each stall holds a client 3 s).
MIX = [k for k in KINDS if k.name not in ("models", "upstream-stall")]
# What the record must hold per kind of request: one row per leaked attempt (attempt, action).
RECORDED = {"leak-once": ((1, "retried"),), "leak-always": ((1, "failed"), (2, "failed"))}
# What the scripted upstream bills for a whole reply (a stream's usage is not asked for).
WHOLE_USAGE = (10, 5)
FAMILY = "hermes"


def recorded_for(kind: Kind) -> tuple[tuple[int, str], ...]:
    return RECORDED.get(kind.model, ())


# ---- the front (a sub-process) -------------------------------------------------------------------


async def serve_front(port: int, targets: list[int]) -> asyncio.Server:
    """A TCP front on `port`: each connection is spliced to the next of `targets` in turn."""
    turn = itertools.cycle(targets)

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()

    async def splice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            back_reader, back_writer = await asyncio.open_connection("127.0.0.1", next(turn))
        except OSError:
            writer.close()
            return
        ends = [
            asyncio.ensure_future(pipe(reader, back_writer)),
            asyncio.ensure_future(pipe(back_reader, writer)),
        ]
        # Either side closing ends the connection: HTTP needs no half-close here.
        await asyncio.wait(ends, return_when=asyncio.FIRST_COMPLETED)
        for w in (writer, back_writer):
            w.close()
        await asyncio.gather(*ends, return_exceptions=True)

    return await asyncio.start_server(splice, "127.0.0.1", port, backlog=1024)


def front_main(port: int, targets: list[int]) -> None:
    import uvloop

    async def run() -> None:
        server = await serve_front(port, targets)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        async with server:
            await stop.wait()

    uvloop.run(run())


# ---- the load ------------------------------------------------------------------------------------


@dataclass
class Sent:
    """What the load generator sent, per request id, and what came back wrong."""

    kinds: dict[str, Kind] = field(default_factory=dict)  # request id -> its kind
    bad: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def count(self) -> Counter[str]:
        return Counter(k.name for k in self.kinds.values())


async def load(base: str, clients: int, seconds: float, seed: int) -> Sent:
    import aiohttp

    sent = Sent()
    rng = random.Random(seed)
    weights = [k.weight for k in MIX]
    numbers = itertools.count()
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=clients), timeout=timeout
    ) as session:
        start = time.monotonic()
        stop = start + seconds

        async def client() -> None:
            while time.monotonic() < stop:
                kind = rng.choices(MIX, weights)[0]
                rid = f"fleet-{kind.name}-{next(numbers)}"
                sent.kinds[rid] = kind
                problem = await one(session, base, kind, {"x-request-id": rid})
                if problem is not None:
                    sent.bad.append(f"{rid}: {problem}")

        await asyncio.gather(*(client() for _ in range(clients)))
        sent.seconds = time.monotonic() - start
    return sent


# ---- what the store holds, against what was sent -------------------------------------------------


Held = list[tuple[str, int, str, int]]  # (request id, attempt, action, how many rows)


def recorded_problems(sent: Sent, rows: Held) -> list[str]:
    """What is wrong with the record, given how many rows it holds of each request id, attempt
    and action."""
    problems = []
    held: dict[str, dict[tuple[int, str], int]] = {}
    for rid, attempt, action, n in rows:
        held.setdefault(rid, {})[attempt, action] = n
    for rid, kind in sent.kinds.items():
        want = dict.fromkeys(recorded_for(kind), 1)
        got = held.pop(rid, {})
        if got != want:
            problems.append(f"{rid} ({kind.name}): rows {got}, want {want}")
    problems += [f"{rid}: recorded, never sent" for rid in held]
    return problems


def expected_stats(sent: Sent) -> dict[tuple[str, str], dict[str, Any]]:
    """What `incidents stats` must say per (model, family), from what was sent."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for kind in sent.kinds.values():
        leaked = recorded_for(kind)
        if not leaked:
            continue
        entry = out.setdefault(
            (kind.model, FAMILY),
            {"incidents": 0, "requests": 0, "input_tokens": None, "output_tokens": None},
        )
        entry["incidents"] += len(leaked)
        entry["requests"] += 1
        if not kind.stream:
            tokens_in, tokens_out = WHOLE_USAGE
            entry["input_tokens"] = (entry["input_tokens"] or 0) + tokens_in * len(leaked)
            entry["output_tokens"] = (entry["output_tokens"] or 0) + tokens_out * len(leaked)
    return out


def stats_problems(sent: Sent, stats: list[dict[str, Any]]) -> list[str]:
    """What `incidents stats` (its jsonl rows) says that differs from what was sent."""
    want = expected_stats(sent)
    fields = ("incidents", "requests", "input_tokens", "output_tokens")
    got = {
        (r["model"], r["family"]): {f: r[f] for f in fields} for r in stats if r["kind"] == "leak"
    }
    problems = [
        f"stats {key}: {got.get(key)}, want {value}"
        for key, value in want.items()
        if got.get(key) != value
    ]
    problems += [f"stats {key}: never sent" for key in got if key not in want]
    return problems + [f"stats: a row of kind {r['kind']}" for r in stats if r["kind"] != "leak"]


# ---- the replicas --------------------------------------------------------------------------------


@dataclass
class Replica:
    port: int
    proc: subprocess.Popen[bytes]
    rss_mb: list[tuple[float, str, float]] = field(default_factory=list)  # (t, phase, MB)
    metrics: dict[str, float] = field(default_factory=dict)

    def sample(self, t: float, phase: str) -> None:
        import psutil

        rss = psutil.Process(self.proc.pid).memory_info().rss / 2**20
        self.rss_mb.append((round(t, 1), phase, round(rss, 1)))


# Summed over their labels, from each replica's /metrics.
METRICS = (
    "spillguard_requests_total",
    "spillguard_incidents_written_total",
    "spillguard_incidents_dropped_total",
    "spillguard_incident_store_errors_total",
)


async def scrape(port: int) -> dict[str, float]:
    import aiohttp

    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as r,
    ):
        text = await r.text()
    sums = dict.fromkeys(METRICS, 0.0)
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in sums:
            sums[name] += float(line.rsplit(" ", 1)[1])
    return sums


def start_replica(port: int, upstream: int, db: str, log: Any) -> Replica:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPILLGUARD_")}
    argv = [
        *(str(SPILLGUARD), "serve", "--port", str(port)),
        *("--upstream", f"http://127.0.0.1:{upstream}/v1", "--incidents-db", db),
        *("--total-timeout", "3", "--read-timeout", "3", "--log-level", "WARNING"),
    ]
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    return Replica(port, proc)


def store_rows(db: str) -> Held:
    import psycopg

    with psycopg.connect(db) as conn:
        return [
            (rid, attempt, action, n)
            for rid, attempt, action, n in conn.execute(
                "SELECT request_id, attempt, action, count(*) FROM incidents"
                " GROUP BY request_id, attempt, action"
            )
        ]


def incidents_stats(db: str, form: str) -> str:
    """The real command's output."""
    argv = [str(SPILLGUARD), "incidents", "stats", "--db", db, "--format", form]
    return subprocess.run(argv, capture_output=True, text=True, check=True, cwd=ROOT).stdout


# ---- the run -------------------------------------------------------------------------------------


async def fleet(args: argparse.Namespace, db: str, out: Path) -> dict[str, Any]:
    up_port, front_port = free_port(), free_port()
    ports = [free_port() for _ in range(args.replicas)]
    logs = {name: (out / f"{name}.log").open("w") for name in ("upstream", "front")}
    upstream = subprocess.Popen(
        [sys.executable, "-m", "bench.soak", "upstream", "--port", str(up_port)],
        cwd=ROOT,
        stdout=logs["upstream"],
        stderr=subprocess.STDOUT,
    )
    front_argv = [sys.executable, "-m", "bench.fleet_soak", "front", "--port", str(front_port)]
    front = subprocess.Popen(
        [*front_argv, *(a for p in ports for a in ("--to", str(p)))],
        cwd=ROOT,
        stdout=logs["front"],
        stderr=subprocess.STDOUT,
    )
    replicas = []
    for i, port in enumerate(ports):
        log = (out / f"replica-{i + 1}.log").open("w")
        logs[f"replica-{i + 1}"] = log
        replicas.append(start_replica(port, up_port, db, log))
    try:
        await wait_http(f"http://127.0.0.1:{up_port}/stats")
        for r in replicas:
            await wait_http(f"http://127.0.0.1:{r.port}/healthz")
        await wait_http(f"http://127.0.0.1:{front_port}/healthz")
        t0 = time.monotonic()
        for r in replicas:
            r.sample(0, "idle")

        async def sampler() -> None:
            while True:
                await asyncio.sleep(args.sample)
                for r in replicas:
                    r.sample(time.monotonic() - t0, "load")

        sampling = asyncio.ensure_future(sampler())
        base = f"http://127.0.0.1:{front_port}/v1"
        sent = await load(base, args.clients, args.duration, args.seed)
        sampling.cancel()
        # Quiet: the writers drain their queues; then the last samples and the counters.
        expected = sum(len(recorded_for(k)) for k in sent.kinds.values())
        for _ in range(100):
            if sum(n for *_, n in store_rows(db)) >= expected:
                break
            await asyncio.sleep(0.2)
        await asyncio.sleep(args.settle)
        for r in replicas:
            r.sample(time.monotonic() - t0, "quiet")
            r.metrics = await scrape(r.port)
    finally:
        for proc in (*(r.proc for r in replicas), front, upstream):
            proc.send_signal(signal.SIGTERM)
        for proc in (*(r.proc for r in replicas), front, upstream):
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        for log in logs.values():
            log.close()
    return {"sent": sent, "replicas": replicas, "expected_rows": expected}


def verdict(result: dict[str, Any], rows: Held, stats: list[Any]) -> dict[str, Any]:
    sent: Sent = result["sent"]
    replicas: list[Replica] = result["replicas"]
    recorded = recorded_problems(sent, rows)
    counted = stats_problems(sent, stats)
    figures: list[dict[str, Any]] = []
    for i, r in enumerate(replicas):
        load = [mb for _, phase, mb in r.rss_mb if phase == "load"]
        third = max(1, len(load) // 3)
        early = statistics.median(load[third : 2 * third] or load)
        late = statistics.median(load[-third:])
        figures.append(
            {
                "replica": i + 1,
                "requests": int(r.metrics["spillguard_requests_total"]),
                "written": int(r.metrics["spillguard_incidents_written_total"]),
                "dropped": int(r.metrics["spillguard_incidents_dropped_total"]),
                "store_errors": int(r.metrics["spillguard_incident_store_errors_total"]),
                "rss_idle": r.rss_mb[0][2],
                "rss_first_load": load[0],
                "rss_early_median": round(early, 1),
                "rss_late_median": round(late, 1),
                "rss_max": max(mb for *_, mb in r.rss_mb),
                "rss_end": r.rss_mb[-1][2],
                "flat": late <= max(early * 1.10, early + 8),
                "exit": r.proc.returncode,
            }
        )
    rows_total = sum(n for *_, n in rows)
    checks = {
        "every request got its documented outcome": not sent.bad,
        "every outcome recorded exactly once (a leaking request's id in one row per leaked "
        "attempt, with the action taken; no other request's id in any row)": not recorded,
        "`incidents stats` counts equal what was sent (incidents, requests, tokens per model "
        "and family)": not counted,
        "both replicas served and wrote, nothing dropped, no store error": all(
            f["requests"] > 0 and f["written"] > 0 and f["dropped"] == 0 and f["store_errors"] == 0
            for f in figures
        ),
        "the replicas' incidents written add up to the rows stored": sum(
            f["written"] for f in figures
        )
        == rows_total
        == result["expected_rows"],
        "RSS flat on each replica (late median within 10% or 8 MB of the early median)": all(
            f["flat"] for f in figures
        ),
        "each replica exited 0 on SIGTERM": all(f["exit"] == 0 for f in figures),
    }
    return {
        "checks": checks,
        "replicas": figures,
        "rows": rows_total,
        "problems": (sent.bad + recorded + counted)[:30],
    }


# ---- the report ----------------------------------------------------------------------------------


def commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return done.stdout.strip() + (
        " (working tree with uncommitted changes)" if dirty.stdout.strip() else ""
    )


def report(
    args: argparse.Namespace, result: dict[str, Any], fig: dict[str, Any], table: str
) -> str:
    sent: Sent = result["sent"]
    counts = sent.count()
    total = sum(counts.values())
    command = ".venv/bin/python -m bench.fleet_soak " + " ".join(map(shlex.quote, sys.argv[1:]))
    ok = all(fig["checks"].values())
    lines = [
        "## Fleet soak",
        "",
        f"- **Date:** {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- **Commit:** {commit()}",
        f"- **Machine:** {machine()}",
        f"- **Command:** `{command.strip()}`",
        f"- **Fleet:** {args.replicas} `spillguard serve` processes (`--incidents-db "
        "postgresql://...`, `--total-timeout 3 --read-timeout 3 --log-level WARNING`), behind "
        "one port by a round-robin TCP front (a connection to each replica in turn), sharing a "
        "private PostgreSQL server; the scripted upstream, the front and this load generator "
        "are more processes on the same cores, unpinned.",
        f"- **Load:** {args.clients} closed-loop clients with keep-alive for "
        f"{args.duration:.0f} s: {total} requests in {sent.seconds:.1f} s, "
        f"**{total / sent.seconds:.0f} req/s** through the front.",
        f"- **Verdict:** {'PASS' if ok else 'FAIL'}",
        "",
        "| check | result |",
        "|---|---|",
        *(f"| {name} | {'yes' if good else '**no**'} |" for name, good in fig["checks"].items()),
        "",
        "| request kind | sent | incident rows expected each |",
        "|---|---:|---:|",
        *(
            f"| {k.name} ({k.want_status}{' ' + k.want_code if k.want_code else ''}) | "
            f"{counts[k.name]} | {len(recorded_for(k))} |"
            for k in MIX
        ),
        f"| **all** | **{total}** | **{result['expected_rows']} rows** |",
        "",
        "| replica | requests served | incidents written | dropped | RSS idle (MB) | "
        "first load sample | early median | late median | max | end |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {f['replica']} | {f['requests']} | {f['written']} | {f['dropped']} | "
            f"{f['rss_idle']} | {f['rss_first_load']} | {f['rss_early_median']} | "
            f"{f['rss_late_median']} | {f['rss_max']} | {f['rss_end']} |"
            for f in fig["replicas"]
        ),
        "",
        "`spillguard incidents stats --db postgresql://...` after the run:",
        "",
        "```",
        table.rstrip(),
        "```",
    ]
    replicas: list[Replica] = result["replicas"]
    lines += [
        "",
        f"<details><summary>RSS samples (MB, every {args.sample:.0f} s)</summary>",
        "",
        "| t (s) | phase | " + " | ".join(f"replica {i + 1}" for i in range(len(replicas))) + " |",
        "|---:|---|" + "---:|" * len(replicas),
        *(
            f"| {taken[0][0]} | {taken[0][1]} | " + " | ".join(str(mb) for *_, mb in taken) + " |"
            for taken in zip(*(r.rss_mb for r in replicas), strict=False)
        ),
        "",
        "</details>",
    ]
    if fig["problems"]:
        lines += ["", "Problems:", "", *(f"- `{p}`" for p in fig["problems"])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["front"]:
        parser = argparse.ArgumentParser(prog="bench.fleet_soak front")
        parser.add_argument("--port", type=int, required=True)
        parser.add_argument("--to", type=int, action="append", required=True)
        given = parser.parse_args(argv[1:])
        front_main(given.port, given.to)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=120, help="seconds of load (120)")
    parser.add_argument("--clients", type=int, default=24, help="concurrent clients (24)")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--sample", type=float, default=5, help="seconds between RSS samples")
    parser.add_argument("--settle", type=float, default=2, help="quiet seconds before the end")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "fleet-soak"))
    args = parser.parse_args(argv)
    from tests.pgserver import Server

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    server = Server.create()
    try:
        server.start()
        import psycopg

        with psycopg.connect(server.url(), autocommit=True) as admin:
            admin.execute("CREATE DATABASE fleet")
        db = server.url("fleet")
        result = asyncio.run(fleet(args, db, out))
        rows = store_rows(db)
        stats = [json.loads(line) for line in incidents_stats(db, "jsonl").splitlines()]
        table = incidents_stats(db, "table")
    finally:
        server.remove()
    fig = verdict(result, rows, stats)
    text = report(args, result, fig, table)
    (out / "FLEET.md").write_text(text)
    rss = {f"replica-{i + 1}": r.rss_mb for i, r in enumerate(result["replicas"])}
    (out / "fleet.json").write_text(json.dumps(fig | {"rss": rss}, indent=1, default=str))
    print(text)
    return 0 if all(fig["checks"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())

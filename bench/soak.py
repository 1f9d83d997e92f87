"""Soak: spillguard under steady mixed load for minutes, with disconnect storms, sampled for
leaks.

  .venv/bin/python -m bench.soak                      # 3 minutes at 35% of measured peak
  .venv/bin/python -m bench.soak --duration 600 --publish

Three processes on loopback: a fake upstream (this file, `upstream` sub-command), spillguard (the
real CLI) and this load generator. The load is open-loop at a fixed fraction of the peak rate
measured first, a mix of benign, leaking (recovered by the retry, or failing as 502), streamed
and failing (429, reset, upstream stall) requests; every `--storm-every` seconds a storm of
clients opens slow streams and slow requests and hangs up at random moments.

Every request is checked against its documented outcome (status, error code, the content a
client must see). Every few seconds spillguard's RSS, open file descriptors and TCP connections
to the upstream are sampled (psutil), with the upstream's count of handlers still running. At the
end the load stops, the connections are given the pool's keep-alive time to close, and the run
passes only if every request got its outcome, RSS and descriptors stayed flat, and nothing is
left open. `--publish` writes the figures to the "## Soak" section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import random
import shlex
import signal
import socket
import statistics
import struct
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "RESULTS.md"
ANALYSIS_MARK = "<!-- analysis: kept across --publish -->"
SPILLGUARD = Path(sys.executable).parent / "spillguard"

LEAK = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lisbon"}}\n</tool_call>'
HONEST = "It is sunny in Lisbon, 21 °C, with a light breeze from the north. " * 3
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
CORRECTION_MARK = b"tool-calling interface"

# ---- the fake upstream (a sub-process) -----------------------------------------------------------


def upstream_main(port: int) -> None:
    from aiohttp import web

    from spillguard.scripted import Turn, chunks, completion

    stats = {"in_flight": 0, "total": 0, "cancelled": 0}

    async def chat(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw)
        model = body.get("model", "benign")
        first = CORRECTION_MARK not in raw
        stats["total"] += 1
        stats["in_flight"] += 1
        try:
            if model == "err429":
                headers = {"retry-after": "7", "content-type": "application/json"}
                error = {"error": {"message": "slow down", "type": "rate_limit", "code": "rl"}}
                return web.Response(status=429, body=json.dumps(error).encode(), headers=headers)
            if model == "reset":
                transport = request.transport
                sock = transport.get_extra_info("socket") if transport else None
                if sock is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                if transport is not None:
                    transport.abort()
                await asyncio.sleep(0.1)
                return web.Response(status=500)
            if model == "stall":
                await asyncio.sleep(3600)
            leaks = model == "leak-always" or (model == "leak-once" and first)
            turn = Turn(content=LEAK if leaks else HONEST, delta_size=12)
            if not body.get("stream"):
                return web.json_response(completion(turn, model))
            delay = 0.05 if model == "drip" else 0.0
            response = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await response.prepare(request)
            for piece in chunks(turn, model) * (20 if model == "drip" else 1):
                if delay:
                    await asyncio.sleep(delay)
                await response.write(piece)
            await response.write_eof()
            return response
        except asyncio.CancelledError:
            stats["cancelled"] += 1
            raise
        finally:
            stats["in_flight"] -= 1

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def get_stats(request: web.Request) -> web.Response:
        return web.json_response(stats)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/stats", get_stats)
    web.run_app(
        app, host="127.0.0.1", port=port, access_log=None, print=None, handler_cancellation=True
    )


# ---- the load ------------------------------------------------------------------------------------


@dataclass
class Kind:
    name: str
    weight: int
    model: str
    stream: bool
    want_status: int
    want_code: str | None = None
    want_action: str | None = None
    path: str = "/chat/completions"


KINDS = [
    Kind("benign", 28, "benign", False, 200, want_action="passed"),
    Kind("benign-stream", 24, "benign", True, 200, want_action="passed"),
    Kind("leak-retried", 10, "leak-once", False, 200, want_action="retried"),
    Kind("leak-retried-stream", 10, "leak-once", True, 200),
    Kind("leak-502", 4, "leak-always", False, 502, "TEXT_ENCODED_TOOL_CALL"),
    Kind("leak-502-stream", 4, "leak-always", True, 502, "TEXT_ENCODED_TOOL_CALL"),
    Kind("upstream-429", 5, "err429", False, 429),
    Kind("upstream-reset", 4, "reset", False, 502, "UPSTREAM_UNAVAILABLE"),
    Kind("upstream-stall", 1, "stall", False, 504, "UPSTREAM_TIMEOUT"),
    Kind("models", 6, "", False, 200, path="/models"),
]


def body_for(kind: Kind) -> dict[str, Any]:
    return {
        "model": kind.model,
        "messages": [{"role": "user", "content": "weather in Lisbon?"}],
        "tools": TOOLS,
        "stream": kind.stream,
    }


def sse_content(text: str) -> tuple[str, bool]:
    content, done = "", False
    for block in text.split("\n\n"):
        for line in block.split("\n"):
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                done = True
                continue
            obj = json.loads(data)
            if "error" in obj:
                return "ERROR:" + obj["error"].get("code", ""), done
            for choice in obj.get("choices", []):
                content += (choice.get("delta") or {}).get("content") or ""
    return content, done


async def one(
    session: Any, base: str, kind: Kind, headers: dict[str, str] | None = None
) -> str | None:
    """Send one request; None when it got its documented outcome, else what went wrong."""
    url = base + kind.path
    try:
        if kind.path == "/models":
            async with session.get(url) as r:
                await r.read()
                return None if r.status == 200 else f"status {r.status}"
        async with session.post(url, json=body_for(kind), headers=headers) as r:
            raw = await r.read()
            if r.status != kind.want_status:
                return f"status {r.status} (want {kind.want_status}): {raw[:120]!r}"
            if kind.want_code:
                code = json.loads(raw)["error"]["code"]
                return None if code == kind.want_code else f"code {code}"
            if kind.want_status == 429:
                return None if r.headers.get("retry-after") == "7" else "retry-after lost"
            if kind.want_action and r.headers.get("x-spillguard-action") != kind.want_action:
                return f"action {r.headers.get('x-spillguard-action')}"
            if kind.stream:
                content, done = sse_content(raw.decode())
                if not done or content != HONEST:
                    return f"stream content {content[:60]!r} done={done}"
            else:
                content = json.loads(raw)["choices"][0]["message"]["content"]
                if content != HONEST:
                    return f"content {content[:60]!r}"
            return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"[:200]


@dataclass
class Tally:
    sent: Counter[str] = field(default_factory=Counter)
    ok: Counter[str] = field(default_factory=Counter)
    bad: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    shed: int = 0
    storms: int = 0
    hung_up: int = 0

    def record(self, kind: str, problem: str | None) -> None:
        if problem is None:
            self.ok[kind] += 1
        else:
            self.bad[kind] += 1
            if len(self.examples) < 20:
                self.examples.append(f"{kind}: {problem}")


async def peak_rate(base: str, seconds: float, concurrency: int) -> float:
    import aiohttp

    mix = [k for k in KINDS if k.model != "stall"]
    weights = [k.weight for k in mix]
    done = 0
    stop = time.monotonic() + seconds
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def worker() -> None:
            nonlocal done
            while time.monotonic() < stop:
                if await one(session, base, random.choices(mix, weights)[0]) is None:
                    done += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done / seconds


async def storm(base: str, tally: Tally, size: int) -> None:
    """`size` clients open slow requests and hang up at random moments."""
    import aiohttp

    kinds = [
        Kind("drip-stream", 1, "drip", True, 200),
        Kind("stall", 1, "stall", False, 504),
        Kind("leak-drip", 1, "leak-once", True, 200),
        Kind("benign-stream", 1, "benign", True, 200),
    ]
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, force_close=True)
    ) as session:

        async def hang_up(kind: Kind) -> None:
            task = asyncio.ensure_future(one(session, base, kind))
            await asyncio.sleep(random.uniform(0.0, 1.5))
            if not task.done():
                task.cancel()
                tally.hung_up += 1
            with contextlib.suppress(asyncio.CancelledError):
                await task

        await asyncio.gather(*(hang_up(random.choice(kinds)) for _ in range(size)))
    tally.storms += 1


# ---- sampling ------------------------------------------------------------------------------------


@dataclass
class Sample:
    t: float
    rss_mb: float
    fds: int
    upstream_conns: int
    upstream_in_flight: int
    cpu: float
    phase: str
    cpu_upstream: float = 0.0
    cpu_loadgen: float = 0.0
    sockets: int = 0
    files: tuple[str, ...] = ()


OTHERS: dict[str, Any] = {}


def sample(proc: Any, up_port: int, up_stats: dict[str, int], t0: float, phase: str) -> Sample:
    conns = [
        c
        for c in proc.net_connections(kind="tcp")
        if c.raddr and c.raddr.port == up_port and c.status == "ESTABLISHED"
    ]
    return Sample(
        t=round(time.monotonic() - t0, 1),
        rss_mb=round(proc.memory_info().rss / 2**20, 1),
        fds=proc.num_fds(),
        upstream_conns=len(conns),
        upstream_in_flight=up_stats.get("in_flight", -1),
        cpu=round(proc.cpu_percent(), 1),
        phase=phase,
        cpu_upstream=round(OTHERS["upstream"].cpu_percent(), 1) if "upstream" in OTHERS else 0,
        cpu_loadgen=round(OTHERS["loadgen"].cpu_percent(), 1) if "loadgen" in OTHERS else 0,
        **fd_kinds(proc.pid),
    )


def fd_kinds(pid: int) -> dict[str, Any]:
    """How many of the process's descriptors are sockets, and what the others point at."""
    sockets, files = 0, []
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:"):
                    sockets += 1
                else:
                    files.append(target)
    return {"sockets": sockets, "files": tuple(sorted(files))}


async def upstream_stats(session: Any, port: int) -> dict[str, int]:
    try:
        async with session.get(f"http://127.0.0.1:{port}/stats") as r:
            return dict(await r.json())
    except Exception:
        return {}


# ---- the run -------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_http(url: str, seconds: float = 20) -> None:
    import aiohttp

    stop = time.monotonic() + seconds
    async with aiohttp.ClientSession() as session:
        while True:
            try:
                async with session.get(url) as r:
                    if r.status < 500:
                        return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > stop:
                raise RuntimeError(f"{url} did not come up")
            await asyncio.sleep(0.1)


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    import aiohttp
    import psutil

    up_port, sg_port = free_port(), free_port()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    up_log = (out / "upstream.log").open("w")
    sg_log = (out / "spillguard.log").open("w")
    upstream = subprocess.Popen(
        [sys.executable, "-m", "bench.soak", "upstream", "--port", str(up_port)],
        cwd=ROOT,
        stdout=up_log,
        stderr=subprocess.STDOUT,
    )
    sg_cmd = [
        str(SPILLGUARD),
        "--upstream",
        f"http://127.0.0.1:{up_port}/v1",
        "--port",
        str(sg_port),
        "--total-timeout",
        "3",
        "--read-timeout",
        "3",
        "--log-level",
        "WARNING",
    ]
    # cwd: the incident record (SQLite) lands in the run's folder
    spillguard = subprocess.Popen(sg_cmd, cwd=out, stdout=sg_log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{sg_port}/v1"
    try:
        await wait_http(f"http://127.0.0.1:{up_port}/stats")
        await wait_http(f"http://127.0.0.1:{sg_port}/healthz")
        proc = psutil.Process(spillguard.pid)
        proc.cpu_percent()
        OTHERS["upstream"] = psutil.Process(upstream.pid)
        OTHERS["loadgen"] = psutil.Process()
        for p in OTHERS.values():
            p.cpu_percent()
        t0 = time.monotonic()
        stats_session = aiohttp.ClientSession()
        samples: list[Sample] = []
        stats = await upstream_stats(stats_session, up_port)
        samples.append(sample(proc, up_port, stats, t0, "idle"))
        peak = await peak_rate(base, args.peak_seconds, 32)
        rate = max(1.0, peak * args.fraction)
        print(f"peak {peak:.0f} req/s (the mix, 32 connections); soak at {rate:.0f} req/s")
        await asyncio.sleep(2)
        tally = Tally()
        t0 = time.monotonic()
        weights = [k.weight for k in KINDS]
        outstanding: set[asyncio.Task[None]] = set()
        storms: set[asyncio.Task[None]] = set()

        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=30),
        ) as session:

            async def run_one(kind: Kind) -> None:
                tally.sent[kind.name] += 1
                tally.record(kind.name, await one(session, base, kind))

            stop = t0 + args.duration
            next_send = next_sample = time.monotonic()
            next_storm = t0 + args.storm_every / 2
            while (now := time.monotonic()) < stop:
                if now >= next_sample:
                    stats = await upstream_stats(stats_session, up_port)
                    samples.append(sample(proc, up_port, stats, t0, "load"))
                    s = samples[-1]
                    print(
                        f"t={s.t:6.1f}s rss={s.rss_mb} MB fds={s.fds} "
                        f"upstream conns={s.upstream_conns} in flight={s.upstream_in_flight} "
                        f"cpu={s.cpu}%/{s.cpu_upstream}%/{s.cpu_loadgen}% "
                        f"ok={sum(tally.ok.values())} bad={sum(tally.bad.values())}",
                        flush=True,
                    )
                    next_sample += args.sample
                if now >= next_storm:
                    task = asyncio.ensure_future(storm(base, tally, args.storm_size))
                    storms.add(task)
                    task.add_done_callback(storms.discard)
                    next_storm += args.storm_every
                while next_send <= now:
                    if len(outstanding) >= args.max_outstanding:
                        tally.shed += 1
                    else:
                        kind = random.choices(KINDS, weights)[0]
                        task = asyncio.ensure_future(run_one(kind))
                        outstanding.add(task)
                        task.add_done_callback(outstanding.discard)
                    next_send += random.expovariate(rate)
                await asyncio.sleep(min(next_send, next_sample, stop) - time.monotonic())
            await asyncio.gather(*outstanding, *storms)
        # Quiet: the pool's idle keep-alive connections (15 s) must close, handlers must end.
        for _ in range(int(args.settle / args.sample) + 1):
            await asyncio.sleep(args.sample)
            stats = await upstream_stats(stats_session, up_port)
            samples.append(sample(proc, up_port, stats, t0, "quiet"))
        final_stats = await upstream_stats(stats_session, up_port)
        incidents = sum(f.stat().st_size for f in out.glob("spillguard-incidents.sqlite3*"))
        await stats_session.close()
        return {
            "peak": peak,
            "rate": rate,
            "tally": tally,
            "samples": samples,
            "upstream": final_stats,
            "spillguard_cmd": sg_cmd,
            "incidents_bytes": incidents,
        }
    finally:
        for p in (spillguard, upstream):
            p.send_signal(signal.SIGTERM)
        for p in (spillguard, upstream):
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        up_log.close()
        sg_log.close()


def verdict(result: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    samples: list[Sample] = result["samples"]
    tally: Tally = result["tally"]
    load = [s for s in samples if s.phase == "load"]
    quiet = [s for s in samples if s.phase == "quiet"]
    third = max(1, len(load) // 3)
    early, late = load[third : 2 * third], load[-third:]
    rss_early = round(statistics.median(s.rss_mb for s in early or load), 1)
    rss_late = round(statistics.median(s.rss_mb for s in late), 1)
    fds_idle = samples[0].fds
    figures = {
        "requests": sum(tally.sent.values()),
        "ok": sum(tally.ok.values()),
        "bad": sum(tally.bad.values()),
        "shed": tally.shed,
        "storms": tally.storms,
        "hung_up": tally.hung_up,
        "rss_idle": samples[0].rss_mb,
        "rss_early_median": rss_early,
        "rss_late_median": rss_late,
        "rss_max": max(s.rss_mb for s in samples),
        "rss_final": quiet[-1].rss_mb,
        "fds_idle": fds_idle,
        "fds_max": max(s.fds for s in samples),
        "fds_final": quiet[-1].fds,
        "sockets_idle": samples[0].sockets,
        "sockets_max": max(s.sockets for s in samples),
        "sockets_final": quiet[-1].sockets,
        "files_opened": sorted(set(quiet[-1].files) - set(samples[0].files)),
        "upstream_conns_max": max(s.upstream_conns for s in samples),
        "upstream_conns_final": quiet[-1].upstream_conns,
        "upstream_in_flight_final": quiet[-1].upstream_in_flight,
        "upstream_cancelled": result["upstream"].get("cancelled", -1),
        "upstream_total": result["upstream"].get("total", -1),
        "incidents_mb": round(result["incidents_bytes"] / 2**20, 1),
    }
    checks = {
        "every request got its documented outcome": figures["bad"] == 0,
        "no request shed by the load generator": figures["shed"] == 0,
        "RSS flat (late median within 10% or 8 MB of the early median)": rss_late
        <= max(rss_early * 1.10, rss_early + 8),
        "sockets back to idle when quiet": figures["sockets_final"] <= figures["sockets_idle"],
        "no descriptor left open but files opened once": figures["fds_final"]
        <= fds_idle + len(figures["files_opened"]),
        "no upstream connection left open when quiet": figures["upstream_conns_final"] == 0,
        "no upstream handler left running": figures["upstream_in_flight_final"] == 0,
    }
    figures["checks"] = checks
    return all(checks.values()), figures


# ---- the report ----------------------------------------------------------------------------------


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = 0.0
    with contextlib.suppress(OSError, ValueError, IndexError):
        mem = int(Path("/proc/meminfo").read_text().split()[1]) / 2**20
    return (
        f"{cpu}, {os.cpu_count()} CPUs, {mem:.0f} GiB RAM, Linux {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def section(args: argparse.Namespace, result: dict[str, Any], ok: bool, fig: dict[str, Any]) -> str:
    tally: Tally = result["tally"]
    samples: list[Sample] = result["samples"]
    command = ".venv/bin/python -m bench.soak " + " ".join(map(shlex.quote, sys.argv[1:]))
    lines = [
        "## Soak",
        "",
        f"- **Date:** {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- **Machine:** {machine()}",
        f"- **Command:** `{command.strip()}`",
        f"- **spillguard:** `{' '.join(result['spillguard_cmd'][1:])}` (a real process; the "
        "fake upstream and this load generator are two more processes on the same 2 cores)",
        f"- **Load:** {args.duration:.0f} s open-loop (Poisson arrivals) at "
        f"{result['rate']:.0f} req/s, {args.fraction:.0%} of the {result['peak']:.0f} req/s "
        "peak measured first (closed loop, the same mix less the stalls, 32 connections); a "
        f"disconnect storm of {args.storm_size} clients every {args.storm_every:.0f} s (slow "
        "streams, stalled and leaking requests, each client hanging up after 0-1.5 s); then "
        f"{args.settle:.0f} s quiet.",
        f"- **Verdict:** {'PASS' if ok else 'FAIL'}",
        "",
        "| check | result |",
        "|---|---|",
        *(f"| {name} | {'yes' if good else '**no**'} |" for name, good in fig["checks"].items()),
        "",
        "| request kind | sent | documented outcome | other |",
        "|---|---:|---:|---:|",
    ]
    for kind in KINDS:
        want = f"{kind.want_status}" + (f" {kind.want_code}" if kind.want_code else "")
        name = f"{kind.name} ({want})"
        lines.append(
            f"| {name} | {tally.sent[kind.name]} | {tally.ok[kind.name]} | {tally.bad[kind.name]} |"
        )
    lines += [
        f"| **all** | **{fig['requests']}** | **{fig['ok']}** | **{fig['bad']}** |",
        "",
        f"Storms: {fig['storms']}, {fig['hung_up']} clients hung up mid-request; the upstream "
        f"saw {fig['upstream_total']} requests (the peak measurement and the retries included), "
        f"{fig['upstream_cancelled']} of them cancelled by spillguard closing the connection "
        "(clients hanging up, and the 3 s deadline on stalled requests).",
        "",
        "| figure | idle | load, early median | load, late median | max | quiet, final |",
        "|---|---:|---:|---:|---:|---:|",
        f"| spillguard RSS (MB) | {fig['rss_idle']} | {fig['rss_early_median']} | "
        f"{fig['rss_late_median']} | {fig['rss_max']} | {fig['rss_final']} |",
        f"| open file descriptors | {fig['fds_idle']} | | | {fig['fds_max']} | "
        f"{fig['fds_final']} |",
        f"| of which sockets | {fig['sockets_idle']} | | | {fig['sockets_max']} | "
        f"{fig['sockets_final']} |",
        f"| TCP connections to the upstream | {samples[0].upstream_conns} | | | "
        f"{fig['upstream_conns_max']} | {fig['upstream_conns_final']} |",
        f"| upstream handlers running | {samples[0].upstream_in_flight} | | | "
        f"{max(s.upstream_in_flight for s in samples)} | {fig['upstream_in_flight_final']} |",
        "",
        f"The incident record (SQLite, in the run's folder) grew to {fig['incidents_mb']} MB "
        "over the run: it has no retention limit, so its disk use grows with the findings. "
        "Files spillguard opened once and keeps open (not a leak): "
        + (", ".join(f"`{Path(f).name}`" for f in fig["files_opened"]) or "none")
        + ".",
        "",
        f"<details><summary>Samples (every {args.sample:.0f} s)</summary>",
        "",
        "| t (s) | phase | RSS (MB) | fds | sockets | upstream conns | upstream in flight "
        "| CPU % spillguard / upstream / load |",
        "|---:|---|---:|---:|---:|---:|---:|---|",
        *(
            f"| {s.t} | {s.phase} | {s.rss_mb} | {s.fds} | {s.sockets} | {s.upstream_conns} | "
            f"{s.upstream_in_flight} | {s.cpu} / {s.cpu_upstream} / {s.cpu_loadgen} |"
            for s in samples
        ),
        "",
        "</details>",
    ]
    if tally.examples:
        lines += ["", "Outcomes that were not the documented ones:", ""]
        lines += [f"- `{e}`" for e in tally.examples]
    return "\n".join(lines) + "\n"


def publish(text: str) -> None:
    """Write `text` as the "## Soak" section of RESULTS.md, re-reading the file first and
    leaving every other section as it is. The section sits below the analysis marker, which
    bench.report keeps across its own --publish."""
    old = RESULTS.read_text() if RESULTS.exists() else ""
    if "## Soak" in old:
        start = old.index("## Soak")
        nxt = old.find("\n## ", start + 1)
        new = old[:start] + text + (old[nxt + 1 :] if nxt >= 0 else "")
    else:
        if ANALYSIS_MARK not in old:
            old = (old.rstrip() + "\n\n" if old.strip() else "") + ANALYSIS_MARK + "\n"
        new = old.rstrip() + "\n\n" + text
    RESULTS.write_text(new)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["upstream"]:
        parser = argparse.ArgumentParser(prog="bench.soak upstream")
        parser.add_argument("--port", type=int, required=True)
        upstream_main(parser.parse_args(argv[1:]).port)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=180, help="seconds of load (180)")
    parser.add_argument("--fraction", type=float, default=0.35, help="of peak rate (0.35)")
    parser.add_argument("--peak-seconds", type=float, default=8)
    parser.add_argument("--sample", type=float, default=5, help="seconds between samples")
    parser.add_argument("--storm-every", type=float, default=30)
    parser.add_argument("--storm-size", type=int, default=150)
    parser.add_argument("--settle", type=float, default=25, help="quiet seconds at the end")
    parser.add_argument("--max-outstanding", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "soak"))
    parser.add_argument("--publish", action="store_true", help="write the ## Soak section")
    args = parser.parse_args(argv)
    random.seed(args.seed)
    result = asyncio.run(soak(args))
    ok, fig = verdict(result)
    text = section(args, result, ok, fig)
    out = Path(args.out)
    (out / "SOAK.md").write_text(text)
    samples = [s.__dict__ for s in result["samples"]]
    raw = {k: v for k, v in fig.items()} | {"samples": samples}
    (out / "soak.json").write_text(json.dumps(raw, indent=1, default=str))
    print(text)
    if args.publish:
        publish(text)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

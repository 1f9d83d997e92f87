"""Run every benchmark in one go and write a Markdown report with PNG charts.

  .venv/bin/python -m bench.run            # every target (at most 15 minutes)
  .venv/bin/python -m bench.run --quick    # the same rows and levels, one round, 3 s points
  .venv/bin/python -m bench.run --sections sustained   # one section alone

The proxy under test runs pinned to CPU 0 (`taskset -c 0`); the fake upstream and the load
generators run pinned to CPU 1, each in its own process. Rows in the same run: the upstream
direct, the floor (bench/floor.py), spillguard in retry and observe mode, LiteLLM's proxy when
it is installed (see bench/README.md), and with `--baseline DIR` spillguard's code from another
checkout's `app/` (the same command, that code first on the path). The rows start once and serve
the nonstream, stream, sustained and bound sections in turn. Results go to bench/out/<stamp>/
(results.json, REPORT.md, charts, every process's log); `--publish` also copies the charts to
bench/charts/ and writes bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .payloads import agent_request, chat_request
from .report import LOAD_KEYS, NS_KEYS, ONE_KEYS
from .report import combine as _combine

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
PY = sys.executable
KEY = "sk-bench-7f3a9c2e41d84b6f9a0e5c3d2b1f8e7a6c5d4b3a2f1e0d9c"  # LiteLLM's master key too
PORTS = {"upstream": 9100, "floor": 9201, "floor_parse": 9202, "retry": 9203, "observe": 9204}
PORTS |= {"litellm": 9205, "workers": 9206, "base": 9207, "nginx": 9208, "splice": 9209}
DEFAULT_SECTIONS = "nonstream,stream,sustained,bound,memory,components"
ALL_SECTIONS = DEFAULT_SECTIONS + ",workers,detect"
SUSTAIN_LEVELS = [250, 375, 500, 750, 1000, 1500, 2000, 2500, 3000]  # streams at once, in turn
STALL_MS = 100  # a gap between deltas longer than this at the client is a stall
TARGET_CLIENTS = 50  # the non-streamed throughput target is read at this many clients
BOUND_P99_MS = 5.0  # the latency bound of the `bound` section
BOUND_PROBE = 20.0  # req/s: the bound section's first point for every row
BOUND_SAMPLES = 400  # latencies a bound point measures at least: no p99 is one stray request
PROXY_CPU, LOAD_CPU, ALL_CPUS = "0", "1", "0,1"

WRK_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("BENCH_KEY")
local f = assert(io.open(os.getenv("BENCH_BODY"), "rb"))
wrk.body = f:read("*a")
f:close()
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'JSON {"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,'
    .. '"status":%d,"timeout":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"mean_us":%.1f,'
    .. '"max_us":%d}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean,
    latency.max))
end
"""


@dataclass
class Plan:
    quick: bool = False
    duration: float = 10
    warmup: float = 2
    levels: list[int] = field(default_factory=lambda: [1, 10, 50, 200])
    stream_levels: list[int] = field(default_factory=lambda: [10, 50, 200])
    one_n: int = 200
    ttfb_n: int = 50
    ttfb_delta_ms: int = 20
    hold_n: int = 1000
    hold_delta_ms: int = 1000
    rounds: int = 3
    # The non-streamed point the throughput target reads (50 clients): its per-round ratio
    # spread 0.69 to 0.99 in one run on this VM, so its median takes more rounds.
    target_rounds: int = 5
    sustain_delta_ms: int = 20
    sustain_deltas: int = 64
    sustain_seconds: float = 3
    sustain_levels: list[int] = field(default_factory=lambda: list(SUSTAIN_LEVELS))
    bound_steps: int = 5
    bound_seconds: float = 3
    litellm: Path | None = None
    nginx: Path | None = None
    baseline: Path | None = None
    sections: list[str] = field(default_factory=list)
    sg_args: list[str] = field(default_factory=list)
    request: str = "bench"  # what the non-streamed load sends: "agent" is a long agent turn


# ---- processes ---------------------------------------------------------------------------------


class Proc:
    """A child process pinned with taskset, logging to a file, stopped by its own id."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        cpu: str | None,
        logs: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        cmd = ["taskset", "-c", cpu, *argv] if cpu is not None else argv
        self.log_path = logs / f"{name}.log"
        self.log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        full_env = os.environ | {"PYTHONUNBUFFERED": "1"} | (env or {})
        self.popen = subprocess.Popen(
            cmd,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=cwd or ROOT,
            start_new_session=True,
        )
        self.pid = self.popen.pid

    def tree(self) -> list[int]:
        import psutil

        try:
            me = psutil.Process(self.pid)
            return [self.pid] + [c.pid for c in me.children(recursive=True)]
        except psutil.Error:
            return []

    def rss_mb(self) -> float:
        """Resident memory of the process and its children now, in MB."""
        return round(sum(_status_kb(p, "VmRSS") for p in self.tree()) / 1024, 1)

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the process and its children have used so far."""
        import psutil

        total = 0.0
        for pid in self.tree():
            with contextlib.suppress(psutil.Error):
                total += sum(psutil.Process(pid).cpu_times()[:2])
        return total

    def peak_mb(self) -> float:
        """Peak resident memory (VmHWM) of the process, plus its children's, in MB."""
        return round(sum(_status_kb(p, "VmHWM") for p in self.tree()) / 1024, 1)

    def settle(self, max_wait: float = 30, idle_pct: float = 5) -> float:
        """Wait until the process (and its children) stop using CPU: a proxy still finishing
        abandoned work must not run into the next row's measurement. Returns seconds waited."""
        import psutil

        t0 = time.monotonic()
        while time.monotonic() - t0 < max_wait:
            try:
                procs = [psutil.Process(p) for p in self.tree()]
                before = sum(sum(p.cpu_times()[:2]) for p in procs)
                time.sleep(0.25)
                after = sum(sum(p.cpu_times()[:2]) for p in procs)
            except psutil.Error:
                break
            if (after - before) / 0.25 * 100 < idle_pct:
                break
        return round(time.monotonic() - t0, 2)

    def wait_http(self, port: int, path: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited early; see {self.log_path}")
            if _http_get(port, path) is not None:
                return
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} did not answer on :{port}{path}; see {self.log_path}")

    def stop(self) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGTERM)  # the group this process leads
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pid, signal.SIGKILL)
                self.popen.wait(timeout=5)
        self.log.close()


def _status_kb(pid: int, key: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _http_get(port: int, path: str) -> int | None:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".encode())
            head = s.recv(64)
            return int(head[9:12]) if head.startswith(b"HTTP/1.") else None
    except (OSError, ValueError):
        return None


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        # As the servers bind: connections of an earlier run left in TIME_WAIT do not hold it.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


class Stack:
    """Every process a run started; all of them are stopped when the run ends, however it ends."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.procs: list[Proc] = []

    def start(self, name: str, argv: list[str], cpu: str | None, **kw: Any) -> Proc:
        proc = Proc(name, argv, cpu, self.logs, **kw)
        self.procs.append(proc)
        return proc

    def stop(self, proc: Proc) -> None:
        proc.stop()
        if proc in self.procs:
            self.procs.remove(proc)

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.procs.clear()


def _cpu_times(cpu: str) -> tuple[int, int] | None:
    """(steal, total) jiffies of one CPU from /proc/stat; None where there is none (not Linux)."""
    try:
        with open("/proc/stat") as stat:
            for line in stat:
                if line.startswith(f"cpu{cpu} "):
                    ticks = [int(t) for t in line.split()[1:]]
                    # user nice system idle iowait irq softirq steal: guest time is in user
                    return (ticks[7], sum(ticks[:8])) if len(ticks) >= 8 else None
    except OSError:
        return None
    return None


class Noise:
    """Samples, once a second, the CPU used by processes that are not this run's, and the time
    the hypervisor took from the proxy's CPU (steal), so a report says when something else on
    the machine, or under it, competed for the cores."""

    def __init__(self) -> None:
        import threading

        self.samples: dict[str, list[float]] = {}
        self.series: list[tuple[float, float]] = []  # (monotonic time, foreign CPU %)
        self.steal: dict[str, list[float]] = {}  # by section: % of the proxy's CPU stolen
        self.steal_series: list[tuple[float, float]] = []
        self._last_times = _cpu_times(PROXY_CPU)
        self.section = "setup"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._procs: dict[int, Any] = {}

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _foreign(self) -> float:
        import psutil

        me = psutil.Process()
        ours = {me.pid} | {c.pid for c in me.children(recursive=True)}
        total = 0.0
        seen = set()
        for proc in psutil.process_iter(["pid"]):
            pid = proc.info["pid"]
            if pid in ours or pid <= 2:
                continue
            seen.add(pid)
            tracked = self._procs.setdefault(pid, proc)
            with contextlib.suppress(psutil.Error):
                total += tracked.cpu_percent(None)
        for pid in set(self._procs) - seen:
            del self._procs[pid]
        return total

    def _loop(self) -> None:
        self._foreign()
        while not self._stop.wait(1.0):
            try:
                value = self._foreign()
            except Exception:  # never let the sampler break a run
                continue
            self.samples.setdefault(self.section, []).append(value)
            now = time.monotonic()
            self.series.append((now, value))
            times, last = _cpu_times(PROXY_CPU), self._last_times
            if times and last and times[1] > last[1]:
                stolen = 100.0 * (times[0] - last[0]) / (times[1] - last[1])
                self.steal.setdefault(self.section, []).append(stolen)
                self.steal_series.append((now, stolen))
            self._last_times = times

    def during(self, t0: float, t1: float) -> float | None:
        """Mean foreign CPU % sampled between two monotonic times."""
        values = [v for t, v in self.series if t0 <= t <= t1 + 0.5]
        return round(sum(values) / len(values), 1) if values else None

    def steal_during(self, t0: float, t1: float) -> float | None:
        """The most steal (% of the proxy's CPU) any second between two monotonic times saw."""
        values = [v for t, v in self.steal_series if t0 <= t <= t1 + 0.5]
        return round(max(values), 1) if values else None

    def wait_quiet(self, limit_pct: float, max_wait: float) -> float:
        """Wait (at most max_wait s) until 2 s in a row saw under limit_pct foreign CPU."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < max_wait:
            recent = [v for t, v in self.series if t >= time.monotonic() - 2.2]
            if len(recent) >= 2 and max(recent) < limit_pct:
                break
            time.sleep(0.5)
        return round(time.monotonic() - t0, 1)

    def summary(self) -> dict[str, dict[str, float]]:
        return _mean_and_max(self.samples)

    def steal_summary(self) -> dict[str, dict[str, float]]:
        return _mean_and_max(self.steal)


def _mean_and_max(by_section: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    return {
        section: {"mean_pct": round(sum(v) / len(v), 1), "max_pct": round(max(v), 1)}
        for section, v in by_section.items()
        if v
    }


NOISE: Noise | None = None
QUIET = {"limit": 15.0, "wait": 0.0}


def measured(fn: Any, *args: Any, **kw: Any) -> dict:
    """Run one measurement, first waiting for the machine to be quiet if asked; note how busy
    other processes kept it meanwhile."""
    waited = NOISE.wait_quiet(QUIET["limit"], QUIET["wait"]) if NOISE and QUIET["wait"] else 0
    t0 = time.monotonic()
    result = fn(*args, **kw)
    result["foreign_cpu_pct"] = NOISE.during(t0, time.monotonic()) if NOISE else None
    result["steal_pct"] = NOISE.steal_during(t0, time.monotonic()) if NOISE else None
    if waited:
        result["waited_for_quiet_s"] = waited
    return result


# ---- the proxies -------------------------------------------------------------------------------


# One worker (one core), unbuffered both ways, upstream connections kept alive: what a
# deployment of nginx in front of a streaming API does, with logging off.
NGINX_CONF = """\
worker_processes 1;
daemon off;
pid nginx.pid;
error_log logs/error.log warn;
worker_rlimit_nofile 65536;
events {{ worker_connections 16384; }}
http {{
  access_log off;
  client_body_temp_path logs/body;
  proxy_temp_path logs/proxy;
  upstream spillguard_bench {{ server 127.0.0.1:{upstream}; keepalive 4096; }}
  server {{
    listen 127.0.0.1:{port} backlog=4096;
    location / {{
      proxy_pass http://spillguard_bench;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 120s;
    }}
  }}
}}
"""


@dataclass
class Row:
    key: str
    label: str
    port: int


def upstream_url() -> str:
    return f"http://127.0.0.1:{PORTS['upstream']}/v1"


def _bound_argv(row: Row, plan: Plan, out: Path) -> list[str]:
    """The command of a row that bounds what a proxy holds: the Python splice, or nginx."""
    if row.key == "splice":
        port, upstream = str(row.port), str(PORTS["upstream"])
        return [PY, "-m", "bench.splice", "--port", port, "--upstream-port", upstream]
    assert plan.nginx is not None
    prefix = out / "nginx"
    (prefix / "logs").mkdir(parents=True, exist_ok=True)
    (prefix / "nginx.conf").write_text(NGINX_CONF.format(port=row.port, **PORTS))
    return [str(plan.nginx), "-p", str(prefix), "-c", str(prefix / "nginx.conf")]


def start_row(
    stack: Stack, row: Row, plan: Plan, out: Path, cpu: str | None = PROXY_CPU, workers: int = 1
) -> Proc | None:
    """Start the proxy for a row (None for the upstream direct) and wait until it answers."""
    up = upstream_url()
    if row.key == "direct":
        return None
    if row.key.startswith("floor"):
        argv = [PY, "-m", "bench.floor", "--upstream", up, "--port", str(row.port)]
        if row.key == "floor_parse":
            argv.append("--parse-events")
        proc = stack.start(row.key, argv, cpu)
        proc.wait_http(row.port, "/v1/models")
        return proc
    if row.key in ("retry", "observe", "base") or row.key.startswith("sg_w"):
        mode = "observe" if row.key == "observe" else "retry"
        argv = [str(ROOT / ".venv/bin/spillguard"), "--upstream", up, "--port", str(row.port)]
        argv += ["--mode", mode, "--workers", str(workers), *plan.sg_args]
        env = {"SPILLGUARD_INCIDENTS_DB": str(out / f"incidents-{row.key}.sqlite3")}
        if row.key == "base":
            assert plan.baseline is not None
            env["PYTHONPATH"] = str(plan.baseline)
        if not (ROOT / ".venv/bin/spillguard").exists():
            argv[0:1] = [PY, "-m", "spillguard.cli"]
        proc = stack.start(row.key, argv, cpu, env=env)
        proc.wait_http(row.port, "/healthz")
        if workers > 1:
            time.sleep(3)  # every worker up, not just the first
        return proc
    if row.key in ("splice", "nginx"):
        proc = stack.start(row.key, _bound_argv(row, plan, out), cpu)
        proc.wait_http(row.port, "/v1/models")
        return proc
    if row.key == "litellm":
        assert plan.litellm is not None
        config = out / "litellm.yaml"
        config.write_text(
            "model_list:\n"
            '  - model_name: "*"\n'
            "    litellm_params:\n"
            '      model: "openai/*"\n'
            f'      api_base: "{up}"\n'
            '      api_key: "sk-bench"\n'
            "litellm_settings:\n"
            "  drop_params: true\n"
            "  telemetry: false\n"
        )
        argv = [str(plan.litellm), "--config", str(config), "--port", str(row.port)]
        argv += ["--num_workers", "1"]
        env = {
            "LITELLM_MASTER_KEY": KEY,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_LOG": "ERROR",
            "LITELLM_TELEMETRY": "False",
        }
        proc = stack.start(row.key, argv, cpu, env=env, cwd=out)
        proc.wait_http(row.port, "/health/liveliness", timeout=120)
        return proc
    raise ValueError(row.key)


# ---- load ---------------------------------------------------------------------------------------


def wrk(port: int, conc: int, seconds: float, out: Path, cpu: str | None = LOAD_CPU) -> dict:
    lua, body = out / "post.lua", out / "body.json"
    if not lua.exists():
        lua.write_text(WRK_LUA)
        body.write_bytes(chat_request("bench"))
    cmd = ["wrk", "-t1", f"-c{conc}", f"-d{max(1, round(seconds))}s", "--timeout", "10s"]
    cmd += ["-s", str(lua), f"http://127.0.0.1:{port}/v1/chat/completions"]
    if cpu is not None:
        cmd = ["taskset", "-c", cpu, *cmd]
    env = os.environ | {"BENCH_BODY": str(body), "BENCH_KEY": KEY}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=seconds + 60)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("JSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no result: {done.stdout}\n{done.stderr}")
    raw = json.loads(line[5:])
    secs = raw["duration_us"] / 1e6
    errors = sum(raw[k] for k in ("connect", "read", "write", "status", "timeout"))
    result = {
        "concurrency": conc,
        "seconds": round(secs, 3),
        "requests": raw["requests"],
        "errors": errors,
        "req_per_s": round(raw["requests"] / secs, 1),
        "p50_ms": raw["p50_us"] / 1000,
        "p90_ms": raw["p90_us"] / 1000,
        "p99_ms": raw["p99_us"] / 1000,
        "mean_ms": round(raw["mean_us"] / 1000, 3),
    }
    if not raw["requests"]:  # nothing completed: no latency to speak of
        result |= {"p50_ms": None, "p90_ms": None, "p99_ms": None, "mean_ms": None}
    return result


# What a load generator raises when the proxy it drives stops answering.
LOST = (RuntimeError, subprocess.TimeoutExpired)


def loadgen(args: list[str], cpu: str | None = LOAD_CPU, timeout: float = 300) -> dict:
    cmd = [PY, "-m", "bench.loadgen", *args]
    if cpu is not None:
        cmd = ["taskset", "-c", cpu, *cmd]
    env = os.environ | {"BENCH_KEY": KEY}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"loadgen failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---- sections ----------------------------------------------------------------------------------


LABELS = {
    "direct": "upstream direct",
    "floor": "floor",
    "floor_parse": "floor + per-event parse",
    "retry": "spillguard retry",
    "observe": "spillguard observe",
    "base": "spillguard retry (baseline)",
    "litellm": "LiteLLM proxy",
    "nginx": "nginx proxy_pass",
    "splice": "Python TCP splice",
}


def rows_for(plan: Plan, *keys: str) -> list[Row]:
    """The rows among `keys` this run has (LiteLLM when installed, the baseline when given)."""
    rows = []
    for key in keys:
        if (key == "litellm" and plan.litellm is None) or (key == "base" and not plan.baseline):
            continue
        if key == "nginx" and plan.nginx is None:
            continue
        port = PORTS["upstream"] if key == "direct" else PORTS[key]
        rows.append(Row(key, LABELS[key], port))
    return rows


class Live:
    """The rows' proxies, started when a section first needs them (all pinned to the proxy
    CPU, each idle until its turn) and kept for the next section."""

    def __init__(self, stack: Stack, plan: Plan, out: Path) -> None:
        self.stack, self.plan, self.out = stack, plan, out
        self.procs: dict[str, Proc | None] = {}
        self.failed: dict[str, dict] = {}

    def get(self, rows: list[Row]) -> tuple[list[tuple[Row, Proc | None]], list[dict]]:
        live = []
        for row in rows:
            if row.key not in self.procs and row.key not in self.failed:
                try:
                    self.procs[row.key] = start_row(self.stack, row, self.plan, self.out)
                except RuntimeError as exc:
                    log(f"  {row.label} did not start: {exc}")
                    self.failed[row.key] = {"row": row.key, "label": row.label, "error": str(exc)}
            if row.key in self.procs:
                live.append((row, self.procs[row.key]))
        return live, [self.failed[r.key] for r in rows if r.key in self.failed]

    def lose(self, row: Row, section: str, exc: Exception) -> None:
        """A row's proxy stopped answering mid-section (LiteLLM's has died under 50 streams):
        it is stopped, and reported as failed in this section and every later one."""
        log(f"  {row.label} failed in {section}, dropped from the run: {str(exc)[-300:]}")
        proc = self.procs.pop(row.key, None)
        if proc is not None:
            self.stack.stop(proc)
        self.failed[row.key] = {"row": row.key, "label": row.label, "error": str(exc)[-2000:]}

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc is not None:
                self.stack.stop(proc)
        self.procs.clear()


def _order(live: list, round_no: int) -> list:
    """Rotate the row order each round, so no row always follows the same neighbour."""
    k = round_no % len(live)
    return live[k:] + live[:k]


def _cpu(proc: Proc | None) -> float:
    return proc.cpu_seconds() if proc else 0.0


def nonstream(live_rows: Live, plan: Plan, out: Path) -> list[dict]:
    """Every row at each concurrency, interleaved round by round (the median of the rounds is
    the figure), so that whatever else the machine does hits every row alike."""
    keys = ("direct", "floor", "retry", "observe", "base", "litellm")
    live, failed = live_rows.get(rows_for(plan, *keys))
    points: dict[tuple[str, int], list[dict]] = {}
    for conc in plan.levels:
        for round_no in range(plan.target_rounds if conc == TARGET_CLIENTS else plan.rounds):
            for row, proc in _order(live, round_no):
                wrk(row.port, conc, plan.warmup, out)
                cpu0 = _cpu(proc)
                result = measured(wrk, row.port, conc, plan.duration, out)
                if proc and result["requests"]:
                    # The proxy's own CPU per request: the figure least moved by other load.
                    used = _cpu(proc) - cpu0
                    result["cpu_us_per_req"] = round(used / result["requests"] * 1e6, 1)
                result["rss_mb"] = proc.rss_mb() if proc else None
                result["settled_s"] = proc.settle() if proc else 0
                points.setdefault((row.key, conc), []).append(result)
                log(
                    f"  {row.label} c={conc} round {round_no + 1}: "
                    f"{result['req_per_s']:.0f} req/s, p50 {result['p50_ms']} ms, "
                    f"p99 {result['p99_ms']} ms, cpu {result.get('cpu_us_per_req')} us/req, "
                    f"other CPU {result['foreign_cpu_pct']}%, steal {result['steal_pct']}%"
                )
    results = []
    for row, proc in live:
        levels = [_combine(points[(row.key, c)], NS_KEYS) for c in plan.levels]
        peak = proc.peak_mb() if proc else None
        results.append({"row": row.key, "label": row.label, "levels": levels, "peak_mb": peak})
    return results + failed


def streamed(live_rows: Live, plan: Plan, out: Path) -> list[dict]:
    keys = ("direct", "floor", "floor_parse", "retry", "base", "litellm")
    live, failed = live_rows.get(rows_for(plan, *keys))
    ones: dict[str, list[dict]] = {}
    ttfbs: dict[str, list[dict]] = {}
    loads: dict[tuple[str, int], list[dict]] = {}
    model = f"ttfb:{plan.ttfb_delta_ms}"
    for round_no in range(plan.rounds):
        for row, proc in _order(live, round_no):
            if row.key in live_rows.failed:
                continue
            url = f"http://127.0.0.1:{row.port}/v1"
            args = ["one", "--url", url, "-n", str(plan.one_n), "--max-seconds", "5"]
            ttfb_args = ["one", "--url", url, "--model", model, "-n", str(plan.ttfb_n)]
            try:
                one = measured(loadgen, args)
                if proc:
                    proc.settle()
                ttfb = measured(loadgen, ttfb_args)
            except LOST as exc:
                live_rows.lose(row, "stream", exc)
                continue
            ones.setdefault(row.key, []).append(one)
            ttfbs.setdefault(row.key, []).append(ttfb)
            if proc:
                proc.settle()
            log(
                f"  {row.label} round {round_no + 1}: one stream {one['chunks_per_s_p50']:.0f} "
                f"chunks/s, first content {one['ttfb_ms_p50']:.2f} ms; paced TTFB "
                f"{ttfb['ttfb_ms_p50']:.2f} ms"
            )
    for conc in plan.stream_levels:
        for round_no in range(plan.rounds):
            for row, proc in _order(live, round_no):
                if row.key in live_rows.failed:
                    continue
                url = f"http://127.0.0.1:{row.port}/v1"
                args = ["load", "--stream", "--url", url, "-c", str(conc)]
                args += ["-d", str(plan.duration), "--warmup", str(plan.warmup)]
                cpu0 = _cpu(proc)
                t0 = time.monotonic()
                try:
                    result = measured(loadgen, args)
                except LOST as exc:
                    live_rows.lose(row, "stream", exc)
                    continue
                if proc and result["events_per_s"]:
                    # Over the whole loadgen run (warm-up and wind-down included): an upper
                    # bound on the proxy's CPU per delivered event, for comparison only.
                    events = result["events_per_s"] * (time.monotonic() - t0)
                    result["cpu_us_per_event"] = round((_cpu(proc) - cpu0) / events * 1e6, 2)
                result["rss_mb"] = proc.rss_mb() if proc else None
                result["settled_s"] = proc.settle() if proc else 0
                loads.setdefault((row.key, conc), []).append(result)
                log(
                    f"  {row.label} {conc} streams round {round_no + 1}: "
                    f"{result['events_per_s']:.0f} chunks/s, "
                    f"other CPU {result['foreign_cpu_pct']}%, steal {result['steal_pct']}%"
                )
    results = []
    for row, proc in live:
        if row.key in live_rows.failed:
            failed.append(live_rows.failed[row.key])
            continue
        results.append(
            {
                "row": row.key,
                "label": row.label,
                "one": _combine(ones[row.key], ONE_KEYS),
                "ttfb": _combine(ttfbs[row.key], ONE_KEYS),
                "levels": [_combine(loads[(row.key, c)], LOAD_KEYS) for c in plan.stream_levels],
                "peak_mb": proc.peak_mb() if proc else None,
            }
        )
    return results + failed


def sustained(live_rows: Live, plan: Plan, out: Path) -> list[dict]:
    """The most paced streams each row holds at once with no stall and under 1% errors: each
    level in turn for every row still holding, until none holds. nginx's level is the
    harness's too, as far as it can be read: the upstream direct is no measure of it (with no
    proxy on the other core, the kernel's loopback work for both ends of every stream falls on
    the load's core; it failed at 1,000 where nginx held), so it is not a row here."""
    keys = ("nginx", "splice", "floor", "retry", "base", "litellm")
    live, failed = live_rows.get(rows_for(plan, *keys))
    model = f"sustain:{plan.sustain_delta_ms}:{plan.sustain_deltas}"
    points: dict[str, list[dict]] = {row.key: [] for row, _ in live}
    holding = {row.key for row, _ in live}
    for conc in plan.sustain_levels:
        if not holding:
            break
        for row, proc in live:
            if row.key not in holding:
                continue
            url = f"http://127.0.0.1:{row.port}/v1"
            args = ["sustain", "--url", url, "--model", model, "-c", str(conc)]
            args += ["-d", str(plan.sustain_seconds), "--warmup", "0.5"]
            cpu0 = _cpu(proc)
            try:
                result = measured(loadgen, args)
            except LOST as exc:
                result = {"concurrency": conc, "held": False, "error": str(exc)[-300:]}
            if proc and result.get("events_total"):
                # Over the whole point, ramp and tail too: each stream's setup is in it.
                spent = _cpu(proc) - cpu0
                result["cpu_us_per_chunk"] = round(1e6 * spent / result["events_total"], 1)
            result["rss_mb"] = proc.rss_mb() if proc else None
            result["settled_s"] = proc.settle() if proc else 0
            points[row.key].append(result)
            log(
                f"  {row.label} {conc} sustained streams: held {result.get('held')}, max gap "
                f"{result.get('gap_ms_max')} ms, p99 gap {result.get('gap_ms_p99')} ms, errors "
                f"{result.get('error_pct')}%, other CPU {result.get('foreign_cpu_pct')}%"
            )
            if not result.get("held"):
                holding.discard(row.key)
    results = []
    for row, proc in live:
        held = [p["concurrency"] for p in points[row.key] if p.get("held")]
        results.append(
            {
                "row": row.key,
                "label": row.label,
                "held": max(held) if held else 0,
                "capped": row.key in holding,  # still holding at the last level tried
                "levels": points[row.key],
                "peak_mb": proc.peak_mb() if proc else None,
            }
        )
    return results + failed


def _bound_point(row: Row, rate: float, plan: Plan) -> dict:
    url = f"http://127.0.0.1:{row.port}/v1"
    # Long enough for BOUND_SAMPLES latencies: the p99 of 60 (3 s at 20 req/s) is the worst
    # but one, and a single slow request would decide the whole search.
    seconds = max(plan.bound_seconds, math.ceil(BOUND_SAMPLES / rate))
    args = ["rate", "--url", url, "--rate", f"{rate:.0f}", "-c", "64"]
    args += ["-d", str(seconds), "--warmup", "1"]
    result = measured(loadgen, args)
    p99 = result.get("latency_ms_p99")
    result["within"] = bool(
        p99 is not None and p99 == p99 and p99 < BOUND_P99_MS and not result["errors"]
    )
    return result


@dataclass
class _Search:
    """One row's search for its bound: a ladder of rates doubling from BOUND_PROBE up to the
    ceiling, every rung measured, then a bisection (in log space) between the highest rung
    that held and the rung (or ceiling) above it.

    The ladder goes on past failures: on an idle VM a low rate can read a worse p99 than a
    higher one (every request wakes sleeping vCPUs), so a failed rung says nothing of the
    rates above it, and a search that stopped at the first failure would report the VM's
    wake-up time for whichever row drew it."""

    row: Row
    proc: Proc | None
    lo: float  # the highest rate that held (0: none yet)
    hi: float  # the ceiling, then the lowest rate above `lo` that failed
    bisections: int
    points: list[dict] = field(default_factory=list)
    climbing: bool = True

    def next_rate(self) -> float | None:
        if self.climbing:
            rate = BOUND_PROBE * 2 ** len(self.points)
            if rate < self.hi:
                return rate
            self.climbing = False  # the ceiling: bisect above the highest rung that held
            if self.lo and 2 * self.lo < self.hi:
                self.hi = 2 * self.lo  # the rung above it, which failed
        if not self.lo or not self.bisections:
            return None
        self.bisections -= 1
        return math.sqrt(self.lo * self.hi)

    def measured(self, rate: float, point: dict) -> None:
        self.points.append(point)
        if point["within"]:
            self.lo = max(self.lo, rate)
        elif not self.climbing:  # a bisection's point, above `lo`
            self.hi = min(self.hi, rate)


def bound(live_rows: Live, plan: Plan, out: Path, ceilings: dict[str, float]) -> list[dict]:
    """The highest request rate (open loop, non-streamed) at which each row's p99 stays under
    BOUND_P99_MS, searched (`_Search`) up to 1.1 times the row's closed-loop peak at 50
    clients (10,000 req/s when this run did not measure it). The searches advance together,
    one point per row a step in rotating order, so a slow minute of the machine falls on
    every row alike."""
    live, failed = live_rows.get(rows_for(plan, "floor", "retry", "base", "litellm"))
    searches = [
        _Search(row, proc, 0.0, (ceilings.get(row.key) or 10_000.0) * 1.1, plan.bound_steps)
        for row, proc in live
    ]
    step = 0
    while searches:
        turn = searches[step % len(searches) :] + searches[: step % len(searches)]
        todo = [(search, rate) for search in turn if (rate := search.next_rate()) is not None]
        if not todo:
            break
        for search, rate in todo:
            try:
                point = _bound_point(search.row, rate, plan)
            except LOST as exc:
                live_rows.lose(search.row, "bound", exc)
                searches.remove(search)
                failed.append(live_rows.failed[search.row.key])
                continue
            search.measured(rate, point)
            if search.proc:
                search.proc.settle()
        step += 1
    results = []
    for search in searches:
        log(f"  {search.row.label}: p99 under {BOUND_P99_MS} ms up to {search.lo:.0f} req/s")
        results.append(
            {
                "row": search.row.key,
                "label": search.row.label,
                "rate": round(search.lo),
                "points": search.points,
            }
        )
    return results + failed


def memory(stack: Stack, plan: Plan, out: Path) -> list[dict]:
    """Hold many slow streams open through each proxy; sample its memory while they are open."""
    results = []
    for row in rows_for(plan, "floor", "retry", "base"):
        log(f"memory: {plan.hold_n} open streams through {row.label}")
        proc = start_row(stack, row, plan, out)
        assert proc is not None
        time.sleep(1)
        idle = proc.rss_mb()
        url = f"http://127.0.0.1:{row.port}/v1"
        cmd = ["taskset", "-c", LOAD_CPU, PY, "-m", "bench.loadgen", "hold", "--url", url]
        cmd += ["-n", str(plan.hold_n), "--model", f"drip:{plan.hold_delta_ms}", "--hold", "120"]
        holder = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(out / f"hold-{row.key}.log", "wb"),  # noqa: SIM115
            text=True,
            cwd=ROOT,
            env=os.environ | {"BENCH_KEY": KEY},
        )
        try:
            assert holder.stdout is not None and holder.stdin is not None
            ready_line = holder.stdout.readline()
            if not ready_line.startswith("READY "):
                raise RuntimeError(f"hold: {ready_line!r}")
            samples = []
            for _ in range(5):
                samples.append(proc.rss_mb())
                time.sleep(1)
            holding_peak = proc.peak_mb()
            holder.stdin.close()
            final = json.loads(holder.stdout.read().strip().splitlines()[-1])
            holder.wait(timeout=30)
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.wait()
        time.sleep(3)
        after = proc.rss_mb()
        result = {
            "row": row.key,
            "label": row.label,
            "streams": plan.hold_n,
            "delta_ms": plan.hold_delta_ms,
            "idle_mb": idle,
            "holding_mb": max(samples),
            "peak_mb": holding_peak,
            "after_close_mb": after,
            "hold": final,
        }
        log(f"  {result}")
        results.append(result)
        stack.stop(proc)
    return results


def workers(stack: Stack, plan: Plan, out: Path) -> list[dict]:
    """`--workers 1` against `--workers 2`, everything unpinned (2 cores shared by all)."""
    results = []
    port = PORTS["workers"]
    conc = 50
    for key, label, n in (
        ("floor", "floor (1 process)", 1),
        ("sg_w1", "spillguard --workers 1", 1),
        ("sg_w2", "spillguard --workers 2", 2),
    ):
        log(f"workers: {label}")
        row = Row(key, label, port)
        proc = start_row(stack, row, plan, out, cpu=ALL_CPUS, workers=n)
        assert proc is not None
        wrk(port, conc, plan.warmup, out, cpu=ALL_CPUS)
        ns = measured(wrk, port, conc, plan.duration, out, cpu=ALL_CPUS)
        url = f"http://127.0.0.1:{port}/v1"
        args = ["load", "--stream", "--url", url, "-c", str(conc)]
        args += ["-d", str(plan.duration), "--warmup", str(plan.warmup)]
        st = measured(loadgen, args, cpu=ALL_CPUS)
        result = {
            "row": key,
            "label": label,
            "workers": n,
            "nonstream": ns,
            "stream": st,
            "peak_mb": proc.peak_mb(),
        }
        log(f"  {result}")
        results.append(result)
        stack.stop(proc)
    return results


def components() -> list[dict]:
    log("components (each step alone, on CPU 0)")
    cmd = ["taskset", "-c", PROXY_CPU, PY, "-m", "bench.components", "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    if done.returncode != 0:
        log(f"  components failed: {done.stderr[-500:]}")
        return [{"error": done.stderr[-500:]}]
    return json.loads(done.stdout)


def detection(plan: Plan) -> list[dict]:
    from .detect_bench import run_all

    log("detection core (each case in its own process on CPU 0)")
    return run_all(sizes=(1, 10), timeout=180, cpu=PROXY_CPU)


# ---- the run -----------------------------------------------------------------------------------


def _ceilings(data: dict) -> dict[str, float]:
    """Each row's closed-loop requests/s at 50 clients, when this run measured it: where the
    bound section's search stops."""
    out = {}
    for row in data.get("nonstream") or []:
        for level in row.get("levels", []):
            if level.get("concurrency") == TARGET_CLIENTS and level.get("req_per_s"):
                out[row["row"]] = float(level["req_per_s"])
    return out


def machine(nginx: Path | None = None) -> dict[str, Any]:
    cpu = platform.processor()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        mem_kb = int(Path("/proc/meminfo").read_text().split()[1])

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT)
        return done.stdout.strip()

    versions = {}
    for mod in ("uvicorn", "uvloop", "httptools", "aiohttp", "starlette", "fastapi"):
        with contextlib.suppress(Exception):
            from importlib.metadata import version

            versions[mod] = version(mod)
    if nginx is not None:
        done = subprocess.run([str(nginx), "-v"], capture_output=True, text=True)
        versions["nginx"] = done.stderr.strip().rpartition("/")[2]
    wrk_v = subprocess.run(["wrk", "--version"], capture_output=True, text=True)
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory_gb": round(mem_kb / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "versions": versions,
        "wrk": (wrk_v.stdout or wrk_v.stderr).splitlines()[0] if wrk_v else "",
        "git_head": git("rev-parse", "--short", "HEAD"),
        "git_dirty_app": bool(git("status", "--porcelain", "app")),
    }


def find_nginx(arg: str | None) -> Path | None:
    if arg == "off":
        return None
    found = arg or shutil.which("nginx") or "/usr/sbin/nginx"
    return Path(found) if Path(found).exists() else None


def find_litellm(arg: str | None) -> Path | None:
    if arg == "off":
        return None
    candidates = [Path(arg)] if arg else []
    candidates += [BENCH / "out/litellm-venv/bin/litellm", ROOT / ".venv/bin/litellm"]
    found = shutil.which("litellm")
    if found:
        candidates.append(Path(found))
    return next((c for c in candidates if c.exists()), None)


def check_tools() -> None:
    missing = [t for t in ("wrk", "taskset") if shutil.which(t) is None]
    if missing:
        sys.exit(f"missing: {', '.join(missing)} (apt-get install wrk util-linux)")
    for mod in ("psutil", "matplotlib"):
        try:
            __import__(mod)
        except ImportError:
            sys.exit(f"missing Python package {mod}: .venv/bin/pip install -e '.[bench]'")
    busy = [p for p in PORTS.values() if not _port_free(p)]
    if busy:
        sys.exit(f"ports in use: {busy} (is another benchmark running?)")
    if (os.cpu_count() or 1) < 2:
        print("warning: fewer than 2 CPUs; proxy and load share one", file=sys.stderr)


@contextlib.contextmanager
def running_upstream(stack: Stack) -> Iterator[Proc]:
    argv = [PY, "-m", "bench.upstream", "--port", str(PORTS["upstream"])]
    proc = stack.start("upstream", argv, LOAD_CPU)
    proc.wait_http(PORTS["upstream"], "/v1/models")
    yield proc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs, fewer samples")
    parser.add_argument("--duration", type=float, help="seconds per measured point")
    parser.add_argument("--rounds", type=int, help="interleaved rounds per point (median kept)")
    parser.add_argument(
        "--sections",
        default=DEFAULT_SECTIONS,
        help=f"comma-separated subset of: {ALL_SECTIONS} (default: {DEFAULT_SECTIONS}; 'all' "
        "adds the rest)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another checkout's app/ folder: spillguard from that code, as one more row",
    )
    parser.add_argument(
        "--litellm", help="path to the litellm executable, or 'off' (default: look for one)"
    )
    parser.add_argument(
        "--nginx", help="path to the nginx executable, or 'off' (default: look for one)"
    )
    parser.add_argument("--hold", type=int, default=1000, help="open streams for the memory test")
    parser.add_argument(
        "--sg-arg", action="append", default=[], help="extra spillguard flag (repeatable)"
    )
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=1,
        help="before each point, wait up to this many seconds for other processes on the "
        "machine to use under 15%% of a core (0: do not wait)",
    )
    parser.add_argument(
        "--request",
        choices=["bench", "agent"],
        default="bench",
        help="the non-streamed request: the bench's short one, or a 36 KB agent turn "
        "(payloads.agent_request; a check run, never published)",
    )
    parser.add_argument("--out", type=Path, help="output folder (default bench/out/<stamp>)")
    parser.add_argument("--publish", action="store_true", help="write bench/RESULTS.md and charts")
    parser.add_argument("--report-only", type=Path, help="re-render a finished run's folder")
    args = parser.parse_args(argv)
    if args.publish and args.request != "bench":
        parser.error("--publish measures the bench's own request; --request agent is a check")

    from .report import publish, render

    if args.report_only:
        data = json.loads((args.report_only / "results.json").read_text())
        render(data, args.report_only)
        if args.publish:
            publish(data, args.report_only)
        return 0

    check_tools()

    def interrupted(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # so that every started process is stopped on the way out

    signal.signal(signal.SIGTERM, interrupted)
    # This process only orchestrates: keep it (and what it starts unpinned) off the proxy's CPU.
    with contextlib.suppress(OSError, AttributeError, ValueError):
        os.sched_setaffinity(0, {int(LOAD_CPU)})
    quick = args.quick
    plan = Plan(
        quick=quick,
        duration=args.duration or (3 if quick else 4),
        warmup=1,
        rounds=args.rounds or (1 if quick else 3),
        target_rounds=args.rounds or (1 if quick else 5),
        levels=[1, 50],
        stream_levels=[50],
        one_n=30 if quick else 50,
        ttfb_n=20,
        ttfb_delta_ms=20,
        hold_n=args.hold,
        hold_delta_ms=1000,
        sustain_seconds=2 if quick else 3,
        bound_steps=3 if quick else 5,
        bound_seconds=2 if quick else 3,
        litellm=find_litellm(args.litellm),
        nginx=find_nginx(args.nginx),
        baseline=args.baseline.resolve() if args.baseline else None,
        sections=[
            s.strip()
            for s in (ALL_SECTIONS if args.sections == "all" else args.sections).split(",")
            if s.strip()
        ],
        sg_args=args.sg_arg,
        request=args.request,
    )
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = (args.out or BENCH / "out" / stamp).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if plan.request == "agent":  # `wrk` writes the bench's request only where there is none
        (out / "post.lua").write_text(WRK_LUA)
        (out / "body.json").write_bytes(agent_request())
    command = " ".join(
        [".venv/bin/python -m bench.run", *(argv if argv is not None else sys.argv[1:])]
    )
    data: dict[str, Any] = {
        "started": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": command,
        "machine": machine(plan.nginx),
        "plan": {k: str(v) if isinstance(v, Path) else v for k, v in plan.__dict__.items()},
        "pinning": {"proxy": PROXY_CPU, "upstream_and_load": LOAD_CPU},
    }
    if plan.nginx is None:
        data["nginx_note"] = "nginx not found: apt-get install nginx-light (or nginx)"
    if plan.litellm is None:
        data["litellm_note"] = (
            "LiteLLM not found: install it in bench/out/litellm-venv (see bench/README.md)"
        )
    log(f"writing to {out}")
    stack = Stack(out)
    t0 = time.monotonic()
    global NOISE
    noise = NOISE = Noise()
    noise.start()
    QUIET["wait"] = args.quiet_wait
    try:
        with running_upstream(stack) as up:
            live = Live(stack, plan, out)
            if "nonstream" in plan.sections:
                noise.section = "nonstream"
                data["nonstream"] = nonstream(live, plan, out)
            if "stream" in plan.sections:
                noise.section = "stream"
                data["stream"] = streamed(live, plan, out)
            if "sustained" in plan.sections:
                noise.section = "sustained"
                log("sustained streams")
                data["sustained"] = sustained(live, plan, out)
            if "bound" in plan.sections:
                noise.section = "bound"
                log("throughput at a p99 bound")
                data["bound"] = bound(live, plan, out, _ceilings(data))
            live.stop()
            if "memory" in plan.sections:
                noise.section = "memory"
                data["memory"] = memory(stack, plan, out)
            if "workers" in plan.sections:
                noise.section = "workers"
                # Both cores for everyone here, the upstream included.
                subprocess.run(
                    ["taskset", "-a", "-p", "-c", ALL_CPUS, str(up.pid)],
                    check=False,
                    capture_output=True,
                )
                data["workers"] = workers(stack, plan, out)
            data["upstream_peak_mb"] = up.peak_mb()
        if "detect" in plan.sections:
            noise.section = "detect"
            data["detect"] = detection(plan)
        if "components" in plan.sections:
            noise.section = "components"
            data["components"] = components()
    finally:
        stack.stop_all()
        noise.stop()
        data["foreign_cpu"] = noise.summary()
        data["steal"] = noise.steal_summary()
        data["seconds"] = round(time.monotonic() - t0, 1)
        (out / "results.json").write_text(json.dumps(data, indent=1))
    render(data, out)
    latest = BENCH / "out" / "latest"
    with contextlib.suppress(OSError):
        if latest.is_symlink() or latest.exists():
            latest.unlink()
        latest.symlink_to(out.resolve())
    if args.publish:
        publish(data, out)
    log(f"done in {data['seconds']} s: {out / 'REPORT.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

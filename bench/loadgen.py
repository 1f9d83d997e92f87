"""An asyncio load generator for chat requests, run as its own process (pinned by the runner).

A minimal HTTP/1.1 client on uvloop protocols: keep-alive connections, Content-Length and chunked
bodies, per request the time to the response head, to the first content byte (the first SSE
`"content":"<non-empty>"`), to the end, and the number of SSE `data:` events. It prints one JSON
object on stdout.

Modes:
  one   N streams one after another on one connection: chunks/s through one stream, TTFB
  load  C concurrent connections for D seconds after a warm-up: total events/s and req/s,
        p50/p99 latency and TTFB (streamed or not)
  hold  open N slow streams, wait until each has content, print a READY line, hold them until
        stdin closes or --hold seconds pass, then close them all
  sustain  hold C paced streams at once for D seconds (each connection asks again as soon as
        its stream ends; the first requests spread over one stream's length): the gaps between
        events each client saw, and the streams that failed
  rate  open-loop: R requests a second for D seconds over a pool of C connections, each
        request's latency taken from the moment it was issued (waiting for a free connection
        included; how late the generator itself woke is reported apart): p50/p99 latency
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from .payloads import chat_request

KEY = os.environ.get("BENCH_KEY", "sk-bench")
CONTENT_RE = re.compile(rb'"content"\s*:\s*"[^"]')
now = time.perf_counter


class Result:
    __slots__ = (
        "body_bytes",
        "events",
        "status",
        "t_content",
        "t_end",
        "t_event",
        "t_head",
        "t_start",
    )

    def __init__(self) -> None:
        self.t_start = now()
        self.t_head = self.t_content = self.t_end = self.t_event = 0.0
        self.events = 0
        self.status = 0
        self.body_bytes = 0


class Counter:
    """Events received inside the measuring window, over all connections (`events`), and
    over the whole run (`total`)."""

    def __init__(self) -> None:
        self.on = False
        self.events = 0
        self.total = 0


class Gaps:
    """The time between one arrival of events and the next on the same stream, while `on`: a
    histogram in whole milliseconds."""

    def __init__(self) -> None:
        self.on = False
        self.hist: dict[int, int] = {}
        self.max = 0.0

    def add(self, gap: float) -> None:
        ms_ = int(gap * 1000)
        self.hist[ms_] = self.hist.get(ms_, 0) + 1
        if gap > self.max:
            self.max = gap

    def count(self) -> int:
        return sum(self.hist.values())

    def over(self, limit_ms: int) -> int:
        return sum(n for ms_, n in self.hist.items() if ms_ >= limit_ms)

    def pct(self, q: float) -> float | None:
        """The q-th percentile gap in ms (to the millisecond below)."""
        total = self.count()
        if not total:
            return None
        seen, rank = 0, q / 100 * total
        for ms_ in sorted(self.hist):
            seen += self.hist[ms_]
            if seen >= rank:
                return float(ms_)
        return float(max(self.hist))


class Client(asyncio.Protocol):
    def __init__(self, counter: Counter | None = None, gaps: Gaps | None = None) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future[Result] | None = None
        self.result: Result | None = None
        self.counter = counter
        self.gaps = gaps
        self.closed = asyncio.get_event_loop().create_future()
        self._reset()

    def _reset(self) -> None:
        self.state = "head"
        self.left = 0  # bytes left in the body (content-length) or the current chunk
        self.chunked = False
        self.tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("connection closed mid-response"))
        if not self.closed.done():
            self.closed.set_result(None)

    def send(self, raw: bytes) -> asyncio.Future[Result]:
        assert self.transport is not None, "connection closed"
        self.result = Result()
        self.waiter = asyncio.get_event_loop().create_future()
        self._reset()
        self.transport.write(raw)
        return self.waiter

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._parse()

    def _body(self, piece: bytes) -> None:
        result = self.result
        assert result is not None
        result.body_bytes += len(piece)
        scan = self.tail + piece
        found = scan.count(b"data: ") - self.tail.count(b"data: ")
        result.events += found
        if self.counter is not None:
            self.counter.total += found
            if self.counter.on:
                self.counter.events += found
        if found and self.gaps is not None:
            t = now()
            if result.t_event and self.gaps.on:
                self.gaps.add(t - result.t_event)
            result.t_event = t
        if not result.t_content and CONTENT_RE.search(scan):
            result.t_content = now()
        self.tail = scan[-64:]

    def _done(self) -> None:
        result = self.result
        assert result is not None and self.waiter is not None
        result.t_end = now()
        if not self.waiter.done():
            self.waiter.set_result(result)
        self.state = "idle"

    def _parse(self) -> None:
        buf = self.buf
        while buf:
            if self.state == "head":
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = bytes(buf[:end]).lower()
                del buf[: end + 4]
                assert self.result is not None
                self.result.t_head = now()
                self.result.status = int(head[9:12])
                self.chunked = b"\r\ntransfer-encoding: chunked" in head
                at = head.find(b"\r\ncontent-length:")
                if self.chunked:
                    self.state, self.left = "size", 0
                elif at >= 0:
                    stop = head.find(b"\r\n", at + 2)
                    self.left = int(head[at + 17 : stop if stop >= 0 else len(head)])
                    self.state = "fixed"
                    if self.left == 0:
                        self._done()
                else:
                    self.state = "until-close"
            elif self.state == "fixed":
                take = bytes(buf[: self.left])
                del buf[: len(take)]
                self.left -= len(take)
                self._body(take)
                if self.left == 0:
                    self._done()
            elif self.state == "size":
                end = buf.find(b"\r\n")
                if end < 0:
                    return
                size = int(bytes(buf[:end]).split(b";")[0], 16)
                del buf[: end + 2]
                if size == 0:
                    self.state = "trailer"
                else:
                    self.state, self.left = "chunk", size
            elif self.state == "chunk":
                take = bytes(buf[: self.left])
                del buf[: len(take)]
                self.left -= len(take)
                self._body(take)
                if self.left == 0:
                    self.state = "chunk-end"
            elif self.state == "chunk-end":
                if len(buf) < 2:
                    return
                del buf[:2]
                self.state = "size"
            elif self.state == "trailer":
                end = buf.find(b"\r\n")
                if end < 0:
                    return
                del buf[: end + 2]
                if end == 0:
                    self._done()
            elif self.state == "until-close":
                take = bytes(buf)
                buf.clear()
                self._body(take)
            else:  # idle: unexpected bytes
                buf.clear()


def request_bytes(url: str, body: bytes, keep_alive: bool = True) -> tuple[str, int, bytes]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    path = parts.path.rstrip("/") + "/chat/completions"
    head = (
        f"POST {path} HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
        f"authorization: Bearer {KEY}\r\ncontent-length: {len(body)}\r\n"
        + ("" if keep_alive else "connection: close\r\n")
        + "\r\n"
    )
    return host, port, head.encode() + body


async def connect(
    host: str, port: int, counter: Counter | None = None, gaps: Gaps | None = None
) -> Client:
    loop = asyncio.get_running_loop()
    _, proto = await loop.create_connection(lambda: Client(counter, gaps), host, port)
    return proto


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


async def mode_one(args: argparse.Namespace) -> dict[str, Any]:
    """Streams one after another: chunks/s through one stream, and time to first content."""
    host, port, raw = request_bytes(args.url, chat_request(args.model, stream=True))
    client = await connect(host, port)
    for _ in range(args.warmup_n):
        await client.send(raw)
    results = []
    deadline = now() + args.max_seconds
    for _ in range(args.n):
        results.append(await client.send(raw))
        if now() > deadline:
            break
    if client.transport:
        client.transport.close()
    bad = sum(1 for r in results if r.status != 200)
    rates = [r.events / (r.t_end - r.t_start) for r in results]
    ttfb = [r.t_content - r.t_start for r in results if r.t_content]
    total = [r.t_end - r.t_start for r in results]
    return {
        "mode": "one",
        "streams": len(results),
        "errors": bad,
        "events_per_stream": results[0].events if results else 0,
        "bytes_per_stream": results[0].body_bytes if results else 0,
        "chunks_per_s_p50": round(pct(rates, 50), 1),
        "chunks_per_s_best": round(max(rates), 1) if rates else 0,
        "stream_ms_p50": ms(pct(total, 50)),
        "ttfb_ms_p50": ms(pct(ttfb, 50)),
        "ttfb_ms_p90": ms(pct(ttfb, 90)),
        "ttfb_ms_min": ms(min(ttfb)) if ttfb else None,
    }


async def mode_load(args: argparse.Namespace) -> dict[str, Any]:
    host, port, raw = request_bytes(args.url, chat_request(args.model, stream=args.stream))
    counter = Counter()
    clients = [await connect(host, port, counter) for _ in range(args.concurrency)]
    window: dict[str, float] = {}
    latencies: list[float] = []
    ttfbs: list[float] = []
    errors = [0]
    completed = [0]

    async def worker(client: Client) -> None:
        while "end" not in window:
            try:
                result = await client.send(raw)
            except ConnectionError:
                errors[0] += 1
                return
            if "start" not in window or "end" in window:
                continue
            completed[0] += 1  # finished inside the window
            if result.status != 200:
                errors[0] += 1
            if result.t_start >= window["start"]:  # wholly inside: its timings count
                latencies.append(result.t_end - result.t_start)
                if result.t_content:
                    ttfbs.append(result.t_content - result.t_start)

    tasks = [asyncio.ensure_future(worker(c)) for c in clients]
    await asyncio.sleep(args.warmup)
    window["start"] = now()
    counter.on = True
    await asyncio.sleep(args.duration)
    counter.on = False
    window["end"] = now()
    elapsed = window["end"] - window["start"]
    _done, pending = await asyncio.wait(tasks, timeout=30)
    for task in pending:
        task.cancel()
    for client in clients:
        if client.transport:
            client.transport.close()
    return {
        "mode": "load",
        "stream": args.stream,
        "concurrency": args.concurrency,
        "seconds": round(elapsed, 3),
        "requests": completed[0],
        "errors": errors[0],
        "req_per_s": round(completed[0] / elapsed, 1),
        "events_per_s": round(counter.events / elapsed, 1),
        "latency_ms_p50": ms(pct(latencies, 50)),
        "latency_ms_p99": ms(pct(latencies, 99)),
        "ttfb_ms_p50": ms(pct(ttfbs, 50)) if ttfbs else None,
        "ttfb_ms_p99": ms(pct(ttfbs, 99)) if ttfbs else None,
    }


async def mode_hold(args: argparse.Namespace) -> dict[str, Any]:
    """Hold N slow streams open at once; report when every one of them has content flowing."""
    host, port, raw = request_bytes(args.url, chat_request(args.model, stream=True))
    gate = asyncio.Semaphore(200)
    clients: list[Client] = []
    started: list[asyncio.Future[Result]] = []

    async def open_one() -> None:
        async with gate:
            client = await connect(host, port)
            clients.append(client)
            started.append(client.send(raw))
            while client.result is not None and not client.result.t_content:
                if client.transport is None:
                    return
                await asyncio.sleep(0.05)

    t0 = now()
    opened = await asyncio.gather(*(open_one() for _ in range(args.n)), return_exceptions=True)
    failed = [o for o in opened if isinstance(o, BaseException)]
    flowing = sum(1 for c in clients if c.result is not None and c.result.t_content)
    ready = {
        "mode": "hold",
        "requested": args.n,
        "open": len(clients),
        "flowing": flowing,
        "open_errors": len(failed),
        "seconds_to_open": round(now() - t0, 2),
    }
    print("READY " + json.dumps(ready), flush=True)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(reader.read(), timeout=args.hold)
    still = sum(1 for c in clients if c.transport is not None)
    events = sum(c.result.events for c in clients if c.result is not None)
    for fut in started:
        if not fut.done():
            fut.cancel()
    for client in clients:
        if client.transport:
            client.transport.close()
    await asyncio.sleep(0.2)
    return ready | {"still_open_at_end": still, "events_received": events}


def _expected_events(model: str) -> int:
    """Events in a `sustain:<ms>:<n>` stream: the role chunk, n deltas, finish, usage, [DONE]."""
    _, _, n = model.partition(":")[2].partition(":")
    return int(n or 64) + 4


async def mode_sustain(args: argparse.Namespace) -> dict[str, Any]:
    """C paced streams held at once: does every client get its deltas without a stall?"""
    host, port, raw = request_bytes(args.url, chat_request(args.model, stream=True))
    want = _expected_events(args.model)
    delta_s = float(args.model.split(":")[1]) / 1000
    stream_s = want * delta_s
    counter, gaps = Counter(), Gaps()
    gate = asyncio.Semaphore(200)

    async def open_one() -> Client:
        async with gate:
            return await connect(host, port, counter, gaps)

    t0 = now()
    opened = await asyncio.gather(
        *(open_one() for _ in range(args.concurrency)), return_exceptions=True
    )
    clients = [c for c in opened if isinstance(c, Client)]
    connect_errors = len(opened) - len(clients)
    seconds_to_connect = now() - t0
    window: dict[str, float] = {}
    done, failed, lost = [0], [0], [0]

    async def worker(i: int, client: Client) -> None:
        await asyncio.sleep(stream_s * i / len(clients))  # the starts spread over one stream
        while "end" not in window:
            try:
                result = await client.send(raw)
            except (ConnectionError, AssertionError):
                lost[0] += 1
                return
            if "start" in window:
                done[0] += 1
                if result.status != 200 or result.events < want:
                    failed[0] += 1

    tasks = [asyncio.ensure_future(worker(i, c)) for i, c in enumerate(clients)]
    await asyncio.sleep(stream_s + args.warmup)  # every stream running before the window
    window["start"] = now()
    counter.on = gaps.on = True
    await asyncio.sleep(args.duration)
    counter.on = gaps.on = False
    window["end"] = now()
    elapsed = window["end"] - window["start"]
    _, pending = await asyncio.wait(tasks, timeout=stream_s + 10)
    for task in pending:
        task.cancel()
    for client in clients:
        if client.transport:
            client.transport.close()
    errors = failed[0] + lost[0] + connect_errors
    attempts = done[0] + lost[0] + connect_errors
    error_pct = 100 * errors / attempts if attempts else 100.0
    max_gap = round(gaps.max * 1000, 1)
    return {
        "mode": "sustain",
        "concurrency": args.concurrency,
        "model": args.model,
        "seconds": round(elapsed, 3),
        "seconds_to_connect": round(seconds_to_connect, 2),
        "streams": done[0],
        "errors": errors,
        "error_pct": round(error_pct, 2),
        "events_per_s": round(counter.events / elapsed, 1),
        "events_total": counter.total,  # the whole run's, ramp and tail included
        "gaps": gaps.count(),
        "gap_ms_p50": gaps.pct(50),
        "gap_ms_p99": gaps.pct(99),
        "gap_ms_p999": gaps.pct(99.9),
        "gap_ms_max": max_gap,
        "gaps_over_100ms": gaps.over(100),
        "held": errors * 100 < attempts and max_gap <= 100 and gaps.count() > 0,
    }


async def mode_rate(args: argparse.Namespace) -> dict[str, Any]:
    """Open-loop load at a fixed rate; latency counted from when each request was issued, so
    that waiting for a free connection counts but the generator's own timer lag does not."""
    host, port, raw = request_bytes(args.url, chat_request(args.model, stream=args.stream))
    free: asyncio.Queue[Client] = asyncio.Queue()
    for _ in range(args.concurrency):
        free.put_nowait(await connect(host, port))
    latencies: list[float] = []
    ok, lag = [0], [0.0]
    loop = asyncio.get_running_loop()
    inflight: set[asyncio.Task[None]] = set()

    async def one(counted: bool) -> None:
        issued = now()
        client = await free.get()
        try:
            result = await client.send(raw)
        except (ConnectionError, AssertionError):
            return
        free.put_nowait(client)
        if counted:
            latencies.append(result.t_end - issued)
            ok[0] += result.status == 200

    interval = 1 / args.rate
    t0 = now() + 0.05
    measure_from, stop = t0 + args.warmup, t0 + args.warmup + args.duration
    i = 0
    while True:
        due = t0 + i * interval
        if due >= stop:
            break
        wait = due - now()
        if wait > 0.0005:
            await asyncio.sleep(wait)
        late = now() - due
        if due >= measure_from and late > lag[0]:
            lag[0] = late
        task = loop.create_task(one(due >= measure_from))
        inflight.add(task)
        task.add_done_callback(inflight.discard)
        i += 1
    sent = sum(1 for k in range(i) if t0 + k * interval >= measure_from)
    if inflight:
        await asyncio.wait(inflight, timeout=30)
    while not free.empty():
        client = free.get_nowait()
        if client.transport:
            client.transport.close()
    return {
        "mode": "rate",
        "rate": args.rate,
        "concurrency": args.concurrency,
        "seconds": args.duration,
        "sent": sent,
        "completed": len(latencies),
        "errors": sent - ok[0],  # failed, not 200, or not finished 30 s after the last
        "req_per_s": round(len(latencies) / args.duration, 1),
        "latency_ms_p50": ms(pct(latencies, 50)),
        "latency_ms_p99": ms(pct(latencies, 99)),
        "latency_ms_max": ms(max(latencies)) if latencies else None,
        "scheduler_lag_ms_max": ms(lag[0]),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="chat load generator for the benchmarks")
    parser.add_argument("mode", choices=["one", "load", "hold", "sustain", "rate"])
    parser.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:9201/v1")
    parser.add_argument("--model", default="bench")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("-n", type=int, default=50)
    parser.add_argument("--warmup-n", type=int, default=5)
    parser.add_argument("--max-seconds", type=float, default=60)
    parser.add_argument("-c", "--concurrency", type=int, default=10)
    parser.add_argument("-d", "--duration", type=float, default=10)
    parser.add_argument("--warmup", type=float, default=2)
    parser.add_argument("--hold", type=float, default=60)
    parser.add_argument("--rate", type=float, default=1000, help="requests/s, for `rate`")
    args = parser.parse_args(argv)
    modes = {"one": mode_one, "load": mode_load, "hold": mode_hold}
    modes |= {"sustain": mode_sustain, "rate": mode_rate}
    run = modes[args.mode]
    try:
        import uvloop

        out = uvloop.run(run(args))
    except ImportError:  # pragma: no cover
        out = asyncio.run(run(args))
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()

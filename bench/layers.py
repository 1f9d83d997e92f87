"""The non-streamed request built up layer by layer, on a canned upstream: what each layer costs.

Each row runs in a process of its own on CPU 0 (`taskset`), drives its ASGI app in-process as
`bench.inproc` does (50 requests at a time, the bench's request and reply), with the upstream
canned: no sockets, so only the proxy's own Python is timed. A row's figure is the best of 5
batches of CPU time a request; rows alternate over `--runs` runs.

* `floor`: the floor's app (`bench/floor.py`), aiohttp's `ClientSession.request` canned;
* `steps`: only the steps an inspecting proxy needs, as one raw ASGI function: the body, both
  decodes, `declared_tools`, the upstream headers, `inspect_reply` and `reply_anomalies`, the
  response headers and ids, and the outcome recorded (log line and metrics);
* `steps-norecord`: the same without recording;
* `steps-timers`: `steps` with `read_body`'s and `until_disconnect`'s timers;
* `steps-decision`: `steps` with the real `Decision.reply` for the upstream step;
* `spillguard`: the whole application, `Upstream.open` canned.

  .venv/bin/python -m bench.layers --runs 3
  .venv/bin/python -m bench.layers --request agent --rows floor spillguard
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import secrets
import subprocess
import sys
import time
from typing import Any

from multidict import CIMultiDict, CIMultiDictProxy

from .inproc import lifespan_start, one
from .payloads import agent_request, chat_request
from .upstream import completion_body

ROWS = ("floor", "steps-norecord", "steps", "steps-timers", "steps-decision", "spillguard")
UPSTREAM = "http://127.0.0.1:9/v1"  # never dialled: every row's upstream is canned
REPLY = completion_body()
REPLY_HEADERS = CIMultiDictProxy(
    CIMultiDict(
        {
            "Content-Type": "application/json",
            "Content-Length": str(len(REPLY)),
            "x-request-id": "req-upstream-1",
            "Date": "Wed, 02 Dec 2026 09:00:00 GMT",
        }
    )
)


class _Content:
    """aiohttp's `StreamReader`, as much of it as `reply.Reply` reads of a whole body."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def readany(self) -> bytes:
        data, self.data = self.data, b""
        return data


class _Response:
    """An `aiohttp.ClientResponse` with the bench's reply, already in."""

    status = 200
    headers = REPLY_HEADERS

    def __init__(self) -> None:
        self.content = _Content(REPLY)

    async def read(self) -> bytes:
        return REPLY

    def close(self) -> None:
        pass


def _floor() -> Any:
    import aiohttp

    from .floor import create_app

    async def request(self: Any, method: str, url: str, **kw: Any) -> _Response:
        await asyncio.sleep(0)  # the one suspension a real exchange has at least
        return _Response()

    aiohttp.ClientSession.request = request  # type: ignore[assignment,method-assign]
    return create_app(UPSTREAM)


def _canned_open() -> None:
    from spillguard import upstream
    from spillguard.reply import Deadline, OnWait, Reply, no_wait

    async def open_(
        self: Any, method: str, url: str, headers: Any, body: Any, *, decode: bool = False,
        on_wait: OnWait = no_wait,
    ) -> Reply:  # fmt: skip
        loop = asyncio.get_running_loop()
        deadline = Deadline(loop, loop.time() + self.settings.total_timeout)
        await asyncio.sleep(0)
        return Reply(_Response(), deadline, decode, on_wait)  # type: ignore[arg-type]

    upstream.Upstream.open = open_  # type: ignore[method-assign]


def _spillguard() -> Any:
    from spillguard.asgi import create_app
    from spillguard.runner import tune_gc
    from spillguard.settings import Settings

    _canned_open()
    tune_gc()
    return create_app(Settings(upstream=UPSTREAM, mode="retry"))


def _steps(record: bool, timers: bool, decision: bool) -> Any:
    from spillguard import chat, jsonread
    from spillguard.context import REQUEST_DROP, Context, request_end_to_end
    from spillguard.detect import declared_tools
    from spillguard.downstream import read_body, until_disconnect
    from spillguard.logs import setup_logging
    from spillguard.observe import Observer
    from spillguard.outcome import Action, Outcome
    from spillguard.proxy import REFRAMED, Decision, Exchange
    from spillguard.settings import Settings
    from spillguard.upstream import Upstream, end_to_end

    if decision:
        _canned_open()
    settings = Settings(upstream=UPSTREAM, mode="retry")
    setup_logging(settings)
    observer = Observer(settings)
    upstream = Upstream(settings)
    chosen = Decision(settings, upstream, chat.WIRE)
    policy = Context(settings, upstream, observer).policy

    async def exchange() -> tuple[int, Any, bytes]:
        await asyncio.sleep(0)
        return 200, REPLY_HEADERS, REPLY

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await receive()
            await send({"type": "lifespan.startup.complete"})
            await asyncio.Event().wait()  # until cancelled
            return
        if timers:
            body = await read_body(receive, "", settings.max_body, settings.read_timeout)
        else:
            body = (await receive())["body"]
        outcome = Outcome(f"sg-{secrets.token_hex(16)}", "chat", "retry")
        obj = jsonread.loads(body)
        tools = declared_tools(obj)
        outcome.describe(obj.get("model"), obj.get("stream") is True)
        headers = request_end_to_end(scope["headers"], REQUEST_DROP)
        headers["x-request-id"] = outcome.request_id
        if decision:
            ex = Exchange("POST", chosen.url(""), headers, body, obj, tools, outcome, policy)
            status, out, data = await chosen.reply(ex)
        else:
            outcome.calling()
            work = exchange()
            status, got, data = await (until_disconnect(receive, work) if timers else work)
            outcome.upstream_answered(status)
            parsed = jsonread.loads(data)
            chat.inspect_reply(parsed, tools, policy.hold_limit)
            outcome.saw(chat.reply_anomalies(parsed, tools), 1)
            outcome.act(Action.PASSED)
            out = end_to_end(got, REFRAMED)
        outcome.answered(status)
        out["x-spillguard-action"] = str(outcome.action)
        out.setdefault("x-request-id", outcome.request_id)
        out["x-spillguard-request-id"] = outcome.request_id
        raw = [(b"content-length", str(len(data)).encode())]
        raw += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in out.items()]
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": data})
        if record:
            observer.record(outcome)

    return app


def build(row: str) -> Any:
    if row == "floor":
        return _floor()
    if row == "spillguard":
        return _spillguard()
    return _steps(row != "steps-norecord", row == "steps-timers", row == "steps-decision")


async def measure(row: str, n: int, conc: int = 50, request: str = "bench") -> float:
    """The best of 5 batches of `n` requests: CPU µs a request."""
    app = build(row)
    lifespan = await lifespan_start(app)
    for handler in logging.getLogger("spillguard").handlers:  # the line is still written
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(open(os.devnull, "w"))  # noqa: SIM115 - for the process's life
    body = agent_request() if request == "agent" else chat_request("bench", stream=False)
    statuses: dict[int, int] = {}
    events = [0]

    async def worker(count: int) -> None:
        for _ in range(count):
            await one(app, body, statuses, events)

    await asyncio.gather(*(worker(20) for _ in range(conc)))  # warm
    best = float("inf")
    for _ in range(5):
        cpu = time.process_time()
        await asyncio.gather(*(worker(n // conc) for _ in range(conc)))
        best = min(best, (time.process_time() - cpu) / (n // conc * conc) * 1e6)
    lifespan.cancel()
    if set(statuses) != {200}:
        raise SystemExit(f"{row}: statuses {statuses}")
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--row", choices=ROWS, help="measure one row here, print its figure")
    parser.add_argument("--n", type=int, default=10000, help="requests a batch")
    parser.add_argument("--runs", type=int, default=3, help="alternating runs of every row")
    parser.add_argument(
        "--request",
        choices=["bench", "agent"],
        default="bench",
        help="the bench's short request, or a long agent turn (`payloads.agent_request`)",
    )
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=ROWS, help="rows to run")
    args = parser.parse_args(argv)
    if args.row:
        import uvloop

        cpu_us = uvloop.run(measure(args.row, args.n, request=args.request))
        print(json.dumps({"row": args.row, "cpu_us": round(cpu_us, 1)}))
        return
    figures: dict[str, list[float]] = {row: [] for row in args.rows}
    for _ in range(args.runs):
        for row in args.rows:
            argv = [sys.executable, "-m", "bench.layers", "--row", row, "--n", str(args.n)]
            argv += ["--request", args.request]
            done = subprocess.run(
                ["taskset", "-c", "0", *argv], capture_output=True, text=True, check=True
            )
            figures[row].append(json.loads(done.stdout.splitlines()[-1])["cpu_us"])
    print("| row | CPU µs a request, each run |\n|---|---|")
    for row, each in figures.items():
        print(f"| {row} | {', '.join(f'{x:.1f}' for x in each)} |")


if __name__ == "__main__":
    main()

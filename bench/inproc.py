"""CPU per request of the ASGI application alone: no uvicorn, no load generator.

Drives `App.__call__` (or the floor's Starlette app with `--floor`) in-process with the bench's
request, `--conc` requests at a time, while aiohttp talks to a real `bench.upstream` on loopback
(start it yourself, on the other CPU). Prints the process's CPU time and wall time a request, as
JSON. With uvicorn and wrk out of the picture the figure moves little with other load, and
py-spy on this process shows spillguard's own share (`py-spy record --gil -p PID`).

  taskset -c 1 python -m bench.upstream --port 9150 &
  taskset -c 0 python -m bench.inproc --n 20000           # spillguard, mode retry
  taskset -c 0 python -m bench.inproc --n 20000 --floor   # the floor
  taskset -c 0 python -m bench.inproc --stream sustain:20:64 --conc 200 --n 2000

With `--stream MODEL` the requests are streams of the bench upstream's MODEL (`sustain:20:64`:
64 deltas 20 ms apart, each in a read of its own, as in the sustained section) and the CPU time
is also given per SSE event the client received.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from .components import post_scope
from .payloads import chat_request


def build(floor: bool, upstream: str, mode: str) -> Any:
    if floor:
        from .floor import create_app

        return create_app(upstream)
    from spillguard.asgi import create_app as create_spillguard
    from spillguard.runner import tune_gc
    from spillguard.settings import Settings

    tune_gc()  # as the serving process does

    return create_spillguard(Settings(upstream=upstream, mode=mode))


async def lifespan_start(app: Any) -> asyncio.Task[None]:
    """Start the app's lifespan; the task returned must be kept (a task nothing refers to may
    be collected, which would end the lifespan and close the app's client session)."""
    incoming: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outgoing: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await incoming.put({"type": "lifespan.startup"})

    async def send(message: dict[str, Any]) -> None:
        await outgoing.put(message)

    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    task = asyncio.get_running_loop().create_task(app(scope, incoming.get, send))
    started = await outgoing.get()
    if started["type"] != "lifespan.startup.complete":
        raise SystemExit(f"start-up failed: {started}")
    return task


async def one(app: Any, body: bytes, statuses: dict[int, int], events: list[int]) -> None:
    sent = False
    forever = asyncio.Event()
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await forever.wait()  # as a server does: the next message is the client leaving
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        else:
            events[0] += message.get("body", b"").count(b"data:")

    scope = {**post_scope("/v1/chat/completions", body), "state": {}}
    await app(scope, receive, send)
    statuses[status] = statuses.get(status, 0) + 1


async def run(args: argparse.Namespace) -> dict[str, Any]:
    app = build(args.floor, args.upstream, args.mode)
    lifespan = await lifespan_start(app)
    body = chat_request(args.stream or "bench", stream=bool(args.stream))
    statuses: dict[int, int] = {}
    events = [0]

    async def worker(count: int) -> None:
        for _ in range(count):
            await one(app, body, statuses, events)

    await asyncio.gather(*(worker(4) for _ in range(args.conc)))  # warm
    per = max(args.n // args.conc, 1)
    cpu, wall, events[0] = time.process_time(), time.perf_counter(), 0
    await asyncio.gather(*(worker(per) for _ in range(args.conc)))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    n = per * args.conc
    result = {
        "cpu_us": round(cpu / n * 1e6, 1),
        "wall_us": round(wall / n * 1e6, 1),
        "statuses": statuses,
    }
    lifespan.cancel()
    if args.stream:
        result |= {"events": events[0], "cpu_us_per_event": round(cpu / events[0] * 1e6, 2)}
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--floor", action="store_true", help="the floor's app instead")
    parser.add_argument("--n", type=int, default=20000, help="requests measured")
    parser.add_argument("--conc", type=int, default=50, help="requests at a time")
    parser.add_argument("--upstream", default="http://127.0.0.1:9150/v1")
    parser.add_argument("--mode", default="retry")
    parser.add_argument("--stream", metavar="MODEL", help="stream requests of this bench model")
    parser.add_argument(
        "--watch-after",
        type=float,
        metavar="S",
        help="spillguard watches a client after S seconds instead (bench.instructions: under "
        "valgrind a reply takes 50 times as long, and no watcher should start that would not "
        "start at full speed)",
    )
    args = parser.parse_args(argv)
    if args.watch_after is not None:
        from spillguard import downstream

        downstream.WATCH_AFTER = args.watch_after
    import uvloop

    print(json.dumps(uvloop.run(run(args))))


if __name__ == "__main__":
    main()

"""Running the application under uvicorn: in the foreground for the CLI, in the background for
the demo and the tests. The application itself is built in `asgi.py`."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Any

import uvicorn
from pydantic import SecretStr

from .asgi import App, app_from_env, create_app
from .settings import Settings

# The cyclic collector's thresholds in a serving process (CPython's are 700, 10, 10; the
# lifespan freezes what start-up made, asgi.py). Under 250 paced streams the defaults ran about
# 190 collections in 6 s, 5% of the CPU, a full one of 30 to 50 ms among them; these ran 6.
GC_THRESHOLD = (10_000, 20, 50)


def uvicorn_config(settings: Settings, **kw: Any) -> dict[str, Any]:
    return {
        "host": settings.host,
        "port": settings.port,
        "loop": "uvloop",
        "http": "httptools",
        "access_log": False,
        "log_level": "warning",
        "timeout_graceful_shutdown": settings.graceful_timeout,
        "server_header": False,
        "date_header": False,
        # Nothing here reads the client's address or scheme, which is all uvicorn's
        # X-Forwarded-For handling would rewrite (about 2 µs a request, for each request).
        "proxy_headers": False,
        **kw,
    }


def run(settings: Settings) -> None:
    """Serve in the foreground until SIGINT or SIGTERM (then drain within the grace period)."""
    if settings.workers > 1:
        # Each worker builds its own app from the environment: hand the settings over there.
        os.environ.update(settings_env(settings))
        uvicorn.run(
            "spillguard.runner:worker_app",
            factory=True,
            workers=settings.workers,
            **uvicorn_config(settings),
        )
    else:
        app = create_app(settings)
        tune_gc()
        server = uvicorn.Server(uvicorn.Config(app, **uvicorn_config(settings)))
        server.capture_signals = lambda: _drain_on_signals(server)  # type: ignore[method-assign]
        server.run()


def worker_app() -> App:
    """The factory uvicorn calls in each worker process."""
    app = app_from_env()
    tune_gc()
    return app


def tune_gc() -> None:
    """Collections less often in a serving process (`GC_THRESHOLD`); cycles are still
    collected, by the young generations first as before."""
    gc.set_threshold(*GC_THRESHOLD)


@contextlib.contextmanager
def _drain_on_signals(server: uvicorn.Server) -> Iterator[None]:
    """SIGINT and SIGTERM start uvicorn's graceful shutdown, as usual; unlike uvicorn's own
    handling, the signal is not raised again afterwards, so a clean drain exits with status 0."""
    previous = {
        sig: signal.signal(sig, server.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def settings_env(settings: Settings) -> dict[str, str]:
    """The settings as SPILLGUARD_* variables, secrets in clear (for child processes only).
    The config file is not read again: every value it gave is here. Named upstreams keep their
    `api_key_env`, which the children inherit."""
    env: dict[str, str] = {"SPILLGUARD_CONFIG": ""}
    for name in Settings.model_fields:
        value = getattr(settings, name)
        if name in ("proxy_key_file", "config") or value is None:
            continue  # the key file's keys are already in proxy_keys
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        elif name in ("proxy_keys", "loosening_keys"):
            value = ",".join(k.get_secret_value() for k in value)
        elif name == "upstreams":
            value = json.dumps({k: e.model_dump(exclude_none=True) for k, e in value.items()})
        elif name == "rules":
            value = json.dumps([r.model_dump(mode="json", exclude_none=True) for r in value])
        elif isinstance(value, Enum):
            value = value.value
        env[f"SPILLGUARD_{name.upper()}"] = str(value)
    return env


@dataclass
class Running:
    server: uvicorn.Server
    task: asyncio.Task[None]
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def stop(self) -> None:
        self.server.should_exit = True
        await self.task


async def start_background(settings: Settings) -> Running:
    """Start spillguard on 127.0.0.1 (port 0 picks a free one) inside the running loop."""
    config = uvicorn.Config(create_app(settings), **uvicorn_config(settings, port=settings.port))
    server = uvicorn.Server(config)
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("spillguard did not start")
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return Running(server, task, port)

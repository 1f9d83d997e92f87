"""GET /metrics through the real server: each metric moves as each kind of request says it must."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from spillguard.metrics import MULTIPROC_ENV, Metrics, ModelLabels, multiprocess_dir
from spillguard.outcome import Action, Outcome
from spillguard.runner import Running, start_background
from spillguard.scripted import Raw, Turn, chunks, runner_port
from spillguard.settings import Settings
from tests.conftest import chat_body
from tests.samples import DSML, HERMES, HONEST, REAL

NAMES = {
    "spillguard_requests",
    "spillguard_findings",
    "spillguard_retries",
    "spillguard_upstream_errors",
    "spillguard_upstream_latency_seconds",
    "spillguard_added_latency_seconds",
    "spillguard_streams_open",
}

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


# The metrics with an `upstream` label: `value` reads the default upstream's unless told.
BY_UPSTREAM = (
    "spillguard_requests_total",
    "spillguard_findings_total",
    "spillguard_retries_total",
    "spillguard_upstream_errors_total",
    "spillguard_upstream_latency_seconds",
)


def value(samples: Samples, name: str, **labels: str) -> float:
    if name.startswith(BY_UPSTREAM):
        labels.setdefault("upstream", "default")
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)


async def scrape(url: str) -> Samples:
    async with httpx.AsyncClient(base_url=url.removesuffix("/v1"), timeout=10) as http:
        r = await http.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    return parse(r.text)


async def eventually(url: str, check: Callable[[Samples], bool]) -> Samples:
    """Streams record their outcome just after the last byte: poll a little for it."""
    for _ in range(300):
        samples = await scrape(url)
        if check(samples):
            return samples
        await asyncio.sleep(0.01)
    return samples


def requests(samples: Samples, outcome: str, route: str = "chat", mode: str = "retry") -> float:
    return value(samples, "spillguard_requests_total", route=route, mode=mode, outcome=outcome)


def latency_count(samples: Samples, which: str, route: str = "chat") -> float:
    return value(samples, f"spillguard_{which}_latency_seconds_count", route=route)


async def post(h: Any, stream: bool = False, **body: Any) -> httpx.Response:
    async with h.http() as http:
        return await http.post("/chat/completions", json=chat_body(stream=stream, **body))


async def test_metrics_parse_with_every_family_and_help(harness: Any) -> None:
    h = await harness(HONEST, incidents_db="")
    await post(h)
    async with httpx.AsyncClient(base_url=h.url.removesuffix("/v1")) as http:
        r = await http.get("/metrics")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    assert set(families) >= NAMES
    assert families["spillguard_requests"].type == "counter"
    assert families["spillguard_upstream_latency_seconds"].type == "histogram"
    assert families["spillguard_added_latency_seconds"].type == "histogram"
    assert families["spillguard_streams_open"].type == "gauge"
    assert "waiting on" in families["spillguard_upstream_latency_seconds"].documentation
    assert "minus" in families["spillguard_added_latency_seconds"].documentation


@pytest.mark.parametrize("stream", [False, True])
async def test_passed_request(harness: Any, stream: bool) -> None:
    h = await harness(HONEST, incidents_db="")
    assert (await post(h, stream)).headers["x-spillguard-action"] == "passed"
    s = await eventually(h.url, lambda s: requests(s, "passed") == 1)
    assert requests(s, "passed") == 1
    assert total(s, "spillguard_requests_total") == 1
    assert total(s, "spillguard_findings_total") == 0
    assert total(s, "spillguard_retries_total") == 0
    assert total(s, "spillguard_upstream_errors_total") == 0
    assert latency_count(s, "upstream") == 1
    assert latency_count(s, "added") == 1
    assert value(s, "spillguard_upstream_latency_seconds_sum", route="chat") > 0
    assert value(s, "spillguard_streams_open") == 0


@pytest.mark.parametrize("stream", [False, True])
async def test_retried_request(harness: Any, stream: bool) -> None:
    h = await harness(Turn(content=HERMES), REAL, incidents_db="")
    assert (await post(h, stream)).status_code == 200
    s = await eventually(h.url, lambda s: requests(s, "retried") == 1)
    assert requests(s, "retried") == 1
    assert total(s, "spillguard_requests_total") == 1
    assert value(s, "spillguard_findings_total", family="hermes", model="m") == 1
    assert total(s, "spillguard_findings_total") == 1
    assert value(s, "spillguard_retries_total", route="chat") == 1
    assert latency_count(s, "upstream") == 1  # one observation per request, both exchanges
    assert h.calls == 2


async def test_failed_after_retry_counts_both_findings(harness: Any) -> None:
    h = await harness(Turn(content=DSML), Turn(content=HERMES), incidents_db="")
    assert (await post(h)).status_code == 502
    s = await scrape(h.url)
    assert requests(s, "failed") == 1
    assert value(s, "spillguard_findings_total", family="dsml", model="m") == 1
    assert value(s, "spillguard_findings_total", family="hermes", model="m") == 1
    assert value(s, "spillguard_retries_total", route="chat") == 1
    assert total(s, "spillguard_upstream_errors_total") == 0  # a leak is not an upstream error


@pytest.mark.parametrize("stream", [False, True])
async def test_fail_mode(harness: Any, stream: bool) -> None:
    h = await harness(Turn(content=HERMES), mode="fail", incidents_db="")
    assert (await post(h, stream)).status_code == 502
    s = await eventually(h.url, lambda s: requests(s, "failed", mode="fail") == 1)
    assert requests(s, "failed", mode="fail") == 1
    assert value(s, "spillguard_findings_total", family="hermes", model="m") == 1
    assert total(s, "spillguard_retries_total") == 0


@pytest.mark.parametrize("stream", [False, True])
async def test_observe_mode(harness: Any, stream: bool) -> None:
    h = await harness(Turn(content=HERMES), mode="observe", incidents_db="")
    assert (await post(h, stream)).status_code == 200
    s = await eventually(h.url, lambda s: requests(s, "observed", mode="observe") == 1)
    assert requests(s, "observed", mode="observe") == 1
    assert value(s, "spillguard_findings_total", family="hermes", model="m") == 1
    assert total(s, "spillguard_retries_total") == 0


async def test_forwarded_requests(harness: Any) -> None:
    models = b'{"object": "list", "data": []}'
    h = await harness(HONEST, incidents_db="")
    body = chat_body()
    del body["tools"]
    async with h.http() as http:
        assert (await http.post("/chat/completions", json=body)).status_code == 200
        h.script(Raw(200, {"content-type": "application/json"}, [models]))
        assert (await http.get("/models")).content == models
    s = await eventually(h.url, lambda s: total(s, "spillguard_requests_total") == 2)
    assert requests(s, "forwarded") == 1
    assert requests(s, "forwarded", route="other") == 1
    assert latency_count(s, "upstream", route="other") == 1
    assert total(s, "spillguard_findings_total") == 0


async def test_forwarded_stream_is_counted_open_until_it_ends(harness: Any) -> None:
    h = await harness(Turn(content="word " * 40, delta_size=2), incidents_db="")
    body = chat_body(stream=True)
    del body["tools"]
    async with h.http() as http:
        r = await http.post("/chat/completions", json=body)
    assert r.status_code == 200 and "[DONE]" in r.text
    s = await eventually(h.url, lambda s: requests(s, "forwarded") == 1)
    assert requests(s, "forwarded") == 1
    assert value(s, "spillguard_streams_open") == 0


async def test_upstream_down(harness: Any) -> None:
    h = await harness(HONEST, incidents_db="")
    await h.upstream.stop()
    r = await post(h)
    assert r.status_code == 502
    assert r.json()["error"]["code"] == "UPSTREAM_UNAVAILABLE"
    s = await scrape(h.url)
    assert requests(s, "error") == 1
    assert value(s, "spillguard_upstream_errors_total", kind="unavailable") == 1
    assert total(s, "spillguard_upstream_errors_total") == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_upstream_timeout(harness: Any, stream: bool) -> None:
    h = await harness(HONEST, total_timeout=0.3, incidents_db="")

    async def slow(record: dict[str, Any]) -> Turn:
        await asyncio.sleep(2)  # no response headers before the deadline
        return HONEST

    h.upstream.script = slow
    r = await post(h, stream)
    assert r.status_code == 504
    s = await scrape(h.url)
    assert value(s, "spillguard_upstream_errors_total", kind="timeout") == 1
    assert requests(s, "error") == 1
    # The wait counts as upstream time: about the deadline (0.3 s), all of it on the upstream.
    assert value(s, "spillguard_upstream_latency_seconds_sum", route="chat") >= 0.25


@pytest.mark.parametrize(("status", "kind"), [(429, "status_4xx"), (503, "status_5xx")])
async def test_upstream_error_statuses(harness: Any, status: int, kind: str) -> None:
    h = await harness(Raw(status, {"content-type": "application/json"}, [b"{}"]), incidents_db="")
    assert (await post(h)).status_code == status
    s = await scrape(h.url)
    assert value(s, "spillguard_upstream_errors_total", kind=kind) == 1
    assert total(s, "spillguard_upstream_errors_total") == 1


async def test_reply_too_large(harness: Any) -> None:
    big = json.dumps({"choices": [], "pad": "x" * 4096}).encode()
    raw = Raw(200, {"content-type": "application/json"}, [big])
    h = await harness(raw, max_reply=1024, incidents_db="")
    r = await post(h)
    assert r.json()["error"]["code"] == "REPLY_TOO_LARGE"
    s = await scrape(h.url)
    assert value(s, "spillguard_upstream_errors_total", kind="too_large") == 1


async def test_upstream_latency_includes_body_reads(harness: Any) -> None:
    events = chunks(HONEST, "m")
    slow = Raw(200, {"content-type": "text/event-stream"}, events, delay=0.05)
    h = await harness(slow, incidents_db="")
    assert (await post(h, stream=True)).status_code == 200
    s = await eventually(h.url, lambda s: latency_count(s, "upstream") == 1)
    # Every event came 50 ms after the one before, most of which spillguard spent waiting on
    # the upstream (time to the response headers alone would be about nothing).
    assert value(s, "spillguard_upstream_latency_seconds_sum", route="chat") >= 0.025 * len(events)


async def test_model_label_is_bounded(harness: Any) -> None:
    h = await harness(Turn(content=HERMES), metrics_model_limit=2, mode="fail", incidents_db="")
    for model in ("a", "b", "c", "d", "a", "x" * 300):
        await post(h, model=model)
    s = await scrape(h.url)
    found = {
        dict(labels)["model"]: v
        for (name, labels), v in s.items()
        if name == "spillguard_findings_total"
    }
    assert found == {"a": 2, "b": 1, "other": 3}


def test_a_named_upstream_is_its_own_label_value() -> None:
    metrics = Metrics(Settings(incidents_db=""))
    for upstream, status in (("grok", 503), ("grok", 200), ("default", 200)):
        outcome = Outcome("r", "chat", "fail", upstream=upstream)
        outcome.describe("grok-4", False)
        outcome.calling()
        outcome.upstream_answered(status)
        outcome.attempt(2)
        outcome.finding("hermes", "get_weather", 1, "<tool_call>")
        outcome.close()
        metrics.observe(outcome)
    s = parse(metrics.exposition().decode())
    for name, labels in (
        ("spillguard_requests_total", {"route": "chat", "mode": "fail", "outcome": "forwarded"}),
        ("spillguard_findings_total", {"family": "hermes", "model": "grok-4"}),
        ("spillguard_retries_total", {"route": "chat"}),
        ("spillguard_upstream_latency_seconds_count", {"route": "chat"}),
    ):
        assert value(s, name, **labels, upstream="grok") == 2, name
        assert value(s, name, **labels) == 1, name
    errors = "spillguard_upstream_errors_total"
    assert value(s, errors, kind="status_5xx", upstream="grok") == 1
    assert total(s, errors) == 1


def test_each_action_is_counted_under_its_name() -> None:
    """The outcome label is the action's name, whatever the action: one child each."""
    metrics = Metrics(Settings(incidents_db=""))
    for action in Action:
        for _ in range(2):
            outcome = Outcome("r", "chat", "retry")
            outcome.act(action)
            outcome.close()
            metrics.observe(outcome)
    text = metrics.exposition().decode()
    s = parse(text)
    requests = "spillguard_requests_total"
    for action in Action:
        assert value(s, requests, route="chat", mode="retry", outcome=action.value) == 2
    assert total(s, requests) == 2 * len(Action)
    assert "Action." not in text


def test_model_labels_unit() -> None:
    labels = ModelLabels(2)
    assert labels(None) == "unknown"
    assert labels("m" * 100) == "m" * 64
    assert labels("n") == "n"
    assert labels("o") == "other"
    assert labels("m" * 70) == "m" * 64  # the same label once truncated: not a new value


class Gated:
    """An upstream that sends one SSE event, then waits for `release` before finishing - or, with
    `hold_head`, does not even answer until released."""

    def __init__(self, hold_head: bool = False) -> None:
        self.release = asyncio.Event()
        self.hold_head = hold_head
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        if self.hold_head:
            await self.release.wait()
        events = chunks(HONEST, "m")
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(events[0] + events[1])
        await self.release.wait()
        for event in events[2:]:
            await response.write(event)
        await response.write_eof()
        return response

    async def __aenter__(self) -> Gated:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{runner_port(self.runner)}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release.set()
        assert self.runner is not None
        await self.runner.cleanup()


@pytest.fixture
async def gated() -> AsyncIterator[Callable[..., Any]]:
    made: list[tuple[Gated, Running]] = []

    async def make(hold_head: bool = False) -> tuple[Gated, Running]:
        up = await Gated(hold_head).__aenter__()
        settings = Settings(upstream=up.url, port=0, log_level="WARNING", incidents_db="")
        proxy = await start_background(settings)
        made.append((up, proxy))
        return up, proxy

    yield make
    for up, proxy in made:
        await up.__aexit__()
        await proxy.stop()


async def test_streams_open_gauge(gated: Any) -> None:
    up, proxy = await gated()
    async with (
        httpx.AsyncClient(base_url=proxy.url, timeout=10) as http,
        http.stream("POST", "/chat/completions", json=chat_body(stream=True)) as r,
    ):
        lines = r.aiter_lines()
        assert (await anext(lines)).startswith("data: ")
        s = await scrape(proxy.url)
        assert value(s, "spillguard_streams_open") == 1
        assert total(s, "spillguard_requests_total") == 0  # recorded when it ends
        up.release.set()
        rest = [line async for line in lines]
    assert "data: [DONE]" in rest
    s = await eventually(proxy.url, lambda s: requests(s, "passed") == 1)
    assert requests(s, "passed") == 1
    assert value(s, "spillguard_streams_open") == 0


async def test_client_gone_before_the_upstream_answered(gated: Any) -> None:
    _, proxy = await gated(hold_head=True)
    async with httpx.AsyncClient(base_url=proxy.url, timeout=0.3) as http:
        with pytest.raises(httpx.ReadTimeout):
            await http.post("/chat/completions", json=chat_body())
    s = await eventually(proxy.url, lambda s: requests(s, "client_gone") == 1)
    assert requests(s, "client_gone") == 1
    assert value(s, "spillguard_streams_open") == 0


# ---- several workers -------------------------------------------------------------------------


def test_multiprocess_dir_is_made_and_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MULTIPROC_ENV, raising=False)
    with multiprocess_dir(1) as none:
        assert none is None and MULTIPROC_ENV not in os.environ
    with multiprocess_dir(3) as made:
        assert made is not None and os.path.isdir(made)
        assert os.environ[MULTIPROC_ENV] == made
    assert not os.path.exists(made)
    assert MULTIPROC_ENV not in os.environ


def test_multiprocess_dir_keeps_the_operators(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    mine = tmp_path / "prom"
    monkeypatch.setenv(MULTIPROC_ENV, str(mine))
    with multiprocess_dir(2) as used:
        assert used == str(mine) and mine.is_dir()
    assert mine.is_dir()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.parametrize("own_dir", [False, True])
async def test_several_workers_share_their_counts(
    harness: Any, tmp_path: Path, own_dir: bool
) -> None:
    """`spillguard serve --workers 2`: whichever worker answers /metrics, it counts every
    request, including those the other worker served - in a directory spillguard makes (and
    removes), or in the operator's own."""
    h = await harness(HONEST, incidents_db="")
    port = _free_port()
    env = {**os.environ, "SPILLGUARD_INCIDENTS_DB": "", "TMPDIR": str(tmp_path)}
    env.pop(MULTIPROC_ENV, None)
    if own_dir:
        env[MULTIPROC_ENV] = str(tmp_path / "prom")
    cmd = [sys.executable, "-m", "spillguard.cli", "serve", "--workers", "2", "--port", str(port)]
    cmd += ["--upstream", h.upstream.url, "--log-level", "WARNING"]
    proc = subprocess.Popen(cmd, env=env, cwd=Path(__file__).parent.parent)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                async with httpx.AsyncClient(base_url=base) as http:
                    if (await http.get("/healthz")).status_code == 200:
                        break
            except httpx.TransportError:
                await asyncio.sleep(0.05)
        sent = 0

        def pids() -> set[str]:
            files = tmp_path.glob("prom/counter_*.db" if own_dir else "spillguard-metrics-*/c*")
            return {p.name.split("_")[-1] for p in files}

        while sent < 400 and (sent < 20 or len(pids()) < 2):
            # A fresh connection each time, so the kernel spreads them over the workers.
            async with httpx.AsyncClient(base_url=base + "/v1", timeout=10) as http:
                r = await http.post("/chat/completions", json=chat_body())
                assert r.status_code == 200
            sent += 1
        assert len(pids()) >= 2, "both workers should have served requests"
        for _ in range(6):
            async with httpx.AsyncClient(base_url=base) as http:
                s = parse((await http.get("/metrics")).text)
            assert requests(s, "passed") == sent
            assert latency_count(s, "upstream") == sent
            assert value(s, "spillguard_streams_open") == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert proc.returncode == 0
    assert list(tmp_path.glob("spillguard-metrics-*")) == []  # its own directory is removed


@pytest.mark.parametrize("stream", [False, True])
async def test_responses_route_is_counted_as_its_own(harness: Any, stream: bool) -> None:
    h = await harness(Turn(content=HERMES), REAL, incidents_db="")
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    body = {"model": "m", "input": "weather?", "tools": tools, "stream": stream}
    async with h.http() as http:
        assert (await http.post("/responses", json=body)).status_code == 200
    s = await eventually(h.url, lambda s: requests(s, "retried", route="responses") == 1)
    assert requests(s, "retried", route="responses") == 1
    assert value(s, "spillguard_retries_total", route="responses") == 1
    assert value(s, "spillguard_findings_total", family="hermes", model="m") == 1
    assert latency_count(s, "upstream", route="responses") == 1

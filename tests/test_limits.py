"""The limits middleware (`limits.Limits`: proxy keys, header size, bounded concurrency) through
the real server, and every refusal spillguard answers itself observed: a log line and
spillguard_refusals_total{reason}, with nothing of the request body."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from spillguard.limits import Limits
from spillguard.observe import Observer
from spillguard.scripted import Raw, Turn
from spillguard.settings import Settings
from tests.conftest import chat_body
from tests.test_metrics import Samples, scrape, value
from tests.test_observe import JSON_LOGS, Lines

CANARY = "sk-canary-7f3a9c"


async def test_proxy_key_required_and_upstream_key_injected(harness: Any) -> None:
    h = await harness(Turn(content="hi"), proxy_keys=("pk-one", "pk-two"), upstream_key=CANARY)
    async with h.http() as http:
        missing = await http.post("/chat/completions", json=chat_body())
        wrong = await http.post(
            "/chat/completions", json=chat_body(), headers={"authorization": "Bearer pk-nope"}
        )
        ok = await http.post(
            "/chat/completions", json=chat_body(), headers={"authorization": "Bearer pk-two"}
        )
    for r in (missing, wrong):
        assert r.status_code == 401
        assert r.json()["error"]["code"] == "INVALID_PROXY_KEY"
        assert CANARY not in r.text
    assert ok.status_code == 200
    assert h.calls == 1
    assert h.upstream.requests[0]["headers"]["authorization"] == f"Bearer {CANARY}"


async def test_health_needs_no_key(harness: Any) -> None:
    h = await harness(Turn(content="hi"), proxy_keys=("pk",))
    async with httpx.AsyncClient(base_url=h.url.removesuffix("/v1")) as http:
        assert (await http.get("/healthz")).status_code == 200


async def test_over_the_concurrency_limit_is_503_with_retry_after(harness: Any) -> None:
    slow = Raw(200, {"content-type": "application/json"}, [b"{}"], delay=0.5)
    h = await harness(slow, max_concurrency=1)
    async with h.http() as http:
        first = asyncio.create_task(http.post("/models"))
        await asyncio.sleep(0.2)
        second = await http.post("/models")
        assert (await first).status_code == 200
    assert second.status_code == 503
    assert second.headers["retry-after"] == "1"
    assert second.json()["error"]["code"] == "OVERLOADED"


# ---- every refusal observed ------------------------------------------------------------------

SECRET_BODY = "body-canary-3c1e"


@pytest.fixture
def lines(capsys: pytest.CaptureFixture[str]) -> Lines:
    return Lines(capsys)


def refused_lines(lines: Lines) -> list[dict[str, Any]]:
    return [line for line in lines.read() if line["msg"] == "refused"]


async def refusals(url: str) -> Samples:
    return {k: v for k, v in (await scrape(url)).items() if k[0] == "spillguard_refusals_total"}


def middleware_cases() -> list[tuple[str, dict[str, Any], dict[str, str], int, str]]:
    return [
        ("no key", {"proxy_keys": ("pk-1",)}, {}, 401, "INVALID_PROXY_KEY"),
        ("huge headers", {}, {f"x-pad-{i}": "v" for i in range(250)}, 431, "HEADERS_TOO_LARGE"),
    ]


@pytest.mark.parametrize(
    ("case", "settings", "headers", "status", "code"),
    middleware_cases(),
    ids=[c[0] for c in middleware_cases()],
)
async def test_a_middleware_refusal_is_logged_without_the_body(
    harness: Any,
    lines: Lines,
    case: str,
    settings: dict[str, Any],
    headers: dict[str, str],
    status: int,
    code: str,
) -> None:
    h = await harness(Turn(content="hi"), log_format="json", log_level="INFO", **settings)
    body = chat_body() | {"messages": [{"role": "user", "content": SECRET_BODY}]}
    async with h.http() as http:
        r = await http.post(
            "/chat/completions", json=body, headers={"x-request-id": "ref-1", **headers}
        )
    assert r.status_code == status and r.json()["error"]["code"] == code
    assert r.headers["x-request-id"] == "ref-1"
    [line] = refused_lines(lines)
    assert line["level"] == "info"
    assert {k: line[k] for k in ("request_id", "method", "path", "status", "error", "reason")} == {
        "request_id": "ref-1",
        "method": "POST",
        "path": "/v1/chat/completions",
        "status": status,
        "error": code,
        "reason": code.lower(),
    }
    assert SECRET_BODY not in lines.err
    assert h.calls == 0


async def test_shed_load_is_logged_with_a_request_id_of_its_own(harness: Any, lines: Lines) -> None:
    slow = Raw(200, {"content-type": "application/json"}, [b"{}"], delay=0.5)
    h = await harness(slow, max_concurrency=1, log_format="json", log_level="INFO")
    async with h.http() as http:
        first = asyncio.create_task(http.post("/models"))
        await asyncio.sleep(0.2)
        second = await http.post("/models")
        await first
    assert second.status_code == 503
    [line] = refused_lines(lines)
    assert line["reason"] == "overloaded" and line["path"] == "/v1/models"
    assert line["request_id"].startswith("sg-")
    assert line["request_id"] == second.headers["x-spillguard-request-id"]


async def test_route_refusals_are_counted_with_their_reason(harness: Any, lines: Lines) -> None:
    """413 (declared and streamed), 408 and 400 are answered by the route: their request line
    carries the status and error, the counter the reason, and no line the body."""
    h = await harness(Turn(content="hi"), max_body=1024, read_timeout=0.3, **JSON_LOGS)
    async with h.http() as http:
        declared = await http.post("/chat/completions", content=SECRET_BODY.encode() * 100)
        assert declared.status_code == 413

        async def chunks() -> Any:
            for _ in range(100):
                yield SECRET_BODY.encode()

        streamed = await http.post("/chat/completions", content=chunks())
        assert streamed.status_code == 413
        assert (await http.get("/models%40elsewhere")).status_code == 400
    assert await stalled_body(h.url, SECRET_BODY.encode()) == 408
    s = await refusals(h.url)
    assert value(s, "spillguard_refusals_total", reason="request_too_large") == 2
    assert value(s, "spillguard_refusals_total", reason="request_timeout") == 1
    assert value(s, "spillguard_refusals_total", reason="invalid_path") == 1
    got = sorted((line["status"], line["error"]) for line in await lines.until(4))
    assert got == [
        (400, "INVALID_PATH"),
        (408, "REQUEST_TIMEOUT"),
        (413, "REQUEST_TOO_LARGE"),
        (413, "REQUEST_TOO_LARGE"),
    ]
    assert SECRET_BODY not in lines.err
    assert h.calls == 0


async def stalled_body(url: str, part: bytes) -> int:
    """A request whose body stops arriving: the status spillguard answers with."""
    host, port = url.removeprefix("http://").split("/")[0].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(part) * 10}\r\n\r\n"
    )
    writer.write(head.encode() + part)
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), 10)
    writer.close()
    return int(status_line.split()[1])


async def test_limits_count_refusals_through_the_observer() -> None:
    """The middleware with an observer, as `asgi.create_app` wires it: each refusal counted."""
    settings = Settings(proxy_keys=("pk-1",), max_concurrency=1, incidents_db="")
    observer = Observer(settings)

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    app = Limits(inner, settings, observer)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sg") as http:
        assert (await http.get("/v1/models")).status_code == 401
        assert (await http.get("/v1/models", headers={"x-pad": "v" * 70_000})).status_code == 431
        ok = await http.get("/v1/models", headers={"authorization": "Bearer pk-1"})
        assert ok.status_code == 200
    sample = observer.metrics.registry.get_sample_value
    assert sample("spillguard_refusals_total", {"reason": "invalid_proxy_key"}) == 1
    assert sample("spillguard_refusals_total", {"reason": "headers_too_large"}) == 1
    assert sample("spillguard_refusals_total", {"reason": "overloaded"}) is None


async def test_middleware_refusals_are_counted_by_the_server(harness: Any) -> None:
    h = await harness(Turn(content="hi"), proxy_keys=("pk-1",))
    async with h.http() as http:
        assert (await http.post("/chat/completions", json=chat_body())).status_code == 401
    s = await refusals(h.url)
    assert value(s, "spillguard_refusals_total", reason="invalid_proxy_key") == 1

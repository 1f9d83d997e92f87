"""OpenTelemetry traces, with the SDK's in-memory exporter: a request span in the client's trace,
a child span per upstream attempt whose context goes upstream, the GenAI and spillguard.*
attributes, leaked text only on opt-in; and the OTLP/HTTP export, to a collector on loopback."""

from __future__ import annotations

import asyncio
import contextvars
import http.server
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from spillguard import tracing
from spillguard.observe import Observer
from spillguard.outcome import Action, Outcome
from spillguard.scripted import Turn, call
from spillguard.settings import Settings
from spillguard.tracing import Tracing, TracingUnavailable, attempt_headers
from tests.conftest import chat_body

HERMES = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lisbon"}}\n</tool_call>'
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
URL = "https://api.deepseek.com/v1/chat/completions"


def scope(path: str = "/v1/chat/completions", **headers: str) -> dict[str, Any]:
    pairs = [(k.encode(), v.encode()) for k, v in headers.items()]
    return {"type": "http", "method": "POST", "path": path, "headers": pairs}


@pytest.fixture
def memory() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def traced(memory: InMemorySpanExporter) -> Callable[..., Tracing]:
    def make(**settings: Any) -> Tracing:
        return Tracing(Settings(otel_traces=True, incidents_db="", **settings), memory)

    return make


def spans(t: Tracing, memory: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    t.shutdown()
    return {s.name: s for s in memory.get_finished_spans()}


def retried(outcome: Outcome, t: Tracing) -> list[dict[str, str]]:
    """What the decision does for a leak and its retry, with the attempt hook before each call."""
    sent = []
    for attempt in (1, 2):
        outcome.attempt(attempt)
        outcome.calling()
        headers = {"authorization": "Bearer k", "traceparent": TRACEPARENT, "tracestate": "a=1"}
        sent.append(dict(attempt_headers(URL, headers)))
        outcome.upstream_answered(200)
        if attempt == 1:
            outcome.finding("hermes", "get_weather", 1, HERMES)
    outcome.act(Action.RETRIED)
    outcome.answered(200)
    outcome.close()
    t.finish(outcome)
    return sent


def in_a_request(work: Callable[[], Any]) -> Any:
    """As a request's own task would: the traced request is its context's alone."""
    return contextvars.copy_context().run(work)


def test_a_retried_request_is_one_span_with_a_child_per_attempt(
    traced: Callable[..., Tracing], memory: InMemorySpanExporter
) -> None:
    t = traced()
    outcome = Outcome(request_id="r-1", route="chat", mode="retry", model="deepseek-chat")

    def request() -> list[dict[str, str]]:
        t.begin(scope(traceparent=TRACEPARENT, tracestate="a=1"), outcome)
        return retried(outcome, t)

    sent = in_a_request(request)
    got = spans(t, memory)
    assert (
        set(got) == {"POST /v1/chat/completions", "chat deepseek-chat"}
        and len(memory.get_finished_spans()) == 3
    )
    server = got["POST /v1/chat/completions"]
    assert server.kind is SpanKind.SERVER
    assert server.parent is not None and server.parent.span_id == int(PARENT_ID, 16)
    assert server.context.trace_id == int(TRACE_ID, 16)
    attrs = dict(server.attributes or {})
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.request.model"] == "deepseek-chat"
    assert attrs["http.request.method"] == "POST" and attrs["http.response.status_code"] == 200
    assert attrs["spillguard.action"] == "retried" and attrs["spillguard.attempts"] == 2
    assert attrs["spillguard.family"] == "hermes" and attrs["spillguard.tool_name"] == "get_weather"
    assert attrs["spillguard.request_id"] == "r-1"
    first, second = sorted(
        (s for s in memory.get_finished_spans() if s.kind is SpanKind.CLIENT),
        key=lambda s: (s.attributes or {})["spillguard.attempt"],
    )
    for number, span in ((1, first), (2, second)):
        a = dict(span.attributes or {})
        assert span.parent is not None and span.parent.span_id == server.context.span_id
        assert a["spillguard.attempt"] == number and a["http.response.status_code"] == 200
        assert a["gen_ai.provider.name"] == "deepseek" and a["server.address"] == "api.deepseek.com"
        assert a["gen_ai.request.model"] == "deepseek-chat"
        # Upstream, the attempt's own context replaced the client's; tracestate travels on.
        header = sent[number - 1]
        assert header["traceparent"] == f"00-{TRACE_ID}-{span.context.span_id:016x}-01"
        assert header["tracestate"] == "a=1" and header["authorization"] == "Bearer k"
    assert first.end_time is not None and second.start_time is not None
    assert first.end_time <= second.start_time  # the first ended when the retry began
    [event] = first.events
    assert event.name == "spillguard.finding"
    assert dict(event.attributes or {}) == {
        "spillguard.family": "hermes",
        "spillguard.tool_name": "get_weather",
    }
    assert second.events == ()


def everything_said(memory: InMemorySpanExporter) -> str:
    parts = []
    for span in memory.get_finished_spans():
        parts += [str(v) for v in (span.attributes or {}).values()]
        parts += [str(v) for e in span.events for v in (e.attributes or {}).values()]
    return "\n".join(parts)


@pytest.mark.parametrize("opt_in", [False, True])
def test_leaked_text_only_when_the_operator_opts_in(
    traced: Callable[..., Tracing], memory: InMemorySpanExporter, opt_in: bool
) -> None:
    t = traced(otel_leaked_text=opt_in, excerpt_limit=12)
    outcome = Outcome(request_id="r", route="chat", mode="retry", model="m")
    in_a_request(lambda: (t.begin(scope(), outcome), retried(outcome, t)))
    t.shutdown()
    [event] = [e for s in memory.get_finished_spans() for e in s.events]
    assert (dict(event.attributes or {}).get("spillguard.excerpt")) == (
        HERMES[:12] if opt_in else None
    )
    if not opt_in:
        assert 'get_weather", "arguments' not in everything_said(memory)
        assert "<tool_call>" not in everything_said(memory)


def test_without_a_client_context_a_trace_begins_here(
    traced: Callable[..., Tracing], memory: InMemorySpanExporter
) -> None:
    t = traced()
    outcome = Outcome(request_id="r", route="chat", mode="retry")
    sent = in_a_request(lambda: (t.begin(scope(), outcome), retried(outcome, t))[1])
    got = spans(t, memory)
    server = got["POST /v1/chat/completions"]
    assert server.parent is None
    assert sent[0]["traceparent"].split("-")[1] == f"{server.context.trace_id:032x}"
    assert "gen_ai.request.model" not in (server.attributes or {})
    assert "chat" in got  # no model: the attempts are named for the operation only


def test_an_upstream_that_never_answered_is_an_error(
    traced: Callable[..., Tracing], memory: InMemorySpanExporter
) -> None:
    t = traced()
    outcome = Outcome(request_id="r", route="chat", mode="retry", model="m")

    def request() -> None:
        t.begin(scope(), outcome)
        outcome.calling()
        attempt_headers(URL, {})
        outcome.failed("UPSTREAM_UNAVAILABLE", 502)
        outcome.close()
        t.finish(outcome)

    in_a_request(request)
    got = spans(t, memory)
    server, attempt = got["POST /v1/chat/completions"], got["chat m"]
    for span in (server, attempt):
        assert span.status.status_code is StatusCode.ERROR
        assert (span.attributes or {})["error.type"] == "UPSTREAM_UNAVAILABLE"
    assert "http.response.status_code" not in (attempt.attributes or {})
    assert (server.attributes or {})["spillguard.action"] == "error"


def test_a_relayed_request_has_no_genai_attributes(
    traced: Callable[..., Tracing], memory: InMemorySpanExporter
) -> None:
    t = traced()
    outcome = Outcome(request_id="r", route="other", mode="retry")

    def request() -> None:
        t.begin(scope("/v1/models"), outcome)
        outcome.calling()
        attempt_headers("http://127.0.0.1:8000/v1/models", {})
        outcome.upstream_answered(200)
        outcome.answered(200)
        outcome.close()
        t.finish(outcome)

    in_a_request(request)
    got = spans(t, memory)
    assert set(got) == {"POST /v1/models", "/v1/models"}
    for span in got.values():
        assert not [k for k in (span.attributes or {}) if k.startswith("gen_ai.")]
    assert (got["/v1/models"].attributes or {})["server.port"] == 8000


def test_nothing_traced_leaves_the_headers_alone() -> None:
    headers = {"traceparent": TRACEPARENT}
    assert attempt_headers(URL, headers) is headers


async def test_concurrent_requests_keep_their_own_traces(
    traced: Callable[..., Tracing], memory: InMemorySpanExporter
) -> None:
    t = traced()

    async def one(rid: str) -> str:
        outcome = Outcome(request_id=rid, route="chat", mode="retry", model="m")
        t.begin(scope(), outcome)
        await asyncio.sleep(0.01)  # the other request runs meanwhile
        header = attempt_headers(URL, {})["traceparent"]
        outcome.close()
        t.finish(outcome)
        return header

    first, second = await asyncio.gather(
        asyncio.create_task(one("a")), asyncio.create_task(one("b"))
    )
    t.shutdown()
    traces = {
        f"{s.context.trace_id:032x}": s
        for s in memory.get_finished_spans()
        if s.kind is SpanKind.SERVER
    }
    assert first.split("-")[1] != second.split("-")[1]
    assert {first.split("-")[1], second.split("-")[1]} == set(traces)


# ---- the observer's part, and the export ---------------------------------------------------------


def test_tracing_is_off_by_default() -> None:
    assert Tracing.from_settings(Settings()) is None
    assert Observer(Settings(incidents_db="")).tracing is None


def test_without_the_extra_tracing_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    with pytest.raises(TracingUnavailable, match=r"spillguard\[otel\]"):
        Tracing.from_settings(Settings(otel_traces=True))


def test_the_observer_ends_the_spans_it_began(
    monkeypatch: pytest.MonkeyPatch, memory: InMemorySpanExporter
) -> None:
    monkeypatch.setattr(tracing, "otlp_exporter", lambda: memory)
    observer = Observer(Settings(otel_traces=True, incidents_db="", log_level="WARNING"))
    outcome = Outcome(request_id="r", route="chat", mode="retry", model="m")

    def request() -> None:
        observer.trace(scope(), outcome)
        outcome.calling()
        attempt_headers(URL, {})
        outcome.upstream_answered(200)
        outcome.answered(200)
        observer.record(outcome)

    in_a_request(request)
    observer.close()
    assert sorted(s.name for s in memory.get_finished_spans()) == [
        "POST /v1/chat/completions",
        "chat m",
    ]


class Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP collector on loopback: keeps each export request it is sent."""

    received: list[ExportTraceServiceRequest] = []  # noqa: RUF012

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        self.received.append(ExportTraceServiceRequest.FromString(body))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[tuple[str, type[Collector]]]:
    handler = type("Handler", (Collector,), {"received": []})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces", handler
    server.shutdown()
    server.server_close()


def test_spans_are_exported_over_otlp_http(
    monkeypatch: pytest.MonkeyPatch, collector: tuple[str, type[Collector]]
) -> None:
    endpoint, handler = collector
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "spillguard-test")
    t = Tracing.from_settings(Settings(otel_traces=True, incidents_db=""))
    assert t is not None
    outcome = Outcome(request_id="r", route="chat", mode="retry", model="m")
    in_a_request(lambda: (t.begin(scope(traceparent=TRACEPARENT), outcome), retried(outcome, t)))
    t.shutdown()
    [request] = handler.received
    [resource] = request.resource_spans
    service = {a.key: a.value.string_value for a in resource.resource.attributes}
    assert service["service.name"] == "spillguard-test"
    sent = [s for scoped in resource.scope_spans for s in scoped.spans]
    assert sorted(s.name for s in sent) == ["POST /v1/chat/completions", "chat m", "chat m"]
    assert {s.trace_id.hex() for s in sent} == {TRACE_ID}


# ---- through the server (needs the hooks in handlers.py and exchange.py) -----------------------


@pytest.mark.parametrize(
    ("stream", "first"),
    [(False, HERMES), (True, HERMES), (True, "Let me check that.\n" + HERMES)],
    ids=["whole", "stream, leak first", "stream, prose then leak"],
)
async def test_a_retried_request_through_the_server(
    harness: Any,
    monkeypatch: pytest.MonkeyPatch,
    memory: InMemorySpanExporter,
    stream: bool,
    first: str,
) -> None:
    monkeypatch.setattr(tracing, "otlp_exporter", lambda: memory)
    real = Turn(tool_calls=[call("get_weather", {"city": "Lisbon"})])
    h = await harness(Turn(content=first), real, otel_traces=True)
    body = chat_body(stream=stream, model="deepseek-chat")
    async with h.http() as http:
        r = await http.post("/chat/completions", json=body, headers={"traceparent": TRACEPARENT})
    assert r.status_code == 200
    await h.proxy.stop()  # flushes the spans
    h.proxy = None
    finished = memory.get_finished_spans()
    [server] = [s for s in finished if s.kind is SpanKind.SERVER]
    attempts = sorted(
        (s for s in finished if s.kind is SpanKind.CLIENT), key=lambda s: s.start_time or 0
    )
    assert len(attempts) == 2
    assert server.context.trace_id == int(TRACE_ID, 16)
    assert (server.attributes or {})["spillguard.action"] == "retried"
    assert (server.attributes or {})["spillguard.stream"] is stream
    upstream = [req["headers"]["traceparent"].split("-") for req in h.upstream.requests]
    assert [(trace, parent) for _, trace, parent, _ in upstream] == [
        (TRACE_ID, f"{s.context.span_id:016x}") for s in attempts
    ]


def test_the_service_is_named_spillguard_unless_the_operator_names_it(
    traced: Callable[..., Tracing], memory: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    t = traced()
    outcome = Outcome(request_id="r", route="chat", mode="retry")
    in_a_request(lambda: t.begin(scope(), outcome))
    outcome.close()
    t.finish(outcome)
    [span] = spans(t, memory).values()
    assert span.resource.attributes["service.name"] == "spillguard"

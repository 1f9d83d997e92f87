"""OpenTelemetry traces, optional: `pip install 'spillguard[otel]'`, then `--otel-traces`.

Per request, one SERVER span ("POST /v1/chat/completions") with the HTTP and GenAI semantic-
convention attributes and spillguard's own (`spillguard.action`, `.family`, `.attempts`...); per
upstream attempt, one CLIENT child span ("chat deepseek-chat") carrying the attempt's number, the
upstream's status and a `spillguard.finding` event for a leak found in its reply. The client's W3C
trace context (traceparent, tracestate) is the request span's parent; upstream, each attempt's own
context replaces it. The leaked text itself goes on a span only with `--otel-leaked-text`.

Spans are exported over OTLP/HTTP in batches, where the standard OTEL_EXPORTER_OTLP_* variables
say (OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER and OTEL_RESOURCE_ATTRIBUTES are honoured too), from
a tracer provider of spillguard's own: the process-wide OpenTelemetry globals are left alone.

Three calls connect it to a request:
- `Observer.trace(scope, outcome)` when the handler makes the request's outcome (`begin` here);
- `attempt_headers(url, headers)` in `exchange.open_upstream`, before each upstream call: the
  headers to send, with this attempt's context (unchanged when nothing is traced);
- `Observer.record(outcome)` ends the spans (`finish`), the attempts with them.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .outcome import Outcome
from .settings import Settings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer

CONTEXT_HEADERS = ("traceparent", "tracestate")
INSPECTED = {"chat", "responses", "messages"}  # routes that are GenAI inference
PROVIDERS = {  # gen_ai.provider.name by upstream host; any other speaks OpenAI's API
    "api.openai.com": "openai",
    "api.x.ai": "x_ai",
    "api.deepseek.com": "deepseek",
    "api.anthropic.com": "anthropic",
    "api.mistral.ai": "mistral_ai",
    "api.groq.com": "groq",
    "api.perplexity.ai": "perplexity",
}


class TracingUnavailable(RuntimeError):
    """--otel-traces without the `otel` extra installed."""


@dataclass
class _Trace:
    """One request's spans while it is in flight."""

    tracing: Tracing
    span: Span
    route: str
    attempts: list[Span] = field(default_factory=list)
    over: list[int] = field(default_factory=list)  # when each attempt before the last ended


# The request being traced, for `attempt_headers` deep in the exchange: a context variable, so
# each request's task sees its own (OpenTelemetry's own context works the same way).
_CURRENT: contextvars.ContextVar[_Trace | None] = contextvars.ContextVar(
    "spillguard_trace", default=None
)


def attempt_headers(url: str, headers: Mapping[str, str]) -> Mapping[str, str]:
    """The headers for one upstream attempt: with a span of its own, in its W3C context."""
    trace = _CURRENT.get()
    if trace is None:
        return headers
    return trace.tracing.attempt(trace, url, headers)


def provider(url: str, route: str) -> str:
    if route == "messages":
        return "anthropic"
    return PROVIDERS.get(urlsplit(url).hostname or "", "openai")


class Tracing:
    """The tracer, its exporter and the spans of requests in flight."""

    def __init__(
        self, settings: Settings, exporter: SpanExporter, clean: Callable[[str], str] = str
    ) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.settings = settings
        self.clean = clean
        resource = Resource.create()  # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": "spillguard"}))
        self.provider = TracerProvider(resource=resource)
        self.provider.add_span_processor(BatchSpanProcessor(exporter))
        self.tracer: Tracer = self.provider.get_tracer("spillguard")
        self.propagator = TraceContextTextMapPropagator()
        self._open: dict[int, _Trace] = {}  # by id(outcome), until it is recorded

    @classmethod
    def from_settings(cls, settings: Settings, clean: Callable[[str], str] = str) -> Tracing | None:
        if not settings.otel_traces:
            return None
        return cls(settings, otlp_exporter(), clean)

    def begin(self, scope: Mapping[str, Any], outcome: Outcome) -> None:
        """The request span, child of the client's trace context if it sent one."""
        from opentelemetry.trace import SpanKind

        carrier = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope.get("headers", [])
            if name.decode("latin-1") in CONTEXT_HEADERS
        }
        method, path = scope.get("method", ""), scope.get("path", "")
        attributes = {
            "http.request.method": method,
            "url.path": path,
            "spillguard.request_id": self.clean(outcome.request_id),
            "spillguard.route": outcome.route,
            "spillguard.mode": outcome.mode,
        }
        if outcome.route in INSPECTED:
            attributes["gen_ai.operation.name"] = "chat"
        span = self.tracer.start_span(
            f"{method} {path}",
            context=self.propagator.extract(carrier),
            kind=SpanKind.SERVER,
            attributes=attributes,
        )
        trace = _Trace(self, span, outcome.route)
        self._open[id(outcome)] = trace
        _CURRENT.set(trace)

    def attempt(self, trace: _Trace, url: str, headers: Mapping[str, str]) -> Mapping[str, str]:
        from opentelemetry.trace import SpanKind, set_span_in_context

        if trace.attempts:  # the one before is over: its reply was judged
            trace.over.append(time.time_ns())
        parts = urlsplit(url)
        attributes: dict[str, Any] = {"spillguard.attempt": len(trace.attempts) + 1}
        attributes["server.address"] = parts.hostname or ""
        if parts.port is not None:
            attributes["server.port"] = parts.port
        name = parts.path
        if trace.route in INSPECTED:
            attributes["gen_ai.operation.name"] = "chat"
            attributes["gen_ai.provider.name"] = provider(url, trace.route)
            name = "chat"
        span = self.tracer.start_span(
            name,
            context=set_span_in_context(trace.span),
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )
        trace.attempts.append(span)
        sent = {k: v for k, v in headers.items() if k.lower() not in CONTEXT_HEADERS}
        self.propagator.inject(sent, context=set_span_in_context(span))
        return sent

    def finish(self, outcome: Outcome) -> None:
        """Everything the outcome says, onto the spans; then they end."""
        trace = self._open.pop(id(outcome), None)
        if trace is None:
            return
        model = self.clean(outcome.model) if outcome.model else None
        inspected = outcome.route in INSPECTED
        for number, span in enumerate(trace.attempts, 1):
            end = trace.over[number - 1] if number <= len(trace.over) else time.time_ns()
            self._attempt_done(span, number, outcome, model if inspected else None, end)
            span.end(end)
        span = trace.span
        if inspected and model:
            span.set_attribute("gen_ai.request.model", model)
        span.set_attributes(
            {
                "http.response.status_code": outcome.status,
                "spillguard.action": str(outcome.action),
                "spillguard.attempts": outcome.attempts,
                "spillguard.stream": outcome.stream,
                "spillguard.upstream_calls": outcome.upstream_calls,
            }
        )
        for name, value in (
            ("spillguard.family", outcome.family),
            ("spillguard.tool_name", outcome.tool_name),
            ("spillguard.error", outcome.error),
            ("error.type", outcome.error),
        ):
            if value:
                span.set_attribute(name, self.clean(value))
        if outcome.anomalies:
            span.set_attribute("spillguard.anomalies", [a.kind for a in outcome.anomalies])
        if outcome.status >= 500:
            from opentelemetry.trace import Status, StatusCode

            span.set_status(Status(StatusCode.ERROR, outcome.error or str(outcome.status)))
        span.end()

    def _attempt_done(
        self, span: Span, number: int, outcome: Outcome, model: str | None, end: int
    ) -> None:
        if model:
            span.update_name(f"chat {model}")
            span.set_attribute("gen_ai.request.model", model)
        if number <= len(outcome.upstream_statuses):
            span.set_attribute("http.response.status_code", outcome.upstream_statuses[number - 1])
        elif outcome.error:  # it never answered
            from opentelemetry.trace import Status, StatusCode

            span.set_attribute("error.type", outcome.error)
            span.set_status(Status(StatusCode.ERROR, outcome.error))
        for found in outcome.findings:
            if found.attempt == number:
                event: dict[str, Any] = {"spillguard.family": found.family}
                if found.tool_name:
                    event["spillguard.tool_name"] = self.clean(found.tool_name)
                if self.settings.otel_leaked_text:
                    event["spillguard.excerpt"] = self.clean(
                        found.excerpt[: self.settings.excerpt_limit]
                    )
                span.add_event("spillguard.finding", event, timestamp=end)

    def shutdown(self) -> None:
        """Export what is left (blocking: off the event loop)."""
        self.provider.shutdown()


def otlp_exporter() -> SpanExporter:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise TracingUnavailable(
            "--otel-traces needs the otel extra: pip install 'spillguard[otel]'"
        ) from None
    return OTLPSpanExporter()

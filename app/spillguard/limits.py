"""ASGI middleware in front of the proxy routes: header size, proxy keys, bounded concurrency.

Pure ASGI (no BaseHTTPMiddleware), so a streamed response counts as in flight until it ends.
Refusals are in the shape of the API the client speaks (`context.speaks_anthropic`).
Every refusal is observed: a `refused` log line and spillguard_refusals_total{reason}, through
the observer (`observe.Refusal`); nothing of the request but its method, path and request id.
"""

from __future__ import annotations

import hmac
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from .context import error_body_for, request_id
from .errors import ClientError
from .observe import Observer, Refusal, log_refusal
from .settings import Settings

MAX_HEADERS = 200
MAX_HEADER_BYTES = 64 * 1024


def _reject(
    scope: Scope, error: ClientError, extra: list[tuple[bytes, bytes]]
) -> list[dict[str, Any]]:
    body = error_body_for(scope)(error)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *extra,
    ]
    return [
        {"type": "http.response.start", "status": error.status, "headers": headers},
        {"type": "http.response.body", "body": body},
    ]


def _size(headers: list[tuple[bytes, bytes]]) -> int:
    size = 0
    for name, value in headers:  # a loop: a third of `sum` over a generator's cost
        size += len(name) + len(value)
    return size


def bearer(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.partition(b" ")
            return token.strip() if scheme.lower() == b"bearer" else None
    for name, value in headers:
        if name in (b"x-api-key", b"api-key"):  # Anthropic SDKs; Azure-style clients
            return value.strip()
    return None


class Limits:
    """On /v1 routes: refuses oversized headers (431), requires a proxy key when configured
    (401), and answers 503 with retry-after past `max_concurrency` requests in flight. Each
    refusal goes to `observer` (without one, as a log line only)."""

    def __init__(self, app: ASGIApp, settings: Settings, observer: Observer | None = None) -> None:
        self.app = app
        self.observer = observer
        self.keys = [k.get_secret_value().encode() for k in settings.proxy_keys]
        self.limit = settings.max_concurrency
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1"):
            await self.app(scope, receive, send)
            return
        headers = scope["headers"]
        if len(headers) > MAX_HEADERS or _size(headers) > MAX_HEADER_BYTES:
            error = ClientError(431, "HEADERS_TOO_LARGE", "Request headers are too large")
            await self._refuse(scope, send, error, [])
            return
        if self.keys and not self._authorized(headers):
            error = ClientError(401, "INVALID_PROXY_KEY", "Missing or invalid spillguard key")
            await self._refuse(scope, send, error, [(b"www-authenticate", b"Bearer")])
            return
        if self.limit and self.in_flight >= self.limit:
            error = ClientError(503, "OVERLOADED", "spillguard is at its concurrency limit")
            await self._refuse(scope, send, error, [(b"retry-after", b"1")])
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1

    async def _refuse(
        self, scope: Scope, send: Send, error: ClientError, extra: list[tuple[bytes, bytes]]
    ) -> None:
        rid = request_id(scope["headers"])
        ids = [
            (b"x-request-id", rid.encode("latin-1")),
            (b"x-spillguard-request-id", rid.encode("latin-1")),
        ]
        for message in _reject(scope, error, [*extra, *ids]):
            await send(message)
        refusal = Refusal(rid, scope["method"], scope["path"], error.status, error.code)
        if self.observer is not None:
            self.observer.refused(refusal)
        else:
            log_refusal(refusal)

    def _authorized(self, headers: list[tuple[bytes, bytes]]) -> bool:
        token = bearer(headers) or b""
        ok = False
        for key in self.keys:  # compare with every key: the time taken says nothing
            ok |= hmac.compare_digest(token, key)
        return ok

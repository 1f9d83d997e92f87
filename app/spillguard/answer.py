"""What a route answers with: relayed headers put on a response, and a whole response sent as
its two ASGI messages.

A whole reply is what most inspected requests answer with, and Starlette's `Response` would
only copy its headers once more and then send the same two messages; `Whole` sends exactly what
`respond(Response(body, status), headers)` sends.
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.responses import Response
from starlette.types import Receive, Scope, Send


def raw_headers(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    """Headers (lower-case names) as ASGI sends them, each Set-Cookie value on a line of its own
    (`upstream.end_to_end` joins them with newlines)."""
    raw: list[tuple[bytes, bytes]] = []
    for name, value in headers.items():
        if name == "set-cookie":
            raw.extend((b"set-cookie", v.encode("latin-1")) for v in value.split("\n"))
        else:
            raw.append((name.encode("latin-1"), value.encode("latin-1")))
    return raw


def respond(response: Response, headers: Mapping[str, str]) -> Response:
    """Put relayed headers on a response."""
    response.raw_headers.extend(raw_headers(headers))
    return response


class Whole:
    """A whole response: `body` with `status`, its length, then `headers`."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.status = status
        self.body = body
        framed = not (status < 200 or status in (204, 304))  # as Starlette frames a body
        self.headers = [(b"content-length", str(len(body)).encode())] if framed else []
        self.headers += raw_headers(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body})

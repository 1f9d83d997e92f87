"""What every request handler needs, and what a request's dialect decides.

A request speaks Anthropic when it carries `anthropic-version` (the Anthropic SDKs and Claude
Code always send it) or its path is under `/v1/messages`. With an Anthropic upstream configured,
such a request goes there whatever its path; every other request goes to the upstream. The
dialect also picks the header a key is injected in (`x-api-key`, else a bearer token), the
shape of spillguard's own errors, and whether `request-id` (Anthropic's spelling) is set.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.types import Scope

from . import messages
from .errors import SpillguardError
from .observe import Observer
from .outcome import Outcome
from .policy import Policy
from .settings import Settings
from .upstream import Upstream, end_to_end

# Request headers never forwarded: the upstream sees its own Host, and bodies are re-framed.
REQUEST_DROP = frozenset({"host", "content-length", "expect"})
KEY_HEADERS = frozenset({"authorization", "api-key", "x-api-key"})
READY_FOR = 5.0  # seconds a readiness probe's answer is reused
ErrorBody = Callable[[SpillguardError], bytes]


def speaks_anthropic(scope: Scope) -> bool:
    path = scope.get("path", "")
    if path == messages.ROUTE or path.startswith(messages.ROUTE + "/"):
        return True
    return any(name == messages.VERSION_HEADER for name, _ in scope.get("headers", ()))


def error_body_for(scope: Scope) -> ErrorBody:
    """spillguard's own errors, in the shape of the API the client speaks."""
    return messages.error_body if speaks_anthropic(scope) else SpillguardError.json_bytes


@dataclass
class Readiness:
    """The last upstream probe, reused for `READY_FOR` seconds."""

    at: float = -READY_FOR
    ok: bool = False


@dataclass
class Context:
    """What every handler needs: the settings, the upstreams, the observer."""

    settings: Settings
    upstream: Upstream
    observer: Observer
    anthropic: Upstream | None = None  # where Anthropic requests go, when configured
    readiness: Readiness = field(default_factory=Readiness)
    # The client's key is dropped when spillguard has its own (proxy keys, or a key it injects).
    _drop: frozenset[str] = field(init=False)
    policy: Policy = field(init=False)  # every request's, until policy is chosen per request

    def __post_init__(self) -> None:
        s = self.settings
        own_key = bool(s.proxy_keys or s.upstream_key)
        self._drop = REQUEST_DROP | (KEY_HEADERS if own_key else frozenset())
        self.policy = Policy.of(s)

    @property
    def upstreams(self) -> list[Upstream]:
        return [self.upstream] + ([self.anthropic] if self.anthropic is not None else [])

    def goes_anthropic(self, request: Request) -> bool:
        return self.anthropic is not None and speaks_anthropic(request.scope)

    def upstream_for(self, request: Request) -> Upstream:
        if self.anthropic is not None and speaks_anthropic(request.scope):
            return self.anthropic
        return self.upstream

    def upstream_headers(self, request: Request, outcome: Outcome) -> dict[str, str]:
        """The client's headers as they go upstream: end-to-end ones only, with the request id
        and the key spillguard injects, in the header the client's API uses for it."""
        headers = {k: _utf8(v) for k, v in end_to_end(request.headers, self._drop).items()}
        key = self.settings.upstream_key
        if key is not None and speaks_anthropic(request.scope):
            headers["x-api-key"] = key.get_secret_value()
        elif key is not None:
            headers["authorization"] = f"Bearer {key.get_secret_value()}"
        headers["x-request-id"] = outcome.request_id
        return headers

    def policy_for(self, headers: Mapping[str, str], model: str | None) -> Policy:
        """The policy a request is held to, from its (lower-case) headers and its model."""
        return self.policy

    def outcome_for(self, request: Request, route: str) -> Outcome:
        rid = request.headers.get("x-request-id") or f"sg-{uuid.uuid4().hex}"
        return Outcome(request_id=rid[:128], route=route, mode=self.settings.mode.value)


def response_ids(scope: Scope, headers: dict[str, str], outcome: Outcome) -> dict[str, str]:
    """The request ids on a response: the upstream's own `x-request-id` (and Anthropic's
    `request-id`) pass through, as an SDK's `.request_id`, what its provider's support asks for;
    spillguard's id fills them otherwise, and is always in `x-spillguard-request-id`. Header
    names here are lower case."""
    headers.setdefault("x-request-id", outcome.request_id)
    if speaks_anthropic(scope):
        headers.setdefault("request-id", outcome.request_id)
    headers["x-spillguard-request-id"] = outcome.request_id
    return headers


def _utf8(value: str) -> str:
    """A header value as the client's bytes meant it: Starlette decodes them as Latin-1, and
    aiohttp encodes as UTF-8, so UTF-8 bytes would arrive upstream encoded twice."""
    if value.isascii():
        return value
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value

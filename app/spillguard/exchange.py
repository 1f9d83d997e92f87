"""One request on its way through the decision, and what its response says about it.

The `Exchange` the handlers build, the `Head` a stream starts its response with, the headers
that say what spillguard did, and one timed upstream exchange.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .detect import ToolSet
from .errors import LeakedToolCall, SpillguardError
from .outcome import Outcome
from .policy import Policy
from .reply import Reply
from .settings import Settings
from .tracing import attempt_headers
from .upstream import Upstream
from .wire import Stream

# What the upstream billed for the attempts that leaked (their `usage` total), when it said.
LEAKED_TOKENS = "x-spillguard-leaked-tokens"


@dataclass
class Exchange:
    """One client request on its way through."""

    method: str
    url: str
    headers: dict[str, str]  # to send upstream
    body: bytes
    obj: dict[str, Any]  # parsed; a long request's `wire.unread` values as `jsonread.Unread`
    tools: ToolSet
    outcome: Outcome
    policy: Policy  # the mode, hold limit and corrections this request is held to
    current: Stream | None = None  # the stream being edited, for an error event's place in it


@dataclass
class Head:
    status: int
    headers: dict[str, str]
    sse: bool = True
    body: bytes | None = None  # a complete response (errors) instead of a stream


def action_headers(outcome: Outcome) -> dict[str, str]:
    out = {"x-spillguard-action": str(outcome.action)}
    if outcome.family:
        out["x-spillguard-family"] = outcome.family
    if outcome.leaked_usage is not None:
        out[LEAKED_TOKENS] = str(outcome.leaked_usage.total_tokens)
    return out


def error_headers(settings: Settings, error: SpillguardError) -> dict[str, str]:
    out = {}
    if isinstance(error, LeakedToolCall) and settings.should_retry_header:
        out["x-should-retry"] = settings.should_retry_header
    if isinstance(error, LeakedToolCall) and error.leaked_tokens is not None:
        out[LEAKED_TOKENS] = str(error.leaked_tokens)
    return out


async def open_upstream(
    upstream: Upstream,
    outcome: Outcome,
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: Any,
    *,
    decode: bool = False,
) -> Reply:
    """One upstream exchange for `outcome`: counted, every wait on it timed, its status noted."""
    outcome.calling()
    headers = attempt_headers(url, headers)  # a span of its own when tracing is on
    reply = await upstream.open(method, url, headers, body, decode=decode, on_wait=outcome.waited)
    outcome.upstream_answered(reply.status)
    return reply

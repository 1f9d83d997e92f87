"""What happened to one request: the record the decision keeps and the observer writes out.

Pure (no I/O): the decision and the handlers change an `Outcome` only through its methods; the
observer (`observe.py`), the metrics and the incident record only read it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from .detect import Anomaly, Call
from .usage import Usage


class Action(StrEnum):
    """What spillguard did with a request (the `outcome` label and log field)."""

    FORWARDED = "forwarded"  # not inspected: no tools declared, or an upstream error passed on
    PASSED = "passed"
    RETRIED = "retried"
    FAILED = "failed"  # a leak answered with TEXT_ENCODED_TOOL_CALL
    OBSERVED = "observed"
    REPAIRED = "repaired"  # a leak returned as the structured calls it spelled out
    ERROR = "error"  # spillguard's own error answered it
    CLIENT_GONE = "client_gone"


@dataclass(frozen=True)
class Leak:
    """One finding as recorded: the markup family, the tool it names, on which attempt, and
    what the upstream billed for that attempt (None: its reply did not say)."""

    family: str
    tool_name: str | None
    attempt: int
    excerpt: str
    usage: Usage | None = None
    # The structured calls a repair made of it, as a JSON array of {name, arguments}; None
    # when it was not repaired.
    repaired: str | None = None


@dataclass(frozen=True)
class Irregularity:
    """A structured call that is missing or malformed (`detect.anomalies`), on which attempt:
    reported beside the findings, never acted on."""

    kind: str
    tool_name: str | None
    attempt: int


@dataclass
class Outcome:
    """One request through spillguard. Nothing here may hold a key or a header."""

    request_id: str
    route: str
    mode: str
    upstream: str = "default"  # the named upstream the request went to
    stream: bool = False
    model: str | None = None
    action: Action = Action.FORWARDED
    status: int = 0
    family: str | None = None
    tool_name: str | None = None
    attempts: int = 0
    error: str | None = None  # the error code of spillguard's own error
    upstream_ms: float = 0.0  # waiting on the upstream, over every exchange
    total_ms: float = 0.0
    upstream_calls: int = 0
    upstream_statuses: list[int] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    findings: list[Leak] = field(default_factory=list)
    anomalies: list[Irregularity] = field(default_factory=list)
    deferred: bool = False  # a streamed response records its outcome when it ends
    streaming: bool = False  # counted in spillguard_streams_open until recorded
    recorded: bool = False

    # ---- the request and its exchanges ---------------------------------------------------

    def describe(self, model: str | None, stream: bool) -> None:
        """What the request body asked for."""
        self.model, self.stream = model, stream

    def attempt(self, number: int) -> None:
        self.attempts = number

    def calling(self) -> None:
        """One more upstream exchange is starting."""
        self.upstream_calls += 1

    def upstream_answered(self, status: int) -> None:
        self.upstream_statuses.append(status)

    def waited(self, seconds: float) -> None:
        """Time spent waiting on the upstream (the headers, or a read of the body)."""
        self.upstream_ms += seconds * 1000

    # ---- what was decided ----------------------------------------------------------------

    def act(self, action: Action) -> None:
        self.action = action

    def finding(
        self,
        family: str,
        tool_name: str | None,
        attempt: int,
        excerpt: str,
        usage: Usage | None = None,
    ) -> None:
        self.family, self.tool_name = family, tool_name
        self.findings.append(Leak(family, tool_name, attempt, excerpt, usage))

    def repaired(self, calls: Sequence[Call]) -> None:
        """The last finding was answered with the calls its markup spelled out, with no second
        upstream call; the incident keeps them beside the original text."""
        self.action = Action.REPAIRED
        made = ",".join(
            '{"name":' + json.dumps(c.name) + ',"arguments":' + c.arguments + "}" for c in calls
        )
        self.findings[-1] = replace(self.findings[-1], repaired="[" + made + "]")

    @property
    def leaked_usage(self) -> Usage | None:
        """What the upstream billed for every attempt that leaked (the client got none of
        them: a repaired one is not counted); None when there was none, or a reply did not say."""
        total: Usage | None = None
        for leak in self.findings:
            if leak.repaired is not None:
                continue
            if leak.usage is None:
                return None
            total = leak.usage if total is None else total + leak.usage
        return total

    def saw(self, anomalies: list[Anomaly], attempt: int) -> None:
        """The reply the client gets has these missing or malformed structured calls."""
        self.anomalies += [Irregularity(str(a.kind), a.tool_name, attempt) for a in anomalies]

    def answered(self, status: int) -> None:
        """The status the client's response starts with."""
        self.status = status

    def failed(self, code: str, status: int) -> None:
        """spillguard's own error answered the request; a leak stays `failed`."""
        self.status, self.error = status, code
        if self.action is not Action.FAILED:
            self.action = Action.ERROR

    def stream_failed(self, code: str) -> None:
        """An error ended a stream (as an error response before it started, or as an error
        event after): one that was passing is an error now; `failed` (a leak) and `observed`
        stay."""
        self.error = code
        if self.action in (Action.FORWARDED, Action.PASSED, Action.RETRIED):
            self.action = Action.ERROR

    def relay_failed(self, code: str) -> None:
        """A relayed (uninspected) body failed after its response had started."""
        self.error = code

    def client_gone(self) -> None:
        self.status, self.action = 499, Action.CLIENT_GONE

    # ---- recording (the observer's) ------------------------------------------------------

    def defer(self) -> bool:
        """The response is being streamed: recorded when it ends. True when it now counts as
        an open stream."""
        self.deferred = True
        if self.stream and not self.streaming and not self.recorded:
            self.streaming = True
            return True
        return False

    def close(self) -> bool:
        """Seal the record, once: the totals are taken now. False when it already was."""
        if self.recorded:
            return False
        self.recorded = True
        self.total_ms = round((time.perf_counter() - self.started) * 1000, 2)
        self.upstream_ms = round(min(self.upstream_ms, self.total_ms), 2)
        return True

    def stream_closed(self) -> bool:
        """True once, when a response counted as an open stream is recorded."""
        was, self.streaming = self.streaming, False
        return was

"""When a streamed response may start: the policy, as a small pure state machine.

Until the response has started (its status and headers sent), nothing is committed: a leak can
still become a real HTTP 502, or a retry can replace the attempt whole. So output waits until it
carries something the client will show or act on, or the upstream's stream ends, or the client
has waited so long that a keep-alive is due. Once started, every publishable byte goes out at
once, and a keep-alive whenever the client has had nothing for as long. The wait is measured
from `since`, the client's last byte (or its request), never from the upstream's: held text
dripping in steadily gives the client nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

KEEPALIVE = b": keep-alive\n\n"


@dataclass(slots=True)  # one a published event: not frozen, which costs three times as much
class Send:
    """Bytes for the client; `start` when the response head must go out before them."""

    data: bytes
    start: bool = False


@dataclass
class ResponseStart:
    since: float = 0.0  # the client's last byte, or its request, on the caller's clock
    started: bool = False
    _held: list[bytes] = field(default_factory=list)

    def output(self, data: bytes, *, meaningful: bool, last: bool, leaking: bool) -> Send | None:
        """An attempt's publishable output. `meaningful`: it carries something for the client;
        `last`: the upstream's stream has ended; `leaking`: the attempt has a finding."""
        if self.started:
            return Send(data) if data else None
        if leaking:  # dropped: the retry, or a real 502, replaces the attempt whole
            return None
        if meaningful or last:
            return self._start(data)
        self._held.append(data)
        return None

    def idle(self, keepalive: bytes = KEEPALIVE) -> Send:
        """Nothing has reached the client for the keep-alive interval: a keep-alive, starting
        the response first (with what was held) if it has not started."""
        return Send(keepalive) if self.started else self._start(keepalive)

    def delivered(self, now: float) -> None:
        """Bytes went to the client at `now`: the next keep-alive is due an interval later."""
        self.since = now

    def next_attempt(self) -> None:
        """A retry begins: what the last attempt held back is dropped (it leaked)."""
        self._held.clear()

    def _start(self, data: bytes) -> Send:
        self.started = True
        held, self._held = self._held, []
        return Send(b"".join(held) + data, start=True)

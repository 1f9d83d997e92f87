"""A spliced retry's restatement of the prose the client already has, dropped from its start.

A retry after published prose often opens by saying that prose again ("Let me check the
weather."), and the client would show it twice. The rule, with `core` the client's prose
without its surrounding whitespace: a retry text that starts, after its leading whitespace,
with `core` loses that leading whitespace, `core`, and the whitespace after it as far as it
matches the whitespace the client's prose ends with. Any other text is published unchanged.

Sans-IO, fed the text a stream editor would publish, delta by delta: text that may still turn
out to be the repeat is held until it is decided.
"""

from __future__ import annotations


class Repeat:
    def __init__(self, prose: str) -> None:
        self._core = prose.strip()
        self._tail = prose[len(prose.rstrip()) :]
        self._held = ""
        self.decided = not self._core  # no prose: nothing can repeat it
        self.dropped = 0  # characters dropped from the start of the text

    @property
    def holding(self) -> int:
        return len(self._held)

    def feed(self, text: str) -> str:
        """What of `text` may be published now."""
        if self.decided:
            return text
        self._held += text
        return self._decide(final=False)

    def finish(self) -> str:
        """The text has ended (or a call, or another part, follows): release what was held."""
        return "" if self.decided else self._decide(final=True)

    def _decide(self, final: bool) -> str:
        body = self._held.lstrip()
        lead = len(self._held) - len(body)
        if len(body) < len(self._core):
            if self._core.startswith(body) and not final:
                return ""  # may still become the repeat
            return self._release(0)
        if not body.startswith(self._core):
            return self._release(0)
        rest = body[len(self._core) :]
        same = 0
        while same < min(len(rest), len(self._tail)) and rest[same] == self._tail[same]:
            same += 1
        if same == len(rest) < len(self._tail) and not final:
            return ""  # the whitespace the client has may go on
        return self._release(lead + len(self._core) + same)

    def _release(self, drop: int) -> str:
        self.decided, self.dropped = True, drop
        out, self._held = self._held[drop:], ""
        return out

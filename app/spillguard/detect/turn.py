"""One assistant turn (one choice): content, reasoning and structured calls decided together."""

from __future__ import annotations

from .scanner import DEFAULT_HOLD_LIMIT, Finding, Scanner
from .tools import ToolSet


class TurnScanner:
    """Feeds a turn's `content` and `reasoning_content` deltas through their scanners.

    Markup in content always counts: the client would show it. Markup in reasoning counts only
    when the turn made no structured call (Kimi K2 and gpt-oss put the whole call there); once a
    real call arrives, reasoning held back so far is released in order, ahead of that call.
    """

    def __init__(self, tools: ToolSet, hold_limit: int = DEFAULT_HOLD_LIMIT) -> None:
        self.content = Scanner(tools, field="content", hold_limit=hold_limit)
        # Reasoning markup may have to be released after all, so keep all of it that is held.
        self.reasoning = Scanner(
            tools, blobs=False, field="reasoning", hold_limit=hold_limit, markup_limit=hold_limit
        )
        self.called = False
        self.finished = False

    def feed_content(self, text: str) -> str:
        return self.content.feed(text)

    def feed_reasoning(self, text: str) -> str:
        if self.called:
            return text
        return self.reasoning.feed(text)

    def structured_call(self) -> str:
        """A real tool call arrived: return the held reasoning, which may now be published."""
        if self.called:
            return ""
        self.called = True
        held = self.reasoning.finish()
        markup = self.reasoning.finding.excerpt if self.reasoning.finding else ""
        return held + markup

    def finish(self) -> tuple[str, str]:
        """End of the turn: the rest of (content, reasoning) that may be published."""
        if self.finished:
            return "", ""
        self.finished = True
        content = self.content.finish()
        reasoning = "" if self.called else self.reasoning.finish()
        return content, reasoning

    @property
    def finding(self) -> Finding | None:
        """The finding, content first. Before `finish`, a marker found in content is already
        reported (without its refined family and name); reasoning counts only once the turn
        has ended without a structured call."""
        if self.content.finding is not None:
            return self.content.finding
        if self.finished and not self.called and self.reasoning.finding is not None:
            return self.reasoning.finding
        return None

    @property
    def markup(self) -> str | None:
        """The whole markup of the finding's field, from `Finding.start` to what has been fed so
        far, or None when there is no finding or the markup ran past the hold limit."""
        found = self.finding
        if found is None:
            return None
        return (self.content if found.field == "content" else self.reasoning).markup

    @property
    def certain(self) -> bool:
        """A marker has already been seen in content: the turn will end with a finding."""
        return self.content.marker_seen

    @property
    def holding(self) -> int:
        return self.content.holding + (0 if self.called else self.reasoning.holding)

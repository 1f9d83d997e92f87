"""The choices of one Chat Completions stream, each edited through its own `TurnScanner`.

`ChatStream` (`chat_stream.py`) reads the events and hands each choice of a chunk here, to be
edited in place: its text through the choice's scanner, tool-call indices shifted in a splice,
reasoning released ahead of a real call, the prose published so far kept for the retry, and
after a finding, the leaking choice read on until its family and name settle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .chat_calls import CALL_FINISHES, StreamCalls
from .chat_repair import Tail
from .detect import Finding, ToolSet, TurnScanner
from .repeat import Repeat

REASONING_KEYS = ("reasoning_content", "reasoning")


@dataclass
class Splice:
    """How a retry's stream continues a client stream that has already published prose."""

    head: dict[str, Any]  # id, created and model of the client's stream
    tool_offset: dict[int, int]  # tool-call indices taken, per choice
    choice: int  # the choice that published the prose
    repeat: Repeat  # the retry's restatement of that prose, dropped


class Choices:
    """The per-choice state and edits of one chat stream."""

    def __init__(self, tools: ToolSet, hold_limit: int, splice: Splice | None) -> None:
        self._tools = tools
        self._hold_limit = hold_limit
        self._splice = splice
        self._guards: dict[int, TurnScanner] = {}
        self._finished: set[int] = set()
        self._published: dict[int, list[str]] = {}
        self._published_len: dict[int, int] = {}
        self.tool_next: dict[int, int] = {}  # next free tool-call index per choice
        self._rkeys: dict[int, str] = {}  # the reasoning key each choice uses
        self.finding: Finding | None = None
        self.finding_choice = 0
        self._calls = StreamCalls()  # the structured calls, for `anomalies`
        self._tail: Tail | None = None  # what followed the markup, once there is a finding

    def leaked_text(self) -> str:
        """The leaked choice's published content: the prose before the markup (reasoning is not
        the assistant turn's content)."""
        return "".join(self._published.get(self.finding_choice, []))

    def _guard(self, index: int) -> TurnScanner:
        guard = self._guards.get(index)
        if guard is None:
            guard = self._guards[index] = TurnScanner(self._tools, self._hold_limit)
        return guard

    def _edit_choice(
        self, chunk: dict[str, Any], choice: dict[str, Any]
    ) -> tuple[bool, bool, bool]:
        """Edit one choice in place: (changed, meaningful, keep)."""
        index = choice.get("index", 0)
        index = index if isinstance(index, int) else 0
        delta = choice.get("delta")
        delta = delta if isinstance(delta, dict) else {}
        if index in self._finished:  # a stray delta after finish_reason: nothing to judge
            return False, any(v not in ("", None, []) for v in delta.values()), True
        text = delta.get("content")
        if (
            len(delta) == 1
            and isinstance(text, str)
            and self._splice is None
            and choice.get("finish_reason") is None
        ):
            return self._edit_content(index, choice, delta, self._guard(index).feed_content(text))
        guard = self._guard(index)
        changed = meaningful = False
        released = ""
        tool_calls = delta.get("tool_calls")
        if tool_calls or delta.get("function_call"):
            released = guard.structured_call()
            meaningful = True
            self._calls.note(index, tool_calls, delta.get("function_call"))
            if isinstance(tool_calls, list):
                changed |= self._index_tools(index, tool_calls)
        # vLLM may send the same reasoning under both keys: judge it once, edit every copy.
        rkeys = [k for k in REASONING_KEYS if isinstance(delta.get(k), str)]
        if rkeys:
            self._rkeys.setdefault(index, rkeys[0])
        reasoning = released + (guard.feed_reasoning(delta[rkeys[0]]) if rkeys else "")
        content_in = delta.get("content")
        content = guard.feed_content(content_in) if isinstance(content_in, str) else ""
        finish = choice.get("finish_reason")
        if finish in CALL_FINISHES:
            self._calls.claimed.add(index)
        if finish is not None:
            self._finished.add(index)
            rest_content, rest_reasoning = guard.finish()
            content += rest_content
            reasoning += rest_reasoning
            meaningful = True
        if guard.finding is not None:
            self._found(index, guard.finding)
            if finish is not None and self._tail is not None:
                self._tail.close(chunk, choice, published=True)
            # Prose before the markup in this very chunk may still go out, as a plain delta.
            finish = None
            choice["finish_reason"] = None
            changed = True
        content = self._unrepeated(index, content, ended=finish is not None)
        for key in rkeys or ([self._rkeys.get(index, "reasoning_content")] if reasoning else []):
            if delta.get(key) != reasoning:
                delta[key] = reasoning
                changed = True
        meaningful |= bool(reasoning)
        if isinstance(content_in, str) or content:
            if content != content_in:
                delta["content"] = content
                changed = True
                if choice.get("logprobs") is not None:
                    choice["logprobs"] = None  # they would spell out the held text
            meaningful |= bool(content)
            self._record(index, content)
        if self._splice is not None and "role" in delta:
            del delta["role"]
            changed = True
        if not changed:
            return False, meaningful, True
        choice["delta"] = delta
        empty = not any(v not in ("", None, []) for v in delta.values())
        return True, meaningful, not (empty and finish is None and not choice.get("logprobs"))

    def _edit_content(
        self, index: int, choice: dict[str, Any], delta: dict[str, Any], content: str
    ) -> tuple[bool, bool, bool]:
        """`_edit_choice` for most of a stream's chunks, a delta of content alone (no finish, no
        splice), once its guard has read it (`content` is what it publishes): what the general
        path does with one, in fewer steps."""
        guard = self._guards[index]
        changed = guard.finding is not None
        if guard.finding is not None:
            self._found(index, guard.finding)
            choice["finish_reason"] = None
        if content != delta["content"]:
            delta["content"] = content
            changed = True
            if choice.get("logprobs") is not None:
                choice["logprobs"] = None  # they would spell out the held text
        self._record(index, content)
        if not changed:
            return False, bool(content), True
        return True, bool(content), bool(content) or bool(choice.get("logprobs"))

    def _more_arguments(self, index: int, number: int) -> bool:
        """Whether a chunk of more arguments alone (`arguments_delta`) for call `number` of
        choice `index` is taken as `_edit_choice` takes it once the choice's guard knows of a
        structured call: nothing released, nothing edited, the call noted. False leaves the
        chunk untouched for the general path."""
        guard = self._guards.get(index)
        if guard is None or not guard.called or guard.finding is not None:
            return False
        if self._splice is not None or index in self._finished:
            return False
        self._calls.names.setdefault((index, number), None)  # a fragment with no name
        if self.tool_next.get(index, 0) <= number:
            self.tool_next[index] = number + 1
        return True

    def _index_tools(self, index: int, tool_calls: list[Any]) -> bool:
        """Track tool-call indices; in a splice, shift them past the calls already sent."""
        offset = self._splice.tool_offset.get(index, 0) if self._splice else 0
        for call in tool_calls:
            if isinstance(call, dict) and isinstance(call.get("index"), int):
                call["index"] += offset
                self.tool_next[index] = max(self.tool_next.get(index, 0), call["index"] + 1)
        return offset != 0

    def _unrepeated(self, index: int, content: str, ended: bool) -> str:
        """In a splice, the choice's content without its restatement of the client's prose."""
        if self._splice is None or index != self._splice.choice:
            return content
        repeat = self._splice.repeat
        return repeat.feed(content) + (repeat.finish() if ended else "")

    def _record(self, index: int, text: str) -> None:
        if not text:
            return
        size = self._published_len.get(index, 0)
        if size < self._hold_limit:
            kept = self._published.get(index)  # not setdefault: no list made a delta
            if kept is None:
                kept = self._published[index] = []
            kept.append(text[: self._hold_limit - size])
            self._published_len[index] = size + len(text)

    def _found(self, index: int, finding: Finding) -> None:
        if self.finding is None:
            self.finding, self.finding_choice = finding, index
            self._tail = Tail(index)

    @property
    def markup(self) -> str | None:
        """The leaking choice's markup (content only: reasoning markup is retried)."""
        guard = self._guards.get(self.finding_choice)
        if self.finding is None or self.finding.field != "content" or guard is None:
            return None
        return guard.markup

    def _drain(self, choices: list[Any]) -> None:
        """After a finding, keep reading the leaking choice so its name and family settle."""
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != self.finding_choice:
                continue
            guard = self._guards[self.finding_choice]
            delta = choice.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                guard.feed_content(delta["content"])
            if choice.get("finish_reason") is not None:
                self.settle()

    def settle(self) -> None:
        """Settle the finding's family and name from all the markup read so far."""
        guard = self._guards.get(self.finding_choice)
        if guard is not None and not guard.finished:
            guard.finish()
            if guard.finding is not None:
                self.finding = guard.finding
                self._finished.add(self.finding_choice)

"""The structured calls of a Chat Completions reply or stream, for the anomalies they show.

A choice that finished saying it called (`finish_reason` tool_calls or function_call) but made
no call, or a call naming no declared tool (or holding markup), is reported, never edited.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .detect import Anomaly, ToolSet, call_anomalies

CALL_FINISHES = ("tool_calls", "function_call")


def call_name(call: Any) -> str | None:
    """The function name of a tool call (or legacy function_call) object, if it has one."""
    fn = call.get("function", call) if isinstance(call, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    return name if isinstance(name, str) else None


def reply_anomalies(reply: Any, tools: ToolSet) -> list[Anomaly]:
    """Missing or malformed structured calls in a whole reply, choice by choice."""
    choices = reply.get("choices") if isinstance(reply, dict) else None
    found: list[Anomaly] = []
    for choice in choices if isinstance(choices, list) else []:
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            continue
        calls = message.get("tool_calls")
        names = [call_name(c) for c in calls] if isinstance(calls, list) else []
        if isinstance(message.get("function_call"), dict):
            names.append(call_name(message["function_call"]))
        claimed = choice.get("finish_reason") in CALL_FINISHES
        found += call_anomalies(names, claimed, tools)
    return found


@dataclass
class StreamCalls:
    """Structured calls by (choice, call index), their names as streamed (None until one is),
    and the choices that finished saying they called."""

    names: dict[tuple[int, int], str | None] = field(default_factory=dict)
    claimed: set[int] = field(default_factory=set)

    def note(self, index: int, tool_calls: Any, function_call: Any) -> None:
        """Keep each structured call's name as its fragments arrive."""
        calls = tool_calls if isinstance(tool_calls, list) else []
        numbered = [(c.get("index"), c) for c in calls if isinstance(c, dict)]
        if isinstance(function_call, dict):
            numbered.append((-1, function_call))
        for number, call in numbered:
            key = (index, number if isinstance(number, int) else 0)
            piece = call_name(call)
            before = self.names.get(key)
            self.names[key] = before if piece is None else (before or "") + piece

    def anomalies(self, choices: list[int], tools: ToolSet) -> list[Anomaly]:
        found: list[Anomaly] = []
        for index in choices:
            names = [name for (c, _), name in self.names.items() if c == index]
            found += call_anomalies(names, index in self.claimed, tools)
        return found

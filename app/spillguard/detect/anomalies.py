"""Silent failures next to a text leak: the structured call that is missing or malformed.

These are reported (counted, logged, recorded as incidents of their own kind) and never change a
reply in any mode: the text is not markup, so there is nothing to hold back or retry.

* `tool_calls_without_calls`: the turn ended with `finish_reason: "tool_calls"` (or Anthropic's
  `stop_reason: "tool_use"`) but carries no call; the call was lost between the engine's parser
  and the response.
* `markup_in_tool_name`: a structured call whose name holds markup, because the engine's parser
  cut the text in the wrong place (`read<arg_key>filePath</arg_key>…`).
* `undeclared_tool`: a structured call naming a tool the request did not declare.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from .tools import ToolSet


class AnomalyKind(StrEnum):
    CALLS_MISSING = "tool_calls_without_calls"
    MARKUP_IN_NAME = "markup_in_tool_name"
    UNDECLARED = "undeclared_tool"


@dataclass(frozen=True)
class Anomaly:
    kind: AnomalyKind
    tool_name: str | None = None


_MARKUP = frozenset('<>|[]{}"\n\r\t｜')
NAME_CAP = 200  # a reported name is cut here: it comes from the model


def call_anomalies(
    names: Iterable[str | None], calls_claimed: bool, tools: ToolSet
) -> list[Anomaly]:
    """The anomalies of one turn, given the names of its structured calls and whether it said
    it ended for a tool call. Names are only judged when the request declared function tools
    by name (built-in tools make calls of their own kinds)."""
    found: list[Anomaly] = []
    seen = False
    for name in names:
        seen = True
        if not tools.names or name is None or name in tools.names:
            continue
        kind = AnomalyKind.MARKUP_IN_NAME if _MARKUP & set(name) else AnomalyKind.UNDECLARED
        found.append(Anomaly(kind, name[:NAME_CAP]))
    if calls_claimed and not seen:
        found.append(Anomaly(AnomalyKind.CALLS_MISSING))
    return found

"""Repair mode's one rule for every wire: which calls, if any, answer a finding.

Pure. A finding is answered with calls only in mode REPAIR, only when its markup parses
completely into calls of declared tools with schema-valid arguments (`detect.read_calls`), and
only when the request would accept those calls from the model itself: never under
`tool_choice: none`, only the named function under a named `tool_choice`, and one call at most
when parallel calls are off. Never a response the upstream stores to be named later
(Responses' default `store`): the stored response would hold the markup, not the calls the
client answers, and a next turn naming it (`previous_response_id` with a `function_call_output`
for such a call) would be refused. Anything else is retried.
"""

from __future__ import annotations

from typing import Any

from .correction import Choice, tool_choice
from .detect import Call, Finding, ToolSet, read_calls
from .policy import Policy
from .settings import Mode
from .wire import Chaining


def one_call_only(body: dict[str, Any]) -> bool:
    """The request turned parallel calls off: Chat and Responses `parallel_tool_calls: false`,
    Messages `tool_choice.disable_parallel_tool_use: true`."""
    choice = body.get("tool_choice")
    disabled = isinstance(choice, dict) and choice.get("disable_parallel_tool_use") is True
    return disabled or body.get("parallel_tool_calls") is False


def may_repair(policy: Policy, body: dict[str, Any], chaining: Chaining | None) -> bool:
    """Whether a finding in the reply to `body` may be repaired at all (before any is read)."""
    if chaining is not None and chaining.stored(body):
        return False
    return policy.mode is Mode.REPAIR and tool_choice(body).choice is not Choice.NONE


def repair_calls(
    policy: Policy,
    body: dict[str, Any],
    tools: ToolSet,
    finding: Finding,
    markup: str | None,
    chaining: Chaining | None = None,
) -> tuple[Call, ...] | None:
    """The calls to answer `finding` with, or None to retry. `markup` is the finding's field
    from its start on (None: there is none to replace); more than the hold limit is not read."""
    if not may_repair(policy, body, chaining) or markup is None or len(markup) > policy.hold_limit:
        return None
    calls = read_calls(markup, finding.family, tools)
    if not calls:
        return None
    asked = tool_choice(body)
    if asked.choice is Choice.NAMED and any(c.name != asked.name for c in calls):
        return None
    if len(calls) > 1 and one_call_only(body):
        return None
    return calls

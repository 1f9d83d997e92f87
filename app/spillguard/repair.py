"""Repair mode's one rule for every wire: which calls, if any, answer a finding.

Pure. A finding is answered with calls only in mode REPAIR, only when its markup parses
completely into calls of declared tools with schema-valid arguments (`detect.read_calls`), and
only when the request would accept those calls from the model itself: never under `tool_choice:
none` or one that forces a hosted or custom tool, only the named function under a named
`tool_choice`, only listed tools under `allowed_tools`, never a free-form (custom) tool, one
call at most when parallel calls are off, and never for a request that declared legacy
`functions` (its client reads `function_call`, not `tool_calls`). Never a response the upstream
stores to be named later (Responses' default `store`): the stored response would hold the
markup, not the calls the client answers, and a next turn naming it (`previous_response_id` with
a `function_call_output` for such a call) would be refused. Anything else is retried.
"""

from __future__ import annotations

from typing import Any

from . import jsonread
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


def _name(entry: Any) -> str | None:
    """The function an entry of a tool list or a `tool_choice` names (Chat nests it)."""
    if not isinstance(entry, dict):
        return None
    fn = entry.get("function")
    name = fn.get("name") if isinstance(fn, dict) else entry.get("name")
    return name if isinstance(name, str) and name else None


def allowed(body: dict[str, Any]) -> frozenset[str] | None:
    """The function names `tool_choice` lets the model call: None for any declared one, an
    empty set when it forces something no function call answers (a hosted or custom tool)."""
    value = body.get("tool_choice")
    if not isinstance(value, dict):
        return None  # absent, or "auto", "required", "none" (refused before this)
    kind = value.get("type")
    if kind == "allowed_tools":  # Chat nests the list, Responses does not
        nested = value.get("allowed_tools")
        listed = nested.get("tools") if isinstance(nested, dict) else value.get("tools")
        entries = listed if isinstance(listed, list) else []
        kinds = ("function", None)
        return frozenset(
            n for t in entries if isinstance(t, dict) and t.get("type") in kinds and (n := _name(t))
        )
    if kind in ("auto", "any", "none", "required"):  # Anthropic's spellings as objects
        return None
    name = _name(value)
    if kind in ("function", "tool") and name is not None:
        return frozenset({name})
    return frozenset()


def free_form(body: dict[str, Any]) -> frozenset[str]:
    """The custom tools of Chat and Responses: they take free text, never JSON arguments
    (Anthropic's `custom` tools carry an `input_schema` and are ordinary ones)."""
    tools = jsonread.value(body.get("tools"))
    names = set()
    for t in tools if isinstance(tools, list) else []:
        if isinstance(t, dict) and t.get("type") == "custom" and "input_schema" not in t:
            nested = t.get("custom")
            name = _name(nested) if isinstance(nested, dict) else _name(t)
            if name is not None:
                names.add(name)
    return frozenset(names)


def may_repair(policy: Policy, body: dict[str, Any], chaining: Chaining | None) -> bool:
    """Whether a finding in the reply to `body` may be repaired at all (before any is read)."""
    if chaining is not None and chaining.stored(body):
        return False
    read = jsonread.value
    if read(body.get("functions")) is not None and read(body.get("tools")) is None:
        return False
    if allowed(body) == frozenset():
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
    names = allowed(body)
    if names is not None and any(c.name not in names for c in calls):
        return None
    if free_form(body) & {c.name for c in calls}:
        return None
    if len(calls) > 1 and one_call_only(body):
        return None
    return calls

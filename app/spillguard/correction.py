"""The corrective instruction a retry sends, chosen by what the request's `tool_choice` asks.

The retry never shows the model its markup (a leaked call left in the context is copied by
the model), so the instruction has to say what went wrong. What it asks for follows the
request: a named function is named, `required` says a tool must be called, and `none` asks for
an answer in prose, never for a call. Every variant is a setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .policy import Policy


class Choice(StrEnum):
    AUTO = "auto"
    REQUIRED = "required"
    NAMED = "named"
    NONE = "none"


@dataclass(frozen=True)
class ToolChoice:
    choice: Choice
    name: str | None = None  # the function a NAMED choice names


AUTO = ToolChoice(Choice.AUTO)
# String values, and the `type` or `mode` of an object value, in OpenAI's chat and Responses
# shapes, Anthropic's (`any`, `tool`) and legacy `function_call`.
KINDS = {
    "auto": Choice.AUTO,
    "required": Choice.REQUIRED,
    "any": Choice.REQUIRED,
    "none": Choice.NONE,
}


def _name(value: dict[str, Any]) -> str | None:
    fn = value.get("function")
    name = fn.get("name") if isinstance(fn, dict) else value.get("name")
    return name if isinstance(name, str) and name else None


def tool_choice(body: dict[str, Any]) -> ToolChoice:
    """What the request asked of the model's tool use (`auto` when it said nothing readable)."""
    value = body.get("tool_choice", body.get("function_call"))
    if isinstance(value, str):
        return ToolChoice(KINDS.get(value, Choice.AUTO))
    if not isinstance(value, dict):
        return AUTO
    kind = value.get("type")
    if kind == "allowed_tools":  # chat nests the mode, Responses does not
        nested = value.get("allowed_tools")
        mode = nested.get("mode") if isinstance(nested, dict) else value.get("mode")
        return ToolChoice(KINDS.get(str(mode), Choice.AUTO))
    name = _name(value)
    if kind in ("function", "custom", "tool", None) and name is not None:
        return ToolChoice(Choice.NAMED, name)
    return ToolChoice(KINDS.get(str(kind), Choice.AUTO))


def correction(policy: Policy, body: dict[str, Any]) -> str:
    """The instruction for a retry of `body`."""
    asked = tool_choice(body)
    if asked.choice is Choice.NONE:
        return policy.correction_none
    if asked.choice is Choice.REQUIRED:
        return policy.correction_required
    if asked.choice is Choice.NAMED and asked.name is not None:
        return policy.correction_named.replace("{name}", asked.name)
    return policy.correction

"""Repair: read a finding's markup into the structured calls the model meant, or refuse.

`read_calls(markup, family, tools)` runs the finding's family parser over the markup (the text
from `Finding.start` to the end of the turn's field). It answers only when the markup is read
completely, into one or more calls, each naming a declared tool, each with arguments that
validate against that tool's schema once bare-text values are typed by it; otherwise None, and
the caller retries as without repair. It never raises.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from . import schema, values
from .calls_invoke import INVOKE_PARSERS
from .calls_json import JSON_PARSERS
from .calls_python import PYTHON_PARSERS
from .calls_tokens import TOKEN_PARSERS
from .calls_xml import XML_PARSERS
from .reading import Draft, NoParse, Parser
from .tools import ToolSet

# Families not here have no regular structure to read without guessing, and are retried.
PARSERS: Mapping[str, Parser] = {
    **JSON_PARSERS,
    **TOKEN_PARSERS,
    **XML_PARSERS,
    **INVOKE_PARSERS,
    **PYTHON_PARSERS,
}


@dataclass(frozen=True)
class Call:
    name: str  # a tool the request declared
    arguments: str  # compact JSON text of an object, typed and validated by the tool's schema


def _settle(draft: Draft, tools: ToolSet) -> Call | None:
    """The call a draft makes, when it names a declared tool and its arguments, typed by that
    tool's schema, validate against it."""
    if draft.name not in tools.names:
        return None
    declared = tools.schemas.get(draft.name)
    arguments = values.typed(draft.arguments, declared)
    if declared is not None and not schema.valid(arguments, declared):
        return None
    try:
        text = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        text.encode("utf-8")  # a lone surrogate from a JSON escape cannot go on the wire
    except (TypeError, ValueError, RecursionError):
        return None
    return Call(draft.name, text)


def read_calls(markup: str, family: str, tools: ToolSet) -> tuple[Call, ...] | None:
    """The calls `markup` of `family` makes, or None unless it reads completely into at least
    one call, each declared and valid against its schema."""
    parser = PARSERS.get(family)
    if parser is None or not tools.names:
        return None
    try:
        drafts = parser(markup, tools)
    except (NoParse, RecursionError):
        return None
    calls = []
    with schema.pattern_budget():  # one budget for all the leak's calls
        for draft in drafts:
            call = _settle(draft, tools)
            if call is None:
                return None
            calls.append(call)
    return tuple(calls) or None

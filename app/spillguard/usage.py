"""The tokens an upstream says it billed for one reply, read from its `usage` object.

Chat Completions counts `prompt_tokens` and `completion_tokens`; the Responses and Messages APIs
count `input_tokens` and `output_tokens`. Each may add `total_tokens`. A count that is missing
is derived from the total and the other count; with fewer than two counts there is no usage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Usage:
    input_tokens: int
    output_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens
        )


def _count(usage: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def usage_of(value: Any) -> Usage | None:
    """The usage in a `usage` object as an upstream wrote it, or None."""
    if not isinstance(value, dict):
        return None
    given_in = _count(value, "prompt_tokens", "input_tokens")
    given_out = _count(value, "completion_tokens", "output_tokens")
    total = _count(value, "total_tokens")
    if given_in is None and total is not None and given_out is not None:
        given_in = total - given_out
    if given_out is None and total is not None and given_in is not None:
        given_out = total - given_in
    if given_in is None or given_out is None or given_in < 0 or given_out < 0:
        return None
    return Usage(given_in, given_out)


def reply_usage(reply: Any) -> Usage | None:
    """The usage of a whole reply (its top-level `usage`), in any of the three APIs."""
    return usage_of(reply.get("usage")) if isinstance(reply, dict) else None

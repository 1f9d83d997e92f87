"""The `[[rules]]`, compiled: the policy a request gets from its upstream and its model.

Rules are tried in the order the file gives them; the first whose `model` glob matches the
request's model (fnmatch syntax, any case: `*`, `?`, `[abc]`; a request without a model is
matched as "") and whose `upstream`, when it names one, is the request's, sets the policy
fields it names. The fields it leaves out are the options'. No later rule is consulted.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from fnmatch import translate
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .policy import Mode, Policy

if TYPE_CHECKING:
    from .settings import Settings

Matcher = Callable[[str], "re.Match[str] | None"]


class Rule(BaseModel):
    """One `[[rules]]`: for requests whose model matches `model` (a glob, any case) and, when
    given, that go to `upstream`, the policy fields it sets; the first matching rule wins."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = "*"
    upstream: str | None = None
    mode: Mode | None = None
    hold_limit: Annotated[int, Field(ge=1024)] | None = None
    correction: str | None = None
    correction_required: str | None = None
    correction_named: str | None = None
    correction_none: str | None = None

    @property
    def sets(self) -> dict[str, Any]:
        """The policy fields this rule sets."""
        return {k: v for k, v in self if k not in ("model", "upstream") and v is not None}

    @model_validator(mode="after")
    def _sets_something(self) -> Rule:
        if not self.sets:
            raise ValueError("sets nothing: give mode, hold_limit or a correction")
        return self


class Rules:
    def __init__(self, settings: Settings) -> None:
        self.default = Policy.of(settings)
        self.policies = tuple(replace(self.default, **r.sets) for r in settings.rules)
        self._rules: tuple[tuple[Matcher, str | None, Policy], ...] = tuple(
            (re.compile(translate(r.model), re.IGNORECASE).match, r.upstream, policy)
            for r, policy in zip(settings.rules, self.policies, strict=True)
        )

    def policy(self, upstream: str, model: str | None) -> Policy:
        text = model or ""
        for matches, only, policy in self._rules:
            if (only is None or only == upstream) and matches(text):
                return policy
        return self.default

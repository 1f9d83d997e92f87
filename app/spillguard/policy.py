"""What one request is held to: its mode, its hold limit and its retry's instructions.

The settings give every request the same `Policy` today; the decision reads only this record,
so a policy chosen per model, per upstream or per request changes nothing below the handlers.
"""

from __future__ import annotations

from dataclasses import dataclass

from .settings import Mode, Settings


@dataclass(frozen=True)
class Policy:
    mode: Mode
    hold_limit: int
    correction: str
    correction_required: str
    correction_named: str  # `{name}` is replaced by the function tool_choice names
    correction_none: str

    @classmethod
    def of(cls, settings: Settings) -> Policy:
        return cls(
            mode=settings.mode,
            hold_limit=settings.hold_limit,
            correction=settings.correction,
            correction_required=settings.correction_required,
            correction_named=settings.correction_named,
            correction_none=settings.correction_none,
        )

"""Spans of time as an operator writes them: 90s, 30m, 12h, 30d, 2w (one number, one unit)."""

from __future__ import annotations

import re
from datetime import timedelta

SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_span(text: str) -> timedelta | None:
    """The span `text` names, or None when it is not one."""
    match = SPAN.match(text)
    if not match:
        return None
    return timedelta(**{UNITS[match.group(2).lower()]: float(match.group(1))})

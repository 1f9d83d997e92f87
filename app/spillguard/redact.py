"""Redaction: the configured keys, bearer tokens and `sk-`-style keys, out of any text.

Every log line, metric label and incident row goes through a `Redactor`, as a safety net: no
outcome holds a key in the first place.
"""

from __future__ import annotations

import re
from typing import Any

from .settings import Settings

REDACTED = "[redacted]"
MIN_KEY = 4  # shorter configured keys are not searched for (they would blot out ordinary text)
TOKENS = re.compile(
    r"(?i)(?P<bearer>\bbearer\s+)[^\s\"',;]{6,}"
    r"|\b(?P<prefix>sk-|xai-|sk_)[A-Za-z0-9][A-Za-z0-9_\-]{7,}"
)


class Redactor:
    """Replaces the configured keys, bearer tokens and `sk-`-style keys in text."""

    def __init__(self, keys: list[str]) -> None:
        keys = sorted({k for k in keys if len(k) >= MIN_KEY}, key=len, reverse=True)
        self.keys = re.compile("|".join(re.escape(k) for k in keys)) if keys else None

    @classmethod
    def from_settings(cls, settings: Settings) -> Redactor:
        keys = [k.get_secret_value() for k in settings.proxy_keys]
        if settings.upstream_key is not None:
            keys.append(settings.upstream_key.get_secret_value())
        return cls(keys)

    def __call__(self, text: str) -> str:
        if self.keys is not None:
            text = self.keys.sub(REDACTED, text)
        return TOKENS.sub(self._token, text)

    @staticmethod
    def _token(match: re.Match[str]) -> str:
        return (match.group("bearer") or match.group("prefix") or "") + REDACTED

    def deep(self, value: Any) -> Any:
        """`value` with every string in it (and in nested lists and dicts) redacted."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {k: self.deep(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.deep(v) for v in value]
        return value

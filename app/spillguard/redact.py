"""Redaction: the configured keys, bearer tokens and `sk-`-style keys, out of any text.

Every log line, metric label and incident row goes through a `Redactor`, as a safety net: no
outcome holds a key in the first place.
"""

from __future__ import annotations

import json
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
        # The keys themselves, to look for first: a substring test per key costs a tenth of one
        # search of their regex, and most text holds none.
        self.secrets = tuple(keys)
        # A key that JSON writes otherwise (a quote, a backslash, a control character) cannot
        # be found in JSON text: `finds_nothing` never vouches for that text.
        self.escaped = any(json.dumps(k, ensure_ascii=False)[1:-1] != k for k in keys)

    @classmethod
    def from_settings(cls, settings: Settings) -> Redactor:
        return cls(settings.secrets())  # proxy keys, and every upstream's injected key

    def __call__(self, text: str) -> str:
        if self.keys is not None and any(map(text.__contains__, self.secrets)):
            text = self.keys.sub(REDACTED, text)
        # Every token starts with "bearer", "sk-", "sk_" or "xai-" in some letter case; in ASCII
        # text, case-insensitive matching is `str.lower`, so text without them cannot match
        # (non-ASCII text, where `re` also folds U+017F to "s" and U+212A to "k", always runs
        # the regex).
        if _no_token_words(text):
            return text
        return TOKENS.sub(self._token, text)

    def finds_nothing(self, text: str) -> bool:
        """True when `text` holds nothing to redact, in itself or in any string that JSON text
        spells (the tests hold it to `__call__` and `deep`): a JSON log line that passes is
        written as it is."""
        if self.keys is not None and (self.escaped or any(map(text.__contains__, self.secrets))):
            return False
        # In JSON text a bearer token can hide behind an escape (`bearer\\tTOKEN`), so only the
        # words themselves vouch, and only in ASCII text (see `__call__`).
        return _no_token_words(text)

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


def _no_token_words(text: str) -> bool:
    """ASCII text without "bearer", "sk-", "sk_" or "xai-" in any letter case: no token."""
    if not text.isascii():
        return False
    low = text.lower()
    # A one-letter test is a memchr, a word's a slower scan: look for each word only where its
    # rarest letter is.
    if "k" in low and ("sk-" in low or "sk_" in low):
        return False
    if "x" in low and "xai-" in low:
        return False
    return "b" not in low or "bearer" not in low

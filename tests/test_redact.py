"""The redactor: configured keys and token shapes out of any text, the fast path included."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from spillguard.redact import REDACTED, TOKENS, Redactor
from spillguard.settings import Settings


def slow(text: str) -> str:
    """The redaction without the prefilter: every text through the token regex."""
    return TOKENS.sub(Redactor._token, text)


PIECES = st.sampled_from(
    ["bearer ", "Bearer  ", "BEARER\t", "sk-", "SK-", "sk_", "xai-", "XAI-", "ſk-", "\u212a"]
)
TEXT = st.lists(
    st.one_of(PIECES, st.text(max_size=12), st.from_regex(r"[A-Za-z0-9_\-]{0,14}", fullmatch=True)),
    max_size=8,
).map("".join)


@settings(max_examples=400)
@given(TEXT)
def test_the_prefilter_never_changes_the_result(text: str) -> None:
    assert Redactor([])(text) == slow(text)


def test_tokens_in_ascii_and_non_ascii_text_are_redacted() -> None:
    redact = Redactor([])
    assert redact("auth: Bearer abcdef123456") == f"auth: Bearer {REDACTED}"
    assert redact("key sk-abcdefghij1 used") == f"key sk-{REDACTED} used"
    assert redact("clé XAI-abcdefghij1 — utilisée") == f"clé XAI-{REDACTED} — utilisée"
    assert redact("nothing secret here") == "nothing secret here"


def test_every_injected_upstream_key_is_redacted(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TEST_REDACT_XAI_KEY", "plain-upstream-secret-1")

    s = Settings(
        upstream_key="default-injected-key",
        upstreams={"xai": {"url": "xai", "api_key_env": "TEST_REDACT_XAI_KEY"}},
    )
    redact = Redactor.from_settings(s)
    line = "sent default-injected-key and plain-upstream-secret-1"
    assert redact(line) == f"sent {REDACTED} and {REDACTED}"

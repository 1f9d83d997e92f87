"""The redactor: configured keys and token shapes out of any text, the fast path included."""

from __future__ import annotations

import json

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


KEY_SETS = st.sampled_from(
    [[], ["plain-secret-key"], ["secret-key", "key-9876", "SECRET"], ["sk-abcdefgh12", "abc"]]
)
KEYED_TEXT = st.lists(
    st.one_of(
        st.sampled_from(["plain-secret-key", "secret-key-9876", "SECRET", "sk-abcdefgh12", "-key"]),
        PIECES,
        st.text(max_size=8),
    ),
    max_size=8,
).map("".join)


@settings(max_examples=400)
@given(KEY_SETS, KEYED_TEXT)
def test_the_key_prefilter_never_changes_the_result(keys: list[str], text: str) -> None:
    """Text is searched for the keys' regex only when it holds one of them: the same result
    as every text through the regex, then through the token regex."""
    redact = Redactor(keys)
    keyless = redact.keys.sub(REDACTED, text) if redact.keys is not None else text
    assert redact(text) == slow(keyless)


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


KEYS = st.sampled_from([[], ["plain-secret-key"], ['quo"ted-key', "plain-secret-key"]])
VALUE = st.one_of(
    st.none(),
    st.integers(),
    TEXT,
    st.sampled_from(["plain-secret-key", 'quo"ted-key', "Bearer\tabcdef123456", "é sk-abcdefgh12"]),
)
FIELDS = st.dictionaries(st.sampled_from(["a", "b", "excerpt"]), st.one_of(VALUE, st.lists(VALUE)))


@settings(max_examples=400)
@given(KEYS, FIELDS)
def test_json_text_it_vouches_for_needs_no_redaction(keys: list[str], fields: dict) -> None:  # type: ignore[type-arg]
    """`finds_nothing` on a JSON line lets the line be written as dumped: wherever it says so,
    redacting every string first (and the text after) would have changed nothing."""
    redact = Redactor(keys)
    text = json.dumps(fields, ensure_ascii=False)
    if redact.finds_nothing(text):
        assert redact(json.dumps(redact.deep(fields), ensure_ascii=False)) == text


def test_a_bearer_token_behind_a_json_escape_is_not_vouched_for() -> None:
    redact = Redactor([])
    assert not redact.finds_nothing(json.dumps({"h": "Bearer\tabcdef123456"}))
    assert not redact.finds_nothing(json.dumps({"h": "caf\u00e9"}, ensure_ascii=False))
    assert not Redactor(['quo"ted-key']).finds_nothing("{}")
    assert redact.finds_nothing('{"request_id": "sg-1", "status": 200}')

"""[[rules]]: tried in order, the first whose model glob and upstream match sets the policy."""

from __future__ import annotations

import pytest

from spillguard.rules import Rules
from spillguard.settings import Mode, Settings

RULES = [
    {"model": "grok-code-*", "mode": "observe"},  # 1
    {"model": "grok-*", "upstream": "xai", "mode": "fail"},  # 2
    {"model": "grok-*", "mode": "repair"},  # 3
    {"model": "deepseek-*", "hold_limit": 65536},  # 4
    {"model": "o?-mini", "mode": "fail"},  # 5
    {"model": "gpt-4[o.]*", "correction": "Call the tool."},  # 6
    {"upstream": "xai", "mode": "fail", "correction_none": "Prose only."},  # 7: any model
]
SETTINGS = Settings(mode="retry", hold_limit=131072, upstreams={"xai": {"url": "xai"}}, rules=RULES)


@pytest.mark.parametrize(
    ("upstream", "model", "rule"),
    [
        ("xai", "grok-code-fast-1", 1),  # 1 and 2 and 3 match: the first wins
        ("xai", "grok-4", 2),
        ("default", "grok-4", 3),  # 2 is for xai only
        ("xai", "GROK-4", 2),  # any case
        ("default", "grok-", 3),  # * matches nothing too
        ("default", "xgrok-4", None),  # the glob matches the whole model
        ("default", "deepseek-chat", 4),
        ("xai", "deepseek-chat", 4),  # before 7
        ("default", "o3-mini", 5),  # ? is one character
        ("default", "o10-mini", None),
        ("default", "gpt-4o-mini", 6),  # [o.] is one of the two
        ("default", "gpt-4.1", 6),
        ("default", "gpt-4-turbo", None),
        ("xai", "gpt-4-turbo", 7),
        ("xai", None, 7),  # no model is matched as "", which * matches
        ("default", None, None),
        ("default", "", None),
    ],
)
def test_the_first_matching_rule_wins(upstream: str, model: str | None, rule: int | None) -> None:
    rules = Rules(SETTINGS)
    expected = rules.default if rule is None else rules.policies[rule - 1]
    assert rules.policy(upstream, model) is expected


def test_a_rule_sets_only_what_it_names() -> None:
    rules = Rules(SETTINGS)
    default = rules.default
    assert (default.mode, default.hold_limit) == (Mode.RETRY, 131072)
    deepseek = rules.policy("default", "deepseek-chat")
    assert (deepseek.mode, deepseek.hold_limit) == (Mode.RETRY, 65536)  # the options' mode
    assert deepseek.correction == default.correction
    xai = rules.policy("xai", "gpt-4-turbo")
    assert (xai.mode, xai.correction_none, xai.correction) == (
        Mode.FAIL,
        "Prose only.",
        default.correction,
    )
    assert rules.policy("default", "gpt-4o").correction == "Call the tool."


def test_no_rules_is_the_options_policy() -> None:
    rules = Rules(Settings(mode="observe"))
    assert rules.policies == ()
    assert rules.policy("default", "anything").mode is Mode.OBSERVE

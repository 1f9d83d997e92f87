"""Repair over spillguard's own leak corpus: every leak whose markup names a declared tool in a
complete structure is repaired, into calls naming the case's tool, the same whether the turn
arrives whole, in halves or a character at a time; the rest are refused for a stated reason."""

from __future__ import annotations

import pytest

from spillguard.detect import Call, TurnScanner, read_calls
from tests.test_detect_corpus import LEAKS, TOOLS, Leak

# The leaks repair must refuse, and why: each is still caught and retried.
NOT_REPAIRED = {
    "deepseek-11-v31-undeclared-glued": "undeclared tool",
    "deepseek-20-v3-undeclared-glued": "undeclared tool",
    "dsml-20-undeclared": "undeclared tool",
    "kimi-13-undeclared": "undeclared tool",
    "mistral-09-undeclared": "undeclared tool",
    "pythonic-07-python-start-undeclared": "undeclared tool",
    "harmony-12-undeclared": "undeclared tool",
    "xai-08-undeclared": "undeclared tool",
    "minimax-10-m3-undeclared": "undeclared tool",
    "command_r-06-undeclared": "undeclared tool",
    "gemma-06-undeclared": "undeclared tool",
    "gigachat-05-undeclared": "undeclared tool",
    "internlm-04-undeclared": "undeclared tool",
    "seed-04-undeclared": "undeclared tool",
    "longcat-04-undeclared": "undeclared tool",
    "lfm2-04-undeclared": "undeclared tool",
    "function_gemma-04-undeclared": "undeclared tool",
    "kimi_k3-04-undeclared": "undeclared tool",
    "k2_horizon-04-undeclared": "undeclared tool",
    "dots-05-undeclared": "undeclared tool",
    "harmony-04-no-recipient": "no recipient: no name to call",
    "harmony-14-no-recipient-glued": "no recipient: no name to call",
    "harmony-15-reasoning-no-recipient": "no recipient: no name to call",
    "harmony-19-tokens-stripped": "special tokens stripped: no frame around the arguments",
    "dsml-15-drift-tool-as-tag": "tool written as the tag: no closer, untyped attributes",
    "dsml-16-drift-tool-as-tag-glued": "tool written as the tag: no closer, untyped attributes",
    "qwen3_coder-07-no-closers": "no closers: where the last value ends is a guess",
}


def repaired(case: Leak, step: int = 0) -> tuple[Call, ...] | None:
    turn = TurnScanner(TOOLS)
    feed = turn.feed_content if case.field == "content" else turn.feed_reasoning
    text = case.text
    pieces = [text[i : i + step] for i in range(0, len(text), step)] if step else [text]
    for piece in pieces:
        feed(piece)
    turn.finish()
    assert turn.finding is not None and turn.markup is not None
    return read_calls(turn.markup, turn.finding.family, TOOLS)


def test_the_refusals_are_corpus_cases() -> None:
    assert set(NOT_REPAIRED) <= {case.id for case in LEAKS}


@pytest.mark.parametrize("case", LEAKS, ids=[case.id for case in LEAKS])
def test_corpus_leak_repair(case: Leak) -> None:
    calls = repaired(case)
    if case.id in NOT_REPAIRED:
        assert calls is None, NOT_REPAIRED[case.id]
        return
    assert calls is not None
    if case.tool is not None:
        assert calls[0].name == case.tool
    assert repaired(case, step=1) == calls
    assert repaired(case, step=max(1, len(case.text) // 2)) == calls

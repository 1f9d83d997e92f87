"""TurnScanner.markup: the finding's whole markup from Finding.start, in content or reasoning,
for markers and whole-answer blobs, the same however the turn was cut; None past the hold
limit."""

from __future__ import annotations

from spillguard.detect import TurnScanner, declared_tools

TOOLS = declared_tools(
    {"tools": [{"type": "function", "function": {"name": "read_file", "parameters": {}}}]}
)
PROSE = "I will open the file first.\n"
MARKUP = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.txt"}}\n</tool_call>'


def turn_of(
    content: str = "", reasoning: str = "", limit: int = 4096, step: int = 0
) -> TurnScanner:
    turn = TurnScanner(TOOLS, hold_limit=limit)
    for text, feed in ((reasoning, turn.feed_reasoning), (content, turn.feed_content)):
        pieces = [text[i : i + step] for i in range(0, len(text), step)] if step else [text]
        for piece in pieces:
            feed(piece)
    turn.finish()
    return turn


def test_markup_of_content_from_the_finding_start() -> None:
    turn = turn_of(PROSE + MARKUP)
    assert turn.finding is not None and turn.finding.start == len(PROSE)
    assert turn.markup == MARKUP


def test_markup_is_readable_before_finish() -> None:
    turn = TurnScanner(TOOLS, hold_limit=4096)
    turn.feed_content(PROSE + MARKUP[:20])
    assert turn.certain
    assert turn.markup == MARKUP[:20]
    turn.feed_content(MARKUP[20:])
    assert turn.markup == MARKUP


def test_markup_of_a_blob_and_of_reasoning() -> None:
    blob = '{"name": "read_file", "arguments": {"path": "b"}}'
    turn = turn_of(blob)
    assert turn.finding is not None and turn.finding.family == "json"
    assert turn.markup == blob
    kimi = (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.read_file:0"
        '<|tool_call_argument_begin|>{"path": "c"}<|tool_call_end|><|tool_calls_section_end|>'
    )
    turn = turn_of(reasoning="Thinking about it. " + kimi)
    assert turn.finding is not None and turn.finding.field == "reasoning"
    assert turn.markup == kimi


def test_no_finding_no_markup() -> None:
    assert turn_of("Plain words, nothing to repair.").markup is None


def test_markup_past_the_hold_limit_is_none() -> None:
    long_markup = MARKUP.replace("a.txt", "x" * 5000)
    assert turn_of(PROSE + long_markup, limit=4096).markup is None
    assert turn_of(PROSE + long_markup, limit=8192).markup == long_markup


def test_markup_beyond_the_excerpt_limit_is_whole() -> None:
    big = MARKUP.replace("a.txt", "y" * 70_000)  # past the 64 KiB excerpt
    turn = turn_of(PROSE + big, limit=256 * 1024, step=1000)
    assert turn.markup == big
    assert turn.finding is not None and len(turn.finding.excerpt) == 64 * 1024


def test_chunks_give_the_same_markup() -> None:
    whole = turn_of(PROSE + MARKUP).markup
    for step in (1, 2, 3, 7, 16):
        assert turn_of(PROSE + MARKUP, step=step).markup == whole

"""Property tests (hypothesis) for the scanner, as issue 2 asks:

1. for any text and any way of cutting it into deltas, the streamed result equals the whole-text
   result;
2. the published text of a reply with no finding equals the input exactly;
3. with a finding, the published text is exactly the text before the markup, so it contains no
   part of the markup.

Texts are drawn from a mix of arbitrary characters and fragments that matter to the scanner:
markers (with their spelling drift), fences, quotes, indentation, newlines, JSON and pythonic
pieces and the declared tool names, so that findings, near misses and held prefixes are common.
"""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from spillguard.detect import NO_TOOLS, Finding, Scanner, TurnScanner, declared_tools, inspect_text
from spillguard.detect.scanner import DEFAULT_MARKUP_LIMIT

TOOLS = declared_tools(
    {
        "tools": [
            {
                "type": "function",
                "function": {"name": "get_weather", "parameters": {"properties": {"city": {}}}},
            },
            {"type": "function", "name": "search_docs", "parameters": {"properties": {"q": {}}}},
            {"type": "function", "function": {"name": "route_to"}},
        ]
    }
)

MARKER_PIECES = [
    "<tool_call>",
    "</tool_call>",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁sep｜>",
    "<｜tool calls begin｜>",
    "<｜tool\\_calls\\_begin｜>",
    "<｜DSML｜tool_calls>",
    "<｜｜DSML｜｜function_calls>",
    '<|DSML|invoke name="',
    "[TOOL_CALLS]",
    "[ARGS]",
    "[CALL_ID]",
    "<|python_tag|>",
    "<|python_start|>",
    "<|channel|>",
    "<|start|>assistant",
    " to=functions.",
    '<xai:function_call name="',
    "<|tool_call|>",
    "functools[",
    "<minimax:tool_call>",
    "<tool_calls>",
    "<|action_start|>",
    "<seed:tool_call>",
    "<longcat_tool_call>",
    "<TOOLCALL>",
    "<|START_ACTION|>",
    "<function=",
    "<|tool_calls_section_begin|>",
    "<|tool_call_begin|>functions.",
    "<|tool_call>",
    "call:get_weather{",
    "<|channel|>commentary",
    "<|channel|>final<|message|>",
    "<|channel|>analysis",
    "<|message|>",
    "]<]minimax[>[",
    "<|DSML|",
    "|DSML|invoke",
    "‖",
    "count",
    '<invoke name="get_weather">',
    '<tool_call>{"name": "get_weather"',
    '{"name": "get_weather"',
    "<function=get_weather>",
    "</think>",
    "[/THINK]",
    "<|END_THINKING|>",
    "◁/think▷",
    "<pre>",
    "</pre>",
    "<code>",
    "Action:",
    "<|function_call|>",
    "<|tool_call_argument_begin|>",
    "<｜",
    "｜>",
    "｜",
    "▁",
    "\\_",
    "\\",
    "<",
    "<|",
    "<tool",
    "[",
    "f",
    "func",
]
LAYOUT_PIECES = [
    '"""',
    "'''",
    "::\n",
    ".. code-block:: xml\n",
    '"',
    "\n",
    "\n",
    "\n\n",
    "\r\n",
    "```",
    "```json\n",
    "\n```\n",
    "~~~",
    "~~~~\n",
    "> ",
    ">",
    " ",
    "   ",
    "    ",
    "\t",
    "`",
    '"""""',
    "1. ",
    "~",
]
JSON_PIECES = [
    "{",
    "}",
    "[",
    "]",
    '"',
    ": ",
    ", ",
    ";",
    '"name"',
    '"arguments"',
    '"tool"',
    '"args"',
    '"type"',
    '"function"',
    '"id"',
    '"tool_calls"',
    '"city"',
    '"Porto"',
    '"get_weather"',
    "{}",
    "get_weather",
    "search_docs",
    "route_to",
    "(",
    ")",
    "'",
    "=",
    "7",
    '{"name": "get_weather", "arguments": {"city": "Porto"}}',
    '{"tool": "search_docs", "args": {}}',
    "[get_weather(city='Porto')]",
    '```json\n{"name": "route_to", "arguments": {}}\n```',
]
# The long piece carries events past the window read around an earlier trigger (`events.WINDOW`).
PROSE_PIECES = ["Hello", "Let me check.", "ok", "the ", "é", "日本", "<div>", "</p>", "x" * 90]

fragment = st.one_of(
    st.sampled_from(MARKER_PIECES),
    st.sampled_from(LAYOUT_PIECES),
    st.sampled_from(JSON_PIECES),
    st.sampled_from(PROSE_PIECES),
    st.text(max_size=4),
)
BLOBS = [
    '{"name": "get_weather", "arguments": {"city": "Porto"}}',
    '{"name": "search_docs", "arguments": "{\\"q\\": \\"x\\"}"}',
    '{"tool": "route_to", "args": {}}',
    '[{"tool_name": "route_to", "input": {}}, {"name": "get_weather", "parameters": {}}]',
    '{"id": "c1", "type": "function", "function": {"name": "search_docs", "arguments": "{}"}}',
    '{"tool_calls": [{"name": "route_to", "arguments": {}}]}',
    '{"toolCalls": [{"name": "route_to", "arguments": {}}]}',
    '{"tool_call": {"name": "route_to", "arguments": {}}}',
    '{"id": "c2", "type": "get_weather", "city": "Lyon"}',
    '{"name": "get_weather", "parameters": {}}; {"name": "route_to", "parameters": {}}',
    "[get_weather(city='Porto')]",
    "[route_to()]",
    "[search_docs(q=['a', 'b'])]",
    '{"name": "Alice", "age": 3}',
    '{"name": "book_flight", "arguments": {}}',
]
mixed = st.lists(fragment, max_size=24).map("".join)
blobby = st.tuples(
    st.sampled_from(["", " ", "\n", "```json\n", "```\n", "Note: ", "<"]),
    st.sampled_from(BLOBS),
    st.sampled_from(["", "\n", "\n```", "\n```\n", " ok", ";", "}", "\n<tool_call>"]),
    st.lists(fragment, max_size=3).map("".join),
).map("".join)
texts = st.one_of(mixed, mixed, blobby)
tool_sets = st.sampled_from([TOOLS, NO_TOOLS])


@st.composite
def cut_texts(draw: st.DrawFn, source: st.SearchStrategy[str] = texts) -> tuple[str, list[str]]:
    """A text of `source` and one way of cutting it into deltas (empty deltas included)."""
    text = draw(source)
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=12)))
    bounds = [0, *cuts, len(text)]
    return text, [text[a:b] for a, b in itertools.pairwise(bounds)]


def run(chunks: list[str], tools=TOOLS, **kwargs) -> tuple[str, Finding | None]:
    scanner = Scanner(tools, **kwargs)
    out = [scanner.feed(c) for c in chunks]
    out.append(scanner.finish())
    return "".join(out), scanner.finding


PROPS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# Once a regression: a delta holding both the prose and the marker line must still publish the
# prose (the blob probe must not pin the published text at 0).
PROSE_WITH_MARKER = ("Let me check.\n<tool_call>", ["Let me check.\n", "<tool_call>"])


# -- (1) streamed equals whole --------------------------------------------------------------


@PROPS
@given(case=cut_texts(), tools=tool_sets)
def test_streamed_finding_equals_whole_text_finding(
    case: tuple[str, list[str]], tools: object
) -> None:
    text, chunks = case
    assert run(chunks, tools)[1] == inspect_text(text, tools)


@PROPS
@given(case=cut_texts(), blobs=st.booleans())
def test_streamed_equals_whole_without_blob_probe(case: tuple[str, list[str]], blobs: bool) -> None:
    # With no declared names (or with blobs off, as for reasoning) the published text agrees too.
    text, chunks = case
    tools = NO_TOOLS if blobs else TOOLS
    assert run(chunks, tools, blobs=blobs) == run([text], tools, blobs=blobs)


@PROPS
@example(case=PROSE_WITH_MARKER, tools=TOOLS)
@given(case=cut_texts(), tools=tool_sets)
def test_streamed_equals_whole_text(case: tuple[str, list[str]], tools: object) -> None:
    text, chunks = case
    assert run(chunks, tools) == run([text], tools)


# -- (2) no finding: the input exactly -------------------------------------------------------


@PROPS
@given(case=cut_texts(), tools=tool_sets)
def test_no_finding_publishes_the_input_exactly(case: tuple[str, list[str]], tools: object) -> None:
    text, chunks = case
    for way in (chunks, [text]):
        published, finding = run(way, tools)
        if finding is None:
            assert published == text


# -- (3) a finding: the text before the markup, and nothing of the markup --------------------


@PROPS
@given(case=cut_texts(), tools=tool_sets)
def test_finding_never_publishes_markup(case: tuple[str, list[str]], tools: object) -> None:
    text, chunks = case
    for way in (chunks, [text]):
        published, finding = run(way, tools)
        if finding is not None:
            assert finding.excerpt == text[finding.start :][:DEFAULT_MARKUP_LIMIT]
            # What is published is prose before the markup, never a character of it.
            assert text[: finding.start].startswith(published)


@PROPS
@given(case=cut_texts(), blobs=st.booleans())
def test_finding_publishes_exactly_the_prose_without_blob_probe(
    case: tuple[str, list[str]], blobs: bool
) -> None:
    text, chunks = case
    tools = NO_TOOLS if blobs else TOOLS
    for way in (chunks, [text]):
        published, finding = run(way, tools, blobs=blobs)
        if finding is not None:
            assert published == text[: finding.start]


@PROPS
@example(case=(PROSE_WITH_MARKER[0], [PROSE_WITH_MARKER[0]]), tools=TOOLS)
@given(case=cut_texts(), tools=tool_sets)
def test_finding_publishes_exactly_the_prose_before_markup(
    case: tuple[str, list[str]], tools: object
) -> None:
    text, chunks = case
    for way in (chunks, [text]):
        published, finding = run(way, tools)
        if finding is not None:
            assert published == text[: finding.start]


# -- the turn guard loses nothing when a real call arrives ------------------------------------


@PROPS
@given(case=cut_texts(), at=st.integers(min_value=0))
def test_structured_call_loses_no_reasoning(case: tuple[str, list[str]], at: int) -> None:
    text, chunks = case
    at %= len(chunks) + 1
    guard = TurnScanner(TOOLS)
    out = [guard.feed_reasoning(c) for c in chunks[:at]]
    out.append(guard.structured_call())
    out.extend(guard.feed_reasoning(c) for c in chunks[at:])
    out.append(guard.finish()[1])
    assert "".join(out) == text
    assert guard.finding is None


@PROPS
@given(case=cut_texts())
def test_reasoning_without_call_matches_whole_text(case: tuple[str, list[str]]) -> None:
    text, chunks = case
    guard = TurnScanner(TOOLS)
    out = [guard.feed_reasoning(c) for c in chunks]
    out.append(guard.finish()[1])
    reference = inspect_text(text, TOOLS, blobs=False, field="reasoning")
    assert guard.finding == reference
    assert "".join(out) == (text if reference is None else text[: reference.start])


# -- many random texts, from a fixed seed -----------------------------------------------------

# Hypothesis shrinks what it finds, but its few hundred examples rarely reach the corners a
# disagreement hides in (a run cut by a window's end, an escape at a line start): a seeded
# generator reads thousands of texts cheaply. Each is fed whole, one character at a time, and in
# random pieces, some of them offered to `feed_quiet_run` as a stream editor does.
LONG_PIECES = ["x", "word ", " ", "-", "\t", "`", "~", '"', "'", "\\"]
ALL_PIECES = [*MARKER_PIECES, *LAYOUT_PIECES, *JSON_PIECES, *PROSE_PIECES]


def _random_text(rng: random.Random) -> str:
    pieces = []
    for _ in range(rng.randrange(40)):
        if rng.random() < 0.15:
            pieces.append(rng.choice(LONG_PIECES) * rng.randrange(1, 140))
        else:
            piece = rng.choice(ALL_PIECES)
            if piece and rng.random() < 0.3:  # spelling drift: a character lost or cut short
                at = rng.randrange(len(piece))
                piece = piece[:at] + piece[at + 1 :] if rng.random() < 0.5 else piece[:at]
            pieces.append(piece)
    return "".join(pieces)


def _run_quiet_runs(chunks: list[str], tools: object, rng: random.Random) -> tuple[str, object]:
    scanner = Scanner(tools)
    out, at = [], 0
    while at < len(chunks):
        group = chunks[at : at + rng.randrange(1, 6)]
        taken = scanner.feed_quiet_run(group)
        if taken:
            out.append("".join(group[:taken]))
            at += taken
        else:
            out.append(scanner.feed(chunks[at]))
            at += 1
    out.append(scanner.finish())
    return "".join(out), scanner.finding


@pytest.mark.parametrize("seed", range(4))
def test_random_texts_stream_as_whole(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(500):
        text = _random_text(rng)
        tools = TOOLS if rng.random() < 0.7 else NO_TOOLS
        whole = run([text], tools)
        published, finding = whole
        assert published == (text if finding is None else text[: finding.start]), text
        cuts = sorted(rng.randrange(len(text) + 1) for _ in range(rng.randrange(1, 12)))
        bounds = [0, *cuts, len(text)]
        pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
        assert run(list(text), tools) == whole, text
        assert run(pieces, tools) == whole, (text, pieces)
        assert _run_quiet_runs(pieces, tools, rng) == whole, (text, pieces)

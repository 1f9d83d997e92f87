"""The incremental scanner and the turn guard.

The scanner's contract (issue 2, "Streams"): whatever way a reply is cut into deltas, the stream
gives the same finding as the whole-reply check; it never publishes markup; it holds text back
only while that text could still become markup or a JSON tool-call blob, and releases it the
moment that is no longer possible; with a finding it publishes exactly the prose before the
markup.
"""

from __future__ import annotations

import pytest

from spillguard.detect import NO_TOOLS, Finding, Scanner, TurnScanner, declared_tools, inspect_text


def _fn(name: str, *params: str) -> dict[str, object]:
    return {
        "type": "function",
        "function": {"name": name, "parameters": {"properties": {p: {} for p in params}}},
    }


TOOLS = declared_tools(
    {"tools": [_fn("get_weather", "city"), _fn("search_docs", "query"), _fn("route_to", "to")]}
)


def run(chunks: list[str], tools=TOOLS, **kwargs) -> tuple[str, Finding | None]:
    scanner = Scanner(tools, **kwargs)
    out = [scanner.feed(c) for c in chunks]
    out.append(scanner.finish())
    return "".join(out), scanner.finding


def chunkings(text: str) -> list[list[str]]:
    """The whole text, every cut into two pieces, and one character at a time."""
    cuts = [[text[:i], text[i:]] for i in range(len(text) + 1)]
    return [[text], *cuts, list(text)]


def expected_published(text: str, finding: Finding | None) -> str:
    return text if finding is None else text[: finding.start]


DS = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
CORPUS = [
    pytest.param("Hello there, how can I help?", id="prose"),
    pytest.param("Line one.\nLine two.\n\nLine four.", id="prose-lines"),
    pytest.param("<div>\n  <p>Hi</p>\n</div>", id="html"),
    pytest.param("```\n<tool_call>\n{}\n</tool_call>\n```\nThat is the format.", id="fenced"),
    pytest.param("> [TOOL_CALLS]get_weather[ARGS]{}\n> quoted", id="quoted"),
    pytest.param("Use <tool_call> tags around the JSON.", id="mid-sentence"),
    pytest.param("    <tool_call>\n    {}", id="indented-code"),
    pytest.param("<tool", id="marker-prefix-only"),
    pytest.param("f", id="single-f"),
    pytest.param("   ", id="three-spaces"),
    pytest.param("functools.reduce(add, xs)", id="functools-attr"),
    pytest.param('{"name": "Alice", "age": 3}', id="json-record"),
    pytest.param('{"name": "get_weather", "arguments": {}} is the call', id="blob-then-prose"),
    pytest.param("[route_to]", id="bracketed-name"),
    pytest.param("route_to", id="bare-name"),
    pytest.param('{"name": "get_weather", "arguments": {"city": "Porto"}}', id="blob"),
    pytest.param('```json\n{"tool": "search_docs", "args": {}}\n```\n', id="fenced-blob"),
    pytest.param("[get_weather(city='Porto')]", id="pythonic"),
    pytest.param(DS + '```json\n{"city": "Porto"}\n```<｜tool▁call▁end｜>', id="deepseek-start"),
    pytest.param(
        '<｜｜DSML｜｜invoke name="search_docs">\n</｜｜DSML｜｜invoke>', id="dsml-doubled-start"
    ),
    pytest.param("[TOOL_CALLS]route_to[ARGS]{}", id="mistral-start"),
    pytest.param("   <tool_call>\n{}\n</tool_call>", id="hermes-indented-start"),
    pytest.param(
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>',
        id="prose-then-hermes",
    ),
    pytest.param(
        "Sure.\n\n   [TOOL_CALLS]route_to[ARGS]{}",
        id="prose-then-mistral",
    ),
    pytest.param(
        "  \n<|python_tag|>{}",
        id="blank-then-llama",
    ),
    pytest.param(
        "Thinking it over.\n<|channel|>commentary to=functions.get_weather<|message|>{}",
        id="prose-then-harmony",
    ),
    pytest.param(
        "```\n<tool_call>\n```\n<tool_call>{}</tool_call>",
        id="fence-then-hermes",
    ),
    # Once whole and streamed verdicts disagreed on each of these (found by random texts):
    # a run of five quotes cut after three went back before the opener it had read;
    pytest.param('""""" <｜tool▁call▁begin｜>', id="five-quotes-open-a-string"),
    # a backslash at a line start was a place a marker may open only at the end of a stream;
    pytest.param('\\|DSML|invoke name="get_weather">', id="escaped-bar-at-line-start"),
    pytest.param("\\\\[TOOL_CALLS]route_to[ARGS]{}", id="escaped-backslash-at-line-start"),
    pytest.param("See \\]<]minimax[>[ here", id="escaped-minimax-mid-line"),
    pytest.param("The sum \\[ x < y \\] and \\frac{a}{b}.\n\\[\n a < b\n\\]", id="latex"),
    # a fence run cut by the end of the window read around a far earlier trigger;
    pytest.param("~" + "x" * 92 + "\n```\n<|python_start|>", id="fence-at-window-end"),
    # a list marker waiting for a fence published the space a recipient starts with.
    pytest.param("1. to=functions.get_weather", id="recipient-after-list-marker"),
    pytest.param("- <|tool_call>", id="token-after-list-marker"),
]


@pytest.mark.parametrize("text", CORPUS)
def test_every_chunking_gives_the_whole_text_finding(text: str) -> None:
    reference = inspect_text(text, TOOLS)
    for chunks in chunkings(text):
        assert run(chunks)[1] == reference, chunks


@pytest.mark.parametrize("text", CORPUS)
def test_every_chunking_publishes_the_same_text_as_whole(text: str) -> None:
    whole_published, finding = run([text])
    assert whole_published == expected_published(text, finding)
    for chunks in chunkings(text):
        assert run(chunks) == (whole_published, finding), chunks


@pytest.mark.parametrize("text", CORPUS)
def test_markup_is_never_published(text: str) -> None:
    finding = inspect_text(text, TOOLS)
    limit = len(text) if finding is None else finding.start
    for chunks in chunkings(text):
        published, _ = run(chunks)
        assert text.startswith(published), chunks
        assert len(published) <= limit, chunks


@pytest.mark.parametrize("text", CORPUS)
def test_no_tools_every_chunking_agrees_and_publishes_prose(text: str) -> None:
    # Without declared names there is no blob probe, so the prose-before-markup bug cannot bite:
    # this pins the exact published text for every example.
    published, finding = run([text], NO_TOOLS)
    assert published == expected_published(text, finding)
    for chunks in chunkings(text):
        assert run(chunks, NO_TOOLS) == (published, finding), chunks


def test_corpus_verdicts() -> None:
    """The corpus above means something: pin the findings of a few of its members."""
    assert inspect_text("Hello there, how can I help?", TOOLS) is None
    blob = inspect_text('{"name": "get_weather", "arguments": {"city": "Porto"}}', TOOLS)
    assert blob is not None and (blob.family, blob.tool_name, blob.start) == (
        "json",
        "get_weather",
        0,
    )
    text = "Sure.\n\n   [TOOL_CALLS]route_to[ARGS]{}"
    finding = inspect_text(text, TOOLS)
    assert finding is not None
    assert (finding.family, finding.tool_name, finding.start) == ("mistral", "route_to", 7)
    assert finding.excerpt == text[7:]
    assert finding.field == "content"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('""""" <｜tool▁call▁begin｜>', None),  # inside an unclosed triple-quoted string
        ('\\|DSML|invoke name="get_weather">', ("dsml", "get_weather", 0)),
        ("\\\\[TOOL_CALLS]route_to[ARGS]{}", ("mistral", "route_to", 0)),
        ("See \\]<]minimax[>[ here", ("minimax", None, 4)),  # the escape is markup too
        ("The sum \\[ x < y \\] and \\frac{a}{b}.\n\\[\n a < b\n\\]", None),
        ("~" + "x" * 92 + "\n```\n<|python_start|>", None),  # inside an unclosed fence
        ("1. to=functions.get_weather", ("harmony", "get_weather", 2)),
    ],
)
def test_once_disagreeing_verdicts(text: str, expected: tuple[object, ...] | None) -> None:
    finding = inspect_text(text, TOOLS)
    got = None if finding is None else (finding.family, finding.tool_name, finding.start)
    assert got == expected


# A backslash at a line start is now a place a marker may open (escaped): the lines of LaTeX and
# Markdown escapes that start so stay prose, whole and at every cut.
BACKSLASH_PROSE = [
    "\\|x\\| is the norm of x.\n\\*not emphasis\\*\n\\<div\\> stays literal\n\\frac{a}{b}",
    "\\begin{align}\n\\sum_i x_i &< 1 \\\\\n\\end{align}",
    "\\Action: none\n\\functools.reduce(f, xs)\n\\to=functions.x",
]


@pytest.mark.parametrize("text", BACKSLASH_PROSE)
def test_backslash_at_a_line_start_leaves_prose_alone(text: str) -> None:
    assert inspect_text(text, TOOLS) is None
    for chunks in chunkings(text):
        assert run(chunks) == (text, None), chunks


def test_whole_reply_publishes_prose_before_markup() -> None:
    text = 'Let me check.\n<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>'
    scanner = Scanner(TOOLS)
    published = scanner.feed(text) + scanner.finish()
    assert scanner.finding is not None and scanner.finding.start == 14
    assert published == "Let me check.\n"


def test_prose_in_an_earlier_delta_is_published_before_markup() -> None:
    scanner = Scanner(TOOLS)
    assert scanner.feed("Let me check.\n") == "Let me check.\n"
    assert scanner.feed("<tool_call>") == ""
    assert scanner.feed('{"name": "get_weather", "arguments": {}}') == ""
    assert scanner.feed("</tool_call>") == ""
    assert scanner.finish() == ""
    assert scanner.finding is not None
    assert (scanner.finding.family, scanner.finding.tool_name, scanner.finding.start) == (
        "hermes",
        "get_weather",
        14,
    )
    markup = '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>'
    assert scanner.finding.excerpt == markup


# ---------------------------------------------------------------------------------------------
# Prose is published promptly.


def test_plain_word_is_published_at_once() -> None:
    scanner = Scanner(TOOLS)
    assert scanner.feed("Hello") == "Hello"
    assert scanner.holding == 0
    assert scanner.feed(", world") == ", world"
    assert scanner.feed("\n") == "\n"
    assert scanner.finish() == ""
    assert scanner.finding is None


def test_angle_bracket_is_held_until_it_cannot_be_a_marker() -> None:
    scanner = Scanner(TOOLS)
    assert scanner.feed("<") == ""
    assert scanner.holding == 1
    assert scanner.feed("div>") == "<div>"
    assert scanner.holding == 0
    assert scanner.feed("text</div>") == "text</div>"


def test_release_happens_at_the_first_impossible_character() -> None:
    scanner = Scanner(TOOLS)
    assert scanner.feed("<too") == ""
    assert scanner.feed("l") == ""
    assert scanner.feed("b") == "<toolb"
    assert scanner.feed("ox") == "ox"


def test_marker_prefix_at_end_of_reply_is_released_by_finish() -> None:
    scanner = Scanner(TOOLS)
    assert scanner.feed("Tags:\n<tool_cal") == "Tags:\n"
    assert scanner.holding == len("<tool_cal")
    assert scanner.finish() == "<tool_cal"
    assert scanner.finding is None


def test_indentation_is_held_only_while_it_could_precede_a_marker() -> None:
    scanner = Scanner(TOOLS)
    assert scanner.feed("Intro\n") == "Intro\n"
    assert scanner.feed("   ") == ""
    assert scanner.feed("x") == "   x"
    assert scanner.feed("\n") == "\n"
    assert scanner.feed("    ") == "    "  # four spaces: an indented code block
    assert scanner.feed("<tool_call>") == "<tool_call>"
    # At the very start of a reply, white space is held: it could open a JSON blob.
    scanner = Scanner(TOOLS)
    assert scanner.feed("    ") == ""
    assert scanner.feed("Hi") == "    Hi"


def test_line_inside_a_fence_is_published_without_waiting() -> None:
    scanner = Scanner(TOOLS)
    assert scanner.feed("Example:\n```\n") == "Example:\n```\n"
    assert scanner.feed("<tool_call>") == "<tool_call>"
    assert scanner.feed("\n```\n") == "\n```\n"
    assert scanner.feed("<") == ""


def test_quoted_line_is_published_without_waiting() -> None:
    scanner = Scanner(TOOLS)
    assert scanner.feed("> <tool_call>") == "> <tool_call>"


def test_brace_is_held_with_declared_tools_only() -> None:
    scanner = Scanner(TOOLS)
    assert scanner.feed("{") == ""
    assert scanner.feed('"answer"') == '{"answer"'
    assert scanner.feed(": 42}") == ": 42}"
    scanner = Scanner(NO_TOOLS)
    assert scanner.feed("{") == "{"


def test_json_record_is_released_at_its_undeclared_name() -> None:
    scanner = Scanner(TOOLS)
    assert scanner.feed('{"tool": "hamm') == ""
    assert scanner.feed('er"') == '{"tool": "hammer"'


def test_markdown_link_is_released_once_it_cannot_be_a_call() -> None:
    scanner = Scanner(TOOLS)
    assert scanner.feed("[") == ""
    assert scanner.feed("Docs") == "[Docs"


def test_reasoning_scanner_never_holds_for_blobs() -> None:
    scanner = Scanner(TOOLS, blobs=False, field="reasoning")
    assert scanner.feed("{") == "{"
    blob = '"name": "get_weather", "arguments": {}}'
    assert scanner.feed(blob) == blob
    assert scanner.finish() == ""
    assert scanner.finding is None


# ---------------------------------------------------------------------------------------------
# After a marker.


def test_nothing_after_a_marker_is_published() -> None:
    scanner = Scanner(TOOLS)
    assert scanner.feed("ok\n") == "ok\n"
    assert scanner.marker_seen is False
    assert scanner.feed("[TOOL_CALLS]") == ""
    assert scanner.marker_seen is True
    assert scanner.feed("route_to[ARGS]{}\n\nAnd some prose after.") == ""
    assert scanner.holding == len("[TOOL_CALLS]route_to[ARGS]{}\n\nAnd some prose after.")
    assert scanner.finish() == ""
    assert scanner.finding == Finding(
        "mistral", "route_to", 3, "content", "[TOOL_CALLS]route_to[ARGS]{}\n\nAnd some prose after."
    )


def test_excerpt_is_capped_by_markup_limit() -> None:
    text = "<tool_call>" + "x" * 100
    _, finding = run([text], markup_limit=20)
    assert finding is not None
    assert finding.excerpt == text[:20]
    _, streamed = run(list(text), markup_limit=20)
    assert streamed == finding


def test_finding_field_names_the_scanned_field() -> None:
    _, finding = run(["<tool_call>"], field="reasoning", blobs=False)
    assert finding == Finding("hermes", None, 0, "reasoning", "<tool_call>")


# ---------------------------------------------------------------------------------------------
# hold_limit: a blob longer than the limit is released, not a finding, in both paths.

BLOB = '{"name": "search_docs", "arguments": {"query": "' + "q" * 60 + '"}}'


@pytest.mark.parametrize("limit", [len(BLOB) - 1, 10, 1])
def test_blob_longer_than_hold_limit_is_released(limit: int) -> None:
    assert run([BLOB], hold_limit=limit) == (BLOB, None)
    assert run(list(BLOB), hold_limit=limit) == (BLOB, None)
    for i in range(len(BLOB) + 1):
        assert run([BLOB[:i], BLOB[i:]], hold_limit=limit) == (BLOB, None)


def test_blob_within_hold_limit_is_a_finding() -> None:
    limit = len(BLOB)
    published, finding = run([BLOB], hold_limit=limit)
    assert published == ""
    assert finding is not None and (finding.family, finding.tool_name) == ("json", "search_docs")
    assert run(list(BLOB), hold_limit=limit) == ("", finding)


def test_hold_limit_releases_at_the_character_that_exceeds_it() -> None:
    limit = 30
    scanner = Scanner(TOOLS, hold_limit=limit)
    outputs = [scanner.feed(ch) for ch in BLOB]
    assert outputs[:limit] == [""] * limit
    assert outputs[limit] == BLOB[: limit + 1]
    assert all(out == ch for out, ch in zip(outputs[limit + 1 :], BLOB[limit + 1 :], strict=True))
    assert scanner.finish() == ""
    assert scanner.finding is None


def test_hold_limit_does_not_affect_markup() -> None:
    text = "<tool_call>" + '{"name": "get_weather", "arguments": {}}' * 5
    published, finding = run([text], hold_limit=5)
    assert published == ""
    assert finding is not None and finding.family == "hermes"


# ---------------------------------------------------------------------------------------------
# Lifecycle.


def test_feed_after_finish_raises() -> None:
    scanner = Scanner(TOOLS)
    assert scanner.feed("Done.") == "Done."
    assert scanner.finish() == ""
    assert scanner.finished is True
    with pytest.raises(RuntimeError):
        scanner.feed("more")


def test_finish_twice_returns_nothing_and_keeps_the_finding() -> None:
    scanner = Scanner(TOOLS)
    scanner.feed("<tool_call>")
    assert scanner.finish() == ""
    first = scanner.finding
    assert first == Finding("hermes", None, 0, "content", "<tool_call>")
    assert scanner.finish() == ""
    assert scanner.finding == first


def test_empty_delta_returns_empty() -> None:
    scanner = Scanner(TOOLS)
    assert scanner.feed("") == ""
    assert scanner.feed("<") == ""
    assert scanner.feed("") == ""
    assert scanner.holding == 1
    assert scanner.finish() == "<"


def test_empty_reply() -> None:
    assert run([]) == ("", None)
    assert run([""]) == ("", None)


# ---------------------------------------------------------------------------------------------
# TurnScanner: content and reasoning of one choice, decided together.

KIMI = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>{"city": "Porto"}<|tool_call_end|><|tool_calls_section_end|>'
)
HARMONY = (
    '<|channel|>commentary to=functions.search_docs <|constrain|>json<|message|>{"query": "x"}'
)


def test_reasoning_markup_counts_without_a_structured_call() -> None:
    guard = TurnScanner(TOOLS)
    assert guard.feed_reasoning("The user wants the weather.\n") == "The user wants the weather.\n"
    assert guard.feed_reasoning(KIMI[:40]) == ""
    assert guard.feed_reasoning(KIMI[40:]) == ""
    assert guard.certain is False  # reasoning markup is not certain: a real call may follow
    assert guard.feed_content("") == ""
    assert guard.finish() == ("", "")
    finding = guard.finding
    assert finding is not None
    assert (finding.family, finding.tool_name, finding.start, finding.field) == (
        "kimi",
        "get_weather",
        len("The user wants the weather.\n"),
        "reasoning",
    )


def test_harmony_in_reasoning_counts() -> None:
    guard = TurnScanner(TOOLS)
    assert guard.feed_reasoning(HARMONY) == ""
    assert guard.finish() == ("", "")
    assert guard.finding is not None
    assert (guard.finding.family, guard.finding.tool_name) == ("harmony", "search_docs")


def test_structured_call_releases_held_reasoning_including_markup() -> None:
    reasoning = "Plan: call the tool.\n" + KIMI
    guard = TurnScanner(TOOLS)
    published = [guard.feed_reasoning(ch) for ch in reasoning]
    assert "".join(published) == "Plan: call the tool.\n"
    released = guard.structured_call()
    assert released == KIMI
    assert "".join(published) + released == reasoning  # nothing lost, nothing repeated
    assert guard.feed_reasoning("\nmore thoughts") == "\nmore thoughts"
    assert guard.feed_reasoning("<tool_call>") == "<tool_call>"
    assert guard.finish() == ("", "")
    assert guard.finding is None


def test_structured_call_releases_a_held_marker_prefix() -> None:
    guard = TurnScanner(TOOLS)
    assert guard.feed_reasoning("Hmm.\n<|tool") == "Hmm.\n"
    assert guard.holding == len("<|tool")
    assert guard.structured_call() == "<|tool"
    assert guard.holding == 0
    assert guard.structured_call() == ""  # only once
    assert guard.finish() == ("", "")
    assert guard.finding is None


def test_reasoning_finding_waits_for_the_end_of_the_turn() -> None:
    guard = TurnScanner(TOOLS)
    guard.feed_reasoning(KIMI)
    assert guard.finding is None  # a structured call may still arrive
    guard.finish()
    assert guard.finding is not None and guard.finding.field == "reasoning"


def test_content_markup_counts_even_with_a_structured_call() -> None:
    guard = TurnScanner(TOOLS)
    assert guard.feed_content("Checking.\n") == "Checking.\n"
    assert guard.feed_content('[TOOL_CALLS]get_weather[ARGS]{"city": "Porto"}') == ""
    assert guard.certain is True
    early = guard.finding
    assert early is not None and (early.start, early.field) == (10, "content")
    assert guard.structured_call() == ""
    assert guard.finish() == ("", "")
    finding = guard.finding
    assert finding is not None
    assert (finding.family, finding.tool_name, finding.start, finding.field) == (
        "mistral",
        "get_weather",
        10,
        "content",
    )


def test_content_finding_comes_before_reasoning_finding() -> None:
    guard = TurnScanner(TOOLS)
    guard.feed_reasoning(KIMI)
    guard.feed_content("<tool_call>")
    guard.finish()
    assert guard.finding is not None and guard.finding.field == "content"


def test_content_blob_counts_with_turn_guard() -> None:
    guard = TurnScanner(TOOLS)
    blob = '{"name": "search_docs", "arguments": {"query": "x"}}'
    assert guard.feed_content(blob) == ""
    assert guard.holding == len(blob)
    assert guard.finish() == ("", "")
    assert guard.finding is not None and guard.finding.family == "json"


def test_clean_turn_publishes_everything() -> None:
    guard = TurnScanner(TOOLS)
    assert guard.feed_reasoning("I know this.") == "I know this."
    assert guard.feed_content("It is sunny") == "It is sunny"
    assert guard.finish() == ("", "")
    assert guard.finish() == ("", "")
    assert guard.finding is None


def test_turn_guard_hold_limit_applies_to_content_blobs() -> None:
    guard = TurnScanner(TOOLS, hold_limit=10)
    blob = '{"name": "search_docs", "arguments": {"query": "x"}}'
    assert guard.feed_content(blob) == blob
    assert guard.finish() == ("", "")
    assert guard.finding is None

"""spillguard's own detection corpus (issue 10): leaked calls that must be caught, and good
answers that must pass untouched, both with tools declared.

`tests/corpus/leaks.jsonl` holds model output that carries a tool call written as text, one case
a line: `id`, `family` (the label the core should report), `tool` (the name a reader can see, or
null), `field` (`content` or `reasoning`), `start` (the offset where the markup begins), `text`
and `note`. `tests/corpus/benign.jsonl` holds texts a good answer could contain: `id`, `text`,
`note`. Every text was written for spillguard.

For each leak: the whole-reply check finds it; its finding starts at the markup (earlier only
over white space, harmony's `<|end|>` or a stray `count`/`call`/`court` word Claude leaves before
`<invoke>`), so no prose is swallowed; the tool name is read when the case names one; and a
stream cut at every two-way boundary, and char by char, publishes exactly `text[:start]` of the
whole-reply finding, never any of the markup, and ends with the same finding. For each benign
text: no finding, and every stream publishes the input exactly. Family labels are compared in a
separate test so that a naming mismatch does not hide recall. `pytest -s` prints a summary.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spillguard.detect import NO_TOOLS, Finding, Scanner, TurnScanner, declared_tools, inspect_text

CORPUS = Path(__file__).parent / "corpus"
MAX_TEXT = 1500  # every-cut loops are quadratic in the text length


def _fn(name: str, *params: str) -> dict[str, Any]:
    properties = {p: {"type": "string"} for p in params}
    return {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": properties}},
    }


# The one request every case answers.
TOOLS = declared_tools(
    {
        "model": "any",
        "messages": [{"role": "user", "content": "Help me with my project."}],
        "tools": [
            _fn("get_weather", "city", "unit"),
            _fn("search", "query"),
            _fn("run_in_terminal", "command"),
            _fn("read_file", "path"),
            _fn("Read", "file_path"),
            _fn("get_current_temperature", "location"),
        ],
    }
)

FAMILIES = frozenset(
    [
        "deepseek",
        "dsml",
        "hermes",
        "qwen3_coder",
        "glm",
        "kimi",
        "mistral",
        "llama",
        "pythonic",
        "harmony",
        "xai",
        "granite",
        "functools",
        "minimax",
        "tool_calls_tag",
        "internlm",
        "seed",
        "longcat",
        "nemotron",
        "command_r",
        "gemma",
        "function_gemma",
        "lfm2",
        "apertus",
        "minicpm",
        "gigachat",
        "olmo",
        "granite_fc",
        "dots",
        "kimi_k3",
        "k2_horizon",
        "claude_xml",
        "qwen_tools",
        "json",
    ]
)
FIELDS = ("content", "reasoning")

# What may lie between a finding's start and the case's markup without being swallowed prose.
_GAP = re.compile(r"(?:\s|<\|end\|>|count|call|court)*")


@dataclass(frozen=True)
class Leak:
    id: str
    family: str
    tool: str | None
    field: str
    start: int
    text: str
    note: str


@dataclass(frozen=True)
class Benign:
    id: str
    text: str
    note: str


def _rows(name: str) -> list[dict[str, Any]]:
    with (CORPUS / name).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


LEAKS = [Leak(**row) for row in _rows("leaks.jsonl")]
BENIGN = [Benign(**row) for row in _rows("benign.jsonl")]
REASONING_LEAKS = [case for case in LEAKS if case.field == "reasoning"]


def whole(text: str, field: str = "content") -> Finding | None:
    if field == "reasoning":
        return inspect_text(text, TOOLS, blobs=False, field="reasoning")
    return inspect_text(text, TOOLS)


def stream(pieces: list[str], field: str = "content") -> tuple[str, Finding | None]:
    """Published text and finding of a stream fed `pieces`."""
    scanner = Scanner(TOOLS, blobs=field == "content", field=field)
    out = [scanner.feed(piece) for piece in pieces]
    out.append(scanner.finish())
    return "".join(out), scanner.finding


def two_way_cuts(text: str) -> list[list[str]]:
    return [[text[:i], text[i:]] for i in range(1, len(text))]


def leak_verdict(case: Leak) -> tuple[Finding | None, str]:
    """The whole-reply finding and what is wrong with it ("" when nothing is)."""
    finding = whole(case.text, case.field)
    if finding is None:
        return None, "missed"
    if finding.start > case.start:
        return finding, f"starts at {finding.start}, after the markup at {case.start}"
    if not _GAP.fullmatch(case.text[finding.start : case.start]):
        return finding, f"starts at {finding.start}, before prose that ends at {case.start}"
    return finding, ""


def ids(cases: list[Leak] | list[Benign]) -> list[str]:
    return [case.id for case in cases]


# ---------------------------------------------------------------------------------------------
# The corpus itself.


def test_declared_tools() -> None:
    assert TOOLS.declared is True
    assert TOOLS.names == {
        "get_weather",
        "search",
        "run_in_terminal",
        "read_file",
        "Read",
        "get_current_temperature",
    }


def test_corpus_is_well_formed() -> None:
    assert len(LEAKS) >= 250
    assert len(BENIGN) >= 300
    all_ids = ids(LEAKS) + ids(BENIGN)
    assert len(all_ids) == len(set(all_ids))
    assert {case.family for case in LEAKS} == FAMILIES, "every family has cases"
    assert REASONING_LEAKS, "some leaks sit in the reasoning field"
    for case in LEAKS:
        assert case.family in FAMILIES, case.id
        assert case.field in FIELDS, case.id
        assert case.tool is None or case.tool in case.text.replace("\\", ""), case.id
        assert 0 <= case.start < len(case.text) <= MAX_TEXT, case.id
        assert not case.text[case.start].isspace(), case.id
        assert case.note, case.id
    for benign in BENIGN:
        assert 0 < len(benign.text) <= MAX_TEXT, benign.id
        assert benign.note, benign.id


# ---------------------------------------------------------------------------------------------
# Leaks: found, at the markup, with the name, and the same in every stream.


@pytest.mark.parametrize("case", LEAKS, ids=ids(LEAKS))
def test_leak_is_found(case: Leak) -> None:
    finding = whole(case.text, case.field)
    assert finding is not None, case.note
    assert finding.field == case.field


@pytest.mark.parametrize("case", LEAKS, ids=ids(LEAKS))
def test_leak_starts_at_its_markup(case: Leak) -> None:
    finding, problem = leak_verdict(case)
    assert finding is not None, "missed: " + case.note
    assert not problem, problem


@pytest.mark.parametrize(
    "case", [c for c in LEAKS if c.tool], ids=ids([c for c in LEAKS if c.tool])
)
def test_leak_tool_name_is_read(case: Leak) -> None:
    finding = whole(case.text, case.field)
    assert finding is not None, "missed: " + case.note
    assert finding.tool_name == case.tool


def _assert_leak_streams(case: Leak, cuts: list[list[str]]) -> None:
    expected = whole(case.text, case.field)
    assert expected is not None, "missed: " + case.note
    prose = case.text[: expected.start]
    assert expected.start <= case.start, "the whole-reply check publishes markup"
    for pieces in cuts:
        published, finding = stream(pieces, case.field)
        at = [len(p) for p in pieces[:-1]]
        assert published == prose, f"cut at {at}: published {published[len(prose) :]!r}"
        assert finding == expected, f"cut at {at}"


@pytest.mark.parametrize("case", LEAKS, ids=ids(LEAKS))
def test_leak_streamed_in_two_pieces_at_every_boundary(case: Leak) -> None:
    _assert_leak_streams(case, two_way_cuts(case.text))


@pytest.mark.parametrize("case", LEAKS, ids=ids(LEAKS))
def test_leak_streamed_char_by_char(case: Leak) -> None:
    _assert_leak_streams(case, [list(case.text)])


@pytest.mark.parametrize("case", LEAKS, ids=ids(LEAKS))
def test_leak_through_turn_scanner_char_by_char(case: Leak) -> None:
    """The turn path: the field's deltas through TurnScanner, no structured call."""
    expected = whole(case.text, case.field)
    assert expected is not None, "missed: " + case.note
    turn = TurnScanner(TOOLS)
    feed = turn.feed_content if case.field == "content" else turn.feed_reasoning
    published = "".join(feed(ch) for ch in case.text)
    content, reasoning = turn.finish()
    published += content if case.field == "content" else reasoning
    assert published == case.text[: expected.start]
    assert turn.finding == expected


@pytest.mark.parametrize(
    "case",
    [c for c in LEAKS if c.family == "json"],
    ids=ids([c for c in LEAKS if c.family == "json"]),
)
def test_json_blob_needs_a_declared_tool(case: Leak) -> None:
    assert inspect_text(case.text, NO_TOOLS) is None


# ---------------------------------------------------------------------------------------------
# Good answers: no finding, published exactly, in every stream.


@pytest.mark.parametrize("case", BENIGN, ids=ids(BENIGN))
def test_benign_passes(case: Benign) -> None:
    assert whole(case.text) is None, case.note
    assert whole(case.text, "reasoning") is None, case.note
    assert inspect_text(case.text, NO_TOOLS) is None, case.note


def _assert_benign_streams(case: Benign, cuts: list[list[str]]) -> None:
    for pieces in cuts:
        published, finding = stream(pieces)
        at = [len(p) for p in pieces[:-1]]
        assert finding is None, f"cut at {at}: {finding}"
        assert published == case.text, f"cut at {at}"


@pytest.mark.parametrize("case", BENIGN, ids=ids(BENIGN))
def test_benign_streamed_in_two_pieces_at_every_boundary(case: Benign) -> None:
    _assert_benign_streams(case, two_way_cuts(case.text))


@pytest.mark.parametrize("case", BENIGN, ids=ids(BENIGN))
def test_benign_streamed_char_by_char(case: Benign) -> None:
    _assert_benign_streams(case, [list(case.text)])


# ---------------------------------------------------------------------------------------------
# Summaries (pytest -s prints them).


def test_family_labels_match() -> None:
    """Softer than recall: only leaks that are found count, and only their family is compared."""
    wrong: dict[str, list[str]] = defaultdict(list)
    for case in LEAKS:
        finding = whole(case.text, case.field)
        if finding is not None and finding.family != case.family:
            wrong[f"{case.family} reported as {finding.family}"].append(case.id)
    print("\nfamily label mismatches:", "none" if not wrong else "")
    for label, cases in sorted(wrong.items()):
        print(f"  {label}: {len(cases)}  {' '.join(cases)}")
    assert not wrong


def test_summary_recall_and_false_positives() -> None:
    found: dict[str, int] = defaultdict(int)
    total: dict[str, int] = defaultdict(int)
    problems: list[str] = []
    for case in LEAKS:
        total[case.family] += 1
        finding, problem = leak_verdict(case)
        if finding is not None and not problem:
            found[case.family] += 1
        else:
            problems.append(f"  {case.id}: {problem}")
    false_positives = []
    for benign in BENIGN:
        finding = whole(benign.text)
        if finding is not None:
            false_positives.append(f"  {benign.id}: {finding.family} at {finding.start}")
    caught = sum(found.values())
    print(f"\nleak recall {caught}/{len(LEAKS)} ({100 * caught / len(LEAKS):.1f}%)")
    for family in sorted(total):
        print(f"  {family:<16}{found[family]:>4}/{total[family]:<4}")
    print("leaks missed or starting in the wrong place:", len(problems))
    print("\n".join(problems))
    print(f"false positives: {len(false_positives)}/{len(BENIGN)}")
    print("\n".join(false_positives))
    assert caught == len(LEAKS)
    assert not false_positives

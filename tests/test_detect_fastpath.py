"""The detection core's fast paths agree with its slow paths.

`markers.NEEDLES` is read off the spelling patterns themselves: every match of every spelling
holds one of them. A text with none (and no blob start) is decided without a scanner
(`may_find`, `inspect_text`, `chat.inspect_reply`); for any text, that decision is the one the
full scanner reaches.
"""

from __future__ import annotations

import json
import re
import re._constants as sre_c
import re._parser as sre_parse
from typing import Any
from unittest import mock

from hypothesis import example, given, settings
from hypothesis import strategies as st

from spillguard import chat
from spillguard.detect import (
    NO_TOOLS,
    Finding,
    Scanner,
    TurnScanner,
    inspect_text,
    markers,
    may_find,
)
from spillguard.detect import judge as judge_module
from spillguard.detect.events import QUIET_TAIL, QUIET_TAIL_ENDS
from spillguard.detect.judge import Judge
from spillguard.detect.markers import NEEDLES, SPELLINGS, Kind, Scope

from .test_detect_properties import MARKER_PIECES, TOOLS, cut_texts, run, texts

_REPEATS = (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, sre_c.POSSESSIVE_REPEAT)


def _needs_needle(seq: Any) -> bool:
    """Every match of the parsed pattern `seq` holds one of NEEDLES: a run of literals in it
    spells one, or a part every match must pass through needs one (a set of needle characters,
    all branches of an alternation, a repeat of at least one, a group, a lookahead)."""
    run = ""
    for op, av in seq:
        if op is sre_c.LITERAL:
            run += chr(av)
            if any(needle in run for needle in NEEDLES):
                return True
            continue
        run = ""
        if op is sre_c.IN:  # a set of characters, each of them a needle
            if av and all(o is sre_c.LITERAL and chr(c) in NEEDLES for o, c in av):
                return True
        elif op is sre_c.SUBPATTERN:
            _, add_flags, _, sub = av
            if not add_flags & sre_c.SRE_FLAG_IGNORECASE and _needs_needle(sub):
                return True
        elif op is sre_c.BRANCH:
            if all(_needs_needle(branch) for branch in av[1]):
                return True
        elif op in _REPEATS:
            low, _, sub = av
            if low >= 1 and _needs_needle(sub):
                return True
        elif op is sre_c.ATOMIC_GROUP:
            if _needs_needle(av):
                return True
        elif op is sre_c.ASSERT and _needs_needle(av[1]):
            return True
    return False


def _needs(pattern: str) -> bool:
    return _needs_needle(sre_parse.parse(pattern))


def test_the_analysis_tells_needles_apart() -> None:
    assert _needs(r"\\?<tool_call>")
    assert _needs(r"(?:a|b)?\[TOOL")
    assert _needs(r"x(?:<|◁)y")
    assert not _needs(r"(?:<)?tool")
    assert not _needs(r"(?:<|a)tool")
    assert not _needs(r"\[TOO[LM]")
    assert not _needs(r"(?i:dsm)")


def test_every_spelling_needs_a_needle() -> None:
    closers = [s for s in SPELLINGS if s.kind is Kind.CLOSER]
    assert closers and all(_needs(s.pattern) for s in closers)
    for spelling in SPELLINGS:
        # A spelling that counts only after a closer is covered by the closer's needle.
        assert _needs(spelling.pattern) or spelling.after_closer, spelling
    for compiled in (markers.AT_START, markers.AT_MID):  # built from the spellings, as is
        assert not compiled.flags & re.IGNORECASE
    assert _needs(markers.AT_MID.pattern)  # no spelling there waits for a closer


@given(st.text(alphabet="<◁[]TOL/HINK:=Actiofunsl.DSMx ", max_size=40))
@example("functools[")
@example("[functools[")
@example("to=functions.")
@example("Action:")
@example("|DSML|")
@example("[/THINK]")
@example("x[TOO")
def test_has_needle_is_needle_in_text(text: str) -> None:
    assert markers.has_needle(text) == any(needle in text for needle in NEEDLES)


def _scanned(text: str, tools: Any, blobs: bool = True) -> tuple[Finding | None, str]:
    """The full path: a scanner fed the whole text and finished."""
    scanner = Scanner(tools, blobs=blobs)
    published = scanner.feed(text)
    published += scanner.finish()
    return scanner.finding, published


# Texts that reach the fast path often: the property tests' pieces without the needles, near
# misses of each needle, prose with the characters the needles are looked for from.
NEAR = ["[TOO", "TOOL", "[/THINK", "functools", "to=function", "Action", "DS", "SM", "‖", "｜"]
quiet_piece = st.one_of(
    st.sampled_from(NEAR),
    st.sampled_from(["\n", "  ", "```", "`", "::\n", '"""', "> ", "{", "}", "[", "]", ":", "="]),
    st.sampled_from(['"name"', '"get_weather"', "get_weather", "(", ")", "D", "A", "f"]),
    st.text(max_size=4),
)
quiet_texts = st.lists(quiet_piece, max_size=20).map("".join)


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(texts, quiet_texts, quiet_texts), st.sampled_from([TOOLS, NO_TOOLS]), st.booleans()
)
@example(" \n {", TOOLS, True)
@example("Action: go", TOOLS, True)
def test_may_find_false_means_the_scanner_finds_nothing(text: str, tools: Any, blobs: bool) -> None:
    finding, published = _scanned(text, tools, blobs)
    if not may_find(text, tools, blobs=blobs):
        assert finding is None and published == text
    assert inspect_text(text, tools, blobs=blobs) == finding


def _slow_inspect_reply(reply: Any, tools: Any, hold_limit: int) -> tuple[Finding, str] | None:
    """`chat.inspect_reply` without its fast path: a TurnScanner for every choice."""
    for choice in reply["choices"]:
        message = choice["message"]
        guard = TurnScanner(tools, hold_limit)
        if message.get("tool_calls"):
            guard.structured_call()
        content = message.get("content")
        if isinstance(content, str):
            guard.feed_content(content)
        reasoning = message.get("reasoning_content")
        if isinstance(reasoning, str):
            guard.feed_reasoning(reasoning)
        guard.finish()
        if guard.finding is not None:
            text = content if isinstance(content, str) else ""
            found = guard.finding
            return found, text[: found.start] if found.field == "content" else text
    return None


message = st.fixed_dictionaries(
    {},
    optional={
        "content": st.one_of(st.none(), texts, quiet_texts),
        "reasoning_content": st.one_of(texts, quiet_texts),
        "tool_calls": st.just([{"id": "c", "type": "function"}]),
    },
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(message.map(lambda m: {"message": m}), max_size=3), st.sampled_from([TOOLS, NO_TOOLS])
)
def test_inspect_reply_agrees_with_a_scanner_per_choice(choices: list[Any], tools: Any) -> None:
    reply = {"choices": choices}
    assert chat.inspect_reply(reply, tools, 1024) == _slow_inspect_reply(reply, tools, 1024)


def test_the_bench_reply_takes_the_fast_path() -> None:
    from bench.upstream import PROSE

    assert not may_find(PROSE, TOOLS)
    assert _scanned(PROSE, TOOLS) == (None, PROSE)


# -- a stream's quiet deltas: the judge's fast path against a judge that reads every delta -------


class _FullJudge(Judge):
    """The judge with its quiet path turned off: every delta is read in full."""

    def _quiet(self, text: str, tail: str) -> bool:
        return False


def _stepped(chunks: list[str], tools: Any, full: bool) -> tuple[list[Any], Finding | None]:
    """What each delta publishes and holds, and the finding, through one TurnScanner."""
    turn = TurnScanner(tools)
    if full:
        for scanner in (turn.content, turn.reasoning):
            scanner._judge = _FullJudge(tools.names)
    steps: list[Any] = []
    for chunk in chunks:
        steps.append((turn.feed_content(chunk), turn.holding, turn.certain))
    steps.append(turn.finish())
    return steps, turn.finding


PROSE_DELTAS = [
    " the",
    " weather",
    "Here",
    ".",
    ". ",
    "!",
    "?",
    ":",
    ">",
    " to",
    "to",
    "=functions",
    ".get_weather",
    "\n",
    "\n\n",
    "| ",
    "1. ",
    "- ",
    "  ",
    "Action",
    "f",
    "unctools",
    "[",
    "]",
    "'",
    "it's",
    '"',
    "``",
    "`",
    "```python\n",
    "x = 1\n",
    "~~~",
    "..",
    " analysis",
    " final",
    "commentary",
    "assistant",
    "DSM",
    "|DSML|",
    "<",
    "<tool_call>",
    "°C",
]
prose_chunks = st.lists(
    st.one_of(st.sampled_from(PROSE_DELTAS), st.sampled_from(MARKER_PIECES), st.text(max_size=3)),
    max_size=40,
)


@settings(max_examples=1500, deadline=None)
@given(
    st.one_of(prose_chunks, cut_texts().map(lambda case: case[1])),
    st.sampled_from([TOOLS, NO_TOOLS]),
)
@example([" It", " is", " warm", ".", " Sunday", " to", "=functions", ".get_weather"], TOOLS)
@example(["\n", "1", ".", " Plan", " the", " walk", "\n", "2", ". ", "```", "\n"], TOOLS)
@example(["\n", "| ", "Sat", "urday", " | ", "14", "\n", "|", "DSM", "L|", "invoke"], TOOLS)
@example(["\n", "A", " quick", " way", "\n", "Act", "ion", ":", " go"], TOOLS)
@example(["\n", "f", "unc", "tools", "[", '{"name": "get_weather"'], TOOLS)
@example(["\n", "for", "ecast", ":1", "<|tool_call_argument_begin|>"], TOOLS)
@example(["\n", "   ", "- ", "item", " two", "\n", "    ", "-", " x"], TOOLS)
@example(["\n", "- ", "~~", "~", "\n", "<tool_call>"], TOOLS)
@example(["\n", "‖", "DSML", "‖", "tool", "_calls", "\n"], TOOLS)
@example(["It is warm this wee", "kend.", " to", "=functions", ".get_weather"], TOOLS)
@example(["Done", "!", " ", "to", "=functions.get_weather"], TOOLS)
@example(["See", " x", ">", " to=", "functions.get_weather"], TOOLS)
@example(["the plan for the commentary", " to", "=functions.get_weather"], TOOLS)
@example(["then the assistant", " ", "t", "o=functions.get_weather"], TOOLS)
@example(["Note", ":", " to", "=functions", ".get_weather"], TOOLS)
@example(["a", " f", "unctools", "[", '{"name": "get_weather"}'], TOOLS)
@example(["```python\n", "x", " = 1", "\n", "  ", "``", "`", "\n", "<tool_call>"], TOOLS)
@example(["~~~\n", "a", "b ~", "~~", "\n", "~~~", "\n", "[TOOL_CALLS]"], TOOLS)
@example(["```\n", "<tool_call>", " x", "\n```", "\n", "<tool_call>"], TOOLS)
def test_quiet_deltas_publish_what_a_full_read_publishes(chunks: list[str], tools: Any) -> None:
    assert _stepped(chunks, tools, full=False) == _stepped(chunks, tools, full=True)


def test_the_bench_stream_agrees_delta_by_delta() -> None:
    from bench.upstream import stream_events

    chunks = []
    for event in stream_events("bench"):
        if event.startswith(b"data: {"):
            for choice in json.loads(event[6:])["choices"]:
                chunks.append(choice["delta"].get("content") or "")
    assert len(chunks) > 300
    assert _stepped(chunks, TOOLS, full=False) == _stepped(chunks, TOOLS, full=True)


@given(st.text(alphabet="assistantcommentaryfinalunctools[]=. !?>:<`'\"\nAZ09", max_size=30))
@example("f")
@example("final ")
@example("functools[")
def test_the_quiet_tail_ends_in_its_characters(text: str) -> None:
    if QUIET_TAIL.search(text) is not None:
        assert text[-1:] in QUIET_TAIL_ENDS


@settings(max_examples=500, deadline=None)
@given(prose_chunks)
@example(["We add `commentary functio"])
@example(["commentary functio"])
def test_an_empty_text_is_quiet_and_changes_nothing(chunks: list[str]) -> None:
    """A stream may send an empty content delta anywhere; `Scanner.feed_quiet_run` takes a lone
    one through `feed_quiet`. It has nothing to read, so the judge is left exactly as it was:
    `_quiet` would take the empty text's end for the tail's and call the tail clear."""
    judge = Judge(TOOLS.names)
    for chunk in chunks:
        judge.feed(chunk)
    before = dict(vars(judge))
    assert judge.feed_quiet("")
    assert vars(judge) == before


# Texts where inline code spans open and close around everything a judge reads: markers, quotes,
# closers, line starts, fences, and spans cut short by a line's end or the text's.
SPAN_PIECES = ["`", "``", "```", "`x`", "``a`b``", " ", "  ", "x", "\n", "\n\n", "A", "f", "- "]
SPAN_PIECES += ["<tool_call>", "<", "<|", '"""', "'''", '`"""`', "`'''`", '"', "::\n", "::"]
SPAN_PIECES += ["> ", "    ", "\t"]
SPAN_PIECES += ["to=functions.get_weather", ". to=functions.x", "functools[", "[TOOL_CALLS]"]
SPAN_PIECES += ["</think>", "<pre>", "</pre>", "Action:", "|DSML|", ".. ", "<｜tool▁calls▁begin｜>"]
span_texts = st.lists(st.sampled_from(SPAN_PIECES), max_size=30).map("".join)


@settings(max_examples=600, deadline=None)
@given(cut_texts(st.one_of(span_texts, span_texts, texts)), st.sampled_from([TOOLS, NO_TOOLS]))
@example(("`<tool_call>` x", ["`<tool_call>` x"]), TOOLS)
@example(('x `"""` y\n<tool_call>', ['x `"""` y\n<tool_call>']), TOOLS)
@example(("x `'''` y\n'''\n<tool_call>", ["x `'''` y\n'''\n<tool_call>"]), TOOLS)
@example(("``a`<tool_call>``\n<tool_call>", ["``a`<tool_call>``\n<tool_call>"]), TOOLS)
@example(("x `a\n<tool_call>` y", ["x `a\n<tool_call>` y"]), TOOLS)
@example(("x `a`", ["x `a", "`"]), TOOLS)
@example(
    (
        ".. note:: `~" + "a" * 95 + "` <｜tool▁calls▁begin｜>\n",
        [".. note:: `~" + "a" * 95 + "` <｜tool▁calls▁begin｜>\n"],
    ),
    TOOLS,
)
@example(("`x\n<tool_call> `y` z", ["`x\n<tool_call> `y` z"]), TOOLS)
@example(("x `Vec<T>` <tool_call> `a", ["x `Vec<", "T>` <tool_call> `a"]), TOOLS)
@example(("A `b` <tool_call>", ["A `b` <tool_call>"]), TOOLS)
def test_skimmed_code_spans_read_as_event_by_event(case: Any, tools: Any) -> None:
    """`judge.SKIM` reads a whole inline code span at once, and a backtick run mid-line without
    looking around it: the published text and the finding are those of reading event by
    event, however the text is cut."""
    _, chunks = case
    skimmed = run(chunks, tools)
    with mock.patch.object(judge_module, "SKIM", False):
        assert run(chunks, tools) == skimmed


def _match_key(match: Any) -> Any:
    """What `events.opens` reads of a match: where it ends, which spelling, the name, partial."""
    if match is None:
        return None
    name = markers.spelling_of(match)[1]
    return match.span(), markers.spelling_index(match), name, getattr(match, "partial", False)


JSON_PIECES_FOR_LT = ['"get_weather"', ' name="get_weather">', '{"name": "get_weather"}', "\n", " "]


def _cut_after(piece: str) -> Any:
    """`piece` cut anywhere after its `<`, maybe followed by more: a spelling begun or done."""
    return st.tuples(st.integers(1, len(piece)), st.text(max_size=4)).map(
        lambda cut: piece[: cut[0]] + cut[1]
    )


_OPENER_TEXTS = [p for p in MARKER_PIECES + SPAN_PIECES if p.startswith(("<", "\\<"))]
lt_texts = st.tuples(
    st.sampled_from(["<", "\\<"]),
    st.one_of(st.sampled_from(markers._ALPHABET), st.characters(), st.just("")),
    st.lists(st.one_of(st.sampled_from(_OPENER_TEXTS + JSON_PIECES_FOR_LT), st.text(max_size=3))),
).map(lambda parts: parts[0] + parts[1] + "".join(parts[2]))


@settings(max_examples=800, deadline=None)
@given(
    st.one_of(lt_texts, st.sampled_from(_OPENER_TEXTS).flatmap(_cut_after)),
    st.sampled_from([Scope.START, Scope.MID]),
)
@example('<invoke name="get_weather">', Scope.MID)
@example("<tool_call>", Scope.START)
@example("<|", Scope.MID)
@example("<", Scope.MID)
@example("\\<|\\<|", Scope.MID)
@example("\\<|\\|tool_call\\|>", Scope.START)
def test_the_alternations_after_lt_match_as_the_whole_scopes(text: str, scope: Scope) -> None:
    """`markers.alternations_at` leaves out the spellings that cannot begin with a `<` (escaped
    or not) and the character after it: complete and partial, every match is the whole
    alternation's."""
    full = markers.ALTERNATIONS[scope]
    for end in {len(text), min(len(text), 2), min(len(text), 3), min(len(text), 5)}:
        some = markers.alternations_at(scope, text, 0, end)
        assert _match_key(some.whole.match(text, 0, end)) == _match_key(
            full.whole.match(text, 0, end)
        )
        for mine, theirs in ((some.partial, full.partial), (some.calls, full.calls)):
            assert _match_key(mine.match(text, 0, end, partial=True)) == _match_key(
                theirs.match(text, 0, end, partial=True)
            )
        earlier = [i for i in full.order if i not in some.order]
        assert all(
            markers.PARTIAL_EACH[i].match(text, 0, end, partial=True) is None for i in earlier
        )

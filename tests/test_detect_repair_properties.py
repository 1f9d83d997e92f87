"""Property tests (hypothesis) for repair:

1. any cut of a leaking reply into deltas gives, through TurnScanner.markup, the same calls as
   the whole reply (for replies that repair, and for arbitrary near-miss texts alike);
2. read_calls never raises, for any text and any family;
3. a repairable reply with anything appended after its markup is no longer repaired whole.
"""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spillguard.detect import Call, TurnScanner, read_calls
from spillguard.detect.calls import PARSERS
from tests.test_detect_calls import READS, TOOLS
from tests.test_detect_properties import texts

REPAIRABLE = [
    *(p.values[0] for p in READS),
    'Routing.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="find_flights">\n'
    '<｜DSML｜parameter name="origin" string="true">OSL</｜DSML｜parameter>\n'
    '<｜DSML｜parameter name="seats" string="false">1</｜DSML｜parameter>\n'
    "</｜DSML｜invoke>\n</｜DSML｜function_calls>",
    "<tool_call>\n<function=find_flights>\n<parameter=origin>\nOSL\n</parameter>\n"
    "<parameter=seats>\n4\n</parameter>\n</function>\n</tool_call>",
    "<tool_call>find_flights<arg_key>origin</arg_key><arg_value>OSL</arg_value>"
    "<arg_key>seats</arg_key><arg_value>4</arg_value></tool_call>",
    'Hm.<minimax:tool_call><invoke name="find_flights"><parameter name="origin">OSL'
    '</parameter><parameter name="seats">4</parameter></invoke></minimax:tool_call>',
    'Ok.<xai:function_call name="save_note"><parameter name="text">hi</parameter>'
    "</xai:function_call>",
    '[find_flights(origin="OSL", seats=4), ping()]',
    'Checking now.<|tool_call>call:find_flights{origin:<|"|>OSL<|"|>,seats:4}<tool_call|>',
]

PROPS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def cuts_of(text: str, draw: st.DrawFn) -> list[str]:
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=12)))
    return [text[a:b] for a, b in itertools.pairwise([0, *cuts, len(text)])]


def repaired(chunks: list[str], field: str = "content") -> tuple[Call, ...] | None:
    turn = TurnScanner(TOOLS)
    feed = turn.feed_content if field == "content" else turn.feed_reasoning
    for chunk in chunks:
        feed(chunk)
    turn.finish()
    if turn.finding is None or turn.markup is None:
        return None
    return read_calls(turn.markup, turn.finding.family, TOOLS)


@st.composite
def cut_repairable(draw: st.DrawFn) -> tuple[str, list[str]]:
    text = draw(st.sampled_from(REPAIRABLE))
    return text, cuts_of(text, draw)


@st.composite
def cut_any(draw: st.DrawFn) -> tuple[str, list[str]]:
    text = draw(st.one_of(texts, st.sampled_from(REPAIRABLE).map(lambda t: t[: len(t) // 2])))
    return text, cuts_of(text, draw)


@PROPS
@given(case=cut_repairable())
def test_any_cut_gives_the_calls_of_the_whole_reply(case: tuple[str, list[str]]) -> None:
    text, chunks = case
    whole = repaired([text])
    assert whole is not None
    assert repaired(chunks) == whole


@PROPS
@given(case=cut_any(), field=st.sampled_from(["content", "reasoning"]))
def test_any_cut_of_any_text_agrees_with_the_whole(case: tuple[str, list[str]], field: str) -> None:
    text, chunks = case
    assert repaired(chunks, field) == repaired([text], field)


@PROPS
@given(text=st.one_of(texts, st.text(max_size=300)), family=st.sampled_from(sorted(PARSERS)))
def test_read_calls_never_raises(text: str, family: str) -> None:
    result = read_calls(text, family, TOOLS)
    assert result is None or all(isinstance(c, Call) for c in result)


@PROPS
@given(
    text=st.sampled_from(REPAIRABLE),
    tail=st.text(alphabet=st.characters(blacklist_categories=("Z", "C")), min_size=1, max_size=8),
)
def test_text_after_the_markup_refuses_the_repair(text: str, tail: str) -> None:
    # A visible character after the markup (one that is not an end token's last character)
    # leaves text the calls do not account for.
    assert repaired([text + " then " + tail]) is None

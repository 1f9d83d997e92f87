"""Stream against whole reply, for every wire: the same turn, streamed as SSE bytes cut anywhere
or sent as one JSON reply, gets the same verdict.

A turn's content and reasoning are drawn from prose and markup snippets (Hermes, DSML, DeepSeek
native, Kimi, a whole-answer JSON call, and prose that only talks about them), with or without a
real tool call. Each turn is written as the wire's stream (its texts cut into random deltas, the
bytes cut at random points) and as the wire's whole reply. The finding must match (family, field,
tool name, start), the client must see the text the whole verdict allows (everything, or the
prose before the markup; a wire that parks prose behind reasoning markup may show less of it,
never more), and the retry's assistant turn must carry the same leaked text.

Issue 11: before its fix, the Responses test failed here (a content finding replaced by the
reasoning one when the editor settled twice, and the retry's text lost), chat never did.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spillguard import chat, responses
from spillguard.detect import Finding, inspect_text
from spillguard.wire import Stream
from tests.fuzz.chat_bytes import chat_events, chat_reply, chat_view
from tests.fuzz.responses_bytes import (
    responses_events,
    responses_reply,
    responses_view,
    well_formed,
)
from tests.fuzz.wire_bytes import HOLD, TOOLS, WEATHER, Turn, decode, drive

PROSE = [
    "It is sunny in Lisbon, 21 °C.",
    "Let me check that.",
    "Use the `<tool_call>` tag to call a tool.",
    '```\n<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>\n```',
    "> <｜tool▁calls▁begin｜> opens a DeepSeek call.",
    "Fullwidth ｜ and ▁ are ordinary characters here.",
    '{"city": "Lisbon", "unit": "C"}',
    "<b>bold</b> and [a link](https://example.com)",
]
MARKUP = [
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lisbon"}}\n</tool_call>',
    '<｜DSML｜function_calls>\n<｜DSML｜invoke name="run_in_terminal">\n'
    '<｜DSML｜parameter name="command" string="true">ls</｜DSML｜parameter>\n'
    "</｜DSML｜invoke>\n</｜DSML｜function_calls>",
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
    '```json\n{"city": "Porto"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>{"city": "Oslo"}<|tool_call_end|><|tool_calls_section_end|>',
    '{"name": "get_weather", "arguments": {"city": "Lisbon"}}',
]
SEPARATORS = ["", "\n", "\n\n", " "]
PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def texts(draw: st.DrawFn) -> str:
    """A few prose and markup snippets, joined as a model might (on new lines, or glued)."""
    snippets = draw(st.lists(st.sampled_from(PROSE + MARKUP), max_size=3))
    out = ""
    for snippet in snippets:
        out += draw(st.sampled_from(SEPARATORS)) if out else ""
        out += snippet
    return out


@st.composite
def deltas(draw: st.DrawFn, text: str) -> tuple[str, ...]:
    """The text cut into stream deltas at random characters."""
    if not text:
        return ()
    cuts = draw(st.lists(st.integers(1, max(1, len(text) - 1)), max_size=8, unique=True))
    bounds = [0, *sorted(c for c in cuts if c < len(text)), len(text)]
    return tuple(text[a:b] for a, b in itertools.pairwise(bounds))


@st.composite
def turns(draw: st.DrawFn) -> Turn:
    content = draw(texts())
    reasoning = draw(texts())
    calls = (WEATHER,) if draw(st.booleans()) else ()
    return Turn(draw(deltas(content)), draw(deltas(reasoning)), calls)


@st.composite
def pieces(draw: st.DrawFn, data: bytes) -> list[bytes]:
    """The bytes cut at random points (inside a line, a CRLF, a multi-byte character)."""
    cuts = draw(st.lists(st.integers(0, len(data)), max_size=12))
    bounds = [0, *sorted(cuts), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def key(finding: Finding | None) -> tuple[Any, ...] | None:
    if finding is None:
        return None
    return finding.family, finding.field, finding.tool_name, finding.start


def allowed(turn: Turn, finding: Finding | None) -> tuple[str, str]:
    """(content, reasoning) the client may see under the whole reply's verdict: all of it, or
    the field that leaked cut where its markup starts (the prose before it stays published)."""
    content, reasoning = turn.text, turn.thought
    if finding is not None and finding.field == "content":
        return content[: finding.start], reasoning
    if finding is not None:
        return content, reasoning[: finding.start]
    return content, reasoning


def check(
    turn: Turn,
    stream: Stream,
    data: list[bytes],
    whole: tuple[Finding, str] | None,
    seen: Callable[[bytes], tuple[str, str]],
    parks: bool = False,
) -> None:
    """`parks`: the wire holds back everything after reasoning markup until a real call
    releases it (Responses: later items must not overtake the reasoning item), so after a
    finding its client may have less of the prose, never more."""
    out = drive(stream, data)
    want = whole[0] if whole is not None else None
    assert key(stream.finding) == key(want)
    content, reasoning = seen(out)
    want_content, want_reasoning = allowed(turn, want)
    if want is None:
        assert (content, reasoning) == (want_content, want_reasoning)
    elif want.field == "content":
        # The stream stops at the content's markup: reasoning goes out as far as it had got.
        assert want_reasoning.startswith(reasoning)
        parked = parks and reasoning_markup(turn)
        assert want_content.startswith(content) if parked else content == want_content
    else:
        assert reasoning == want_reasoning
        assert want_content.startswith(content) if parks else content == want_content
    assert stream.leaked_text() == (whole[1] if whole is not None else turn.text)


def reasoning_markup(turn: Turn) -> bool:
    return inspect_text(turn.thought, TOOLS, blobs=False, field="reasoning") is not None


def chat_seen(out: bytes) -> tuple[str, str]:
    view = chat_view(out)
    return view.content.get(0, ""), view.reasoning.get(0, "")


def responses_seen(out: bytes) -> tuple[str, str]:
    view = responses_view(out)
    well_formed(view)
    return view.all_text, view.all_summary


@PROPS
@given(data=st.data(), turn=turns())
def test_chat_stream_agrees_with_the_whole_reply(data: st.DataObject, turn: Turn) -> None:
    raw = b"".join(chat_events(turn))
    whole = chat.inspect_reply(chat_reply(turn), TOOLS, HOLD)
    stream = chat.new_stream(TOOLS, HOLD, None)
    check(turn, stream, data.draw(pieces(raw)), whole, chat_seen)


@PROPS
@given(data=st.data(), turn=turns())
def test_responses_stream_agrees_with_the_whole_reply(data: st.DataObject, turn: Turn) -> None:
    raw = b"".join(responses_events(turn))
    whole = responses.inspect_reply(responses_reply(turn), TOOLS, HOLD)
    stream = responses.new_stream(TOOLS, HOLD, None)
    check(turn, stream, data.draw(pieces(raw)), whole, responses_seen, parks=True)


# Prose whose deltas may end in what could still grow into a recipient (`final`, `assistant`,
# `commentary`, `functools[`): the one place the markup judge may hold a quiet-looking delta.
TAILS = ["finally", "the final answer", "assistant to", "commentary", "functools.", "xf", "!?"]


@PROPS
@given(data=st.data(), turn=turns(), extra=st.lists(st.sampled_from(TAILS), max_size=4))
def test_chat_events_read_together_publish_what_they_publish_one_by_one(
    data: st.DataObject, turn: Turn, extra: list[str]
) -> None:
    """The proxy gives the chat editor each read's events together (`feed_all`): the client
    gets the same text and the decision the same verdict as from feeding them one by one, and
    every event that goes out as the upstream sent it one by one does so together too (read
    together, a delta that could have opened a marker is already known not to)."""
    text = turn.text + " ".join(extra)
    turn = Turn(data.draw(deltas(text)), turn.reasoning, turn.calls)
    raw = b"".join(chat_events(turn))
    cuts = data.draw(pieces(raw))
    apart, together = chat.new_stream(TOOLS, HOLD, None), chat.new_stream(TOOLS, HOLD, None)
    out_apart = drive(apart, cuts, one_by_one=True)
    out_together = drive(together, cuts)
    assert chat_view(out_together) == chat_view(out_apart)
    assert key(together.finding) == key(apart.finding)
    assert together.leaked_text() == apart.leaked_text()
    # An event went out as sent when its bytes are the upstream's at the upstream's place: a
    # merged delta may spell the same bytes as another delta sent earlier in the text.
    assert placed(out_apart) & placed(raw) <= placed(out_together)


def placed(data: bytes) -> set[tuple[bytes, int, int]]:
    """Each event's bytes with the lengths of the content and reasoning before it."""
    out, before = set(), b""
    for event in decode(data):
        view = chat_view(before)
        out.add((event.raw, len(view.content.get(0, "")), len(view.reasoning.get(0, ""))))
        before += event.raw
    return out


def test_a_merged_delta_spelling_an_earlier_one_is_not_taken_for_it() -> None:
    """Fed one by one, "finally" is held and goes out merged with the upstream's " !?"; later
    " " and "!?" merge into an event of exactly the bytes of that " !?" delta. Read together,
    " " and "!?" go out as sent: the client's text is the same, and neither event is the
    upstream's " !?" at its place (a CI-style seed drew this)."""
    raw = b"".join(chat_events(Turn(("finally", " !?", " ", "!?"))))
    apart, together = chat.new_stream(TOOLS, HOLD, None), chat.new_stream(TOOLS, HOLD, None)
    out_apart, out_together = drive(apart, [raw], one_by_one=True), drive(together, [raw])
    assert chat_view(out_together) == chat_view(out_apart)
    assert placed(out_apart) & placed(raw) <= placed(out_together)

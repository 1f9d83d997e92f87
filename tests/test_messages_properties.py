"""Stream against whole reply for the Messages wire: the same turn, streamed as Anthropic events
cut anywhere or sent as one message, gets the same verdict (the check of
tests/test_wire_properties.py), and the client's stream keeps the shape the SDKs rely on. One
difference: prose before the markup that is only whitespace is not published (a blank text block
is refused when the turn is sent back), so there the client sees no text block at all.

The snippets add the families Anthropic-compatible endpoints leak (MiniMax's
`<minimax:tool_call>`, Claude's `<invoke name=…>` after a stray `count`, GLM's `<arg_key>`) to
the shared ones. Each turn is a thinking block, a text block and maybe a `tool_use` block.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from spillguard import messages
from tests.fuzz.messages_bytes import messages_events, messages_reply, messages_view
from tests.fuzz.wire_bytes import HOLD, TOOLS, WEATHER, Turn, drive
from tests.test_wire_properties import (
    MARKUP,
    PROPS,
    PROSE,
    SEPARATORS,
    allowed,
    deltas,
    key,
    pieces,
    reasoning_markup,
)

ANTHROPIC_MARKUP = [
    '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Lisbon</parameter>'
    "\n</invoke>\n</minimax:tool_call>",
    'count\n<invoke name="run_in_terminal">\n<parameter name="command">ls -la</parameter>\n'
    "</invoke>",
    "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Lisbon</arg_value>\n</tool_call>",
]
ANTHROPIC_PROSE = [
    "MiniMax wraps calls in `<minimax:tool_call>` tags.",
    "Count the words: count, count.",
    "   ",
]


@st.composite
def texts(draw: st.DrawFn) -> str:
    snippets = draw(
        st.lists(st.sampled_from(PROSE + ANTHROPIC_PROSE + MARKUP + ANTHROPIC_MARKUP), max_size=3)
    )
    out = ""
    for snippet in snippets:
        out += draw(st.sampled_from(SEPARATORS)) if out else ""
        out += snippet
    return out


@st.composite
def turns(draw: st.DrawFn) -> Turn:
    content = draw(texts())
    reasoning = draw(texts())
    calls = (WEATHER,) if draw(st.booleans()) else ()
    return Turn(draw(deltas(content)), draw(deltas(reasoning)), calls)


@PROPS
@given(data=st.data(), turn=turns())
def test_messages_stream_agrees_with_the_whole_reply(data: st.DataObject, turn: Turn) -> None:
    if turn.text and not turn.text.strip():
        turn = Turn((), turn.reasoning, turn.calls)  # an upstream's own blank block passes as is
    raw = b"".join(messages_events(turn))
    whole = messages.inspect_reply(messages_reply(turn), TOOLS, HOLD)
    stream = messages.WIRE.new_stream(TOOLS, HOLD, None)
    view = messages_view(drive(stream, data.draw(pieces(raw))))
    want = whole[0] if whole is not None else None
    assert key(stream.finding) == key(want)
    assert view.starts == 1
    content, reasoning = view.text, view.thinking
    want_content, want_reasoning = allowed(turn, want)
    want_content = want_content if want_content.strip() else ""
    # Behind thinking markup, everything is parked: the client may have less, never more.
    parked = reasoning_markup(turn)
    if want is None:
        assert (content, reasoning) == (want_content, want_reasoning)
    elif want.field == "content":
        assert want_reasoning.startswith(reasoning)
        assert want_content.startswith(content) if parked else content == want_content
    else:
        assert reasoning == want_reasoning
        assert want_content.startswith(content)
    assert stream.leaked_text() == (whole[1] if whole is not None else turn.text)

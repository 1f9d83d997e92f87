"""The Responses turn rule, fed as SSE bytes: the stream editor and the whole-reply inspection
reach the same finding and the same leaked text (issue 11: content wins over reasoning, reasoning
counts only when no structured call was made, and settling twice changes nothing)."""

from __future__ import annotations

import itertools
import json

import pytest

from spillguard.detect import Finding, declared_tools
from spillguard.responses import ResponsesStream, inspect_reply
from spillguard.scripted import Turn, call, response_events, response_object
from spillguard.sse import SSEDecoder
from tests.samples import DSML, HERMES

TOOLS = declared_tools(
    {"tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]}
)
HOLD = 256 * 1024
PROSE = "Let me look that up.\n"

BOTH = Turn(content=PROSE + HERMES, reasoning=DSML, delta_size=8)
REASONING_ONLY = Turn(content="Sure.", reasoning=DSML, delta_size=8)
REASONING_AND_CALL = Turn(
    reasoning=DSML, tool_calls=[call("get_weather", {"city": "Lisbon"})], delta_size=8
)


def edit(body: bytes, cuts: tuple[int, ...]) -> ResponsesStream:
    """Feed the body to a stream editor in pieces, as the proxy does: every event (after a
    finding too, so the finding settles), then `settle` once the upstream ends with a finding,
    or `finish` when it ends without one."""
    stream = ResponsesStream(TOOLS, HOLD, None)
    decoder = SSEDecoder()
    bounds = (0, *cuts, len(body))
    for start, end in itertools.pairwise(bounds):
        for event in decoder.feed(body[start:end]):
            stream.feed(event)
    for event in decoder.flush():
        stream.feed(event)
    if stream.certain:
        stream.settle()
    else:
        stream.finish()
    return stream


def whole(turn: Turn) -> tuple[Finding, str] | None:
    return inspect_reply(json.loads(json.dumps(response_object(turn, "m"))), TOOLS, HOLD)


def summary(finding: Finding | None) -> tuple[str, str | None, str] | None:
    return None if finding is None else (finding.family, finding.tool_name, finding.field)


def test_content_wins_over_reasoning_in_a_whole_reply() -> None:
    found = whole(BOTH)
    assert found is not None
    finding, leaked = found
    assert summary(finding) == ("hermes", "get_weather", "content")
    assert leaked == PROSE  # the prose before the markup, never the markup


def test_content_wins_over_reasoning_in_a_stream_cut_anywhere() -> None:
    body = b"".join(response_events(BOTH, "m"))
    expected = whole(BOTH)
    assert expected is not None
    for cut in range(0, len(body) + 1, 7):
        stream = edit(body, (cut,))
        assert summary(stream.finding) == summary(expected[0]), cut
        assert stream.leaked_text() == expected[1], cut


def test_settle_is_idempotent() -> None:
    stream = edit(b"".join(response_events(BOTH, "m")), ())
    first = stream.finding
    stream.settle()
    stream.settle()
    assert stream.finding == first
    assert summary(first) == ("hermes", "get_weather", "content")


def test_reasoning_counts_without_a_call_and_the_retry_carries_the_content() -> None:
    found = whole(REASONING_ONLY)
    assert found is not None
    assert summary(found[0]) == ("dsml", "get_weather", "reasoning")
    assert found[1] == "Sure."  # the assistant turn's content, never the reasoning
    stream = edit(b"".join(response_events(REASONING_ONLY, "m")), ())
    assert summary(stream.finding) == summary(found[0])
    assert stream.leaked_text() == "Sure."


@pytest.mark.parametrize("cut", [0, 100, 400, 900])
def test_reasoning_markup_beside_a_real_call_is_no_finding(cut: int) -> None:
    assert whole(REASONING_AND_CALL) is None
    stream = edit(b"".join(response_events(REASONING_AND_CALL, "m")), (cut,))
    assert stream.finding is None

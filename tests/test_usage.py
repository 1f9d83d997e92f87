"""The cost of leaks (issue 12, item 6): the usage each API reports, what the outcome keeps of
the attempts that leaked, and the `x-spillguard-leaked-tokens` header a client gets."""

from __future__ import annotations

from typing import Any

import pytest

from spillguard.outcome import Outcome
from spillguard.scripted import Turn, call
from spillguard.usage import Usage, reply_usage, usage_of
from tests.conftest import TOOLS, chat_body
from tests.samples import HERMES

REAL = Turn(tool_calls=[call("get_weather", {"city": "Lisbon"})])
FLAT_TOOLS = [{"type": "function", **t["function"]} for t in TOOLS]
HEADER = "x-spillguard-leaked-tokens"
SCRIPTED = 15  # the scripted upstream bills 10 prompt and 5 completion tokens a reply


@pytest.mark.parametrize(
    ("usage", "want"),
    [
        ({"prompt_tokens": 31, "completion_tokens": 12, "total_tokens": 43}, Usage(31, 12)),
        ({"input_tokens": 40, "output_tokens": 18, "total_tokens": 58}, Usage(40, 18)),
        ({"input_tokens": 7, "output_tokens": 2}, Usage(7, 2)),  # Messages: no total
        ({"prompt_tokens": 10, "total_tokens": 15}, Usage(10, 5)),
        ({"completion_tokens": 5, "total_tokens": 15}, Usage(10, 5)),
        ({"total_tokens": 15}, None),
        ({"prompt_tokens": 20, "total_tokens": 15}, None),
        ({"prompt_tokens": True, "completion_tokens": 1}, None),
        ({"prompt_tokens": "10", "completion_tokens": 5}, None),
        (None, None),
        ([], None),
    ],
)
def test_usage_is_read_in_every_api_shape(usage: Any, want: Usage | None) -> None:
    assert usage_of(usage) == want
    assert reply_usage({"usage": usage}) == want


def test_the_outcome_sums_the_attempts_that_leaked_only_when_each_is_known() -> None:
    outcome = Outcome("sg-1", "chat", "retry")
    assert outcome.leaked_usage is None
    outcome.finding("hermes", "get_weather", 1, HERMES, Usage(10, 5))
    assert outcome.leaked_usage == Usage(10, 5)
    assert outcome.findings[0].usage == Usage(10, 5)
    outcome.finding("hermes", "get_weather", 2, HERMES, Usage(12, 6))
    assert outcome.leaked_usage == Usage(22, 11)
    assert outcome.leaked_usage.total_tokens == 33
    outcome.finding("hermes", "get_weather", 2, HERMES)
    assert outcome.leaked_usage is None  # one attempt did not say: no partial sum


async def post(h: Any, path: str, body: dict[str, Any]) -> Any:
    async with h.http() as http:
        return await http.post(path, json=body)


async def test_a_retried_reply_says_what_the_leaked_attempt_cost(harness: Any) -> None:
    h = await harness(Turn(content=HERMES), REAL)
    r = await post(h, "/chat/completions", chat_body())
    assert r.headers["x-spillguard-action"] == "retried"
    assert r.json()["usage"]["total_tokens"] == SCRIPTED  # the second attempt's only
    assert r.headers[HEADER] == str(SCRIPTED)


async def test_a_double_leak_says_what_both_attempts_cost(harness: Any) -> None:
    h = await harness(Turn(content=HERMES), Turn(content=HERMES))
    for stream in (False, True):
        extra = {"stream_options": {"include_usage": True}} if stream else {}
        r = await post(h, "/chat/completions", chat_body(stream=stream, **extra))
        assert r.status_code == 502
        assert r.headers[HEADER] == str(2 * SCRIPTED)


async def test_a_stream_says_it_when_the_usage_chunk_came(harness: Any) -> None:
    h = await harness(Turn(content=HERMES), REAL, Turn(content=HERMES), REAL)
    body = chat_body(stream=True, stream_options={"include_usage": True})
    r = await post(h, "/chat/completions", body)
    assert r.headers["x-spillguard-action"] == "retried"  # a fresh retry: nothing published
    assert r.headers[HEADER] == str(SCRIPTED)
    r = await post(h, "/chat/completions", chat_body(stream=True))
    assert r.headers["x-spillguard-action"] == "retried"
    assert HEADER not in r.headers  # without include_usage the upstream never said


async def test_a_responses_stream_reads_the_cost_from_response_completed(harness: Any) -> None:
    h = await harness(Turn(content=HERMES), REAL, Turn(content=HERMES), REAL)
    body = {"model": "m", "input": "weather?", "tools": FLAT_TOOLS, "stream": True}
    r = await post(h, "/responses", body)
    assert r.headers["x-spillguard-action"] == "retried"
    assert r.headers[HEADER] == str(SCRIPTED)
    r = await post(h, "/responses", {**body, "stream": False})
    assert r.headers["x-spillguard-action"] == "retried"
    assert r.headers[HEADER] == str(SCRIPTED)


async def test_an_honest_reply_has_no_cost_to_report(harness: Any) -> None:
    h = await harness(Turn(content="It is sunny."))
    r = await post(h, "/chat/completions", chat_body())
    assert r.headers["x-spillguard-action"] == "passed"
    assert HEADER not in r.headers


async def test_the_tokens_of_leaked_attempts_are_counted_by_family_and_model(harness: Any) -> None:
    h = await harness(Turn(content=HERMES), Turn(content=HERMES))  # both attempts leak
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body())
        scraped = (await http.get(h.url.removesuffix("/v1") + "/metrics")).text
    assert r.status_code == 502
    for direction, tokens in (("input", 20), ("output", 10)):  # 10 in, 5 out per attempt
        labels = f'direction="{direction}",family="hermes",model="m",upstream="default"'
        assert f"spillguard_leaked_tokens_total{{{labels}}} {float(tokens)}" in scraped


async def test_a_repaired_attempt_is_no_leaked_cost(harness: Any) -> None:
    h = await harness(Turn(content=HERMES), Turn(content=HERMES), mode="repair")
    async with h.http() as http:
        r = await http.post("/chat/completions", json=chat_body())
        scraped = (await http.get(h.url.removesuffix("/v1") + "/metrics")).text
    assert r.status_code == 200
    assert r.headers["x-spillguard-action"] == "repaired"
    assert HEADER not in r.headers
    assert 'spillguard_findings_total{family="hermes"' in scraped  # the finding is counted
    assert "spillguard_leaked_tokens_total{" not in scraped  # its tokens reached the client

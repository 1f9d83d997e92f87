"""The scenarios each real client runs against spillguard, what a client returned, and the checks.

A scenario is the scripted upstream's turns plus what the client must end up with. The same
scenarios and checks serve the Node clients (tests/test_clients_node.py, which reads the JSON the
scripts print) and the Python clients (tests/test_clients_python.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from spillguard.scripted import Turn, call
from tests.clients.provider import Case, Item

CODE = "TEXT_ENCODED_TOOL_CALL"
PROMPT = "What is the weather in Lisbon?"  # the same text as in common.mjs
TOOL_OUTPUT = '{"temperature_c": 21}'
TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}

HONEST = "Lisbon is sunny today, about 21 °C."
PROSE = "Let me look up the weather for you.\n"
PREAMBLE = "I will check the weather in Lisbon first.\n"
FOLLOWUP = "It is 21 °C in Lisbon, so a light jacket is enough."
DEEPSEEK = (
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
    '```json\n{"city": "Lisbon"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
)
HERMES = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lisbon"}}\n</tool_call>'
JSON_CALL = '{"name": "get_weather", "arguments": {"city": "Lisbon"}}'
MARKUP = ("<｜", "｜>", "▁", "<tool_call", "</tool_call", '{"name"', '"arguments"')

REAL = Turn(tool_calls=[call("get_weather", {"city": "Lisbon"})])
# Streams publish prose as it arrives; the small delay lets the prose go out before the markup.
STEP = 0.01

# The hold while the upstream drips a JSON tool call (28 deltas, 0.1 s apart: about 2.8 s of
# steady bytes, never silent for a keep-alive interval) outlasts the client's timeout.
KEEPALIVE = 0.3
CLIENT_TIMEOUT = 1.0
DRIP = Turn(content=JSON_CALL, delta_size=2, delay=0.1)


@dataclass(frozen=True)
class Finish:
    """What a client reports as the finish: after text, after a tool call, and after a stream
    that fails midway, when it reports that without raising (None: it raises)."""

    text: str | None
    call: str | None
    error: str | None = None


CHAT = Finish("stop", "tool_calls")  # Chat Completions' finish_reason
RESPONSES = Finish("completed", "completed")  # the Responses API has no finish: its status


@dataclass(frozen=True)
class Api:
    """One way of driving one client: `call` names it to the driver."""

    client: str
    call: str
    stream: bool
    responses: bool
    finish: Finish
    has_timeout: bool = True  # the client has a timeout option for the HTTP exchange
    # Where the client exposes spillguard's error code (see Failure.where): on an HTTP 502,
    # and on an error event in a stream that had started.
    code_at: tuple[str, str] = ("code", "code")

    @property
    def id(self) -> str:
        return f"{self.client}:{self.call}"


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str
    id: str


@dataclass(frozen=True)
class Failure:
    """An error as the client exposed it; `where` says where the code was found."""

    kind: str
    status: int | None
    code: str | None
    where: str | None
    message: str


@dataclass(frozen=True)
class Outcome:
    """What the client library returned."""

    text: str = ""
    calls: tuple[ToolCall, ...] = ()
    rejected: tuple[str, ...] = ()  # tool calls the client could not assemble
    finish: str | None = None
    response_id: str | None = None
    messages: tuple[str, ...] | None = None  # Responses: each message item's text
    error: Failure | None = None
    chained: Outcome | None = None  # the next turn, continuing after the tool call

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Outcome:
        messages = data.get("messages")
        error, chained = data.get("error"), data.get("chained")
        return cls(
            text=data["text"] or "",
            calls=tuple(ToolCall(c["name"], c["arguments"], c["id"]) for c in data["calls"]),
            rejected=tuple(data["rejected"]),
            finish=data["finish"],
            response_id=data["responseId"],
            messages=None if messages is None else tuple(messages),
            error=None if error is None else Failure(**error),
            chained=None if chained is None else cls.from_json(chained),
        )


Check = Callable[[Outcome, Case, Api], None]


@dataclass(frozen=True)
class Scenario:
    name: str
    turns: tuple[Turn, ...]
    check: Check
    streams: bool | None = None  # None: whole and streamed calls
    responses_only: bool = False
    timeout: bool = False  # run with the client's timeout at CLIENT_TIMEOUT, keep-alives on
    chain: bool = False

    def applies(self, api: Api) -> bool:
        return (
            (self.streams is None or self.streams == api.stream)
            and (api.responses or not self.responses_only)
            and (api.has_timeout or not self.timeout)
        )


def assert_clean(got: Outcome) -> None:
    """No markup reached the client, and the client assembled every tool call it was sent."""
    for text in (got.text, *(got.messages or ()), *(c.arguments for c in got.calls)):
        assert not any(bit in text for bit in MARKUP), text
    assert got.rejected == (), got.rejected


def assert_weather(got: Outcome, api: Api) -> None:
    assert got.error is None, got.error
    assert [(c.name, json.loads(c.arguments)) for c in got.calls] == [
        ("get_weather", {"city": "Lisbon"})
    ]
    assert got.calls[0].id
    assert got.finish == api.finish.call


def assert_failed(got: Outcome, api: Api, http: bool, code_at: str | None = None) -> None:
    """A clean failure carrying the code; `http`: a real HTTP 502 (nothing was published)."""
    assert got.error is not None, got
    assert got.error.code == CODE, got.error
    assert got.error.where == (code_at or api.code_at[0 if http else 1]), got.error
    if http:
        assert got.error.status == 502, got.error
    assert got.calls == ()
    assert got.finish == (None if http else api.finish.error)


def assert_messages(got: Outcome, *texts: str) -> None:
    if got.messages is not None:
        assert got.messages == texts, got.messages


def _honest(got: Outcome, case: Case, api: Api) -> None:
    assert got.error is None, got.error
    assert (got.text, got.calls, got.finish) == (HONEST, (), api.finish.text), got
    assert_messages(got, HONEST)
    assert case.calls == 1


def _real(got: Outcome, case: Case, api: Api) -> None:
    assert_weather(got, api)
    assert got.text == ""
    assert_messages(got)
    assert case.calls == 1


def _leak(got: Outcome, case: Case, api: Api) -> None:
    assert_weather(got, api)
    assert got.text == ""
    assert_messages(got)
    assert case.calls == 2


def _double_leak(got: Outcome, case: Case, api: Api) -> None:
    assert_failed(got, api, http=True)
    assert got.text == ""
    assert case.calls == 2


def _prose_then_leak(got: Outcome, case: Case, api: Api) -> None:
    assert_weather(got, api)
    if api.stream:
        assert got.text == PROSE, got.text
        assert_messages(got, PROSE)
    else:
        assert got.text == "", got.text  # a whole reply is only the retry's
        assert_messages(got)
    assert case.calls == 2


def _prose_then_double_leak(got: Outcome, case: Case, api: Api) -> None:
    assert_failed(got, api, http=not api.stream)
    assert got.text == (PROSE if api.stream else ""), got.text
    assert case.calls == 2


def _preamble_repeated(got: Outcome, case: Case, api: Api) -> None:
    assert_weather(got, api)
    assert got.text == PREAMBLE, got.text
    assert_messages(got, PREAMBLE)
    assert case.calls == 2


def _restated_then_answered(got: Outcome, case: Case, api: Api) -> None:
    assert got.error is None, got.error
    assert (got.text, got.calls, got.finish) == (PREAMBLE + FOLLOWUP, (), api.finish.text), got
    # The retry's message without the restatement; LangChain JS's stream joins a response's
    # message items into one text block.
    if got.messages is not None and len(got.messages) == 1:
        assert_messages(got, PREAMBLE + FOLLOWUP)
    else:
        assert_messages(got, PREAMBLE, FOLLOWUP)
    assert case.calls == 2


def texts_in(items: list[Item]) -> Iterator[str]:
    for item in items:
        content = item.get("content")
        if isinstance(content, str):
            yield content
        elif isinstance(content, list):
            yield from (p["text"] for p in content if isinstance(p, dict) and "text" in p)
        yield from (str(item[key]) for key in ("arguments", "output") if key in item)


def _chained(first: Check) -> Check:
    def check(got: Outcome, case: Case, api: Api) -> None:
        first(got, Case(case.turns, case.requests[:2], case.seen[:2]), api)
        assert got.chained is not None
        assert got.chained.error is None, got.chained.error
        assert got.chained.text == FOLLOWUP
        assert case.calls == 3
        # What the next turn named (a response, items) reached the upstream as what the client
        # had received: the named response holds the client's call, and nothing named holds
        # the leaked attempt's markup.
        seen = case.seen[2]
        assert seen is not None
        named = [*texts_in(seen.inputs), *texts_in(seen.previous or [])]
        assert not [text for text in named if any(bit in text for bit in MARKUP)], named
        if seen.previous is not None:
            held = {i.get("call_id") for i in seen.previous if i.get("type") == "function_call"}
            assert got.calls[0].id in held, seen.previous

    return check


def _held(got: Outcome, case: Case, api: Api) -> None:
    assert_weather(got, api)
    assert got.text == ""
    assert case.calls == 2


def _spliced(leak: str) -> Turn:
    return Turn(content=leak, delay=STEP)


FOLLOW = Turn(content=FOLLOWUP)
SCENARIOS = {
    s.name: s
    for s in (
        Scenario("honest", (Turn(content=HONEST),), _honest),
        Scenario("real_call", (REAL,), _real),
        Scenario("leak_deepseek", (Turn(content=DEEPSEEK), REAL), _leak),
        Scenario("leak_hermes", (Turn(content=HERMES), REAL), _leak),
        Scenario("double_leak", (Turn(content=HERMES), Turn(content=DEEPSEEK)), _double_leak),
        Scenario("prose_then_leak", (_spliced(PROSE + HERMES), REAL), _prose_then_leak),
        Scenario(
            "prose_then_double_leak",
            (_spliced(PROSE + HERMES), Turn(content=DEEPSEEK)),
            _prose_then_double_leak,
        ),
        Scenario(
            "retry_repeats_preamble",
            (_spliced(PREAMBLE + HERMES), Turn(content=PREAMBLE, tool_calls=REAL.tool_calls)),
            _preamble_repeated,
        ),
        Scenario(
            "retry_restates_then_answers",
            (_spliced(PREAMBLE + HERMES), Turn(content=PREAMBLE + FOLLOWUP)),
            _restated_then_answered,
            streams=True,
        ),
        Scenario(
            "chain_after_retry",
            (Turn(content=HERMES), REAL, FOLLOW),
            _chained(_leak),
            responses_only=True,
            chain=True,
        ),
        Scenario(
            "chain_after_splice",
            (_spliced(PROSE + HERMES), REAL, FOLLOW),
            _chained(_prose_then_leak),
            streams=True,
            responses_only=True,
            chain=True,
        ),
        Scenario("timeout_during_hold", (DRIP, REAL), _held, streams=True, timeout=True),
    )
}

# Each spillguard the suites start, by name; a scenario with `timeout` uses "keepalive".
VARIANTS: dict[str, dict[str, Any]] = {"default": {}, "keepalive": {"keepalive": KEEPALIVE}}


@dataclass(frozen=True)
class Run:
    """One case: a scenario through one client API. `model` names it upstream."""

    api: Api
    scenario: Scenario
    retries: int | None = 0  # None: the client's default
    name: str = ""  # when one scenario runs twice on the same API
    chain: str | None = None  # how to continue after a tool call: "previous" or "history"

    @property
    def model(self) -> str:
        return f"{self.api.id}/{self.name or self.scenario.name}"

    @property
    def variant(self) -> str:
        return "keepalive" if self.scenario.timeout else "default"

    def spec(self, base: str) -> dict[str, Any]:
        """The case as the Node scripts read it (tests/clients/common.mjs)."""
        return {
            "model": self.model,
            "call": self.api.call,
            "base": base,
            "retries": self.retries,
            "timeoutMs": CLIENT_TIMEOUT * 1000 if self.scenario.timeout else None,
            "chain": self.chain,
        }

    def param(self) -> Any:
        return pytest.param(self, id=f"{self.api.id}:{self.name or self.scenario.name}")


def runs(apis: Iterable[Api], chain: str = "previous") -> list[Run]:
    """Every scenario through every API it applies to."""
    return [
        Run(api, s, chain=chain if s.chain else None)
        for api in apis
        for s in SCENARIOS.values()
        if s.applies(api)
    ]

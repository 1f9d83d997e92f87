"""The retry never shows the model its markup, and its instruction follows `tool_choice`
(issue 12, item 5): what the scripted upstream receives as the retry, for every tool_choice
form, streamed and not, on Chat Completions and on the Responses API."""

from __future__ import annotations

from typing import Any

import pytest

from spillguard.cli import _serve_parser, settings_from
from spillguard.correction import Choice, ToolChoice, correction, tool_choice
from spillguard.policy import Policy
from spillguard.scripted import Turn, call
from spillguard.settings import (
    CORRECTION_NAMED,
    CORRECTION_NONE,
    CORRECTION_REQUIRED,
    DEFAULT_CORRECTION,
    Settings,
)
from tests.conftest import TOOLS, chat_body
from tests.samples import HERMES

PROSE = "Let me look that up.\n"
REAL = Turn(tool_calls=[call("get_weather", {"city": "Lisbon"})])
HONEST = Turn(content="It is sunny.")
FLAT_TOOLS = [{"type": "function", **t["function"]} for t in TOOLS]
NAMED = CORRECTION_NAMED.replace("{name}", "get_weather")

# tool_choice as each API writes it -> the instruction the retry must carry
CHAT_CHOICES: list[tuple[Any, str]] = [
    (None, DEFAULT_CORRECTION),
    ("auto", DEFAULT_CORRECTION),
    ("required", CORRECTION_REQUIRED),
    ("none", CORRECTION_NONE),
    ({"type": "function", "function": {"name": "get_weather"}}, NAMED),
    (
        {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": []}},
        CORRECTION_REQUIRED,
    ),
]
RESPONSES_CHOICES: list[tuple[Any, str]] = [
    (None, DEFAULT_CORRECTION),
    ("required", CORRECTION_REQUIRED),
    ("none", CORRECTION_NONE),
    ({"type": "function", "name": "get_weather"}, NAMED),
    ({"type": "allowed_tools", "mode": "required", "tools": []}, CORRECTION_REQUIRED),
]


@pytest.mark.parametrize(
    ("body", "want"),
    [
        ({}, ToolChoice(Choice.AUTO)),
        ({"tool_choice": "auto"}, ToolChoice(Choice.AUTO)),
        ({"tool_choice": "required"}, ToolChoice(Choice.REQUIRED)),
        ({"tool_choice": "none"}, ToolChoice(Choice.NONE)),
        (
            {"tool_choice": {"type": "function", "function": {"name": "f"}}},
            ToolChoice(Choice.NAMED, "f"),
        ),
        ({"tool_choice": {"type": "function", "name": "f"}}, ToolChoice(Choice.NAMED, "f")),
        (
            {"tool_choice": {"type": "allowed_tools", "mode": "required"}},
            ToolChoice(Choice.REQUIRED),
        ),
        (
            {"tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "auto"}}},
            ToolChoice(Choice.AUTO),
        ),
        ({"tool_choice": {"type": "web_search_preview"}}, ToolChoice(Choice.AUTO)),
        ({"function_call": {"name": "f"}}, ToolChoice(Choice.NAMED, "f")),  # legacy
        ({"function_call": "none"}, ToolChoice(Choice.NONE)),
        (
            {"tool_choice": {"type": "tool", "name": "f"}},
            ToolChoice(Choice.NAMED, "f"),
        ),  # Anthropic
        ({"tool_choice": {"type": "any"}}, ToolChoice(Choice.REQUIRED)),
        ({"tool_choice": 3}, ToolChoice(Choice.AUTO)),
        ({"tool_choice": {"type": "function", "function": {"name": ""}}}, ToolChoice(Choice.AUTO)),
    ],
)
def test_tool_choice_is_read_in_every_shape(body: dict[str, Any], want: ToolChoice) -> None:
    assert tool_choice(body) == want


def test_none_never_asks_for_a_call() -> None:
    text = correction(Policy.of(Settings()), {"tool_choice": "none"})
    assert "prose" in text
    assert "call it" not in text and "Call the" not in text and "must call" not in text


def test_every_variant_is_a_setting_and_a_flag() -> None:
    args = [
        "--correction-required",
        "R.",
        "--correction-named",
        "Use {name}.",
        "--correction-none",
        "N.",
    ]
    settings = settings_from(_serve_parser("spillguard").parse_args(args))
    policy = Policy.of(settings)
    assert correction(policy, {"tool_choice": "required"}) == "R."
    assert correction(policy, {"tool_choice": {"type": "function", "name": "f"}}) == "Use f."
    assert correction(policy, {"tool_choice": "none"}) == "N."


# ---- what the upstream receives ---------------------------------------------------------------


def with_choice(body: dict[str, Any], choice: Any) -> dict[str, Any]:
    return body if choice is None else {**body, "tool_choice": choice}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("choice", "want"), CHAT_CHOICES)
async def test_chat_retry_carries_no_markup_and_the_instruction_for_tool_choice(
    harness: Any, stream: bool, choice: Any, want: str
) -> None:
    h = await harness(Turn(content=HERMES), REAL)
    body = with_choice(chat_body(stream=stream), choice)
    async with h.http() as http:
        r = await http.post("/chat/completions", json=body)
    assert r.status_code == 200
    retry = h.upstream.requests[1]["body"]
    assert retry["messages"] == [*body["messages"], {"role": "user", "content": want}]
    assert retry.get("tool_choice") == body.get("tool_choice")


@pytest.mark.parametrize("stream", [False, True])
async def test_chat_retry_assistant_turn_is_the_prose_before_the_markup(
    harness: Any, stream: bool
) -> None:
    h = await harness(Turn(content=PROSE + HERMES, delay=0.01), REAL)
    body = with_choice(chat_body(stream=stream), "required")
    async with h.http() as http:
        r = await http.post("/chat/completions", json=body)
    assert r.status_code == 200
    retry = h.upstream.requests[1]["body"]
    assert retry["messages"][-2:] == [
        {"role": "assistant", "content": PROSE},
        {"role": "user", "content": CORRECTION_REQUIRED},
    ]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("choice", "want"), RESPONSES_CHOICES)
async def test_responses_retry_carries_no_markup_and_the_instruction_for_tool_choice(
    harness: Any, stream: bool, choice: Any, want: str
) -> None:
    h = await harness(Turn(content=HERMES), HONEST)
    body = {"model": "m", "input": "weather?", "tools": FLAT_TOOLS, "stream": stream}
    body = with_choice(body, choice)
    async with h.http() as http:
        r = await http.post("/responses", json=body)
    assert r.status_code == 200
    retry = h.upstream.requests[1]["body"]
    assert retry["input"] == [
        {"role": "user", "content": "weather?"},
        {"role": "user", "content": want},
    ]


@pytest.mark.parametrize("stream", [False, True])
async def test_responses_retry_assistant_turn_is_the_prose_before_the_markup(
    harness: Any, stream: bool
) -> None:
    h = await harness(Turn(content=PROSE + HERMES, delay=0.01), HONEST)
    body = {"model": "m", "input": [{"role": "user", "content": "weather?"}], "tools": FLAT_TOOLS}
    body |= {"stream": stream, "tool_choice": "none"}
    async with h.http() as http:
        r = await http.post("/responses", json=body)
    assert r.status_code == 200
    retry = h.upstream.requests[1]["body"]
    assert retry["input"] == [
        *body["input"],
        {"role": "assistant", "content": PROSE},
        {"role": "user", "content": CORRECTION_NONE},
    ]

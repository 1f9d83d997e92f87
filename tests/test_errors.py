"""spillguard's errors in the OpenAI shape: the leak's code is in its message too (issue 12,
item 4), since some clients (LiteLLM) keep only an error's message."""

from __future__ import annotations

import json

from spillguard import chat, responses
from spillguard.errors import LeakedToolCall, UpstreamTimeout

LEAK_MESSAGE = "TEXT_ENCODED_TOOL_CALL: Model returned tool-control text instead of a final answer"


def test_the_leak_message_starts_with_its_code() -> None:
    error = LeakedToolCall({"attempts": 2})
    body = json.loads(error.json_bytes())["error"]
    assert body["message"] == LEAK_MESSAGE
    assert body["code"] == "TEXT_ENCODED_TOOL_CALL"
    assert error.message == "Model returned tool-control text instead of a final answer"
    assert str(error) == error.message  # logs keep the plain text


def test_other_errors_keep_their_message() -> None:
    body = UpstreamTimeout("Upstream exceeded the total deadline").body()["error"]
    assert body["message"] == "Upstream exceeded the total deadline"


def test_error_events_carry_the_message_with_the_code() -> None:
    error = LeakedToolCall({"attempts": 2})
    chat_event = chat.error_event(error, None).split(b"\n\n")[0]
    assert json.loads(chat_event[len(b"data: ") :])["error"]["message"] == LEAK_MESSAGE
    data = responses.error_event(error, None).decode().split("data: ", 1)[1]
    event = json.loads(data)
    assert event["message"] == event["error"]["message"] == LEAK_MESSAGE

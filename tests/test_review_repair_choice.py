"""Review: repairs made where the request would not have accepted such a call from the model.

Sans-IO, through the wires' own records and `repair.repair_calls`, as the decision calls them.
Each test is a defect found in review, fixed since; each test now holds the fix.
"""

from __future__ import annotations

import json
from typing import Any

from spillguard import chat, responses
from tests.repair_wires import whole_repair

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}}
SHELL = {"type": "object", "properties": {"command": {"type": "string"}}}
CHAT_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "run_in_terminal", "parameters": SHELL}},
]
SHELL_LEAK = (
    '<tool_call>\n{"name": "run_in_terminal", "arguments": {"command": "ls"}}\n</tool_call>'
)


def chat_reply(content: str) -> dict[str, Any]:
    message = {"role": "assistant", "content": content}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return {"id": "chatcmpl-1", "object": "chat.completion", "model": "m", "choices": [choice]}


def chat_repair(body: dict[str, Any], content: str) -> bytes | None:
    """What the decision answers a whole chat reply with in mode repair (None: the retry)."""
    return whole_repair(chat.WIRE, body, chat_reply(content))


def test_chat_allowed_tools_excludes_a_tool_the_repair_must_not_call() -> None:
    only_weather = [{"type": "function", "function": {"name": "get_weather"}}]
    choice = {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": only_weather}}
    body = {"model": "m", "messages": [], "tools": CHAT_TOOLS, "tool_choice": choice}
    assert chat_repair(body, SHELL_LEAK) is None  # run_in_terminal is not allowed: retry


def test_responses_allowed_tools_excludes_a_tool_the_repair_must_not_call() -> None:
    tools_decl = [
        {"type": "function", "name": "get_weather", "parameters": WEATHER},
        {"type": "function", "name": "run_in_terminal", "parameters": SHELL},
    ]
    choice = {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": "get_weather"}],
    }
    body = {"model": "m", "input": "hi", "store": False, "tools": tools_decl, "tool_choice": choice}
    assert responses_repair(body, SHELL_LEAK) is None


def responses_repair(body: dict[str, Any], text: str) -> dict[str, Any] | None:
    part = {"type": "output_text", "text": text, "annotations": []}
    message = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed"}
    reply = {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "output": [{**message, "content": [part]}],
    }
    raw = whole_repair(responses.WIRE, body, reply)
    return None if raw is None else json.loads(raw)


def test_responses_custom_tool_is_not_repaired_as_a_function_call() -> None:
    declared = [
        {"type": "custom", "name": "apply_patch", "description": "Apply a patch"},
        {"type": "function", "name": "get_weather", "parameters": WEATHER},
    ]
    body = {"model": "m", "input": "hi", "store": False, "tools": declared}
    leak = '<tool_call>\n{"name": "apply_patch", "arguments": {"input": "x"}}\n</tool_call>'
    assert responses_repair(body, leak) is None  # retried: no function_call item answers it


def test_legacy_functions_request_is_not_answered_with_tool_calls() -> None:
    body = {"model": "m", "messages": [], "functions": [t["function"] for t in CHAT_TOOLS]}
    assert chat_repair(body, SHELL_LEAK) is None  # retried: its client reads function_call


def test_responses_forced_hosted_tool_is_not_answered_with_a_function_call() -> None:
    declared = [
        {"type": "file_search", "vector_store_ids": ["vs_1"]},
        {"type": "function", "name": "run_in_terminal", "parameters": SHELL},
    ]
    body = {
        "model": "m",
        "input": "hi",
        "store": False,
        "tools": declared,
        "tool_choice": {"type": "file_search"},
    }
    assert responses_repair(body, SHELL_LEAK) is None


def test_chat_forced_custom_tool_is_not_answered_with_another_call() -> None:
    custom = {"type": "custom", "custom": {"name": "grammar_tool"}}
    body = {
        "model": "m",
        "messages": [],
        "tools": [*CHAT_TOOLS, custom],
        "tool_choice": {"type": "custom", "custom": {"name": "grammar_tool"}},
    }
    assert chat_repair(body, SHELL_LEAK) is None

"""The requests the benchmarks send: a realistic chat request that declares tools, and a long
agent turn (`agent_request`) for what a request's size costs."""

from __future__ import annotations

import json
from typing import Any

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather and the forecast for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name"},
                    "days": {"type": "integer", "minimum": 1, "maximum": 14},
                    "units": {"type": "string", "enum": ["metric", "imperial"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_marine_forecast",
            "description": "Wave height, swell and wind at sea near a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "units": {"type": "string"},
                    "fields": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_places",
            "description": "Find points of interest near a location.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "near": {"type": "string"}},
                "required": ["query"],
            },
        },
    },
]


def chat_request(model: str = "bench", stream: bool = False) -> bytes:
    body: dict[str, Any] = {
        "model": model,
        "messages": [
            {
                "role": "system",
                "content": "You are a helpful travel assistant. Use the tools when they help.",
            },
            {"role": "user", "content": "What is the weather like in Lisbon this weekend?"},
        ],
        "tools": TOOLS,
        "tool_choice": "auto",
        "temperature": 0.2,
    }
    if stream:
        body["stream"] = True
    return json.dumps(body, separators=(",", ":")).encode()


def agent_request(turns: int = 40, model: str = "bench") -> bytes:
    """A coding agent's request late in a session: a long system prompt, `turns` rounds of a
    user asking, a tool call and its result, and the same tools (36 KB at 40 turns)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding assistant. " * 60},
    ]
    for i in range(turns):
        messages += [
            {"role": "user", "content": f"Open src/module_{i}.py and explain what run() does."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{i:04d}",
                        "type": "function",
                        "function": {
                            "name": "search_places",
                            "arguments": json.dumps({"query": f"module_{i}", "near": "src"}),
                        },
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": f"call_{i:04d}",
                "content": "def run(items):\n    return [item.strip() for item in items]\n" * 8,
            },
        ]
    body = {"model": model, "messages": messages, "tools": TOOLS, "temperature": 0.2}
    return json.dumps(body, separators=(",", ":")).encode()

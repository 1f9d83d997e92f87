"""The request the benchmarks send: a realistic chat request that declares tools."""

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

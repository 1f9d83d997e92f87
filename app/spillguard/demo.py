"""`spillguard demo`: what a client receives with and without spillguard, on a scripted upstream.

Everything runs on loopback: a scripted model that misbehaves the way real ones do, spillguard in
front of it, and the real `openai` SDK as the client, streamed and not. One scenario speaks the
Anthropic Messages API instead (as Claude Code does to DeepSeek, Kimi or MiniMax), its requests
sent as they are on the wire. No network, no key.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import openai

from . import scripted_anthropic as anthropic
from .runner import start_background
from .scripted import Raw, ScriptedUpstream, Turn, call
from .settings import Mode, Settings
from .sse import SSEDecoder

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]

DEEPSEEK_LEAK = (
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
    '```json\n{"city": "Lisbon"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
)
JSON_LEAK = '{"name": "get_weather", "arguments": {"city": "Lisbon"}}'
DSML_LEAK = (
    "<｜DSML｜function_calls>\n"
    '<｜DSML｜invoke name="get_weather">\n'
    '<｜DSML｜parameter name="city" string="true">Lisbon</｜DSML｜parameter>\n'
    "</｜DSML｜invoke>\n</｜DSML｜function_calls>"
)
HERMES_LEAK = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lisbon"}}\n</tool_call>'
REAL_CALL = Turn(tool_calls=[call("get_weather", {"city": "Lisbon"})])
HONEST = Turn(content="It is sunny in Lisbon today, around 21 °C.")

# scenario -> (what the model says on the first attempt, on the retry)
SCENARIOS: dict[str, tuple[Turn, Turn]] = {
    "DeepSeek markup leak": (Turn(content=DEEPSEEK_LEAK), REAL_CALL),
    "JSON-blob leak": (Turn(content=JSON_LEAK), HONEST),
    # Streamed with a pause per delta, as a model would: the prose is out before the markup comes.
    "prose, then a leak": (
        Turn(content="Let me check that.\n" + HERMES_LEAK, delay=0.02),
        REAL_CALL,
    ),
    "double leak": (Turn(content=DSML_LEAK), Turn(content=HERMES_LEAK)),
    "honest answer": (HONEST, HONEST),
    "real tool call": (REAL_CALL, REAL_CALL),
}


# With --mode repair these leaks are answered with the call they spell out, from one upstream
# call; the double leak's first attempt is as readable as the others.
REPAIRABLE = ("DeepSeek markup leak", "JSON-blob leak", "prose, then a leak", "double leak")

MESSAGES_SCENARIO = "Messages: MiniMax leak"
MINIMAX_LEAK = (
    '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Lisbon'
    "</parameter>\n</invoke>\n</minimax:tool_call>"
)
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
MESSAGES_TOOLS = [
    {"name": "get_weather", "description": "Current weather for a city", "input_schema": CITY}
]


def answer(record: dict[str, Any]) -> anthropic.Message:
    """The Anthropic-compatible model: prose then a MiniMax leak, then the real call on the
    retry (spillguard's retry is the conversation grown past the one question)."""
    if len(record["body"]["messages"]) == 1:
        leak = anthropic.text("Let me check that.\n" + MINIMAX_LEAK)
        return anthropic.Message([leak], delay=0.02)
    return anthropic.Message([anthropic.tool_use("get_weather", {"city": "Lisbon"})])


def script(record: dict[str, Any]) -> Turn | Raw:
    """The demo asks one question: a longer conversation is spillguard's retry."""
    messages = (record.get("body") or {}).get("messages") or [{}]
    first, second = SCENARIOS.get(messages[0].get("content", ""), (HONEST, HONEST))
    return first if len(messages) == 1 else second


def _short(text: str, width: int = 46) -> str:
    text = text.replace("\n", "⏎")
    return text if len(text) <= width else text[: width - 1] + "…"


async def ask(client: openai.AsyncOpenAI, question: str, stream: bool) -> str:
    messages: Any = [{"role": "user", "content": question}]
    try:
        if not stream:
            reply = await client.chat.completions.create(
                model="scripted-model",
                messages=messages,
                tools=TOOLS,  # type: ignore[arg-type]
            )
            message = reply.choices[0].message
            if message.tool_calls:
                fn = message.tool_calls[0].function  # type: ignore[union-attr]
                return f"tool call {fn.name}({fn.arguments})"
            return f"text: {message.content!r}"
        text, calls = "", dict[int, tuple[str, str]]()
        events = await client.chat.completions.create(
            model="scripted-model",
            messages=messages,
            tools=TOOLS,  # type: ignore[arg-type]
            stream=True,
        )
        async for chunk in events:  # type: ignore[union-attr]
            for choice in chunk.choices:
                text += choice.delta.content or ""
                for tc in choice.delta.tool_calls or []:
                    name, args = calls.get(tc.index, ("", ""))
                    fn = tc.function
                    calls[tc.index] = (
                        name + (fn.name or "" if fn else ""),
                        args + (fn.arguments or "" if fn else ""),
                    )
        if calls:
            name, args = calls[0]
            return f"tool call {name}({args})" + (f" after {text!r}" if text else "")
        return f"text: {text!r}"
    except openai.APIStatusError as exc:
        body = exc.body if isinstance(exc.body, dict) else {}
        code = body.get("code") or (body.get("error") or {}).get("code")
        return f"HTTP {exc.status_code} {code}"
    except openai.APIError as exc:
        return f"stream error {getattr(exc, 'code', None) or exc.message}"


def _message(data: bytes, stream: bool) -> dict[str, Any]:
    """A Messages reply as a client assembles it: the JSON, or the stream's blocks by index."""
    if not stream:
        parsed: dict[str, Any] = json.loads(data)
        return parsed
    content: list[dict[str, Any]] = []
    decoder = SSEDecoder()
    for event in decoder.feed(data) + decoder.flush():
        body = json.loads(event.data) if event.data else {}
        if body.get("type") == "error":
            return body
        if body.get("type") == "content_block_start":
            content.append({**body["content_block"], "partial_json": ""})
        elif body.get("type") == "content_block_delta":
            block, delta = content[body["index"]], body["delta"]
            for key in ("text", "partial_json"):
                block[key] = block.get(key, "") + delta.get(key, "")
    return {"content": content}


async def ask_messages(base: str, stream: bool) -> str:
    """The Messages scenario, as Claude Code sends it: `POST /v1/messages` with the Anthropic
    headers and Anthropic-shaped tools."""
    body = {"model": "deepseek-chat", "max_tokens": 512, "tools": MESSAGES_TOOLS}
    body |= {"messages": [{"role": "user", "content": "Weather in Lisbon?"}], "stream": stream}
    headers = {"x-api-key": "demo", "anthropic-version": "2023-06-01"}
    async with httpx.AsyncClient(timeout=30) as http:
        reply = await http.post(f"{base}/v1/messages", json=body, headers=headers)
    message = _message(reply.content, stream)
    if message.get("type") == "error":
        code = message["error"].get("details", {}).get("error_code")
        return f"HTTP {reply.status_code} {code}" if reply.status_code != 200 else f"error {code}"
    text = "".join(b.get("text", "") for b in message["content"] if b["type"] == "text")
    calls = [b for b in message["content"] if b["type"] == "tool_use"]
    if calls:
        args = calls[0].get("partial_json") or json.dumps(calls[0]["input"])
        return f"tool call {calls[0]['name']}({args})" + (f" after {text!r}" if text else "")
    return f"text: {text!r}"


async def run_demo(out: Any = print) -> int:
    upstream = await ScriptedUpstream(script).start()
    claude_like = await anthropic.anthropic_upstream(answer).start()
    origin = claude_like.url.removesuffix("/v1")
    settings = Settings(
        upstream=upstream.url, anthropic_upstream=origin, port=0, log_level="ERROR", incidents_db=""
    )
    proxy = await start_background(settings)
    repairing = await start_background(settings.model_copy(update={"mode": Mode.REPAIR}))
    rows: list[tuple[str, str, str, str, int]] = []
    repaired: list[tuple[str, str, str, int]] = []
    try:
        direct = openai.AsyncOpenAI(base_url=upstream.url, api_key="demo", max_retries=0)
        guarded = openai.AsyncOpenAI(base_url=proxy.url, api_key="demo", max_retries=0)
        for question in SCENARIOS:
            for stream in (False, True):
                without = await ask(direct, question, stream)
                before = len(upstream.requests)
                with_sg = await ask(guarded, question, stream)
                calls = len(upstream.requests) - before
                rows.append((question, "yes" if stream else "no", without, with_sg, calls))
        for stream in (False, True):
            without = await ask_messages(origin, stream)
            before = len(claude_like.requests)
            with_sg = await ask_messages(proxy.url.removesuffix("/v1"), stream)
            calls = len(claude_like.requests) - before
            rows.append((MESSAGES_SCENARIO, "yes" if stream else "no", without, with_sg, calls))
        repair = openai.AsyncOpenAI(base_url=repairing.url, api_key="demo", max_retries=0)
        for question in REPAIRABLE:
            for stream in (False, True):
                before = len(upstream.requests)
                got = await ask(repair, question, stream)
                calls = len(upstream.requests) - before
                repaired.append((question, "yes" if stream else "no", got, calls))
        for stream in (False, True):
            before = len(claude_like.requests)
            got = await ask_messages(repairing.url.removesuffix("/v1"), stream)
            calls = len(claude_like.requests) - before
            repaired.append((MESSAGES_SCENARIO, "yes" if stream else "no", got, calls))
    finally:
        await repairing.stop()
        await proxy.stop()
        await claude_like.stop()
        await upstream.stop()
    header = ("scenario", "stream", "client gets WITHOUT spillguard", "client gets WITH spillguard")
    widths = [22, 6, 48, 48]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + "  upstream calls"
    out(line)
    out("-" * len(line))
    for question, streamed, without, with_sg, count in rows:
        cells = (question, streamed, _short(without), _short(with_sg))
        out("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + f"  {count}")
    out("")
    out("Without spillguard the leaked markup or JSON arrives as the answer and the tool never")
    out("runs. With it, a leak is retried once with a corrective instruction; a second leak")
    out("fails with HTTP 502 TEXT_ENCODED_TOOL_CALL (x-should-retry: false) instead of passing.")
    out("")
    titles = ("scenario", "stream", "client gets WITH spillguard --mode repair")
    line = "  ".join(h.ljust(w) for h, w in zip(titles, widths[:3], strict=True))
    out(line + "  upstream calls")
    out("-" * len(line + "  upstream calls"))
    for question, streamed, got, count in repaired:
        short = (question, streamed, _short(got))
        out("  ".join(c.ljust(w) for c, w in zip(short, widths[:3], strict=True)) + f"  {count}")
    out("")
    out("With --mode repair a readable leak whose arguments fit the tool's schema becomes the")
    out("structured call it spells out, with no second upstream call; anything else is retried.")
    leaked = [
        r
        for r in [*rows, *((q, s, "", g, c) for q, s, g, c in repaired)]
        if "tool_call" in r[3] or "｜" in r[3] or '"name"' in r[3]
    ]
    return 1 if leaked else 0


def main() -> int:
    return asyncio.run(run_demo())


if __name__ == "__main__":
    raise SystemExit(main())

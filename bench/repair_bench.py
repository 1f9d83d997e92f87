"""What a repair saves against a retry: the time until the client has its tool call.

One scripted upstream on loopback paces every generation like a model serving it: a time to
first token, then one delta every `--delta-ms`. Its first answer to a request leaks the call as
text (prose, then Hermes markup); a second request (spillguard's retry) gets the structured
call, generated at the same pace. Two spillguards sit in front of it, `--mode retry` and
`--mode repair`; each round asks both, in alternating order, once whole and once streamed,
and times the request until the client has the whole answer (the real openai SDK as client).
Medians over the rounds, side by side.

  taskset -c 1 .venv/bin/python -m bench.repair_bench                 # defaults below
  taskset -c 1 .venv/bin/python -m bench.repair_bench --ttft-ms 800 --rounds 30
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import openai

from spillguard.runner import Running, start_background
from spillguard.scripted import Raw, ScriptedUpstream, Turn, attempt, call, chunks, completion
from spillguard.settings import Settings

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    }
]
MESSAGES = [{"role": "user", "content": "What will the weather be in Lisbon this weekend?"}]
PROSE = "Let me look up the forecast for Lisbon for the next two days.\n"
LEAK = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lisbon", "days": 2}}\n</tool_call>'
)
DELTA = 4  # characters per content delta (about one token)


class Paced:
    """The scripted upstream's script: every reply paced like a generation."""

    def __init__(self, ttft: float, delta: float) -> None:
        self.ttft, self.delta = ttft, delta

    def __call__(self, record: dict[str, Any]) -> Raw:
        leaked = attempt(record) == 1
        turn = (
            Turn(content=PROSE + LEAK, delta_size=DELTA)
            if leaked
            else Turn(
                content=PROSE, tool_calls=[call("get_weather", {"city": "Lisbon", "days": 2})]
            )
        )
        body = record["body"]
        if body.get("stream"):
            events = chunks(turn, "m", usage=True)
            pauses = (self.ttft, *([self.delta] * (len(events) - 1)))
            return Raw(200, {"content-type": "text/event-stream"}, events, pauses=pauses)
        generation = self.ttft + self.delta * (len(chunks(turn, "m")) - 1)
        data = json.dumps(completion(turn, "m")).encode()
        return Raw(200, {"content-type": "application/json"}, [data], pauses=(generation,))


async def whole(client: openai.AsyncOpenAI) -> tuple[float, str]:
    start = time.perf_counter()
    raw = await client.chat.completions.with_raw_response.create(
        model="m", messages=MESSAGES, tools=TOOLS
    )
    calls = raw.parse().choices[0].message.tool_calls
    assert calls and calls[0].function.name == "get_weather"
    return time.perf_counter() - start, raw.headers["x-spillguard-action"]


async def streamed(client: openai.AsyncOpenAI) -> tuple[float, str]:
    start = time.perf_counter()
    raw = await client.chat.completions.with_raw_response.create(
        model="m", messages=MESSAGES, tools=TOOLS, stream=True
    )
    names = ""
    async for chunk in raw.parse():
        for choice in chunk.choices:
            for tc in choice.delta.tool_calls or []:
                names += (tc.function and tc.function.name) or ""
    assert names == "get_weather"
    return time.perf_counter() - start, raw.headers["x-spillguard-action"]


async def main(args: argparse.Namespace) -> dict[str, Any]:
    upstream = await ScriptedUpstream(Paced(args.ttft_ms / 1000, args.delta_ms / 1000)).start()
    proxies: dict[str, Running] = {}
    base = {"upstream": upstream.url, "port": 0, "incidents_db": ""}
    base |= {"log_level": "WARNING", "leak_log_level": "INFO"}  # the timed loop logs nothing
    for mode in ("retry", "repair"):
        proxies[mode] = await start_background(Settings(**base, mode=mode))
    clients = {
        mode: openai.AsyncOpenAI(base_url=p.url, api_key="sk-bench", max_retries=0)
        for mode, p in proxies.items()
    }
    times: dict[tuple[str, str], list[float]] = {}
    try:
        for n in range(args.rounds):
            order = ("retry", "repair") if n % 2 == 0 else ("repair", "retry")
            for shape, ask in (("whole", whole), ("stream", streamed)):
                for mode in order:
                    before = len(upstream.requests)
                    seconds, action = await ask(clients[mode])
                    want = "retried" if mode == "retry" else "repaired"
                    assert action == want or (shape == "stream" and action == "passed"), action
                    assert len(upstream.requests) - before == (2 if mode == "retry" else 1)
                    times.setdefault((shape, mode), []).append(seconds)
    finally:
        for p in proxies.values():
            await p.stop()
        await upstream.stop()
    out: dict[str, Any] = {"ttft_ms": args.ttft_ms, "delta_ms": args.delta_ms}
    out["rounds"] = args.rounds
    for shape in ("whole", "stream"):
        retry = statistics.median(times[(shape, "retry")])
        repair = statistics.median(times[(shape, "repair")])
        out[shape] = {
            "retry_ms": round(retry * 1000, 1),
            "repair_ms": round(repair * 1000, 1),
            "saved_ms": round((retry - repair) * 1000, 1),
            "ratio": round(retry / repair, 2),
        }
    return out


def report(result: dict[str, Any]) -> str:
    lines = [
        f"upstream: {result['ttft_ms']} ms to first token, {result['delta_ms']} ms per delta; "
        f"{result['rounds']} rounds, medians",
        "",
        "| reply | retry (ms) | repair (ms) | saved (ms) | retry / repair |",
        "|---|---|---|---|---|",
    ]
    for shape in ("whole", "stream"):
        r = result[shape]
        lines.append(
            f"| {shape} | {r['retry_ms']} | {r['repair_ms']} | {r['saved_ms']} | {r['ratio']} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ttft-ms", type=float, default=500.0)
    parser.add_argument("--delta-ms", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    result = asyncio.run(main(args))
    print(json.dumps(result, indent=2) if args.json else report(result))

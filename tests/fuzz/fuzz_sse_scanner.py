"""A fuzz target over the SSE decoder and the detection core (atheris; also run by hypothesis in
tests/test_fuzz.py, so it stays valid where atheris does not install).

Each input is split by a seed taken from its first bytes into pieces, and checked for:

* the SSE decoder: cut anywhere, the same events with the same raw bytes as decoding it whole;
  the raw bytes are consecutive slices of the input with only line ends between them;
* the scanner: the input's text streamed in the same pieces gives the same finding and the same
  published text as `inspect_text` on the whole;
* the chat stream editor: the text as Chat Completions deltas gives the finding a whole reply
  gives, and publishes the text (or exactly the prose before the markup).

Run: `.venv/bin/python tests/fuzz/fuzz_sse_scanner.py -max_total_time=60 -max_len=4096`.
"""

from __future__ import annotations

import itertools
import json
import random
import sys
from typing import Any

from spillguard.chat import ChatStream, inspect_reply
from spillguard.detect import Scanner, declared_tools, inspect_text
from spillguard.sse import Event, SSEDecoder

TOOLS = declared_tools(
    {
        "tools": [
            {"type": "function", "function": {"name": "get_weather", "parameters": {}}},
            {"type": "function", "function": {"name": "run_in_terminal"}},
        ]
    }
)
HOLD = 4096


def pieces(data: bytes, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.sample(range(len(data) + 1), min(len(data) + 1, rng.randint(0, 12))))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def decode(parts: list[bytes]) -> list[Event]:
    decoder = SSEDecoder()
    out: list[Event] = []
    for part in parts:
        out.extend(decoder.feed(part))
    out.extend(decoder.flush())
    return out


def check_sse(data: bytes, rng: random.Random) -> None:
    whole = decode([data])
    assert decode(pieces(data, rng)) == whole
    assert decode([data[i : i + 1] for i in range(len(data))]) == whole
    for event in whole:  # id: and retry: lines never reach a client
        assert not any(line.startswith((b"id:", b"retry:")) for line in event.raw.splitlines()), (
            event
        )
    if b"id" in data or b"retry" in data:
        return
    # Without them, the raw bytes are consecutive slices that rebuild the input exactly.
    cursor = 0
    for event in whole:
        assert data.startswith(event.raw, cursor), (event, cursor)
        cursor += len(event.raw)
    assert cursor == len(data)


def check_scanner(text: str, rng: random.Random) -> None:
    want = inspect_text(text, TOOLS)
    scanner = Scanner(TOOLS)
    published = ""
    cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randint(0, 12))))
    bounds = [0, *cuts, len(text)]
    for a, b in itertools.pairwise(bounds):
        published += scanner.feed(text[a:b])
    published += scanner.finish()
    got = scanner.finding
    assert (got is None) == (want is None), (got, want)
    if got is None or want is None:
        assert published == text
        return
    assert (got.family, got.tool_name, got.start) == (want.family, want.tool_name, want.start)
    assert published == text[: got.start]


def chunk_event(content: str | None, finish: str | None = None) -> bytes:
    delta: dict[str, Any] = {"content": content} if content is not None else {}
    body = {"id": "c", "created": 1, "model": "m", "object": "chat.completion.chunk"}
    body["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def check_chat_stream(text: str, rng: random.Random) -> None:
    reply = {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
    want = inspect_reply(reply, TOOLS, HOLD)
    cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randint(0, 12))))
    bounds = [0, *cuts, len(text)]
    raw = chunk_event("") + b"".join(chunk_event(text[a:b]) for a, b in itertools.pairwise(bounds))
    raw += chunk_event(None, "stop") + b"data: [DONE]\n\n"
    stream = ChatStream(TOOLS, HOLD)
    outs = []
    for event in decode(pieces(raw, rng)):
        outs.extend(stream.feed(event))
    if stream.certain:
        stream.settle()
    else:
        outs.extend(stream.finish())
    published = ""
    for out in outs:
        for event in decode([out.data]):
            if event.data and event.data.startswith("{"):
                for choice in json.loads(event.data)["choices"]:
                    published += choice["delta"].get("content") or ""
    if stream.holding > HOLD or (want is None and stream.finding is not None):
        return  # past the hold-back cap the proxy fails the reply (REPLY_TOO_LARGE)
    got = stream.finding
    assert (got is None) == (want is None), (got, want)
    if got is None or want is None:
        assert published == text
        return
    assert (got.family, got.tool_name) == (want[0].family, want[0].tool_name)
    assert published == text[: got.start]


def check(data: bytes) -> None:
    rng = random.Random(data[:4])
    body = data[4:]
    check_sse(body, rng)
    text = body.decode("utf-8", "replace")
    check_scanner(text, rng)
    check_chat_stream(text, rng)


def main() -> None:  # pragma: no cover - needs atheris
    import atheris  # type: ignore[import-not-found]

    atheris.instrument_all()
    atheris.Setup(sys.argv, check)
    atheris.Fuzz()


if __name__ == "__main__":  # pragma: no cover
    main()

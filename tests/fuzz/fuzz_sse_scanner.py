"""A fuzz target over the SSE decoder and the detection core (atheris; also run by hypothesis in
tests/test_fuzz.py, so it stays valid where atheris does not install).

Each input is split by a seed taken from its first bytes into pieces, and checked for:

* the SSE decoder: cut anywhere, the same events with the same raw bytes as decoding it whole;
  the raw bytes are consecutive slices of the input with only its `id:` and `retry:` lines
  (which never reach a client) left out;
* the scanner: the input's text streamed in the same pieces gives the same finding and the same
  published text as `inspect_text` on the whole;
* each stream editor (Chat Completions, Responses): the text as that wire's deltas, its bytes
  cut in pieces, gives the finding the wire's whole reply gives, and publishes the text (or
  exactly the prose before the markup); only a reply longer than the hold limit may be held
  past it (the proxy then fails it as too large).

Run: `.venv/bin/python tests/fuzz/fuzz_sse_scanner.py -max_total_time=60 -max_len=4096`.
"""

from __future__ import annotations

import itertools
import random
import sys
from collections.abc import Callable
from typing import Any

from spillguard import chat, messages, responses
from spillguard.detect import Finding, Scanner, inspect_text
from spillguard.sse import Event, SSEDecoder
from tests.fuzz.chat_bytes import chat_events, chat_reply, chat_view
from tests.fuzz.messages_bytes import messages_events, messages_reply, messages_view
from tests.fuzz.responses_bytes import (
    responses_events,
    responses_reply,
    responses_view,
    well_formed,
)
from tests.fuzz.wire_bytes import TOOLS, HeldTooLong, Turn, drive

HOLD = 4096
DROPPED = (b"id:", b"retry:", b"id\r", b"id\n", b"retry\r", b"retry\n")  # lines never sent


def cuts(length: int, rng: random.Random) -> list[int]:
    """Up to twelve cut points in 0..length, with both ends: slice bounds."""
    inner = sorted(rng.sample(range(length + 1), min(length + 1, rng.randint(0, 12))))
    return [0, *inner, length]


def pieces(data: bytes, rng: random.Random) -> list[bytes]:
    return [data[a:b] for a, b in itertools.pairwise(cuts(len(data), rng))]


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
    # The raw bytes are consecutive slices that rebuild the input, less its id: and retry: lines.
    lines = data.splitlines(keepends=True)
    assert b"".join(e.raw for e in whole) == b"".join(x for x in lines if not x.startswith(DROPPED))


def check_scanner(text: str, rng: random.Random) -> None:
    want = inspect_text(text, TOOLS)
    scanner = Scanner(TOOLS)
    published = ""
    bounds = cuts(len(text), rng)
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


def deltas(text: str, rng: random.Random) -> tuple[str, ...]:
    return tuple(text[a:b] for a, b in itertools.pairwise(cuts(len(text), rng)) if a < b)


def check_stream(
    text: str,
    rng: random.Random,
    wire: Any,
    events: Callable[[Turn], list[bytes]],
    reply: Callable[[Turn], dict[str, Any]],
    seen: Callable[[bytes], str],
    drops_blank: bool = False,
) -> None:
    """`drops_blank`: the wire never shows a message whose prose before a finding is only white
    space (Responses: `responses_repair.Unshown`; Messages: no blank text block)."""
    want = wire.inspect_reply(reply(Turn(content=(text,))), TOOLS, HOLD)
    data = b"".join(events(Turn(content=deltas(text, rng))))
    stream = wire.new_stream(TOOLS, HOLD, None)
    try:
        out = drive(stream, pieces(data, rng), hold_limit=HOLD)
    except HeldTooLong:
        assert len(text) > HOLD  # only a reply longer than the limit can be held past it
        return
    got: Finding | None = stream.finding
    assert (got is None) == (want is None), (got, want)
    if got is None or want is None:
        assert seen(out) == text
        return
    finding, leaked = want
    assert (got.family, got.tool_name, got.start) == (
        finding.family,
        finding.tool_name,
        finding.start,
    )
    prose = text[: got.start]
    assert seen(out) == ("" if drops_blank and not prose.strip() else prose)
    if len(text) <= HOLD:  # an editor keeps at most that much of the published prose
        assert stream.leaked_text() == leaked  # the retry's assistant turn, either way


def chat_text(out: bytes) -> str:
    return chat_view(out).content.get(0, "")


def responses_text(out: bytes) -> str:
    view = responses_view(out)
    well_formed(view)
    return view.all_text


def check_chat_stream(text: str, rng: random.Random) -> None:
    check_stream(text, rng, chat, chat_events, chat_reply, chat_text)


def check_responses_stream(text: str, rng: random.Random) -> None:
    check_stream(
        text, rng, responses, responses_events, responses_reply, responses_text, drops_blank=True
    )


def messages_text(out: bytes) -> str:
    return messages_view(out).text


def check_messages_stream(text: str, rng: random.Random) -> None:
    if not text.strip():  # the upstream's own blank block goes as it came, which the view refuses
        return
    check_stream(
        text, rng, messages, messages_events, messages_reply, messages_text, drops_blank=True
    )


def check(data: bytes) -> None:
    rng = random.Random(data[:4])
    body = data[4:]
    check_sse(body, rng)
    text = body.decode("utf-8", "replace")
    check_scanner(text, rng)
    check_chat_stream(text, rng)
    check_responses_stream(text, rng)
    check_messages_stream(text, rng)


def main() -> None:  # pragma: no cover - needs atheris
    import atheris  # type: ignore[import-not-found]

    atheris.instrument_all()
    atheris.Setup(sys.argv, check)
    atheris.Fuzz()


if __name__ == "__main__":  # pragma: no cover
    main()

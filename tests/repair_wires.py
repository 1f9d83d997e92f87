"""What the repair tests of the Responses and Messages wires share: the leaks, read into calls
the way the decision reads them, and the fresh ids a repair makes, numbered in order of
appearance so that outputs cut differently can be compared."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from spillguard.detect import Call, declared_tools, read_calls
from spillguard.policy import Policy
from spillguard.repair import repair_calls
from spillguard.settings import Mode, Settings
from spillguard.sse import Out
from tests.fuzz.wire_bytes import HOLD, TOOLS, drive, every_split
from tests.samples import DSML, HERMES

DEEPSEEK = (
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
    '```json\n{"city": "Lisbon"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
)
BLOB = '{"name": "get_weather", "arguments": {"city": "Lisbon"}}'
TWO = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lisbon"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "run_in_terminal", "arguments": {"command": "ls"}}\n</tool_call>'
)
LEAKS = {"hermes": HERMES, "deepseek": DEEPSEEK, "dsml": DSML, "json": BLOB, "two": TWO}
PROSE = "Let me look that up.\n"
WEATHER = (Call("get_weather", '{"city":"Lisbon"}'),)
BOTH = (*WEATHER, Call("run_in_terminal", '{"command":"ls"}'))
REPAIR = replace(Policy.of(Settings(upstream="http://127.0.0.1:9/v1")), mode=Mode.REPAIR)
IDS = re.compile(rb"\b(fc_[0-9a-f]{48}|call_[0-9a-f]{24}|toolu_01[0-9A-Za-z]{22})\b")


def numbered(data: bytes) -> bytes:
    """`data` with each fresh id replaced by its kind and its rank of first appearance."""
    seen: dict[bytes, bytes] = {}

    def name(match: re.Match[bytes]) -> bytes:
        found = match.group(1)
        kind = found.split(b"_")[0]
        return seen.setdefault(found, kind + b"_#" + str(len(seen)).encode())

    return IDS.sub(name, data)


def joined(outs: Iterable[Out]) -> bytes:
    return b"".join(o.data for o in outs)


def calls_of(markup: str | None, family: str) -> tuple[Call, ...] | None:
    return read_calls(markup, family, TOOLS) if markup is not None else None


def repaired_stream(stream: Any, pieces: Iterable[bytes]) -> tuple[bytes, bytes | None]:
    """Drive the editor as the decision does in repair mode (to the upstream's end), then read
    its markup into calls and ask for the repair: (what it published, the repair's bytes)."""
    out = drive(stream, pieces, HOLD)
    finding = stream.finding
    assert finding is not None
    calls = calls_of(stream.markup, finding.family)
    tail = stream.repair(calls) if calls else None
    return out, joined(tail) if tail is not None else None


def every_split_repairs(make: Callable[[], Any], data: bytes) -> bytes:
    """The client's whole stream (published, then the repair) for every cut of `data`, which
    must be the same each way (ids aside); returned for the unsplit feed."""
    out, tail = repaired_stream(make(), [data])
    assert tail is not None, "not repaired"
    want = numbered(out + tail)
    for pieces in every_split(data):
        got_out, got_tail = repaired_stream(make(), pieces)
        assert got_tail is not None and numbered(got_out + got_tail) == want, len(pieces[0])
    return out + tail


def whole_repair(wire: Any, body: dict[str, Any], reply: dict[str, Any]) -> bytes | None:
    """What the decision answers a whole leaking `reply` to `body` with in mode repair, as
    `Decision._repair_whole` does (None: the request is retried)."""
    tools = declared_tools(body)
    found = wire.inspect_reply(reply, tools, REPAIR.hold_limit)
    assert found is not None, "the markup is a finding"
    finding, prose = found
    markup = wire.reply_markup(reply, finding)
    calls = repair_calls(REPAIR, body, tools, finding, markup, wire.chaining)
    if calls is None:
        return None
    assert wire.repair_reply is not None
    out: bytes | None = wire.repair_reply(json.dumps(reply).encode(), reply, finding, prose, calls)
    return out

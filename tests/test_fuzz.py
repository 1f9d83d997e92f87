"""Fuzzing the SSE decoder and the detection core, and proving no regular expression can be made
to backtrack: hypothesis with adversarial generators (long runs of the characters the scanner and
the decoder care about), the atheris target's checks, a structural check of every pattern in
`app`, and a check that the detection core's patterns only ever see a bounded window.

Nothing here measures time. `faulthandler` is the hang guard for the synchronous tests: a test
that runs for minutes is dumped and the run ends, rather than hanging CI.
"""

from __future__ import annotations

import faulthandler
import importlib
import itertools
import pkgutil
import random
import re
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import spillguard
from spillguard import chat, messages, responses
from spillguard.detect import Finding, Scanner, TurnScanner, declared_tools, inspect_text
from spillguard.detect import markers as markers_module
from spillguard.detect.scanner import DEFAULT_HOLD_LIMIT
from spillguard.sse import SSEDecoder
from tests.fuzz.chat_bytes import chat_events, chat_view
from tests.fuzz.fuzz_sse_scanner import (
    check,
    check_chat_stream,
    check_messages_stream,
    check_responses_stream,
    check_scanner,
    check_sse,
)
from tests.fuzz.messages_bytes import messages_events, messages_view
from tests.fuzz.responses_bytes import responses_events, responses_view
from tests.fuzz.wire_bytes import TOOLS as WIRE_TOOLS
from tests.fuzz.wire_bytes import Turn, drive

HANG_SECONDS = 120
TOOLS = declared_tools(
    {
        "tools": [
            {"type": "function", "function": {"name": "get_weather", "parameters": {}}},
            {"type": "function", "function": {"name": "run_in_terminal"}},
        ]
    }
)
FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


@pytest.fixture(autouse=True)
def hang_guard() -> Iterator[None]:
    faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


# ---- adversarial generators -------------------------------------------------------------------

TEXT_PIECES = [
    "<",
    "{",
    "[",
    "(",
    "[TOOL_CALLS",
    "[TOOL_CALLS]",
    "\\",
    "\\_",
    "｜",
    "▁",
    "<｜",
    "<｜tool▁calls▁begin｜>",
    "<|",
    "|",
    "`",
    "```",
    "~~~",
    "\n",
    "\r\n",
    " ",
    "   ",
    "\t",
    "-",
    "1.",
    '"',
    '"name": ',
    '{"name": "get_weather", "arguments": ',
    "get_weather",
    "functions.",
    "to=functions.",
    "<tool_call>",
    "</tool_call>",
    "<function=",
    '<invoke name="',
    "}",
    "]",
    ")",
    "a",
    "é",
    "🌍",
    "sk-",
    "bearer ",
]


@st.composite
def adversarial_text(draw: st.DrawFn, max_runs: int = 12, max_repeat: int = 400) -> str:
    """Runs of scanner-relevant pieces: 'x' * n for a few pieces x and large n, interleaved."""
    runs = draw(
        st.lists(
            st.tuples(st.sampled_from(TEXT_PIECES), st.integers(1, max_repeat)),
            min_size=1,
            max_size=max_runs,
        )
    )
    return "".join(piece * count for piece, count in runs)


SSE_PIECES = [
    b"data:",
    b"data: ",
    b"event: ",
    b"id: 1",
    b": ",
    b":",
    b"\r",
    b"\n",
    b"\r\n",
    b"\n\n",
    b" ",
    b"x",
    b"{",
    b"[DONE]",
    b"\xff",
    b"\xc3",
    "｜".encode(),
    b"\x00",
]


@st.composite
def adversarial_sse(draw: st.DrawFn) -> bytes:
    runs = draw(
        st.lists(
            st.tuples(st.sampled_from(SSE_PIECES), st.integers(1, 300)), min_size=1, max_size=16
        )
    )
    return b"".join(piece * count for piece, count in runs)


# ---- the SSE decoder ----------------------------------------------------------------------------


def reference_fields(data: bytes) -> list[tuple[str | None, str | None]]:
    """(data, event) of each event with a field, by the WHATWG rules read literally: lines end
    at CRLF, CR or LF; a blank line dispatches; at the end, a pending event is dispatched too."""
    lines = re.split(rb"\r\n|\r|\n", data)
    tail = lines.pop()  # the unterminated rest (b"" when the input ends with a line end)
    out: list[tuple[str | None, str | None]] = []
    values: list[bytes] = []
    name: bytes | None = None
    fields = False

    def dispatch() -> None:
        nonlocal values, name, fields
        if fields:
            text = b"\n".join(values).decode("utf-8", "replace") if values else None
            out.append((text, name.decode("utf-8", "replace") if name is not None else None))
        values, name, fields = [], None, False

    for line in [*lines, *([tail] if tail else [])]:
        if not line:
            dispatch()
            continue
        if line.startswith(b":"):
            continue
        key, _, value = line.partition(b":")
        value = value[1:] if value.startswith(b" ") else value
        if key == b"data":
            values.append(value)
            fields = True
        elif key == b"event":
            name, fields = value, True
    dispatch()
    return out


@FUZZ
@given(data=adversarial_sse(), seed=st.binary(min_size=4, max_size=4))
@example(data=b"data: a\r\r\r\n\n\r", seed=b"\x00" * 4)
@example(data=b"\r" * 5000 + b"data: x", seed=b"seed")
def test_sse_decoder_cut_anywhere_agrees_with_itself_and_the_spec(data: bytes, seed: bytes) -> None:
    check_sse(data, random.Random(seed))
    decoder = SSEDecoder(max_event=len(data) + 1)
    events = decoder.feed(data) + decoder.flush()
    got = [(e.data, e.event) for e in events if not e.is_comment]
    assert got == reference_fields(data)


@FUZZ
@given(data=adversarial_sse(), limit=st.integers(16, 2000))
def test_sse_decoder_max_event_raises_only_sse_error(data: bytes, limit: int) -> None:
    decoder = SSEDecoder(max_event=limit)
    try:
        for i in range(0, len(data), 97):
            for event in decoder.feed(data[i : i + 97]):
                assert isinstance(event.raw, bytes)
        decoder.flush()
    except ValueError as exc:
        assert type(exc).__name__ == "SSEError"


@pytest.mark.parametrize(
    ("data", "events", "with_data"),
    [
        (b"\r" * 300_000, 300_000, 0),  # every blank line is an event of its own
        (b"\n" * 300_000, 300_000, 0),
        (b"\r\n" * 150_000, 150_000, 0),
        (b":" * 300_000 + b"\n\n", 1, 0),
        (b"data: " + b"x" * 900_000 + b"\n\n", 1, 1),
        (b"data:\n" * 100_000 + b"\n", 1, 1),
        (b"data: x\n\n" * 50_000, 50_000, 50_000),
    ],
    ids=["cr", "lf", "crlf", "colons", "one-big-event", "many-data-lines", "many-events"],
)
def test_sse_decoder_completes_on_long_runs(data: bytes, events: int, with_data: int) -> None:
    """Whole and in 64 KiB and 4 KiB reads, every event comes out, and their raw bytes are the
    input exactly."""
    for step in (len(data), 65536, 4096):
        decoder = SSEDecoder()
        got = []
        for i in range(0, len(data), step):
            got += decoder.feed(data[i : i + step])
        got += decoder.flush()
        assert len(got) == events
        assert sum(e.data is not None for e in got) == with_data
        assert b"".join(e.raw for e in got) == data


# ---- the detection core -------------------------------------------------------------------------


@FUZZ
@given(text=adversarial_text(), seed=st.binary(min_size=4, max_size=4))
def test_scanner_streamed_equals_whole_on_adversarial_text(text: str, seed: bytes) -> None:
    check_scanner(text, random.Random(seed))


@FUZZ
@given(text=adversarial_text(max_repeat=60), seed=st.binary(min_size=4, max_size=4))
def test_chat_stream_agrees_with_whole_reply_on_adversarial_text(text: str, seed: bytes) -> None:
    check_chat_stream(text, random.Random(seed))


# Prose held to the end of its text (a mid-line `<tool_call>` whose name never closes), then
# released with a finding made there: the Responses and Messages editors once sent none of it,
# yet counted it as the client's (a retry's restatement of it would have been cut).
HELD_TO_THE_END = '<|channel|>analysis<tool_call>{"name": "get_weatherroute_to<longcat_tool_call> '


@pytest.mark.parametrize(
    "check_wire", [check_chat_stream, check_responses_stream, check_messages_stream]
)
@pytest.mark.parametrize("seed", range(8))
def test_prose_released_with_a_finding_at_the_end_goes_out(check_wire: Any, seed: int) -> None:
    check_wire(HELD_TO_THE_END, random.Random(seed))
    check_wire("\n" + HELD_TO_THE_END, random.Random(seed))
    check_wire(" \n<|tool_call|>", random.Random(seed))  # blank prose: shown, or dropped whole


@pytest.mark.parametrize("wire", ["chat", "responses", "messages"])
def test_prose_released_when_the_upstream_stops_short_goes_out(wire: str) -> None:
    """The same, where the upstream's stream ends after the last text delta (no finish, no
    terminal event): the editor's `finish` makes the finding, and the proxy sends its prose."""
    turn = Turn(content=(HELD_TO_THE_END[:30], HELD_TO_THE_END[30:]))
    module, events, delta = {
        "chat": (chat, chat_events(turn), b'"content"'),
        "responses": (responses, responses_events(turn), b"output_text.delta"),
        "messages": (messages, messages_events(turn), b"text_delta"),
    }[wire]
    last = max(i for i, raw in enumerate(events) if delta in raw)
    stream = module.new_stream(WIRE_TOOLS, 4096, None)
    out = drive(stream, [b"".join(events[: last + 1])])
    assert stream.finding is not None and stream.finding.family == "longcat"
    prose = HELD_TO_THE_END[: stream.finding.start]
    if wire == "chat":
        assert chat_view(out).content.get(0, "") == prose
    elif wire == "responses":
        assert responses_view(out).all_text == prose
    else:
        assert messages_view(out).text == prose
    assert stream.leaked_text() == prose


@FUZZ
@given(data=st.binary(max_size=2048))
@example(data=b"\x00\x00\x00\x00data: {}\n\n")
@example(data=b"seed<tool_call>\n{}")
def test_fuzz_target_on_random_bytes(data: bytes) -> None:
    check(data)


def where(finding: Finding | None) -> tuple[str, str | None, int, str] | None:
    if finding is None:
        return None
    return finding.family, finding.tool_name, finding.start, finding.field


@FUZZ
@given(text=adversarial_text(), split=st.integers(0, 10_000))
def test_reasoning_scanner_and_turn_guard_complete(text: str, split: int) -> None:
    """A turn whose reasoning and content are cut from the same text publishes each field as the
    whole-text check allows: all of it, or the prose before its markup."""
    reasoning, content = text[:split], text[split:]
    guard = TurnScanner(TOOLS, hold_limit=DEFAULT_HOLD_LIMIT)
    said = guard.feed_reasoning(reasoning)
    shown = guard.feed_content(content)
    rest_content, rest_reasoning = guard.finish()
    in_content = inspect_text(content, TOOLS)
    in_reasoning = inspect_text(reasoning, TOOLS, blobs=False, field="reasoning")
    assert shown + rest_content == (content if in_content is None else content[: in_content.start])
    want = reasoning if in_reasoning is None else reasoning[: in_reasoning.start]
    assert said + rest_reasoning == want
    # Compared without the excerpts: their caps differ.
    assert where(guard.finding) == where(in_content or in_reasoning)
    assert guard.holding == len(text) - len(said + rest_reasoning + shown + rest_content)


@pytest.mark.parametrize("marker", ["<tool_call>", "[TOOL_CALLS]get_weather[ARGS]{}"])
def test_backslash_in_its_own_delta_before_a_marker(marker: str) -> None:
    """A Markdown-escaped marker whose backslash arrives alone is still found when streamed."""
    want = inspect_text("\\" + marker, TOOLS)
    assert want is not None
    scanner = Scanner(TOOLS)
    published = scanner.feed("\\") + scanner.feed(marker) + scanner.finish()
    assert scanner.finding is not None and scanner.finding.family == want.family
    assert published == ""


LONG_RUNS = {
    "lt": "<" * 300_000,
    "brace": "{" * 300_000,
    "bracket": "[" * 300_000,
    "tool-calls": "[TOOL_CALLS" * 30_000,
    "backslash": "\\" * 300_000,
    "fullwidth-bar": "｜" * 300_000,
    "backticks": "`" * 300_000,
    "newlines": "\n" * 300_000,
    "spaces-then-lt": " " * 300_000 + "<",
    "lt-bars": "<" + "|" * 300_000,
    "lt-fullwidth": "<｜" * 150_000,
    "fences": "```\n" * 75_000,
    "lines-of-lt": "<\n" * 150_000,
    "indent-lt": "   <tool\n" * 30_000,
    "json-open": '{"name": "get_weather", "arguments": ' + "[" * 250_000,
    "json-string": '{"name": "get_weather", "arguments": "' + "\\\\" * 150_000,
    "pythonic": "[get_weather(" + "(" * 250_000,
    "deepseek-body": "<｜tool▁calls▁begin｜>" + "｜▁" * 150_000,
    "name-bait": "<tool_call>" + " functions." * 30_000,
    "invoke-bait": "<｜DSML｜function_calls>" + '<invoke name="' * 20_000,
    "bearer": "bearer " * 50_000 + "sk-" * 50_000,
}


@pytest.mark.parametrize("name", sorted(LONG_RUNS))
@pytest.mark.parametrize("cut", [0, 1, 4096])
def test_detection_completes_on_long_runs(name: str, cut: int) -> None:
    """Whole and streamed (byte at a time for the first stretch, then in 4 KiB deltas), the same
    verdict; every run completes (a catastrophic pattern would hang here, not pass slowly)."""
    text = LONG_RUNS[name]
    want = inspect_text(text, TOOLS)
    scanner = Scanner(TOOLS, hold_limit=DEFAULT_HOLD_LIMIT)
    published = []
    head = text[:cut] if cut != 1 else text[:2000]
    for ch in head if cut == 1 else [head]:
        published.append(scanner.feed(ch))
    rest = text[len(head) :]
    for i in range(0, len(rest), 4096):
        published.append(scanner.feed(rest[i : i + 4096]))
    published.append(scanner.finish())
    got = scanner.finding
    assert (got is None) == (want is None)
    if got is not None and want is not None:
        assert (got.family, got.tool_name, got.start) == (want.family, want.tool_name, want.start)
    assert "".join(published) == (text if got is None else text[: got.start])


# ---- regular expressions: structure and bounded input ----------------------------------------


def app_modules() -> list[Any]:
    mods = [spillguard]
    for info in pkgutil.walk_packages(spillguard.__path__, "spillguard."):
        try:
            mods.append(importlib.import_module(info.name))
        except ImportError:  # an optional extra that is not installed
            continue
    return mods


def all_patterns() -> dict[str, re.Pattern[str]]:
    found: dict[str, re.Pattern[str]] = {}
    for mod in app_modules():
        for attr, value in vars(mod).items():
            values = value if isinstance(value, tuple | list) else (value,)
            for i, item in enumerate(values):
                if isinstance(item, re.Pattern):
                    found[f"{mod.__name__}.{attr}[{i}]"] = item
    return found


try:
    from re import _constants as sre_c  # type: ignore[attr-defined]
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python < 3.11
    import sre_constants as sre_c  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

REPEATS = {sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, getattr(sre_c, "POSSESSIVE_REPEAT", None)}
UNBOUNDED = 256  # a repeat allowing more than this counts as unbounded


def _walk(items: Any, inside_unbounded: bool, problems: list[str], where: str) -> None:
    for op, av in items:
        if op in REPEATS:
            _low, high, sub = av
            unbounded = high == sre_c.MAXREPEAT or high > UNBOUNDED
            if inside_unbounded and high > 1:
                problems.append(f"{where}: a repeat nested inside an unbounded repeat")
            _walk(sub, inside_unbounded or unbounded, problems, where)
        elif op == sre_c.SUBPATTERN:
            _walk(av[-1], inside_unbounded, problems, where)
        elif op == sre_c.BRANCH:
            firsts = [_first_literal(branch) for branch in av[1]]
            distinct = None not in firsts and len(set(firsts)) == len(firsts)
            if inside_unbounded and not distinct:
                problems.append(f"{where}: alternatives that may overlap inside a repeat")
            for branch in av[1]:
                _walk(branch, inside_unbounded, problems, where)
        elif op in (sre_c.ASSERT, sre_c.ASSERT_NOT):
            _walk(av[1], inside_unbounded, problems, where)
        elif op == sre_c.GROUPREF_EXISTS:
            for branch in av[1:]:
                if branch is not None:
                    _walk(branch, inside_unbounded, problems, where)
    # Two unbounded repeats in a row over the same characters split a run O(n^2) ways.
    seq = list(items)
    for (op1, av1), (op2, av2) in itertools.pairwise(seq):
        if op1 in REPEATS and op2 in REPEATS:
            unb = [a[1] == sre_c.MAXREPEAT or a[1] > UNBOUNDED for a in (av1, av2)]
            if all(unb) and _may_overlap(av1[2], av2[2]):
                problems.append(f"{where}: adjacent unbounded repeats over overlapping sets")


def _first_literal(seq: Any) -> int | None:
    items = list(seq)
    if items and items[0][0] == sre_c.LITERAL:
        return int(items[0][1])
    return None


def _may_overlap(a: Any, b: Any) -> bool:
    """Conservative: True unless both are single literals or both are plain sets that differ."""
    sa, sb = list(a), list(b)
    if len(sa) == 1 and len(sb) == 1 and sa[0][0] == sb[0][0] == sre_c.LITERAL:
        return bool(sa[0][1] == sb[0][1])
    return True


@pytest.mark.parametrize("name", sorted(all_patterns()))
def test_no_pattern_can_backtrack_catastrophically(name: str) -> None:
    pattern = all_patterns()[name]
    problems: list[str] = []
    _walk(sre_parse.parse(pattern.pattern, pattern.flags), False, problems, name)
    assert problems == [], pattern.pattern


def test_the_pattern_inventory_is_not_empty() -> None:
    """The walk above really finds the detection core's patterns (were they moved into a class
    or a function, this fails rather than silently checking nothing)."""
    assert sum(1 for name in all_patterns() if name.startswith("spillguard.detect.")) >= 5


def test_no_ad_hoc_regex_calls_in_the_detection_core() -> None:
    """Every pattern in spillguard.detect is compiled once at module level (so the two tests
    above see it); no re.search(text_pattern, ...) built at run time."""
    import inspect

    calls = re.compile(r"\bre\.(?:search|match|fullmatch|sub|subn|findall|finditer|split)\(")
    for mod in app_modules():
        if mod.__name__.startswith("spillguard.detect"):
            assert not calls.search(inspect.getsource(mod)), mod.__name__


class Recorder:
    """Stands in for a compiled pattern and records how much text each call could scan."""

    def __init__(self, name: str, pattern: re.Pattern[str], seen: dict[str, int]) -> None:
        self._name, self._pattern, self._seen = name, pattern, seen

    def _note(self, text: str, pos: int = 0, endpos: int | None = None) -> None:
        end = len(text) if endpos is None else min(endpos, len(text))
        self._seen[self._name] = max(self._seen.get(self._name, 0), end - pos)

    def __getattr__(self, attr: str) -> Any:
        method = getattr(self._pattern, attr)
        if attr in ("search", "match", "fullmatch", "finditer", "findall", "split"):

            def call(text: str, *args: Any, **kw: Any) -> Any:
                self._note(text, *args[:2], **{k: v for k, v in kw.items() if k != "maxsplit"})
                return method(text, *args, **kw)

            return call
        if attr in ("sub", "subn"):

            def call_sub(repl: Any, text: str, *args: Any, **kw: Any) -> Any:
                self._note(text)
                return method(repl, text, *args, **kw)

            return call_sub
        return method


def test_name_and_canon_patterns_only_see_a_bounded_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """The patterns that read names and fold spelling run on the markup, which the model
    controls: each must only ever see a bounded slice of it, however long the markup is."""
    seen: dict[str, int] = {}
    mod = markers_module
    for attr, value in list(vars(mod).items()):
        if isinstance(value, re.Pattern):
            monkeypatch.setattr(mod, attr, Recorder(attr, value, seen))
        elif isinstance(value, tuple) and value and isinstance(value[0], re.Pattern):
            wrapped = tuple(Recorder(f"{attr}[{i}]", p, seen) for i, p in enumerate(value))
            monkeypatch.setattr(mod, attr, wrapped)
    huge = [
        "<tool_call>" + " get_weather" * 40_000,
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>" + "｜｜" * 100_000,
        "[TOOL_CALLS]" + "[" * 200_000,
        "<|channel|>commentary to=functions." + "a" * 200_000,
        '<｜DSML｜function_calls><｜DSML｜invoke name="' + "x" * 200_000,
        "<" + "||" * 100_000,
    ]
    for text in huge:
        for feed in (text, text[:5000] + "\n" + text):
            inspect_text(feed, TOOLS)
    assert seen, "the recorder saw no calls: the patterns moved"
    bound = max(mod.NAME_WINDOW, mod.MAX_HEAD) + 64
    assert {k: v for k, v in seen.items() if v > bound} == {}

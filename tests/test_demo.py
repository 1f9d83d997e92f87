"""`spillguard demo`, run as the README says (the console script, in a process of its own): every
scenario gets the result the README documents, streamed and not."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
SUNNY = "text: 'It is sunny in Lisbon today, around 21…"
CALL = 'tool call get_weather({"city": "Lisbon"})'
FAILED = "HTTP 502 TEXT_ENCODED_TOOL_CALL"
# scenario -> (the start of what the client gets without spillguard, what it gets with it as the
# table prints it, upstream calls), the same streamed or not but for one: see below.
RESULTS = {
    "DeepSeek markup leak": ("text: '<｜tool▁calls▁begin｜>", CALL, 2),
    "JSON-blob leak": ("""text: '{"name": "get_weather\"""", SUNNY, 2),
    "prose, then a leak": ("text: 'Let me check that.\\n<tool_call>", CALL, 2),
    "double leak": ("text: '<｜DSML｜function_calls>", FAILED, 2),
    "honest answer": (SUNNY, SUNNY, 1),
    "real tool call": (CALL, CALL, 1),
    "Messages: MiniMax leak": ("text: 'Let me check that.\\n<minimax:tool_call", CALL, 2),
}
# Streamed, these show the call after the prose the stream had already shown.
AFTER_PROSE = {("prose, then a leak", "yes"), ("Messages: MiniMax leak", "yes")}


@pytest.fixture(scope="module")
def demo() -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("spillguard")
    assert script.exists(), "the package is not installed with its console script"
    # The timeout only guards against a hang; nothing here measures time.
    return subprocess.run(
        [str(script), "demo"], capture_output=True, text=True, encoding="utf-8", timeout=300
    )


def rows(text: str) -> dict[tuple[str, str], tuple[str, str, int]]:
    """The table's rows: (scenario, stream) -> (without, with, upstream calls)."""
    out = {}
    for line in text.splitlines():
        cells = re.split(r" {2,}", line.strip())
        if len(cells) == 5 and cells[1] in ("no", "yes") and cells[4].isdigit():
            out[cells[0], cells[1]] = (cells[2], cells[3], int(cells[4]))
    return out


def readme_rows() -> list[str]:
    """The rows of the table in the README's "Try it" section, as printed there."""
    section = README.read_text(encoding="utf-8").split("## Try it", 1)[1].split("\n## ", 1)[0]
    table = section.split("```\nscenario", 1)[1].split("```", 1)[0]
    return [line for line in table.splitlines()[1:] if line.strip()]


def test_the_demo_exits_cleanly(demo: subprocess.CompletedProcess[str]) -> None:
    assert demo.returncode == 0, demo.stderr
    assert "Traceback" not in demo.stderr


def test_every_scenario_streamed_and_not_gets_its_documented_result(
    demo: subprocess.CompletedProcess[str],
) -> None:
    got = rows(demo.stdout)
    assert set(got) == {(s, mode) for s in RESULTS for mode in ("no", "yes")}
    for (scenario, mode), (without, with_sg, calls) in got.items():
        want_without, want_with, want_calls = RESULTS[scenario]
        assert without.startswith(want_without), (scenario, mode, without)
        if (scenario, mode) in AFTER_PROSE:
            want_with = CALL + " aft…"
        assert with_sg == want_with, (scenario, mode, with_sg)
        assert calls == want_calls, (scenario, mode)


def test_every_readme_row_is_printed_as_the_readme_shows_it(
    demo: subprocess.CompletedProcess[str],
) -> None:
    documented = readme_rows()
    assert {row.split("  ", 1)[0] for row in documented} == set(RESULTS)
    printed = {line.rstrip() for line in demo.stdout.splitlines()}
    for row in documented:
        assert row.rstrip() in printed, row


def repair_rows(text: str) -> dict[tuple[str, str], tuple[str, int]]:
    """The second table's rows (with --mode repair): (scenario, stream) -> (what the client
    gets, upstream calls)."""
    out = {}
    table = text.split("client gets WITH spillguard --mode repair", 1)[1]
    for line in table.splitlines():
        cells = re.split(r" {2,}", line.strip())
        if len(cells) == 4 and cells[1] in ("no", "yes") and cells[3].isdigit():
            out[cells[0], cells[1]] = (cells[2], int(cells[3]))
    return out


def test_with_repair_every_readable_leak_is_its_call_from_one_upstream_call(
    demo: subprocess.CompletedProcess[str],
) -> None:
    got = repair_rows(demo.stdout)
    leaks = ("DeepSeek markup leak", "JSON-blob leak", "prose, then a leak", "double leak")
    scenarios = (*leaks, "Messages: MiniMax leak")
    assert set(got) == {(s, mode) for s in scenarios for mode in ("no", "yes")}
    for (scenario, _mode), (client_gets, calls) in got.items():
        assert client_gets.startswith("tool call get_weather({"), (scenario, client_gets)
        assert calls == 1, scenario

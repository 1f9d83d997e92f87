"""Review: an incident row keeps at most `incident_excerpt_limit` characters of leaked text;
a repaired finding's calls are that text's content, and were stored whole. Fixed:
`incidents.cut_calls` keeps them whole when they fit, else cut and ending in `CUT`."""

from __future__ import annotations

import json

import pytest

from spillguard.detect import Call
from spillguard.incidents import CUT, rows_for
from spillguard.outcome import Outcome

SECRET_BODY = "line of a private file\n" * 400  # what a write_file call carries


def repaired_outcome() -> Outcome:
    outcome = Outcome("sg-1", "chat", "repair")
    arguments = json.dumps({"path": "notes.txt", "content": SECRET_BODY})
    markup = '<tool_call>\n{"name": "write_file", "arguments": ' + arguments + "}\n</tool_call>"
    outcome.finding("hermes", "write_file", 1, markup)
    outcome.repaired([Call("write_file", arguments)])
    return outcome


@pytest.mark.parametrize("limit", [0, 100])
def test_repaired_calls_keep_no_more_leaked_text_than_the_limit(limit: int) -> None:
    [row] = rows_for(repaired_outcome(), limit, lambda text: text, "2026-12-01T00:00:00Z")
    assert len(row.excerpt) <= limit
    kept = row.repaired_calls or ""
    assert len(kept) <= limit, f"{len(kept)} characters of the leaked call stored"


def test_repaired_calls_that_fit_are_kept_whole_and_others_end_in_the_cut_mark() -> None:
    whole = repaired_outcome().findings[0].repaired
    assert whole is not None
    [fits] = rows_for(repaired_outcome(), len(whole), lambda text: text, "2026-12-01T00:00:00Z")
    assert fits.repaired_calls == whole and json.loads(whole)
    [cut] = rows_for(repaired_outcome(), 100, lambda text: text, "2026-12-01T00:00:00Z")
    assert cut.repaired_calls == whole[:99] + CUT
    [none] = rows_for(repaired_outcome(), 0, lambda text: text, "2026-12-01T00:00:00Z")
    assert none.repaired_calls == ""  # not NULL: the row still reads as a repair


def test_a_secret_across_the_limit_is_redacted_before_the_cut() -> None:
    secret = "sk-proxy-key-0123456789"
    outcome = Outcome("sg-2", "chat", "observe")
    outcome.finding("hermes", "run", 1, "x" * 10 + secret + " tail")
    [row] = rows_for(outcome, 20, lambda text: text.replace(secret, "***"), "2026-12-01T00:00:00Z")
    assert row.excerpt == "x" * 10 + "*** tail"[:10] and row.excerpt_chars == 38

"""Review: an incident row keeps at most `incident_excerpt_limit` characters of leaked text;
a repaired finding's calls are that text's content, yet are stored whole. Marked
xfail(strict) until it is fixed."""

from __future__ import annotations

import json

import pytest

from spillguard.detect import Call
from spillguard.incidents import rows_for
from spillguard.outcome import Outcome

SECRET_BODY = "line of a private file\n" * 400  # what a write_file call carries


def repaired_outcome() -> Outcome:
    outcome = Outcome("sg-1", "chat", "repair")
    arguments = json.dumps({"path": "notes.txt", "content": SECRET_BODY})
    markup = '<tool_call>\n{"name": "write_file", "arguments": ' + arguments + "}\n</tool_call>"
    outcome.finding("hermes", "write_file", 1, markup)
    outcome.repaired([Call("write_file", arguments)])
    return outcome


@pytest.mark.xfail(
    strict=True,
    reason="incidents.rows_for cuts the excerpt to incident_excerpt_limit but stores "
    "repaired_calls whole (with the limit 0, the leaked content is still kept)",
)
@pytest.mark.parametrize("limit", [0, 100])
def test_repaired_calls_keep_no_more_leaked_text_than_the_limit(limit: int) -> None:
    [row] = rows_for(repaired_outcome(), limit, lambda text: text, "2026-12-01T00:00:00Z")
    assert len(row.excerpt) <= limit
    kept = row.repaired_calls or ""
    assert len(kept) <= limit, f"{len(kept)} characters of the leaked call stored"

"""`repair.may_repair` and `repair.free_form` read a long request's tools, left unread
(`jsonread.loads_leaving`), as they read the same request parsed whole."""

from __future__ import annotations

import json
from typing import Any

import pytest

from spillguard import chat
from spillguard.jsonread import LEAVE_FROM, loads, loads_leaving
from spillguard.policy import Policy
from spillguard.repair import free_form, may_repair
from spillguard.settings import Mode, Settings

REPAIR = Policy.of(Settings(mode=Mode.REPAIR))
FUNCTION = {"name": "get_weather", "parameters": {"type": "object"}}
CUSTOM = {"type": "custom", "custom": {"name": "run_sql"}}


def _long(**members: Any) -> bytes:
    return json.dumps({"pad": "x" * LEAVE_FROM, "messages": [], **members}).encode()


@pytest.mark.parametrize(
    "members",
    [
        {"tools": [{"type": "function", "function": FUNCTION}]},
        {"tools": None, "functions": [FUNCTION]},  # legacy functions only: never repaired
        {"functions": [FUNCTION]},
        {"functions": None, "tools": [CUSTOM]},
        {"tools": [], "functions": [FUNCTION]},
        {"tools": [CUSTOM, {"type": "function", "function": FUNCTION}], "tool_choice": "none"},
    ],
)
def test_a_long_request_is_judged_as_when_read_whole(members: dict[str, Any]) -> None:
    raw = _long(**members)
    whole, left = loads(raw), loads_leaving(raw, chat.WIRE.unread)
    assert left != whole  # something was left unread
    assert may_repair(REPAIR, left, None) is may_repair(REPAIR, whole, None)
    assert free_form(left) == free_form(whole)


def test_legacy_functions_with_null_tools_are_not_repaired_from_a_long_request() -> None:
    left = loads_leaving(_long(tools=None, functions=[FUNCTION]), chat.WIRE.unread)
    assert not may_repair(REPAIR, left, None)


def test_a_long_request_s_custom_tools_take_free_text() -> None:
    left = loads_leaving(_long(tools=[CUSTOM]), chat.WIRE.unread)
    assert free_form(left) == {"run_sql"}

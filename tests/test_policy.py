"""x-spillguard-mode: a request may always ask for a mode at least as strict as its own
(observe < retry = repair < fail); any other needs the operator's leave."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.datastructures import Headers

from spillguard.context import Context
from spillguard.errors import ClientError
from spillguard.observe import Observer
from spillguard.policy import STRICTNESS, Policy, header_mode, tightens, with_header
from spillguard.settings import Mode, Settings
from spillguard.upstream import Upstream

OB, RT, RP, F = Mode.OBSERVE, Mode.RETRY, Mode.REPAIR, Mode.FAIL

# given mode -> the modes the header may ask for without leave
TIGHTENING = {
    OB: {OB, RT, RP, F},
    RT: {RT, F},  # repair is as strict as retry, not stricter: a change, so a loosening
    RP: {RP, F},
    F: {F},
}


def test_the_strictness_order() -> None:
    assert STRICTNESS[OB] < STRICTNESS[RT] == STRICTNESS[RP] < STRICTNESS[F]
    assert set(STRICTNESS) == set(Mode)


@pytest.mark.parametrize("given", list(Mode))
@pytest.mark.parametrize("asked", list(Mode))
def test_tightening_table(given: Mode, asked: Mode) -> None:
    assert tightens(asked, given) is (asked in TIGHTENING[given])


def policy(mode: Mode) -> Policy:
    return Policy.of(Settings(mode=mode))


@pytest.mark.parametrize("given", list(Mode))
@pytest.mark.parametrize("asked", list(Mode))
def test_the_header_without_leave_only_tightens(given: Mode, asked: Mode) -> None:
    if asked in TIGHTENING[given]:
        assert with_header(policy(given), asked, may_loosen=False).mode is asked
        return
    with pytest.raises(ClientError) as caught:
        with_header(policy(given), asked, may_loosen=False)
    error = caught.value
    assert (error.status, error.code) == (403, "MODE_LOOSENING_NOT_ALLOWED")
    assert error.message == (
        f"x-spillguard-mode: {asked} is not stricter than this request's mode ({given}); only "
        "a stricter mode may be asked for (observe < retry = repair < fail)"
    )


@pytest.mark.parametrize("given", list(Mode))
@pytest.mark.parametrize("asked", list(Mode))
def test_the_header_with_leave_sets_any_mode(given: Mode, asked: Mode) -> None:
    held = with_header(policy(given), asked, may_loosen=True)
    assert held.mode is asked
    assert held.hold_limit == policy(given).hold_limit  # only the mode changes


@pytest.mark.parametrize(
    ("value", "mode"),
    [("fail", F), ("FAIL", F), (" Observe ", OB), ("repair", RP), ("retry", RT)],
)
def test_header_values(value: str, mode: Mode) -> None:
    assert header_mode(Headers({"x-spillguard-mode": value})) is mode


@pytest.mark.parametrize("value", ["", "fial", "off", "strict", "fail, observe", "0"])
def test_a_header_naming_no_mode_is_a_400(value: str) -> None:
    with pytest.raises(ClientError) as caught:
        header_mode(Headers({"x-spillguard-mode": value}))
    error = caught.value
    assert (error.status, error.code) == (400, "INVALID_MODE_HEADER")
    assert error.message == (
        f"x-spillguard-mode must be one of observe, retry, repair, fail, not {value!r}"
    )


def test_the_header_twice_is_a_400() -> None:
    twice = Headers(raw=[(b"x-spillguard-mode", b"fail"), (b"x-spillguard-mode", b"fail")])
    with pytest.raises(ClientError, match=r"^x-spillguard-mode was sent more than once$"):
        header_mode(twice)


def test_no_header_is_none() -> None:
    assert header_mode(Headers({"x-other": "fail"})) is None


# ---- Context.policy_for: rules, then the header, then who may loosen -------------------------


def context(**settings: Any) -> Context:
    s = Settings(incidents_db="", **settings)
    return Context(s, Upstream(s), Observer(s))


def test_policy_for_applies_the_rules_then_the_header() -> None:
    ctx = context(mode="retry", rules=[{"model": "grok-*", "mode": "fail"}])
    assert ctx.policy_for(Headers({}), "grok-4").mode is F
    assert ctx.policy_for(Headers({}), "gpt-4o").mode is RT
    assert ctx.policy_for(Headers({"x-spillguard-mode": "fail"}), "gpt-4o").mode is F
    assert ctx.policy_for(Headers({"x-spillguard-mode": "fail"}), "grok-4").mode is F
    with pytest.raises(ClientError, match="observe is not stricter than this request's mode"):
        ctx.policy_for(Headers({"x-spillguard-mode": "observe"}), "grok-4")
    assert ctx.policy_for(Headers({}), "gpt-4o") is ctx.policy  # unchanged: no copy


def test_policy_for_matches_rules_by_upstream() -> None:
    ctx = context(
        upstreams={"xai": {"url": "xai"}},
        rules=[{"upstream": "xai", "mode": "fail"}],
    )
    assert ctx.policy_for(Headers({}), "m", "xai").mode is F
    assert ctx.policy_for(Headers({}), "m").mode is RT


def test_mode_header_any_lets_every_request_loosen() -> None:
    ctx = context(mode="fail", mode_header="any")
    assert ctx.policy_for(Headers({"x-spillguard-mode": "observe"}), "m").mode is OB


@pytest.mark.parametrize(
    ("headers", "loosens"),
    [
        ({"authorization": "Bearer admin-key"}, True),
        ({"authorization": "bearer admin-key"}, True),
        ({"x-api-key": "admin-key"}, True),  # Anthropic SDKs
        ({"api-key": "admin-key"}, True),
        ({"authorization": "Bearer app-key"}, False),  # a proxy key, not marked
        ({"authorization": "Basic admin-key"}, False),
        ({"authorization": "Bearer app-key", "x-api-key": "admin-key"}, False),  # as limits reads
        ({}, False),
    ],
)
def test_only_a_marked_proxy_key_loosens(headers: dict[str, str], loosens: bool) -> None:
    ctx = context(mode="fail", proxy_keys=("app-key",), loosening_keys=("admin-key",))
    asked = Headers({**headers, "x-spillguard-mode": "observe"})
    if loosens:
        assert ctx.policy_for(asked, "m").mode is OB
    else:
        with pytest.raises(ClientError, match="not stricter"):
            ctx.policy_for(asked, "m")

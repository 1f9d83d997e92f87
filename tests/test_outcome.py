"""The outcome record (`outcome.py`): changed through its methods, with the action rules the
decision and the handlers rely on."""

from __future__ import annotations

import pytest

from spillguard.outcome import Action, Leak, Outcome


def fresh(**kw: object) -> Outcome:
    return Outcome(request_id="r", route="chat", mode="retry", **kw)  # type: ignore[arg-type]


def test_actions_are_the_label_values() -> None:
    assert [a.value for a in Action] == [
        "forwarded",
        "passed",
        "retried",
        "failed",
        "observed",
        "repaired",
        "error",
        "client_gone",
    ]
    assert str(Action.RETRIED) == "retried"


def test_findings_are_typed_records_and_the_last_names_the_request() -> None:
    o = fresh()
    o.finding("hermes", "get_weather", 1, "<tool_call>")
    o.finding("dsml", None, 2, "<｜DSML｜")
    assert o.findings == [
        Leak("hermes", "get_weather", 1, "<tool_call>"),
        Leak("dsml", None, 2, "<｜DSML｜"),
    ]
    assert (o.family, o.tool_name) == ("dsml", None)


def test_upstream_exchanges_and_waits_add_up() -> None:
    o = fresh()
    o.calling()
    o.waited(0.25)
    o.upstream_answered(200)
    o.calling()
    o.waited(0.5)
    o.upstream_answered(503)
    assert (o.upstream_calls, o.upstream_statuses) == (2, [200, 503])
    assert o.upstream_ms == pytest.approx(750.0)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (Action.FORWARDED, Action.ERROR),
        (Action.PASSED, Action.ERROR),
        (Action.OBSERVED, Action.ERROR),
        (Action.FAILED, Action.FAILED),  # a leak stays a leak
    ],
)
def test_an_error_response_is_an_error_unless_it_is_a_leak(before: Action, after: Action) -> None:
    o = fresh()
    o.act(before)
    o.failed("UPSTREAM_TIMEOUT", 504)
    assert (o.action, o.status, o.error) == (after, 504, "UPSTREAM_TIMEOUT")


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (Action.FORWARDED, Action.ERROR),
        (Action.PASSED, Action.ERROR),
        (Action.RETRIED, Action.ERROR),
        (Action.OBSERVED, Action.OBSERVED),
        (Action.FAILED, Action.FAILED),
    ],
)
def test_a_failed_stream(before: Action, after: Action) -> None:
    o = fresh()
    o.act(before)
    o.stream_failed("UPSTREAM_UNAVAILABLE")
    assert (o.action, o.error) == (after, "UPSTREAM_UNAVAILABLE")


def test_a_relay_that_fails_mid_body_keeps_its_action() -> None:
    o = fresh()
    o.relay_failed("UPSTREAM_UNAVAILABLE")
    assert (o.action, o.error) == (Action.FORWARDED, "UPSTREAM_UNAVAILABLE")


def test_client_gone() -> None:
    o = fresh()
    o.client_gone()
    assert (o.action, o.status) == (Action.CLIENT_GONE, 499)


def test_a_streamed_outcome_opens_once_and_closes_once() -> None:
    o = fresh(stream=True)
    assert o.defer() is True
    assert o.defer() is False  # already counted as open
    o.waited(10.0)  # more than the whole request took: capped at the total
    assert o.close() is True
    assert o.upstream_ms == o.total_ms
    assert o.close() is False
    assert o.stream_closed() is True
    assert o.stream_closed() is False


def test_a_non_streamed_outcome_is_never_an_open_stream() -> None:
    o = fresh()
    assert o.defer() is False
    assert o.deferred
    o.close()
    assert o.stream_closed() is False
    assert fresh(stream=True).close() is True  # recorded without deferring: nothing opened

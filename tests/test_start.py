"""The response-start policy (`start.py`): when a streamed response may start, and what it sends."""

from __future__ import annotations

import pytest

from spillguard.start import KEEPALIVE, ResponseStart, Send


def test_output_waits_until_it_is_meaningful_then_goes_out_with_what_it_held() -> None:
    start = ResponseStart()
    assert start.output(b"role", meaningful=False, last=False, leaking=False) is None
    assert start.output(b"", meaningful=False, last=False, leaking=False) is None
    assert not start.started
    sent = start.output(b"prose", meaningful=True, last=False, leaking=False)
    assert sent == Send(b"roleprose", start=True)
    assert start.started


def test_the_end_of_the_stream_starts_the_response_even_without_meaning() -> None:
    start = ResponseStart()
    start.output(b"role", meaningful=False, last=False, leaking=False)
    assert start.output(b"[DONE]", meaningful=False, last=True, leaking=False) == Send(
        b"role[DONE]", start=True
    )


@pytest.mark.parametrize("last", [False, True])
def test_a_leak_before_the_start_sends_nothing(last: bool) -> None:
    """The retry, or a real HTTP 502, replaces the attempt whole."""
    start = ResponseStart()
    start.output(b"role", meaningful=False, last=False, leaking=False)
    assert start.output(b"prose", meaningful=True, last=last, leaking=True) is None
    assert not start.started


def test_once_started_everything_goes_out_at_once_and_empty_output_is_nothing() -> None:
    start = ResponseStart()
    start.output(b"a", meaningful=True, last=False, leaking=False)
    assert start.output(b"b", meaningful=False, last=False, leaking=False) == Send(b"b")
    # Prose before the markup in the chunk that leaked still goes: it is publishable.
    assert start.output(b"c", meaningful=True, last=False, leaking=True) == Send(b"c")
    assert start.output(b"", meaningful=False, last=True, leaking=False) is None


def test_idle_starts_the_response_with_what_was_held_and_a_keepalive() -> None:
    start = ResponseStart()
    start.output(b"role", meaningful=False, last=False, leaking=False)
    assert start.idle() == Send(b"role" + KEEPALIVE, start=True)
    assert start.started
    assert start.idle() == Send(KEEPALIVE)  # started: only the keep-alive


def test_a_retry_drops_what_the_leaking_attempt_held() -> None:
    start = ResponseStart()
    start.output(b"first role", meaningful=False, last=False, leaking=False)
    start.next_attempt()
    sent = start.output(b"second", meaningful=True, last=False, leaking=False)
    assert sent == Send(b"second", start=True)


def test_a_retry_after_the_start_continues_the_started_response() -> None:
    start = ResponseStart()
    start.output(b"prose", meaningful=True, last=False, leaking=False)
    start.next_attempt()
    assert start.started
    assert start.output(b"more", meaningful=False, last=False, leaking=False) == Send(b"more")

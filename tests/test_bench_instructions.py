"""bench.instructions' reading of valgrind's output and its per-unit arithmetic (valgrind is not
run here)."""

from __future__ import annotations

import pytest

from bench.instructions import Count, parse, per_unit

VALGRIND = b"""==4242== Callgrind, a call-graph generating cache profiler
==4242== Command: python -m bench.inproc --n 200
==4242==
==4242== Events    : Ir
==4242== Collected : 5198015622
==4242==
==4242== I   refs:      5,198,015,622
"""


def test_the_total_and_the_counts_are_read() -> None:
    got = parse(VALGRIND, {"cpu_us": 1.0, "statuses": {"200": 400}, "events": 7})
    assert got == Count(5198015622, 400, 7)


def test_a_run_without_a_total_or_with_two_is_refused() -> None:
    with pytest.raises(RuntimeError, match="found 0"):
        parse(b"==1== I   refs: 5\n", {"statuses": {"200": 1}})
    twice = VALGRIND + VALGRIND.replace(b"4242", b"4343")  # a child process counted apart
    with pytest.raises(RuntimeError, match="found 2"):
        parse(twice, {"statuses": {"200": 1}})


def test_a_run_with_a_failed_request_is_refused() -> None:
    with pytest.raises(RuntimeError, match="200"):
        parse(VALGRIND, {"statuses": {"200": 390, "502": 10}})


def test_an_event_count_that_is_not_a_number_is_refused() -> None:
    with pytest.raises(RuntimeError, match="not a number"):
        parse(VALGRIND, {"statuses": {"200": 4}, "events": "7"})


def test_the_difference_of_two_runs_is_divided_by_their_difference_in_units() -> None:
    first, second = Count(1_000, 10, 100), Count(31_000, 20, 600)
    assert per_unit(first, second, "request") == 3_000
    assert per_unit(first, second, "event") == 60


def test_two_runs_of_the_same_size_are_refused() -> None:
    with pytest.raises(RuntimeError, match="more requests"):
        per_unit(Count(1, 10, 0), Count(2, 10, 0), "request")

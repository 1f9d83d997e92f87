"""bench.run's search for a row's throughput at a latency bound (`_Search`), on made-up rows."""

from __future__ import annotations

from collections.abc import Callable

from bench.run import BOUND_PROBE, Row, _Search


def searched(holds: Callable[[float], bool], ceiling: float, bisections: int = 5) -> _Search:
    search = _Search(Row("retry", "spillguard retry", 0), None, 0.0, ceiling, bisections)
    while (rate := search.next_rate()) is not None:
        search.measured(rate, {"rate": rate, "within": holds(rate)})
    return search


def rates(search: _Search) -> list[float]:
    return [point["rate"] for point in search.points]


def test_a_failed_low_rung_does_not_end_the_climb() -> None:
    # An idle VM's wake-ups fail 40 req/s; the row holds up to 1,500.
    search = searched(lambda rate: rate != 40 and rate <= 1500, ceiling=3300)
    ladder = [BOUND_PROBE * 2**n for n in range(8)]  # 20 .. 2,560
    assert rates(search)[:8] == ladder
    assert 1280 < search.lo <= 1500 < search.hi <= 2560
    assert len(search.points) == 8 + 5


def test_the_bisection_is_above_the_highest_rung_that_held() -> None:
    # 80 and 160 fail, 320 holds again: the bound lies above 320, below 640.
    search = searched(lambda rate: rate <= 40 or 300 <= rate <= 500, ceiling=3300)
    assert 320 <= search.lo <= 500 < search.hi <= 640
    assert all(320 < rate < 640 for rate in rates(search)[8:])


def test_the_top_rung_held_bisects_up_to_the_ceiling() -> None:
    search = searched(lambda rate: True, ceiling=3300)
    assert rates(search)[7] == 2560
    assert 2560 < search.lo < 3300 == search.hi


def test_nothing_held_is_no_bound_and_no_bisection() -> None:
    search = searched(lambda rate: False, ceiling=60)
    assert rates(search) == [20, 40]
    assert search.lo == 0

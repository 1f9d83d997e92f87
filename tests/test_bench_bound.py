"""bench.run's search for a row's throughput at a latency bound (`_Search`), on made-up rows, and
the section going on without a row whose proxy stops answering."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from bench import run
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


def test_a_row_that_stops_answering_is_dropped_and_the_others_go_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A proxy that dies mid-section (LiteLLM's did under 50 streams) is reported failed in
    that section and every later one; the other rows' searches go on to their end."""
    calls: list[tuple[str, float]] = []

    def point(row: Row, rate: float, plan: run.Plan) -> dict[str, object]:
        calls.append((row.key, rate))
        if row.key == "retry" and rate > 40:
            raise RuntimeError("loadgen failed: ConnectionRefusedError")
        return {"rate": rate, "within": rate <= 300}

    monkeypatch.setattr(run, "_bound_point", point)
    live = run.Live(None, run.Plan(), tmp_path)  # type: ignore[arg-type]
    live.procs = {"floor": None, "retry": None}
    results = run.bound(live, run.Plan(), tmp_path, {"floor": 1000.0, "retry": 1000.0})
    by_row = {r["row"]: r for r in results}
    assert "loadgen failed" in by_row["retry"]["error"]
    assert 160 <= by_row["floor"]["rate"] <= 300
    assert [rate for key, rate in calls if key == "retry"] == [20, 40, 80]
    assert live.get(run.rows_for(run.Plan(), "floor", "retry")) == (
        [(Row("floor", "floor", run.PORTS["floor"]), None)],
        [by_row["retry"]],
    )

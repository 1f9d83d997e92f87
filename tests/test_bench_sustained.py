"""bench.run's sustained section on made-up rows: each row tried level by level up to its
first failure, the run going on while any row holds, and how a level reads in the report."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import report, run

# The highest level each made-up row holds (0: not even the first).
HOLDS = {"nginx": 1000, "splice": 750, "floor": 0, "retry": 250}


def test_each_row_is_tried_up_to_its_first_failure(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tried: list[tuple[str, int]] = []
    by_port = {run.PORTS[key]: key for key in HOLDS}

    def loadgen(args: list[str], **_: object) -> dict[str, object]:
        port = int(args[args.index("--url") + 1].split(":")[2].split("/")[0])
        level = int(args[args.index("-c") + 1])
        tried.append((by_port[port], level))
        return {"concurrency": level, "held": level <= HOLDS[by_port[port]]}

    monkeypatch.setattr(run, "loadgen", loadgen)
    plan = run.Plan(nginx=Path("/usr/sbin/nginx"))
    live = run.Live(None, plan, tmp_path)  # type: ignore[arg-type]
    live.procs = dict.fromkeys(HOLDS)
    results = {r["row"]: r for r in run.sustained(live, plan, tmp_path)}
    assert "direct" not in results  # no measure of the harness: not a row here
    assert {key: r["held"] for key, r in results.items()} == HOLDS
    levels = run.SUSTAIN_LEVELS
    for key, held in HOLDS.items():
        first_failure = next(level for level in levels if level > held)
        assert [lv for k, lv in tried if k == key] == [
            level for level in levels if level <= first_failure
        ]
    assert not any(r["capped"] for r in results.values())
    assert report._held(results["floor"]) == "< 250"
    assert report._held(results["retry"]) == "250"
    assert report._held_ratio(results["retry"], results["splice"]) == "0.33"
    assert report._held_ratio(results["floor"], results["splice"]) == "< 0.33"


def test_a_row_still_holding_at_the_last_level_reads_at_least(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def loadgen(args: list[str], **_: object) -> dict[str, object]:
        return {"concurrency": int(args[args.index("-c") + 1]), "held": True}

    monkeypatch.setattr(run, "loadgen", loadgen)
    plan = run.Plan(sustain_levels=[250, 375])  # no nginx on this plan: not a row
    live = run.Live(None, plan, tmp_path)  # type: ignore[arg-type]
    live.procs = dict.fromkeys(["splice", "floor", "retry"])
    results = run.sustained(live, plan, tmp_path)
    assert [r["row"] for r in results] == ["splice", "floor", "retry"]
    assert all(r["capped"] and r["held"] == 375 for r in results)
    assert report._held(results[0]) == ">= 375"

"""Turn a run's results.json into REPORT.md and PNG charts (and, on --publish, RESULTS.md)."""

from __future__ import annotations

import math
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ANALYSIS_MARK = "<!-- analysis: kept across --publish -->"
COLORS = {
    "direct": "#7f7f7f",
    "floor": "#1f77b4",
    "floor_parse": "#9ecae1",
    "retry": "#d62728",
    "observe": "#ff9896",
    "litellm": "#2ca02c",
    "nginx": "#17becf",
    "splice": "#bcbd22",
    "base": "#9467bd",
    "sg_w1": "#d62728",
    "sg_w2": "#8c564b",
}


def _row(rows: list[dict], key: str) -> dict | None:
    return next((r for r in rows if r.get("row") == key and "error" not in r), None)


def _level(row: dict | None, conc: int) -> dict | None:
    if row is None:
        return None
    return next((lv for lv in row.get("levels", []) if lv["concurrency"] == conc), None)


def _per_round(a: dict | None, b: dict | None, key: str, invert: bool = False) -> str:
    """How far the ratio a/b of `key` (b/a with `invert`) moved from round to round: the rows
    of one round run seconds apart, so its range shows what the machine did within the run."""
    pairs = zip((a or {}).get("rounds") or [], (b or {}).get("rounds") or [], strict=False)
    ratios = [x[key] / y[key] for x, y in pairs if x.get(key) and y.get(key)]
    if invert:
        ratios = [1 / r for r in ratios]
    if len(ratios) < 2:
        return ""
    return f"; per round {min(ratios):.2f} to {max(ratios):.2f}"


def _num(value: Any) -> bool:
    return isinstance(value, int | float) and not math.isnan(value) and value > 0


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, float):
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


# ---- aggregation ---------------------------------------------------------------------------

QUIET_PCT = 15.0  # a round is quiet when other processes used less than this share of a core
NS_KEYS = ("req_per_s", "p50_ms", "p90_ms", "p99_ms", "mean_ms", "requests", "cpu_us_per_req")
ONE_KEYS = ("chunks_per_s_p50", "chunks_per_s_best", "stream_ms_p50", "ttfb_ms_p50", "ttfb_ms_p90")
LOAD_KEYS = ("req_per_s", "events_per_s", "latency_ms_p50", "latency_ms_p99", "ttfb_ms_p50")
LOAD_KEYS += ("ttfb_ms_p99", "requests", "cpu_us_per_event")
P50_GOAL_MS = 0.15  # p50 added latency at one client, over the floor's
MEMORY_GOAL_MB = 150  # with 1,000 open streams
SUSTAIN_GOAL = 2000  # paced streams held at once


def _median(values: list[float]) -> float:
    ordered = sorted(v for v in values if v is not None and v == v)
    if not ordered:
        return float("nan")
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def combine(rounds: list[dict], keys: tuple[str, ...]) -> dict:
    """One point from its rounds: the median of each figure over the quiet rounds (other
    processes under QUIET_PCT of a core), or over all rounds when none was quiet."""
    quiet = [r for r in rounds if (r.get("foreign_cpu_pct") or 0) < QUIET_PCT]
    use = quiet or rounds
    out = {k: v for k, v in rounds[0].items() if k != "rounds"}
    for key in keys:
        values = [r[key] for r in use if r.get(key) is not None]
        out[key] = round(_median(values), 3) if values else None
    out["errors"] = sum(r.get("errors", 0) for r in rounds)
    foreign = [r["foreign_cpu_pct"] for r in use if r.get("foreign_cpu_pct") is not None]
    out["foreign_cpu_pct"] = round(max(foreign), 1) if foreign else None
    stolen = [r["steal_pct"] for r in use if r.get("steal_pct") is not None]
    out["steal_pct"] = round(max(stolen), 1) if stolen else None
    out["quiet_rounds"] = len(quiet)
    out["rounds"] = rounds
    return out


def aggregate(data: dict) -> dict:
    """Recompute every point from its stored rounds (so a report can be re-rendered with the
    current rule)."""
    for row in data.get("nonstream") or []:
        row["levels"] = [
            combine(lv["rounds"], NS_KEYS) if "rounds" in lv else lv for lv in row.get("levels", [])
        ]
    for row in data.get("stream") or []:
        for key, keys in (("one", ONE_KEYS), ("ttfb", ONE_KEYS)):
            if isinstance(row.get(key), dict) and "rounds" in row[key]:
                row[key] = combine(row[key]["rounds"], keys)
        row["levels"] = [
            combine(lv["rounds"], LOAD_KEYS) if "rounds" in lv else lv
            for lv in row.get("levels", [])
        ]
    return data


# ---- targets ------------------------------------------------------------------------------------


def targets(data: dict) -> list[dict[str, Any]]:
    """Each target: what, measured, goal, verdict (met / MISSED / not measured)."""
    out: list[dict[str, Any]] = []

    def add(name: str, measured: str, goal: str, ok: bool | str | None) -> None:
        if isinstance(ok, str):  # a figure reported beside a target, not judged
            verdict = ok
        else:
            verdict = "not measured" if ok is None else ("met" if ok else "MISSED")
        out.append({"target": name, "measured": measured, "goal": goal, "verdict": verdict})

    ns = data.get("nonstream") or []
    floor, retry, observe = _row(ns, "floor"), _row(ns, "retry"), _row(ns, "observe")
    f50, r50, o50 = _level(floor, 50), _level(retry, 50), _level(observe, 50)
    for label, lv in (("retry", r50), ("observe", o50)):
        if f50 and lv:
            ratio = lv["req_per_s"] / f50["req_per_s"]
            spread = _per_round(lv, f50, "req_per_s")
            measured = (
                f"{ratio:.2f} ({_fmt(lv['req_per_s'])} vs {_fmt(f50['req_per_s'])} req/s{spread})"
            )
            add(
                f"non-streamed req/s at 50 concurrent, {label}",
                measured,
                ">= 0.85 of floor",
                ratio >= 0.85,
            )
        else:
            add(f"non-streamed req/s at 50 concurrent, {label}", "n/a", ">= 0.85 of floor", None)
    f1, r1, d1 = _level(floor, 1), _level(retry, 1), _level(_row(ns, "direct"), 1)
    if f1 and r1:
        diff = r1["p50_ms"] - f1["p50_ms"]
        extra = ""
        if d1:
            extra = (
                f" (added over direct: spillguard {r1['p50_ms'] - d1['p50_ms']:.3f} ms, "
                f"floor {f1['p50_ms'] - d1['p50_ms']:.3f} ms)"
            )
        add(
            "p50 added latency at concurrency 1, retry",
            f"{diff:+.3f} ms vs floor{extra}",
            f"within {P50_GOAL_MS} ms of floor",
            diff <= P50_GOAL_MS,
        )
    else:
        goal = f"within {P50_GOAL_MS} ms of floor"
        add("p50 added latency at concurrency 1, retry", "n/a", goal, None)
    f50c, r50c = (lv.get("cpu_us_per_req") if lv else None for lv in (f50, r50))
    if f50c and r50c:
        add(
            "proxy CPU per request at 50 concurrent, floor / retry (supporting figure)",
            f"{f50c / r50c:.2f} ({_fmt(r50c, 0)} vs {_fmt(f50c, 0)} µs"
            f"{_per_round(r50, f50, 'cpu_us_per_req', invert=True)})",
            ">= 0.85 (the same target, measured as CPU time)",
            f50c / r50c >= 0.85,
        )

    st = data.get("stream") or []
    sf, sr, sd = _row(st, "floor"), _row(st, "retry"), _row(st, "direct")
    if sf and sr:
        a, b = sr["one"]["chunks_per_s_p50"], sf["one"]["chunks_per_s_p50"]
        spread = _per_round(sr["one"], sf["one"], "chunks_per_s_p50")
        add(
            "chunks/s through one stream, retry",
            f"{a / b:.2f} ({_fmt(a)} vs {_fmt(b)}{spread})",
            ">= 0.8 of floor",
            a / b >= 0.8,
        )
        lr, lf = _level(sr, 50), _level(sf, 50)
        if lr and lf:
            ratio = lr["events_per_s"] / lf["events_per_s"]
            spread = _per_round(lr, lf, "events_per_s")
            add(
                "total chunks/s, 50 concurrent streams, retry",
                f"{ratio:.2f} ({_fmt(lr['events_per_s'])} vs {_fmt(lf['events_per_s'])}{spread})",
                ">= 0.8 of floor",
                ratio >= 0.8,
            )
    else:
        add("chunks/s through one stream, retry", "n/a", ">= 0.8 of floor", None)
    if sr and sd:
        delta = data["plan"]["ttfb_delta_ms"]
        added = sr["ttfb"]["ttfb_ms_p50"] - sd["ttfb"]["ttfb_ms_p50"]
        add(
            "added time to first content byte, benign prose, retry (p50)",
            f"{added:.2f} ms (upstream delta {delta} ms)",
            f"<= {delta} ms (one delta)",
            added <= delta,
        )
    else:
        add("added time to first content byte", "n/a", "<= one upstream delta", None)

    det = data.get("detect") or []
    if det:
        worst, worst_case, bad = 0.0, "", []
        for kind, mode in sorted({(d["kind"], d["mode"]) for d in det}):
            ratio = _growth(det, kind, mode)
            if ratio is None:
                bad.append(f"{kind}/{mode}")
                continue
            if ratio > worst:
                worst, worst_case = ratio, f"{kind}/{mode}"
        measured = f"worst {worst:.1f}x ({worst_case})"
        if bad:
            measured += f"; no figure for {', '.join(bad)}"
        add(
            "detection: time for 10 MB vs 1 MB, every input kind",
            measured,
            "<= 12x",
            worst <= 12 and not bad,
        )
    else:
        # Not in the default sections: alone it takes about 10 minutes (`--sections detect`).
        not_run = "not in this run (`--sections detect`, about 10 minutes alone)"
        add("detection: time for 10 MB vs 1 MB", not_run, "<= 12x", None)

    su = data.get("sustained") or []
    s_retry, s_floor, s_nginx = _row(su, "retry"), _row(su, "floor"), _row(su, "nginx")
    if s_retry:
        beside = ", ".join(
            f"{r['label']} {_held(r)}" for r in su if r["row"] != "retry" and "error" not in r
        )
        # Where nginx held no more, the harness may have stopped first: a lower bound only.
        harness = bool(s_nginx) and "error" not in s_nginx and s_nginx["held"] <= s_retry["held"]
        reached = s_retry["held"] >= SUSTAIN_GOAL
        add(
            "sustained streams (64 deltas, 20 ms apart) held with no stall, retry",
            f"{_held(s_retry)} streams ({beside})"
            + ("; the harness's own limit" if harness and not reached else ""),
            f"{SUSTAIN_GOAL:,}+ on one core",
            True if reached else (None if s_retry["capped"] or harness else False),
        )
    else:
        add("sustained streams held with no stall", "n/a", f"{SUSTAIN_GOAL:,}+", None)
    for other, name, goal in (
        (s_floor, "floor", "beside the floor"),
        (
            _row(su, "splice"),
            "Python TCP splice (no Python proxy that reads each piece holds more than the splice)",
            "beside Python's own limit",
        ),
    ):
        if s_retry and other and "error" not in other and other["held"]:
            add(
                f"sustained streams, retry / {name}",
                f"{_held_ratio(s_retry, other)} ({_held(s_retry)} vs {_held(other)})",
                goal,
                "reported",
            )
    bd = data.get("bound") or []
    b_retry, b_floor = _row(bd, "retry"), _row(bd, "floor")
    if b_retry and b_floor:
        ratio = b_retry["rate"] / b_floor["rate"] if b_floor["rate"] else 0.0
        add(
            "req/s with p99 under 5 ms (open loop), retry / floor",
            f"{ratio:.2f} ({_fmt(b_retry['rate'])} vs {_fmt(b_floor['rate'])} req/s)",
            "against the floor",
            "reported" if b_floor["rate"] else None,
        )
    else:
        add("req/s with p99 under 5 ms", "n/a", "against the floor", None)

    mem = _row(data.get("memory") or [], "retry")
    if mem:
        flowing = mem["hold"].get("flowing", 0)
        top = max(mem["holding_mb"], mem["peak_mb"])
        add(
            f"memory, {mem['streams']} open streams through spillguard",
            f"{top:.0f} MB peak RSS ({flowing} of {mem['streams']} streams flowing)",
            f"< {MEMORY_GOAL_MB} MB with 1,000 streams",
            top < MEMORY_GOAL_MB and flowing == mem["streams"] if mem["streams"] >= 1000 else None,
        )
    else:
        add("memory, 1,000 open streams", "n/a", f"< {MEMORY_GOAL_MB} MB", None)

    wk = data.get("workers") or []
    w1, w2 = _row(wk, "sg_w1"), _row(wk, "sg_w2")
    if w1 and w2:
        ns_ratio = w2["nonstream"]["req_per_s"] / w1["nonstream"]["req_per_s"]
        st_ratio = w2["stream"]["events_per_s"] / w1["stream"]["events_per_s"]
        add(
            "--workers 2 vs 1 (2 cores shared with load and upstream)",
            f"x{ns_ratio:.2f} req/s, x{st_ratio:.2f} stream chunks/s",
            "measured",
            True,
        )
    return out


def _first_failed(row: dict) -> int | None:
    """The first level a row that held none failed at (None for a row that held one)."""
    tried = [lv["concurrency"] for lv in row.get("levels") or [] if "concurrency" in lv]
    return None if row["held"] or not tried else min(tried)


def _held_ratio(row: dict, other: dict) -> str:
    """`row`'s level over `other`'s; `< x` when `row` held not even the first level tried."""
    failed = _first_failed(row)
    if failed is None:
        return f"{row['held'] / other['held']:.2f}"
    return f"< {failed / other['held']:.2f}"


def _held(row: dict) -> str:
    """Streams a row held, `>= N` when it still held at the last level the run tried, `< N`
    when it held not even the first."""
    failed = _first_failed(row)
    if failed is not None:
        return f"< {failed:,}"
    return (">= " if row.get("capped") else "") + f"{row['held']:,}"


def _case(det: list[dict], kind: str, mode: str, mb: int) -> dict | None:
    """One detection case: an input kind, a path (whole or stream), a size in MB."""
    return next((d for d in det if (d["kind"], d["mode"], d["mb"]) == (kind, mode, mb)), None)


def _growth(det: list[dict], kind: str, mode: str) -> float | None:
    one, ten = _case(det, kind, mode, 1), _case(det, kind, mode, 10)
    if not one or not ten or "seconds" not in one or "seconds" not in ten:
        return None
    return ten["seconds"] / max(one["seconds"], 1e-9)


# ---- charts ------------------------------------------------------------------------------------


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "font.size": 9,
            "axes.titlesize": 10,
            "figure.dpi": 100,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
        }
    )
    return plt


def _thousands() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: f"{v / 1000:.0f}k" if v >= 1000 else f"{v:.0f}")


def charts(data: dict, out: Path) -> list[str]:
    plt = _plt()
    made: list[str] = []

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out / name)
        plt.close(fig)
        made.append(name)

    ns = [r for r in data.get("nonstream") or [] if "error" not in r]
    if ns:
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
        for ax, key, title in (
            (axes[0], "p50_ms", "p50 latency"),
            (axes[1], "p99_ms", "p99 latency"),
        ):
            for r in ns:
                pts = [(lv["concurrency"], lv[key]) for lv in r["levels"] if _num(lv.get(key))]
                xs, ys = [p[0] for p in pts], [p[1] for p in pts]
                ax.plot(xs, ys, marker="o", label=r["label"], color=COLORS.get(r["row"]))
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xticks([1, 10, 50, 200], ["1", "10", "50", "200"])
            ax.set_xlabel("concurrent clients")
            ax.set_ylabel("ms (log)")
            ax.set_title(f"Non-streamed: {title}")
        axes[0].legend(fontsize=8)
        save(fig, "latency.png")

        fig, ax = plt.subplots(figsize=(9, 3.6))
        levels = [lv["concurrency"] for lv in ns[0]["levels"]]
        width = 0.8 / len(ns)
        for i, r in enumerate(ns):
            xs = [j + i * width - 0.4 + width / 2 for j in range(len(levels))]
            ys = [lv["req_per_s"] for lv in r["levels"]]
            bars = ax.bar(xs, ys, width, label=r["label"], color=COLORS.get(r["row"]))
            ax.bar_label(bars, [f"{y:,.0f}" for y in ys], fontsize=6, rotation=90, padding=2)
        ax.set_xticks(range(len(levels)), [f"{c} concurrent" for c in levels])
        ax.set_ylabel("requests/s")
        ax.set_yscale("log")
        ax.set_title("Non-streamed throughput (proxy on 1 core; log scale)")
        ax.legend(fontsize=8, ncol=len(ns), loc="upper center", bbox_to_anchor=(0.5, -0.1))
        ax.margins(y=0.25)
        save(fig, "throughput.png")

    st = [r for r in data.get("stream") or [] if "error" not in r]
    if st:
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), width_ratios=[1, 1.6])
        labels = [
            r["label"].replace("spillguard ", "sg ").replace(" + per-event", "\n+ per-event")
            for r in st
        ]
        ys = [r["one"]["chunks_per_s_p50"] for r in st]
        bars = axes[0].barh(labels, ys, color=[COLORS.get(r["row"]) for r in st])
        axes[0].bar_label(bars, [f"{y:,.0f}" for y in ys], fontsize=7, padding=2)
        axes[0].invert_yaxis()
        axes[0].set_xlabel("chunks/s (p50 of sequential streams)")
        axes[0].set_title("Through one stream")
        axes[0].margins(x=0.3)
        axes[0].xaxis.set_major_formatter(_thousands())
        levels = [lv["concurrency"] for lv in st[0]["levels"]]
        width = 0.8 / len(st)
        for i, r in enumerate(st):
            xs = [j + i * width - 0.4 + width / 2 for j in range(len(levels))]
            axes[1].bar(
                xs,
                [lv["events_per_s"] for lv in r["levels"]],
                width,
                label=r["label"],
                color=COLORS.get(r["row"]),
            )
        axes[1].set_xticks(range(len(levels)), [f"{c} streams" for c in levels])
        axes[1].set_ylabel("chunks/s, all streams")
        axes[1].set_title("Total stream throughput")
        axes[1].legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.1))
        save(fig, "streams.png")

        fig, ax = plt.subplots(figsize=(9, 3.0))
        direct = _row(st, "direct")
        base = direct["ttfb"]["ttfb_ms_p50"] if direct else 0.0
        ys = [r["ttfb"]["ttfb_ms_p50"] - base for r in st]
        bars = ax.barh(labels, ys, color=[COLORS.get(r["row"]) for r in st])
        ax.bar_label(bars, [f"{y:.2f} ms" for y in ys], fontsize=7, padding=2)
        delta = data["plan"]["ttfb_delta_ms"]
        ax.axvline(delta, color="k", ls="--", lw=1)
        ax.text(
            delta, -0.6, f"target: one delta ({delta} ms) ", fontsize=7, va="bottom", ha="right"
        )
        ax.invert_yaxis()
        ax.set_xlabel("ms added to the first content byte over direct (p50)")
        ax.set_title(f"Added time to first content byte (prose, upstream delta every {delta} ms)")
        save(fig, "ttfb.png")

    det = [d for d in data.get("detect") or [] if "seconds" in d]
    if det:
        kinds = list(dict.fromkeys(d["kind"] for d in det))
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
        width = 0.4
        for i, mode in enumerate(("whole", "stream")):
            ys = []
            for k in kinds:
                one = next(
                    (d for d in det if (d["kind"], d["mode"], d["mb"]) == (k, mode, 10)), None
                )
                ys.append(one["mb_per_s"] if one else 0)
            xs = [j + (i - 0.5) * width for j in range(len(kinds))]
            axes[0].bar(
                xs,
                ys,
                width,
                label=f"{mode} reply" if mode == "whole" else "16-char deltas",
                color="#1f77b4" if mode == "whole" else "#ff7f0e",
            )
            ratios = [_growth(det, k, mode) or 0 for k in kinds]
            axes[1].bar(
                xs,
                ratios,
                width,
                color="#1f77b4" if mode == "whole" else "#ff7f0e",
                label=f"{mode} reply" if mode == "whole" else "16-char deltas",
            )
        for ax in axes:
            ax.set_xticks(range(len(kinds)), kinds, rotation=35, ha="right")
        axes[0].set_yscale("log")
        axes[0].set_ylabel("MB/s at 10 MB (log)")
        axes[0].set_title("Detection core throughput")
        axes[0].legend(fontsize=7)
        axes[1].axhline(12, color="k", ls="--", lw=1)
        axes[1].axhline(10, color="#999", ls=":", lw=1)
        axes[1].set_ylabel("time(10 MB) / time(1 MB)")
        axes[1].set_title("Growth 1 MB -> 10 MB (linear = 10, target <= 12)")
        save(fig, "detect.png")

    mem = data.get("memory") or []
    ns_peak = [r for r in ns if r.get("peak_mb")]
    if mem or ns_peak:
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
        if mem:
            names = [m["label"] for m in mem]
            for i, (key, lab) in enumerate(
                (
                    ("idle_mb", "idle"),
                    ("holding_mb", f"{mem[0]['streams']} streams open"),
                    ("after_close_mb", "after they close"),
                )
            ):
                xs = [j + (i - 1) * 0.27 for j in range(len(mem))]
                bars = axes[0].bar(xs, [m[key] for m in mem], 0.27, label=lab)
                axes[0].bar_label(bars, [f"{m[key]:.0f}" for m in mem], fontsize=7)
            axes[0].axhline(300, color="k", ls="--", lw=1)
            axes[0].set_xticks(range(len(mem)), names)
            axes[0].set_ylabel("RSS, MB")
            axes[0].set_title("Memory holding slow streams (target < 300 MB)")
            axes[0].legend(fontsize=7)
        if ns_peak:
            bars = axes[1].barh(
                [r["label"] for r in ns_peak],
                [r["peak_mb"] for r in ns_peak],
                color=[COLORS.get(r["row"]) for r in ns_peak],
            )
            axes[1].bar_label(bars, [f"{r['peak_mb']:.0f} MB" for r in ns_peak], fontsize=7)
            axes[1].invert_yaxis()
            axes[1].set_xlabel("peak RSS, MB")
            axes[1].set_title("Peak RSS under the non-streamed load")
            axes[1].margins(x=0.25)
        save(fig, "memory.png")

    su = [r for r in data.get("sustained") or [] if "error" not in r]
    if su:
        fig, ax = plt.subplots(figsize=(9, 2.8))
        bars = ax.barh(
            [r["label"] for r in su],
            [r["held"] for r in su],
            color=[COLORS.get(r["row"]) for r in su],
        )
        ax.bar_label(bars, [_held(r) for r in su], fontsize=7, padding=2)
        ax.invert_yaxis()
        ax.set_xlabel("paced streams held at once, no gap over 100 ms, under 1% errors")
        ax.set_title("Sustained streams (proxy on 1 core)")
        ax.margins(x=0.2)
        save(fig, "sustained.png")

    bd = [r for r in data.get("bound") or [] if "error" not in r]
    if bd:
        fig, ax = plt.subplots(figsize=(9, 2.6))
        vals = [r["rate"] for r in bd]
        bars = ax.barh([r["label"] for r in bd], vals, color=[COLORS.get(r["row"]) for r in bd])
        ax.bar_label(bars, [f"{v:,.0f}" for v in vals], fontsize=7, padding=2)
        ax.invert_yaxis()
        ax.set_xlabel("requests/s (open loop) with p99 under 5 ms")
        ax.set_title("Throughput at a latency bound (proxy on 1 core)")
        ax.margins(x=0.2)
        ax.xaxis.set_major_formatter(_thousands())
        save(fig, "bound.png")

    wk = data.get("workers") or []
    if wk:
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.0))
        names = [w["label"] for w in wk]
        for ax, vals, title in (
            (axes[0], [w["nonstream"]["req_per_s"] for w in wk], "non-streamed req/s, 50 clients"),
            (axes[1], [w["stream"]["events_per_s"] for w in wk], "stream chunks/s, 50 streams"),
        ):
            bars = ax.barh(names, vals, color=[COLORS.get(w["row"]) for w in wk])
            ax.bar_label(bars, [f"{v:,.0f}" for v in vals], fontsize=7, padding=2)
            ax.invert_yaxis()
            ax.set_title(title)
            ax.margins(x=0.25)
            ax.xaxis.set_major_formatter(_thousands())
        fig.suptitle(
            "Workers on this 2-core machine (load and upstream share the cores)", fontsize=9
        )
        save(fig, "workers.png")
    return made


# ---- Markdown ----------------------------------------------------------------------------------


def _table(header: Sequence[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def markdown(data: dict, images: list[str], prefix: str = "") -> str:
    """The report's body: how the run was made, the targets, then one section per part of the
    run that has results (each chart linked when it was drawn, under `prefix`)."""
    parts = _run(data) + _targets(data)
    sections = (_nonstream, _streams, _sustained, _bound, _detection, _memory, _components)
    for section in (*sections, _workers):
        parts += section(data, images, prefix)
    return "\n".join(parts) + "\n"


def _run(data: dict) -> list[str]:
    m = data["machine"]
    plan = data["plan"]
    parts = [
        f"Run started {data['started']}, took {data.get('seconds', '?')} s.",
        "",
        f"- Machine: {m['nproc']} CPUs ({m['cpu']}), {m['memory_gb']} GB, Linux {m['kernel']}, "
        f"Python {m['python']}; {m['wrk']}",
        "- Stack: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()),
        f"- Code: git {m['git_head']}"
        + (" with uncommitted changes in app/" if m["git_dirty_app"] else ""),
        f"- Command: `{data['command']}`",
        f"- Pinning: proxy under test on CPU {data['pinning']['proxy']}; fake upstream and "
        f"load generators on CPU {data['pinning']['upstream_and_load']} (`taskset -c`), each "
        "its own process.",
        f"- Each point: {plan['warmup']} s warm-up, then {plan['duration']} s measured, in "
        f"{plan.get('rounds', 1)} round(s) ({plan.get('target_rounds', plan.get('rounds', 1))} "
        "for the non-streamed point at 50 clients, which the throughput target reads); all rows "
        "of a section run side by side (each its "
        "own process, idle until its turn), interleaved round by round in rotating order. Each "
        f"figure is the median of the point's quiet rounds (other processes under {QUIET_PCT:.0f}% "
        "of a core), or of all its rounds when none was quiet; the *other CPU %* columns give "
        "the most any used round saw, and *steal %* the most host steal of the proxy's CPU any "
        "second of them saw. Non-streamed load: `wrk -t1`; streams: bench/loadgen.py.",
    ]
    if data.get("litellm_note"):
        parts.append(f"- LiteLLM: {data['litellm_note']}")
    if data.get("nginx_note"):
        parts.append(f"- nginx: {data['nginx_note']}")
    foreign, steal = data.get("foreign_cpu") or {}, data.get("steal") or {}
    if foreign:
        parts.append(
            "- Other processes on the machine (not this run's), CPU % of one core sampled "
            f"each second: {_by_section(foreign, 0)}."
        )
    if steal:
        parts.append(
            "- Steal (the time the hypervisor ran something else on the proxy's CPU, from "
            f"/proc/stat), sampled each second: {_by_section(steal, 1)}."
        )
    return parts


def _by_section(summary: dict, digits: int) -> str:
    return ", ".join(
        f"{k} {v['mean_pct']:.{digits}f}% mean / {v['max_pct']:.{digits}f}% max"
        for k, v in summary.items()
    )


def _targets(data: dict) -> list[str]:
    rows = [[t["target"], t["measured"], t["goal"], f"**{t['verdict']}**"] for t in targets(data)]
    return [
        "",
        "## Targets",
        "",
        _table(["target", "measured (this run)", "goal", "verdict"], rows),
    ]


def _charts(images: list[str], prefix: str, first: str, *names: tuple[str, str]) -> list[str]:
    """Links to the charts of a section, when its first chart was drawn: (alt text, file)."""
    if first not in images:
        return []
    return ["", *(f"![{alt}]({prefix}{name})" for alt, name in names)]


def _error_row(row: dict, cells: int) -> list[str]:
    """A row that failed to run: its label, the error, and empty cells to fill the table."""
    return [row["label"], "error: " + row["error"][:80]] + [""] * cells


NS_HEADER = (
    "row",
    "clients",
    "req/s",
    "p50 ms",
    "p99 ms",
    "p50 added ms",
    "proxy CPU µs/req",
    "errors",
    "peak RSS MB",
    "other CPU %",
    "steal %",
)


def _nonstream(data: dict, images: list[str], prefix: str) -> list[str]:
    ns = data.get("nonstream") or []
    if not ns:
        return []
    parts = ["", "## Non-streamed chat completions", ""]
    agent = (data.get("plan") or {}).get("request") == "agent"
    parts.append(
        (
            "A 36 KB agent turn (`payloads.agent_request`: 40 rounds of a question, a tool "
            "call and its result) declaring three tools"
            if agent
            else "A request declaring three tools"
        )
        + "; a 1.7 KB JSON reply of Markdown prose. "
        "Added latency is the row's p50 minus the upstream direct p50 at the same concurrency. "
        "*Proxy CPU µs/req*: the CPU time the proxy process used during the point, per "
        "request; other load on the machine moves it far less than requests/s."
    )
    parts += _charts(
        images, prefix, "latency.png", ("latency", "latency.png"), ("throughput", "throughput.png")
    )
    direct = _row(ns, "direct")
    table = []
    for r in ns:
        if "error" in r:
            table.append(_error_row(r, 9))
            continue
        for lv in r["levels"]:
            d = _level(direct, lv["concurrency"])
            ok = d and r["row"] != "direct" and _num(lv["p50_ms"]) and _num(d["p50_ms"])
            added = lv["p50_ms"] - d["p50_ms"] if ok else None
            table.append(
                [
                    r["label"],
                    str(lv["concurrency"]),
                    _fmt(lv["req_per_s"], 0),
                    _fmt(lv["p50_ms"], 3),
                    _fmt(lv["p99_ms"], 3),
                    _fmt(added, 3),
                    _fmt(lv.get("cpu_us_per_req"), 0),
                    _fmt(lv["errors"]),
                    _fmt(r.get("peak_mb"), 0),
                    _fmt(lv.get("foreign_cpu_pct"), 0),
                    _fmt(lv.get("steal_pct"), 1),
                ]
            )
    return [*parts, "", _table(NS_HEADER, table)]


LATENCY_HEADER = (
    "row",
    "streams",
    "streams/s",
    "stream p50 ms",
    "stream p99 ms",
    "first content p50 ms",
    "first content p99 ms",
    "other CPU %",
)


def _streams(data: dict, images: list[str], prefix: str) -> list[str]:
    st = data.get("stream") or []
    if not st:
        return []
    delta = data["plan"]["ttfb_delta_ms"]
    parts = ["", "## Streams", ""]
    ev = next((r["one"]["events_per_stream"] for r in st if "one" in r), "?")
    parts.append(
        f"An SSE chat stream of {ev} events (prose deltas of 1-6 characters, then a structured "
        "tool call in 3-character argument deltas, finish, usage, `[DONE]`), written by the "
        "upstream as fast as the reader takes it. *Through one stream*: streams one after "
        "another, chunks delivered per second of stream (p50). *TTFB*: time to the first "
        f"non-empty content delta on a short stream whose upstream sends a delta every {delta} "
        "ms. *Total*: all chunks delivered per second with N streams at once."
    )
    parts += _charts(
        images, prefix, "streams.png", ("streams", "streams.png"), ("ttfb", "ttfb.png")
    )
    header = ["row", "chunks/s, one stream", "first content ms (fast stream)"]
    header += [f"TTFB ms ({delta} ms deltas)", "TTFB added ms"]
    loads = _stream_load(st)
    header += [f"total chunks/s, {c}" for c in loads] + [f"proxy CPU µs/chunk, {loads[-1]}"]
    header += ["errors", "peak RSS MB"]
    parts += ["", _table(header, _stream_rows(st))]
    parts += ["", "Whole-stream latency under load:", ""]
    return [*parts, _table(LATENCY_HEADER, _stream_latency_rows(st))]


def _stream_load(st: list[dict]) -> list[int]:
    """The stream counts this run measured total throughput at."""
    return sorted({lv["concurrency"] for r in st for lv in r.get("levels", [])}) or [50]


def _stream_rows(st: list[dict]) -> list[list[str]]:
    direct = _row(st, "direct")
    base = direct["ttfb"]["ttfb_ms_p50"] if direct else None
    loads = _stream_load(st)
    table = []
    for r in st:
        if "error" in r:
            table.append(_error_row(r, 5 + len(loads)))
            continue
        lv = {x["concurrency"]: x for x in r["levels"]}
        added = r["ttfb"]["ttfb_ms_p50"] - base if base is not None else None
        table.append(
            [
                r["label"],
                _fmt(r["one"]["chunks_per_s_p50"], 0),
                _fmt(r["one"]["ttfb_ms_p50"], 3),
                _fmt(r["ttfb"]["ttfb_ms_p50"], 2),
                _fmt(added, 2),
                *[_fmt(lv[c]["events_per_s"], 0) if c in lv else "n/a" for c in loads],
                _fmt(lv[loads[-1]].get("cpu_us_per_event") if loads[-1] in lv else None, 2),
                _fmt(sum(x["errors"] for x in r["levels"]) + r["one"]["errors"]),
                _fmt(r.get("peak_mb"), 0),
            ]
        )
    return table


def _stream_latency_rows(st: list[dict]) -> list[list[str]]:
    return [
        [
            r["label"],
            str(x["concurrency"]),
            _fmt(x["req_per_s"], 1),
            _fmt(x["latency_ms_p50"], 2),
            _fmt(x["latency_ms_p99"], 2),
            _fmt(x["ttfb_ms_p50"], 2),
            _fmt(x["ttfb_ms_p99"], 2),
            _fmt(x.get("foreign_cpu_pct"), 0),
        ]
        for r in st
        for x in r.get("levels", [])
    ]


DETECT_HEADER = ("input", "path", "MB/s at 1 MB", "MB/s at 10 MB", "1 MB", "10 MB", "growth")


def _detection(data: dict, images: list[str], prefix: str) -> list[str]:
    det = data.get("detect") or []
    if not det:
        return []
    from .detect_bench import KINDS

    parts = ["", "## Detection core alone", ""]
    parts.append(
        "`inspect_text` on the whole text (*whole*), and one `Scanner` fed 16-character "
        "deltas (*stream*), on CPU 0, best of 3 (1 MB) or 2 (10 MB) runs, each case in its own "
        "process. Growth is time(10 MB) / time(1 MB): 10 is linear."
    )
    parts += _charts(images, prefix, "detect.png", ("detection", "detect.png"))
    parts += ["", _table(DETECT_HEADER, _detection_rows(det))]
    return [*parts, "", "Inputs: " + "; ".join(f"*{k}*: {v}" for k, v in KINDS.items()) + "."]


def _detection_rows(det: list[dict]) -> list[list[str]]:
    table = []
    for kind in dict.fromkeys(d["kind"] for d in det):
        for mode in ("whole", "stream"):
            one, ten = (_case(det, kind, mode, mb) or {} for mb in (1, 10))
            growth = _growth(det, kind, mode)
            table.append(
                [
                    kind,
                    mode,
                    _fmt(one.get("mb_per_s"), 1),
                    _fmt(ten.get("mb_per_s"), 1),
                    _seconds(one),
                    _seconds(ten),
                    _fmt(growth, 1) + ("x" if growth else ""),
                ]
            )
    return table


def _seconds(case: dict) -> str:
    if "timeout" in case:
        return f"timeout > {case['timeout']:.0f} s"
    if "error" in case:
        return "error"
    return f"{case.get('seconds', float('nan')) * 1000:.1f} ms"


MEMORY_HEADER = (
    "row",
    "idle MB",
    "holding MB",
    "peak MB",
    "after close MB",
    "streams flowing",
    "seconds to open",
)


SUSTAIN_HEADER = (
    "row",
    "streams at once",
    "held",
    "streams done",
    "errors %",
    "gap p50 ms",
    "gap p99 ms",
    "gap p99.9 ms",
    "longest gap ms",
    "gaps over 100 ms",
    "chunks/s",
    "proxy CPU µs/chunk",
    "RSS MB",
    "other CPU %",
)


def _sustained(data: dict, images: list[str], prefix: str) -> list[str]:
    su = data.get("sustained") or []
    if not su:
        return []
    plan = data["plan"]
    delta, n = plan.get("sustain_delta_ms", 20), plan.get("sustain_deltas", 64)
    parts = ["", "## Sustained streams", ""]
    parts.append(
        f"Each client asks for a stream of {n} prose deltas {delta} ms apart (then finish, usage, "
        "`[DONE]`), and asks again as soon as it ends, so the number of streams at once stays "
        "at the level; the first requests spread over one stream's length. Once every stream "
        f"is running, {plan.get('sustain_seconds', 3)} s are measured: the time between one "
        "arrival of deltas and the next on the same stream, at the client. A level is *held* "
        "when no gap exceeds 100 ms and under 1% of streams fail. Levels are tried in turn "
        "(one pass, rows interleaved at each level) until a row stops holding, and the run "
        "stops where none holds. *Held*: the highest level held (`>=` when it still held at "
        "the last level tried). Two rows bound what a proxy can hold here: nginx "
        "(`proxy_pass`, one worker, unbuffered), the limit of a proxy in C, and a TCP splice "
        "on uvloop (bench/splice.py: each read written to the other socket, nothing parsed), "
        "the limit of any Python proxy that reads each upstream piece. The upstream and the "
        "load generator share one core, so the harness has a limit of its own, at or above "
        "nginx's level; the upstream direct is no measure of it (with no proxy on the other "
        "core, the loopback's work for both ends falls on that core) and is not a row here. "
        "*Proxy CPU µs/chunk*: the proxy's CPU time over the whole point (streams' setup "
        "included) over the chunks delivered in it."
    )
    parts += _charts(images, prefix, "sustained.png", ("sustained", "sustained.png"))
    summary = [[r["label"], _held(r)] for r in su if "error" not in r]
    parts += ["", _table(["row", "streams held"], summary), ""]
    table = []
    for r in su:
        if "error" in r:
            table.append(_error_row(r, len(SUSTAIN_HEADER) - 2))
            continue
        for lv in r["levels"]:
            table.append(
                [
                    r["label"],
                    _fmt(lv.get("concurrency")),
                    "yes" if lv.get("held") else "**no**",
                    _fmt(lv.get("streams")),
                    _fmt(lv.get("error_pct"), 2),
                    _fmt(lv.get("gap_ms_p50"), 0),
                    _fmt(lv.get("gap_ms_p99"), 0),
                    _fmt(lv.get("gap_ms_p999"), 0),
                    _fmt(lv.get("gap_ms_max"), 1),
                    _fmt(lv.get("gaps_over_100ms")),
                    _fmt(lv.get("events_per_s"), 0),
                    _fmt(lv.get("cpu_us_per_chunk"), 1),
                    _fmt(lv.get("rss_mb"), 0),
                    _fmt(lv.get("foreign_cpu_pct"), 0),
                ]
            )
    return [*parts, _table(SUSTAIN_HEADER, table)]


BOUND_HEADER = ("row", "rate asked", "req/s done", "p50 ms", "p99 ms", "errors", "within")
BOUND_HEADER += ("load generator lag ms", "other CPU %")


def _bound(data: dict, images: list[str], prefix: str) -> list[str]:
    bd = data.get("bound") or []
    if not bd:
        return []
    parts = ["", "## Throughput at a latency bound", ""]
    parts.append(
        "Open-loop load (bench/loadgen.py `rate`): requests sent at a fixed rate over a pool of "
        "64 connections, whether or not earlier ones have finished; each latency is counted "
        "from the moment the request was issued, so waiting for a free connection counts. Rates "
        "double from 20 req/s up to the row's closed-loop peak at 50 clients, every rung "
        "measured (a failure does not stop the climb: on an idle VM a low rate can read a worse "
        "p99 than a higher one), then a bisection (in log space) between the highest rung that "
        "held and the one above it; the rows' searches advance together (one point per row a "
        "step). Each point lasts at least 3 s and 400 requests (20 s at 20 req/s), so that no "
        "p99 is one stray request. The figure is the highest rate whose p99 stayed under 5 ms "
        "with no errors. "
        "*Load generator lag*: the most the generator's own timer woke late (not counted in the "
        "latency; when it is large, the offered rate was not steady)."
    )
    parts += _charts(images, prefix, "bound.png", ("bound", "bound.png"))
    summary = [[r["label"], _fmt(r["rate"])] for r in bd if "error" not in r]
    parts += ["", _table(["row", "req/s with p99 < 5 ms"], summary), ""]
    table = []
    for r in bd:
        if "error" in r:
            table.append(_error_row(r, len(BOUND_HEADER) - 2))
            continue
        for pt in r["points"]:
            table.append(
                [
                    r["label"],
                    _fmt(pt.get("rate"), 0),
                    _fmt(pt.get("req_per_s"), 0),
                    _fmt(pt.get("latency_ms_p50"), 2),
                    _fmt(pt.get("latency_ms_p99"), 2),
                    _fmt(pt.get("errors")),
                    "yes" if pt.get("within") else "no",
                    _fmt(pt.get("scheduler_lag_ms_max"), 2),
                    _fmt(pt.get("foreign_cpu_pct"), 0),
                ]
            )
    return [*parts, _table(BOUND_HEADER, table)]


def _memory(data: dict, images: list[str], prefix: str) -> list[str]:
    mem = data.get("memory") or []
    if not mem:
        return []
    parts = ["", "## Memory: many open streams", ""]
    m0 = mem[0]
    parts.append(
        f"{m0['streams']} streams opened at once (64 to 200 connecting at a time), each an "
        f"upstream stream that drips one prose delta every {m0['delta_ms']} ms; RSS sampled "
        "once a second for 5 s once every stream has delivered content, then again 3 s after "
        "the clients close them."
    )
    parts += _charts(images, prefix, "memory.png", ("memory", "memory.png"))
    table = [
        [
            m["label"],
            _fmt(m["idle_mb"], 0),
            _fmt(m["holding_mb"], 0),
            _fmt(m["peak_mb"], 0),
            _fmt(m["after_close_mb"], 0),
            f"{m['hold'].get('flowing')} / {m['streams']}",
            _fmt(m["hold"].get("seconds_to_open"), 1),
        ]
        for m in mem
    ]
    return [*parts, "", _table(MEMORY_HEADER, table)]


def _components(data: dict, images: list[str], prefix: str) -> list[str]:
    every = data.get("components") or []
    if not every:
        return []
    parts = ["", "## Where the time goes: each step alone", ""]
    failed = [c["error"] for c in every if "error" in c]
    if failed:  # said, not left out: a section that failed is a finding of the run
        return [*parts, "**This section failed in this run:**", "", "```", failed[0].strip(), "```"]
    comp = every
    parts.append(
        "`python -m bench.components`, in one process on CPU 0: each step of the request "
        "path timed on its own over many calls (best of 5 batches), on the bench's request "
        "and replies. The framework rows send one POST through the ASGI app directly (no "
        "sockets) to a trivial route."
    )
    rows = [[c["group"], f"`{c['step']}`", f"{c['us']:.2f}", c.get("note", "")] for c in comp]
    return [*parts, "", _table(["path", "step", "µs per call", "note"], rows)]


WORKERS_HEADER = (
    "row",
    "req/s",
    "p50 ms",
    "p99 ms",
    "stream chunks/s",
    "peak RSS MB (all processes)",
)


def _workers(data: dict, images: list[str], prefix: str) -> list[str]:
    wk = data.get("workers") or []
    if not wk:
        return []
    parts = ["", "## Workers", ""]
    parts.append(
        "Nothing pinned: proxy, upstream and load generators share both CPUs, so two workers "
        "compete with the load for the second core. 50 concurrent clients."
    )
    parts += _charts(images, prefix, "workers.png", ("workers", "workers.png"))
    table = [
        [
            w["label"],
            _fmt(w["nonstream"]["req_per_s"], 0),
            _fmt(w["nonstream"]["p50_ms"], 2),
            _fmt(w["nonstream"]["p99_ms"], 2),
            _fmt(w["stream"]["events_per_s"], 0),
            _fmt(w["peak_mb"], 0),
        ]
        for w in wk
    ]
    return [*parts, "", _table(WORKERS_HEADER, table)]


def render(data: dict, out: Path) -> None:
    aggregate(data)
    images = charts(data, out)
    text = "# spillguard benchmark report\n\n" + markdown(data, images)
    (out / "REPORT.md").write_text(text)


def publish(data: dict, out: Path) -> None:
    """Copy the charts to bench/charts/ and write bench/RESULTS.md, keeping its analysis part."""
    aggregate(data)
    charts_dir = BENCH / "charts"
    charts_dir.mkdir(exist_ok=True)
    images = []
    for png in sorted(out.glob("*.png")):
        shutil.copy2(png, charts_dir / png.name)
        images.append(png.name)
    results = BENCH / "RESULTS.md"
    analysis = ""
    if results.exists():
        old = results.read_text()
        if ANALYSIS_MARK in old:
            analysis = old[old.index(ANALYSIS_MARK) :]
    if not analysis:
        analysis = ANALYSIS_MARK + "\n\n## Analysis\n\n(to be written)\n"
    head = (
        "# spillguard benchmark results\n\n"
        "Every figure down to the analysis comes from one run of the command below (generated "
        "by `--publish`). The analysis at the end is written by hand and kept across "
        "`--publish`; each figure it quotes names the run or profile it comes from.\n\n"
    )
    results.write_text(head + markdown(data, images, prefix="charts/") + "\n" + analysis)

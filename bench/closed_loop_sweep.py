"""Which part of the closed loop its violations come from (issue 31): sweeps and counterfactuals on one trace.

    .venv/bin/python -P bench/closed_loop_sweep.py [--trace mmpp] [--duration 900] [--only default,solve-0,...]

A+S+T on one trace (bench/closed_loop.py's protocol: plans on 16 GPUs with the queueing wait, slice use over the
smallest pool for the trace's 1-minute peak, solves cached in .cache/closed_loop), once per variant:

- the operator's defaults (`default`);
- the loop's known causes switched off one at a time (tessera/closed_loop.py's LoopSettings): `solve-0` (a
  re-plan's plan serves from the reading that asked for it: what instant solves, issue 24, would give),
  `changes-0` (layout changes take no time: no capacity lost while nodes partition), `warm-start` (the first plan
  is for the trace's first minute, not the specs' rate), all three at once (`mechanics-0`), and with margin 0.3;
- the planner's margin (headroom 0.2, 0.3 against the default 0.1) and its latency model's batch spread (1.3, the
  simulation's, against the plans' 1);
- the demand windows: the stabilization window (150 s, 600 s against 300 s) and the rate window the frontend's
  counter is read over (30 s, 120 s against the template's 1 minute);
- the step bound of a scale-down (0.1, 0.5 against 0.25).

Each run's late requests are also split by when they arrived (15 s bins, a bin to the phase its middle falls in):
before the first re-plan's plan serves (cold start), while a later re-plan is charged its solve (solve pending),
while nodes partition or re-partition (nodes changing), and the rest. Writes bench/results/closed_loop_sweep.{json,md}
(a rerun with --only replaces those variants' rows and keeps the others).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts run with -P: the sibling benchmark's helpers
from closed_loop import CACHE, GPU, RESULTS, SIZING_GPUS, options, pool_for_peak
from tessera.closed_loop import ClosedLoop, LoopResult, LoopSettings
from tessera.operator.settings import OperatorSettings
from tessera.planner.features import Features
from tessera.planner.simulation.workloads import built_in
from tessera.planner.spec_file import load_systems
from tessera.shipped import default_example_systems

BIN_S = 15.0
DEFAULTS = LoopSettings(bin_s=BIN_S)


def _windows(**changes: float) -> dict:
    return dict(windows=replace(DEFAULTS.windows, **changes))


VARIANTS: dict[str, tuple[str, dict, dict]] = {
    "default": ("the operator's defaults", {}, {}),
    "solve-0": ("re-plans charged 0 s of solve", dict(charge_solve_time=False), {}),
    "changes-0": ("node changes take 0 s", dict(change_s=0.0), {}),
    "warm-start": ("first plan for the trace's first minute", dict(start_from_trace=True), {}),
    "mechanics-0": ("all three above", dict(charge_solve_time=False, change_s=0.0, start_from_trace=True), {}),
    "mechanics-0-headroom-0.3": ("all three above, margin 0.3",
                                 dict(charge_solve_time=False, change_s=0.0, start_from_trace=True), dict(headroom=0.3)),
    "headroom-0.2": ("planner's margin 0.2", {}, dict(headroom=0.2)),
    "headroom-0.3": ("planner's margin 0.3", {}, dict(headroom=0.3)),
    "spread-1.3": ("plans assume the simulation's batch spread 1.3", {}, dict(latency_spread=1.3)),
    "stabilization-150": ("stabilization window 150 s", _windows(stabilization_s=150.0), {}),
    "stabilization-600": ("stabilization window 600 s", _windows(stabilization_s=600.0), {}),
    "rate-window-30": ("rate read over 30 s", dict(rate_window_s=30.0), {}),
    "rate-window-120": ("rate read over 120 s", dict(rate_window_s=120.0), {}),
    "step-0.1": ("scale-down step 0.1", _windows(step=0.1), {}),
    "step-0.5": ("scale-down step 0.5", _windows(step=0.5), {}),
}
PHASES = ("cold start", "solve pending", "nodes changing", "rest")


def phase_windows(result: LoopResult, change_s: float) -> dict[str, list[tuple[float, float]]]:
    """The intervals of each phase but the rest, from the run's events."""
    replans = sorted((e for e in result.events if e.what == "re-plan"), key=lambda e: e.at_s)
    first_serves = replans[0].at_s + replans[0].charged_s if replans else 0.0
    return {"cold start": [(0.0, first_serves)],
            "solve pending": [(e.at_s, e.at_s + e.charged_s) for e in replans[1:]],
            "nodes changing": [(e.at_s, e.at_s + change_s) for e in result.events
                               if e.what in ("partition", "re-partition")]}


def late_by_phase(result: LoopResult, change_s: float) -> dict[str, dict[str, float]]:
    """Late requests (% of all) and seconds of each phase; a time bin counts to the first phase its middle is in."""
    middles = (np.arange(len(result.allocated_slices)) + 0.5) * result.bin_s
    width = np.minimum(result.bin_s, result.duration_s - middles + result.bin_s / 2)
    arrivals = np.array(result.demand_rps) * width
    late = (np.array(result.violation_pct) / 100 * arrivals).sum(axis=0)
    unassigned = np.ones(middles.size, dtype=bool)
    split = {}
    for phase, intervals in phase_windows(result, change_s).items():
        inside = unassigned & np.any([(middles >= a) & (middles < b) for a, b in intervals] or [middles < 0], axis=0)
        unassigned &= ~inside
        split[phase] = inside
    split["rest"] = unassigned
    total = max(arrivals.sum(), 1.0)
    return {phase: dict(late_pct=100 * float(late[mask].sum()) / total, seconds=float(width[mask].sum()))
            for phase, mask in split.items()}


def run_variant(name: str, systems, trace, pool_gpus: int, time_limit_s: float) -> dict:
    description, changes, planner_changes = VARIANTS[name]
    settings = replace(DEFAULTS, **changes)
    planner = options(time_limit_s).model_copy(update=planner_changes)
    load_before = os.getloadavg()
    started = time.perf_counter()
    result = ClosedLoop(systems, GPU, SIZING_GPUS, trace, planner, Features(), settings, cache_dir=CACHE).run()
    wall = time.perf_counter() - started
    totals = result.totals()
    pool_slices = pool_gpus * result.pool_slices // result.pool_gpus
    change_s = planner.reconfigure_s if settings.change_s is None else settings.change_s
    return dict(
        variant=name, description=description, trace=result.trace, headroom=planner.headroom,
        latency_spread=planner.latency_spread,
        settings=dict(charge_solve_time=settings.charge_solve_time, change_s=change_s,
                      start_from_trace=settings.start_from_trace, rate_window_s=settings.rate_window_s,
                      stabilization_s=settings.windows.stabilization_s, repartition_s=settings.windows.repartition_s,
                      step=settings.windows.step, max_changing_nodes=settings.max_changing_nodes),
        violation_pct=totals.violation_pct, drop_pct=totals.drop_pct,
        late_with_dropping_pct=100 * totals.late_with_dropping / max(totals.requests, 1),
        systems={s.system.split("/")[-1]: round(s.violation_pct, 3) for s in result.systems},
        slice_use_pct=100 * result.allocated_slice_s / (pool_slices * result.duration_s),
        busy_of_allocated_pct=result.busy_of_allocated_pct, replans=result.replans, solves=result.solves,
        cache_hits=result.cache_hits, free_partitions=result.free_partitions, repartitions=result.repartitions,
        lost_slice_s=result.lost_slice_s, charged_solve_s=result.charged_solve_s,
        answers=dict(Counter(e.answer for e in result.events if e.what == "re-plan")),
        late_by_phase=late_by_phase(result, change_s), solver_wall_s=result.solver_wall_s, wall_s=wall,
        load_average=dict(before=load_before, after=os.getloadavg()),
        events=[e.model_dump() for e in result.events])


def table(rows: list[dict]) -> list[str]:
    lines = ["| variant | what changes | late % | dropped % | late with dropping % | slice use % | re-plans (solved, "
             "cached) | re-plan answers | charged solve s | free nodes partitioned (+ re-partitions) | late % by phase: "
             + " / ".join(PHASES) + " | per system late % |", "|" + "---|" * 12]
    for r in rows:
        phases = " / ".join(f"{r['late_by_phase'][p]['late_pct']:.2f} ({r['late_by_phase'][p]['seconds']:.0f} s)"
                            for p in PHASES)
        systems = ", ".join(f"{n} {v:.2f}" for n, v in r["systems"].items())
        answers = ", ".join(f"{n} {a}" for a, n in sorted(r["answers"].items()))
        lines.append(f"| {r['variant']} | {r['description']} | {r['violation_pct']:.2f} | {r['drop_pct']:.2f} "
                     f"| {r['late_with_dropping_pct']:.2f} | {r['slice_use_pct']:.1f} | {r['replans']} ({r['solves']}, "
                     f"{r['cache_hits']}) | {answers} | {r['charged_solve_s']:.0f} | {r['free_partitions']} (+{r['repartitions']}) "
                     f"| {phases} | {systems} |")
    return lines


def main_table_pool(trace: str, duration_s: float) -> tuple[int, float] | None:
    """The smallest pool closed_loop.json sized for the trace: the sweep's slice use is over the main table's pool
    (sizing again under other load may answer otherwise: a time-limited solve)."""
    path = RESULTS / "closed_loop.json"
    main_table = json.loads(path.read_text()) if path.exists() else {}
    pool = main_table.get("pools", {}).get(trace)
    if pool is None or main_table["duration_s"] != duration_s:
        return None
    return pool["gpus"], pool["peak_of_minute"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="mmpp")
    parser.add_argument("--duration", type=float, default=900.0)
    parser.add_argument("--time-limit", type=float, default=OperatorSettings().planner.time_limit_s)
    parser.add_argument("--only", default=",".join(VARIANTS), help="Comma-separated variants to run.")
    parser.add_argument("--name", default="closed_loop_sweep")
    args = parser.parse_args()
    chosen = args.only.split(",")
    unknown = set(chosen) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"--only: unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    systems = [s for path in default_example_systems() for s in load_systems(path)]
    trace = built_in(args.trace, args.duration)
    pool_gpus, peak = main_table_pool(args.trace, args.duration) or pool_for_peak(
        systems, trace, options(args.time_limit), DEFAULTS.rate_window_s)
    path = RESULTS / f"{args.name}.json"
    earlier = json.loads(path.read_text()) if path.exists() else {}
    if earlier and (earlier["trace"], earlier["duration_s"]) != (args.trace, args.duration):
        raise SystemExit(f"{path.name} holds another trace or duration; use --name")
    rows = {r["variant"]: r for r in earlier.get("runs", [])}
    for name in chosen:
        rows[name] = run_variant(name, systems, trace, pool_gpus, args.time_limit)
        r = rows[name]
        print(f"{name}: {r['violation_pct']:.2f}% late, slice use {r['slice_use_pct']:.1f}%, {r['replans']} re-plans "
              f"({r['solves']} solved), wall {r['wall_s']:.0f} s, load {r['load_average']}", flush=True)
        ordered = [rows[v] for v in VARIANTS if v in rows]
        path.write_text(json.dumps(dict(trace=args.trace, duration_s=args.duration, time_limit_s=args.time_limit,
                                        pool_gpus=pool_gpus, peak_of_minute=peak, bin_s=BIN_S, runs=ordered),
                                   indent=1))
        lines = [f"Closed loop of the three examples, A+S+T, {args.trace}, {args.duration:g} simulated s; plans on "
                 f"{SIZING_GPUS} x {GPU} with the queueing wait (per-request routing), solver limit "
                 f"{args.time_limit:g} s; slice use over the smallest pool for the 1-minute peak ({pool_gpus} GPUs, "
                 f"peak {peak:.2f}x). Late % = source requests later than the SLO without dropping; the phases split "
                 f"them by arrival ({BIN_S:g} s bins; seconds of each phase in brackets); they sum to late %.", "",
                 *table(ordered)]
        (RESULTS / f"{args.name}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

"""Static plans under bursty demand: violations, drops and slice use per feature set.

    .venv/bin/python -P bench/simulation_static_plans.py [--duration 600] [--gpus 16] [--time-limit 60] [--queueing]

The three examples together on --gpus x H100-80GB (estimated profiles), planned
for each trace's mean demand (the specs' demand_rps) and for its p95 rate, with
A+S+T, A+S, A+T and S+T; each plan simulated under the built-in MMPP and
diurnal traces (workloads.py, parameters fixed before any result), with
per-connection balancing (16 connections per task), Triton-style batching,
batch latency spread p99/p50 1.3, without and with early dropping; then the
A+S+T plan for the mean under MMPP with the spread swept 1.1-2.0. Writes
bench/results/simulation_static_plans.{json,md}, or with --queueing (the
planner's p99 queueing wait) simulation_static_plans_queueing.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from tessera.shipped import default_example_systems
from tessera.planner.features import Features
from tessera.planner.model import Pool
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.simulation.experiments import simulate_plan, static_plan_study
from tessera.planner.simulation.policies import Policies
from tessera.planner.simulation.workloads import built_in
from tessera.planner.solve import PlannerOptions, plan
from tessera.planner.spec_file import load_systems

RESULTS = Path(__file__).resolve().parent / "results"
FEATURES = ("A+S+T", "A+S", "A+T", "S+T")
TRACES = ("mmpp", "diurnal")
SPREADS = (1.1, 1.3, 1.5, 2.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600.0)
    parser.add_argument("--gpus", type=int, default=16)
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--queueing", action="store_true", help="Plan with the p99 queueing wait.")
    args = parser.parse_args()
    name = "simulation_static_plans" + ("_queueing" if args.queueing else "")
    systems = [s for path in default_example_systems() for s in load_systems(path)]
    pool = Pool(gpu="H100-80GB", gpus=args.gpus)
    store = build_profile_store(systems, pool.gpu)
    options = PlannerOptions(time_limit_s=args.time_limit, queueing=args.queueing)
    rows = []
    for trace_name in TRACES:
        trace = built_in(trace_name, args.duration)
        started = time.perf_counter()
        outcomes = static_plan_study(systems, pool, store, trace, [Features.parse(f) for f in FEATURES],
                                     options=options, progress=lambda _: print(".", end="", flush=True))
        print(f" {trace_name}: {time.perf_counter() - started:.0f} s")
        found = {(o.features, o.planned_for) for o in outcomes}
        rows += [dict(trace=trace_name, features=f, planned_for=basis, missing=True)
                 for f in FEATURES for basis in ("mean", "p95") if (f, basis) not in found]
        for outcome in outcomes:
            plain, dropping = outcome.without_dropping, outcome.with_dropping
            rows.append(dict(trace=trace_name, trace_p95=trace.p95(), features=outcome.features,
                             planned_for=outcome.planned_for, gpus_used=outcome.gpus_used,
                             unserved=outcome.unserved, served_pct=outcome.served_pct,
                             violation_pct=plain.violation_pct,
                             drop_pct=dropping.drop_pct, late_with_dropping_pct=dropping.violation_pct,
                             slice_use_pct=plain.slice_use_pct, busy_use_pct=plain.busy_use_pct,
                             allocated_slices=plain.allocated_slices,
                             source_requests=plain.source_requests,
                             systems={s.system: dict(violation_pct=s.violation_pct, p99_ms=s.p99_ms)
                                      for s in plain.systems}))
    sweep = _spread_sweep(systems, pool, store, built_in("mmpp", args.duration), options)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps({"plans": rows, "spread_sweep": sweep}, indent=1))
    lines = [f"Static plans of traffic-analysis, social-media and ar-assistant together on {args.gpus} x H100-80GB "
             f"({'with' if args.queueing else 'without'} the planner's queueing wait), "
             f"{args.duration:.0f} s of each trace; violation % = source requests later than the SLO without "
             "dropping; drop % = dropped with early dropping (late % with dropping beside it); slice use = "
             "allocated compute slices / pool slices (constant for a static plan); busy = slice-weighted "
             "process busy time / allocated; planned served % = the share of the demand it was planned for that "
             "the plan serves (below 100 where the pool is too small).", "",
             "| trace | features | planned for | GPUs | slices | planned served % | violation % | drop % "
             "| late % with dropping | slice use % | busy % | not planned |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [_row(r) for r in sorted(rows, key=lambda r: (TRACES.index(r["trace"]), FEATURES.index(r["features"]),
                                                           r["planned_for"]))]
    lines += ["", "Batch latency spread swept (A+S+T planned for the mean, MMPP):", "",
              "| p99/p50 | violation % | drop % | late % with dropping |", "|---|---|---|---|"]
    lines += [f"| {r['p99_over_p50']} | {r['violation_pct']:.2f} | {r['drop_pct']:.2f} | "
              f"{r['late_with_dropping_pct']:.2f} |" for r in sweep]
    (RESULTS / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def _row(r: dict) -> str:
    if r.get("missing"):
        return (f"| {r['trace']} | {r['features']} | {r['planned_for']} | no plan within the time limit "
                "| | | | | | | | |")
    return (f"| {r['trace']} | {r['features']} | {r['planned_for']} | {r['gpus_used']} | {r['allocated_slices']} | "
            f"{r['served_pct']:.1f} | {r['violation_pct']:.2f} | {r['drop_pct']:.2f} | {r['late_with_dropping_pct']:.2f} | "
            f"{r['slice_use_pct']:.1f} | {r['busy_use_pct']:.1f} | {', '.join(r['unserved']) or '-'} |")


def _spread_sweep(systems, pool, store, trace, options) -> list[dict]:
    plan_ = plan(systems, pool, store, Features(), options)
    rows = []
    for ratio in SPREADS:
        outcome = simulate_plan(plan_, systems, store, trace, Policies(p99_over_p50=ratio))
        rows.append(dict(p99_over_p50=ratio, violation_pct=outcome.without_dropping.violation_pct,
                         drop_pct=outcome.with_dropping.drop_pct,
                         late_with_dropping_pct=outcome.with_dropping.violation_pct))
    return rows


if __name__ == "__main__":
    main()

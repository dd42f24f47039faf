"""Could the queueing wait be the default? Queueing off and on side by side, planned and simulated.

The three examples together (A+S+T, estimated profiles) at their demand (1x)
and at 42x it, both on 120 H100-80GB (the case issue 24 names), planned with
the queueing wait off (today's default) and on under each routing
(`one-replica`: whole bulks; `per-request`: split in proportion to planned
load, tessera's frontend; `per-connection`: a plain Service over 16
connections), one after another in one process. Per plan: GPUs and slices
(with their proven bounds), whether all demand is served, model build, CPU
and wall seconds, the stages the time limit stopped; then the plan simulated
under steady Poisson demand (the model's own assumption, batch latency
spread 1.3, no dropping) with both balancings (`random`: in proportion to
planned load; `per-connection`: 16 connections per task pinned at random),
and the worst simulated-over-predicted p99 of its paths with the late share.
The last columns compare each plan with the queueing-off plan of its case:
the 1.2x line issue 24 draws for making the wait the default.

Run: nice -n 10 .venv/bin/python -P bench/queueing_default.py [--time-limit 60] [--duration 60]
    [--cases 1x 42x] [--models off one-replica per-request per-connection] [--name queueing_default]
Writes bench/results/<name>.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

from tessera.planner.latency import Routing
from tessera.planner.model import Pool
from tessera.planner.plan import Plan
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.simulation import engine, metrics
from tessera.planner.simulation.entities import build_deployment
from tessera.planner.simulation.experiments import scaled
from tessera.planner.simulation.policies import Balancing, Policies
from tessera.planner.simulation.workloads import constant
from tessera.planner.solve import NoPlanError, PlannerOptions, plan
from tessera.planner.spec_file import load_systems
from tessera.shipped import default_example_systems

RESULTS = Path(__file__).resolve().parent / "results"
GPU, GPUS = "H100-80GB", 120
CASES = {"1x": 1.0, "42x": 42.0}
MODELS = {
    "off": PlannerOptions(),
    "one-replica": PlannerOptions(queueing=True, routing=Routing.ONE_REPLICA),
    "per-request": PlannerOptions(queueing=True, routing=Routing.PER_REQUEST),
    "per-connection": PlannerOptions(queueing=True, routing=Routing.PER_CONNECTION),
}
BALANCINGS = (Balancing.RANDOM, Balancing.PER_CONNECTION)
RATIO_LINE = 1.2


def planned(case: str, model: str, time_limit_s: float) -> tuple[dict, Plan | None, list]:
    systems = scaled([s for path in default_example_systems() for s in load_systems(path)], CASES[case])
    store = build_profile_store(systems, GPU)
    options = MODELS[model].model_copy(update={"time_limit_s": time_limit_s})
    row: dict = {"case": case, "model": model, "load_average": os.getloadavg()[0]}
    started, cpu = time.perf_counter(), time.process_time()
    try:
        result = plan(systems, Pool(gpu=GPU, gpus=GPUS), store, options=options)
    except NoPlanError as error:
        return {**row, "no_plan": str(error), "wall_s": time.perf_counter() - started,
                "cpu_s": time.process_time() - cpu}, None, systems
    cost = result.solver.cost
    return {**row, "wall_s": time.perf_counter() - started, "cpu_s": time.process_time() - cpu,
            "build_s": result.solver.build_s, "gpus_used": result.gpus_used, "slices_used": result.slices_used,
            "gpus_lower_bound": cost.gpus_lower_bound if cost else None,
            "slices_lower_bound": cost.slices_lower_bound if cost else None,
            "fully_served": result.fully_served, "time_limited": result.solver.time_limited,
            "variables": result.solver.variables, "constraints": result.solver.constraints}, result, systems


def simulated(result: Plan, systems: list, duration_s: float) -> dict:
    deployment = build_deployment(result, systems, build_profile_store(systems, GPU))
    found = {}
    for balancing in BALANCINGS:
        report = metrics.report(engine.run(deployment, constant(duration_s), Policies(balancing=balancing)))
        ratio, path = max((p.p99_ms / p.planned_ms, ">".join(p.tasks)) for p in report.paths)
        found[balancing.value] = {"worst_ratio": ratio, "worst_path": path, "late_pct": report.violation_pct}
    return found


def compared(rows: list[dict]) -> None:
    """Each plan's slices and CPU seconds over those of its case's queueing-off plan."""
    off = {r["case"]: r for r in rows if r["model"] == "off" and "no_plan" not in r}
    for r in rows:
        base = off.get(r["case"])
        if base is None or "no_plan" in r:
            continue
        r["slices_x_off"] = r["slices_used"] / max(base["slices_used"], 1)
        r["cpu_x_off"] = r["cpu_s"] / max(base["cpu_s"], 1e-9)
        r["within_line"] = r["slices_x_off"] <= RATIO_LINE and r["cpu_x_off"] <= RATIO_LINE and r["fully_served"]


def table(rows: list[dict]) -> str:
    lines = ["| case | model | GPUs (bound) | slices (bound) | served | build s | CPU s | wall s | time-limited | "
             "worst p99 ratio, late % (random) | worst p99 ratio, late % (per-connection) | slices x off | "
             "CPU x off |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "no_plan" in r:
            lines.append(f"| {r['case']} | {r['model']} | no plan | | | | {r['cpu_s']:.1f} | {r['wall_s']:.1f} "
                         "| | | | | |")
            continue
        sims = [f"{s['worst_ratio']:.2f} ({s['worst_path']}), {s['late_pct']:.2f}"
                for s in (r["simulated"][b.value] for b in BALANCINGS)]
        lines.append(
            f"| {r['case']} | {r['model']} | {r['gpus_used']} ({r['gpus_lower_bound']}) | {r['slices_used']} "
            f"({r['slices_lower_bound']}) | {'all' if r['fully_served'] else 'part'} | {r['build_s']:.1f} | "
            f"{r['cpu_s']:.1f} | {r['wall_s']:.1f} | {', '.join(r['time_limited']) or '-'} | {sims[0]} | "
            f"{sims[1]} | {r.get('slices_x_off', 0):.2f} | {r.get('cpu_x_off', 0):.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=PlannerOptions().time_limit_s)
    parser.add_argument("--duration", type=float, default=60.0, help="simulated seconds per plan and balancing")
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--name", default="queueing_default")
    args = parser.parse_args()
    rows = []
    for case in args.cases:
        for model in args.models:
            row, result, systems = planned(case, model, args.time_limit)
            if result is not None:
                row["simulated"] = simulated(result, systems, args.duration)
            rows.append(row)
            print(json.dumps(row), flush=True)
    compared(rows)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(rows, indent=1))
    loads = ", ".join(f"{r['load_average']:.1f}" for r in rows)
    text = (f"The three examples together (A+S+T) on {GPUS} x {GPU}, planner time limit {args.time_limit:g} s, "
            f"one plan after another in one process (Python {platform.python_version()}, 2 shared cores, "
            f"1-minute load average per row: {loads}); CPU s is the process's CPU time. Each plan simulated "
            f"{args.duration:g} s under steady Poisson demand, batch latency spread 1.3, no dropping: the worst "
            "path's simulated over predicted p99, and the share of source requests later than the SLO.\n\n"
            + table(rows) + "\n")
    (RESULTS / f"{args.name}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

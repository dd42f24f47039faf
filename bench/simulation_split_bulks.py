"""Do plans keep the p99 they predict, per queueing model and routing? The examples together, simulated.

    nice -n 10 .venv/bin/python -P bench/simulation_split_bulks.py [--duration 120] [--cases 1x 42x]
        [--time-limit 60] [--name simulation_split_bulks] [--models default ...]

The three examples together (A+S+T, estimated profiles) at their demand on 16
x H100-80GB and at 42x it on 120, planned with the default model (no queueing
wait), `--queueing` (whole bulks on any replica) and `--queueing --routing
per-request` (bulks split in proportion to planned load), one after another
in one run; each plan simulated under steady Poisson demand (the model's own
assumption) with per-request balancing (`random`: in proportion to planned
load, what per-request routing assumes) and per-connection balancing (16
connections per task, a plain Service), batch latency spread 1.3, no
dropping. Per plan and balancing: GPUs and slices, late share, and the paths
above 1.1x their predicted p99 with the largest ratio. Writes
bench/results/simulation_split_bulks.{json,md}.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tessera.planner.latency import Routing
from tessera.planner.model import Pool
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
CASES = {"1x": (1.0, 16), "42x": (42.0, 120)}
MODELS = {"default": PlannerOptions(),
          "--queueing": PlannerOptions(queueing=True),
          "--queueing --routing per-request": PlannerOptions(queueing=True, routing=Routing.PER_REQUEST)}
BALANCINGS = (Balancing.RANDOM, Balancing.PER_CONNECTION)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=120.0)
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    parser.add_argument("--time-limit", type=float, default=PlannerOptions().time_limit_s)
    parser.add_argument("--name", default="simulation_split_bulks")
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    args = parser.parse_args()
    base = [s for path in default_example_systems() for s in load_systems(path)]
    rows = []
    for case in args.cases:
        factor, gpus = CASES[case]
        systems = scaled(base, factor)
        pool = Pool(gpu="H100-80GB", gpus=gpus)
        store = build_profile_store(systems, pool.gpu)
        for model in args.models:
            options = MODELS[model]
            try:
                planned = plan(systems, pool, store, options=options.model_copy(update={"time_limit_s": args.time_limit}))
            except NoPlanError as error:
                rows.append(dict(case=case, model=model, no_plan=str(error)))
                continue
            deployment = build_deployment(planned, systems, store)
            for balancing in BALANCINGS:
                report = metrics.report(engine.run(deployment, constant(args.duration), Policies(balancing=balancing)))
                ratios = sorted(((p.p99_ms / p.planned_ms, ">".join(p.tasks)) for p in report.paths), reverse=True)
                rows.append(dict(
                    case=case, model=model, balancing=report.balancing, gpus_used=planned.gpus_used,
                    slices_used=planned.slices_used, fully_served=planned.fully_served,
                    time_limited=planned.solver.time_limited, late_pct=report.violation_pct,
                    paths=len(ratios), above_1_1=sum(1 for r, _ in ratios if r > 1.1),
                    largest_ratio=ratios[0][0], largest_path=ratios[0][1],
                    systems={s.system: dict(late_pct=s.violation_pct, p99_ms=s.p99_ms, slo_ms=s.slo_ms)
                             for s in report.systems}))
                print(json.dumps(rows[-1]), flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(rows, indent=1))
    lines = [f"The three examples together (A+S+T), planner time limit {args.time_limit:g} s, steady Poisson "
             f"demand, {args.duration:.0f} s per run, batch "
             "latency spread 1.3, no dropping; `random` balancing routes each request in proportion to planned "
             "load, `per-connection` pins 16 connections per task at random. Late % = source requests later "
             "than the SLO.", "",
             "| demand, pool | model | balancing | GPUs | slices | served | late % | paths above 1.1x predicted "
             "p99 | largest ratio (path) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        where = f"{r['case']}, {CASES[r['case']][1]} GPUs"
        if "no_plan" in r:
            lines.append(f"| {where} | {r['model']} | - | no plan | | | | | |")
            continue
        lines.append(f"| {where} | {r['model']} | {r['balancing']} | {r['gpus_used']} | {r['slices_used']} | "
                     f"{'all' if r['fully_served'] else 'part'} | {r['late_pct']:.2f} | {r['above_1_1']} of "
                     f"{r['paths']} | {r['largest_ratio']:.2f} ({r['largest_path']}) |")
    (RESULTS / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""Is the queueing wait's price at 42x the truth or the model's pessimism? Plans of several sizes, simulated.

The three examples together (A+S+T, estimated profiles) at 42x their demand on
120 H100-80GB, the case where the queueing wait (split per request) plans
about 60 GPUs (at least 57 proven) against 16 without it. Plans of sizes in
between come from the default model (no wait) with more `--headroom`, which
loads every segment less; the queueing plan comes last. Each plan is
simulated under steady Poisson demand with requests routed in proportion to
planned load (`random`: what tessera's frontend does, and what the
per-request bulk split assumes), at batch latency spreads 1.0 (the planner's
default reading of an estimate) and 1.3 (the simulator's default), no
dropping. Per plan: GPUs, slices, CPU s; per run: the late share, the worst
path's simulated p99 over the SLO and over its prediction; and for the
stage that prices the wait (the AR assistant's captioning: two 81-86 ms
batches in its budget) the planned load per replica over throughput, the
share of a parent bulk one replica sees, and its simulated and predicted
p99 against its budget.

With `--balancing random per-connection` each plan is simulated under both
balancings: per connection, as a plain Service routes (16 pinned
connections per client, the simulator's default), beside per request.

Run: nice -n 10 .venv/bin/python -P bench/queueing_truth.py [--time-limit 120] [--duration 60]
    [--headrooms 0.1 0.5 1 2] [--no-queueing-plan] [--balancing random] [--name queueing_truth]
Writes bench/results/<name>.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

from tessera.planner.latency import Routing, bulk_share
from tessera.planner.model import Pool
from tessera.planner.plan import Plan, TaskPlan
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
GPU, GPUS, DEMAND = "H100-80GB", 120, 42.0
SPREADS = (1.0, 1.3)
WATCHED = ("ar-assistant", "image-captioning")


def watched_stage(result: Plan) -> dict:
    """The captioning stage's load per replica over throughput and the bulk share one replica sees."""
    task: TaskPlan = next(t for t in result.tasks if (t.system, t.task) == WATCHED)
    configs = []
    for c in task.configs:
        per_replica = c.load_rps / max(c.replicas, 1)
        share = per_replica / task.share_base_rps if task.share_base_rps > 0 else 1.0
        configs.append({"segment": f"{c.segment.mig_profile} x{c.segment.mps}", "batch": c.batch, "replicas": c.replicas,
                        "batch_latency_ms": c.batch_latency_ms, "utilisation": per_replica / c.segment_throughput_rps,
                        "bulk_share": bulk_share(share, Routing.PER_REQUEST) if task.share_base_rps > 0 else 1.0,
                        "stage_latency_ms": c.stage_latency_ms})
    return {"variant": task.variant, "budget_ms": task.budget_ms, "dispersion": task.arrival_dispersion,
            "share_base_rps": task.share_base_rps, "configs": configs}


def planned(systems: list, options: PlannerOptions) -> tuple[dict, Plan | None]:
    store = build_profile_store(systems, GPU)
    row: dict = {"queueing": options.queueing, "headroom": options.headroom, "load_average": os.getloadavg()[0]}
    started, cpu = time.perf_counter(), time.process_time()
    try:
        result = plan(systems, Pool(gpu=GPU, gpus=GPUS), store, options=options)
    except NoPlanError as error:
        return {**row, "no_plan": str(error), "cpu_s": time.process_time() - cpu}, None
    cost = result.solver.cost
    return {**row, "wall_s": time.perf_counter() - started, "cpu_s": time.process_time() - cpu,
            "gpus_used": result.gpus_used, "slices_used": result.slices_used,
            "gpus_lower_bound": cost.gpus_lower_bound if cost else None, "fully_served": result.fully_served,
            "time_limited": result.solver.time_limited, "watched": watched_stage(result)}, result


def simulated(result: Plan, systems: list, duration_s: float, balancings: list[Balancing]) -> dict:
    """Per run (the spread, or "balancing spread" with more than one balancing): what the simulation found."""
    deployment = build_deployment(result, systems, build_profile_store(systems, GPU))
    slo = {s.name: s.slo.latency_ms for s in systems}
    found = {}
    for balancing, spread in ((b, s) for b in balancings for s in SPREADS):
        report = metrics.report(engine.run(deployment, constant(duration_s),
                                           Policies(balancing=balancing, p99_over_p50=spread)))
        over_slo = max((p.p99_ms / slo[p.system], ">".join(p.tasks)) for p in report.paths)
        over_planned = max((p.p99_ms / p.planned_ms, ">".join(p.tasks)) for p in report.paths)
        stage = next(s for s in report.stages if (s.system, s.task) == WATCHED)
        found[str(spread) if len(balancings) == 1 else f"{balancing.value} {spread}"] = {"late_pct": report.violation_pct,
                              "late_pct_by_system": {s.system: s.violation_pct for s in report.systems},
                              "worst_over_slo": over_slo, "worst_over_planned": over_planned,
                              "watched_p99_ms": stage.p99_ms, "watched_p50_ms": stage.p50_ms,
                              "watched_planned_ms": stage.planned_ms}
    return found


def table(rows: list[dict]) -> str:
    lines = ["| model | GPUs (bound) | slices | served | CPU s | captioning: replicas x (batch, ms, load/throughput, "
             "bulk share) | budget ms | spread | late % (ar-assistant) | worst path p99 / SLO | worst p99 / predicted "
             "| captioning p99 ms (predicted) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        name = ("queueing per-request" if r["queueing"] else "no wait") + f", headroom {r['headroom']:g}"
        if "no_plan" in r:
            lines.append(f"| {name} | no plan | | | {r['cpu_s']:.1f} | | | | | | | |")
            continue
        w = r["watched"]
        configs = "; ".join(f"{c['replicas']} x ({c['batch']}, {c['batch_latency_ms']:.0f}, {c['utilisation']:.2f}, "
                            f"{c['bulk_share']:.3f})" for c in w["configs"])
        for spread, s in r["simulated"].items():
            lines.append(
                f"| {name} | {r['gpus_used']} ({r['gpus_lower_bound']}) | {r['slices_used']} | "
                f"{'all' if r['fully_served'] else 'part'} | {r['cpu_s']:.1f} | {configs} | {w['budget_ms']:.0f} | "
                f"{spread} | {s['late_pct']:.2f} ({s['late_pct_by_system']['ar-assistant']:.2f}) | "
                f"{s['worst_over_slo'][0]:.2f} ({s['worst_over_slo'][1]}) | {s['worst_over_planned'][0]:.2f} | "
                f"{s['watched_p99_ms']:.0f} ({s['watched_planned_ms']:.0f}) |")
    return "\n".join(lines)


BALANCING_WORDS = {Balancing.RANDOM: "per request in proportion to planned load (the frontend)",
                   Balancing.PER_CONNECTION: "per connection (a plain Service, 16 pinned connections per client)"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=120.0)
    parser.add_argument("--duration", type=float, default=60.0, help="simulated seconds per plan and spread")
    parser.add_argument("--headrooms", nargs="*", type=float, default=[0.1, 0.5, 1.0, 2.0])
    parser.add_argument("--no-queueing-plan", action="store_true", help="only the plans without the wait")
    parser.add_argument("--balancing", nargs="+", type=Balancing, default=[Balancing.RANDOM],
                        help="how the simulation routes requests to replicas (random: per request)")
    parser.add_argument("--name", default="queueing_truth")
    args = parser.parse_args()
    systems = scaled([s for path in default_example_systems() for s in load_systems(path)], DEMAND)
    models = [PlannerOptions(headroom=h, time_limit_s=args.time_limit) for h in args.headrooms]
    if not args.no_queueing_plan:
        models.append(PlannerOptions(queueing=True, routing=Routing.PER_REQUEST, time_limit_s=args.time_limit))
    rows = []
    for options in models:
        row, result = planned(systems, options)
        if result is not None:
            row["simulated"] = simulated(result, systems, args.duration, args.balancing)
        rows.append(row)
        print(json.dumps(row), flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(rows, indent=1))
    loads = ", ".join(f"{r['load_average']:.1f}" for r in rows)
    text = (f"The three examples together (A+S+T) at {DEMAND:g}x their demand on {GPUS} x {GPU}, planner time "
            f"limit {args.time_limit:g} s, one plan after another in one process (Python "
            f"{platform.python_version()}, 2 shared cores, 1-minute load average per plan: {loads}). Each plan "
            f"simulated {args.duration:g} s under steady Poisson demand, requests routed "
            f"{' and '.join(BALANCING_WORDS[b] for b in args.balancing)}, no dropping, at each batch latency spread "
            "(p99/p50; the spread column names the balancing where there are two).\n\n"
            + table(rows) + "\n")
    (RESULTS / f"{args.name}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

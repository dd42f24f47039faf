"""The queueing wait's models side by side in one run: what each costs and how long it solves.

The three examples together on H100-80GB pools of 4, 15, 120 and 1,000 GPUs
at 80% of the most A+S+T serves there (the planner benchmark's demand, read
from bench/results/planner_scale.json), and at 42x the examples' demand on
120 GPUs (the case issue 24 names), each planned with:

- `default`: no queueing wait (today's default model);
- `one-replica`: `--queueing`, a parent's whole bulk may land on any replica;
- `per-request`: `--queueing --routing per-request`, bulks split in proportion to planned load;
- `per-connection`: `--queueing --routing per-connection` (16 connections), 42x only.

One model after another in one process, on the same loaded machine, so the
ratios are what to read. Per plan: GPUs and slices (proven bounds), served,
the accuracy stage's objective (the tie-break among equally cheap plans), CPU
and wall seconds, stages the time limit stopped, and the tasks holding the
most slices (which task a model's extra cost goes to).

With --baseline REF each plan runs in a fresh process of its own, and the
planner of that git revision (its planner/ folder, exported with git archive)
plans the same case and model right after it: a before/after comparison in
one run on the same loaded machine (rows "<model> @REF").

Run: nice -n 10 .venv/bin/python -P bench/queueing_models.py [--pools 4 15 120 1000] [--no-42x]
    [--models default one-replica per-request per-connection] [--name queueing_models] [--time-limit 60]
    [--baseline main] [--fill 0.8]
(--fill sets the share of the default's most demand that the pool cases plan; 0.8 is the planner benchmark's.)
Writes bench/results/<name>.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tessera.planner

if __name__ == "__main__" and sys.argv[1:2] == ["--one-plan"]:
    # Before any planner module loads: they come from the folder asked for (this one or a baseline's).
    tessera.planner.__path__[:] = [sys.argv[2]]

from tessera.planner.catalog import gpu_product
from tessera.planner.latency import Routing
from tessera.planner.model import Pool
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.solve import NoPlanError, PlannerOptions, plan
from tessera.planner.spec_file import load_systems

sys.path.insert(0, str(Path(__file__).resolve().parent))
from planner_scale import baseline_planner  # after the planner's folder is chosen: it imports the planner too

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["traffic-analysis", "social-media", "ar-assistant"]
GPU = "H100-80GB"
FILL = 0.8
TARGET_CPU_S = {4: 10.0, 15: 10.0, 120: 10.0, 1000: 60.0}
MODELS = {
    "default": PlannerOptions(),
    "one-replica": PlannerOptions(queueing=True),
    "per-request": PlannerOptions(queueing=True, routing=Routing.PER_REQUEST),
    "per-connection": PlannerOptions(queueing=True, routing=Routing.PER_CONNECTION),
}


def systems_at(scale: float):
    systems = [s for name in EXAMPLES for s in load_systems(ROOT / "examples" / f"{name}.yaml")]
    return [s.model_copy(update={"demand_rps": s.demand_rps * scale}) for s in systems]


def run(label: str, gpus: int, scale: float, model: str, time_limit_s: float) -> dict:
    systems = systems_at(scale)
    store = build_profile_store(systems, GPU)
    started, cpu = time.perf_counter(), time.process_time()
    row: dict = {"case": label, "gpus": gpus, "scale": scale, "model": model, "load_average": os.getloadavg()[0]}
    try:
        options = MODELS[model].model_copy(update={"time_limit_s": time_limit_s})
        result = plan(systems, Pool(gpu=GPU, gpus=gpus), store, options=options)
    except NoPlanError as error:
        return {**row, "no_plan": str(error), "wall_s": time.perf_counter() - started,
                "cpu_s": time.process_time() - cpu}
    slices = {p.name: p.compute_slices for p in gpu_product(GPU).profiles}
    per_task = sorted(((sum(c.replicas * slices[c.segment.mig_profile] for c in t.configs), f"{t.system}/{t.task}")
                       for t in result.tasks), reverse=True)
    cost = result.solver.cost
    return {**row, "wall_s": time.perf_counter() - started, "cpu_s": time.process_time() - cpu,
            "gpus_used": result.gpus_used, "slices_used": result.slices_used,
            "gpus_lower_bound": cost.gpus_lower_bound if cost else None,
            "slices_lower_bound": cost.slices_lower_bound if cost else None,
            "fully_served": result.fully_served, "time_limited": result.solver.time_limited,
            "accuracy": result.solver.objective.get("accuracy"),
            "variables": result.solver.variables, "constraints": result.solver.constraints,
            "top_tasks": [f"{name} {count}" for count, name in per_task[:3]]}


def run_in_process(planner_dir: Path, label: str, gpus: int, scale: float, model: str, time_limit_s: float) -> dict:
    """`run` in a fresh process with the planner package found in `planner_dir` (this one or a baseline's)."""
    command = [sys.executable, "-P", str(Path(__file__).resolve()), "--one-plan", str(planner_dir), label, str(gpus),
               repr(scale), model, repr(time_limit_s)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def accuracy(row: dict) -> str:
    """The accuracy stage's objective (the tie-break among equally cheap plans), where the run recorded it."""
    return "" if row.get("accuracy") is None else f"{row['accuracy']:.4f}"


def table(rows: list[dict]) -> str:
    lines = ["| case | model | GPUs (bound) | slices (bound) | served | accuracy | CPU s | wall s | time-limited stages | "
             "CPU target | most slices |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "no_plan" in r:
            lines.append(f"| {r['case']} | {r['model']} | no plan | | | | {r['cpu_s']:.1f} | {r['wall_s']:.1f} | | | |")
            continue
        target = TARGET_CPU_S.get(r["gpus"]) if r["case"].startswith(f"{FILL:.0%}") else None
        met = "-" if target is None else (
            f"{'met' if r['cpu_s'] <= target and not r['time_limited'] else 'missed'} (<= {target:g} s)")
        lines.append(
            f"| {r['case']} | {r['model']} | {r['gpus_used']} ({r['gpus_lower_bound']}) | {r['slices_used']} "
            f"({r['slices_lower_bound']}) | {'all' if r['fully_served'] else 'part'} | {accuracy(r)} | {r['cpu_s']:.1f} | "
            f"{r['wall_s']:.1f} | {', '.join(r['time_limited']) or '-'} | {met} | {'; '.join(r['top_tasks'])} |")
    return "\n".join(lines)


def main() -> None:
    if sys.argv[1:2] == ["--one-plan"]:
        label, gpus, scale, model, limit = sys.argv[3:8]
        print(json.dumps(run(label, int(gpus), float(scale), model, float(limit))))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--pools", type=int, nargs="*", default=[4, 15, 120, 1000])
    parser.add_argument("--no-42x", action="store_true")
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS),
                        help="the models to plan, of those each case runs")
    parser.add_argument("--name", default="queueing_models", help="writes bench/results/<name>.{md,json}")
    parser.add_argument("--time-limit", type=float, default=PlannerOptions().time_limit_s)
    parser.add_argument("--fill", type=float, default=FILL, help="share of the default model's most demand")
    parser.add_argument("--baseline", metavar="REF", help="plan each case and model beside this git revision's planner")
    args = parser.parse_args()
    scales = {r["gpus"]: r["max_scale"]
              for r in json.loads((ROOT / "bench/results/planner_scale.json").read_text())}
    cases = [(f"{args.fill:.0%} of {g} GPUs", g, args.fill * scales[g], ["default", "one-replica", "per-request"])
             for g in args.pools]
    if not args.no_42x:
        cases.append(("42x on 120 GPUs", 120, 42.0, ["default", "one-replica", "per-request", "per-connection"]))
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        baseline = baseline_planner(args.baseline, Path(scratch)) if args.baseline else None
        for label, gpus, scale, models in cases:
            for model in (m for m in models if m in args.models):
                if baseline is None:
                    rows.append(run(label, gpus, scale, model, args.time_limit))
                else:
                    rows.append(run_in_process(Path(tessera.planner.__path__[0]), label, gpus, scale, model,
                                               args.time_limit))
                    print(json.dumps(rows[-1]), flush=True)
                    before = run_in_process(baseline, label, gpus, scale, model, args.time_limit)
                    rows.append({**before, "model": f"{model} @{args.baseline}"})
                print(json.dumps(rows[-1]), flush=True)
    out = ROOT / "bench/results"
    (out / f"{args.name}.json").write_text(json.dumps(rows, indent=2))
    loads = ", ".join(f"{r['load_average']:.1f}" for r in rows)
    (out / f"{args.name}.md").write_text(
        f"The three examples on {GPU} pools, each model planned one after another in one process "
        f"(Python {platform.python_version()}, 2 shared cores, 1-minute load average per row: {loads}). "
        f"CPU s is the process's CPU time; HiGHS's {args.time_limit:g} s time limit counts wall time.\n\n"
        + table(rows) + "\n")


if __name__ == "__main__":
    main()

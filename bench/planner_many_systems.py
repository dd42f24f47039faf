"""Many systems on one pool: the joint solve (before) beside the decomposed one (after), in one run (issue 29 item 7).

5, 10 and 20 systems made from the three example systems (traffic-analysis,
social-media, ar-assistant, in turn), each with its own name, a namespace of
four (`team-0` to `team-3`) and its own demand (the example's times 1 to 5.5
in steps of a half, in a fixed shuffled order), planned on fresh pools of 16
and 100 nodes of 8 H100s (every GPU blank, as the operator's first plan of a
pool sees them), through the planner's contract (`plan_outcome`, what the
operator's solve worker calls).

Before: the planner of a git revision (default `main`, its planner/ folder
exported with git archive, as bench/planner_scale.py --baseline); after: this
tree's (default options: decomposed where the pool allows, joint fallback).
Each plan runs in a fresh process of its own, before and after alternating,
with the same time limit (default 120 s; the joint solve at 20 systems on 100
nodes needs more: the row says when the limit stopped it). Recorded: wall and
CPU seconds, GPUs and slices planned, the served share of the demand, how the
plan was made, and the outcome.

Run: .venv/bin/python -P bench/planner_many_systems.py [--systems 5 10 20] [--nodes 16 100] [--baseline main]
     [--time-limit 120]
Writes bench/results/planner_many_systems.{md,json}.
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

from tessera.planner.contract import plan_outcome
from tessera.planner.nodes import NodePool, NodeState
from tessera.planner.solve import PlannerOptions
from tessera.planner.spec_file import load_systems

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from planner_scale import baseline_planner  # noqa: E402

EXAMPLES = ["traffic-analysis", "social-media", "ar-assistant"]
GPU = "H100-80GB"
GPUS_PER_NODE = 8
NAMESPACES = 4
FACTORS = [1.0, 3.5, 2.0, 5.0, 1.5, 4.0, 2.5, 5.5, 3.0, 4.5]  # demand x the example's, in this order


def many_systems(count: int) -> list:
    examples = [s for name in EXAMPLES for s in load_systems(ROOT / "examples" / f"{name}.yaml")]
    made = []
    for i in range(count):
        example = examples[i % len(examples)]
        made.append(example.model_copy(update={
            "name": f"team-{i % NAMESPACES}/{example.name}-{i}",
            "demand_rps": example.demand_rps * FACTORS[i % len(FACTORS)]}))
    return made


def fresh_pool(nodes: int) -> NodePool:
    return NodePool(gpu=GPU, nodes=[NodeState(name=f"gpu-node-{n}", gpus=[{}] * GPUS_PER_NODE)
                                    for n in range(nodes)])


def one_plan(systems: int, nodes: int, limit: float) -> dict:
    demand = many_systems(systems)
    started, cpu = time.perf_counter(), time.process_time()
    outcome = plan_outcome(demand, fresh_pool(nodes), options=PlannerOptions(time_limit_s=limit))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    row = {"outcome": outcome.kind, "wall_s": wall, "cpu_s": cpu,
           "demand_rps": sum(s.demand_rps for s in demand)}
    plan = getattr(outcome, "plan", None)
    if plan is None:
        return {**row, "reason": getattr(outcome, "reason", "")}
    return {**row, "gpus_used": plan.gpus_used, "slices_used": plan.slices_used,
            "served_rps": sum(s.served_rps for s in plan.systems),
            "method": getattr(plan.solver, "method", "joint"), "fallback": getattr(plan.solver, "fallback", None),
            "time_limited": plan.solver.time_limited}


def plan_in_process(planner_dir: Path, systems: int, nodes: int, limit: float) -> dict:
    command = [sys.executable, "-P", str(Path(__file__).resolve()), "--one-plan", str(planner_dir), str(systems),
               str(nodes), repr(limit)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cells(run: dict) -> str:
    if "gpus_used" not in run:
        return f"{run['outcome']}: no plan | | | {run['wall_s']:.1f} | {run['cpu_s']:.1f}"
    served = run["served_rps"] / run["demand_rps"]
    limited = f" (time limit stopped {', '.join(run['time_limited'])})" if run["time_limited"] else ""
    return (f"{run['method']}{limited} | {run['gpus_used']} / {run['slices_used']} | {100 * served:.1f}% | "
            f"{run['wall_s']:.1f} | {run['cpu_s']:.1f}")


def markdown(rows: list[dict], label: str, limit: float) -> str:
    loads = ", ".join(f"{r['load_average']:.1f}" for r in rows)
    lines = [
        f"Systems made from the three examples (names, namespaces and demands of their own) on fresh pools of "
        f"nodes x {GPUS_PER_NODE} {GPU}, through `plan_outcome`. Before: {label}; after: this tree (default "
        f"options). Time limit {limit:g} s per plan (HiGHS counts wall time). Machine: {os.cpu_count()} cores "
        f"shared with other work (1-minute load average at each row: {loads}), Python "
        f"{platform.python_version()}. CPU s: the plan's process CPU time (what an idle core would take).",
        "",
        "| systems | nodes | run | how | GPUs / slices | served | wall s | CPU s | CPU after/before |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = r["after"]["cpu_s"] / max(r["before"]["cpu_s"], 1e-9)
        lines.append(f"| {r['systems']} | {r['nodes']} | before | {_cells(r['before'])} | |")
        lines.append(f"| {r['systems']} | {r['nodes']} | after | {_cells(r['after'])} | {ratio:.2f} |")
    lines += ["", *(f"- {r['systems']} systems on {r['nodes']} nodes, {run}: {r[run].get('fallback') or r[run]['reason']}"
                    for r in rows for run in ("before", "after") if r[run].get("fallback") or r[run].get("reason"))]
    return "\n".join(lines) + "\n"


def main() -> None:
    if sys.argv[1:2] == ["--one-plan"]:
        print(json.dumps(one_plan(int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", type=int, nargs="+", default=[5, 10, 20])
    parser.add_argument("--nodes", type=int, nargs="+", default=[16, 100])
    parser.add_argument("--baseline", default="main", help="The git revision whose planner plans before.")
    parser.add_argument("--time-limit", type=float, default=120.0, help="Wall-clock limit per plan.")
    args = parser.parse_args()
    revision = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.baseline],
                              capture_output=True, text=True, check=True).stdout.strip()
    label = f"{args.baseline} {revision} (joint solve)"
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        before = baseline_planner(args.baseline, Path(scratch))
        for nodes in args.nodes:
            for systems in args.systems:
                row = {"systems": systems, "nodes": nodes, "load_average": os.getloadavg()[0],
                       "before": plan_in_process(before, systems, nodes, args.time_limit),
                       "after": plan_in_process(ROOT / "planner", systems, nodes, args.time_limit)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "planner_many_systems.json").write_text(json.dumps(rows, indent=2))
    text = markdown(rows, label, args.time_limit)
    (out / "planner_many_systems.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

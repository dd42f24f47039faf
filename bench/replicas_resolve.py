"""Replicas-only re-solve (planner/resize.py) beside a full re-plan, after a demand change.

The three examples together on 120 H100s (15 nodes x 8), planned at 70% of
the most the pool serves (the scale bench/planner_scale.py found). The GPUs
that plan leaves alone keep the layout the plan uses most (as an earlier,
larger plan would have left them), so a scale-up has idle instances to go
to. Then demand changes by each step: the replicas-only re-solve (variants,
configurations, budgets and layouts fixed, the independent checker run)
is timed for every step, a full re-plan (the MILP, with the running plan as
its least-change reference) for one step up, both reporting GPUs, slices,
changed replica counts and re-partitioned GPUs. Target: replicas-only
<= 2 s.

Run: .venv/bin/python -P bench/replicas_resolve.py [--full-step 1.2] [--time-limit 120]
Writes bench/results/replicas_resolve.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tessera.planner.assignment import current_replica_counts, layout_of
from tessera.planner.model import Pool
from tessera.planner.nodes import NodePool, NodeState
from tessera.planner.plan import Plan
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.resize import resize_replicas
from tessera.planner.solve import PlannerOptions, plan
from tessera.planner.spec_file import load_systems

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["traffic-analysis", "social-media", "ar-assistant"]
GPU, NODES, PER_NODE = "H100-80GB", 15, 8
MAX_SCALE_120 = 331.94824556105135  # bench/results/planner_scale.json, 120 GPUs: the most A+S+T serves
FILL = 0.7
STEPS = (0.8, 0.9, 1.1, 1.2, 1.3)
TARGET_S = 2.0


def load(scale: float):
    systems = [s for name in EXAMPLES for s in load_systems(ROOT / "examples" / f"{name}.yaml")]
    return [s.model_copy(update={"demand_rps": s.demand_rps * scale}) for s in systems]


def scaled(systems, factor):
    return [s.model_copy(update={"demand_rps": s.demand_rps * factor}) for s in systems]


def on_nodes(base: Plan) -> tuple[Plan, NodePool]:
    """The base plan's GPUs named (node, device) in pool order; the GPUs it leaves alone keep its commonest layout."""
    named = base.model_copy(update={"gpus": [g.model_copy(update={"node": f"n{g.index // PER_NODE:02d}",
                                                                  "device": g.index % PER_NODE})
                                             for g in base.gpus]})
    commonest = Counter(layout_of(g) for g in base.gpus).most_common(1)[0][0]
    layouts = {g.index: dict(layout_of(g)) for g in base.gpus}
    nodes = [NodeState(name=f"n{n:02d}", gpus=[layouts.get(n * PER_NODE + d, dict(commonest))
                                               for d in range(PER_NODE)]) for n in range(NODES)]
    return named, NodePool(gpu=GPU, nodes=nodes)


def timed(fn):
    started, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - started, time.process_time() - cpu


def changes(before: Plan, after: Plan) -> dict:
    old, new = current_replica_counts(before), current_replica_counts(after)
    moved = {(g.node, g.device): layout_of(g) for g in before.gpus}
    return {"replica_counts_changed": sum(1 for k in set(old) | set(new) if old.get(k, 0) != new.get(k, 0)),
            "variants_changed": sum(1 for t in after.tasks
                                    if t.variant != next((b.variant for b in before.tasks
                                                          if (b.system, b.task) == (t.system, t.task)), None)),
            "gpus_repartitioned": sum(1 for g in after.gpus
                                      if (g.node, g.device) in moved and moved[(g.node, g.device)] != layout_of(g))}


def row(kind: str, step: float, result: Plan | None, wall: float, cpu: float, base: Plan) -> dict:
    entry = {"kind": kind, "step": step, "wall_s": wall, "cpu_s": cpu, "served": result is not None,
             "load_average": os.getloadavg()[0]}
    if result is not None:
        entry.update(gpus_used=result.gpus_used, slices_used=result.slices_used, status=result.solver.status,
                     fully_served=result.fully_served, **changes(base, result))
    return entry


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--full-step", type=float, default=1.2)
    parser.add_argument("--time-limit", type=float, default=120.0)
    parser.add_argument("--save-base", type=Path, help="Also write the base plan (JSON) here, to study a refusal.")
    args = parser.parse_args()
    console = Console()
    options = PlannerOptions(time_limit_s=args.time_limit)
    systems = load(FILL * MAX_SCALE_120)
    store = build_profile_store(systems, GPU)
    with console.status("base plan (MILP) on 120 H100s"):
        base, base_wall, base_cpu = timed(lambda: plan(systems, Pool(gpu=GPU, gpus=NODES * PER_NODE), store,
                                                       options=options))
    base, nodes = on_nodes(base)
    if args.save_base:
        args.save_base.write_text(base.model_dump_json())
    rows = [row("base plan", 1.0, base, base_wall, base_cpu, base)]
    for step in STEPS:
        demand = scaled(systems, step)
        result, wall, cpu = timed(lambda: resize_replicas(base, demand, nodes, store, options=options))  # noqa: B023
        rows.append(row("replicas-only", step, result, wall, cpu, base))
    with console.status(f"full re-plan at x{args.full_step}"):
        full, wall, cpu = timed(lambda: plan(scaled(systems, args.full_step), nodes, store, options=options,
                                             current=base))
    rows.append(row("full re-plan", args.full_step, full, wall, cpu, base))
    write(rows, console)


def write(rows: list[dict], console: Console) -> None:
    headers = ["kind", "demand x", "served", "wall s", "CPU s", "GPUs", "slices", "replica counts changed",
               "variants changed", "GPUs re-partitioned", "status"]
    table = Table(*headers)
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for r in rows:
        cells = [r["kind"], f"{r['step']:g}", "yes" if r["served"] else "no (full re-plan needed)",
                 f"{r['wall_s']:.3f}", f"{r['cpu_s']:.3f}", str(r.get("gpus_used", "")), str(r.get("slices_used", "")),
                 str(r.get("replica_counts_changed", "")), str(r.get("variants_changed", "")),
                 str(r.get("gpus_repartitioned", "")), r.get("status", "")]
        table.add_row(*cells)
        lines.append("| " + " | ".join(cells) + " |")
    console.print(table)
    load = ", ".join(f"{r['load_average']:.1f}" for r in rows)
    resize = [r["wall_s"] for r in rows if r["kind"] == "replicas-only"]
    header = (f"Three examples on 120 H100-80GB (15 nodes x 8), base plan at {FILL:.0%} of the most the pool serves; "
              f"spare GPUs keep the plan's commonest layout. Replicas-only re-solve: at most {max(resize):.3f} s "
              f"wall (target <= {TARGET_S:g} s: {'met' if max(resize) <= TARGET_S else 'missed'}). Machine: "
              f"{os.cpu_count()} cores shared with other work (1-minute load average per row: {load}), "
              f"Python {platform.python_version()}.\n\n")
    out = ROOT / "bench" / "results"
    (out / "replicas_resolve.md").write_text(header + "\n".join(lines) + "\n")
    (out / "replicas_resolve.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

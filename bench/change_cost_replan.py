"""A full re-plan on nodes with and without the change price (planner/change_cost.py), side by side.

bench/replicas_resolve.py's setting: the three examples together on 120
H100s (15 nodes x 8) planned at 70% of the most the pool serves, the GPUs
that plan leaves alone on its commonest layout; then demand rises by
--step and the pool is planned again from that plan. Each re-plan runs
twice, alternating: with `--reconfigure-s 0` (no price, no bound: the
planner as it was before the change price, no node groups and no reference
solves) and with the defaults. Reported: wall and CPU seconds, the ratio,
GPUs, slices, nodes re-partitioned and the plan's change summary.

Run: .venv/bin/python -P bench/change_cost_replan.py [--step 1.2] [--time-limit 120] [--repeats 1]
Writes bench/results/change_cost_replan.{md,json}.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import time
from pathlib import Path

from tessera.planner.change_cost import nodes_changed, serving_nodes
from tessera.planner.model import Pool
from tessera.planner.nodes import pool_gpus
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.solve import PlannerOptions, plan

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("replicas_resolve", ROOT / "bench" / "replicas_resolve.py")
assert _spec is not None and _spec.loader is not None
setting = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(setting)  # the same systems, pool and base plan as bench/replicas_resolve.py


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--step", type=float, default=1.2)
    parser.add_argument("--time-limit", type=float, default=120.0)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    priced = PlannerOptions(time_limit_s=args.time_limit)
    unpriced = priced.model_copy(update={"reconfigure_s": 0.0})
    systems = setting.load(setting.FILL * setting.MAX_SCALE_120)
    store = build_profile_store(systems, setting.GPU)
    base = plan(systems, Pool(gpu=setting.GPU, gpus=setting.NODES * setting.PER_NODE), store, options=unpriced)
    base, nodes = setting.on_nodes(base)
    demand = setting.scaled(systems, args.step)
    rows = []
    for repeat in range(args.repeats):
        for name, options in (("no price (before)", unpriced), ("priced (after)", priced)):
            result, wall, cpu = setting.timed(
                lambda: plan(demand, nodes, store, options=options, current=base))  # noqa: B023
            chosen = {(g.node, g.device): tuple(sorted(g.layout)) for g in result.gpus}
            changed, _ = nodes_changed(pool_gpus(nodes), chosen, serving_nodes(base))
            rows.append({"run": name, "repeat": repeat, "wall_s": wall, "cpu_s": cpu, "gpus": result.gpus_used,
                         "slices": result.slices_used, "nodes_changed": len(changed),
                         "status": result.solver.status, "stages": result.solver.stages,
                         "summary": result.changes.summary if result.changes else "",
                         "load_average": os.getloadavg()[0]})
            print(json.dumps(rows[-1]), flush=True)
    write(rows, args)


def write(rows: list[dict], args: argparse.Namespace) -> None:
    def mean(run: str, key: str) -> float:
        values = [r[key] for r in rows if r["run"] == run]
        return sum(values) / len(values)

    wall = mean("priced (after)", "wall_s") / mean("no price (before)", "wall_s")
    cpu = mean("priced (after)", "cpu_s") / mean("no price (before)", "cpu_s")
    lines = [f"Full re-plan at x{args.step:g} of the three examples on 120 H100-80GB (15 nodes x 8), time limit "
             f"{args.time_limit:g} s, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
             f"Priced / unpriced: wall x{wall:.2f}, CPU x{cpu:.2f}.", "",
             "| run | wall s | CPU s | GPUs | slices | nodes changed | status | load | change summary |",
             "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['run']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['gpus']} | {r['slices']} | "
              f"{r['nodes_changed']} | {r['status']} | {r['load_average']:.1f} | {r['summary']} |" for r in rows]
    out = ROOT / "bench" / "results"
    (out / "change_cost_replan.md").write_text("\n".join(lines) + "\n")
    (out / "change_cost_replan.json").write_text(json.dumps({"rows": rows, "wall_ratio": wall, "cpu_ratio": cpu},
                                                            indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""Planner benchmark: solve time and MIP gap for the three example systems together.

For each pool size, the demand of every system is scaled to 80% of the most
the full method (A+S+T) serves on that pool, so the plan fills about 80% of
it (a tiny demand makes any solver fast). Model build and solve are timed
separately. On the smaller pools the default model (budget levels, option
tiers) is also compared with a finer one, to show the optimality that the
discretisation gives up.

Run: .venv/bin/python bench/planner_scale.py [--pools 4 15 120 1000] [--compare-up-to 4]
Writes bench/results/planner_scale.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tessera.planner.model import Pool
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.solve import PlannerOptions, max_common_scale, plan
from tessera.planner.spec_file import load_systems

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["traffic-analysis", "social-media", "ar-assistant"]
GPU = "H100-80GB"
FILL = 0.8
TARGETS = {120: (10.0, 0.001), 1000: (60.0, 0.01)}


def load():
    return [s for name in EXAMPLES for s in load_systems(ROOT / "examples" / f"{name}.yaml")]


def scaled(systems, factor):
    return [s.model_copy(update={"demand_rps": s.demand_rps * factor}) for s in systems]


def run_plan(systems, store, gpus, options):
    started = time.perf_counter()
    result = plan(systems, Pool(gpu=GPU, gpus=gpus), store, options=options)
    return result, time.perf_counter() - started


def measure(gpus: int, compare: bool, console: Console) -> dict:
    systems = load()
    store = build_profile_store(systems, GPU)
    scale, scale_report = max_common_scale(systems, Pool(gpu=GPU, gpus=gpus), store,
                                           options=PlannerOptions(time_limit_s=120))
    demand = scaled(systems, FILL * scale)
    store = build_profile_store(demand, GPU)
    limit = TARGETS.get(gpus, (60.0, 0.001))[0]
    default, wall = run_plan(demand, store, gpus, PlannerOptions(time_limit_s=limit))
    row = {
        "gpus": gpus,
        "max_scale": scale, "max_scale_gap": scale_report.mip_gap,
        "demand_rps": {s.name: s.demand_rps for s in demand},
        "gpus_used": default.gpus_used, "slices_used": default.slices_used,
        "fill": default.slices_used / (7 * gpus),
        "build_s": default.solver.build_s, "solve_s": default.solver.solve_s, "wall_s": wall,
        "mip_gap": default.solver.mip_gap, "status": default.solver.status,
        "variables": default.solver.variables, "constraints": default.solver.constraints,
        "fully_served": default.fully_served, "time_limit_s": limit,
    }
    if compare:
        finer, finer_wall = run_plan(demand, store, gpus,
                                     PlannerOptions(time_limit_s=180, budget_levels=20, tier_ratio=1.0, busy_instances=0))
        row["finer"] = {
            "levels": 20, "tier_ratio": 1.0, "busy_instances": 0, "gpus_used": finer.gpus_used, "slices_used": finer.slices_used,
            "mip_gap": finer.solver.mip_gap, "wall_s": finer_wall, "variables": finer.solver.variables,
            "accuracy": finer.solver.objective.get("accuracy"),
        }
        row["default_accuracy"] = default.solver.objective.get("accuracy")
    console.log(f"{gpus} GPUs done: {row['gpus_used']} GPUs, gap {100 * row['mip_gap']:.3f}%, "
                f"build {row['build_s']:.1f} s, solve {row['solve_s']:.1f} s")
    return row


def markdown(rows: list[dict]) -> str:
    lines = [
        f"Three example systems together on H100-80GB pools, demand at {int(FILL * 100)}% of the most "
        "A+S+T serves on the pool. Machine: " + platform.processor() + f", {platform.python_version()}.",
        "",
        "| GPUs | demand x base | GPUs used | slices used | build s | solve s | MIP gap | status | variables | target |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        target = TARGETS.get(r["gpus"])
        met = "-" if not target else (
            "met" if r["solve_s"] + r["build_s"] <= target[0] and r["mip_gap"] <= target[1]
            else f"missed (<= {100 * target[1]:g}% in {target[0]:g} s)")
        lines.append(
            f"| {r['gpus']} | {FILL * r['max_scale']:.1f} | {r['gpus_used']} | {r['slices_used']} | {r['build_s']:.1f} | "
            f"{r['solve_s']:.1f} | {100 * r['mip_gap']:.3f}% | {r['status']} | {r['variables']} | {met} |")
    finer = [r for r in rows if "finer" in r]
    if finer:
        lines += ["", "Optimality given up by the default discretisation (10 budget levels, option tiers at "
                      "halvings of the least load, only the highest-throughput options for busy tasks) against 20 levels, every level an option and no busy-task pruning:", "",
                  "| GPUs | default GPUs / slices | finer GPUs / slices | default accuracy score | finer accuracy score | finer solve s |",
                  "|---|---|---|---|---|---|"]
        for r in finer:
            f = r["finer"]
            lines.append(f"| {r['gpus']} | {r['gpus_used']} / {r['slices_used']} | {f['gpus_used']} / {f['slices_used']} | "
                         f"{r['default_accuracy']:.4f} | {f['accuracy']:.4f} | {f['wall_s']:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, nargs="+", default=[4, 15, 120, 1000])
    parser.add_argument("--compare-up-to", type=int, default=4,
                        help="Compare with the finer model on pools up to this size.")
    args = parser.parse_args()
    console = Console()
    rows = [measure(gpus, gpus <= args.compare_up_to, console) for gpus in args.pools]
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "planner_scale.json").write_text(json.dumps(rows, indent=2))
    text = markdown(rows)
    (out / "planner_scale.md").write_text(text)
    table = Table(title="Planner scale")
    for column in ("GPUs", "used", "slices", "build s", "solve s", "gap"):
        table.add_column(column, justify="right")
    for r in rows:
        table.add_row(str(r["gpus"]), str(r["gpus_used"]), str(r["slices_used"]), f"{r['build_s']:.1f}",
                      f"{r['solve_s']:.1f}", f"{100 * r['mip_gap']:.3f}%")
    console.print(table)


if __name__ == "__main__":
    main()

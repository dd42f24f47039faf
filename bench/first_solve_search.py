"""Side by side: HiGHS's neighbourhood-search heuristics (RINS, RENS) in every solve
vs not in the first full solve after relax-and-fix (the planner's choice), on
the planner_scale demands, same limits, in one run.

Run: .venv/bin/python -P bench/first_solve_search.py [--pools 120 1000 15 4] [--repeat N]
Writes bench/results/first_solve_search.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # scripts run with -P: the sibling benchmark's helpers
from planner_scale import GPU, TARGETS, load, scaled

from tessera.planner import highs_driver
from tessera.planner.model import Pool
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.solve import PlannerOptions, plan

OUT = Path(__file__).parent / "results"
# demand factors of bench/results/planner_scale.md (80% of the most A+S+T serves)
DEMAND = {4: 7.2, 15: 31.8, 120: 265.6, 1000: 2220.7}
PLANNER_SOLVE = highs_driver.HighsModel.solve


def search_everywhere(self, time_limit_s, neighbourhood_search=True):
    return PLANNER_SOLVE(self, time_limit_s, neighbourhood_search=True)


def measure(gpus: int, repeat: int) -> list[dict]:
    demand = scaled(load(), DEMAND[gpus])
    store = build_profile_store(demand, GPU)
    limit = TARGETS.get(gpus, (60.0, 0))[0]
    rows = []
    variants = (("RINS/RENS in every solve", search_everywhere), ("none in the first full solve", PLANNER_SOLVE))
    for variant, solve in variants * repeat:  # alternating, so load on the shared machine hits both
        highs_driver.HighsModel.solve = solve
        started = time.perf_counter()
        result = plan(demand, Pool(gpu=GPU, gpus=gpus), store, options=PlannerOptions(time_limit_s=limit))
        rows.append(dict(gpus=gpus, variant=variant, wall_s=time.perf_counter() - started, limit_s=limit,
                         gap=result.solver.mip_gap, status=result.solver.status, gpus_used=result.gpus_used,
                         slices_used=result.slices_used, accuracy=result.solver.objective.get("accuracy")))
        print(rows[-1], flush=True)
    highs_driver.HighsModel.solve = PLANNER_SOLVE
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, nargs="+", default=[120, 1000, 15, 4])
    parser.add_argument("--repeat", type=int, default=1, help="runs of each variant per pool")
    args = parser.parse_args()
    rows = [row for gpus in args.pools for row in measure(gpus, args.repeat)]
    OUT.mkdir(exist_ok=True)
    (OUT / "first_solve_search.json").write_text(json.dumps(rows, indent=2))
    lines = ["| GPUs | variant | limit s | wall s | GPUs / slices | MIP gap | status | accuracy score |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['gpus']} | {r['variant']} | {r['limit_s']:g} | {r['wall_s']:.1f} | {r['gpus_used']} / "
              f"{r['slices_used']} | {100 * r['gap']:.3f}% | {r['status']} | {r['accuracy']:.4f} |" for r in rows]
    (OUT / "first_solve_search.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""Issue 24's two solver changes for the queueing wait, before and after in one process.

Before: the most-load rows' big-M (capacity - M) x bound, the least-load
rows' L x bound, and a relax-and-fix relaxation proven infeasible followed by
a full solve that proves it again (the code as it was, patched back in
here). After: the planner as it is (planner/milp.py `_excess` and
`_least_loads`, planner/solve.py `proven_infeasible`). Both plan the three
examples with the queueing wait split per request at 42x their demand on
120 H100-80GB (all demand servable) and at 80% of the planner benchmark's
4-GPU demand (not servable with the wait, so the serve-all attempt fails
first), alternating before and after per case. Same plans are not expected:
the time limit stops most of these solves, so what to read is whether a
plan came and its proven bounds.

Run: nice -n 10 .venv/bin/python -P bench/queueing_solver_ab.py [--time-limit 60]
Writes bench/results/queueing_solver_ab.json (one row per solve).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import tessera.planner.milp as milp
import tessera.planner.solve as solve
from tessera.planner.latency import Routing
from tessera.planner.model import Pool
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.simulation.experiments import scaled
from tessera.planner.spec_file import load_systems
from tessera.shipped import default_example_systems

ROOT = Path(__file__).resolve().parent.parent
FOUR_GPU_SCALE = {r["gpus"]: r["max_scale"] for r in json.loads((ROOT / "bench/results/planner_scale.json").read_text())}[4]
CASES = [("42x on 120 GPUs", 42.0, 120), ("80% of 4 GPUs", 0.8 * FOUR_GPU_SCALE, 4)]
AFTER = (milp.CompoundMilp._excess, milp.CompoundMilp._least_loads, solve._StagedSolver.find_start)


def excess_before(self: Any, o: int, most: float, capacity: float, bound: int, relax_level: Any,
                  relax_class: Any) -> Any:
    m = self.m
    return m.x[o] - most * m.n[o] - (capacity - most) * bound * (relax_level + relax_class)


def least_loads_before(self: Any, o: int, unit: Any, bound: int) -> None:
    m, c = self.m, self.candidate(o)
    for i, (_, least) in enumerate(unit.steps):
        if least <= 0:
            continue
        if i + 1 == len(unit.steps):
            m.cons.add(m.x[o] >= least * m.n[o])
        else:
            m.cons.add(m.x[o] >= least * m.n[o] - least * bound * self._levels_from(c, unit.steps[i + 1][0]))


def find_start_before(self: Any, expression: Any, sense: Any) -> None:
    AFTER[2](self, expression, sense)
    self.proven_infeasible = False  # the full solve proves it again


def use(code: str) -> None:
    before = code == "before"
    milp.CompoundMilp._excess = excess_before if before else AFTER[0]  # type: ignore[method-assign]
    milp.CompoundMilp._least_loads = least_loads_before if before else AFTER[1]  # type: ignore[method-assign]
    solve._StagedSolver.find_start = find_start_before if before else AFTER[2]  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=60.0)
    args = parser.parse_args()
    options = solve.PlannerOptions(queueing=True, routing=Routing.PER_REQUEST, time_limit_s=args.time_limit)
    base = [s for path in default_example_systems() for s in load_systems(path)]
    rows = []
    for label, scale, gpus in CASES:
        for code in ("before", "after"):
            use(code)
            systems = scaled(base, scale)
            row: dict = {"case": label, "code": code, "load_average": os.getloadavg()[0]}
            started, cpu = time.perf_counter(), time.process_time()
            try:
                result = solve.plan(systems, Pool(gpu="H100-80GB", gpus=gpus), build_profile_store(systems, "H100-80GB"),
                                    options=options)
                cost = result.solver.cost
                row.update(gpus_used=result.gpus_used, slices_used=result.slices_used,
                           gpus_lower_bound=cost.gpus_lower_bound if cost else None,
                           fully_served=result.fully_served, time_limited=result.solver.time_limited)
            except solve.NoPlanError as error:
                row["no_plan"] = str(error)
            row.update(wall_s=time.perf_counter() - started, cpu_s=time.process_time() - cpu)
            rows.append(row)
            print(json.dumps(row), flush=True)
    (ROOT / "bench/results/queueing_solver_ab.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

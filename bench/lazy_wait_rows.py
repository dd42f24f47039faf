"""Could the queueing wait's rows be generated lazily? Rounds and time per round, measured (issue 24).

The three examples at 80% of a pool's default most demand (the planner
benchmark's), `--queueing --routing per-request`, planned by today's staged
solve on models that leave out the wait's most-load rows (a relaxation:
fewer rows, so its optimum bounds the full model's):

- `full`: nothing left out (today's model), to count the rows that bind;
- `relaxed`: the most-load rows left out;
- `--deep`: also the rows that set the children's bulk classes (bulks handed
  on), so every bulk class may stay at its least: the wait's rows all gone;
- `--rounds N`: row generation, whole staged solve per round: the rows of
  the options the last plan violates (or, `--per-task`, of every option of
  their tasks) are generated, with the bulks handed on to those tasks, and
  the model is built and solved again, until the plan violates none (the
  bulks handed on to a task whose rows are left out, violated, are generated
  too: its bulk class then binds the rows it has).

Per plan: GPUs and slices, CPU s (build included), each stage's seconds, the
checker's verdict, and the left-out rows the plan violates.

Run: nice -n 10 .venv/bin/python -P bench/lazy_wait_rows.py [--gpus 4] [--only full|relaxed] [--deep]
    [--rounds N] [--per-task] [--time-limit 240] [--name lazy_wait_rows]
Appends to bench/results/<name>.jsonl (one line per plan).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import pyomo.environ as pyo
from pyomo.core.expr.visitor import identify_variables

import tessera.planner.solve as solve
from tessera.planner.milp import CompoundMilp, MilpInput
from tessera.planner.model import Pool
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.solve import PlannerBug, PlannerOptions, plan

sys.path.insert(0, str(Path(__file__).resolve().parent))
from queueing_models import MODELS, ROOT, systems_at

GPU = "H100-80GB"
FILL = 0.8


class Generated:
    """Which wait rows the next build generates (left out: the rest)."""

    leave_out = False
    deep = False
    options: set[int] = set()
    tasks: set[tuple[str, str]] = set()  # every option's rows (--per-task)
    handed: set[tuple[str, str]] = set()  # tasks whose parents' bulks handed on are generated (--deep)


BUILT: list[tuple[Any, Any, float]] = []  # (milp, solver, build_s) of each plan


class PartialMilp(CompoundMilp):
    """The model with the wait rows Generated names; every live most-load row recorded (as its excess)."""

    def __init__(self, data: MilpInput) -> None:
        self.wait_rows: list[Any] = []
        self.handed_rows: list[tuple[tuple[str, str], Any]] = []  # (child task, row) left out (--deep)
        super().__init__(data)

    def _generated(self, o: int) -> bool:
        c = self.candidate(o)
        return not Generated.leave_out or o in Generated.options or (c.system, c.task) in Generated.tasks

    def _most_load_row(self, o: int, top: float, least: float, falls: list[tuple[float, Any]], capacity: float,
                       bound: int, relax: Any, split: bool, whole: bool, beyond: bool) -> None:
        in_force = (split and not whole and not beyond) or not (split or beyond)  # while all demand is served
        if in_force:
            self.wait_rows.append(partial(self._excess, o, top, least, falls, capacity, bound, relax))
            if not self._generated(o):
                return
        super()._most_load_row(o, top, least, falls, capacity, bound, relax, split, whole, beyond)

    def _bulks_handed_on(self, o: int, c: Any, bound: int) -> None:
        before = len(self.m.cons)
        super()._bulks_handed_on(o, c, bound)
        if not Generated.deep:
            return
        for index in range(before + 1, len(self.m.cons) + 1):
            row = self.m.cons[index]
            (system, child, _, _), = [v.index() for v in identify_variables(row.body) if v.parent_component() is self.m.U]
            if (system, child) not in Generated.handed:
                row.deactivate()
                self.handed_rows.append(((system, child), row))


def _recording_build(data: MilpInput, options: PlannerOptions, started: float) -> Any:
    milp = PartialMilp(data)
    build_s = time.perf_counter() - started
    solver = solve._StagedSolver(milp, options)
    BUILT.append((milp, solver, build_s))
    return milp, solver, build_s


def violations(milp: PartialMilp) -> dict[str, Any]:
    """The recorded rows the solution violates, and those it holds tight on options it runs."""
    values = [pyo.value(row(), exception=False) for row in milp.wait_rows]
    runs = [(pyo.value(milp.m.n[row.args[0]], exception=False) or 0) > 0.5 for row in milp.wait_rows]
    violated = sorted({row.args[0] for row, v in zip(milp.wait_rows, values) if v is not None and v > 1e-6})
    handed = sorted({child for child, row in milp.handed_rows
                     if (pyo.value(row.body, exception=False) or 0.0) > row.upper + 1e-6})
    return {"wait_rows": len(values), "handed_rows": len(milp.handed_rows), "violated_handed": handed, "violated_rows": sum(1 for v in values if v is not None and v > 1e-6),
            "violated_options": violated, "tight_rows_running": sum(
                1 for v, r in zip(values, runs) if r and v is not None and abs(v) <= 1e-6),
            "rows_of_running_options": sum(runs), "worst_excess_rps": max((v for v in values if v is not None),
                                                                          default=0.0)}


def one(gpus: int, limit: float) -> dict[str, Any]:
    scales = {r["gpus"]: r["max_scale"] for r in json.loads((ROOT / "bench/results/planner_scale.json").read_text())}
    systems = systems_at(FILL * scales[gpus])
    store = build_profile_store(systems, GPU)
    options = MODELS["per-request"].model_copy(update={"time_limit_s": limit})
    cpu, wall = time.process_time(), time.perf_counter()
    row: dict[str, Any] = {"gpus": gpus, "load_average": os.getloadavg()[0]}
    try:
        plan(systems, Pool(gpu=GPU, gpus=gpus), store, options=options)
        row["checker"] = "pass"
    except PlannerBug as bug:
        row.update(checker=f"{len(bug.errors)} violations", first_violation=bug.errors[0])
    milp, solver, build_s = BUILT[-1]
    row.update(cpu_s=time.process_time() - cpu, wall_s=time.perf_counter() - wall, build_s=build_s,
               gpus_used=round(pyo.value(milp.m.gpus_used)), slices_used=round(pyo.value(milp.m.slices_used)),
               start_s=solver.start_seconds, solves=[(r.name, round(r.seconds, 2), r.status) for r in solver.results],
               **violations(milp))
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--time-limit", type=float, default=240)
    parser.add_argument("--only", choices=["full", "relaxed"])
    parser.add_argument("--deep", action="store_true", help="also leave out the bulks handed on")
    parser.add_argument("--rounds", type=int, default=0, help="generate the violated rows, at most N rounds")
    parser.add_argument("--per-task", action="store_true", help="generate a violating option's whole task")
    parser.add_argument("--name", default="lazy_wait_rows")
    args = parser.parse_args()
    solve._build = _recording_build  # type: ignore[assignment]
    Generated.deep = args.deep
    out = ROOT / "bench/results" / f"{args.name}.jsonl"
    mode = {"deep": args.deep, "per_task": args.per_task}

    def record(row: dict[str, Any]) -> None:
        print(json.dumps(row), flush=True)
        with out.open("a") as f:
            f.write(json.dumps(row) + "\n")

    if args.rounds:
        Generated.leave_out = True
        for r in range(1, args.rounds + 1):
            row = one(args.gpus, args.time_limit)
            record({"model": "rounds", "round": r, "generated_options": len(Generated.options),
                    "generated_tasks": len(Generated.tasks), **mode, **row})
            if not row["violated_options"] and not row["violated_handed"]:
                return
            milp = BUILT[-1][0]
            Generated.handed |= {tuple(task) for task in row["violated_handed"]}
            for o in row["violated_options"]:
                c = milp.candidate(o)
                Generated.options.add(o)  # the build is deterministic: the same index is the same option
                Generated.handed.add((c.system, c.task))
                if args.per_task:
                    Generated.tasks.add((c.system, c.task))
        return
    for leave_out in (True, False):
        if args.only is None or (args.only == "relaxed") == leave_out:
            Generated.leave_out = leave_out
            record({"model": "relaxed" if leave_out else "full", **mode, **one(args.gpus, args.time_limit)})


if __name__ == "__main__":
    main()

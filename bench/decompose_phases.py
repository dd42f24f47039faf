"""Where a decomposed plan's time goes: the parts, the packing, the placement, the check (issue 29, item 6's bench).

One command: `.venv/bin/python -P bench/decompose_phases.py [--systems 20] [--nodes 16 100] [--distinct-demands]
[--before] [--rounds N]`. The systems are
those bench/operator_many_systems.py applies (the three examples in turn, each under its own name, the examples'
demand), planned through the planner's contract (`plan_outcome`, what the operator's solve worker calls) on a
fresh pool of nodes x 8 H100s, in this process. Each phase of planner/decompose.py is timed by wrapping the
function that does it (wall and CPU seconds, calls), and inside the parts the building of each model (pyomo) and
its loading into HiGHS (highs_driver.load_model), which the report's build_s leaves out; the parts' HiGHS seconds are their
reports'. A phase's CPU seconds are its own thread's (parts solved at once run in threads); its wall seconds are
summed over the calls, so with parts solved at once they may exceed the plan's. Each plan's line says how many
cores it used and how many the machine left idle meanwhile (/proc/stat): parts at once gain only where about two
are free. With `--before` each pool is
also planned with the parts one after another (`parallel_parts` 1, as before that option), alternating with the
default, `--rounds` times each, in this process: the ratios are after / before. Prints a Markdown table per pool;
writes bench/results/decompose_phases.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import tessera.planner.decompose as decompose
import tessera.planner.solve as solve
from tessera.planner.contract import plan_outcome
from tessera.planner.nodes import NodePool, NodeState
from tessera.planner.solve import PlannerOptions
from tessera.planner.spec_file import load_systems

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ("traffic-analysis", "social-media", "ar-assistant")
PHASES = {"_part": "parts (each system alone)", "_pack": "packing", "assign_gpus": "placement", "check_plan": "check"}
IN_PARTS = {"CompoundMilp": "of the parts: building the models (pyomo)",
            "HighsModel": "of the parts: loading the models into HiGHS (highs_driver.load_model)"}
"""Inside each part's plan() (planner/solve.py): what its report's build_s leaves out, beside what it counts."""
COUNTING = threading.Lock()
IDLE = "idle"
"""(the machine's cores left idle during the plan, the cores the plan used): the cores free to it were their sum."""


def bench_systems(count: int, distinct: bool = False) -> list:
    """The three examples in turn, each copy under its own name; `distinct`: the i-th copy's demand lowered by i %
    as bench/operator_many_systems.py --distinct-demands does (no two alike, so no part is solved once for several)."""
    examples = [s for name in EXAMPLES for s in load_systems(ROOT / "examples" / f"{name}.yaml")]
    return [example.model_copy(update={"name": f"bench/{example.name}-{i}",
                                       "demand_rps": example.demand_rps * (1 - i / 100 if distinct else 1)})
            for i, example in ((i, examples[i % len(examples)]) for i in range(count))]


def timed(times: dict[str, list[float]], name: str, function: Callable) -> Callable:
    def wrapper(*args, **kwargs):
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            with COUNTING:  # parts solved at once count from their threads
                spent = times.setdefault(name, [0.0, 0.0, 0])
                spent[0] += time.perf_counter() - wall
                spent[1] += time.thread_time() - cpu
                spent[2] += 1
    return wrapper


def machine_cpu() -> tuple[int, int]:
    """The machine's CPU time so far (/proc/stat, jiffies): all of it, and the idle part (idle, I/O wait)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields[:8]), fields[3] + fields[4]


def one_plan(count: int, nodes: int, distinct: bool, options: PlannerOptions) -> tuple[dict, object, float, float]:
    """The phases' (wall, CPU, calls), the outcome, and the plan's wall and CPU seconds (all threads)."""
    times: dict[str, list[float]] = {}
    originals = {(module, name): getattr(module, name) for module, names in ((decompose, PHASES), (solve, IN_PARTS))
                 for name in names}
    for (module, name), function in originals.items():
        setattr(module, name, timed(times, {**PHASES, **IN_PARTS}[name], function))
    try:
        pool = NodePool(gpu="H100-80GB", nodes=[NodeState(name=f"gpu-node-{n}", gpus=[{}] * 8) for n in range(nodes)])
        wall, cpu, (total, idle) = time.perf_counter(), time.process_time(), machine_cpu()
        outcome = plan_outcome(bench_systems(count, distinct), pool, options=options)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        total_after, idle_after = machine_cpu()
        idle_cores = (os.cpu_count() or 1) * (idle_after - idle) / max(1, total_after - total)
        times[IDLE] = [idle_cores, cpu / max(wall, 1e-9), 0]
    finally:
        for (module, name), function in originals.items():
            setattr(module, name, function)
    return times, outcome, wall, cpu


def phase_table(times: dict, outcome, wall: float, cpu: float, label: str) -> list[str]:
    report = outcome.plan.solver if getattr(outcome, "plan", None) else None
    idle, used = times[IDLE][:2]
    lines = [f"{label}: {outcome.kind}, {report.method if report else 'no plan'}: {wall:.1f} s wall, {cpu:.1f} s CPU "
             f"({used:.2f} cores used, {idle:.2f} left idle)"
             + (f"; the parts' models built in {report.build_s:.1f} s, HiGHS {report.solve_s:.1f} s (summed over the "
                "parts)" if report else ""),
             "", "| phase | wall s (summed) | CPU s (its threads) | calls |", "| --- | --- | --- | --- |"]
    lines += [f"| {name} | {times.get(name, [0, 0, 0])[0]:.2f} | {times.get(name, [0, 0, 0])[1]:.2f} | "
              f"{times.get(name, [0, 0, 0])[2]} |" for name in [*PHASES.values(), *IN_PARTS.values()]]
    return lines + [""]


def one_pool(count: int, nodes: int, distinct: bool, before: bool, rounds: int) -> str:
    after_options = PlannerOptions()
    runs: dict[str, list[tuple[float, float, float]]] = {}
    plans: dict[str, object] = {}
    lines = [f"### {count} systems{', demands distinct' if distinct else ''} on {nodes} nodes x 8 H100 "
             f"(load average {os.getloadavg()[0]:.1f} at the start)", ""]
    kinds = [("before (parts one after another)", after_options.model_copy(update={"parallel_parts": 1}))] \
        if before else []
    kinds.append((f"after ({after_options.parallel_parts} parts at once)", after_options))
    for round_ in range(rounds):
        for label, options in kinds:
            times, outcome, wall, cpu = one_plan(count, nodes, distinct, options)
            runs.setdefault(label, []).append((wall, cpu, sum(times[IDLE][:2])))
            plan = getattr(outcome, "plan", None)
            plans.setdefault(label, plan.model_dump(exclude={"solver"}) if plan else None)
            if round_ == 0:
                lines += phase_table(times, outcome, wall, cpu, label)
    if before:
        (b_label, _), (a_label, _) = kinds
        walls = {label: statistics.median(w for w, _, _ in spent) for label, spent in runs.items()}
        cpus = {label: statistics.median(c for _, c, _ in spent) for label, spent in runs.items()}
        free = {label: statistics.median(f for _, _, f in spent) for label, spent in runs.items()}
        lines += [f"Medians of {rounds} (alternating), load average {os.getloadavg()[0]:.1f} at the end:", "",
                  "| | before | after | after / before |", "| --- | --- | --- | --- |",
                  f"| wall s | {walls[b_label]:.1f} | {walls[a_label]:.1f} | {walls[a_label] / walls[b_label]:.2f} |",
                  f"| CPU s | {cpus[b_label]:.1f} | {cpus[a_label]:.1f} | {cpus[a_label] / cpus[b_label]:.2f} |",
                  f"| cores free to the plan (used + left idle) | {free[b_label]:.2f} | {free[a_label]:.2f} | |",
                  "", f"The same plan (all but the solver's report): {plans[b_label] == plans[a_label]}", ""]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", type=int, default=20)
    parser.add_argument("--nodes", type=int, nargs="+", default=[16, 100])
    parser.add_argument("--distinct-demands", action="store_true",
                        help="every copy's demand its example's less i %% (no part solved once for several)")
    parser.add_argument("--before", action="store_true",
                        help="also plan with the parts one after another (parallel_parts 1), alternating")
    parser.add_argument("--rounds", type=int, default=1, help="plans of each kind per pool (medians compared)")
    args = parser.parse_args()
    text = "# A decomposed plan's phases (bench/decompose_phases.py)\n\n" + "\n".join(
        one_pool(args.systems, nodes, args.distinct_demands, args.before, args.rounds) for nodes in args.nodes)
    (ROOT / "bench" / "results" / "decompose_phases.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

"""HiGHS options in the planner's solves: CPU time and plans per option set (issue 24 groundwork).

The planner benchmark's demand (bench/planner_scale.py: the three examples at
80% of the most A+S+T serves on the pool, scales from its last results) is
planned on H100 pools with the default latency model and with the queueing
wait on (`per-request`: `PlannerOptions(queueing=True, routing=per-request)`,
the routing issue 24's latest CPU figures used; `queueing`: one-replica
routing, PlannerOptions' own), once per HiGHS option set:

- `default`: the planner's own options;
- `fj_off`: mip_heuristic_run_feasibility_jump=false;
- `symmetry_off`: mip_detect_symmetry=false;
- `both_off`: the two above;
- `effort_0.01`: mip_heuristic_effort=0.01 (default 0.05).

Each plan runs in a fresh process of its own, the option set applied there to
every HighsModel the planner makes (HighsModel._configure wrapped in that
process only; the planner is not changed). Variants alternate within a round
(reversed every other round). Per plan: CPU s of the plan (process time, all
threads, the model build included), wall, the solves' wall (solve s), GPUs
and slices with their bounds, proven, MIP gap, the stages the time limit
stopped, and whether the plan equals the default's (GPUs, slices, every
task's configurations) in the same round. A case whose
default plan takes over 60 s wall gets one round. The machine is shared:
compare ratios within a run; the load average is recorded per plan.

Run: .venv/bin/python -P bench/highs_options.py [--pools 4 15 120] [--latency default per-request queueing]
    [--rounds 2] [--time-limit 240] [--variants default fj_off ...] [--append]
(--append adds rounds to the last results; --append --rounds 0 rewrites the table from them.)
Writes bench/results/highs_options.{md,json} (after every plan, so a cut run keeps what it measured).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from planner_scale import DEFAULT_TIME_LIMIT_S, FILL, GPU, load, run_plan, scaled, summary

from tessera.planner import highs_driver
from tessera.planner.latency import Routing
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.solve import PlannerOptions

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "results"
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "fj_off": {"mip_heuristic_run_feasibility_jump": False},
    "symmetry_off": {"mip_detect_symmetry": False},
    "both_off": {"mip_heuristic_run_feasibility_jump": False, "mip_detect_symmetry": False},
    "effort_0.01": {"mip_heuristic_effort": 0.01},
}
LATENCY_MODELS: dict[str, dict[str, Any]] = {  # the planner's options of each latency model measured
    "default": {},
    "queueing": {"queueing": True},  # one-replica routing, PlannerOptions' own
    "per-request": {"queueing": True, "routing": Routing.PER_REQUEST},  # issue 24's latest CPU figures
}
ONE_ROUND_OVER_S = 60.0


def with_highs_options(options: dict[str, Any]) -> None:
    """Every HighsModel made from now on in this process gets `options` after the planner's own."""
    planner_configure = highs_driver.HighsModel._configure

    def configure(model: highs_driver.HighsModel) -> None:
        planner_configure(model)
        for name, value in options.items():
            if model.h.setOptionValue(name, value) != highs_driver.highspy.HighsStatus.kOk:
                raise ValueError(f"HiGHS refused option {name}={value!r}")

    highs_driver.HighsModel._configure = configure  # type: ignore[method-assign]


def plan_shape(result: Any) -> dict[str, Any]:
    """What two plans must share to be the same plan: GPUs, slices, every task's configurations."""
    if isinstance(result, str):
        return {}
    tasks = sorted(
        [t.system, t.task, t.variant,
         sorted([c.segment.mig_profile, c.segment.mps, c.batch, c.replicas] for c in t.configs)]
        for t in result.tasks)
    return {"gpus": result.gpus_used, "slices": result.slices_used, "tasks": tasks}


def one_plan(variant: str, gpus: int, scale: float, limit: float, latency: str) -> dict[str, Any]:
    with_highs_options(VARIANTS[variant])
    demand = scaled(load(), FILL * scale)
    store = build_profile_store(demand, GPU)
    result, wall, cpu = run_plan(demand, store, gpus, PlannerOptions(time_limit_s=limit, **LATENCY_MODELS[latency]))
    row = summary(result, wall, cpu)
    if not isinstance(result, str):
        row["time_limited"] = result.solver.time_limited
    return {**row, "shape": plan_shape(result)}


def plan_in_process(variant: str, gpus: int, scale: float, limit: float, latency: str) -> dict[str, Any]:
    command = [sys.executable, "-P", str(Path(__file__).resolve()), "--one-plan", variant, str(gpus), repr(scale),
               repr(limit), latency]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_case(gpus: int, latency: str, scale: float, args: argparse.Namespace, runs: list[dict]) -> None:
    """Rounds of every variant on one pool and latency model, alternating; `runs` grows and is saved per plan."""
    first = 1 + max((r["round"] for r in runs if (r["gpus"], r["latency"]) == (gpus, latency)), default=-1)
    for number in range(first, first + args.rounds):
        order = args.variants if number % 2 == 0 else args.variants[::-1]
        this_round: dict[str, dict] = {}
        for variant in order:
            load_average = os.getloadavg()[0]
            row = plan_in_process(variant, gpus, scale, args.time_limit, latency)
            this_round[variant] = row
            runs.append({"gpus": gpus, "latency": latency, "round": number,
                         "variant": variant, "load_average": load_average, **row})
            print(f"{gpus} GPUs {runs[-1]['latency']} round {number} {variant}: cpu {row['cpu_s']:.1f} s, "
                  f"wall {row['wall_s']:.1f} s, {row.get('gpus_used')} GPUs {row.get('slices_used')} slices, "
                  f"load {load_average:.1f}", flush=True)
            save(runs)
        base = this_round.get("default", {}).get("shape")
        for row in runs[-len(order):]:
            row["same_plan_as_default"] = None if base is None else row["shape"] == base
        save(runs)
        if this_round.get("default", {}).get("wall_s", 0.0) > ONE_ROUND_OVER_S:
            return


def _cases(runs: list[dict]) -> list[tuple[int, str]]:
    return list(dict.fromkeys((r["gpus"], r["latency"]) for r in runs))


def markdown(runs: list[dict]) -> str:
    lines = [
        f"The three examples at {int(FILL * 100)}% of the most A+S+T serves on H100-80GB pools (planner_scale's "
        f"demand), each plan in a fresh process, HiGHS {highs_driver.quiet_highs().version()}, Python "
        f"{platform.python_version()}, {os.cpu_count()} cores shared with other work (a CI run). CPU s: the "
        "plan's process time, all threads (median over rounds); ratio: the median of each round's CPU s over "
        "the same round's default. Same plan: GPUs, slices and every task's configurations equal the same "
        "round's default plan (rounds agreeing / rounds).",
        "",
        "| GPUs | latency | variant | rounds | CPU s (median) | CPU ratio to default | wall s (median) | "
        "solve s (median) | GPUs (bound) | slices (bound) | proven | gap | time-limited stages | same plan | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for gpus, latency in _cases(runs):
        case = [r for r in runs if r["gpus"] == gpus and r["latency"] == latency]
        default_cpu = {r["round"]: r["cpu_s"] for r in case if r["variant"] == "default"}
        for variant in dict.fromkeys(r["variant"] for r in case):
            rows = [r for r in case if r["variant"] == variant]
            ratios = [r["cpu_s"] / default_cpu[r["round"]] for r in rows if r["round"] in default_cpu]
            same = [r.get("same_plan_as_default") for r in rows if r.get("same_plan_as_default") is not None]
            last = rows[-1]
            limited = sorted({stage for r in rows for stage in r.get("time_limited", [])})
            lines.append(
                f"| {gpus} | {latency} | {variant} | {len(rows)} | {statistics.median(r['cpu_s'] for r in rows):.1f} | "
                f"{statistics.median(ratios) if ratios else float('nan'):.2f} | {statistics.median(r['wall_s'] for r in rows):.1f} | "
                f"{statistics.median(r.get('solve_s', float('nan')) for r in rows):.1f} | "
                f"{last.get('gpus_used', '-')} ({last.get('gpus_lower_bound', '-')}) | "
                f"{last.get('slices_used', '-')} ({last.get('slices_lower_bound', '-')}) | "
                f"{sum(r['cost_proven'] for r in rows)}/{len(rows)} | {max(r['mip_gap'] for r in rows):.2g} | "
                f"{', '.join(limited) or '-'} | {sum(same)}/{len(same)} | "
                f"{', '.join(format(r['load_average'], '.1f') for r in rows)} |")
    return "\n".join(lines) + "\n"


def save(runs: list[dict]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "highs_options.json").write_text(json.dumps(runs, indent=2))
    (OUT / "highs_options.md").write_text(markdown(runs))


def main() -> None:
    if sys.argv[1:2] == ["--one-plan"]:
        variant, gpus, scale, limit = sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
        print(json.dumps(one_plan(variant, gpus, scale, limit, sys.argv[6])))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, nargs="+", default=[4, 15, 120])
    parser.add_argument("--latency", nargs="+", choices=list(LATENCY_MODELS), default=["default", "per-request"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S, help="Wall-clock limit per plan.")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--append", action="store_true", help="Add to the last results instead of starting anew.")
    args = parser.parse_args()
    scales = {r["gpus"]: r["max_scale"] for r in json.loads((OUT / "planner_scale.json").read_text())}
    runs = json.loads((OUT / "highs_options.json").read_text()) if args.append else []
    for latency in args.latency:
        for gpus in args.pools:
            measure_case(gpus, latency, scales[gpus], args, runs)
    save(runs)  # also rewrites the table from the last results with --append --rounds 0


if __name__ == "__main__":
    main()

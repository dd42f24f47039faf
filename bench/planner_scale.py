"""Planner benchmark: solve time and MIP gap for the three example systems together.

For each pool size, the demand of every system is scaled to 80% of the most
the full method (A+S+T) serves on that pool, so the plan fills about 80% of
it (a tiny demand makes any solver fast). Model build, solve, wall and CPU
time are recorded with the machine's load average (a shared machine: CPU
seconds are what an idle core would take), and the cost proof: GPUs and
slices beside their proven lower bounds. On the smaller pools the default is
also run beside the approximate model (option tiers, busy-task pruning) to
show what the exact default costs and finds.

With --baseline REF the planner of that git revision (its planner/ folder,
exported with git archive) plans the same demand beside this one, pool by
pool, each plan in a fresh process of its own, alternating: a before/after
comparison in one run on the same loaded machine.

Run: .venv/bin/python -P bench/planner_scale.py [--pools 4 15 120 1000] [--compare-up-to 15] [--reuse-scales]
     [--baseline main] [--time-limit 60]
(--reuse-scales takes each pool's 80% demand from the last results instead of solving for the maximum again.)
Writes bench/results/planner_scale.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import tessera.planner
from rich.console import Console
from rich.table import Table

if __name__ == "__main__" and sys.argv[1:2] == ["--one-plan"]:
    # Before any planner module loads: they come from the folder asked for (this one or a baseline's).
    tessera.planner.__path__[:] = [sys.argv[2]]

from tessera.planner.model import Pool
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.solve import NoPlanError, PlannerOptions, max_common_scale, plan
from tessera.planner.spec_file import load_systems

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["traffic-analysis", "social-media", "ar-assistant"]
GPU = "H100-80GB"
FILL = 0.8
TARGETS = {4: (10.0, 0.001), 15: (10.0, 0.001), 120: (10.0, 0.001), 1000: (60.0, 0.01)}  # CPU s, gap
TIME_LIMIT_S: dict[int, float] = {}  # per pool, else the default
DEFAULT_TIME_LIMIT_S = 240.0  # HiGHS counts wall time: generous on a shared machine, judged on CPU time


def load():
    return [s for name in EXAMPLES for s in load_systems(ROOT / "examples" / f"{name}.yaml")]


def scaled(systems, factor):
    return [s.model_copy(update={"demand_rps": s.demand_rps * factor}) for s in systems]


def run_plan(systems, store, gpus, options):
    started, cpu = time.perf_counter(), time.process_time()
    try:
        result = plan(systems, Pool(gpu=GPU, gpus=gpus), store, options=options)
    except NoPlanError as error:
        result = str(error)
    return result, time.perf_counter() - started, time.process_time() - cpu


def summary(result, wall: float, cpu: float) -> dict:
    if isinstance(result, str):
        return {"no_plan": result, "wall_s": wall, "cpu_s": cpu, "cost_proven": False, "mip_gap": float("inf")}
    cost = result.solver.cost
    return {
        "gpus_used": result.gpus_used, "slices_used": result.slices_used,
        "gpus_lower_bound": cost.gpus_lower_bound, "slices_lower_bound": cost.slices_lower_bound,
        "cost_proven": cost.proven, "time_limited": result.solver.time_limited,
        "build_s": result.solver.build_s, "solve_s": result.solver.solve_s, "wall_s": wall, "cpu_s": cpu,
        "mip_gap": result.solver.mip_gap, "status": result.solver.status,
        "variables": result.solver.variables, "constraints": result.solver.constraints,
        "fully_served": result.fully_served, "accuracy": result.solver.objective.get("accuracy"),
    }


def plan_in_process(planner_dir: Path, gpus: int, scale: float, limit: float, other: bool) -> dict:
    """One plan in a fresh process with the planner package found in `planner_dir` (this one or a baseline's)."""
    command = [sys.executable, "-P", str(Path(__file__).resolve()), "--one-plan", str(planner_dir), str(gpus),
               repr(scale), repr(limit)] + (["--other"] if other else [])
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def one_plan(gpus: int, scale: float, limit: float, other: bool) -> dict:
    """The default options' plan (or, with `other`, the other model's: exact beside approximate and back)."""
    demand = scaled(load(), FILL * scale)
    store = build_profile_store(demand, GPU)
    options = PlannerOptions(time_limit_s=limit)
    exact = options.exact_for(gpus)
    if other:
        options, exact = options.model_copy(update={"exact_up_to_gpus": 0 if exact else gpus}), not exact
    return {"exact": exact, **summary(*run_plan(demand, store, gpus, options))}


def baseline_planner(ref: str, into: Path) -> Path:
    """The planner/ folder of git revision `ref`, exported under `into`."""
    archive = into / "baseline.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "--output", str(archive), ref, "planner"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "planner"


def measure(gpus: int, compare: bool, console: Console, known_scale: float | None,
            baseline: Path | None, limit: float) -> dict:
    if known_scale is None:
        systems = load()
        scale, scale_report = max_common_scale(systems, Pool(gpu=GPU, gpus=gpus), build_profile_store(systems, GPU),
                                               options=PlannerOptions(time_limit_s=120))
        scale_gap = scale_report.mip_gap
    else:
        scale, scale_gap = known_scale, None
    demand = scaled(load(), FILL * scale)
    row = {"gpus": gpus, "max_scale": scale, "max_scale_gap": scale_gap, "time_limit_s": limit,
           "load_average": os.getloadavg()[0], "demand_rps": {s.name: s.demand_rps for s in demand},
           **plan_in_process(ROOT / "planner", gpus, scale, limit, other=False)}
    if baseline is not None:
        row["baseline"] = {"load_average": os.getloadavg()[0],
                           **plan_in_process(baseline, gpus, scale, limit, other=False)}
    if compare:  # the other model: approximate beside an exact default, exact beside an approximate one
        row["other"] = plan_in_process(ROOT / "planner", gpus, scale, limit, other=True)
    console.log(f"{gpus} GPUs done: {row.get('gpus_used', 'no plan')} GPUs, {row.get('slices_used', '-')} slices, "
                f"proven {row['cost_proven']}, wall {row['wall_s']:.1f} s, cpu {row['cpu_s']:.1f} s")
    return row


def _met(r: dict) -> str:
    target = TARGETS.get(r["gpus"])
    if not target:
        return "-"
    if "no_plan" in r:
        return "missed (no plan)"
    within = r["cpu_s"] <= target[0] and (r["cost_proven"] or r["mip_gap"] <= target[1])
    return "met" if within else f"missed (proven or <= {100 * target[1]:g}% in {target[0]:g} s)"


def markdown(rows: list[dict]) -> str:
    load = ", ".join(f"{r['load_average']:.1f}" for r in rows)
    lines = [
        f"Three example systems together on H100-80GB pools, demand at {int(FILL * 100)}% of the most "
        f"A+S+T serves on the pool. Machine: {os.cpu_count()} cores shared with other work (1-minute load "
        f"average at each row: {load}), Python {platform.python_version()}. CPU s is the process's CPU "
        "time, what an idle core would take; wall s is what this run took on the loaded machine (HiGHS's "
        "time limit counts wall time, so a loaded machine gives it fewer CPU seconds). Cost: GPUs and "
        "slices used (proven lower bound).",
        "",
        "| GPUs | demand x base | model | GPUs used (bound) | slices used (bound) | proven | build s | "
        "wall s | CPU s | time limit s | variables | target |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        runs = [("default, " + ("exact" if r["exact"] else "approximate"), r, _met(r))]
        if "baseline" in r:
            base = r["baseline"]
            runs.append((f"before ({BASELINE_LABEL}), default, " + ("exact" if base["exact"] else "approximate"),
                         base, _met({**base, "gpus": r["gpus"]})))
        if "other" in r:
            runs.append(("exact" if r["other"]["exact"] else "approximate", r["other"], "-"))
        for label, run, met in runs:
            if "no_plan" in run:
                lines.append(f"| {r['gpus']} | {FILL * r['max_scale']:.1f} | {label} | no plan within the time "
                             f"limit | | | | {run['wall_s']:.1f} | {run['cpu_s']:.1f} | {r['time_limit_s']:g} | | {met} |")
                continue
            lines.append(
                f"| {r['gpus']} | {FILL * r['max_scale']:.1f} | {label} | {run['gpus_used']} ({run['gpus_lower_bound']}) | "
                f"{run['slices_used']} ({run['slices_lower_bound']}) | {'yes' if run['cost_proven'] else 'no'} | "
                f"{run['build_s']:.1f} | {run['wall_s']:.1f} | {run['cpu_s']:.1f} | {r['time_limit_s']:g} | "
                f"{run['variables']} | {met} |")
    return "\n".join(lines) + "\n"


BASELINE_LABEL = "baseline"


def main() -> None:
    global BASELINE_LABEL
    if len(sys.argv) > 1 and sys.argv[1] == "--one-plan":
        print(json.dumps(one_plan(int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), "--other" in sys.argv)))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, nargs="+", default=[4, 15, 120, 1000])
    parser.add_argument("--compare-up-to", type=int, default=4,
                        help="Run the approximate model beside the default on pools up to this size.")
    parser.add_argument("--reuse-scales", action="store_true",
                        help="Take each pool's demand scale from the last results.")
    parser.add_argument("--baseline", metavar="REF", help="Plan beside the planner of this git revision.")
    parser.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S, help="Wall-clock limit per plan.")
    args = parser.parse_args()
    console = Console()
    out = ROOT / "bench" / "results"
    known = {}
    if args.reuse_scales and (out / "planner_scale.json").exists():
        known = {r["gpus"]: r["max_scale"] for r in json.loads((out / "planner_scale.json").read_text())}
    with tempfile.TemporaryDirectory() as scratch:
        baseline = baseline_planner(args.baseline, Path(scratch)) if args.baseline else None
        if args.baseline:
            revision = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.baseline],
                                      capture_output=True, text=True, check=True).stdout.strip()
            BASELINE_LABEL = f"{args.baseline} {revision}"
        rows = [measure(gpus, gpus <= args.compare_up_to, console, known.get(gpus), baseline,
                        TIME_LIMIT_S.get(gpus, args.time_limit))
                for gpus in args.pools]
    out.mkdir(parents=True, exist_ok=True)
    (out / "planner_scale.json").write_text(json.dumps(rows, indent=2))
    text = markdown(rows)
    (out / "planner_scale.md").write_text(text)
    table = Table(title="Planner scale")
    for column in ("GPUs", "used", "slices", "proven", "wall s", "CPU s"):
        table.add_column(column, justify="right")
    for r in rows:
        table.add_row(str(r["gpus"]), str(r.get("gpus_used", "-")), str(r.get("slices_used", "-")), str(r["cost_proven"]),
                      f"{r['wall_s']:.1f}", f"{r['cpu_s']:.1f}")
    console.print(table)


if __name__ == "__main__":
    main()

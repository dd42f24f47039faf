"""What building the parts' models costs, this tree against another's planner (issue 29: 20 systems to Ready).

One command: `.venv/bin/python -P bench/milp_build_speed.py [--before /work/main] [--rounds 3] [--nodes 16]
[--whole-plan]`.
The models are those a decomposed plan of bench/decompose_phases.py's 20 systems with distinct demands on
`--nodes` nodes x 8 H100s builds, one part per system on its first sub-pool (planner/decompose.py, _part):
solve._build, the model (CompoundMilp) and its loading into HiGHS (HighsModel, highs_driver.load_model),
what a part does before its first solve. Each tree runs in a subprocess of its own, `--before`'s planner
imported from a copy of it (its tessera/ with planner/ as tessera/planner, first on PYTHONPATH), the trees
alternating, `--rounds` times each; each subprocess builds the 20 models twice and reports the CPU seconds
of each pass (the first as a fresh solve worker builds them, the second with the planner's caches warm), each
build followed by a collection of the youngest generation, the first thing the solve after it pays (with the
collector held off while building, the whole model is there: the pause's deferred cost, counted).
The ratios are this tree's medians over the other's. With `--whole-plan` a fresh subprocess per tree and round also plans the
20 systems as the solve worker does (plan_outcome, the parts one after another) and reports its CPU seconds and
a digest of the plan, which must agree too. It also checks the two trees build the same models:
each subprocess prints a digest of every part's columns, rows and coefficients as HiGHS holds them, and
the digests must agree. Writes bench/results/milp_build_speed.md.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPU = "H100-80GB"
SYSTEMS = 20


def part_inputs(nodes: int) -> list:
    """Each system's part's MilpInput, as _part builds it on its first sub-pool (a unit of the bench: the
    parts of these systems are served in full there, so this is every model the plan builds)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from decompose_phases import bench_systems

    from tessera.planner import solve
    from tessera.planner.decompose import FIRST_SUB_POOL_GPUS
    from tessera.planner.features import Features
    from tessera.planner.model import Pool
    from tessera.planner.profile_sources import build_profile_store

    systems = bench_systems(SYSTEMS, True)
    options = solve.PlannerOptions()
    pool_size = nodes * 8
    store = build_profile_store(systems, GPU, None, options.batches, max_mps=options.max_mps)
    own = options.model_copy(update={"exact_up_to_gpus": pool_size if options.exact_for(pool_size) else 0})
    sub_pool = solve.pool_gpus(Pool(gpu=GPU, gpus=min(pool_size, FIRST_SUB_POOL_GPUS)))
    return [solve._milp_input([s], sub_pool, store, Features(), own, None, ()) for s in systems]


def digest(solver) -> str:
    """The model as HiGHS holds it: columns' bounds and kinds, rows' bounds, the matrix, in order."""
    lp = solver.highs.h.getLp()
    parts = [lp.col_lower_, lp.col_upper_, [int(k) for k in lp.integrality_], lp.row_lower_, lp.row_upper_,
             lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_]
    return hashlib.sha256(json.dumps([list(p) for p in parts]).encode()).hexdigest()


def worker(nodes: int) -> None:
    """One tree's passes: prints a JSON line of CPU seconds per pass, the models' digests and the planner used."""
    from tessera.planner import solve

    inputs = part_inputs(nodes)
    options = solve.PlannerOptions()
    passes, digests = [], []
    for _ in range(2):
        cpu = time.process_time()
        solvers = []
        for data in inputs:
            solvers.append(solve._build(data, options, time.perf_counter())[1])
            gc.collect(0)  # what the solve that follows pays first: the youngest objects walked once
        passes.append(time.process_time() - cpu)
        digests = [digest(s) for s in solvers]
        del solvers
    print(json.dumps({"passes": passes, "digests": digests, "planner": str(Path(solve.__file__).parent)}))


def whole_plan_worker(nodes: int) -> None:
    """The 20 systems' plan as a fresh solve worker makes it (plan_outcome), the parts one after another: prints
    a JSON line of its CPU seconds and a digest of the plan but its solver report (which holds times)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from decompose_phases import bench_systems

    from tessera.planner.contract import plan_outcome
    from tessera.planner.nodes import NodePool, NodeState
    from tessera.planner.solve import PlannerOptions

    pool = NodePool(gpu=GPU, nodes=[NodeState(name=f"gpu-node-{n}", gpus=[{}] * 8) for n in range(nodes)])
    cpu = time.process_time()
    outcome = plan_outcome(bench_systems(SYSTEMS, True), pool, options=PlannerOptions(parallel_parts=1))
    spent = time.process_time() - cpu
    plan = outcome.plan.model_dump_json(exclude={"solver"}) if outcome.kind == "planned" else outcome.kind
    print(json.dumps({"plan_cpu": spent, "plan": hashlib.sha256(plan.encode()).hexdigest(),
                      "planner": str(Path(plan_outcome.__code__.co_filename).parent)}))


def importable_copy(tree: Path, into: Path) -> Path:
    """`tree`'s tessera/ with its planner/ as tessera/planner: what PYTHONPATH needs to import its planner."""
    shutil.copytree(tree / "tessera", into / "tessera")
    shutil.copytree(tree / "planner", into / "tessera" / "planner", ignore=shutil.ignore_patterns("__pycache__"))
    return into


def run_tree(path: Path | None, nodes: int, whole_plan: bool = False) -> dict:
    env = dict(os.environ, PYTHONSAFEPATH="1")
    if path is not None:
        env["PYTHONPATH"] = str(path)
    done = subprocess.run([sys.executable, "-P", __file__, "--worker", "--nodes", str(nodes)]
                          + (["--whole-plan"] if whole_plan else []), env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=Path, default=Path("/work/main"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--whole-plan", action="store_true")
    parser.add_argument("--worker", action="store_true")
    args = parser.parse_args()
    if args.worker:
        (whole_plan_worker if args.whole_plan else worker)(args.nodes)
        return
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as scratch:
        before = importable_copy(args.before, Path(scratch))
        plans: dict[str, list[dict]] = {"before": [], "after": []}
        for _ in range(args.rounds):
            runs["before"].append(run_tree(before, args.nodes))
            runs["after"].append(run_tree(None, args.nodes))
            if args.whole_plan:
                plans["before"].append(run_tree(before, args.nodes, whole_plan=True))
                plans["after"].append(run_tree(None, args.nodes, whole_plan=True))
    planners = {name: {r["planner"] for r in rs + plans[name]} for name, rs in runs.items()}
    assert not planners["before"] & planners["after"], f"both trees imported the same planner: {planners}"
    digests = {name: {json.dumps(r["digests"]) for r in rs} for name, rs in runs.items()}
    same = len(digests["before"] | digests["after"]) == 1
    medians = {name: [statistics.median(r["passes"][k] for r in rs) for k in range(2)] for name, rs in runs.items()}
    lines = [
        f"# Building the parts' models: this tree against {args.before}",
        "",
        f"`.venv/bin/python -P bench/milp_build_speed.py --before {args.before} --rounds {args.rounds} "
        f"--nodes {args.nodes}`: {SYSTEMS} systems with distinct demands on {args.nodes} nodes x 8 H100s, each "
        f"part's model built and loaded into HiGHS (solve._build), CPU seconds for all {SYSTEMS}, medians of "
        f"{args.rounds} subprocesses per tree, alternating.",
        "",
        "| pass | before CPU s | after CPU s | after / before |",
        "|---|---|---|---|",
    ]
    for k, name in enumerate(("first (a fresh worker)", "second (caches warm)")):
        b, a = medians["before"][k], medians["after"][k]
        lines.append(f"| {name} | {b:.2f} | {a:.2f} | {a / b:.2f} |")
    plans_same = True
    if args.whole_plan:
        b, a = (statistics.median(r["plan_cpu"] for r in plans[name]) for name in ("before", "after"))
        lines.append(f"| the whole plan (plan_outcome in a fresh process, parts one after another) | {b:.2f} | "
                     f"{a:.2f} | {a / b:.2f} |")
        plans_same = len({r["plan"] for rs in plans.values() for r in rs}) == 1
        lines += ["", "Every whole plan's CPU s: " + "; ".join(
            f"{name} " + ", ".join(f"{r['plan_cpu']:.2f}" for r in rs) for name, rs in plans.items()),
            "", f"The same plan (but the solver report's times) in every run of both trees: "
            f"{'yes' if plans_same else 'NO'}."]
    lines += [
        "",
        "Every run's passes (CPU s): " + "; ".join(
            f"{name} " + ", ".join("/".join(f"{p:.2f}" for p in r["passes"]) for r in rs)
            for name, rs in runs.items()),
        "",
        f"The same models in HiGHS (columns, rows, coefficients, bounds, in order) in every run of both trees: "
        f"{'yes' if same else 'NO'}.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    (ROOT / "bench" / "results" / "milp_build_speed.md").write_text(text)
    if not (same and plans_same):
        sys.exit("the trees built different models or plans")


if __name__ == "__main__":
    main()

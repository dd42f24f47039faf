"""Many systems on one pool: the joint solve (before) beside the decomposed one (after), in one run (issue 29 item 7).

5, 10 and 20 systems made from the three example systems (traffic-analysis,
social-media, ar-assistant, in turn), each with its own name, a namespace of
four (`team-0` to `team-3`) and its own demand (the example's times 1 to 5.5
in steps of a half, in a fixed shuffled order), planned on fresh pools of 16
and 100 nodes of 8 H100s (every GPU blank, as the operator's first plan of a
pool sees them), through the planner's contract (`plan_outcome`, what the
operator's solve worker calls).

Before: the planner of a git revision (default `main`, its planner/ folder
exported with git archive, as bench/planner_scale.py --baseline); after: this
tree's (default options: decomposed where the pool allows, joint fallback).
Each plan runs in a fresh process of its own, before and after alternating,
with the same time limit (default 120 s; the joint solve at 20 systems on 100
nodes needs more: the row says when the limit stopped it). Recorded: wall and
CPU seconds, GPUs and slices planned, the served share of the demand, how the
plan was made, and the outcome.

Run: .venv/bin/python -P bench/planner_many_systems.py [--systems 5 10 20] [--nodes 16 100] [--baseline main]
     [--time-limit 120]
Writes bench/results/planner_many_systems.{md,json}. With --copies every system is its example's demand in one
namespace (alike but for the name, as bench/operator_many_systems.py applies them: the planner solves a part once
for such systems): bench/results/planner_many_systems_copies.{md,json}.

--add-one SYSTEMS:NODES ... (e.g. --add-one 10:16 20:100): a re-plan instead. The
running plan: SYSTEMS systems planned by this tree on a fresh pool of NODES
nodes (once, shared by both sides); the pool then as that plan left it (each
GPU with its planned layout). One more system (the next of the sequence) is
added, and the SYSTEMS + 1 are re-planned with the plan in force as the
operator asks it when the change is another namespace's
(running_decide.protection): `current`, every running system's served
fraction as its floor and the nodes it runs on kept for it. Before: the baseline's
re-plan (joint); after: this tree's (incremental where it may keep parts).
Recorded beside the above: the running systems whose part (tasks, GPUs and
instances) the re-plan changed. Writes bench/results/planner_add_one.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import tessera.planner

if __name__ == "__main__" and sys.argv[1:2] == ["--one-plan"]:
    # Before any planner module loads: they come from the folder asked for (this one or a baseline's).
    tessera.planner.__path__[:] = [sys.argv[2]]

from tessera.planner.contract import plan_outcome
from tessera.planner.nodes import NodePool, NodeState
from tessera.planner.plan import Plan
from tessera.planner.solve import PlannerOptions
from tessera.planner.spec_file import load_systems

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from planner_scale import baseline_planner  # noqa: E402

EXAMPLES = ["traffic-analysis", "social-media", "ar-assistant"]
GPU = "H100-80GB"
GPUS_PER_NODE = 8
NAMESPACES = 4
FACTORS = [1.0, 3.5, 2.0, 5.0, 1.5, 4.0, 2.5, 5.5, 3.0, 4.5]  # demand x the example's, in this order


def many_systems(count: int, copies: bool = False) -> list:
    """`count` systems of the examples in turn, each with its own name, namespace and demand; `copies`: each the
    example's demand in one namespace (alike but for the name, as bench/operator_many_systems.py applies them)."""
    examples = [s for name in EXAMPLES for s in load_systems(ROOT / "examples" / f"{name}.yaml")]
    made = []
    for i in range(count):
        example = examples[i % len(examples)]
        made.append(example.model_copy(update={
            "name": f"bench/{example.name}-{i}" if copies else f"team-{i % NAMESPACES}/{example.name}-{i}",
            "demand_rps": example.demand_rps * (1.0 if copies else FACTORS[i % len(FACTORS)])}))
    return made


def fresh_pool(nodes: int) -> NodePool:
    return NodePool(gpu=GPU, nodes=[NodeState(name=f"gpu-node-{n}", gpus=[{}] * GPUS_PER_NODE)
                                    for n in range(nodes)])


def one_plan(systems: int, nodes: int, limit: float, running: Path | None = None, keep: Path | None = None,
             copies: bool = False) -> dict:
    """One plan of `systems` on a fresh pool, or (with `running`, a plan in force of all but the last) their
    re-plan on the pool that plan left; `keep`: where the plan is written."""
    demand = many_systems(systems, copies)
    pool, current, floors = fresh_pool(nodes), None, {}
    if running is not None:
        current = Plan.model_validate_json(running.read_text())
        pool, floors = running_pool(current, pool), {s.system: s.served_rps / s.demand_rps for s in current.systems}
    started, cpu = time.perf_counter(), time.process_time()
    outcome = plan_outcome(demand, pool, options=PlannerOptions(time_limit_s=limit), current=current,
                           running=floors)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    row = {"outcome": outcome.kind, "wall_s": wall, "cpu_s": cpu,
           "demand_rps": sum(s.demand_rps for s in demand),
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    plan = getattr(outcome, "plan", None)
    if plan is None:
        return {**row, "reason": getattr(outcome, "reason", "")}
    if keep is not None:
        keep.write_text(plan.model_dump_json())
    row = {**row, "gpus_used": plan.gpus_used, "slices_used": plan.slices_used,
           "served_rps": sum(s.served_rps for s in plan.systems),
           "method": getattr(plan.solver, "method", "joint"), "fallback": getattr(plan.solver, "fallback", None),
           "time_limited": plan.solver.time_limited}
    if current is not None:
        row["parts_changed"] = sum(part_of(plan, s.system) != part_of(current, s.system) for s in current.systems)
        row["servers_changed"] = sum(servers_of(plan, s.system) != servers_of(current, s.system)
                                     for s in current.systems)
    return row


def running_pool(plan: Plan, pool: NodePool) -> NodePool:
    """The pool as the plan left it (each GPU with its planned layout), its nodes kept for the systems on them."""
    layouts = {(g.node, g.device): dict(g.layout) for g in plan.gpus}
    kept: dict[str, set[str]] = {}
    for gpu in plan.gpus:
        kept.setdefault(str(gpu.node), set()).update(i.system for i in gpu.instances if i.system)
    return pool.model_copy(update={"nodes": [node.model_copy(update={
        "gpus": [layouts.get((node.name, device), {}) for device in range(len(node.gpus))],
        "kept_for": sorted(kept.get(node.name, set()))}) for node in pool.nodes]})


def servers_of(plan: Plan, system: str) -> Counter:
    """A system's replicas by (node, task, variant, MIG instance and batch): what its server Deployments run."""
    tasks = {t.task: t for t in plan.tasks if t.system == system}
    return Counter((g.node, i.task, tasks[i.task].variant, str(tasks[i.task].configs[i.config].segment),
                    tasks[i.task].configs[i.config].batch)
                   for g in plan.gpus for i in g.instances if i.system == system and i.task and i.config is not None)


def part_of(plan: Plan, system: str) -> tuple[list, list]:
    """A system's tasks and its instances by GPU, as plain data."""
    return ([t.model_dump() for t in plan.tasks if t.system == system],
            [(g.node, g.device, g.layout, slot, i.task, i.config) for g in plan.gpus
             for slot, i in enumerate(g.instances) if i.system == system])


def plan_in_process(planner_dir: Path, systems: int, nodes: int, limit: float, running: Path | None = None,
                    keep: Path | None = None, copies: bool = False) -> dict:
    """one_plan in a fresh process with the planner of `planner_dir`; `keep`: where its plan is written."""
    command = [sys.executable, "-P", str(Path(__file__).resolve()), "--one-plan", str(planner_dir), str(systems),
               str(nodes), repr(limit), str(running or ""), str(keep or ""), "copies" if copies else ""]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cells(run: dict) -> str:
    if "gpus_used" not in run:
        return f"{run['outcome']}: no plan | | | {run['wall_s']:.1f} | {run['cpu_s']:.1f}"
    served = run["served_rps"] / run["demand_rps"]
    limited = f" (time limit stopped {', '.join(run['time_limited'])})" if run["time_limited"] else ""
    return (f"{run['method']}{limited} | {run['gpus_used']} / {run['slices_used']} | {100 * served:.1f}% | "
            f"{run['wall_s']:.1f} | {run['cpu_s']:.1f}")


def _setting(rows: list[dict], label: str, limit: float) -> str:
    loads = ", ".join(f"{r['load_average']:.1f}" for r in rows)
    return (f"Before: {label}; after: this tree (default options). Time limit {limit:g} s per plan (HiGHS counts "
            f"wall time). Machine: {os.cpu_count()} cores shared with other work (1-minute load average at each "
            f"row: {loads}), Python {platform.python_version()}.")


def _notes(rows: list[dict], what: str) -> list[str]:
    """Each fallback's or failure's reason, `what` naming the row ({systems} and {nodes} filled in)."""
    return [f"- {what.format(**r)}, {run}: {r[run].get('fallback') or r[run]['reason']}"
            for r in rows for run in ("before", "after") if r[run].get("fallback") or r[run].get("reason")]


def markdown(rows: list[dict], label: str, limit: float, copies: bool = False) -> str:
    made = "alike but for their names (the examples' demand, one namespace)" if copies else \
        "names, namespaces and demands of their own"
    lines = [
        f"Systems made from the three examples ({made}) on fresh pools of "
        f"nodes x {GPUS_PER_NODE} {GPU}, through `plan_outcome`. {_setting(rows, label, limit)} CPU s: the plan's "
        f"process CPU time (what an idle core would take).",
        "",
        "| systems | nodes | run | how | GPUs / slices | served | wall s | CPU s | CPU after/before |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = r["after"]["cpu_s"] / max(r["before"]["cpu_s"], 1e-9)
        lines.append(f"| {r['systems']} | {r['nodes']} | before | {_cells(r['before'])} | |")
        lines.append(f"| {r['systems']} | {r['nodes']} | after | {_cells(r['after'])} | {ratio:.2f} |")
    lines += ["", *_notes(rows, "{systems} systems on {nodes} nodes")]
    return "\n".join(lines) + "\n"


def add_one_markdown(rows: list[dict], label: str, limit: float) -> str:
    lines = [
        f"One system added to a running plan (made by this tree, decomposed) on a pool of nodes x {GPUS_PER_NODE} "
        f"{GPU} as that plan left it; the re-plan as the operator asks it (plan in force, running floors, the "
        f"running systems' nodes kept for them), through `plan_outcome`. {_setting(rows, label, limit)} CPU s: the "
        f"re-plan's process CPU time. Parts changed: running systems whose tasks (figures included: loads, budgets) "
        f"or instances the re-plan changed; servers changed: those whose replicas per node, task, variant, MIG "
        f"instance and batch (what their server Deployments run) it changed. Peak MB: the re-plan process's peak "
        f"RSS (a fresh process, as the operator's solve worker is; imports and the plan in force included).",
        "",
        "| running + added | nodes | run | how | GPUs / slices | served | wall s | CPU s | parts changed | "
        "servers changed | peak MB | CPU after/before |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = r["after"]["cpu_s"] / max(r["before"]["cpu_s"], 1e-9)
        first = r["running"]
        lines.append(f"| {r['systems']} | {r['nodes']} | running plan | {_cells(first)} | | | | |")
        for run in ("before", "after"):
            lines.append(f"| {r['systems']} + 1 | {r['nodes']} | {run} | {_cells(r[run])} | "
                         f"{r[run].get('parts_changed', '')} | {r[run].get('servers_changed', '')} | "
                         f"{r[run].get('peak_rss_mb', 0):.0f} | {f'{ratio:.3f}' if run == 'after' else ''} |")
    lines += ["", *_notes(rows, "{systems} + 1 on {nodes} nodes")]
    return "\n".join(lines) + "\n"


def add_one(pairs: list[str], before: Path, label: str, limit: float, scratch: Path) -> None:
    rows = []
    for pair in pairs:
        systems, nodes = (int(n) for n in pair.split(":"))
        running = scratch / f"running-{systems}-{nodes}.json"
        row = {"systems": systems, "nodes": nodes, "load_average": os.getloadavg()[0],
               "running": plan_in_process(ROOT / "planner", systems, nodes, limit, keep=running)}
        row["before"] = plan_in_process(before, systems + 1, nodes, limit, running=running)
        row["after"] = plan_in_process(ROOT / "planner", systems + 1, nodes, limit, running=running)
        print(json.dumps(row), flush=True)
        rows.append(row)
    out = ROOT / "bench" / "results"
    (out / "planner_add_one.json").write_text(json.dumps(rows, indent=2))
    text = add_one_markdown(rows, label, limit)
    (out / "planner_add_one.md").write_text(text)
    print(text)


def one_plan_command(args: list[str]) -> None:
    """--one-plan PLANNER SYSTEMS NODES LIMIT [RUNNING] [KEEP] [copies]: one_plan's row printed."""
    running, keep = (Path(a) if a else None for a in (args[4:6] + ["", ""])[:2])
    copies = args[6:7] == ["copies"]
    print(json.dumps(one_plan(int(args[1]), int(args[2]), float(args[3]), running, keep, copies)))


def main() -> None:
    if sys.argv[1:2] == ["--one-plan"]:
        one_plan_command(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", type=int, nargs="+", default=[5, 10, 20])
    parser.add_argument("--nodes", type=int, nargs="+", default=[16, 100])
    parser.add_argument("--baseline", default="main", help="The git revision whose planner plans before.")
    parser.add_argument("--time-limit", type=float, default=120.0, help="Wall-clock limit per plan.")
    parser.add_argument("--copies", action="store_true",
                        help="Systems alike but for the name (each its example's demand, one namespace), as the "
                             "operator bench applies them; results planner_many_systems_copies.{md,json}.")
    parser.add_argument("--add-one", nargs="+", metavar="SYSTEMS:NODES",
                        help="Re-plans instead: one system added to a running plan of SYSTEMS on NODES nodes.")
    args = parser.parse_args()
    revision = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.baseline],
                              capture_output=True, text=True, check=True).stdout.strip()
    label = f"{args.baseline} {revision}"
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        before = baseline_planner(args.baseline, Path(scratch))
        if args.add_one:
            add_one(args.add_one, before, label, args.time_limit, Path(scratch))
            return
        for nodes in args.nodes:
            for systems in args.systems:
                row = {"systems": systems, "nodes": nodes, "load_average": os.getloadavg()[0],
                       "before": plan_in_process(before, systems, nodes, args.time_limit, copies=args.copies),
                       "after": plan_in_process(ROOT / "planner", systems, nodes, args.time_limit,
                                                copies=args.copies)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    name = "planner_many_systems_copies" if args.copies else "planner_many_systems"
    (out / f"{name}.json").write_text(json.dumps(rows, indent=2))
    text = markdown(rows, label, args.time_limit, args.copies)
    (out / f"{name}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

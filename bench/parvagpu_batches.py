"""Planning on real A100-80GB measurements with batches up to 128: what the wider grid buys.

Scenarios built from the ParvaGPU measurements (11 models profiled on every
MIG size x MPS degree 1-5 x batch 1-256 of an A100-80GB): each is planned
with the old grid (batches up to 32, MPS up to 4), with batches up to 128,
and with batches up to 128 and MPS up to 5, side by side in one run.
Profiles are the measured ones only (no estimate): a configuration the
measurements lack, or that ran out of memory there, is not planned.

Run: .venv/bin/python -P bench/parvagpu_batches.py [--time-limit 60]
Writes bench/results/parvagpu_batches.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from tessera.planner.contract import plan_outcome
from tessera.planner.measured import load_parvagpu_dir
from tessera.planner.model import Pool, SystemSpec
from tessera.planner.solve import PlannerOptions

ROOT = Path(__file__).resolve().parent.parent
MEASUREMENTS = ROOT.parent / "shared" / "data" / "parvagpu-a100-mig"
GPU = "A100-80GB"
GRIDS = {
    "batches <= 32, MPS <= 4": dict(batches=(1, 2, 4, 8, 16, 32), max_mps=4),
    "batches <= 128, MPS <= 4": dict(batches=(1, 2, 4, 8, 16, 32, 64, 128), max_mps=4),
    "batches <= 128, MPS <= 5": dict(batches=(1, 2, 4, 8, 16, 32, 64, 128), max_mps=5),
}


def _variant(name: str, accuracy: float, memory_gb: float) -> dict:
    return {"name": name, "accuracy": accuracy, "memory_gb": memory_gb}


# Accuracies: ImageNet top-1 (torchvision) and SQuAD v1.1 F1 (BERT-base); memory: a server process at its
# largest measured batch, rounded up. Demands are chosen to need a few GPUs.
SCENARIOS = {
    "question answering (BERT)": dict(
        pool=4, systems=[{"name": "qa", "slo": {"latency_ms": 2000}, "demand_rps": 1500,
                          "tasks": [{"name": "answer", "variants": [_variant("bert", 0.885, 9)]}]}]),
    "image classification (ResNet family, accuracy SLO 0.98)": dict(
        pool=4, systems=[{"name": "classify", "slo": {"latency_ms": 400, "accuracy": 0.98}, "demand_rps": 6000,
                          "tasks": [{"name": "label", "variants": [
                              _variant("resnet50", 0.7613, 5), _variant("resnet101", 0.7737, 7),
                              _variant("resnet152", 0.7831, 9)]}]}]),
    "photo pipeline (InceptionV3 -> BERT on 40% of photos)": dict(
        pool=6, systems=[{"name": "photos", "slo": {"latency_ms": 1500}, "demand_rps": 3000,
                          "tasks": [{"name": "tag", "variants": [_variant("inceptionv3", 0.7729, 6)]},
                                    {"name": "describe", "variants": [_variant("bert", 0.885, 9)]}],
                          "edges": [{"source": "tag", "target": "describe", "factor": 0.4}]}]),
}


def run(scenario: dict, measured, grid: dict, time_limit: float) -> dict:
    systems = [SystemSpec.model_validate(s) for s in scenario["systems"]]
    options = PlannerOptions(time_limit_s=time_limit, **grid)
    started, cpu = time.perf_counter(), time.process_time()
    outcome = plan_outcome(systems, Pool(gpu=GPU, gpus=scenario["pool"]), measured, options=options)
    row = {"outcome": outcome.kind, "wall_s": time.perf_counter() - started, "cpu_s": time.process_time() - cpu}
    plan = getattr(outcome, "plan", None)
    if plan is None:
        return {**row, "reason": outcome.reason}
    return {**row, "gpus_used": plan.gpus_used, "slices_used": plan.slices_used,
            "cost_proven": plan.solver.cost.proven if plan.solver.cost else False,
            "served": {s.system: s.served_rps / s.demand_rps for s in plan.systems},
            "configs": sorted({f"{t.variant} {c.segment} b{c.batch} x{c.replicas}" for t in plan.tasks
                               for c in t.configs}),
            "largest_batch": max((c.batch for t in plan.tasks for c in t.configs), default=0)}


def markdown(results: dict) -> str:
    lines = [f"ParvaGPU measurements (A100-80GB), measured profiles only; machine: {os.cpu_count()} shared cores, "
             f"load average {os.getloadavg()[0]:.1f}. Cost: GPUs / compute slices used; every cost proven unless "
             "marked.", "",
             "| scenario | pool | grid | outcome | GPUs | slices | largest batch | configurations | CPU s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, scenario in results.items():
        for grid, row in scenario["grids"].items():
            if "gpus_used" not in row:
                lines.append(f"| {name} | {scenario['pool']} | {grid} | {row['outcome']}: {row['reason']} | | | | | "
                             f"{row['cpu_s']:.1f} |")
                continue
            proven = "" if row["cost_proven"] else " (unproven)"
            lines.append(f"| {name} | {scenario['pool']} | {grid} | {row['outcome']} | {row['gpus_used']} | "
                         f"{row['slices_used']}{proven} | {row['largest_batch']} | {'; '.join(row['configs'])} | "
                         f"{row['cpu_s']:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=60.0)
    args = parser.parse_args()
    measured = load_parvagpu_dir(MEASUREMENTS)
    results = {}
    for name, scenario in SCENARIOS.items():
        results[name] = {"pool": scenario["pool"], "grids": {}}
        for grid_name, grid in GRIDS.items():
            row = run(scenario, measured, grid, args.time_limit)
            results[name]["grids"][grid_name] = row
            print(f"{name} / {grid_name}: {row.get('gpus_used', row['outcome'])} GPUs, "
                  f"{row.get('slices_used', '-')} slices, {row['cpu_s']:.1f} CPU s", flush=True)
    out = ROOT / "bench" / "results"
    (out / "parvagpu_batches.json").write_text(json.dumps(results, indent=2))
    (out / "parvagpu_batches.md").write_text(markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()

"""Is the planner's stage latency model (planner/latency.py) a p99 bound? Each example planned alone.

    .venv/bin/python -P bench/simulation_latency_model.py [--duration 300] [--headroom 0.1]

Each of the three examples is planned alone on 8 x H100-80GB (A+S+T, estimated
profiles) at 0.5x, 1x and 2x its demand, and simulated at that demand under
steady Poisson arrivals for --duration seconds, with per-request random
balancing (the optimistic bound) and per-connection balancing (16
connections per task), batch latency lognormal with p99/p50 1.3 around the
profile. Side by side in one run: the planner's default (no queueing wait),
`--queueing` (the p99 queueing wait with fan-out bulks), and that with
estimates scaled to p99 by the simulation's own spread (`--queueing
--latency-spread 1.3`). Writes bench/results/simulation_latency_model.{json,md}:
simulated p99 stage and path latency against each plan's prediction; a
system a model cannot plan within its SLO has no rows there.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from tessera.planner.model import Pool
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.simulation.experiments import ModelCheckRow, check_latency_model
from tessera.planner.simulation.policies import Balancing, Policies
from tessera.planner.solve import PlannerOptions
from tessera.planner.spec_file import load_systems
from tessera.shipped import default_example_systems

RESULTS = Path(__file__).resolve().parent / "results"
MODELS = {"default": dict(queueing=False), "queueing": dict(queueing=True),
          "queueing, spread 1.3": dict(queueing=True, latency_spread=1.3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=300.0)
    parser.add_argument("--headroom", type=float, default=PlannerOptions().headroom)
    parser.add_argument("--name", default="simulation_latency_model")
    args = parser.parse_args()
    systems = [s for path in default_example_systems() for s in load_systems(path)]
    pool = Pool(gpu="H100-80GB", gpus=8)
    store = build_profile_store(systems, pool.gpu)
    policies = (Policies(balancing=Balancing.RANDOM), Policies(balancing=Balancing.PER_CONNECTION))
    rows = {model: check_latency_model(systems, pool, store, duration_s=args.duration, policies=policies,
                                       options=PlannerOptions(headroom=args.headroom, time_limit_s=30, **settings),
                                       progress=lambda _: print(".", end="", flush=True))
            for model, settings in MODELS.items()}
    print()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(
        {model: [r.model_dump() for r in found] for model, found in rows.items()}, indent=1))
    text = "\n".join(summary(rows, args) + [""] + table(rows)) + "\n"
    (RESULTS / f"{args.name}.md").write_text(text)
    print(text)


def summary(rows: dict[str, list[ModelCheckRow]], args: argparse.Namespace) -> list[str]:
    lines = [f"Simulated p99 against the plan's predicted latency (headroom {args.headroom}), steady Poisson demand, "
             f"{args.duration:.0f} s per run, batch latency lognormal p99/p50 1.3 around the profile. "
             "Ratio = simulated / predicted; above 1 the model was optimistic.", "",
             "| model | rows | median ratio | largest ratio | rows above 1.1 | paths above 1.1 |", "|---|---|---|---|---|---|"]
    for model, found in rows.items():
        ratios = [r.ratio for r in found]
        paths = [r for r in found if r.what.startswith("path")]
        lines.append(f"| {model} | {len(found)} | {statistics.median(ratios):.2f} | {max(ratios):.2f} | "
                     f"{sum(r > 1.1 for r in ratios)} | {sum(r.ratio > 1.1 for r in paths)} of {len(paths)} |")
    return lines


def table(rows: dict[str, list[ModelCheckRow]]) -> list[str]:
    keyed = {model: {key(r): r for r in found} for model, found in rows.items()}
    keys = list(dict.fromkeys(key(r) for found in rows.values() for r in found))
    lines = ["| system | load | balancing | stage/path | "
             + " | ".join(f"{model}: predicted ms | simulated p99 ms | ratio" for model in rows) + " |",
             "|---|---|---|---|" + "---|---|---|" * len(rows)]
    for k in keys:
        cells = [cell(keyed[model].get(k)) for model in rows]
        lines.append(f"| {k[0]} | {k[1]:g}x | {k[2]} | {k[3]} | " + " | ".join(cells) + " |")
    return lines


def key(r: ModelCheckRow) -> tuple[str, float, str, str]:
    return (r.system, r.load, r.balancing, r.what)


def cell(r: ModelCheckRow | None) -> str:
    return f"{r.predicted_ms:.1f} | {r.simulated_p99_ms:.1f} | {r.ratio:.2f}" if r else "no plan | - | -"


if __name__ == "__main__":
    main()

"""Is the planner's stage latency model (planner/latency.py) a p99 bound? Each example planned alone.

    .venv/bin/python -P bench/simulation_latency_model.py [--duration 300] [--headroom 0.1]

Each of the three examples is planned alone on 8 x H100-80GB (A+S+T, estimated
profiles) at 0.5x, 1x and 2x its demand, and simulated at that demand under
steady Poisson arrivals (the model's own assumption) for --duration seconds,
with per-request random balancing (the optimistic bound) and per-connection
balancing (16 connections per task). Writes
bench/results/simulation_latency_model.{json,md}: simulated p99 stage and path
latency against the plan's prediction.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tessera.cli import DEFAULT_EXAMPLES, EXAMPLES
from tessera.planner.model import Pool
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.simulation.experiments import check_latency_model
from tessera.planner.simulation.policies import Balancing, Policies
from tessera.planner.solve import PlannerOptions
from tessera.planner.spec_file import load_systems

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=300.0)
    parser.add_argument("--headroom", type=float, default=PlannerOptions().headroom)
    parser.add_argument("--name", default="simulation_latency_model")
    args = parser.parse_args()
    systems = [s for name in DEFAULT_EXAMPLES for s in load_systems(EXAMPLES / name)]
    pool = Pool(gpu="H100-80GB", gpus=8)
    store = build_profile_store(systems, pool.gpu)
    policies = (Policies(balancing=Balancing.RANDOM), Policies(balancing=Balancing.PER_CONNECTION))
    rows = check_latency_model(systems, pool, store, duration_s=args.duration, policies=policies,
                               options=PlannerOptions(headroom=args.headroom, time_limit_s=30),
                               progress=lambda _: print(".", end="", flush=True))
    print()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps([r.model_dump() for r in rows], indent=1))
    lines = [f"Simulated p99 vs the plan's predicted latency (headroom {args.headroom}), steady Poisson demand, "
             f"{args.duration:.0f} s per run, batch latency lognormal p99/p50 1.3 around the profile.", "",
             "| system | load | demand req/s | balancing | stage/path | predicted ms | simulated p99 ms | ratio |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r.system} | {r.load:g}x | {r.demand_rps:g} | {r.balancing} | {r.what} | {r.predicted_ms:.1f} | "
              f"{r.simulated_p99_ms:.1f} | {r.ratio:.2f} |" for r in rows]
    (RESULTS / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

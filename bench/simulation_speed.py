"""Simulation speed: simulated source requests per minute, the three examples together, solves excluded.

    .venv/bin/python -P bench/simulation_speed.py [--duration 1800] [--scale 4]

Plans traffic-analysis, social-media and ar-assistant together (A+S+T, 16 x
H100-80GB, demand x --scale), then times engine.run of that plan under --duration
seconds of the MMPP trace: both batchers, per-connection balancing, after one
short warm-up run that compiles the kernels. Writes bench/results/simulation_speed.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from tessera.shipped import default_example_systems
from tessera.planner.model import Pool
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.simulation import engine
from tessera.planner.simulation.entities import build_deployment
from tessera.planner.simulation.experiments import scaled
from tessera.planner.simulation.policies import Batcher, Policies
from tessera.planner.simulation.workloads import mmpp
from tessera.planner.solve import PlannerOptions, plan
from tessera.planner.spec_file import load_systems

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=1800.0)
    parser.add_argument("--scale", type=float, default=4.0, help="Demand multiple the plan serves.")
    args = parser.parse_args()
    systems = scaled([s for path in default_example_systems() for s in load_systems(path)], args.scale)
    pool = Pool(gpu="H100-80GB", gpus=16)
    store = build_profile_store(systems, pool.gpu)
    deployment = build_deployment(plan(systems, pool, store, options=PlannerOptions(time_limit_s=30)), systems, store)
    engine.run(deployment, mmpp(10))  # compile
    results = []
    for batcher in Batcher:
        started = time.perf_counter()
        output = engine.run(deployment, mmpp(args.duration), Policies(batcher=batcher))
        seconds = time.perf_counter() - started
        sources = sum(run.source_arrival.size for run in output.systems)
        subrequests = sum(record.arrival.size for run in output.systems for record in run.stages)
        results.append(dict(batcher=batcher.value, simulated_s=args.duration, wall_s=seconds,
                            source_requests=sources, stage_requests=subrequests,
                            source_requests_per_minute=60 * sources / seconds,
                            stage_requests_per_s=subrequests / seconds))
        print(results[-1])
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "simulation_speed.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

"""How long placement takes: 1,000 adapters without twin checks, and the twin check per server.

    .venv/bin/python -P bench/place_speed.py   -> bench/results/place_speed.json

Placement alone: median of 5 runs per strategy and model (1,000 adapters,
150 req/s). Twin check: tessera's servers of the 1,000-adapter qwen pool
simulated one after another in this process (one worker), wall clock per
server, and what a 50-server check costs at that rate.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

from tessera.planner.placement import STRATEGIES, ServerModel, check_placement, place
from tessera.planner.placement.scenarios import Scenario, problem_of

OUT = Path(__file__).resolve().parent / "results" / "place_speed.json"


def main() -> None:
    result: dict = {"placement_s": {}, "load_average": os.getloadavg()}
    for model_name in ("qwen", "llama"):
        problem = problem_of(Scenario(1000, 150.0, model_name))
        model = ServerModel(problem)
        for strategy in STRATEGIES:
            times, servers = [], 0
            for _ in range(5):
                started = time.perf_counter()
                servers = place(problem, strategy, model).servers_used
                times.append(time.perf_counter() - started)
            result["placement_s"][f"{model_name}/{strategy}"] = {"median": round(statistics.median(times), 4),
                                                                 "max": round(max(times), 4), "servers": servers}
        started = time.perf_counter()
        place(problem, "tessera")  # a cold ServerModel: profile loading included
        result["placement_s"][f"{model_name}/tessera, fresh model"] = round(time.perf_counter() - started, 4)
    problem = problem_of(Scenario(1000, 150.0, "qwen"))
    model = ServerModel(problem)
    placement = check_placement(place(problem, "tessera", model), problem.adapters, model.profile, problem.bound)
    walls = [s.twin.wall_s for s in placement.servers]
    per_server = statistics.mean(walls)
    result["twin_check"] = {
        "servers": len(walls), "wall_s_per_server": [round(w, 2) for w in walls],
        "mean_s_per_server": round(per_server, 2),
        "arrivals_per_server_hour": [round(s.rate_rps * 3600) for s in placement.servers],
        "fifty_servers_one_worker_s": round(50 * per_server, 1),
        "fifty_servers_two_workers_s": round(25 * per_server, 1),
        "load_average_after": os.getloadavg(),
    }
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

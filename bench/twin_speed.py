"""Speed and memory of the twin on the heaviest real configuration.

384 adapters, rate mix 1.6/0.8/0.4 req/s, a 3600 s hour, A_max=16, max rank 32,
960,714 arrivals (the real run's count), outstanding cap 26,000: hundreds
running and ~26k waiting. Writes bench/results/twin_speed.json.

    .venv/bin/python -P bench/twin_speed.py
"""

import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

from tessera.planner.twin.profile import load_profile
from tessera.planner.twin.sim import ServerConfig, simulate
from tessera.planner.twin.workload import Workload


def main() -> None:
    prof = load_profile("qwen")
    k = np.arange(384)
    w = Workload(ranks=np.array([8, 16, 32])[k % 3], rates=np.array([1.6, 0.8, 0.4])[k % 3],
                 duration_s=3600.0, n_arrivals=960_714)
    cfg = ServerConfig(max_loras=16, max_rank=32, outstanding_cap=26_000)
    # warm the numba cache/JIT on a tiny run so compile time is not counted
    simulate(Workload(ranks=np.array([16]), rates=np.array([1.0]), duration_s=10), prof, ServerConfig(1))
    walls, cpus = [], []
    for seed in range(3):
        t0, c0 = time.perf_counter(), time.process_time()
        res = simulate(w, prof, cfg, seed=seed)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out = {
        "config": "384 adapters, 1.6/0.8/0.4 req/s, A_max=16, max rank 32, 3600 s, 960714 arrivals, cap 26000",
        "arrivals": res.arrivals, "finished": res.finished, "dropped": res.dropped,
        "mean_running": res.mean_running, "max_running": res.max_running, "mean_waiting": res.mean_waiting,
        "max_waiting": res.max_waiting, "steps": res.steps, "throughput_tok_s": res.throughput_tok_s,
        "wall_s": walls, "wall_s_median": float(np.median(walls)),
        "speedup_x_realtime": 3600.0 / float(np.median(walls)),
        "cpu_s": cpus, "speedup_x_realtime_cpu": 3600.0 / float(np.median(cpus)),
        "engine": __import__("os").environ.get("TESSERA_TWIN_ENGINE", "auto (C when a compiler exists)"),
        "load_avg_1min": __import__("os").getloadavg()[0],
        "peak_rss_mb_process": peak_mb,
    }
    Path(__file__).parent.joinpath("results").mkdir(exist_ok=True)
    Path(__file__).parent.joinpath("results", "twin_speed.json").write_text(json.dumps(out, indent=2))
    json.dump(out, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()

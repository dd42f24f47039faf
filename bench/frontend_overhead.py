"""The frontend's added latency per hop, side by side with a direct client, against a minimal stub backend.

    .venv/bin/python -P bench/frontend_overhead.py [--seconds 4] [--rates 500,1000,2000]

Starts the stub backend (bench/frontend_load.py: a bare asyncio protocol, so
the backend is not what saturates) and two real `tessera frontend` processes,
one serving a one-task system and one a chain of three tasks (each task a
hop to the stub), each pinned to one core with taskset (--frontend-core);
the stub and the load generator share the other core. At each rate, Poisson
arrivals open-loop for --seconds go to the stub directly, through the 1-hop
and through the 3-hop frontend, in turn, so the three see the same machine
(its load average is reported); before them, 1,000 requests one at a time
on one connection (no queueing: the frontend's own added latency). Added latency = through the frontend -
direct, per percentile; per hop = added / hops. Then the most requests/s per
core: closed loop (64 clients) against each frontend, as wall-clock rate and
as requests per CPU-second the frontend used (what one core of its own
would carry; the wall-clock rate depends on what else the machine runs);
and the frontend's memory (RSS, peak). Writes bench/results/frontend_overhead.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frontend_load import closed_loop, cpu_seconds, one_at_a_time, open_loop, rss_mib, wait_port

RESULTS = Path(__file__).resolve().parent / "results"
LOAD = Path(__file__).resolve().parent / "frontend_load.py"


def chain_config(name: str, hops: int, stub_port: int) -> dict:
    tasks = [f"t{i}" for i in range(hops)]
    return {"system": name, "sloMilliseconds": 1000, "hopMilliseconds": 0,
            "settings": {"maxInFlight": 4096},
            "tasks": [{"name": t, "configurations": [{"name": "stub", "weight": 1, "singleMilliseconds": 0,
                                                      "url": f"http://127.0.0.1:{stub_port}/v2/models/stub/infer"}]}
                      for t in tasks],
            "edges": [{"source": a, "target": b} for a, b in zip(tasks, tasks[1:])]}


def percentiles(latency: np.ndarray) -> dict[str, float]:
    ok = latency[~np.isnan(latency)]
    return {"p50_ms": float(np.percentile(ok, 50) * 1e3), "p99_ms": float(np.percentile(ok, 99) * 1e3),
            "failed": int(np.isnan(latency).sum()), "count": int(latency.size)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rates", default="500,1000,2000")
    parser.add_argument("--frontend-core", type=int, default=1)
    parser.add_argument("--client-core", type=int, default=0)
    parser.add_argument("--output", default="frontend_overhead")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    os.sched_setaffinity(0, {args.client_core})
    started_load = os.getloadavg()
    folder = Path(tempfile.mkdtemp(prefix="frontend-bench-"))
    processes = []

    def spawn(command: list[str], core: int, log: str) -> subprocess.Popen:
        handle = open(folder / log, "wb")
        process = subprocess.Popen(["taskset", "-c", str(core), *command], stdout=handle, stderr=subprocess.STDOUT)
        processes.append(process)
        return process

    try:
        stub_port, one_port, three_port = 18700, 18701, 18703
        spawn([sys.executable, "-P", str(LOAD), "stub", str(stub_port)], args.client_core, "stub.log")
        frontends = {}
        for hops, port in ((1, one_port), (3, three_port)):
            config = folder / f"hops{hops}.yaml"
            config.write_text(yaml.safe_dump(chain_config(f"hops{hops}", hops, stub_port)))
            frontends[hops] = spawn([sys.executable, "-P", "-m", "tessera", "frontend", str(config), "--host",
                                     "127.0.0.1", "--port", str(port)], args.frontend_core, f"hops{hops}.log")
        for port in (stub_port, one_port, three_port):
            wait_port(port)
        targets = {"direct": (stub_port, "/v2/models/stub/infer"), "1 hop": (one_port, "/v2/models/hops1/infer"),
                   "3 hops": (three_port, "/v2/models/hops3/infer")}
        for port, path in targets.values():  # warm-up: connections, first-call costs
            asyncio.run(open_loop(port, path, 200, 200, seed=99))
        alone = {name: percentiles(asyncio.run(one_at_a_time(port, path, 1000)))
                 for name, (port, path) in targets.items()}
        for hops, name in ((1, "1 hop"), (3, "3 hops")):
            for q in ("p50_ms", "p99_ms"):
                alone[name][f"added_{q}_per_hop"] = (alone[name][q] - alone["direct"][q]) / hops
        rows = []
        for rate in rates:
            row: dict = {"rate_rps": rate}
            for name, (port, path) in targets.items():
                row[name] = percentiles(asyncio.run(open_loop(port, path, rate, int(rate * args.seconds),
                                                              seed=int(rate))))
            for hops, name in ((1, "1 hop"), (3, "3 hops")):
                for q in ("p50_ms", "p99_ms"):
                    row[name][f"added_{q}_per_hop"] = (row[name][q] - row["direct"][q]) / hops
            rows.append(row)
            print(json.dumps(row), flush=True)
        most, per_core = {}, {}
        for name, (port, path) in targets.items():
            process = {"1 hop": frontends[1], "3 hops": frontends[3]}.get(name)
            cpu_before = cpu_seconds(process.pid) if process else 0.0
            most[name], answered = asyncio.run(closed_loop(port, path, 64, args.seconds))
            if process:
                # requests per CPU-second of the frontend: its rate on a core of its own, whatever else runs
                per_core[name] = answered / (cpu_seconds(process.pid) - cpu_before)
        memory = {f"{hops} hop{'s' if hops > 1 else ''}": rss_mib(process.pid) for hops, process in frontends.items()}
        result = {"one_at_a_time": alone, "rates": rows, "max_rps_closed_loop_64": most, "rps_per_frontend_cpu_second": per_core, "frontend_memory_mib": memory,
                  "load_average_before": started_load, "load_average_after": os.getloadavg(),
                  "cpus": os.cpu_count(), "seconds_per_run": args.seconds,
                  "frontend_core": args.frontend_core, "client_core": args.client_core}
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=10)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.output}.json").write_text(json.dumps(result, indent=2))
    (RESULTS / f"{args.output}.md").write_text(markdown(result))
    print(markdown(result))


def markdown(result: dict) -> str:
    lines = ["| rate req/s | direct p50 / p99 ms | 1 hop p50 / p99 ms | 3 hops p50 / p99 ms "
             "| added per hop, 1 hop: p50 / p99 ms | added per hop, 3 hops: p50 / p99 ms |",
             "|---|---|---|---|---|---|"]
    for row in result["rates"]:
        cells = [f"{row[n]['p50_ms']:.2f} / {row[n]['p99_ms']:.2f}" for n in ("direct", "1 hop", "3 hops")]
        added = [f"{row[n]['added_p50_ms_per_hop']:.2f} / {row[n]['added_p99_ms_per_hop']:.2f}"
                 for n in ("1 hop", "3 hops")]
        lines.append(f"| {row['rate_rps']:.0f} | " + " | ".join(cells + added) + " |")
    alone = result["one_at_a_time"]
    lines.insert(0, "One request at a time (1,000 on one connection, no queueing): p50 / p99 ms direct "
                 f"{alone['direct']['p50_ms']:.3f} / {alone['direct']['p99_ms']:.3f}; added per hop, 1 hop "
                 f"{alone['1 hop']['added_p50_ms_per_hop']:.3f} / {alone['1 hop']['added_p99_ms_per_hop']:.3f}, "
                 f"3 hops {alone['3 hops']['added_p50_ms_per_hop']:.3f} / {alone['3 hops']['added_p99_ms_per_hop']:.3f}"
                 ".\n\nOpen loop, Poisson arrivals:\n")
    most = result["max_rps_closed_loop_64"]
    lines += ["", "Most req/s, closed loop with 64 clients (the frontend on one core): "
              + ", ".join(f"{name} {value:.0f}" for name, value in most.items()) + "; requests per CPU-second "
              "of the frontend (its rate on a core of its own): "
              + ", ".join(f"{name} {value:.0f}" for name, value in result["rps_per_frontend_cpu_second"].items())
              + ".",
              "Frontend memory (MiB): " + ", ".join(f"{k}: RSS {v['VmRSS']:.0f}, peak {v['VmHWM']:.0f}"
                                                     for k, v in result["frontend_memory_mib"].items()) + ".",
              f"Load average before / after: {', '.join(f'{x:.1f}' for x in result['load_average_before'])} / "
              f"{', '.join(f'{x:.1f}' for x in result['load_average_after'])} on {result['cpus']} CPUs.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()

"""The simulator against a real Seldon MLServer with adaptive batching on this machine's CPU.

The model's cost is a sleep of a + b*n ms for a batch of n (tests/support/sleep_runtime.py). MLServer
adds its own work per request (HTTP, JSON, handing the batch to its worker process and back), 10-50 ms
on this shared machine and outside the model's cost, as network hops are outside tessera's profiles:
the simulator's `hop_ms` takes it, measured on the idle server before any load (single requests,
which wait the batching delay and then cost a + b). Then Poisson arrivals at three loads go to the
server open-loop, and the simulator replays the same send times through one replica with the same
batch size, batching delay and worker count, and a batch latency of a + b*n (no lognormal spread: a
sleep has none worth modelling).
"""

import numpy as np
import pytest

from support.mlserver_sleep import mlserver_sleep  # noqa: F401 (the fixture)
from simulation.open_loop import send_at

from tessera.planner.simulation import engine
from tessera.planner.simulation.entities import single_server
from tessera.planner.simulation.policies import Batcher, Dispatch, Policies
from tessera.planner.simulation.workloads import constant

# Slow enough that MLServer's own CPU work stays small beside the model's cost (at 40 + 8n ms and a
# 100 ms delay the measured p50 ran 15% above the simulated one at 0.3 and 0.45 of capacity).
A_MS, B_MS = 80.0, 16.0
MAX_BATCH = 8
MAX_BATCH_TIME_S = 0.200
CAPACITY_RPS = MAX_BATCH / ((A_MS + B_MS * MAX_BATCH) / 1000)  # one worker, full batches: 38 req/s
# Loads as fractions of the full-batch capacity. On this shared 2-core machine (load average 10-13
# while these were chosen) the server stalls for 0.5-0.8 s now and then, from other work on the
# cores, and such a stall in a run of 80 requests sets its p99; above about half the capacity the
# real server also queues more than the simulation (see docs/serving-simulation.md). So the loads
# stay below half, and each is run REPEATS times, compared on the median of the runs' percentiles.
LOADS = (0.15, 0.3, 0.45)
REQUESTS_PER_LOAD = 80
REPEATS = 3
TOLERANCE = 0.15


MLSERVER = Policies(batcher=Batcher.TIMER, dispatch=Dispatch.ROUND_ROBIN, p99_over_p50=1.0)
PROBES = 7


def _request_overhead_ms(url: str) -> float:
    """What a single request on the idle server takes beyond the batching delay and the model's a + b."""
    single_ms = [1e3 * send_at(url, np.zeros(1)).latency_s[0] for _ in range(PROBES)]
    return float(np.median(single_ms)) - 1e3 * MAX_BATCH_TIME_S - (A_MS + B_MS)


def _simulated_latency(sent_s: np.ndarray, overhead_ms: float) -> np.ndarray:
    latency_s = (A_MS + B_MS * np.arange(MAX_BATCH + 1)) / 1000
    server = single_server(MAX_BATCH, processes=1, batching_delay_s=MAX_BATCH_TIME_S, latency_s=latency_s)
    output = engine.run(server, constant(sent_s[-1] + 1), MLSERVER.model_copy(update={"hop_ms": overhead_ms}),
                        source_arrivals={"server": sent_s})
    return output.systems[0].latency


def _poisson_times(rate_rps: float, count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.exponential(1 / rate_rps, count))


def test_simulated_p50_and_p99_are_within_15_percent_of_a_real_mlserver(mlserver_sleep):  # noqa: F811
    server = mlserver_sleep(a_ms=A_MS, b_ms=B_MS, workers=1, max_batch_size=MAX_BATCH,
                            max_batch_time_s=MAX_BATCH_TIME_S)
    send_at(server.infer_url, np.linspace(0, 1, 10))  # warm up: connections, the worker's first batch
    overhead_ms = _request_overhead_ms(server.infer_url)
    rows = []
    for index, load in enumerate(LOADS):
        real, sim = [], []
        for repeat in range(REPEATS):
            due = _poisson_times(load * CAPACITY_RPS, REQUESTS_PER_LOAD, seed=REPEATS * index + repeat)
            measured = send_at(server.infer_url, due)
            real.append(np.percentile(measured.latency_s, (50, 99)) * 1e3)
            sim.append(np.percentile(_simulated_latency(measured.sent_s, overhead_ms), (50, 99)) * 1e3)
        for column, q in enumerate((50, 99)):
            rows.append((load, q, np.median([r[column] for r in real]), np.median([s[column] for s in sim])))
    table = f"request overhead on the idle server: {overhead_ms:.1f} ms\n"
    table += "\n".join(f"load {load:.2f} p{q}: measured {real:.1f} ms, simulated {sim:.1f} ms ({sim / real - 1:+.1%})"
                      for load, q, real, sim in rows)
    print(table)
    for load, q, real, sim in rows:
        assert sim == pytest.approx(real, rel=TOLERANCE), table

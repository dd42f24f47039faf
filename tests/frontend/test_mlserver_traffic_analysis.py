"""End to end on this machine: a real `tessera frontend` before three real MLServers in traffic analysis' shape.

object-detection answers a list of cars and of faces per frame; split edges
send one request per car to car-classification and per face to
facial-recognition (MLServer with adaptive batching), and the response
gathers both. Under a steady load every request is answered in time; under
overload the detector queues, and requests whose budget left after it cannot
cover a classifier's batch of one are dropped early. The frontend's counters
match what the clients saw, outcome by outcome.
"""

import asyncio
import re
from collections import Counter

import aiohttp
import numpy as np
import pytest

from support.frontend_process import start_frontend, write_config
from support.mlserver_sleep import SleepServerConfig, start_sleep_server
from frontend.harness import ONE_ROW

CARS, FACES = 3, 1
SLO_MS = 400
SERVERS = {
    "object-detection": SleepServerConfig(a_ms=20, b_ms=0, model_name="detector",
                                          item_outputs=(("cars", CARS), ("faces", FACES))),
    "car-classification": SleepServerConfig(a_ms=5, b_ms=2, max_batch_size=8, max_batch_time_s=0.005,
                                            model_name="cars"),
    "facial-recognition": SleepServerConfig(a_ms=5, b_ms=2, max_batch_size=8, max_batch_time_s=0.005,
                                            model_name="faces"),
}
SINGLE_MS = {"object-detection": 20, "car-classification": 7, "facial-recognition": 7}
EDGES = [{"source": "object-detection", "target": "car-classification", "mode": "split", "splitOutput": "cars"},
         {"source": "object-detection", "target": "facial-recognition", "mode": "split", "splitOutput": "faces"}]


@pytest.fixture(scope="module")
def system(tmp_path_factory):
    folder = tmp_path_factory.mktemp("traffic")
    servers = {task: start_sleep_server(folder / task, config, wait_ready=False) for task, config in SERVERS.items()}
    try:
        for server in servers.values():
            server.wait_ready()
        config = write_config(folder / "frontend.yaml", {
            "system": "traffic-analysis", "sloMilliseconds": SLO_MS, "hopMilliseconds": 2,
            "tasks": [{"name": task, "configurations": [{"name": "cpu", "url": server.infer_url, "weight": 1,
                                                         "singleMilliseconds": SINGLE_MS[task]}]}
                      for task, server in servers.items()],
            "edges": EDGES})
        frontend = start_frontend(config, folder / "frontend.log")
        try:
            yield frontend
        finally:
            frontend.stop()
    finally:
        for server in servers.values():
            server.stop()


def send(url: str, rate_rps: float, count: int, seed: int) -> list[tuple[int, str, dict]]:
    """Open-loop Poisson arrivals; per request the status, the outcome or drop header and the body."""
    due = np.cumsum(np.random.default_rng(seed).exponential(1 / rate_rps, count))

    async def main():
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            async def one(at: float):
                await asyncio.sleep(at)
                async with session.post(url, json=ONE_ROW) as response:
                    body = await response.json()
                    label = response.headers.get("Tessera-Outcome") or response.headers.get("Tessera-Dropped", "")
                    return response.status, label, body

            return await asyncio.gather(*(one(float(t)) for t in due))

    return asyncio.run(main())


def counters(metrics: str) -> Counter:
    found = Counter()
    for outcome, reason, value in re.findall(
            r'tessera_frontend_requests_total\{outcome="(\w+)",reason="(\w*)",system="traffic-analysis"\} (\S+)',
            metrics):
        found[(outcome, reason)] = int(float(value))
    return found


def test_each_frame_is_split_per_car_and_face_and_the_frontend_counts_what_clients_saw(system):
    warm = send(system.infer_url, 5, 5, seed=1)  # the servers' first requests pay their start-up
    steady = send(system.infer_url, 8, 40, seed=2)
    overload = send(system.infer_url, 150, 300, seed=3)

    status, _, answer = steady[0]
    assert status == 200
    shapes = {o["name"]: o["shape"] for o in answer["outputs"]}
    assert shapes == {"car-classification.batch_size": [CARS, 1], "facial-recognition.batch_size": [FACES, 1]}
    assert Counter((s, label) for s, label, _ in steady)[(200, "ok")] >= 36  # 90%: a contended machine stalls

    seen = Counter((s, label) for s, label, _ in warm + steady + overload)
    assert seen[(503, "deadline")] > 0, seen  # overload: the doomed are dropped early
    dropped = [body["error"] for s, _, body in overload if s == 503]
    assert all("dropped early before task" in e for e in dropped)
    assert set(seen) <= {(200, "ok"), (200, "late"), (503, "deadline")}, seen

    counted = counters(system.metrics())
    assert counted == Counter({("ok", ""): seen[(200, "ok")], ("late", ""): seen[(200, "late")],
                               ("dropped", "deadline"): seen[(503, "deadline")]}) - Counter()

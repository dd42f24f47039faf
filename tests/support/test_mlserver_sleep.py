"""The sleep-model MLServer fixture itself: it serves, it costs a + b*n, it stops what it started."""

import json
import time
import urllib.request

from support.mlserver_sleep import group_members, mlserver_sleep  # noqa: F401 (the fixture)


def infer(url: str, rows: int) -> tuple[dict, float]:
    body = json.dumps({"inputs": [{"name": "x", "shape": [rows, 1], "datatype": "FP32",
                                   "data": [0.0] * rows}]}).encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read()), time.perf_counter() - started


def test_sleep_server_runs_a_batch_in_a_plus_b_n_and_reports_its_size(mlserver_sleep):
    server = mlserver_sleep(a_ms=50, b_ms=5, workers=1, max_batch_size=4, max_batch_time_s=0.001)
    infer(server.infer_url, 1)  # first request pays the worker's start-up
    answer, seconds = infer(server.infer_url, 10)
    batch_size = next(o for o in answer["outputs"] if o["name"] == "batch_size")
    assert batch_size["data"] == [10] * 10
    assert 0.100 <= seconds < 0.100 * 1.5


def test_stopping_the_server_ends_its_whole_process_group(mlserver_sleep):
    server = mlserver_sleep(a_ms=1, b_ms=0, workers=1)
    group = server.process.pid
    assert len(group_members(group)) >= 2  # the server and its worker
    server.stop()
    assert server.process.poll() is not None
    assert group_members(group) == [], "a process of the server's group outlived stop()"

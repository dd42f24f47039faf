"""The solver worker: a real solve in a separate process, stopped on cancel or past its caps."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tessera.operator.solver import SolveRequest, SolverWorker
from tessera.planner.model import Pool
from tessera.planner.solve import PlannerOptions
from tessera.planner.spec_file import load_systems

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def worker():
    started = SolverWorker(memory_mb=2048)
    started.start()
    yield started
    started.stop()


def _request(example: str = "single-model.yaml", time_limit_s: float = 60) -> SolveRequest:
    return SolveRequest(systems=load_systems(EXAMPLES / example), pool=Pool(gpu="H100-80GB", gpus=8),
                        options=PlannerOptions(time_limit_s=time_limit_s))


def test_a_solve_in_the_worker_returns_the_planners_plan(worker):
    outcome = worker.solve(_request(), threading.Event())
    assert outcome.planned, outcome.message
    assert outcome.plan.fully_served and outcome.plan.gpus_used >= 1


def test_a_cancelled_solve_stops_at_once_and_the_next_one_runs(worker):
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    started = time.monotonic()
    outcome = worker.solve(_request("traffic-analysis.yaml"), cancel)
    assert outcome.kind == "cancelled"
    assert time.monotonic() - started < 5
    assert worker.solve(_request(), threading.Event()).planned


def test_a_solve_past_its_memory_cap_is_stopped():
    small = SolverWorker(memory_mb=1)
    try:
        outcome = small.solve(_request(), threading.Event())
    finally:
        small.stop()
    assert outcome.kind == "failed" and "memory cap" in outcome.message


def test_a_spec_without_profiles_is_bad_input_not_a_failure(worker):
    request = _request()
    variant = request.systems[0].tasks[0].variants[0]
    bare = variant.model_copy(update={"gflops": None, "params_millions": None})
    task = request.systems[0].tasks[0].model_copy(update={"variants": [bare]})
    request.systems = [request.systems[0].model_copy(update={"tasks": [task]})]
    outcome = worker.solve(request, threading.Event())
    assert outcome.kind == "bad-input" and "no profiles" in outcome.message

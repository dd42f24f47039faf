"""The profiler against a real Open Inference Protocol server: Seldon MLServer on loopback.

The served model sleeps A + B x n ms for a batch of n (tests/support), so the
expected batch latency is A + B x n and the expected throughput of W workers
is W x n / (A + B x n), whatever else the shared machine is doing. One server
(W workers, server-side batching off as docs/profiler.md asks of a server
being profiled, failing with an out-of-memory message at FAIL_AT rows) is
shared by the tests of this module; the tests that need another server start
their own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest
from support.mlserver_sleep import SleepServerConfig, mlserver_sleep, start_sleep_server  # noqa: F401

from tessera.profiler.results import ExitCode, FailureKind, SweepResult, Target
from tessera.profiler.sweep import Sweep, SweepSettings

A_MS, B_MS, WORKERS = 400.0, 20.0, 2
FAIL_AT = 8
TOLERANCE = 0.15
FAST = SweepSettings(ready_timeout_s=60, min_seconds=0.5, min_requests=6, warmup_requests_per_process=2)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    config = SleepServerConfig(a_ms=A_MS, b_ms=B_MS, workers=WORKERS, max_batch_size=1, max_batch_time_s=0.0,
                               fail_at_batch=FAIL_AT, fail_message="CUDA out of memory. Tried to allocate 2.00 GiB")
    started = start_sleep_server(tmp_path_factory.mktemp("mlserver"), config)
    yield started
    started.stop()


def target(*batches: int) -> Target:
    return Target(variant="sleep", gpu="A100-80GB", mig_profile="1g.10gb", mps=WORKERS, batches=batches)


def sweep(server, *batches: int, settings: SweepSettings = FAST, **options) -> Sweep:
    return Sweep(target=target(*batches), base_url=server.base_url, model=server.config.model_name,
                 settings=settings, **options)


def test_latency_and_throughput_match_the_models_cost(server):
    result = sweep(server, 1, 4, 16).run()
    assert result.failure is None
    assert [p.batch for p in result.points] == [1, 4, 16]
    for point in result.points:
        expected_ms = A_MS + B_MS * point.batch
        assert point.p50_ms == pytest.approx(expected_ms, rel=TOLERANCE), point
        assert point.throughput_rps == pytest.approx(WORKERS * point.batch * 1000 / expected_ms,
                                                     rel=TOLERANCE), point


def test_out_of_memory_at_one_batch_is_a_recorded_failure_and_the_sweep_stops(server, tmp_path):
    log = tmp_path / "termination-log"
    completed = subprocess.run(
        [sys.executable, "-P", "-m", "tessera.profiler.main", "run", "--target", target(1, FAIL_AT, 16).model_dump_json(),
         "--server", server.base_url, "--model", server.config.model_name, "--termination-log", str(log),
         "--min-seconds", "0.2", "--min-requests", "4"],
        capture_output=True, text=True, timeout=120)
    assert completed.returncode == ExitCode.OUT_OF_MEMORY, completed.stderr
    result = SweepResult.from_termination_message(log.read_text())
    assert result.failure.kind == FailureKind.OUT_OF_MEMORY and result.failure.batch == FAIL_AT
    assert "out of memory" in result.failure.message
    assert [p.batch for p in result.points] == [1]  # 16 was never tried
    assert json.loads(completed.stdout) == json.loads(log.read_text())


def test_a_deterministic_failure_is_not_retried_on_resume(server):
    failed = sweep(server, 1, FAIL_AT).run()
    assert failed.failure.kind == FailureKind.OUT_OF_MEMORY
    # resumed against no server at all: it returns at once with the recorded failure
    again = Sweep(target=failed.target, base_url="http://127.0.0.1:9", model="sleep", settings=FAST).run(failed)
    assert again == failed


def test_an_interrupted_sweep_resumes_from_its_last_completed_point(server):
    stop = threading.Event()

    def stop_after_first_point(result: SweepResult) -> None:
        if result.points:
            stop.set()

    interrupted = sweep(server, 1, 4, on_progress=stop_after_first_point, stop=stop).run()
    assert interrupted.failure.kind == FailureKind.INTERRUPTED
    assert [p.batch for p in interrupted.points] == [1]
    measured: list[SweepResult] = []
    resumed = sweep(server, 1, 4, on_progress=measured.append).run(
        SweepResult.from_termination_message(interrupted.termination_message()))
    assert resumed.failure is None
    assert resumed.points[0] == interrupted.points[0]  # kept, not measured again
    assert [p.batch for p in resumed.points] == [1, 4]


def test_a_server_that_never_becomes_ready_is_a_recorded_failure(mlserver_sleep):
    never = mlserver_sleep(load_delay_s=3600, wait_ready=False)
    settings = SweepSettings(ready_timeout_s=3, ready_poll_s=0.2)
    result = Sweep(target=target(1, 2), base_url=never.base_url, model="sleep", settings=settings).run()
    assert result.failure.kind == FailureKind.NOT_READY and result.points == ()
    assert result.exit_code == ExitCode.NOT_READY
    assert never.process.poll() is None  # it was up, only never ready


def test_a_server_that_merges_requests_into_larger_batches_is_caught(mlserver_sleep):
    merging = mlserver_sleep(a_ms=20, b_ms=1, workers=1, max_batch_size=4, max_batch_time_s=0.05)
    result = Sweep(target=target(2), base_url=merging.base_url, model="sleep", settings=FAST).run()
    assert result.failure.kind == FailureKind.BATCH_MISMATCH and result.failure.batch == 2
    assert result.exit_code == ExitCode.BATCH_MISMATCH

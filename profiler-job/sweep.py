"""The profiler's sweep: readiness, warm-up, then every batch size against a live server.

At batch size b, with k server processes (the MPS degree):
- latency: k closed-loop clients each send a request already batched to b and
  the next one when it returns, so every process is busy and none has a
  queue; p50 and p99 of those round trips are the batch latency of one
  process on a segment shared by k;
- throughput: 2k clients (at least twice the process count), so every
  process always has its next batch waiting; rows answered from the first
  send until enough have returned, per second of that window, is the
  segment's throughput (the requests still in flight then are not counted,
  so the processes' uneven finish does not count as idle time).
Every response must say the server ran at b: its first output has b rows and,
where the server reports it, its `batch_size` output is b (a server that
merges concurrent requests into larger batches would otherwise be profiled at
the wrong size).

Failures are deterministic and end the sweep with what was measured so far:
a server that is not ready by the deadline, an error or out of memory at one
batch size, a batch mismatch. Nothing is retried; a result that already
holds such a failure is returned as it is. A result from an interrupted run
resumes: its batches are not measured again.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from tessera.profiler.client import Connection, InferenceOutcome, InputSpec, ServerError
from tessera.profiler.results import DeviceIdentity, Failure, FailureKind, Point, SweepResult, Target

OUT_OF_MEMORY = re.compile(r"out of memory|outofmemory|\bOOM\b|CUDA_ERROR_OUT_OF_MEMORY|RESOURCE_EXHAUSTED",
                           re.IGNORECASE)


@dataclass(frozen=True)
class SweepSettings:
    ready_timeout_s: float = 600.0
    ready_poll_s: float = 0.5
    warmup_requests_per_process: int = 3
    min_requests: int = 12  # per phase and batch size
    min_seconds: float = 1.0  # per phase and batch size
    max_seconds: float = 60.0  # per phase and batch size, however few requests returned
    request_timeout_s: float = 300.0
    binary_tensors: bool = False  # send inputs with the binary tensor extension instead of JSON


class SweepStopped(Exception):
    """Raised inside a phase to end the sweep with a recorded failure."""

    def __init__(self, failure: Failure):
        super().__init__(failure.message)
        self.failure = failure


@dataclass
class Sweep:
    """One profiler run: a target, a server, and what is known so far."""

    target: Target
    base_url: str
    model: str
    settings: SweepSettings = SweepSettings()
    device: DeviceIdentity | None = None
    peak_memory_mb: Callable[[], float | None] = lambda: None
    on_progress: Callable[[SweepResult], None] = lambda result: None
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self, previous: SweepResult | None = None) -> SweepResult:
        if previous is not None and previous.target != self.target:
            raise ValueError("the result to resume is for another target: "
                             f"{previous.target.model_dump()} != {self.target.model_dump()}")
        if previous is not None and previous.failure and previous.failure.kind != FailureKind.INTERRUPTED:
            return previous  # deterministic: running it again would fail again
        result = SweepResult(target=self.target, device=self.device,
                             points=previous.points if previous else ())
        try:
            remaining = result.remaining_batches()
            if remaining:
                spec = self.wait_ready()
                self.warm_up(spec, remaining[0])
            for batch in remaining:
                result = result.model_copy(update={"points": (*result.points, self.measure(spec, batch))})
                self.on_progress(result)
        except SweepStopped as stopped:
            result = result.model_copy(update={"failure": stopped.failure})
        self.on_progress(result)
        return result

    @property
    def processes(self) -> int:
        return self.target.mps

    def check_interrupted(self, batch: int | None) -> None:
        if self.stop.is_set():
            raise SweepStopped(Failure.of(FailureKind.INTERRUPTED, "stopped before the sweep finished", batch))

    def wait_ready(self) -> InputSpec:
        connection = Connection(self.base_url, self.settings.request_timeout_s)
        deadline = time.monotonic() + self.settings.ready_timeout_s
        try:
            while not connection.is_ready(self.model):
                self.check_interrupted(None)
                if time.monotonic() >= deadline:
                    raise SweepStopped(Failure.of(
                        FailureKind.NOT_READY,
                        f"server at {self.base_url} (model {self.model!r}) not ready after "
                        f"{self.settings.ready_timeout_s:g} s"))
                time.sleep(self.settings.ready_poll_s)
            try:
                return InputSpec.from_metadata(connection.metadata(self.model))
            except (ServerError, ValueError, OSError) as error:
                raise SweepStopped(Failure.of(FailureKind.NOT_READY, f"model metadata unusable: {error}")) from None
        finally:
            connection.close()

    def warm_up(self, spec: InputSpec, batch: int) -> None:
        count = self.settings.warmup_requests_per_process * self.processes
        self.closed_loop(spec, batch, self.processes, min_requests=count, min_seconds=0.0)

    def measure(self, spec: InputSpec, batch: int) -> Point:
        latency, _ = self.closed_loop(spec, batch, self.processes)
        loaded, window_s = self.closed_loop(spec, batch, 2 * self.processes)
        seconds = np.array([o.latency_s for o in latency]) * 1000.0
        memory = self.peak_memory_mb()
        return Point(batch=batch, p50_ms=round(float(np.quantile(seconds, 0.5)), 3),
                     p99_ms=round(float(np.quantile(seconds, 0.99)), 3),
                     throughput_rps=round(sum(o.rows for o in loaded) / window_s, 3),
                     peak_memory_mb=None if memory is None else round(memory, 1),
                     requests=len(latency) + len(loaded))

    def closed_loop(self, spec: InputSpec, batch: int, concurrency: int, min_requests: int | None = None,
                    min_seconds: float | None = None) -> tuple[list[InferenceOutcome], float]:
        """`concurrency` clients each keep one request of `batch` rows in flight until enough returned.

        Returns the outcomes that had returned when enough had, and the seconds
        from the first send to then; answers still in flight then are dropped.
        """
        min_requests = self.settings.min_requests if min_requests is None else min_requests
        min_seconds = self.settings.min_seconds if min_seconds is None else min_seconds
        request = spec.request(batch, self.settings.binary_tensors)
        outcomes: list[InferenceOutcome] = []
        window: list = []  # (outcomes, seconds) when enough had returned
        lock, done = threading.Lock(), threading.Event()
        started = time.perf_counter()

        def enough() -> bool:
            elapsed = time.perf_counter() - started
            return (len(outcomes) >= min_requests and elapsed >= min_seconds) or elapsed >= self.settings.max_seconds

        def client() -> None:
            connection = Connection(self.base_url, self.settings.request_timeout_s)
            try:
                while not done.is_set() and not self.stop.is_set():
                    outcome = self.infer_checked(connection, request, batch)
                    with lock:
                        outcomes.append(outcome)
                        if not window and enough():
                            window.append((list(outcomes), time.perf_counter() - started))
                            done.set()
            except BaseException:
                done.set()  # one client's failure ends the phase for all
                raise
            finally:
                connection.close()

        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            futures = [pool.submit(client) for _ in range(concurrency)]
            errors = [f.exception() for f in futures]
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise first
        self.check_interrupted(batch)
        return window[0]

    def infer_checked(self, connection: Connection, request: tuple[bytes, dict[str, str]],
                      batch: int) -> InferenceOutcome:
        try:
            outcome = connection.infer(self.model, request)
        except ServerError as error:
            kind = FailureKind.OUT_OF_MEMORY if OUT_OF_MEMORY.search(error.message) else FailureKind.BATCH_FAILED
            raise SweepStopped(Failure.of(kind, str(error), batch)) from None
        except OSError as error:
            raise SweepStopped(Failure.of(FailureKind.BATCH_FAILED, f"connection to the server lost: {error}",
                                          batch)) from None
        ran_at = outcome.batch_seen if outcome.batch_seen is not None else outcome.rows
        if ran_at != batch:
            raise SweepStopped(Failure.of(
                FailureKind.BATCH_MISMATCH,
                f"sent batches of {batch}, the server ran {ran_at} (it merges or splits requests: profile it "
                f"with server-side batching off, {batch} rows per request)", batch))
        return outcome

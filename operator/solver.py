"""Solves in a worker process: time and memory caps, cancellation, a warm spare.

The MILP takes seconds to a minute and a few hundred MB; the kopf event loop
must never wait for it, and a solve whose inputs changed meanwhile must stop
at once. So every solve runs in a separate process (spawned: no inherited
threads or sockets), which the operator kills on cancel, on its wall-clock
cap, or when its resident memory passes the cap (read from /proc: an address
space rlimit would also count the solver threads' reserved stacks). One
worker is kept started and warm (its imports done), so a solve does not pay
the interpreter's start-up.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import threading
import time
from dataclasses import dataclass, field

from tessera.planner.features import Features
from tessera.planner.model import Pool, SystemSpec
from tessera.planner.plan import Plan
from tessera.planner.profiles import ProfileStore
from tessera.planner.solve import PlannerOptions

POLL_S = 0.05
PR_SET_PDEATHSIG = 1
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
WALL_GRACE_S = 30.0
"""Beyond the planner's own time limit: model building and extraction are not under its clock."""


@dataclass
class SolveRequest:
    systems: list[SystemSpec]
    pool: Pool
    options: PlannerOptions
    features: Features = field(default_factory=Features)
    current: Plan | None = None
    measured: ProfileStore | None = None
    """Profiles the cluster's profiler Jobs measured: trusted above given and estimated ones."""


@dataclass
class SolveOutcome:
    kind: str
    """planned | no-plan (infeasible even in part) | bad-input (profiles missing) | failed | cancelled."""
    plan: Plan | None = None
    message: str = ""
    seconds: float = 0.0

    @property
    def planned(self) -> bool:
        return self.kind == "planned"


def run_solve(request: SolveRequest) -> SolveOutcome:
    """The planner, from plain data to an outcome; runs inside the worker process."""
    from tessera.planner.profile_sources import build_profile_store
    from tessera.planner.solve import NoPlanError, plan

    started = time.perf_counter()
    try:
        store = build_profile_store(request.systems, request.pool.gpu, request.measured, batches=request.options.batches)
    except ValueError as error:
        return SolveOutcome("bad-input", message=str(error), seconds=time.perf_counter() - started)
    try:
        result = plan(request.systems, request.pool, store, request.features, request.options, request.current)
    except NoPlanError as error:
        # Until the planner's outcomes are typed, its time limit is told apart by its message.
        kind = "failed" if "time limit" in str(error) else "no-plan"
        return SolveOutcome(kind, message=str(error), seconds=time.perf_counter() - started)
    except Exception as error:  # the worker reports, the operator decides; nothing is deleted on failure
        return SolveOutcome("failed", message=f"{type(error).__name__}: {error}", seconds=time.perf_counter() - started)
    return SolveOutcome("planned", plan=result, seconds=time.perf_counter() - started)


def _die_with_parent() -> None:
    """A killed operator must not leave its solver running (Linux: PR_SET_PDEATHSIG)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _serve(connection) -> None:
    _die_with_parent()
    import tessera.planner.solve  # noqa: F401  (warm: imports done before the first request)

    while True:
        try:
            request = connection.recv()
        except EOFError:
            return
        connection.send(run_solve(request))


class SolveCancelled(Exception):
    """A solve was stopped because its inputs changed; the reconcile starts over."""


class SolverWorker:
    """One warm worker process at a time; `solve` blocks its calling thread, never the event loop."""

    def __init__(self, memory_mb: int) -> None:
        self.memory_bytes = memory_mb * 1024 * 1024
        self._context = multiprocessing.get_context("spawn")
        self._lock = threading.Lock()
        self._process = None
        self._connection = None
        self.peak_rss_bytes = 0

    def start(self) -> None:
        with self._lock:
            if self._process is None or not self._process.is_alive():
                self._spawn()

    def _spawn(self) -> None:
        parent, child = self._context.Pipe()
        self._process = self._context.Process(target=_serve, args=(child,), name="tessera-solver", daemon=True)
        self._process.start()
        child.close()
        self._connection = parent

    def _kill(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.join(timeout=5)
        if self._connection is not None:
            self._connection.close()
        self._process = self._connection = None

    def _rss_bytes(self) -> int:
        try:
            with open(f"/proc/{self._process.pid}/statm") as statm:
                return int(statm.read().split()[1]) * PAGE_BYTES
        except (OSError, IndexError, ValueError):
            return 0

    def solve(self, request: SolveRequest, cancel: threading.Event, on_wait=None) -> SolveOutcome:
        """Blocks until the worker answers or the solve is stopped; `on_wait` runs at every poll."""
        wall_s = request.options.time_limit_s + WALL_GRACE_S
        with self._lock:
            if self._process is None or not self._process.is_alive():
                self._spawn()
            started = time.monotonic()
            self._connection.send(request)
            while True:
                if self._connection.poll(POLL_S):
                    try:
                        return self._connection.recv()
                    except EOFError:
                        self._kill()
                        return SolveOutcome("failed", message="the solver process ended without an answer",
                                            seconds=time.monotonic() - started)
                if on_wait is not None:
                    on_wait()
                elapsed = time.monotonic() - started
                rss = self._rss_bytes()
                self.peak_rss_bytes = max(self.peak_rss_bytes, rss)
                stop = None
                if cancel.is_set():
                    stop = SolveOutcome("cancelled", message="inputs changed during the solve")
                elif elapsed > wall_s:
                    stop = SolveOutcome("failed", message=f"the solve passed its wall-clock cap of {wall_s:g} s")
                elif rss > self.memory_bytes:
                    stop = SolveOutcome("failed", message=f"the solver passed its memory cap of "
                                                          f"{self.memory_bytes // 2**20} MB")
                elif not self._process.is_alive():
                    stop = SolveOutcome("failed", message=f"the solver process died (exit {self._process.exitcode})")
                if stop is not None:
                    self._kill()
                    self._spawn()
                    stop.seconds = elapsed
                    return stop

    def stop(self) -> None:
        with self._lock:
            self._kill()

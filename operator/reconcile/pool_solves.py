"""Pools solved at the same time: each pool's solve runs in a thread of a bounded pool, off the reconcile.

A thread waits on one planner worker process at a time (planner/worker.py: its own memory cap and wall-time cap),
so at most `workers` solver processes run at once, each under `--solve-memory`. The reconcile never waits for a
solve: it starts one for a pool whose inputs changed (solve_decide.next_solve says when one is replaced), shows
the pool's stored plan meanwhile, and takes the finished solve's result at the next reconcile, which a finished
solve asks for (`on_done`). A slow or failing pool so holds back no other pool's reconcile, and at most
`workers - 1` other pools wait behind it for a worker.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from tessera.operator import metrics
from tessera.operator.reconcile.solve_decide import RunningSolve
from tessera.planner.worker import SolveCancelled

log = logging.getLogger("tessera.operator")
T = TypeVar("T")


@dataclass
class _Solve(Generic[T]):
    running: RunningSolve
    cancel: threading.Event = field(default_factory=threading.Event)
    future: Future[None] | None = None


class PoolSolves(Generic[T]):
    """At most one solve per pool, at most `workers` at once; thread-safe."""

    def __init__(self, workers: int, on_done: Callable[[], None] = lambda: None) -> None:
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tessera-solve")
        self._lock = threading.Lock()
        self._solves: dict[str, _Solve[T]] = {}
        self._finished: dict[str, T] = {}
        self.on_done = on_done
        """Called (from a solve's thread) when a solve finished: a reconcile should take its result."""

    def running(self, pool: str) -> RunningSolve | None:
        with self._lock:
            solve = self._solves.get(pool)
            return solve.running if solve is not None else None

    def take(self, pool: str) -> T | None:
        """The pool's finished solve's result, once (None: none finished since the last take)."""
        with self._lock:
            return self._finished.pop(pool, None)

    def start(self, pool: str, running: RunningSolve, work: Callable[[threading.Event], T]) -> None:
        """Solve `pool` with `work(cancel)`, cancelling the solve that runs for it; `work` raises SolveCancelled
        once `cancel` is set (the result of a cancelled solve is never taken)."""
        solve: _Solve[T] = _Solve(running)
        with self._lock:
            previous = self._solves.get(pool)
            if previous is not None:
                previous.cancel.set()
                metrics.SOLVES_CANCELLED.inc()
            self._solves[pool] = solve
            self._finished.pop(pool, None)
            solve.future = self._executor.submit(self._run, pool, solve, work)

    def cancel(self, pool: str) -> None:
        """Stop the pool's solve (its systems are gone): nothing of it is taken."""
        with self._lock:
            solve = self._solves.pop(pool, None)
            if solve is not None:
                solve.cancel.set()

    def stop(self) -> None:
        """Cancel every solve and wait for their threads (the worker processes are terminated)."""
        with self._lock:
            for solve in self._solves.values():
                solve.cancel.set()
            self._solves.clear()
        self._executor.shutdown(wait=True, cancel_futures=True)

    def _run(self, pool: str, solve: _Solve[T], work: Callable[[threading.Event], T]) -> None:
        try:
            if solve.cancel.is_set():
                raise SolveCancelled("cancelled before it started")
            result = work(solve.cancel)
        except SolveCancelled:
            log.info("pool %s: solve cancelled: its inputs changed; the next one runs to its end", pool)
            return
        except Exception:
            log.exception("pool %s: the solve failed; the next resync starts it again", pool)
            with self._lock:
                if self._solves.get(pool) is solve:
                    del self._solves[pool]
            return
        with self._lock:
            if self._solves.get(pool) is not solve:
                return  # replaced or cancelled while it finished
            del self._solves[pool]
            self._finished[pool] = result
        self.on_done()

"""Pools solved at the same time, a bounded number at once (operator/reconcile/pool_solves.py, issue 29 item 5).

The solves here are stand-ins for the planner's worker (a function that waits and honours `cancel`, as
reconciler.wait_for_outcome does); the threads, the bound, next_solve's rule and the controller's loop are the
operator's own. No test reads a clock to decide: concurrency is shown by solves that can only finish together.
"""

from __future__ import annotations

import asyncio
import threading
import time

from tessera.operator.entry.controller import Controller
from tessera.operator.reconcile.pool_solves import PoolSolves
from tessera.operator.reconcile.reconciler import ReconcileResult
from tessera.operator.reconcile.solve_decide import RunningSolve, Step, next_solve
from tessera.operator.settings import OperatorSettings
from tessera.planner.worker import SolveCancelled

WAIT_S = 10.0
SOLVE_S = 0.3


def waits_for(event: threading.Event, then: threading.Event | None = None):
    """A solve that finishes once `event` is set (setting `then` first), or is cancelled."""
    def work(cancel: threading.Event) -> str:
        if then is not None:
            then.set()
        deadline = time.monotonic() + WAIT_S
        while not event.wait(0.01):
            if cancel.is_set():
                raise SolveCancelled("cancelled")
            if time.monotonic() > deadline:
                return "gave up"
        return "done"
    return work


def test_two_pools_are_solved_at_the_same_time():
    a_started, b_started = threading.Event(), threading.Event()
    solves: PoolSolves[str] = PoolSolves(workers=2)
    finished = threading.Semaphore(0)
    solves.on_done = finished.release
    solves.start("a", RunningSolve("a1", False), waits_for(b_started, then=a_started))
    solves.start("b", RunningSolve("b1", False), waits_for(a_started, then=b_started))
    assert finished.acquire(timeout=WAIT_S) and finished.acquire(timeout=WAIT_S)
    assert (solves.take("a"), solves.take("b")) == ("done", "done"), "each pool's solve waited for the other's"
    solves.stop()


def test_at_most_the_workers_bound_of_solves_run_at_once_and_the_next_pool_waits_for_a_worker():
    release, started = threading.Event(), {key: threading.Event() for key in "abc"}
    solves: PoolSolves[str] = PoolSolves(workers=2)
    for key in "abc":
        solves.start(key, RunningSolve(f"{key}1", False), waits_for(release, then=started[key]))
    assert started["a"].wait(WAIT_S) and started["b"].wait(WAIT_S)
    assert not started["c"].wait(0.5), "a third pool waits while two solves hold the workers"
    release.set()
    assert started["c"].wait(WAIT_S)
    solves.stop()


def test_the_result_of_a_cancelled_solve_is_never_taken():
    solves: PoolSolves[str] = PoolSolves(workers=1)
    never, started = threading.Event(), threading.Event()
    solves.start("a", RunningSolve("a1", False), waits_for(never, then=started))
    assert started.wait(WAIT_S)
    solves.cancel("a")
    solves.stop()
    assert solves.take("a") is None and solves.running("a") is None


def test_a_stream_of_edits_faster_than_a_solve_still_lets_every_other_solve_finish():
    """One change of the pool's inputs every SOLVE_S / 3, each followed by what a reconcile does (next_solve)."""
    solves: PoolSolves[str] = PoolSolves(workers=1)
    finished, cancelled = [], 0

    def solve(inputs: str):
        def work(cancel: threading.Event) -> str:
            if cancel.wait(SOLVE_S):
                raise SolveCancelled("inputs changed")
            return inputs
        return work

    for edit in range(36):
        inputs = f"inputs-{edit}"
        if (result := solves.take("pool")) is not None:
            finished.append(result)
        step = next_solve(solves.running("pool"), inputs)
        cancelled += step is Step.REPLACE
        if step is not Step.WAIT:
            solves.start("pool", RunningSolve(inputs, follows_cancel=step is Step.REPLACE), solve(inputs))
        time.sleep(SOLVE_S / 3)
    solves.stop()
    assert cancelled >= 3, "edits during a solve replace it"
    assert len(finished) >= cancelled - 1, (finished, cancelled)


class SolvingReconciler:
    """The reconciler's surfaces the controller uses: `solves`, `reconcile`, `stop`. Its first reconcile starts a
    solve; the one the finished solve asks for takes its result."""

    def __init__(self) -> None:
        self.solves: PoolSolves[str] = PoolSolves(workers=1)
        self.taken: list[str] = []

    def reconcile(self) -> ReconcileResult:
        if (result := self.solves.take("pool")) is not None:
            self.taken.append(result)
        elif self.solves.running("pool") is None and not self.taken:
            self.solves.start("pool", RunningSolve("inputs", False), lambda cancel: "plan")
        return ReconcileResult(requeue_after=None, writes=0)

    def stop(self) -> None:
        self.solves.stop()


def plans_taken(debounce_s: float, *triggers: str) -> list[str]:
    """What a SolvingReconciler took within WAIT_S of the controller's start and `triggers` (no resync within it)."""
    async def run() -> list[str]:
        reconciler = SolvingReconciler()
        controller = Controller(reconciler, OperatorSettings(debounce_s=debounce_s, resync_s=3600))  # type: ignore[arg-type]
        controller.start()
        for kind in triggers:
            controller.trigger(kind)
        deadline = time.monotonic() + WAIT_S
        while not reconciler.taken and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await controller.stop()
        return reconciler.taken
    return asyncio.run(run())


def test_a_finished_solve_asks_the_controller_for_the_reconcile_that_takes_its_plan():
    assert plans_taken(0.0, "startup") == ["plan"], "no resync within the test: the solve's end triggered it"


def test_the_reconcile_a_finished_solve_asks_for_waits_no_debounce():
    """Both reconciles run within the test though the debounce is 60 s: the one a "solved" trigger asks for (here
    also behind a debounced "system" trigger) starts the solve, and the one its end asks for takes the plan."""
    assert plans_taken(60.0, "system", "solved") == ["plan"], "a reconcile waited for the debounce"

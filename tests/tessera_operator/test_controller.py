"""The controller's loop: a change during a solve cancels it, but never two in a row (operator/entry/controller.py).

The reconciler here is a stand-in with the real one's two surfaces the loop uses: its `cancel` event, and a
`reconcile` that "solves" for a fixed time and gives up with SolveCancelled when `cancel` is set, as
Reconciler._wait does; the loop, its debounce and its threads are the operator's own.
"""

from __future__ import annotations

import asyncio
import threading
import time

from tessera.operator.entry.controller import Controller
from tessera.operator.reconcile.reconciler import ReconcileResult
from tessera.operator.settings import OperatorSettings
from tessera.planner.worker import SolveCancelled

SOLVE_S = 0.3


class SolvingReconciler:
    def __init__(self) -> None:
        self.cancel = threading.Event()
        self.finished = 0
        self.cancelled = 0

    def reconcile(self) -> ReconcileResult:
        self.cancel.clear()
        deadline = time.monotonic() + SOLVE_S
        while time.monotonic() < deadline:
            if self.cancel.is_set():
                self.cancelled += 1
                raise SolveCancelled("inputs changed during the solve")
            time.sleep(0.01)
        self.finished += 1
        return ReconcileResult(requeue_after=None, writes=0)


async def edits_every(interval_s: float, duration_s: float) -> SolvingReconciler:
    """One input change every `interval_s` (faster than a solve) for `duration_s`, through the real loop."""
    reconciler = SolvingReconciler()
    controller = Controller(reconciler, OperatorSettings(debounce_s=0.0, resync_s=3600))  # type: ignore[arg-type]
    controller.start()
    try:
        controller.trigger("system")
        end = time.monotonic() + duration_s
        while time.monotonic() < end:
            await asyncio.sleep(interval_s)
            controller.trigger("system")
        await asyncio.sleep(2 * SOLVE_S)
    finally:
        await controller.stop()
    return reconciler


def test_a_stream_of_edits_faster_than_a_solve_still_lets_every_other_solve_finish():
    reconciler = asyncio.run(edits_every(SOLVE_S / 3, 12 * SOLVE_S))
    assert reconciler.cancelled >= 3, "edits during a solve cancel it"
    assert reconciler.finished >= reconciler.cancelled - 1, (reconciler.finished, reconciler.cancelled)


def test_edits_slower_than_a_solve_cancel_nothing():
    reconciler = asyncio.run(edits_every(3 * SOLVE_S, 6 * SOLVE_S))
    assert reconciler.cancelled == 0 and reconciler.finished >= 3

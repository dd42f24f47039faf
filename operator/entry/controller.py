"""The asynchronous driver: debounced, level-triggered reconciles off the event loop.

kopf's handlers only call `trigger`. Triggers within `debounce_s` of each
other become one reconcile, yet none waits longer than MAX_WAIT_FACTOR x
`debounce_s` after the first (a steady stream of events, say pods turning
Ready one by one, would otherwise hold every reconcile back until it ends),
and a finished solve's none (UNDEBOUNCED);
a periodic resync runs one when nothing happened. A reconcile's requeue counts from when it started (its
delays are decided from what it read, before its writes), yet leaves at least the debounce after it ends
(requeue_delay_s). The reconcile itself (API reads and writes) runs in a thread, so
the event loop keeps serving watches and probes; it never waits for a
solve: the pools' solves run at the same time in worker processes
(operator/reconcile/pool_solves.py), and a finished one triggers the
reconcile that stores its plan. A change of a pool's inputs replaces its
running solve, never two in a row (operator/reconcile/solve_decide.py).
The loop's own stalls are measured.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time

from tessera.operator import metrics
from tessera.operator.reconcile.reconciler import Reconciler
from tessera.operator.settings import OperatorSettings
from tessera.operator.entry.stall_watch import GcPauses, StallWatch, cpu_wait_s

log = logging.getLogger("tessera.operator")
LAG_PROBE_S = 0.05
MAX_WAIT_FACTOR = 5
UNDEBOUNCED = frozenset({"solved"})
"""Triggers whose reconcile waits no debounce: a finished solve is one event, and its plan (the servers, the MIG
configs) waits for nothing more to arrive."""


def wait_left_s(now: float, first_trigger: float, last_trigger: float, debounce_s: float) -> float:
    """Seconds a pending reconcile still waits: until `debounce_s` passed without a trigger, or MAX_WAIT_FACTOR x
    `debounce_s` since the first trigger it collects, whichever comes first (0: run it now)."""
    return max(0.0, min(last_trigger + debounce_s, first_trigger + MAX_WAIT_FACTOR * debounce_s) - now)


def requeue_delay_s(requeue_after: float, took_s: float, debounce_s: float) -> float:
    """Seconds from a reconcile's end to the next that it asked for `requeue_after` seconds after it started.

    Its delays were decided from what it read: a MIG config written at its start propagates while it writes
    statuses and Events (20 systems: 1.6 s of a 1.5 s wait), and counted from its end the relabel came that much
    later. At least `debounce_s` (or the requeue itself, if shorter) after the end, so that reconciles longer
    than their requeue (a 2 s MIG poll, 3 s of writes) never run back to back.
    """
    return max(requeue_after - took_s, min(requeue_after, debounce_s))


class Controller:
    def __init__(self, reconciler: Reconciler, settings: OperatorSettings) -> None:
        self.reconciler = reconciler
        self.settings = settings
        self.wake = asyncio.Event()
        self.urgent = asyncio.Event()  # an UNDEBOUNCED trigger is pending: the debounce ends now
        self.kinds: set[str] = set()
        self.first_trigger: float | None = None  # of the triggers the next reconcile collects
        self.last_trigger = 0.0
        self.fingerprints: dict[str, object] = {}
        self.ready = False
        self.last_success = time.monotonic()
        self.lag_max_s = 0.0
        self._tasks: list[asyncio.Task[None]] = []
        self._retry: asyncio.TimerHandle | None = None
        self._stall_watch: StallWatch | None = None
        self._gc_pauses = GcPauses(settings.stall_report_s)

    def trigger(self, kind: str, key: str | None = None, fingerprint: object = None) -> None:
        """Asks for a reconcile; an unchanged fingerprint of `key` asks for nothing."""
        if key is not None:
            if self.fingerprints.get(key) == fingerprint:
                return
            self.fingerprints[key] = fingerprint
        self.kinds.add(kind)
        if kind in UNDEBOUNCED:
            self.urgent.set()
        self.last_trigger = time.monotonic()
        if self.first_trigger is None:
            self.first_trigger = self.last_trigger
        self.wake.set()

    def start(self) -> None:
        loop = asyncio.get_running_loop()

        def solved() -> None:  # from a solve's thread: the trigger runs on the loop
            loop.call_soon_threadsafe(self.trigger, "solved")
        self.reconciler.solves.on_done = solved
        self._stall_watch = StallWatch(LAG_PROBE_S + self.settings.stall_report_s)
        self._stall_watch.start()
        # What start-up made (modules, kopf, clients, ~230,000 objects) lives as long as the process: frozen, the
        # garbage collector's full collections, which hold the GIL, no longer walk it (476 ms each, measured).
        gc.freeze()
        self._gc_pauses.install()
        self._tasks = [asyncio.create_task(self._run(), name="tessera-reconcile"),
                       asyncio.create_task(self._measure_lag(), name="tessera-loop-lag")]

    async def stop(self) -> None:
        self._gc_pauses.remove()
        if self._stall_watch is not None:
            self._stall_watch.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.to_thread(self.reconciler.stop)

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                await asyncio.wait_for(self.wake.wait(), timeout=self.settings.resync_s)
            except asyncio.TimeoutError:
                self.kinds.add("resync")
            first = self.first_trigger if self.first_trigger is not None else self.last_trigger
            while not self.urgent.is_set() and (
                    left := wait_left_s(time.monotonic(), first, self.last_trigger, self.settings.debounce_s)) > 0:
                try:
                    await asyncio.wait_for(self.urgent.wait(), timeout=left)
                except asyncio.TimeoutError:
                    pass
            self.wake.clear()
            self.urgent.clear()
            self.first_trigger = None
            kinds, self.kinds = self.kinds or {"requeue"}, set()
            kind = "+".join(sorted(kinds))
            metrics.RECONCILES.labels(kind).inc()
            started = time.perf_counter()
            try:
                result = await asyncio.to_thread(self.reconciler.reconcile)
            except Exception:
                failures += 1
                metrics.RECONCILE_ERRORS.labels(kind).inc()
                delay = min(self.settings.max_backoff_s, 2.0 ** failures)
                log.exception("reconcile failed (attempt %d); retrying in %.0f s", failures, delay)
                self._schedule(delay)
                continue
            finally:
                metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)
            failures = 0
            self.ready = True
            self.last_success = time.monotonic()
            metrics.WRITES.inc(result.writes)
            took = time.perf_counter() - started
            again = None if result.requeue_after is None else requeue_delay_s(result.requeue_after, took,
                                                                              self.settings.debounce_s)
            log.info("reconciled (%s) in %.2f s: %d write(s)%s", kind, took, result.writes,
                     f"; again in {again:.1f} s" if again is not None else "")
            if again is not None:
                self._schedule(again)

    def _schedule(self, delay: float) -> None:
        if self._retry is not None:
            self._retry.cancel()
        self._retry = asyncio.get_running_loop().call_later(delay, self.wake.set)

    async def _measure_lag(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before, waited_before = loop.time(), cpu_wait_s()
            if self._stall_watch is not None:
                self._stall_watch.tick()
            await asyncio.sleep(LAG_PROBE_S)
            lag = max(0.0, loop.time() - before - LAG_PROBE_S)
            metrics.LOOP_LAG.observe(lag)
            if lag > self.settings.stall_report_s:
                waited_after = cpu_wait_s()
                waited = "" if waited_before is None or waited_after is None else (
                    f" ({1000 * (waited_after - waited_before):.0f} ms of it waiting for a CPU)")
                log.info("event loop stalled %.0f ms%s", 1000 * lag, waited)
            if lag > self.lag_max_s:
                self.lag_max_s = lag
                metrics.LOOP_LAG_MAX.set(lag)

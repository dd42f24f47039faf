"""Run a plan in a worker process: capped in wall time and memory, cancellable.

A solve takes seconds to a minute and holds the GIL in HiGHS; the operator's
event loop must not wait on it. `start_solve` starts a fresh process (the
spawn start method: nothing of the caller's state, threads or sockets is
inherited) that sets its own address-space limit (RLIMIT_AS) and answers one
`PlanRequest` with one outcome (contract.py). The caller holds a handle:

    handle = start_solve(request, memory_limit_mb=4096)
    outcome = await handle.wait()       # from asyncio; or handle.result(timeout)
    handle.cancel()                     # inputs changed: the child is terminated

A child that outlives its wall-time cap (the options' time limit plus a grace
for building and checking) is killed and answers TimeLimit (retryable); one
that dies without an answer (a memory cap reached inside HiGHS) answers
PlannerFailed. A cancelled solve raises SolveCancelled from `result`.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import resource
import threading
import time

from multiprocessing.connection import Connection

from tessera.planner.contract import Outcome, PlannerFailed, PlanRequest, TimeLimit, solve_request

GRACE_S = 30.0  # model build, assignment and the checker, beyond the solver's own time limit
_POLL_S = 0.05


class SolveCancelled(Exception):
    """The solve was cancelled before it answered."""


def _child(request: PlanRequest, memory_limit_bytes: int | None, connection: Connection) -> None:
    if memory_limit_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))
    try:
        outcome: Outcome = solve_request(request)
    except MemoryError:
        outcome = PlannerFailed(reason=f"the solve ran out of its memory cap of {(memory_limit_bytes or 0) >> 20} MiB")
    connection.send(outcome)
    connection.close()


class SolveHandle:
    """A running solve: poll it, wait for it, or cancel it (thread-safe)."""

    def __init__(self, request: PlanRequest, wall_limit_s: float, memory_limit_mb: int | None) -> None:
        context = multiprocessing.get_context("spawn")
        self._receive, send = context.Pipe(duplex=False)
        self.memory_limit_mb = memory_limit_mb
        self.wall_limit_s = wall_limit_s
        self._process = context.Process(
            target=_child, args=(request, memory_limit_mb << 20 if memory_limit_mb else None, send),
            name="tessera-plan", daemon=True)
        self._process.start()
        send.close()  # the child holds the only sending end: its death ends the pipe
        self._deadline = time.monotonic() + wall_limit_s
        self._lock = threading.Lock()
        self._outcome: Outcome | None = None
        self._cancelled = False

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def running(self) -> bool:
        """Whether the worker process is still alive."""
        return self._process.is_alive()

    def done(self) -> bool:
        """Whether `result()` would answer without waiting."""
        with self._lock:
            return self._cancelled or self._outcome is not None or self._settle(0.0)

    def result(self, timeout: float | None = None) -> Outcome:
        """The outcome; waits up to `timeout` seconds (None: until the wall-time cap), else TimeoutError."""
        waited_until = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if self._cancelled:
                    raise SolveCancelled("the solve was cancelled")
                if self._outcome is None:
                    self._settle(_POLL_S)
                if self._outcome is not None:
                    return self._outcome
            if waited_until is not None and time.monotonic() >= waited_until:
                raise TimeoutError(f"no outcome within {timeout} s")

    async def wait(self) -> Outcome:
        """Await the outcome without blocking the event loop; cancelling the await cancels the solve."""
        try:
            return await asyncio.to_thread(self.result)
        except asyncio.CancelledError:
            self.cancel()
            raise

    def cancel(self) -> None:
        """Stop the child now (terminate, then kill); a later `result()` raises SolveCancelled."""
        with self._lock:
            if self._outcome is None:
                self._cancelled = True
            self._stop()

    def _settle(self, wait_s: float) -> bool:
        """Take the child's answer, or decide one when it died or ran past the cap. Holds the lock."""
        if self._receive.poll(wait_s):
            try:
                self._outcome = self._receive.recv()
            except EOFError:
                self._outcome = self._died()
            self._stop()
            return True
        if time.monotonic() >= self._deadline:
            self._stop()
            self._outcome = TimeLimit(reason=f"the plan worker ran past its wall-time cap of {self.wall_limit_s:g} s "
                                             "and was stopped; retry with a longer time limit")
            return True
        return False

    def _died(self) -> PlannerFailed:
        self._process.join(timeout=5)
        code = self._process.exitcode
        cap = f" (memory cap {self.memory_limit_mb} MiB)" if self.memory_limit_mb else ""
        return PlannerFailed(reason=f"the plan worker ended with exit code {code} without an answer{cap}")

    def _stop(self) -> None:
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(timeout=2)
            if self._process.is_alive():
                self._process.kill()
        self._process.join(timeout=5)
        self._receive.close()  # never read again: an outcome is kept, a cancelled solve has none


def start_solve(request: PlanRequest, memory_limit_mb: int | None = None,
                wall_limit_s: float | None = None) -> SolveHandle:
    """Start solving `request` in a fresh worker process and return its handle at once.

    `wall_limit_s` defaults to the request's time limit plus GRACE_S.
    """
    return SolveHandle(request, wall_limit_s or request.options.time_limit_s + GRACE_S, memory_limit_mb)

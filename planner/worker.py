"""Run a plan in a worker process: capped in wall time and memory, cancellable.

A solve takes seconds to a minute and holds the GIL in HiGHS; the operator's
event loop must not wait on it. `start_solve` hands the request to a fresh
process (the spawn start method: nothing of the caller's state, threads or
sockets is inherited) that sets its own address-space limit (RLIMIT_AS) and
answers one `PlanRequest` with one outcome (contract.py). The process is
started one solve ahead (a spare, `warm_up`): it imports the planner while
it waits, which took ~2-3 s of every solve on the loaded 2-core bench machine
(bench/README.md, "The operator with many systems"), and a solve takes it
with its imports done. The caller holds a handle:

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


def _spare(requests: Connection, connection: Connection) -> None:
    """A spare worker: its imports done, it waits for its one request (none, when its caller ends: it ends too)."""
    try:
        request, memory_limit_bytes = requests.recv()
    except EOFError:
        return
    requests.close()
    _child(request, memory_limit_bytes, connection)


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
        self.memory_limit_mb = memory_limit_mb
        self.wall_limit_s = wall_limit_s
        self._process, requests, self._receive = _take_spare()
        requests.send((request, memory_limit_mb << 20 if memory_limit_mb else None))
        requests.close()
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


_CONTEXT = multiprocessing.get_context("spawn")
_spare_lock = threading.Lock()
_spare_worker: tuple[multiprocessing.process.BaseProcess, Connection, Connection] | None = None


def _start_spare() -> tuple[multiprocessing.process.BaseProcess, Connection, Connection]:
    """(the process, where its request goes, where its outcome comes from)."""
    receive_request, send_request = _CONTEXT.Pipe(duplex=False)
    receive_outcome, send_outcome = _CONTEXT.Pipe(duplex=False)
    process = _CONTEXT.Process(target=_spare, args=(receive_request, send_outcome), name="tessera-plan", daemon=True)
    process.start()
    receive_request.close()
    send_outcome.close()  # the child holds the only sending end: its death ends the pipe
    return process, send_request, receive_outcome


def _take_spare() -> tuple[multiprocessing.process.BaseProcess, Connection, Connection]:
    """The spare worker (a new one where none waits, or it died), and another started to wait for the next solve."""
    global _spare_worker
    with _spare_lock:
        taken, _spare_worker = _spare_worker, _start_spare()
    if taken is not None and taken[0].is_alive():
        return taken
    if taken is not None:
        for connection in taken[1:]:
            connection.close()  # a spare that died: its pipes would stay open for nothing
    return _start_spare()


def warm_up() -> int | None:
    """Start the spare worker now, so that the first solve finds its imports done; its process id."""
    global _spare_worker
    with _spare_lock:
        if _spare_worker is None or not _spare_worker[0].is_alive():
            _spare_worker = _start_spare()
        return _spare_worker[0].pid


def start_solve(request: PlanRequest, memory_limit_mb: int | None = None,
                wall_limit_s: float | None = None) -> SolveHandle:
    """Start solving `request` in a worker process of its own (the spare) and return its handle at once.

    `wall_limit_s` defaults to the request's time limit plus GRACE_S.
    """
    return SolveHandle(request, wall_limit_s or request.options.time_limit_s + GRACE_S, memory_limit_mb)

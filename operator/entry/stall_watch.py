"""What blocks the event loop: the loop thread's stack, sampled while the loop is late.

The lag probe (controller.py) tells that the loop stalled, only after the
stall. This watcher, a daemon thread, looks at the loop thread's stack
whenever the probe has not ticked for longer than the threshold, and logs
the innermost frames once per stall, so a stall names its code (a blocking
call on the loop, or a C extension holding the GIL in another thread, which
shows as the loop thread waiting at an ordinary line; the other threads'
frames are logged then too).

A stall the watcher cannot see (the whole process descheduled, or a C
call holding the GIL, which also stops this thread) is split by the lag
probe with `cpu_wait_s`: the time the loop thread waited for a CPU
(/proc/thread-self/schedstat), which is the machine's doing, not the
operator's; the rest of the stall is the loop's own work or the GIL.
"""

from __future__ import annotations

import gc
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType

SCHEDSTAT = Path("/proc/thread-self/schedstat")

log = logging.getLogger("tessera.operator")
FRAMES = 8
TESSERA = str(Path(__file__).resolve().parents[2])
"""tessera's own source tree (installed: the package; editable: the repository)."""


class StallWatch:
    def __init__(self, threshold_s: float, period_s: float = 0.02) -> None:
        self.threshold_s = threshold_s
        self.period_s = period_s
        self.last_tick = time.monotonic()
        self._loop_thread = threading.get_ident()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="tessera-stall-watch", daemon=True)

    def tick(self) -> None:
        """Called by the lag probe on the loop each time it runs."""
        self.last_tick = time.monotonic()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        reported = 0.0
        while not self._stop.wait(self.period_s):
            tick = self.last_tick
            if time.monotonic() - tick > self.threshold_s and tick != reported:
                reported = tick
                log.info("event loop has not run for %.0f ms; threads now:\n%s", 1000 * self.threshold_s,
                         self._stacks())

    def _stacks(self) -> str:
        names = {thread.ident: thread.name for thread in threading.enumerate()}
        lines = []
        for ident, frame in sys._current_frames().items():
            if ident == threading.get_ident():
                continue
            where = "".join(_named_frames(frame))
            marker = " (the event loop)" if ident == self._loop_thread else ""
            lines.append(f"-- {names.get(ident, ident)}{marker}\n{where}")
        return "".join(lines)


def _named_frames(frame: FrameType) -> list[str]:
    """The innermost frame, then the innermost FRAMES of the libraries' and tessera's own (not the stdlib's):
    a stall deep in copy.deepcopy is named by who called it."""
    stack = traceback.extract_stack(frame)
    own = [f for f in stack[:-1] if "site-packages" in f.filename or f.filename.startswith(TESSERA)]
    return traceback.format_list([*own[-FRAMES:], stack[-1]])


def runqueue_wait_s(schedstat: str) -> float:
    """The time a thread has waited runnable for a CPU, from its /proc/.../schedstat line
    (nanoseconds on a CPU, nanoseconds waiting on a run queue, time slices)."""
    return int(schedstat.split()[1]) / 1e9


def cpu_wait_s() -> float | None:
    """The calling thread's run-queue wait so far; None where the kernel does not report it."""
    try:
        return runqueue_wait_s(SCHEDSTAT.read_text())
    except (OSError, IndexError, ValueError):
        return None


class GcPauses:
    """Logs each garbage collection that ran longer than the threshold.

    A collection holds the GIL from start to end, whichever thread triggered it, and the oldest
    generation's walks every tracked object of the process: 476 ms for the ~230,000 objects left
    by the operator's imports on the shared machine. Neither the stall watch (it needs the GIL)
    nor the CPU-wait split (the loop thread sleeps on the GIL) can name it; this does.
    """

    def __init__(self, threshold_s: float, clock: Callable[[], float] = time.perf_counter) -> None:
        self.threshold_s = threshold_s
        self.clock = clock
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = self.clock()
            return
        took = self.clock() - self._started
        if took > self.threshold_s:
            log.info("garbage collection of generation %d took %.0f ms (%d objects freed, %d in the oldest "
                     "generation)", info["generation"], 1000 * took, info["collected"], len(gc.get_objects(2)))

    def install(self) -> None:
        gc.callbacks.append(self)

    def remove(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)

"""One profiler run as a Job runs it: check the device, sweep, keep the result current.

The result is written after every batch size (and at the end, on failure
too), so that whatever stops the profiler, the termination message holds
the last completed point and a later run resumes from it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from tessera.profiler.nvml import IDENTITY_FILE, IdentityFile, mismatch, read_peak_memory
from tessera.profiler.results import Failure, FailureKind, SweepResult, Target
from tessera.profiler.sweep import Sweep, SweepSettings

IDENTITY_POLL_S = 0.5


def wait_for_identity(folder: Path, timeout_s: float, stop: threading.Event) -> IdentityFile | None:
    """The identity the server's container wrote, or None if none came within the timeout."""
    deadline = time.monotonic() + timeout_s
    path = folder / IDENTITY_FILE
    while True:
        if path.exists():
            return IdentityFile.model_validate_json(path.read_text())
        if time.monotonic() >= deadline or stop.wait(IDENTITY_POLL_S):
            return None


def device_failure(target: Target, identity: IdentityFile | None, folder: Path) -> Failure | None:
    if identity is None:
        return Failure.of(FailureKind.NO_DEVICE_IDENTITY,
                          f"the server's container wrote no {IDENTITY_FILE} in {folder} before the deadline")
    if identity.identity is None:
        return Failure.of(FailureKind.NO_DEVICE_IDENTITY, identity.unavailable or "NVML unavailable")
    why = mismatch(identity.identity, target.gpu, target.mig_profile)
    return Failure.of(FailureKind.DEVICE_MISMATCH, why) if why else None


def profile(target: Target, base_url: str, model: str, settings: SweepSettings,
            write: Callable[[SweepResult], None], previous: SweepResult | None = None,
            shared_folder: Path | None = None, stop: threading.Event | None = None) -> SweepResult:
    """Check the device (when `shared_folder` is given), then sweep; `write` gets every result on the way.

    Without a shared folder there is no device to check (a server on a CPU,
    as in tests); a Job always passes one.
    """
    stop = stop or threading.Event()
    device = None
    peak_memory: Callable[[], float | None] = lambda: None  # noqa: E731  (no device, no NVML peak)
    if shared_folder is not None:
        identity = wait_for_identity(shared_folder, settings.ready_timeout_s, stop)
        failure = device_failure(target, identity, shared_folder)
        device = identity.identity if identity else None
        if failure is not None:
            result = SweepResult(target=target, device=device, points=previous.points if previous else (),
                                 failure=failure)
            write(result)
            return result
        peak_memory = lambda: read_peak_memory(shared_folder)  # noqa: E731
    sweep = Sweep(target=target, base_url=base_url, model=model, settings=settings, device=device,
                  peak_memory_mb=peak_memory, on_progress=write, stop=stop)
    return sweep.run(previous)

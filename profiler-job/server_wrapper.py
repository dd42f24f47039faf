"""The server container's wrapper: record the device's identity, then run the server and watch its memory.

Only the container that requests the MIG instance sees it, so this wrapper,
the server container's entry point in a profiler Job, writes what NVML says
about the device (or why NVML cannot say) to a folder shared with the
profiler's container, starts the real server command, and while it runs
writes the device memory's peak there too. The server's exit code is the
wrapper's; SIGTERM and SIGINT are passed on to it.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from pathlib import Path

from tessera.profiler.nvml import IDENTITY_FILE, MEMORY_FILE, MemorySampler, NvmlUnavailable, identity_or_reason, write_json

SAMPLE_INTERVAL_S = 0.2


def write_identity(folder: Path) -> str | None:
    """Write identity.json; return NVML's reason when it is unavailable."""
    folder.mkdir(parents=True, exist_ok=True)
    document = identity_or_reason()
    write_json(folder / IDENTITY_FILE, document)
    return document.unavailable


def watch_memory(folder: Path, stop: threading.Event, interval_s: float = SAMPLE_INTERVAL_S) -> None:
    try:
        sampler = MemorySampler()
    except NvmlUnavailable:
        return
    try:
        while not stop.wait(interval_s):
            used = sampler.sample()
            write_json(folder / MEMORY_FILE, {"used_mb": round(used, 1), "peak_mb": round(sampler.peak_mb, 1)})
    finally:
        sampler.close()


def run_server(command: list[str], folder: Path) -> int:
    """Identity first, then the server until it exits; returns its exit code."""
    if not command:
        raise ValueError("no server command given")
    write_identity(folder)
    process = subprocess.Popen(command)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda received, _frame: process.send_signal(received))
    stop = threading.Event()
    watcher = threading.Thread(target=watch_memory, args=(folder, stop), daemon=True)
    watcher.start()
    try:
        return process.wait()
    finally:
        stop.set()
        watcher.join(timeout=2)
